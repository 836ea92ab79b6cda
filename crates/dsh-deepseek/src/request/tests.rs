//! The history bytes cache against the plain serialisation: whatever sequence of requests a
//! session makes (steps that append, compactions that replace a span, an edited message under
//! its old id in a new lineage, requests without a lineage, effort and system prompt changes,
//! two sessions interleaved, images waiting after tool results), every body is byte for byte
//! what one `serde_json` pass over the whole body gives.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use dsh_llm::{
    CallConfig, ContentBlock, HistoryLineage, Message, MessageSource, ReasoningEffort, Role,
};
use dsh_test_support::history::{
    history_change, tool_list, tools_of, HistoryChange, SessionHistory,
};
use proptest::prelude::*;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::models::model_info;

/// The body as one struct, the way it was serialised before the cache existed.
#[derive(Serialize)]
struct WholeBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(flatten)]
    tail: BodyTail<'a>,
}

fn whole_body(request: &GenerateRequest, quirks: &OpenAiQuirks) -> Vec<u8> {
    let model = wire_model(request);
    let mode = thinking_mode(request, model);
    let thinking_on = matches!(mode, ThinkingMode::Enabled(_));
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(WireMessage::System {
            content: Cow::Borrowed(request.system.as_str()),
        });
    }
    let mut images = Vec::new();
    for message in request.messages.iter() {
        push_message(
            &mut messages,
            &mut images,
            message,
            thinking_on,
            quirks.send_reasoning_content,
        );
    }
    flush_tool_images(&mut messages, &mut images);
    let tools = (!request.tools.is_empty())
        .then(|| serde_json::value::to_raw_value(&wire_tools(&request.tools)).unwrap());
    serde_json::to_vec(&WholeBody {
        model,
        messages,
        tail: body_tail(request, quirks, mode, tools.as_deref()),
    })
    .unwrap()
}

/// Text with what JSON must escape.
fn text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\\n\t\u{1}é😀]{0,10}"
}

/// One message of any kind the wire form distinguishes.
fn message(id: String) -> impl Strategy<Value = Message> {
    let user = (text(), any::<bool>(), any::<bool>()).prop_map(|(t, image, second)| {
        let mut content = vec![ContentBlock::text(t.clone())];
        if image {
            content.push(ContentBlock::Image {
                attachment: dsh_test_support::images::red_png(),
            });
        }
        if second {
            content.push(ContentBlock::text(t));
        }
        (Role::User, content)
    });
    let assistant = (
        prop::option::of(text()),
        prop::option::of(text()),
        0..3usize,
    )
        .prop_map(|(t, reasoning, calls)| {
            let mut content = Vec::new();
            if let Some(r) = reasoning {
                content.push(ContentBlock::Reasoning {
                    text: r,
                    signature: None,
                });
            }
            if let Some(t) = t {
                content.push(ContentBlock::text(t));
            }
            for call in 0..calls {
                content.push(ContentBlock::ToolCall {
                    id: format!("c{call}"),
                    name: "read".into(),
                    arguments: format!("{{\"n\":{call}}}"),
                });
            }
            (Role::Assistant, content)
        });
    let tool = (text(), any::<bool>(), any::<bool>()).prop_map(|(t, image, empty)| {
        let mut blocks = if empty {
            Vec::new()
        } else {
            vec![ContentBlock::text(t)]
        };
        if image {
            blocks.push(ContentBlock::Image {
                attachment: dsh_test_support::images::red_png(),
            });
        }
        (
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_call_id: "c0".into(),
                content: blocks,
                is_error: None,
            }],
        )
    });
    let system = text().prop_map(|t| (Role::System, vec![ContentBlock::text(t)]));
    prop_oneof![2 => user, 3 => assistant, 4 => tool, 1 => system].prop_map(
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
    title: bool,
    /// The request carries its history's lineage.
    lineage: bool,
    /// Which tool list it sends ([`tools_of`]).
    tools: usize,
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
                        Just(ReasoningEffort::High)
                    ]),
                    prop::bool::weighted(0.9),
                    prop::bool::weighted(0.1),
                    prop::bool::weighted(0.9),
                    0..4usize,
                )
                    .prop_map(
                        |(session, change, effort, system, title, lineage, tools)| Step {
                            session,
                            change,
                            effort,
                            system,
                            title,
                            lineage,
                            tools,
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
    let model = "deepseek-v4-flash";
    let mut config = CallConfig::new("deepseek", model);
    config.reasoning_effort = step.effort;
    GenerateRequest {
        config: config.prepare(&model_info(model)).unwrap(),
        system: if step.system {
            "You are dsh, \"a coding agent\".".into()
        } else {
            String::new()
        },
        messages,
        tools: tools_of(step.tools),
        cancel: CancellationToken::new(),
        session_id: Some(format!("session-{session}")),
        purpose: step.title.then_some(dsh_llm::Purpose::SessionTitle),
        history_lineage: step.lineage.then_some(lineage),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cached_bodies_equal_whole_serialisations(steps in steps(), no_reasoning in any::<bool>()) {
        let quirks = OpenAiQuirks {
            send_reasoning_content: !no_reasoning,
            ..OpenAiQuirks::default()
        };
        let cache = HistoryBytes::default();
        let mut histories = [SessionHistory::default(), SessionHistory::default()];
        for step in &steps {
            let history = &mut histories[step.session];
            history.apply(&step.change);
            let request = request(step.session, Arc::clone(&history.messages), history.lineage, step);
            let cached = build_request_body_cached(&request, &quirks, &cache)
                .unwrap()
                .to_vec();
            let whole = whole_body(&request, &quirks);
            prop_assert_eq!(
                String::from_utf8(cached).unwrap(),
                String::from_utf8(whole).unwrap(),
                "step {:?}", step
            );
        }
    }
}

/// A step of session 0 that keeps its history and lineage, with a system prompt.
fn plain_step() -> Step {
    Step {
        session: 0,
        change: HistoryChange::Same,
        effort: None,
        system: true,
        title: false,
        lineage: true,
        tools: 0,
    }
}

/// The message shape of a request with the default quirks and effort.
fn default_shape() -> HistoryShape {
    HistoryShape {
        thinking_on: true,
        send_reasoning: true,
    }
}

#[test]
fn a_step_reuses_the_bytes_of_the_messages_it_shares_with_the_last_one() {
    let cache = HistoryBytes::default();
    let quirks = OpenAiQuirks::default();
    let step = plain_step();
    let lineage = HistoryLineage::new();
    let first: Vec<Message> = (0..3)
        .map(|n| Message::user_text(format!("m{n}"), "x".repeat(10)))
        .collect();
    let first = Arc::new(first);
    let request_of =
        |messages: &Arc<Vec<Message>>| request(0, Arc::clone(messages), lineage, &step);
    build_request_body_cached(&request_of(&first), &quirks, &cache).unwrap();
    let mut longer = first.as_ref().clone();
    longer.push(Message::user_text("m3", "y"));
    let shape = default_shape();
    let mut kept = cache.take("session-0", |kept| kept.shape == shape).unwrap();
    // Marks the kept bytes: what is reused keeps the mark, what is written again loses it.
    let marked = vec![b'#'; kept.written.bytes.len()];
    kept.written.bytes.clone_from(&marked);
    kept.extend_to(&longer, Some(lineage)).unwrap();
    assert!(
        kept.written.bytes.starts_with(&marked),
        "the three old messages are not written again"
    );
    assert_eq!(
        &kept.written.bytes[marked.len()..],
        br#",{"role":"user","content":"y"}"#
    );
    assert_eq!(kept.written.cuts().len(), 4);
    // Under the same lineage, a different id at the second message keeps only the first's bytes.
    let first_end = kept.written.cuts()[0].1;
    let mut changed = longer.clone();
    changed[1] = Message::user_text("other", "z");
    kept.extend_to(&changed, Some(lineage)).unwrap();
    assert!(kept.written.bytes[..first_end].iter().all(|&b| b == b'#'));
    assert!(!kept.written.bytes[first_end..].contains(&b'#'));
    // Another lineage, or none, reuses nothing.
    for other in [Some(HistoryLineage::new()), None] {
        kept.written.bytes.fill(b'#');
        kept.extend_to(&changed, other).unwrap();
        assert!(!kept.written.bytes.contains(&b'#'), "{other:?}");
    }
}

#[test]
fn the_history_goes_into_the_body_uncopied_and_a_body_in_flight_keeps_its_bytes() {
    let cache = HistoryBytes::default();
    let quirks = OpenAiQuirks::default();
    let step = plain_step();
    let lineage = HistoryLineage::new();
    let mut messages: Vec<Message> = (0..3)
        .map(|n| Message::user_text(format!("m{n}"), "x".repeat(100)))
        .collect();
    let request_of = |messages: &[Message]| request(0, Arc::new(messages.to_vec()), lineage, &step);
    // Where the kept bytes are; with `room`, after making room to grow (so that a write in
    // place keeps the buffer where it is), which only a buffer no body holds may do.
    let kept_buffer = |room: bool| {
        let mut kept = cache
            .take("session-0", |_| true)
            .unwrap_or_else(|| SerializedHistory::new(default_shape()));
        if room {
            kept.written.bytes.reserve(1 << 16);
        }
        let at = kept.written.bytes.as_ptr();
        cache.put("session-0", kept);
        at
    };
    kept_buffer(true);

    let first = build_request_body_cached(&request_of(&messages), &quirks, &cache).unwrap();
    let first_bytes = first.to_vec();
    let held = kept_buffer(false);
    // The next step while the first body is still held (a request in flight): its bytes stay.
    messages.push(Message::user_text("m3", "y"));
    let second = build_request_body_cached(&request_of(&messages), &quirks, &cache).unwrap();
    assert_eq!(
        first.to_vec(),
        first_bytes,
        "the body in flight kept its bytes"
    );
    assert_eq!(second.to_vec(), whole_body(&request_of(&messages), &quirks));
    assert_ne!(
        kept_buffer(false),
        held,
        "written to a copy while the first body held them"
    );
    drop((first, second));
    // Once no request holds them, the next step writes into the same buffer.
    let free = kept_buffer(true);
    messages.push(Message::user_text("m4", "z"));
    let third = build_request_body_cached(&request_of(&messages), &quirks, &cache).unwrap();
    assert_eq!(third.to_vec(), whole_body(&request_of(&messages), &quirks));
    drop(third);
    assert_eq!(kept_buffer(false), free, "written in place");
}

#[test]
fn a_step_with_the_same_tool_list_reuses_its_written_bytes() {
    let cache = HistoryBytes::default();
    let quirks = OpenAiQuirks::default();
    let lineage = HistoryLineage::new();
    let messages = Arc::new(vec![Message::user_text("m0", "hello")]);
    let kept = Arc::new(tool_list(2));
    let send = |tools: &Arc<Vec<ToolSchema>>| {
        let mut request = request(0, Arc::clone(&messages), lineage, &plain_step());
        request.tools = Arc::clone(tools);
        let body = build_request_body_cached(&request, &quirks, &cache)
            .unwrap()
            .to_vec();
        assert_eq!(body, whole_body(&request, &quirks));
        let history = cache.take("session-0", |_| true).unwrap();
        let written = history.tools.kept().map(|json| json.get().as_ptr());
        cache.put("session-0", history);
        written
    };
    let first = send(&kept);
    assert!(first.is_some());
    assert_eq!(send(&kept), first, "the same list was written again");
    // The same contents in another `Arc` (a rebuilt registry) are written anew, and so is a
    // different list; what goes out is each time the whole serialisation (checked in `send`).
    assert_ne!(send(&Arc::new(tool_list(2))), first);
    assert!(send(&Arc::new(tool_list(3))).is_some());
    send(&Arc::new(Vec::new()));
}
