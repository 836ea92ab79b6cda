//! The built-in providers as data: what dsh knows about DeepSeek and Anthropic before any file
//! is read (endpoint, variables, default model, DeepSeek's own models). The configuration's
//! built-in layer and the adapters both read these facts, so each has one source, and the
//! configuration needs no adapter to state its defaults (docs/ARCHITECTURE.md, "dsh-config").
//! No wire format here: what a request looks like stays in the adapters.

use crate::config::ReasoningEffort;
use crate::image::IMAGE_INPUT;

/// One built-in provider, as the built-in configuration layer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinProvider {
    /// Its name under `[providers]`.
    pub name: &'static str,
    /// Its `kind`, the wire format that picks the adapter.
    pub kind: &'static str,
    /// The default endpoint prefix.
    pub base_url: &'static str,
    /// The variable that overrides `base_url`.
    pub base_url_env: &'static str,
    /// The variable holding the key.
    pub api_key_env: &'static str,
    /// The model used when none is named, if the provider has one.
    pub default_model: Option<&'static str>,
}

/// DeepSeek's model used when the caller names none.
pub const DEEPSEEK_DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// DeepSeek's own API (chat-completions format), the default provider.
pub const DEEPSEEK: BuiltinProvider = BuiltinProvider {
    name: "deepseek",
    kind: "deepseek",
    base_url: "https://api.deepseek.com",
    base_url_env: "DEEPSEEK_BASE_URL",
    api_key_env: "DEEPSEEK_API_KEY",
    default_model: Some(DEEPSEEK_DEFAULT_MODEL),
};

/// Anthropic's API (Messages format); no default model.
pub const ANTHROPIC: BuiltinProvider = BuiltinProvider {
    name: "anthropic",
    kind: "anthropic",
    base_url: "https://api.anthropic.com",
    base_url_env: "ANTHROPIC_BASE_URL",
    api_key_env: "ANTHROPIC_API_KEY",
    default_model: None,
};

/// The built-in providers, the default first.
pub const BUILTIN_PROVIDERS: [BuiltinProvider; 2] = [DEEPSEEK, ANTHROPIC];

/// One of DeepSeek's models.
///
/// Sources (checked against DeepSeek's API documentation, "Models & Pricing" and "Thinking
/// Mode" pages): both V4 models have a 1M-token context and at most 384K output tokens; thinking
/// is on by default with effort `high`; the chat-completions effort values are `low`, `high`,
/// `max` (the provider maps `medium` to `high`), and `thinking: {type: disabled}` turns thinking
/// off. The docs state no default for `max_tokens`, so dsh's default of 256,000 stands.
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
const TEXT_AND_IMAGE: &[&str] = &["text", IMAGE_INPUT];

/// The known DeepSeek models.
pub const DEEPSEEK_MODELS: &[ModelSpec] = &[
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

/// The effort of a known DeepSeek model when none is asked for.
pub const DEEPSEEK_DEFAULT_EFFORT: ReasoningEffort = ReasoningEffort::High;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_model_is_a_known_one() {
        assert!(DEEPSEEK_MODELS
            .iter()
            .any(|spec| spec.id == DEEPSEEK_DEFAULT_MODEL));
        assert!(DEEPSEEK_EFFORTS.contains(&DEEPSEEK_DEFAULT_EFFORT));
        assert_eq!(BUILTIN_PROVIDERS[0], DEEPSEEK);
    }
}
