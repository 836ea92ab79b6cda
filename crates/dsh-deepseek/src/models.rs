//! The model table: every fact this adapter knows about DeepSeek models lives here.
//!
//! Sources (checked against DeepSeek's API documentation, "Models & Pricing" and "Thinking
//! Mode" pages): both V4 models have a 1M-token context and at most 384K output tokens; thinking
//! is on by default with effort `high`; the chat-completions effort values are `low`, `high`,
//! `max` (the provider maps `medium` to `high`), and `thinking: {type: disabled}` turns thinking
//! off. The docs state no default for `max_tokens`, so dsh's default of 256,000 stands.

use dsh_llm::{ModelInfo, ReasoningEffort};

/// The model used when the caller names none.
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// One row of the model table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// The model id sent as `model`.
    pub id: &'static str,
    /// Context window in tokens.
    pub context_window: u64,
    /// `max_tokens` sent when the caller sets none.
    pub default_max_tokens: u64,
    /// Largest `max_tokens` the provider accepts.
    pub max_output_tokens: u64,
    /// Input kinds the model takes (docs/model-calls.md, "Images").
    pub input: &'static [&'static str],
}

const TEXT: &[&str] = &["text"];
const TEXT_AND_IMAGE: &[&str] = &["text", "image"];

/// The known DeepSeek models.
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        id: "deepseek-v4-flash",
        context_window: 1_000_000,
        default_max_tokens: 256_000,
        max_output_tokens: 384_000,
        input: TEXT,
    },
    ModelSpec {
        id: "deepseek-v4-pro",
        context_window: 1_000_000,
        default_max_tokens: 256_000,
        max_output_tokens: 384_000,
        input: TEXT,
    },
    // dsh's llm-deepseek README lists this id as its image-capable default model.
    ModelSpec {
        id: "deepseek-v4-flash-vision-exp",
        context_window: 1_000_000,
        default_max_tokens: 256_000,
        max_output_tokens: 384_000,
        input: TEXT_AND_IMAGE,
    },
];

/// Efforts a thinking DeepSeek model accepts; `Off` disables thinking.
pub const DEEPSEEK_EFFORTS: &[ReasoningEffort] = &[
    ReasoningEffort::Off,
    ReasoningEffort::Low,
    ReasoningEffort::High,
    ReasoningEffort::Max,
];

/// Context window assumed for a model this table does not know (an OpenAI-compatible server).
pub const GENERIC_CONTEXT_WINDOW: u64 = 128_000;

/// `max_tokens` default for a model this table does not know.
pub const GENERIC_DEFAULT_MAX_TOKENS: u64 = 8_192;

/// The known models that take images.
pub fn image_models() -> impl Iterator<Item = &'static str> {
    MODELS
        .iter()
        .filter(|spec| spec.input.contains(&dsh_llm::IMAGE_INPUT))
        .map(|spec| spec.id)
}

/// The table row of `model`, if it is a known DeepSeek model.
pub fn model_spec(model: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|spec| spec.id == model)
}

/// Metadata of `model`: the table row for a known model; for any other id (a local
/// OpenAI-compatible server) a conservative generic description with a 128K context, 8,192
/// default output tokens and no thinking control (efforts empty, no default effort).
pub fn model_info(model: &str) -> ModelInfo {
    match model_spec(model) {
        Some(spec) => ModelInfo {
            id: spec.id.to_string(),
            context_window: spec.context_window,
            default_max_tokens: spec.default_max_tokens,
            efforts: DEEPSEEK_EFFORTS.to_vec(),
            default_effort: Some(ReasoningEffort::High),
            modalities: spec.input.iter().map(|i| i.to_string()).collect(),
        },
        None => ModelInfo {
            id: model.to_string(),
            context_window: GENERIC_CONTEXT_WINDOW,
            default_max_tokens: GENERIC_DEFAULT_MAX_TOKENS,
            efforts: Vec::new(),
            default_effort: None,
            modalities: vec!["text".to_string()],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::{CallConfig, FailureCode};

    #[test]
    fn known_models_prepare_with_table_defaults() {
        for spec in MODELS {
            let info = model_info(spec.id);
            assert_eq!(info.context_window, 1_000_000);
            let prepared = CallConfig::new("deepseek", spec.id).prepare(&info).unwrap();
            assert_eq!(prepared.config().max_tokens, Some(256_000));
            assert_eq!(
                prepared.config().reasoning_effort,
                Some(ReasoningEffort::High)
            );
        }
        assert!(model_spec(DEFAULT_MODEL).is_some());
    }

    #[test]
    fn unsupported_effort_and_unknown_model() {
        let mut config = CallConfig::new("deepseek", "deepseek-v4-pro");
        config.reasoning_effort = Some(ReasoningEffort::Medium);
        let err = config.prepare(&model_info("deepseek-v4-pro")).unwrap_err();
        assert_eq!(err.code, FailureCode::UnsupportedReasoningEffort);
        let generic = model_info("qwen2.5-coder:7b");
        assert_eq!(generic.id, "qwen2.5-coder:7b");
        assert!(generic.efforts.is_empty());
        // A model without efforts runs without reasoning: `off` is accepted, others are not.
        let mut off = CallConfig::new("deepseek", "qwen2.5-coder:7b");
        off.reasoning_effort = Some(ReasoningEffort::Off);
        let prepared = off.prepare(&generic).unwrap();
        assert_eq!(
            prepared.config().reasoning_effort,
            Some(ReasoningEffort::Off)
        );
        let mut high = CallConfig::new("deepseek", "qwen2.5-coder:7b");
        high.reasoning_effort = Some(ReasoningEffort::High);
        assert_eq!(
            high.prepare(&generic).unwrap_err().code,
            FailureCode::UnsupportedReasoningEffort
        );
    }
}
