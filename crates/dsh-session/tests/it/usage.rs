//! Every billed call counts once in a session's usage (docs/sessions.md, "Cost"): replies,
//! `usage/call` (compaction, title, failed and cancelled replies), a tool's own calls and
//! children, in the tracker (listings, the catalog), the transcript and the ATIF export.
//! Written with the log's own lines, so the same checks run against any build.

use dsh_session::{
    export_atif, export_markdown, load_log_bytes, AtifOptions, Event, ModelPrice, PriceTable,
    SessionTracker,
};
use serde_json::{json, Value};

fn line(event_type: &str, data: Value, ignorable: bool) -> String {
    let mut line = json!({"type": event_type, "data": data});
    if ignorable {
        line["ignorable"] = json!(true);
    }
    line.to_string()
}

fn reply(turn: u64, step: u64, model: &str, usage: Value) -> String {
    line(
        "assistant/message",
        json!({"turn": turn, "step": step, "usage": usage, "message": {
            "id": format!("a{turn}-{step}"), "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "source": {"kind": "model", "provider": "deepseek", "model": model},
        }}),
        false,
    )
}

fn result(call: &str, meta: Value) -> String {
    line(
        "tool/result",
        json!({"turn": 1, "step": 1, "meta": meta, "message": {
            "id": format!("r-{call}"), "role": "user",
            "source": {"kind": "tool", "callId": call},
            "content": [{"type": "tool-result", "toolCallId": call,
                "content": [{"type": "text", "text": "done"}], "isError": false}],
        }}),
        false,
    )
}

fn usage(input: u64, cache_read: u64, output: u64) -> Value {
    json!({"inputTokens": input, "cacheReadTokens": cache_read, "outputTokens": output})
}

fn totals(input: u64, output: u64, requests: u64) -> Value {
    json!({"inputTokens": input, "outputTokens": output, "cacheReadTokens": 0,
        "cacheWriteTokens": 0, "reasoningTokens": 0, "requests": requests})
}

/// A log with one billed call of every kind.
fn every_kind() -> Vec<String> {
    vec![
        line("turn/start", json!({"turn": 1}), false),
        line(
            "request/context",
            json!({"provider": "deepseek", "model": "m-main"}),
            false,
        ),
        // A reply.
        reply(1, 1, "m-main", usage(100, 900, 10)),
        // Calls no assistant message carries.
        line(
            "usage/call",
            json!({"purpose": "compaction", "model": "m-main", "usage": usage(2000, 0, 50),
                "turn": 1, "step": 2}),
            true,
        ),
        line(
            "usage/call",
            json!({"purpose": "failed-reply", "model": "m-main", "usage": usage(400, 600, 20),
                "turn": 1, "step": 2}),
            true,
        ),
        line(
            "usage/call",
            json!({"purpose": "title", "model": "m-title", "usage": usage(30, 0, 5)}),
            true,
        ),
        // A tool's own calls (web_search).
        result(
            "c-search",
            json!({"usage": totals(7, 3, 2),
                "auxiliaryUsage": {"model": "m-search", "usage": totals(7, 3, 2)}}),
        ),
        // A foreground child: its usage in the result, per model.
        result(
            "c-child",
            json!({"childId": "child-1", "agent": "agent-1", "model": "m-child",
                "usage": totals(50, 5, 2),
                "usageByModel": {"m-child": totals(40, 4, 1), "m-search": totals(10, 1, 1)}}),
        ),
        // A failed foreground child, recorded without a model: the session's model.
        line(
            "subagent/usage",
            json!({"childId": "child-2", "agent": "agent-2", "usage": totals(8, 1, 1)}),
            true,
        ),
        line(
            "turn/end",
            json!({"turn": 1, "reason": {"kind": "completed"}}),
            false,
        ),
    ]
}

fn log_of(lines: &[String]) -> dsh_session::LoadedLog {
    let mut text = json!({"type": "session", "version": 0, "id": "usage-test",
        "createdAt": 1, "cwd": "/tmp"})
    .to_string();
    for l in lines {
        text.push('\n');
        text.push_str(l);
    }
    text.push('\n');
    load_log_bytes(text.as_bytes(), "usage-test").expect("the log loads")
}

fn tracker_of(log: &dsh_session::LoadedLog) -> SessionTracker {
    let mut tracker = SessionTracker::new();
    for env in &log.events {
        tracker.push(env);
    }
    tracker
}

fn counts(tracker: &SessionTracker, model: &str) -> (u64, u64, u64, u64) {
    let t = tracker
        .usage_by_model()
        .get(model)
        .copied()
        .unwrap_or_default();
    (
        t.usage.input_tokens,
        t.usage.cache_read_tokens,
        t.usage.output_tokens,
        t.requests,
    )
}

#[test]
fn every_billed_call_counts_once_under_its_model() {
    let log = log_of(&every_kind());
    let tracker = tracker_of(&log);
    // reply + compaction + failed reply + the failed child's record (session model).
    assert_eq!(
        counts(&tracker, "m-main"),
        (100 + 2000 + 400 + 8, 900 + 600, 10 + 50 + 20 + 1, 3 + 1)
    );
    assert_eq!(counts(&tracker, "m-title"), (30, 0, 5, 1));
    // web_search's own calls and the child's share on that model.
    assert_eq!(counts(&tracker, "m-search"), (7 + 10, 0, 3 + 1, 2 + 1));
    // The child's result counts by its `usageByModel`, not again by its `usage`.
    assert_eq!(counts(&tracker, "m-child"), (40, 0, 4, 1));
    let total = tracker.usage_total();
    assert_eq!(total.requests, 4 + 1 + 3 + 1);
    assert_eq!(
        total.usage.input_tokens,
        100 + 2000 + 400 + 8 + 30 + 7 + 10 + 40
    );
}

#[test]
fn logs_without_the_new_records_sum_as_before() {
    // Replies and a tool's own calls only: what every older log holds.
    let lines = vec![
        line("turn/start", json!({"turn": 1}), false),
        reply(1, 1, "m-main", usage(100, 900, 10)),
        reply(1, 2, "m-main", usage(50, 0, 5)),
        result(
            "c-search",
            json!({"auxiliaryUsage": {"model": "m-search", "usage": totals(7, 3, 2)}}),
        ),
        reply(1, 3, "m-other", usage(1, 1, 1)),
    ];
    let tracker = tracker_of(&log_of(&lines));
    assert_eq!(counts(&tracker, "m-main"), (150, 900, 15, 2));
    assert_eq!(counts(&tracker, "m-search"), (7, 0, 3, 2));
    assert_eq!(counts(&tracker, "m-other"), (1, 1, 1, 1));
    assert_eq!(tracker.usage_by_model().len(), 3);
}

#[test]
fn the_records_are_kept_as_written() {
    let log = log_of(&every_kind());
    let calls: Vec<&Event> = log
        .events
        .iter()
        .filter(|e| e.event.event_type() == "usage/call")
        .map(|e| &e.event)
        .collect();
    assert_eq!(calls.len(), 3);
    assert!(log
        .events
        .iter()
        .filter(|e| e.event.event_type() == "usage/call")
        .all(|e| e.ignorable));
    // Written back byte for byte.
    let encoded = dsh_session::encode_jsonl(&log.header, &log.events, false).unwrap();
    let again = load_log_bytes(&encoded, "again").unwrap();
    assert_eq!(again.events, log.events);
}

#[test]
fn the_transcript_shows_the_total_and_each_call_by_purpose() {
    let md = export_markdown(&log_of(&every_kind()));
    assert!(
        md.contains(
            "- usage: 9 requests · input 2595 uncached + 1500 cache read + 0 cache write · output 94 (reasoning 0)\n"
        ),
        "{md}"
    );
    assert!(
        md.contains("_billed call (compaction) to m-main: 2000 input / 50 output tokens_"),
        "{md}"
    );
    assert!(
        md.contains("_billed call (failed-reply) to m-main: 1000 input / 20 output tokens_"),
        "{md}"
    );
    assert!(md.contains("_billed call (title) to m-title"), "{md}");
}

#[test]
fn atif_totals_count_the_calls_that_are_no_step() {
    let price = |input: f64| ModelPrice {
        input_per_mtok: input,
        cache_read_per_mtok: 0.0,
        cache_write_per_mtok: input,
        output_per_mtok: 0.0,
    };
    let mut prices = PriceTable::default();
    for (model, input) in [("m-main", 1.0), ("m-title", 2.0), ("m-search", 4.0)] {
        prices.models.insert(model.into(), price(input));
    }
    let options = AtifOptions {
        agent_name: "dsh".into(),
        agent_version: "test".into(),
        prices,
    };
    let t = export_atif(&log_of(&every_kind()), &[], &options);
    let metrics = &t["final_metrics"];
    // The reply (1000), compaction (2000), failed reply (1000), title (30), search (7).
    assert_eq!(metrics["total_prompt_tokens"], 1000 + 2000 + 1000 + 30 + 7);
    assert_eq!(metrics["total_completion_tokens"], 10 + 50 + 20 + 5 + 3);
    assert_eq!(metrics["total_cached_tokens"], 900 + 600);
    let cost = metrics["total_cost_usd"].as_f64().unwrap();
    let expected = (100.0 + 2000.0 + 400.0) * 1.0 / 1e6 + 30.0 * 2.0 / 1e6 + 7.0 * 4.0 / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    let listed = metrics["extra"]["calls_without_step"].as_array().unwrap();
    let purposes: Vec<&str> = listed
        .iter()
        .map(|c| c["purpose"].as_str().unwrap())
        .collect();
    assert_eq!(purposes, ["compaction", "failed-reply", "title", "tool"]);
}
