//! One scripted session, every front end (issue 39): a write to a protected file the user
//! approves, an escalated `bash` call the user rejects, a child cut at its output limit, an
//! undo and a model switch, driven live through `dsh web` with the real binary. What the web
//! stream showed live is what the stored log gives (`dsh sessions export --format view`); ACP's
//! `session/load` of that log gives every card the same states (`_meta.dsh.state`, the card's
//! lifecycle); and the TUI's `dsh resume` shows the approvals, the undo and the model switch
//! in the order they happened. `dsh run --json` is held to the same rule in `view_cli`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_test_support::{FakeProvider, RequestMatch, SseReply, WireUsage};
use serde_json::{json, Value};

use crate::common::{dsh_command, output, text};
use crate::tui_harness::Tui;
use crate::view_cli::{call, card_states, reply};
use crate::web_cli::launch_as;

const CHILD_PROMPT: &str = "CHILD THAT RUNS LONG";
const WAIT: Duration = Duration::from_secs(60);

/// View events without the streamed deltas (a reconnecting client gets the whole messages).
fn settled(views: &[Value]) -> Vec<Value> {
    views
        .iter()
        .filter(|v| !v["kind"].as_str().unwrap_or("").ends_with("Delta"))
        .cloned()
        .collect()
}

/// The web API of one running `dsh web`.
struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    /// Answers approval `approval` of session `id` as soon as its question was streamed (the
    /// broker holds a question before it is logged, so it is waiting by then).
    async fn approve(&self, id: &str, approval: &str, decision: &str) {
        self.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": decision}),
        )
        .await;
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "POST {path}: {status} {answer}");
        answer
    }
}

/// The SSE stream of a session: its view events so far.
struct Views {
    body: reqwest::Response,
    pending: String,
    views: Vec<Value>,
}

impl Views {
    /// Reads until a view event for which `done` holds; returns it.
    async fn until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        let mut checked = 0;
        loop {
            if let Some(found) = self.views[checked..].iter().find(|v| done(v)) {
                return found.clone();
            }
            checked = self.views.len();
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.body.chunk())
                .await
                .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}: {:#?}", self.views))
                .unwrap()
                .expect("the stream ended");
            self.pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                if block.lines().any(|l| l == "event: view") {
                    let data: String = block
                        .lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .collect();
                    self.views.push(serde_json::from_str(&data).unwrap());
                }
            }
        }
    }
}

/// `dsh acp`'s updates for `session/load` of session `id`.
fn acp_load(home: &std::path::Path, cwd: &std::path::Path, base_url: &str, id: &str) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("acp")
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home)
        .env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-four-views")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (send, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut request = |id: u64, method: &str, params: Value| {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let answer = |id: u64, seen: &mut Vec<Value>| loop {
        let line = lines.recv_timeout(WAIT).expect("dsh acp answered nothing");
        let value: Value = serde_json::from_str(&line).unwrap();
        if value["id"] == json!(id) && value.get("method").is_none() {
            assert!(value.get("error").is_none(), "{value}");
            return;
        }
        seen.push(value);
    };
    let mut seen = Vec::new();
    request(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    answer(1, &mut seen);
    request(
        2,
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    answer(2, &mut seen);
    child.kill().unwrap();
    child.wait().unwrap();
    seen.into_iter()
        .filter(|v| v["method"] == "session/update")
        .map(|v| v["params"]["update"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_shows_the_same_through_every_front_end() {
    let provider = FakeProvider::start(vec![
        call(
            "w1",
            "write",
            json!({"file_path": ".env.sample", "content": "TOKEN_NAME=x\n"}),
        ),
        call(
            "b1",
            "bash",
            json!({
                "command": "echo escalated",
                "description": "needs more",
                "sandbox_permissions": "danger-full-access",
                "justification": "the test asks for it",
            }),
        ),
        call(
            "s1",
            "subagent",
            json!({"description": "cut short", "prompt": CHILD_PROMPT}),
        ),
        reply("first turn done"),
        reply("second turn done"),
    ])
    .await
    .unwrap();
    provider.route(
        RequestMatch::System("You name coding-assistant sessions".into()),
        [reply("Four views")],
    );
    provider.route(
        RequestMatch::FirstUser(CHILD_PROMPT.into()),
        [SseReply::new()
            .text("a very long answer that is cut")
            .finish("length", Some(WireUsage::default()))
            .into()],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();

    // Live, through the web API and its SSE stream.
    let mut web = launch_as(home.path(), cwd.path(), &url, "workspace-write").await;
    let api = Api {
        client: reqwest::Client::new(),
        base: web.base.clone(),
        token: web.token.clone(),
    };
    let created = api
        .post("/api/sessions", json!({"prompt": "do four things"}))
        .await;
    let id = created["id"].as_str().unwrap().to_string();
    let response = api
        .client
        .get(format!("{}/api/sessions/{id}/events", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let mut live = Views {
        body: response,
        pending: String::new(),
        views: Vec::new(),
    };
    let asked = |call: &'static str| {
        move |v: &Value| v["kind"] == "approvalRequested" && v["callId"] == call
    };
    let write_asked = live.until("the write's approval", asked("w1")).await;
    api.approve(&id, write_asked["id"].as_str().unwrap(), "allow")
        .await;
    let bash_asked = live.until("the bash call's approval", asked("b1")).await;
    api.approve(&id, bash_asked["id"].as_str().unwrap(), "reject")
        .await;
    live.until("the first turn's end", |v| v["kind"] == "turnEnded")
        .await;
    assert_eq!(
        std::fs::read_to_string(cwd.path().join(".env.sample")).unwrap(),
        "TOKEN_NAME=x\n"
    );
    api.post(&format!("/api/sessions/{id}/undo"), json!({}))
        .await;
    live.until("the undo", |v| v["kind"] == "filesUndone").await;
    assert!(
        !cwd.path().join(".env.sample").exists(),
        "the undo kept the file"
    );
    api.post(
        &format!("/api/sessions/{id}/call"),
        json!({"model": "deepseek-v4-pro"}),
    )
    .await;
    api.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "again"}),
    )
    .await;
    let ends = |v: &Value| v["kind"] == "turnEnded";
    live.until("the second turn's end", |v| {
        ends(v) && v["turn"] == json!(2)
    })
    .await;
    live.until("the model switch", |v| {
        v["kind"] == "modelChanged" && v["model"] == "deepseek-v4-pro"
    })
    .await;
    web.child.start_kill().unwrap();
    web.child.wait().await.unwrap();

    // Card lifecycles as point 1 of issue 39 names them.
    let live = settled(&live.views);
    assert_eq!(
        card_states(&live, "w1"),
        ["pending", "awaitingApproval", "pending", "running", "done"]
    );
    assert_eq!(
        card_states(&live, "b1"),
        ["pending", "awaitingApproval", "denied"]
    );
    assert_eq!(card_states(&live, "s1").last().unwrap(), "failed");

    // Stored: the export of the log is the live stream.
    let mut export = dsh_command(home.path(), cwd.path());
    export.args(["sessions", "export", &id, "--format", "view"]);
    let exported = output(export).await;
    let (stdout, stderr) = text(&exported);
    assert!(exported.status.success(), "{stderr}");
    let stored: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        live,
        settled(&stored),
        "the web's live view differs from the stored log's"
    );

    // ACP: loading the session gives each card the same states.
    let (home_path, cwd_path) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let (load_url, load_id) = (url.clone(), id.clone());
    let updates =
        tokio::task::spawn_blocking(move || acp_load(&home_path, &cwd_path, &load_url, &load_id))
            .await
            .unwrap();
    for call in ["w1", "b1", "s1"] {
        let acp: Vec<String> = updates
            .iter()
            .filter(|u| u["toolCallId"] == call)
            .map(|u| u["_meta"]["dsh"]["state"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(acp, card_states(&stored, call), "ACP's states of {call}");
    }

    // The TUI: `dsh resume` shows what happened, in order.
    let (home_path, cwd_path) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start_with(&url, &home_path, &cwd_path, &["resume", &id]);
        let expected = [
            "approval asked for write",
            "approval approved",
            "approval asked for bash",
            "approval rejected",
            "undo: the file changes of turn 1 were reverted",
            "model: deepseek-v4-pro",
            "second turn done",
        ];
        tui.wait_for("second turn done");
        let (scrollback, screen) = tui.scrollback_and_screen();
        let all = scrollback
            .into_iter()
            .chain(screen)
            .collect::<Vec<_>>()
            .join("\n");
        let mut from = 0;
        for text in expected {
            let at = all[from..]
                .find(text)
                .unwrap_or_else(|| panic!("`{text}` missing or out of order in:\n{all}"));
            from += at + text.len();
        }
        tui.quit();
    })
    .await
    .unwrap();
}
