//! `dsh run` and background jobs that never end (issue 40, point 4): the run ends after
//! `--jobs-wait`, stops every job's whole process group and reports each one; and the jobs die
//! with dsh when it is terminated or killed.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{dsh_command, output as run, session_files};

use dsh_test_support::process::{alive_with, poll_until, wait_for_pid};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

/// A job that never ends by itself: the shell writes its pid, starts a child that writes its
/// own pid (a grandchild of the job), and loops forever. Both carry `marker` in their command
/// lines.
fn never_ending_job(dir: &Path, marker: &str) -> String {
    let (shell, child) = (dir.join("shell.pid"), dir.join("child.pid"));
    format!(
        "sh -c 'echo $$ > {shell}.tmp; mv {shell}.tmp {shell}; \
         sh -c \"echo \\$\\$ > {child}.tmp; mv {child}.tmp {child}; \
         while :; do sleep 60; done; : {marker}\" & \
         while :; do sleep 60; done; : {marker}'",
        shell = shell.display(),
        child = child.display(),
    )
}

/// The model starts `command` in the background, then ends its turn.
async fn provider_starting(command: &str) -> FakeProvider {
    let args = serde_json::json!({
        "command": command,
        "description": "a server that never stops",
        "run_in_background": true,
    });
    FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_bg", "bash", &args.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("Started the server.")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap()
}

fn command(home: &Path, cwd: &Path, base_url: &str) -> Command {
    let mut cmd = dsh_command(home, cwd);
    cmd.env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-jobs-test");
    cmd
}

/// The job's shell and its child are both gone within a few seconds.
fn assert_job_gone(pids: &Path, marker: &str, when: &str) {
    let shell = wait_for_pid(&pids.join("shell.pid"));
    let child = wait_for_pid(&pids.join("child.pid"));
    let gone = poll_until(Duration::from_secs(10), || {
        !alive_with(shell, marker) && !alive_with(child, marker)
    });
    assert!(
        gone,
        "{when}: the job (pid {shell}) or its child (pid {child}) still runs"
    );
}

#[tokio::test]
async fn a_job_that_never_ends_is_stopped_and_reported_after_the_wait() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let pids = tempfile::tempdir().unwrap();
    let marker = "dsh-jobs-wait-marker";
    let provider = provider_starting(&never_ending_job(pids.path(), marker)).await;
    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args([
        "run",
        "--json",
        "--permission",
        "danger-full-access",
        "--jobs-wait",
        "1s",
        "start the server",
    ]);
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the turn completed: {stderr}");
    assert!(
        stderr.contains("dsh: stopped background job bash-1"),
        "stderr names the stopped job: {stderr}"
    );
    let result: serde_json::Value = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["type"] == "result")
        .unwrap();
    assert_eq!(result["stop"], "completed");
    assert_eq!(result["stoppedJobs"][0]["id"], "bash-1", "{result}");
    assert!(result["stoppedJobs"][0]["command"]
        .as_str()
        .unwrap()
        .contains(marker));
    let log = std::fs::read_to_string(&session_files(home.path())[0]).unwrap();
    assert!(
        log.contains("\"jobs/stopped\""),
        "the log records it: {log}"
    );
    assert_job_gone(pids.path(), marker, "after the run");
}

/// The processes whose command line holds `marker` (found in `/proc`, so pids inside a
/// sandbox's own pid namespace do not matter).
fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| alive_with(*pid, marker))
        .collect()
}

/// SIGTERM of dsh while it waits for a job: dsh stops the job's whole group before it exits
/// (unconfined, so no sandbox does it). SIGKILL of dsh: a confined job's sandbox dies with dsh
/// (docs/SECURITY.md, "Process sandbox"). Each job's shell and its child carry a marker.
#[tokio::test]
async fn jobs_die_with_dsh_when_it_is_terminated_or_killed() {
    for (signal, permission) in [
        (libc::SIGTERM, "danger-full-access"),
        (libc::SIGHUP, "danger-full-access"),
        (libc::SIGKILL, "workspace-write"),
    ] {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let pids = tempfile::tempdir().unwrap();
        // Unique per run: a job left behind by an earlier failed run must not count.
        let marker = format!(
            "dsh-jobs-signal-{signal}-{}",
            pids.path().file_name().unwrap().to_string_lossy()
        );
        let provider = provider_starting(&never_ending_job(pids.path(), &marker)).await;
        let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
        cmd.args([
            "run",
            "--permission",
            permission,
            "--jobs-wait",
            "10m",
            "start the server",
        ]);
        let mut dsh = tokio::process::Command::from(cmd).spawn().unwrap();
        // dsh is waiting for the job once the turn ended and both processes run.
        let home_path = home.path().to_path_buf();
        let turn_ended = || {
            session_files(&home_path).first().is_some_and(|file| {
                std::fs::read_to_string(file).is_ok_and(|log| log.contains("\"turn/end\""))
            })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !turn_ended() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(turn_ended(), "signal {signal}: the turn never ended");
        wait_for_pid(&pids.path().join("child.pid"));
        assert!(
            processes_with(&marker).len() >= 2,
            "signal {signal}: the job and its child run"
        );
        let pid = i32::try_from(dsh.id().unwrap()).unwrap();
        // SAFETY: kill(2) on the pid of the child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let _ = tokio::time::timeout(Duration::from_secs(30), dsh.wait())
            .await
            .unwrap();
        let gone = poll_until(Duration::from_secs(10), || {
            processes_with(&marker).is_empty()
        });
        assert!(
            gone,
            "signal {signal} ({permission}): the job outlived dsh: {:?}",
            processes_with(&marker)
        );
    }
}
