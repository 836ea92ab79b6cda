//! `web_search` in composition (docs/tools.md, "web_search"): offered when a DeepSeek key is
//! configured and `[tools.web_search] enabled` is not false; each auxiliary search request is
//! logged in the session as `web/deepseek-search-llm-request` before it is sent.

use std::sync::{Arc, OnceLock};

use dsh_agent::{AttachedAgent, Extension, WeakAgentHandle};
use dsh_session::Event;
use dsh_tools::{SearchRecorder, WebSearchSettings, WebSearchTool, SEARCH_REQUEST_EVENT};
use serde_json::Value;

/// The variable holding the DeepSeek key the searches use (the chat adapter's own variable).
const KEY_VARIABLE: &str = "DEEPSEEK_API_KEY";

/// What a session needs to offer `web_search`: its settings and the key.
#[derive(Debug, Clone)]
pub(crate) struct SearchSetup {
    settings: WebSearchSettings,
    key: dsh_http::ApiKey,
}

/// The setup when the tool is on: `[tools.web_search]` not disabled and `DEEPSEEK_API_KEY`
/// set. The endpoint is `DEEPSEEK_SEARCH_BASE_URL` from the environment (or `$DSH_HOME/.env`),
/// else `base_url` of the user's file, else DeepSeek's; never `DEEPSEEK_BASE_URL`.
pub(crate) fn setup(
    config: &dsh_config::Config,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Option<SearchSetup> {
    let search = config.web_search();
    if !search.enabled {
        return None;
    }
    let key = dsh_http::ApiKey::new(lookup(KEY_VARIABLE)?);
    if key.is_empty() {
        return None;
    }
    let base_url = lookup(dsh_config::WEB_SEARCH_BASE_URL_ENV)
        .map(|url| url.trim().to_string())
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
        .or(search.base_url)
        .unwrap_or_else(|| dsh_config::DEFAULT_WEB_SEARCH_BASE_URL.to_string());
    Some(SearchSetup {
        settings: WebSearchSettings {
            base_url,
            model: search.model,
            max_uses: search.max_uses,
            max_results: search.max_results,
            max_queries: search.max_queries,
            max_tokens: search.max_tokens,
            timeout: search.timeout,
            ..WebSearchSettings::default()
        },
        key,
    })
}

/// The tool and the extension that gives it the session log (it learns the agent when the
/// agent attaches its extensions).
pub(crate) fn tool(setup: &SearchSetup) -> (WebSearchTool, Arc<SearchLog>) {
    let log = Arc::new(SearchLog::default());
    let tool = WebSearchTool::new(setup.settings.clone(), setup.key.clone())
        .with_recorder(Arc::clone(&log) as Arc<dyn SearchRecorder>);
    (tool, log)
}

/// Writes `web/deepseek-search-llm-request` events into the session of the agent it is
/// attached to.
#[derive(Default)]
pub(crate) struct SearchLog {
    agent: OnceLock<WeakAgentHandle>,
}

impl Extension for SearchLog {
    fn name(&self) -> &str {
        "web-search-log"
    }

    fn attach(&self, agent: &AttachedAgent) {
        // An extension is attached to exactly one agent; a second attach cannot happen.
        let _ = self.agent.set(agent.handle.clone());
    }
}

impl SearchRecorder for SearchLog {
    fn record(&self, request: &Value) -> Result<(), String> {
        let handle = self
            .agent
            .get()
            .and_then(WeakAgentHandle::upgrade)
            .ok_or_else(|| "the session is not open".to_string())?;
        handle
            .log_event(Event::Opaque {
                event_type: SEARCH_REQUEST_EVENT.to_string(),
                data: request.clone(),
            })
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}
