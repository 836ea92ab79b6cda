//! Settings of tools: `[tools.web_fetch]`, `[tools.glob]`, `[tools.grep]`.

use std::time::Duration;

use toml::Value;

use crate::config::Config;

/// Default `tools.web_fetch.max_bytes`: 5 MiB of response body.
pub const DEFAULT_WEB_FETCH_MAX_BYTES: u64 = 5 * 1024 * 1024;
/// Default `tools.web_fetch.timeout_secs`.
pub const DEFAULT_WEB_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// `[tools.web_fetch]`: whether the model is offered `web_fetch`, which internal hosts it may
/// reach anyway, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebFetchConfig {
    /// Offer the tool (default false). Only the user's own file, the environment or flags can
    /// turn it on; a project's `.dsh/config.toml` cannot.
    pub enabled: bool,
    /// Hosts allowed even when they resolve to loopback, private or link-local addresses
    /// (exact names, IP literals, or `*.suffix`). Only from the user's own file.
    pub allowed_hosts: Vec<String>,
    /// Most bytes of a response body read.
    pub max_bytes: u64,
    /// Time for one fetch, redirects included.
    pub timeout: Duration,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        WebFetchConfig {
            enabled: false,
            allowed_hosts: Vec::new(),
            max_bytes: DEFAULT_WEB_FETCH_MAX_BYTES,
            timeout: DEFAULT_WEB_FETCH_TIMEOUT,
        }
    }
}

/// Default `tools.glob.max_results` (dsh's `globMaxResults`).
pub const DEFAULT_GLOB_MAX_RESULTS: usize = 100;
/// Default `tools.grep.max_results` (dsh's `grepMaxMatches`).
pub const DEFAULT_GREP_MAX_RESULTS: usize = 250;

/// `[tools.glob]` and `[tools.grep]`: how many results the search tools show, and whether an
/// over-cap `glob` page is sampled across top-level entries (docs/tools.md, "glob").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchToolsConfig {
    /// Paths one `glob` call shows (default 100).
    pub glob_max_results: usize,
    /// Over the cap, pick paths in turns across the search directory's top-level entries
    /// instead of the newest ones (default true).
    pub glob_sample_over_cap: bool,
    /// Matches one `grep` call shows (default 250).
    pub grep_max_results: usize,
}

impl Default for SearchToolsConfig {
    fn default() -> Self {
        SearchToolsConfig {
            glob_max_results: DEFAULT_GLOB_MAX_RESULTS,
            glob_sample_over_cap: true,
            grep_max_results: DEFAULT_GREP_MAX_RESULTS,
        }
    }
}

impl Config {
    /// The effective `[tools.glob]` and `[tools.grep]`, defaults filled in (values were
    /// checked at load).
    pub fn search_tools(&self) -> SearchToolsConfig {
        let mut settings = SearchToolsConfig::default();
        for (key, value, _source) in self.values() {
            let count = |n: &i64| usize::try_from(*n).ok().filter(|n| *n > 0);
            match (key.as_str(), value) {
                ("tools.glob.max_results", Value::Integer(n)) => {
                    settings.glob_max_results = count(n).unwrap_or(settings.glob_max_results);
                }
                ("tools.glob.sample_over_cap", Value::Boolean(on)) => {
                    settings.glob_sample_over_cap = *on;
                }
                ("tools.grep.max_results", Value::Integer(n)) => {
                    settings.grep_max_results = count(n).unwrap_or(settings.grep_max_results);
                }
                _ => {}
            }
        }
        settings
    }

    /// The effective `[tools.web_fetch]`, defaults filled in (values were checked at load).
    pub fn web_fetch(&self) -> WebFetchConfig {
        let mut settings = WebFetchConfig::default();
        for (key, value, _source) in self.values() {
            match (key.as_str(), value) {
                ("tools.web_fetch.enabled", Value::Boolean(on)) => settings.enabled = *on,
                ("tools.web_fetch.allowed_hosts", Value::Array(items)) => {
                    settings.allowed_hosts = items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect();
                }
                ("tools.web_fetch.max_bytes", Value::Integer(n)) => {
                    settings.max_bytes = u64::try_from(*n).unwrap_or(settings.max_bytes);
                }
                ("tools.web_fetch.timeout_secs", Value::Integer(n)) => {
                    if let Ok(secs) = u64::try_from(*n) {
                        settings.timeout = Duration::from_secs(secs);
                    }
                }
                _ => {}
            }
        }
        settings
    }
}
