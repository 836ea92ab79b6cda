//! One scripted session, every front end (issue 39): a write to a protected file the user
//! approves, an escalated `bash` call the user rejects, a child cut at its output limit, an
//! undo and a model switch. Driven live through `dsh web` (its SSE stream's view events are the
//! stored log's, `dsh sessions export --format view`) and live through `dsh acp` (permission
//! requests answered, `/undo`, `session/set_model`: every card's `_meta.dsh.state` sequence is
//! the stored log's) and live in the TUI (pty: `y`, `n`, `/undo`, `/model`); after the fact,
//! ACP's `session/load` gives the same states and the TUI's `dsh resume` shows the approvals,
//! the undo and the model switch in order. `dsh run --json` is held to the same rule in
//! `view_cli` (headless: its approvals are refused).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
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

/// A `dsh acp` process driven over its stdio: requests, their answers, and every
/// `session/update` on the way; permission requests are answered by `decide` (the tool call id
/// to an option id).
struct Acp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
    updates: Vec<Value>,
    decide: fn(&str) -> &'static str,
}

impl Acp {
    fn start(home: &Path, cwd: &Path, base_url: &str, decide: fn(&str) -> &'static str) -> Acp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("acp")
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("DSH_HOME", home)
            .env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-four-views")
            .env("DSH_PERMISSION_MODE", "workspace-write")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut acp = Acp {
            child,
            stdin,
            lines,
            next_id: 0,
            updates: Vec::new(),
            decide,
        };
        acp.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        acp
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends request `method` and reads until its answer, which it returns.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(WAIT)
                .expect("dsh acp answered nothing");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["method"] == "session/request_permission" {
                let call = value["params"]["toolCall"]["toolCallId"]
                    .as_str()
                    .unwrap_or("");
                let option = (self.decide)(call);
                let answer = json!({"jsonrpc": "2.0", "id": value["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option}}});
                self.send(&answer);
            } else if value["method"] == "session/update" {
                self.updates.push(value["params"]["update"].clone());
            } else if value["id"] == json!(id) && value.get("method").is_none() {
                assert!(value.get("error").is_none(), "{method}: {value}");
                return value["result"].clone();
            }
        }
    }

    /// The `_meta.dsh.state` of every card update of tool call `call`, in order (a child's
    /// progress on its `subagent` card is no card update: it has no state).
    fn card_states(&self, call: &str) -> Vec<String> {
        self.updates
            .iter()
            .filter(|u| u["toolCallId"] == call)
            .filter_map(|u| u["_meta"]["dsh"]["state"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provider of the scripted session: a protected write, an escalated bash call, a child cut
/// at its output limit, the first turn's answer, then the second turn's.
async fn scripted_provider() -> FakeProvider {
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
    provider
}

/// The cards of the scripted session went through the lifecycles of issue 39's point 1: the
/// approved write pending, awaiting approval, pending, running, done; the rejected escalation
/// denied; the child cut at its output limit failed.
fn assert_lifecycles(views: &[Value]) {
    assert_eq!(
        card_states(views, "w1"),
        ["pending", "awaitingApproval", "pending", "running", "done"]
    );
    assert_eq!(
        card_states(views, "b1"),
        ["pending", "awaitingApproval", "denied"]
    );
    assert_eq!(card_states(views, "s1").last().unwrap(), "failed");
}

/// The view events `dsh sessions export --format view` gives for session `id`.
async fn exported_views(home: &Path, cwd: &Path, id: &str) -> Vec<Value> {
    let mut export = dsh_command(home, cwd);
    export.args(["sessions", "export", id, "--format", "view"]);
    let exported = output(export).await;
    let (stdout, stderr) = text(&exported);
    assert!(exported.status.success(), "{stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The same session driven live through ACP: the permission requests answered (the write
/// allowed, the escalation rejected), `/undo`, a model switch, a second prompt. Every card's
/// `_meta.dsh.state` sequence live is the stored log's, and a `session/load` gives it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_session_through_acp_live_and_loaded() {
    let provider = scripted_provider().await;
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c, u) = (
        home.path().to_path_buf(),
        std::fs::canonicalize(cwd.path()).unwrap(),
        url.clone(),
    );
    let (live, id) = tokio::task::spawn_blocking(move || {
        let decide: fn(&str) -> &'static str = |call| match call {
            "w1" => "allow_once",
            _ => "reject_once",
        };
        let mut acp = Acp::start(&h, &c, &u, decide);
        let session = acp.call("session/new", json!({"cwd": c, "mcpServers": []}));
        let id = session["sessionId"].as_str().unwrap().to_string();
        let prompt =
            |text: &str| json!({"sessionId": id, "prompt": [{"type": "text", "text": text}]});
        let first = acp.call("session/prompt", prompt("do four things"));
        assert_eq!(first["stopReason"], "end_turn", "{first}");
        assert!(
            c.join(".env.sample").exists(),
            "the approved write did not happen"
        );
        acp.call("session/prompt", prompt("/undo"));
        assert!(!c.join(".env.sample").exists(), "the undo kept the file");
        acp.call(
            "session/set_model",
            json!({"sessionId": id, "modelId": "deepseek-v4-pro"}),
        );
        let second = acp.call("session/prompt", prompt("again"));
        assert_eq!(second["stopReason"], "end_turn", "{second}");
        let live: Vec<(String, Vec<String>)> = ["w1", "b1", "s1"]
            .iter()
            .map(|call| (call.to_string(), acp.card_states(call)))
            .collect();
        (live, id)
    })
    .await
    .unwrap();
    let stored = exported_views(home.path(), cwd.path(), &id).await;
    for (call, states) in &live {
        assert_eq!(
            states,
            &card_states(&stored, call),
            "ACP live states of {call}"
        );
    }
    assert_lifecycles(&stored);
    // The undo and the model switch are in the log, as the web's were.
    assert!(stored.iter().any(|v| v["kind"] == "filesUndone"));
    assert!(stored
        .iter()
        .any(|v| v["kind"] == "modelChanged" && v["model"] == "deepseek-v4-pro"));
    let cwd_path = std::fs::canonicalize(cwd.path()).unwrap();
    let loaded = tokio::task::spawn_blocking(move || {
        let mut acp = Acp::start(home.path(), &cwd_path, &url, |_| "reject_once");
        acp.call(
            "session/load",
            json!({"sessionId": id, "cwd": cwd_path, "mcpServers": []}),
        );
        ["w1", "b1", "s1"].map(|call| acp.card_states(call))
    })
    .await
    .unwrap();
    for (i, (call, states)) in live.iter().enumerate() {
        assert_eq!(&loaded[i], states, "ACP loaded states of {call}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_shows_the_same_through_every_front_end() {
    let provider = scripted_provider().await;
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
    assert_lifecycles(&live);

    // Stored: the export of the log is the live stream.
    let stored = exported_views(home.path(), cwd.path(), &id).await;
    assert_eq!(
        live,
        settled(&stored),
        "the web's live view differs from the stored log's"
    );

    // ACP: loading the session gives each card the same states.
    let (home_path, cwd_path) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let (load_url, load_id) = (url.clone(), id.clone());
    let loaded = tokio::task::spawn_blocking(move || {
        let mut acp = Acp::start(&home_path, &cwd_path, &load_url, |_| "reject_once");
        acp.call(
            "session/load",
            json!({"sessionId": load_id, "cwd": cwd_path, "mcpServers": []}),
        );
        ["w1", "b1", "s1"].map(|call| acp.card_states(call))
    })
    .await
    .unwrap();
    for (i, call) in ["w1", "b1", "s1"].iter().enumerate() {
        assert_eq!(
            loaded[i],
            card_states(&stored, call),
            "ACP's states of {call}"
        );
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

/// The same session driven live in the TUI (pty): the write allowed with `y`, the escalation
/// denied with `n`, `/undo`, `/model`, a second prompt. The conversation reads asked, approved,
/// asked, rejected, the undo and the model switch in order, and the stored log's cards went
/// through the same states as with the web and ACP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_session_live_in_the_tui() {
    let provider = scripted_provider().await;
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let all = tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start_env(
            &url,
            &h,
            &c,
            &[],
            &[("DSH_PERMISSION_MODE", "workspace-write")],
        );
        tui.wait_for("Ask dsh anything");
        tui.type_text("do four things\r");
        tui.wait_for("approval needed");
        tui.type_text("y");
        tui.wait_until("the bash call's approval box", |screen| {
            screen.contains("approval needed") && screen.contains("echo escalated")
        });
        tui.type_text("n");
        tui.wait_for("first turn done");
        assert!(
            c.join(".env.sample").exists(),
            "the approved write did not happen"
        );
        // The reply's last words show before its turn has ended: `/undo` during the turn is
        // refused ("a turn is running"), so it is typed again until it runs (a full run under
        // load caught the turn still open).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            tui.type_text("/undo\r");
            tui.wait_until("/undo answered", |screen| {
                screen.contains("were reverted") || screen.contains("a turn is running")
            });
            if tui.contents().contains("were reverted") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the turn never ended");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert!(!c.join(".env.sample").exists(), "the undo kept the file");
        tui.type_text("/model deepseek-v4-pro\r");
        tui.wait_for("model set to deepseek-v4-pro");
        tui.type_text("again\r");
        tui.wait_for("second turn done");
        let (scrollback, screen) = tui.scrollback_and_screen();
        tui.quit();
        scrollback
            .into_iter()
            .chain(screen)
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await
    .unwrap();
    let mut from = 0;
    for text in [
        "approval asked for write",
        "approval approved",
        "approval asked for bash",
        "approval rejected",
        "undo: the file changes of turn 1 were reverted",
        "model: deepseek-v4-pro",
        "second turn done",
    ] {
        let at = all[from..]
            .find(text)
            .unwrap_or_else(|| panic!("`{text}` missing or out of order in:\n{all}"));
        from += at + text.len();
    }
    let id = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .flatten()
        .flat_map(|cwd_dir| std::fs::read_dir(cwd_dir.path()).unwrap().flatten())
        .find_map(|session| {
            let log = std::fs::read_to_string(session.path().join("session.jsonl")).ok()?;
            let header: Value = serde_json::from_str(log.lines().next()?).ok()?;
            Some(header["id"].as_str()?.to_string())
        })
        .expect("the TUI stored its session");
    let stored = exported_views(home.path(), cwd.path(), &id).await;
    assert_lifecycles(&stored);
}
