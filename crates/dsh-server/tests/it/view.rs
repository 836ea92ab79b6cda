//! The stream's view events (docs/protocol.md, "View events"; docs/web.md, "Events"): a tool
//! card's states through an approval, allowed and rejected, and the same view events when a
//! client connects again (history replay) and after the server restarted (a stored session).

use std::sync::Arc;

use crate::support::{text, AskForBash, Web};
use dsh_agent::Extension;
use dsh_test_support::{ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

fn bash(call_id: &str, command: &str) -> ScriptedReply {
    let args = json!({"command": command, "description": "test"}).to_string();
    SseReply::new()
        .tool_call(0, call_id, "bash", &args)
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

/// The states of the `toolCard`s of call `call_id` among `views`, in order, each once where it
/// repeats (a running command's output reports update its card, as many times as it lasts).
fn card_states(views: &[Value], call_id: &str) -> Vec<String> {
    let mut states: Vec<String> = views
        .iter()
        .filter(|v| v["kind"] == "toolCard" && v["callId"] == call_id)
        .map(|v| v["state"].as_str().unwrap().to_string())
        .collect();
    states.dedup();
    states
}

/// The view event of `kind` among `views` (the first).
fn view<'a>(views: &'a [Value], kind: &str) -> &'a Value {
    views
        .iter()
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {views:?}"))
}

#[tokio::test]
async fn a_card_goes_through_approval_and_replays_the_same() {
    let replies = vec![
        bash("call-a", "echo approved-output"),
        text("Ran it."),
        bash("call-r", "echo never"),
        text("Refused."),
    ];
    let mut web = Web::start_with(replies, vec![Arc::new(AskForBash) as Arc<dyn Extension>]).await;
    let id = web.create("run echo").await;
    let mut stream = web.stream(&id, None).await;

    // Allowed: pending -> awaitingApproval -> pending -> running -> done.
    let (mut live, _) = stream.views_until("approval/asked").await;
    assert_eq!(
        card_states(&live, "call-a"),
        ["pending", "awaitingApproval"]
    );
    let asked = view(&live, "approvalRequested").clone();
    assert_eq!(asked["callId"], "call-a");
    assert_eq!(asked["reason"], "test policy: bash needs approval");
    // The card says what the tool presents, not how the UI would name it.
    let card = view(&live, "toolCard");
    assert_eq!(card["tool"], "bash");
    assert!(card["presentation"]["title"].is_string(), "{card}");
    assert_eq!(card["presentation"]["view"], "terminal", "{card}");
    let approval = asked["id"].as_str().unwrap();
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "allow"}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let (rest, _) = stream.views_until("turn/end").await;
    live.extend(rest);
    assert_eq!(
        card_states(&live, "call-a"),
        ["pending", "awaitingApproval", "pending", "running", "done"]
    );
    let decided = view(&live, "approvalDecided");
    assert_eq!(
        (&decided["outcome"], &decided["scope"]),
        (&json!("approved"), &json!("once"))
    );
    let done = live
        .iter()
        .rfind(|v| v["kind"] == "toolCard" && v["callId"] == "call-a")
        .unwrap();
    assert!(
        done["result"].as_str().unwrap().contains("approved-output"),
        "{done}"
    );
    let ended = view(&live, "turnEnded");
    assert_eq!(
        (&ended["state"], &ended["reason"]),
        (&json!("completed"), &json!("completed"))
    );

    // Rejected: pending -> awaitingApproval -> denied (never running).
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "again"}),
    ))
    .await;
    let (asked_views, _) = stream.views_until("approval/asked").await;
    let approval = view(&asked_views, "approvalRequested")["id"]
        .as_str()
        .unwrap()
        .to_string();
    live.extend(asked_views);
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "reject", "message": "not today"}),
        ))
        .await;
    assert_eq!(status, 200);
    // Answered once: nothing waits any more.
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/approvals/{approval}"),
            json!({"decision": "allow"}),
        ))
        .await;
    assert_eq!(status, 404);
    let (rest, last) = stream.views_until("turn/end").await;
    live.extend(rest);
    assert_eq!(
        card_states(&live, "call-r"),
        ["pending", "awaitingApproval", "denied"]
    );
    let denied = live
        .iter()
        .rfind(|v| v["kind"] == "toolCard" && v["callId"] == "call-r")
        .unwrap();
    assert_eq!(denied["errorCode"], "PERMISSION_DENIED");

    // A client that connects now gets the history with the same view events.
    let mut again = web.stream(&id, None).await;
    let replayed = views_through(&mut again, last.id).await;
    assert_eq!(replayed, live);

    // So does the stored session, served from its log by a new server.
    web.restart().await;
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["live"], false, "{detail}");
    let mut stored = web.stream(&id, None).await;
    let from_log = views_through(&mut stored, last.id).await;
    assert_eq!(from_log, live);
    web.stop().await;
}

/// The view events of a stream up to and including those of the session event `seq`.
async fn views_through(stream: &mut crate::support::SseReader, seq: u64) -> Vec<Value> {
    let mut views = Vec::new();
    loop {
        match stream.next_frame().await {
            crate::support::Frame::View(view) => views.push(view),
            crate::support::Frame::Session(event) if event.id == seq => return views,
            _ => {}
        }
    }
}

fn write_call(call_id: &str, path: &str, content: &str) -> ScriptedReply {
    let arguments = json!({"file_path": path, "content": content});
    SseReply::new()
        .tool_call(0, call_id, "write", &arguments.to_string())
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

#[tokio::test]
async fn undo_reverts_the_latest_turn_and_streams_files_undone() {
    let replies = vec![write_call("w1", "notes.txt", "changed\n"), text("written")];
    let mut web = Web::start(replies).await;
    let id = web.create("write it").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let file = web.cwd.path().join("notes.txt");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "changed\n");

    let undo = format!("/api/sessions/{id}/undo");
    let (status, body) = web.json(web.post(&undo, json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["undone"], true);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("notes.txt (deleted"),
        "{body}"
    );
    assert!(!file.exists());
    let (views, _) = stream.views_until("files/undo").await;
    let undone = view(&views, "filesUndone");
    assert_eq!(
        (&undone["turn"], &undone["complete"]),
        (&json!(1), &json!(true))
    );

    // Nothing left to undo: refused, nothing changed.
    let (status, body) = web.json(web.post(&undo, json!({}))).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "UNDO_REFUSED");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing to undo"),
        "{body}"
    );
    web.stop().await;
}
