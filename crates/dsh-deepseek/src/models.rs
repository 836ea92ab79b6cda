//! What this adapter knows about DeepSeek's models: the rows of [`dsh_llm::providers`] (where
//! the configuration's built-in layer reads them too, docs/ARCHITECTURE.md "dsh-config"), and a
//! generic description for any other model an OpenAI-compatible server runs.

use dsh_llm::providers::DEEPSEEK_DEFAULT_EFFORT;
pub use dsh_llm::providers::{
    ModelSpec, DEEPSEEK_DEFAULT_MODEL as DEFAULT_MODEL, DEEPSEEK_EFFORTS, DEEPSEEK_MODELS as MODELS,
};
use dsh_llm::ModelInfo;

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
            default_effort: Some(DEEPSEEK_DEFAULT_EFFORT),
            modalities: spec.input.iter().map(|i| i.to_string()).collect(),
            temperature: None,
            stop: None,
        },
        None => ModelInfo {
            id: model.to_string(),
            context_window: GENERIC_CONTEXT_WINDOW,
            default_max_tokens: GENERIC_DEFAULT_MAX_TOKENS,
            efforts: Vec::new(),
            default_effort: None,
            modalities: vec!["text".to_string()],
            temperature: None,
            stop: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::{CallConfig, FailureCode, ReasoningEffort};

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
