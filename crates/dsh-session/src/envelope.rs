//! The envelope around each event and the session header line (docs/sessions.md, "File format").

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::event::Event;

/// The session format version this build reads and writes (dsh writes `0`).
pub const FORMAT_VERSION: u64 = 0;

/// The value of the header's `writer` field when this implementation created the log. Crash
/// repair trusts the absence of `tool/started` only in logs marked with it.
pub const WRITER_NAME: &str = "dsh-rs";

/// How a message event changes the projected history (docs/sessions.md, "Projection").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceOp {
    /// Append the message.
    Append,
    /// Replace the history messages whose seqs run from `start` to `end` (inclusive) with this
    /// one message, at the position of the first of them (compaction).
    Replace {
        /// Seq of the first replaced message.
        start: u64,
        /// Seq of the last replaced message.
        end: u64,
    },
}

impl Serialize for SurfaceOp {
    /// Written as dsh writes it: `"append"` or `{"op":"replace","start":s,"end":e}`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SurfaceOp::Append => serializer.serialize_str("append"),
            SurfaceOp::Replace { start, end } => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("op", "replace")?;
                map.serialize_entry("start", start)?;
                map.serialize_entry("end", end)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for SurfaceOp {
    /// Reads `"append"`, `{"op":"append"}`, dsh's `{"op":"replace","start":s,"end":e}` and the
    /// nested spelling `{"replace":{"start":s,"end":e}}`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let span = |v: &Value| -> Option<SurfaceOp> {
            Some(SurfaceOp::Replace {
                start: v.get("start")?.as_u64()?,
                end: v.get("end")?.as_u64()?,
            })
        };
        let parsed = match &value {
            Value::String(op) if op == "append" => Some(SurfaceOp::Append),
            Value::Object(map) => match map.get("op").and_then(Value::as_str) {
                Some("append") => Some(SurfaceOp::Append),
                Some("replace") => span(&value),
                Some(_) => None,
                None => map.get("replace").and_then(span),
            },
            _ => None,
        };
        parsed.ok_or_else(|| D::Error::custom(format!("unknown surfaceOp {value}")))
    }
}

/// One event with its envelope fields.
///
/// `seq` is the 0-based index of the event after the header; it is assigned on read (from the
/// position) and on append (by the store), never taken from the caller. A packed row holds one
/// seq per delta. `time` is milliseconds since the Unix epoch, absent in dsh's files.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Index in the log.
    pub seq: u64,
    /// Wall-clock time of the append, in ms since the epoch, when known.
    pub time: Option<u64>,
    /// The event.
    pub event: Event,
    /// For message events: how the message enters the history. `None` reads as append.
    pub surface_op: Option<SurfaceOp>,
    /// For assistant messages, the seqs of the chunks they were built from; for tool results,
    /// the seq of their `tool/call`; for replacing messages, the replaced seqs.
    pub source_event_seqs: Option<Vec<u64>>,
    /// True when readers that do not know the type may skip the event.
    pub ignorable: bool,
}

impl Envelope {
    /// Wraps an event for appending: message events get `surfaceOp: append`, and
    /// `tool/started`, `tool/progress`, `files/undo`, `subagent/usage`, `usage/call`,
    /// `user/command`, `workspace/checkpoint` and `review/findings` (ours, not in dsh's catalog)
    /// are marked ignorable: readers that do not know them skip them, and ours load all but the
    /// first as [`Event::Opaque`] (docs/sessions.md). The store assigns `seq` and `time`.
    pub fn new(event: Event) -> Self {
        let surface_op = event.is_message().then_some(SurfaceOp::Append);
        let ignorable = matches!(event, Event::ToolStarted(_))
            || matches!(&event, Event::Opaque { event_type, .. }
                if event_type == "files/undo"
                    || event_type == crate::event::TOOL_PROGRESS_EVENT
                    || event_type == crate::event::USER_COMMAND_EVENT
                    || event_type == crate::event::WORKSPACE_CHECKPOINT_EVENT
                    || event_type == crate::event::REVIEW_FINDINGS_EVENT
                    || event_type == crate::usage::SUBAGENT_USAGE_EVENT
                    || event_type == crate::usage::USAGE_CALL_EVENT);
        Envelope {
            seq: 0,
            time: None,
            event,
            surface_op,
            source_event_seqs: None,
            ignorable,
        }
    }

    /// The same envelope with `sourceEventSeqs`.
    pub fn with_sources(mut self, seqs: Vec<u64>) -> Self {
        self.source_event_seqs = Some(seqs);
        self
    }

    /// The same envelope with a `surfaceOp`.
    pub fn with_surface_op(mut self, op: SurfaceOp) -> Self {
        self.surface_op = Some(op);
        self
    }

    /// Writes the envelope as one JSON line (with the trailing newline) into `out`:
    /// `{"type","seq","time"?,"data","surfaceOp"?,"sourceEventSeqs"?,"ignorable"?}`.
    pub fn encode_line(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(b"{\"type\":");
        serde_json::to_writer(&mut *out, self.event.event_type())?;
        out.extend_from_slice(b",\"seq\":");
        out.extend_from_slice(self.seq.to_string().as_bytes());
        if let Some(time) = self.time {
            out.extend_from_slice(b",\"time\":");
            out.extend_from_slice(time.to_string().as_bytes());
        }
        out.extend_from_slice(b",\"data\":");
        self.event.encode_data(&mut *out)?;
        self.encode_tail(out)?;
        out.extend_from_slice(b"}\n");
        Ok(())
    }

    /// Writes the optional trailing fields (`surfaceOp`, `sourceEventSeqs`, `ignorable`).
    pub(crate) fn encode_tail(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        if let Some(op) = &self.surface_op {
            out.extend_from_slice(b",\"surfaceOp\":");
            serde_json::to_writer(&mut *out, op)?;
        }
        if let Some(seqs) = &self.source_event_seqs {
            out.extend_from_slice(b",\"sourceEventSeqs\":");
            serde_json::to_writer(&mut *out, seqs)?;
        }
        if self.ignorable {
            out.extend_from_slice(b",\"ignorable\":true");
        }
        Ok(())
    }
}

/// The first line of a session file: `{type: "session", version, id, createdAt, cwd,
/// delegationDepth?, parentSession?, seedLength?}`. Unknown fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// The format version ([`FORMAT_VERSION`]).
    pub version: u64,
    /// The session id (a UUID for sessions this build creates).
    pub id: String,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// The working directory the session ran in (empty when the header has none, as in dsh's
    /// handshake-only logs).
    #[serde(default)]
    pub cwd: String,
    /// 0 for a top-level session, n for a sub-agent n levels down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_depth: Option<u64>,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// How many events were copied from the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// Which program wrote the log ([`WRITER_NAME`] for this one; absent in dsh's logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// Fields this build does not interpret, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionHeader {
    /// A header for a new top-level session created now by this build.
    pub fn new(id: impl Into<String>, cwd: impl Into<String>, created_at: u64) -> Self {
        SessionHeader {
            version: FORMAT_VERSION,
            id: id.into(),
            created_at,
            cwd: cwd.into(),
            delegation_depth: Some(0),
            parent_session: None,
            seed_length: None,
            writer: Some(WRITER_NAME.to_string()),
            extra: Map::new(),
        }
    }

    /// Writes the header as the first line of a file (with the trailing newline).
    pub fn encode_line(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(flatten)]
            header: &'a SessionHeader,
        }
        serde_json::to_writer(
            &mut *out,
            &Line {
                kind: "session",
                header: self,
            },
        )?;
        out.push(b'\n');
        Ok(())
    }

    /// True when this build wrote the log (see [`WRITER_NAME`]).
    pub fn written_by_us(&self) -> bool {
        self.writer.as_deref() == Some(WRITER_NAME)
    }
}

/// Milliseconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
