//! Call config (docs/model-calls.md, "Call config"): the request-header state that decides
//! prompt-cache reuse.

use serde::{Deserialize, Serialize};

use crate::adapter::ModelInfo;
use crate::failure::{Failure, FailureCode};

/// How hard the model should think. `Off` disables thinking where the provider allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// No thinking.
    Off,
    /// Little thinking.
    Low,
    /// Moderate thinking.
    Medium,
    /// Much thinking.
    High,
    /// As much thinking as the model allows.
    Max,
}

impl ReasoningEffort {
    /// Parses the user-facing spelling (`off`, `low`, `medium`, `high`, `max`).
    pub fn parse(text: &str) -> Option<ReasoningEffort> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Some(ReasoningEffort::Off),
            "low" => Some(ReasoningEffort::Low),
            "medium" => Some(ReasoningEffort::Medium),
            "high" => Some(ReasoningEffort::High),
            "max" => Some(ReasoningEffort::Max),
            _ => None,
        }
    }

    /// The wire and user-facing spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Off => "off",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Max => "max",
        }
    }
}

/// What the caller asked for: route, model and sampling. Absent fields are filled by the
/// adapter's defaults when the config is [prepared](CallConfig::prepare).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallConfig {
    /// The adapter route (the configured provider's name).
    pub provider: String,
    /// The model id sent to the provider.
    pub model: String,
    /// How hard the model should think; the model's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Sampling temperature; the provider's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output limit in tokens; the model's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Stop sequences, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

/// A field of [`CallConfig`] that an adapter default can fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ConfigField {
    /// [`CallConfig::reasoning_effort`].
    ReasoningEffort,
    /// [`CallConfig::max_tokens`].
    MaxTokens,
    /// [`CallConfig::temperature`], from the model's configured row.
    Temperature,
    /// [`CallConfig::stop`], from the model's configured row.
    Stop,
}

/// A call config after defaults were resolved against one model's metadata. Immutable.
///
/// `adapter_filled` names the fields that came from adapter defaults rather than from the caller,
/// so that a later change of adapter or model fills them again instead of inheriting them.
/// Equality is plain field equality (stop sequences element by element).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedCallConfig {
    #[serde(flatten)]
    config: CallConfig,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    adapter_filled: Vec<ConfigField>,
}

impl CallConfig {
    /// A config naming only route and model.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        CallConfig {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
        }
    }

    /// Resolves defaults once, before dispatch: absent effort, max tokens, temperature and stop
    /// sequences come from `model` (and are marked adapter-filled); an effort the model does not support is rejected with
    /// `UNSUPPORTED_REASONING_EFFORT`. `Off` is accepted when the model lists it, and for a
    /// model that lists no efforts at all (one without reasoning, or one the adapter does not
    /// know: off is all it can do, so asking for it is not an error).
    pub fn prepare(self, model: &ModelInfo) -> Result<PreparedCallConfig, Failure> {
        let mut config = self;
        let mut adapter_filled = Vec::new();
        match config.reasoning_effort {
            Some(effort) => {
                let off_without_reasoning =
                    effort == ReasoningEffort::Off && model.efforts.is_empty();
                if !model.efforts.contains(&effort) && !off_without_reasoning {
                    return Err(Failure::new(
                        FailureCode::UnsupportedReasoningEffort,
                        model.effort_refusal(effort),
                    ));
                }
            }
            None => {
                if let Some(effort) = model.default_effort {
                    config.reasoning_effort = Some(effort);
                    adapter_filled.push(ConfigField::ReasoningEffort);
                }
            }
        }
        if config.max_tokens.is_none() {
            config.max_tokens = Some(model.default_max_tokens);
            adapter_filled.push(ConfigField::MaxTokens);
        }
        // Sampling the model's row configures (docs/configuration.md, `models.<id>.temperature`
        // and `.stop`), unless the caller set its own.
        if config.temperature.is_none() && model.temperature.is_some() {
            config.temperature = model.temperature;
            adapter_filled.push(ConfigField::Temperature);
        }
        if config.stop.is_none() && model.stop.is_some() {
            config.stop.clone_from(&model.stop);
            adapter_filled.push(ConfigField::Stop);
        }
        Ok(PreparedCallConfig {
            config,
            adapter_filled,
        })
    }
}

impl PreparedCallConfig {
    /// The resolved config.
    pub fn config(&self) -> &CallConfig {
        &self.config
    }

    /// Fields that came from adapter defaults.
    pub fn adapter_filled(&self) -> &[ConfigField] {
        &self.adapter_filled
    }

    /// The config as the caller gave it: adapter-filled fields cleared, ready to be prepared
    /// again against another adapter or model.
    pub fn caller_config(&self) -> CallConfig {
        let mut config = self.config.clone();
        for field in &self.adapter_filled {
            match field {
                ConfigField::ReasoningEffort => config.reasoning_effort = None,
                ConfigField::MaxTokens => config.max_tokens = None,
                ConfigField::Temperature => config.temperature = None,
                ConfigField::Stop => config.stop = None,
            }
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelInfo {
        ModelInfo {
            id: "m".into(),
            context_window: 1000,
            default_max_tokens: 100,
            efforts: vec![ReasoningEffort::Off, ReasoningEffort::High],
            default_effort: Some(ReasoningEffort::High),
            modalities: vec!["text".into()],
            temperature: None,
            stop: None,
        }
    }

    #[test]
    fn defaults_are_filled_and_marked() {
        let p = CallConfig::new("r", "m").prepare(&model()).unwrap();
        assert_eq!(p.config().max_tokens, Some(100));
        assert_eq!(p.config().reasoning_effort, Some(ReasoningEffort::High));
        assert_eq!(
            p.adapter_filled(),
            &[ConfigField::ReasoningEffort, ConfigField::MaxTokens]
        );
        assert_eq!(p.caller_config(), CallConfig::new("r", "m"));
    }

    #[test]
    fn a_models_sampling_fills_what_the_caller_left_out() {
        let mut info = model();
        info.temperature = Some(0.2);
        info.stop = Some(vec!["</done>".into()]);
        let p = CallConfig::new("r", "m").prepare(&info).unwrap();
        assert_eq!(p.config().temperature, Some(0.2));
        assert_eq!(p.config().stop, Some(vec!["</done>".to_string()]));
        assert!(p.adapter_filled().contains(&ConfigField::Temperature));
        assert!(p.adapter_filled().contains(&ConfigField::Stop));
        // Another model is prepared afresh: the first one's sampling does not follow.
        assert_eq!(p.caller_config(), CallConfig::new("r", "m"));
        let mut own = CallConfig::new("r", "m");
        own.temperature = Some(1.0);
        let p = own.prepare(&info).unwrap();
        assert_eq!(p.config().temperature, Some(1.0));
        assert!(!p.adapter_filled().contains(&ConfigField::Temperature));
    }

    #[test]
    fn caller_values_win_and_are_not_marked() {
        let mut c = CallConfig::new("r", "m");
        c.max_tokens = Some(7);
        c.reasoning_effort = Some(ReasoningEffort::Off);
        let p = c.clone().prepare(&model()).unwrap();
        assert!(p.adapter_filled().is_empty());
        assert_eq!(p.caller_config(), c);
    }

    #[test]
    fn unsupported_effort_is_rejected() {
        let mut c = CallConfig::new("r", "m");
        c.reasoning_effort = Some(ReasoningEffort::Low);
        let err = c.prepare(&model()).unwrap_err();
        assert_eq!(err.code, FailureCode::UnsupportedReasoningEffort);
        assert!(err.message.contains("off, high"), "{}", err.message);
    }

    #[test]
    fn equality_compares_stop_sequences_in_order() {
        let mut a = CallConfig::new("r", "m");
        a.stop = Some(vec!["x".into(), "y".into()]);
        let mut b = a.clone();
        assert_eq!(a, b);
        b.stop = Some(vec!["y".into(), "x".into()]);
        assert_ne!(a, b);
    }
}
