//! Escape attempts under `workspace-write` (and `read-only`) with real processes and real files,
//! once with bubblewrap and once with Landlock only; and the refusal when nothing works.
//!
//! "Outside" is a directory under the cargo target dir: outside the session cwd and outside
//! every temp directory, so no writable root covers it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_sandbox::{Sandbox, SandboxMode, SandboxPreference, SandboxProbe};
use dsh_tools::{
    CommandConfinement, PermissionPreset, SpillDir, ToolContext, ToolError, ToolErrorCode,
    ToolOutput, ToolRegistry,
};
use serde_json::json;

const ORIGINAL: &str = "original content\n";

struct Scratch {
    _root: tempfile::TempDir,
    cwd: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
    registry: ToolRegistry,
}

impl Scratch {
    fn new(preset: PermissionPreset, confinement: Arc<dyn CommandConfinement>) -> Self {
        let root = tempfile::tempdir_in(scratch_parent()).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        assert!(
            !real.starts_with("/tmp") && !real.starts_with(std::env::temp_dir()),
            "the scratch area must be outside the temp dirs: {}",
            real.display()
        );
        let cwd = real.join("ws");
        let outside = real.join("outside");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("file"), ORIGINAL).unwrap();
        let spill = SpillDir::create(real.join("spill")).unwrap();
        let ctx = ToolContext::new(&cwd, spill)
            .unwrap()
            .with_permission(preset)
            .with_confinement(confinement);
        Self {
            _root: root,
            cwd,
            outside,
            ctx,
            registry: ToolRegistry::with_builtins(),
        }
    }

    async fn bash(&self, command: &str) -> Result<ToolOutput, ToolError> {
        let args = json!({"command": command, "description": "escape attempt"});
        self.registry
            .invoke("bash", &args.to_string(), &self.ctx)
            .await
    }

    async fn write(&self, path: &str) -> Result<ToolOutput, ToolError> {
        let args = json!({"file_path": path, "content": "pwned\n"});
        self.registry
            .invoke("write", &args.to_string(), &self.ctx)
            .await
    }

    /// The outside directory holds exactly the untouched original file.
    fn assert_outside_untouched(&self, what: &str) {
        let names: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec!["file".to_string()],
            "{what}: outside gained files"
        );
        assert_eq!(
            std::fs::read_to_string(self.outside.join("file")).unwrap(),
            ORIGINAL,
            "{what}: the outside file changed"
        );
    }
}

fn text(result: &Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(out) => out.text_content(),
        Err(err) => err.result_text(),
    }
}

fn bubblewrap() -> Sandbox {
    let probe = SandboxProbe::cached();
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Bubblewrap,
        probe,
    );
    assert_eq!(
        sandbox.mode(),
        SandboxMode::Bubblewrap,
        "bubblewrap must work for these tests (install the `bubblewrap` package; .ci/run does): {:?}",
        probe.bubblewrap
    );
    sandbox
}

/// Landlock as `auto` picks it when `bwrap` is not on the search path.
pub(crate) fn landlock_only() -> Sandbox {
    let probe = SandboxProbe::run(Some("/nonexistent-dir-without-bwrap".as_ref()));
    assert!(
        probe
            .bubblewrap
            .as_ref()
            .unwrap_err()
            .contains("not on PATH"),
        "{probe:?}"
    );
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Auto,
        &probe,
    );
    assert_eq!(
        sandbox.mode(),
        SandboxMode::Landlock,
        "Landlock must work for these tests (Linux 5.13+ with Landlock enabled): {:?}",
        probe.landlock
    );
    assert!(
        sandbox.detail().contains("not on PATH"),
        "{}",
        sandbox.detail()
    );
    sandbox
}

fn have_python() -> bool {
    std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

async fn escape_attempts_fail(sandbox: Sandbox) {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    let out = s.outside.display().to_string();

    // Writing inside works, so the failures below are the sandbox's doing.
    let inside = s.bash("echo ok > inside.txt && cat inside.txt").await;
    assert_eq!(text(&inside), "ok\n", "{}", sandbox.detail());

    let encoded = {
        let plain = format!("echo x > {out}/file");
        let output = std::process::Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(plain.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    let mut commands = vec![
        format!("echo x > {out}/file"),
        format!("echo x >> {out}/file"),
        format!("cd / && touch {out}/touched"),
        format!("ln -s {out}/file link && echo x > link"),
        format!("ln -s {out} dirlink && echo x > dirlink/new"),
        format!("ln {out}/file hardlink; echo x >> hardlink"),
        format!("mkdir {out}/newdir"),
        format!("rm -f {out}/file"),
        format!("mv {out}/file ./stolen"),
        format!("truncate -s 0 {out}/file"),
        format!("eval \"$(echo {encoded} | base64 -d)\""),
        format!("sh -c 'cat /dev/null > {out}/file'"),
    ];
    if have_python() {
        commands.push(format!("python3 -c \"open('{out}/f','w').write('x')\""));
    }
    for command in &commands {
        let result = s.bash(command).await;
        s.assert_outside_untouched(command);
        let shown = text(&result);
        assert!(
            shown.contains("[exit code:")
                || shown.contains("Read-only file system")
                || shown.contains("Permission denied")
                || shown.contains("cross-device"),
            "{command}: {shown}"
        );
    }
    let denied = text(&s.bash(&format!("echo x > {out}/file")).await);
    assert!(
        denied.contains("[sandbox:") && denied.contains("workspace-write"),
        "the failure should say the sandbox blocked it: {denied}"
    );

    // The file tools refuse the same escapes themselves.
    std::os::unix::fs::symlink(s.outside.join("file"), s.cwd.join("filelink")).unwrap();
    std::os::unix::fs::symlink(&s.outside, s.cwd.join("parentlink")).unwrap();
    for path in [
        "../outside/x".to_string(),
        format!("{out}/abs"),
        "filelink".to_string(),
        "parentlink/new".to_string(),
    ] {
        let err = s.write(&path).await.unwrap_err();
        assert_eq!(err.code, ToolErrorCode::PermissionDenied, "{path}: {err}");
        s.assert_outside_untouched(&path);
    }
}

#[tokio::test]
async fn bubblewrap_blocks_every_escape() {
    escape_attempts_fail(bubblewrap()).await;
}

#[tokio::test]
async fn landlock_blocks_every_escape() {
    escape_attempts_fail(landlock_only()).await;
}

async fn read_only_blocks_writes(sandbox: Sandbox) {
    let s = Scratch::new(PermissionPreset::ReadOnly, sandbox.confinement());
    std::fs::write(s.cwd.join("mine.txt"), "mine\n").unwrap();
    let read = s.bash("cat mine.txt").await;
    assert_eq!(text(&read), "mine\n");
    for command in [
        "echo x > mine.txt".to_string(),
        "touch new.txt".to_string(),
        format!("echo x > {}/file", s.outside.display()),
    ] {
        let result = s.bash(&command).await;
        assert!(text(&result).contains("[exit code:"), "{command}");
    }
    assert_eq!(
        std::fs::read_to_string(s.cwd.join("mine.txt")).unwrap(),
        "mine\n"
    );
    assert!(!s.cwd.join("new.txt").exists());
    s.assert_outside_untouched("read-only");
    assert_eq!(
        text(&s.bash("echo ok > /dev/null && echo fine").await),
        "fine\n"
    );
}

#[tokio::test]
async fn bubblewrap_read_only_writes_nothing_but_a_private_tmp() {
    let s = Scratch::new(PermissionPreset::ReadOnly, bubblewrap().confinement());
    let marker = format!("dsh-private-tmp-{}", std::process::id());
    let result = s
        .bash(&format!("echo x > /tmp/{marker} && cat /tmp/{marker}"))
        .await;
    assert_eq!(text(&result), "x\n");
    assert!(
        !Path::new("/tmp").join(&marker).exists(),
        "the private /tmp leaked to the host"
    );
    read_only_blocks_writes(bubblewrap()).await;
}

#[tokio::test]
async fn landlock_read_only_writes_nothing() {
    read_only_blocks_writes(landlock_only()).await;
}

#[tokio::test]
async fn nothing_works_gives_sandbox_unavailable_and_runs_nothing() {
    let probe = SandboxProbe::nothing_works("no bwrap (simulated)", "no Landlock (simulated)");
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Auto,
        &probe,
    );
    assert_eq!(sandbox.mode(), SandboxMode::Unavailable);
    for preset in [PermissionPreset::WorkspaceWrite, PermissionPreset::ReadOnly] {
        let s = Scratch::new(preset, sandbox.confinement());
        let err = s.bash("echo ran > ran.txt").await.unwrap_err();
        assert_eq!(err.code, ToolErrorCode::SandboxUnavailable);
        assert!(
            err.message.contains("simulated") && err.message.contains("bubblewrap"),
            "{err}"
        );
        assert!(!s.cwd.join("ran.txt").exists(), "the command ran");
    }
    // danger-full-access asks for no confinement and runs.
    let s = Scratch::new(PermissionPreset::DangerFullAccess, sandbox.confinement());
    assert_eq!(text(&s.bash("echo ran").await), "ran\n");
}

#[tokio::test]
async fn a_forced_mechanism_that_does_not_work_is_not_replaced() {
    let probe = SandboxProbe {
        bubblewrap: Err("bwrap broken (simulated)".into()),
        landlock: Ok(dsh_sandbox::Landlock::with_abi(1)),
    };
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Bubblewrap,
        &probe,
    );
    assert_eq!(sandbox.mode(), SandboxMode::Unavailable);
    assert!(sandbox.detail().contains("DSH_SANDBOX=bubblewrap"));
    let auto = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Auto,
        &probe,
    );
    assert_eq!(auto.mode(), SandboxMode::Landlock);
    // Landlock without its mount layer says what that leaves open.
    assert!(
        auto.detail()
            .contains("no mount namespace: metadata outside not protected"),
        "{}",
        auto.detail()
    );
    let full = Sandbox::choose(
        PermissionPreset::DangerFullAccess,
        SandboxPreference::Bubblewrap,
        &probe,
    );
    assert_eq!(full.mode(), SandboxMode::Unconfined);
}

#[tokio::test]
async fn the_whole_sandbox_dies_on_timeout() {
    for sandbox in [bubblewrap(), landlock_only()] {
        let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
        let started = Instant::now();
        let args = json!({
            "command": "(sleep 30; echo late > late.txt) & sleep 30",
            "description": "hang",
            "timeoutMs": 300,
        });
        let out = s
            .registry
            .invoke("bash", &args.to_string(), &s.ctx)
            .await
            .unwrap();
        assert!(
            out.text_content().contains("[timed out after 300 ms"),
            "{}: {}",
            sandbox.mode(),
            out.text_content()
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            sandbox.mode()
        );
        std::thread::sleep(Duration::from_millis(300));
        let leftovers = std::process::Command::new("pgrep")
            .args(["-f", "sleep 30; echo late"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        assert!(leftovers.is_empty(), "{}: left {leftovers}", sandbox.mode());
    }
}

#[test]
fn preference_parsing() {
    assert_eq!(
        "Landlock".parse::<SandboxPreference>().unwrap(),
        SandboxPreference::Landlock
    );
    assert_eq!(
        " bwrap ".parse::<SandboxPreference>().unwrap(),
        SandboxPreference::Bubblewrap
    );
    assert_eq!(
        "".parse::<SandboxPreference>().unwrap(),
        SandboxPreference::Auto
    );
    let err = "firejail".parse::<SandboxPreference>().unwrap_err();
    assert!(err.0.contains("firejail") && err.0.contains("landlock"));
}

/// A folder for scratch areas outside every directory the sandbox leaves writable
/// (see `dsh_test_support::scratch_parent`); root_escapes.rs uses it too.
pub(crate) fn scratch_parent() -> std::path::PathBuf {
    dsh_test_support::scratch_parent(std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap()
}
