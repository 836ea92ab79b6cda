//! Replaying a recorded session: what a log says happened ([`RecordedRun`]), a model that answers
//! with the recorded replies ([`ReplayAdapter`]), and the differences between two runs
//! ([`compare_runs`]).
//!
//! Used by `dsh replay` (no network, no key: the recorded model drives the loop while tools run
//! for real) and by the scenario tests (which serve the same replies over HTTP instead).

use dsh_llm::LockExt;
use std::collections::VecDeque;
use std::sync::Mutex;

use dsh_llm::{
    Adapter, Chunk, ChunkStream, Failure, FailureCode, FinishReason, GenerateRequest, MessageSource,
};
use dsh_session::{Envelope, Event, TurnEndReason};

/// One turn as a log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTurn {
    /// The turn number.
    pub turn: u64,
    /// The user-typed text that started the turn.
    pub prompt: String,
    /// How it ended (`None` when the log has no `turn/end` for it).
    pub end: Option<TurnEndReason>,
    /// Text of the last assistant message with text in the turn.
    pub final_text: String,
    /// Executed tool calls: `(name, raw arguments)`, in log order.
    pub tool_calls: Vec<(String, String)>,
    /// For each tool result, in order: `(call name, is_error)`.
    pub tool_results: Vec<(String, bool)>,
}

/// What a session log says happened, turn by turn, plus the model replies it recorded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordedRun {
    /// The turns in log order.
    pub turns: Vec<RecordedTurn>,
    /// The chunks of every model call, in order; a call ends at its `finish` chunk (a call cut
    /// short by a cancel has none).
    pub calls: Vec<Vec<Chunk>>,
}

impl RecordedRun {
    /// Reads a run from a log's events.
    pub fn from_events(events: &[Envelope]) -> RecordedRun {
        let mut run = RecordedRun::default();
        let mut current_call: Vec<Chunk> = Vec::new();
        let mut call_key: Option<(u64, u64)> = None;
        let mut names_by_call: Vec<(String, String)> = Vec::new();
        for envelope in events {
            match &envelope.event {
                Event::TurnStart(start) => run.turns.push(RecordedTurn {
                    turn: start.turn,
                    prompt: String::new(),
                    end: None,
                    final_text: String::new(),
                    tool_calls: Vec::new(),
                    tool_results: Vec::new(),
                }),
                Event::UserMessage(message) => {
                    if let (Some(turn), MessageSource::User) =
                        (run.turns.last_mut(), &message.source)
                    {
                        if turn.prompt.is_empty() {
                            turn.prompt = message.text();
                        }
                    }
                }
                Event::AssistantChunk(chunk) => {
                    let key = (chunk.turn, chunk.step);
                    if call_key != Some(key) && !current_call.is_empty() {
                        run.calls.push(std::mem::take(&mut current_call));
                    }
                    call_key = Some(key);
                    let is_finish = matches!(chunk.chunk, Chunk::Finish { .. });
                    current_call.push(chunk.chunk.clone());
                    if is_finish {
                        run.calls.push(std::mem::take(&mut current_call));
                    }
                }
                Event::AssistantMessage(message) => {
                    if !current_call.is_empty() {
                        run.calls.push(std::mem::take(&mut current_call));
                    }
                    let text = message.message.text();
                    if let Some(turn) = run.turns.last_mut() {
                        if !text.trim().is_empty() {
                            turn.final_text = text;
                        }
                    }
                }
                Event::ToolCall(call) => {
                    names_by_call.push((call.call_id.clone(), call.name.clone()));
                    if let Some(turn) = run.turns.last_mut() {
                        turn.tool_calls
                            .push((call.name.clone(), call.arguments.clone()));
                    }
                }
                Event::ToolResult(result) => {
                    let call_id = result.call_id().unwrap_or_default().to_string();
                    let name = names_by_call
                        .iter()
                        .find(|(id, _)| *id == call_id)
                        .map(|(_, n)| n.clone())
                        .unwrap_or_default();
                    let is_error = result.message.content.iter().any(crate::is_error_result);
                    if let Some(turn) = run.turns.last_mut() {
                        turn.tool_results.push((name, is_error));
                    }
                }
                Event::TurnEnd(end) => {
                    if !current_call.is_empty() {
                        run.calls.push(std::mem::take(&mut current_call));
                    }
                    call_key = None;
                    if let Some(turn) = run.turns.iter_mut().rev().find(|t| t.turn == end.turn) {
                        turn.end = Some(end.reason.clone());
                    }
                }
                _ => {}
            }
        }
        if !current_call.is_empty() {
            run.calls.push(current_call);
        }
        run
    }
}

/// A model that answers call k with the k-th recorded reply. A recorded call that has no
/// `finish` (it was cut short by a cancel) streams its chunks and then waits until the request
/// is cancelled. Once the recording is used up, calls fail with a clear error.
pub struct ReplayAdapter {
    calls: Mutex<VecDeque<Vec<Chunk>>>,
    hanging: std::sync::Arc<tokio::sync::Notify>,
}

impl ReplayAdapter {
    /// Serves `calls` in order.
    pub fn new(calls: Vec<Vec<Chunk>>) -> Self {
        ReplayAdapter {
            calls: Mutex::new(calls.into()),
            hanging: std::sync::Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Notified each time a replayed call has streamed all it recorded and now waits for a
    /// cancel (the recording was cancelled at that point).
    pub fn hanging(&self) -> std::sync::Arc<tokio::sync::Notify> {
        std::sync::Arc::clone(&self.hanging)
    }

    /// Calls not yet served.
    pub fn remaining(&self) -> usize {
        self.calls.lock_or_recover().len()
    }
}

impl Adapter for ReplayAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let next = self.calls.lock_or_recover().pop_front();
        let Some(chunks) = next else {
            return Box::pin(futures::stream::iter([Chunk::Finish {
                reason: FinishReason::Error {
                    failure: Failure::new(
                        FailureCode::Other("REPLAY_EXHAUSTED".into()),
                        "the recording has no more model replies for this request",
                    ),
                },
            }]));
        };
        let finished = chunks.iter().any(|c| matches!(c, Chunk::Finish { .. }));
        let cancel = request.cancel.clone();
        let hanging = std::sync::Arc::clone(&self.hanging);
        let head = futures::stream::iter(chunks);
        if finished {
            Box::pin(head)
        } else {
            // Stream what was recorded, then hang like the original provider did until the
            // caller cancels; then finish `aborted` as a real adapter would.
            let tail = futures::stream::once(async move {
                hanging.notify_one();
                cancel.cancelled().await;
                Chunk::Finish {
                    reason: FinishReason::Aborted {
                        failure: Failure::new(FailureCode::Aborted, "cancelled"),
                    },
                }
            });
            Box::pin(futures::StreamExt::chain(head, tail))
        }
    }
}

/// One way a replayed run differs from its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The turn where the difference is.
    pub turn: u64,
    /// What differs, for a reader.
    pub what: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "turn {}: {}", self.turn, self.what)
    }
}

fn end_kind(end: &Option<TurnEndReason>) -> String {
    match end {
        Some(TurnEndReason::Error { error }) => format!("error {}", error.code),
        Some(reason) => reason.kind().to_string(),
        None => "unfinished".to_string(),
    }
}

/// Compares what two runs did: turn end reasons (and error codes), final texts, executed tool
/// calls (names and arguments, in order) and which results were errors.
pub fn compare_runs(recorded: &RecordedRun, replayed: &RecordedRun) -> Vec<Difference> {
    let mut out = Vec::new();
    if recorded.turns.len() != replayed.turns.len() {
        out.push(Difference {
            turn: 0,
            what: format!(
                "recorded {} turns, replay ran {}",
                recorded.turns.len(),
                replayed.turns.len()
            ),
        });
    }
    for (rec, rep) in recorded.turns.iter().zip(&replayed.turns) {
        let turn = rec.turn;
        let mut diff = |what: String| out.push(Difference { turn, what });
        if end_kind(&rec.end) != end_kind(&rep.end) {
            diff(format!(
                "ended `{}`, recorded `{}`",
                end_kind(&rep.end),
                end_kind(&rec.end)
            ));
        }
        if rec.final_text.trim() != rep.final_text.trim() {
            diff(format!(
                "final text {:?}, recorded {:?}",
                rep.final_text, rec.final_text
            ));
        }
        if rec.tool_calls != rep.tool_calls {
            let names = |calls: &[(String, String)]| {
                calls
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            diff(format!(
                "tool calls [{}], recorded [{}]",
                names(&rep.tool_calls),
                names(&rec.tool_calls)
            ));
        }
        if rec.tool_results != rep.tool_results {
            let render = |results: &[(String, bool)]| {
                results
                    .iter()
                    .map(|(n, e)| format!("{n}:{}", if *e { "error" } else { "ok" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            diff(format!(
                "tool results [{}], recorded [{}]",
                render(&rep.tool_results),
                render(&rec.tool_results)
            ));
        }
    }
    out
}
