//! Recorded dsh sessions as provider scripts: the model replies of a `session.jsonl`, grouped
//! into calls, and the optional `replay.override.json` faults.
//!
//! This reads only what replay needs (reply chunks, packed delta rows, call boundaries). The
//! full session reader (every event type, envelopes, versions, repair) belongs to
//! `dsh-session`; this deliberately small overlap keeps `dsh-test-support` free of that
//! dependency so that `dsh-session`'s own tests can use the fake provider.

use std::fmt;
use std::path::{Path, PathBuf};

use dsh_llm::{Chunk, FailureCode, FinishReason};
use serde::Deserialize;
use serde_json::Value;

use crate::render::reply_for_call;
use crate::script::ScriptedReply;

/// One model call of a recording: its reply chunks, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// Turn and step the chunks were logged under, when the rows said.
    pub turn: Option<u64>,
    /// Step number within the turn, when the rows said.
    pub step: Option<u64>,
    /// The reply, packed rows expanded into deltas. Ends with `finish` unless the call was cut
    /// short (a cancel while streaming).
    pub chunks: Vec<Chunk>,
}

impl RecordedCall {
    /// The recorded finish, if the call reached one.
    pub fn finish(&self) -> Option<&FinishReason> {
        match self.chunks.last() {
            Some(Chunk::Finish { reason }) => Some(reason),
            _ => None,
        }
    }

    /// The fake-provider reply that reproduces this call (see [`reply_for_call`]).
    pub fn reply(&self) -> ScriptedReply {
        reply_for_call(&self.chunks)
    }
}

/// One entry of `replay.override.json`; entry k concerns call k.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayOverride {
    /// Stream the call's recorded chunks, then stall until cancelled. A scenario runner signals
    /// readiness by creating `ready_file` (relative to the session's working directory).
    Hang {
        /// Marker file created when the stall begins, if any.
        ready_file: Option<String>,
    },
    /// Fail the call with `code` after streaming `chunks`.
    Throw {
        /// Chunks streamed before the failure.
        chunks: Vec<Chunk>,
        /// The failure's message.
        message: String,
        /// The failure's code.
        code: FailureCode,
    },
    /// Scripted chunks that the original runner served from a separate replay model (for
    /// example the session-title model); they are not applied to the recorded calls.
    Chunks {
        /// The scripted chunks, in order.
        chunks: Vec<Chunk>,
    },
    /// An entry of a kind this reader does not know, kept as read.
    Unknown(Value),
}

/// The model side of a recorded session.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSession {
    /// The calls, in the order they were made.
    pub calls: Vec<RecordedCall>,
    /// The parsed `replay.override.json`, empty when the folder has none.
    pub overrides: Vec<ReplayOverride>,
}

/// Why a recording could not be loaded.
#[derive(Debug)]
pub enum RecordingError {
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A line of a file is not a valid recording row.
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordingError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            RecordingError::Parse {
                path,
                line,
                message,
            } => write!(f, "{}:{line}: {message}", path.display()),
        }
    }
}

impl std::error::Error for RecordingError {}

#[derive(Deserialize)]
struct Row {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Value,
}

#[derive(Deserialize)]
struct Position {
    #[serde(default)]
    turn: Option<u64>,
    #[serde(default)]
    step: Option<u64>,
}

#[derive(Deserialize)]
struct PackedRow {
    index: u32,
    #[serde(default)]
    texts: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum OverrideRow {
    Hang {
        #[serde(rename = "readyFile", default)]
        ready_file: Option<String>,
    },
    Throw {
        #[serde(default)]
        chunks: Vec<Chunk>,
        #[serde(default)]
        message: String,
        code: FailureCode,
    },
    Chunks {
        chunks: Vec<Chunk>,
    },
}

/// Calls being grouped while reading.
#[derive(Default)]
struct Grouper {
    calls: Vec<RecordedCall>,
    open: Option<RecordedCall>,
}

impl Grouper {
    fn push(&mut self, position: &Position, chunk: Chunk) {
        let same_step = matches!(&self.open, Some(call)
            if call.turn == position.turn && call.step == position.step);
        if !same_step {
            self.close();
        }
        let call = self.open.get_or_insert_with(|| RecordedCall {
            turn: position.turn,
            step: position.step,
            chunks: Vec::new(),
        });
        let is_finish = matches!(chunk, Chunk::Finish { .. });
        call.chunks.push(chunk);
        if is_finish {
            self.close();
        }
    }

    fn close(&mut self) {
        if let Some(call) = self.open.take() {
            if !call.chunks.is_empty() {
                self.calls.push(call);
            }
        }
    }
}

fn packed_chunks(kind: &str, row: PackedRow) -> Vec<Chunk> {
    let index = row.index;
    match kind {
        "reasoning-chunks" => row
            .texts
            .into_iter()
            .map(|text| Chunk::ReasoningDelta { index, text })
            .collect(),
        "text-chunks" => row
            .texts
            .into_iter()
            .map(|text| Chunk::TextDelta { index, text })
            .collect(),
        _ => {
            let mut name = row.name;
            row.args
                .into_iter()
                .map(|arguments_delta| Chunk::ToolCallDelta {
                    index,
                    id: row.id.clone(),
                    name: name.take(),
                    arguments_delta,
                })
                .collect()
        }
    }
}

impl RecordedSession {
    /// Loads `path`: a session folder (reading `session.jsonl` and, when present,
    /// `replay.override.json`) or a `session.jsonl` file (overrides then come from its folder).
    ///
    /// Calls are the `assistant/chunk` events plus the packed rows `reasoning-chunks`,
    /// `text-chunks` and `tool-call-chunks` (expanded into one delta each; a tool call's id on
    /// every delta, its name on the first). A call ends at its `finish` chunk; chunks left open
    /// at an `assistant/message`, `step/end`, `turn/end`, a change of turn or step, or the end
    /// of the file form an unfinished call. Other event types are ignored. A torn (unparsable)
    /// last line is dropped, as a crashed writer leaves one; any other bad line is an error.
    pub fn load(path: &Path) -> Result<Self, RecordingError> {
        let (file, folder) = if path.is_dir() {
            (path.join("session.jsonl"), path.to_path_buf())
        } else {
            let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (path.to_path_buf(), folder)
        };
        let text = std::fs::read_to_string(&file).map_err(|error| RecordingError::Io {
            path: file.clone(),
            error,
        })?;
        let calls = parse_calls(&text, &file)?;
        let override_path = folder.join("replay.override.json");
        let overrides = if override_path.is_file() {
            let text =
                std::fs::read_to_string(&override_path).map_err(|error| RecordingError::Io {
                    path: override_path.clone(),
                    error,
                })?;
            parse_overrides(&text).map_err(|message| RecordingError::Parse {
                path: override_path,
                line: 1,
                message,
            })?
        } else {
            Vec::new()
        };
        Ok(RecordedSession { calls, overrides })
    }

    /// The chunk list of every call, for a replay adapter.
    pub fn call_chunks(&self) -> Vec<Vec<Chunk>> {
        self.calls.iter().map(|call| call.chunks.clone()).collect()
    }

    /// The fake-provider script: reply k reproduces call k, with `hang` and `throw` overrides
    /// applied to the call at their position (`hang`: the recorded chunks, then a stall; `throw`:
    /// the code's fault after the override's chunks). An override beyond the recorded calls adds
    /// a reply. `chunks` overrides are not applied (see [`ReplayOverride::Chunks`]).
    pub fn replies(&self) -> Vec<ScriptedReply> {
        let count = self.calls.len().max(
            self.overrides
                .iter()
                .rposition(|o| {
                    matches!(
                        o,
                        ReplayOverride::Hang { .. } | ReplayOverride::Throw { .. }
                    )
                })
                .map_or(0, |last| last + 1),
        );
        (0..count)
            .map(|k| {
                let recorded = self
                    .calls
                    .get(k)
                    .map(|c| c.chunks.as_slice())
                    .unwrap_or(&[]);
                match self.overrides.get(k) {
                    Some(ReplayOverride::Hang { .. }) => {
                        let body: Vec<Chunk> = recorded
                            .iter()
                            .filter(|c| !matches!(c, Chunk::Finish { .. }))
                            .cloned()
                            .collect();
                        reply_for_call(&body)
                    }
                    Some(ReplayOverride::Throw {
                        chunks,
                        message,
                        code,
                    }) => {
                        let mut body = chunks.clone();
                        body.push(Chunk::Finish {
                            reason: FinishReason::Error {
                                failure: dsh_llm::Failure::new(code.clone(), message.clone()),
                            },
                        });
                        reply_for_call(&body)
                    }
                    _ => reply_for_call(recorded),
                }
            })
            .collect()
    }
}

/// The calls of a `session.jsonl` text (see [`RecordedSession::load`]); `file` names it in
/// errors.
pub fn parse_calls(text: &str, file: &Path) -> Result<Vec<RecordedCall>, RecordingError> {
    let mut grouper = Grouper::default();
    let lines: Vec<&str> = text.lines().collect();
    for (number, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parse_error = |message: String| RecordingError::Parse {
            path: file.to_path_buf(),
            line: number + 1,
            message,
        };
        let row: Row = match serde_json::from_str(line) {
            Ok(row) => row,
            Err(_) if number + 1 == lines.len() => break,
            Err(err) => return Err(parse_error(err.to_string())),
        };
        match row.kind.as_str() {
            "assistant/chunk" => {
                let position =
                    Position::deserialize(&row.data).map_err(|e| parse_error(e.to_string()))?;
                let chunk = row
                    .data
                    .get("chunk")
                    .ok_or_else(|| parse_error("assistant/chunk without `chunk`".into()))?;
                let chunk =
                    Chunk::deserialize(chunk).map_err(|e| parse_error(format!("chunk: {e}")))?;
                grouper.push(&position, chunk);
            }
            kind @ ("reasoning-chunks" | "text-chunks" | "tool-call-chunks") => {
                let position =
                    Position::deserialize(&row.data).map_err(|e| parse_error(e.to_string()))?;
                let packed = PackedRow::deserialize(&row.data)
                    .map_err(|e| parse_error(format!("{kind}: {e}")))?;
                for chunk in packed_chunks(kind, packed) {
                    grouper.push(&position, chunk);
                }
            }
            "assistant/message" | "step/end" | "turn/end" => grouper.close(),
            _ => {}
        }
    }
    grouper.close();
    Ok(grouper.calls)
}

/// Parses the entries of a `replay.override.json` text (a JSON array).
pub fn parse_overrides(text: &str) -> Result<Vec<ReplayOverride>, String> {
    let entries: Vec<Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(entries
        .into_iter()
        .map(|entry| match OverrideRow::deserialize(&entry) {
            Ok(OverrideRow::Hang { ready_file }) => ReplayOverride::Hang { ready_file },
            Ok(OverrideRow::Throw {
                chunks,
                message,
                code,
            }) => ReplayOverride::Throw {
                chunks,
                message,
                code,
            },
            Ok(OverrideRow::Chunks { chunks }) => ReplayOverride::Chunks { chunks },
            Err(_) => ReplayOverride::Unknown(entry),
        })
        .collect())
}

/// The call chunk lists of the recording at `path` (folder or `session.jsonl`).
pub fn load_recorded_calls(path: &Path) -> Result<Vec<Vec<Chunk>>, RecordingError> {
    Ok(RecordedSession::load(path)?.call_chunks())
}
