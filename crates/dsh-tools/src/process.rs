//! Child processes for `bash`: environment scrubbing, process groups, bounded output capture.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::confinement::CommandPlan;
use crate::spill::SpillDir;

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

/// The environment for a child process: this process's environment without secret-looking
/// variables (and without names that are not valid UTF-8, which cannot be classified), plus
/// [`CHILD_ENV_OVERRIDES`].
pub fn scrubbed_env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| match name.to_str() {
            Some(name) => {
                !is_secret_name(name) && !CHILD_ENV_OVERRIDES.iter().any(|(k, _)| *k == name)
            }
            None => false,
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
pub(crate) fn group_command(plan: &CommandPlan, workdir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&plan.program);
    command
        .args(&plan.args)
        .env_clear()
        .envs(scrubbed_env())
        .current_dir(workdir)
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
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // This process died before the death signal was armed: run nothing.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            for hook in &hooks {
                hook()?;
            }
            Ok(())
        });
    }
    command
}

/// One spawn request for the spawner thread: the command, the runtime the child belongs to,
/// and where to send the result.
struct SpawnRequest {
    command: tokio::process::Command,
    runtime: tokio::runtime::Handle,
    reply: std::sync::mpsc::SyncSender<std::io::Result<tokio::process::Child>>,
}

/// Spawns `command` from the process's one spawner thread and returns the child.
///
/// Why a dedicated thread: `PR_SET_PDEATHSIG` (armed in [`group_command`] and by the
/// confinement hooks) fires when the *thread* that forked the child exits, not the process.
/// tokio retires blocking-pool threads and the threads `block_in_place` hands off, so a child
/// forked there (a background job, `bwrap --die-with-parent`) would be killed as soon as that
/// thread ended. The spawner is a plain thread started once and never stopped, so the death
/// signal fires only when the process dies (docs/SECURITY.md, "Process sandbox"). It enters the
/// caller's runtime for each spawn, so the child is registered with that runtime's process
/// driver exactly as a spawn on the caller's thread would be. The fork itself takes about a
/// millisecond; the caller blocks for that long.
pub(crate) fn spawn_child(
    command: tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    use std::sync::mpsc;
    use std::sync::OnceLock;
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        std::io::Error::other("a child process can only be started from within a tokio runtime")
    })?;
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let started = std::thread::Builder::new()
            .name("dsh-spawner".to_string())
            .spawn(move || {
                for mut request in rx {
                    let _entered = request.runtime.enter();
                    let result = request.command.spawn();
                    // The caller may have given up (its future dropped): the child is then
                    // dropped here, and its process group is ended by the caller's guard.
                    let _ = request.reply.send(result);
                }
            });
        if let Err(err) = started {
            // Without the thread every send below fails and says so.
            eprintln!("dsh: cannot start the process spawner thread: {err}");
        }
        tx
    });
    let (reply, answer) = mpsc::sync_channel(1);
    let request = SpawnRequest {
        command,
        runtime,
        reply,
    };
    if sender.send(request).is_err() {
        return Err(std::io::Error::other(
            "the process spawner thread is not running; restart dsh",
        ));
    }
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the process spawner thread stopped; restart dsh"))?
}

/// A process group this crate started (its leader called `setsid`). Dropping it without
/// [`ProcessGroup::mark_finished`] sends `SIGKILL` to the whole group, so an abandoned call
/// (its future dropped, e.g. by a pipeline timeout) leaves no processes behind.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: libc::pid_t,
    finished: bool,
}

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

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.finished && self.is_alive() {
            self.signal(libc::SIGKILL);
        }
    }
}

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
pub fn group_has_live_members(pgid: libc::pid_t) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = unsafe { libc::kill(-pgid, 0) } == 0;
    if !exists {
        return false;
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

/// Reads `reader` to EOF, keeping the last `cap` bytes in memory and, once the stream exceeds
/// `cap`, writing the complete stream to a private file in `spill`.
pub(crate) async fn capture<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
    spill: SpillDir,
    label: &'static str,
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
    async fn capture_keeps_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("s")).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let got = capture(&data[..], 1000, spill, "t").await;
        assert_eq!(got.total, 100_000);
        assert_eq!(got.tail, data[99_000..]);
        assert_eq!(std::fs::read(got.full_path.unwrap()).unwrap(), data);
    }
}
