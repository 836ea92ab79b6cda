//! Every command example in README.md runs: each line of its `sh` blocks is listed in
//! [`EXAMPLES`] with what the test does with it, and run with the real `dsh` through `sh -c` in a
//! git repository against the fake provider (issue 41: the README's own pipe example dropped its
//! input). A README line not listed, or a listed line gone from the README, fails the test, so
//! an example cannot be added or changed without being run or its skip explained.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{output, session_files, text};

/// What the test does with one README example.
enum Example {
    /// Runs it to its end; it must exit 0.
    Run,
    /// Starts it (a server), waits until it prints its `http://127.0.0.1:` address, stops it.
    Serve,
    /// Not run here, and why.
    Skip(&'static str),
}

/// Every command line of the README's `sh` blocks (comments after two spaces and `#` cut,
/// continuation lines joined), in README order.
const EXAMPLES: &[(&str, Example)] = &[
    (
        "cargo install --locked --path crates/dsh-cli",
        Example::Skip("builds the binary these tests run"),
    ),
    (
        "DEEPSEEK_API_KEY=sk-... dsh run \"explain what this repository does\"",
        Example::Run,
    ),
    (
        "DEEPSEEK_BASE_URL=http://127.0.0.1:8000/v1 dsh run --model my-model \"explain what this repository does\"",
        Example::Run,
    ),
    (
        "cargo test --workspace",
        Example::Skip("the command this test is part of"),
    ),
    (
        "dsh run --model deepseek-v4-pro --effort max \"find why the build is slow\"",
        Example::Run,
    ),
    (
        "dsh run --json --show-reasoning \"list the crates\"",
        Example::Run,
    ),
    (
        "git diff | dsh run \"review this change\"",
        Example::Run,
    ),
    ("echo \"fix the tests\" | dsh run", Example::Run),
    ("dsh web --port 3080 --no-open", Example::Serve),
    (
        "dsh run --provider deepseek --model deepseek-v4-pro --effort high \"explain the tests\"",
        Example::Run,
    ),
    ("dsh config show", Example::Run),
    ("dsh config path", Example::Run),
    ("dsh models", Example::Run),
    ("dsh doctor", Example::Run),
    ("dsh replay examples/hello", Example::Run),
    (
        "dsh sessions show examples/hello/session.jsonl",
        Example::Run,
    ),
    ("dsh run --continue \"now add a test\"", Example::Run),
    ("dsh run --resume 0b1c \"and document it\"", Example::Run),
    ("dsh sessions list --all", Example::Run),
    ("dsh sessions show 0b1c", Example::Run),
    (
        "dsh sessions export 0b1c --format md -o session.md",
        Example::Run,
    ),
    ("dsh sessions fork 0b1c --at-turn 1", Example::Run),
    ("dsh sessions rewind 0b1c", Example::Run),
    ("dsh sessions search \"add a test\"", Example::Run),
    ("dsh sessions rm --yes 0b1c", Example::Run),
    (
        "harbor run -d terminal-bench@2.0 -a acp --ak registry_entry_path=dist/acp-registry/dsh/agent.json -m deepseek/deepseek-v4-pro --ae DEEPSEEK_API_KEY=\"$DEEPSEEK_API_KEY\" --ae DSH_PERMISSION_MODE=danger-full-access -n 8",
        Example::Skip("Harbor's own tests run dsh under it (tests/harbor, pytest; docs/harbor.md)"),
    ),
];

/// The command lines of README.md's `sh` blocks.
fn readme_examples() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let mut examples = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.trim() == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let code = line.split("  #").next().unwrap_or("").trim();
        if let Some(start) = code.strip_suffix('\\') {
            pending.push_str(start.trim());
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        let example = std::mem::take(&mut pending).trim().to_string();
        if !example.is_empty() {
            examples.push(example);
        }
    }
    examples
}

/// The workspace the examples run in: a git repository with an uncommitted change (so
/// `git diff` has something to pipe) and a copy of the README's `examples/hello`.
fn workspace(dir: &Path) {
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    std::fs::write(dir.join("lib.rs"), "fn one() {}\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "lib.rs"]);
    git(&["commit", "-q", "-m", "one"]);
    std::fs::write(dir.join("lib.rs"), "fn one() {}\nfn two() {}\n").unwrap();
    let hello = dir.join("examples/hello");
    std::fs::create_dir_all(&hello).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello/session.jsonl"),
        hello.join("session.jsonl"),
    )
    .unwrap();
}

/// The id of the oldest session stored under `home` (the one the placeholder `0b1c` stands
/// for), from its log's first line.
fn first_session_id(home: &Path) -> String {
    let mut logs: Vec<_> = session_files(home)
        .into_iter()
        .map(|path| {
            let first = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .to_string();
            let header: serde_json::Value = serde_json::from_str(&first).unwrap();
            (
                header["createdAt"].as_u64().unwrap_or(0),
                header["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    logs.sort();
    logs.first().expect("a session was stored").1.clone()
}

#[tokio::test]
async fn every_readme_example_runs() {
    let examples = readme_examples();
    let listed: Vec<&str> = EXAMPLES.iter().map(|(line, _)| *line).collect();
    for example in &examples {
        assert!(
            listed.contains(&example.as_str()),
            "README example not run by any test; add it to EXAMPLES in {}: {example}",
            file!()
        );
    }
    for line in &listed {
        assert!(
            examples.iter().any(|e| e == line),
            "EXAMPLES lists a line README.md no longer has: {line}"
        );
    }

    let replies = (0..40).map(|i| {
        ScriptedReply::from(
            SseReply::new()
                .text(&format!("answer {i}"))
                .finish("stop", Some(WireUsage::default())),
        )
    });
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    workspace(cwd.path());
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_dsh")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (line, what) in EXAMPLES {
        let script = line
            .replace("http://127.0.0.1:8000/v1", &provider.base_url())
            .replace("--port 3080", "--port 0");
        let script = if script.contains("0b1c") {
            let id = first_session_id(home.path());
            script.replace("0b1c", &id[..8])
        } else {
            script
        };
        let mut cmd = Command::new("sh");
        cmd.env_clear()
            .env("PATH", &path)
            .env("HOME", home.path())
            .env("DSH_HOME", home.path())
            .env("DEEPSEEK_BASE_URL", provider.base_url())
            .current_dir(cwd.path())
            .stdin(Stdio::null());
        match what {
            Example::Skip(why) => {
                eprintln!("not run here: {line} ({why})");
                continue;
            }
            Example::Run => {
                cmd.args(["-c", &script]);
                let out = output(cmd).await;
                let (stdout, stderr) = text(&out);
                assert!(
                    out.status.success(),
                    "README example failed: {line}\nstdout: {stdout}\nstderr: {stderr}"
                );
                let head: String = stdout.chars().take(160).collect();
                eprintln!("ran: {script}\n  {head}");
            }
            Example::Serve => {
                cmd.args(["-c", &format!("exec {script}")]);
                serve(cmd, line).await;
            }
        }
    }
    // The pipe example attached the diff after the task.
    let piped = provider
        .requests()
        .into_iter()
        .map(|request| request.body.to_string())
        .find(|body| body.contains("review this change"))
        .expect("the pipe example reached the provider");
    assert!(piped.contains("fn two()"), "the diff was not sent: {piped}");
    assert!(cwd.path().join("session.md").is_file());
}

/// Starts a server example, waits for its address on stdout or stderr, then stops it.
async fn serve(mut cmd: Command, line: &str) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let found = async {
        let (mut stdout, mut stderr) = (stdout, stderr);
        let mut seen = String::new();
        loop {
            let next = tokio::select! {
                line = stdout.next_line() => line,
                line = stderr.next_line() => line,
            };
            match next {
                Ok(Some(text)) if text.contains("http://127.0.0.1:") => return Ok(()),
                Ok(Some(text)) => seen.push_str(&format!("{text}\n")),
                _ => return Err(seen),
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(30), found).await {
        Ok(Ok(())) => {}
        Ok(Err(seen)) => panic!("README example stopped before serving: {line}\n{seen}"),
        Err(_) => panic!("README example printed no address within 30 s: {line}"),
    }
    child.kill().await.unwrap();
}
