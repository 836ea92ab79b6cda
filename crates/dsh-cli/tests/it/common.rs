//! Helpers several test modules share: starting the real `dsh` binary in a clean environment
//! and reading what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// How long one `dsh` invocation may take before the test fails as hung.
pub(crate) const DSH_TIMEOUT: Duration = Duration::from_secs(60);

/// The `dsh` binary with an empty environment except `PATH`, `HOME` and `DSH_HOME` (both
/// `home`), run in `cwd` with stdin closed.
pub(crate) fn dsh_command(home: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home)
        .current_dir(cwd)
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end; a run longer than [`DSH_TIMEOUT`] fails the test.
pub(crate) async fn output(cmd: Command) -> Output {
    let mut cmd = tokio::process::Command::from(cmd);
    tokio::time::timeout(DSH_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("dsh did not finish within {DSH_TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("cannot run dsh: {error}"))
}

/// Runs `cmd` to its end with `input` on its stdin (then closed); a run longer than
/// [`DSH_TIMEOUT`] fails the test.
pub(crate) async fn output_with_input(mut cmd: Command, input: &str) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run dsh: {error}"));
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(input.as_bytes())
        .await
        .unwrap_or_else(|error| panic!("cannot write to dsh's stdin: {error}"));
    drop(stdin);
    tokio::time::timeout(DSH_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("dsh did not finish within {DSH_TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("cannot wait for dsh: {error}"))
}

/// Stdout and stderr as text.
pub(crate) fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every `session.jsonl` under `home/sessions` (any depth), sorted by path; empty when there is
/// none or the folder is missing.
pub(crate) fn session_files(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![home.join("sessions")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "session.jsonl") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The one session file of a test that ran one session; fails the test when there is none or
/// more than one.
pub(crate) fn session_file(home: &Path) -> PathBuf {
    let mut files = session_files(home);
    assert_eq!(
        files.len(),
        1,
        "expected one session file under {}: {files:?}",
        home.display()
    );
    files.remove(0)
}

/// A scratch root for one test outside every temp directory (the sandbox leaves those
/// writable, so a write that lands here proves an escape; `dsh_test_support::scratch_parent`),
/// with the folders `names` created below it, as real paths. The root goes with the guard.
pub(crate) fn scratch_dirs<const N: usize>(names: [&str; N]) -> (tempfile::TempDir, [PathBuf; N]) {
    let parent = dsh_test_support::scratch_parent(Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap();
    let root = tempfile::tempdir_in(parent).unwrap();
    let real = std::fs::canonicalize(root.path()).unwrap();
    let dirs = names.map(|name| {
        let dir = real.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    (root, dirs)
}

/// A scripted model that makes `calls` (tool name, JSON arguments), one per step, then ends
/// its turn with `last` (e.g. `SseReply::new().text("done")`).
pub(crate) async fn model_stepping(
    calls: &[(&str, serde_json::Value)],
    last: dsh_test_support::SseReply,
) -> dsh_test_support::FakeProvider {
    use dsh_test_support::{ScriptedReply, SseReply, WireUsage};
    let mut replies: Vec<ScriptedReply> = calls
        .iter()
        .enumerate()
        .map(|(i, (tool, args))| {
            ScriptedReply::from(
                SseReply::new()
                    .tool_call(0, &format!("call_{i}"), tool, &args.to_string())
                    .finish("tool_calls", Some(WireUsage::default())),
            )
        })
        .collect();
    replies.push(ScriptedReply::from(
        last.finish("stop", Some(WireUsage::default())),
    ));
    dsh_test_support::FakeProvider::start(replies)
        .await
        .unwrap()
}

/// `git -C dir <args>` as a test's own set-up (an author and no signing configured), its
/// stdout; a failure fails the test.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run git: {error}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scripted reply that answers `text` and ends the turn.
pub(crate) fn text_reply(text: &str) -> dsh_test_support::ScriptedReply {
    use dsh_test_support::{SseReply, WireUsage};
    dsh_test_support::ScriptedReply::from(
        SseReply::new()
            .text(text)
            .finish("stop", Some(WireUsage::default())),
    )
}

/// A scripted reply that calls tool `name` with `args` (call id `id`).
pub(crate) fn tool_reply(
    id: &str,
    name: &str,
    args: &serde_json::Value,
) -> dsh_test_support::ScriptedReply {
    use dsh_test_support::{SseReply, WireUsage};
    dsh_test_support::ScriptedReply::from(
        SseReply::new()
            .tool_call(0, id, name, &args.to_string())
            .finish("tool_calls", Some(WireUsage::default())),
    )
}
