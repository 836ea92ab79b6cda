//! Tool approvals through the API: the agent asks (`approval/asked` on the stream), the
//! client answers allow or reject, the call runs or is refused.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::sync::Arc;

use crate::support::{text, AskForBash, Web};
use dsh_agent::Extension;
use dsh_test_support::{ScriptedReply, SseReply, WireUsage};
use serde_json::json;

fn bash(command: &str) -> ScriptedReply {
    let args = json!({"command": command, "description": "test"}).to_string();
    SseReply::new()
        .tool_call(0, "call-1", "bash", &args)
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

#[tokio::test]
async fn allow_runs_the_call_and_reject_refuses_it() {
    let replies = vec![
        bash("echo approved-output"),
        text("Ran it."),
        bash("echo never"),
        text("Refused."),
    ];
    let mut web = Web::start_with(replies, vec![Arc::new(AskForBash) as Arc<dyn Extension>]).await;
    let id = web.create("run echo").await;
    let mut stream = web.stream(&id, None).await;

    let asked = stream.until("approval/asked").await;
    let question = &asked.last().unwrap().data["data"];
    assert_eq!(question["toolName"], "bash");
    assert_eq!(question["reason"], "test policy: bash needs approval");
    let approval = question["id"].as_str().unwrap().to_string();
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["approvals"], json!([approval]));
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/not-this-one"),
            json!({"decision": "allow"}),
        ))
        .await;
    assert_eq!(status, 404);
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "maybe"}),
        ))
        .await;
    assert_eq!(status, 400);
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "allow"}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let rest = stream.until("turn/end").await;
    let decided = rest
        .iter()
        .find(|e| e.kind() == "approval/decided")
        .unwrap();
    assert_eq!(decided.data["data"]["outcome"], "approved");
    let result = rest.iter().find(|e| e.kind() == "tool/result").unwrap();
    assert!(
        result.data.to_string().contains("approved-output"),
        "{}",
        result.data
    );
    assert!(result.data["data"]["error"].is_null());

    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "again"}),
    ))
    .await;
    let asked = stream.until("approval/asked").await;
    let approval = asked.last().unwrap().data["data"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "reject", "message": "not today"}),
        ))
        .await;
    assert_eq!(status, 200);
    let rest = stream.until("turn/end").await;
    let result = rest.iter().find(|e| e.kind() == "tool/result").unwrap();
    assert_eq!(
        result.data["data"]["error"]["code"], "PERMISSION_DENIED",
        "{}",
        result.data
    );
    assert!(result.data.to_string().contains("not today"));
    web.stop().await;
}

#[tokio::test]
async fn allow_for_the_session_covers_later_calls_the_rule_covers() {
    let replies = vec![
        bash("echo one"),
        text("Ran it."),
        bash("echo one more"),
        text("Ran it again."),
    ];
    let mut web = Web::start_with(replies, vec![Arc::new(AskForBash) as Arc<dyn Extension>]).await;
    let id = web.create("run echo").await;
    let mut stream = web.stream(&id, None).await;

    let asked = stream.until("approval/asked").await;
    let question = &asked.last().unwrap().data["data"];
    // The card offers a button per choice and names the rule; rules are not persisted here, so
    // "always" is not offered.
    assert_eq!(
        question["choices"],
        json!(["allow_once", "allow_session", "reject"])
    );
    assert_eq!(question["rule"], "`bash` commands starting with `echo one`");
    let approval = question["id"].as_str().unwrap().to_string();
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "allow_session"}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let rest = stream.until("turn/end").await;
    let decided = rest
        .iter()
        .find(|e| e.kind() == "approval/decided")
        .unwrap();
    assert_eq!(decided.data["data"]["scope"], "session");

    // The next matching call is not asked: the session rule answers.
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "again"}),
    ))
    .await;
    let rest = stream.until("turn/end").await;
    assert!(
        !rest.iter().any(|e| e.kind() == "approval/asked"),
        "asked again"
    );
    let decided = rest
        .iter()
        .find(|e| e.kind() == "approval/decided")
        .unwrap();
    assert_eq!(decided.data["data"]["scope"], "rule");
    let result = rest.iter().find(|e| e.kind() == "tool/result").unwrap();
    assert!(
        result.data.to_string().contains("one more"),
        "{}",
        result.data
    );
    web.stop().await;
}
