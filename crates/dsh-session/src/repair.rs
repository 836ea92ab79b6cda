//! Crash repair (docs/sessions.md, "Durability and crash repair"): closing what a dead process left
//! open, by appending only.
//!
//! Repair never truncates or rewrites history. For a log whose last turn is open it appends,
//! in order:
//! 1. for every tool call without a result (in the order the model asked for them), a
//!    `tool/result` with `isError: true` and `error.code`
//!    - [`TOOL_NOT_STARTED`] when the body is known not to have started: the log was written
//!      by this build (header `writer: "dsh-rs"`) and has no `tool/started` for the call. The
//!      loop appends and fsyncs `tool/started` right before running a body, so its absence
//!      proves the body never ran;
//!    - [`TOOL_OUTCOME_UNKNOWN`] otherwise: the body started (or, in a log from a writer that
//!      does not log `tool/started`, may have started), so its side effects are unknown;
//! 2. `step/end` for the open step;
//! 3. `turn/end {reason: {kind: interrupted}}` for the open turn.
//!
//! (A torn last line is not history: the JSONL store moves its bytes to a side file before
//! appending; see [`crate::JsonlStore`].)

use dsh_llm::{ContentBlock, Message};

use crate::envelope::{Envelope, SessionHeader};
use crate::event::{
    Event, StepRef, ToolError, ToolResult, TurnEnd, TurnEndReason, TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
};
use crate::state::SessionTracker;

/// The closers crash repair would append to a log in state `tracker`, in order (seqs are not
/// yet assigned). Empty when nothing is open.
pub fn closers(header: &SessionHeader, tracker: &SessionTracker) -> Vec<Envelope> {
    let mut out = Vec::new();
    let trust_started_marker = header.written_by_us();
    let fallback = tracker.open_step().or(tracker.open_turn().map(|t| (t, 0)));
    for call in tracker.open_calls() {
        let (code, text) = if trust_started_marker && !call.started {
            (
                TOOL_NOT_STARTED,
                format!(
                    "Error: tool call `{}` was not started: the session was interrupted before it ran",
                    call.name
                ),
            )
        } else {
            (
                TOOL_OUTCOME_UNKNOWN,
                format!(
                    "Error: the session was interrupted while tool `{}` was running; its outcome is unknown (it may or may not have taken effect)",
                    call.name
                ),
            )
        };
        let (turn, step) = if call.turn == 0 {
            fallback.unwrap_or((0, 0))
        } else {
            (call.turn, call.step)
        };
        let message = Message::tool_result(
            uuid::Uuid::new_v4().to_string(),
            call.call_id.clone(),
            vec![ContentBlock::text(text)],
            true,
        );
        let mut env = Envelope::new(Event::ToolResult(ToolResult {
            turn,
            step,
            message,
            error: Some(ToolError {
                code: code.to_string(),
                name: Some(call.name.clone()),
                message: None,
            }),
            meta: None,
            summary: None,
        }));
        if let Some(seq) = call.call_seq {
            env = env.with_sources(vec![seq]);
        }
        out.push(env);
    }
    if let Some((turn, step)) = tracker.open_step() {
        out.push(Envelope::new(Event::StepEnd(StepRef { turn, step })));
    }
    if let Some(turn) = tracker.open_turn() {
        out.push(Envelope::new(Event::TurnEnd(TurnEnd {
            turn,
            reason: TurnEndReason::Interrupted,
        })));
    }
    out
}
