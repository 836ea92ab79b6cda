//! The conversation as the user sees it: session events folded into cells, and the figures the
//! status line shows.
//!
//! One reducer serves both live sessions and resumed ones ([`Transcript::apply`] over the log's
//! events), so a resumed session looks exactly as it did live. Streamed chunks build a
//! *preview* of the current reply; the reply's `assistant/message` replaces the preview, and a
//! retry discards it, so a failed attempt leaves only its notice behind.

use std::collections::{BTreeMap, HashMap};

use dsh_llm::{Chunk, ContentBlock, MessageSource, Usage, UsageTotals};
use dsh_session::{Envelope, Event, PriceTable, TurnEndReason};
use dsh_tools::{ResultSummary, ToolPresentation, ToolRegistry};
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

/// Where a tool call is.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolStatus {
    /// Logged, not finished.
    Running,
    /// Finished; `meta` is the tool's structured data (exit code, diffs, counts).
    Done {
        /// The result text the model saw.
        output: String,
        /// The tool's structured result data.
        meta: Option<Value>,
    },
    /// Finished with an error.
    Failed {
        /// The error code (`PERMISSION_DENIED`, `TOOL_TIMEOUT`, ...).
        code: String,
        /// What went wrong.
        message: String,
    },
}

/// One tool call and its result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCard {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments.
    pub arguments: String,
    /// Progress and result.
    pub status: ToolStatus,
    /// Live progress of a running call, when something reports it (a `subagent` call shows
    /// its child's latest activity, docs/tui.md, "Children").
    pub progress: Option<String>,
    /// How the tool shows the call (docs/tools.md, "Presentation"); `None`: as the tools every
    /// session has show it.
    pub presentation: Option<ToolPresentation>,
    /// The tool's summary of the result, once there is one.
    pub summary: Option<ResultSummary>,
}

/// One entry of the conversation view.
#[derive(Debug, Clone, PartialEq)]
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
    /// Since when the turn waits for the user's approval (`approval/asked` not yet decided):
    /// the working time does not count it.
    pub waiting_since: Option<std::time::Instant>,
    /// How long the running turn has waited for approvals already decided.
    pub waited: std::time::Duration,
    /// Text and reasoning deltas streamed by the running turn (about one token each).
    pub streamed: u64,
    /// How tool calls are shown: as logged, else as the session's tools say.
    presenter: dsh_agent::Presenter,
    /// The session's billed usage, summed by the log's one rule (`stats.usage_by_model`).
    ledger: dsh_session::UsageLedger,
}

impl Transcript {
    /// An empty conversation.
    pub fn new() -> Self {
        Transcript::default()
    }

    /// Asks the session's `tools` how to show calls a log holds without their presentation
    /// (logs written before dsh logged it); the tools every session has answer otherwise.
    pub fn set_tools(&mut self, tools: &ToolRegistry) {
        self.presenter.set_tools(tools);
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
    /// no running tool, nothing a retry or the final message could replace), so the inline
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
                Cell::Tool(card) => card.status == ToolStatus::Running,
                Cell::Assistant { streaming, .. } | Cell::Reasoning { streaming, .. } => *streaming,
                _ => false,
            })
            .unwrap_or(end)
    }

    /// Folds one session event in. Events at or below the highest seq already applied are
    /// ignored, so history and live events may overlap.
    pub fn apply(&mut self, envelope: &Envelope) {
        if self.last_seq.is_some_and(|last| envelope.seq <= last) {
            return;
        }
        self.last_seq = Some(envelope.seq);
        self.revision += 1;
        if self.ledger.push(&envelope.event).is_some() {
            self.stats.usage_by_model = self.ledger.by_model().clone();
        }
        match &envelope.event {
            Event::TurnStart(_) => {
                self.running = true;
                self.turn_started = Some(std::time::Instant::now());
                self.waiting_since = None;
                self.waited = std::time::Duration::ZERO;
                self.streamed = 0;
            }
            Event::TurnEnd(end) => {
                self.running = false;
                self.turn_started = None;
                self.waiting_since = None;
                self.end_preview();
                self.turn_end(&end.reason);
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
            Event::ToolCall(call) => {
                self.end_preview();
                let presentation = self.presenter.call(call);
                self.cells.push(Cell::Tool(ToolCard {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    status: ToolStatus::Running,
                    progress: None,
                    presentation: Some(presentation),
                    summary: None,
                }));
            }
            Event::ToolResult(result) => self.tool_result(result),
            Event::RequestHeader(header) => {
                let config = header.header.config.config();
                self.stats.model = Some(config.model.clone());
                self.stats.effort = config.reasoning_effort.map(|e| e.as_str().to_string());
            }
            Event::LlmRetry(retry) => {
                self.drop_preview();
                self.cells.push(Cell::Notice {
                    level: NoticeLevel::Warn,
                    text: format!(
                        "retry {} in {:.1} s after {}: {}",
                        retry.retry,
                        retry.delay_ms as f64 / 1000.0,
                        retry.failure.code,
                        retry.failure.message
                    ),
                });
            }
            Event::SessionTitle(title) => self.stats.title = Some(title.title.clone()),
            Event::Opaque { event_type, data } => self.opaque(event_type, data),
            Event::StepStart(_)
            | Event::StepEnd(_)
            | Event::ToolStarted(_)
            | Event::RequestContext(_)
            | Event::LlmRetryStarted(_)
            | Event::InboxSpliced(_)
            | Event::TodoWrite(_)
            | Event::DshOnly(_)
            | Event::EndSeed(_) => {}
        }
    }

    /// Shows `progress` on the running card of tool call `call_id`; false when there is none.
    pub fn set_progress(&mut self, call_id: &str, progress: &str) -> bool {
        let card = self.cells.iter_mut().rev().find_map(|cell| match cell {
            Cell::Tool(card) if card.call_id == call_id => Some(card),
            _ => None,
        });
        match card {
            Some(card) if card.status == ToolStatus::Running => {
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

    fn tool_result(&mut self, result: &dsh_session::ToolResult) {
        let Some(call_id) = result.call_id() else {
            return;
        };
        let status = match &result.error {
            Some(error) => ToolStatus::Failed {
                code: error.code.clone(),
                message: error.message.clone().unwrap_or_default(),
            },
            None => ToolStatus::Done {
                output: result.message.tool_result_text(),
                meta: result.meta.clone(),
            },
        };
        let summary = self.presenter.summary(result);
        let card = self.cells.iter_mut().rev().find_map(|cell| match cell {
            Cell::Tool(card) if card.call_id == call_id => Some(card),
            _ => None,
        });
        if let Some(card) = card {
            card.status = status;
            card.summary = summary;
        }
    }

    fn turn_end(&mut self, reason: &TurnEndReason) {
        let (level, text) = match reason {
            TurnEndReason::Completed => return,
            TurnEndReason::Aborted { .. } => (NoticeLevel::Warn, "turn cancelled".to_string()),
            TurnEndReason::MaxTokens => (
                NoticeLevel::Warn,
                "the reply hit the output token limit; its tool calls were not run".to_string(),
            ),
            TurnEndReason::Error { error } => (
                NoticeLevel::Error,
                format!("{}: {}", error.code, error.message),
            ),
            TurnEndReason::Blocked { message } => (
                NoticeLevel::Error,
                format!(
                    "turn blocked: {}",
                    message.as_deref().unwrap_or("no reason given")
                ),
            ),
            TurnEndReason::Interrupted => (
                NoticeLevel::Warn,
                "turn interrupted (the process ended while it ran)".to_string(),
            ),
        };
        self.cells.push(Cell::Notice { level, text });
    }

    fn opaque(&mut self, event_type: &str, data: &Value) {
        let text = match event_type {
            "request/cache" => {
                if let Some(ratio) = data["cacheHitRatio"].as_f64() {
                    self.stats.last_cache_hit = Some(ratio);
                }
                return;
            }
            "compaction/start" => format!(
                "compacting the conversation ({}; ~{} tokens of a {}-token window)",
                data["trigger"].as_str().unwrap_or("?"),
                data["estimatedTokens"],
                data["contextWindow"]
            ),
            "compaction/end" => match data["warning"].as_str() {
                Some(warning) => format!("compaction incomplete: {warning}"),
                None => format!(
                    "compacted: {} old messages summarised, {} tool results pruned, ~{} -> ~{} tokens",
                    data["summarizedMessages"],
                    data["pruned"],
                    data["tokensBefore"],
                    data["tokensAfter"]
                ),
            },
            "approval/asked" => format!(
                "approval asked for {}: {}",
                data["toolName"].as_str().unwrap_or("a tool"),
                data["reason"].as_str().unwrap_or("")
            ),
            "permission/preset" => {
                let Some(preset) = data["preset"].as_str() else {
                    return;
                };
                let previous = self.stats.permission.replace(preset.to_string());
                match previous {
                    Some(previous) if previous != preset => format!(
                        "permission preset: {preset} (was {previous}); applies from the next step"
                    ),
                    // The session's first record, or the preset already in force.
                    _ => return,
                }
            }
            "sandbox/mode" => {
                let Some(mode) = data["mode"].as_str() else {
                    return;
                };
                let previous = self.stats.sandbox.replace(mode.to_string());
                match previous {
                    Some(previous) if previous != mode => format!(
                        "sandbox: {mode} ({})",
                        data["detail"].as_str().unwrap_or("no detail")
                    ),
                    _ => return,
                }
            }
            "approval/decided" => {
                let rule = data["rule"].as_str().unwrap_or("a rule");
                match (data["outcome"].as_str(), data["scope"].as_str()) {
                    (Some("approved"), Some("rule")) => format!(
                        "{} allowed by a remembered approval: {rule}",
                        data["toolName"].as_str().unwrap_or("a tool")
                    ),
                    (Some("approved"), Some("session")) => {
                        format!("approved; for this session also {rule}")
                    }
                    (Some("approved"), Some("always")) => {
                        format!("approved; remembered for later sessions: {rule}")
                    }
                    (outcome, _) => format!("approval {}", outcome.unwrap_or("decided")),
                }
            }
            _ => return,
        };
        self.end_preview();
        let notice = Cell::Notice {
            level: NoticeLevel::Info,
            text,
        };
        self.place_notice(notice, event_type, data);
    }

    /// Adds `notice`, of the event `event_type` with `data`. An approval's question and answer
    /// come before the call's card, which is still running (so not yet in the scrollback):
    /// asked, answered, then the result. While it waits, the card says so and the working time
    /// stands still.
    fn place_notice(&mut self, notice: Cell, event_type: &str, data: &Value) {
        let waiting = match event_type {
            "approval/asked" => Some(true),
            "approval/decided" => Some(false),
            _ => None,
        };
        let call = data["callId"].as_str();
        let card = call.and_then(|call| {
            self.cells.iter().rposition(|cell| {
                matches!(cell, Cell::Tool(card) if card.call_id == call && card.status == ToolStatus::Running)
            })
        });
        match (waiting, card) {
            (Some(waiting), Some(at)) => {
                self.cells.insert(at, notice);
                if let Cell::Tool(card) = &mut self.cells[at + 1] {
                    card.progress = waiting.then(|| "awaiting approval".to_string());
                }
            }
            _ => self.cells.push(notice),
        }
        match waiting {
            Some(true) if self.running => {
                self.waiting_since
                    .get_or_insert_with(std::time::Instant::now);
            }
            Some(false) => {
                if let Some(since) = self.waiting_since.take() {
                    self.waited += since.elapsed();
                }
            }
            _ => {}
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
