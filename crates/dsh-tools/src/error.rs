//! Tool failures: a structured code plus a message meant for the model.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// Why a tool call failed. Serialised in `SCREAMING_SNAKE_CASE` (`"FS_NOT_OBSERVED"`), the
/// spelling used in session logs and `{name, code}` error records (docs/agent.md, "Tool pipeline").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ToolErrorCode {
    /// No tool of that name is registered.
    UnknownTool,
    /// Arguments are not valid JSON, have a wrong type, miss a field or make no sense.
    InvalidArgs,
    /// The call ran past the timeout its tool declared.
    ToolTimeout,
    /// The permission preset forbids the action.
    PermissionDenied,
    /// `write`/`edit` of an existing file that was not read in this session.
    FsNotObserved,
    /// `write`/`edit` of a file that changed since this session last read or wrote it.
    FsStaleVersion,
    /// A path named by the arguments does not exist.
    NotFound,
    /// A path exists but is not what the tool needs (a directory given to `read`, ...).
    NotAFile,
    /// `read` of a file that looks binary.
    BinaryFile,
    /// `edit` found no occurrence of `old_string`.
    NoMatch,
    /// `edit` found several occurrences of `old_string` and `replace_all` was not set.
    AmbiguousMatch,
    /// The feature asked for exists in the schema but not in this build (e.g. background jobs).
    Unsupported,
    /// The call was cancelled (the context's token fired) before it completed.
    Aborted,
    /// An operating-system error while doing the work.
    Io,
    /// `bash` cannot be confined as the preset requires and will not run unconfined.
    SandboxUnavailable,
    /// A per-session limit is reached (e.g. 10 running background jobs).
    LimitReached,
    /// `web_search`: the search provider failed (HTTP error, redirect, unreadable reply, no
    /// search result block).
    WebProviderError,
    /// `web_search`: the search provider answered 429 (rate limited).
    WebRateLimited,
    /// `web_search`: the search provider refused the key (401/403).
    WebProviderAuth,
}

impl ToolErrorCode {
    /// The code as logged, e.g. `"INVALID_ARGS"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorCode::UnknownTool => "UNKNOWN_TOOL",
            ToolErrorCode::InvalidArgs => "INVALID_ARGS",
            ToolErrorCode::ToolTimeout => "TOOL_TIMEOUT",
            ToolErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ToolErrorCode::FsNotObserved => "FS_NOT_OBSERVED",
            ToolErrorCode::FsStaleVersion => "FS_STALE_VERSION",
            ToolErrorCode::NotFound => "NOT_FOUND",
            ToolErrorCode::NotAFile => "NOT_A_FILE",
            ToolErrorCode::BinaryFile => "BINARY_FILE",
            ToolErrorCode::NoMatch => "NO_MATCH",
            ToolErrorCode::AmbiguousMatch => "AMBIGUOUS_MATCH",
            ToolErrorCode::Unsupported => "UNSUPPORTED",
            ToolErrorCode::Aborted => "ABORTED",
            ToolErrorCode::Io => "IO",
            ToolErrorCode::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            ToolErrorCode::LimitReached => "LIMIT_REACHED",
            ToolErrorCode::WebProviderError => "WEB_PROVIDER_ERROR",
            ToolErrorCode::WebRateLimited => "WEB_RATE_LIMITED",
            ToolErrorCode::WebProviderAuth => "WEB_PROVIDER_AUTH",
        }
    }
}

impl fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed tool call. The model sees [`ToolError::result_text`] (`Error: <message>`); logs and
/// front ends also get the [`code`](ToolError::code).
///
/// Messages are written for the model: they say what was wrong and, where there is one, what to
/// do instead. They never contain secrets (tools do not put environment values in them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The structured reason.
    pub code: ToolErrorCode,
    /// Human and model readable explanation, without the `Error: ` prefix.
    pub message: String,
}

impl ToolError {
    /// An error with `code` and `message`.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `INVALID_ARGS` with `message`.
    pub fn invalid_args(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::InvalidArgs, message)
    }

    /// An I/O failure about `path`; `NotFound` maps to `NOT_FOUND`, permission errors to
    /// `PERMISSION_DENIED`, everything else to `IO`.
    pub fn io(what: &str, path: &std::path::Path, err: &io::Error) -> Self {
        let code = match err.kind() {
            io::ErrorKind::NotFound => ToolErrorCode::NotFound,
            io::ErrorKind::PermissionDenied => ToolErrorCode::PermissionDenied,
            _ => ToolErrorCode::Io,
        };
        Self::new(code, format!("{what} {}: {err}", path.display()))
    }

    /// The text the model receives as the tool result: `Error: <message>`.
    pub fn result_text(&self) -> String {
        format!("Error: {}", self.message)
    }
}
