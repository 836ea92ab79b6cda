//! Fork (docs/sessions.md, "Resume, fork and export"): a new session seeded with a parent's log up
//! to the end of a closed turn.

use crate::envelope::{now_ms, Envelope, SessionHeader, WRITER_NAME};
use crate::error::{Result, SessionError};
use crate::event::{EndSeed, Event};
use crate::reader::LoadedLog;
use crate::state::SessionTracker;
use crate::store::SessionStore;

/// The number of events a fork at `at_turn` copies: everything up to and including that
/// turn's `turn/end` (`None`: the last closed turn). Fails when the turn does not exist or is
/// not closed.
pub fn fork_point(log: &LoadedLog, at_turn: Option<u64>) -> Result<u64> {
    fork_turn(log, at_turn).map(|(cut, _)| cut)
}

/// [`fork_point`], with the turn the fork ends with.
fn fork_turn(log: &LoadedLog, at_turn: Option<u64>) -> Result<(u64, u64)> {
    let mut tracker = SessionTracker::new();
    for env in &log.events {
        tracker.push(env);
    }
    let closed = tracker.closed_turns();
    let found = match at_turn {
        Some(turn) => closed.iter().rev().find(|t| t.turn == turn),
        None => closed.last(),
    };
    match (found, at_turn) {
        (Some(t), _) => Ok((t.end_seq + 1, t.turn)),
        (None, Some(turn)) => Err(SessionError::ForkPoint {
            turn,
            reason: if tracker.open_turn() == Some(turn) {
                "that turn has not ended".into()
            } else {
                format!(
                    "the session has no turn {turn} (last turn: {})",
                    tracker.last_turn()
                )
            },
        }),
        (None, None) => Err(SessionError::ForkPoint {
            turn: 0,
            reason: "the session has no closed turn yet".into(),
        }),
    }
}

/// The header and events of a fork of `log` at `at_turn` (see [`fork_point`]): a new id,
/// `parentSession` and `seedLength` set, the copied events unchanged (seqs and times kept),
/// then `session/end-seed {inherited: true}`.
pub fn fork_log(log: &LoadedLog, at_turn: Option<u64>) -> Result<(SessionHeader, Vec<Envelope>)> {
    let (cut, _) = fork_turn(log, at_turn)?;
    Ok(seeded(log, cut))
}

/// The header and events of a fork of `log` that copies its first `cut` events.
fn seeded(log: &LoadedLog, cut: u64) -> (SessionHeader, Vec<Envelope>) {
    let mut header = SessionHeader::new(
        uuid::Uuid::new_v4().to_string(),
        log.header.cwd.clone(),
        now_ms(),
    );
    header.delegation_depth = log.header.delegation_depth;
    header.parent_session = Some(log.header.id.clone());
    header.seed_length = Some(cut);
    header.writer = Some(WRITER_NAME.to_string());
    let mut events: Vec<Envelope> = log
        .events
        .iter()
        .take(usize::try_from(cut).unwrap_or(usize::MAX))
        .cloned()
        .collect();
    let mut seed_end = Envelope::new(Event::EndSeed(EndSeed { inherited: true }));
    seed_end.seq = cut;
    seed_end.time = Some(now_ms());
    events.push(seed_end);
    (header, events)
}

/// The key of the session a fork was made from.
fn header_parent(header: &SessionHeader, key: &str) -> String {
    header
        .parent_session
        .clone()
        .unwrap_or_else(|| key.to_string())
}

/// Forks session `key` of `store` at `at_turn` into a new session of the same store and
/// returns the new session's header. The new log is flushed when this returns.
pub fn fork(store: &dyn SessionStore, key: &str, at_turn: Option<u64>) -> Result<SessionHeader> {
    let log = store.load(key)?;
    fork_loaded(store, key, &log, fork_turn(&log, at_turn)?).map(|forked| forked.header)
}

/// Where a fork that goes back to just before turn `turn` of `log` began cuts, and the last
/// turn it copies. Input is logged when it is queued (`agent/inbox/spliced`), before the
/// `turn/start` that claims it, so the cut is at the first inbox change, message or
/// custom-command record after the turn before it ended, else at that `turn/start`: what the previous turn logged after its end
/// (its workspace checkpoint, a title) stays.
fn before_turn(log: &LoadedLog, turn: u64) -> Result<(u64, u64)> {
    let start = log
        .events
        .iter()
        .rposition(|env| matches!(&env.event, crate::Event::TurnStart(s) if s.turn == turn))
        .ok_or_else(|| SessionError::ForkPoint {
            turn,
            reason: "the session has no such turn".into(),
        })?;
    let previous_end = log.events[..start]
        .iter()
        .rposition(|env| matches!(env.event, crate::Event::TurnEnd(_)));
    let from = previous_end.map_or(0, |i| i + 1);
    let cut = (from..start)
        .find(|&i| match &log.events[i].event {
            crate::Event::UserMessage(_) | crate::Event::InboxSpliced(_) => true,
            crate::Event::Opaque { event_type, .. } => event_type == crate::USER_COMMAND_EVENT,
            _ => false,
        })
        .unwrap_or(start);
    let copied = previous_end
        .and_then(|i| match &log.events[i].event {
            crate::Event::TurnEnd(end) => Some(end.turn),
            _ => None,
        })
        .unwrap_or(0);
    Ok((log.events[cut].seq, copied))
}

/// Forks session `key` of `store` as it was just before turn `turn` began (rewind,
/// docs/rewind.md): the new session holds every event before that turn's `turn/start`, so
/// its next message takes the turn's place.
pub fn fork_before_turn(store: &dyn SessionStore, key: &str, turn: u64) -> Result<Forked> {
    let log = store.load(key)?;
    let cut = before_turn(&log, turn)?;
    fork_loaded_before(store, key, &log, cut)
}

/// [`fork_loaded`] for a fork before a turn: input still queued at the cut (a message sent
/// while the turn before ran, which the turn claimed) is removed from the new session's inbox,
/// so resuming it does not send that turn's message again (the user gets it back to edit).
fn fork_loaded_before(
    store: &dyn SessionStore,
    key: &str,
    log: &LoadedLog,
    cut: (u64, u64),
) -> Result<Forked> {
    let copied = usize::try_from(cut.0).unwrap_or(usize::MAX);
    let pending = pending_inbox(log.events.iter().take(copied));
    let forked = fork_loaded(store, key, log, cut)?;
    if pending.iter().any(|(_, count)| *count > 0) {
        let mut writer = store.resume(&forked.header.id)?.writer;
        for (target, count) in pending.into_iter().filter(|(_, count)| *count > 0) {
            writer.append(crate::Event::InboxSpliced(crate::InboxSplice {
                target,
                start: 0,
                removed_count: Some(count as u64),
                inserted: Vec::new(),
                outcome: Some("rewound".into()),
            }))?;
        }
        writer.flush()?;
    }
    Ok(forked)
}

/// How many items each inbox queue holds after `events` (their splices replayed as the agent
/// replays them on resume).
fn pending_inbox<'a>(events: impl Iterator<Item = &'a Envelope>) -> Vec<(String, usize)> {
    let mut queues: Vec<(String, usize)> = Vec::new();
    for env in events {
        let crate::Event::InboxSpliced(splice) = &env.event else {
            continue;
        };
        let index = match queues.iter().position(|(t, _)| *t == splice.target) {
            Some(index) => index,
            None => {
                queues.push((splice.target.clone(), 0));
                queues.len() - 1
            }
        };
        let len = &mut queues[index].1;
        let start = usize::try_from(splice.start)
            .unwrap_or(usize::MAX)
            .min(*len);
        let removed = usize::try_from(splice.removed_count.unwrap_or(0)).unwrap_or(usize::MAX);
        let end = start.saturating_add(removed).min(*len);
        *len = *len - (end - start) + splice.inserted.len();
    }
    queues
}

/// [`fork`] of `log`, session `key` of `store`, already loaded, cut at `cut` (the number of
/// events copied, and the last turn among them).
fn fork_loaded(
    store: &dyn SessionStore,
    key: &str,
    log: &LoadedLog,
    (cut, turn): (u64, u64),
) -> Result<Forked> {
    let (header, events) = seeded(log, cut);
    let mut writer = store.create_with_header(header.clone())?;
    // The copied events name images by reference: the fork gets its own copy of their files
    // (docs/sessions.md, "Images").
    let images = crate::blobs::BlobStore::referenced(events.iter().map(|env| &env.event));
    if !images.is_empty() {
        writer
            .blobs()
            .copy_from(&store.blobs(&header_parent(&header, key))?, &images)?;
    }
    for env in events {
        writer.append_verbatim(env)?;
    }
    writer.flush()?;
    Ok(Forked { header, turn })
}

/// A fork made by [`fork_location`].
#[derive(Debug, Clone)]
pub struct Forked {
    /// The new session's header (its id, `parentSession`).
    pub header: SessionHeader,
    /// The last turn it copies.
    pub turn: u64,
}

/// Forks the session whose log is at `location` (a live agent's `AgentHandle::location`: a
/// `session.jsonl` path of a JSONL store, or `sqlite:<db>#<id>`) at `at_turn` (`None`: the
/// last closed turn) into a new session of the same store.
pub fn fork_location(location: &str, at_turn: Option<u64>) -> Result<Forked> {
    fork_location_at(location, |log| fork_turn(log, at_turn), false)
}

/// [`fork_location`] going back to just before turn `turn` began ([`fork_before_turn`]).
pub fn fork_location_before(location: &str, turn: u64) -> Result<Forked> {
    fork_location_at(location, |log| before_turn(log, turn), true)
}

fn fork_location_at(
    location: &str,
    cut: impl Fn(&LoadedLog) -> Result<(u64, u64)>,
    before: bool,
) -> Result<Forked> {
    let fork_at = |store: &dyn SessionStore, id: &str, log: &LoadedLog, cut| {
        if before {
            fork_loaded_before(store, id, log, cut)
        } else {
            fork_loaded(store, id, log, cut)
        }
    };
    if let Some((db, id)) = crate::sqlite::sqlite_location(location) {
        let store = crate::SqliteStore::open(std::path::Path::new(db))?;
        let log = store.load(id)?;
        return fork_at(&store, id, &log, cut(&log)?);
    }
    // `<root>/sessions/<cwd folder>/<session folder>/session.jsonl`: the store is `<root>`.
    let path = std::path::Path::new(location);
    let root = path
        .ancestors()
        .nth(4)
        .filter(|_| {
            path.ancestors().nth(3).and_then(|p| p.file_name()) == Some("sessions".as_ref())
        })
        .ok_or_else(|| SessionError::NotFound(location.to_string()))?;
    let log = crate::load_file(path)?;
    let cut = cut(&log)?;
    fork_at(&crate::JsonlStore::new(root), &log.header.id, &log, cut)
}
