//! View events: what a front end shows of a session, derived from its log.
//!
//! A [`ViewProjector`] turns session events, in log order, into [`ViewEvent`]s. It is the only
//! place that decides what a tool card's state is, what a turn's end means to the user, which
//! model a step called and which child state a child's end is. Front ends feed it the live
//! subscription (`AgentHandle::subscribe`) or the events of a stored log; because the input is
//! the log either way, a resumed session shows the same events the live view showed: undo,
//! model switches, approvals and retries included, in log order.

use std::collections::HashMap;

use dsh_agent::{is_error_result, Presenter};
use dsh_llm::{Chunk, ContentBlock, Message, MessageSource};
use dsh_session::{BilledKind, Envelope, Event, PriceTable, TurnEndReason, UsageLedger};
use dsh_tools::{ResultSummary, ToolPresentation, ToolProgress, ToolView};
use serde::Serialize;
use serde_json::Value;

/// Where a tool call is in its life. Every front end shows these states, and only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CardState {
    /// The model asked for the call; it has not started (policies and hooks run now).
    Pending,
    /// The user is asked to approve it; nothing runs until they answer.
    AwaitingApproval,
    /// Its body runs.
    Running,
    /// It ended and gave the model a result.
    Done,
    /// It ended with an error.
    Failed,
    /// It was refused: by the user, a policy, a hook or the preset.
    Denied,
    /// The turn was cancelled before it ended.
    Cancelled,
}

impl CardState {
    /// The wire name (`pending`, `awaitingApproval`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CardState::Pending => "pending",
            CardState::AwaitingApproval => "awaitingApproval",
            CardState::Running => "running",
            CardState::Done => "done",
            CardState::Failed => "failed",
            CardState::Denied => "denied",
            CardState::Cancelled => "cancelled",
        }
    }

    /// True once the call has its result.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            CardState::Done | CardState::Failed | CardState::Denied | CardState::Cancelled
        )
    }

    /// The state a `tool/result` with this error code (`None`: no error) leaves the card in.
    pub fn of_result(error_code: Option<&str>) -> CardState {
        match error_code {
            None => CardState::Done,
            Some("PERMISSION_DENIED") => CardState::Denied,
            Some("ABORTED") | Some(dsh_session::TOOL_NOT_STARTED) => CardState::Cancelled,
            Some(_) => CardState::Failed,
        }
    }
}

/// How a turn (the session's or a child's) ended, as every front end names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EndState {
    /// It did what was asked.
    Completed,
    /// It was cancelled, or the process stopped while it ran.
    Cancelled,
    /// It failed: an error, a block, or a reply cut at the output limit (its tool calls were
    /// dropped, so the work is not done).
    Failed,
}

impl EndState {
    /// The one classification of a turn's end. `MaxTokens` is a failure (the reply was cut
    /// and its tool calls dropped); `Interrupted` (written by crash repair) is a cancel.
    pub fn of(reason: &TurnEndReason) -> EndState {
        match reason {
            TurnEndReason::Completed => EndState::Completed,
            TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => EndState::Cancelled,
            TurnEndReason::Blocked { .. }
            | TurnEndReason::Error { .. }
            | TurnEndReason::MaxTokens => EndState::Failed,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndState::Completed => "completed",
            EndState::Cancelled => "cancelled",
            EndState::Failed => "failed",
        }
    }
}

/// A tool call as front ends show it: the tool's own presentation, the state, and once it
/// ended, the tool's summary and the error.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Card {
    /// The call's id.
    pub call_id: String,
    /// The tool's name (for filters and tests; never for presentation).
    pub tool: String,
    /// How the tool presents the call: title, subject, kind, view, locations.
    pub presentation: ToolPresentation,
    /// The arguments as the model wrote them (a JSON text, possibly invalid).
    pub arguments: String,
    /// Where the call is.
    pub state: CardState,
    /// The tool's one-line summary of the result, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<ResultSummary>,
    /// The result's error code, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The result text (what the model got), once the call ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The result's details for front ends (`meta`: diffs, exit code, sources), once ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// How far the running call has come, as it last reported (`tool/progress`: an MCP
    /// server's progress notifications).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ToolProgress>,
}

/// A session's goal as front ends show it (docs/goals.md; dsh's goal fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalView {
    /// The goal's id.
    pub id: String,
    /// What is to be achieved.
    pub objective: String,
    /// `active`, `paused`, `blocked` or `complete`.
    pub phase: String,
    /// Continuation rounds started.
    pub rounds_started: u64,
    /// The round cap.
    pub max_goal_rounds: u64,
    /// Why it is blocked, in words (`code: message`), while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
}

impl GoalView {
    fn from_state(state: &dsh_agent::GoalState) -> Self {
        GoalView {
            id: state.goal.id.clone(),
            objective: state.goal.objective.clone(),
            phase: state.goal.phase.as_str().to_string(),
            rounds_started: state.rounds_started,
            max_goal_rounds: state.goal.max_goal_rounds,
            blocked_reason: state
                .goal
                .blocked_reason
                .as_ref()
                .map(|r| format!("{}: {}", r.code, r.message)),
        }
    }

    /// The goal a `goal/change` leaves (`None` for a clear).
    pub fn of(change: &dsh_session::GoalChange) -> Option<Self> {
        let mut book = dsh_agent::GoalBook::default();
        book.apply(change);
        book.current.as_ref().map(GoalView::from_state)
    }

    /// One line: `goal: <objective> (active, round 2/256)`.
    pub fn line(&self) -> String {
        format!(
            "goal: {} ({}, round {}/{})",
            self.objective, self.phase, self.rounds_started, self.max_goal_rounds
        )
    }
}

/// One thing a front end shows. Serialized with `"kind"` naming the variant (camelCase), the
/// form `dsh run --json` prints and the web stream sends (docs/protocol.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
// A card is the common event and is moved once from projector to renderer: boxing it would
// add an allocation to every card for no measurable gain.
#[allow(clippy::large_enum_variant)]
pub enum ViewEvent {
    /// A turn began.
    TurnStarted {
        /// Its number.
        turn: u64,
    },
    /// A step (one model call and its tool calls) began.
    StepStarted {
        /// The turn.
        turn: u64,
        /// The step.
        step: u64,
    },
    /// Something the user (or dsh on the user's behalf) said to the model.
    UserMessage {
        /// Its text.
        text: String,
        /// How many images it carries.
        images: usize,
        /// The extension that injected it (`None`: typed by the user).
        #[serde(skip_serializing_if = "Option::is_none")]
        injected_by: Option<String>,
    },
    /// More of the reply's visible text.
    TextDelta {
        /// The text to append.
        text: String,
    },
    /// More of the reply's reasoning.
    ReasoningDelta {
        /// The text to append.
        text: String,
    },
    /// A reply ended; its whole text (for renderers that do not stream).
    AssistantMessage {
        /// The reply's visible text.
        text: String,
        /// True when the reply was cut by a cancel (a partial reply).
        interrupted: bool,
    },
    /// A tool card appeared or changed state (the whole card each time).
    ToolCard(Card),
    /// The user is asked to approve a tool call. Answer with [`crate::Op::Approve`].
    ApprovalRequested {
        /// Ties the question to its answer.
        id: String,
        /// The call it is about.
        call_id: String,
        /// Why approval is needed.
        reason: String,
        /// The answers offered (`allow_once`, `allow_session`, `allow_always`, `reject`).
        choices: Vec<String>,
        /// What "for this session" / "always" would allow, in words.
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// The wider preset this one call would run under.
        #[serde(skip_serializing_if = "Option::is_none")]
        escalation: Option<String>,
    },
    /// An approval question was answered (or answered by a remembered rule).
    ApprovalDecided {
        /// The question's id.
        id: String,
        /// The call it was about.
        #[serde(skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// `approved`, `rejected` or `canceled`.
        outcome: String,
        /// `once`, `session`, `always` or `rule`.
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// The rule remembered (`session`, `always`) or that answered (`rule`), in words.
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    /// A tool waits for the user's answers: questions (`ask_user_question`) or a plan review
    /// (`exit_plan_mode`). Answer with [`crate::Op::Answer`].
    QuestionAsked {
        /// The waiting call.
        call_id: String,
        /// `questions` or `planReview`.
        form: String,
        /// The call's arguments (the questions, or the plan).
        arguments: Value,
    },
    /// The model (or provider) the next requests go to changed: `/model`, a fallback.
    ModelChanged {
        /// The provider route.
        provider: String,
        /// The model.
        model: String,
    },
    /// The permission preset changed.
    PresetChanged {
        /// The new preset.
        preset: String,
    },
    /// Plan mode was entered or left.
    PlanMode {
        /// True while in plan mode.
        active: bool,
    },
    /// `/undo` reverted a turn's file changes.
    FilesUndone {
        /// The turn whose changes were reverted.
        turn: u64,
        /// What happened to each file.
        files: Value,
        /// False when some file could not be restored.
        complete: bool,
    },
    /// A model call failed and is retried after a wait.
    Retry {
        /// The retry's number (1 for the first).
        retry: u64,
        /// The wait, in milliseconds.
        delay_ms: u64,
        /// What failed.
        message: String,
        /// The failure's code (`RATE_LIMITED`, `SERVER_ERROR`, ...).
        code: String,
    },
    /// One billed model call, and the session's totals after it.
    Usage {
        /// What the call was for (`reply`, `compaction`, `title`, a child's name, ...).
        purpose: String,
        /// Tokens of this call: uncached input, output, cached input read.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Cached input tokens.
        cache_read_tokens: u64,
        /// The session's billed requests so far.
        total_requests: u64,
        /// The session's cost so far (`None`: a model without a price was called).
        #[serde(skip_serializing_if = "Option::is_none")]
        total_cost_usd: Option<f64>,
    },
    /// Compaction started or ended.
    Compaction {
        /// `started` or `ended`.
        phase: String,
        /// Its data as logged (tokens before/after, ok).
        data: Value,
    },
    /// The session's title.
    Title {
        /// The title.
        title: String,
    },
    /// The session's goal changed (docs/goals.md): `goal` is `null` once cleared.
    Goal {
        /// The goal after the change.
        goal: Option<GoalView>,
    },
    /// The todo list changed.
    Todos {
        /// The list, each `{content, status}`.
        todos: Value,
    },
    /// Background jobs were stopped when a run ended.
    JobsStopped {
        /// Why, and which.
        data: Value,
    },
    /// A turn ended.
    TurnEnded {
        /// Its number.
        turn: u64,
        /// The classification every front end shows.
        state: EndState,
        /// The logged reason's kind (`completed`, `aborted`, `error`, `max-tokens`, ...).
        reason: String,
        /// What went wrong, for failed turns.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// The error code, for errors.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
}

/// Turns a session's events into [`ViewEvent`]s (see the module docs). One per stream of
/// events: the session's, or one child's.
#[derive(Debug)]
pub struct ViewProjector {
    presenter: Presenter,
    cards: HashMap<String, Card>,
    /// Approval question id -> call id.
    approvals: HashMap<String, String>,
    route: Option<(String, String)>,
    ledger: UsageLedger,
    prices: PriceTable,
    /// The session's goal so far.
    goal: dsh_agent::GoalBook,
}

impl Default for ViewProjector {
    fn default() -> Self {
        ViewProjector::new(Presenter::default(), PriceTable::default())
    }
}

impl ViewProjector {
    /// A projector presenting calls with `presenter` and pricing usage with `prices`.
    pub fn new(presenter: Presenter, prices: PriceTable) -> Self {
        ViewProjector {
            presenter,
            cards: HashMap::new(),
            approvals: HashMap::new(),
            route: None,
            ledger: UsageLedger::new(),
            prices,
            goal: dsh_agent::GoalBook::default(),
        }
    }

    /// A user-role message: what was said, and a goal round's count.
    fn user_message(&mut self, envelope: &Envelope, message: &Message, out: &mut Vec<ViewEvent>) {
        let images = message
            .content
            .iter()
            .filter(|b| matches!(b, ContentBlock::Image { .. }))
            .count();
        let injected_by = match &message.source {
            MessageSource::Plugin { plugin, .. } => Some(plugin.clone()),
            _ => None,
        };
        out.push(ViewEvent::UserMessage {
            text: message.text(),
            images,
            injected_by,
        });
        // A goal round's message: the round count moves on (docs/goals.md).
        if dsh_agent::goal_round_of(message).is_some() {
            self.goal_moved(&envelope.event, out);
        }
    }

    /// Takes in an event that changes the goal (a `goal/change`, a round's message) and shows
    /// the goal after it.
    fn goal_moved(&mut self, event: &Event, out: &mut Vec<ViewEvent>) {
        self.goal.observe(event);
        out.push(ViewEvent::Goal {
            goal: self.goal.current.as_ref().map(GoalView::from_state),
        });
    }

    /// The session's goal as the events so far left it (`None`: none, or cleared).
    pub fn goal(&self) -> Option<GoalView> {
        self.goal.current.as_ref().map(GoalView::from_state)
    }

    /// The card of call `call_id`, as last shown.
    pub fn card(&self, call_id: &str) -> Option<&Card> {
        self.cards.get(call_id)
    }

    /// Reads `events` (a resumed session's log so far) without showing them, so the live
    /// events that continue the log are projected as they would be in one pass over the whole
    /// log: running usage totals, the model shown, calls still open. A front end that shows
    /// the history itself projects it with [`ViewProjector::project_all`] instead.
    pub fn continue_after<'a>(&mut self, events: impl IntoIterator<Item = &'a Envelope>) {
        for envelope in events {
            self.project(envelope);
        }
    }

    /// The view events of every envelope of `events`, in order.
    pub fn project_all<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a Envelope>,
    ) -> Vec<ViewEvent> {
        events.into_iter().flat_map(|e| self.project(e)).collect()
    }

    /// The view events `envelope` makes (none for bookkeeping events).
    pub fn project(&mut self, envelope: &Envelope) -> Vec<ViewEvent> {
        let mut out = Vec::new();
        match &envelope.event {
            Event::TurnStart(start) => out.push(ViewEvent::TurnStarted { turn: start.turn }),
            Event::StepStart(step) => out.push(ViewEvent::StepStarted {
                turn: step.turn,
                step: step.step,
            }),
            Event::UserMessage(message) => self.user_message(envelope, message, &mut out),
            Event::AssistantChunk(chunk) => match &chunk.chunk {
                Chunk::TextDelta { text, .. } => {
                    out.push(ViewEvent::TextDelta { text: text.clone() })
                }
                Chunk::ReasoningDelta { text, .. } => {
                    out.push(ViewEvent::ReasoningDelta { text: text.clone() })
                }
                _ => {}
            },
            Event::AssistantMessage(reply) => {
                out.push(ViewEvent::AssistantMessage {
                    text: reply.message.text(),
                    interrupted: reply.interrupted,
                });
                self.usage(&envelope.event, &mut out);
            }
            Event::ToolCall(_) | Event::ToolStarted(_) | Event::ToolResult(_) => {
                self.tool(&envelope.event, &mut out)
            }
            Event::RequestContext(route) => {
                let now = (route.provider.clone(), route.model.clone());
                if self.route.as_ref() != Some(&now) {
                    out.push(ViewEvent::ModelChanged {
                        provider: now.0.clone(),
                        model: now.1.clone(),
                    });
                    self.route = Some(now);
                }
            }
            Event::LlmRetry(retry) => out.push(ViewEvent::Retry {
                retry: retry.retry,
                delay_ms: retry.delay_ms,
                message: retry.failure.message.clone(),
                code: retry.failure.code.as_str().to_string(),
            }),
            Event::SessionTitle(title) => out.push(ViewEvent::Title {
                title: title.title.clone(),
            }),
            Event::GoalChange(_) => self.goal_moved(&envelope.event, &mut out),
            Event::TodoWrite(todos) => out.push(ViewEvent::Todos {
                todos: serde_json::to_value(&todos.todos).unwrap_or(Value::Null),
            }),
            Event::TurnEnd(end) => {
                // Calls left open by the end (a crash, a dropped stream) end with it.
                let open: Vec<String> = self.cards.keys().cloned().collect();
                for id in open {
                    if let Some(mut card) = self.cards.remove(&id) {
                        card.state = CardState::Cancelled;
                        out.push(ViewEvent::ToolCard(card));
                    }
                }
                let (message, code) = match &end.reason {
                    TurnEndReason::Error { error } => (
                        Some(error.message.clone()),
                        Some(error.code.as_str().into()),
                    ),
                    TurnEndReason::Blocked { message } => (message.clone(), None),
                    TurnEndReason::MaxTokens => (
                        Some("the reply hit the output limit; its tool calls were dropped".into()),
                        None,
                    ),
                    _ => (None, None),
                };
                out.push(ViewEvent::TurnEnded {
                    turn: end.turn,
                    state: EndState::of(&end.reason),
                    reason: end.reason.kind().to_string(),
                    message,
                    code,
                });
            }
            Event::Opaque { event_type, data } => {
                self.opaque(event_type, data, &envelope.event, &mut out)
            }
            _ => {}
        }
        out
    }

    /// The card changes of a tool event.
    fn tool(&mut self, event: &Event, out: &mut Vec<ViewEvent>) {
        match event {
            Event::ToolCall(call) => {
                let card = Card {
                    call_id: call.call_id.clone(),
                    tool: call.name.clone(),
                    presentation: self.presenter.call(call),
                    arguments: call.arguments.clone(),
                    state: CardState::Pending,
                    summary: None,
                    error_code: None,
                    result: None,
                    meta: None,
                    progress: None,
                };
                self.cards.insert(call.call_id.clone(), card.clone());
                out.push(ViewEvent::ToolCard(card));
            }
            Event::ToolStarted(started) => {
                if let Some(card) = self.set_state(&started.call_id, CardState::Running) {
                    let form = match card.presentation.view {
                        ToolView::Question => Some("questions"),
                        ToolView::PlanReview => Some("planReview"),
                        _ => None,
                    };
                    let asked = form.map(|form| ViewEvent::QuestionAsked {
                        call_id: card.call_id.clone(),
                        form: form.to_string(),
                        arguments: serde_json::from_str(&card.arguments).unwrap_or(Value::Null),
                    });
                    out.push(ViewEvent::ToolCard(card));
                    out.extend(asked);
                }
            }
            Event::ToolResult(result) => {
                let summary = self.presenter.summary(result);
                if let Some(card) = result.call_id().and_then(|id| self.cards.remove(id)) {
                    let code = result.error.as_ref().map(|e| e.code.clone());
                    // Logs that carry no structured error (dsh's, older ones) mark a failed
                    // result on its block only.
                    let flagged = result.message.content.iter().any(is_error_result);
                    let state = match CardState::of_result(code.as_deref()) {
                        CardState::Done if flagged => CardState::Failed,
                        state => state,
                    };
                    out.push(ViewEvent::ToolCard(Card {
                        state,
                        summary,
                        error_code: code,
                        result: Some(result.message.tool_result_text()),
                        meta: result.meta.clone(),
                        progress: None,
                        ..card
                    }));
                }
                self.usage(event, out);
            }
            _ => {}
        }
    }

    fn opaque(&mut self, event_type: &str, data: &Value, event: &Event, out: &mut Vec<ViewEvent>) {
        let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_string);
        match event_type {
            "approval/asked" => {
                let (Some(id), Some(call_id)) = (text("id"), text("callId")) else {
                    return;
                };
                self.approvals.insert(id.clone(), call_id.clone());
                if let Some(card) = self.set_state(&call_id, CardState::AwaitingApproval) {
                    out.push(ViewEvent::ToolCard(card));
                }
                out.push(ViewEvent::ApprovalRequested {
                    id,
                    call_id,
                    reason: text("reason").unwrap_or_default(),
                    choices: data
                        .get("choices")
                        .and_then(Value::as_array)
                        .map(|c| {
                            c.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                    rule: text("rule"),
                    escalation: text("escalation"),
                });
            }
            "approval/decided" => {
                let Some(id) = text("id") else { return };
                let call_id = text("callId").or_else(|| self.approvals.remove(&id));
                let outcome = text("outcome").unwrap_or_default();
                out.push(ViewEvent::ApprovalDecided {
                    id,
                    call_id: call_id.clone(),
                    outcome: outcome.clone(),
                    scope: text("scope"),
                    rule: text("rule"),
                });
                // Approved: back to pending until the body starts (hooks may still refuse).
                if outcome == "approved" {
                    if let Some(card) =
                        call_id.and_then(|id| self.set_state(&id, CardState::Pending))
                    {
                        out.push(ViewEvent::ToolCard(card));
                    }
                }
            }
            "permission/preset" => {
                if let Some(preset) = text("preset") {
                    out.push(ViewEvent::PresetChanged { preset });
                }
            }
            dsh_agent::PLAN_MODE_EVENT => out.push(ViewEvent::PlanMode {
                active: data.get("active").and_then(Value::as_bool).unwrap_or(false),
            }),
            "files/undo" => out.push(ViewEvent::FilesUndone {
                turn: data.get("turn").and_then(Value::as_u64).unwrap_or(0),
                files: data.get("files").cloned().unwrap_or(Value::Null),
                complete: data
                    .get("complete")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            }),
            "compaction/start" | "compaction/end" => out.push(ViewEvent::Compaction {
                phase: if event_type == "compaction/start" {
                    "started"
                } else {
                    "ended"
                }
                .to_string(),
                data: data.clone(),
            }),
            "jobs/stopped" => out.push(ViewEvent::JobsStopped { data: data.clone() }),
            dsh_session::TOOL_PROGRESS_EVENT => {
                let (Some(call_id), Ok(report)) = (
                    text("callId"),
                    serde_json::from_value::<ToolProgress>(data.clone()),
                ) else {
                    return;
                };
                if let Some(card) = self.cards.get_mut(&call_id) {
                    card.progress = Some(report);
                    out.push(ViewEvent::ToolCard(card.clone()));
                }
            }
            _ => self.usage(event, out),
        }
    }

    /// A `Usage` event for what `event` bills, if anything.
    fn usage(&mut self, event: &Event, out: &mut Vec<ViewEvent>) {
        let Some(billed) = self.ledger.push(event) else {
            return;
        };
        let call = billed.total();
        let total = self.ledger.total();
        let purpose = match &billed.kind {
            BilledKind::Reply => "reply".to_string(),
            BilledKind::Call(purpose) => purpose.clone(),
            BilledKind::Auxiliary => "tool".to_string(),
            BilledKind::Child(child) => format!("subagent {child}"),
        };
        out.push(ViewEvent::Usage {
            purpose,
            input_tokens: call.usage.input_tokens,
            output_tokens: call.usage.output_tokens,
            cache_read_tokens: call.usage.cache_read_tokens,
            total_requests: total.requests,
            total_cost_usd: self.ledger.cost(&self.prices),
        });
    }

    fn set_state(&mut self, call_id: &str, state: CardState) -> Option<Card> {
        let card = self.cards.get_mut(call_id)?;
        card.state = state;
        Some(card.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{ToolCall, ToolStarted};
    use serde_json::json;

    fn envelope(event: Event) -> Envelope {
        Envelope::new(event)
    }

    #[test]
    fn progress_reports_update_the_running_card_and_unknown_calls_are_ignored() {
        let mut projector = ViewProjector::default();
        let call = ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "mcp__s__long".into(),
            arguments: "{}".into(),
            presentation: None,
        };
        projector.project(&envelope(Event::ToolCall(call)));
        projector.project(&envelope(Event::ToolStarted(ToolStarted {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
        })));
        let progress = |call_id: &str| {
            envelope(Event::Opaque {
                event_type: dsh_session::TOOL_PROGRESS_EVENT.into(),
                data: json!({"callId": call_id, "progress": 2.0, "total": 4.0, "message": "half"}),
            })
        };
        let shown = projector.project(&progress("c1"));
        let [ViewEvent::ToolCard(card)] = shown.as_slice() else {
            panic!("{shown:?}");
        };
        assert_eq!(card.state, CardState::Running);
        assert_eq!(
            card.progress,
            Some(ToolProgress::new(2.0, Some(4.0), Some("half".into())))
        );
        assert!(projector.project(&progress("other")).is_empty());
    }

    #[test]
    fn a_result_flagged_only_on_its_block_ends_the_card_failed() {
        let mut projector = ViewProjector::default();
        projector.project(&envelope(Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"false"}"#.into(),
            presentation: None,
        })));
        let result = dsh_session::ToolResult {
            turn: 1,
            step: 1,
            message: dsh_llm::Message::tool_result(
                "m1",
                "c1",
                vec![ContentBlock::Text {
                    text: "exit 1".into(),
                }],
                true,
            ),
            error: None,
            meta: None,
            summary: None,
        };
        let shown = projector.project(&envelope(Event::ToolResult(result)));
        assert!(
            matches!(shown.as_slice(), [ViewEvent::ToolCard(card)] if card.state == CardState::Failed),
            "{shown:?}"
        );
    }
}
