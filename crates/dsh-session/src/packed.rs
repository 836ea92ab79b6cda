//! Packed delta rows (docs/sessions.md, "File format"): `reasoning-chunks`, `text-chunks` and
//! `tool-call-chunks`.
//!
//! A packed row stands for a run of `assistant/chunk` deltas of one block and counts as one seq
//! per delta. The reader expands rows into ordinary [`Event::AssistantChunk`] envelopes; the
//! writer packs runs back, but only runs it can expand to exactly the same events (same turn,
//! step, index, tool id and name, no envelope extras, times absent or non-decreasing), so
//! packing never changes what a reader sees.

use dsh_llm::Chunk;
use serde::{Deserialize, Serialize};

use crate::envelope::Envelope;
use crate::event::{AssistantChunk, Event};

/// Which kind of delta a packed row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PackKind {
    Reasoning,
    Text,
    ToolCall,
}

impl PackKind {
    /// The row type for a line `type`, if it is one.
    pub(crate) fn from_type(event_type: &str) -> Option<PackKind> {
        match event_type {
            "reasoning-chunks" => Some(PackKind::Reasoning),
            "text-chunks" => Some(PackKind::Text),
            "tool-call-chunks" => Some(PackKind::ToolCall),
            _ => None,
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            PackKind::Reasoning => "reasoning-chunks",
            PackKind::Text => "text-chunks",
            PackKind::ToolCall => "tool-call-chunks",
        }
    }
}

/// The `data` of a packed row. `dt[i]` is the time in ms between delta `i` and `i + 1` (dsh
/// writes one fewer element than deltas; missing elements read as 0).
#[derive(Debug, Deserialize)]
pub(crate) struct PackedRow {
    turn: u64,
    step: u64,
    index: u32,
    #[serde(default)]
    texts: Option<Vec<String>>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    dt: Vec<f64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

impl PackedRow {
    fn pieces(&self, kind: PackKind) -> Result<&[String], String> {
        let (field, pieces) = match kind {
            PackKind::ToolCall => ("args", &self.args),
            PackKind::Reasoning | PackKind::Text => ("texts", &self.texts),
        };
        pieces
            .as_deref()
            .ok_or_else(|| format!("packed row `{}` has no `{field}` array", kind.type_name()))
    }

    /// Expands the row into one envelope per delta, with seqs from `first_seq` and times from
    /// `time` plus the accumulated `dt`.
    pub(crate) fn expand(
        self,
        kind: PackKind,
        first_seq: u64,
        time: Option<u64>,
    ) -> Result<Vec<Envelope>, String> {
        self.pieces(kind)?;
        let PackedRow {
            turn,
            step,
            index,
            texts,
            args,
            dt,
            id,
            name,
        } = self;
        let pieces = match kind {
            PackKind::ToolCall => args,
            PackKind::Reasoning | PackKind::Text => texts,
        }
        .unwrap_or_default();
        let mut elapsed = 0.0f64;
        let mut out = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.into_iter().enumerate() {
            if i > 0 {
                let step_dt = dt.get(i - 1).copied().unwrap_or(0.0);
                if step_dt.is_finite() && step_dt > 0.0 {
                    elapsed += step_dt;
                }
            }
            let chunk = match kind {
                PackKind::Reasoning => Chunk::ReasoningDelta { index, text: piece },
                PackKind::Text => Chunk::TextDelta { index, text: piece },
                PackKind::ToolCall => Chunk::ToolCallDelta {
                    index,
                    id: id.clone().unwrap_or_default(),
                    name: name.clone(),
                    arguments_delta: piece,
                },
            };
            out.push(Envelope {
                seq: first_seq + i as u64,
                time: time.map(|t| t + elapsed.round() as u64),
                event: Event::AssistantChunk(AssistantChunk { turn, step, chunk }),
                surface_op: None,
                source_event_seqs: None,
                ignorable: false,
            });
        }
        Ok(out)
    }
}

/// A run of deltas the writer is collecting into one packed row.
#[derive(Debug)]
pub(crate) struct PackRun {
    kind: PackKind,
    turn: u64,
    step: u64,
    index: u32,
    id: String,
    name: Option<String>,
    first_seq: u64,
    pieces: Vec<String>,
    times: Vec<Option<u64>>,
    /// The first envelope, kept to write a run of one as an ordinary line.
    first: Envelope,
}

/// The delta fields of a packable envelope.
struct Delta<'a> {
    kind: PackKind,
    turn: u64,
    step: u64,
    index: u32,
    id: &'a str,
    name: Option<&'a str>,
    piece: &'a str,
}

fn delta_of(env: &Envelope) -> Option<Delta<'_>> {
    if env.surface_op.is_some() || env.source_event_seqs.is_some() || env.ignorable {
        return None;
    }
    let Event::AssistantChunk(AssistantChunk { turn, step, chunk }) = &env.event else {
        return None;
    };
    let (kind, index, id, name, piece) = match chunk {
        Chunk::TextDelta { index, text } => (PackKind::Text, *index, "", None, text.as_str()),
        Chunk::ReasoningDelta { index, text } => {
            (PackKind::Reasoning, *index, "", None, text.as_str())
        }
        Chunk::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => (
            PackKind::ToolCall,
            *index,
            id.as_str(),
            name.as_deref(),
            arguments_delta.as_str(),
        ),
        _ => return None,
    };
    Some(Delta {
        kind,
        turn: *turn,
        step: *step,
        index,
        id,
        name,
        piece,
    })
}

impl PackRun {
    /// Starts a run with `env` if it is a packable delta.
    pub(crate) fn start(env: &Envelope) -> Option<PackRun> {
        let d = delta_of(env)?;
        Some(PackRun {
            kind: d.kind,
            turn: d.turn,
            step: d.step,
            index: d.index,
            id: d.id.to_string(),
            name: d.name.map(str::to_string),
            first_seq: env.seq,
            pieces: vec![d.piece.to_string()],
            times: vec![env.time],
            first: env.clone(),
        })
    }

    /// Adds `env` to the run if it continues it; returns false (adding nothing) otherwise.
    pub(crate) fn push(&mut self, env: &Envelope) -> bool {
        let Some(d) = delta_of(env) else {
            return false;
        };
        let last_time = self.times.last().copied().flatten();
        let times_ok = match (last_time, env.time) {
            (None, None) => self.times[0].is_none(),
            (Some(last), Some(now)) => now >= last,
            _ => false,
        };
        let continues = d.kind == self.kind
            && d.turn == self.turn
            && d.step == self.step
            && d.index == self.index
            && d.id == self.id
            && d.name == self.name.as_deref()
            && env.seq == self.first_seq + self.pieces.len() as u64
            && times_ok;
        if continues {
            self.pieces.push(d.piece.to_string());
            self.times.push(env.time);
        }
        continues
    }

    /// Writes the run: a run of one as an ordinary `assistant/chunk` line, longer runs as one
    /// packed row.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        if self.pieces.len() == 1 {
            return self.first.encode_line(out);
        }
        #[derive(Serialize)]
        struct Row<'a> {
            turn: u64,
            step: u64,
            index: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            id: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            name: Option<&'a str>,
            dt: Vec<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            texts: Option<&'a [String]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            args: Option<&'a [String]>,
        }
        let dt = self
            .times
            .windows(2)
            .map(|w| match (w[0], w[1]) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            })
            .collect();
        let tool = self.kind == PackKind::ToolCall;
        let row = Row {
            turn: self.turn,
            step: self.step,
            index: self.index,
            id: tool.then_some(self.id.as_str()),
            name: if tool { self.name.as_deref() } else { None },
            dt,
            texts: (!tool).then_some(self.pieces.as_slice()),
            args: tool.then_some(self.pieces.as_slice()),
        };
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.kind.type_name().as_bytes());
        out.extend_from_slice(b"\",\"seq\":");
        out.extend_from_slice(self.first_seq.to_string().as_bytes());
        if let Some(time) = self.times[0] {
            out.extend_from_slice(b",\"time\":");
            out.extend_from_slice(time.to_string().as_bytes());
        }
        out.extend_from_slice(b",\"data\":");
        serde_json::to_writer(&mut *out, &row)?;
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}
