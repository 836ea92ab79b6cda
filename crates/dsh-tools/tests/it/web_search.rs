//! `web_search` over a scripted searcher (the model call the composition root supplies; its
//! wire side is tested in dsh-anthropic, the whole in dsh-runtime): queries are checked before
//! any search, run at the same time and deduplicated; sources are merged round robin, capped
//! and shown with titles, snippets and dates; the first failure cancels the other queries and is
//! returned with its code; cancel and timeout are named errors.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Scratch;
use dsh_llm::Usage;
use dsh_tools::{
    PermissionPreset, ToolError, ToolErrorCode, WebSearchResult, WebSearchSettings, WebSearchTool,
    WebSearcher, WebSource,
};
use futures::future::BoxFuture;
use serde_json::{json, Value};

const Q1: &str = "DeepSeek Harness snapshot search";
const Q2: &str = "DeepSeek Harness multi-query search";
const USAGE: (u64, u64) = (40, 12);

/// What the scripted searcher answers one query with.
#[derive(Clone)]
enum Answer {
    Hits(Vec<WebSource>),
    Fail(ToolErrorCode, &'static str),
    /// Never answers (until dropped).
    Slow,
}

/// Counts the searches dropped before they finished.
struct DropGuard(Arc<AtomicUsize>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Default)]
struct Scripted {
    answers: HashMap<String, Answer>,
    asked: Mutex<Vec<String>>,
    dropped: Arc<AtomicUsize>,
}

impl WebSearcher for Scripted {
    fn model(&self) -> &str {
        "deepseek-v4-flash"
    }

    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<WebSearchResult, ToolError>> {
        self.asked.lock().unwrap().push(query.to_string());
        let answer = self.answers.get(query).cloned();
        let guard = DropGuard(Arc::clone(&self.dropped), false);
        Box::pin(async move {
            // The whole guard moves into the search, so it drops with it.
            let mut guard = guard;
            let outcome = match answer {
                Some(Answer::Hits(sources)) => Ok(WebSearchResult {
                    sources,
                    usage: Usage {
                        input_tokens: USAGE.0,
                        output_tokens: USAGE.1,
                        ..Usage::default()
                    },
                }),
                Some(Answer::Fail(code, message)) => Err(ToolError::new(code, message)),
                Some(Answer::Slow) | None => {
                    std::future::pending::<()>().await;
                    unreachable!("a pending future never finishes")
                }
            };
            guard.1 = true;
            outcome
        })
    }
}

/// Six hits per query, as dsh's web-search-round scenario serves them.
fn hits(query_index: usize) -> Vec<WebSource> {
    (1..=6)
        .map(|n| WebSource {
            url: format!("https://docs.example.test/search/{}/{n}", query_index + 1),
            title: Some(format!("Snapshot Search {} Result {n}", query_index + 1)),
            snippet: Some(format!("Snapshot search {} excerpt {n}.", query_index + 1)),
            published_at: Some(format!("2026-07-0{n}")),
        })
        .collect()
}

fn scripted(answers: &[(&str, Answer)]) -> Arc<Scripted> {
    Arc::new(Scripted {
        answers: answers
            .iter()
            .map(|(q, a)| (q.to_string(), a.clone()))
            .collect(),
        ..Scripted::default()
    })
}

fn scratch(searcher: &Arc<Scripted>, settings: WebSearchSettings) -> Scratch {
    let mut s = Scratch::new(PermissionPreset::ReadOnly);
    let tool = WebSearchTool::new(settings, Arc::clone(searcher) as Arc<dyn WebSearcher>);
    s.registry.register(Arc::new(tool)).unwrap();
    s
}

#[tokio::test]
async fn two_queries_give_capped_round_robin_sources_with_titles_snippets_and_dates() {
    let searcher = scripted(&[(Q1, Answer::Hits(hits(0))), (Q2, Answer::Hits(hits(1)))]);
    let s = scratch(&searcher, WebSearchSettings::default());
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

    // Structured data for cards and the log: queries, sources, usage of both searches.
    let data = out.data.unwrap();
    assert_eq!(data["queries"], json!([Q1, Q2]));
    assert_eq!(data["sources"].as_array().unwrap().len(), 8);
    assert_eq!(
        data["sources"][1],
        json!({"url": "https://docs.example.test/search/2/1", "title": "Snapshot Search 2 Result 1",
               "snippet": "Snapshot search 2 excerpt 1.", "publishedAt": "2026-07-01"})
    );
    assert_eq!(data["truncated"], json!(true));
    assert_eq!(data["usage"]["inputTokens"], json!(2 * USAGE.0));
    assert_eq!(data["usage"]["outputTokens"], json!(2 * USAGE.1));
    assert_eq!(data["usage"]["requests"], json!(2));
    assert_eq!(data["auxiliaryUsage"]["model"], json!("deepseek-v4-flash"));
    let mut asked = searcher.asked.lock().unwrap().clone();
    asked.sort();
    assert_eq!(asked, [Q2, Q1]);
}

#[tokio::test]
async fn a_failure_keeps_its_code_and_message() {
    for code in [
        ToolErrorCode::WebRateLimited,
        ToolErrorCode::WebProviderAuth,
        ToolErrorCode::WebProviderError,
    ] {
        let searcher = scripted(&[(Q1, Answer::Fail(code, "the provider said no"))]);
        let s = scratch(&searcher, WebSearchSettings::default());
        let message = s.err("web_search", json!({"queries": [Q1]}), code).await;
        assert!(message.contains("the provider said no"), "{message}");
    }
}

#[tokio::test]
async fn a_slow_search_is_cancelled_promptly_and_cancels_its_sibling() {
    let searcher = scripted(&[(Q1, Answer::Slow), (Q2, Answer::Slow)]);
    let s = scratch(&searcher, WebSearchSettings::default());
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
    // Both searches were dropped (a dropped search closes its connection, dsh-anthropic).
    assert_eq!(searcher.dropped.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failed_query_cancels_the_slow_one_and_wins() {
    let searcher = scripted(&[
        (Q1, Answer::Slow),
        (Q2, Answer::Fail(ToolErrorCode::WebProviderError, "boom")),
    ]);
    let s = scratch(&searcher, WebSearchSettings::default());
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
    assert_eq!(searcher.dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_slow_search_times_out_with_a_named_error() {
    let searcher = scripted(&[(Q1, Answer::Slow)]);
    let s = scratch(
        &searcher,
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
async fn bad_queries_are_refused_before_any_search() {
    let searcher = scripted(&[]);
    let s = scratch(&searcher, WebSearchSettings::default());
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
    assert!(searcher.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_schema_follows_the_settings() {
    let searcher = scripted(&[]);
    let tool = WebSearchTool::new(
        WebSearchSettings {
            max_queries: 2,
            ..WebSearchSettings::default()
        },
        searcher,
    );
    let schema = dsh_tools::Tool::schema(&tool);
    assert_eq!(schema.parameters["required"], json!(["queries"]));
    assert_eq!(
        schema.parameters["properties"]["queries"]["maxItems"],
        json!(2)
    );
    assert!(schema.description.contains("Give 1 to 2 search queries"));
    assert!(format!("{tool:?}").contains("deepseek-v4-flash"));
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

    let searcher = scripted(&[(Q1, Answer::Hits(hits(0))), (Q2, Answer::Hits(hits(1)))]);
    let s = scratch(&searcher, WebSearchSettings::default());
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
    // One search per query, as dsh's test checks for its session events.
    assert_eq!(searcher.asked.lock().unwrap().len(), 2);
}
