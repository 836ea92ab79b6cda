//! The watched catalog of `dsh web` (docs/sessions.md, "Watched listing") against the full scan
//! it stands for, as an attacker of its shortcut would try it: logs appended, rewritten and
//! deleted behind its back, session and working-directory folders made, renamed and removed, the
//! kernel's event queue overflowed, and the watch budget spent. Every listing must equal the full
//! scan, and the counters must show which path answered (watches or a full walk), so that no
//! test passes by falling back to the walk unnoticed.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use dsh_session::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::catalog::{all_logs, assert_pages_match_scan, new_session, tamper, turn, CWDS};

/// Appends an event written by another program (a title, with a time after every other event)
/// to `path`, without the seq a writer would give it.
fn append_by_hand(path: &Path, title: &str, time: u64) {
    let mut env = Envelope::new(Event::SessionTitle(SessionTitle {
        title: title.into(),
        message_seqs: Vec::new(),
        source: None,
    }));
    env.time = Some(time);
    let mut line = Vec::new();
    env.encode_line(&mut line).unwrap();
    let mut value: serde_json::Value = serde_json::from_slice(&line).unwrap();
    value.as_object_mut().unwrap().remove("seq");
    let mut file = OpenOptions::new().append(true).open(path).unwrap();
    writeln!(file, "{value}").unwrap();
}

/// The watched listing (whole, per cwd, and page by page) equals the full scan.
fn assert_watched_matches_scan(watched: &mut WatchedCatalog, store: &JsonlStore, what: &str) {
    assert_pages_match_scan(store, what, 4, |filter, page| {
        watched.list_page(filter, page).unwrap()
    });
}

fn first_page(watched: &mut WatchedCatalog) -> Listing {
    watched
        .list_page(
            &ListFilter::default(),
            &ListPage {
                limit: Some(5),
                after: None,
            },
        )
        .unwrap()
}

#[test]
fn a_log_appended_behind_the_servers_back_is_at_the_top_of_the_next_page() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..30 {
        new_session(&store, &mut rng);
    }
    let mut watched = WatchedCatalog::new(home.path());
    let before = first_page(&mut watched);
    assert!(watched.watching(), "inotify watches must be available here");
    assert_eq!(watched.full_walks(), 1);
    // The oldest session, continued by another program: its log grows, no folder changes.
    let oldest = store.scan_list(&ListFilter::default()).unwrap();
    let oldest = oldest.sessions.last().unwrap();
    assert!(!before.sessions.iter().any(|s| s.id == oldest.id));
    let later = before.sessions[0].updated_at + 60_000;
    append_by_hand(Path::new(&oldest.location), "continued elsewhere", later);
    let after = first_page(&mut watched);
    assert_eq!(after.sessions[0].id, oldest.id);
    assert_eq!(
        after.sessions[0].title.as_deref(),
        Some("continued elsewhere")
    );
    assert_eq!(after.sessions[0].updated_at, later);
    // Answered from the events: no second walk.
    assert_eq!(watched.full_walks(), 1);
    assert!(watched.watching());
}

#[test]
fn the_watched_listing_equals_a_full_scan_through_changes_behind_its_back() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(23);
    let mut watched = WatchedCatalog::new(home.path());
    // Before any session: no session root to watch yet.
    assert!(first_page(&mut watched).sessions.is_empty());
    for _ in 0..12 {
        new_session(&store, &mut rng);
    }
    assert_watched_matches_scan(&mut watched, &store, "initial");
    assert!(watched.watching());
    let walks = watched.full_walks();
    let root = home.path().join("sessions");
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..70 {
        let logs = all_logs(home.path());
        let pick = |rng: &mut StdRng| logs[rng.gen_range(0..logs.len())].clone();
        let what = match rng.gen_range(0..10) {
            0 => {
                new_session(&store, &mut rng);
                "new session"
            }
            1 => {
                let path = pick(&mut rng);
                match store.resume(&path.to_string_lossy()) {
                    Ok(mut resumed) => {
                        let close = rng.gen_bool(0.7);
                        turn(resumed.writer.as_mut(), &mut rng, close);
                        "appended a turn"
                    }
                    Err(_) => "resume refused (damaged log)",
                }
            }
            2 => {
                let path = pick(&mut rng);
                std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
                "deleted a session folder"
            }
            3 => {
                // A session folder renamed within its folder (the watch follows the inode).
                let dir = pick(&mut rng).parent().unwrap().to_path_buf();
                let to = dir.with_file_name(format!("renamed-{round}"));
                std::fs::rename(&dir, &to).unwrap();
                "renamed a session folder"
            }
            4 => {
                // A session folder moved into a working-directory folder made for it.
                let dir = pick(&mut rng).parent().unwrap().to_path_buf();
                let folder = root.join(format!("--moved-{round}--"));
                std::fs::create_dir(&folder).unwrap();
                std::fs::rename(&dir, folder.join("moved")).unwrap();
                "moved into a new folder"
            }
            5 => {
                // A whole working-directory folder removed.
                let folder = pick(&mut rng)
                    .parent()
                    .unwrap()
                    .parent()
                    .unwrap()
                    .to_path_buf();
                std::fs::remove_dir_all(folder).unwrap();
                "removed a working-directory folder"
            }
            7 => {
                // The folder itself changed (an attribute), then a session made in it: the new
                // session must get its watch like any other.
                let folder = root.join(cwd_folder_name(CWDS[0]));
                if let Ok(meta) = std::fs::metadata(&folder) {
                    std::fs::set_permissions(&folder, meta.permissions()).unwrap();
                }
                let mut w = store.create(CWDS[0], CreateOptions::default()).unwrap();
                turn(w.as_mut(), &mut rng, true);
                "folder attribute, then a session in it"
            }
            6 => {
                let path = pick(&mut rng);
                append_by_hand(
                    &path,
                    &format!("by hand {round}"),
                    1_900_000_000_000 + round,
                );
                "title appended by hand"
            }
            _ => tamper(&pick(&mut rng), &mut rng),
        };
        seen.insert(what);
        if all_logs(home.path()).is_empty() {
            new_session(&store, &mut rng);
        }
        assert_watched_matches_scan(&mut watched, &store, &format!("round {round} ({what})"));
        assert!(watched.watching(), "round {round} ({what}): watches lost");
    }
    assert!(seen.len() >= 11, "every kind of change was tried: {seen:?}");
    // Every listing after the first came from the events.
    assert_eq!(watched.full_walks(), walks);
}

/// More events than the kernel queues (`max_queued_events`) make it drop them and say so
/// (`IN_Q_OVERFLOW`); the next listing must walk everything and still see a log changed among
/// the lost events.
#[test]
fn an_overflowed_event_queue_falls_back_to_a_full_walk() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(9);
    for _ in 0..8 {
        new_session(&store, &mut rng);
    }
    let mut watched = WatchedCatalog::new(home.path());
    first_page(&mut watched);
    assert!(watched.watching());
    assert_eq!(watched.full_walks(), 1);
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let logs = all_logs(home.path());
    // Two files written in turn: identical consecutive events would be merged into one.
    let dir = logs[0].parent().unwrap();
    let (a, b) = (dir.join("noise-a"), dir.join("noise-b"));
    let mut fa = std::fs::File::create(&a).unwrap();
    let mut fb = std::fs::File::create(&b).unwrap();
    for _ in 0..(max / 2 + 100) {
        fa.write_all(b"x").unwrap();
        fb.write_all(b"y").unwrap();
    }
    let target = &logs[logs.len() - 1];
    append_by_hand(target, "after the overflow", 1_900_000_000_000);
    let page = first_page(&mut watched);
    assert_eq!(
        watched.full_walks(),
        2,
        "the overflow must force a full walk"
    );
    assert_eq!(
        page.sessions[0].title.as_deref(),
        Some("after the overflow")
    );
    assert!(
        watched.watching(),
        "watches are set up again after the walk"
    );
    assert_watched_matches_scan(&mut watched, &store, "after the overflow");
    assert_eq!(watched.full_walks(), 2);
}

/// When the watches cannot all be had (the kernel's `max_user_watches`, here the catalog's own
/// cap, which takes the same path), every listing walks and stays right.
#[test]
fn without_enough_watches_every_listing_walks() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..10 {
        new_session(&store, &mut rng);
    }
    let mut watched = WatchedCatalog::new(home.path());
    watched.set_watch_limit(4);
    first_page(&mut watched);
    assert!(!watched.watching());
    assert_eq!(watched.full_walks(), 1);
    let logs = all_logs(home.path());
    append_by_hand(&logs[3], "not watched", 1_900_000_000_000);
    let page = first_page(&mut watched);
    assert_eq!(page.sessions[0].title.as_deref(), Some("not watched"));
    assert_eq!(watched.full_walks(), 2);
    assert_watched_matches_scan(&mut watched, &store, "unwatched");
    assert!(!watched.watching());
}

/// A bad cursor is refused as the store refuses it, watched or not.
#[test]
fn the_watched_catalog_refuses_a_bad_cursor() {
    let home = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    new_session(&store, &mut StdRng::seed_from_u64(1));
    let mut watched = WatchedCatalog::new(home.path());
    first_page(&mut watched);
    let err = watched
        .list_page(
            &ListFilter::default(),
            &ListPage {
                limit: Some(2),
                after: Some("not a cursor".into()),
            },
        )
        .unwrap_err();
    assert!(matches!(err, SessionError::BadCursor(_)), "{err}");
}

/// A session folder that is a symlink can be changed through its target, where no watch of the
/// session tree sees it: its working-directory folder is walked on every listing instead.
#[test]
fn a_symlinked_session_folder_is_walked_on_every_listing() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(home.path());
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..4 {
        new_session(&store, &mut rng);
    }
    // One session moved out of the tree and linked back in.
    let log = all_logs(home.path()).remove(0);
    let dir = log.parent().unwrap().to_path_buf();
    let target = elsewhere.path().join("moved-out");
    std::fs::rename(&dir, &target).unwrap();
    std::os::unix::fs::symlink(&target, &dir).unwrap();
    let mut watched = WatchedCatalog::new(home.path());
    assert_watched_matches_scan(&mut watched, &store, "linked");
    assert!(watched.watching());
    append_by_hand(
        &target.join("session.jsonl"),
        "through the link",
        1_900_000_000_000,
    );
    let page = first_page(&mut watched);
    assert_eq!(page.sessions[0].title.as_deref(), Some("through the link"));
    assert_watched_matches_scan(&mut watched, &store, "changed through the link");
    assert_eq!(
        watched.full_walks(),
        1,
        "only that folder is walked, not everything"
    );
}
