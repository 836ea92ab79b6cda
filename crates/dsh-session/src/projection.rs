//! Projection of the log to model history (docs/sessions.md, "Projection").
//!
//! Rules: only message events project (`user/message`, `assistant/message`, `tool/result`);
//! chunks, boundaries and every other event never do; an assistant message with no non-blank
//! block is skipped; a message whose `surfaceOp` is `replace {start, end}` takes the place of
//! the history messages with seqs `start..=end` (one message for the whole span).
//!
//! The [`Projector`] is incremental: feed it events one at a time (the agent loop feeds each
//! new event as it appends it) and read the history at any point. It keeps only the projected
//! messages and their seqs, never chunks, so its memory is that of the history.

use dsh_llm::Message;

use crate::envelope::{Envelope, SurfaceOp};
use crate::error::{Result, SessionError};
use crate::event::Event;

/// One message of the projected history with the seq of the event that produced it.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// Seq of the message event.
    pub seq: u64,
    /// The message.
    pub message: Message,
}

/// Incremental projection of a log to model history. See the module docs for the rules.
#[derive(Debug, Clone, Default)]
pub struct Projector {
    entries: Vec<HistoryEntry>,
}

impl Projector {
    /// An empty projection.
    pub fn new() -> Self {
        Projector::default()
    }

    /// Applies one event (borrowed; the message is cloned only if it projects).
    pub fn push(&mut self, env: &Envelope) -> Result<()> {
        match project_message(&env.event) {
            Some(message) => self.apply(env.seq, env.surface_op, message.clone()),
            None => Ok(()),
        }
    }

    /// Applies one event, taking ownership (no clone).
    pub fn push_owned(&mut self, env: Envelope) -> Result<()> {
        if project_message(&env.event).is_none() {
            return Ok(());
        }
        let message = match env.event {
            Event::UserMessage(message) => message,
            Event::AssistantMessage(event) => event.message,
            Event::ToolResult(event) => event.message,
            _ => return Ok(()),
        };
        self.apply(env.seq, env.surface_op, message)
    }

    fn apply(&mut self, seq: u64, op: Option<SurfaceOp>, message: Message) -> Result<()> {
        match op.unwrap_or(SurfaceOp::Append) {
            SurfaceOp::Append => {
                self.entries.push(HistoryEntry { seq, message });
                Ok(())
            }
            SurfaceOp::Replace { start, end } => {
                let (first, last) =
                    self.span(start, end)
                        .ok_or(SessionError::ReplaceSpan { seq, start, end })?;
                self.entries
                    .splice(first..=last, [HistoryEntry { seq, message }]);
                Ok(())
            }
        }
    }

    /// Positions of the entries a replace span cites: from the entry with seq `start` to the
    /// entry with seq `end` when both exist, else the positions of all entries whose seq lies
    /// in `start..=end`.
    fn span(&self, start: u64, end: u64) -> Option<(usize, usize)> {
        let exact_first = self.entries.iter().position(|e| e.seq == start);
        let exact_last = self.entries.iter().rposition(|e| e.seq == end);
        if let (Some(first), Some(last)) = (exact_first, exact_last) {
            if first <= last {
                return Some((first, last));
            }
        }
        let in_span = |e: &HistoryEntry| (start..=end).contains(&e.seq);
        let first = self.entries.iter().position(in_span)?;
        let last = self.entries.iter().rposition(in_span)?;
        Some((first, last))
    }

    /// Loads the bytes of every image of the history that has none from `blobs`; an image that
    /// cannot be read becomes a text placeholder (docs/sessions.md, "Images").
    pub fn load_images(
        &mut self,
        blobs: &crate::blobs::BlobStore,
    ) -> Vec<crate::blobs::BlobProblem> {
        let mut problems = Vec::new();
        for entry in &mut self.entries {
            if dsh_llm::content_has_image(&entry.message.content) {
                problems.extend(blobs.load_into(std::slice::from_mut(&mut entry.message)));
            }
        }
        problems
    }

    /// The history entries, oldest first.
    pub fn entries(&self) -> &[HistoryEntry] {
        &self.entries
    }

    /// The history messages, oldest first.
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.entries.iter().map(|e| &e.message)
    }

    /// A copy of the history (what a model request sends after the system prompt).
    pub fn history(&self) -> Vec<Message> {
        self.messages().cloned().collect()
    }

    /// Consumes the projector, giving the history.
    pub fn into_history(self) -> Vec<Message> {
        self.entries.into_iter().map(|e| e.message).collect()
    }

    /// Number of messages in the history.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the history is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The message an event contributes to the history, if any (before surface ops).
fn project_message(event: &Event) -> Option<&Message> {
    match event {
        Event::UserMessage(message) => Some(message),
        Event::AssistantMessage(event) if !event.message.is_empty() => Some(&event.message),
        Event::ToolResult(event) => Some(&event.message),
        _ => None,
    }
}

/// Projects a whole event list at once.
pub fn project<'a>(events: impl IntoIterator<Item = &'a Envelope>) -> Result<Vec<Message>> {
    let mut projector = Projector::new();
    for env in events {
        projector.push(env)?;
    }
    Ok(projector.into_history())
}
