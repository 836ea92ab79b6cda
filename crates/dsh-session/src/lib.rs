//! The session log of dsh (docs/sessions.md): the single source of truth of a session.
//!
//! A session is one append-only log: a header line, then events. Everything a model request
//! contains is rebuilt from it (the last `request/header` plus the [projected](Projector)
//! messages); resume, fork, export, the front ends and cost reports read it too. Logs written
//! by the original dsh load here, packed rows included, and the other way round.
//!
//! # Pieces
//! - [`Event`] and its payload types: the vocabulary of docs/sessions.md ("Event types") with dsh's
//!   names; [`Envelope`] adds `seq`, `time`, `surfaceOp`, `sourceEventSeqs`, `ignorable`.
//! - [`LogReader`] / [`load_file`]: streaming reader with packed-row expansion, seq
//!   assignment, torn-tail tolerance and precise errors ([`SessionError`]).
//! - [`Projector`]: incremental projection to `Vec<dsh_llm::Message>` (docs/sessions.md,
//!   "Projection").
//! - [`SessionStore`] (create, load, resume, list, search, remove) and [`SessionWriter`]
//!   (append, flush, repair), implemented by [`JsonlStore`] and [`SqliteStore`]; pick one with
//!   [`StoreKind`] and [`open_store`].
//! - [`repair::closers`], [`fork()`], [`export_markdown`], [`encode_jsonl`], [`export_zip`],
//!   [`SessionSummary`] with [`PriceTable`].
//!
//! # Use from the agent loop
//! ```no_run
//! use dsh_session::{open_store, Envelope, Event, SessionStore, StoreKind, StepRef, TurnStart};
//! # fn main() -> Result<(), dsh_session::SessionError> {
//! let store = open_store(StoreKind::Jsonl, std::path::Path::new("/home/me/.dsh"))?;
//! // New session (the header is durable on return; the writer holds the lock):
//! let mut log = store.create("/home/me/project", Default::default())?;
//! let mut history = dsh_session::Projector::new();
//! let seq = log.append(Event::TurnStart(TurnStart { turn: 1 }))?; // fsynced: a boundary
//! log.append(Event::StepStart(StepRef { turn: 1, step: 1 }))?;
//! let user = Envelope::new(Event::UserMessage(dsh_llm::Message::user_text("m1", "hi")));
//! let seq_user = log.append_envelope(user.clone())?;
//! history.push(&Envelope { seq: seq_user, ..user })?;
//! log.flush()?; // before the model call
//! // ... chunks, assistant/message, tool/call, tool/started (fsynced), tool/result ...
//! # let _ = seq;
//! // Later, in another process:
//! let resumed = store.resume("0b1c")?; // id, prefix or path; repairs a crashed tail
//! let next_turn = resumed.next_turn;    // log a `request/header {reason: resume}` next
//! # let _ = next_turn;
//! # Ok(()) }
//! ```
//!
//! # Durability and flush points
//! Appends are buffered. Writers fsync on their own after `step/start`, `step/end`,
//! `turn/start`, `turn/end` and `tool/started`; the loop calls [`SessionWriter::flush`] before
//! each model call. The loop appends [`Event::ToolStarted`] right before each tool body: that
//! is how crash repair tells `TOOL_NOT_STARTED` from `TOOL_OUTCOME_UNKNOWN` (see [`repair`]).
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod atif;
mod blobs;
mod catalog;
pub mod compat;
mod envelope;
mod error;
mod event;
mod export;
mod fork;
mod goal;
mod jsonl;
mod listing;
mod lock;
mod packed;
mod private;
mod projection;
mod reader;
pub mod repair;
mod sqlite;
mod state;
mod store;
pub mod usage;

pub use atif::{
    export_atif, load_log_bytes, load_sub_agent_logs, AtifOptions, ATIF_SCHEMA_VERSION,
};
pub use blobs::{blobs_beside, zip_image_entries, BlobProblem, BlobStore};
pub use catalog::{
    build_index, Catalog, CatalogSearch, ListedSession, ListedSessions, WatchedCatalog,
    CATALOG_FILE, INDEX_LOCK_FILE, INLINE_INDEX_LIMIT,
};
/// The price table lives in `dsh-llm`, below the configuration; named here too for the crates
/// that read costs from summaries.
pub use dsh_llm::{ModelPrice, PriceTable};
pub use envelope::{now_ms, Envelope, SessionHeader, SurfaceOp, FORMAT_VERSION, WRITER_NAME};
pub use error::{Location, Result, SessionError};
pub use event::{
    is_known_type, AbortCause, AssistantChunk, AssistantMessage, DshOnlyEvent, EndSeed, Event,
    HeaderReason, HeaderTools, InboxSplice, LlmRetry, LlmRetryStarted, RequestContext,
    RequestHeader, RequestHeaderEvent, SessionTitle, StepRef, TodoItem, TodoWrite, ToolCall,
    ToolError, ToolResult, ToolStarted, TurnEnd, TurnEndReason, TurnStart, DSH_ONLY_TYPES,
    KNOWN_OPAQUE_TYPES, REVIEW_FINDINGS_EVENT, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN,
    TOOL_PROGRESS_EVENT, USER_COMMAND_EVENT, WORKSPACE_CHECKPOINT_EVENT,
};
pub use export::{encode_jsonl, export_markdown, export_zip, TRANSCRIPT_RESULT_LIMIT};
pub use fork::{
    fork, fork_before_turn, fork_location, fork_location_before, fork_log, fork_point, Forked,
};
pub use goal::{
    GoalBlockReason, GoalChange, GoalOperation, GoalPhase, GoalRef, GoalSnapshot,
    GOAL_CHANGE_EVENT, GOAL_CHANGE_VERSION,
};
pub use jsonl::{plain_continuation, session_file_in, JsonlStore, JsonlWriter};
pub use listing::{message_text, SessionSummary};
pub use projection::{project, HistoryEntry, Projector};
pub use reader::{
    is_zstd_path, load_file, LoadedLog, LogInput, LogReader, TornTail, ZstdInput,
    ZSTD_MAX_EXPANDED, ZSTD_MAX_RATIO, ZSTD_RATIO_FLOOR,
};
pub use sqlite::{load_location, sub_agent_anchor, SqliteStore, SqliteWriter};
pub use state::{ClosedTurn, OpenCall, SessionTracker};
pub use store::{
    cwd_folder_name, is_flush_point, is_sync_point, open_store, session_path, CreateOptions,
    DamagedSession, ListFilter, ListPage, Listing, Resumed, SearchHit, SessionStore, SessionWriter,
    StoreKind,
};
pub use usage::{
    billed, Billed, BilledKind, UsageCall, UsageLedger, SUBAGENT_USAGE_EVENT, USAGE_CALL_EVENT,
};
