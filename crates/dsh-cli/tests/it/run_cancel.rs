//! Ctrl-C (SIGINT) on `dsh run`: during streaming, during a running `bash`, and during a retry
//! wait. Each must exit 130, leave a log that loads with the turn ended `aborted`, keep the
//! partial reply, and leave no child process alive.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_session::{load_file, Event, TurnEndReason};
use dsh_test_support::process::alive;
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};

use crate::common::{dsh_command, session_file};

struct Run {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    child: tokio::process::Child,
}

fn start(base_url: &str, args: &[&str]) -> Run {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::from(dsh_command(home.path(), cwd.path()))
        .env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-cancel-test")
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Run { home, cwd, child }
}

fn sigint(child: &tokio::process::Child) {
    let pid = child.id().expect("child is running") as libc::pid_t;
    // SAFETY: sending a signal to a process we spawned and still own.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
}

async fn finish(run: Run) -> (std::process::Output, Vec<dsh_session::Envelope>, Run2) {
    let Run { home, cwd, child } = run;
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("dsh did not exit after SIGINT")
        .unwrap();
    let log = load_file(&session_file(home.path())).expect("the log loads");
    (
        out,
        log.events,
        Run2 {
            _home: home,
            _cwd: cwd,
        },
    )
}

/// Keeps the run's directories alive until the test's checks are done.
struct Run2 {
    _home: tempfile::TempDir,
    _cwd: tempfile::TempDir,
}

fn last_turn_end(events: &[dsh_session::Envelope]) -> TurnEndReason {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::TurnEnd(end) => Some(end.reason.clone()),
            _ => None,
        })
        .expect("the turn was closed")
}

#[tokio::test]
async fn sigint_during_streaming_keeps_the_partial_reply() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .reasoning("thinking about it")
            .text("partial answer")
            .end(StreamEnd::Stall),
    )])
    .await
    .unwrap();
    let run = start(&provider.base_url(), &["hello"]);
    tokio::time::timeout(
        Duration::from_secs(20),
        provider.wait_until(|e| e.stalls >= 1),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigint(&run.child);
    let (out, events, _dirs) = finish(run).await;
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(
        last_turn_end(&events),
        TurnEndReason::Aborted { .. }
    ));
    let partial = events.iter().find_map(|e| match &e.event {
        Event::AssistantMessage(m) if m.interrupted => Some(m.message.text()),
        _ => None,
    });
    assert_eq!(partial.as_deref(), Some("partial answer"));
    // The partial reply is in the log only: after Ctrl-C stdout gets nothing (issue 20).
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    tokio::time::timeout(
        Duration::from_secs(5),
        provider.wait_until(|e| e.client_disconnects >= 1),
    )
    .await
    .expect("the connection was closed");
}

#[tokio::test]
async fn sigint_during_bash_kills_the_process_tree() {
    let command = "sleep 60 & echo $! > bg.pid; echo $$ > sh.pid; sleep 60";
    let args = serde_json::json!({"command": command, "description": "wait"}).to_string();
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .tool_call(0, "call_sleep", "bash", &args)
            .finish("tool_calls", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let run = start(
        &provider.base_url(),
        &["--permission", "danger-full-access", "wait a minute"],
    );
    let pid_file = run.cwd.path().join("bg.pid");
    let sh_file = run.cwd.path().join("sh.pid");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(pid_file.exists() && sh_file.exists()) {
        assert!(Instant::now() < deadline, "bash never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let read_pid =
        |p: &Path| -> libc::pid_t { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let (bg, sh) = (read_pid(&pid_file), read_pid(&sh_file));
    assert!(alive(bg) && alive(sh));
    sigint(&run.child);
    let (out, events, _dirs) = finish(run).await;
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(
        last_turn_end(&events),
        TurnEndReason::Aborted { .. }
    ));
    let result = events.iter().find_map(|e| match &e.event {
        Event::ToolResult(r) => Some(r.clone()),
        _ => None,
    });
    assert!(result.is_some(), "the bash call has a result");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(bg) || alive(sh) {
        assert!(
            Instant::now() < deadline,
            "a child process survived the cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigint_during_retry_wait_exits_at_once() {
    let provider = FakeProvider::start([ScriptedReply::rate_limited(30)])
        .await
        .unwrap();
    let run = start(&provider.base_url(), &["hello"]);
    tokio::time::timeout(
        Duration::from_secs(20),
        provider.wait_until(|e| e.requests >= 1),
    )
    .await
    .unwrap();
    // Let the retry be logged and the wait begin.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    sigint(&run.child);
    let (out, events, _dirs) = finish(run).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the retry wait was not interrupted"
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(events
        .iter()
        .any(|e| matches!(&e.event, Event::LlmRetry(r) if r.delay_ms == 30_000)));
    assert!(matches!(
        last_turn_end(&events),
        TurnEndReason::Aborted { .. }
    ));
}
