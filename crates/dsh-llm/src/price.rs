//! Prices for cost reports (docs/sessions.md, "Cost"): what a model's usage costs. Below the
//! session log and the configuration, so both (and the loop's budgets) read one type.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::usage::{Usage, UsageTotals};

/// Prices of one model in USD per million tokens, per disjoint usage count (docs/sessions.md,
/// "Cost").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    /// Uncached input.
    pub input_per_mtok: f64,
    /// Input served from the provider's cache.
    pub cache_read_per_mtok: f64,
    /// Input written to the provider's cache.
    pub cache_write_per_mtok: f64,
    /// Output (reasoning included).
    pub output_per_mtok: f64,
}

impl ModelPrice {
    /// The cost of `usage` in USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_mtok
            + usage.cache_read_tokens as f64 * self.cache_read_per_mtok
            + usage.cache_write_tokens as f64 * self.cache_write_per_mtok
            + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Prices per model id. Deployment-varying: front ends load it from configuration and fall
/// back to [`PriceTable::default_deepseek`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Model id to price.
    pub models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// The built-in table: DeepSeek's published API prices (USD per 1M tokens) as of
    /// 2026-05 for `deepseek-v4-flash` and `deepseek-v4-pro`. Cache writes are billed as
    /// uncached input (DeepSeek has no separate cache-write price). Prices change: override
    /// them in configuration.
    pub fn default_deepseek() -> PriceTable {
        let mut models = BTreeMap::new();
        models.insert(
            "deepseek-v4-flash".to_string(),
            ModelPrice {
                input_per_mtok: 0.14,
                cache_read_per_mtok: 0.0028,
                cache_write_per_mtok: 0.14,
                output_per_mtok: 0.28,
            },
        );
        models.insert(
            "deepseek-v4-pro".to_string(),
            ModelPrice {
                input_per_mtok: 0.435,
                cache_read_per_mtok: 0.003625,
                cache_write_per_mtok: 0.435,
                output_per_mtok: 0.87,
            },
        );
        PriceTable { models }
    }

    /// The cost of per-model usage in USD; `None` when some model with usage has no price.
    pub fn cost(&self, usage_by_model: &BTreeMap<String, UsageTotals>) -> Option<f64> {
        let mut total = 0.0;
        for (model, totals) in usage_by_model {
            total += self.models.get(model)?.cost(&totals.usage);
        }
        Some(total)
    }
}
