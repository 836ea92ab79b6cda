//! A running summary of a log's structure: open turn and step, unanswered tool calls, turn
//! ends, title, usage. Fed one event at a time (like the projector); used by crash repair,
//! resume, fork and listing. It never keeps chunks or messages.

use std::collections::BTreeMap;

use dsh_llm::UsageTotals;

use crate::envelope::Envelope;
use crate::event::{Event, RequestHeader, TurnEndReason};
use crate::usage::UsageLedger;

/// A tool call that has no `tool/result` yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCall {
    /// The turn of the call.
    pub turn: u64,
    /// The step of the call.
    pub step: u64,
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// Seq of its `tool/call` event, when one was logged (else the call is only known from the
    /// assistant message that asked for it).
    pub call_seq: Option<u64>,
    /// True once a `tool/started` was logged for it.
    pub started: bool,
}

/// A closed turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedTurn {
    /// The turn number.
    pub turn: u64,
    /// Seq of its `turn/end`.
    pub end_seq: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
}

/// The running summary. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct SessionTracker {
    next_seq: u64,
    last_turn: u64,
    open_turn: Option<u64>,
    open_step: Option<(u64, u64)>,
    open_calls: Vec<OpenCall>,
    closed_turns: Vec<ClosedTurn>,
    title: Option<String>,
    usage: UsageLedger,
    last_header: Option<RequestHeader>,
    last_time: Option<u64>,
    turn_count: u64,
}

impl SessionTracker {
    /// An empty tracker (a log with no events).
    pub fn new() -> Self {
        SessionTracker::default()
    }

    /// Applies one event. Events must come in seq order.
    pub fn push(&mut self, env: &Envelope) {
        self.next_seq = env.seq + 1;
        if env.time.is_some() {
            self.last_time = env.time;
        }
        // Every billed call, by the one rule of `crate::usage`.
        self.usage.push(&env.event);
        match &env.event {
            Event::TurnStart(start) => {
                self.open_turn = Some(start.turn);
                self.last_turn = self.last_turn.max(start.turn);
                self.turn_count += 1;
            }
            Event::TurnEnd(end) => {
                self.open_turn = None;
                self.open_step = None;
                self.last_turn = self.last_turn.max(end.turn);
                self.closed_turns.push(ClosedTurn {
                    turn: end.turn,
                    end_seq: env.seq,
                    reason: end.reason.clone(),
                });
            }
            Event::StepStart(step) => self.open_step = Some((step.turn, step.step)),
            Event::StepEnd(_) => self.open_step = None,
            Event::AssistantMessage(event) if !event.interrupted => {
                for (id, name, _) in event.message.tool_calls() {
                    if !self.open_calls.iter().any(|c| c.call_id == id) {
                        self.open_calls.push(OpenCall {
                            turn: event.turn,
                            step: event.step,
                            call_id: id.to_string(),
                            name: name.to_string(),
                            call_seq: None,
                            started: false,
                        });
                    }
                }
            }
            Event::ToolCall(call) => {
                match self
                    .open_calls
                    .iter_mut()
                    .find(|c| c.call_id == call.call_id)
                {
                    Some(open) => open.call_seq = Some(env.seq),
                    None => self.open_calls.push(OpenCall {
                        turn: call.turn,
                        step: call.step,
                        call_id: call.call_id.clone(),
                        name: call.name.clone(),
                        call_seq: Some(env.seq),
                        started: false,
                    }),
                }
            }
            Event::ToolStarted(started) => {
                if let Some(open) = self
                    .open_calls
                    .iter_mut()
                    .find(|c| c.call_id == started.call_id)
                {
                    open.started = true;
                }
            }
            Event::ToolResult(result) => {
                if let Some(id) = result.call_id() {
                    self.open_calls.retain(|c| c.call_id != id);
                }
            }
            Event::SessionTitle(title) => self.title = Some(title.title.clone()),
            Event::RequestHeader(header) => self.last_header = Some(header.header.clone()),
            _ => {}
        }
    }

    /// The seq the next appended event gets (the number of events so far).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest turn number seen (0 when none).
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// The number the next turn must use (resume continues numbering).
    pub fn next_turn(&self) -> u64 {
        self.last_turn + 1
    }

    /// The turn that started and has not ended.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    /// The `(turn, step)` that started and has not ended.
    pub fn open_step(&self) -> Option<(u64, u64)> {
        self.open_step
    }

    /// Tool calls without a result, in the order they were asked for.
    pub fn open_calls(&self) -> &[OpenCall] {
        &self.open_calls
    }

    /// The closed turns, in log order.
    pub fn closed_turns(&self) -> &[ClosedTurn] {
        &self.closed_turns
    }

    /// Number of `turn/start` events.
    pub fn turn_count(&self) -> u64 {
        self.turn_count
    }

    /// The latest `session/title`.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// Every billed call's usage summed per model, children's included (the rule of
    /// [`crate::usage`]; the key of a reply is the model of its message's source).
    pub fn usage_by_model(&self) -> &BTreeMap<String, UsageTotals> {
        self.usage.by_model()
    }

    /// Usage summed over all models.
    pub fn usage_total(&self) -> UsageTotals {
        self.usage.total()
    }

    /// The last logged request header (the loop compares against it to log `change`).
    pub fn last_header(&self) -> Option<&RequestHeader> {
        self.last_header.as_ref()
    }

    /// The time of the last event that had one.
    pub fn last_time(&self) -> Option<u64> {
        self.last_time
    }

    /// True when nothing is left open: no open turn or step and no unanswered call.
    pub fn is_closed(&self) -> bool {
        self.open_turn.is_none() && self.open_step.is_none() && self.open_calls.is_empty()
    }
}
