//! Session controls over real HTTP with the fake provider as the model: permission presets,
//! `ask_user_question` answers, user-invocable skills as slash commands, renaming a live
//! session.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::time::{Duration, Instant};

use crate::support::{text, SseEvent, Web};
use dsh_test_support::{ScriptedReply, SseReply, StreamEnd, WireUsage};
use serde_json::{json, Value};

fn tool_call(name: &str, args: Value) -> ScriptedReply {
    SseReply::new()
        .tool_call(0, "call-1", name, &args.to_string())
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

fn ask() -> ScriptedReply {
    tool_call(
        "ask_user_question",
        json!({"questions": [
            {"id": "lang", "question": "Which language?", "header": "Language",
             "options": [{"label": "Rust", "description": "fast"}, "Go"]},
            {"question": "Anything else?"}
        ]}),
    )
}

fn stall() -> ScriptedReply {
    SseReply::new().text("working").end(StreamEnd::Stall).into()
}

fn find<'a>(events: &'a [SseEvent], kind: &str) -> &'a SseEvent {
    events
        .iter()
        .find(|e| e.kind() == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

/// Waits until the session's detail lists a waiting question; returns its call id.
async fn waiting_question(web: &Web, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
        if let Some(call) = detail["questions"][0].as_str() {
            return call.to_string();
        }
        assert!(Instant::now() < deadline, "no question waits: {detail}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn preset(web: &Web, id: &str) -> Value {
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    detail["permission"].clone()
}

#[tokio::test]
async fn a_widening_needs_the_confirmation_and_a_narrowing_does_not() {
    let mut web = Web::start(vec![text("One.")]).await;
    let id = web.create("hi").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let path = format!("/api/sessions/{id}/permission");
    // Narrowing: no confirmation needed.
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "read-only"})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(preset(&web, &id).await, "read-only");
    // Widening without the confirmation, or with a false one: refused, the preset stays.
    for body in [
        json!({"preset": "danger-full-access"}),
        json!({"preset": "danger-full-access", "confirm": false}),
        json!({"preset": "workspace-write"}),
    ] {
        let (status, answer) = web.json(web.post(&path, body.clone())).await;
        assert_eq!(status, 403, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "CONFIRMATION_REQUIRED");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("from read-only to") && message.contains("confirm"),
            "{message}"
        );
        assert_eq!(preset(&web, &id).await, "read-only");
    }
    // A non-boolean confirmation is a bad request, not a yes.
    let (status, _) = web
        .json(web.post(
            &path,
            json!({"preset": "danger-full-access", "confirm": "yes"}),
        ))
        .await;
    assert_eq!(status, 400);
    assert_eq!(preset(&web, &id).await, "read-only");
    // No `permission/preset` event was logged for any refused widening: the stream holds the
    // narrowing's events and nothing after them.
    let mut logged = Vec::new();
    while let Ok(event) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        logged.push(event);
    }
    let presets: Vec<&Value> = logged
        .iter()
        .filter(|e| e.kind() == "permission/preset")
        .map(|e| &e.data["data"]["preset"])
        .collect();
    assert_eq!(presets, [&json!("read-only")], "{logged:?}");
    // With the confirmation: switched and logged.
    let (status, body) = web
        .json(web.post(
            &path,
            json!({"preset": "danger-full-access", "confirm": true}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["permission"], "danger-full-access");
    assert_eq!(preset(&web, &id).await, "danger-full-access");
    let switched = stream.next().await;
    assert_eq!(switched.kind(), "permission/preset");
    assert_eq!(switched.data["data"]["preset"], "danger-full-access");
    web.stop().await;
}

/// `ask` is listed and ranks between read-only and workspace-write: leaving it for
/// workspace-write drops the approvals, so that widening needs the confirmation too.
#[tokio::test]
async fn ask_is_offered_and_ranks_between_read_only_and_workspace_write() {
    let mut web = Web::start(vec![text("One.")]).await;
    let (status, info) = web.json(web.get("/api/info")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(
        info["permissions"],
        json!(["read-only", "ask", "workspace-write", "danger-full-access"])
    );
    let id = web.create("hi").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let path = format!("/api/sessions/{id}/permission");
    // The session starts under danger-full-access: ask is a narrowing.
    let (status, body) = web.json(web.post(&path, json!({"preset": "ask"}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(preset(&web, &id).await, "ask");
    let (status, answer) = web
        .json(web.post(&path, json!({"preset": "workspace-write"})))
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "CONFIRMATION_REQUIRED");
    assert_eq!(preset(&web, &id).await, "ask");
    let (status, _) = web
        .json(web.post(&path, json!({"preset": "read-only"})))
        .await;
    assert_eq!(status, 200);
    let (status, answer) = web.json(web.post(&path, json!({"preset": "ask"}))).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(preset(&web, &id).await, "read-only");
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "ask", "confirm": true})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["permission"], "ask");
    web.stop().await;
}

#[tokio::test]
async fn permission_switches_are_logged_and_refusals_explained() {
    let mut web = Web::start(vec![
        text("One."),
        tool_call(
            "bash",
            json!({"command": "echo should-not-run", "description": "t"}),
        ),
        text("Refused."),
    ])
    .await;
    let id = web.create("hi").await;
    let mut stream = web.stream(&id, None).await;
    let first = stream.until("turn/end").await;
    // The preset in force is logged when the session opens, so the UI shows it from events.
    assert_eq!(
        find(&first, "permission/preset").data["data"]["preset"],
        "danger-full-access"
    );

    let path = format!("/api/sessions/{id}/permission");
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "read-only"})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["permission"], "read-only");
    let preset = stream.next().await;
    assert_eq!(preset.kind(), "permission/preset");
    assert_eq!(preset.data["data"]["preset"], "read-only");
    let sandbox = stream.next().await;
    assert_eq!(sandbox.kind(), "sandbox/mode");
    assert_eq!(sandbox.data["data"]["mode"], "none");
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["permission"], "read-only");

    // Refused by the host (no sandbox for it): 400 with the reason; the preset stays.
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "workspace-write", "confirm": true})))
        .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot switch to workspace-write") && message.contains("no sandbox"),
        "{message}"
    );
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "everything"})))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown permission preset"));
    let (status, _) = web.json(web.post(&path, json!({}))).await;
    assert_eq!(status, 400);
    let (status, _) = web
        .json(web.post(
            "/api/sessions/no-such-session/permission",
            json!({"preset": "read-only"}),
        ))
        .await;
    assert_eq!(status, 404);

    // The switch applies from the next step: bash no longer runs unconfined.
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "run it"}),
    ))
    .await;
    let second = stream.until("turn/end").await;
    let result = find(&second, "tool/result");
    assert_eq!(
        result.data["data"]["error"]["code"], "SANDBOX_UNAVAILABLE",
        "{}",
        result.data
    );
    assert!(!second
        .iter()
        .any(|e| e.kind() == "permission/preset" && e.data["data"]["preset"] != "read-only"));
    web.stop().await;
}

#[tokio::test]
async fn an_answered_question_reaches_the_model() {
    let mut web = Web::start(vec![ask(), text("Rust it is.")]).await;
    let id = web.create("ask me").await;
    let mut stream = web.stream(&id, None).await;
    let asked = stream.until("tool/started").await;
    let call = find(&asked, "tool/call");
    assert_eq!(call.data["data"]["name"], "ask_user_question");
    let call_id = waiting_question(&web, &id).await;
    assert_eq!(call_id, "call-1");

    let path = format!("/api/sessions/{id}/questions/{call_id}");
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/questions/other-call"),
            json!({"decline": ""}),
        ))
        .await;
    assert_eq!(status, 404);
    for bad in [
        json!({"answers": [{"id": "nope", "answers": ["x"]}]}),
        json!({"answers": [{"id": "lang", "answers": ["Rust", "Go"]}]}),
        json!({"answers": [], "decline": "both"}),
        json!({}),
    ] {
        let (status, body) = web.json(web.post(&path, bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = web
        .json(web.post(
            &path,
            json!({"answers": [
                {"id": "lang", "answers": ["Rust"]},
                {"id": "q2", "answers": ["tests, please"]}
            ]}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["answered"], true);

    let rest = stream.until("turn/end").await;
    let result = find(&rest, "tool/result");
    assert!(result.data["data"]["error"].is_null(), "{}", result.data);
    assert_eq!(
        result.data["data"]["meta"]["answers"]["lang"],
        json!(["Rust"])
    );
    assert!(rest
        .iter()
        .any(|e| e.kind() == "assistant/message" && e.data.to_string().contains("Rust it is.")));
    // The model's next request carries the answers as the tool result.
    let requests = web.provider.requests();
    let last = requests.last().unwrap().body.to_string();
    assert!(
        last.contains("Which language? (lang): Rust") && last.contains("tests, please"),
        "{last}"
    );
    // Answered once: nothing waits any more.
    let (status, _) = web.json(web.post(&path, json!({"decline": ""}))).await;
    assert_eq!(status, 404);
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["questions"], json!([]));
    web.stop().await;
}

#[tokio::test]
async fn declined_and_cancelled_questions() {
    let mut web = Web::start(vec![ask(), text("Assuming Rust."), ask()]).await;
    let id = web.create("ask me").await;
    let mut stream = web.stream(&id, None).await;
    let call_id = waiting_question(&web, &id).await;
    let path = format!("/api/sessions/{id}/questions/{call_id}");
    let (status, body) = web
        .json(web.post(&path, json!({"decline": "decide yourself"})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["declined"], true);
    let first = stream.until("turn/end").await;
    let result = find(&first, "tool/result").data.to_string();
    assert!(
        result.contains("dismissed") && result.contains("decide yourself"),
        "{result}"
    );

    // A cancelled turn drops the waiting question.
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "ask again"}),
    ))
    .await;
    let call_id = waiting_question(&web, &id).await;
    let (_, body) = web
        .json(web.post(&format!("/api/sessions/{id}/cancel"), json!({})))
        .await;
    assert_eq!(body["cancelled"], true);
    let second = stream.until("turn/end").await;
    assert_eq!(
        find(&second, "tool/result").data["data"]["error"]["code"],
        "ABORTED"
    );
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/questions/{call_id}"),
            json!({"answers": [{"id": "lang", "answers": ["Go"]}]}),
        ))
        .await;
    assert_eq!(status, 404);
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["questions"], json!([]));
    web.stop().await;
}

#[tokio::test]
async fn skills_run_as_slash_commands() {
    let mut web = Web::start(vec![text("Reviewed.")]).await;
    let skill = web.cwd.path().join(".dsh/skills/review");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: review\ndescription: Review the current change\n---\nRead the diff and list the risks.\n",
    )
    .unwrap();
    let (status, body) = web.json(web.post("/api/sessions", json!({}))).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();

    let (status, listed) = web
        .json(web.get(&format!("/api/sessions/{id}/commands")))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["live"], true);
    assert_eq!(
        listed["commands"],
        json!([{
            "name": "review",
            "description": "Review the current change",
            "hint": "optional request for this skill",
        }])
    );

    let path = format!("/api/sessions/{id}/commands");
    let (status, body) = web
        .json(web.post(&path, json!({"name": "nope", "arguments": ""})))
        .await;
    // Refused by the protocol's `Op::Command`, in its words (docs/protocol.md).
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("INVALID_REQUEST"))
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no command `/nope`"));
    let (status, _) = web
        .json(web.post(&path, json!({"name": "two words"})))
        .await;
    assert_eq!(status, 400);
    let mut stream = web.stream(&id, None).await;
    let (status, body) = web
        .json(web.post(
            &path,
            json!({"name": "/review", "arguments": "src/lib.rs only"}),
        ))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["command"], "review");
    let events = stream.until("turn/end").await;
    assert_eq!(
        events.last().unwrap().data["data"]["reason"]["kind"],
        "completed"
    );
    let request = web.provider.requests().last().unwrap().body.to_string();
    assert!(
        request.contains("Read the diff and list the risks.")
            && request.contains("User request: src/lib.rs only"),
        "{request}"
    );

    // A stored session (a fork) lists none until it is opened; unknown sessions are 404.
    let (status, fork) = web
        .json(web.post(&format!("/api/sessions/{id}/fork"), json!({})))
        .await;
    assert_eq!(status, 201, "{fork}");
    let (status, listed) = web
        .json(web.get(&format!(
            "/api/sessions/{}/commands",
            fork["id"].as_str().unwrap()
        )))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed, json!({"live": false, "commands": []}));
    let (status, _) = web
        .json(web.get("/api/sessions/no-such-session/commands"))
        .await;
    assert_eq!(status, 404);
    web.stop().await;
}

#[tokio::test]
async fn a_live_session_is_renamed_through_its_agent() {
    let mut web = Web::start(vec![text("First."), stall(), text("Third.")]).await;
    let id = web.create("one").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;

    // While a later turn runs, the rename is logged at once by the live agent.
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "two"}),
    ))
    .await;
    web.provider.wait_for_stalls(1).await;
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/title"),
            json!({"title": "Renamed while running"}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let titled = stream.until("session/title").await;
    let title = titled.last().unwrap();
    assert_eq!(title.data["data"]["title"], "Renamed while running");
    assert_eq!(title.data["data"]["source"], json!({"kind": "user"}));
    let (_, list) = web.json(web.get("/api/sessions")).await;
    assert_eq!(
        list["workspaces"][0]["sessions"][0]["title"],
        "Renamed while running"
    );
    web.json(web.post(&format!("/api/sessions/{id}/cancel"), json!({})))
        .await;
    stream.until("turn/end").await;

    // The agent was never closed and reopened around the rename: no `resume` request header.
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "three"}),
    ))
    .await;
    let third = stream.until("turn/end").await;
    assert_eq!(
        third.last().unwrap().data["data"]["reason"]["kind"],
        "completed"
    );
    let mut all = web.stream(&id, None).await;
    let mut events: Vec<SseEvent> = Vec::new();
    while events.iter().filter(|e| e.kind() == "turn/end").count() < 3 {
        events.extend(all.until("turn/end").await);
    }
    assert!(
        !events
            .iter()
            .any(|e| e.kind() == "request/header" && e.data["data"]["reason"] == "resume"),
        "the agent was reopened"
    );
    web.stop().await;

    // The title is in the log once the server has stopped (the agent's writer flushed it).
    let store = dsh_session::open_store(dsh_session::StoreKind::Jsonl, web.home.path()).unwrap();
    let log = store.load(&id).unwrap();
    let last_title = log
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            dsh_session::Event::SessionTitle(t) => Some(t.title.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(last_title, "Renamed while running");
}

#[tokio::test]
async fn a_rename_during_the_first_turn_outlasts_the_model_title() {
    // The first turn and the title call run together and may take either reply: both are the
    // same slow text. The second turn only starts once the first (title included) is over.
    let slow = || -> ScriptedReply {
        SseReply::new()
            .delay(Duration::from_millis(400))
            .text("Model Title")
            .finish("stop", Some(WireUsage::default()))
            .into()
    };
    let mut web = Web::start_titled(vec![slow(), slow(), text("second")]).await;
    let id = web.create("first prompt").await;
    let mut stream = web.stream(&id, None).await;
    let provisional = stream.until("session/title").await;
    assert_eq!(
        provisional.last().unwrap().data["data"]["source"]["kind"],
        "fallback"
    );
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/title"),
            json!({"title": "Mine"}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut events = stream.until("turn/end").await;
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/prompt"),
            json!({"text": "again"}),
        ))
        .await;
    assert_eq!(status, 202, "{body}");
    events.extend(stream.until("turn/end").await);
    // The model's title arrived after the user's rename: the agent did not log it.
    let titles: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.kind() == "session/title")
        .map(|e| {
            let data = &e.data["data"];
            (
                data["title"].as_str().unwrap().to_string(),
                data["source"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(titles, [("Mine".to_string(), "user".to_string())]);
    let (_, list) = web.json(web.get("/api/sessions")).await;
    assert_eq!(list["workspaces"][0]["sessions"][0]["title"], "Mine");
    web.stop().await;
}

/// `POST /api/sessions/:id/warm` (docs/web.md, "Connection warm-up") passes the warm-up on to
/// the live session's provider connection: one `HEAD` at the provider (the test factory's
/// warm-up has no 30 s window). A session with no live agent, or a bad id, opens nothing.
#[tokio::test]
async fn warm_opens_the_provider_connection_of_a_live_session_only() {
    let web = Web::start(Vec::new()).await;
    let (status, created) = web.json(web.post("/api/sessions", json!({}))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let (status, body) = web
        .json(web.post(&format!("/api/sessions/{id}/warm"), json!({})))
        .await;
    assert_eq!((status, body), (200, json!({"live": true})));
    tokio::time::timeout(
        Duration::from_secs(10),
        web.provider.wait_until(|events| events.head_requests == 1),
    )
    .await
    .expect("the warm-up reaches the provider");
    let (status, body) = web
        .json(web.post("/api/sessions/no-such-session/warm", json!({})))
        .await;
    assert_eq!((status, body), (200, json!({"live": false})));
    let (status, _) = web
        .json(web.post("/api/sessions/..%2Fx/warm", json!({})))
        .await;
    assert_eq!(status, 400);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events = web.provider.events();
    assert_eq!(
        (events.head_requests, events.requests),
        (1, 0),
        "{events:?}"
    );
}

/// `GET /api/sessions/:id` answers `events` as a count of the feed's events, not the events,
/// and docs/web.md says so (issue 40, point 10: the table listed `events` as if it were them).
#[tokio::test]
async fn session_detail_counts_its_events_as_the_docs_say() {
    let mut web = Web::start(vec![text("Done.")]).await;
    let id = web.create("one").await;
    let mut stream = web.stream(&id, None).await;
    let seen = stream.until("turn/end").await;
    let (status, body) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(status, 200, "{body}");
    let count = body["events"].as_u64().unwrap_or_else(|| panic!("{body}"));
    assert!(count >= seen.len() as u64, "{count} < {}", seen.len());

    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/web.md")).unwrap();
    let row = docs
        .lines()
        .find(|l| l.starts_with("| `GET /api/sessions/:id` |"))
        .expect("docs/web.md has a row for GET /api/sessions/:id");
    assert!(
        row.contains("`events`: how many events") && row.contains("a count"),
        "docs/web.md does not say `events` is a count: {row}"
    );
    web.stop().await;
}
