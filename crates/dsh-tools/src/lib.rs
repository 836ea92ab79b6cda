//! The tool seam of dsh (docs/tools.md; policy in docs/SECURITY.md).
//!
//! * [`Tool`]: one capability the model can call (name, description, JSON-schema parameters,
//!   concurrency flag, optional timeout, boxed-future `execute`), and how front ends show its
//!   calls ([`ToolPresentation`], [`ResultSummary`]).
//! * [`ToolRegistry`]: tools by name, schemas sorted by name, and [`ToolRegistry::invoke`],
//!   which turns a raw argument string into a result with structured error codes.
//! * [`ToolContext`]: what a call may use — cwd, cancel token, private spill directory,
//!   permission preset, the session's file observations, limits, and the process
//!   confinement seam ([`CommandConfinement`]).
//! * [`ToolOutput`] / [`ToolError`]: content for the model, a human summary and structured
//!   data; or `Error: <message>` with a [`ToolErrorCode`].
//! * [`SnapshotDir`] / [`FileSnapshot`]: a file's content before `write`/`edit` changed it,
//!   for `/undo` ([`plan_undo`], [`apply_undo`]) and `/diff` ([`session_diff`]).
//! * [`externalize`]: large output to a private file with a head/tail preview.
//! * [`SecretRedactor`]: secret values in tool output replaced by `[REDACTED:<NAME>]`.
//! * [`printable`]: control characters and escape sequences of text shown, not obeyed.
//! * The built-ins: `bash`, `read`, `write`, `edit`, `glob`, `grep`, `todo_write`.
//! * Opt-in tools: background jobs ([`JobTable`], `job_output`, `job_list`, `job_kill`),
//!   `ask_user_question` (answered by a front end's [`Asker`]), `web_fetch`
//!   ([`WebFetchTool`], off unless configured) and `web_search` ([`WebSearchTool`], on when a
//!   DeepSeek key is configured; its model call is a [`WebSearcher`] the composition root
//!   supplies).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use dsh_tools::{tool_result_block, PermissionPreset, SpillDir, ToolContext, ToolRegistry};
//!
//! let registry = ToolRegistry::with_builtins();
//! let tools = registry.schemas(); // sorted by name: send with every request
//! let session = ToolContext::new("/path/to/project", SpillDir::create("/tmp/dsh-spill/s1")?)?
//!     .with_permission(PermissionPreset::WorkspaceWrite);
//! // For each tool call of a step (concurrency-safe ones may run together):
//! let call_ctx = session.for_call();
//! let result = registry.invoke("read", r#"{"file_path":"README.md"}"#, &call_ctx).await;
//! let block = tool_result_block("call_1", &result); // goes into a user-role message
//! # let _ = (tools, block);
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod args;
mod ask;
mod builtin;
mod checkpoint;
mod confinement;
mod context;
mod error;
mod gate;
pub mod git;
mod jobs;
mod observe;
mod os;
mod output;
mod paths;
mod presentation;
mod process;
mod protected;
mod redact;
mod registry;
mod snapshot;
mod spill;
mod terminal;
mod tool;
mod web;

pub use args::{parse_args, parse_raw_arguments};
pub use ask::{
    AskOutcome, AskUserQuestionTool, Asker, HeadlessAsker, QuestionOption, QuestionRequest,
    UserAnswer, UserQuestion, MAX_OPTIONS, MAX_QUESTIONS,
};
pub use builtin::{
    builtin_tools, is_temp_name, remove_leftover_temps, BashTool, EditTool, GlobTool, GrepTool,
    ReadImageTool, ReadTool, TodoItem, TodoStatus, TodoWriteTool, WriteTool, GLOB_MAX_RESULTS,
    GREP_MAX_RESULTS, TEMP_PREFIX,
};
pub use checkpoint::{
    Checkpoint, CheckpointError, CheckpointLimits, CheckpointStore, RestorePlan, RestoreReport,
};
pub use confinement::{
    hidden_dirs, CommandConfinement, CommandConfiner, CommandPlan, ConfinementRequest, ExecImage,
    ExecSlot, Launcher, NoSandbox, PreExecHook, LAUNCHER_ENV,
};
pub use context::{PermissionPreset, ProgressSink, ToolContext, ToolLimits, ToolProgress};
pub use error::{ToolError, ToolErrorCode};
pub use gate::{unsafe_ignore_file, FolderEntry, GateError, GateFile, GatePolicy, Refusal};
pub use jobs::{
    job_tools, FinishCallback, JobEnd, JobKillTool, JobListTool, JobNotice, JobOutputTool,
    JobStatus, JobTable, StoppedJob, TaskBody, TaskDone, TaskSpec, WeakJobTable, MAX_RUNNING_JOBS,
    TASK_KILL_GRACE,
};
pub use observe::{ContentHasher, FileObservations, Observation};
pub use output::ToolOutput;
pub use paths::{absolutize, protected_write_path, resolve_real_path};
pub use presentation::{
    one_line, string_arg, ChangePreview, ResultFacts, ResultSummary, Tone, ToolKind,
    ToolPresentation, ToolView,
};
pub use process::{
    clean_loader_value, group_has_live_members, guard_group, guard_group_std, is_secret_name,
    kill_group_now, plan_command, scrubbed_env, spawn_child, spawn_std_child, CHILD_ENV_OVERRIDES,
};
pub use protected::{
    existing_protected_entries, is_protected_name, protected_entry, ProtectedCache,
    GIT_DIR_CONTROL, PROTECTED_ENV_PREFIX, PROTECTED_GIT_ENTRIES, PROTECTED_MORE_NAMES,
    PROTECTED_NAMES,
};
pub use redact::{
    env_file_secrets, is_secret_variable, SecretRedactor, StreamRedactor, MIN_SECRET_LEN,
    MIN_UNNAMED_SECRET_LEN,
};
pub use registry::{tool_result_block, ToolRegistry, ToolRegistryError};
pub use snapshot::{
    apply_undo, plan_undo, session_diff, sha256_hex, FileDiff, FileSnapshot, SnapshotDir,
    UndoConflict, UndoStep, SNAPSHOT_DATA_KEY,
};
pub use spill::{externalize, Externalized, SpillDir, DEFAULT_SPILL_THRESHOLD};
pub use terminal::{is_unsafe_for_terminal, printable};
pub use tool::Tool;
pub use web::{
    decode_entities, html_to_markdown, refused_address, HostResolver, SystemResolver,
    WebFetchSettings, WebFetchTool, WebSearchResult, WebSearchSettings, WebSearchTool, WebSearcher,
    WebSource, SEARCH_REQUEST_EVENT,
};
