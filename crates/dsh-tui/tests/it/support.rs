//! Tool cards as the session protocol makes them: logged events (`tool/call`, `tool/started`,
//! `tool/result`) folded by a [`Transcript`], whose `ViewProjector` gives the card its state,
//! presentation and summary, as in a live session.

use dsh_llm::{ContentBlock, Message};
use dsh_session::{Envelope, Event, ToolCall, ToolError, ToolResult, ToolStarted};
use dsh_tui::{Cell, ToolCard, Transcript};

/// How the call went.
pub(crate) enum Outcome<'a> {
    /// Started, no result yet.
    Running,
    /// Ended with `output` and `meta`.
    Done(&'a str, serde_json::Value),
    /// Ended with error `code` and `message`.
    Failed(&'a str, &'a str),
}

fn env(seq: u64, event: Event) -> Envelope {
    let mut envelope = Envelope::new(event);
    envelope.seq = seq;
    envelope
}

/// The card of a call of tool `name` with `arguments` that went as `outcome`.
pub(crate) fn tool_card(name: &str, arguments: &str, outcome: Outcome<'_>) -> ToolCard {
    let mut t = Transcript::new();
    t.apply(&env(
        1,
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "call_1".into(),
            name: name.into(),
            arguments: arguments.into(),
            presentation: None,
        }),
    ));
    t.apply(&env(
        2,
        Event::ToolStarted(ToolStarted {
            turn: 1,
            step: 1,
            call_id: "call_1".into(),
        }),
    ));
    let result = |text: String, error: Option<ToolError>, meta| {
        let failed = error.is_some();
        let message = Message::tool_result("m1", "call_1", vec![ContentBlock::text(text)], failed);
        Event::ToolResult(ToolResult {
            turn: 1,
            step: 1,
            message,
            error,
            meta,
            summary: None,
        })
    };
    match outcome {
        Outcome::Running => {}
        Outcome::Done(output, meta) => t.apply(&env(3, result(output.into(), None, Some(meta)))),
        Outcome::Failed(code, message) => {
            let error = ToolError {
                code: code.into(),
                name: Some(name.into()),
                message: Some(message.into()),
            };
            t.apply(&env(
                3,
                result(format!("Error: {message}"), Some(error), None),
            ))
        }
    }
    match t.cells.pop() {
        Some(Cell::Tool(card)) => card,
        other => panic!("no card: {other:?}"),
    }
}

/// [`tool_card`] as a cell.
pub(crate) fn tool_cell(name: &str, arguments: &str, outcome: Outcome<'_>) -> Cell {
    Cell::Tool(tool_card(name, arguments, outcome))
}
