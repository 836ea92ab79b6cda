//! Running one hook command: `bash -c <command>` in its own process group, the event's JSON on
//! stdin, stdout and stderr captured (bounded), killed with its whole group at the timeout.
//!
//! The command is forked on dsh_tools' spawner thread under a keeper
//! ([`dsh_tools::guard_group_std`]): it and everything it starts in its group die when dsh dies
//! (also by `SIGKILL`), and whatever it leaves running in its group is ended when it exits
//! (docs/hooks.md, "How a hook runs").
//!
//! The runner is synchronous: the extension points that call it are synchronous, and a hook is
//! a short process. On a multi-threaded runtime the caller moves it off the async workers with
//! `block_in_place`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Captured output of each stream is cut after this many bytes.
const OUTPUT_CAP: usize = 1024 * 1024;

/// How long the output pipes may stay open after the command exited (a background child still
/// holding them) before the group is killed.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How one command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// It exited with this code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// It ran past its timeout; its process group was killed.
    TimedOut,
    /// It could not be started.
    SpawnFailed(String),
    /// It was not started: its script is not the one the user trusted (the reason).
    Refused(String),
}

/// What a command produced.
#[derive(Debug, Clone)]
pub(crate) struct RunOutput {
    pub end: RunEnd,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() || Path::new("/usr/bin/bash").exists() {
        "bash"
    } else {
        "sh"
    }
}

fn reader<R: Read + Send + 'static>(mut stream: R) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        // The receiver may have given up waiting; the output is then not needed.
        let _ = tx.send(kept);
    });
    rx
}

fn kill_group(pgid: u32) {
    // The process group we created (`guard_group_std`); a group already gone is fine.
    if let Ok(pgid) = i32::try_from(pgid) {
        dsh_tools::kill_group_now(pgid);
    }
}

/// Runs `command` in `cwd` with `env` (the whole environment), `input` on stdin; through
/// `confiner` when given (a project's hook: the session's confinement, docs/hooks.md "Project
/// hooks run confined"), else unconfined under a keeper (the user's own hook).
pub(crate) fn run_command(
    command: &str,
    cwd: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    input: &[u8],
    timeout: Duration,
    confiner: Option<&dsh_tools::CommandConfiner>,
) -> RunOutput {
    let started = Instant::now();
    let failed = |reason: String| RunOutput {
        end: RunEnd::SpawnFailed(reason),
        stdout: String::new(),
        stderr: String::new(),
        duration: started.elapsed(),
    };
    // The confined plan is kept until the command has ended: a prepared sandbox lives as
    // long as a plan holding it (dsh_tools::CommandPlan).
    let mut plan_kept = None;
    let mut process = match confiner {
        Some(confine) => {
            let plan = dsh_tools::CommandPlan::new(shell(), vec!["-c".into(), command.into()]);
            let plan = match confine(plan, cwd) {
                Ok(plan) => plan,
                Err(err) => {
                    return failed(format!(
                        "a project hook runs only confined, and cannot be: {}",
                        err.message
                    ))
                }
            };
            let process = dsh_tools::plan_command(&plan, cwd, env.to_vec());
            plan_kept = Some(plan);
            process
        }
        None => {
            let mut process = Command::new(shell());
            process
                .arg("-c")
                .arg(command)
                .current_dir(cwd)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)));
            dsh_tools::guard_group_std(&mut process);
            process
        }
    };
    process
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match dsh_tools::spawn_std_child(process) {
        Ok(child) => child,
        Err(err) => return failed(format!("cannot start `{}`: {err}", shell())),
    };
    let pgid = child.id();
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_vec();
        std::thread::spawn(move || {
            // A hook that does not read its input closes the pipe early; that is its choice.
            let _ = stdin.write_all(&input);
        });
    }
    let stdout = child.stdout.take().map(reader);
    let stderr = child.stderr.take().map(reader);
    let deadline = started + timeout;
    let end = loop {
        match child.try_wait() {
            Ok(Some(status)) => break RunEnd::Exited(status.code()),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(pgid);
                // Reap the leader; after SIGKILL this returns at once.
                let _ = child.wait();
                break RunEnd::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(err) => {
                kill_group(pgid);
                let _ = child.wait();
                break RunEnd::SpawnFailed(format!("cannot wait for the hook: {err}"));
            }
        }
    };
    let collect = |rx: Option<mpsc::Receiver<Vec<u8>>>| -> String {
        let Some(rx) = rx else {
            return String::new();
        };
        let bytes = match rx.recv_timeout(DRAIN_GRACE) {
            Ok(bytes) => bytes,
            Err(_) => {
                // Something the hook started still holds the pipe: end the group.
                kill_group(pgid);
                rx.recv_timeout(DRAIN_GRACE).unwrap_or_default()
            }
        };
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let stdout = collect(stdout);
    let stderr = collect(stderr);
    if plan_kept.is_some() {
        // A confined hook has no keeper: what it left running in its group ends with it, as
        // after a `bash` call. The group outlives its reaped leader only while it has members,
        // and a pid in use as a group id is not handed out again.
        kill_group(pgid);
    }
    RunOutput {
        end,
        stdout,
        stderr,
        duration: started.elapsed(),
    }
}
