//! `dsh sessions ...` run as the real binary with a temporary `DSH_HOME`.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dsh_llm::Message;
use dsh_session::{CreateOptions, Event, SessionTitle, StepRef, TurnEnd, TurnEndReason, TurnStart};

fn fixtures() -> Vec<PathBuf> {
    let dir = dsh_test_support::snapshot_fixtures_dir();
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path().join("session.jsonl"))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn dsh(home: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("sessions")
        .args(args)
        .env("DSH_HOME", home)
        .env_remove("DSH_SESSION_STORE")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run dsh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn seed_session(home: &Path, cwd: &Path, store: &str, prompt: &str) -> String {
    let store = dsh_session::open_store(dsh_session::StoreKind::parse(store).expect("kind"), home)
        .expect("store");
    let mut w = store
        .create(&cwd.to_string_lossy(), CreateOptions::default())
        .expect("create");
    for turn in 1..=2 {
        w.append(Event::TurnStart(TurnStart { turn })).unwrap();
        w.append(Event::StepStart(StepRef { turn, step: 1 }))
            .unwrap();
        w.append(Event::UserMessage(Message::user_text(
            format!("u{turn}"),
            format!("{prompt} {turn}"),
        )))
        .unwrap();
        w.append(Event::StepEnd(StepRef { turn, step: 1 })).unwrap();
        w.append(Event::TurnEnd(TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
        }))
        .unwrap();
    }
    w.append(Event::SessionTitle(SessionTitle {
        title: format!("Title {prompt}"),
        message_seqs: vec![2],
        source: None,
    }))
    .unwrap();
    w.flush().unwrap();
    w.header().id.clone()
}

#[test]
fn show_prints_a_transcript_for_every_recorded_session() {
    let home = tempfile::tempdir().unwrap();
    for path in fixtures() {
        let out = dsh(home.path(), home.path(), &["show", &path.to_string_lossy()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            text(&out.stderr)
        );
        let md = text(&out.stdout);
        assert!(md.starts_with("# "), "{}: {md}", path.display());
    }
    let out = dsh(
        home.path(),
        home.path(),
        &["show", &fixtures()[0].to_string_lossy()],
    );
    assert!(text(&out.stdout).contains("**User**"));
}

#[test]
fn list_fork_export_search_and_rm() {
    for store in ["jsonl", "sqlite"] {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let cwd_path = cwd.path().canonicalize().unwrap();
        let id = seed_session(home.path(), &cwd_path, store, "zebra");
        let other = tempfile::tempdir().unwrap();
        seed_session(
            home.path(),
            &other.path().canonicalize().unwrap(),
            store,
            "yak",
        );
        let run = |args: &[&str]| {
            let mut all = vec!["--store", store];
            all.extend_from_slice(args);
            dsh(home.path(), &cwd_path, &all)
        };

        let out = run(&["list"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let listed = text(&out.stdout);
        assert!(
            listed.contains(&id) && listed.contains("Title zebra"),
            "{listed}"
        );
        assert!(!listed.contains("Title yak"), "{listed}");
        let all = text(&run(&["list", "--all"]).stdout);
        assert!(all.contains("Title yak"), "{all}");

        let show = text(&run(&["show", &id[..8]]).stdout);
        assert!(
            show.contains("zebra 2") && show.contains("## Turn 2"),
            "{show}"
        );

        let out = run(&["fork", &id, "--at-turn", "1"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let child = text(&out.stdout).lines().next().unwrap().to_string();
        let forked = text(&run(&["show", &child]).stdout);
        assert!(
            forked.contains("zebra 1") && !forked.contains("zebra 2"),
            "{forked}"
        );

        let md_path = cwd_path.join("t.md");
        let out = run(&[
            "export",
            &id,
            "--format",
            "md",
            "-o",
            &md_path.to_string_lossy(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(std::fs::read_to_string(&md_path).unwrap().contains("zebra"));
        let jsonl = text(&run(&["export", &id, "--format", "jsonl"]).stdout);
        assert!(jsonl.starts_with("{\"type\":\"session\""), "{jsonl}");
        let zip_path = cwd_path.join("s.zip");
        let out = run(&[
            "export",
            &id,
            "--format",
            "zip",
            "-o",
            &zip_path.to_string_lossy(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(std::fs::metadata(&zip_path).unwrap().len() > 0);

        let hits = text(&run(&["search", "zebra"]).stdout);
        assert!(hits.contains(&id), "{store}: {hits}");

        let out = run(&["rm", &child]);
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
        let out = run(&["rm", &child, "--yes"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let out = run(&["show", &child]);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("no session"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_damaged_log_gives_a_located_error() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("session.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":0,\"cwd\":\"/\"}\nnot json\n{\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n",
    )
    .unwrap();
    let out = dsh(home.path(), home.path(), &["show", &path.to_string_lossy()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("session.jsonl:2"),
        "{}",
        text(&out.stderr)
    );
}

/// `show --children` lists a session's subagents from `subagents/<id>/session.jsonl` beside
/// its log (name, state, model, usage, cost), and `show --child` prints one's transcript
/// (docs/sessions.md, "Children"). The children are dsh's recorded ones (`subagent-multi`), one
/// given this build's descriptor name.
#[test]
fn show_children_lists_subagents_and_shows_one_transcript() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let id = seed_session(home.path(), cwd.path(), "jsonl", "parent");
    let parent = dsh_session::session_path(home.path(), &cwd.path().to_string_lossy(), &id);
    write_recorded_children(parent.parent().unwrap());
    let out = dsh(home.path(), cwd.path(), &["show", &id, "--children"]);
    check_children_listing(&out);
    let out = dsh(
        home.path(),
        cwd.path(),
        &["show", &id, "--child", "agent-1"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let transcript = text(&out.stdout);
    assert!(transcript.contains("ALPHA"), "{transcript}");
    assert!(!transcript.contains("BETA"), "{transcript}");

    let out = dsh(
        home.path(),
        cwd.path(),
        &["show", &id, "--child", "agent-7"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("has no subagent `agent-7`"),
        "{}",
        text(&out.stderr)
    );
}

/// dsh's two recorded children of `subagent-multi` in `folder/subagents/`, the first given this
/// build's descriptor name `agent-1`.
fn write_recorded_children(folder: &Path) {
    let recorded = dsh_test_support::snapshot_fixtures_dir().join("../more/acp/subagent-multi");
    for (n, name) in [(1, "c-alpha"), (2, "c-beta")] {
        let text = std::fs::read_to_string(recorded.join(format!("session.{n}.jsonl"))).unwrap();
        let text = if n == 1 {
            text.replace(
                r#""version":2,"mode""#,
                r#""version":2,"name":"agent-1","mode""#,
            )
        } else {
            text
        };
        let dir = folder.join("subagents").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("session.jsonl"), text).unwrap();
    }
}

/// The `--children` listing of [`write_recorded_children`]: each child's requests, uncached
/// input, cache reads, output and cost by the default price table, from its recorded usage
/// (ALPHA: 49 input, 2,816 cache read, 23 output on deepseek-v4-flash at 0.14 / 0.0028 / 0.28
/// USD per million = $0.0000212; BETA: 48, 2,816, 21 = $0.0000205).
fn check_children_listing(out: &Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("CACHED") && lines[0].contains("COST"),
        "{listing}"
    );
    let columns = |line: &str| -> Vec<String> {
        line.split_whitespace()
            .take(8)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        columns(lines[1]),
        [
            "agent-1",
            "idle",
            "deepseek-v4-flash",
            "1",
            "49",
            "2816",
            "23",
            "$0.000021"
        ],
        "{listing}"
    );
    assert!(lines[1].ends_with("Return ALPHA only"), "{listing}");
    assert_eq!(
        columns(lines[2]),
        [
            "-",
            "idle",
            "deepseek-v4-flash",
            "1",
            "48",
            "2816",
            "21",
            "$0.000020"
        ],
        "{listing}"
    );
    assert!(lines[2].ends_with("Return BETA only"), "{listing}");
}

/// A SQLite session's children are read beside the database,
/// `$DSH_HOME/sessions.db.subagents/<session id>/subagents/` (docs/sessions.md, "Children").
#[test]
fn show_children_of_a_sqlite_session_reads_them_beside_the_database() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let id = seed_session(home.path(), cwd.path(), "sqlite", "parent");
    let folder = home.path().join("sessions.db.subagents").join(&id);
    write_recorded_children(&folder);
    let out = dsh(
        home.path(),
        cwd.path(),
        &["--store", "sqlite", "show", &id, "--children"],
    );
    check_children_listing(&out);
}
