//! Snapshots of `write`/`edit` (docs/tools.md, "Snapshots"): what is kept, where, with which
//! modes, and `/undo`'s plan and restore against real files, including refusals when a file
//! changed since and an attempt to redirect the restore through a symbolic link.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::os::unix::fs::{symlink, PermissionsExt};

use common::{read_file, Scratch};
use dsh_tools::{
    apply_undo, plan_undo, session_diff, sha256_hex, FileSnapshot, PermissionPreset, UndoStep,
};
use serde_json::json;

fn scratch() -> Scratch {
    Scratch::new(PermissionPreset::WorkspaceWrite)
}

async fn change(s: &Scratch, tool: &str, args: serde_json::Value) -> FileSnapshot {
    let out = s.call(tool, args).await.unwrap();
    FileSnapshot::from_data(out.data.as_ref().unwrap()).expect("result data has a snapshot")
}

#[tokio::test]
async fn write_and_edit_keep_the_previous_content_privately() {
    let s = scratch();
    let path = s.put("a.txt", "one\ntwo\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let edit = change(
        &s,
        "edit",
        json!({"file_path": "a.txt", "old_string": "two", "new_string": "2"}),
    )
    .await;
    assert_eq!(edit.path, path);
    let kept = edit.before.clone().unwrap();
    assert_eq!(read_file(&kept), "one\ntwo\n");
    assert_eq!(edit.after_sha256, sha256_hex(b"one\n2\n"));
    // Private: the folder 0700, the file 0600, whatever the target's mode was.
    let folder = kept.parent().unwrap();
    assert!(folder.starts_with(s.ctx.spill().path()));
    assert_eq!(
        std::fs::metadata(folder).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let created = change(&s, "write", json!({"file_path": "new.txt", "content": "n"})).await;
    assert_eq!(created.before, None);
    assert_eq!(created.path, s.path("new.txt"));
    // The record survives the JSON round trip the log makes.
    let value = created.to_value();
    assert_eq!(
        serde_json::from_value::<FileSnapshot>(value).unwrap(),
        created
    );
}

#[tokio::test]
async fn a_failed_change_keeps_no_record_and_no_snapshot_makes_no_write() {
    let s = scratch();
    s.put("a.txt", "x\n");
    // Not read first: refused before any snapshot.
    s.call("write", json!({"file_path": "a.txt", "content": "y"}))
        .await
        .unwrap_err();
    assert!(!s.ctx.spill().path().join("snapshots").exists());
    // The snapshot folder cannot be made (a file is in its place): the write is refused and
    // the target keeps its content.
    std::fs::write(s.ctx.spill().path().join("snapshots"), "in the way").unwrap();
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let err = s
        .call("write", json!({"file_path": "a.txt", "content": "y"}))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("cannot keep the snapshot"),
        "{}",
        err.message
    );
    assert_eq!(read_file(&s.path("a.txt")), "x\n");
}

#[tokio::test]
async fn undo_restores_a_turn_and_deletes_what_it_created() {
    let s = scratch();
    let a = s.put("a.txt", "first\n");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o751)).unwrap();
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let mut turn = vec![
        change(
            &s,
            "write",
            json!({"file_path": "a.txt", "content": "second\n"}),
        )
        .await,
        change(
            &s,
            "edit",
            json!({"file_path": "a.txt", "old_string": "second", "new_string": "third"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "sub/new.txt", "content": "made\n"}),
        )
        .await,
    ];
    let steps = plan_undo(&turn).unwrap();
    assert_eq!(steps.len(), 2, "one step per file: {steps:?}");
    assert!(matches!(&steps[1], UndoStep::Delete { path } if *path == s.path("sub/new.txt")));
    let done = apply_undo(&steps).unwrap();
    assert_eq!(done, vec![a.clone(), s.path("sub/new.txt")]);
    assert_eq!(read_file(&a), "first\n");
    assert_eq!(
        std::fs::metadata(&a).unwrap().permissions().mode() & 0o7777,
        0o751
    );
    assert!(!s.path("sub/new.txt").exists());
    // Undone once, the turn's last content is gone: a second undo of it is refused.
    turn.truncate(2);
    let conflicts = plan_undo(&turn).unwrap_err();
    assert_eq!(conflicts[0].path, a);
    assert!(
        conflicts[0].reason.contains("changed since"),
        "{conflicts:?}"
    );
}

#[tokio::test]
async fn undo_refuses_files_changed_since_and_touches_nothing() {
    let s = scratch();
    let turn = vec![
        change(
            &s,
            "write",
            json!({"file_path": "a.txt", "content": "ours\n"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "b.txt", "content": "ours\n"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "c.txt", "content": "ours\n"}),
        )
        .await,
    ];
    // b changed by someone else (bash, an editor), c deleted.
    std::fs::write(s.path("b.txt"), "theirs\n").unwrap();
    std::fs::remove_file(s.path("c.txt")).unwrap();
    let conflicts = plan_undo(&turn).unwrap_err();
    let reasons: Vec<_> = conflicts
        .iter()
        .map(|c| {
            (
                c.path.file_name().unwrap().to_str().unwrap().to_string(),
                c.reason.clone(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("b.txt".to_string(), "was changed since".to_string()),
            ("c.txt".to_string(), "was deleted since".to_string())
        ]
    );
    // Nothing was undone: a.txt still holds what the turn wrote.
    assert_eq!(read_file(&s.path("a.txt")), "ours\n");
    assert_eq!(read_file(&s.path("b.txt")), "theirs\n");
}

#[tokio::test]
async fn undo_never_writes_through_a_symlink_put_on_the_path() {
    // Attacker model: after the turn, something (a bash command of the model) replaces the
    // file's folder by a link to a folder outside the workspace holding a file with the very
    // content the turn wrote; /undo must not write (or delete) there.
    let s = scratch();
    let victim = s.outside.join("victim.txt");
    let turn = vec![
        change(
            &s,
            "write",
            json!({"file_path": "d/f.txt", "content": "payload\n"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "d/g.txt", "content": "made\n"}),
        )
        .await,
    ];
    std::fs::write(&victim, "payload\n").unwrap();
    std::fs::write(s.outside.join("g.txt"), "made\n").unwrap();
    // Planned while the path is still real (the check), swapped before the apply (the use).
    let steps = plan_undo(&turn).unwrap();
    std::fs::rename(s.path("d"), s.path("d.moved")).unwrap();
    symlink(&s.outside, s.path("d")).unwrap();
    std::fs::rename(&victim, s.outside.join("f.txt")).unwrap();
    // Planning now sees the link too.
    let conflicts = plan_undo(&turn).unwrap_err();
    assert!(
        conflicts.iter().all(|c| c.reason.contains("symbolic link")),
        "{conflicts:?}"
    );
    // f.txt existed before? No: both were created, so undo would delete them.
    let err = apply_undo(&steps).unwrap_err();
    assert!(err.0.is_empty(), "nothing may be undone: {err:?}");
    assert!(err.1.contains("symbolic link"), "{}", err.1);
    assert_eq!(read_file(&s.outside.join("f.txt")), "payload\n");
    assert_eq!(read_file(&s.outside.join("g.txt")), "made\n");
    // The file itself replaced by a link: refused at planning.
    std::fs::remove_file(s.path("d")).unwrap();
    std::fs::rename(s.path("d.moved"), s.path("d")).unwrap();
    std::fs::remove_file(s.path("d/f.txt")).unwrap();
    symlink(s.outside.join("f.txt"), s.path("d/f.txt")).unwrap();
    let conflicts = plan_undo(&turn).unwrap_err();
    assert!(
        conflicts[0].reason.contains("symbolic link"),
        "{conflicts:?}"
    );
}

#[tokio::test]
async fn session_diff_compares_first_content_with_the_disk() {
    let s = scratch();
    s.put("a.txt", "one\ntwo\nthree\n");
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let changes = vec![
        change(
            &s,
            "edit",
            json!({"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}),
        )
        .await,
        change(
            &s,
            "edit",
            json!({"file_path": "a.txt", "old_string": "three", "new_string": "3"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "n.txt", "content": "hi\n"}),
        )
        .await,
        change(
            &s,
            "write",
            json!({"file_path": "same.txt", "content": "x\n"}),
        )
        .await,
    ];
    // same.txt is removed again by hand: a created-then-deleted file has no net change.
    std::fs::remove_file(s.path("same.txt")).unwrap();
    let diffs = session_diff(&changes, &s.cwd);
    let names: Vec<_> = diffs.iter().map(|d| d.path.clone()).collect();
    assert_eq!(names, [s.path("a.txt"), s.path("n.txt")]);
    assert_eq!((diffs[0].added, diffs[0].removed), (2, 2));
    assert!(
        diffs[0].unified.starts_with("--- a/a.txt\n+++ b/a.txt\n"),
        "{}",
        diffs[0].unified
    );
    assert!(
        diffs[0].unified.contains("-two\n-three\n+TWO\n+3\n"),
        "{}",
        diffs[0].unified
    );
    assert_eq!(diffs[1].note.as_deref(), Some("new file"));
    assert!(diffs[1].unified.contains("--- /dev/null\n+++ b/n.txt\n"));
}
