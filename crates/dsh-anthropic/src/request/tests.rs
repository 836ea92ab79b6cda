//! The history bytes cache against the plain path: whatever sequence of requests a session
//! makes (steps that append, compactions that replace a span, an edited message under its old
//! id in a new lineage, requests without a lineage or with a purpose, effort, system prompt and
//! tool changes, two sessions interleaved), every body is byte for byte what one `serde_json`
//! pass over the whole [`Body`] gives. The messages cover what the Messages wire form merges,
//! reorders, drops or keeps verbatim: same-role runs, tool results with text after them,
//! system-role messages, images, thinking with and without signatures, `redacted_thinking`,
//! tool calls with raw, empty and invalid arguments, messages left without blocks.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use dsh_llm::{CallConfig, ContentBlock, MessageSource, ToolSchema};
use dsh_test_support::history::{
    history_change, tool_list, tools_of, HistoryChange, SessionHistory,
};
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::models::model_info;

const MODEL: &str = "claude-sonnet-4-5";

/// Text with what JSON must escape; empty text is skipped on the wire.
fn text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\\n\t\u{1}é😀]{0,8}"
}

/// Tool-call arguments as a model may leave them: an object (with or without leading
/// whitespace), nothing, something that is not an object, or broken JSON.
fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        text().prop_map(|t| json!({ "t": t }).to_string()),
        Just(" {\"n\": 1 }".to_string()),
        Just(String::new()),
        Just("[1,2]".to_string()),
        Just("{\"broken\":".to_string()),
    ]
}

fn user() -> impl Strategy<Value = (Role, Vec<ContentBlock>)> {
    (text(), any::<bool>(), prop::option::of(text())).prop_map(|(t, image, second)| {
        let mut content = vec![ContentBlock::text(t)];
        if image {
            content.push(ContentBlock::Image {
                attachment: dsh_test_support::images::red_png(),
            });
        }
        if let Some(second) = second {
            content.push(ContentBlock::text(second));
        }
        (Role::User, content)
    })
}

fn assistant() -> impl Strategy<Value = (Role, Vec<ContentBlock>)> {
    (
        prop::option::of((text(), prop::option::of("[A-Za-z0-9+/=]{0,12}"))),
        prop::option::of(text()),
        prop::collection::vec(arguments(), 0..3),
        0..3u8,
    )
        .prop_map(|(reasoning, t, calls, extra)| {
            let mut content = Vec::new();
            if let Some((text, signature)) = reasoning {
                content.push(ContentBlock::Reasoning { text, signature });
            }
            match extra {
                1 => content.push(ContentBlock::Unknown(
                    json!({"type": "redacted_thinking", "data": "opaque\"=="}),
                )),
                2 => content.push(ContentBlock::Unknown(json!({"type": "server_tool_use"}))),
                _ => {}
            }
            if let Some(t) = t {
                content.push(ContentBlock::text(t));
            }
            for (n, arguments) in calls.into_iter().enumerate() {
                content.push(ContentBlock::ToolCall {
                    id: format!("toolu_{n}"),
                    name: "read".into(),
                    arguments,
                });
            }
            (Role::Assistant, content)
        })
}

fn tool_results() -> impl Strategy<Value = (Role, Vec<ContentBlock>)> {
    (
        prop::collection::vec((text(), any::<bool>(), any::<bool>(), any::<bool>()), 1..3),
        prop::option::of(text()),
    )
        .prop_map(|(results, after)| {
            let mut content = Vec::new();
            // Text before the results: the wire form puts the results first.
            if let Some(after) = after {
                content.push(ContentBlock::text(after));
            }
            for (n, (t, image, empty, error)) in results.into_iter().enumerate() {
                let mut blocks = if empty {
                    Vec::new()
                } else {
                    vec![ContentBlock::text(t.clone()), ContentBlock::text(t)]
                };
                if image {
                    blocks.push(ContentBlock::Image {
                        attachment: dsh_test_support::images::red_png(),
                    });
                }
                content.push(ContentBlock::ToolResult {
                    tool_call_id: format!("toolu_{n}"),
                    content: blocks,
                    is_error: Some(error),
                });
            }
            (Role::User, content)
        })
}

/// One message of any kind the wire form distinguishes.
fn message(id: String) -> impl Strategy<Value = Message> {
    let system = text().prop_map(|t| (Role::System, vec![ContentBlock::text(t)]));
    prop_oneof![2 => user(), 3 => assistant(), 3 => tool_results(), 1 => system].prop_map(
        move |(role, content)| Message {
            id: id.clone(),
            role,
            content,
            source: MessageSource::User,
        },
    )
}

/// One request: which session, what its history undergoes, and its call settings.
#[derive(Debug, Clone)]
struct Step {
    session: usize,
    change: HistoryChange,
    effort: Option<ReasoningEffort>,
    system: bool,
    /// Which tool list it sends ([`tools_of`]). With the system prompt coming and going, a kept
    /// list is sent in both its wire forms (the last tool with or without the breakpoint).
    tools: usize,
    title: bool,
    /// The request carries its history's lineage.
    lineage: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    (1..14usize).prop_flat_map(|count| {
        (0..count)
            .map(|step| {
                (
                    0..2usize,
                    history_change(step, message),
                    prop::option::of(prop_oneof![
                        Just(ReasoningEffort::Off),
                        Just(ReasoningEffort::Low),
                        Just(ReasoningEffort::High)
                    ]),
                    prop::bool::weighted(0.9),
                    0..4usize,
                    prop::bool::weighted(0.1),
                    prop::bool::weighted(0.9),
                )
                    .prop_map(
                        |(session, change, effort, system, tools, title, lineage)| Step {
                            session,
                            change,
                            effort,
                            system,
                            tools,
                            title,
                            lineage,
                        },
                    )
            })
            .collect::<Vec<_>>()
    })
}

fn request(
    session: usize,
    messages: Arc<Vec<Message>>,
    lineage: HistoryLineage,
    step: &Step,
) -> GenerateRequest {
    let mut config = CallConfig::new("anthropic", MODEL);
    config.reasoning_effort = step.effort;
    config.temperature = Some(0.5);
    GenerateRequest {
        config: config.prepare(&model_info(MODEL)).unwrap(),
        system: if step.system {
            "You are dsh, \"a coding agent\".".into()
        } else {
            String::new()
        },
        messages,
        tools: tools_of(step.tools),
        cancel: CancellationToken::new(),
        session_id: Some(format!("session-{session}")),
        purpose: step.title.then_some(Purpose::SessionTitle),
        history_lineage: step.lineage.then_some(lineage),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cached_bodies_equal_whole_serialisations(steps in steps()) {
        let budgets = ThinkingBudgets::default();
        let cache = HistoryBytes::default();
        let mut histories = [SessionHistory::default(), SessionHistory::default()];
        for step in &steps {
            let history = &mut histories[step.session];
            history.apply(&step.change);
            let request = request(step.session, Arc::clone(&history.messages), history.lineage, step);
            let cached = build_request_body_cached(&request, &budgets, &cache)
                .unwrap()
                .to_vec();
            let whole = build_request_body(&request, &budgets).unwrap();
            prop_assert_eq!(
                String::from_utf8(cached).unwrap(),
                String::from_utf8(whole).unwrap(),
                "step {:?}", step
            );
        }
    }
}

fn plain_step() -> Step {
    Step {
        session: 0,
        change: HistoryChange::Same,
        effort: None,
        system: true,
        tools: 1,
        title: false,
        lineage: true,
    }
}

fn assistant_text(id: &str, text: &str) -> Message {
    Message {
        id: id.into(),
        role: Role::Assistant,
        content: vec![ContentBlock::text(text)],
        source: MessageSource::User,
    }
}

#[test]
fn a_step_reuses_the_bytes_of_the_closed_wire_messages() {
    let cache = HistoryBytes::default();
    let budgets = ThinkingBudgets::default();
    let lineage = HistoryLineage::new();
    let step = plain_step();
    let first = Arc::new(vec![
        Message::user_text("m0", "one"),
        assistant_text("m1", "two"),
        Message::user_text("m2", "three"),
    ]);
    let body = build_request_body_cached(
        &request(0, Arc::clone(&first), lineage, &step),
        &budgets,
        &cache,
    )
    .unwrap()
    .to_vec();
    let mut kept = cache.take("session-0", |_| true).unwrap();
    // m0 and m1 are closed (each followed by the other role); m2 is the open last message,
    // written with the breakpoint into the body and not kept.
    assert_eq!(
        kept.written.cuts(),
        vec![(1, kept.written.cuts()[0].1), (2, kept.written.bytes.len())]
    );
    assert!(kept.open.is_empty());
    let open = br#",{"role":"user","content":[{"type":"text","text":"three","cache_control":{"type":"ephemeral"}}]}],"#;
    let at = body.windows(open.len()).position(|w| w == open).unwrap();
    // The array's first element goes without the comma written before it.
    assert!(body[..at].ends_with(&kept.written.bytes[1..]));
    // Marks the kept bytes: what is reused keeps the mark, what is written again loses it.
    let marked = vec![b'#'; kept.written.bytes.len()];
    kept.written.bytes.clone_from(&marked);

    // A user message merges into the open m2: m2 is written again, without its breakpoint.
    let mut longer = first.as_ref().clone();
    longer.push(Message::user_text("m3", "four"));
    kept.extend_to(&longer, Some(lineage)).unwrap();
    assert_eq!(
        kept.written.bytes, marked,
        "m0 and m1 are not written again"
    );
    assert_eq!(
        kept.open,
        br#",{"role":"user","content":[{"type":"text","text":"three"},{"type":"text","text":"four","cache_control":{"type":"ephemeral"}}]}"#
    );

    // The reply closes the merged user turn: it becomes final, after the marked bytes.
    longer.push(assistant_text("m4", "five"));
    kept.extend_to(&longer, Some(lineage)).unwrap();
    assert!(kept.written.bytes.starts_with(&marked));
    assert_eq!(
        &kept.written.bytes[marked.len()..],
        br#",{"role":"user","content":[{"type":"text","text":"three"},{"type":"text","text":"four"}]}"#
    );
    assert_eq!(kept.written.cuts().len(), 3);
    assert_eq!(kept.written.cuts()[2], (4, kept.written.bytes.len()));

    // Under the same lineage, a different id at message `n` keeps the bytes of the wire
    // messages closed by a message before `n`: the message that closed one must be shared too.
    let ends: Vec<usize> = kept.written.cuts().iter().map(|&(_, end)| end).collect();
    let mut changed = longer.clone();
    for (n, kept_end) in [(3, ends[1]), (2, ends[0]), (1, 0)] {
        changed[n] = Message {
            id: format!("other-{n}"),
            ..changed[n].clone()
        };
        kept.written.bytes.fill(b'#');
        kept.extend_to(&changed, Some(lineage)).unwrap();
        assert!(
            kept.written.bytes[..kept_end].iter().all(|&b| b == b'#'),
            "{n}"
        );
        assert!(!kept.written.bytes[kept_end..].contains(&b'#'), "{n}");
        assert_eq!(kept.written.cuts().len(), 3, "{n}");
    }

    // Another lineage, or none, reuses nothing.
    for other in [Some(HistoryLineage::new()), None] {
        kept.written.bytes.fill(b'#');
        kept.extend_to(&changed, other).unwrap();
        assert!(!kept.written.bytes.contains(&b'#'), "{other:?}");
    }
}

#[test]
fn calls_without_session_lineage_or_with_a_purpose_leave_the_cache_alone() {
    let cache = HistoryBytes::default();
    let budgets = ThinkingBudgets::default();
    let lineage = HistoryLineage::new();
    let messages = Arc::new(vec![
        Message::user_text("m0", "one"),
        assistant_text("m1", "two"),
    ]);
    let step = plain_step();
    let mut no_session = request(0, Arc::clone(&messages), lineage, &step);
    no_session.session_id = None;
    let no_lineage = request(
        0,
        Arc::clone(&messages),
        lineage,
        &Step {
            lineage: false,
            ..plain_step()
        },
    );
    let title = request(
        0,
        Arc::clone(&messages),
        lineage,
        &Step {
            title: true,
            ..plain_step()
        },
    );
    for request in [no_session, no_lineage, title] {
        let body = build_request_body_cached(&request, &budgets, &cache).unwrap();
        assert_eq!(
            body.to_vec(),
            build_request_body(&request, &budgets).unwrap()
        );
        assert!(cache.take("session-0", |_| true).is_none());
    }
    let ordinary = request(0, messages, lineage, &step);
    build_request_body_cached(&ordinary, &budgets, &cache).unwrap();
    assert!(cache.take("session-0", |_| true).is_some());
}

/// Measures a step near the context window, plain against cached (docs/PERFORMANCE.md):
/// `cargo test -p dsh-anthropic --release --lib measure_a_long_session -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check: run it by name"]
fn measure_a_long_session() {
    let budgets = ThinkingBudgets::default();
    let cache = HistoryBytes::default();
    let lineage = HistoryLineage::new();
    // Tool output as it comes: lines with quotes, backslashes and tabs to escape.
    let output = "fn main() {\n\tprintln!(\"hello \\\\ world\");\n}\n".repeat(130);
    let mut history = vec![Message::user_text("u0", "Refactor the crate.")];
    let mut n = 0;
    let mut body_len = 0;
    while body_len < 6_000_000 {
        n += 1;
        history.push(Message {
            id: format!("a{n}"),
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning {
                    text: "Look at the next file.".into(),
                    signature: Some("EqQBCkgIARABGAIiQL+/9x=".into()),
                },
                ContentBlock::ToolCall {
                    id: format!("toolu_{n}"),
                    name: "read".into(),
                    arguments: format!("{{\"file_path\":\"src/f{n}.rs\"}}"),
                },
            ],
            source: MessageSource::User,
        });
        history.push(Message::tool_result(
            format!("t{n}"),
            format!("toolu_{n}"),
            vec![ContentBlock::text(output.clone())],
            false,
        ));
        body_len = history.len() * (output.len() + 200);
    }
    let step = plain_step();
    let warm = request(0, Arc::new(history.clone()), lineage, &step);
    let body = build_request_body_cached(&warm, &budgets, &cache).unwrap();
    let rounds = 20u32;
    let mut plain = std::time::Duration::ZERO;
    let mut cached = std::time::Duration::ZERO;
    for round in 0..rounds {
        history.push(Message::tool_result(
            format!("x{round}"),
            "toolu_1",
            vec![ContentBlock::text("ok")],
            false,
        ));
        let request = request(0, Arc::new(history.clone()), lineage, &step);
        let started = std::time::Instant::now();
        let whole = build_request_body(&request, &budgets).unwrap();
        plain += started.elapsed();
        let started = std::time::Instant::now();
        let reused = build_request_body_cached(&request, &budgets, &cache).unwrap();
        cached += started.elapsed();
        assert_eq!(whole, reused.to_vec());
    }
    println!(
        "{} messages, {} bytes: plain {:?} per step, cached {:?} per step",
        history.len(),
        body.len(),
        plain / rounds,
        cached / rounds
    );
}

#[test]
fn a_step_with_the_same_tool_list_reuses_its_written_bytes() {
    let cache = HistoryBytes::default();
    let budgets = ThinkingBudgets::default();
    let lineage = HistoryLineage::new();
    let messages = Arc::new(vec![Message::user_text("m0", "hello")]);
    let kept = Arc::new(tool_list(2));
    let send = |tools: &Arc<Vec<ToolSchema>>, system: bool| {
        let step = Step {
            system,
            ..plain_step()
        };
        let mut request = request(0, Arc::clone(&messages), lineage, &step);
        request.tools = Arc::clone(tools);
        let body = build_request_body_cached(&request, &budgets, &cache)
            .unwrap()
            .to_vec();
        assert_eq!(body, build_request_body(&request, &budgets).unwrap());
        let history = cache.take("session-0", |_| true).unwrap();
        let written = history.tools.kept().map(|json| json.get().as_ptr());
        cache.put("session-0", history);
        written
    };
    let first = send(&kept, true);
    assert!(first.is_some());
    assert_eq!(send(&kept, true), first, "the same list was written again");
    // Without a system prompt the last tool carries the breakpoint: the same list is written
    // in its other form; so are the same contents in another `Arc` and another list. What goes
    // out is each time the plain path's body (checked in `send`).
    let marked = send(&kept, false);
    assert_ne!(marked, first);
    assert_eq!(send(&kept, false), marked);
    assert_ne!(send(&Arc::new(tool_list(2)), false), marked);
    assert!(send(&Arc::new(tool_list(3)), true).is_some());
    send(&Arc::new(Vec::new()), true);
}
