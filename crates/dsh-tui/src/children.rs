//! The session's children (docs/tui.md, "Children"): what the TUI knows of each sub-agent from
//! the parent's live feed (`dsh_agent::ChildFeed`, docs/agent.md, "Watching children"), the
//! compact panel shown while children run, the `/agents` list, and the followed child, whose
//! events are folded into a transcript of its own and drawn with the same renderer.
//!
//! Each event costs one fold into its child's transcript and a few string compares; the parent's
//! transcript only changes when a child's activity text changes (the `subagent` card's progress),
//! so only that card is laid out again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsh_agent::{ChildActivity, StoredChild};
use dsh_llm::Chunk;
use dsh_protocol::{CardState, EndState};
use dsh_session::{Envelope, Event};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::transcript::Transcript;
use crate::view::{short_tokens, ViewCache};

/// Rows the panel takes at most (one is the "more" row when there are more children).
pub const PANEL_ROWS: usize = 5;

/// Where a child is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// A run is going on.
    Running,
    /// Its last run completed.
    Done,
    /// Its last run failed.
    Failed,
    /// Its last run was cancelled, or the process stopped while it ran.
    Cancelled,
}

impl ChildState {
    /// The state after a run that ended as `end`.
    pub fn ended(end: EndState) -> ChildState {
        match end {
            EndState::Completed => ChildState::Done,
            EndState::Cancelled => ChildState::Cancelled,
            EndState::Failed => ChildState::Failed,
        }
    }

    /// The word the panel shows.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildState::Running => "running",
            ChildState::Done => "done",
            ChildState::Failed => "failed",
            ChildState::Cancelled => "cancelled",
        }
    }
}

/// One child as the TUI shows it.
#[derive(Debug)]
pub struct ChildView {
    /// The child's session id.
    pub id: String,
    /// Its name (`agent-N`).
    pub name: String,
    /// The label it was started with.
    pub label: String,
    /// Its log, to read it when its events were not seen live (a resumed session).
    pub log: PathBuf,
    /// The parent's tool call its current run answers.
    pub call_id: Option<String>,
    /// No tool call waits for its current run (a background child).
    pub background: bool,
    /// Where it is.
    pub state: ChildState,
    /// When its current run started (as the TUI saw it).
    pub started: Option<Instant>,
    /// How long its last finished run took.
    pub took: Option<Duration>,
    /// Its latest activity: a tool call's title, `thinking`, `writing`, ...
    pub activity: String,
    /// Output tokens of its logged replies.
    pub tokens: u64,
    /// Deltas streamed since its last logged reply (about a token each).
    pub streamed: u64,
    /// Its events folded as the parent's are (what following it shows).
    pub transcript: Transcript,
    /// True once its transcript holds its log (live events, or a log read on demand).
    pub loaded: bool,
    /// Shown in the panel: seen running since the panel last opened.
    in_panel: bool,
}

impl ChildView {
    fn new(id: String, name: String, label: String, log: PathBuf) -> ChildView {
        ChildView {
            id,
            name,
            label,
            log,
            call_id: None,
            background: false,
            state: ChildState::Done,
            started: None,
            took: None,
            activity: String::new(),
            tokens: 0,
            streamed: 0,
            transcript: Transcript::new(),
            loaded: false,
            in_panel: false,
        }
    }

    /// Time of the current run, or of the last one.
    pub fn elapsed(&self) -> Option<Duration> {
        match (self.state, self.started) {
            (ChildState::Running, Some(started)) => Some(started.elapsed()),
            _ => self.took,
        }
    }

    /// Tokens so far: logged replies and what the current reply streamed.
    pub fn token_count(&self) -> u64 {
        self.tokens + self.streamed
    }

    /// What its `subagent` card shows while the call waits for it.
    pub fn progress(&self) -> String {
        format!("{} · {}", self.name, self.activity)
    }
}

/// Every child of the session the TUI knows, in the order they appeared.
#[derive(Default)]
pub struct Children {
    /// The children.
    pub list: Vec<ChildView>,
    /// The `/agents` list, when open: its highlighted row.
    pub menu: Option<usize>,
    /// The child being followed (its id).
    pub followed: Option<String>,
    /// The followed child's layout cache.
    pub cache: ViewCache,
}

impl Children {
    /// True while a child runs.
    pub fn any_running(&self) -> bool {
        self.list.iter().any(|c| c.state == ChildState::Running)
    }

    /// The child with session id `id`.
    pub fn get(&self, id: &str) -> Option<&ChildView> {
        self.list.iter().find(|c| c.id == id)
    }

    /// The followed child, if it is known.
    pub fn followed(&self) -> Option<&ChildView> {
        self.followed.as_deref().and_then(|id| self.get(id))
    }

    fn entry(&mut self, id: &str) -> Option<usize> {
        self.list.iter().position(|c| c.id == id)
    }

    /// Folds in one event of a child's live feed. Returns the parent's tool call to show
    /// progress on and the text, when there is one.
    pub fn apply(&mut self, activity: &ChildActivity) -> Option<(String, String)> {
        let who = &activity.child;
        let at = match self.entry(&who.id) {
            Some(at) => at,
            None => {
                self.list.push(ChildView::new(
                    who.id.clone(),
                    who.name.clone(),
                    who.label.clone(),
                    who.log.clone(),
                ));
                self.list.len() - 1
            }
        };
        if !self.any_running() && matches!(activity.event.event, Event::TurnStart(_)) {
            // The panel opens again: it lists the children that run from now on.
            for child in &mut self.list {
                child.in_panel = false;
            }
        }
        let child = &mut self.list[at];
        child.loaded = true;
        child.call_id = activity.call_id.clone().or(child.call_id.take());
        child.background = activity.background;
        child.transcript.apply(&activity.event);
        let changed = fold(child, &activity.event);
        let call = child.call_id.clone().filter(|_| !activity.background);
        match call {
            Some(call) if changed => Some((call, child.progress())),
            _ => None,
        }
    }

    /// The parent's tool call `call_id` has its result, which left its card in `state`: a
    /// child still shown running for it (its last events were missed, the feed lagged) has
    /// ended, as the card says.
    pub fn call_settled(&mut self, call_id: &str, state: CardState) {
        for child in &mut self.list {
            let waited = !child.background && child.call_id.as_deref() == Some(call_id);
            if child.state == ChildState::Running && waited {
                child.took = child.started.map(|s| s.elapsed());
                child.streamed = 0;
                child.state = match state {
                    CardState::Done => ChildState::Done,
                    CardState::Cancelled => ChildState::Cancelled,
                    _ => ChildState::Failed,
                };
                child.activity = child.state.as_str().to_string();
            }
        }
    }

    /// Adds the children of a stored session not known yet (a resumed session's, read with
    /// `dsh_agent::read_children`).
    pub fn add_stored(&mut self, stored: Vec<StoredChild>) {
        for child in stored {
            if self.entry(&child.id).is_some() {
                continue;
            }
            let name = child.name.clone().unwrap_or_else(|| child.id.clone());
            let state = match child.state() {
                "failed" => ChildState::Failed,
                "cancelled" | "interrupted" => ChildState::Cancelled,
                _ => ChildState::Done,
            };
            let tokens = child.usage.usage.output_tokens;
            let mut view = ChildView::new(child.id, name, child.label, child.log);
            view.state = state;
            view.tokens = tokens;
            view.activity = view.state.as_str().to_string();
            self.list.push(view);
        }
    }

    /// Replaces child `id`'s transcript with the events of its log.
    pub fn load(&mut self, id: &str, events: &[Envelope]) {
        if let Some(at) = self.entry(id) {
            let child = &mut self.list[at];
            let mut transcript = Transcript::new();
            for event in events {
                transcript.apply(event);
            }
            child.transcript = transcript;
            child.loaded = true;
            self.cache = ViewCache::default();
        }
    }

    /// Starts following child `id` (its transcript is drawn instead of the parent's).
    pub fn follow(&mut self, id: &str) {
        self.followed = Some(id.to_string());
        self.menu = None;
        self.cache = ViewCache::default();
    }

    /// The children the panel lists: those that ran since it opened, while one runs.
    fn in_panel(&self) -> Vec<&ChildView> {
        if !self.any_running() {
            return Vec::new();
        }
        self.list.iter().filter(|c| c.in_panel).collect()
    }

    /// Rows the panel takes (0 when no child runs).
    pub fn panel_rows(&self) -> u16 {
        let shown = self.in_panel().len();
        if shown == 0 {
            return 0;
        }
        // A title row, the children, at most PANEL_ROWS of them.
        (1 + shown.min(PANEL_ROWS)) as u16
    }

    /// The panel's lines: a title, then one line per child (the running ones first when they
    /// do not all fit).
    pub fn panel_lines(&self) -> Vec<Line<'static>> {
        let mut shown = self.in_panel();
        if shown.is_empty() {
            return Vec::new();
        }
        let dim = Style::default().fg(Color::DarkGray);
        let mut lines = vec![Line::from(vec![
            Span::styled("agents ", Style::default().add_modifier(Modifier::BOLD)),
            Span::styled("· /agents to follow one", dim),
        ])];
        let more = shown.len().saturating_sub(PANEL_ROWS);
        if more > 0 {
            shown.sort_by_key(|c| c.state != ChildState::Running);
            shown.truncate(PANEL_ROWS - 1);
        }
        lines.extend(shown.iter().map(|c| child_line(c)));
        if more > 0 {
            lines.push(Line::from(Span::styled(
                format!("  … {} more", more + 1),
                dim,
            )));
        }
        lines
    }
}

/// Updates the state and activity of `child` for `event`; true when its activity text
/// changed.
fn fold(child: &mut ChildView, event: &Envelope) -> bool {
    let before = child.activity.clone();
    match &event.event {
        Event::TurnStart(_) => {
            child.state = ChildState::Running;
            child.started = Some(Instant::now());
            child.took = None;
            child.in_panel = true;
            child.streamed = 0;
            child.activity = "starting".to_string();
        }
        Event::AssistantChunk(chunk) => match &chunk.chunk {
            Chunk::ReasoningDelta { .. } => {
                child.streamed += 1;
                child.activity = "thinking".to_string();
            }
            Chunk::TextDelta { .. } => {
                child.streamed += 1;
                child.activity = "writing".to_string();
            }
            _ => {}
        },
        Event::AssistantMessage(message) => {
            child.streamed = 0;
            if let Some(usage) = &message.usage {
                child.tokens += usage.output_tokens;
            }
        }
        Event::ToolCall(call) => {
            child.activity = crate::cards::tool_title(call);
        }
        Event::TurnEnd(end) => {
            child.took = child.started.map(|s| s.elapsed());
            child.streamed = 0;
            // The one classification of a turn's end every front end shows
            // (docs/protocol.md, "Turn ends").
            child.state = ChildState::ended(EndState::of(&end.reason));
            child.activity = child.state.as_str().to_string();
        }
        _ => {}
    }
    child.activity != before
}

/// `◌ agent-1  fix the parser  running  12s  bash $ cargo test  ↓ 1.2k`
fn child_line(child: &ChildView) -> Line<'static> {
    let (mark, color) = match child.state {
        ChildState::Running => ("◌", Color::Yellow),
        ChildState::Done => ("●", Color::Green),
        ChildState::Failed => ("●", Color::Red),
        ChildState::Cancelled => ("●", Color::DarkGray),
    };
    let dim = Style::default().fg(Color::DarkGray);
    let elapsed = child
        .elapsed()
        .map_or(String::new(), |d| format!("  {}s", d.as_secs()));
    let label: String = child.label.chars().take(32).collect();
    Line::from(vec![
        Span::styled(format!("  {mark} "), Style::default().fg(color)),
        Span::styled(
            child.name.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  {label}  ")),
        Span::styled(child.state.as_str(), Style::default().fg(color)),
        Span::styled(elapsed, dim),
        Span::raw(format!("  {}", child.activity)),
        Span::styled(
            format!("  ↓ {} tokens", short_tokens(child.token_count())),
            dim,
        ),
    ])
}

/// The `/agents` list's lines: one per child, the highlighted one reversed.
pub fn menu_lines(children: &Children, selected: usize) -> Vec<Line<'static>> {
    if children.list.is_empty() {
        return vec![Line::from("no sub-agents in this session yet")];
    }
    children
        .list
        .iter()
        .enumerate()
        .map(|(i, child)| {
            let mut line = child_line(child);
            if i == selected {
                line = line.style(Style::default().add_modifier(Modifier::REVERSED));
            }
            line
        })
        .collect()
}
