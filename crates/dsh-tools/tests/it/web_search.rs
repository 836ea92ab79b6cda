//! `web_search` over real HTTP against the fake provider's Messages endpoint: sources come
//! from `web_search_tool_result` blocks (URL, title, date) with snippets from cited text;
//! failures (no result block, 429, 500, redirect, malformed JSON, slow + cancel) are named
//! errors; the logged auxiliary request is the exact body sent, without the key; the key
//! travels only in the request headers.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Scratch;
use dsh_test_support::web_search::{
    malformed_search_reply, redirect_reply, search_reply, search_reply_without_results,
    slow_search_reply, SearchHit, SEARCH_REPLY_USAGE,
};
use dsh_test_support::{FakeProvider, ScriptedReply};
use dsh_tools::{
    PermissionPreset, SearchRecorder, ToolErrorCode, WebSearchSettings, WebSearchTool,
};
use serde_json::{json, Value};

const KEY: &str = "sk-search-test-key-0123456789";
const Q1: &str = "DeepSeek Harness snapshot search";
const Q2: &str = "DeepSeek Harness multi-query search";

#[derive(Default)]
struct Log {
    records: Mutex<Vec<Value>>,
    refuse: bool,
}

impl SearchRecorder for Log {
    fn record(&self, request: &Value) -> Result<(), String> {
        if self.refuse {
            return Err("the session log is closed".into());
        }
        self.records.lock().unwrap().push(request.clone());
        Ok(())
    }
}

/// Six hits per query, as dsh's web-search-round scenario serves them.
fn hits(query_index: usize) -> Vec<SearchHit> {
    (1..=6)
        .map(|n| {
            SearchHit::new(
                &format!("https://docs.example.test/search/{}/{n}", query_index + 1),
                &format!("Snapshot Search {} Result {n}", query_index + 1),
                &format!("Snapshot search {} excerpt {n}.", query_index + 1),
                &format!("2026-07-0{n}"),
            )
        })
        .collect()
}

fn scratch(provider: &FakeProvider, log: &Arc<Log>, settings: WebSearchSettings) -> Scratch {
    let mut s = Scratch::new(PermissionPreset::ReadOnly);
    let tool = WebSearchTool::new(
        WebSearchSettings {
            base_url: provider.base_url(),
            ..settings
        },
        dsh_http::ApiKey::new(KEY),
    )
    .with_recorder(Arc::clone(log) as Arc<dyn SearchRecorder>);
    s.registry.register(Arc::new(tool)).unwrap();
    s
}

async fn provider() -> FakeProvider {
    FakeProvider::start(Vec::<ScriptedReply>::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn two_queries_give_capped_round_robin_sources_with_titles_snippets_and_dates() {
    let provider = provider().await;
    provider.answer_search(Q1, search_reply(Q1, &hits(0)));
    provider.answer_search(Q2, search_reply(Q2, &hits(1)));
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    // A duplicate query runs once.
    let out = s
        .call("web_search", json!({"queries": [Q1, Q2, Q1]}))
        .await
        .unwrap();
    let text = out.text_content();
    // Round robin over the two queries, cut at 8: ranks 1..4 of each.
    for n in 1..=4 {
        for q in 1..=2 {
            let line = format!(
                "- [Snapshot Search {q} Result {n}](https://docs.example.test/search/{q}/{n}) — Snapshot search {q} excerpt {n}. (2026-07-0{n})"
            );
            assert!(text.contains(&line), "missing {line} in:\n{text}");
        }
    }
    for n in 5..=6 {
        assert!(!text.contains(&format!("/search/1/{n}")), "{text}");
    }
    assert!(
        text.starts_with("Sources:\n- [Snapshot Search 1 Result 1]"),
        "{text}"
    );
    assert!(text.contains("(Showing the first 8 sources. Refine the query for more.)"));
    assert!(text.ends_with("Cite the relevant URLs above as markdown links in your answer."));
    assert!(!text.contains("prose"), "{text}");

    // Structured data for cards and the log: queries, sources, usage of both requests.
    let data = out.data.unwrap();
    assert_eq!(data["queries"], json!([Q1, Q2]));
    assert_eq!(data["sources"].as_array().unwrap().len(), 8);
    assert_eq!(
        data["sources"][1],
        json!({"url": "https://docs.example.test/search/2/1", "title": "Snapshot Search 2 Result 1",
               "snippet": "Snapshot search 2 excerpt 1.", "publishedAt": "2026-07-01"})
    );
    assert_eq!(data["truncated"], json!(true));
    assert_eq!(
        data["usage"]["inputTokens"],
        json!(2 * SEARCH_REPLY_USAGE.0)
    );
    assert_eq!(
        data["usage"]["outputTokens"],
        json!(2 * SEARCH_REPLY_USAGE.1)
    );
    assert_eq!(data["usage"]["requests"], json!(2));
    assert_eq!(data["auxiliaryUsage"]["model"], json!("deepseek-v4-flash"));

    // What went over the wire: one POST /messages per distinct query, key in headers only.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let records = log.records.lock().unwrap().clone();
    assert_eq!(records.len(), 2);
    for request in &requests {
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
        // The logged record is exactly the body sent, and it names no key.
        let record = records
            .iter()
            .find(|r| r["body"] == request.body)
            .expect("each sent body was logged");
        assert_eq!(
            record["endpoint"],
            json!(format!("{}/messages", provider.base_url()))
        );
        assert_eq!(record["apiVersion"], json!("2023-06-01"));
        let logged = record.to_string();
        assert!(!logged.contains(KEY) && !logged.contains("sk-"), "{logged}");
    }
    let texts: Vec<&str> = requests
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(texts.contains(&&*format!("Perform a web search for the query: {Q1}")));
    assert!(texts.contains(&&*format!("Perform a web search for the query: {Q2}")));
}

#[tokio::test]
async fn a_reply_without_a_result_block_is_an_error_not_scraped_prose() {
    let provider = provider().await;
    provider.answer_search(Q1, search_reply_without_results());
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(message.contains("no web_search_tool_result"), "{message}");
    assert!(!message.contains("prose.example.test"), "{message}");
    // The request was logged before it was sent, even though it failed.
    assert_eq!(log.records.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn http_failures_are_named() {
    let provider = provider().await;
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());

    provider.answer_search(Q1, ScriptedReply::rate_limited(7));
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebRateLimited,
        )
        .await;
    assert!(
        message.contains("429") && message.contains("retry after 7"),
        "{message}"
    );

    provider.answer_search(Q1, ScriptedReply::http_error(500, "upstream exploded"));
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(
        message.contains("500") && message.contains("upstream exploded"),
        "{message}"
    );

    provider.answer_search(Q1, ScriptedReply::http_error(401, "invalid api key"));
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderAuth,
        )
        .await;
    assert!(!message.contains(KEY), "{message}");

    provider.answer_search(Q1, malformed_search_reply());
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(message.contains("unprocessable"), "{message}");
}

#[tokio::test]
async fn a_redirect_is_refused_and_its_target_never_contacted() {
    let provider = provider().await;
    let elsewhere = provider_at_other_port().await;
    provider.answer_search(
        Q1,
        redirect_reply(&format!("{}/messages", elsewhere.base_url())),
    );
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(message.contains("redirect"), "{message}");
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect target got the key"
    );
}

async fn provider_at_other_port() -> FakeProvider {
    provider().await
}

#[tokio::test]
async fn a_slow_search_is_cancelled_promptly_and_cancels_its_sibling() {
    let provider = provider().await;
    provider.answer_search(Q1, slow_search_reply());
    provider.answer_search(Q2, slow_search_reply());
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    let cancel = s.ctx.cancel().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1, Q2]}),
            ToolErrorCode::Aborted,
        )
        .await;
    assert!(message.contains("cancelled"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Both stalled connections were closed by the client.
    let mut events = provider.events();
    for _ in 0..50 {
        if events.client_disconnects >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        events = provider.events();
    }
    assert_eq!(events.client_disconnects, 2, "{events:?}");
}

#[tokio::test]
async fn a_failed_query_cancels_the_slow_one_and_wins() {
    let provider = provider().await;
    provider.answer_search(Q1, slow_search_reply());
    provider.answer_search(Q2, ScriptedReply::http_error(500, "boom"));
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    let started = std::time::Instant::now();
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1, Q2]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(message.contains("boom"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_slow_search_times_out_with_a_named_error() {
    let provider = provider().await;
    provider.answer_search(Q1, slow_search_reply());
    let log = Arc::new(Log::default());
    let s = scratch(
        &provider,
        &log,
        WebSearchSettings {
            timeout: Duration::from_millis(300),
            ..WebSearchSettings::default()
        },
    );
    s.err(
        "web_search",
        json!({"queries": [Q1]}),
        ToolErrorCode::ToolTimeout,
    )
    .await;
}

#[tokio::test]
async fn bad_queries_are_refused_before_any_request() {
    let provider = provider().await;
    let log = Arc::new(Log::default());
    let s = scratch(&provider, &log, WebSearchSettings::default());
    for (args, expected) in [
        (json!({"queries": []}), "at least one query"),
        (json!({"queries": ["a", "  "]}), "non-empty"),
        (
            json!({"queries": ["a", "b", "c", "d", "e"]}),
            "at most 4 queries",
        ),
        (json!({"queries": "just a string"}), "queries"),
        (json!({}), "queries"),
    ] {
        let message = s.err("web_search", args, ToolErrorCode::InvalidArgs).await;
        assert!(message.contains(expected), "{message}");
    }
    assert!(provider.requests().is_empty());
    assert!(log.records.lock().unwrap().is_empty());
}

#[tokio::test]
async fn nothing_is_sent_when_the_request_cannot_be_logged() {
    let provider = provider().await;
    provider.answer_search(Q1, search_reply(Q1, &hits(0)));
    let log = Arc::new(Log {
        refuse: true,
        ..Log::default()
    });
    let s = scratch(&provider, &log, WebSearchSettings::default());
    let message = s
        .err(
            "web_search",
            json!({"queries": [Q1]}),
            ToolErrorCode::WebProviderError,
        )
        .await;
    assert!(message.contains("could not be logged"), "{message}");
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn the_key_is_not_in_debug_output_or_the_schema() {
    let provider = provider().await;
    let tool = WebSearchTool::new(
        WebSearchSettings {
            base_url: provider.base_url(),
            ..WebSearchSettings::default()
        },
        dsh_http::ApiKey::new(KEY),
    );
    let debug = format!("{tool:?}");
    assert!(!debug.contains(KEY), "{debug}");
    let schema = dsh_tools::Tool::schema(&tool);
    assert!(!schema.description.contains(KEY));
    assert_eq!(schema.parameters["required"], json!(["queries"]));
}

/// dsh's `web-search-round` recording (`fixtures/dsh/more/web/web-search-round`): the model's
/// recorded `web_search` call, run against the search double of dsh's own test (six results
/// per query), gives what dsh's test expects: the first 8 sources round robin, the cut note.
#[tokio::test]
async fn dshs_recorded_web_search_round_gives_dshs_sources() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/dsh/more/web/web-search-round/session.jsonl");
    let log = std::fs::read_to_string(&path).unwrap();
    let arguments = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|event| {
            let block = &event["data"]["chunk"]["block"];
            (block["type"] == "tool-call" && block["name"] == "web_search")
                .then(|| block["arguments"].as_str().unwrap().to_string())
        })
        .expect("the recording calls web_search");
    let args: Value = serde_json::from_str(&arguments).unwrap();
    assert_eq!(args, json!({"queries": [Q1, Q2]}));

    let provider = provider().await;
    provider.answer_search(Q1, search_reply(Q1, &hits(0)));
    provider.answer_search(Q2, search_reply(Q2, &hits(1)));
    let recorder = Arc::new(Log::default());
    let s = scratch(&provider, &recorder, WebSearchSettings::default());
    let out = s.call_raw("web_search", &arguments).await.unwrap();
    let text = out.text_content();
    let kept: Vec<String> = (1..=4)
        .flat_map(|n| {
            (1..=2).map(move |q| {
                format!(
                    "[Snapshot Search {q} Result {n}](https://docs.example.test/search/{q}/{n})"
                )
            })
        })
        .collect();
    for source in &kept {
        assert!(text.contains(source.as_str()), "{source} missing:\n{text}");
    }
    for n in 5..=6 {
        for q in 1..=2 {
            assert!(!text.contains(&format!("/search/{q}/{n})")), "{text}");
        }
    }
    assert!(text.contains("(Showing the first 8 sources. Refine the query for more.)"));
    // One logged request per query, as dsh's test checks for its session events.
    assert_eq!(recorder.records.lock().unwrap().len(), 2);
}
