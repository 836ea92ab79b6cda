//! The sandbox seam of `bash`.
//!
//! `bash` builds a [`CommandPlan`] (`bash -c <command>`) and hands it to the context's
//! [`CommandConfinement`], which returns the plan to actually spawn: for bubblewrap the program
//! becomes `bwrap` with the original program and arguments after its own; for Landlock the plan
//! keeps its program and gains a `pre_exec` hook that restricts the child before `exec`.
//! A confinement that cannot honour the preset returns `SANDBOX_UNAVAILABLE`; it never runs the
//! command unconfined, except under `danger-full-access`, which asks for no confinement.
//!
//! This crate ships only [`NoSandbox`]. The real implementations (bubblewrap, Landlock) belong
//! to the safety work (crate `dsh-sandbox`) and plug in with
//! [`ToolContext::with_confinement`](crate::ToolContext::with_confinement).

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::context::PermissionPreset;
use crate::error::{ToolError, ToolErrorCode};

/// A hook run in the child between `fork` and `exec`. It must only make async-signal-safe
/// calls (no allocation, no locks): it runs in a copy of a multi-threaded process.
pub type PreExecHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// The process to spawn for one command. The spawner always adds: its own session and process
/// group, stdin from `/dev/null`, piped stdout/stderr, the scrubbed environment, and the
/// working directory. Keep the plan until the command has ended: a confinement may tie what
/// the command runs in to it (bubblewrap's prepared sandbox ends when the last plan holding
/// it is dropped and no cache keeps it, docs/SECURITY.md "A prepared bubblewrap sandbox per
/// layout").
#[derive(Clone)]
pub struct CommandPlan {
    /// Program to execute (looked up in `PATH` when not absolute).
    pub program: OsString,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// Hooks run in the child before `exec`, in order.
    pub pre_exec: Vec<PreExecHook>,
}

impl fmt::Debug for CommandPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandPlan")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("pre_exec", &self.pre_exec.len())
            .finish()
    }
}

/// What a confinement needs to know about the call.
#[derive(Debug, Clone)]
pub struct ConfinementRequest {
    /// The session's preset.
    pub preset: PermissionPreset,
    /// The canonical session cwd.
    pub cwd: PathBuf,
    /// The directory the command starts in.
    pub workdir: PathBuf,
    /// Directories the command may write under `workspace-write` (cwd and temp dirs).
    pub writable_roots: Vec<PathBuf>,
    /// Directories the command must not see at all where the mechanism can hide them (dsh's
    /// home: credentials, trust records, the web UI's token page; see [`hidden_dirs`]).
    pub hidden_dirs: Vec<PathBuf>,
}

/// The directories confined commands must not see: dsh's home, `$DSH_HOME` when set and not
/// empty, else `$HOME/.dsh` (the rule of `dsh-cli`'s `home.rs`, docs/SECURITY.md "Process
/// sandbox"). Relative values are ignored: they name no fixed place.
pub fn hidden_dirs() -> Vec<PathBuf> {
    let home = match std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".dsh"),
            None => return Vec::new(),
        },
    };
    if home.is_absolute() {
        vec![home]
    } else {
        Vec::new()
    }
}

/// Turns a plain command plan into a confined one, or refuses.
pub trait CommandConfinement: Send + Sync {
    /// A short name for logs (`none`, `bubblewrap`, `landlock`).
    fn name(&self) -> &str;

    /// Returns the plan to spawn for `plan` under `request`, or `SANDBOX_UNAVAILABLE` when the
    /// preset requires confinement this implementation cannot provide. Under
    /// `danger-full-access` implementations return `plan` unchanged.
    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError>;
}

/// The confinement of a build without a sandbox: runs commands unconfined under
/// `danger-full-access` and refuses them (`SANDBOX_UNAVAILABLE`) under every other preset,
/// because an unconfined run there would silently exceed what the user allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSandbox;

impl CommandConfinement for NoSandbox {
    fn name(&self) -> &str {
        "none"
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        match request.preset {
            PermissionPreset::DangerFullAccess => Ok(plan),
            preset @ (PermissionPreset::ReadOnly | PermissionPreset::WorkspaceWrite) => {
                Err(ToolError::new(
                    ToolErrorCode::SandboxUnavailable,
                    format!(
                        "bash cannot run under the {preset} preset: no process sandbox is available, and commands never run unconfined outside danger-full-access"
                    ),
                ))
            }
        }
    }
}
