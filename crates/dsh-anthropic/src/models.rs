//! What the adapter assumes about a model when the configured model table does not describe it.

use dsh_llm::{ModelInfo, ReasoningEffort};

/// Context window assumed for a model nobody described (Claude models have at least this).
pub const GENERIC_CONTEXT_WINDOW: u64 = 200_000;

/// `max_tokens` sent when neither caller nor model table sets one. The Messages API requires
/// the field, so there is always a value.
pub const GENERIC_DEFAULT_MAX_TOKENS: u64 = 32_000;

/// Metadata of `model` without a table: 200K context, 32,000 output tokens, every effort
/// accepted (`off` included, mapped to thinking budgets), thinking off unless asked for.
pub fn model_info(model: &str) -> ModelInfo {
    ModelInfo {
        id: model.to_string(),
        context_window: GENERIC_CONTEXT_WINDOW,
        default_max_tokens: GENERIC_DEFAULT_MAX_TOKENS,
        efforts: vec![
            ReasoningEffort::Off,
            ReasoningEffort::Low,
            ReasoningEffort::Medium,
            ReasoningEffort::High,
            ReasoningEffort::Max,
        ],
        default_effort: None,
        modalities: vec!["text".to_string()],
        temperature: None,
        stop: None,
    }
}
