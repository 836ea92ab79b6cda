//! The API over real HTTP on loopback with the fake provider as the model: sessions, prompts,
//! the SSE stream and its resumption, cancel, fork, export, rename.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use crate::support;

use std::time::Duration;

use crate::support::{text, Web};
use dsh_test_support::{SseReply, StreamEnd, WireUsage};
use serde_json::json;

#[tokio::test]
async fn prompt_streams_until_turn_end_and_resumes_from_last_event_id() {
    let mut web = Web::start(vec![text("Hello from the fake model.")]).await;
    let id = web.create("say hello").await;
    let mut stream = web.stream(&id, None).await;
    let first = stream.until("turn/end").await;
    // Seqs are the log's: 0, 1, 2, ... with no gap.
    for (index, event) in first.iter().enumerate() {
        assert_eq!(event.id, index as u64);
        assert_eq!(event.data["seq"], index as u64);
    }
    let kinds: Vec<&str> = first.iter().map(|e| e.kind()).collect();
    assert!(
        kinds.contains(&"user/message") && kinds.contains(&"assistant/message"),
        "{kinds:?}"
    );
    let end = first.last().unwrap();
    assert_eq!(
        end.data["data"]["reason"]["kind"], "completed",
        "{}",
        end.data
    );
    let streamed: String = first
        .iter()
        .filter(|e| e.kind() == "assistant/chunk")
        .filter_map(|e| e.data["data"]["chunk"]["text"].as_str())
        .collect();
    assert_eq!(streamed, "Hello from the fake model.");

    // Resume after seq k: exactly the events k+1 .. end, identical.
    let k = 3u64;
    let mut resumed = web.stream(&id, Some(k)).await;
    let rest = resumed.until("turn/end").await;
    assert_eq!(rest, first[(k as usize + 1)..].to_vec());

    // A second prompt on the live stream arrives after what was already seen.
    web.provider.push_reply(text("Second answer."));
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/prompt"),
            json!({"text": "again"}),
        ))
        .await;
    assert_eq!(status, 202, "{body}");
    let second = stream.until("turn/end").await;
    assert_eq!(second[0].id, end.id + 1);
    assert_eq!(second.last().unwrap().data["data"]["turn"], 2);

    // Listing: grouped by workspace, with title, times and cost.
    let (status, list) = web.json(web.get("/api/sessions")).await;
    assert_eq!(status, 200);
    let workspace = &list["workspaces"][0];
    let cwd = std::fs::canonicalize(web.cwd.path()).unwrap();
    assert_eq!(workspace["cwd"], cwd.to_string_lossy().as_ref());
    let session = &workspace["sessions"][0];
    assert_eq!(session["id"], id.as_str());
    assert_eq!(session["title"], "say hello");
    assert_eq!(session["live"], true);
    assert!(session["costUsd"].is_number(), "{session}");
    assert!(session["updatedAt"].as_u64().unwrap() >= session["createdAt"].as_u64().unwrap());

    let (status, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(status, 200);
    assert_eq!(detail["model"], "deepseek-v4-flash");
    assert_eq!(detail["permission"], "danger-full-access");
    assert_eq!(detail["running"], false);
    web.stop().await;
}

#[tokio::test]
async fn cancel_ends_a_stalled_turn_aborted() {
    let stall = SseReply::new().text("partial answer").end(StreamEnd::Stall);
    let mut web = Web::start(vec![stall.into()]).await;
    let id = web.create("wait forever").await;
    let mut stream = web.stream(&id, None).await;
    web.provider.wait_for_stalls(1).await;
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["running"], true, "{detail}");
    let (status, body) = web
        .json(web.post(&format!("/api/sessions/{id}/cancel"), json!({})))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["cancelled"], true);
    let events = stream.until("turn/end").await;
    let end = events.last().unwrap();
    assert_eq!(
        end.data["data"]["reason"]["kind"], "aborted",
        "{}",
        end.data
    );
    let interrupted = events
        .iter()
        .find(|e| e.kind() == "assistant/message")
        .expect("the partial reply is kept");
    assert_eq!(interrupted.data["data"]["interrupted"], true);
    // Nothing runs now: a second cancel reports that.
    let (_, body) = web
        .json(web.post(&format!("/api/sessions/{id}/cancel"), json!({})))
        .await;
    assert_eq!(body["cancelled"], false);
    web.stop().await;
}

#[tokio::test]
async fn fork_export_and_rename() {
    let mut web = Web::start(vec![text("First."), text("Second.")]).await;
    let id = web.create("one").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    web.json(web.post(
        &format!("/api/sessions/{id}/prompt"),
        json!({"text": "two"}),
    ))
    .await;
    stream.until("turn/end").await;

    // Fork at turn 1: a new stored session with the parent and the seed.
    let (status, fork) = web
        .json(web.post(&format!("/api/sessions/{id}/fork"), json!({"atTurn": 1})))
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["parentSession"], id.as_str());
    let fork_id = fork["id"].as_str().unwrap().to_string();
    let mut forked = web.stream(&fork_id, None).await;
    let seeded = forked.until("session/end-seed").await;
    assert_eq!(seeded.iter().filter(|e| e.kind() == "turn/end").count(), 1);
    let (status, _) = web
        .json(web.post(&format!("/api/sessions/{id}/fork"), json!({"atTurn": 9})))
        .await;
    assert_eq!(status, 400);

    // Export: Markdown transcript and the raw JSON lines.
    let md = web
        .get(&format!("/api/sessions/{id}/export?format=md"))
        .send()
        .await
        .unwrap();
    assert_eq!(md.status(), 200);
    assert!(md.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .contains("attachment"));
    let md = md.text().await.unwrap();
    assert!(md.contains("First.") && md.contains("Second."), "{md}");
    let jsonl = web
        .get(&format!("/api/sessions/{id}/export?format=jsonl"))
        .send()
        .await
        .unwrap();
    let jsonl = jsonl.text().await.unwrap();
    let first: serde_json::Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "session");
    assert_eq!(first["id"], id.as_str());
    let (status, _) = web
        .json(web.get(&format!("/api/sessions/{id}/export?format=zip")))
        .await;
    assert_eq!(status, 400);

    // Rename a live session: a `session/title` event from the user, seen on the stream.
    let (status, body) = web
        .json(web.post(
            &format!("/api/sessions/{id}/title"),
            json!({"title": "  My   session "}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let titled = stream.until("session/title").await;
    let title = titled.last().unwrap();
    assert_eq!(title.data["data"]["title"], "My session");
    assert_eq!(title.data["data"]["source"], json!({"kind": "user"}));
    // Rename a stored (not live) session too.
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{fork_id}/title"),
            json!({"title": "Fork"}),
        ))
        .await;
    assert_eq!(status, 200);
    let (_, list) = web.json(web.get("/api/sessions")).await;
    let titles: Vec<&str> = list["workspaces"][0]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert!(
        titles.contains(&"My session") && titles.contains(&"Fork"),
        "{titles:?}"
    );

    // The renamed live session still takes prompts.
    web.provider.push_reply(text("Third."));
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
    web.stop().await;
}

#[tokio::test]
async fn stored_sessions_are_read_only_until_a_prompt_resumes_them() {
    let mut web = Web::start(vec![text("Before restart.")]).await;
    let id = web.create("first").await;
    let mut stream = web.stream(&id, None).await;
    let before = stream.until("turn/end").await;
    // A new server over the same home: the session is stored, not live.
    let server = web.server.take().unwrap();
    server.shutdown().await.unwrap();
    let listener = dsh_server::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let factory = std::sync::Arc::new(support::TestFactory {
        base_url: web.provider.base_url(),
        spill: web.home.path().join("spill"),
        extra: Vec::new(),
        model_titles: false,
        home: web.home.path().to_path_buf(),
    });
    let options = dsh_server::ServerOptions {
        home: web.home.path().to_path_buf(),
        store: dsh_session::StoreKind::Jsonl,
        prices: dsh_session::PriceTable::default_deepseek(),
        default_cwd: web.cwd.path().to_path_buf(),
        allow_remote: false,
    };
    let server = dsh_server::WebServer::start(listener, options, factory).unwrap();
    web.base = format!("http://127.0.0.1:{}", server.address().port());
    web.token = support::sign_in(&web.client, &server.url()).await;
    web.server = Some(server);

    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["live"], false);
    let mut stored = web.stream(&id, None).await;
    let replayed = stored.until("turn/end").await;
    assert_eq!(replayed, before);
    // Cancel on a stored session does nothing; a prompt resumes it and the stream goes on.
    let (_, body) = web
        .json(web.post(&format!("/api/sessions/{id}/cancel"), json!({})))
        .await;
    assert_eq!(body["cancelled"], false);
    web.provider.push_reply(text("After restart."));
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/prompt"),
            json!({"text": "again"}),
        ))
        .await;
    assert_eq!(status, 202);
    let after = stored.until("turn/end").await;
    assert_eq!(after[0].id, before.last().unwrap().id + 1);
    assert_eq!(after.last().unwrap().data["data"]["turn"], 2);
    web.stop().await;
}

#[tokio::test]
async fn steer_and_model_switch() {
    let slow = SseReply::new()
        .text("working")
        .delay(Duration::from_millis(300))
        .text(" still")
        .finish("stop", Some(WireUsage::default()));
    let mut web = Web::start(vec![slow.into(), text("Steered.")]).await;
    let id = web.create("start").await;
    let mut stream = web.stream(&id, None).await;
    let mut events = stream.until("assistant/chunk").await;
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/prompt"),
            json!({"text": "focus", "mode": "steer"}),
        ))
        .await;
    assert_eq!(status, 202);
    let (status, call) = web
        .json(web.post(
            &format!("/api/sessions/{id}/call"),
            json!({"model": "deepseek-v4-pro", "effort": "high"}),
        ))
        .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["model"], "deepseek-v4-pro");
    assert_eq!(call["effort"], "high");
    events.extend(stream.until("turn/end").await);
    let steps = events.iter().filter(|e| e.kind() == "step/start").count();
    assert_eq!(steps, 2, "the steer forced a second step");
    let change = events
        .iter()
        .find(|e| e.kind() == "request/header" && e.data["data"]["reason"] == "change")
        .expect("the model switch is logged as a header change");
    assert_eq!(
        change.data["data"]["header"]["config"]["model"], "deepseek-v4-pro",
        "{}",
        change.data
    );
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{id}/call"),
            json!({"effort": "extreme"}),
        ))
        .await;
    assert_eq!(status, 400);
    let (status, _) = web
        .json(web.post(&format!("/api/sessions/{id}/prompt"), json!({"text": " "})))
        .await;
    assert_eq!(status, 400);
    web.stop().await;
}

/// The server lists through a catalog it keeps in line by watching the session folders
/// (docs/sessions.md, "Watched listing"): a log appended behind its back (by another program,
/// no writer of ours), a session made and one deleted behind its back all show on the next
/// first page.
#[tokio::test]
async fn the_first_page_follows_logs_changed_behind_the_servers_back() {
    use std::io::Write as _;
    let mut web = Web::start(Vec::new()).await;
    let store = dsh_session::JsonlStore::new(web.home.path());
    let mut logs = Vec::new();
    for k in 0..6 {
        let writer = dsh_session::SessionStore::create(
            &store,
            &format!("/stored/p{}", k % 2),
            Default::default(),
        )
        .unwrap();
        logs.push((
            writer.header().id.clone(),
            store.find(&writer.header().id).unwrap(),
        ));
    }
    let first_ids = |page: &serde_json::Value| -> Vec<String> {
        page["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|ws| ws["sessions"].as_array().unwrap().clone())
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, page) = web.json(web.get("/api/sessions?limit=2")).await;
    assert_eq!(status, 200, "{page}");
    let (old_id, old_log) = logs
        .iter()
        .find(|(id, _)| !first_ids(&page).contains(id))
        .unwrap()
        .clone();
    let later = dsh_session::now_ms() + 3_600_000;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&old_log)
        .unwrap();
    writeln!(
        file,
        r#"{{"type":"session/title","time":{later},"data":{{"title":"continued elsewhere"}}}}"#
    )
    .unwrap();
    drop(file);
    let (_, page) = web.json(web.get("/api/sessions?limit=2")).await;
    let top = &page["workspaces"][0]["sessions"][0];
    assert_eq!(top["id"], old_id.as_str(), "{page}");
    assert_eq!(top["title"], "continued elsewhere", "{page}");
    assert_eq!(top["updatedAt"], later, "{page}");
    // Deleted behind its back: gone from the listing.
    std::fs::remove_dir_all(old_log.parent().unwrap()).unwrap();
    let (_, all) = web.json(web.get("/api/sessions")).await;
    assert!(!first_ids(&all).contains(&old_id), "{all}");
    assert_eq!(first_ids(&all).len(), 5, "{all}");
    // Made behind its back, in a new working directory: listed.
    let other = dsh_session::JsonlStore::new(web.home.path());
    let writer =
        dsh_session::SessionStore::create(&other, "/stored/new", Default::default()).unwrap();
    let new_id = writer.header().id.clone();
    drop(writer);
    let (_, all) = web.json(web.get("/api/sessions")).await;
    assert!(first_ids(&all).contains(&new_id), "{all}");
    web.stop().await;
}

#[tokio::test]
async fn session_list_pages_follow_the_cursor_to_the_end() {
    let mut web = Web::start(Vec::new()).await;
    let store = dsh_session::JsonlStore::new(web.home.path());
    let mut made = std::collections::BTreeSet::new();
    for k in 0..7 {
        let cwd = format!("/stored/project-{}", k % 3);
        let writer = dsh_session::SessionStore::create(&store, &cwd, Default::default()).unwrap();
        made.insert(writer.header().id.clone());
    }
    let mut seen = Vec::new();
    let mut path = "/api/sessions?limit=3".to_string();
    let mut pages = 0;
    loop {
        let (status, page) = web.json(web.get(&path)).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let ids: Vec<String> = page["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|ws| ws["sessions"].as_array().unwrap().clone())
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        assert!(ids.len() <= 3, "{page}");
        seen.extend(ids);
        match page["next"].as_str() {
            Some(next) => path = format!("/api/sessions?limit=3&after={next}"),
            None => break,
        }
    }
    assert!(pages >= 3, "seven sessions in pages of three");
    assert_eq!(seen.len(), made.len(), "no session twice: {seen:?}");
    assert_eq!(
        seen.into_iter().collect::<std::collections::BTreeSet<_>>(),
        made
    );
    // Without `limit`: a page of 100, all seven here, and no cursor.
    let (_, all) = web.json(web.get("/api/sessions")).await;
    assert!(all["next"].is_null(), "{all}");
    // Refused with a fix: a made-up cursor, a zero limit.
    let (status, body) = web
        .json(web.get("/api/sessions?limit=3&after=yesterday"))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("`next` value"), "{body}");
    let (status, _) = web.json(web.get("/api/sessions?limit=0")).await;
    assert_eq!(status, 400);
    web.stop().await;
}

/// The listing is never sent whole: without `limit` a page holds 100 sessions, and no `limit`
/// gets more than 500 (docs/web.md); the pages still reach every session, once each.
#[tokio::test]
async fn session_list_is_paged_without_a_limit_and_capped() {
    let mut web = Web::start(Vec::new()).await;
    let store = dsh_session::JsonlStore::new(web.home.path());
    let mut made = std::collections::BTreeSet::new();
    for k in 0..501 {
        let cwd = format!("/stored/project-{}", k % 4);
        let writer = dsh_session::SessionStore::create(&store, &cwd, Default::default()).unwrap();
        made.insert(writer.header().id.clone());
    }
    let ids = |page: &serde_json::Value| -> Vec<String> {
        page["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|ws| ws["sessions"].as_array().unwrap().clone())
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    let mut path = "/api/sessions".to_string();
    loop {
        let (status, page) = web.json(web.get(&path)).await;
        assert_eq!(status, 200, "{page}");
        sizes.push(ids(&page).len());
        seen.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => path = format!("/api/sessions?after={next}"),
            None => break,
        }
    }
    assert_eq!(sizes, [100, 100, 100, 100, 100, 1]);
    assert_eq!(seen.len(), made.len(), "no session twice");
    assert_eq!(
        seen.into_iter().collect::<std::collections::BTreeSet<_>>(),
        made
    );
    let (status, big) = web.json(web.get("/api/sessions?limit=100000")).await;
    assert_eq!(status, 200, "{big}");
    assert_eq!(ids(&big).len(), 500);
    let next = big["next"].as_str().expect("a cursor after 500 of 501");
    let (_, rest) = web
        .json(web.get(&format!("/api/sessions?limit=100000&after={next}")))
        .await;
    assert_eq!(ids(&rest).len(), 1, "{rest}");
    assert!(rest["next"].is_null(), "{rest}");
    web.stop().await;
}

/// Every `session.jsonl` under `dir`.
fn session_logs(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            session_logs(&path, out);
        } else if path.file_name().is_some_and(|n| n == "session.jsonl") {
            out.push(path);
        }
    }
}

#[tokio::test]
async fn tool_events_carry_the_tools_presentation_also_from_older_logs() {
    let call = SseReply::new()
        .tool_call(0, "c1", "read", r#"{"file_path": "a.txt"}"#)
        .finish("tool_calls", Some(WireUsage::default()));
    let mut web = Web::start(vec![call.into(), text("read it")]).await;
    std::fs::write(web.cwd.path().join("a.txt"), "one line\n").unwrap();
    let id = web.create("read a.txt").await;
    let mut stream = web.stream(&id, None).await;
    let events = stream.until("turn/end").await;
    let data = |events: &[support::SseEvent], kind: &str| {
        events
            .iter()
            .find(|e| e.kind() == kind)
            .map(|e| e.data["data"].clone())
            .unwrap()
    };
    let presentation = json!({"title": "read", "subject": "a.txt", "kind": "read",
        "view": "contents", "locations": ["a.txt"]});
    let summary = json!({"text": "1 line read", "subject": "a.txt"});
    assert_eq!(data(&events, "tool/call")["presentation"], presentation);
    assert_eq!(data(&events, "tool/result")["summary"], summary);
    drop(stream);

    // The same session as a log written before calls carried their presentation: the server
    // fills it in, so the page gets titles and summaries all the same.
    web.restart().await;
    let mut logs = Vec::new();
    session_logs(web.home.path(), &mut logs);
    assert_eq!(logs.len(), 1, "{logs:?}");
    let stripped: Vec<String> = std::fs::read_to_string(&logs[0])
        .unwrap()
        .lines()
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(data) = value.get_mut("data").and_then(|d| d.as_object_mut()) {
                data.remove("presentation");
                data.remove("summary");
            }
            value.to_string()
        })
        .collect();
    std::fs::write(&logs[0], stripped.join("\n") + "\n").unwrap();
    let mut stored = web.stream(&id, None).await;
    let replayed = stored.until("turn/end").await;
    assert_eq!(data(&replayed, "tool/call")["presentation"], presentation);
    assert_eq!(data(&replayed, "tool/result")["summary"], summary);
    web.stop().await;
}
