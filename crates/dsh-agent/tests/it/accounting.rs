//! Every billed call counts in the turn's and the session's usage, once, under its model
//! (docs/sessions.md, "Cost"): a step's reply, a reply that failed after its usage arrived, the
//! compaction summary, the session title, a child's run; the cost budget spends the same
//! usage. Over real HTTP to the fake provider, except the cancel case, which needs a model that
//! is cancelled between its usage and its finish (no HTTP adapter passes usage on before it).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, ChildFactory, Subagents, TitleMode, TurnBudget, TurnOutcome};
use dsh_llm::{Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, GenerateRequest, Usage};
use dsh_session::{load_file, open_store, Event, SessionSummary, StoreKind, TurnEndReason};
use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, StreamEnd, WireUsage};
use serde_json::{json, Value};

const MODEL: &str = "deepseek-v4-flash";
const CHILD_MODEL: &str = "deepseek-v4-pro";

fn wire(prompt: u64, hit: u64, completion: u64) -> WireUsage {
    WireUsage {
        prompt_tokens: prompt,
        prompt_cache_hit_tokens: hit,
        completion_tokens: completion,
        reasoning_tokens: 0,
    }
}

/// What the provider was sent as usage, per model, as the loop counts it (disjoint counts).
fn counted(list: &[(&str, WireUsage)]) -> BTreeMap<String, (u64, u64, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
    for (model, w) in list {
        let entry = out.entry(model.to_string()).or_default();
        entry.0 += w.prompt_tokens - w.prompt_cache_hit_tokens;
        entry.1 += w.prompt_cache_hit_tokens;
        entry.2 += w.completion_tokens;
        entry.3 += 1;
    }
    out
}

fn as_counts(
    usage: &BTreeMap<String, dsh_llm::UsageTotals>,
) -> BTreeMap<String, (u64, u64, u64, u64)> {
    usage
        .iter()
        .map(|(model, t)| {
            (
                model.clone(),
                (
                    t.usage.input_tokens,
                    t.usage.cache_read_tokens,
                    t.usage.output_tokens,
                    t.requests,
                ),
            )
        })
        .collect()
}

fn parts(base_url: &str, home: &Path, cwd: &Path, depth: u64) -> dsh_agent::AgentParts {
    let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
        base_url.to_string(),
        Some(dsh_deepseek::ApiKey::new("sk-accounting")),
    ))
    .unwrap();
    let mut adapters = AdapterRegistry::new();
    adapters.register("deepseek", Arc::new(adapter)).unwrap();
    let factory: ChildFactory = {
        let (base_url, home, cwd) = (base_url.to_string(), home.to_owned(), cwd.to_owned());
        Arc::new(move |d| Ok(parts(&base_url, &home, &cwd, d)))
    };
    crate::delegation::parts(
        adapters,
        Subagents::new(depth, factory),
        CallConfig::new("deepseek", MODEL),
        Duration::from_secs(60),
        false,
        home,
        cwd,
    )
}

async fn run(agent: &mut Agent, prompt: &str) -> TurnOutcome {
    agent.handle().followup(prompt).unwrap();
    let mut outcomes = tokio::time::timeout(Duration::from_secs(60), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    outcomes.remove(0)
}

fn usage_calls(location: &str) -> Vec<Value> {
    load_file(Path::new(location))
        .unwrap()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Opaque { event_type, data } if event_type == "usage/call" => Some(data),
            _ => None,
        })
        .collect()
}

/// One turn with every kind of billed call: a step that starts a child (on another model), a
/// reply that fails after its usage arrived (retried), an overflow that compacts (the summary
/// call), the final reply, and the session's title call alongside.
#[tokio::test]
async fn every_billed_call_of_a_turn_counts_once_under_its_model() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let (title, step1, child, failed, summary, last) = (
        wire(30, 0, 5),
        wire(1000, 200, 10),
        wire(700, 0, 70),
        wire(1000, 600, 20),
        wire(3000, 0, 40),
        wire(900, 800, 9),
    );
    provider.route(
        RequestMatch::System("You name coding-assistant sessions".into()),
        [SseReply::new()
            .text("Accounting check")
            .finish("stop", Some(title))
            .into()],
    );
    provider.route(
        RequestMatch::FirstUser("CHILD A".into()),
        [SseReply::new()
            .text("child done")
            .finish("stop", Some(child))
            .into()],
    );
    provider.route(
        RequestMatch::FirstUser("account session".into()),
        [
            SseReply::new()
                .tool_call(
                    0,
                    "p1",
                    "subagent",
                    &json!({"description": "child", "prompt": "CHILD A", "model": CHILD_MODEL})
                        .to_string(),
                )
                .finish("tool_calls", Some(step1))
                .into(),
            // Fails after its usage arrived; retried.
            SseReply::new()
                .text("par")
                .usage(failed)
                .end(StreamEnd::DropConnection)
                .into(),
            // The retry overflows: compaction, then the call again.
            ScriptedReply::context_length_exceeded(),
            // Names the session, so the requests after it still take this route.
            SseReply::new()
                .text("account session.")
                .finish("stop", Some(summary))
                .into(),
            SseReply::new()
                .text("all done")
                .finish("stop", Some(last))
                .into(),
        ],
    );
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut parts = parts(&provider.base_url(), home.path(), cwd.path(), 0);
    parts.options.titles = TitleMode::Model {
        route: None,
        model: None,
    };
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let location = agent.handle().location();
    let outcome = run(&mut agent, "account session").await;
    assert_eq!(outcome.final_text, "all done");
    assert!(
        matches!(outcome.reason, TurnEndReason::Completed),
        "{:?}",
        outcome.reason
    );
    assert_eq!(
        provider.requests().len(),
        7,
        "6 billed calls and the overflow"
    );

    let sent = counted(&[
        (MODEL, title),
        (MODEL, step1),
        (CHILD_MODEL, child),
        (MODEL, failed),
        (MODEL, summary),
        (MODEL, last),
    ]);
    // The turn's usage.
    assert_eq!(as_counts(&outcome.usage_by_model), sent);
    assert_eq!(outcome.usage.requests, 6);
    assert_eq!(outcome.usage.usage.output_tokens, 5 + 10 + 70 + 20 + 40 + 9);
    // The session's, as a listing reads it from the log.
    drop(agent);
    let summary_of_log = SessionSummary::of_file(Path::new(&location)).unwrap();
    assert_eq!(as_counts(&summary_of_log.usage_by_model), sent);
    // The calls no reply carries, each with its purpose.
    let purposes: Vec<String> = usage_calls(&location)
        .iter()
        .map(|c| c["purpose"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(purposes, ["failed-reply", "compaction", "title"]);
}

/// The cost budget spends what the turn reports: a failed reply's usage stops the next step.
#[tokio::test]
async fn the_cost_budget_counts_a_failed_replys_usage() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![
        // 1 M uncached input at $0.14/M: over the $0.10 budget.
        SseReply::new()
            .text("par")
            .usage(wire(1_000_000, 0, 1))
            .end(StreamEnd::DropConnection)
            .into(),
        SseReply::new()
            .tool_call(
                0,
                "b1",
                "bash",
                r#"{"command": "true", "description": "x"}"#,
            )
            .finish("tool_calls", Some(wire(10, 0, 1)))
            .into(),
        SseReply::new()
            .text("never")
            .finish("stop", Some(wire(10, 0, 1)))
            .into(),
    ])
    .await
    .unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts(&provider.base_url(), home.path(), cwd.path(), 0),
        store.as_ref(),
    )
    .unwrap();
    agent.set_budget(TurnBudget {
        max_cost_usd: Some(0.10),
        ..TurnBudget::default()
    });
    let outcome = run(&mut agent, "spend").await;
    match &outcome.reason {
        TurnEndReason::Error { error } => {
            assert_eq!(error.code.as_str(), dsh_agent::BUDGET_COST, "{error}")
        }
        other => panic!("the budget did not stop the turn: {other:?}"),
    }
    assert_eq!(provider.requests().len(), 2);
    assert_eq!(outcome.usage.requests, 2);
    assert_eq!(outcome.usage.usage.input_tokens, 1_000_010);
}

/// A model that sends `chunks` and then never finishes.
struct Hanging {
    chunks: Vec<Chunk>,
}

impl Adapter for Hanging {
    fn stream(&self, _request: GenerateRequest) -> ChunkStream {
        Box::pin(futures::StreamExt::chain(
            futures::stream::iter(self.chunks.clone()),
            futures::stream::pending(),
        ))
    }
}

/// A reply cancelled after its usage arrived was billed: the partial reply carries the usage,
/// or, when there is none, a `usage/call {purpose: cancelled-reply}`.
#[tokio::test]
async fn a_cancelled_reply_whose_usage_arrived_counts() {
    let usage = Usage {
        input_tokens: 400,
        cache_read_tokens: 600,
        output_tokens: 20,
        ..Usage::default()
    };
    for partial in [true, false] {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let mut chunks = Vec::new();
        if partial {
            chunks.push(Chunk::TextDelta {
                index: 0,
                text: "half an answer".into(),
            });
        }
        chunks.push(Chunk::Usage { usage });
        let mut parts = parts("http://127.0.0.1:9", home.path(), cwd.path(), 0);
        let mut adapters = AdapterRegistry::new();
        adapters
            .register("deepseek", Arc::new(Hanging { chunks }))
            .unwrap();
        parts.adapters = adapters;
        let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
        let mut agent = Agent::create(parts, store.as_ref()).unwrap();
        let handle = agent.handle();
        let location = handle.location();
        let mut events = handle.subscribe();
        handle.followup("cancel me").unwrap();
        let running = tokio::spawn(async move { agent.run_turn().await });
        // Cancel once the usage chunk is logged.
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let envelope = events.recv().await.unwrap();
                if let Event::AssistantChunk(c) = &envelope.event {
                    if matches!(c.chunk, Chunk::Usage { .. }) {
                        break;
                    }
                }
            }
        })
        .await
        .unwrap();
        assert!(handle.cancel(false));
        let outcome = tokio::time::timeout(Duration::from_secs(20), running)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(matches!(outcome.reason, TurnEndReason::Aborted { .. }));
        assert_eq!(outcome.usage.requests, 1, "partial: {partial}");
        assert_eq!(outcome.usage.usage, usage, "partial: {partial}");
        let summary = SessionSummary::of_file(Path::new(&location)).unwrap();
        assert_eq!(summary.usage().usage, usage, "partial: {partial}");
        let calls = usage_calls(&location);
        if partial {
            assert!(calls.is_empty(), "{calls:?}");
        } else {
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0]["purpose"], "cancelled-reply");
        }
    }
}
