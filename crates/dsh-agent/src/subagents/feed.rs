//! Children's events, live, for the parent's front ends (docs/agent.md, "Watching children").
//!
//! A child writes every event to its own log (`subagents/<child-id>/session.jsonl`); nothing of
//! it enters the parent's log or context. While a child runs, each event its log publishes is
//! also sent on the parent's [`ChildFeed`], tagged with who the child is and which of the
//! parent's tool calls the run answers, so a front end can show the child working (an ACP
//! `tool_call_update`, a nested web view, the TUI's children panel) without reading files.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokio::sync::{broadcast, oneshot};

use crate::log::SessionEvent;

/// Capacity of the feed; a front end that lags further behind misses events of children (the
/// children's logs keep all of them).
const FEED_CAPACITY: usize = 4096;

/// Who a child is, as front ends show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildIdentity {
    /// The child's session id.
    pub id: String,
    /// Its name in the parent's session (`agent-N`).
    pub name: String,
    /// The `description` it was started with.
    pub label: String,
    /// The model it runs.
    pub model: String,
    /// Its delegation depth (1 for a child of the top-level session).
    pub depth: u64,
    /// Its `session.jsonl`.
    pub log: PathBuf,
}

/// One event of a running child.
#[derive(Debug, Clone)]
pub struct ChildActivity {
    /// The child.
    pub child: Arc<ChildIdentity>,
    /// The parent's tool call this run answers (`subagent`, `subagent_fork` or
    /// `send_message`), when the run was started by one.
    pub call_id: Option<String>,
    /// True when no tool call waits for the run (a background child, a continued background
    /// run): its end is reported as a job's.
    pub background: bool,
    /// The event, as the child's log wrote it.
    pub event: SessionEvent,
}

/// The live events of one agent's children (see the module docs). Cheap to clone; every
/// clone feeds the same subscribers.
///
/// The channel is made by the first [`ChildFeed::subscribe`]: its 4,096 slots are a few hundred
/// KB of memory written at creation, which every agent (each child too) would otherwise pay
/// before its first request although most are never watched (docs/PERFORMANCE.md, "First
/// request byte"). Events sent while nobody has subscribed go nowhere, as they would with a
/// channel that has no receiver.
#[derive(Clone, Default)]
pub struct ChildFeed {
    sender: Arc<OnceLock<broadcast::Sender<ChildActivity>>>,
}

impl std::fmt::Debug for ChildFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildFeed")
            .field(
                "subscribers",
                &self.sender.get().map_or(0, |s| s.receiver_count()),
            )
            .finish()
    }
}

impl ChildFeed {
    /// A receiver of every child event sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ChildActivity> {
        self.sender
            .get_or_init(|| broadcast::channel(FEED_CAPACITY).0)
            .subscribe()
    }

    /// Forwards `events` (a child's log subscription, taken before its run starts) until the
    /// returned [`Forwarding`] is finished.
    pub(crate) fn forward(
        &self,
        child: Arc<ChildIdentity>,
        call_id: Option<String>,
        background: bool,
        mut events: broadcast::Receiver<SessionEvent>,
    ) -> Forwarding {
        let sender = self.sender.clone();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let send = move |event: SessionEvent| {
            // No subscriber (or no channel yet) is not an error: nobody is watching.
            let Some(sender) = sender.get() else { return };
            let _ = sender.send(ChildActivity {
                child: Arc::clone(&child),
                call_id: call_id.clone(),
                background,
                event,
            });
        };
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    received = events.recv() => match received {
                        Ok(event) => send(event),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = &mut stopped => break,
                }
            }
            // The run has ended: everything it wrote is already in the channel.
            loop {
                match events.try_recv() {
                    Ok(event) => send(event),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => return,
                }
            }
        });
        Forwarding {
            stop: Some(stop),
            task: Some(task),
        }
    }
}

/// A running forwarder of one child run's events.
pub(crate) struct Forwarding {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Forwarding {
    /// Sends what the run wrote and not yet forwarded, then stops.
    pub(crate) async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        // A run dropped before it ended (its job killed, the process ending) stops forwarding.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
