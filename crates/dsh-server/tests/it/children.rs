//! Children (subagents) in the web API and UI (docs/web.md, "Children"): a child's events go
//! out on its parent's stream while it runs (a test-held gate proves they arrive before the
//! child could finish), the children API serves the stored child log, it cannot be steered
//! outside the parent's `subagents/` folder, and in Chromium the child shows nested in the
//! `subagent` card, streaming, and again after a reload.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::cdp::{find_chromium, Browser};
use crate::support::{Frame, Web};
use dsh_test_support::{RequestMatch, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

const PARENT_PROMPT: &str = "delegate the counting";
const CHILD_PROMPT: &str = "CHILD: count the files, then say how many";
const CHILD_TEXT: &str = "child is counting";

fn usage() -> Option<WireUsage> {
    Some(WireUsage {
        prompt_tokens: 100,
        completion_tokens: 5,
        ..Default::default()
    })
}

fn say(text: &str) -> ScriptedReply {
    SseReply::new().text(text).finish("stop", usage()).into()
}

/// Routes the parent's and the child's replies. The child first streams `CHILD_TEXT` and
/// runs a command that waits (up to 20 s) for the file `gate`; then it answers.
fn script(web: &Web, gate: &Path) {
    let args = json!({"description": "count files", "prompt": CHILD_PROMPT}).to_string();
    web.provider.route(
        RequestMatch::FirstUser(PARENT_PROMPT.into()),
        [
            SseReply::new()
                .tool_call(0, "p1", "subagent", &args)
                .finish("tool_calls", usage())
                .into(),
            say("parent done: the child counted"),
        ],
    );
    let wait = format!(
        "for i in $(seq 400); do test -f {g} && break; sleep 0.05; done; test -f {g} && echo gate-opened",
        g = gate.display()
    );
    let bash = json!({"command": wait, "description": "wait for the gate"}).to_string();
    web.provider.route(
        RequestMatch::UserIs(CHILD_PROMPT.into()),
        [
            SseReply::new()
                .text(CHILD_TEXT)
                .chunk_delay(Duration::from_millis(10))
                .text(" (the files are many)")
                .tool_call(0, "c1", "bash", &bash)
                .finish("tool_calls", usage())
                .into(),
            say("child counted 3 files"),
        ],
    );
}

/// The folder of the parent's log (its children are in `subagents/` there).
fn parent_folder(web: &Web, id: &str) -> PathBuf {
    dsh_session::JsonlStore::new(web.home.path())
        .find(id)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Reads frames until both the parent's `turn/end` and the child's have come (the two are
/// forwarded apart, so either may be first); returns the child frames seen on the way.
async fn child_frames_until_turn_end(stream: &mut crate::support::SseReader) -> Vec<Value> {
    let mut out = Vec::new();
    let (mut parent_ended, mut child_ended) = (false, false);
    while !(parent_ended && child_ended) {
        match stream.next_frame().await {
            Frame::Child(child) => {
                child_ended |= child["event"]["type"] == "turn/end";
                out.push(child);
            }
            Frame::Session(event) => parent_ended |= event.kind() == "turn/end",
            Frame::View(_) => {}
        }
    }
    out
}

fn child_text_chunk(frame: &Value) -> bool {
    frame["event"]["type"] == "assistant/chunk"
        && frame["event"]["data"]["chunk"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(CHILD_TEXT))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_streams_on_its_parents_stream_and_the_api_serves_its_log() {
    let mut web = Web::start(Vec::new()).await;
    let gate = web.cwd.path().join("gate");
    script(&web, &gate);
    let id = web.create(PARENT_PROMPT).await;
    let mut stream = web.stream(&id, None).await;

    // The child's streamed text arrives while the child waits for the gate: its run cannot
    // have ended, so neither can the parent's call or turn.
    let mut before = Vec::new();
    let first = loop {
        match stream.next_frame().await {
            Frame::Child(frame) if child_text_chunk(&frame) => break frame,
            Frame::Child(frame) => before.push(frame),
            Frame::Session(event) => {
                assert_ne!(event.kind(), "tool/result", "the parent's call ended first");
                assert_ne!(event.kind(), "turn/end", "the parent's turn ended first");
            }
            Frame::View(_) => {}
        }
    };
    assert!(!gate.exists());
    assert_eq!(first["child"]["name"], "agent-1", "{first}");
    assert_eq!(first["child"]["label"], "count files");
    assert_eq!(first["child"]["depth"], 1);
    assert_eq!(first["callId"], "p1");
    assert_eq!(first["background"], false);
    let child_id = first["child"]["id"].as_str().unwrap().to_string();
    assert!(
        before.iter().any(|f| f["event"]["type"] == "turn/start"),
        "{before:?}"
    );

    // While it runs, the listing says so.
    let (status, listing) = web
        .json(web.get(&format!("/api/sessions/{id}/children")))
        .await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["children"][0]["state"], "running", "{listing}");
    assert_eq!(listing["children"][0]["callId"], "p1");

    std::fs::write(&gate, "open").unwrap();
    let after = child_frames_until_turn_end(&mut stream).await;
    let kinds: Vec<&str> = after
        .iter()
        .map(|f| f["event"]["type"].as_str().unwrap())
        .collect();
    for kind in ["tool/result", "assistant/message", "turn/end"] {
        assert!(kinds.contains(&kind), "no child {kind} in {kinds:?}");
    }
    let result = after
        .iter()
        .find(|f| f["event"]["type"] == "tool/result")
        .unwrap();
    assert!(result.to_string().contains("gate-opened"), "{result}");

    // The stored log, by name and by id, is the child's log event for event.
    let log = parent_folder(&web, &id)
        .join("subagents")
        .join(&child_id)
        .join("session.jsonl");
    let stored = dsh_session::load_file(&log).unwrap();
    let expected: Vec<(u64, String)> = stored
        .events
        .iter()
        .map(|e| (e.seq, e.event.event_type().to_string()))
        .collect();
    for key in ["agent-1", child_id.as_str()] {
        let (status, body) = web
            .json(web.get(&format!("/api/sessions/{id}/children/{key}")))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["child"]["id"], child_id.as_str());
        assert_eq!(body["child"]["state"], "completed");
        assert_eq!(body["child"]["callId"], "p1");
        assert_eq!(body["child"]["lastText"], "child counted 3 files");
        let got: Vec<(u64, String)> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["seq"].as_u64().unwrap(),
                    e["type"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(got, expected);
    }
    // Every live event the stream carried is in the log at its seq.
    for frame in before.iter().chain([&first]).chain(&after) {
        let seq = frame["event"]["seq"].as_u64().unwrap() as usize;
        assert_eq!(
            frame["event"]["type"].as_str().unwrap(),
            stored.events[seq].event.event_type()
        );
    }

    // A second client opened after the run gets the run's events again from the server.
    // (The session's events and the children's are two lists; a late client gets each in
    // order, not the two interleaved as they happened.)
    let mut late = web.stream(&id, None).await;
    let mut replayed = Vec::new();
    loop {
        if let Frame::Child(frame) = late.next_frame().await {
            let end = frame["event"]["type"] == "turn/end";
            replayed.push(frame);
            if end {
                break;
            }
        }
    }
    assert!(replayed.iter().any(child_text_chunk), "{replayed:?}");
    assert_eq!(replayed.len(), before.len() + 1 + after.len());

    // Behind the same sign-in as the rest of the API.
    for path in [
        format!("/api/sessions/{id}/children"),
        format!("/api/sessions/{id}/children/agent-1"),
    ] {
        let status = web
            .client
            .get(format!("{}{path}", web.base))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 401, "{path}");
    }
    web.stop().await;
}

/// Sends `GET <path>` as written (no client-side normalisation of `..`) with the sign-in;
/// returns the status and the body.
async fn raw_get(web: &Web, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = web.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        web.token
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_children_api_reads_nothing_outside_the_parents_subagents_folder() {
    const SECRET: &str = "SECRET-OF-ANOTHER-SESSION";
    let mut web = Web::start(Vec::new()).await;
    let gate = web.cwd.path().join("gate");
    std::fs::write(&gate, "open").unwrap();
    script(&web, &gate);
    web.provider
        .route(RequestMatch::FirstUser(SECRET.into()), [say(SECRET)]);

    // Another session whose log holds the secret, and the parent with one child.
    let other = web.create(SECRET).await;
    let mut stream = web.stream(&other, None).await;
    stream.until("turn/end").await;
    let id = web.create(PARENT_PROMPT).await;
    let mut stream = web.stream(&id, None).await;
    child_frames_until_turn_end(&mut stream).await;
    let folder = parent_folder(&web, &id);
    let other_folder = parent_folder(&web, &other);
    assert!(std::fs::read_to_string(other_folder.join("session.jsonl"))
        .unwrap()
        .contains(SECRET));

    // A planted link in the parent's subagents folder to the other session's folder: the
    // log it leads to is outside, so it is neither listed nor served.
    std::os::unix::fs::symlink(&other_folder, folder.join("subagents").join("planted")).unwrap();
    // And a file outside with the secret, next to the parent's folder.
    std::fs::write(folder.parent().unwrap().join("loose.jsonl"), SECRET).unwrap();

    let (status, listing) = web
        .json(web.get(&format!("/api/sessions/{id}/children")))
        .await;
    assert_eq!(status, 200);
    let listed = listing["children"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listing}");
    assert_eq!(listed[0]["name"], "agent-1");
    assert!(!listing.to_string().contains(SECRET));

    let here = format!("/api/sessions/{id}/children");
    let attacks = [
        format!("{here}/.."),
        format!("{here}/%2E%2E"),
        format!("{here}/..%2F..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd"),
        format!("{here}/%2Fetc%2Fpasswd"),
        format!("{here}/..%2F{other}"),
        format!(
            "{here}/..%2F..%2F{}",
            other_folder.file_name().unwrap().to_string_lossy()
        ),
        format!("{here}/..%2F..%2Floose.jsonl"),
        format!("{here}/{other}"),
        format!("{here}/planted"),
        format!("{here}/subagents"),
        format!("{here}/{id}"),
        format!("{here}/agent-1%00"),
        format!("{here}/agent-1%2F..%2F..%2F..%2F{other}"),
        format!("{here}/../../{other}/events"),
        format!("{here}/agent-1/../../../{other}"),
        format!("/api/sessions/..%2F{other}/children"),
        "/api/sessions/..%2F..%2F..%2Fetc/children/passwd".to_string(),
        "/api/sessions/%2Fetc/children/passwd".to_string(),
    ];
    for path in &attacks {
        let (status, body) = raw_get(&web, path).await;
        assert!(
            status == 400 || status == 404,
            "{path}: answered {status}: {body}"
        );
        assert!(!body.contains(SECRET), "{path} leaked the other session");
        assert!(!body.contains("root:"), "{path} leaked /etc/passwd");
        assert!(!body.contains("\"events\""), "{path} served a log: {body}");
    }
    // The control: the real child is served through the same raw client.
    let (status, body) = raw_get(&web, &format!("{here}/agent-1")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("child counted 3 files"));
    web.stop().await;
}

const CHILD_BOX: &str = "document.querySelector('.tool-card .card-children details.child')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_child_nested_in_its_card_streaming_and_after_a_reload() {
    let binary = find_chromium()
        .expect("the children browser test needs chromium on PATH (.ci/run installs it)");
    let mut web = Web::start(Vec::new()).await;
    let gate = web.cwd.path().join("gate");
    script(&web, &gate);
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    let id = web.create(PARENT_PROMPT).await;
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.show_session(&id);
        // The child appears inside the parent's `subagent` card with its name, label and
        // state, and its transcript streams while it waits for the gate.
        browser.wait_for(
            &format!("{CHILD_BOX}?.querySelector('.child-state')?.textContent === 'running'"),
            "the running child in its card",
            20,
        );
        let head = browser.eval(&format!("{CHILD_BOX}.querySelector('summary').innerText"));
        let head = head.as_str().unwrap();
        assert!(
            head.contains("agent-1") && head.contains("count files"),
            "{head}"
        );
        browser.eval(&format!("{CHILD_BOX}.open = true; true"));
        browser.wait_for(
            &format!(
                "{CHILD_BOX}.querySelector('.child-transcript').innerText.includes({})",
                json!(CHILD_TEXT)
            ),
            "the child's streamed text",
            20,
        );
        assert!(!gate.exists());
        assert_eq!(
            browser.eval(&format!(
                "{CHILD_BOX}.querySelector('.child-state').textContent"
            )),
            json!("running"),
            "the text was shown while the child ran"
        );
        std::fs::write(&gate, "open").unwrap();
        browser.wait_for(
            &format!(
                "{CHILD_BOX}.querySelector('.child-transcript').innerText.includes('child counted 3 files')"
            ),
            "the child's answer",
            20,
        );
        browser.wait_for(
            &format!("{CHILD_BOX}.querySelector('.child-state').textContent === 'done'"),
            "the child's end",
            20,
        );
        browser.wait_for(
            "document.getElementById('conversation').innerText.includes('parent done')",
            "the parent's answer",
            20,
        );
        // The child's transcript is a transcript: its command ran in a card of its own.
        let command = browser.eval(&format!(
            "{CHILD_BOX}.querySelector('.tool-card .tool-name')?.textContent"
        ));
        assert_eq!(command, json!("bash"));
        if let Some(dir) = std::env::var_os("DSH_WEB_SCREENSHOTS") {
            browser.screenshot(&PathBuf::from(dir).join("children.png"));
        }

        // After a restart of the server the parent is a stored session: its stream carries
        // no child event, and the finished child comes from the API, in the same place.
        let url = tokio::runtime::Handle::current().block_on(async {
            web.restart().await;
            web.server.as_ref().unwrap().issue_url(None)
        });
        browser.open(&url);
        browser.wait_for(
            "document.body.dataset.ready",
            "the page after the restart",
            20,
        );
        browser.show_session(&id);
        browser.wait_for(
            &format!("{CHILD_BOX}?.querySelector('.child-state')?.textContent === 'done'"),
            "the stored child in its card",
            20,
        );
        browser.eval(&format!("{CHILD_BOX}.open = true; true"));
        browser.wait_for(
            &format!(
                "{CHILD_BOX}.querySelector('.child-transcript').innerText.includes({}) && {CHILD_BOX}.querySelector('.child-transcript').innerText.includes('child counted 3 files')",
                json!(CHILD_TEXT)
            ),
            "the stored child's transcript",
            20,
        );
    });
    web.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_children_of_a_sqlite_session_are_served_live_and_after_a_restart() {
    let mut web = Web::start_store(Vec::new(), dsh_session::StoreKind::Sqlite).await;
    let gate = web.cwd.path().join("gate");
    std::fs::write(&gate, "open").unwrap();
    script(&web, &gate);
    let id = web.create(PARENT_PROMPT).await;
    let mut stream = web.stream(&id, None).await;
    let frames = child_frames_until_turn_end(&mut stream).await;
    assert!(frames.iter().any(child_text_chunk), "{frames:?}");
    // The child's log is beside the database (docs/sessions.md, "Where sessions live").
    let child_id = frames[0]["child"]["id"].as_str().unwrap().to_string();
    let log = web
        .home
        .path()
        .join("sessions.db.subagents")
        .join(&id)
        .join("subagents")
        .join(&child_id);
    assert!(
        dsh_session::session_file_in(&log).is_some(),
        "no child log in {}",
        log.display()
    );
    for round in ["live", "stored"] {
        let (status, listing) = web
            .json(web.get(&format!("/api/sessions/{id}/children")))
            .await;
        assert_eq!(status, 200, "{round}: {listing}");
        assert_eq!(listing["children"][0]["id"], child_id.as_str(), "{round}");
        assert_eq!(listing["children"][0]["callId"], "p1", "{round}");
        let (status, body) = web
            .json(web.get(&format!("/api/sessions/{id}/children/agent-1")))
            .await;
        assert_eq!(status, 200, "{round}: {body}");
        assert!(
            body.to_string().contains("child counted 3 files"),
            "{round}"
        );
        web.restart().await;
    }
    web.stop().await;
}
