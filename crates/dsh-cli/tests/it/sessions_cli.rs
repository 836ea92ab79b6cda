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
        // No hit says so (issue 41), in both stores.
        let none = run(&["search", "quokka"]);
        assert!(none.status.success());
        assert_eq!(
            text(&none.stdout),
            "no session message contains `quokka`\n",
            "{store}"
        );

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
    // A child says who started it and what its descriptor is, not "forked after 0 events" or
    // "no feature for it in this build" (issue 40, point 10).
    assert!(
        transcript.contains("sub-agent started by `14dda109-5728-45ba-a002-7db9543fe50e`"),
        "{transcript}"
    );
    assert!(transcript.contains("_(sub-agent `"), "{transcript}");
    assert!(!transcript.contains("after 0 events"), "{transcript}");
    assert!(!transcript.contains("no feature for it"), "{transcript}");

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

/// `dsh sessions list --all` prints, byte for byte, the lines the sessions' summaries give
/// (the layout `format!` made before the listing was laid out by hand, docs/PERFORMANCE.md,
/// "Session listing", fourth pass): usage of two models, a model without a price, a title
/// with characters of several bytes, an open session, a damaged log, for both stores.
#[test]
fn list_all_prints_what_the_summaries_say() {
    use dsh_llm::{ContentBlock, MessageSource, Role, Usage};
    use dsh_session::{AssistantMessage, ListFilter, PriceTable};
    for store_kind in ["jsonl", "sqlite"] {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let store = dsh_session::open_store(
            dsh_session::StoreKind::parse(store_kind).unwrap(),
            home.path(),
        )
        .unwrap();
        let plans: [(&str, &[&str], bool); 4] = [
            (
                "Ünïcødé title — ✓",
                &["deepseek-v4-flash", "deepseek-v4-pro"],
                true,
            ),
            ("plain", &["deepseek-v4-pro"], true),
            ("unpriced", &["deepseek-v4-flash", "other-model"], true),
            ("still open", &["deepseek-v4-flash"], false),
        ];
        for (k, (title, models, close)) in plans.iter().enumerate() {
            let dir = cwd.path().join(format!("p{k}"));
            let mut w = store
                .create(&dir.to_string_lossy(), CreateOptions::default())
                .unwrap();
            w.append(Event::TurnStart(TurnStart { turn: 1 })).unwrap();
            w.append(Event::StepStart(StepRef { turn: 1, step: 1 }))
                .unwrap();
            for (m, model) in models.iter().enumerate() {
                w.append(Event::AssistantMessage(AssistantMessage {
                    turn: 1,
                    step: 1,
                    message: Message {
                        id: format!("a{m}"),
                        role: Role::Assistant,
                        content: vec![ContentBlock::text("ok")],
                        source: MessageSource::Model {
                            provider: "deepseek".into(),
                            model: (*model).into(),
                            extra: Default::default(),
                        },
                    },
                    usage: Some(Usage {
                        input_tokens: 1234 * (k as u64 + 1) + m as u64,
                        output_tokens: 77,
                        cache_read_tokens: 999_999,
                        cache_write_tokens: 5,
                        reasoning_tokens: 3,
                    }),
                    interrupted: false,
                }))
                .unwrap();
            }
            w.append(Event::SessionTitle(SessionTitle {
                title: (*title).into(),
                message_seqs: vec![],
                source: None,
            }))
            .unwrap();
            if *close {
                w.append(Event::StepEnd(StepRef { turn: 1, step: 1 }))
                    .unwrap();
                w.append(Event::TurnEnd(TurnEnd {
                    turn: 1,
                    reason: TurnEndReason::Completed,
                }))
                .unwrap();
            }
            w.flush().unwrap();
        }
        if store_kind == "jsonl" {
            let damaged = home.path().join("sessions/--damaged--/broken");
            std::fs::create_dir_all(&damaged).unwrap();
            std::fs::write(damaged.join("session.jsonl"), b"not a log\n").unwrap();
        }
        let listing = store.list(&ListFilter { cwd: None }).unwrap();
        assert_eq!(listing.sessions.len(), plans.len());
        let prices = PriceTable::default_deepseek();
        let mut expected = format!(
            "{:<36}  {:<16}  {:>5}  {:>10}  {:>9}  TITLE\n",
            "ID", "UPDATED (UTC)", "TURNS", "TOKENS", "COST"
        );
        for s in &listing.sessions {
            let usage = s.usage().usage;
            let secs = s.updated_at / 1000;
            let (year, month, day) = dsh_llm::calendar::civil_from_days((secs / 86_400) as i64);
            let when = format!(
                "{year:04}-{month:02}-{day:02} {:02}:{:02}",
                (secs % 86_400) / 3600,
                (secs % 3600) / 60
            );
            let cost = s
                .cost(&prices)
                .map_or_else(|| "?".to_string(), |c| format!("${c:.4}"));
            expected.push_str(&format!(
                "{:<36}  {:<16}  {:>5}  {:>10}  {:>9}  {}{}  ({})\n",
                s.id,
                when,
                s.turns,
                usage.billed_input() + usage.output_tokens,
                cost,
                s.title.as_deref().unwrap_or("(untitled)"),
                if s.open { " [open]" } else { "" },
                s.cwd
            ));
        }
        assert!(expected.contains(" [open]") && expected.contains("  ?  "));
        let out = dsh(
            home.path(),
            cwd.path(),
            &["--store", store_kind, "list", "--all"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected, "{store_kind}");
        if store_kind == "jsonl" {
            assert!(
                text(&out.stderr).contains("broken"),
                "{}",
                text(&out.stderr)
            );
        }
    }
}

/// docs/decisions/0010-cold-search-scans.md: with no catalog, `sessions search` answers by
/// reading the logs (the hits a built index gives) and starts `dsh sessions reindex` in the
/// background, which builds the catalog and its index; the next search answers from it.
#[test]
fn a_cold_search_scans_and_indexes_in_the_background() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();
    let zebra = seed_session(home.path(), &cwd_path, "jsonl", "zebra");
    seed_session(home.path(), &cwd_path, "jsonl", "yak");
    let catalog = home.path().join(dsh_session::CATALOG_FILE);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", catalog.display()));
    }
    let out = dsh(home.path(), &cwd_path, &["search", "ZEBRA"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cold = text(&out.stdout);
    assert!(cold.contains(&zebra) && !cold.contains("yak"), "{cold}");
    // The background indexer builds the catalog with the texts of both sessions.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let indexed = || {
        let store = dsh_session::JsonlStore::new(home.path());
        let mut catalog = dsh_session::Catalog::open(home.path()).unwrap();
        let hits = catalog.search(&store.root(), "zebra", 10).unwrap();
        let done = matches!(&hits, dsh_session::CatalogSearch::Hits(h) if !h.is_empty());
        done
    };
    while !(catalog.exists() && indexed()) {
        assert!(std::time::Instant::now() < deadline, "no index after 30 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = dsh(home.path(), &cwd_path, &["search", "ZEBRA"]);
    assert_eq!(
        text(&out.stdout),
        cold,
        "the index answers what the scan did"
    );
    // By hand, and again while nothing changed.
    let out = dsh(home.path(), &cwd_path, &["reindex"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("indexed the sessions of"));
}
