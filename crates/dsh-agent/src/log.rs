//! The loop's view of the session log: append, project, notify.
//!
//! Every event the loop writes goes through [`SessionLog::append`], which assigns the seq, feeds
//! the projector (so the next request is rebuilt from the log, docs/sessions.md), tells the
//! extensions and publishes the event to front ends.

use std::sync::Arc;

use dsh_llm::{HistoryLineage, Message};
use dsh_session::{Envelope, Event, Projector, SessionWriter, TurnEndReason};
use tokio::sync::broadcast;

use crate::extension::ExtensionSet;
use crate::inbox::{Inbox, Splice};

/// Capacity of the event broadcast; a front end that lags further behind misses events (it
/// can always re-read the log).
const EVENT_CHANNEL_CAPACITY: usize = 4096;

/// An event as published to observers: the envelope with its seq.
pub type SessionEvent = Arc<Envelope>;

/// The session log plus the derived state the loop needs between events.
pub struct SessionLog {
    writer: Box<dyn SessionWriter>,
    projector: Projector,
    extensions: ExtensionSet,
    events: broadcast::Sender<SessionEvent>,
    pub(crate) inbox: Inbox,
    last_turn_end: Option<TurnEndReason>,
    /// Serialized size of the projected history, kept up to date on every append.
    history_bytes: usize,
    /// The projected history as the last request carried it, extended on every append, so a
    /// request shares it instead of copying every message (`None`: rebuild from the projector,
    /// after a compaction's replace). Equal to `projector.history()` whenever it is `Some`.
    shared_history: Option<Arc<Vec<Message>>>,
    /// The lineage of `shared_history`: new whenever it is rebuilt from the projector, kept
    /// while appends only extend it (docs/model-calls.md, "History lineage").
    lineage: HistoryLineage,
}

/// Serialized size of one message, the unit of the history-size bookkeeping.
pub(crate) fn message_bytes(message: &Message) -> usize {
    serde_json::to_vec(message).map(|v| v.len()).unwrap_or(0)
}

impl SessionLog {
    /// Wraps a writer and the projection of what it already holds.
    pub(crate) fn new(
        writer: Box<dyn SessionWriter>,
        projector: Projector,
        extensions: ExtensionSet,
        inbox: Inbox,
        last_turn_end: Option<TurnEndReason>,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        let history_bytes = projector.messages().map(message_bytes).sum();
        SessionLog {
            history_bytes,
            shared_history: None,
            lineage: HistoryLineage::new(),
            writer,
            projector,
            extensions,
            events,
            inbox,
            last_turn_end,
        }
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.writer.header().id
    }

    /// Where the session is stored.
    pub fn location(&self) -> String {
        self.writer.location()
    }

    /// The writer, for its tracked state.
    pub fn writer(&self) -> &dyn SessionWriter {
        self.writer.as_ref()
    }

    /// A new receiver of every event appended from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }

    /// How the previous turn ended, if one did.
    pub fn last_turn_end(&self) -> Option<&TurnEndReason> {
        self.last_turn_end.as_ref()
    }

    /// Appends `envelope`; returns its seq.
    pub fn append_envelope(&mut self, mut envelope: Envelope) -> dsh_session::Result<u64> {
        if envelope.time.is_none() {
            envelope.time = Some(dsh_session::now_ms());
        }
        // The writer encodes from `envelope` and sets its seq: no copy of the event is made.
        let seq = self.writer.append_kept(&mut envelope)?;
        let before = self.projector.len();
        self.projector.push(&envelope)?;
        match envelope.surface_op {
            Some(dsh_session::SurfaceOp::Replace { .. }) => {
                self.history_bytes = self.projector.messages().map(message_bytes).sum();
                self.shared_history = None;
            }
            _ if self.projector.len() > before => {
                if let Some(entry) = self.projector.entries().last() {
                    self.history_bytes += message_bytes(&entry.message);
                    match self.shared_history.as_mut() {
                        // Unshared once the previous request is gone, so this pushes in place.
                        Some(shared) if shared.len() + 1 == self.projector.len() => {
                            Arc::make_mut(shared).push(entry.message.clone());
                        }
                        _ => self.shared_history = None,
                    }
                }
            }
            _ => {}
        }
        if let Event::TurnEnd(end) = &envelope.event {
            self.last_turn_end = Some(end.reason.clone());
        }
        let envelope = Arc::new(envelope);
        for extension in self.extensions.snapshot() {
            extension.on_event(&envelope);
        }
        // No receiver is fine: nobody is watching.
        let _ = self.events.send(envelope);
        Ok(seq)
    }

    /// Appends an event with the default envelope.
    pub fn append(&mut self, event: Event) -> dsh_session::Result<u64> {
        self.append_envelope(Envelope::new(event))
    }

    /// Makes everything appended so far durable.
    pub fn flush(&mut self) -> dsh_session::Result<()> {
        self.writer.flush()
    }

    /// Flushes with the sync left to run while the model call starts; the next append waits
    /// for it (`SessionWriter::flush_in_background`).
    pub fn flush_in_background(&mut self) -> dsh_session::Result<()> {
        self.writer.flush_in_background()
    }

    /// Puts everything appended so far into the store without syncing it (a flush follows
    /// before anything leaves dsh; docs/sessions.md, "Durability and crash repair").
    pub fn write_through(&mut self) -> dsh_session::Result<()> {
        self.writer.write_through()
    }

    /// Logs an inbox change.
    pub fn append_splice(&mut self, splice: &Splice) -> dsh_session::Result<u64> {
        self.append(Event::InboxSpliced(dsh_session::InboxSplice {
            target: splice.target.as_str().to_string(),
            start: splice.start as u64,
            removed_count: (splice.removed > 0).then_some(splice.removed as u64),
            inserted: splice.inserted.clone(),
            outcome: None,
        }))
    }

    /// The projected history with the seq of each message.
    pub fn history_entries(&self) -> &[dsh_session::HistoryEntry] {
        self.projector.entries()
    }

    /// Serialized size of the projected history in bytes.
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// The history the next request sends.
    pub fn history(&self) -> Vec<Message> {
        self.projector.history()
    }

    /// The same history, shared: the request holds it without a copy of every message, and
    /// the next append extends it in place once that request is dropped (docs/PERFORMANCE.md,
    /// "Per-step overhead"). With its lineage, which stays the same while the history only
    /// grows, so that an adapter can reuse what it made of the messages it sent before.
    pub fn shared_history(&mut self) -> (Arc<Vec<Message>>, HistoryLineage) {
        match &self.shared_history {
            Some(shared) if shared.len() == self.projector.len() => {
                (Arc::clone(shared), self.lineage)
            }
            _ => {
                let built = Arc::new(self.projector.history());
                self.shared_history = Some(Arc::clone(&built));
                self.lineage = HistoryLineage::new();
                (built, self.lineage)
            }
        }
    }
}
