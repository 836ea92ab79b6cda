//! The configured model table (docs/configuration.md, "Keys", the `models.<id>` rows): what the user's or dsh's
//! built-in configuration says about models, handed to each adapter when it is built. An
//! adapter reads it over its own description of a model ([`ModelTable::describe`]), so a row
//! only needs the facts it changes.

use std::collections::BTreeMap;

use crate::adapter::ModelInfo;
use crate::config::ReasoningEffort;

/// One row of the model table. Each field that is `None` keeps the adapter's own value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRow {
    /// Context window in tokens.
    pub context_window: Option<u64>,
    /// Output token limit sent when the caller sets none.
    pub default_max_tokens: Option<u64>,
    /// Reasoning efforts the model accepts (`Off` included when thinking can be disabled).
    pub efforts: Option<Vec<ReasoningEffort>>,
    /// Effort used when the caller names none.
    pub default_effort: Option<ReasoningEffort>,
    /// Input kinds the model takes (`["text", "image"]`; docs/model-calls.md, "Images").
    pub input: Option<Vec<String>>,
    /// Sampling temperature sent when the caller sets none.
    pub temperature: Option<f64>,
    /// Stop sequences sent when the caller sets none.
    pub stop: Option<Vec<String>>,
}

impl ModelRow {
    /// `own` (the adapter's description) with this row's facts in place of its own.
    pub fn apply(&self, own: ModelInfo) -> ModelInfo {
        ModelInfo {
            id: own.id,
            context_window: self.context_window.unwrap_or(own.context_window),
            default_max_tokens: self.default_max_tokens.unwrap_or(own.default_max_tokens),
            efforts: self.efforts.clone().unwrap_or(own.efforts),
            default_effort: self.default_effort.or(own.default_effort),
            modalities: self.input.clone().unwrap_or(own.modalities),
            temperature: self.temperature.or(own.temperature),
            stop: self.stop.clone().or(own.stop),
        }
    }
}

/// The model table: rows by model id. Empty by default (the adapter's own descriptions apply).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTable {
    rows: BTreeMap<String, ModelRow>,
}

impl ModelTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the row of model `id`, replacing any earlier one.
    pub fn insert(&mut self, id: impl Into<String>, row: ModelRow) {
        self.rows.insert(id.into(), row);
    }

    /// The row of model `id`, if the table has one.
    pub fn get(&self, id: &str) -> Option<&ModelRow> {
        self.rows.get(id)
    }

    /// The ids of the rows that say the model takes images, sorted.
    pub fn image_models(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|(_, row)| {
                row.input
                    .as_ref()
                    .is_some_and(|input| input.iter().any(|i| i == crate::image::IMAGE_INPUT))
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The description of model `own.id`: the adapter's own `own`, with the table's row (if
    /// any) read over it.
    pub fn describe(&self, own: ModelInfo) -> ModelInfo {
        match self.rows.get(&own.id) {
            Some(row) => row.apply(own),
            None => own,
        }
    }
}

impl<S: Into<String>> FromIterator<(S, ModelRow)> for ModelTable {
    fn from_iter<I: IntoIterator<Item = (S, ModelRow)>>(iter: I) -> Self {
        ModelTable {
            rows: iter.into_iter().map(|(id, row)| (id.into(), row)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(id: &str) -> ModelInfo {
        ModelInfo {
            id: id.to_string(),
            context_window: 128_000,
            default_max_tokens: 8_192,
            efforts: vec![ReasoningEffort::Off, ReasoningEffort::High],
            default_effort: Some(ReasoningEffort::High),
            modalities: vec!["text".to_string()],
            temperature: None,
            stop: None,
        }
    }

    #[test]
    fn a_row_replaces_only_what_it_states() {
        let table: ModelTable = [(
            "m",
            ModelRow {
                context_window: Some(40_960),
                efforts: Some(vec![ReasoningEffort::Off]),
                ..ModelRow::default()
            },
        )]
        .into_iter()
        .collect();
        let info = table.describe(own("m"));
        assert_eq!(info.context_window, 40_960);
        assert_eq!(info.efforts, vec![ReasoningEffort::Off]);
        assert_eq!(info.default_max_tokens, 8_192);
        assert_eq!(info.default_effort, Some(ReasoningEffort::High));
        assert_eq!(info.id, "m");
    }

    #[test]
    fn a_model_without_a_row_keeps_the_adapters_description() {
        let mut table = ModelTable::new();
        assert!(table.is_empty());
        table.insert("other", ModelRow::default());
        assert_eq!(table.len(), 1);
        assert_eq!(table.describe(own("m")), own("m"));
        assert_eq!(table.describe(own("other")), own("other"));
    }
}
