//! Token usage (docs/model-calls.md, "Usage") and its running totals.

use serde::{Deserialize, Serialize};

/// Token counts of one model call. The counts are **disjoint**: `input_tokens` is uncached input
/// only; billed input is `input + cache_read + cache_write`. `reasoning_tokens` is already
/// included in `output_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// The part of the output spent on reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// All input the provider billed: uncached + cache read + cache write.
    pub fn billed_input(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    /// Share of billed input that was served from the provider's cache, in `0.0..=1.0`
    /// (`0.0` when there was no input).
    pub fn cache_hit_ratio(&self) -> f64 {
        let billed = self.billed_input();
        if billed == 0 {
            0.0
        } else {
            self.cache_read_tokens as f64 / billed as f64
        }
    }
}

/// Usage summed over requests (a turn, a session).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// The summed counts.
    #[serde(flatten)]
    pub usage: Usage,
    /// How many requests were summed.
    pub requests: u64,
}

impl UsageTotals {
    /// Adds one request's usage (saturating: counts read from a foreign or damaged log may be
    /// absurd, and a sum must never panic).
    pub fn add(&mut self, usage: &Usage) {
        self.usage.input_tokens = self.usage.input_tokens.saturating_add(usage.input_tokens);
        self.usage.output_tokens = self.usage.output_tokens.saturating_add(usage.output_tokens);
        self.usage.cache_read_tokens = self
            .usage
            .cache_read_tokens
            .saturating_add(usage.cache_read_tokens);
        self.usage.cache_write_tokens = self
            .usage
            .cache_write_tokens
            .saturating_add(usage.cache_write_tokens);
        self.usage.reasoning_tokens = self
            .usage
            .reasoning_tokens
            .saturating_add(usage.reasoning_tokens);
        self.requests = self.requests.saturating_add(1);
    }

    /// Adds another total (e.g. a subagent's) to this one.
    pub fn merge(&mut self, other: &UsageTotals) {
        self.usage.input_tokens = self
            .usage
            .input_tokens
            .saturating_add(other.usage.input_tokens);
        self.usage.output_tokens = self
            .usage
            .output_tokens
            .saturating_add(other.usage.output_tokens);
        self.usage.cache_read_tokens = self
            .usage
            .cache_read_tokens
            .saturating_add(other.usage.cache_read_tokens);
        self.usage.cache_write_tokens = self
            .usage
            .cache_write_tokens
            .saturating_add(other.usage.cache_write_tokens);
        self.usage.reasoning_tokens = self
            .usage
            .reasoning_tokens
            .saturating_add(other.usage.reasoning_tokens);
        self.requests = self.requests.saturating_add(other.requests);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dsh_usage_with_missing_fields() {
        let u: Usage = serde_json::from_str(r#"{"inputTokens":12,"outputTokens":3}"#).unwrap();
        assert_eq!(u.input_tokens, 12);
        assert_eq!(u.cache_read_tokens, 0);
    }

    #[test]
    fn hit_ratio_counts_cache_reads_against_billed_input() {
        let u = Usage {
            input_tokens: 184,
            cache_read_tokens: 2816,
            ..Usage::default()
        };
        assert_eq!(u.billed_input(), 3000);
        assert!((u.cache_hit_ratio() - 2816.0 / 3000.0).abs() < 1e-12);
    }

    #[test]
    fn sums_saturate_instead_of_overflowing() {
        let huge = Usage {
            input_tokens: u64::MAX,
            reasoning_tokens: u64::MAX - 1,
            ..Usage::default()
        };
        let mut total = UsageTotals::default();
        total.add(&huge);
        total.add(&huge);
        let copy = total;
        total.merge(&copy);
        assert_eq!(total.usage.input_tokens, u64::MAX);
        assert_eq!(total.usage.reasoning_tokens, u64::MAX);
        assert_eq!(total.requests, 4);
    }
}
