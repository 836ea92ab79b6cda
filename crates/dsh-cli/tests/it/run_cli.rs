//! `dsh run` end to end: the real binary against the fake provider over loopback.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{dsh_command, output as run, session_files};

use dsh_test_support::{
    snapshot_fixtures_dir, FakeProvider, RecordedSession, ScriptedReply, SseReply, WireUsage,
};

fn fixtures() -> PathBuf {
    snapshot_fixtures_dir()
}

struct Env {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            cwd: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, base_url: &str, key: Option<&str>) -> Command {
        let mut cmd = dsh_command(self.home.path(), self.cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", base_url);
        if let Some(key) = key {
            cmd.env("DEEPSEEK_API_KEY", key);
        }
        cmd
    }
}

#[tokio::test]
async fn replays_recorded_text_turn_and_prints_only_the_final_text() {
    let recording = RecordedSession::load(&fixtures().join("text-turn")).unwrap();
    let provider = FakeProvider::start(recording.replies()).await.unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), Some("sk-test-secret-123"));
    cmd.args([
        "run",
        "Reply with exactly the word: PONG. Do not use any tools.",
    ]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PONG\n");
    assert!(!stderr.contains("sk-test-secret-123"));

    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "deepseek-v4-flash");
    // A session that never entered plan mode tells the model nothing about it.
    assert!(
        !body["messages"].to_string().contains("plan mode"),
        "a plan-mode notice reached a plain session: {}",
        body["messages"]
    );
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-test-secret-123")
    );

    let files = session_files(env.home.path());
    assert_eq!(files.len(), 1);
    let log = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        !log.contains("sk-test-secret-123"),
        "the key reached the log"
    );
    assert!(log.contains("\"turn/end\""));
    assert!(log.contains("\"completed\""));
}

/// A local OpenAI-compatible server needs no dummy key: with `DEEPSEEK_BASE_URL` pointing
/// away from DeepSeek's API and no key set, calls go without `Authorization` (issue 41).
#[tokio::test]
async fn another_endpoint_without_a_key_is_called_without_authorization() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("keyless ok")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("keyless again")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), None);
    cmd.args(["run", "hi"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "keyless ok\n");
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("authorization"), None);
    // `dsh models` lists such a server's models without a key too.
    let mut cmd = env.command(&provider.base_url(), None);
    cmd.arg("models");
    let out = run(cmd).await;
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("MISSING_CREDENTIAL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn key_from_dotenv_file_in_home() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("hello from env file")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(
        env.home.path().join(".env"),
        "DEEPSEEK_API_KEY=sk-from-file\n",
    )
    .unwrap();
    let mut cmd = env.command(&provider.base_url(), None);
    cmd.args(["run", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        provider.requests()[0].header("authorization"),
        Some("Bearer sk-from-file")
    );
}

#[tokio::test]
async fn retries_are_visible_and_errors_exit_one_with_code() {
    let provider = FakeProvider::start([
        ScriptedReply::http_error(500, "upstream exploded"),
        ScriptedReply::http_error(401, "bad key"),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--verbose", "hi"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("dsh: retry 1"), "{stderr}");
    assert!(stderr.contains("dsh: AUTH:"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn json_mode_prints_events_and_a_result_line() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new().reasoning("think").text("answer").finish(
            "stop",
            Some(WireUsage {
                prompt_tokens: 3000,
                prompt_cache_hit_tokens: 2816,
                completion_tokens: 10,
                reasoning_tokens: 4,
            }),
        ),
    )])
    .await
    .unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--json", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() > 5);
    assert!(lines[..lines.len() - 1].iter().all(|l| {
        (l["type"] == "session_event" && l["event"]["type"].is_string())
            || (l["type"] == "view" && l["event"]["kind"].is_string())
    }));
    // The view events (docs/protocol.md) come with the session events they derive from.
    let kinds: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "view")
        .filter_map(|l| l["event"]["kind"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"turnStarted"), "{kinds:?}");
    for kind in ["userMessage", "modelChanged", "assistantMessage", "usage"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    let ended = lines
        .iter()
        .rfind(|l| l["type"] == "view" && l["event"]["kind"] == "turnEnded")
        .unwrap();
    assert_eq!(ended["event"]["state"], "completed");
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["output"], "answer");
    assert_eq!(result["reason"]["kind"], "completed");
    assert_eq!(result["usage"]["inputTokens"], 184);
    assert_eq!(result["usage"]["cacheReadTokens"], 2816);
    assert!(result["costUsd"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn max_tokens_in_the_middle_of_a_tool_call_runs_nothing_and_exits_one() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("Writing the file now.")
            .tool_call(
                0,
                "call_w",
                "write",
                "{\"file_path\": \"out.txt\", \"content\": \"hal",
            )
            .finish("length", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--permission", "danger-full-access", "write it"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("dsh: MAX_TOKENS:") && stderr.contains("output token limit"),
        "{stderr}"
    );
    assert!(
        !env.cwd.path().join("out.txt").exists(),
        "a truncated call ran"
    );
    let log = std::fs::read_to_string(&session_files(env.home.path())[0]).unwrap();
    assert!(
        !log.contains("\"tool/call\""),
        "a truncated call was dispatched"
    );
    assert!(log.contains("\"max-tokens\""));
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn sessions_show_cache_reports_every_request() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "c1", "glob", "{\"pattern\": \"*\"}")
                .finish(
                    "tool_calls",
                    Some(WireUsage {
                        prompt_tokens: 1000,
                        prompt_cache_hit_tokens: 0,
                        completion_tokens: 5,
                        reasoning_tokens: 0,
                    }),
                ),
        ),
        ScriptedReply::from(SseReply::new().text("done").finish(
            "stop",
            Some(WireUsage {
                prompt_tokens: 1100,
                prompt_cache_hit_tokens: 990,
                completion_tokens: 5,
                reasoning_tokens: 0,
            }),
        )),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "list files"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = session_files(env.home.path()).remove(0);
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["sessions", "show", "--cache"]).arg(&file);
    let out = run(cmd).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].contains("(first request)"), "{table}");
    assert!(
        rows[1].contains("yes") && rows[1].contains("90%"),
        "{table}"
    );
}

#[tokio::test]
async fn the_shipped_example_replays_without_differences() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello");
    let env = Env::new();
    let mut cmd = env.command("http://127.0.0.1:9", None);
    cmd.arg("replay")
        .arg(&example)
        .arg("--cwd")
        .arg(env.cwd.path());
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no differences"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(env.cwd.path().join("hello.txt")).unwrap(),
        "Hello from dsh! Have a great day.\n"
    );
    // The replay's session is kept apart: `sessions list --all` shows the user's sessions
    // only (issue 41), and the path the replay printed opens it.
    assert!(session_files(env.home.path()).is_empty());
    let replayed = session_files(&env.home.path().join("replays"));
    assert_eq!(replayed.len(), 1);
    assert!(
        stdout.contains(&replayed[0].display().to_string()),
        "{stdout}"
    );
    let mut list = env.command("http://127.0.0.1:9", None);
    list.args(["sessions", "list", "--all"]);
    let listed = String::from_utf8_lossy(&run(list).await.stdout).into_owned();
    assert!(!listed.contains("hello.txt"), "{listed}");
    let mut show = env.command("http://127.0.0.1:9", None);
    show.args(["sessions", "show"]).arg(&replayed[0]);
    let shown = run(show).await;
    assert!(shown.status.success());
    assert!(String::from_utf8_lossy(&shown.stdout).contains("hello.txt"));
}

/// A background job that is still running when the turn ends keeps `dsh run` waiting; when it
/// finishes it wakes the agent for one more turn, whose answer is what stdout gets
/// (docs/agent.md, "Wake-ups"). The job waits for a file the test creates only after the
/// first turn has ended, so it cannot finish inside that turn however slow the machine is.
#[tokio::test]
async fn a_background_job_finishing_after_the_turn_wakes_dsh_run() {
    let env = Env::new();
    let go = env.cwd.path().join("go");
    let started = serde_json::json!({
        "command": format!(
            "while [ ! -e {} ]; do sleep 0.05; done; echo job-finished-marker",
            go.display()
        ),
        "description": "A job that outlives the turn",
        "run_in_background": true,
    });
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_bg", "bash", &started.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("Started it; waiting.")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("The job printed its marker.")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--permission", "danger-full-access", "start the job"]);
    let running = tokio::spawn(run(cmd));
    // An async wait: the fake provider serves from this test's runtime.
    let first_turn_ended = || {
        session_files(env.home.path()).first().is_some_and(|file| {
            std::fs::read_to_string(file).is_ok_and(|log| log.contains("\"turn/end\""))
        })
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !first_turn_ended() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let turn_ended = first_turn_ended();
    std::fs::write(&go, "").unwrap();
    let out = running.await.unwrap();
    assert!(turn_ended, "the first turn never ended");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    let log = std::fs::read_to_string(&session_files(env.home.path())[0]).unwrap();
    let requests = provider.requests();
    assert_eq!(
        requests.len(),
        3,
        "the finished job did not wake the agent: {log}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The job printed its marker.\n"
    );
    let woken = requests[2].body.to_string();
    assert!(
        woken.contains("bash-1") && woken.contains("job-finished-marker"),
        "the wake turn does not carry the job's end: {woken}"
    );
    assert!(log.contains("background-jobs"), "the wake is not logged");
}

/// A provider whose certificate only a private authority signed (a company gateway) is reached
/// over HTTPS once `SSL_CERT_FILE` names that authority; the session's preconnect opened the
/// TLS connection the call then used (docs/providers.md, "Extra root certificates" and "Shared
/// connections and preconnect").
#[tokio::test]
async fn https_through_a_private_authority_with_ssl_cert_file() {
    let provider = FakeProvider::start_tls([ScriptedReply::from(
        SseReply::new()
            .text("over tls")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let env = Env::new();
    let roots = env.home.path().join("gateway-ca.pem");
    std::fs::write(&roots, dsh_test_support::TEST_CA_PEM).unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-test-secret-123"));
    cmd.env("SSL_CERT_FILE", &roots).args(["run", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "over tls\n");
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.requests),
        (1, 1),
        "{events:?}"
    );
    assert_eq!(provider.head_requests()[0].header("authorization"), None);

    // A file that holds no certificate stops the run before any request, naming the file.
    let bogus = env.home.path().join("not-a-ca.pem");
    std::fs::write(&bogus, "hello\n").unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-test-secret-123"));
    cmd.env("SSL_CERT_FILE", &bogus).args(["run", "hi"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not-a-ca.pem"), "{stderr}");
    assert_eq!(provider.events().requests, 1);
}

/// Which authorities dsh trusts comes from its own environment only: `SSL_CERT_FILE` in the
/// project's `.env` or in `$DSH_HOME/.env` is not read. Each names a file that does not exist,
/// which stops a run whose environment names it (`https_through_a_private_authority_...`); here
/// the run goes through (docs/SECURITY.md, "Web UI and providers").
#[tokio::test]
async fn env_files_cannot_change_the_trusted_authorities() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("plain")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(
        env.cwd.path().join(".env"),
        "SSL_CERT_FILE=/nonexistent/ca.pem\n",
    )
    .unwrap();
    std::fs::write(
        env.home.path().join(".env"),
        "SSL_CERT_FILE=/nonexistent/home-ca.pem\n",
    )
    .unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-test-secret-123"));
    cmd.args(["run", "hi"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("nonexistent"), "{stderr}");
}

/// `dsh replay` composes its agent as a live run is composed, with only the provider
/// replaced: a session whose `bash` ran under bubblewrap replays under bubblewrap with no
/// differences, no key and no network (issue 39; before, replay built its own agent without a
/// sandbox, and the recorded call failed with "no process sandbox is available").
#[tokio::test]
async fn a_session_recorded_under_bubblewrap_replays_under_bubblewrap() {
    let has_bwrap = std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_bwrap {
        eprintln!("NOT RUN: needs bubblewrap (.ci/run installs it)");
        return;
    }
    let env = Env::new();
    let call = serde_json::json!({
        "command": "echo recorded > made.txt && cat made.txt",
        "description": "write a file",
    });
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_1", "bash", &call.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("Wrote it.")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.env("DSH_SANDBOX", "bubblewrap").args([
        "run",
        "--permission",
        "workspace-write",
        "make the file",
    ]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recorded = session_files(env.home.path());
    assert_eq!(recorded.len(), 1, "{recorded:?}");

    let replay_cwd = tempfile::tempdir().unwrap();
    let mut cmd = env.command("http://127.0.0.1:9", None);
    cmd.env("DSH_SANDBOX", "bubblewrap")
        .arg("replay")
        .arg(&recorded[0])
        .arg("--cwd")
        .arg(replay_cwd.path());
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no differences"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(replay_cwd.path().join("made.txt")).unwrap(),
        "recorded\n"
    );
    // The replayed session ran its command in the sandbox a live run gets.
    let replayed: Vec<PathBuf> = session_files(&env.home.path().join("replays"));
    let log = std::fs::read_to_string(&replayed[0]).unwrap();
    assert!(
        log.lines()
            .any(|line| line.contains("\"sandbox/mode\"") && line.contains("\"bubblewrap\"")),
        "{log}"
    );
}

/// Seeding the replay's workspace from a recording's `workspace/` follows no link: a crafted
/// bundle's `workspace/k -> <a secret file>` is made again as the same link, never a copy of
/// the file (fourth adversarial review: the copy put the victim's `.env` and dsh's own
/// environment into the workspace the replayed commands read).
#[tokio::test]
async fn replay_seeds_its_workspace_without_following_links() {
    let env = Env::new();
    let bundle = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello");
    std::fs::copy(
        example.join("session.jsonl"),
        bundle.path().join("session.jsonl"),
    )
    .unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join(".env");
    std::fs::write(&secret, "OTHER_API_KEY=sk-replay-secret-0123456789\n").unwrap();
    let workspace = bundle.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::os::unix::fs::symlink(&secret, workspace.join("k")).unwrap();
    std::fs::write(workspace.join("plain.txt"), "plain\n").unwrap();
    let mut cmd = env.command("http://127.0.0.1:9", None);
    cmd.arg("replay").arg(bundle.path());
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .find_map(|line| line.strip_prefix("working directory: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let dir = Path::new(dir);
    assert_eq!(
        std::fs::read_to_string(dir.join("plain.txt")).unwrap(),
        "plain\n"
    );
    let link = std::fs::symlink_metadata(dir.join("k")).unwrap();
    assert!(link.file_type().is_symlink(), "the link was followed");
    assert_eq!(std::fs::read_link(dir.join("k")).unwrap(), secret);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `git diff | dsh run "review this change"` sends both: the task, then the piped text as a
/// fenced block (issue 41: only the argument was sent).
#[tokio::test]
async fn piped_input_is_sent_after_the_task_given_as_argument() {
    let env = Env::new();
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("Looks fine.")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "review this change"]);
    let out = crate::common::output_with_input(cmd, "diff --git a/x b/x\n+added line\n").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    let body = String::from_utf8_lossy(&requests.last().unwrap().raw_body).into_owned();
    assert!(body.contains("review this change"), "{body}");
    assert!(body.contains("Input piped to dsh run"), "{body}");
    assert!(body.contains("+added line"), "{body}");
}

/// `dsh run -v` shows each call's summary, not the markup the model reads (`read`'s
/// `<content>`), and a command that exited non-zero as failed (issue 41).
#[tokio::test]
async fn verbose_progress_shows_summaries_and_a_failed_command_as_failed() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "c1", "read", "{\"file_path\": \"notes.txt\"}")
                .tool_call(
                    1,
                    "c2",
                    "bash",
                    "{\"command\": \"echo broken; exit 1\", \"description\": \"fail\"}",
                )
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("done")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(env.cwd.path().join("notes.txt"), "one\ntwo\n").unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "-v", "--color", "never", "look"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("<content>"), "{stderr}");
    assert!(!stderr.contains("<path>"), "{stderr}");
    assert!(stderr.contains("-> read notes.txt"), "{stderr}");
    assert!(stderr.contains("   done (2 lines"), "{stderr}");
    assert!(stderr.contains("   failed (exit 1): broken"), "{stderr}");
}

/// `dsh run -i shot.png` and `@shot.png` in the task attach images after the task (issue 42
/// point 2), for a model that takes them; a text-only model, a missing file or `--plan` with an
/// image stop the run before a session opens or anything is sent.
#[tokio::test]
async fn images_attach_to_a_headless_task_for_a_model_that_takes_them() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("a red square")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let env = Env::new();
    std::fs::write(
        env.cwd.path().join("shot.png"),
        dsh_test_support::images::RED_PNG,
    )
    .unwrap();
    std::fs::write(
        env.cwd.path().join("other.png"),
        dsh_test_support::images::RED_PNG,
    )
    .unwrap();
    let refused = |args: &[&str]| {
        let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
        cmd.arg("run").args(args);
        cmd
    };
    for (args, needle) in [
        (&["-i", "shot.png", "what is it"][..], "UNSUPPORTED_CONTENT"),
        (
            &[
                "--model",
                "deepseek-v4-flash-vision-exp",
                "-i",
                "nope.png",
                "x",
            ][..],
            "IMAGE: cannot attach",
        ),
        (
            &[
                "--model",
                "deepseek-v4-flash-vision-exp",
                "--plan",
                "-i",
                "shot.png",
                "x",
            ][..],
            "--plan takes a task in words only",
        ),
    ] {
        let out = run(refused(args)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert!(
        provider.requests().is_empty(),
        "a refused run sent something"
    );
    assert!(
        session_files(env.home.path()).is_empty(),
        "a refused run opened a session"
    );

    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args([
        "run",
        "--model",
        "deepseek-v4-flash-vision-exp",
        "-i",
        "shot.png",
        "compare with @other.png",
    ]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a red square\n");
    let body = provider.requests()[0].body.to_string();
    assert_eq!(
        body.matches(dsh_test_support::images::RED_PNG_BASE64)
            .count(),
        2,
        "both images are sent"
    );
    assert!(body.contains("compare with @other.png"), "{body}");
}

/// `--append-system-prompt TEXT|@FILE` ends the system prompt with the text, after its stable
/// part, which stays byte for byte what a run without it sends (issue 42 point 3); a file that
/// cannot be read stops the run before anything is sent.
#[tokio::test]
async fn append_system_prompt_ends_the_system_prompt_and_keeps_its_prefix() {
    let reply = || {
        ScriptedReply::from(
            SseReply::new()
                .text("ok")
                .finish("stop", Some(WireUsage::default())),
        )
    };
    let provider = FakeProvider::start([reply(), reply(), reply()])
        .await
        .unwrap();
    let env = Env::new();
    std::fs::write(env.cwd.path().join("extra.md"), "Answer in French.\n").unwrap();
    let run_with = |extra: &[&str]| {
        let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
        cmd.arg("run").args(extra).arg("hi");
        cmd
    };
    for extra in [
        &[][..],
        &["--append-system-prompt", "Always cite file:line."][..],
        &["--append-system-prompt", "@extra.md"][..],
    ] {
        let out = run(run_with(extra)).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run(run_with(&["--append-system-prompt", "@missing.md"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("APPEND_SYSTEM_PROMPT"));
    let systems: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(systems.len(), 3, "the refused run sent nothing");
    assert!(
        systems[1].starts_with(&systems[0]),
        "the stable prefix changed"
    );
    assert!(
        systems[1].ends_with("Always cite file:line."),
        "{}",
        systems[1]
    );
    assert!(systems[2].starts_with(&systems[0]));
    assert!(systems[2].ends_with("Answer in French."), "{}", systems[2]);
    // Logged with the system prompt, so a resumed or exported session shows it.
    let logged: String = session_files(env.home.path())
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert!(logged.contains("Always cite file:line."));
}

/// `--ephemeral` stores nothing: the session lives in a private temporary folder removed when
/// the run ends; `--cd` (and `-C`) is `--cwd` (issue 42 point 3).
#[tokio::test]
async fn an_ephemeral_run_stores_nothing_and_cd_names_the_directory() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("gone")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("kept")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(env.cwd.path().join("sub")).unwrap();
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.env("TMPDIR", tmp.path())
        .args(["run", "--ephemeral", "--cd", "sub", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "gone\n");
    assert!(
        session_files(env.home.path()).is_empty(),
        "an ephemeral run stored its session"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the temporary store outlived the run"
    );
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--ephemeral", "--continue", "x"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2), "clap refuses the pair");
    // `-C sub`: the stored session's working directory is the subfolder.
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "-C", "sub", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&session_files(env.home.path())[0]).unwrap();
    let header: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(
        header["cwd"].as_str().unwrap().ends_with("/sub"),
        "{header}"
    );
}

/// `--allowed-tools` offers the model only the tools it names (patterns with `*` too) and
/// `--disallowed-tools` never offers those it names (issue 42 point 3); a call of a tool left
/// out fails as a call of an unknown tool.
#[tokio::test]
async fn allowed_and_disallowed_tools_decide_what_the_model_is_offered() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("one")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .tool_call(
                    0,
                    "c1",
                    "bash",
                    "{\"command\": \"echo hidden\", \"description\": \"x\"}",
                )
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("two")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let names = |body: &serde_json::Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
            .collect()
    };
    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args(["run", "--allowed-tools", "read, glob,job_*", "hi"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut offered = names(&provider.requests()[0].body);
    offered.sort();
    assert_eq!(
        offered,
        ["glob", "job_kill", "job_list", "job_output", "read"]
    );

    let mut cmd = env.command(&provider.base_url(), Some("sk-x"));
    cmd.args([
        "run",
        "--disallowed-tools",
        "bash",
        "--disallowed-tools",
        "subagent*",
        "go",
    ]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    let offered = names(&requests[1].body);
    assert!(offered.contains(&"read".to_string()), "{offered:?}");
    for hidden in ["bash", "subagent", "subagent_fork"] {
        assert!(!offered.contains(&hidden.to_string()), "{offered:?}");
    }
    // The model called `bash` anyway: the call failed, nothing ran.
    let result = requests[2].body["messages"].to_string();
    assert!(!result.contains("hidden\\n"), "{result}");
    assert!(result.contains("bash"), "{result}");
}
