//! `write`/`edit` under attack: a concurrent process swaps a directory of the workspace with a
//! symbolic link to an outside directory (`renameat2(RENAME_EXCHANGE)`) while the tools write
//! through it. Nothing may be created or changed outside, and the race must really have run both
//! ways (some calls succeed, some are refused). docs/SECURITY.md, "write/edit confinement".

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{Scratch, Swapper};
use dsh_tools::{PermissionPreset, ToolErrorCode};
use serde_json::json;

/// Calls per test.
const CALLS: usize = 1_000;

/// Every file and directory below `dir` with its content (directories: empty), so any
/// creation, removal or change shows up as a difference.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                pending.push(path.clone());
                found.insert(path, Vec::new());
            } else if kind.is_symlink() {
                found.insert(
                    path.clone(),
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_vec(),
                );
            } else {
                found.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    found
}

/// Fails naming what differs (created, removed or changed) between two snapshots.
fn assert_unchanged(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
    what: &str,
) {
    let differing: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert!(
        differing.is_empty(),
        "{what} landed outside the workspace: {} paths differ, e.g. {:?}",
        differing.len(),
        &differing[..differing.len().min(5)]
    );
}

/// A workspace with a real directory `d` and a link `l` to the outside directory; returns the
/// scratch area.
fn arena() -> Scratch {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    std::fs::create_dir(s.path("d")).unwrap();
    symlink(&s.outside, s.path("l")).unwrap();
    s
}

/// Where the real directory is now (`d` or `l`, whichever is not the link).
fn real_dir(s: &Scratch) -> PathBuf {
    let d = s.path("d");
    if std::fs::symlink_metadata(&d).unwrap().is_dir() {
        d
    } else {
        s.path("l")
    }
}

/// What the calls ended with.
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    refused: BTreeMap<String, usize>,
    /// Refusals that came from the descriptor walk: the swap happened after the check.
    caught_late: usize,
    samples: Vec<String>,
}

impl Tally {
    fn failed(&mut self, code: ToolErrorCode, message: String) {
        *self.refused.entry(code.as_str().to_string()).or_default() += 1;
        if message.contains("the path changed while writing") {
            self.caught_late += 1;
        }
        if self.samples.len() < 5 && !self.samples.contains(&message) {
            self.samples.push(message);
        }
    }

    fn refused_total(&self) -> usize {
        self.refused.values().sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_never_redirects_write() {
    let s = arena();
    std::fs::write(s.outside.join("keep.txt"), "outside content").unwrap();
    let before = snapshot(&s.outside);
    let started = Instant::now();
    let swapper = Swapper::start(&s.path("d"), &s.path("l"));
    let mut tally = Tally::default();
    for i in 0..CALLS {
        // A new file each time: no observation is needed, so every call reaches the write.
        let args = json!({"file_path": format!("d/f{i}"), "content": format!("call {i}\n")});
        match s.call("write", args).await {
            Ok(_) => tally.ok += 1,
            Err(err) => tally.failed(err.code, err.message),
        }
    }
    let swaps = swapper.finish();
    let elapsed = started.elapsed();
    let after = snapshot(&s.outside);
    eprintln!(
        "write race: {CALLS} calls in {elapsed:?}, {swaps} swaps, {} written, refused {:?} ({} after the check), e.g. {:#?}",
        tally.ok, tally.refused, tally.caught_late, tally.samples
    );
    assert_unchanged(&before, &after, "a write");
    assert!(swaps > 100, "the swap loop barely ran ({swaps} swaps)");
    assert!(
        tally.ok > 0,
        "no write succeeded: the race never ran the inside way"
    );
    assert!(
        tally.refused_total() > 0,
        "no write was refused: the race never ran the outside way"
    );
    assert!(
        tally.caught_late > 0,
        "no swap fell between the check and the write: the race did not test the window"
    );
    // Every successful write is inside the real directory, nothing else is there.
    let inside = real_dir(&s);
    let written = std::fs::read_dir(&inside).unwrap().count();
    assert_eq!(written, tally.ok, "files in the real directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_never_redirects_edit() {
    let s = arena();
    // Same content inside and outside: an edit that followed the swap would pass every check.
    std::fs::write(s.path("d/f"), "A").unwrap();
    std::fs::write(s.outside.join("f"), "A").unwrap();
    s.ok("read", json!({"file_path": "d/f"})).await;
    let before = snapshot(&s.outside);
    let started = Instant::now();
    let swapper = Swapper::start(&s.path("d"), &s.path("l"));
    let mut tally = Tally::default();
    let mut current = "A";
    for _ in 0..CALLS {
        let next = if current == "A" { "B" } else { "A" };
        let args = json!({"file_path": "d/f", "old_string": current, "new_string": next});
        match s.call("edit", args).await {
            Ok(_) => {
                tally.ok += 1;
                current = next;
            }
            Err(err) => tally.failed(err.code, err.message),
        }
    }
    let swaps = swapper.finish();
    let elapsed = started.elapsed();
    let after = snapshot(&s.outside);
    eprintln!(
        "edit race: {CALLS} calls in {elapsed:?}, {swaps} swaps, {} edited, refused {:?} ({} after the check), e.g. {:#?}",
        tally.ok, tally.refused, tally.caught_late, tally.samples
    );
    assert_unchanged(&before, &after, "an edit");
    assert!(swaps > 100, "the swap loop barely ran ({swaps} swaps)");
    assert!(
        tally.ok > 0,
        "no edit succeeded: the race never ran the inside way"
    );
    assert!(
        tally.refused_total() > 0,
        "no edit was refused: the race never ran the outside way"
    );
    assert!(
        tally.caught_late > 0,
        "no swap fell between the check and the edit: the race did not test the window"
    );
    let inside = real_dir(&s);
    assert_eq!(std::fs::read_to_string(inside.join("f")).unwrap(), current);
    assert_eq!(
        std::fs::read_dir(&inside).unwrap().count(),
        1,
        "leftovers beside d/f"
    );
}
