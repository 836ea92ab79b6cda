//! Child processes: environment scrubbing, process groups, the spawner thread, the keeper of
//! unconfined children (hooks, MCP servers), bounded output capture.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
#[cfg(unix)]
use std::path::Path;
use std::path::PathBuf;
#[cfg(unix)]
use std::process::Stdio;
#[cfg(unix)]
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

#[cfg(unix)]
use crate::confinement::{CommandPlan, ExecImage};
use crate::spill::SpillDir;

// Windows has no process groups, fork or parent-death signal: `process_windows.rs` gives the
// same interface with a documented weaker guarantee (docs/SECURITY.md, "Platforms").
#[cfg(windows)]
#[path = "process_windows.rs"]
mod windows;
#[cfg(windows)]
pub(crate) use windows::{check_program, group_command, Pid, ProcessGroup};
#[cfg(windows)]
pub use windows::{
    group_has_live_members, guard_group, guard_group_std, kill_group_now, plan_command,
};

/// A process id (and process group id): `pid_t`.
#[cfg(unix)]
pub(crate) type Pid = libc::pid_t;

/// Sends `SIGKILL` to the process group `pgid` now (a group this process created; a group
/// already gone is fine). Windows: ends the process tree of `pgid`.
#[cfg(unix)]
pub fn kill_group_now(pgid: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the
        // group. Failure (ESRCH: group already gone) needs no handling.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Whether `plan`'s program can start: always on Unix (`bash` comes from `PATH`; Windows
/// checks for a POSIX shell, `process_windows.rs`).
#[cfg(unix)]
pub(crate) fn check_program(_plan: &CommandPlan) -> Result<(), String> {
    Ok(())
}

/// Variables set in every child environment (after scrubbing), so tools print plain text and
/// never wait on a pager or a credential prompt.
pub const CHILD_ENV_OVERRIDES: [(&str, &str); 5] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// True for environment variable names that may hold secrets: those containing `KEY`, `TOKEN`,
/// `SECRET` or `PASSWORD`, in any case (docs/SECURITY.md, "What is protected"). Such variables
/// never reach a child process.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|needle| upper.contains(needle))
}

/// Variables that name where code is loaded from, with the separators of their lists (none:
/// the whole value is one path): the dynamic loader's, and the search paths and start-up files
/// of the shells and interpreters a hook or server commonly is. An empty or relative entry is
/// resolved against the working directory, which for a hook or a user's MCP server is the
/// workspace.
const LOADER_LISTS: [(&str, &[u8]); 14] = [
    ("LD_LIBRARY_PATH", b":;"),
    ("LD_PRELOAD", b": "),
    ("LD_AUDIT", b":"),
    ("GCONV_PATH", b":"),
    ("PYTHONPATH", b":"),
    ("PYTHONSTARTUP", b""),
    ("PERL5LIB", b":"),
    ("PERLLIB", b":"),
    ("RUBYLIB", b":"),
    ("NODE_PATH", b":"),
    ("CLASSPATH", b":"),
    ("BASH_ENV", b""),
    ("ENV", b""),
    ("GIT_EXEC_PATH", b""),
];

/// `value` of the code-loading variable `name` (see [`LOADER_LISTS`]) without its empty and
/// relative entries, which resolve from the working directory: for a child started in the
/// workspace that is code the model wrote, loaded as root by a hook, a launcher or `/diff`'s
/// git (a Docker image's `LD_LIBRARY_PATH=:/opt/lib` made the fourth adversarial review's
/// planted `libtinfo.so.6` run in the user's own hook; `PYTHONPATH=:/app` made the fifth's
/// planted `json.py` run there). `None`: nothing is left, drop the variable. Other variables
/// pass unchanged.
pub fn clean_loader_value(name: &str, value: &std::ffi::OsStr) -> Option<OsString> {
    let Some((_, separators)) = LOADER_LISTS.iter().find(|(n, _)| *n == name) else {
        return Some(value.to_os_string());
    };
    let kept: Vec<&[u8]> = value
        .as_encoded_bytes()
        .split(|b| separators.contains(b))
        .filter(|entry| entry.first() == Some(&b'/'))
        .collect();
    if kept.is_empty() {
        return None;
    }
    let joined = kept.join(separators.first().unwrap_or(&b':'));
    // SAFETY: each entry is a slice of `value`'s encoded bytes split at ASCII separators, and
    // the separator joined in is ASCII, so the bytes are valid OS-string encoding.
    Some(unsafe { OsString::from_encoded_bytes_unchecked(joined) })
}

/// The environment for a child process: this process's environment without secret-looking
/// variables (and without names that are not valid UTF-8, which cannot be classified), the
/// loader's lists without empty or relative entries ([`clean_loader_value`]), plus
/// [`CHILD_ENV_OVERRIDES`].
pub fn scrubbed_env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter_map(|(name, value)| {
            let text = name.to_str()?;
            if is_secret_name(text) || CHILD_ENV_OVERRIDES.iter().any(|(k, _)| *k == text) {
                return None;
            }
            let value = clean_loader_value(text, &value)?;
            Some((name, value))
        })
        .collect();
    env.extend(
        CHILD_ENV_OVERRIDES
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    env
}

/// A command for `plan` that starts in `workdir` as the leader of its own session and process
/// group (`setsid`: no controlling terminal, so no `TIOCSTI` into the user's terminal), dies
/// with this process (`PR_SET_PDEATHSIG`), runs the plan's confinement hooks before `exec`,
/// gets the scrubbed environment and reads stdin from `/dev/null`. The caller chooses stdout
/// and stderr.
#[cfg(unix)]
pub(crate) fn group_command(plan: &CommandPlan, workdir: &Path) -> tokio::process::Command {
    tokio::process::Command::from(plan_command(plan, workdir, scrubbed_env()))
}

/// A command for `plan`, as [`group_command`] makes it but with `env` as its whole
/// environment: for the commands a project configured (hooks and MCP servers, which add their
/// own variables), run through the session's confinement ([`CommandConfiner`]). Stdin is
/// `/dev/null`, stdout and stderr are the caller's to choose. Keep `plan` until the command
/// has ended (see [`CommandPlan`]); spawn it with [`spawn_std_child`] or [`spawn_child`].
///
/// [`CommandConfiner`]: crate::CommandConfiner
#[cfg(unix)]
pub fn plan_command(
    plan: &CommandPlan,
    workdir: &Path,
    env: Vec<(OsString, OsString)>,
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    // A launcher (bubblewrap per command) runs in `/` with a fixed environment, the command's
    // environment passed inside the sandbox (`CommandPlan::spawn_parts`).
    let (args, env, dir) = plan.spawn_parts(env, workdir);
    // The same program, arguments and environment, ready for a hook that starts the command
    // itself (`ExecImage`); only hooks read it. A plan spawned again keeps its first image:
    // same program and arguments, and the environment of a later spawn differs only if dsh's
    // own changed.
    if !plan.pre_exec.is_empty() && plan.exec_image.get().is_none() {
        if let Some(image) = ExecImage::new(&plan.program, &args, &env) {
            let _ = plan.exec_image.set(image);
        }
    }
    let mut command = std::process::Command::new(&plan.program);
    command
        .args(&args)
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null());
    let hooks = plan.pre_exec.clone();
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before exec. It calls prctl(2), getppid(2)
    // and setsid(2), which are async-signal-safe, and the confinement hooks, whose contract
    // (see `PreExecHook`) is to be async-signal-safe too. It does not allocate: iterating a
    // Vec of Arcs only reads memory.
    unsafe {
        command.pre_exec(move || {
            // The death signal follows the forking thread: children are forked on the
            // spawner thread, which lives as long as the process (`spawn_child`).
            arm_death_signal(libc::SIGKILL)?;
            if libc::getppid() != parent {
                // This process died before the death signal was armed: run nothing.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The plan's hooks run last and in order: a hook that starts the command itself
            // from `exec_image` (a keeper) is the plan's last and returns only with an error.
            for hook in &hooks {
                hook()?;
            }
            Ok(())
        });
    }
    command
}

/// One job for the spawner thread: a closure that forks and sends its result back itself.
type SpawnJob = Box<dyn FnOnce() + Send + 'static>;

/// Runs `job` on the process's one spawner thread and returns its result.
///
/// Why a dedicated thread: `PR_SET_PDEATHSIG` (armed in [`group_command`], by the confinement
/// hooks and by [`guard_group`]) fires when the *thread* that forked the child exits, not the
/// process. tokio retires blocking-pool threads and the threads `block_in_place` hands off, so
/// a child forked there (a background job, `bwrap --die-with-parent`, a hook run from
/// `block_in_place`) would be killed as soon as that thread ended. The spawner is a plain
/// thread started once and never stopped, so the death signal fires only when the process dies
/// (docs/SECURITY.md, "Process sandbox"). The fork itself takes about a millisecond; the caller
/// blocks for that long.
fn on_spawner_thread<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    use std::sync::mpsc;
    use std::sync::OnceLock;
    static SPAWNER: OnceLock<mpsc::Sender<SpawnJob>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        let started = std::thread::Builder::new()
            .name("dsh-spawner".to_string())
            .spawn(move || {
                for job in rx {
                    job();
                }
            });
        if let Err(err) = started {
            // Without the thread every send below fails and says so.
            eprintln!("dsh: cannot start the process spawner thread: {err}");
        }
        tx
    });
    let (reply, answer) = mpsc::sync_channel(1);
    let job: SpawnJob = Box::new(move || {
        // The caller may have given up (its future dropped): the result (a child) is then
        // dropped here, and its process group is ended by the caller's guard.
        let _ = reply.send(job());
    });
    if sender.send(job).is_err() {
        return Err(std::io::Error::other(
            "the process spawner thread is not running; restart dsh",
        ));
    }
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the process spawner thread stopped; restart dsh"))
}

/// Spawns `command` from the process's one long-lived spawner thread and returns the child.
///
/// Every child that arms `PR_SET_PDEATHSIG` must be forked here: the death signal follows the
/// thread that forked, not the process, and tokio retires the threads of its blocking pool and
/// those `block_in_place` hands off, which would kill such a child long before dsh exits (see
/// `on_spawner_thread`, docs/SECURITY.md, "Process sandbox"). The spawner enters the
/// caller's runtime for the spawn, so the child is registered with that runtime's process
/// driver exactly as a spawn on the caller's thread would be. Must be called from within a
/// tokio runtime.
pub fn spawn_child(command: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        std::io::Error::other("a child process can only be started from within a tokio runtime")
    })?;
    let mut command = command;
    on_spawner_thread(move || {
        let _entered = runtime.enter();
        command.spawn()
    })?
}

/// [`spawn_child`] for a synchronous `std::process::Command` (no runtime needed): forked on the
/// same spawner thread, for the same reason.
pub fn spawn_std_child(command: std::process::Command) -> std::io::Result<std::process::Child> {
    let mut command = command;
    on_spawner_thread(move || command.spawn())?
}

/// Makes `command` (an unconfined child such as a hook or an MCP server) lead its own process
/// group and die with dsh, together with everything it starts in that group. Spawn it with
/// [`spawn_child`] so the death signal is tied to the long-lived spawner thread.
///
/// In the forked child, before `exec`: `PR_SET_PDEATHSIG(SIGHUP)`, a check that dsh is still
/// there, `setpgid(0, 0)`, then a second fork. The new process goes on to `exec` the command
/// (with `PR_SET_PDEATHSIG(SIGKILL)` towards the first); the first stays behind as a *keeper*
/// and never returns: it closes every descriptor (so pipes see end-of-file when the command's
/// tree closes them), moves itself back into dsh's process group (so a kill of the command's
/// group spares it and it can report the status), and waits. When the command exits, when
/// dsh dies (the `SIGHUP`), or on `SIGTERM`, it sends `SIGKILL` to the command's
/// group and leaves with the command's status (the same exit code, or the same signal).
/// The pid dsh sees is the keeper's, and the command's process group id is that pid, so
/// `kill(-pid)` ends the command's tree. Processes that leave the group (`setsid`) are not
/// followed (docs/SECURITY.md, "Process sandbox").
#[cfg(unix)]
pub fn guard_group(command: &mut tokio::process::Command) {
    let hook = keeper_hook();
    // SAFETY: the closure runs in the forked child before exec; see `keeper_hook`: system
    // calls on stack memory only, no allocation.
    unsafe {
        command.pre_exec(hook);
    }
}

/// [`guard_group`] for a `std::process::Command`; spawn it with [`spawn_std_child`].
#[cfg(unix)]
pub fn guard_group_std(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let hook = keeper_hook();
    // SAFETY: as in `guard_group`.
    unsafe {
        command.pre_exec(hook);
    }
}

/// The pre-exec closure of [`guard_group`]. Async-signal-safe: plain system calls on stack
/// memory; `parent` is read before the fork.
#[cfg(unix)]
fn keeper_hook() -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    move || {
        // SAFETY: every call is a plain system call on stack memory; sigset functions only
        // write the set they are given.
        unsafe {
            arm_death_signal(libc::SIGHUP)?;
            if libc::getppid() != parent {
                // dsh died before the death signal was armed: run nothing.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            let home_group = libc::getpgrp();
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let group = libc::getpid();
            let mut watched: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut watched);
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
                libc::sigaddset(&mut watched, sig);
            }
            let mut previous: libc::sigset_t = std::mem::zeroed();
            if libc::sigprocmask(libc::SIG_BLOCK, &watched, &mut previous) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let command = libc::fork();
            if command < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if command == 0 {
                // The command: dies with its keeper, runs with the signal mask it had.
                arm_death_signal(libc::SIGKILL)?;
                if libc::getppid() != group {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                if libc::sigprocmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                return Ok(());
            }
            keep_group(&watched, parent, home_group, group, command)
        }
    }
}

/// Arms the parent-death signal `sig` of the calling (forked) process. Linux only
/// (`PR_SET_PDEATHSIG`); other platforms have no such signal and this does nothing there: the
/// keeper of [`guard_group`] still notices dsh's death by polling `getppid`, a plain `bash`
/// child does not (docs/SECURITY.md, "Platforms"). Async-signal-safe.
///
/// # Safety
/// Call only in a forked child before `exec`.
#[cfg(unix)]
unsafe fn arm_death_signal(sig: libc::c_int) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sig;
    Ok(())
}

/// Waits up to `timeout` for one of the blocked signals in `watched` and returns it (else a
/// negative value). Linux: `sigtimedwait`. Elsewhere (macOS has no `sigtimedwait`): checks the
/// pending set for `SIGTERM` and `SIGHUP`, sleeps a tenth of the timeout, checks again (a
/// pending `SIGINT` is not reported there, see below). Async-signal-safe.
///
/// # Safety
/// Call with `watched` blocked.
#[cfg(unix)]
unsafe fn wait_for_signal(watched: &libc::sigset_t, timeout: &libc::timespec) -> libc::c_int {
    #[cfg(target_os = "linux")]
    {
        libc::sigtimedwait(watched, std::ptr::null_mut(), timeout)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let pending_watched = || {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            if libc::sigpending(&mut pending) != 0 {
                return -1;
            }
            // Only the signals that end the keeper: `sigpending` does not take a signal off
            // the pending set, so a Ctrl-C's SIGINT (which the keeper ignores) would be found
            // again on every call and the keeper's loop would spin without sleeping. A blocked
            // SIGINT may stay pending; nothing else reads it.
            for sig in [libc::SIGTERM, libc::SIGHUP] {
                if libc::sigismember(watched, sig) == 1 && libc::sigismember(&pending, sig) == 1 {
                    return sig;
                }
            }
            -1
        };
        let found = pending_watched();
        if found > 0 {
            return found;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: (timeout.tv_sec as libc::c_long * 1_000_000_000 + timeout.tv_nsec) / 10,
        };
        libc::nanosleep(&pause, std::ptr::null_mut());
        pending_watched()
    }
}

/// The keeper of [`guard_group`]: never returns. Async-signal-safe.
///
/// # Safety
/// Call only in a forked child, with `watched` blocked.
#[cfg(unix)]
unsafe fn keep_group(
    watched: &libc::sigset_t,
    parent: libc::pid_t,
    home_group: libc::pid_t,
    group: libc::pid_t,
    command: libc::pid_t,
) -> ! {
    // Hold no descriptor: neither the spawner's exec-status pipe (the spawner waits for it to
    // close) nor the command's stdio pipes (their readers wait for end-of-file).
    #[cfg(target_os = "linux")]
    let closed = libc::syscall(
        libc::SYS_close_range,
        0 as libc::c_uint,
        libc::c_uint::MAX,
        0 as libc::c_uint,
    ) == 0;
    #[cfg(not(target_os = "linux"))]
    let closed = false;
    if !closed {
        for fd in 0..4096 {
            libc::close(fd);
        }
    }
    // Out of the command's group, so ending the group spares the keeper. If that fails the
    // keeper stays a member and dies with the group; the command still dies with it.
    libc::setpgid(0, home_group);
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 500_000_000,
    };
    let mut status = 0;
    let mut finished = false;
    loop {
        let sig = wait_for_signal(watched, &timeout);
        // SIGINT is taken and ignored: the keeper sits in dsh's process group, so a Ctrl-C in
        // dsh's terminal (which `dsh run` answers by cancelling the turn) must not end the
        // command.
        if sig == libc::SIGTERM || sig == libc::SIGHUP {
            break;
        }
        if libc::getppid() != parent {
            break;
        }
        if libc::waitpid(command, &mut status, libc::WNOHANG) == command {
            finished = true;
            break;
        }
    }
    libc::kill(-group, libc::SIGKILL);
    if !finished {
        libc::waitpid(command, &mut status, 0);
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // Leave by the same signal: default action, unblocked, sent to itself.
        libc::signal(sig, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    if libc::WIFEXITED(status) {
        libc::_exit(libc::WEXITSTATUS(status));
    }
    libc::_exit(1)
}

/// A process group this crate started (its leader called `setsid`). Dropping it without
/// [`ProcessGroup::mark_finished`] sends `SIGKILL` to the whole group, so an abandoned call
/// (its future dropped, e.g. by a pipeline timeout) leaves no processes behind.
#[cfg(unix)]
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: libc::pid_t,
    finished: bool,
}

#[cfg(unix)]
impl ProcessGroup {
    /// Takes charge of the group whose id is `pgid` (the leader's pid).
    pub(crate) fn new(pgid: libc::pid_t) -> Self {
        Self {
            pgid,
            finished: false,
        }
    }

    /// Sends `signal` to every process of the group.
    fn signal(&self, signal: libc::c_int) {
        if self.pgid > 1 {
            // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the
            // group. Failure (ESRCH: group already gone) needs no handling.
            unsafe {
                libc::kill(-self.pgid, signal);
            }
        }
    }

    /// True while some member of the group is alive and not a zombie.
    pub(crate) fn is_alive(&self) -> bool {
        group_has_live_members(self.pgid)
    }

    /// Stops the whole group: `SIGTERM`, up to `grace` for it to exit, then `SIGKILL`, then up
    /// to two seconds for the kernel to finish. Returns true if anything was still running.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> bool {
        if !self.is_alive() {
            self.finished = true;
            return false;
        }
        self.signal(libc::SIGTERM);
        if !wait_until_dead(self.pgid, grace).await {
            self.signal(libc::SIGKILL);
            wait_until_dead(self.pgid, Duration::from_secs(2)).await;
        }
        self.finished = !self.is_alive();
        true
    }

    /// Records that the group needs no kill on drop.
    pub(crate) fn mark_finished(&mut self) {
        self.finished = true;
    }
}

#[cfg(unix)]
impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.finished && self.is_alive() {
            self.signal(libc::SIGKILL);
        }
    }
}

#[cfg(unix)]
async fn wait_until_dead(pgid: libc::pid_t, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if !group_has_live_members(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True when process group `pgid` has a member that is not a zombie. `kill(-pgid, 0)` alone
/// also counts zombies, which an init that does not reap would keep forever, so on Linux the
/// answer is confirmed from `/proc`.
#[cfg(unix)]
pub fn group_has_live_members(pgid: libc::pid_t) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = unsafe { libc::kill(-pgid, 0) } == 0;
    if !exists {
        return false;
    }
    if !cfg!(target_os = "linux") {
        return true;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, group)) = parse_stat(&stat) {
            if group == pgid && state != 'Z' && state != 'X' {
                return true;
            }
        }
    }
    false
}

/// State and process group from a `/proc/<pid>/stat` line (`pid (comm) state ppid pgrp ...`;
/// `comm` may itself contain spaces and parentheses, so parsing starts after the last `)`).
#[cfg(unix)]
fn parse_stat(stat: &str) -> Option<(char, libc::pid_t)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// One output stream, read to the end with bounded memory.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// The last `cap` bytes (all of them when the stream was short).
    pub tail: Vec<u8>,
    /// Total bytes the stream produced.
    pub total: u64,
    /// File holding the complete stream, created once the stream passed `cap`.
    pub full_path: Option<PathBuf>,
    /// Why the complete stream could not be saved, if saving failed.
    pub spill_error: Option<String>,
}

/// The last output of a running command, both streams as their bytes arrive, for its card
/// (`ToolProgress::output`): a few KiB, however much it prints.
#[derive(Debug, Default)]
pub(crate) struct LiveOutput {
    state: std::sync::Mutex<LiveState>,
}

#[derive(Debug, Default)]
struct LiveState {
    /// The last bytes printed (at most [`LiveOutput::KEPT`]).
    bytes: Vec<u8>,
    /// Line ends printed so far.
    lines: u64,
    /// Something arrived since the last report.
    changed: bool,
}

impl LiveOutput {
    /// Bytes kept: enough for a few long lines.
    const KEPT: usize = 4096;

    fn push(&self, bytes: &[u8]) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.lines += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        state.bytes.extend_from_slice(bytes);
        if state.bytes.len() > Self::KEPT {
            let excess = state.bytes.len() - Self::KEPT;
            state.bytes.drain(..excess);
        }
        state.changed = true;
    }

    /// A report of the output since the last one, or `None` when nothing new was printed:
    /// the last non-blank lines (a carriage return keeps what followed it, as a terminal
    /// would show a progress bar), control characters removed.
    pub(crate) fn report(&self) -> Option<crate::ToolProgress> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !std::mem::take(&mut state.changed) {
            return None;
        }
        let text = String::from_utf8_lossy(&state.bytes);
        let mut output: Vec<String> = text
            .split('\n')
            .map(|line| {
                line.rsplit('\r')
                    .find(|part| !part.trim().is_empty())
                    .unwrap_or("")
            })
            .map(plain_line)
            .filter(|line| !line.trim().is_empty())
            .collect();
        let keep = output
            .len()
            .saturating_sub(crate::ToolProgress::OUTPUT_LINES);
        output.drain(..keep);
        Some(crate::ToolProgress {
            output,
            ..crate::ToolProgress::new(state.lines as f64, None, None)
        })
    }
}

/// A line of command output as shown on a card: colour and other CSI sequences dropped, every
/// other character a terminal would obey ([`crate::is_unsafe_for_terminal`], tabs too) left
/// out, trailing blanks trimmed.
fn plain_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: parameters up to a final byte in `@`..=`~`; any other escape: one more.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if c == '\t' {
            out.push(' ');
        } else if !crate::is_unsafe_for_terminal(c) {
            out.push(c);
        }
    }
    out.trim_end().to_string()
}

/// Reads `reader` to EOF, keeping the last `cap` bytes in memory and, once the stream exceeds
/// `cap`, writing the complete stream to a private file in `spill`; with `live`, every chunk
/// also goes there as it arrives.
pub(crate) async fn capture<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
    spill: SpillDir,
    label: &'static str,
    live: Option<std::sync::Arc<LiveOutput>>,
) -> Captured {
    let mut out = Captured::default();
    let mut file: Option<File> = None;
    let mut chunk = vec![0u8; 16 * 1024];
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let bytes = &chunk[..n];
        if let Some(live) = &live {
            live.push(bytes);
        }
        out.total += n as u64;
        if out.total > cap as u64 && file.is_none() && out.spill_error.is_none() {
            match spill.create_file(label) {
                Ok((mut f, path)) => match f.write_all(&buf) {
                    Ok(()) => {
                        file = Some(f);
                        out.full_path = Some(path);
                    }
                    Err(err) => out.spill_error = Some(err.to_string()),
                },
                Err(err) => out.spill_error = Some(err.to_string()),
            }
        }
        if let Some(f) = file.as_mut() {
            if let Err(err) = f.write_all(bytes) {
                out.spill_error = Some(err.to_string());
                out.full_path = None;
                file = None;
            }
        }
        buf.extend_from_slice(bytes);
        if buf.len() > cap.saturating_mul(2) {
            let excess = buf.len() - cap;
            buf.drain(..excess);
        }
    }
    if buf.len() > cap {
        let excess = buf.len() - cap;
        buf.drain(..excess);
    }
    out.tail = buf;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_lists_keep_only_absolute_entries() {
        let clean = |name: &str, value: &str| {
            clean_loader_value(name, std::ffi::OsStr::new(value))
                .map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(
            clean("LD_LIBRARY_PATH", ":/opt/lib"),
            Some("/opt/lib".into())
        );
        assert_eq!(
            clean("LD_LIBRARY_PATH", "lib:/a::./b:/c"),
            Some("/a:/c".into())
        );
        assert_eq!(clean("LD_LIBRARY_PATH", "lib"), None);
        assert_eq!(clean("LD_LIBRARY_PATH", ""), None);
        assert_eq!(
            clean("LD_PRELOAD", "evil.so /usr/lib/x.so"),
            Some("/usr/lib/x.so".into())
        );
        assert_eq!(clean("LD_AUDIT", "./a.so"), None);
        assert_eq!(clean("PYTHONPATH", ":/opt/app"), Some("/opt/app".into()));
        assert_eq!(clean("BASH_ENV", "rc.sh"), None);
        assert_eq!(clean("BASH_ENV", "/etc/rc:x"), Some("/etc/rc:x".into()));
        // Other variables pass as they are, empty entries included.
        assert_eq!(clean("PATH", ":/bin"), Some(":/bin".into()));
    }

    #[test]
    fn secret_names() {
        for name in [
            "DEEPSEEK_API_KEY",
            "my_token",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn stat_parsing_handles_odd_names() {
        let stat = "123 (a) b (c)) S 1 456 456 0 -1";
        assert_eq!(parse_stat(stat), Some(('S', 456)));
    }

    #[tokio::test]
    async fn live_output_reports_the_last_lines_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("s")).unwrap();
        let live = std::sync::Arc::new(LiveOutput::default());
        assert!(live.report().is_none());
        let text: String = (1..=8).map(|i| format!("line {i}\n")).collect::<String>()
            + "50%\r100% done\x1b[0m\n\n";
        capture(text.as_bytes(), 1000, spill, "t", Some(live.clone())).await;
        let report = live.report().unwrap();
        assert_eq!(report.progress, 10.0);
        assert_eq!(
            report.output,
            vec!["line 5", "line 6", "line 7", "line 8", "100% done"]
        );
        assert!(live.report().is_none(), "nothing new since");
    }

    #[tokio::test]
    async fn capture_keeps_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("s")).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let got = capture(&data[..], 1000, spill, "t", None).await;
        assert_eq!(got.total, 100_000);
        assert_eq!(got.tail, data[99_000..]);
        assert_eq!(std::fs::read(got.full_path.unwrap()).unwrap(), data);
    }
}
