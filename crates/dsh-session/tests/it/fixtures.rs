//! Every recorded dsh session loads, projects, needs no repair, and survives the round trips.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::path::PathBuf;

use dsh_llm::Role;
use dsh_session::{
    encode_jsonl, export_markdown, load_file, project, repair, Envelope, Event, SessionStore,
    SessionTracker, SqliteStore, SurfaceOp,
};

fn fixtures_dir() -> PathBuf {
    dsh_test_support::snapshot_fixtures_dir()
}

fn fixture_logs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures_dir()).expect("fixtures folder") {
        let path = entry.expect("entry").path().join("session.jsonl");
        if path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the recorded sessions, found {}",
        out.len()
    );
    out
}

fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name).join("session.jsonl")
}

#[test]
fn every_recorded_session_loads_projects_and_is_closed() {
    for path in fixture_logs() {
        let log = load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(log.torn_tail.is_none(), "{}", path.display());
        let history = project(&log.events).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let has_turns = log
            .events
            .iter()
            .any(|e| matches!(e.event, Event::TurnStart(_)));
        assert_eq!(!history.is_empty(), has_turns, "{}", path.display());
        let mut tracker = SessionTracker::new();
        for env in &log.events {
            tracker.push(env);
        }
        let closers = repair::closers(&log.header, &tracker);
        assert!(
            closers.is_empty(),
            "{} needs repair: {closers:?}",
            path.display()
        );
        let md = export_markdown(&log);
        assert_eq!(md.contains("## Turn 1"), has_turns, "{}", path.display());
    }
}

#[test]
fn seqs_count_each_packed_delta() {
    let log = load_file(&fixture("text-turn")).expect("load");
    let message = log
        .events
        .iter()
        .find(|e| matches!(e.event, Event::AssistantMessage(_)))
        .expect("assistant message");
    let sources = message.source_event_seqs.clone().expect("sources");
    assert_eq!(sources, (9..=36).collect::<Vec<u64>>());
    for seq in sources {
        assert!(matches!(
            log.events[seq as usize].event,
            Event::AssistantChunk(_)
        ));
    }
    let title = log
        .events
        .iter()
        .find_map(|e| match &e.event {
            Event::SessionTitle(t) => Some(t.clone()),
            _ => None,
        })
        .expect("title");
    assert_eq!(title.message_seqs, vec![4]);
    assert!(matches!(log.events[4].event, Event::UserMessage(_)));
    assert_eq!(message.seq, 37);
}

#[test]
fn tool_result_sources_point_at_tool_call() {
    let log = load_file(&fixture("tool-call-turn")).expect("load");
    for env in &log.events {
        if let Event::ToolResult(_) = env.event {
            let sources = env.source_event_seqs.clone().expect("sources");
            assert!(matches!(
                log.events[sources[0] as usize].event,
                Event::ToolCall(_)
            ));
        }
    }
    let history = project(&log.events).expect("project");
    let roles: Vec<Role> = history.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant
        ]
    );
}

#[test]
fn replace_span_takes_the_place_of_the_cited_message() {
    let log = load_file(&fixture("agent-instructions")).expect("load");
    let replacing = log
        .events
        .iter()
        .find(|e| matches!(e.surface_op, Some(SurfaceOp::Replace { .. })))
        .expect("a replace");
    let history = project(&log.events).expect("project");
    let Event::UserMessage(msg) = &replacing.event else {
        panic!("replace on a user message")
    };
    assert_eq!(history[1].id, msg.id, "replacement sits where seq 5 was");
    let Event::UserMessage(replaced) = &log.events[5].event else {
        panic!("seq 5 is a user message")
    };
    assert!(history.iter().all(|m| m.id != replaced.id));
}

#[test]
fn cancel_keeps_interrupted_partial_and_max_tokens_reply() {
    let log = load_file(&fixture("cancel")).expect("load");
    let history = project(&log.events).expect("project");
    assert_eq!(history.last().expect("last").text(), "partial");
    let log = load_file(&fixture("max-tokens-continue")).expect("load");
    let history = project(&log.events).expect("project");
    assert!(history.iter().all(|m| m.tool_calls().next().is_none()));
}

#[test]
fn jsonl_to_sqlite_to_jsonl_gives_identical_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("sessions.db")).expect("sqlite");
    for (i, path) in fixture_logs().into_iter().enumerate() {
        let original = load_file(&path).expect("load");
        let mut header = original.header.clone();
        header.id = format!("fixture-{i}");
        let mut writer = store.create_with_header(header.clone()).expect("create");
        for env in original.events.clone() {
            writer.append_verbatim(env).expect("append");
        }
        writer.flush().expect("flush");
        drop(writer);
        let from_db = store.load(&header.id).expect("load from sqlite");
        assert_eq!(from_db.events, original.events, "{}", path.display());
        assert_eq!(from_db.header, header);
        // Back to JSONL, packed as our writer packs, and read again.
        let bytes = encode_jsonl(&from_db.header, &from_db.events, true).expect("encode");
        let out = dir.path().join(format!("{i}.jsonl"));
        std::fs::write(&out, &bytes).expect("write");
        let again = load_file(&out).expect("reload");
        assert_eq!(again.events, original.events, "{}", path.display());
        let unpacked = encode_jsonl(&from_db.header, &from_db.events, false).expect("encode");
        std::fs::write(&out, &unpacked).expect("write");
        assert_eq!(load_file(&out).expect("reload").events, original.events);
    }
    let hits = store.search("SNAPSHOT_OK", 10).expect("search");
    assert!(!hits.is_empty());
}

#[test]
fn envelope_new_marks_messages_append() {
    let env = Envelope::new(Event::UserMessage(dsh_llm::Message::user_text("a", "b")));
    assert_eq!(env.surface_op, Some(SurfaceOp::Append));
}
