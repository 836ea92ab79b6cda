//! Property tests of the projection (docs/sessions.md, "Projection") over random valid logs.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role};
use dsh_session::*;
use proptest::prelude::*;

/// Builds a valid log from random choices: message events, empty assistant replies, chunks,
/// boundaries, and replaces citing spans of the history as it stands.
fn build(ops: &[(u8, u16, u16)]) -> Vec<Envelope> {
    let mut events = Vec::new();
    let mut projector = Projector::new();
    for (i, &(kind, a, b)) in ops.iter().enumerate() {
        let seq = events.len() as u64;
        let text = format!("m{i}");
        let mut env = match kind % 7 {
            0 => Envelope::new(Event::UserMessage(Message::user_text(&text, &text))),
            1 | 2 => Envelope::new(Event::AssistantMessage(AssistantMessage {
                turn: 1,
                step: 1,
                message: Message {
                    id: text.clone(),
                    role: Role::Assistant,
                    content: if kind % 7 == 1 {
                        vec![ContentBlock::text(&text)]
                    } else {
                        vec![ContentBlock::text("  ")]
                    },
                    source: MessageSource::Model {
                        provider: "p".into(),
                        model: "m".into(),
                        extra: Default::default(),
                    },
                },
                usage: None,
                interrupted: false,
            })),
            3 => Envelope::new(Event::ToolResult(ToolResult {
                turn: 1,
                step: 1,
                message: Message::tool_result(&text, "c", vec![ContentBlock::text(&text)], false),
                error: None,
                meta: None,
                summary: None,
            })),
            4 => Envelope::new(Event::AssistantChunk(AssistantChunk {
                turn: 1,
                step: 1,
                chunk: Chunk::TextDelta {
                    index: 0,
                    text: text.clone(),
                },
            })),
            5 => Envelope::new(Event::StepEnd(StepRef { turn: 1, step: 1 })),
            _ => {
                let entries = projector.entries();
                if entries.is_empty() {
                    Envelope::new(Event::TurnStart(TurnStart { turn: 1 }))
                } else {
                    let x = a as usize % entries.len();
                    let y = b as usize % entries.len();
                    let (first, last) = (x.min(y), x.max(y));
                    Envelope::new(Event::UserMessage(Message::user_text(&text, "summary")))
                        .with_surface_op(SurfaceOp::Replace {
                            start: entries[first].seq,
                            end: entries[last].seq,
                        })
                }
            }
        };
        env.seq = seq;
        projector.push(&env).expect("valid by construction");
        events.push(env);
    }
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn projecting_twice_gives_the_same_history(ops in prop::collection::vec((0u8..7, 0u16..50, 0u16..50), 0..60)) {
        let events = build(&ops);
        prop_assert_eq!(project(&events).unwrap(), project(&events).unwrap());
    }

    #[test]
    fn appending_only_extends_the_prefix_unless_replacing(ops in prop::collection::vec((0u8..7, 0u16..50, 0u16..50), 1..60)) {
        let events = build(&ops);
        let mut projector = Projector::new();
        for env in &events {
            let before = projector.entries().to_vec();
            projector.push(env).unwrap();
            let after = projector.entries();
            match env.surface_op {
                Some(SurfaceOp::Replace { start, end }) => {
                    let first = before.iter().position(|e| e.seq == start).unwrap();
                    let last = before.iter().position(|e| e.seq == end).unwrap();
                    prop_assert_eq!(&after[..first], &before[..first]);
                    prop_assert_eq!(after[first].seq, env.seq);
                    prop_assert_eq!(&after[first + 1..], &before[last + 1..]);
                }
                _ => {
                    prop_assert_eq!(&after[..before.len()], &before[..]);
                    prop_assert!(after.len() <= before.len() + 1);
                }
            }
        }
    }

    #[test]
    fn jsonl_encoding_round_trips(ops in prop::collection::vec((0u8..7, 0u16..50, 0u16..50), 0..40), pack in any::<bool>()) {
        let events = build(&ops);
        let header = SessionHeader::new("p", "/w", 0);
        let bytes = encode_jsonl(&header, &events, pack).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let log = load_file(&path).unwrap();
        prop_assert_eq!(log.header, header);
        prop_assert_eq!(log.events, events);
    }
}

#[test]
fn empty_assistant_messages_and_chunks_never_project() {
    let events = build(&[(2, 0, 0), (4, 0, 0), (5, 0, 0)]);
    assert!(project(&events).unwrap().is_empty());
}

#[test]
fn replace_citing_nothing_is_an_error() {
    let mut env = Envelope::new(Event::UserMessage(Message::user_text("x", "y")))
        .with_surface_op(SurfaceOp::Replace { start: 5, end: 9 });
    env.seq = 10;
    assert!(matches!(
        Projector::new().push(&env),
        Err(SessionError::ReplaceSpan { seq: 10, .. })
    ));
}
