//! What an adapter keeps per session between calls (docs/providers.md, "The history bytes
//! cache"): at most a few sessions, the least recently used dropped first. An entry is taken
//! out while a call uses it and put back after, so concurrent calls never wait on each other
//! (a second call of the same session meanwhile simply finds nothing).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::value::RawValue;

use crate::sync::LockExt;
use crate::{HistoryLineage, Message, ToolSchema};

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
    /// The bytes written, shared with the request bodies that send them.
    pub bytes: SharedBytes,
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
        self.bytes.truncate_to(bytes);
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

/// The wire form of a request's tool list, kept with the list it was written from
/// (docs/providers.md, "The history bytes cache"). The agent loop sends the same `Arc` list at
/// every step while its tools do not change, and a list's schemas never change in place, so an
/// adapter writes its `tools` array once per list instead of at every step (~12 KB of JSON for
/// dsh's own tools).
#[derive(Debug, Default)]
pub struct KeptTools {
    /// The list, the variant and the bytes written for them.
    kept: Option<(Arc<Vec<ToolSchema>>, bool, Box<RawValue>)>,
}

impl KeptTools {
    /// The wire form of `tools` (`None` when there are none): the kept bytes when they were
    /// written for this very list (the same `Arc`) and the same `variant`, else `wire(tools)`
    /// serialised now and kept. `variant` tells apart two wire forms of one list (Anthropic's
    /// last tool carries a cache breakpoint when there is no system prompt).
    pub fn json<'t, W: Serialize>(
        &mut self,
        tools: &'t Arc<Vec<ToolSchema>>,
        variant: bool,
        wire: impl FnOnce(&'t [ToolSchema]) -> W,
    ) -> serde_json::Result<Option<&RawValue>> {
        if tools.is_empty() {
            return Ok(None);
        }
        let same = |(list, kept_variant, _): &(Arc<Vec<ToolSchema>>, bool, Box<RawValue>)| {
            Arc::ptr_eq(list, tools) && *kept_variant == variant
        };
        if !self.kept.as_ref().is_some_and(same) {
            let json = serde_json::value::to_raw_value(&wire(tools))?;
            self.kept = Some((Arc::clone(tools), variant, json));
        }
        Ok(self.kept.as_ref().map(|(_, _, json)| &**json))
    }

    /// The bytes kept, if any.
    pub fn kept(&self) -> Option<&RawValue> {
        self.kept.as_ref().map(|(_, _, json)| &**json)
    }
}

/// Bytes a request body can send without copying them while their owner keeps them for the
/// next request (docs/providers.md, "The history bytes cache"). Reading goes through `Deref`;
/// writing (`DerefMut`) is copy-on-write: it writes in place once the last request that holds
/// the bytes has let them go, the usual case since a session's steps follow each other, and
/// copies them first otherwise.
#[derive(Debug, Default)]
pub struct SharedBytes(Arc<Vec<u8>>);

impl SharedBytes {
    /// A handle on the bytes for a request body. Writing to `self` while it lives copies them.
    pub fn share(&self) -> Arc<Vec<u8>> {
        Arc::clone(&self.0)
    }

    /// Keeps the first `len` bytes; when a request still holds them, only those are copied.
    fn truncate_to(&mut self, len: usize) {
        match Arc::get_mut(&mut self.0) {
            Some(bytes) => bytes.truncate(len),
            None => self.0 = Arc::new(self.0[..len.min(self.0.len())].to_vec()),
        }
    }
}

impl Deref for SharedBytes {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for SharedBytes {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.0)
    }
}

impl PartialEq<Vec<u8>> for SharedBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        *self.0 == *other
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

    #[test]
    fn shared_bytes_are_written_in_place_once_no_request_holds_them() {
        let mut bytes = SharedBytes::default();
        bytes.extend_from_slice(b"[1,2,3]");
        bytes.reserve(64);
        let sent = bytes.share();
        let buffer = sent.as_ptr();
        drop(sent);
        bytes.extend_from_slice(b",[4]");
        assert_eq!(bytes.as_ptr(), buffer, "no copy once the request let go");
        bytes.truncate_to(3);
        assert_eq!(bytes.as_ptr(), buffer);
        assert_eq!(bytes, b"[1,".to_vec());
    }

    #[test]
    fn shared_bytes_held_by_a_request_are_copied_before_a_write() {
        let mut bytes = SharedBytes::default();
        bytes.extend_from_slice(b"abcdef");
        let sent = bytes.share();
        bytes.push(b'g');
        assert_eq!(
            *sent,
            b"abcdef".to_vec(),
            "the request's bytes are left as they were"
        );
        assert_eq!(bytes, b"abcdefg".to_vec());
        let sent = bytes.share();
        bytes.truncate_to(2);
        assert_eq!(*sent, b"abcdefg".to_vec());
        assert_eq!(bytes, b"ab".to_vec());
    }
}
