//! Adapter configuration: endpoint, credential, API version, timeouts, headers, thinking budgets
//! and the model table.

use std::time::Duration;

use dsh_http::{
    ApiKey, HttpClient, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_REPLY_TIMEOUT,
};
use dsh_llm::{providers, ModelTable};

/// The default endpoint of Anthropic's API.
pub const DEFAULT_BASE_URL: &str = providers::ANTHROPIC.base_url;

/// Environment variable conventionally holding the key (named in failure messages by default).
pub const API_KEY_ENV: &str = providers::ANTHROPIC.api_key_env;

/// Environment variable read for the endpoint by [`AnthropicConfig::from_lookup`].
pub const BASE_URL_ENV: &str = providers::ANTHROPIC.base_url_env;

/// The `anthropic-version` header value this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// Thinking budget (`thinking.budget_tokens`) per reasoning effort. Each is capped below the
/// request's `max_tokens` when the request is built; `off` sends no `thinking` at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingBudgets {
    /// Budget for `low` effort.
    pub low: u64,
    /// Budget for `medium` effort.
    pub medium: u64,
    /// Budget for `high` effort.
    pub high: u64,
    /// Budget for `max` effort.
    pub max: u64,
}

impl Default for ThinkingBudgets {
    fn default() -> Self {
        ThinkingBudgets {
            low: 2_048,
            medium: 8_192,
            high: 16_384,
            max: 32_768,
        }
    }
}

/// How to reach one Anthropic Messages endpoint.
///
/// `base_url` is the prefix before `/v1/messages` (`https://api.anthropic.com`, or
/// `https://api.deepseek.com/anthropic`); a base that already ends in `/v1` gets `/messages`.
/// A missing or empty `api_key` does not fail construction: every call then finishes `error`
/// with `MISSING_CREDENTIAL` naming `key_variable`. `Debug` redacts the key.
#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    /// Endpoint prefix; a trailing `/` is ignored.
    pub base_url: String,
    /// Sent as `x-api-key`; `None` makes every call fail with `MISSING_CREDENTIAL`.
    pub api_key: Option<ApiKey>,
    /// Name of the variable the key comes from, used only in failure messages.
    pub key_variable: String,
    /// The `anthropic-version` header.
    pub api_version: String,
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
    /// Thinking budgets per effort.
    pub thinking_budgets: ThinkingBudgets,
    /// The configured model table: its rows are read over [`crate::model_info`]
    /// (docs/configuration.md); empty by default.
    pub models: ModelTable,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        AnthropicConfig {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            key_variable: API_KEY_ENV.to_string(),
            api_version: API_VERSION.to_string(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            client: None,
            extra_headers: Vec::new(),
            thinking_budgets: ThinkingBudgets::default(),
            models: ModelTable::default(),
        }
    }
}

impl AnthropicConfig {
    /// A config for `base_url` with `api_key` and defaults for everything else.
    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> Self {
        AnthropicConfig {
            base_url: base_url.into(),
            api_key,
            ..AnthropicConfig::default()
        }
    }

    /// Defaults overridden by `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` as returned by
    /// `lookup`, where set and not blank.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut config = AnthropicConfig::default();
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

    /// The same config with another model table.
    pub fn with_models(mut self, models: ModelTable) -> Self {
        self.models = models;
        self
    }

    /// The full URL of the messages endpoint.
    pub fn messages_url(&self) -> String {
        self.endpoint("messages")
    }

    /// The full URL of the model listing endpoint.
    pub fn models_url(&self) -> String {
        self.endpoint("models")
    }

    fn endpoint(&self, name: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/{name}")
        } else {
            format!("{base}/v1/{name}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_redaction() {
        let config = AnthropicConfig::new("https://x/anthropic/", Some(ApiKey::new("sk-ant-9")));
        assert_eq!(config.messages_url(), "https://x/anthropic/v1/messages");
        let v1 = AnthropicConfig::new("http://h/v1", None);
        assert_eq!(v1.models_url(), "http://h/v1/models");
        assert!(!format!("{config:?}").contains("sk-ant-9"));
    }

    #[test]
    fn lookup_reads_key_and_url() {
        let config = AnthropicConfig::from_lookup(|name| match name {
            API_KEY_ENV => Some(" k ".into()),
            BASE_URL_ENV => Some("http://l".into()),
            _ => None,
        });
        assert_eq!(
            config.api_key.as_ref().map(ApiKey::expose_secret),
            Some("k")
        );
        assert_eq!(config.base_url, "http://l");
    }
}
