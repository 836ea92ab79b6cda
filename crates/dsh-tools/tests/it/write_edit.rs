//! `write` and `edit`: observation rules, atomic replacement, permission presets, diffs.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use common::{read_file, Scratch};
use dsh_tools::{PermissionPreset, ToolErrorCode};
use serde_json::json;

fn scratch() -> Scratch {
    Scratch::new(PermissionPreset::WorkspaceWrite)
}

#[tokio::test]
async fn write_creates_files_and_parents() {
    let s = scratch();
    let out = s
        .call(
            "write",
            json!({"file_path": "notes.txt", "content": "hello world"}),
        )
        .await
        .unwrap();
    assert_eq!(
        out.text_content(),
        format!(
            "<path>{}/notes.txt</path>\n<type>file</type>\n<content>\nCreated file (1 lines, 11 bytes)\n</content>",
            s.cwd.display()
        )
    );
    assert_eq!(read_file(&s.path("notes.txt")), "hello world");
    assert_eq!(out.data.unwrap()["created"], true);
    s.ok(
        "write",
        json!({"file_path": "deep/er/x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(read_file(&s.path("deep/er/x.txt")), "x");
}

#[tokio::test]
async fn overwrite_requires_a_current_read() {
    let s = scratch();
    let path = s.put("a.txt", "one\ntwo\n");
    let msg = s
        .err(
            "write",
            json!({"file_path": "a.txt", "content": "new\n"}),
            ToolErrorCode::FsNotObserved,
        )
        .await;
    assert!(msg.contains("read it first"));
    s.ok("read", json!({"file_path": "a.txt"})).await;
    std::fs::write(&path, "changed behind our back\n").unwrap();
    s.err(
        "write",
        json!({"file_path": "a.txt", "content": "new\n"}),
        ToolErrorCode::FsStaleVersion,
    )
    .await;
    assert_eq!(read_file(&path), "changed behind our back\n");
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let out = s
        .ok("write", json!({"file_path": "a.txt", "content": "new\n"}))
        .await;
    assert!(
        out.contains("Replaced file (+1 -1 lines, now 1 lines)"),
        "{out}"
    );
    assert!(out.contains("-changed behind our back\n+new"), "{out}");
    // The write itself counts as an observation: a second write needs no new read.
    s.ok("write", json!({"file_path": "a.txt", "content": "newer\n"}))
        .await;
    assert_eq!(read_file(&path), "newer\n");
}

#[tokio::test]
async fn write_is_atomic_and_keeps_permissions() {
    let s = scratch();
    let path = s.put("run.sh", "#!/bin/sh\necho old\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
    // A hard link elsewhere keeps the old content: the target is replaced, not rewritten.
    let link = s.outside.join("hardlink");
    std::fs::hard_link(&path, &link).unwrap();
    let inode_before = std::fs::metadata(&path).unwrap().ino();
    s.ok("read", json!({"file_path": "run.sh"})).await;
    s.ok(
        "write",
        json!({"file_path": "run.sh", "content": "#!/bin/sh\necho new\n"}),
    )
    .await;
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o750);
    assert_ne!(meta.ino(), inode_before);
    assert_eq!(read_file(&link), "#!/bin/sh\necho old\n");
    let leftovers: Vec<_> = std::fs::read_dir(&s.cwd)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("dsh-tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[tokio::test]
async fn workspace_write_refuses_escapes() {
    let s = scratch();
    let victim = s.outside.join("victim.txt");
    std::fs::write(&victim, "untouched").unwrap();
    symlink(&victim, s.path("link-to-victim")).unwrap();
    symlink(&s.outside, s.path("outdir")).unwrap();
    symlink(s.outside.join("not-yet"), s.path("dangling")).unwrap();
    let attempts = [
        "../outside/victim.txt".to_string(),
        "../outside/new.txt".to_string(),
        victim.display().to_string(),
        "link-to-victim".to_string(),
        "outdir/victim.txt".to_string(),
        "outdir/sub/new.txt".to_string(),
        "dangling".to_string(),
        "sub/../../outside/victim.txt".to_string(),
    ];
    for path in &attempts {
        let msg = s
            .err(
                "write",
                json!({"file_path": path, "content": "pwned"}),
                ToolErrorCode::PermissionDenied,
            )
            .await;
        assert!(msg.contains("workspace-write"), "{msg}");
        s.err(
            "edit",
            json!({"file_path": path, "old_string": "untouched", "new_string": "pwned"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    }
    assert_eq!(read_file(&victim), "untouched");
    assert!(!s.outside.join("new.txt").exists());
    assert!(!s.outside.join("not-yet").exists());
    assert!(!s.outside.join("sub").exists());

    // Temp directories are writable under workspace-write.
    let tmp = tempfile::tempdir().unwrap();
    let in_tmp = tmp.path().join("ok.txt");
    s.ok(
        "write",
        json!({"file_path": in_tmp.display().to_string(), "content": "fine"}),
    )
    .await;
    assert_eq!(read_file(&in_tmp), "fine");
}

#[tokio::test]
async fn presets_gate_writes() {
    let ro = Scratch::new(PermissionPreset::ReadOnly);
    ro.put("a.txt", "x\n");
    ro.ok("read", json!({"file_path": "a.txt"})).await;
    let msg = ro
        .err(
            "write",
            json!({"file_path": "a.txt", "content": "y"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(msg.contains("read-only"));
    ro.err(
        "edit",
        json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"}),
        ToolErrorCode::PermissionDenied,
    )
    .await;

    let full = Scratch::new(PermissionPreset::DangerFullAccess);
    let target = full.outside.join("allowed.txt");
    full.ok(
        "write",
        json!({"file_path": target.display().to_string(), "content": "ok"}),
    )
    .await;
    assert_eq!(read_file(&target), "ok");
}

/// Under `ask` the tools themselves refuse a change nobody approved (the safety policy asks
/// first; this holds even where no policy runs), and an approved one is confined as under
/// `workspace-write`.
#[tokio::test]
async fn ask_refuses_unapproved_changes_and_confines_approved_ones() {
    let mut s = Scratch::new(PermissionPreset::Ask);
    s.put("a.txt", "x\n");
    s.ok("read", json!({"file_path": "a.txt"})).await;
    let msg = s
        .err(
            "write",
            json!({"file_path": "new.txt", "content": "y"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(
        msg.contains("preset is ask") && msg.contains("not approved"),
        "{msg}"
    );
    s.err(
        "edit",
        json!({"file_path": "a.txt", "old_string": "x", "new_string": "y"}),
        ToolErrorCode::PermissionDenied,
    )
    .await;
    let msg = s
        .err(
            "bash",
            json!({"command": "touch by-bash.txt", "description": "t"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(msg.contains("preset is ask"), "{msg}");
    let msg = s
        .err(
            "bash",
            json!({"command": "touch by-job.txt", "description": "t", "run_in_background": true}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(msg.contains("preset is ask"), "{msg}");
    assert!(!s.path("new.txt").exists());
    assert_eq!(read_file(&s.path("a.txt")), "x\n");
    assert!(!s.path("by-bash.txt").exists() && !s.path("by-job.txt").exists());

    s.ctx = s.ctx.clone().with_approval(true);
    s.ok("write", json!({"file_path": "new.txt", "content": "y"}))
        .await;
    assert_eq!(read_file(&s.path("new.txt")), "y");
    s.ok(
        "edit",
        json!({"file_path": "a.txt", "old_string": "x", "new_string": "z"}),
    )
    .await;
    assert_eq!(read_file(&s.path("a.txt")), "z\n");
    // Approved, still confined: outside the workspace and temp dirs is refused.
    let target = s.outside.join("escaped.txt");
    let msg = s
        .err(
            "write",
            json!({"file_path": target.display().to_string(), "content": "no"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(
        msg.contains("the ask preset only permits writes inside"),
        "{msg}"
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn edit_unique_replacement_with_diff() {
    let s = scratch();
    let path = s.put("config.txt", "mode=DEBUG\nlevel=info\n");
    s.ok("read", json!({"file_path": "config.txt"})).await;
    let out = s
        .call(
            "edit",
            json!({"file_path": "config.txt", "old_string": "DEBUG", "new_string": "RELEASE"}),
        )
        .await
        .unwrap();
    let text = out.text_content();
    assert!(text.starts_with(&format!(
        "The file {}/config.txt has been updated successfully (1 replacement, +1 -1 lines).",
        s.cwd.display()
    )));
    assert!(text.contains("-mode=DEBUG\n+mode=RELEASE"), "{text}");
    assert_eq!(read_file(&path), "mode=RELEASE\nlevel=info\n");
    let data = out.data.unwrap();
    assert_eq!(data["diffs"][0]["oldText"], "mode=DEBUG\nlevel=info\n");
    assert_eq!(data["diffs"][0]["newText"], "mode=RELEASE\nlevel=info\n");
    assert_eq!(data["added"], 1);
    // Edits chain without new reads: the edit updated the observation.
    s.ok(
        "edit",
        json!({"file_path": "config.txt", "old_string": "info", "new_string": "warn"}),
    )
    .await;
    assert_eq!(read_file(&path), "mode=RELEASE\nlevel=warn\n");
}

#[tokio::test]
async fn edit_ambiguity_replace_all_and_misses() {
    let s = scratch();
    let path = s.put("x.rs", "let a = 1;\nlet a = 1;\nlet a = 1;\n");
    s.ok("read", json!({"file_path": "x.rs"})).await;
    let msg = s
        .err(
            "edit",
            json!({"file_path": "x.rs", "old_string": "a = 1", "new_string": "b = 2"}),
            ToolErrorCode::AmbiguousMatch,
        )
        .await;
    assert!(msg.contains("occurs 3 times"), "{msg}");
    let out = s
        .ok(
            "edit",
            json!({"file_path": "x.rs", "old_string": "a = 1", "new_string": "b = 2", "replace_all": true}),
        )
        .await;
    assert!(out.contains("3 replacements, +3 -3 lines"), "{out}");
    assert_eq!(read_file(&path), "let b = 2;\nlet b = 2;\nlet b = 2;\n");
    s.err(
        "edit",
        json!({"file_path": "x.rs", "old_string": "zzz", "new_string": "y"}),
        ToolErrorCode::NoMatch,
    )
    .await;
    s.err(
        "edit",
        json!({"file_path": "x.rs", "old_string": "", "new_string": "y"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "edit",
        json!({"file_path": "missing.rs", "old_string": "a", "new_string": "b"}),
        ToolErrorCode::NotFound,
    )
    .await;
    let msg = s
        .err(
            "edit",
            json!({"file_path": "x.rs", "old_string": "a"}),
            ToolErrorCode::InvalidArgs,
        )
        .await;
    assert!(msg.contains("new_string"), "{msg}");
    s.err(
        "edit",
        json!({"file_path": "x.rs", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
}

#[tokio::test]
async fn edit_requires_observation_and_detects_staleness() {
    let s = scratch();
    let path = s.put("f.txt", "alpha\n");
    s.err(
        "edit",
        json!({"file_path": "f.txt", "old_string": "alpha", "new_string": "beta"}),
        ToolErrorCode::FsNotObserved,
    )
    .await;
    s.ok("read", json!({"file_path": "f.txt", "limit": 1}))
        .await;
    std::fs::write(&path, "alpha gamma\n").unwrap();
    s.err(
        "edit",
        json!({"file_path": "f.txt", "old_string": "alpha", "new_string": "beta"}),
        ToolErrorCode::FsStaleVersion,
    )
    .await;
    assert_eq!(read_file(&path), "alpha gamma\n");
    // A touch that keeps the content is not a change.
    s.ok("read", json!({"file_path": "f.txt"})).await;
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    s.ok(
        "edit",
        json!({"file_path": "f.txt", "old_string": "alpha", "new_string": "beta"}),
    )
    .await;
    assert_eq!(read_file(&path), "beta gamma\n");
}

#[tokio::test]
async fn symlinks_inside_the_workspace_keep_working() {
    let s = scratch();
    let real = s.put("real.txt", "one\n");
    symlink("real.txt", s.path("link.txt")).unwrap();
    std::fs::create_dir(s.path("realdir")).unwrap();
    symlink("realdir", s.path("ldir")).unwrap();
    s.ok("read", json!({"file_path": "link.txt"})).await;
    s.ok(
        "edit",
        json!({"file_path": "link.txt", "old_string": "one", "new_string": "two"}),
    )
    .await;
    assert_eq!(read_file(&real), "two\n");
    assert!(std::fs::symlink_metadata(s.path("link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    s.ok(
        "write",
        json!({"file_path": "ldir/deeper/new.txt", "content": "made\n"}),
    )
    .await;
    assert_eq!(read_file(&s.path("realdir/deeper/new.txt")), "made\n");
    // A FIFO is refused without blocking; a directory is not a file.
    let fifo = std::ffi::CString::new(s.path("pipe").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    s.err(
        "write",
        json!({"file_path": "pipe", "content": "x"}),
        ToolErrorCode::NotAFile,
    )
    .await;
    s.err(
        "write",
        json!({"file_path": "realdir", "content": "x"}),
        ToolErrorCode::NotAFile,
    )
    .await;
}
