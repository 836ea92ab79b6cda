//! Store behaviour: corrupt input, locking, resume with repair, fork, listing and search.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::io::Write;
use std::path::Path;

use dsh_llm::{ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::*;

fn user(text: &str) -> Event {
    Event::UserMessage(Message::user_text(uuid_like(text), text))
}

fn uuid_like(text: &str) -> String {
    format!("m-{}", text.len())
}

fn assistant(turn: u64, calls: &[&str]) -> Event {
    let mut content = vec![ContentBlock::text("ok")];
    for id in calls {
        content.push(ContentBlock::ToolCall {
            id: id.to_string(),
            name: "bash".into(),
            arguments: "{}".into(),
        });
    }
    Event::AssistantMessage(AssistantMessage {
        turn,
        step: 1,
        message: Message {
            id: format!("a{turn}"),
            role: Role::Assistant,
            content,
            source: MessageSource::Model {
                provider: "deepseek".into(),
                model: "deepseek-v4-flash".into(),
                extra: Default::default(),
            },
        },
        usage: Some(Usage {
            input_tokens: 1000,
            output_tokens: 100,
            ..Usage::default()
        }),
        interrupted: false,
    })
}

fn full_turn(w: &mut dyn SessionWriter, turn: u64, text: &str) {
    w.append(Event::TurnStart(TurnStart { turn })).unwrap();
    w.append(Event::StepStart(StepRef { turn, step: 1 }))
        .unwrap();
    w.append(user(text)).unwrap();
    w.append(assistant(turn, &[])).unwrap();
    w.append(Event::StepEnd(StepRef { turn, step: 1 })).unwrap();
    w.append(Event::TurnEnd(TurnEnd {
        turn,
        reason: TurnEndReason::Completed,
    }))
    .unwrap();
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

const HEADER: &str = r#"{"type":"session","version":0,"id":"s1","createdAt":0,"cwd":"/w"}"#;
const T1: &str = r#"{"type":"turn/start","data":{"turn":1}}"#;
const S1: &str = r#"{"type":"step/start","data":{"turn":1,"step":1}}"#;

#[test]
fn garbage_line_in_the_middle_is_an_error_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    write_file(&path, &format!("{HEADER}\n{T1}\nthis is not json\n{S1}\n"));
    let err = load_file(&path).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, SessionError::Malformed { ref at, .. } if at.line == 3),
        "{text}"
    );
    assert!(text.contains("session.jsonl:3"), "{text}");
}

#[test]
fn truncated_last_line_is_dropped_and_resume_sets_it_aside() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut w = store.create("/w", CreateOptions::default()).unwrap();
    full_turn(w.as_mut(), 1, "hello");
    let path = std::path::PathBuf::from(w.location());
    drop(w);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(br#"{"type":"turn/start","data":{"tu"#)
        .unwrap();
    drop(file);
    let log = load_file(&path).unwrap();
    assert_eq!(log.events.len(), 6);
    let torn = log.torn_tail.clone().unwrap();
    assert_eq!(torn.line, 8);
    let resumed = store.resume(&log.header.id).unwrap();
    assert!(resumed.repaired.is_empty());
    assert_eq!(resumed.next_turn, 2);
    let mut w = resumed.writer;
    full_turn(w.as_mut(), 2, "again");
    drop(w);
    let log = load_file(&path).unwrap();
    assert_eq!(log.events.len(), 12);
    assert!(log.torn_tail.is_none());
    let side = path.with_file_name(format!("session.jsonl.torn-{}", torn.offset));
    assert!(side.is_file(), "torn bytes kept in {}", side.display());
    // The torn bytes are the session's as much as the log is: private like it (issue 40).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600, "the log");
        assert_eq!(mode(&side), 0o600, "{} is not private", side.display());
    }
}

#[test]
fn unknown_required_event_is_refused_but_ignorable_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    write_file(
        &path,
        &format!("{HEADER}\n{T1}\n{{\"type\":\"future/thing\",\"data\":{{}}}}\n"),
    );
    let err = load_file(&path).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("future/thing") && text.contains(":3"),
        "{text}"
    );
    write_file(
        &path,
        &format!("{HEADER}\n{T1}\n{{\"type\":\"future/thing\",\"data\":{{\"a\":1}},\"ignorable\":true}}\n"),
    );
    let log = load_file(&path).unwrap();
    assert!(
        matches!(&log.events[1].event, Event::Opaque { event_type, .. } if event_type == "future/thing")
    );
}

#[test]
fn future_version_is_refused_naming_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    write_file(
        &path,
        "{\"type\":\"session\",\"version\":7,\"id\":\"x\",\"createdAt\":0,\"cwd\":\"/\"}\n",
    );
    let err = load_file(&path).unwrap_err();
    assert!(matches!(
        err,
        SessionError::UnsupportedVersion { version: 7, .. }
    ));
    assert!(err.to_string().contains("version 7"), "{err}");
}

#[test]
fn seq_field_must_match_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    write_file(
        &path,
        &format!("{HEADER}\n{{\"type\":\"turn/start\",\"seq\":4,\"data\":{{\"turn\":1}}}}\n{S1}\n"),
    );
    assert!(matches!(
        load_file(&path).unwrap_err(),
        SessionError::SeqMismatch {
            expected: 0,
            found: 4,
            ..
        }
    ));
}

#[test]
fn second_writer_gets_a_lock_error_naming_the_file() {
    let home = tempfile::tempdir().unwrap();
    for kind in [StoreKind::Jsonl, StoreKind::Sqlite] {
        let store = open_store(kind, home.path()).unwrap();
        let w = store.create("/w", CreateOptions::default()).unwrap();
        let id = w.header().id.clone();
        let err = match store.resume(&id) {
            Err(e) => e,
            Ok(_) => panic!("second writer must fail"),
        };
        assert!(matches!(err, SessionError::Locked { .. }), "{err}");
        assert!(err.to_string().contains(&id), "{err}");
        drop(w);
        assert!(store.resume(&id).is_ok(), "lock released on drop");
    }
}

#[test]
fn resume_repairs_open_turn_and_calls() {
    let home = tempfile::tempdir().unwrap();
    for kind in [StoreKind::Jsonl, StoreKind::Sqlite] {
        let store = open_store(kind, home.path()).unwrap();
        let mut w = store.create("/w", CreateOptions::default()).unwrap();
        let id = w.header().id.clone();
        full_turn(w.as_mut(), 1, "first");
        w.append(Event::TurnStart(TurnStart { turn: 2 })).unwrap();
        w.append(Event::StepStart(StepRef { turn: 2, step: 1 }))
            .unwrap();
        w.append(user("second")).unwrap();
        w.append(assistant(2, &["c1", "c2"])).unwrap();
        for id in ["c1", "c2"] {
            w.append(Event::ToolCall(ToolCall {
                turn: 2,
                step: 1,
                call_id: id.into(),
                name: "bash".into(),
                arguments: "{}".into(),
                presentation: None,
            }))
            .unwrap();
        }
        w.append(Event::ToolStarted(ToolStarted {
            turn: 2,
            step: 1,
            call_id: "c1".into(),
        }))
        .unwrap();
        drop(w);
        let resumed = store.resume(&id).unwrap();
        assert_eq!(resumed.repaired.len(), 4, "{kind:?}");
        assert_eq!(resumed.next_turn, 3);
        let history = resumed.history.history();
        assert_eq!(history.len(), 6, "{kind:?}");
        drop(resumed);
        let log = store.load(&id).unwrap();
        let codes: Vec<String> = log
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ToolResult(r) => r.error.as_ref().map(|e| e.code.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(codes, [TOOL_OUTCOME_UNKNOWN, TOOL_NOT_STARTED]);
        let last = log.events.last().unwrap();
        assert!(matches!(
            &last.event,
            Event::TurnEnd(TurnEnd {
                turn: 2,
                reason: TurnEndReason::Interrupted
            })
        ));
        assert!(matches!(
            log.events[log.events.len() - 2].event,
            Event::StepEnd(StepRef { turn: 2, step: 1 })
        ));
    }
}

#[test]
fn fork_listing_search_export_and_remove() {
    let home = tempfile::tempdir().unwrap();
    for kind in [StoreKind::Jsonl, StoreKind::Sqlite] {
        let store = open_store(kind, home.path()).unwrap();
        let cwd = format!("/proj/{kind:?}");
        let mut w = store.create(&cwd, CreateOptions::default()).unwrap();
        let id = w.header().id.clone();
        full_turn(w.as_mut(), 1, "alpha bravo");
        w.append(Event::SessionTitle(SessionTitle {
            title: "My title".into(),
            message_seqs: vec![2],
            source: None,
        }))
        .unwrap();
        full_turn(w.as_mut(), 2, "charlie delta");
        let location = w.location();
        drop(w);

        // By the live writer's location (`Op::Fork`), in the same store: the last closed turn.
        let by_location = dsh_session::fork_location(&location, None).unwrap();
        assert_eq!(by_location.turn, 2, "{kind:?}");
        assert_eq!(
            by_location.header.parent_session.as_deref(),
            Some(id.as_str())
        );
        assert!(store.load(&by_location.header.id).is_ok(), "{kind:?}");
        assert!(dsh_session::fork_location(&location, Some(7)).is_err());
        store.remove(&by_location.header.id).unwrap();

        let child = fork(store.as_ref(), &id, Some(1)).unwrap();
        assert_eq!(child.parent_session.as_deref(), Some(id.as_str()));
        assert_eq!(child.seed_length, Some(6));
        let forked = store.load(&child.id).unwrap();
        assert_eq!(forked.events.len(), 7);
        assert!(matches!(
            forked.events[6].event,
            Event::EndSeed(EndSeed { inherited: true })
        ));
        assert!(fork(store.as_ref(), &id, Some(9)).is_err());
        let resumed = store.resume(&child.id).unwrap();
        assert_eq!(resumed.next_turn, 2);
        drop(resumed);

        let listing = store
            .list(&ListFilter {
                cwd: Some(cwd.clone()),
            })
            .unwrap();
        assert!(listing.problems.is_empty(), "{:?}", listing.problems);
        assert_eq!(listing.sessions.len(), 2, "{kind:?}");
        let parent = listing.sessions.iter().find(|s| s.id == id).unwrap();
        assert_eq!(parent.title.as_deref(), Some("My title"));
        assert_eq!(parent.turns, 2);
        assert_eq!(parent.usage().usage.input_tokens, 2000);
        let cost = parent.cost(&PriceTable::default_deepseek()).unwrap();
        assert!(cost > 0.0);
        let hits = store.search("charlie", 10).unwrap();
        assert!(hits.iter().any(|h| h.session_id == id), "{kind:?} {hits:?}");

        let log = store.load(&id).unwrap();
        let md = export_markdown(&log);
        assert!(
            md.contains("# My title") && md.contains("charlie delta"),
            "{md}"
        );

        store.remove(&child.id).unwrap();
        assert!(matches!(
            store.load(&child.id),
            Err(SessionError::NotFound(_))
        ));
    }
}

#[test]
fn zip_export_contains_session_and_sub_agent_logs() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut w = store.create("/w", CreateOptions::default()).unwrap();
    full_turn(w.as_mut(), 1, "zip me");
    let path = std::path::PathBuf::from(w.location());
    let id = w.header().id.clone();
    drop(w);
    let sub = path.parent().unwrap().join("sub-1");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&path, sub.join("session.jsonl")).unwrap();
    let subs = store.sub_agent_logs(&id).unwrap();
    assert_eq!(subs.len(), 1);
    let mut out = std::io::Cursor::new(Vec::new());
    export_zip(&mut out, &std::fs::read(&path).unwrap(), &subs).unwrap();
    let archive = zip::ZipArchive::new(std::io::Cursor::new(out.into_inner())).unwrap();
    let names: Vec<&str> = archive.file_names().collect();
    assert!(names.contains(&"session.jsonl") && names.contains(&"sub-1/session.jsonl"));
}

/// An exact id names its session whichever working directory's folder holds it, without a
/// walk of every folder; a unique prefix and an ambiguous one behave as before; and a key
/// that is no plain name never resolves outside a session's folder (docs/sessions.md,
/// "Finding a session").
#[test]
fn sessions_are_found_by_id_and_prefix_across_working_directories() {
    let home = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut made = Vec::new();
    for dir in 0..5 {
        for n in 0..3 {
            let mut w = store
                .create(&format!("/proj/dir-{dir}"), CreateOptions::default())
                .unwrap();
            full_turn(w.as_mut(), 1, &format!("session {dir}/{n}"));
            made.push(w.header().id.clone());
        }
    }
    for id in &made {
        assert_eq!(&store.resolve(id).unwrap(), id);
        let folder = store.session_folder(id).unwrap();
        assert_eq!(folder.file_name().unwrap().to_string_lossy(), id.as_str());
        assert_eq!(&store.load(id).unwrap().header.id, id);
    }
    // A unique prefix still resolves; a prefix of every id is ambiguous.
    let id = &made[7];
    let prefix = (1..id.len())
        .map(|n| &id[..n])
        .find(|p| made.iter().filter(|other| other.starts_with(p)).count() == 1)
        .unwrap();
    assert_eq!(&store.resolve(prefix).unwrap(), id);
    assert!(matches!(
        store.resolve(""),
        Err(SessionError::Ambiguous { .. })
    ));
    // A log lying in the sessions folder itself is no session: `..` (which would lead from a
    // working directory's folder up to it) is not an id.
    let sessions = home.path().join("sessions");
    let log = store.session_folder(id).unwrap().join("session.jsonl");
    std::fs::copy(&log, sessions.join("session.jsonl")).unwrap();
    for key in ["..", "."] {
        assert!(
            matches!(store.resolve(key), Err(SessionError::NotFound(_))),
            "{key}"
        );
    }
    // A session folder copied into another working directory's folder: the id names the copy
    // met first in the sessions folder's own order, as the walk of every folder did.
    let original = store.session_folder(id).unwrap();
    let other = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|folder| folder.is_dir() && *folder != original.parent().unwrap())
        .unwrap();
    let copy = other.join(id);
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(&log, copy.join("session.jsonl")).unwrap();
    let first = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|entry| entry.path().join(id))
        .find(|candidate| candidate.join("session.jsonl").is_file())
        .unwrap();
    assert_eq!(store.session_folder(id).unwrap(), first);
}

/// Attack (rewind, docs/rewind.md): a message sent while turn 1 ran is queued before turn 1
/// ends and claimed by turn 2. A fork before turn 2 must not keep it queued: resuming the
/// fork would send turn 2's message again on its own.
#[test]
fn a_fork_before_a_turn_does_not_keep_that_turns_queued_message() {
    let home = tempfile::tempdir().unwrap();
    for kind in [StoreKind::Jsonl, StoreKind::Sqlite] {
        let store = open_store(kind, home.path()).unwrap();
        let mut w = store.create("/proj/q", CreateOptions::default()).unwrap();
        let id = w.header().id.clone();
        let queued = |text: &str| {
            Event::InboxSpliced(InboxSplice {
                target: "next-turn".into(),
                start: 0,
                removed_count: None,
                inserted: vec![Message::user_text(uuid_like(text), text)],
                outcome: None,
            })
        };
        let claimed = Event::InboxSpliced(InboxSplice {
            target: "next-turn".into(),
            start: 0,
            removed_count: Some(1),
            inserted: Vec::new(),
            outcome: None,
        });
        w.append(queued("first task")).unwrap();
        w.append(Event::TurnStart(TurnStart { turn: 1 })).unwrap();
        w.append(claimed.clone()).unwrap();
        w.append(Event::StepStart(StepRef { turn: 1, step: 1 }))
            .unwrap();
        w.append(user("first task")).unwrap();
        // Sent while turn 1 runs: queued for the next turn.
        w.append(queued("second task, sent early")).unwrap();
        w.append(assistant(1, &[])).unwrap();
        w.append(Event::StepEnd(StepRef { turn: 1, step: 1 }))
            .unwrap();
        w.append(Event::TurnEnd(TurnEnd {
            turn: 1,
            reason: TurnEndReason::Completed,
        }))
        .unwrap();
        w.append(Event::TurnStart(TurnStart { turn: 2 })).unwrap();
        w.append(claimed.clone()).unwrap();
        w.append(Event::StepStart(StepRef { turn: 2, step: 1 }))
            .unwrap();
        w.append(user("second task, sent early")).unwrap();
        w.append(assistant(2, &[])).unwrap();
        w.append(Event::StepEnd(StepRef { turn: 2, step: 1 }))
            .unwrap();
        w.append(Event::TurnEnd(TurnEnd {
            turn: 2,
            reason: TurnEndReason::Completed,
        }))
        .unwrap();
        drop(w);

        let forked = fork_before_turn(store.as_ref(), &id, 2).unwrap();
        let log = store.load(&forked.header.id).unwrap();
        // Replay the inbox as resuming does (`Agent::resume`).
        let mut queue: Vec<String> = Vec::new();
        for env in &log.events {
            if let Event::InboxSpliced(s) = &env.event {
                let start = (s.start as usize).min(queue.len());
                let end = (start + s.removed_count.unwrap_or(0) as usize).min(queue.len());
                queue.drain(start..end);
                for (i, m) in s.inserted.iter().enumerate() {
                    queue.insert(start + i, m.text());
                }
            }
        }
        assert!(queue.is_empty(), "{kind:?}: still queued: {queue:?}");
        assert_eq!(forked.turn, 1);
        let resumed = store.resume(&forked.header.id).unwrap();
        assert_eq!(resumed.next_turn, 2, "{kind:?}");
    }
}
