//! Children's live progress as `tool_call_update`s (docs/acp.md, "Subagents").
//!
//! The session's [`dsh_agent::ChildFeed`] carries every event of its running children. A
//! foreground run (the parent's `subagent`, `subagent_fork` or `send_message` call waits for
//! it) is shown on that call's own tool card: `tool_call_update`s with status `in_progress`
//! whose content is a snapshot of the child's progress (what it is doing now, its recent tool
//! calls, the tail of the text it is writing). ACP replaces a card's content with each update,
//! so every update carries the whole snapshot; the parent's `tool/result` then replaces it with
//! the answer and completes the card.
//!
//! A background run has no waiting call (the parent's call completed when it returned the job
//! id), so it gets a card of its own, `<call id>/<child name>`: a `tool_call` at its first
//! event, progress updates, and `completed` or `failed` when its turn ends.
//!
//! A run's events go through a `dsh_protocol::ViewProjector` of its own, so the snapshot shows
//! the child's calls with their tools' titles and the protocol's card states, and the run's end
//! is classified once, as every front end does (`EndState`: a reply cut at the output limit
//! failed, a cancel or an interrupted run is not completed).
//!
//! Updates are throttled per run: at most one per [`MIN_INTERVAL`]; a change that arrives
//! sooner is held and sent when the interval has passed (or before the parent's result for the
//! call), so the last state always reaches the client.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_agent::{ChildActivity, ChildIdentity};
use dsh_llm::{Chunk, ContentBlock};
use dsh_protocol::{EndState, ViewEvent, ViewProjector};
use dsh_session::{Envelope, Event};
use serde_json::{json, Value};

/// The shortest time between two updates of one run (at most ten a second).
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How many of a child's most recent tool calls the snapshot lists.
const RECENT_TOOLS: usize = 6;

/// How much of the text a child is writing the snapshot shows (its end), in characters.
const TEXT_TAIL: usize = 400;

/// The longest tool title the snapshot shows, in characters (a long command is cut).
const TITLE_MAX: usize = 120;

/// One of the child's tool calls as the snapshot lists it.
struct ToolLine {
    call_id: String,
    title: String,
    /// The card's state (`pending`, `running`, `done`, ...).
    state: &'static str,
}

/// What is known of one run of a child, and what the client was last sent about it.
struct Run {
    child: Arc<ChildIdentity>,
    background: bool,
    /// The background card's `tool_call` was sent.
    opened: bool,
    /// What the child is doing now, in a few words.
    doing: String,
    tools: VecDeque<ToolLine>,
    /// The end of the text of the child's current reply.
    text: String,
    /// How the child's turn ended, once it did.
    ended: Option<EndState>,
    /// The snapshot last sent, and when.
    sent: Option<(String, Instant)>,
    /// The status last sent (background cards only).
    sent_status: &'static str,
    /// Something shown changed since the last update.
    dirty: bool,
    /// The child's events as the session protocol shows them.
    projector: ViewProjector,
}

/// Children's activity to ACP updates, throttled (see the module docs).
pub(crate) struct ChildProgress {
    runs: HashMap<String, Run>,
    /// The parent's calls whose result was sent: late activity for them is not shown.
    settled: HashSet<String>,
    interval: Duration,
}

/// `text` cut to its first `max` characters, with `...` when it was longer.
fn head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

fn tail(text: &str, max: usize) -> &str {
    let count = text.chars().count();
    if count <= max {
        return text;
    }
    let skip = count - max;
    match text.char_indices().nth(skip) {
        Some((at, _)) => &text[at..],
        None => text,
    }
}

impl Run {
    fn new(child: Arc<ChildIdentity>, background: bool) -> Run {
        Run {
            child,
            background,
            opened: false,
            doing: "starting".to_string(),
            tools: VecDeque::new(),
            text: String::new(),
            ended: None,
            sent: None,
            sent_status: "in_progress",
            dirty: false,
            projector: ViewProjector::default(),
        }
    }

    fn tool(&mut self, call_id: &str) -> Option<&mut ToolLine> {
        self.tools.iter_mut().find(|t| t.call_id == call_id)
    }

    fn push_text(&mut self, text: &str) {
        self.text.push_str(text);
        if self.text.len() > TEXT_TAIL * 8 {
            self.text = tail(&self.text, TEXT_TAIL).to_string();
        }
        self.doing = "writing".to_string();
    }

    /// Takes in one event of the child; false when it changes nothing shown.
    fn observe(&mut self, envelope: &Envelope) -> bool {
        let mut changed = false;
        // A text block that arrived whole, without deltas (the view streams deltas only).
        if let Event::AssistantChunk(chunk) = &envelope.event {
            if let Chunk::BlockEnd {
                block: ContentBlock::Text { text },
                ..
            } = &chunk.chunk
            {
                if self.text.is_empty() && !text.is_empty() {
                    self.push_text(text);
                    changed = true;
                }
            }
        }
        let new_call = matches!(envelope.event, Event::ToolCall(_));
        for event in self.projector.project(envelope) {
            changed |= self.view(event, new_call);
        }
        changed
    }

    /// Takes in one view event of the child (of a `tool/call` when `new_call`); false when it
    /// changes nothing shown.
    fn view(&mut self, event: ViewEvent, new_call: bool) -> bool {
        match event {
            ViewEvent::TurnStarted { .. } => {
                self.ended = None;
                self.text.clear();
                self.doing = "working".to_string();
            }
            ViewEvent::StepStarted { .. } => {
                self.text.clear();
                self.doing = "thinking".to_string();
            }
            ViewEvent::TextDelta { text } if !text.is_empty() => self.push_text(&text),
            ViewEvent::ReasoningDelta { text } if !text.is_empty() => {
                self.doing = "thinking".to_string();
            }
            ViewEvent::ToolCard(card) => {
                let state = card.state.as_str();
                if let Some(tool) = self.tool(&card.call_id) {
                    tool.state = state;
                    let title = tool.title.clone();
                    self.doing = match card.state {
                        dsh_protocol::CardState::Running => format!("running `{title}`"),
                        s if s.is_final() => "thinking".to_string(),
                        _ => self.doing.clone(),
                    };
                } else if new_call {
                    let title = head(&card.presentation.headline(), TITLE_MAX);
                    self.doing = format!("calling `{title}`");
                    self.tools.push_back(ToolLine {
                        call_id: card.call_id,
                        title,
                        state,
                    });
                    while self.tools.len() > RECENT_TOOLS {
                        self.tools.pop_front();
                    }
                } else {
                    // A call no longer listed.
                    return false;
                }
            }
            ViewEvent::TurnEnded { state, reason, .. } => {
                self.ended = Some(state);
                self.doing = match state {
                    EndState::Completed => "finished".to_string(),
                    _ => format!("stopped ({reason})"),
                };
            }
            _ => return false,
        }
        true
    }

    /// The progress snapshot as the card's text.
    fn snapshot(&self) -> String {
        let mut out = format!("{}: {}", self.child.name, self.doing);
        for tool in &self.tools {
            out.push_str(&format!("\n- {} ({})", tool.title, tool.state));
        }
        let text = tail(self.text.trim(), TEXT_TAIL);
        if !text.is_empty() {
            out.push_str("\n\n");
            out.push_str(text);
        }
        out
    }

    fn status(&self) -> &'static str {
        match (self.background, self.ended) {
            (true, Some(EndState::Completed)) => "completed",
            (true, Some(_)) => "failed",
            _ => "in_progress",
        }
    }

    fn meta(&self) -> Value {
        json!({"dsh": {"child": {
            "id": self.child.id,
            "name": self.child.name,
            "label": self.child.label,
            "model": self.child.model,
            "depth": self.child.depth,
            "background": self.background,
        }, "activity": self.doing}})
    }

    /// The updates that bring the client up to date (none when it is), sent at `now`.
    fn send(&mut self, card: &str, now: Instant) -> Vec<Value> {
        self.dirty = false;
        let snapshot = self.snapshot();
        let status = self.status();
        let unchanged = self.sent.as_ref().is_some_and(|(s, _)| *s == snapshot);
        if unchanged && status == self.sent_status {
            return Vec::new();
        }
        let mut out = Vec::new();
        if self.background && !self.opened {
            self.opened = true;
            out.push(json!({
                "sessionUpdate": "tool_call",
                "toolCallId": card,
                "title": format!("{} (background): {}", self.child.name, self.child.label),
                "kind": "other",
                "status": "in_progress",
                "rawInput": {"subagent_id": self.child.name},
                "_meta": self.meta(),
            }));
        }
        let mut update = json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": card,
            "status": status,
            "content": [{"type": "content", "content": {"type": "text", "text": snapshot}}],
            "_meta": self.meta(),
        });
        if !self.background {
            // A foreground card's status is the parent's: its result completes the card.
            if let Some(map) = update.as_object_mut() {
                map.remove("status");
            }
        }
        out.push(update);
        self.sent = Some((snapshot, now));
        self.sent_status = status;
        out
    }

    /// When a held change may be sent (`None`: nothing is held).
    fn due_at(&self, interval: Duration) -> Option<Instant> {
        let (_, at) = self.sent.as_ref()?;
        self.dirty.then_some(*at + interval)
    }
}

impl ChildProgress {
    pub(crate) fn new() -> Self {
        Self::with_interval(MIN_INTERVAL)
    }

    pub(crate) fn with_interval(interval: Duration) -> Self {
        ChildProgress {
            runs: HashMap::new(),
            settled: HashSet::new(),
            interval,
        }
    }

    /// The card a run is shown on: the waiting call's own, or a card of its own for a run no
    /// call waits for.
    fn card(activity: &ChildActivity) -> String {
        match (&activity.call_id, activity.background) {
            (Some(call), false) => call.clone(),
            (Some(call), true) => format!("{call}/{}", activity.child.name),
            (None, _) => format!("{}/{}", activity.child.id, activity.child.name),
        }
    }

    /// Takes in one event of a child at `now`: the updates to send now (none when nothing
    /// shown changed, or the run's last update is more recent than the interval).
    pub(crate) fn observe(&mut self, activity: &ChildActivity, now: Instant) -> Vec<Value> {
        let card = Self::card(activity);
        if self.settled.contains(&card) {
            return Vec::new();
        }
        let background = activity.background || activity.call_id.is_none();
        let run = self
            .runs
            .entry(card.clone())
            .or_insert_with(|| Run::new(Arc::clone(&activity.child), background));
        if !run.observe(&activity.event) {
            return Vec::new();
        }
        run.dirty = true;
        let finished_background = run.background && run.ended.is_some();
        let throttled = run
            .sent
            .as_ref()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) < self.interval);
        if throttled && !finished_background {
            return Vec::new();
        }
        // A background card's end is sent at once: no result of the parent's follows it.
        run.send(&card, now)
    }

    /// The held updates whose interval has passed by `now`.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Value> {
        let interval = self.interval;
        let mut out = Vec::new();
        for (card, run) in &mut self.runs {
            if run.due_at(interval).is_some_and(|at| at <= now) {
                out.extend(run.send(card, now));
            }
        }
        out
    }

    /// When the next held update is due, if one is held.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|run| run.due_at(self.interval))
            .min()
    }

    /// The parent's result for `call_id` is about to be sent: the run's held state goes out
    /// first, and nothing more is shown on that card.
    pub(crate) fn settle(&mut self, call_id: &str, now: Instant) -> Vec<Value> {
        self.settled.insert(call_id.to_string());
        match self.runs.remove(call_id) {
            Some(mut run) => run.send(call_id, now),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dsh_session::{AssistantChunk, Envelope, ToolCall, TurnEnd, TurnEndReason, TurnStart};

    fn child() -> Arc<ChildIdentity> {
        Arc::new(ChildIdentity {
            id: "child-1".into(),
            name: "agent-1".into(),
            label: "count".into(),
            model: "m".into(),
            depth: 1,
            log: "/tmp/x".into(),
        })
    }

    fn activity(call: Option<&str>, background: bool, event: Event) -> ChildActivity {
        ChildActivity {
            child: child(),
            call_id: call.map(str::to_string),
            background,
            event: Arc::new(Envelope::new(event)),
        }
    }

    fn delta(text: &str) -> Event {
        Event::AssistantChunk(AssistantChunk {
            turn: 1,
            step: 1,
            chunk: Chunk::TextDelta {
                index: 0,
                text: text.into(),
            },
        })
    }

    fn text_of(update: &Value) -> &str {
        update["content"][0]["content"]["text"].as_str().unwrap()
    }

    #[test]
    fn a_chatty_child_is_throttled_and_its_last_state_is_delivered() {
        let mut progress = ChildProgress::new();
        let start = Instant::now();
        let mut sent = Vec::new();
        // 1,000 deltas over one second: one every millisecond.
        for i in 0..1000u64 {
            let now = start + Duration::from_millis(i);
            let text = format!("{i} ");
            sent.extend(progress.observe(&activity(Some("p1"), false, delta(&text)), now));
            if let Some(at) = progress.next_due() {
                if at <= now {
                    sent.extend(progress.due(now));
                }
            }
        }
        assert!(sent.len() <= 11, "{} updates in one second", sent.len());
        assert!(sent.len() >= 9, "only {} updates", sent.len());
        // The last deltas are held, then sent at the end of the interval.
        let at = progress.next_due().unwrap();
        let last = progress.due(at);
        assert_eq!(last.len(), 1);
        assert!(
            text_of(&last[0]).ends_with(" 998 999"),
            "{}",
            text_of(&last[0])
        );
        assert!(
            last[0].get("status").is_none(),
            "the parent's result completes it"
        );
        assert_eq!(progress.next_due(), None);
    }

    #[test]
    fn settling_sends_what_is_held_and_closes_the_card() {
        let mut progress = ChildProgress::new();
        let now = Instant::now();
        let first = progress.observe(
            &activity(Some("p1"), false, Event::TurnStart(TurnStart { turn: 1 })),
            now,
        );
        assert_eq!(text_of(&first[0]), "agent-1: working");
        let call = Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"cargo test"}"#.into(),
            presentation: None,
        });
        assert!(progress
            .observe(&activity(Some("p1"), false, call), now)
            .is_empty());
        let held = progress.settle("p1", now);
        assert_eq!(
            text_of(&held[0]),
            "agent-1: calling `bash: cargo test`\n- bash: cargo test (pending)"
        );
        let late = progress.observe(&activity(Some("p1"), false, delta("late")), now);
        assert!(late.is_empty());
        assert_eq!(progress.next_due(), None);
    }

    #[test]
    fn a_run_cut_by_max_tokens_ends_its_card_failed_as_the_other_front_ends_show_it() {
        let mut progress = ChildProgress::new();
        let now = Instant::now();
        progress.observe(
            &activity(Some("p1"), true, Event::TurnStart(TurnStart { turn: 1 })),
            now,
        );
        let end = Event::TurnEnd(TurnEnd {
            turn: 1,
            reason: TurnEndReason::MaxTokens,
        });
        let ended = progress.observe(&activity(Some("p1"), true, end), now);
        assert_eq!(ended[0]["status"], "failed");
        assert_eq!(text_of(&ended[0]), "agent-1: stopped (max-tokens)");
    }

    #[test]
    fn a_background_run_gets_its_own_card_that_its_end_completes() {
        let mut progress = ChildProgress::new();
        let now = Instant::now();
        let opened = progress.observe(
            &activity(Some("p1"), true, Event::TurnStart(TurnStart { turn: 1 })),
            now,
        );
        assert_eq!(opened[0]["sessionUpdate"], "tool_call");
        assert_eq!(opened[0]["toolCallId"], "p1/agent-1");
        assert_eq!(opened[1]["status"], "in_progress");
        let end = Event::TurnEnd(TurnEnd {
            turn: 1,
            reason: TurnEndReason::Completed,
        });
        let ended = progress.observe(&activity(Some("p1"), true, end), now);
        assert_eq!(ended.len(), 1, "sent at once, not held");
        assert_eq!(ended[0]["status"], "completed");
        assert_eq!(text_of(&ended[0]), "agent-1: finished");
    }

    #[test]
    fn the_tail_keeps_whole_characters() {
        assert_eq!(tail("héllo wörld", 5), "wörld");
        assert_eq!(tail("ab", 5), "ab");
        assert_eq!(head("héllo wörld", 5), "héllo...");
        assert_eq!(head("ab", 5), "ab");
    }
}
