//! One web search through a Messages endpoint's server-side `web_search` tool (docs/tools.md,
//! "web_search"): the wire side of dsh's `web_search` tool, which runs it on DeepSeek's
//! Anthropic-compatible endpoint. The tool itself (`dsh-tools`) knows queries and sources only;
//! the composition root hands it a [`WebSearch`] behind the tool's searcher seam.
//!
//! Each query is one non-streaming `POST {base}/messages` whose only tool is the server tool
//! `web_search_20250305`. Sources are read from the structured `web_search_tool_result` blocks
//! only (never scraped from prose); a reply without one is an error. Snippets come from the
//! `citations[].cited_text` of the reply's text blocks. Before a request is sent, its record
//! `{endpoint, apiVersion, body}` (never its headers or key) is handed to the caller's `record`;
//! if that fails, nothing is sent. Redirects are never followed, so the key cannot travel to
//! another host.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

use dsh_http::ApiKey;
use dsh_llm::Usage;
use serde_json::{json, Value};

use crate::config::API_VERSION;

/// Default endpoint base: DeepSeek's Anthropic-compatible API (`/messages` is appended). Not
/// the chat-completions base, so `DEEPSEEK_BASE_URL` never applies here.
pub const DEFAULT_SEARCH_BASE_URL: &str = "https://api.deepseek.com/anthropic/v1";
/// The user text of every search request, followed by the query.
pub const SEARCH_PROMPT_PREFIX: &str = "Perform a web search for the query: ";
/// Most bytes of a search reply read.
const MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;

/// Where and how a search request is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSearchConfig {
    /// Endpoint base; `/messages` is appended. Default [`DEFAULT_SEARCH_BASE_URL`].
    pub base_url: String,
    /// The model that runs the search. Default `deepseek-v4-flash`.
    pub model: String,
    /// `anthropic-version` header. Default [`API_VERSION`].
    pub api_version: String,
    /// `max_tokens` of the search request. Default 4096.
    pub max_tokens: u64,
    /// `max_uses` of the server tool (searches the provider may run per query). Default 5.
    pub max_uses: u64,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        WebSearchConfig {
            base_url: DEFAULT_SEARCH_BASE_URL.to_string(),
            model: dsh_llm::providers::DEEPSEEK_DEFAULT_MODEL.to_string(),
            api_version: API_VERSION.to_string(),
            max_tokens: 4096,
            max_uses: 5,
        }
    }
}

/// One source of a search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchSource {
    /// The page's URL.
    pub url: String,
    /// Its title, when the provider gave one.
    pub title: Option<String>,
    /// The first text the reply cited from it.
    pub snippet: Option<String>,
    /// Its date (`page_age`), when known.
    pub published_at: Option<String>,
}

/// What one query produced: its sources in the provider's order and the request's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchResult {
    /// The sources, deduplicated by URL.
    pub sources: Vec<SearchSource>,
    /// Tokens of the search request.
    pub usage: Usage,
}

/// Why a search failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchErrorKind {
    /// HTTP 429.
    RateLimited,
    /// HTTP 401 or 403: the key was refused.
    Auth,
    /// Anything else: transport, status, redirect, reply, or the record was refused.
    Provider,
}

/// A failed search: its kind and a message for the model, never holding the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchError {
    /// What kind of failure.
    pub kind: SearchErrorKind,
    /// What happened and what to do.
    pub message: String,
}

fn provider_error(message: impl Into<String>) -> SearchError {
    SearchError {
        kind: SearchErrorKind::Provider,
        message: message.into(),
    }
}

/// Searches through one endpoint with one key.
pub struct WebSearch {
    config: WebSearchConfig,
    key: ApiKey,
    /// Built at the first search, not with the searcher: most sessions never search, and with
    /// `SSL_CERT_FILE` set a client costs a copy of its authorities (docs/providers.md, "Extra
    /// root certificates").
    client: OnceLock<reqwest::Client>,
}

impl std::fmt::Debug for WebSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearch")
            .field("config", &self.config)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl WebSearch {
    /// A searcher calling `config.base_url` with `key`.
    pub fn new(config: WebSearchConfig, key: ApiKey) -> Self {
        WebSearch {
            config,
            key,
            client: OnceLock::new(),
        }
    }

    /// The model that runs the searches.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The HTTP client, built on first use; fails when it cannot be set up (an unreadable
    /// `SSL_CERT_FILE`).
    fn client(&self) -> Result<&reqwest::Client, String> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("dsh/", env!("CARGO_PKG_VERSION"), " (web_search)"));
        let client = dsh_http::trust_extra_roots(builder)
            .map_err(|err| err.0)?
            .build()
            .map_err(|err| format!("cannot set up the HTTP client of web_search: {err}"))?;
        // Two searches racing here both build one; the first is kept.
        Ok(self.client.get_or_init(|| client))
    }

    fn endpoint(&self) -> String {
        format!("{}/messages", self.config.base_url.trim_end_matches('/'))
    }

    /// One query: hand the request's record to `record`, send it, map the reply. Dropping the
    /// future cancels the request.
    pub async fn search(
        &self,
        query: &str,
        record: &(dyn Fn(&Value) -> Result<(), String> + Sync),
    ) -> Result<SearchResult, SearchError> {
        let endpoint = self.endpoint();
        let body = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "messages": [{
                "role": "user",
                "content": [{"type": "text", "text": format!("{SEARCH_PROMPT_PREFIX}{query}")}],
            }],
            "tools": [{
                "type": "web_search_20250305",
                "name": "web_search",
                "max_uses": self.config.max_uses,
            }],
        });
        let entry =
            json!({"endpoint": endpoint, "apiVersion": self.config.api_version, "body": body});
        record(&entry).map_err(|why| {
            provider_error(format!(
                "the search request was not sent because it could not be logged: {why}"
            ))
        })?;
        let secret = self.key.expose_secret();
        let response = self
            .client()
            .map_err(provider_error)?
            .post(&endpoint)
            .header("x-api-key", secret)
            .header(reqwest::header::AUTHORIZATION, format!("Bearer {secret}"))
            .header("anthropic-version", &self.config.api_version)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|err| {
                provider_error(format!(
                    "the search request to {endpoint} failed: {}",
                    dsh_http::describe_transport_error(err)
                ))
            })?;
        let status = response.status();
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = header(reqwest::header::RETRY_AFTER);
        let location = header(reqwest::header::LOCATION);
        let bytes = read_bounded(response).await?;
        if status.is_redirection() {
            return Err(provider_error(format!(
                "the search endpoint {endpoint} answered HTTP {status} redirecting to {}; \
                 redirects are refused so the API key never reaches another address. Set \
                 `base_url` under [tools.web_search] to the final address",
                location.as_deref().unwrap_or("(no Location)")
            )));
        }
        if !status.is_success() {
            return Err(http_error(status, &bytes, retry_after.as_deref()));
        }
        let reply: Value = serde_json::from_slice(&bytes).map_err(|err| {
            provider_error(format!(
                "DeepSeek returned an unprocessable search reply (not JSON: {err})"
            ))
        })?;
        map_reply(&reply)
    }
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, SearchError> {
    let mut bytes = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|err| {
            provider_error(format!(
                "reading the search reply failed: {}",
                dsh_http::describe_transport_error(err)
            ))
        })?;
        let Some(chunk) = chunk else { break };
        if bytes.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(provider_error(format!(
                "the search reply is larger than {MAX_REPLY_BYTES} bytes; it was not read"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A non-success status as a named error: 429 rate limited, 401/403 auth, everything else a
/// provider error; the provider's own message is kept (never the request headers).
fn http_error(status: reqwest::StatusCode, body: &[u8], retry_after: Option<&str>) -> SearchError {
    let detail = dsh_http::errors::provider_message(body);
    let detail = if detail.trim().is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    };
    match status.as_u16() {
        429 => SearchError {
            kind: SearchErrorKind::RateLimited,
            message: format!(
                "DeepSeek search is rate limited (HTTP 429{}){detail}; wait before searching again",
                retry_after
                    .map(|s| format!(", retry after {s} s"))
                    .unwrap_or_default()
            ),
        },
        401 | 403 => SearchError {
            kind: SearchErrorKind::Auth,
            message: format!(
                "DeepSeek search refused the API key (HTTP {status}){detail}; the user must check DEEPSEEK_API_KEY"
            ),
        },
        _ => provider_error(format!("DeepSeek search failed with HTTP {status}{detail}")),
    }
}

/// Non-empty text of `value[key]`.
fn text_field(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The first `cited_text` per URL in the citations of a reply's text blocks.
fn snippets(blocks: &[Value]) -> Vec<(String, String)> {
    let mut snippets: Vec<(String, String)> = Vec::new();
    for block in blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
    {
        for cite in block
            .get("citations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(url), Some(text)) =
                (text_field(cite, "url"), text_field(cite, "cited_text"))
            {
                if !snippets.iter().any(|(u, _)| *u == url) {
                    snippets.push((url, text));
                }
            }
        }
    }
    snippets
}

/// Reads sources (from `web_search_tool_result` blocks only), snippets (first `cited_text` per
/// URL from text blocks' citations) and usage from a Messages reply.
fn map_reply(reply: &Value) -> Result<SearchResult, SearchError> {
    let blocks = reply
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let result_blocks: Vec<&Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("web_search_tool_result"))
        .collect();
    if result_blocks.is_empty() {
        return Err(provider_error(
            "DeepSeek returned no web_search_tool_result block; the request may not have \
             triggered its web search. Rephrase the query and try again",
        ));
    }
    let snippets = snippets(blocks);
    let mut seen = HashSet::new();
    let mut sources = Vec::new();
    let mut search_error = None;
    for block in result_blocks {
        match block.get("content") {
            Some(Value::Array(items)) => {
                for item in items {
                    if item.get("type").and_then(Value::as_str) != Some("web_search_result") {
                        continue;
                    }
                    let Some(url) = text_field(item, "url") else {
                        continue;
                    };
                    if !seen.insert(url.clone()) {
                        continue;
                    }
                    let snippet = snippets
                        .iter()
                        .find(|(u, _)| *u == url)
                        .map(|(_, t)| t.clone());
                    sources.push(SearchSource {
                        title: text_field(item, "title"),
                        published_at: text_field(item, "page_age"),
                        snippet,
                        url,
                    });
                }
            }
            Some(error) => {
                search_error = text_field(error, "error_code");
            }
            None => {}
        }
    }
    if sources.is_empty() {
        if let Some(code) = search_error {
            return Err(provider_error(format!(
                "DeepSeek's web search failed: {code}"
            )));
        }
    }
    let wire = reply.get("usage");
    let count = |key: &str| wire.and_then(|u| u.get(key)).and_then(Value::as_u64);
    let usage = Usage {
        input_tokens: count("input_tokens").unwrap_or(0),
        output_tokens: count("output_tokens").unwrap_or(0),
        cache_read_tokens: count("cache_read_input_tokens").unwrap_or(0),
        cache_write_tokens: count("cache_creation_input_tokens").unwrap_or(0),
        reasoning_tokens: 0,
    };
    Ok(SearchResult { sources, usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_without_result_block_is_an_error_even_with_urls_in_prose() {
        let reply = json!({"content": [{"type": "text", "text": "See https://example.com/x"}]});
        let err = map_reply(&reply).err().unwrap();
        assert_eq!(err.kind, SearchErrorKind::Provider);
    }

    #[test]
    fn a_search_error_block_is_named() {
        let reply = json!({"content": [{"type": "web_search_tool_result",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}]});
        let err = map_reply(&reply).err().unwrap();
        assert!(err.message.contains("max_uses_exceeded"), "{}", err.message);
    }

    #[test]
    fn sources_are_deduplicated_with_their_first_snippet() {
        let reply = json!({"content": [
            {"type": "web_search_tool_result", "content": [
                {"type": "web_search_result", "url": "https://a.test/", "title": "A", "page_age": "2026-01-01"},
                {"type": "web_search_result", "url": "https://a.test/"},
                {"type": "web_search_result", "url": "https://b.test/"}]},
            {"type": "text", "text": "x", "citations": [
                {"url": "https://a.test/", "cited_text": "first"},
                {"url": "https://a.test/", "cited_text": "second"}]}],
            "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 1}});
        let result = map_reply(&reply).unwrap();
        assert_eq!(result.sources.len(), 2);
        assert_eq!(result.sources[0].snippet.as_deref(), Some("first"));
        assert_eq!(
            result.sources[0].published_at.as_deref(),
            Some("2026-01-01")
        );
        assert_eq!(result.sources[1].title, None);
        assert_eq!(
            (result.usage.input_tokens, result.usage.cache_read_tokens),
            (3, 1)
        );
    }
}
