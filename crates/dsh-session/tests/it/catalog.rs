//! The session catalog (docs/sessions.md, "The session catalog") against the full scan it
//! stands for: after random appends, deletions, logs changed behind its back, zstd logs, a
//! damaged catalog file, and a writer SIGKILLed (a real child process) while it records.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_llm::{ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "DSH_SESSION_CATALOG_CHILD";
pub(crate) const CWDS: [&str; 4] = ["/w/alpha", "/w/beta", "/w/gamma space", "/w/delta"];

fn reply(turn: u64, model: &str, tokens: u64) -> Event {
    Event::AssistantMessage(AssistantMessage {
        turn,
        step: 1,
        message: Message {
            id: format!("a{turn}"),
            role: Role::Assistant,
            content: vec![ContentBlock::text("done")],
            source: MessageSource::Model {
                provider: "deepseek".into(),
                model: model.into(),
                extra: Default::default(),
            },
        },
        usage: Some(Usage {
            input_tokens: tokens,
            output_tokens: tokens / 10,
            ..Usage::default()
        }),
        interrupted: false,
    })
}

/// One turn; `close` false leaves it open (a live writer, or a crash to repair).
pub(crate) fn turn(w: &mut dyn SessionWriter, rng: &mut impl Rng, close: bool) {
    let turn = w.state().next_turn();
    w.append(Event::TurnStart(TurnStart { turn })).unwrap();
    w.append(Event::StepStart(StepRef { turn, step: 1 }))
        .unwrap();
    w.append(Event::UserMessage(Message::user_text(
        format!("u{turn}-{}", rng.gen::<u32>()),
        format!("question {turn}"),
    )))
    .unwrap();
    if rng.gen_bool(0.3) {
        w.append(Event::SessionTitle(SessionTitle {
            title: format!("title {}", rng.gen::<u16>()),
            message_seqs: Vec::new(),
            source: None,
        }))
        .unwrap();
    }
    let model = ["deepseek-v4-flash", "deepseek-v4-pro", "other"][rng.gen_range(0..3)];
    w.append(reply(turn, model, rng.gen_range(1..100_000)))
        .unwrap();
    if close {
        w.append(Event::StepEnd(StepRef { turn, step: 1 })).unwrap();
        w.append(Event::TurnEnd(TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
        }))
        .unwrap();
    } else {
        w.flush().unwrap();
    }
}

pub(crate) fn new_session(store: &JsonlStore, rng: &mut impl Rng) -> String {
    let cwd = CWDS[rng.gen_range(0..CWDS.len())];
    let mut w = store.create(cwd, CreateOptions::default()).unwrap();
    for _ in 0..rng.gen_range(0..3) {
        turn(w.as_mut(), rng, true);
    }
    w.header().id.clone()
}

pub(crate) fn damaged_set(listing: &Listing) -> BTreeSet<(String, String)> {
    listing
        .damaged
        .iter()
        .map(|d| (d.path.clone(), d.problem.clone()))
        .collect()
}

/// The catalog's listing (whole, per cwd, and page by page) equals the full scan, and the
/// catalog holds one row per session folder afterwards (so the listing came from it).
fn assert_matches_scan(store: &JsonlStore, what: &str) {
    assert_listing_matches_scan(store, what);
    for query in ["question 1", "DONE", "do", "by hand"] {
        let hits = |list: Vec<SearchHit>| -> BTreeSet<(String, u64, String)> {
            list.into_iter()
                .map(|h| (h.session_id, h.seq, h.event_type))
                .collect()
        };
        assert_eq!(
            hits(store.search(query, 100_000).unwrap()),
            hits(store.scan_search(query, 100_000).unwrap()),
            "{what}: search {query:?}"
        );
    }
    let home = store.root().parent().unwrap().to_path_buf();
    let rows = Catalog::open(&home).unwrap().len().unwrap();
    assert_eq!(rows, all_logs(&home).len(), "{what}: catalog rows");
}

fn assert_listing_matches_scan(store: &JsonlStore, what: &str) {
    assert_pages_match_scan(store, what, 3, |filter, page| {
        store.list_page(filter, page).unwrap()
    });
    assert_list_all_matches_scan(store, what);
}

/// `list_all` (the compact rows `dsh sessions list` prints) holds the same sessions in the same
/// order as the full scan, the same damaged logs, and the same usage and cost figures as the
/// scan's summaries, to the bit.
fn assert_list_all_matches_scan(store: &JsonlStore, what: &str) {
    let prices = PriceTable::default_deepseek();
    let filters = std::iter::once(None).chain(CWDS.iter().map(|c| Some(c.to_string())));
    for cwd in filters {
        let filter = ListFilter { cwd: cwd.clone() };
        let scan = store.scan_list(&filter).unwrap();
        let all = store.list_all(&filter).unwrap();
        let summaries: Vec<SessionSummary> = all.iter().map(|s| s.summary()).collect();
        assert_eq!(summaries, scan.sessions, "{what}: list_all of {cwd:?}");
        assert_eq!(all.len(), scan.sessions.len());
        for (s, summary) in all.iter().zip(&scan.sessions) {
            let (usage, cost) = s.usage_and_cost(&prices);
            assert_eq!(usage, summary.usage(), "{what}: usage of {}", summary.id);
            assert_eq!(
                cost.map(f64::to_bits),
                summary.cost(&prices).map(f64::to_bits),
                "{what}: cost of {}",
                summary.id
            );
        }
        let damaged: BTreeSet<(String, String)> = all
            .damaged
            .iter()
            .map(|d| (d.path.clone(), d.problem.clone()))
            .collect();
        assert_eq!(damaged, damaged_set(&scan), "{what}: list_all damaged");
        assert_eq!(all.problems.len(), all.damaged.len());
    }
}

/// The listing `list` gives (whole, per cwd, and page by page in pages of `page_size`, the
/// first page with every damaged log) equals the full scan of `store`.
pub(crate) fn assert_pages_match_scan(
    store: &JsonlStore,
    what: &str,
    page_size: usize,
    mut list: impl FnMut(&ListFilter, &ListPage) -> Listing,
) {
    let filters = std::iter::once(None).chain(CWDS.iter().map(|c| Some(c.to_string())));
    for cwd in filters {
        let filter = ListFilter { cwd: cwd.clone() };
        let scan = store.scan_list(&filter).unwrap();
        let whole = list(&filter, &ListPage::default());
        assert_eq!(whole.sessions, scan.sessions, "{what}: cwd {cwd:?}");
        assert_eq!(damaged_set(&whole), damaged_set(&scan), "{what}: {cwd:?}");
        let mut paged = Vec::new();
        let mut page = ListPage {
            limit: Some(page_size),
            after: None,
        };
        loop {
            let part = list(&filter, &page);
            assert!(part.sessions.len() <= page_size);
            if page.after.is_none() {
                assert_eq!(damaged_set(&part), damaged_set(&scan), "{what}: first page");
            }
            paged.extend(part.sessions);
            match part.next {
                Some(next) => page.after = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, scan.sessions, "{what}: pages of {cwd:?}");
    }
}

pub(crate) fn all_logs(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(folders) = std::fs::read_dir(home.join("sessions")) else {
        return out;
    };
    for folder in folders.flatten() {
        let Ok(dirs) = std::fs::read_dir(folder.path()) else {
            continue;
        };
        for dir in dirs.flatten() {
            if let Some(path) = session_file_in(&dir.path()) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Sets a file's mtime back to what it was (so only size, ctime or inode can give a change
/// away).
fn restore_mtime(path: &Path, before: &std::fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    let times = [
        libc::timespec {
            tv_sec: before.atime(),
            tv_nsec: before.atime_nsec(),
        },
        libc::timespec {
            tv_sec: before.mtime(),
            tv_nsec: before.mtime_nsec(),
        },
    ];
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path and two timespecs, as utimensat requires.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat: {}", std::io::Error::last_os_error());
}

/// Changes a log behind the catalog's back, in one of several ways.
pub(crate) fn tamper(path: &Path, rng: &mut impl Rng) -> &'static str {
    let before = std::fs::metadata(path).unwrap();
    let text = std::fs::read(path).unwrap();
    match rng.gen_range(0..5) {
        0 => {
            // A title appended by hand, same mtime.
            let mut file = OpenOptions::new().append(true).open(path).unwrap();
            let line = format!(
                "{{\"type\":\"session/title\",\"data\":{{\"title\":\"by hand {}\"}}}}\n",
                rng.gen::<u16>()
            );
            file.write_all(line.as_bytes()).unwrap();
            drop(file);
            restore_mtime(path, &before);
            "title appended by hand"
        }
        1 => {
            // Same size and mtime, different content: a digit of a token count changed.
            let mut bytes = text.clone();
            if let Some(at) = bytes.windows(14).position(|w| w == b"\"inputTokens\":") {
                let digit = &mut bytes[at + 14];
                *digit = if *digit == b'9' { b'1' } else { *digit + 1 };
            }
            std::fs::write(path, &bytes).unwrap();
            restore_mtime(path, &before);
            "same size, same mtime"
        }
        2 => {
            // Garbage in the middle: the session becomes damaged.
            let mut bytes = text.clone();
            let at = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
            bytes.splice(at..at, b"not json at all\n".iter().copied());
            std::fs::write(path, &bytes).unwrap();
            "garbage line"
        }
        3 => {
            // A torn last line (a crash mid-write).
            let mut file = OpenOptions::new().append(true).open(path).unwrap();
            file.write_all(b"{\"type\":\"turn/sta").unwrap();
            "torn tail"
        }
        _ => {
            // Replaced by an older copy through a rename (new inode).
            let cut = text
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1)
                .nth(1)
                .unwrap_or(text.len());
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &text[..cut]).unwrap();
            std::fs::rename(&tmp, path).unwrap();
            "replaced by a shorter copy"
        }
    }
}

#[test]
fn catalog_equals_full_scan_through_appends_deletions_and_tampering() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(23);
    for _ in 0..25 {
        new_session(&store, &mut rng);
    }
    assert_matches_scan(&store, "initial");
    let mut seen = BTreeSet::new();
    for round in 0..60 {
        let logs = all_logs(home.path());
        let what = match rng.gen_range(0..6) {
            0 => {
                new_session(&store, &mut rng);
                "new session"
            }
            1 | 2 => {
                let path = &logs[rng.gen_range(0..logs.len())];
                match store.resume(&path.to_string_lossy()) {
                    Ok(mut resumed) => {
                        let close = rng.gen_bool(0.7);
                        turn(resumed.writer.as_mut(), &mut rng, close);
                        "appended a turn"
                    }
                    Err(_) => "resume refused (damaged log)",
                }
            }
            3 => {
                let path = &logs[rng.gen_range(0..logs.len())];
                std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
                "deleted a session folder"
            }
            _ => tamper(&logs[rng.gen_range(0..logs.len())], &mut rng),
        };
        seen.insert(what);
        assert_matches_scan(&store, &format!("round {round} ({what})"));
    }
    assert!(seen.len() >= 7, "every kind of change was tried: {seen:?}");
}

#[test]
fn writers_record_their_session_at_turn_end_without_a_listing() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(7);
    let mut w = store.create("/w/alpha", CreateOptions::default()).unwrap();
    turn(w.as_mut(), &mut rng, true);
    // The turn end recorded the session: the catalog has its row before anything listed.
    assert_eq!(Catalog::open(home.path()).unwrap().len().unwrap(), 1);
    turn(w.as_mut(), &mut rng, false);
    drop(w);
    assert_matches_scan(&store, "after a writer closed");
}

/// The catalog stays off the path to the first request (docs/sessions.md, "The session
/// catalog"): creating a session and the flush points before its first model call (turn start,
/// the prompt, an explicit flush) neither create nor write the catalog; the turn end does.
#[test]
fn nothing_is_recorded_before_the_first_turn_end() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let db = home.path().join(CATALOG_FILE);
    let mut w = store.create("/w/alpha", CreateOptions::default()).unwrap();
    w.append(Event::TurnStart(TurnStart { turn: 1 })).unwrap();
    w.append(Event::StepStart(StepRef { turn: 1, step: 1 }))
        .unwrap();
    w.append(Event::UserMessage(Message::user_text("u1", "first prompt")))
        .unwrap();
    w.flush().unwrap();
    assert!(
        !db.exists(),
        "the catalog was touched before the first model call"
    );
    w.append(reply(1, "deepseek-v4-flash", 10)).unwrap();
    w.append(Event::StepEnd(StepRef { turn: 1, step: 1 }))
        .unwrap();
    w.append(Event::TurnEnd(TurnEnd {
        turn: 1,
        reason: TurnEndReason::Completed,
    }))
    .unwrap();
    assert_eq!(Catalog::open(home.path()).unwrap().len().unwrap(), 1);
    drop(w);
    assert_matches_scan(&store, "after the first turn");
}

#[test]
fn zstd_logs_are_catalogued_and_their_plain_continuation_replaces_them() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(9);
    let id = new_session(&store, &mut rng);
    let plain = store.find(&id).unwrap();
    let bytes = std::fs::read(&plain).unwrap();
    std::fs::write(
        plain.with_file_name("session.jsonl.zstd"),
        zstd::encode_all(&bytes[..], 3).unwrap(),
    )
    .unwrap();
    std::fs::remove_file(&plain).unwrap();
    assert_matches_scan(&store, "compressed log");
    let listing = store.list(&ListFilter::default()).unwrap();
    assert!(listing.sessions[0].location.ends_with("session.jsonl.zstd"));
    let mut resumed = store.resume(&id).unwrap();
    turn(resumed.writer.as_mut(), &mut rng, true);
    drop(resumed);
    assert_matches_scan(&store, "plain continuation");
    let listing = store.list(&ListFilter::default()).unwrap();
    assert!(listing.sessions[0].location.ends_with("session.jsonl"));
}

#[test]
fn a_damaged_or_foreign_catalog_file_is_rebuilt() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..6 {
        new_session(&store, &mut rng);
    }
    let db = home.path().join(CATALOG_FILE);
    assert_matches_scan(&store, "before");
    // Garbage over the whole file.
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", db.display()));
    }
    assert_matches_scan(&store, "garbage catalog");
    assert_eq!(Catalog::open(home.path()).unwrap().len().unwrap(), 6);
    // A valid database of another schema version (an older or newer dsh).
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("PRAGMA user_version = 99;").unwrap();
    drop(conn);
    assert_matches_scan(&store, "other schema version");
    // Rows lost (a crash before the last commit reached the disk).
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("DELETE FROM entries WHERE rowid % 2 = 0;")
        .unwrap();
    drop(conn);
    assert_matches_scan(&store, "rows lost");
    // A catalog that cannot be written at all (a directory in its place): listing reads the
    // logs instead, and is still right.
    for side in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", db.display()));
    }
    std::fs::create_dir(&db).unwrap();
    assert!(Catalog::open(home.path()).is_err());
    assert_listing_matches_scan(&store, "catalog unusable");
}

#[test]
fn a_bad_page_cursor_is_refused_with_a_fix() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let err = store
        .list_page(
            &ListFilter::default(),
            &ListPage {
                limit: Some(5),
                after: Some("yesterday".into()),
            },
        )
        .unwrap_err();
    assert!(matches!(err, SessionError::BadCursor(_)), "{err}");
    assert!(err.to_string().contains("`next` value"), "{err}");
}

/// Child mode: appends turns to sessions of the store at `$CHILD_ENV` (through the writers,
/// which record at turn ends) and lists in between (which mends rows), until killed.
#[test]
fn catalog_child() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = JsonlStore::new(Path::new(&home));
    let mut rng = StdRng::from_entropy();
    let mut n = 0u64;
    loop {
        let logs = all_logs(Path::new(&home));
        if logs.is_empty() || rng.gen_bool(0.1) {
            new_session(&store, &mut rng);
        } else if rng.gen_bool(0.2) {
            store.list(&ListFilter::default()).unwrap();
        } else {
            let path = &logs[rng.gen_range(0..logs.len())];
            if let Ok(mut resumed) = store.resume(&path.to_string_lossy()) {
                for _ in 0..rng.gen_range(1..4) {
                    let close = rng.gen_bool(0.8);
                    turn(resumed.writer.as_mut(), &mut rng, close);
                }
            }
        }
        n += 1;
        println!("S {n}");
    }
}

#[test]
fn catalog_equals_full_scan_after_sigkill_mid_update() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let home = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let store = JsonlStore::new(home.path());
    let child_err = home.path().join("child.stderr");
    let mut rng = StdRng::seed_from_u64(5);
    for trial in 0..25 {
        let mut child = Command::new(&exe)
            .args([
                "catalog::catalog_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, home.path())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&child_err).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let steps = rng.gen_range(1..15);
        let mut done = 0;
        while done < steps {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("S ") => done += 1,
                Some(Ok(_)) => {}
                _ => panic!(
                    "trial {trial}: the child stopped before it was killed: {}",
                    std::fs::read_to_string(&child_err).unwrap_or_default()
                ),
            }
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..2000)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_matches_scan(&store, &format!("after SIGKILL {trial}"));
    }
    let listing = store.list(&ListFilter::default()).unwrap();
    assert!(listing.sessions.len() >= 5, "the child made sessions");
}

#[test]
fn search_reads_the_catalogs_full_text_index_and_follows_changes() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..5 {
        new_session(&store, &mut rng);
    }
    let mut catalog = Catalog::open(home.path()).unwrap();
    // Writers recorded their rows at turn end: a few logs' texts are indexed before it answers.
    let hits = index_hits(catalog.search(&store.root(), "QUESTION 1", 100));
    assert!(!hits.is_empty(), "the index found the messages");
    assert!(
        hits.iter().all(|h| h.snippet.contains("question 1")),
        "{hits:?}"
    );
    // Too short for trigrams: the caller reads the logs instead.
    assert!(matches!(
        catalog.search(&store.root(), "qu", 100).unwrap(),
        CatalogSearch::Scan { reindex: false }
    ));
    // A message appended by a writer is found by the next search.
    let id = new_session(&store, &mut rng);
    let mut resumed = store.resume(&id).unwrap();
    resumed
        .writer
        .append(Event::UserMessage(Message::user_text(
            "z",
            "zebra crossing",
        )))
        .unwrap();
    drop(resumed);
    let hits = index_hits(catalog.search(&store.root(), "bra cross", 100));
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].session_id, id);
    // Indexed again after one more change: its old texts go, the other sessions' stay.
    let others = |catalog: &mut Catalog| {
        let hits = index_hits(catalog.search(&store.root(), "question", 1000));
        hits.into_iter().filter(|h| h.session_id != id).count()
    };
    let before = others(&mut catalog);
    let mut resumed = store.resume(&id).unwrap();
    resumed
        .writer
        .append(Event::UserMessage(Message::user_text("y", "yak shaving")))
        .unwrap();
    drop(resumed);
    let hits = index_hits(catalog.search(&store.root(), "bra cross", 100));
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(others(&mut catalog), before);
    // Deleted with its session.
    store.remove(&id).unwrap();
    let hits = index_hits(catalog.search(&store.root(), "bra cross", 100));
    assert!(hits.is_empty(), "{hits:?}");
}

/// What the search index answers once built: the hits, else the test fails.
fn index_hits(found: dsh_session::Result<CatalogSearch>) -> Vec<SearchHit> {
    match found.unwrap() {
        CatalogSearch::Hits(hits) => hits,
        CatalogSearch::Scan { reindex } => panic!("the index was not used (reindex: {reindex})"),
    }
}

/// A search with no catalog is answered by scanning the logs (docs/decisions/
/// 0010-cold-search-scans.md) and says the index is behind; what the scan finds equals, as a
/// set, what the index finds once `build_index` made it (in one read of each log, for its row
/// and its texts together, on several threads), and that index answers, in order and with the
/// same snippets, what an index built after a listing answers: over damaged, torn, compressed
/// and unreadable logs too.
#[test]
fn a_search_without_a_catalog_scans_and_the_index_built_after_agrees() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(41);
    for _ in 0..150 {
        new_session(&store, &mut rng);
    }
    let logs = all_logs(home.path());
    for (k, path) in logs.iter().enumerate().filter(|(k, _)| k % 9 == 0) {
        match k % 4 {
            0 => {
                let bytes = std::fs::read(path).unwrap();
                std::fs::write(
                    path.with_file_name("session.jsonl.zstd"),
                    zstd::encode_all(&bytes[..], 3).unwrap(),
                )
                .unwrap();
                std::fs::remove_file(path).unwrap();
            }
            1 => std::fs::write(path, b"not a log\n").unwrap(),
            _ => {
                tamper(path, &mut rng);
            }
        }
    }
    let remove_catalog = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(home.path().join(format!("{CATALOG_FILE}{suffix}")));
        }
    };
    let set = |hits: &[SearchHit]| -> BTreeSet<(String, u64, String)> {
        hits.iter()
            .map(|h| (h.session_id.clone(), h.seq, h.event_type.clone()))
            .collect()
    };
    for (query, limit) in [
        ("question 1", 100_000),
        ("question", 100_000),
        ("question", 7),
        ("DONE", 100_000),
    ] {
        remove_catalog();
        let scanned = store.search(query, limit).unwrap();
        assert!(
            store.index_behind(),
            "{query:?}: the cold search did not ask for the index"
        );
        assert!(
            !home.path().join(CATALOG_FILE).exists(),
            "the cold search made a catalog"
        );
        assert!(dsh_session::build_index(home.path(), &store.root()).unwrap());
        let built = index_hits(Catalog::open(home.path()).unwrap().search(
            &store.root(),
            query,
            limit,
        ));
        remove_catalog();
        let mut catalog = Catalog::open(home.path()).unwrap();
        catalog
            .list_all(&store.root(), &ListFilter::default())
            .unwrap();
        catalog.build_index(&store.root()).unwrap();
        let listed_first = index_hits(catalog.search(&store.root(), query, limit));
        assert!(!built.is_empty(), "{query:?}");
        assert_eq!(built, listed_first, "{query:?} (limit {limit})");
        assert_eq!(
            scanned.len(),
            built.len().min(limit),
            "{query:?} (limit {limit})"
        );
        if limit == 100_000 {
            assert_eq!(set(&scanned), set(&built), "{query:?}");
        }
        // Warm: the store's own search answers from the index now.
        assert_eq!(
            set(&store.search(query, limit).unwrap()),
            set(&listed_first)
        );
        assert!(!store.index_behind(), "{query:?}");
    }
    // The rows the index build wrote are those a listing writes.
    remove_catalog();
    dsh_session::build_index(home.path(), &store.root()).unwrap();
    assert_listing_matches_scan(&store, "after an index build without a catalog");
}

/// A catalog with rows whose logs changed by more than `INLINE_INDEX_LIMIT` since (a history
/// copied in, a catalog of an older home) also answers by scanning rather than reading them all
/// first; once built, the index answers again.
#[test]
fn many_changed_logs_send_the_search_to_the_logs() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut w = store.create("/w/many", CreateOptions::default()).unwrap();
    w.append(Event::UserMessage(Message::user_text(
        "m",
        "a question to find",
    )))
    .unwrap();
    let id = w.header().id.clone();
    drop(w);
    assert!(dsh_session::build_index(home.path(), &store.root()).unwrap());
    let mut catalog = Catalog::open(home.path()).unwrap();
    assert!(!index_hits(catalog.search(&store.root(), "question", 100)).is_empty());
    // Copies of the session's folder, each a log the catalog has no row for.
    let folder = store.session_folder(&id).unwrap();
    let log = session_file_in(&folder).unwrap();
    let bytes = std::fs::read(&log).unwrap();
    let parent = folder.parent().unwrap();
    for k in 0..=INLINE_INDEX_LIMIT {
        let copy = parent.join(format!("copy-{k}"));
        std::fs::create_dir(&copy).unwrap();
        std::fs::write(copy.join(log.file_name().unwrap()), &bytes).unwrap();
    }
    assert!(matches!(
        catalog.search(&store.root(), "question", 100).unwrap(),
        CatalogSearch::Scan { reindex: true }
    ));
    let scanned = store.search("question", 100_000).unwrap();
    assert!(store.index_behind());
    assert!(dsh_session::build_index(home.path(), &store.root()).unwrap());
    let built = index_hits(catalog.search(&store.root(), "question", 100_000));
    assert_eq!(scanned.len(), built.len());
}

/// The raw-bytes check that lets the scan skip most logs never hides a hit: queries of other
/// cases, with JSON-escaped characters (`"`, `\`, a newline), non-ASCII letters, and texts of
/// logs that continue a compressed one are found as the parser finds them.
#[test]
fn the_scans_byte_check_never_hides_a_hit() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let texts = [
        "Say \"hello\" to C:\\temp",
        "first line\nsecond line",
        "Größe und Übermaß",
        "MiXeD CaSe Needle",
    ];
    let mut w = store.create("/w/check", CreateOptions::default()).unwrap();
    for (k, text) in texts.iter().enumerate() {
        w.append(Event::UserMessage(Message::user_text(
            format!("m{k}"),
            *text,
        )))
        .unwrap();
    }
    drop(w);
    for query in [
        "\"hello\"",
        "c:\\temp",
        "line\nsecond",
        "GRÖßE",
        "übermaß",
        "mixed case needle",
        "NEEDLE",
    ] {
        let hits = store.scan_search(query, 100).unwrap();
        assert_eq!(hits.len(), 1, "{query:?}: {hits:?}");
    }
    assert!(store.scan_search("absent words", 100).unwrap().is_empty());
}

/// A home that a listing creates first (before any session) and everything written into it
/// later stay private to the user: folders 0700, logs and the catalog 0600, under the usual
/// 022 umask (docs/SECURITY.md, "Other local users").
#[test]
fn a_fresh_home_its_logs_and_the_catalog_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let home = parent.path().join("home");
    let store = JsonlStore::new(&home);
    store.list(&ListFilter::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut w = store
        .create("/w/private", CreateOptions::default())
        .unwrap();
    turn(w.as_mut(), &mut rng, true);
    drop(w);
    store.list(&ListFilter::default()).unwrap();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let mut checked = 0;
    for entry in walkdir(&home) {
        let expected = if entry.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(&entry), expected, "{} is not private", entry.display());
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} entries under the home");
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path);
        }
    }
    out
}
