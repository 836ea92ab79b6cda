//! A synthetic session log shared by the benchmark and the peak-memory example.

// Bench code: a failed write aborts the measurement (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::expect_used)]

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::*;

/// Events of a realistic log with `total` events: turns of two steps, each step streaming
/// text deltas (most of the events), an assistant message, a tool call with its result.
pub fn synthetic_events(total: usize) -> Vec<Event> {
    let mut out = Vec::with_capacity(total);
    let mut turn = 0;
    while out.len() < total {
        turn += 1;
        out.push(Event::TurnStart(TurnStart { turn }));
        for step in 1..=2 {
            out.push(Event::StepStart(StepRef { turn, step }));
            if step == 1 {
                out.push(Event::UserMessage(Message::user_text(
                    format!("u{turn}"),
                    format!("please do task number {turn} carefully"),
                )));
            }
            for i in 0..80 {
                out.push(Event::AssistantChunk(AssistantChunk {
                    turn,
                    step,
                    chunk: Chunk::TextDelta {
                        index: 0,
                        text: format!(" token{i}"),
                    },
                }));
            }
            let call = format!("call-{turn}-{step}");
            out.push(Event::AssistantMessage(AssistantMessage {
                turn,
                step,
                message: Message {
                    id: format!("a{turn}-{step}"),
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("I will run a command now. ".repeat(8)),
                        ContentBlock::ToolCall {
                            id: call.clone(),
                            name: "bash".into(),
                            arguments: "{\"command\":\"ls -la\"}".into(),
                        },
                    ],
                    source: MessageSource::Model {
                        provider: "deepseek".into(),
                        model: "deepseek-v4-flash".into(),
                        extra: Default::default(),
                    },
                },
                usage: Some(Usage {
                    input_tokens: 2000,
                    output_tokens: 90,
                    ..Usage::default()
                }),
                interrupted: false,
            }));
            out.push(Event::ToolCall(ToolCall {
                turn,
                step,
                call_id: call.clone(),
                name: "bash".into(),
                arguments: "{\"command\":\"ls -la\"}".into(),
                presentation: None,
            }));
            out.push(Event::ToolStarted(ToolStarted {
                turn,
                step,
                call_id: call.clone(),
            }));
            out.push(Event::ToolResult(ToolResult {
                turn,
                step,
                message: Message::tool_result(
                    format!("r{call}"),
                    &call,
                    vec![ContentBlock::text("file.txt\n".repeat(20))],
                    false,
                ),
                error: None,
                meta: None,
                summary: None,
            }));
            out.push(Event::StepEnd(StepRef { turn, step }));
        }
        out.push(Event::TurnEnd(TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
        }));
    }
    out.truncate(total);
    out
}

/// Writes a log of `total` events with the real writer (packing on) and returns its path.
#[allow(dead_code)]
pub fn write_log(home: &std::path::Path, total: usize, pack: bool) -> std::path::PathBuf {
    let path = session_path(home, "/bench", "bench");
    let mut w =
        JsonlWriter::create(&path, SessionHeader::new("bench", "/bench", 0)).expect("create");
    w.set_packing(pack);
    for event in synthetic_events(total) {
        w.append(event).expect("append");
    }
    w.flush().expect("flush");
    path
}
