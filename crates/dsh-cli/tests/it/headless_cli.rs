//! `dsh run` in pipelines and the small CLI polish of issue 20: the task from standard input,
//! colours on stderr (`--color`, `NO_COLOR`, checked in a real pty too), `--json` without token
//! deltas unless `--json-deltas`, efforts the model does not support refused before any
//! request, `sessions export --format zip` into a pipe, dates in `sessions show`, and the first
//! line of `dsh --help`. All run the real binary; the provider is the fake one on loopback.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

use crate::common::{dsh_command, output, text};

fn usage() -> WireUsage {
    WireUsage {
        prompt_tokens: 10,
        completion_tokens: 2,
        prompt_cache_hit_tokens: 0,
        reasoning_tokens: 1,
    }
}

/// A reply with reasoning and text, streamed in a few deltas.
fn reply(text: &str) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .reasoning("let me think")
            .text(text)
            .text(" done")
            .finish("stop", Some(usage())),
    )
}

fn command(home: &Path, cwd: &Path, base_url: &str) -> Command {
    let mut cmd = dsh_command(home, cwd);
    cmd.env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-headless-test");
    cmd
}

/// The text of every user message of a recorded chat-completions request.
fn user_text(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// Runs `cmd` with `input` written to its stdin.
async fn run_with_stdin(mut cmd: Command, input: &str) -> std::process::Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(input.as_bytes()).await;
    });
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("dsh did not finish")
        .unwrap()
}

#[tokio::test]
async fn the_task_comes_from_stdin_with_a_dash_or_when_piped_without_an_argument() {
    let provider = FakeProvider::start([reply("first"), reply("second")])
        .await
        .unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "-"]);
    let out = run_with_stdin(cmd, "task from a pipe, with dash\n").await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "first done\n");

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.arg("run");
    let out = run_with_stdin(cmd, "task piped without an argument").await;
    assert!(out.status.success(), "{}", text(&out).1);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(user_text(&requests[0].body).contains("task from a pipe, with dash"));
    assert!(user_text(&requests[1].body).contains("task piped without an argument"));

    // Nothing piped: refused before any request, saying how to give the task.
    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.arg("run");
    let out = run_with_stdin(cmd, "  \n").await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("NO_TASK") && stderr.contains("empty"),
        "{stderr}"
    );
    assert_eq!(provider.requests().len(), 2);
}

#[tokio::test]
async fn json_leaves_out_token_deltas_unless_json_deltas() {
    let provider = FakeProvider::start([reply("one"), reply("two")])
        .await
        .unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lines = |stdout: &str| -> Vec<serde_json::Value> {
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let deltas = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .filter(|l| {
                let chunk = &l["event"]["data"]["chunk"]["type"];
                chunk == "text-delta" || chunk == "reasoning-delta"
            })
            .count()
    };

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "--json", "hello"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let plain = lines(&stdout);
    assert_eq!(deltas(&plain), 0, "{stdout}");
    // The finished message and the result still carry the whole text.
    assert!(plain
        .iter()
        .any(|l| l["event"]["type"] == "assistant/message"));
    let result = plain.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["output"], "one done");

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "--json", "--json-deltas", "hello"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(deltas(&lines(&stdout)) >= 3, "{stdout}");
}

#[tokio::test]
async fn color_flag_wins_over_no_color_and_never_means_never() {
    let provider = FakeProvider::start([reply("a"), reply("b")]).await.unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.env("NO_COLOR", "1")
        .args(["run", "-v", "--show-reasoning", "--color", "always", "hi"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("\x1b[2m"), "{stderr:?}");

    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "-v", "--show-reasoning", "--color", "never", "hi"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("let me think"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

/// Everything a command wrote to a real pseudo-terminal (stdout and stderr both go there).
fn in_pty(base_url: &str, home: &Path, cwd: &Path, no_color: bool) -> String {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 40,
            cols: 120,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("HOME", home);
    cmd.env("DSH_HOME", home);
    cmd.env("TERM", "xterm-256color");
    cmd.env("DEEPSEEK_BASE_URL", base_url);
    cmd.env("DEEPSEEK_API_KEY", "sk-headless-test");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    cmd.cwd(cwd);
    cmd.args(["run", "--show-reasoning", "say hi"]);
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let collected = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = reader.read_to_end(&mut all);
        all
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "dsh run did not end in the pty");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(pty.master);
    String::from_utf8_lossy(&collected.join().unwrap()).into_owned()
}

#[tokio::test]
async fn no_color_turns_colours_off_on_a_terminal() {
    let provider = FakeProvider::start([reply("a"), reply("b")]).await.unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let coloured = tokio::task::spawn_blocking({
        let (url, h, c) = (url.clone(), h.clone(), c.clone());
        move || in_pty(&url, &h, &c, false)
    })
    .await
    .unwrap();
    assert!(coloured.contains("let me think"), "{coloured:?}");
    assert!(coloured.contains("\x1b[2m"), "{coloured:?}");
    let plain = tokio::task::spawn_blocking(move || in_pty(&url, &h, &c, true))
        .await
        .unwrap();
    assert!(plain.contains("let me think"), "{plain:?}");
    assert!(!plain.contains("\x1b[2m"), "{plain:?}");
}

#[tokio::test]
async fn an_effort_the_model_does_not_take_is_refused_before_any_request() {
    let provider = FakeProvider::start([reply("never sent")]).await.unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "--effort", "medium", "hi"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("UNSUPPORTED_REASONING_EFFORT")
            && stderr.contains("medium")
            && stderr.contains("off, low, high, max"),
        "{stderr}"
    );
    assert!(provider.requests().is_empty());
}

#[test]
fn help_starts_with_a_line_for_users() {
    let home = tempfile::tempdir().unwrap();
    let out = dsh_command(home.path(), home.path())
        .arg("--help")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("dsh: a coding agent for your terminal") && first.contains("dsh run"),
        "{first}"
    );
    assert!(!first.contains("crates"), "{first}");
}

#[tokio::test]
async fn zip_export_goes_to_a_pipe_or_to_the_named_file_and_show_prints_dates() {
    let provider = FakeProvider::start([reply("stored")]).await.unwrap();
    let (home, cwd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut cmd = command(home.path(), cwd.path(), &provider.base_url());
    cmd.args(["run", "--json", "remember me"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let id = result["sessionId"].as_str().unwrap().to_string();

    // stdout is a pipe here: the zip arrives on it, nothing is written to the directory.
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.args(["sessions", "export", &id, "--format", "zip"]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(out.stdout.starts_with(b"PK\x03\x04"), "not a zip on stdout");
    assert!(!cwd.path().join(format!("{id}.zip")).exists());
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.contains("session.jsonl"), "the zip holds the log");

    let file = cwd.path().join("out.zip");
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.args(["sessions", "export", &id, "--format", "zip", "-o"])
        .arg(&file);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(out.stdout.is_empty());
    assert!(std::fs::read(&file).unwrap().starts_with(b"PK\x03\x04"));

    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.args(["sessions", "show", &id]);
    let out = output(cmd).await;
    let (shown, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let created = shown
        .lines()
        .find(|l| l.starts_with("- created: "))
        .unwrap_or_else(|| panic!("{shown}"));
    // `- created: YYYY-MM-DD HH:MM:SS UTC`, not milliseconds since 1970.
    let date = created.trim_start_matches("- created: ");
    assert!(date.ends_with(" UTC") && date.len() == 23, "{created}");
    assert_eq!(&date[4..5], "-");
    assert!(shown.contains("- updated: "), "{shown}");
    // Each turn heading carries the time the turn started, in the same form.
    let turn = shown
        .lines()
        .find(|l| l.starts_with("## Turn 1"))
        .unwrap_or_else(|| panic!("{shown}"));
    let when = turn
        .strip_prefix("## Turn 1 · ")
        .unwrap_or_else(|| panic!("no date on the turn heading: {turn}"));
    assert!(when.ends_with(" UTC") && when.len() == 23, "{turn}");
    assert_eq!(&when[..10], &date[..10], "{turn} vs {created}");
}
