//! Every session log vendored from dsh (`fixtures/dsh/`, README there) loads, projects, renders
//! and survives the round trips; dsh's persistence catalog is known type by type; dsh-only
//! events are kept byte for byte; zstd-compressed logs are found, read and resumed
//! (docs/sessions.md, "Reading dsh's logs" and "Compressed logs").

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::io::{Cursor, Write};
use std::path::PathBuf;

use dsh_session::{
    encode_jsonl, export_markdown, fork_log, is_known_type, load_file, project, Event, JsonlStore,
    ListFilter, LoadedLog, LogReader, SessionError, SessionStore, SqliteStore, StepRef, TurnStart,
    DSH_ONLY_TYPES, KNOWN_OPAQUE_TYPES,
};

/// The refused vendored logs (`dsh_test_support::EXPECTED_REFUSALS`), for the fuzz tests too.
pub(crate) use dsh_test_support::EXPECTED_REFUSALS;

/// Every vendored dsh session log, sorted (`dsh_test_support::vendored_dsh_logs`).
pub(crate) fn vendored_dsh_logs() -> Vec<PathBuf> {
    dsh_test_support::vendored_dsh_logs().unwrap_or_else(|error| panic!("{error}"))
}

fn reread(bytes: &[u8], name: &str) -> LoadedLog {
    let mut reader = LogReader::new(Cursor::new(bytes.to_vec()), name).unwrap();
    let mut events = Vec::new();
    while let Some(env) = reader.next_event().unwrap() {
        events.push(env);
    }
    LoadedLog {
        header: reader.header().clone(),
        events,
        torn_tail: reader.torn_tail().cloned(),
    }
}

/// The `data` text of each line of type `event_type` in a JSONL file, as written.
fn raw_data_of(bytes: &[u8], event_type: &str) -> Vec<String> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            #[derive(serde::Deserialize)]
            struct Line<'a> {
                #[serde(rename = "type")]
                kind: String,
                #[serde(borrow)]
                data: &'a serde_json::value::RawValue,
            }
            let line: Line<'_> = serde_json::from_str(line).ok()?;
            (line.kind == event_type).then(|| line.data.get().to_string())
        })
        .collect()
}

#[test]
fn every_vendored_dsh_log_loads_projects_renders_and_round_trips() {
    let mut dsh_only_seen = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    for path in vendored_dsh_logs() {
        let name = path.display().to_string();
        let expected_refusal = EXPECTED_REFUSALS
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix));
        let log = match (load_file(&path), expected_refusal) {
            (Ok(log), None) => log,
            (Err(e), Some((_, says))) if e.to_string().contains(says) => continue,
            (Err(e), _) => {
                refused.push(e.to_string());
                continue;
            }
            (Ok(_), Some(_)) => {
                refused.push(format!("{name} loads: take it out of EXPECTED_REFUSALS"));
                continue;
            }
        };
        assert!(log.torn_tail.is_none(), "{name}: torn tail");
        project(&log.events).unwrap_or_else(|e| panic!("{name}: {e}"));
        let md = export_markdown(&log);
        for env in &log.events {
            if let Event::DshOnly(event) = &env.event {
                dsh_only_seen.insert(event.event_type().to_string());
                // The two this build writes itself say what they are; the rest are noted.
                let note = match event.event_type() {
                    "subagent/descriptor" => "_(sub-agent `".to_string(),
                    "web/deepseek-search-llm-request" => "_(web_search sent a request".to_string(),
                    other => format!("dsh event `{other}`"),
                };
                assert!(md.contains(&note), "{name}: no note for {note}");
            }
        }
        // Written back (packed as our writer packs) and read again: the same events.
        let bytes = encode_jsonl(&log.header, &log.events, true).unwrap();
        let again = reread(&bytes, &name);
        assert_eq!(again.header, log.header, "{name}");
        assert!(
            again.events == log.events,
            "{name}: round trip changed events"
        );
        // The data of every dsh-only event, and of dsh's `goal/change` (typed), is written
        // back byte for byte.
        let original = std::fs::read(&path).unwrap();
        for kind in DSH_ONLY_TYPES.iter().chain(&["goal/change"]) {
            assert_eq!(
                raw_data_of(&bytes, kind),
                raw_data_of(&original, kind),
                "{name}: `{kind}` data changed"
            );
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    // The vendored logs exercise the dsh-only path with real data.
    for kind in ["command/run", "subagent/descriptor", "tool/code-dispatch"] {
        assert!(dsh_only_seen.contains(kind), "no vendored log has `{kind}`");
    }
}

/// The event types listed by dsh's generated persistence catalog (vendored beside the logs).
fn catalog_types() -> Vec<String> {
    let path = dsh_test_support::dsh_fixtures_dir().join("docs/persistence-catalog.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let types: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("#### `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect();
    assert!(
        types.len() >= 48,
        "catalog headings not found in {}",
        path.display()
    );
    types
}

#[test]
fn every_type_of_dshs_persistence_catalog_is_known() {
    let catalog = catalog_types();
    for kind in &catalog {
        assert!(is_known_type(kind), "catalog type `{kind}` is unknown here");
        // A line of that type never gets the unknown-type refusal (data may be refused).
        let line = format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}}\n\
             {{\"type\":\"{kind}\",\"data\":{{}}}}\n"
        );
        let mut reader = LogReader::new(Cursor::new(line.into_bytes()), "t").unwrap();
        if let Err(e) = reader.next_event() {
            assert!(
                !matches!(e, SessionError::UnknownEvent { .. }),
                "`{kind}`: {e}"
            );
        }
    }
    // And the lists of this build name nothing dsh's catalog does not have.
    for kind in DSH_ONLY_TYPES.iter().chain(KNOWN_OPAQUE_TYPES) {
        assert!(
            catalog.iter().any(|c| c == kind),
            "`{kind}` is not in dsh's catalog"
        );
    }
}

#[test]
fn a_type_outside_dshs_catalog_keeps_the_clear_error() {
    let header = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}\n";
    let log = format!("{header}{{\"type\":\"goal/changed\",\"data\":{{\"x\":1}}}}\n");
    let mut reader = LogReader::new(Cursor::new(log.into_bytes()), "made-up.jsonl").unwrap();
    let err = reader.next_event().unwrap_err();
    assert!(
        matches!(&err, SessionError::UnknownEvent { event_type, .. } if event_type == "goal/changed"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("goal/changed") && text.contains("made-up.jsonl:2"),
        "{text}"
    );
    // The same type marked ignorable is kept (opaque), as before.
    let log =
        format!("{header}{{\"type\":\"goal/changed\",\"data\":{{\"x\":1}},\"ignorable\":true}}\n");
    let mut reader = LogReader::new(Cursor::new(log.into_bytes()), "t").unwrap();
    let env = reader.next_event().unwrap().unwrap();
    assert!(matches!(env.event, Event::Opaque { .. }));
}

/// A small log with dsh-only events whose data has odd spacing, key order and number spellings.
const ODD_LOG: &str = concat!(
    "{\"type\":\"session\",\"version\":0,\"id\":\"odd\",\"createdAt\":1,\"cwd\":\"/w\"}\n",
    "{\"type\":\"schedule/change\",\"data\":{ \"z\" : 1.50, \"a\":[2e3, -0.0],\"m\":\"\\u00e9\" }}\n",
    "{\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n",
    "{\"type\":\"user/message\",\"data\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],",
    "\"source\":{\"kind\":\"user\"}},\"surfaceOp\":\"append\"}\n",
    "{\"type\":\"command/run\",\"data\":{\"commandId\":\"c1\",\"name\":\"goal\",\"args\":\" x  \",",
    "\"source\":{\"kind\":\"user\"}}}\n",
    "{\"type\":\"turn/end\",\"data\":{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}}\n",
);

#[test]
fn dsh_only_events_survive_fork_export_and_sqlite_byte_for_byte() {
    let log = reread(ODD_LOG.as_bytes(), "odd");
    let goal = r#"{ "z" : 1.50, "a":[2e3, -0.0],"m":"\u00e9" }"#;
    let Event::DshOnly(event) = &log.events[0].event else {
        panic!("{:?}", log.events[0]);
    };
    assert_eq!(event.raw_data(), goal);
    assert_eq!(event.data()["z"], serde_json::json!(1.5));
    // Never model-visible.
    let history = project(&log.events).unwrap();
    assert_eq!(history.len(), 1);
    // `sessions show` (the Markdown export) gives one line each.
    let md = export_markdown(&log);
    assert_eq!(md.matches("_(dsh event `").count(), 2, "{md}");
    // Export as JSONL and a fork keep the data bytes.
    let exported =
        String::from_utf8(encode_jsonl(&log.header, &log.events, true).unwrap()).unwrap();
    assert!(exported.contains(&format!("\"data\":{goal}")), "{exported}");
    let (header, events) = fork_log(&log, None).unwrap();
    let forked = String::from_utf8(encode_jsonl(&header, &events, true).unwrap()).unwrap();
    assert!(forked.contains(&format!("\"data\":{goal}")), "{forked}");
    assert!(forked.contains(r#""args":" x  ""#), "{forked}");
    // Through the SQLite store and back.
    let home = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&home.path().join("s.db")).unwrap();
    let mut writer = store.create_with_header(log.header.clone()).unwrap();
    for env in log.events.clone() {
        writer.append_verbatim(env).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);
    let back = store.load("odd").unwrap();
    assert!(back.events == log.events);
}

#[test]
fn user_messages_without_id_or_role_load_with_unique_ids() {
    let log = reread(ODD_LOG.as_bytes(), "odd");
    let Event::UserMessage(message) = &log.events[2].event else {
        panic!("{:?}", log.events[2]);
    };
    assert_eq!(message.id, "dsh-seq-2");
    assert_eq!(message.role, dsh_llm::Role::User);
    // A real dsh log with such messages: every message id is unique.
    let path = dsh_test_support::dsh_fixtures_dir().join(
        "examples/headless-agent/tests/subagent-inheritance-snapshots/parent-override/child.replay.jsonl",
    );
    let log = load_file(&path).unwrap();
    let ids: Vec<&str> = log
        .events
        .iter()
        .filter_map(|e| e.event.message().map(|m| m.id.as_str()))
        .collect();
    assert!(ids.iter().any(|id| id.starts_with("dsh-seq-")), "{ids:?}");
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

/// Compresses a plain log the way dsh writes `session.jsonl.zstd`: the header line in one
/// frame, then the events in frames of a few lines each (one frame per flushed batch).
pub(crate) fn dsh_style_zstd(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lines = plain.split_inclusive(|&b| b == b'\n');
    let header = lines.next().unwrap();
    out.extend(zstd::encode_all(header, 3).unwrap());
    let rest: Vec<&[u8]> = lines.collect();
    for batch in rest.chunks(7) {
        out.extend(zstd::encode_all(batch.concat().as_slice(), 3).unwrap());
    }
    out
}

/// A sample of vendored logs, one in ten, that have at least one closed turn.
fn zstd_sample() -> Vec<PathBuf> {
    vendored_dsh_logs()
        .into_iter()
        .step_by(10)
        .filter(|p| {
            let log = load_file(p).unwrap();
            log.events
                .iter()
                .any(|e| matches!(e.event, Event::TurnStart(_)))
        })
        .collect()
}

#[test]
fn zstd_logs_of_dsh_are_listed_read_and_resumed_into_a_plain_continuation() {
    let sample = zstd_sample();
    assert!(sample.len() >= 10, "{sample:?}");
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut ids = Vec::new();
    for (n, path) in sample.iter().enumerate() {
        let plain = std::fs::read(path).unwrap();
        let expected = load_file(path).unwrap();
        let id = format!("zstd-{n:02}");
        let ext = if n % 2 == 0 { "zstd" } else { "zst" };
        let dir = home.path().join("sessions/--w--").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let zpath = dir.join(format!("session.jsonl.{ext}"));
        std::fs::write(&zpath, dsh_style_zstd(&plain)).unwrap();
        let loaded = load_file(&zpath).unwrap();
        assert!(loaded.events == expected.events, "{}", path.display());
        ids.push((id, zpath, expected));
    }
    let listing = store.list(&ListFilter::default()).unwrap();
    assert!(listing.problems.is_empty(), "{:?}", listing.problems);
    assert_eq!(listing.sessions.len(), ids.len());
    for (id, zpath, expected) in &ids {
        let compressed = std::fs::read(zpath).unwrap();
        let found = store.find(id).unwrap();
        assert_eq!(&found, zpath);
        let mut resumed = store.resume(id).unwrap();
        let turn = resumed.next_turn;
        resumed
            .writer
            .append(Event::TurnStart(TurnStart { turn }))
            .unwrap();
        resumed
            .writer
            .append(Event::StepStart(StepRef { turn, step: 1 }))
            .unwrap();
        resumed.writer.flush().unwrap();
        drop(resumed);
        // The compressed file is untouched; the plain continuation beside it is the session.
        assert_eq!(std::fs::read(zpath).unwrap(), compressed);
        let plain = zpath.with_file_name("session.jsonl");
        assert!(plain.is_file());
        assert_eq!(store.find(id).unwrap(), plain);
        let after = store.load(id).unwrap();
        assert!(after.events.len() > expected.events.len());
        assert!(after.events[..expected.events.len()] == expected.events[..]);
        assert!(after
            .events
            .iter()
            .any(|e| matches!(&e.event, Event::TurnStart(t) if t.turn == turn)));
        // Resuming again continues the plain log.
        let again = store.resume(id).unwrap();
        assert!(again.next_turn > turn);
    }
    let listing = store.list(&ListFilter::default()).unwrap();
    assert_eq!(listing.sessions.len(), ids.len(), "one session per folder");
}

#[test]
fn a_zstd_log_cut_inside_its_last_frame_loads_the_complete_part() {
    let path = dsh_test_support::dsh_fixtures_dir().join("acp-snapshots/multi-turn/session.jsonl");
    let plain = std::fs::read(&path).unwrap();
    let full = load_file(&path).unwrap();
    let compressed = dsh_style_zstd(&plain);
    let dir = tempfile::tempdir().unwrap();
    let zpath = dir.path().join("session.jsonl.zstd");
    for cut in [
        compressed.len() - 1,
        compressed.len() - 9,
        compressed.len() * 3 / 4,
    ] {
        std::fs::write(&zpath, &compressed[..cut]).unwrap();
        let log = load_file(&zpath).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(log.events.len() < full.events.len(), "cut at {cut}");
        assert!(
            log.events[..] == full.events[..log.events.len()],
            "cut at {cut}"
        );
    }
}

#[test]
fn corrupt_zstd_gives_a_clear_error() {
    let path = dsh_test_support::dsh_fixtures_dir().join("acp-snapshots/multi-turn/session.jsonl");
    let compressed = dsh_style_zstd(&std::fs::read(&path).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let zpath = dir.path().join("session.jsonl.zstd");
    // Not zstd at all: a plain log under a zstd name.
    std::fs::copy(&path, &zpath).unwrap();
    let err = load_file(&zpath).unwrap_err().to_string();
    assert!(err.contains("zstd") && err.contains("corrupt"), "{err}");
    // Damage in the middle of a frame (the checksum or the block decoding catches it).
    let mut damaged = compressed.clone();
    let mid = damaged.len() / 2;
    for b in &mut damaged[mid..mid + 16] {
        *b ^= 0x5a;
    }
    std::fs::write(&zpath, &damaged).unwrap();
    match load_file(&zpath) {
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(&zpath.display().to_string()), "{text}");
        }
        // zstd cannot always tell: then the damage must show up as a malformed line or a
        // shorter log, never as a silently different full log.
        Ok(log) => {
            let full = load_file(&path).unwrap();
            assert!(log.events != full.events);
        }
    }
    // Resume of a corrupt log fails and leaves no plain continuation behind.
    let mut file = std::fs::File::create(&zpath).unwrap();
    file.write_all(&compressed[..8]).unwrap();
    file.write_all(&[0xff; 64]).unwrap();
    drop(file);
    let store = JsonlStore::new(dir.path());
    assert!(store.resume(zpath.to_str().unwrap()).is_err());
    assert!(!dir.path().join("session.jsonl").exists());
}
