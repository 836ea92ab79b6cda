//! Adapter configuration: endpoint, credential, timeouts, extra headers, quirks and the model
//! table.

use std::time::Duration;

use dsh_http::{
    ApiKey, HttpClient, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_REPLY_TIMEOUT,
};
use dsh_llm::{providers, ModelTable};

/// The default endpoint of the official DeepSeek API (OpenAI chat-completions format).
pub const DEFAULT_BASE_URL: &str = providers::DEEPSEEK.base_url;

/// Environment variable read for the API key by [`DeepSeekConfig::from_env`].
pub const API_KEY_ENV: &str = providers::DEEPSEEK.api_key_env;

/// Environment variable read for the endpoint by [`DeepSeekConfig::from_env`].
pub const BASE_URL_ENV: &str = providers::DEEPSEEK.base_url_env;

/// Which request field carries the output token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens` (DeepSeek, vLLM, llama.cpp server, Ollama).
    #[default]
    MaxTokens,
    /// `max_completion_tokens` (OpenAI's newer name).
    MaxCompletionTokens,
    /// No limit is sent; the server's default applies.
    Omit,
}

/// Per-endpoint switches for fields that some OpenAI-compatible servers reject (often with a
/// 400). The defaults are what DeepSeek's own API expects; turning a switch off only drops the
/// field from the request body, nothing else changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAiQuirks {
    /// Send assistant reasoning back as `reasoning_content` (required by DeepSeek thinking mode).
    pub send_reasoning_content: bool,
    /// Send `stream_options: {include_usage: true}` (without it some servers send no usage).
    pub send_stream_options: bool,
    /// Send `thinking: {type: enabled|disabled}`.
    pub send_thinking: bool,
    /// Send `reasoning_effort`.
    pub send_reasoning_effort: bool,
    /// The field that carries the output token limit.
    pub max_tokens_field: MaxTokensField,
}

impl Default for OpenAiQuirks {
    fn default() -> Self {
        OpenAiQuirks {
            send_reasoning_content: true,
            send_stream_options: true,
            send_thinking: true,
            send_reasoning_effort: true,
            max_tokens_field: MaxTokensField::MaxTokens,
        }
    }
}

/// How to reach one DeepSeek or OpenAI-compatible endpoint.
///
/// `base_url` is the prefix before `/chat/completions` (e.g. `https://api.deepseek.com`, or
/// `http://localhost:8000/v1` for vLLM). A missing or empty `api_key` does not fail construction:
/// every call then finishes `error` with `MISSING_CREDENTIAL`, so the failure reaches the user
/// through the normal path. `Debug` redacts the key.
#[derive(Clone, Debug)]
pub struct DeepSeekConfig {
    /// Endpoint prefix; a trailing `/` is ignored.
    pub base_url: String,
    /// Bearer credential; `None` makes every call fail with `MISSING_CREDENTIAL`.
    pub api_key: Option<ApiKey>,
    /// Idle watchdog: longest wait for the next byte (headers or body) before `TIMEOUT`.
    pub idle_timeout: Duration,
    /// Overall deadline of one streamed reply, from the request to the last byte (`TIMEOUT`).
    pub reply_timeout: Duration,
    /// Longest wait to establish the connection; exceeding it is a `TRANSPORT` failure.
    pub connect_timeout: Duration,
    /// The connection pool to share with other adapters (docs/providers.md, "Shared
    /// connections and preconnect"); `None` gives the adapter a pool of its own.
    pub client: Option<HttpClient>,
    /// Headers added to every request (after the defaults, so they may override them).
    pub extra_headers: Vec<(String, String)>,
    /// Fields this endpoint accepts (see [`OpenAiQuirks`]).
    pub quirks: OpenAiQuirks,
    /// Name of the variable the key comes from, used only in failure messages.
    pub key_variable: String,
    /// The configured model table: its rows are read over [`crate::models::model_info`]
    /// (docs/configuration.md); empty by default.
    pub models: ModelTable,
}

impl Default for DeepSeekConfig {
    fn default() -> Self {
        DeepSeekConfig {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            client: None,
            extra_headers: Vec::new(),
            quirks: OpenAiQuirks::default(),
            key_variable: API_KEY_ENV.to_string(),
            models: ModelTable::default(),
        }
    }
}

impl DeepSeekConfig {
    /// A config for `base_url` with `api_key` and default timeouts.
    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> Self {
        DeepSeekConfig {
            base_url: base_url.into(),
            api_key,
            ..DeepSeekConfig::default()
        }
    }

    /// Defaults overridden by `DEEPSEEK_API_KEY` and `DEEPSEEK_BASE_URL` where they are set and
    /// not blank.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup` (for tests and for
    /// callers that merge `.env` files first).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut config = DeepSeekConfig::default();
        if let Some(url) = lookup(BASE_URL_ENV).filter(|v| !v.trim().is_empty()) {
            config.base_url = url.trim().to_string();
        }
        config.api_key = lookup(API_KEY_ENV)
            .map(ApiKey::new)
            .filter(|key| !key.is_empty());
        config
    }

    /// The same config with another idle watchdog.
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The same config with another overall reply deadline.
    pub fn with_reply_timeout(mut self, reply_timeout: Duration) -> Self {
        self.reply_timeout = reply_timeout;
        self
    }

    /// The same config with other quirk switches.
    pub fn with_quirks(mut self, quirks: OpenAiQuirks) -> Self {
        self.quirks = quirks;
        self
    }

    /// The same config with another model table.
    pub fn with_models(mut self, models: ModelTable) -> Self {
        self.models = models;
        self
    }

    /// The full URL of the model listing endpoint (`GET {base}/models`).
    pub fn models_url(&self) -> String {
        format!("{}/models", self.base_url.trim_end_matches('/'))
    }

    /// The full URL of the chat-completions endpoint.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let config = DeepSeekConfig::new("http://x", Some(ApiKey::new("sk-secret-123")));
        let text = format!("{config:?} {}", ApiKey::new("sk-secret-123"));
        assert!(!text.contains("sk-secret-123"), "{text}");
        assert!(text.contains("redacted"));
    }

    #[test]
    fn env_lookup_fills_key_and_url_and_ignores_blank_values() {
        let config = DeepSeekConfig::from_lookup(|name| match name {
            API_KEY_ENV => Some(" sk-1 \n".into()),
            BASE_URL_ENV => Some("http://localhost:8000/v1/".into()),
            _ => None,
        });
        assert_eq!(
            config.api_key.as_ref().map(ApiKey::expose_secret),
            Some("sk-1")
        );
        assert_eq!(
            config.chat_completions_url(),
            "http://localhost:8000/v1/chat/completions"
        );
        let blank = DeepSeekConfig::from_lookup(|_| Some("  ".into()));
        assert!(blank.api_key.is_none());
        assert_eq!(blank.base_url, DEFAULT_BASE_URL);
    }
}
