//! The conversation as the user sees it: session events folded into cells, and the figures the
//! status line shows.
//!
//! One reducer serves both live sessions and resumed ones ([`Transcript::apply`] over the log's
//! events), so a resumed session looks exactly as it did live. Streamed chunks build a
//! *preview* of the current reply; the reply's `assistant/message` replaces the preview, and a
//! retry discards it, so a failed attempt leaves only its notice behind.

use std::collections::{BTreeMap, HashMap, HashSet};

use dsh_llm::{Chunk, ContentBlock, MessageSource, Usage, UsageTotals};
use dsh_protocol::{Card, CardState, EndState, ViewEvent, ViewProjector};
use dsh_session::{Envelope, Event, PriceTable};
use dsh_tools::ToolRegistry;
use serde_json::Value;

/// How a notice is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeLevel {
    /// Neutral information (compaction done, command output).
    Info,
    /// Something the user should notice (retry, cancel, max tokens).
    Warn,
    /// A failure.
    Error,
}

/// One tool call as the protocol shows it (`dsh_protocol::Card`: the tool's presentation, the
/// state, the result), and what the TUI adds while it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCard {
    /// The card, as the session's [`ViewProjector`] last showed it.
    pub card: Card,
    /// Live progress of a running call, when something reports it (a `subagent` call shows
    /// its child's latest activity, docs/tui.md, "Children").
    pub progress: Option<String>,
}

impl ToolCard {
    /// The call id.
    pub fn call_id(&self) -> &str {
        &self.card.call_id
    }

    /// Where the call is.
    pub fn state(&self) -> CardState {
        self.card.state
    }
}

/// One entry of the conversation view.
#[derive(Debug, Clone, PartialEq)]
// Cards are most of a transcript's cells: boxing them would add an allocation per card.
#[allow(clippy::large_enum_variant)]
pub enum Cell {
    /// Text the user sent.
    User {
        /// The text.
        text: String,
    },
    /// Assistant text (Markdown).
    Assistant {
        /// The Markdown source so far.
        text: String,
        /// Still streaming.
        streaming: bool,
        /// Cut short by a cancel.
        interrupted: bool,
    },
    /// The model's reasoning (dimmed, collapsible).
    Reasoning {
        /// The text so far.
        text: String,
        /// Still streaming.
        streaming: bool,
    },
    /// A tool call card.
    Tool(ToolCard),
    /// The welcome header: version, model and effort, preset, working directory and tips
    /// (docs/tui.md, "Header"), first in a new or resumed session.
    Header(Header),
    /// A retry, compaction, approval, turn end or command output.
    Notice {
        /// Colour.
        level: NoticeLevel,
        /// The text.
        text: String,
    },
}

/// What the welcome header shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// dsh's version.
    pub version: String,
    /// The model new requests use.
    pub model: String,
    /// Its reasoning effort, if one is set.
    pub effort: Option<String>,
    /// The permission preset.
    pub preset: String,
    /// The working directory, the home directory shortened to `~`.
    pub cwd: String,
    /// The id of the resumed session (`None` for a new one).
    pub resumed: Option<String>,
}

/// What the status line shows, kept up to date by [`Transcript::apply`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionStats {
    /// Model of the last request header.
    pub model: Option<String>,
    /// Effort of the last request header.
    pub effort: Option<String>,
    /// Tokens in context after the last reply (billed input plus output).
    pub context_tokens: u64,
    /// Cache-hit share of the last request.
    pub last_cache_hit: Option<f64>,
    /// Usage per model: every billed call of the session, children's included
    /// (`dsh_session::usage`, docs/sessions.md, "Cost").
    pub usage_by_model: BTreeMap<String, UsageTotals>,
    /// The session title.
    pub title: Option<String>,
    /// The session's goal (docs/goals.md), shown in the status line.
    pub goal: Option<dsh_protocol::GoalView>,
    /// The permission preset last logged (`permission/preset`), or the one in force when the
    /// runtime seeds it; a logged change from it becomes a notice.
    pub permission: Option<String>,
    /// The sandbox mode last logged (`sandbox/mode`).
    pub sandbox: Option<String>,
}

impl SessionStats {
    /// Session cost in USD (`None` when a used model has no price).
    pub fn cost(&self, prices: &PriceTable) -> Option<f64> {
        prices.cost(&self.usage_by_model)
    }

    /// Usage summed over models.
    pub fn total(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for t in self.usage_by_model.values() {
            total.add(&t.usage);
            // `add` counts one request per call; take the real count instead.
            total.requests = total.requests - 1 + t.requests;
        }
        total
    }
}

/// The folded conversation.
#[derive(Debug, Default)]
pub struct Transcript {
    /// Cells, oldest first.
    pub cells: Vec<Cell>,
    /// Status figures.
    pub stats: SessionStats,
    /// A turn is running.
    pub running: bool,
    /// Index of the first cell of the reply being streamed.
    preview_start: Option<usize>,
    /// Block index of the streamed reply to its cell.
    preview_blocks: HashMap<u32, usize>,
    /// Highest seq applied (live events at or below it are duplicates of the loaded history).
    last_seq: Option<u64>,
    /// Bumped on every change, so views can cache.
    pub revision: u64,
    /// When the running turn started (as this view saw its `turn/start`).
    pub turn_started: Option<std::time::Instant>,
    /// Since when the turn waits for the user's approval (a card `awaitingApproval`): the
    /// working time does not count it.
    pub waiting_since: Option<std::time::Instant>,
    /// How long the running turn has waited for approvals already decided.
    pub waited: std::time::Duration,
    /// Text and reasoning deltas streamed by the running turn (about one token each).
    pub streamed: u64,
    /// The protocol's view of the session (docs/protocol.md, "View events"): tool cards and
    /// their states, approvals, model switches, undos, retries and turn ends.
    projector: ViewProjector,
    /// Calls whose card awaits approval.
    awaiting: HashSet<String>,
    /// The notices of approvals asked and not yet decided, by question id, with their call:
    /// while one waits the approval box shows its reason, so the notice is placed with the
    /// answer (or when the turn ends unanswered), and the reason is on screen once.
    asked: Vec<(String, String, String)>,
    /// What "for this session" / "always" of an asked approval would allow, by question id.
    rules: HashMap<String, String>,
    /// The session's billed usage, summed by the log's one rule (`stats.usage_by_model`).
    ledger: dsh_session::UsageLedger,
    /// A model switch was seen (the first route is the session's model, not a switch).
    routed: bool,
}

impl Transcript {
    /// An empty conversation.
    pub fn new() -> Self {
        Transcript::default()
    }

    /// Asks the session's `tools` how to show calls a log holds without their presentation
    /// (logs written before dsh logged it); the tools every session has answer otherwise.
    /// Called before the first event is applied.
    pub fn set_tools(&mut self, tools: &ToolRegistry) {
        self.projector = ViewProjector::new(
            dsh_agent::Presenter::new(Some(tools)),
            PriceTable::default(),
        );
    }

    /// Adds a notice (command output, local errors).
    pub fn notice(&mut self, level: NoticeLevel, text: impl Into<String>) {
        self.end_preview();
        self.cells.push(Cell::Notice {
            level,
            text: text.into(),
        });
        self.revision += 1;
    }

    /// How many leading cells are final: they will not change any more (no streaming text,
    /// no open tool call, nothing a retry or the final message could replace), so the inline
    /// view can write them into the terminal's scrollback (docs/tui.md, "Modes").
    pub fn settled_len(&self) -> usize {
        if !self.running {
            return self.cells.len();
        }
        let end = self
            .preview_start
            .unwrap_or(self.cells.len())
            .min(self.cells.len());
        self.cells[..end]
            .iter()
            .position(|cell| match cell {
                Cell::Tool(card) => !card.state().is_final(),
                Cell::Assistant { streaming, .. } | Cell::Reasoning { streaming, .. } => *streaming,
                _ => false,
            })
            .unwrap_or(end)
    }

    /// Folds one session event in. Events at or below the highest seq already applied are
    /// ignored, so history and live events may overlap.
    ///
    /// What the protocol shows (cards, approvals, switches, undos, retries, turn ends) comes
    /// from its [`ViewEvent`]s; the envelope itself gives only what the TUI adds: the typed
    /// part of a message, streamed blocks by index, reasoning of a reply, status figures.
    pub fn apply(&mut self, envelope: &Envelope) {
        if self.last_seq.is_some_and(|last| envelope.seq <= last) {
            return;
        }
        self.last_seq = Some(envelope.seq);
        self.revision += 1;
        if self.ledger.push(&envelope.event).is_some() {
            self.stats.usage_by_model = self.ledger.by_model().clone();
        }
        self.figures(envelope);
        for view in self.projector.project(envelope) {
            self.view(view);
        }
    }

    /// The TUI's own part of an event: figures, and cells the view events lack the detail for.
    fn figures(&mut self, envelope: &Envelope) {
        match &envelope.event {
            Event::TurnStart(_) => {
                self.running = true;
                self.turn_started = Some(std::time::Instant::now());
                self.waiting_since = None;
                self.waited = std::time::Duration::ZERO;
                self.awaiting.clear();
                // A turn that never ended (a crash): its unanswered questions are history.
                self.place_unanswered();
                self.streamed = 0;
            }
            Event::UserMessage(message) => {
                if matches!(message.source, MessageSource::User) {
                    self.end_preview();
                    self.cells.push(Cell::User {
                        text: crate::mentions::typed_text(message),
                    });
                }
            }
            Event::AssistantChunk(chunk) => self.chunk(&chunk.chunk),
            Event::AssistantMessage(message) => {
                self.drop_preview();
                for block in &message.message.content {
                    match block {
                        ContentBlock::Reasoning { text, .. } if !text.trim().is_empty() => {
                            self.cells.push(Cell::Reasoning {
                                text: text.clone(),
                                streaming: false,
                            })
                        }
                        ContentBlock::Text { text } if !text.trim().is_empty() => {
                            self.cells.push(Cell::Assistant {
                                text: text.clone(),
                                streaming: false,
                                interrupted: message.interrupted,
                            })
                        }
                        _ => {}
                    }
                }
                if let Some(usage) = &message.usage {
                    self.usage(usage);
                }
            }
            Event::RequestHeader(header) => {
                let config = header.header.config.config();
                self.stats.model = Some(config.model.clone());
                self.stats.effort = config.reasoning_effort.map(|e| e.as_str().to_string());
            }
            Event::Opaque { event_type, data } => match event_type.as_str() {
                "request/cache" => {
                    if let Some(ratio) = data["cacheHitRatio"].as_f64() {
                        self.stats.last_cache_hit = Some(ratio);
                    }
                }
                crate::review::REVIEW_EVENT => self.info(crate::review::logged_text(data)),
                "sandbox/mode" => {
                    let Some(mode) = data["mode"].as_str() else {
                        return;
                    };
                    let previous = self.stats.sandbox.replace(mode.to_string());
                    if previous.is_some_and(|previous| previous != mode) {
                        let detail = data["detail"].as_str().unwrap_or("no detail");
                        self.info(format!("sandbox: {mode} ({detail})"));
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Shows one view event.
    fn view(&mut self, view: ViewEvent) {
        match view {
            ViewEvent::ToolCard(card) => self.card(card),
            ViewEvent::ApprovalRequested {
                id,
                call_id,
                reason,
                rule,
                ..
            } => {
                if let Some(rule) = rule {
                    self.rules.insert(id.clone(), rule);
                }
                let tool = self.title_of(&call_id);
                self.asked
                    .push((id, call_id, format!("approval asked for {tool}: {reason}")));
            }
            ViewEvent::ApprovalDecided {
                id,
                call_id,
                outcome,
                scope,
                rule: logged,
            } => {
                // A remembered rule answers without a question: the rule is in the event.
                if let Some(at) = self.asked.iter().position(|(asked, ..)| *asked == id) {
                    let (_, asked_call, text) = self.asked.remove(at);
                    self.place_notice(text, &asked_call);
                }
                let rule = self.rules.remove(&id).or(logged);
                let rule = rule.as_deref().unwrap_or("a rule");
                let call_id = call_id.unwrap_or_default();
                let text = match (outcome.as_str(), scope.as_deref()) {
                    ("approved", Some("rule")) => format!(
                        "{} allowed by a remembered approval: {rule}",
                        self.title_of(&call_id)
                    ),
                    ("approved", Some("session")) => {
                        format!("approved; for this session also {rule}")
                    }
                    ("approved", Some("always")) => {
                        format!("approved; remembered for later sessions: {rule}")
                    }
                    (outcome, _) => format!("approval {outcome}"),
                };
                self.place_notice(text, &call_id);
            }
            ViewEvent::ModelChanged { provider, model } => self.model_changed(&provider, &model),
            ViewEvent::PresetChanged { preset } => {
                let previous = self.stats.permission.replace(preset.clone());
                // The session's first record, or the preset already in force, says nothing.
                if let Some(previous) = previous.filter(|p| *p != preset) {
                    self.info(format!(
                        "permission preset: {preset} (was {previous}); applies from the next step"
                    ));
                }
            }
            ViewEvent::FilesUndone {
                turn,
                files,
                complete,
            } => self.info(undone_text(turn, &files, complete)),
            ViewEvent::Retry {
                retry,
                delay_ms,
                message,
                code,
            } => {
                self.drop_preview();
                self.cells.push(Cell::Notice {
                    level: NoticeLevel::Warn,
                    text: format!(
                        "retry {retry} in {:.1} s after {code}: {message}",
                        delay_ms as f64 / 1000.0
                    ),
                });
            }
            ViewEvent::Compaction { phase, data } => self.info(compaction_text(&phase, &data)),
            ViewEvent::Title { title } => self.stats.title = Some(title),
            ViewEvent::Goal { goal } => self.stats.goal = goal,
            ViewEvent::TurnEnded {
                state,
                reason,
                message,
                code,
                ..
            } => {
                self.running = false;
                self.turn_started = None;
                self.waiting_since = None;
                self.awaiting.clear();
                self.place_unanswered();
                self.end_preview();
                self.turn_end(state, &reason, message, code);
            }
            _ => {}
        }
    }

    /// The requests go to `model` from now on: a notice, unless it is the session's first
    /// route (the session's model, which the header shows).
    fn model_changed(&mut self, provider: &str, model: &str) {
        if std::mem::replace(&mut self.routed, true) {
            self.info(format!("model: {model} ({provider}) from this request on"));
        }
    }

    /// A card appeared or changed: its cell is added or updated, and the working time stops
    /// while a card awaits approval.
    fn card(&mut self, card: Card) {
        let awaiting = card.state == CardState::AwaitingApproval;
        if awaiting {
            self.awaiting.insert(card.call_id.clone());
            if self.running {
                self.waiting_since
                    .get_or_insert_with(std::time::Instant::now);
            }
        } else if self.awaiting.remove(&card.call_id) && self.awaiting.is_empty() {
            if let Some(since) = self.waiting_since.take() {
                self.waited += since.elapsed();
            }
        }
        match self.card_at(&card.call_id) {
            Some(at) => {
                if let Cell::Tool(shown) = &mut self.cells[at] {
                    if card.state.is_final() {
                        shown.progress = None;
                    }
                    shown.card = card;
                }
            }
            None => {
                self.end_preview();
                self.cells.push(Cell::Tool(ToolCard {
                    card,
                    progress: None,
                }));
            }
        }
    }

    /// The cell of call `call_id`'s card.
    fn card_at(&self, call_id: &str) -> Option<usize> {
        self.cells
            .iter()
            .rposition(|cell| matches!(cell, Cell::Tool(card) if card.call_id() == call_id))
    }

    /// How call `call_id` is titled (`bash`, `github · create_issue`), for notices about it.
    fn title_of(&self, call_id: &str) -> String {
        match self.card_at(call_id).map(|at| &self.cells[at]) {
            Some(Cell::Tool(card)) => card.card.presentation.title.clone(),
            _ => "a tool".to_string(),
        }
    }

    fn info(&mut self, text: String) {
        self.end_preview();
        self.cells.push(Cell::Notice {
            level: NoticeLevel::Info,
            text,
        });
    }

    /// Shows `progress` on the running card of tool call `call_id`; false when there is none.
    pub fn set_progress(&mut self, call_id: &str, progress: &str) -> bool {
        let card = self.cells.iter_mut().rev().find_map(|cell| match cell {
            Cell::Tool(card) if card.call_id() == call_id => Some(card),
            _ => None,
        });
        match card {
            Some(card) if !card.state().is_final() => {
                if card.progress.as_deref() != Some(progress) {
                    card.progress = Some(progress.to_string());
                    self.revision += 1;
                }
                true
            }
            _ => false,
        }
    }

    fn chunk(&mut self, chunk: &Chunk) {
        let (index, text, reasoning) = match chunk {
            Chunk::TextDelta { index, text } => (*index, text, false),
            Chunk::ReasoningDelta { index, text } => (*index, text, true),
            _ => return,
        };
        self.streamed += 1;
        if self.preview_start.is_none() {
            self.preview_start = Some(self.cells.len());
        }
        let at = match self.preview_blocks.get(&index) {
            Some(&at) if at < self.cells.len() => at,
            _ => {
                self.cells.push(if reasoning {
                    Cell::Reasoning {
                        text: String::new(),
                        streaming: true,
                    }
                } else {
                    Cell::Assistant {
                        text: String::new(),
                        streaming: true,
                        interrupted: false,
                    }
                });
                self.preview_blocks.insert(index, self.cells.len() - 1);
                self.cells.len() - 1
            }
        };
        match &mut self.cells[at] {
            Cell::Assistant { text: t, .. } | Cell::Reasoning { text: t, .. } => t.push_str(text),
            _ => {}
        }
    }

    /// Removes the cells of the reply being streamed (a retry, or the final message).
    fn drop_preview(&mut self) {
        if let Some(start) = self.preview_start.take() {
            self.cells.truncate(start.min(self.cells.len()));
        }
        self.preview_blocks.clear();
    }

    /// Keeps the streamed cells as they are and stops streaming into them.
    fn end_preview(&mut self) {
        if let Some(start) = self.preview_start.take() {
            for cell in self.cells.iter_mut().skip(start) {
                match cell {
                    Cell::Assistant { streaming, .. } | Cell::Reasoning { streaming, .. } => {
                        *streaming = false
                    }
                    _ => {}
                }
            }
        }
        self.preview_blocks.clear();
    }

    /// A reply's usage: the context it leaves (its sum counts in `stats.usage_by_model`).
    fn usage(&mut self, usage: &Usage) {
        self.stats.context_tokens = usage.billed_input() + usage.output_tokens;
        self.stats.last_cache_hit = Some(usage.cache_hit_ratio());
    }

    /// The notice of a turn's end, as the protocol classifies it (`EndState`).
    fn turn_end(
        &mut self,
        state: EndState,
        reason: &str,
        message: Option<String>,
        code: Option<String>,
    ) {
        let (level, text) = match state {
            EndState::Completed => return,
            EndState::Cancelled if reason == "interrupted" => (
                NoticeLevel::Warn,
                "turn cancelled: the process ended while it ran".to_string(),
            ),
            EndState::Cancelled => (NoticeLevel::Warn, "turn cancelled".to_string()),
            EndState::Failed => {
                let why = message.unwrap_or_else(|| "no reason given".to_string());
                let text = match (reason, code) {
                    (_, Some(code)) => format!("turn failed: {code}: {why}"),
                    ("blocked", None) => format!("turn failed: blocked: {why}"),
                    (_, None) => format!("turn failed: {why}"),
                };
                (NoticeLevel::Error, text)
            }
        };
        self.cells.push(Cell::Notice { level, text });
    }

    /// Adds the notice of an approval of call `call_id`. The question and answer come before
    /// the call's card while it is open (so not yet in the scrollback): asked, answered, then
    /// the result.
    fn place_notice(&mut self, text: String, call_id: &str) {
        self.end_preview();
        let notice = Cell::Notice {
            level: NoticeLevel::Info,
            text,
        };
        let open = self
            .card_at(call_id)
            .filter(|&at| matches!(&self.cells[at], Cell::Tool(c) if !c.state().is_final()));
        match open {
            Some(at) => self.cells.insert(at, notice),
            None => self.cells.push(notice),
        }
    }

    /// Places the notices of approvals asked and never answered (the turn ended first).
    fn place_unanswered(&mut self) {
        for (_, call_id, text) in std::mem::take(&mut self.asked) {
            self.place_notice(text, &call_id);
        }
    }

    /// The running turn's working time: since its start, less the time it waited for the
    /// user's approval.
    pub fn working_time(&self) -> std::time::Duration {
        let Some(started) = self.turn_started else {
            return std::time::Duration::ZERO;
        };
        let until = self.waiting_since.unwrap_or_else(std::time::Instant::now);
        until
            .saturating_duration_since(started)
            .saturating_sub(self.waited)
    }
}

/// A compaction's notice.
fn compaction_text(phase: &str, data: &Value) -> String {
    if phase == "started" {
        return format!(
            "compacting the conversation ({}; ~{} tokens of a {}-token window)",
            data["trigger"].as_str().unwrap_or("?"),
            data["estimatedTokens"],
            data["contextWindow"]
        );
    }
    match data["warning"].as_str() {
        Some(warning) => format!("compaction incomplete: {warning}"),
        None => format!(
            "compacted: {} old messages summarised, {} tool results pruned, ~{} -> ~{} tokens",
            data["summarizedMessages"], data["pruned"], data["tokensBefore"], data["tokensAfter"]
        ),
    }
}

/// `/undo`'s notice: the turn and its files, each with what happened to it.
fn undone_text(turn: u64, files: &Value, complete: bool) -> String {
    let files: Vec<String> = files
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|f| {
            let path = f["path"].as_str().unwrap_or("?");
            match f["action"].as_str() {
                Some(action) => format!("{path} ({action})"),
                None => path.to_string(),
            }
        })
        .collect();
    let incomplete = if complete {
        ""
    } else {
        "; some files could not be restored"
    };
    format!(
        "undo: the file changes of turn {turn} were reverted: {}{incomplete}",
        files.join(", ")
    )
}
