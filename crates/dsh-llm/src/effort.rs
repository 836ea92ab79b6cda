//! Which reasoning efforts a model takes, read from its description (the model table,
//! docs/configuration.md, "Keys"): what front ends offer, what they refuse before any request,
//! and the effort a model switch carries over.

use crate::adapter::ModelInfo;
use crate::config::ReasoningEffort;

/// The effort a model switch leaves in force, and the sentence that tells the user when it is
/// not the one they had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedEffort {
    /// The effort for the new model (`None`: the model's default).
    pub effort: Option<ReasoningEffort>,
    /// Set when the effort in force was changed because the new model does not take it.
    pub note: Option<String>,
}

/// `off, low, high` for a list of efforts.
pub fn effort_names(efforts: &[ReasoningEffort]) -> String {
    efforts
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl ModelInfo {
    /// The efforts a front end offers for this model: the ones it lists, or only `off` for a
    /// model that lists none (no thinking control; `off` is then a no-op the request accepts).
    pub fn offered_efforts(&self) -> Vec<ReasoningEffort> {
        if self.efforts.is_empty() {
            vec![ReasoningEffort::Off]
        } else {
            self.efforts.clone()
        }
    }

    /// True when a request for this model may ask for `effort` (the rule of
    /// `CallConfig::prepare`).
    pub fn takes_effort(&self, effort: ReasoningEffort) -> bool {
        self.offered_efforts().contains(&effort)
    }

    /// Refuses an effort this model does not take, naming the ones it does.
    pub fn check_effort(&self, effort: ReasoningEffort) -> Result<(), String> {
        if self.takes_effort(effort) {
            return Ok(());
        }
        Err(self.effort_refusal(effort))
    }

    /// Why `effort` is refused: the efforts this model takes, or, for a model that lists none
    /// (one the model table does not know), that it is unknown and how to describe it.
    pub fn effort_refusal(&self, effort: ReasoningEffort) -> String {
        if self.efforts.is_empty() {
            return format!(
                "model {} is not in the model table, so it has no reasoning efforts to choose \
                 from (`{}` asked): check the id (`dsh models` lists the provider's models), \
                 leave the effort out, or describe the model with `efforts = [...]` under \
                 [models.\"{}\"] in config.toml",
                self.id,
                effort.as_str(),
                self.id
            );
        }
        format!(
            "model {} does not support reasoning effort `{}` (supported: {})",
            self.id,
            effort.as_str(),
            effort_names(&self.offered_efforts())
        )
    }

    /// The effort to keep after switching to this model from one that used `current`: the same
    /// when this model takes it, else this model's default (said in the note).
    pub fn carry_effort(&self, current: Option<ReasoningEffort>) -> CarriedEffort {
        match current {
            Some(effort) if !self.takes_effort(effort) => {
                let default = self.default_effort.filter(|d| self.takes_effort(*d));
                let now = default.map_or("the model's default".to_string(), |d| {
                    format!("`{}`, its default", d.as_str())
                });
                CarriedEffort {
                    effort: default,
                    note: Some(format!(
                        "model {} does not support reasoning effort `{}` (supported: {}); \
                         using {now}",
                        self.id,
                        effort.as_str(),
                        effort_names(&self.offered_efforts())
                    )),
                }
            }
            other => CarriedEffort {
                effort: other,
                note: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(efforts: Vec<ReasoningEffort>, default: Option<ReasoningEffort>) -> ModelInfo {
        ModelInfo {
            id: "m".into(),
            context_window: 1000,
            default_max_tokens: 100,
            efforts,
            default_effort: default,
            modalities: vec!["text".into()],
            temperature: None,
            stop: None,
        }
    }

    #[test]
    fn offers_checks_and_carries_from_the_description() {
        use ReasoningEffort::*;
        let thinking = model(vec![Off, Low, High, Max], Some(High));
        assert_eq!(thinking.offered_efforts(), vec![Off, Low, High, Max]);
        let err = thinking.check_effort(Medium).unwrap_err();
        assert!(
            err.contains("`medium`") && err.contains("off, low, high, max"),
            "{err}"
        );
        assert!(thinking.check_effort(Low).is_ok());
        let kept = thinking.carry_effort(Some(Max));
        assert_eq!((kept.effort, kept.note), (Some(Max), None));
        let clamped = thinking.carry_effort(Some(Medium));
        assert_eq!(clamped.effort, Some(High));
        assert!(clamped.note.unwrap().contains("`high`, its default"));

        let plain = model(Vec::new(), None);
        assert_eq!(plain.offered_efforts(), vec![Off]);
        let carried = plain.carry_effort(Some(High));
        assert_eq!(carried.effort, None);
        assert!(carried.note.unwrap().contains("the model's default"));
        assert_eq!(plain.carry_effort(None).effort, None);
    }
}
