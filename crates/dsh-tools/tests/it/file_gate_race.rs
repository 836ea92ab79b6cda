//! The file gate under a path-swapping adversary (docs/SECURITY.md, "The file gate"): a thread
//! exchanges a workspace directory `d` with a link `l` to an outside directory
//! (`renameat2(RENAME_EXCHANGE)`) in a loop while property-generated sequences of `read`,
//! `grep`, `glob`, `write`, `edit` and `/undo` run through `d`. The outside directory holds
//! files with the same names and a marker: no result may ever show the marker or an
//! outside-only name, and the outside directory must be byte-for-byte unchanged.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::{Scratch, Swapper};

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use dsh_tools::{apply_undo, plan_undo, FileSnapshot, PermissionPreset};
use proptest::prelude::*;
use serde_json::json;

const MARKER: &str = "OUTSIDE-MARKER-7f3a";
const OUTSIDE_ONLY: &str = "outside-only-name.txt";

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let content = std::fs::read(entry.path()).unwrap_or_default();
        out.insert(entry.path(), content);
    }
    out
}

/// One operation of a generated sequence, on file `f<n>` of `d`.
#[derive(Debug, Clone)]
enum Op {
    Read(u8),
    Grep,
    GrepFile(u8),
    Glob,
    Write(u8),
    Edit(u8),
    Undo,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3).prop_map(Op::Read),
        Just(Op::Grep),
        (0u8..3).prop_map(Op::GrepFile),
        Just(Op::Glob),
        (0u8..3).prop_map(Op::Write),
        (0u8..3).prop_map(Op::Edit),
        Just(Op::Undo),
    ]
}

/// A workspace with `d/f0..f2` ("inside <n>") and a link `l` to an outside directory holding
/// `f0..f2` with the marker and an outside-only name.
fn arena() -> Scratch {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    std::fs::create_dir(s.path("d")).unwrap();
    for n in 0..3 {
        std::fs::write(s.path(&format!("d/f{n}")), format!("inside {n}\n")).unwrap();
        std::fs::write(s.outside.join(format!("f{n}")), format!("{MARKER} {n}\n")).unwrap();
    }
    std::fs::write(s.outside.join(OUTSIDE_ONLY), MARKER).unwrap();
    symlink(&s.outside, s.path("l")).unwrap();
    s
}

/// Runs `ops` against the arena while the swapper runs; returns every text the model saw.
async fn run(s: &Scratch, ops: &[Op], changes: &mut Vec<FileSnapshot>) -> Vec<String> {
    let mut seen = Vec::new();
    for op in ops {
        let result = match op {
            Op::Read(n) => {
                s.call("read", json!({"file_path": format!("d/f{n}")}))
                    .await
            }
            Op::Grep => {
                s.call("grep", json!({"pattern": "MARKER|inside", "path": "d"}))
                    .await
            }
            Op::GrepFile(n) => {
                s.call("grep", json!({"pattern": ".", "path": format!("d/f{n}")}))
                    .await
            }
            Op::Glob => s.call("glob", json!({"pattern": "d/*"})).await,
            Op::Write(n) => {
                let _ = s
                    .call("read", json!({"file_path": format!("d/f{n}")}))
                    .await;
                let args =
                    json!({"file_path": format!("d/f{n}"), "content": format!("inside {n}\n")});
                s.call("write", args).await
            }
            Op::Edit(n) => {
                // Read first (edit needs it), then edit through the same path.
                let _ = s
                    .call("read", json!({"file_path": format!("d/f{n}")}))
                    .await;
                let args = json!({"file_path": format!("d/f{n}"), "old_string": "inside", "new_string": "inside"});
                s.call("edit", args).await
            }
            Op::Undo => {
                if let Ok(steps) = plan_undo(changes) {
                    let _ = apply_undo(&steps);
                }
                changes.clear();
                continue;
            }
        };
        match result {
            Ok(out) => {
                if let Some(snapshot) = out.data.as_ref().and_then(FileSnapshot::from_data) {
                    changes.push(snapshot);
                }
                seen.push(format!(
                    "{}\n{}\n{}",
                    out.text_content(),
                    out.summary,
                    out.data.map(|d| d.to_string()).unwrap_or_default()
                ));
            }
            Err(err) => seen.push(err.message),
        }
    }
    seen
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 12,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn nothing_outside_is_ever_read_or_written_while_the_path_is_swapped(
        ops in prop::collection::vec(op(), 40..120)
    ) {
        let s = arena();
        let before = snapshot(&s.outside);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let swapper = Swapper::start(&s.path("d"), &s.path("l"));
        let mut changes = Vec::new();
        let seen = runtime.block_on(run(&s, &ops, &mut changes));
        let swaps = swapper.finish();
        prop_assert!(swaps > 0, "the adversary never ran");
        for text in &seen {
            prop_assert!(!text.contains(MARKER), "an outside file was read: {text}");
            prop_assert!(!text.contains(OUTSIDE_ONLY), "an outside name was listed: {text}");
        }
        let after = snapshot(&s.outside);
        prop_assert_eq!(before, after, "the outside directory changed");
    }
}

/// `/undo` alone under the swap, many times: the restore goes through the parent's descriptor
/// and `renameat`, so it can never write outside.
#[test]
fn undo_never_restores_outside_while_the_folder_is_swapped() {
    let s = arena();
    let before = snapshot(&s.outside);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut applied = 0;
    let mut refused = 0;
    let mut swaps = 0;
    for round in 0..200 {
        // Take the changes with the path real, then race the undo.
        let mut changes = Vec::new();
        for n in 0..3 {
            runtime
                .block_on(s.call("read", json!({"file_path": format!("d/f{n}")})))
                .unwrap();
            let args =
                json!({"file_path": format!("d/f{n}"), "content": format!("round {round}\n")});
            let out = runtime.block_on(s.call("write", args)).unwrap();
            changes.push(FileSnapshot::from_data(out.data.as_ref().unwrap()).unwrap());
        }
        let steps = plan_undo(&changes).unwrap();
        let swapper = Swapper::start(&s.path("d"), &s.path("l"));
        match apply_undo(&steps) {
            Ok(_) => applied += 1,
            Err(_) => refused += 1,
        }
        swaps += swapper.finish();
        // Put `d` back as the real directory.
        if std::fs::symlink_metadata(s.path("d"))
            .unwrap()
            .file_type()
            .is_symlink()
        {
            let a = CString::new(s.path("d").as_os_str().as_bytes()).unwrap();
            let b = CString::new(s.path("l").as_os_str().as_bytes()).unwrap();
            // SAFETY: valid NUL-terminated paths.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(rc, 0);
        }
    }
    eprintln!("undo race: {applied} applied, {refused} refused, {swaps} swaps");
    assert_eq!(before, snapshot(&s.outside), "an undo wrote outside");
    assert!(swaps > 0);
}

/// Under `danger-full-access` too, `write` reaches its target through the no-link walk from
/// `/`: with `d` exchanged for a link to dsh's (denied) home, nothing ever lands there.
#[test]
fn danger_full_access_writes_never_follow_a_swap_into_the_denied_home() {
    let s = Scratch::new(PermissionPreset::DangerFullAccess);
    std::fs::create_dir(s.path("d")).unwrap();
    let home = s.outside.join("dsh-home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("keep"), "home").unwrap();
    symlink(&home, s.path("l")).unwrap();
    let ctx = s.ctx.clone().with_dsh_home(&home);
    let registry = dsh_tools::ToolRegistry::with_builtins();
    let before = snapshot(&home);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let swapper = Swapper::start(&s.path("d"), &s.path("l"));
    let (mut ok, mut refused) = (0, 0);
    for i in 0..500 {
        let args = json!({"file_path": format!("d/hooks{i}.json"), "content": "{}"}).to_string();
        match runtime.block_on(registry.invoke("write", &args, &ctx)) {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    let swaps = swapper.finish();
    eprintln!("danger write race: {ok} written, {refused} refused, {swaps} swaps");
    assert_eq!(before, snapshot(&home), "a write landed in the denied home");
    assert!(swaps > 0 && ok > 0 && refused > 0, "{ok} {refused} {swaps}");
}
