//! The session protocol through the real binary: what `dsh run --json` shows live (its `view`
//! lines) is what the stored log gives later (`dsh sessions export --format view`), across a
//! refused approval, a child cut at its output limit and a model switch on resume.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::process::Stdio;

use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

use crate::common::{dsh_command, output, text};

pub(crate) fn reply(text: &str) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

pub(crate) fn call(id: &str, tool: &str, arguments: Value) -> ScriptedReply {
    SseReply::new()
        .tool_call(0, id, tool, &arguments.to_string())
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

/// The `view` lines of a `dsh run --json` output, and its session id.
fn view_lines(stdout: &str) -> (Vec<Value>, String) {
    let mut id = String::new();
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "view")
        .map(|l| {
            id = l["sessionId"].as_str().unwrap().to_string();
            l["event"].clone()
        })
        .collect();
    (events, id)
}

/// The states of the cards of call `call_id` among view events, in order.
pub(crate) fn card_states(view: &[Value], call_id: &str) -> Vec<String> {
    view.iter()
        .filter(|e| e["kind"] == "toolCard" && e["callId"] == call_id)
        .map(|e| e["state"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_live_view_of_dsh_run_is_the_view_of_its_stored_log() {
    let provider = FakeProvider::start(vec![
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
            json!({"description": "cut short", "prompt": "CHILD LONG"}),
        ),
        reply("first done"),
        reply("second done"),
    ])
    .await
    .unwrap();
    provider.route(
        RequestMatch::System("You name coding-assistant sessions".into()),
        [reply("View check")],
    );
    provider.route(
        RequestMatch::FirstUser("CHILD LONG".into()),
        [SseReply::new()
            .text("a very long answer that is cut")
            .finish("length", Some(WireUsage::default()))
            .into()],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = dsh_command(home.path(), cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-view")
            .stdin(Stdio::null())
            .args([
                "run",
                "--json",
                "--json-deltas",
                "--permission",
                "workspace-write",
            ])
            .args(args);
        cmd
    };
    let first = output(run(&["--model", "deepseek-v4-flash", "go"])).await;
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stderr}\n{stdout}");
    let (mut live, id) = view_lines(&stdout);
    let second = output(run(&["--continue", "--model", "deepseek-v4-pro", "again"])).await;
    let (stdout, stderr) = text(&second);
    assert!(second.status.success(), "{stderr}\n{stdout}");
    live.extend(view_lines(&stdout).0);

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
        live, stored,
        "the stored log must give the view the live run showed"
    );

    // Headless: the approval is refused at once, and the card says so.
    assert_eq!(
        card_states(&stored, "b1"),
        ["pending", "awaitingApproval", "denied"]
    );
    let decided = stored
        .iter()
        .find(|e| e["kind"] == "approvalDecided")
        .unwrap();
    assert_eq!(decided["outcome"], "rejected");
    assert_eq!(decided["callId"], "b1");
    // The child was cut at its output limit: its card does not end as a success.
    let child = card_states(&stored, "s1");
    assert_eq!(child.first().map(String::as_str), Some("pending"));
    assert_ne!(child.last().map(String::as_str), Some("done"), "{child:?}");
    // The model switch on resume is visible where it happened.
    let models: Vec<&str> = stored
        .iter()
        .filter(|e| e["kind"] == "modelChanged")
        .map(|e| e["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["deepseek-v4-flash", "deepseek-v4-pro"]);
    let ends: Vec<&str> = stored
        .iter()
        .filter(|e| e["kind"] == "turnEnded")
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(ends, ["completed", "completed"]);
}
