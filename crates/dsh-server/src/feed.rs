//! One session's events as the server shows them: the log from the start, then live events,
//! without gaps or duplicates, for any number of SSE clients.
//!
//! A [`Feed`] holds the session's envelopes in seq order. For a live session it is fed from
//! the agent's broadcast; a client never subscribes to that broadcast itself, it keeps a
//! cursor into the feed and waits on a watch of the feed's length, so a slow client cannot
//! lag and lose events. Should the feed's own forwarder ever lag behind the broadcast, it
//! stops taking events until the next flush-point event, then re-reads the missing ones from
//! the log file, which holds everything up to that point.
//!
//! Each envelope also gets its view events (docs/protocol.md, "View events"), made by the
//! feed's [`ViewProjector`] as the envelope joins the feed: the same events whether the feed was
//! filled live or from the log, so a reload or a stored session shows what the live page did.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::response::sse;
use dsh_llm::LockExt;
use dsh_protocol::{ViewEvent, ViewProjector};
use dsh_session::{Envelope, Event, PriceTable};
use futures::Stream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::children::ChildEvents;

/// The view events of one session event, each as SSE data (its JSON).
type Views = Arc<[Arc<str>]>;

/// What the server derived from a session's events so far.
#[derive(Debug)]
pub(crate) struct FeedState {
    /// Every event, in seq order; `events[i].seq == i`.
    pub events: Vec<Arc<Envelope>>,
    /// The view events of each event, as SSE data (`views[i]` of `events[i]`).
    views: Vec<Views>,
    /// Makes them.
    projector: ViewProjector,
    /// Prices for the view's usage costs (kept to rebuild the projector).
    prices: PriceTable,
    /// Calls whose questions (or plan review) are shown and not answered yet.
    asking: HashSet<String>,
    /// A turn has started and not ended.
    pub running: bool,
    /// A live event arrived ahead of the feed (the forwarder lagged): wait for a flush point
    /// and re-read the log.
    pub gap: bool,
    /// Fills in the presentation of calls a log written before dsh logged it lacks, so the
    /// page always gets titles, subjects, kinds and summaries from the server (docs/web.md).
    presenter: dsh_agent::Presenter,
}

/// The events of one session. Cheap to share.
pub struct Feed {
    state: Mutex<FeedState>,
    length: watch::Sender<usize>,
    /// The live events of the session's children (docs/web.md, "Children").
    children: ChildEvents,
}

impl Default for Feed {
    fn default() -> Self {
        Feed::new(PriceTable::default())
    }
}

impl Feed {
    /// An empty feed whose view prices usage with `prices`.
    pub fn new(prices: PriceTable) -> Feed {
        Feed {
            state: Mutex::new(FeedState {
                events: Vec::new(),
                views: Vec::new(),
                projector: ViewProjector::new(dsh_agent::Presenter::default(), prices.clone()),
                prices,
                asking: HashSet::new(),
                running: false,
                gap: false,
                presenter: dsh_agent::Presenter::default(),
            }),
            length: watch::Sender::new(0),
            children: ChildEvents::default(),
        }
    }

    /// The events of the session's children received while it was live.
    pub(crate) fn children(&self) -> &ChildEvents {
        &self.children
    }

    /// Adds events read from the log: those past the feed's end are taken, the rest are
    /// already known (the log is append-only) and skipped. Clears a gap.
    pub fn extend_from_log(&self, events: Vec<Envelope>) {
        let mut state = self.state.lock_or_recover();
        for envelope in events {
            if envelope.seq as usize == state.events.len() {
                Self::push(&mut state, Arc::new(envelope));
            }
        }
        state.gap = false;
        self.length.send_replace(state.events.len());
    }

    /// Adds one live event. Returns false when it does not follow the feed's last event (the
    /// forwarder lagged): the caller must re-read the log at the next flush point.
    pub fn push_live(&self, envelope: Arc<Envelope>) -> bool {
        let mut state = self.state.lock_or_recover();
        let next = state.events.len() as u64;
        if envelope.seq < next {
            return true;
        }
        if envelope.seq > next || state.gap {
            state.gap = true;
            return false;
        }
        Self::push(&mut state, envelope);
        self.length.send_replace(state.events.len());
        true
    }

    /// Presents calls logged without a presentation as the session's `tools` do (a live
    /// session's; a stored one's feed asks the tools every session has).
    /// The view is made again with a presenter over them (`Presenter::new(Some(tools))`).
    pub(crate) fn set_tools(&self, tools: &dsh_tools::ToolRegistry) {
        let mut guard = self.state.lock_or_recover();
        let state = &mut *guard;
        state.presenter.set_tools(tools);
        state.projector =
            ViewProjector::new(dsh_agent::Presenter::new(Some(tools)), state.prices.clone());
        state.asking.clear();
        let events = state.events.clone();
        let mut views = Vec::with_capacity(events.len());
        for envelope in &events {
            views.push(Self::project(state, envelope));
        }
        state.views = views;
    }

    fn push(state: &mut FeedState, envelope: Arc<Envelope>) {
        let envelope = match state.presenter.fill(&envelope) {
            Some(filled) => Arc::new(filled),
            None => envelope,
        };
        match &envelope.event {
            Event::TurnStart(_) => state.running = true,
            Event::TurnEnd(_) => state.running = false,
            _ => {}
        }
        let views = Self::project(state, &envelope);
        state.views.push(views);
        state.events.push(envelope);
    }

    /// The view events of `envelope`, as SSE data; notes the questions shown.
    fn project(state: &mut FeedState, envelope: &Envelope) -> Views {
        let views = state.projector.project(envelope);
        for view in &views {
            match view {
                ViewEvent::QuestionAsked { call_id, .. } => {
                    state.asking.insert(call_id.clone());
                }
                ViewEvent::ToolCard(card) if card.state.is_final() => {
                    state.asking.remove(&card.call_id);
                }
                _ => {}
            }
        }
        views
            .iter()
            .map(|view| Arc::from(view_json(view)))
            .collect()
    }

    /// True while the questions (or plan review) of call `call_id` are shown unanswered.
    pub(crate) fn asking(&self, call_id: &str) -> bool {
        self.state.lock_or_recover().asking.contains(call_id)
    }

    /// The view events of the events from seq `from` on (at most `limit` events).
    pub fn views_since(&self, from: usize, limit: usize) -> Vec<Arc<str>> {
        let state = self.state.lock_or_recover();
        state
            .views
            .iter()
            .skip(from)
            .take(limit)
            .flat_map(|views| views.iter().cloned())
            .collect()
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.state.lock_or_recover().events.len()
    }

    /// True when the feed holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True while a turn is open.
    pub fn running(&self) -> bool {
        self.state.lock_or_recover().running
    }

    /// Events from seq `from` on (at most `limit`).
    pub fn since(&self, from: usize, limit: usize) -> Vec<Arc<Envelope>> {
        self.since_with_views(from, limit)
            .into_iter()
            .map(|(envelope, _)| envelope)
            .collect()
    }

    /// Events from seq `from` on (at most `limit`), each with its view events.
    fn since_with_views(&self, from: usize, limit: usize) -> Vec<(Arc<Envelope>, Views)> {
        let state = self.state.lock_or_recover();
        state
            .events
            .iter()
            .cloned()
            .zip(state.views.iter().cloned())
            .skip(from)
            .take(limit)
            .collect()
    }

    /// All events so far.
    pub fn snapshot(&self) -> Vec<Arc<Envelope>> {
        self.state.lock_or_recover().events.clone()
    }

    /// The SSE stream from seq `from`: stored events, then live ones as they come; ends when
    /// `shutdown` is cancelled. Each SSE event has `id: <seq>` and the envelope's JSON line
    /// (the log's own encoding) as data; the envelope's view events go just before it, as SSE
    /// events named `view` without an id (a client resuming after seq `n` has the views of `n`,
    /// and gets those of `n + 1` again if the connection broke among them). The children's
    /// events received so far, then live, are interleaved as SSE events named `child` without
    /// an id (docs/web.md, "Children"), so `Last-Event-ID` stays the session's seq.
    pub fn stream(
        self: Arc<Self>,
        from: usize,
        shutdown: CancellationToken,
    ) -> impl Stream<Item = Result<sse::Event, Infallible>> + Send + 'static {
        let cursor = StreamCursor {
            length: self.length.subscribe(),
            child_count: self.children.watch(),
            feed: self,
            next: from,
            next_child: 0,
            queue: VecDeque::new(),
            shutdown,
        };
        futures::stream::unfold(cursor, |mut cursor| async move {
            cursor.next_event().await.map(|event| (Ok(event), cursor))
        })
    }
}

/// Where one SSE client is in a feed.
struct StreamCursor {
    feed: Arc<Feed>,
    length: watch::Receiver<usize>,
    child_count: watch::Receiver<u64>,
    /// The next session seq to send.
    next: usize,
    /// The index of the next child event to send.
    next_child: u64,
    queue: VecDeque<sse::Event>,
    shutdown: CancellationToken,
}

impl StreamCursor {
    async fn next_event(&mut self) -> Option<sse::Event> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            // Mark the current lengths seen before reading, so a push after the read wakes us.
            self.length.borrow_and_update();
            self.child_count.borrow_and_update();
            let batch = self.feed.since_with_views(self.next, 256);
            self.next += batch.len();
            for (envelope, views) in batch {
                self.queue.extend(
                    views
                        .iter()
                        .map(|view| sse::Event::default().event("view").data(&**view)),
                );
                self.queue.push_back(sse_event(&envelope));
            }
            let (next_child, children) = self.feed.children.since(self.next_child, 256);
            self.next_child = next_child;
            self.queue.extend(
                children
                    .iter()
                    .map(|data| sse::Event::default().event("child").data(&**data)),
            );
            if !self.queue.is_empty() {
                continue;
            }
            tokio::select! {
                // The senders live in the feed, which this cursor holds.
                changed = self.length.changed() => changed.ok()?,
                changed = self.child_count.changed() => changed.ok()?,
                _ = self.shutdown.cancelled() => return None,
            }
        }
    }
}

/// An envelope's JSON line (the log's own encoding) without its line end.
pub(crate) fn envelope_json(envelope: &Envelope) -> String {
    let mut line = Vec::with_capacity(256);
    match envelope.encode_line(&mut line) {
        Ok(()) => String::from_utf8_lossy(&line).trim_end().to_string(),
        // Encoding an event that was appended (and so encoded once) cannot fail; should it,
        // the client still gets the seq and the reason instead of a hole.
        Err(err) => serde_json::json!({
            "type": "server/encode-error", "seq": envelope.seq, "data": {"message": err.to_string()}
        })
        .to_string(),
    }
}

/// A view event's JSON (docs/protocol.md, "View events").
pub(crate) fn view_json(view: &ViewEvent) -> String {
    serde_json::to_string(view).unwrap_or_else(|err| {
        serde_json::json!({"kind": "serverEncodeError", "message": err.to_string()}).to_string()
    })
}

/// One envelope as an SSE event.
pub(crate) fn sse_event(envelope: &Envelope) -> sse::Event {
    sse::Event::default()
        .id(envelope.seq.to_string())
        .data(envelope_json(envelope))
}
