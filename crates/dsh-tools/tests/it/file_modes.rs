//! As root, dsh's file tools get no more than its confined commands, which hold no capability
//! (docs/SECURITY.md, "The file gate", `other-user` rule): files and folders of another user
//! whose mode bits do not let others in are refused under the confining presets, and a
//! rewritten file never keeps a set-id bit. Found by the adversarial review of issue 38:
//! `read` showed another user's 0600 key that `bash` could not read, and `write` replaced a
//! set-user-ID file's content keeping the bit.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::Scratch;

use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::Path;

use dsh_tools::{PermissionPreset, ToolErrorCode};
use serde_json::json;

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn owned_by_nobody(path: &Path, mode: u32) {
    chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

async fn call(
    s: &Scratch,
    tool: &str,
    args: serde_json::Value,
) -> Result<String, (ToolErrorCode, String)> {
    let ctx = s.ctx.clone().with_approval(false);
    s.registry
        .invoke(tool, &args.to_string(), &ctx)
        .await
        .map(|out| out.text_content())
        .map_err(|err| (err.code, err.message))
}

#[tokio::test]
async fn another_users_private_files_stay_private_to_the_file_tools_as_root() {
    if !is_root() {
        eprintln!("skipped: needs root (the rule only binds a root dsh)");
        return;
    }
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    // Another user's private folder and key, inside the workspace and outside it.
    let private = s.cwd.join("alice");
    std::fs::create_dir_all(private.join(".ssh")).unwrap();
    let key = private.join(".ssh/id_ed25519");
    std::fs::write(&key, "PRIVATE-KEY-MATERIAL\n").unwrap();
    owned_by_nobody(&key, 0o600);
    owned_by_nobody(&private.join(".ssh"), 0o700);
    owned_by_nobody(&private, 0o755);
    // A shared script of that user (0755) and a set-user-ID helper it owns.
    let job = s.cwd.join("job.sh");
    std::fs::write(&job, "echo job\n").unwrap();
    owned_by_nobody(&job, 0o755);

    let (code, message) = call(&s, "read", json!({"file_path": key}))
        .await
        .unwrap_err();
    assert_eq!(code, ToolErrorCode::PermissionDenied, "{message}");
    assert!(message.contains("other-user"), "{message}");
    let found = call(&s, "grep", json!({"pattern": "PRIVATE-KEY", "path": s.cwd}))
        .await
        .unwrap_or_else(|(_, m)| m);
    assert!(
        !found.contains("id_ed25519"),
        "grep answered about it: {found}"
    );
    // Readable by others: read works; writable only by its owner: write and edit refused.
    assert!(call(&s, "read", json!({"file_path": job})).await.is_ok());
    let (code, message) = call(&s, "write", json!({"file_path": job, "content": "evil\n"}))
        .await
        .unwrap_err();
    assert_eq!(code, ToolErrorCode::PermissionDenied, "{message}");
    assert_eq!(std::fs::read_to_string(&job).unwrap(), "echo job\n");
    // A new file in that user's folder, which others may not write in.
    let (code, _) = call(
        &s,
        "write",
        json!({"file_path": private.join("planted.sh"), "content": "x\n"}),
    )
    .await
    .unwrap_err();
    assert_eq!(code, ToolErrorCode::PermissionDenied);
    assert!(!private.join("planted.sh").exists());

    // Under danger-full-access dsh is root without confinement, as `bash` is there.
    let full = Scratch::new(PermissionPreset::DangerFullAccess);
    let key = full.cwd.join("id_ed25519");
    std::fs::write(&key, "PRIVATE-KEY-MATERIAL\n").unwrap();
    owned_by_nobody(&key, 0o600);
    assert!(call(&full, "read", json!({"file_path": key})).await.is_ok());
}

#[tokio::test]
async fn a_rewritten_file_never_keeps_a_set_id_bit() {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let helper = s.cwd.join("helper");
    std::fs::write(&helper, "#!/bin/sh\necho helper\n").unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o6755)).unwrap();
    call(&s, "read", json!({"file_path": helper}))
        .await
        .unwrap();
    call(
        &s,
        "write",
        json!({"file_path": helper, "content": "#!/bin/sh\necho replaced\n"}),
    )
    .await
    .unwrap();
    let mode = std::fs::metadata(&helper).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755, "set-id bits kept: {mode:o}");
}

/// The folders on the way count as they do for a capability-free root: a 0644 file in another
/// user's 0700 home is out of reach of read, grep and glob, and a file in a 0777 folder under
/// it cannot be written; a 0666 file of another user that write may change stays theirs
/// (second adversarial review of issue 38).
#[tokio::test]
async fn folders_on_the_way_count_and_a_changed_file_keeps_its_owner() {
    if !is_root() {
        eprintln!("skipped: needs root (the rule only binds a root dsh)");
        return;
    }
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let home = s.cwd.join("alice");
    std::fs::create_dir_all(home.join("deep")).unwrap();
    let notes = home.join("deep/notes.txt");
    std::fs::write(&notes, "ALICE-SECRET-NOTES\n").unwrap();
    owned_by_nobody(&notes, 0o644);
    owned_by_nobody(&home.join("deep"), 0o777);
    owned_by_nobody(&home, 0o700);
    let (code, message) = call(&s, "read", json!({"file_path": notes}))
        .await
        .unwrap_err();
    assert_eq!(code, ToolErrorCode::PermissionDenied, "{message}");
    for (tool, args) in [
        ("grep", json!({"pattern": "ALICE", "path": s.cwd})),
        ("grep", json!({"pattern": "ALICE", "path": home})),
        ("glob", json!({"pattern": "**/*", "path": s.cwd})),
    ] {
        let shown = call(&s, tool, args.clone())
            .await
            .unwrap_or_else(|(_, m)| m);
        assert!(!shown.contains("ALICE-SECRET"), "{tool} {args}: {shown}");
        assert!(!shown.contains("notes.txt"), "{tool} {args}: {shown}");
    }
    let (code, _) = call(
        &s,
        "write",
        json!({"file_path": home.join("deep/planted.sh"), "content": "x\n"}),
    )
    .await
    .unwrap_err();
    assert_eq!(code, ToolErrorCode::PermissionDenied);
    assert!(!home.join("deep/planted.sh").exists());
    // A shared file others may change: changed, and still its owner's.
    let shared = s.cwd.join("shared.txt");
    std::fs::write(&shared, "old\n").unwrap();
    owned_by_nobody(&shared, 0o666);
    call(&s, "read", json!({"file_path": shared}))
        .await
        .unwrap();
    call(
        &s,
        "write",
        json!({"file_path": shared, "content": "new\n"}),
    )
    .await
    .unwrap();
    let meta = std::fs::metadata(&shared).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "new\n");
}
