//! The Windows side of `process.rs`: the same interface without POSIX process groups.
//!
//! Windows has no `setsid`, `fork` or parent-death signal. A child starts in a new console
//! process group (`CREATE_NEW_PROCESS_GROUP`, so the user's Ctrl-C in dsh's console does not
//! reach it) without a window, and ending a call ends the child's process tree with
//! `taskkill /T /F`. Limits (docs/SECURITY.md, "Platforms"; the job objects that remove them
//! are planned in docs/decisions/0007-windows-confinement.md): a process whose parent already
//! exited is no longer part of the tree `taskkill` walks and survives; children are not killed
//! when dsh itself is killed; the liveness check looks at the child itself, not at the
//! processes it started.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::confinement::CommandPlan;
use crate::process::scrubbed_env;

/// A process id, as the Unix side's `pid_t`.
pub(crate) type Pid = i32;

/// `CREATE_NEW_PROCESS_GROUP`: the child does not get the console's Ctrl-C.
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
/// `CREATE_NO_WINDOW`: no console window for a console program.
const CREATE_NO_WINDOW: u32 = 0x0800_0000;

/// A command for `plan` in `workdir` in a new process group, with the scrubbed environment and
/// stdin from the null device; `bash` is [`posix_shell`] (callers first [`check_program`]).
/// The plan's `pre_exec` hooks are Unix's (only Landlock, compiled on Linux alone, makes
/// them), so a Windows plan has none.
pub(crate) fn group_command(plan: &CommandPlan, workdir: &Path) -> tokio::process::Command {
    tokio::process::Command::from(plan_command(plan, workdir, scrubbed_env()))
}

/// [`group_command`] with `env` as the whole environment (the Unix side's `plan_command`).
pub fn plan_command(
    plan: &CommandPlan,
    workdir: &Path,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
) -> std::process::Command {
    use std::os::windows::process::CommandExt;
    let program = match posix_shell() {
        Some(shell) if plan.program == "bash" => shell.into_os_string(),
        _ => plan.program.clone(),
    };
    let mut command = std::process::Command::new(program);
    command
        .args(&plan.args)
        .env_clear()
        .envs(env)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
    command
}

/// Starts `command` (a hook or an MCP server) in a new process group. Windows has no
/// parent-death signal: it is ended when its call or connection ends, not when dsh is killed.
pub fn guard_group(command: &mut tokio::process::Command) {
    command.creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
}

/// [`guard_group`] for a `std::process::Command`.
pub fn guard_group_std(command: &mut std::process::Command) {
    use std::os::windows::process::CommandExt;
    command.creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
}

/// The process tree of a child this crate started. Dropping it without
/// [`ProcessGroup::mark_finished`] ends the tree, so an abandoned call leaves no processes
/// behind (within the limits of the module comment).
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pid: Pid,
    finished: bool,
}

impl ProcessGroup {
    /// Takes charge of the tree of the child `pid`.
    pub(crate) fn new(pid: Pid) -> Self {
        Self {
            pid,
            finished: false,
        }
    }

    /// Ends the child and its descendants: `taskkill /PID <pid> /T /F` (there is no gentle
    /// form for a console program without a window).
    fn kill_tree(&self) {
        if self.pid <= 0 {
            return;
        }
        let _ = std::process::Command::new("taskkill")
            .args(["/PID", &self.pid.to_string(), "/T", "/F"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// True while the child is running.
    pub(crate) fn is_alive(&self) -> bool {
        group_has_live_members(self.pid)
    }

    /// Ends the tree and waits up to `grace` plus two seconds for the child to be gone. Returns
    /// true if anything was still running.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> bool {
        if !self.is_alive() {
            self.finished = true;
            return false;
        }
        self.kill_tree();
        let deadline = tokio::time::Instant::now() + grace + Duration::from_secs(2);
        while self.is_alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.finished = !self.is_alive();
        true
    }

    /// Records that the tree needs no kill on drop.
    pub(crate) fn mark_finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.finished && self.is_alive() {
            self.kill_tree();
        }
    }
}

/// True while the process `pid` runs (Windows: the process itself; see the module comment).
pub fn group_has_live_members(pid: Pid) -> bool {
    use windows_sys::Win32::Foundation::{CloseHandle, STILL_ACTIVE};
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    if pid == 0 {
        return false;
    }
    // SAFETY: OpenProcess takes plain integers and returns a handle or null.
    let handle = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if handle.is_null() {
        return false;
    }
    let mut code: u32 = 0;
    // SAFETY: `handle` is a valid process handle and `code` a valid out pointer.
    let ok = unsafe { GetExitCodeProcess(handle, &mut code) };
    // SAFETY: `handle` was opened above and is closed exactly once.
    unsafe { CloseHandle(handle) };
    ok != 0 && code == STILL_ACTIVE as u32
}

/// Ends the process tree of `pid` now, synchronously (`taskkill /T /F`).
pub fn kill_group_now(pid: Pid) {
    let mut group = ProcessGroup::new(pid);
    group.kill_tree();
    group.mark_finished();
}

/// The POSIX shell that runs `bash` on Windows: the first `bash.exe` on `PATH` outside
/// `System32` and `WindowsApps` (those are WSL's launcher, which would run the command inside
/// WSL's Linux with another view of the files), normally Git for Windows' `bin` folder.
fn posix_shell() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find_map(|dir| {
        let lower = dir.to_string_lossy().to_ascii_lowercase();
        let lower = lower.trim_end_matches(['\\', '/']);
        if lower.ends_with("system32") || lower.contains("windowsapps") {
            return None;
        }
        let candidate = dir.join("bash.exe");
        candidate.is_file().then_some(candidate)
    })
}

/// Whether `plan`'s program can start: a `bash` plan needs [`posix_shell`]; the error says how
/// to get one.
pub(crate) fn check_program(plan: &CommandPlan) -> Result<(), String> {
    if plan.program == "bash" && posix_shell().is_none() {
        return Err(
            "the bash tool needs a POSIX shell on Windows and found none: install Git for \
             Windows and put the folder of its bash.exe on PATH (WSL's bash.exe in System32 is \
             not used)"
                .to_string(),
        );
    }
    Ok(())
}
