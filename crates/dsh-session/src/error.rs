//! Errors of the session log. Every variant says what went wrong, where, and what to do.

use std::path::PathBuf;

/// Where in a log something was found: the file (or store description) and the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The session file, or a description of the store (e.g. `sqlite:<db> session <id>`).
    pub source: String,
    /// The 1-based line number (for SQLite: the event's seq + 2, i.e. the line it would have in
    /// a JSONL file with the header on line 1).
    pub line: u64,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.source, self.line)
    }
}

/// Everything that can go wrong reading, writing or transforming a session log.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An I/O operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`opening`, `writing`, ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line that is not valid JSON, or valid JSON of the wrong shape, somewhere other than the
    /// (possibly torn) last line.
    #[error("{at}: malformed session line: {reason}. The log is damaged at this line; restore it from a backup or remove the line by hand")]
    Malformed {
        /// The file and line.
        at: Location,
        /// What is wrong with the line.
        reason: String,
    },
    /// An event type this build does not know, without `ignorable: true`.
    #[error("{at}: unknown required event type `{event_type}`; this log was written by a newer dsh. Upgrade dsh to read it")]
    UnknownEvent {
        /// The file and line.
        at: Location,
        /// The unknown type.
        event_type: String,
    },
    /// The header's format version is not one this build reads.
    #[error("{at}: session format version {version} is not supported (this build reads version {supported}); upgrade dsh to read it")]
    UnsupportedVersion {
        /// The file and line (always line 1).
        at: Location,
        /// The version found.
        version: u64,
        /// The version this build reads and writes.
        supported: u64,
    },
    /// The file does not start with a session header.
    #[error(
        "{at}: missing session header (first line must be {{\"type\":\"session\",...}}): {reason}"
    )]
    MissingHeader {
        /// The file and line.
        at: Location,
        /// What was found instead.
        reason: String,
    },
    /// An explicit `seq` field disagrees with the event's position.
    #[error("{at}: event says seq {found} but it is event number {expected}; the log was edited or spliced. Repair it by hand")]
    SeqMismatch {
        /// The file and line.
        at: Location,
        /// The seq the position implies.
        expected: u64,
        /// The seq written on the line.
        found: u64,
    },
    /// Another process holds the session's writer lock.
    #[error("session log {} is locked by another writer (a dsh process is still appending to it); close that process or wait for it to finish", path.display())]
    Locked {
        /// The locked file.
        path: PathBuf,
    },
    /// No session with this id or path exists.
    #[error("no session `{0}` found; run `dsh sessions list --all` to see the known sessions")]
    NotFound(String),
    /// More than one session matches an id prefix.
    #[error("session id `{prefix}` is ambiguous: it matches {}", candidates.join(", "))]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// The matching ids.
        candidates: Vec<String>,
    },
    /// A replace span cites messages that are not in the history.
    #[error("event {seq}: surfaceOp replace cites seqs {start}..={end}, which match no message of the history; the log is inconsistent")]
    ReplaceSpan {
        /// The seq of the replacing message.
        seq: u64,
        /// First cited seq.
        start: u64,
        /// Last cited seq.
        end: u64,
    },
    /// A fork point that is not the end of a closed turn.
    #[error("cannot fork at turn {turn}: {reason}")]
    ForkPoint {
        /// The requested turn.
        turn: u64,
        /// Why it is not a valid fork point.
        reason: String,
    },
    /// An event could not be encoded (should not happen for events built from this vocabulary).
    #[error("cannot encode event `{event_type}`: {reason}")]
    Encode {
        /// The event type.
        event_type: String,
        /// The serde error.
        reason: String,
    },
    /// A SQLite operation failed.
    #[error("sqlite store {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: rusqlite::Error,
    },
    /// Writing a zip archive failed.
    #[error("writing zip archive: {0}")]
    Zip(String),
    /// An image could not be stored beside the session (docs/sessions.md, "Images").
    #[error("storing an image of the session: {0}")]
    Blob(String),
    /// A listing page cursor that no listing gave out.
    #[error("unknown page cursor `{0}`: pass the `next` value of the previous page, or none for the first page")]
    BadCursor(String),
}

/// Result alias of this crate.
pub type Result<T, E = SessionError> = std::result::Result<T, E>;

/// Builds an [`SessionError::Io`] mapper for `map_err`.
pub(crate) fn io_err(
    action: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> SessionError {
    let path = path.into();
    move |source| SessionError::Io {
        action,
        path,
        source,
    }
}
