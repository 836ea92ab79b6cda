//! What an adapter keeps per session between calls (docs/providers.md, "The history bytes
//! cache"): at most a few sessions, the least recently used dropped first. An entry is taken
//! out while a call uses it and put back after, so concurrent calls never wait on each other
//! (a second call of the same session meanwhile simply finds nothing).

use std::sync::Mutex;

use crate::sync::LockExt;
use crate::{HistoryLineage, Message};

/// One value per session id, for the [`PerSession::CAPACITY`] sessions used last.
pub struct PerSession<T> {
    entries: Mutex<Vec<(String, T)>>,
}

impl<T> Default for PerSession<T> {
    fn default() -> Self {
        PerSession {
            entries: Mutex::new(Vec::new()),
        }
    }
}

impl<T> PerSession<T> {
    /// Sessions kept: a parent and its parallel subagents share one adapter.
    pub const CAPACITY: usize = 8;

    /// Takes `session`'s value out, if one is kept and `usable` accepts it (a value it does
    /// not accept stays).
    pub fn take(&self, session: &str, usable: impl Fn(&T) -> bool) -> Option<T> {
        let mut entries = self.entries.lock_or_recover();
        let index = entries
            .iter()
            .position(|(id, value)| id == session && usable(value))?;
        Some(entries.remove(index).1)
    }

    /// Keeps `value` as `session`'s (replacing any other), as the most recently used.
    pub fn put(&self, session: &str, value: T) {
        let mut entries = self.entries.lock_or_recover();
        entries.retain(|(id, _)| id != session);
        if entries.len() >= Self::CAPACITY {
            entries.remove(0);
        }
        entries.push((session.to_string(), value));
    }

    /// Number of sessions kept.
    pub fn len(&self) -> usize {
        self.entries.lock_or_recover().len()
    }

    /// True when no session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> std::fmt::Debug for PerSession<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerSession")
            .field("sessions", &self.len())
            .finish()
    }
}

/// The wire bytes an adapter wrote for a request's history messages, kept for the session's
/// next request (docs/providers.md, "The history bytes cache"). The adapter writes its messages
/// into `bytes`, notes each message it wrote ([`WrittenHistory::wrote`]) and each point from which
/// writing can go on ([`WrittenHistory::cut`]); [`WrittenHistory::rewind`] keeps what the next
/// request still shares.
#[derive(Debug, Default)]
pub struct WrittenHistory {
    /// The lineage of the messages written (`None`: nothing can be reused).
    lineage: Option<HistoryLineage>,
    /// The ids of the messages written, in order.
    ids: Vec<String>,
    /// The bytes written.
    pub bytes: Vec<u8>,
    /// The points from which writing can go on, in order.
    cuts: Vec<Cut>,
}

/// A point from which writing can go on: at message `resume`, after the first `bytes` bytes,
/// valid while the first `needs` messages are unchanged.
#[derive(Debug, Clone, Copy)]
struct Cut {
    resume: usize,
    bytes: usize,
    needs: usize,
}

impl WrittenHistory {
    /// Keeps what `messages` (of `lineage`) still shares with what was written: the bytes up to
    /// the last cut whose messages are unchanged (the lineage's promise, ids compared as well).
    /// Returns the index of the first message to write.
    pub fn rewind(&mut self, messages: &[Message], lineage: Option<HistoryLineage>) -> usize {
        let same = HistoryLineage::unchanged_prefix(self.lineage, &self.ids, lineage, messages);
        let kept = self.cuts.partition_point(|cut| cut.needs <= same);
        self.cuts.truncate(kept);
        let (resume, bytes) = self
            .cuts
            .last()
            .map_or((0, 0), |cut| (cut.resume, cut.bytes));
        self.bytes.truncate(bytes);
        self.ids.truncate(resume);
        self.lineage = lineage;
        resume
    }

    /// Notes that `message`, the next one, was written (or taken into an open wire message).
    pub fn wrote(&mut self, message: &Message) {
        self.ids.push(message.id.clone());
    }

    /// Notes that writing can go on at message `resume` after the bytes written so far, as long
    /// as the first `needs` messages stay unchanged (`needs` grows from cut to cut).
    pub fn cut(&mut self, resume: usize, needs: usize) {
        self.cuts.push(Cut {
            resume,
            bytes: self.bytes.len(),
            needs,
        });
    }

    /// The cuts as `(resume, bytes)`, in order.
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        self.cuts
            .iter()
            .map(|cut| (cut.resume, cut.bytes))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_sessions_and_takes_only_usable_values() {
        let kept = PerSession::default();
        for n in 0..=PerSession::<usize>::CAPACITY {
            kept.put(&format!("s{n}"), n);
        }
        assert_eq!(kept.len(), PerSession::<usize>::CAPACITY);
        assert_eq!(kept.take("s0", |_| true), None, "the oldest went first");
        assert_eq!(kept.take("s1", |v| *v == 99), None, "not usable");
        assert_eq!(kept.take("s1", |_| true), Some(1), "and it stayed");
        assert_eq!(kept.take("s1", |_| true), None, "taken out");
        kept.put("s2", 20);
        assert_eq!(kept.take("s2", |_| true), Some(20), "replaced");
    }
}
