//! `bash` with real processes: output, markers, timeouts and cancellation killing the whole
//! process group, output caps, environment scrubbing.
//!
//! This file is a test binary of its own, not a module of `tests/it/`: the environment test
//! (`secrets_do_not_reach_the_child`) changes the test process's environment with
//! `std::env::set_var`, which races with every other test that reads the environment or
//! spawns a child at the same time, so it shares its process only with these bash tests.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "it/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Scratch;
use dsh_tools::{
    group_has_live_members, BashTool, PermissionPreset, Tool, ToolContext, ToolError,
    ToolErrorCode, ToolLimits, ToolOutput, ToolRegistry,
};
use futures::future::BoxFuture;
use serde_json::{json, Value};

fn full() -> Scratch {
    Scratch::new(PermissionPreset::DangerFullAccess)
}

/// Independent check through /proc: any non-zombie process whose group is `pgid`.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields[2].parse::<i32>().unwrap() == pgid && fields[0] != "Z" {
            out.push(pid);
        }
    }
    out
}

fn read_pgid(s: &Scratch) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(text) = std::fs::read_to_string(s.path("pgid")) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "the command never wrote its pid");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn echoes_stdout_like_dsh() {
    let s = full();
    let out = s
        .ok(
            "bash",
            json!({"command": "echo TERMINAL_OK", "description": "echo"}),
        )
        .await;
    assert_eq!(out, "TERMINAL_OK\n");
}

#[tokio::test]
async fn stderr_and_exit_code_markers() {
    let s = full();
    let out = s
        .call(
            "bash",
            json!({"command": "echo out; echo err >&2; exit 3", "description": "fail"}),
        )
        .await
        .unwrap();
    assert_eq!(out.text_content(), "out\n[stderr]\nerr\n[exit code: 3]");
    assert_eq!(out.data.as_ref().unwrap()["exitCode"], 3);
    let quiet = s
        .ok("bash", json!({"command": "true", "description": "nothing"}))
        .await;
    assert_eq!(quiet, "(no output)");
    let killed = s
        .ok(
            "bash",
            json!({"command": "kill -9 $$", "description": "die"}),
        )
        .await;
    assert_eq!(killed, "[killed by signal 9]");
}

#[tokio::test]
async fn workdir_is_resolved_and_checked() {
    let s = full();
    std::fs::create_dir_all(s.path("sub/dir")).unwrap();
    let out = s
        .ok(
            "bash",
            json!({"command": "pwd", "description": "pwd", "workdir": "sub/dir"}),
        )
        .await;
    assert_eq!(out.trim(), s.path("sub/dir").display().to_string());
    s.err(
        "bash",
        json!({"command": "pwd", "description": "pwd", "workdir": "missing"}),
        ToolErrorCode::NotFound,
    )
    .await;
}

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let s = full();
    let started = Instant::now();
    let out = s
        .ok(
            "bash",
            json!({
                "command": "echo $$ > pgid; echo before; sleep 100 & sleep 100 & (sleep 100; echo no) & wait",
                "description": "hang",
                "timeoutMs": 500
            }),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(out.starts_with("before\n"), "{out}");
    assert!(out.contains("[timed out after 500 ms"), "{out}");
    let pgid = read_pgid(&s);
    assert!(!group_has_live_members(pgid));
    assert_eq!(live_members(pgid), Vec::<i32>::new());
}

#[tokio::test]
async fn timeout_escalates_to_sigkill_when_term_is_ignored() {
    let s = full();
    let started = Instant::now();
    let out = s
        .ok(
            "bash",
            json!({
                "command": "trap '' TERM; echo $$ > pgid; sleep 100 & sleep 100",
                "description": "stubborn",
                "timeoutMs": 300
            }),
        )
        .await;
    assert!(out.contains("timed out"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(live_members(read_pgid(&s)), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_kills_the_tree_and_returns_promptly() {
    let s = full();
    let ctx = s.ctx.for_call();
    let cancel = ctx.cancel().clone();
    let registry = ToolRegistry::with_builtins();
    let task = tokio::spawn(async move {
        registry
            .invoke(
                "bash",
                r#"{"command":"echo $$ > pgid; sleep 100 & sleep 100","description":"hang"}"#,
                &ctx,
            )
            .await
    });
    let pgid = read_pgid(&s);
    assert!(group_has_live_members(pgid));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("cancel must return promptly")
        .unwrap();
    assert!(cancelled_at.elapsed() < Duration::from_secs(3));
    assert_eq!(result.unwrap_err().code, ToolErrorCode::Aborted);
    // The registry answers ABORTED at once; the tool's own cleanup runs as its future drops.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !live_members(pgid).is_empty() {
        assert!(Instant::now() < deadline, "group {pgid} survived cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tool_cancellation_without_registry_reports_aborted() {
    let s = full();
    let ctx = s.ctx.for_call();
    let cancel = ctx.cancel().clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let err = BashTool
        .execute(
            json!({"command": "echo $$ > pgid; sleep 100 & sleep 100", "description": "x"}),
            &ctx,
        )
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code, ToolErrorCode::Aborted);
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(live_members(read_pgid(&s)), Vec::<i32>::new());
}

/// A tool that wraps `bash` with a declared timeout, so the registry drops the running future.
struct Impatient;

impl Tool for Impatient {
    fn name(&self) -> &str {
        "impatient"
    }
    fn description(&self) -> &str {
        "bash with a 300 ms declared timeout"
    }
    fn parameters(&self) -> Value {
        BashTool.parameters()
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(300))
    }
    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        BashTool.execute(args, ctx)
    }
}

#[tokio::test]
async fn dropping_a_running_call_kills_its_group() {
    let mut s = full();
    s.registry.register(Arc::new(Impatient)).unwrap();
    let err = s
        .call(
            "impatient",
            json!({"command": "echo $$ > pgid; sleep 100 & sleep 100", "description": "x", "timeoutMs": 100000}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ToolErrorCode::ToolTimeout);
    let pgid = read_pgid(&s);
    let deadline = Instant::now() + Duration::from_secs(3);
    while !live_members(pgid).is_empty() {
        assert!(Instant::now() < deadline, "group survived the dropped call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn background_leftovers_are_killed_when_the_command_exits() {
    let s = full();
    let started = Instant::now();
    let out = s
        .ok(
            "bash",
            json!({"command": "echo $$ > pgid; sleep 100 & echo started", "description": "bg"}),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.starts_with("started\n"), "{out}");
    assert!(
        out.contains("left running in the background were killed"),
        "{out}"
    );
    assert_eq!(live_members(read_pgid(&s)), Vec::<i32>::new());
}

#[tokio::test]
async fn stream_cap_keeps_the_tail_and_spills_the_stream() {
    let mut s = full();
    s.ctx = s.ctx.clone().with_limits(ToolLimits {
        bash_stream_cap: 1000,
        ..ToolLimits::default()
    });
    let out = s
        .call(
            "bash",
            json!({"command": "for i in $(seq 1 5000); do echo line$i; done", "description": "many"}),
        )
        .await
        .unwrap();
    let text = out.text_content();
    assert!(
        text.starts_with("[stdout truncated: showing the last 1000 of "),
        "{text}"
    );
    assert!(text.ends_with("line5000\n"), "{text}");
    assert!(!text.contains("line1\n"));
    let file = out.data.as_ref().unwrap()["stdoutFile"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains(&file));
    let full_stream = std::fs::read_to_string(&file).unwrap();
    assert!(full_stream.starts_with("line1\nline2\n"));
    assert_eq!(full_stream.lines().count(), 5000);
}

#[tokio::test]
async fn large_results_are_externalised_with_head_and_tail() {
    let s = full();
    let out = s
        .ok(
            "bash",
            json!({"command": "printf START; head -c 200000 /dev/zero | tr '\\0' x; printf END", "description": "big"}),
        )
        .await;
    assert!(out.len() < 60_000, "{}", out.len());
    assert!(out.starts_with("[stdout truncated: showing the last 65536 of 200008 bytes"));
    assert!(out.contains("bytes omitted"));
    assert!(
        out.contains("END\n\n(Output too large"),
        "{}",
        &out[out.len() - 400..]
    );
    assert!(out.contains("Full output saved to: "));
}

#[tokio::test]
async fn secrets_do_not_reach_the_child() {
    // SAFETY-free in edition 2021; the names are unique to this test.
    std::env::set_var("DSH_TEST_API_KEY", "sk-supersecret-1");
    std::env::set_var("DSH_TEST_MY_TOKEN", "tok-supersecret-2");
    std::env::set_var("DSH_TEST_PLAIN", "visible-value");
    let s = full();
    let out = s
        .ok("bash", json!({"command": "env", "description": "env"}))
        .await;
    assert!(!out.contains("supersecret"), "{out}");
    assert!(out.contains("DSH_TEST_PLAIN=visible-value"));
    for line in ["NO_COLOR=1", "TERM=dumb", "PAGER=cat", "GIT_PAGER=cat"] {
        assert!(out.lines().any(|l| l == line), "missing {line}");
    }
    let stdin = s
        .ok(
            "bash",
            json!({"command": "cat; echo eof", "description": "stdin"}),
        )
        .await;
    assert_eq!(stdin, "eof\n");
}

#[tokio::test]
async fn refusals_and_invalid_arguments() {
    let s = full();
    let msg = s
        .err(
            "bash",
            json!({"command": "sleep 1", "description": "bg", "run_in_background": true}),
            ToolErrorCode::Unsupported,
        )
        .await;
    assert!(msg.contains("not supported"));
    s.err(
        "bash",
        json!({"description": "x"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "bash",
        json!({"command": "echo", "description": "x", "timeoutMs": "soon"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "bash",
        json!({"command": "  ", "description": "x"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;

    let confined = Scratch::new(PermissionPreset::WorkspaceWrite);
    let msg = confined
        .err(
            "bash",
            json!({"command": "echo hi", "description": "x"}),
            ToolErrorCode::SandboxUnavailable,
        )
        .await;
    assert!(msg.contains("workspace-write"));
}

/// A running command's latest lines reach the call's progress sink as they are printed
/// (issue 41: the card shows the output tail while it runs).
#[tokio::test]
async fn a_running_command_reports_its_latest_output() {
    let s = full();
    let reports: Arc<std::sync::Mutex<Vec<dsh_tools::ToolProgress>>> = Arc::default();
    let sink = Arc::clone(&reports);
    let ctx = s
        .ctx
        .for_call()
        .with_progress(Arc::new(move |report| sink.lock().unwrap().push(report)));
    let out = BashTool
        .execute(
            json!({"command": "echo step-1; sleep 1.3; echo step-2; sleep 0.6", "description": "steps"}),
            &ctx,
        )
        .await
        .unwrap();
    assert!(out.text_content().contains("step-2"));
    let reports = reports.lock().unwrap().clone();
    let first = reports
        .iter()
        .position(|r| r.output == ["step-1"])
        .unwrap_or_else(|| panic!("{reports:?}"));
    let later = reports
        .iter()
        .position(|r| r.output.ends_with(&["step-2".to_string()]))
        .unwrap_or_else(|| panic!("{reports:?}"));
    assert!(first < later);
    assert_eq!(reports[first].describe(), "step-1");

    // A quick command reports nothing: its result comes before the first report would.
    let quiet: Arc<std::sync::Mutex<Vec<dsh_tools::ToolProgress>>> = Arc::default();
    let sink = Arc::clone(&quiet);
    let ctx = s
        .ctx
        .for_call()
        .with_progress(Arc::new(move |report| sink.lock().unwrap().push(report)));
    BashTool
        .execute(
            json!({"command": "echo quick", "description": "quick"}),
            &ctx,
        )
        .await
        .unwrap();
    assert!(quiet.lock().unwrap().is_empty());
}

/// A cancelled command keeps what it printed until then in its ABORTED result.
#[tokio::test]
async fn a_cancelled_command_keeps_its_partial_output() {
    let s = full();
    let ctx = s.ctx.for_call();
    let cancel = ctx.cancel().clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let err = BashTool
        .execute(
            json!({"command": "echo half-done; echo oops >&2; sleep 100", "description": "x"}),
            &ctx,
        )
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code, ToolErrorCode::Aborted);
    assert!(
        err.message
            .ends_with("its output until then:\nhalf-done\n[stderr]\noops"),
        "{}",
        err.message
    );
}
