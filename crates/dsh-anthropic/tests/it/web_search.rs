//! `WebSearch`, the wire side of dsh's `web_search` tool, over real HTTP against the fake
//! provider's Messages endpoint: sources come from `web_search_tool_result` blocks (URL, title,
//! date) with snippets from cited text; failures (no result block, 429, 500, 401, redirect,
//! malformed JSON) are named; the recorded request is the exact body sent, without the key;
//! the key travels only in the request headers; a dropped search closes its connection.

use std::sync::Mutex;
use std::time::Duration;

use dsh_anthropic::{SearchErrorKind, WebSearch, WebSearchConfig};
use dsh_test_support::web_search::{
    malformed_search_reply, redirect_reply, search_reply, search_reply_without_results,
    slow_search_reply, SearchHit, SEARCH_REPLY_USAGE,
};
use dsh_test_support::{FakeProvider, ScriptedReply};
use serde_json::{json, Value};

const KEY: &str = "sk-search-test-key-0123456789";
const QUERY: &str = "DeepSeek Harness snapshot search";

async fn provider() -> FakeProvider {
    FakeProvider::start(Vec::<ScriptedReply>::new())
        .await
        .unwrap()
}

fn searcher(provider: &FakeProvider) -> WebSearch {
    let config = WebSearchConfig {
        base_url: provider.base_url(),
        ..WebSearchConfig::default()
    };
    WebSearch::new(config, dsh_http::ApiKey::new(KEY))
}

/// Records what `search` hands over before sending.
#[derive(Default)]
struct Records(Mutex<Vec<Value>>);

impl Records {
    fn keep(&self, request: &Value) -> Result<(), String> {
        self.0.lock().unwrap().push(request.clone());
        Ok(())
    }

    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

fn hits() -> Vec<SearchHit> {
    (1..=3)
        .map(|n| {
            SearchHit::new(
                &format!("https://docs.example.test/search/{n}"),
                &format!("Result {n}"),
                &format!("Excerpt {n}."),
                &format!("2026-07-0{n}"),
            )
        })
        .collect()
}

#[tokio::test]
async fn one_query_gives_sources_and_sends_the_recorded_body_with_the_key_in_headers_only() {
    let provider = provider().await;
    provider.answer_search(QUERY, search_reply(QUERY, &hits()));
    let records = Records::default();
    let search = searcher(&provider);
    let result = search
        .search(QUERY, &|r: &Value| records.keep(r))
        .await
        .unwrap();
    assert_eq!(result.sources.len(), 3);
    let first = &result.sources[0];
    assert_eq!(first.url, "https://docs.example.test/search/1");
    assert_eq!(first.title.as_deref(), Some("Result 1"));
    assert_eq!(first.snippet.as_deref(), Some("Excerpt 1."));
    assert_eq!(first.published_at.as_deref(), Some("2026-07-01"));
    assert_eq!(
        (result.usage.input_tokens, result.usage.output_tokens),
        SEARCH_REPLY_USAGE
    );
    assert_eq!(search.model(), "deepseek-v4-flash");

    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/messages");
    assert_eq!(request.header("x-api-key"), Some(KEY));
    assert_eq!(
        request.header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        request.body["tools"],
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
    );
    assert_eq!(request.body["model"], json!("deepseek-v4-flash"));
    assert!(request.body.get("stream").is_none());
    assert_eq!(
        request.body["messages"][0]["content"][0]["text"],
        json!(format!("Perform a web search for the query: {QUERY}"))
    );
    // The record is exactly the body sent, and it names no key.
    let records = records.all();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["body"], request.body);
    assert_eq!(
        records[0]["endpoint"],
        json!(format!("{}/messages", provider.base_url()))
    );
    assert_eq!(records[0]["apiVersion"], json!("2023-06-01"));
    let logged = records[0].to_string();
    assert!(!logged.contains(KEY) && !logged.contains("sk-"), "{logged}");
}

#[tokio::test]
async fn a_reply_without_a_result_block_is_an_error_not_scraped_prose() {
    let provider = provider().await;
    provider.answer_search(QUERY, search_reply_without_results());
    let records = Records::default();
    let error = searcher(&provider)
        .search(QUERY, &|r: &Value| records.keep(r))
        .await
        .unwrap_err();
    assert_eq!(error.kind, SearchErrorKind::Provider);
    assert!(
        error.message.contains("no web_search_tool_result"),
        "{error:?}"
    );
    assert!(!error.message.contains("prose.example.test"), "{error:?}");
    // The request was recorded before it was sent, even though it failed.
    assert_eq!(records.all().len(), 1);
}

#[tokio::test]
async fn http_failures_are_named() {
    let provider = provider().await;
    let search = searcher(&provider);
    let run = |reply: ScriptedReply| {
        provider.answer_search(QUERY, reply);
        search.search(QUERY, &|_: &Value| Ok(()))
    };

    let error = run(ScriptedReply::rate_limited(7)).await.unwrap_err();
    assert_eq!(error.kind, SearchErrorKind::RateLimited);
    assert!(
        error.message.contains("429") && error.message.contains("retry after 7"),
        "{error:?}"
    );

    let error = run(ScriptedReply::http_error(500, "upstream exploded"))
        .await
        .unwrap_err();
    assert_eq!(error.kind, SearchErrorKind::Provider);
    assert!(
        error.message.contains("500") && error.message.contains("upstream exploded"),
        "{error:?}"
    );

    let error = run(ScriptedReply::http_error(401, "invalid api key"))
        .await
        .unwrap_err();
    assert_eq!(error.kind, SearchErrorKind::Auth);
    assert!(!error.message.contains(KEY), "{error:?}");

    let error = run(malformed_search_reply()).await.unwrap_err();
    assert_eq!(error.kind, SearchErrorKind::Provider);
    assert!(error.message.contains("unprocessable"), "{error:?}");
}

#[tokio::test]
async fn a_redirect_is_refused_and_its_target_never_contacted() {
    let provider = provider().await;
    let elsewhere = self::provider().await;
    provider.answer_search(
        QUERY,
        redirect_reply(&format!("{}/messages", elsewhere.base_url())),
    );
    let error = searcher(&provider)
        .search(QUERY, &|_: &Value| Ok(()))
        .await
        .unwrap_err();
    assert!(error.message.contains("redirect"), "{error:?}");
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect target got the key"
    );
}

#[tokio::test]
async fn a_dropped_search_closes_its_connection() {
    let provider = provider().await;
    provider.answer_search(QUERY, slow_search_reply());
    let search = searcher(&provider);
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_millis(300),
        search.search(QUERY, &|_: &Value| Ok(())),
    )
    .await;
    assert!(outcome.is_err(), "the slow search finished");
    tokio::time::timeout(
        Duration::from_secs(5),
        provider.wait_for_client_disconnects(1),
    )
    .await
    .expect("the stalled connection was closed by the client");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn nothing_is_sent_when_the_request_cannot_be_recorded() {
    let provider = provider().await;
    provider.answer_search(QUERY, search_reply(QUERY, &hits()));
    let error = searcher(&provider)
        .search(QUERY, &|_: &Value| {
            Err("the session log is closed".to_string())
        })
        .await
        .unwrap_err();
    assert!(error.message.contains("could not be logged"), "{error:?}");
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn the_key_is_not_in_debug_output() {
    let provider = provider().await;
    let debug = format!("{:?}", searcher(&provider));
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("redacted"), "{debug}");
}
