//! Settings of the `web_search` tool: `[tools.web_search]` (docs/tools.md, "web_search").

use std::time::Duration;

use toml::Value;

use crate::config::Config;

/// Default `tools.web_search.base_url`: DeepSeek's Anthropic-compatible Messages API.
pub const DEFAULT_WEB_SEARCH_BASE_URL: &str = "https://api.deepseek.com/anthropic/v1";
/// The environment variable that overrides `tools.web_search.base_url` (never
/// `DEEPSEEK_BASE_URL`, which is the chat-completions base).
pub const WEB_SEARCH_BASE_URL_ENV: &str = "DEEPSEEK_SEARCH_BASE_URL";

/// `[tools.web_search]`: whether the model is offered `web_search` (when a DeepSeek key is
/// configured), where the search requests go and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSearchConfig {
    /// Offer the tool when a DeepSeek key is configured (default true).
    pub enabled: bool,
    /// Messages endpoint base (`/messages` is appended); `None` for the default or the
    /// environment's `DEEPSEEK_SEARCH_BASE_URL`. Only from the user's own file.
    pub base_url: Option<String>,
    /// The model that runs the searches (default `deepseek-v4-flash`).
    pub model: String,
    /// `max_uses` of the server tool per query (default 5).
    pub max_uses: u64,
    /// Most sources per call (default 8).
    pub max_results: usize,
    /// Most queries per call (default 4).
    pub max_queries: usize,
    /// `max_tokens` of each search request (default 4096).
    pub max_tokens: u64,
    /// Time for one call (default 60 s).
    pub timeout: Duration,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        WebSearchConfig {
            enabled: true,
            base_url: None,
            model: "deepseek-v4-flash".to_string(),
            max_uses: 5,
            max_results: 8,
            max_queries: 4,
            max_tokens: 4096,
            timeout: Duration::from_secs(60),
        }
    }
}

impl Config {
    /// The effective `[tools.web_search]`, defaults filled in (values were checked at load).
    pub fn web_search(&self) -> WebSearchConfig {
        let mut settings = WebSearchConfig::default();
        for (key, value, _source) in self.values() {
            let positive = |v: &Value| v.as_integer().and_then(|n| u64::try_from(n).ok());
            match (key.as_str(), value) {
                ("tools.web_search.enabled", Value::Boolean(on)) => settings.enabled = *on,
                ("tools.web_search.base_url", Value::String(url)) => {
                    settings.base_url = Some(url.clone());
                }
                ("tools.web_search.model", Value::String(model)) => settings.model = model.clone(),
                ("tools.web_search.max_uses", v) => {
                    settings.max_uses = positive(v).unwrap_or(settings.max_uses);
                }
                ("tools.web_search.max_tokens", v) => {
                    settings.max_tokens = positive(v).unwrap_or(settings.max_tokens);
                }
                ("tools.web_search.max_results", v) => {
                    if let Some(n) = positive(v).and_then(|n| usize::try_from(n).ok()) {
                        settings.max_results = n;
                    }
                }
                ("tools.web_search.max_queries", v) => {
                    if let Some(n) = positive(v).and_then(|n| usize::try_from(n).ok()) {
                        settings.max_queries = n;
                    }
                }
                ("tools.web_search.timeout_secs", v) => {
                    if let Some(secs) = positive(v) {
                        settings.timeout = Duration::from_secs(secs);
                    }
                }
                _ => {}
            }
        }
        settings
    }
}
