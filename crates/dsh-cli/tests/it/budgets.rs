//! `dsh run --max-steps | --max-wall-time | --max-cost-usd` (docs/run-json.md, "Budgets"): each
//! budget ends the turn with its own reason in the `--json` result line, on stderr and in the
//! session log, with no terminal and no input (stdin is closed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{dsh_command, output as run};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};

/// One `bash` call per reply, so the turn keeps asking for steps.
fn tool_reply(n: u32, usage: WireUsage) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .tool_call(
                0,
                &format!("call_{n}"),
                "bash",
                "{\"command\": \"true\", \"description\": \"Nothing\"}",
            )
            .finish("tool_calls", Some(usage)),
    )
}

fn small_usage() -> WireUsage {
    WireUsage {
        prompt_tokens: 1000,
        prompt_cache_hit_tokens: 0,
        completion_tokens: 10,
        reasoning_tokens: 0,
    }
}

struct Run {
    result: serde_json::Value,
    stderr: String,
    code: Option<i32>,
    log: String,
}

async fn dsh_run(base_url: &str, flags: &[&str]) -> Run {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd: Command = dsh_command(home.path(), cwd.path());
    cmd.env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-budget")
        .stdin(Stdio::null())
        .args(["run", "--json", "--permission", "danger-full-access"])
        .args(["--model", "deepseek-v4-flash"])
        .args(flags)
        .arg("keep working");
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line in {stdout}"));
    let log = std::fs::read_to_string(session_file(home.path())).unwrap();
    Run {
        result,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
        log,
    }
}

fn session_file(home: &Path) -> PathBuf {
    let mut stack = vec![home.join("sessions")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "session.jsonl") {
                return path;
            }
        }
    }
    panic!("no session log under {}", home.display());
}

/// The `turn/end` line of the log.
fn turn_end(log: &str) -> serde_json::Value {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["type"] == "turn/end")
        .unwrap_or_else(|| panic!("no turn/end in {log}"))
}

fn assert_budget_end(run: &Run, budget: &str, code: &str) {
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.result["schemaVersion"], 1);
    assert_eq!(run.result["stop"], "error");
    assert_eq!(run.result["budget"], budget, "{}", run.result);
    assert_eq!(run.result["reason"]["error"]["code"], code);
    assert!(
        run.stderr.contains(&format!("dsh: {code}:")),
        "{}",
        run.stderr
    );
    let end = turn_end(&run.log);
    assert_eq!(end["data"]["reason"]["kind"], "error");
    assert_eq!(end["data"]["reason"]["error"]["code"], code);
}

#[tokio::test]
async fn max_steps_ends_the_turn_before_the_next_model_call() {
    let provider = FakeProvider::start((0..6).map(|n| tool_reply(n, small_usage())))
        .await
        .unwrap();
    let run = dsh_run(&provider.base_url(), &["--max-steps", "2"]).await;
    assert_budget_end(&run, "steps", "BUDGET_STEPS");
    assert_eq!(provider.requests().len(), 2, "a third model call was made");
}

#[tokio::test]
async fn max_cost_ends_the_turn_once_the_spend_reaches_the_limit() {
    // deepseek-v4-flash: 0.14 USD per 1M uncached input tokens; each call costs 0.14 USD for
    // 1M input tokens, so a 0.25 USD budget allows two calls and stops before the third.
    let usage = WireUsage {
        prompt_tokens: 1_000_000,
        prompt_cache_hit_tokens: 0,
        completion_tokens: 0,
        reasoning_tokens: 0,
    };
    let provider = FakeProvider::start((0..6).map(|n| tool_reply(n, usage)))
        .await
        .unwrap();
    let run = dsh_run(&provider.base_url(), &["--max-cost-usd", "0.25"]).await;
    assert_budget_end(&run, "cost", "BUDGET_COST");
    assert_eq!(provider.requests().len(), 2);
    let cost = run.result["costUsd"].as_f64().unwrap();
    assert!((0.25..0.3).contains(&cost), "cost {cost}");
}

#[tokio::test]
async fn max_wall_time_cancels_a_step_that_never_ends() {
    // The first call gets a tool call; the second stalls forever (no byte, connection open).
    let provider = FakeProvider::start([
        tool_reply(0, small_usage()),
        ScriptedReply::from(SseReply::new().end(StreamEnd::Stall)),
    ])
    .await
    .unwrap();
    let started = Instant::now();
    let run = dsh_run(&provider.base_url(), &["--max-wall-time", "2s"]).await;
    let took = started.elapsed();
    assert_budget_end(&run, "wall_time", "BUDGET_WALL_TIME");
    assert!(
        took < Duration::from_secs(20),
        "the budget did not stop the stalled call: {took:?}"
    );
    assert!(took >= Duration::from_secs(2), "stopped early: {took:?}");
}

#[tokio::test]
async fn budgets_come_from_the_configuration_too() {
    let provider = FakeProvider::start((0..6).map(|n| tool_reply(n, small_usage())))
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[budget]\nmax_steps = 1\n").unwrap();
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-budget")
        .stdin(Stdio::null())
        .args(["run", "--json", "--permission", "danger-full-access", "go"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("dsh: BUDGET_STEPS:"), "{stderr}");
    assert_eq!(provider.requests().len(), 1);
}
