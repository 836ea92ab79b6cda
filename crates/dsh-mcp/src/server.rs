//! What the hub is given about each server: how to reach it, its limits and the user's trust,
//! and the gate a stdio server's command must pass. The composition root makes them from the
//! configuration (`[mcp.servers.<name>]`, an ACP editor's `mcpServers`), so this crate reads
//! no configuration (docs/ARCHITECTURE.md, "dsh-mcp").

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How far the user trusts a server's tools (docs/mcp.md, "Approvals").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McpTrust {
    /// Every call is asked (except under `danger-full-access`), even of tools that declare
    /// `readOnlyHint`.
    None,
    /// Tools that declare `readOnlyHint = true` run without asking; the others are asked under
    /// `read-only`, `ask` and `workspace-write`.
    #[default]
    ReadOnly,
    /// Under `workspace-write` no call is asked; under `read-only` and `ask` tools
    /// without `readOnlyHint` are still asked.
    All,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to run (looked up in `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it (after the environment was scrubbed of secrets).
        env: Vec<(String, String)>,
        /// Variables passed through from dsh's own environment by name (e.g. a token).
        env_vars: Vec<String>,
        /// Working directory (default: the session's).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra request headers.
        headers: Vec<(String, String)>,
        /// Variable holding a bearer token sent as `Authorization: Bearer <token>`.
        bearer_token_env: Option<String>,
    },
}

/// One server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name; tools appear as `mcp__<name>__<tool>`.
    pub name: String,
    /// How dsh reaches the server (stdio child or streamable HTTP).
    pub transport: McpTransport,
    /// Limit for one tool call.
    pub tool_timeout: Duration,
    /// Limit for starting the server and listing its tools.
    pub startup_timeout: Duration,
    /// Which calls run without the user's approval.
    pub trust: McpTrust,
    /// The project configured it: a stdio server then runs in the session's confinement, like
    /// `bash` (docs/mcp.md, "Project servers run confined").
    pub from_project: bool,
}

/// What a stdio server's command must pass before each start and restart (docs/mcp.md,
/// "Servers in the workspace are pinned"): a program or script where the model can write runs
/// only with the bytes the user trusted. The composition root fills it with the configuration's
/// script gate.
pub trait CommandGate: Send + Sync {
    /// `Err` with the reason (which says how to trust it again) when `program args`, run in
    /// `cwd`, may not start.
    fn check_argv(&self, program: &str, args: &[String], cwd: &Path) -> Result<(), String>;

    /// The `PATH` a server gets instead of the environment's (no entry the model can write);
    /// `None` keeps the environment's.
    fn command_path(&self) -> Option<OsString>;
}
