//! Watching processes from a test: pid files, liveness, polling, and helper processes.
//!
//! The "dies with dsh" tests (hooks, MCP servers, the sandbox probe, `dsh run` cancel) share
//! one shape: a helper process started from the test binary itself writes pid files, the test
//! kills the helper, then checks that every process it started is gone. These are the pieces of
//! that shape; each test keeps its own assertion messages.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How often [`poll_until`] and [`wait_for_pid`] look again.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// How long [`wait_for_pid`] waits for a pid file.
pub const PID_FILE_WAIT: Duration = Duration::from_secs(20);

/// Calls `done` every 20 ms until it returns true (then true) or `within` has passed (then
/// false, after one last call). Blocks the calling thread.
pub fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return done();
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Reads the pid that a process writes to `path`, waiting up to [`PID_FILE_WAIT`] for the file
/// to hold one. Writers should write a temporary name and rename it, so a half-written number
/// is never read.
///
/// # Panics
///
/// When no pid appears in time: the test fails naming the file.
pub fn wait_for_pid(path: &Path) -> i32 {
    let mut pid = None;
    let appeared = poll_until(PID_FILE_WAIT, || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    });
    match pid {
        Some(pid) if appeared => pid,
        _ => panic!(
            "{} never held a pid within {PID_FILE_WAIT:?}",
            path.display()
        ),
    }
}

/// True while `pid` is a running process: it exists and is not a zombie (a zombie still
/// answers `kill(pid, 0)`, so its state in `/proc/<pid>/stat` is read instead).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any byte.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// True while `pid` is [`alive`] and its command line holds `marker` (an empty marker matches
/// any). The marker guards against a recycled pid that now belongs to another program.
pub fn alive_with(pid: i32, marker: &str) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    alive(pid) && String::from_utf8_lossy(&cmdline).contains(marker)
}

/// Starts the running test binary again to run only the ignored test `test` (its full path
/// inside the binary, e.g. `hooks::helper_runs_a_hanging_hook`), with `env_key` set to `dir`;
/// stdin, stdout and stderr are closed. The helper test is expected to do nothing when
/// `env_key` is unset, so a plain `--ignored` run passes it.
pub fn spawn_helper_test(test: &str, env_key: &str, dir: &Path) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env_key, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_child_is_alive_and_a_reaped_or_zombie_one_is_not() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(alive(pid));
        // Right after the spawn the command line may not show the new program yet.
        assert!(poll_until(Duration::from_secs(5), || alive_with(pid, "30")));
        assert!(!alive_with(pid, "no-such-marker"));
        child.kill().unwrap();
        // Killed but not yet reaped: a zombie, which does not count as alive.
        assert!(poll_until(Duration::from_secs(5), || !alive(pid)));
        child.wait().unwrap();
        assert!(!alive(pid));
    }

    #[test]
    fn wait_for_pid_reads_a_pid_written_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pid");
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                std::fs::write(&path, "4242\n").unwrap();
            })
        };
        assert_eq!(wait_for_pid(&path), 4242);
        writer.join().unwrap();
    }

    #[test]
    fn poll_until_gives_up_after_its_time() {
        let started = Instant::now();
        assert!(!poll_until(Duration::from_millis(100), || false));
        assert!(started.elapsed() >= Duration::from_millis(100));
        let mut calls = 0;
        assert!(poll_until(Duration::from_secs(5), || {
            calls += 1;
            calls == 3
        }));
    }
}
