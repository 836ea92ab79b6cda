//! `dsh mcp-server` end to end: the real binary serving MCP on stdin/stdout against the fake
//! provider. A raw JSON-RPC client (handshake, tool schemas, a call with progress, cancellation,
//! bad arguments, unknown sessions, concurrent calls, presets), and dsh's own MCP client: a
//! `dsh run` whose configured server `inner` is `dsh mcp-server`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use dsh_session::{load_file, Event, TurnEndReason};
use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, StreamEnd, WireUsage};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::common::{dsh_command, output, session_files, text, text_reply};

/// How long one message from the server may take.
const WAIT: Duration = Duration::from_secs(30);

fn call_reply(id: &str, tool: &str, args: Value) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .tool_call(0, id, tool, &args.to_string())
            .finish("tool_calls", Some(WireUsage::default())),
    )
}

/// `dsh mcp-server` under a raw JSON-RPC client. Every line it writes on stdout must be a
/// JSON-RPC message.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Notifications read while waiting for responses.
    notifications: Vec<Value>,
    /// Responses read while waiting for another one.
    responses: Vec<Value>,
}

impl Server {
    /// Starts the server in `cwd` with `home` as `$DSH_HOME` and completes the handshake.
    async fn start(home: &Path, cwd: &Path, base_url: &str, args: &[&str]) -> Server {
        let mut cmd = dsh_command(home, cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-mcp-server-secret-77")
            .arg("mcp-server")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut server = Server {
            child,
            stdin,
            lines,
            next_id: 1,
            notifications: Vec::new(),
            responses: Vec::new(),
        };
        let init = server
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-test-client", "version": "0"}
                }),
            )
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "dsh", "{init}");
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        server
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        server
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request; returns its id.
    async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// The next message; fails the test on a line that is not JSON-RPC.
    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("the server did not answer in time")
            .unwrap()
            .expect("the server closed stdout");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("stdout carried a line that is not JSON ({err}): {line}"));
        assert_eq!(value["jsonrpc"], "2.0", "not JSON-RPC: {line}");
        value
    }

    /// The response to request `id`, keeping what else arrives meanwhile.
    async fn response(&mut self, id: u64) -> Value {
        if let Some(i) = self.responses.iter().position(|r| r["id"] == id) {
            return self.responses.remove(i);
        }
        loop {
            let message = self.read().await;
            if message.get("method").is_some() && message.get("id").is_none() {
                self.notifications.push(message);
            } else if message["id"] == id {
                return message;
            } else {
                self.responses.push(message);
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.response(id).await
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// Closes stdin and waits for the server to exit.
    async fn close(self) -> std::process::ExitStatus {
        let Server {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        tokio::time::timeout(WAIT, child.wait())
            .await
            .expect("the server did not exit after stdin closed")
            .unwrap()
    }
}

/// The text of a tool result's content items, joined by newlines.
fn content_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"))
        .iter()
        .filter_map(|item| item["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
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
async fn lists_both_tools_and_answers_a_call_with_progress() {
    let provider = FakeProvider::start([
        call_reply(
            "call_0",
            "bash",
            json!({"command": "echo hello > note.txt", "description": "write a note"}),
        ),
        text_reply("the note is written"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), cwd.path(), &provider.base_url(), &[]).await;

    let listed = server.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["dsh", "dsh-reply"], "{listed}");
    let start = &tools[0]["inputSchema"];
    assert_eq!(start["required"], json!(["prompt"]), "{start}");
    for option in [
        "model",
        "effort",
        "preset",
        "cwd",
        "append_system_prompt",
        "allowed_tools",
    ] {
        assert!(
            start["properties"][option]["description"].is_string(),
            "{option}: {start}"
        );
    }
    assert_eq!(
        tools[1]["inputSchema"]["required"],
        json!(["session_id", "prompt"])
    );

    let id = server
        .send_request(
            "tools/call",
            json!({
                "name": "dsh",
                "arguments": {"prompt": "write a note"},
                "_meta": {"progressToken": "tok-1"}
            }),
        )
        .await;
    let response = server.response(id).await;
    let result = &response["result"];
    assert_ne!(result["isError"], true, "{response}");
    let answer = content_text(result);
    assert!(answer.starts_with("the note is written"), "{answer}");
    let session_id = result["structuredContent"]["sessionId"].as_str().unwrap();
    assert!(answer.contains(session_id), "{answer}");
    assert_eq!(result["structuredContent"]["stop"], "completed", "{result}");
    assert!(result["structuredContent"]["usage"]["requests"].is_number());
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("note.txt")).unwrap(),
        "hello\n"
    );

    // Progress arrived under the token, increasing, naming the step and the command.
    let progress: Vec<&Value> = server
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| &n["params"])
        .collect();
    assert!(progress.iter().all(|p| p["progressToken"] == "tok-1"));
    let messages: Vec<&str> = progress
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(messages.contains(&"step 1"), "{messages:?}");
    assert!(
        messages.iter().any(|m| m.contains("echo hello > note.txt")),
        "{messages:?}"
    );
    let values: Vec<f64> = progress
        .iter()
        .filter_map(|p| p["progress"].as_f64())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");

    // The session is logged like a `dsh run` session: listed, and free of the key.
    let status = server.close().await;
    assert!(status.success());
    let files = session_files(home.path());
    assert_eq!(files.len(), 1);
    let log = std::fs::read_to_string(&files[0]).unwrap();
    assert!(!log.contains("sk-mcp-server-secret-77"));
    let mut list = dsh_command(home.path(), cwd.path());
    list.args(["sessions", "list"]);
    let (listed, _) = text(&output(list).await);
    assert!(listed.contains(&session_id[..8]), "{listed}");
}

#[tokio::test]
async fn a_reply_continues_the_session_and_bad_calls_are_errors_not_crashes() {
    let provider = FakeProvider::start([text_reply("first answer"), text_reply("second answer")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), cwd.path(), &provider.base_url(), &[]).await;

    // Bad arguments: JSON-RPC errors, and the server goes on.
    let wrong_type = server.call("dsh", json!({"prompt": 5})).await;
    assert_eq!(wrong_type["error"]["code"], -32602, "{wrong_type}");
    let message = wrong_type["error"]["message"].as_str().unwrap();
    assert!(message.contains("invalid arguments for `dsh`"), "{message}");
    let unknown = server
        .call("dsh", json!({"prompt": "x", "colour": "red"}))
        .await;
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{unknown}"
    );
    let missing = server.call("dsh-reply", json!({"prompt": "x"})).await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session_id"),
        "{missing}"
    );
    let no_tool = server.call("dsh-please", json!({})).await;
    assert!(
        no_tool["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no tool `dsh-please`"),
        "{no_tool}"
    );
    let bad_preset = server
        .call("dsh", json!({"prompt": "x", "preset": "root"}))
        .await;
    assert_eq!(bad_preset["result"]["isError"], true, "{bad_preset}");
    assert!(content_text(&bad_preset["result"]).contains("unknown permission preset `root`"));

    // An unknown session, or a path instead of an id: a clear tool error.
    let ghost = server
        .call(
            "dsh-reply",
            json!({"session_id": "0badc0de-0000-4000-8000-000000000000", "prompt": "hi"}),
        )
        .await;
    assert_eq!(ghost["result"]["isError"], true, "{ghost}");
    let ghost_text = content_text(&ghost["result"]);
    assert!(
        ghost_text.starts_with("NOT_FOUND: no session `0badc0de-0000-4000-8000-000000000000`"),
        "{ghost_text}"
    );
    let path = server
        .call(
            "dsh-reply",
            json!({"session_id": "/etc/passwd", "prompt": "hi"}),
        )
        .await;
    assert!(
        content_text(&path["result"]).contains("is not a session id"),
        "{path}"
    );
    assert!(
        provider.requests().is_empty(),
        "a bad call reached the model"
    );

    let first = server
        .call("dsh", json!({"prompt": "first question"}))
        .await;
    let session_id = first["result"]["structuredContent"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(content_text(&first["result"]).starts_with("first answer"));
    let second = server
        .call(
            "dsh-reply",
            json!({"session_id": session_id, "prompt": "second question"}),
        )
        .await;
    assert_ne!(second["result"]["isError"], true, "{second}");
    assert!(content_text(&second["result"]).starts_with("second answer"));
    assert_eq!(
        second["result"]["structuredContent"]["sessionId"],
        session_id.as_str()
    );
    assert_eq!(second["result"]["structuredContent"]["turn"], 2);
    // The reply's request carries the first turn.
    let requests = provider.requests();
    let history = requests[1].body["messages"].to_string();
    assert!(history.contains("first question") && history.contains("first answer"));
    assert!(server.close().await.success());
    assert_eq!(session_files(home.path()).len(), 1);
}

#[tokio::test]
async fn cancelling_a_call_aborts_its_turn() {
    let provider = FakeProvider::start([
        ScriptedReply::from(SseReply::new().text("partial").end(StreamEnd::Stall)),
        text_reply("still serving"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), cwd.path(), &provider.base_url(), &[]).await;
    let id = server
        .send_request(
            "tools/call",
            json!({"name": "dsh", "arguments": {"prompt": "take your time"}}),
        )
        .await;
    tokio::time::timeout(WAIT, provider.wait_until(|e| e.stalls >= 1))
        .await
        .unwrap();
    // While the turn runs, its session is not open to another call.
    let file = session_files(home.path()).remove(0);
    let running_id = load_file(&file).unwrap().header.id;
    let busy = server
        .call(
            "dsh-reply",
            json!({"session_id": running_id, "prompt": "meanwhile"}),
        )
        .await;
    assert_eq!(busy["result"]["isError"], true, "{busy}");
    let busy = content_text(&busy["result"]);
    assert!(busy.contains("is locked by another writer"), "{busy}");
    server
        .send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "user pressed stop"}
        }))
        .await;
    tokio::time::timeout(WAIT, provider.wait_until(|e| e.client_disconnects >= 1))
        .await
        .expect("the model call was not cancelled");
    // The turn was closed as aborted in the log.
    let aborted = async {
        loop {
            if let Ok(log) = load_file(&file) {
                if log
                    .events
                    .iter()
                    .any(|e| matches!(&e.event, Event::TurnEnd(_)))
                {
                    return log.events;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let events = tokio::time::timeout(WAIT, aborted).await.unwrap();
    assert!(matches!(
        last_turn_end(&events),
        TurnEndReason::Aborted { .. }
    ));
    // The server goes on serving.
    let next = server.call("dsh", json!({"prompt": "again"})).await;
    assert!(
        content_text(&next["result"]).starts_with("still serving"),
        "{next}"
    );
    assert!(server.close().await.success());
}

#[tokio::test]
async fn concurrent_calls_run_in_separate_sessions() {
    let provider = FakeProvider::start([]).await.unwrap();
    // The first call's reply waits until the second one has arrived: they overlap.
    provider.route(
        RequestMatch::FirstUser("task one".into()),
        [ScriptedReply::from(
            SseReply::new()
                .delay(Duration::from_millis(1500))
                .text("answer one")
                .finish("stop", Some(WireUsage::default())),
        )],
    );
    provider.route(
        RequestMatch::FirstUser("task two".into()),
        [text_reply("answer two")],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), cwd.path(), &provider.base_url(), &[]).await;
    let one = server
        .send_request(
            "tools/call",
            json!({"name": "dsh", "arguments": {"prompt": "task one"}}),
        )
        .await;
    let two = server
        .send_request(
            "tools/call",
            json!({"name": "dsh", "arguments": {"prompt": "task two"}}),
        )
        .await;
    // The second call answers while the first is still waiting for its model.
    let second = server.response(two).await;
    assert!(server.responses.is_empty(), "the first call answered first");
    let first = server.response(one).await;
    assert!(content_text(&first["result"]).starts_with("answer one"));
    assert!(content_text(&second["result"]).starts_with("answer two"));
    assert_ne!(
        first["result"]["structuredContent"]["sessionId"],
        second["result"]["structuredContent"]["sessionId"]
    );
    assert!(server.close().await.success());
    assert_eq!(session_files(home.path()).len(), 2);
}

#[tokio::test]
async fn a_read_only_call_changes_no_file_and_cannot_widen_the_servers_preset() {
    let (_root, [workspace, outside]) = crate::common::scratch_dirs(["workspace", "outside"]);
    let outside_file = outside.join("escaped.txt");
    let provider = FakeProvider::start([
        call_reply(
            "call_w",
            "write",
            json!({"file_path": "inside.txt", "content": "changed"}),
        ),
        call_reply(
            "call_b",
            "bash",
            json!({
                "command": format!("touch {} inside2.txt", outside_file.display()),
                "description": "touch"
            }),
        ),
        // An escalation needs an approval, which nobody can give headless.
        call_reply(
            "call_e",
            "bash",
            json!({
                "command": "touch inside3.txt",
                "description": "touch",
                "sandbox_permissions": "workspace-write",
                "justification": "the task needs it"
            }),
        ),
        text_reply("tried"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), &workspace, &provider.base_url(), &[]).await;
    let result = server
        .call(
            "dsh",
            json!({"prompt": "change things", "preset": "read-only"}),
        )
        .await;
    assert_ne!(result["result"]["isError"], true, "{result}");
    assert!(!workspace.join("inside.txt").exists());
    assert!(!workspace.join("inside2.txt").exists());
    assert!(!outside_file.exists());
    let file = session_files(home.path()).remove(0);
    let log = std::fs::read_to_string(&file).unwrap();
    assert!(log.contains(r#""preset":"read-only""#), "{log}");
    // Both calls were refused or failed, as under `dsh run --permission read-only`.
    let results: Vec<String> = load_file(&file)
        .unwrap()
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(result) => Some(format!(
                "{:?} {}",
                result.error.as_ref().map(|e| e.code.clone()),
                dsh_test_support::tool_result_text(&result.message)
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].starts_with(r#"Some("PERMISSION_DENIED")"#),
        "{results:?}"
    );
    assert!(
        results[1].contains("Read-only file system") || results[1].starts_with("Some("),
        "{results:?}"
    );
    assert!(
        results[2].starts_with(r#"Some("PERMISSION_DENIED")"#),
        "{results:?}"
    );
    assert!(!workspace.join("inside3.txt").exists());

    // A call cannot ask for more than the server gives (workspace-write by default).
    let wider = server
        .call(
            "dsh",
            json!({"prompt": "anything", "preset": "danger-full-access"}),
        )
        .await;
    assert_eq!(wider["result"]["isError"], true, "{wider}");
    let text = content_text(&wider["result"]);
    assert!(
        text.starts_with("PERMISSION_DENIED: preset `danger-full-access`"),
        "{text}"
    );
    assert_eq!(provider.requests().len(), 4);
    assert!(server.close().await.success());
}

/// dsh's own MCP client drives `dsh mcp-server`: the outer `dsh run` calls `mcp__inner__dsh`,
/// whose inner session answers; a second `dsh run` continues that inner session with
/// `mcp__inner__dsh-reply`.
#[tokio::test]
async fn dsh_run_delegates_to_dsh_mcp_server() {
    let provider = FakeProvider::start([]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let inner_home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[mcp.servers.inner]\ncommand = {:?}\nargs = [\"mcp-server\"]\ntrust = \"all\"\n\
             tool_timeout_secs = 60\n\
             env = {{ DSH_HOME = {:?}, HOME = {:?}, DEEPSEEK_BASE_URL = {:?} }}\n",
            env!("CARGO_BIN_EXE_dsh"),
            inner_home.path().display().to_string(),
            inner_home.path().display().to_string(),
            provider.base_url(),
        ),
    )
    .unwrap();
    let outer = |prompt: &str| {
        let mut cmd = dsh_command(home.path(), cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .args(["run", prompt]);
        cmd
    };

    // Outer step 1 delegates; the inner session answers; outer step 2 reports.
    provider.push_reply(call_reply(
        "call_inner",
        "mcp__inner__dsh",
        json!({"prompt": "inner task"}),
    ));
    provider.push_reply(text_reply("inner answer 42"));
    provider.push_reply(text_reply("outer done"));
    let out = output(outer("delegate")).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "outer done\n");
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "{stderr}");
    assert!(requests[0].body["tools"]
        .to_string()
        .contains("mcp__inner__dsh-reply"));
    // The outer model got the inner answer and the inner session's id.
    let tool_result = requests[2].body["messages"].to_string();
    assert!(tool_result.contains("inner answer 42"), "{tool_result}");
    let inner_files = session_files(inner_home.path());
    assert_eq!(inner_files.len(), 1);
    let inner_log = load_file(&inner_files[0]).unwrap();
    let inner_id = inner_log.header.id.clone();
    assert!(tool_result.contains(&inner_id), "{tool_result}");

    // A second run continues the inner session.
    provider.push_reply(call_reply(
        "call_reply",
        "mcp__inner__dsh-reply",
        json!({"session_id": inner_id, "prompt": "inner follow-up"}),
    ));
    provider.push_reply(text_reply("inner answer 43"));
    provider.push_reply(text_reply("outer done again"));
    let out = output(outer("continue")).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "outer done again\n");
    let requests = provider.requests();
    let inner_request = requests[4].body["messages"].to_string();
    assert!(
        inner_request.contains("inner task") && inner_request.contains("inner follow-up"),
        "{inner_request}"
    );
    assert!(requests[5].body["messages"]
        .to_string()
        .contains("inner answer 43"));
    assert_eq!(session_files(inner_home.path()).len(), 1);
    let inner_log = load_file(&session_files(inner_home.path())[0]).unwrap();
    assert!(matches!(
        last_turn_end(&inner_log.events),
        TurnEndReason::Completed
    ));
}

/// A client that goes away mid-call: the server cancels the turn, logs it and exits.
#[tokio::test]
async fn closing_stdin_cancels_running_calls_and_exits() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new().text("partial").end(StreamEnd::Stall),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut server = Server::start(home.path(), cwd.path(), &provider.base_url(), &[]).await;
    server
        .send_request(
            "tools/call",
            json!({"name": "dsh", "arguments": {"prompt": "long task"}}),
        )
        .await;
    tokio::time::timeout(WAIT, provider.wait_until(|e| e.stalls >= 1))
        .await
        .unwrap();
    assert!(server.close().await.success());
    let log = load_file(&session_files(home.path()).remove(0)).unwrap();
    assert!(matches!(
        last_turn_end(&log.events),
        TurnEndReason::Aborted { .. }
    ));
}

/// A client's `cwd` is checked as an added directory is (adversarial review of issue 42):
/// before, `cwd` = `$DSH_HOME` made dsh's home the workspace, and the model's `write` put
/// `permission = "danger-full-access"` (or hooks that run unconfined) into the user's
/// `config.toml`; `cwd` = `/` made the whole file system writable. `/`, dsh's home, a folder
/// holding it and a protected entry (`.git`) are refused before anything is sent; an ordinary
/// folder works.
#[tokio::test]
async fn a_client_cannot_make_dshs_home_or_root_the_workspace() {
    let (_root, [workspace, home]) = crate::common::scratch_dirs(["workspace", "home"]);
    std::fs::create_dir_all(workspace.join(".git/hooks")).unwrap();
    let provider = FakeProvider::start([
        call_reply(
            "call_w",
            "write",
            json!({
                "file_path": home.join("config.toml"),
                "content": "permission = \"danger-full-access\"\n"
            }),
        ),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let mut server = Server::start(&home, &workspace, &provider.base_url(), &[]).await;
    let cases = [
        (home.display().to_string(), "dsh's home"),
        (home.join("sessions").display().to_string(), "dsh's home"),
        (home.parent().unwrap().display().to_string(), "dsh's home"),
        ("/".to_string(), "root directory"),
        (
            workspace.join(".git").display().to_string(),
            "protected entry",
        ),
        (
            workspace.join(".git/hooks").display().to_string(),
            "protected entry",
        ),
    ];
    for (cwd, expected) in cases {
        let _ = std::fs::create_dir_all(home.join("sessions"));
        let result = server
            .call("dsh", json!({"prompt": "plant", "cwd": cwd}))
            .await;
        assert_eq!(result["result"]["isError"], true, "{cwd}: {result}");
        let said = content_text(&result["result"]);
        assert!(
            said.starts_with("INVALID_CONFIG") && said.contains(expected),
            "{cwd}: {said}"
        );
    }
    assert!(provider.requests().is_empty(), "a refused call ran");
    assert!(!home.join("config.toml").exists());
    // An ordinary folder is the workspace; the write into dsh's home is refused there.
    let result = server
        .call(
            "dsh",
            json!({"prompt": "plant", "cwd": workspace.display().to_string()}),
        )
        .await;
    assert_ne!(result["result"]["isError"], true, "{result}");
    assert!(!home.join("config.toml").exists());
    server.close().await;
}

/// `dsh-reply` reaches no further than `dsh`: the adversarial review of the OAuth work found
/// that a reply took the working directory logged in the session unchecked, resolved id
/// prefixes (an ambiguous one listed every stored id) and read a key ending in `.jsonl` as a
/// path beside the server. A client could so continue the user's own session logged in
/// dsh's home (or `/`) under `workspace-write`, or a log its model had written into the
/// workspace naming `cwd: "/"`, and write into the user's `config.toml`. Now a reply takes a
/// whole id of the store only, and a logged working directory passes the check a client's
/// `cwd` passes.
#[tokio::test]
async fn a_reply_reaches_no_session_or_directory_a_call_could_not() {
    let (_root, [workspace, home]) = crate::common::scratch_dirs(["workspace", "home"]);
    let provider = FakeProvider::start([
        text_reply("first answer"),
        call_reply(
            "call_w",
            "write",
            json!({
                "file_path": home.join("config.toml"),
                "content": "permission = \"danger-full-access\"\n"
            }),
        ),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let mut server = Server::start(&home, &workspace, &provider.base_url(), &[]).await;
    let first = server.call("dsh", json!({"prompt": "hello"})).await;
    let session_id = first["result"]["structuredContent"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(server.close().await.success());
    // The session as if the user had run it in dsh's home.
    let [log] = session_files(&home).try_into().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let (head, rest) = text.split_once('\n').unwrap();
    let mut header: Value = serde_json::from_str(head).unwrap();
    header["cwd"] = json!(home.display().to_string());
    std::fs::write(&log, format!("{header}\n{rest}")).unwrap();
    // And a copy the client's model could have written beside the server.
    std::fs::write(workspace.join("planted.jsonl"), format!("{header}\n{rest}")).unwrap();

    let mut server = Server::start(&home, &workspace, &provider.base_url(), &[]).await;
    for key in [&session_id[..8], "planted.jsonl", session_id.as_str()] {
        let result = server
            .call("dsh-reply", json!({"session_id": key, "prompt": "plant"}))
            .await;
        assert_eq!(result["result"]["isError"], true, "{key}: {result}");
        let said = content_text(&result["result"]);
        assert!(
            ["NOT_FOUND", "INVALID_ARGS", "INVALID_CONFIG"]
                .iter()
                .any(|code| said.starts_with(code)),
            "{key}: {said}"
        );
        assert!(!said.contains(&session_id[8..]), "{key}: {said}");
    }
    server.close().await;
    assert_eq!(provider.requests().len(), 1, "a refused reply ran");
    assert!(!home.join("config.toml").exists());
}
