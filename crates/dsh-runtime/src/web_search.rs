//! `web_search` in composition (docs/tools.md, "web_search"): offered when a DeepSeek key is
//! configured and `[tools.web_search] enabled` is not false. The tool's model call (its
//! `WebSearcher`) is `dsh-anthropic`'s `WebSearch`, so the tool knows no wire format; each
//! auxiliary search request is logged in the session as `web/deepseek-search-llm-request`
//! before it is sent.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use dsh_agent::{AttachedAgent, Extension, WeakAgentHandle};
use dsh_anthropic::{SearchError, SearchErrorKind, WebSearch, WebSearchConfig};
use dsh_session::Event;
use dsh_tools::{
    ToolError, ToolErrorCode, WebSearchResult, WebSearchSettings, WebSearchTool, WebSearcher,
    WebSource, SEARCH_REQUEST_EVENT,
};
use serde_json::Value;

/// The variable holding the DeepSeek key the searches use (the chat adapter's own variable).
const KEY_VARIABLE: &str = "DEEPSEEK_API_KEY";

/// What a session needs to offer `web_search`: the tool's settings, the request's and the key.
#[derive(Debug, Clone)]
pub(crate) struct SearchSetup {
    settings: WebSearchSettings,
    request: WebSearchConfig,
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
            max_results: search.max_results,
            max_queries: search.max_queries,
            timeout: search.timeout,
        },
        request: WebSearchConfig {
            base_url,
            model: search.model,
            max_uses: search.max_uses,
            max_tokens: search.max_tokens,
            ..WebSearchConfig::default()
        },
        key,
    })
}

/// The tool and the extension that gives it the session log (it learns the agent when the
/// agent attaches its extensions).
pub(crate) fn tool(setup: &SearchSetup) -> (WebSearchTool, Arc<SearchLog>) {
    let log = Arc::new(SearchLog::default());
    let searcher = Searcher {
        search: WebSearch::new(setup.request.clone(), setup.key.clone()),
        log: Arc::clone(&log),
    };
    let tool = WebSearchTool::new(setup.settings.clone(), Arc::new(searcher));
    (tool, log)
}

/// The tool's searcher: `dsh-anthropic`'s search, each request logged through `log` first.
struct Searcher {
    search: WebSearch,
    log: Arc<SearchLog>,
}

impl WebSearcher for Searcher {
    fn model(&self) -> &str {
        self.search.model()
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<WebSearchResult, ToolError>> + Send + 'a>> {
        Box::pin(async move {
            let record = |request: &Value| self.log.record(request);
            let result = self
                .search
                .search(query, &record)
                .await
                .map_err(tool_error)?;
            let sources = result.sources.into_iter().map(|source| WebSource {
                url: source.url,
                title: source.title,
                snippet: source.snippet,
                published_at: source.published_at,
            });
            Ok(WebSearchResult {
                sources: sources.collect(),
                usage: result.usage,
            })
        })
    }
}

/// A failed search as the tool's named error.
fn tool_error(error: SearchError) -> ToolError {
    let code = match error.kind {
        SearchErrorKind::RateLimited => ToolErrorCode::WebRateLimited,
        SearchErrorKind::Auth => ToolErrorCode::WebProviderAuth,
        SearchErrorKind::Provider => ToolErrorCode::WebProviderError,
    };
    ToolError::new(code, error.message)
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

impl SearchLog {
    /// Logs one request (`{endpoint, apiVersion, body}`); `Err` says why it could not be.
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
