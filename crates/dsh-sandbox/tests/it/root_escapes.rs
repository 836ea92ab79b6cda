//! Escape attempts that need privileges, run as root (CI runs as root): remounting, mounting,
//! namespaces, chroot, pivot_root, raw sockets, ptrace, terminal injection, metadata changes
//! outside the workspace, dsh's own environment, planted configuration, dsh's home, and
//! children outliving dsh. Each runs under bubblewrap and under Landlock only (bwrap hidden
//! from the probe), and each attempt is shown to work unconfined first, so a test cannot pass
//! because a command is missing (docs/SECURITY.md, "How each promise is tested").
//!
//! Tests that need a fresh process (dsh's environment, dying with dsh, dsh's home) re-run this
//! test binary as a helper (`helper_process`, ignored unless `DSH_ESCAPE_HELPER` is set) that
//! plays dsh: it makes itself non-dumpable as `dsh` does at start, then runs one bash call.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::escapes::scratch_parent;
use dsh_sandbox::{MountNamespace, Sandbox, SandboxMode, SandboxPreference, SandboxProbe};
use dsh_tools::{
    CommandConfinement, NoSandbox, PermissionPreset, SpillDir, ToolContext, ToolError, ToolOutput,
    ToolRegistry,
};
use serde_json::json;

const HELPER_ENV: &str = "DSH_ESCAPE_HELPER";
/// A planted secret: its name contains `KEY`, so dsh never passes it to a child itself.
const FAKE_KEY_ENV: &str = "DSH_ESCAPE_FAKE_API_KEY";
/// 48 characters (a multiple of 3, so its base64 is a prefix of the base64 of key + newline).
const FAKE_KEY: &str = "sk-fake0123456789abcdefghijklmnopqrstuvwxyzABCDE";

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Everything here is about root; as another user the privileged operations fail anyway and
/// the unconfined controls would not succeed, so the tests say so and stop.
pub(crate) fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    eprintln!("{test}: NOT RUN: needs root (CI runs as root); as another user these operations fail without any sandbox");
    false
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mechanism {
    Bubblewrap,
    Landlock,
}

impl Mechanism {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mechanism::Bubblewrap => "bubblewrap",
            Mechanism::Landlock => "landlock",
        }
    }

    fn from_name(name: &str) -> Self {
        match name {
            "bubblewrap" => Mechanism::Bubblewrap,
            "landlock" => Mechanism::Landlock,
            other => panic!("unknown mechanism {other}"),
        }
    }

    pub(crate) fn sandbox(self, preset: PermissionPreset) -> Sandbox {
        match self {
            Mechanism::Bubblewrap => {
                let probe = SandboxProbe::cached();
                let sandbox = Sandbox::choose(preset, SandboxPreference::Bubblewrap, probe);
                assert_eq!(
                    sandbox.mode(),
                    SandboxMode::Bubblewrap,
                    "bubblewrap must work for these tests (install the `bubblewrap` package; .ci/run does): {:?}",
                    probe.bubblewrap
                );
                sandbox
            }
            Mechanism::Landlock => {
                let probe = SandboxProbe::run(Some("/nonexistent-dir-without-bwrap".as_ref()));
                let sandbox = Sandbox::choose(preset, SandboxPreference::Auto, &probe);
                assert_eq!(
                    sandbox.mode(),
                    SandboxMode::Landlock,
                    "Landlock must work for these tests (Linux 5.13+ with Landlock enabled): {:?}",
                    probe.landlock
                );
                // As root the mount-namespace layer is always possible (CAP_SYS_ADMIN); a
                // host where it is not (a container's root without it and without user
                // namespaces) fails here loudly rather than passing with less protection.
                if is_root() {
                    let layer = probe.landlock.as_ref().unwrap().mount_namespace();
                    assert_eq!(
                        layer,
                        MountNamespace::Privileged,
                        "as root the Landlock path must get its read-only mount namespace: {}",
                        sandbox.detail()
                    );
                }
                sandbox
            }
        }
    }
}

pub(crate) const BOTH: [Mechanism; 2] = [Mechanism::Bubblewrap, Mechanism::Landlock];

pub(crate) struct Scratch {
    _root: tempfile::TempDir,
    /// The scratch folder: outside every writable root.
    pub(crate) real: PathBuf,
    pub(crate) cwd: PathBuf,
    pub(crate) outside: PathBuf,
    pub(crate) confined: ToolContext,
    pub(crate) unconfined: ToolContext,
    registry: ToolRegistry,
}

impl Scratch {
    pub(crate) fn new(preset: PermissionPreset, confinement: Arc<dyn CommandConfinement>) -> Self {
        let root = tempfile::tempdir_in(scratch_parent()).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let cwd = real.join("ws");
        let outside = real.join("outside");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let spill = SpillDir::create(real.join("spill")).unwrap();
        let confined = ToolContext::new(&cwd, spill.clone())
            .unwrap()
            .with_permission(preset)
            .with_confinement(confinement);
        let unconfined = ToolContext::new(&cwd, spill)
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess)
            .with_confinement(Arc::new(NoSandbox));
        Self {
            _root: root,
            real,
            cwd,
            outside,
            confined,
            unconfined,
            registry: ToolRegistry::with_builtins(),
        }
    }

    pub(crate) async fn run(&self, ctx: &ToolContext, command: &str) -> String {
        let args = json!({"command": command, "description": "escape attempt", "timeoutMs": 20000});
        text(&self.registry.invoke("bash", &args.to_string(), ctx).await)
    }

    pub(crate) async fn bash(&self, command: &str) -> String {
        self.run(&self.confined, command).await
    }

    pub(crate) async fn free(&self, command: &str) -> String {
        self.run(&self.unconfined, command).await
    }
}

fn text(result: &Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(out) => out.text_content(),
        Err(err) => err.result_text(),
    }
}

/// One attempt: `command` prints `ESCAPED` only if the forbidden operation succeeded.
/// Unconfined (`control`, or `command` itself) must print it; confined must not.
struct Attempt {
    what: &'static str,
    command: String,
    control: Option<String>,
}

fn attempt(what: &'static str, command: impl Into<String>) -> Attempt {
    Attempt {
        what,
        command: command.into(),
        control: None,
    }
}

fn attempt_with_control(
    what: &'static str,
    command: impl Into<String>,
    control: impl Into<String>,
) -> Attempt {
    Attempt {
        what,
        command: command.into(),
        control: Some(control.into()),
    }
}

pub(crate) fn python(code: &str) -> String {
    format!("python3 - <<'PY'\n{code}\nPY")
}

fn privileged_attempts(s: &Scratch) -> Vec<Attempt> {
    let out = s.outside.display();
    vec![
        attempt_with_control(
            "remount / read-write",
            format!("mount -o remount,rw,bind / && echo x > {out}/remounted && echo ESCAPED"),
            "unshare -m sh -c 'mount -o remount,rw,bind / && echo ESCAPED'",
        ),
        attempt_with_control(
            "mount a tmpfs",
            "mount -t tmpfs none /mnt && echo ESCAPED",
            "unshare -m sh -c 'mount -t tmpfs none /mnt && echo ESCAPED'",
        ),
        attempt("unshare -r", "unshare -r true && echo ESCAPED"),
        attempt("unshare -m", "unshare -m true && echo ESCAPED"),
        attempt("unshare -U", "unshare -U true && echo ESCAPED"),
        attempt("chroot", "chroot / true && echo ESCAPED"),
        attempt(
            "pivot_root",
            // EPERM means refused; unconfined the kernel gets as far as checking the mounts
            // (EINVAL or EBUSY), which proves the call itself is possible.
            python(
                "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = libc.syscall(155 if os.uname().machine == 'x86_64' else 41, b'.', b'.')\nerr = ctypes.get_errno()\nprint('ESCAPED' if err != 1 else 'refused', err)",
            ),
        ),
        attempt(
            "raw socket",
            python("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\nprint('ESCAPED')"),
        ),
        attempt(
            "packet socket",
            python("import socket\nsocket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)\nprint('ESCAPED')"),
        ),
        attempt(
            "ptrace a sibling",
            format!(
                "sleep 30 & pid=$!\n{}\nkill $pid",
                python(
                    "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\npid = int(os.environ['PID'])\nif libc.ptrace(16, pid, 0, 0) == 0:\n    print('ESCAPED')\nelse:\n    print('refused', ctypes.get_errno())"
                )
                .replace("python3 -", "PID=$pid python3 -")
            ),
        ),
        attempt(
            "strace a sibling",
            "sleep 30 & pid=$!; timeout 5 strace -p $pid -o /dev/null & sleep 1; if grep -q '^TracerPid:[[:space:]]*[1-9]' /proc/$pid/status; then echo ESCAPED; fi; kill $pid",
        ),
        attempt(
            "TIOCSTI into a terminal",
            python(
                "import os, fcntl, termios\nmaster, slave = os.openpty()\nos.setsid()\nfcntl.ioctl(slave, termios.TIOCSCTTY, 0)\ntry:\n    fcntl.ioctl(slave, termios.TIOCSTI, b'x')\n    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e.errno)",
            ),
        ),
    ]
}

async fn privileged_operations_fail(mechanism: Mechanism) {
    let sandbox = mechanism.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    let inside = s.bash("echo ok > inside.txt && cat inside.txt").await;
    assert_eq!(inside, "ok\n", "{}", sandbox.detail());
    for a in privileged_attempts(&s) {
        let control = a.control.as_deref().unwrap_or(&a.command);
        let free = s.free(control).await;
        assert!(
            free.contains("ESCAPED"),
            "{} / {}: the unconfined control must succeed, or the attempt proves nothing: {free}",
            mechanism.name(),
            a.what
        );
        let confined = s.bash(&a.command).await;
        assert!(
            !confined.contains("ESCAPED"),
            "{} / {}: escaped: {confined}",
            mechanism.name(),
            a.what
        );
        let names: Vec<_> = std::fs::read_dir(&s.outside).unwrap().collect();
        assert!(names.is_empty(), "{}: wrote outside", a.what);
    }
    // The confined process holds no capability at all, runs with no_new_privs and a filter.
    let status = s
        .bash("grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status")
        .await;
    for field in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            status.contains(&format!("{field}:\t0000000000000000")),
            "{}: {field} not empty: {status}",
            mechanism.name()
        );
    }
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    // clone3 says "not implemented", so the C library falls back to clone, whose flags the
    // filter checks; ordinary threads and processes still work.
    let threads = s
        .bash(&python("import threading\nt = threading.Thread(target=lambda: None)\nt.start(); t.join()\nprint('threads ok')"))
        .await;
    assert!(threads.contains("threads ok"), "{threads}");
    // Netlink (interface listing) still works: it is always SOCK_RAW but crafts no packets.
    let netlink = s
        .bash(&python("import socket\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\nprint('netlink ok')"))
        .await;
    assert!(netlink.contains("netlink ok"), "{netlink}");
}

#[tokio::test]
async fn bubblewrap_as_root_blocks_privileged_escapes() {
    if require_root("bubblewrap_as_root_blocks_privileged_escapes") {
        privileged_operations_fail(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_blocks_privileged_escapes() {
    if require_root("landlock_as_root_blocks_privileged_escapes") {
        privileged_operations_fail(Mechanism::Landlock).await;
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn meta(path: &Path) -> Meta {
    let m = std::fs::symlink_metadata(path).unwrap();
    Meta {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    }
}

fn metadata_attempts(file: &Path) -> Vec<(&'static str, String)> {
    let f = file.display();
    vec![
        ("chmod u+s", format!("chmod u+s {f}")),
        ("chmod g+s", format!("chmod g+s {f}")),
        ("chown", format!("chown 1234:1234 {f}")),
        (
            "setxattr",
            python(&format!("import os\nos.setxattr('{f}', 'user.dsh', b'1')")),
        ),
        (
            "setxattr (trusted)",
            python(&format!(
                "import os\nos.setxattr('{f}', 'trusted.dsh', b'1')"
            )),
        ),
        ("chmod 777", format!("chmod 777 {f}")),
        ("touch -d", format!("touch -d 2001-02-03 {f}")),
        (
            "utime",
            python(&format!("import os\nos.utime('{f}', (1, 1))")),
        ),
        (
            "chmod through /proc/<dsh>/root (dsh's mount namespace)",
            format!("chmod 777 /proc/{}/root{f}", std::process::id()),
        ),
        (
            "chmod through a hard link",
            format!("ln -f {f} hard && chmod 777 hard"),
        ),
    ]
}

async fn metadata_outside_is_unchanged(mechanism: Mechanism) {
    let sandbox = mechanism.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    for (i, (what, command)) in metadata_attempts(Path::new("FILE")).into_iter().enumerate() {
        // The control: the same change on a file of its own works unconfined.
        let control = s.real.join(format!("control-{i}"));
        std::fs::write(&control, "x").unwrap();
        let before = meta(&control);
        std::thread::sleep(Duration::from_millis(20));
        s.free(&command.replace("FILE", &control.display().to_string()))
            .await;
        assert_ne!(
            meta(&control),
            before,
            "{what}: the unconfined control changed nothing, so the attempt proves nothing"
        );
        let target = s.outside.join(format!("target-{i}"));
        std::fs::write(&target, "x").unwrap();
        let before = meta(&target);
        std::thread::sleep(Duration::from_millis(20));
        let shown = s
            .bash(&command.replace("FILE", &target.display().to_string()))
            .await;
        let after = meta(&target);
        assert_eq!(
            after,
            before,
            "{} / {what}: metadata outside changed: {shown}",
            mechanism.name()
        );
    }
}

#[tokio::test]
async fn bubblewrap_as_root_changes_no_metadata_outside() {
    if require_root("bubblewrap_as_root_changes_no_metadata_outside") {
        metadata_outside_is_unchanged(Mechanism::Bubblewrap).await;
    }
}

#[tokio::test]
async fn landlock_as_root_changes_no_metadata_outside() {
    if require_root("landlock_as_root_changes_no_metadata_outside") {
        metadata_outside_is_unchanged(Mechanism::Landlock).await;
    }
}

#[tokio::test]
async fn landlock_cannot_signal_dsh() {
    if !require_root("landlock_cannot_signal_dsh") {
        return;
    }
    let sandbox = Mechanism::Landlock.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    // Signal 0 only asks; unconfined it is allowed, confined (Landlock scope) it is not.
    let pid = std::process::id();
    assert!(s
        .free(&format!("kill -0 {pid} && echo ESCAPED"))
        .await
        .contains("ESCAPED"));
    // ($PPID is the command's keeper, inside the sandbox: see the Landlock module docs.)
    let confined = s
        .bash(&format!(
            "kill -0 {pid} && echo ESCAPED; kill -TERM {pid} && echo ESCAPED"
        ))
        .await;
    assert!(!confined.contains("ESCAPED"), "{confined}");
    // Its own children it may still signal.
    let own = s.bash("sleep 30 & kill $! && echo killed").await;
    assert!(own.contains("killed"), "{own}");
}

/// Planted configuration: the protected entries of the workspace (docs/SECURITY.md,
/// "Protected paths") are read-only for bash, their metadata included, and `.git` cannot be
/// swapped for another one. bubblewrap binds them read-only; on the Landlock path the
/// mount-namespace layer does (Landlock alone cannot carve them out of a writable root).
async fn protects_planted_configuration(mechanism: Mechanism) {
    let sandbox = mechanism.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    let ws = &s.cwd;
    std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/hooks/pre-push.sample"), "#!/bin/sh\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(ws.join(".dsh")).unwrap();
    std::fs::write(ws.join(".dsh/config.toml"), "").unwrap();
    std::fs::write(ws.join(".env"), "A=1\n").unwrap();
    std::fs::write(ws.join(".mcp.json"), "{}").unwrap();
    // A bare repository in the workspace (a push to it runs its hooks).
    std::fs::create_dir_all(ws.join("backup.git/objects")).unwrap();
    std::fs::create_dir_all(ws.join("backup.git/hooks")).unwrap();
    std::fs::write(ws.join("backup.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let snapshot = |path: &str| {
        let p = ws.join(path);
        let meta = std::fs::symlink_metadata(&p).ok().map(|_| meta(&p));
        (p.exists(), std::fs::read(&p).ok(), meta)
    };
    let watched = [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/hooks/pre-push.sample",
        ".git/hooks/post-checkout",
        ".dsh/config.toml",
        ".dsh/hooks.json",
        ".env",
        ".env.bak",
        ".mcp.json",
    ];
    let before: Vec<_> = watched.iter().map(|p| snapshot(p)).collect();
    let attempts = [
        "echo '#!/bin/sh' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
        "echo evil > .git/hooks/post-checkout",
        "echo evil >> .git/hooks/pre-push.sample",
        "chmod +x .git/hooks/pre-push.sample",
        "mv .git/hooks/pre-push.sample .git/hooks/pre-push",
        "printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config",
        "git config core.fsmonitor evil",
        "touch -d 2001-02-03 .git/config",
        "echo '{}' > .dsh/hooks.json",
        "echo 'permission = \"danger-full-access\"' > .dsh/config.toml",
        "rm -rf .dsh",
        "echo DSH_PERMISSION_MODE=danger-full-access >> .env",
        "chmod 777 .env",
        "mv .env .env.bak",
        "echo x > new && mv new .env",
        "echo '{\"mcpServers\":{}}' > .mcp.json",
        "mv .git .git-old",
        "mv .git/hooks .git/hooks-old",
        "rm -rf .git/hooks",
        // An entry git reads that no ordinary repository has: `commondir` would send git to a
        // planted directory's config and hooks (adversarial review of issue 38).
        "mkdir -p ../planted && echo ../planted > .git/commondir",
        "echo x > .git/info-planted",
        "echo '#!/bin/sh' > backup.git/hooks/pre-receive && chmod +x backup.git/hooks/pre-receive",
    ];
    for command in attempts {
        let shown = s.bash(command).await;
        let now: Vec<_> = watched.iter().map(|p| snapshot(p)).collect();
        assert_eq!(
            now,
            before,
            "{} / `{command}` changed a protected path: {shown}",
            mechanism.name()
        );
        assert!(ws.join(".git/config").exists(), "{command}: .git moved");
        assert!(!ws.join(".git-old").exists(), "{command}: .git moved");
        assert!(
            !ws.join(".git/commondir").exists(),
            "{command}: commondir planted"
        );
        assert!(
            !ws.join("backup.git/hooks/pre-receive").exists(),
            "{command}: a bare repository's hook planted"
        );
        assert!(
            !ws.join(".git/info-planted").exists(),
            "{command}: .git written"
        );
    }
    // The whole git directory is read-only (git that writes needs an approved escalation);
    // the rest of the workspace stays writable.
    let refused = s.bash("echo x > .git/objects/probe").await;
    assert!(
        !ws.join(".git/objects/probe").exists(),
        "{}: .git/objects written: {refused}",
        mechanism.name()
    );
    let ok = s
        .bash("echo x > src.txt && chmod 600 src.txt && cat src.txt")
        .await;
    assert_eq!(ok, "x\n", "{}", mechanism.name());
    // The control: unconfined, the same changes land (the attempts above are real).
    s.free("echo evil > .git/hooks/post-checkout && chmod 777 .env && mv .git .git-old && mv .git-old .git")
        .await;
    assert!(ws.join(".git/hooks/post-checkout").exists());
    assert_ne!(snapshot(".env"), before[6]);
}

#[tokio::test]
async fn bubblewrap_protects_planted_configuration() {
    protects_planted_configuration(Mechanism::Bubblewrap).await;
}

#[tokio::test]
async fn landlock_protects_planted_configuration() {
    if landlock_layer_applies("landlock_protects_planted_configuration") {
        protects_planted_configuration(Mechanism::Landlock).await;
    }
}

/// Whether the Landlock path gets its mount-namespace layer here. As root it must (the
/// mechanism's `sandbox` asserts it); as another user it needs unprivileged user namespaces,
/// and without them the test says so and stops (docs/SECURITY.md, "What is not protected").
fn landlock_layer_applies(test: &str) -> bool {
    if is_root() {
        return true;
    }
    let probe = SandboxProbe::run(Some("/nonexistent-dir-without-bwrap".as_ref()));
    let layer = probe
        .landlock
        .as_ref()
        .map(|l| l.mount_namespace())
        .unwrap_or_default();
    if layer == MountNamespace::Unavailable {
        eprintln!("{test}: NOT RUN: no mount namespace for the Landlock path on this host (not root, no user namespaces); documented as not protected");
        return false;
    }
    true
}

// ---- helper-process tests -------------------------------------------------------------

/// Runs this test binary as a helper that plays dsh (see the module docs) and returns its
/// child handle. `envs` adds to its environment.
fn spawn_helper(
    mechanism: Mechanism,
    cwd: &Path,
    command: &str,
    envs: &[(&str, &str)],
) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "root_escapes::helper_process",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER_ENV, mechanism.name())
    .env("DSH_ESCAPE_CWD", cwd)
    .env("DSH_ESCAPE_COMMAND", command)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The mount-namespace layer in a user namespace (how it is made for users other than root):
/// as root, the helper runs as `nobody` (uid and gid 65534) and must get a user namespace with
/// its own ids mapped; metadata outside, the protected entries and dsh's home are then as
/// safe as they are for root, and the same command run unconfined as `nobody` does change
/// them. Where the host forbids unprivileged user namespaces the test says so and stops (the
/// Landlock path then runs without the layer, as documented in docs/SECURITY.md).
#[test]
fn landlock_mount_layer_for_other_users() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !require_root("landlock_mount_layer_for_other_users") {
        return;
    }
    let knob = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if knob("/proc/sys/user/max_user_namespaces") == Some(0)
        || knob("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1)
        || knob("/proc/sys/kernel/unprivileged_userns_clone") == Some(0)
    {
        eprintln!("landlock_mount_layer_for_other_users: NOT RUN: this host forbids unprivileged user namespaces (sysctl), so other users get Landlock without the mount layer");
        return;
    }
    const NOBODY: u32 = 65534;
    let scratch = tempfile::tempdir_in(scratch_parent_for_others()).unwrap();
    let base = std::fs::canonicalize(scratch.path()).unwrap();
    let ws = base.join("ws");
    let home = base.join("dsh-home");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("token"), "TOKEN-abcdef").unwrap();
    std::fs::write(ws.join(".env"), "A=1\n").unwrap();
    let outside = base.join("outside");
    std::fs::write(&outside, "x").unwrap();
    for path in [&base, &ws, &ws.join(".git"), &ws.join(".git/hooks"), &home] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for path in [
        &ws,
        &ws.join(".git"),
        &ws.join(".git/hooks"),
        &ws.join(".env"),
        &home,
        &home.join("token"),
        &outside,
    ] {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let o = outside.display();
    let h = home.display();
    let command = format!(
        "cat /proc/self/uid_map; chmod 777 {o}; touch -d 2001-02-03 {o}; cat {h}/token; echo x >> .env; echo hook > .git/hooks/pre-commit; mv .git .git-old; echo mine > mine; cat mine"
    );
    // The test binary may sit where nobody cannot reach it (a checkout in root's home, mode
    // 0700): nobody runs a copy of it in the scratch folder, which it can reach.
    let exe = runnable_by_others(&base);
    let run = |mechanism: &str| {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "root_escapes::helper_process",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, mechanism)
            .env("DSH_ESCAPE_CWD", &ws)
            .env("DSH_ESCAPE_COMMAND", &command)
            .env("DSH_HOME", &home)
            .env("HOME", &base)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("HELPER-DONE"),
            "the helper failed as nobody: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let before = meta(&outside);
    let shown = run("landlock");
    let words: Vec<&str> = shown.split_whitespace().collect();
    assert!(
        words.windows(3).any(|w| w == ["65534", "65534", "1"]),
        "the command did not run in a user namespace with nobody's ids mapped (is the mount layer off?): {shown}"
    );
    assert_eq!(meta(&outside), before, "metadata outside changed: {shown}");
    assert!(!shown.contains("TOKEN"), "dsh's home was readable: {shown}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).unwrap(),
        "A=1\n",
        "{shown}"
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "{shown}");
    assert!(
        ws.join(".git").is_dir() && !ws.join(".git-old").exists(),
        "{shown}"
    );
    assert!(
        ws.join("mine").exists(),
        "the workspace stays writable: {shown}"
    );
    // The control: the same command unconfined as nobody changes all of it.
    std::fs::remove_file(ws.join("mine")).unwrap();
    let shown = run("none");
    assert_ne!(meta(&outside), before, "control: {shown}");
    assert!(shown.contains("TOKEN"), "control: {shown}");
    assert!(
        ws.join(".git/hooks/pre-commit").exists() || ws.join(".git-old/hooks/pre-commit").exists(),
        "control: {shown}"
    );
    assert!(ws.join(".git-old").exists(), "control: {shown}");
}

/// This test binary where other users can run it: itself when every folder above it lets
/// others search it and it is executable by them, else a copy in `dir` (which must be
/// reachable by them).
fn runnable_by_others(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let exe = std::env::current_exe().unwrap();
    let reachable = exe
        .ancestors()
        .skip(1)
        .all(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    let runnable = std::fs::metadata(&exe).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005);
    if reachable && runnable {
        return exe;
    }
    let copy = dir.join("helper-test-binary");
    std::fs::copy(&exe, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

fn helper_output(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("HELPER-DONE"),
        "the helper failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A scratch parent that other users can reach: [`scratch_parent`] when every folder above it
/// lets others search it, else a folder of its own in `/var/cache` (a checkout under `/tmp`
/// puts the scratch in root's home, which is closed to others).
fn scratch_parent_for_others() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let reachable = |dir: &Path| {
        dir.ancestors()
            .all(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
    };
    let parent = scratch_parent();
    if reachable(&parent) {
        return parent;
    }
    let fallback = PathBuf::from("/var/cache/dsh-test-scratch");
    std::fs::create_dir_all(&fallback).unwrap();
    std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        reachable(&fallback),
        "{} is not reachable by other users",
        fallback.display()
    );
    fallback
}

/// The helper (ignored in normal runs): `DSH_ESCAPE_HELPER` names the mechanism, or `none`
/// for an unconfined run. It makes itself non-dumpable like `dsh` (crates/dsh-cli/src/main.rs),
/// runs `DSH_ESCAPE_COMMAND` through the bash tool in `DSH_ESCAPE_CWD`, prints the result and
/// `HELPER-DONE`.
#[test]
#[ignore = "helper process for the tests in this file"]
fn helper_process() {
    let Ok(mechanism) = std::env::var(HELPER_ENV) else {
        return;
    };
    dsh_sandbox::make_undumpable();
    // SAFETY: prctl with integer arguments only.
    assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }, 0);
    let cwd = PathBuf::from(std::env::var("DSH_ESCAPE_CWD").unwrap());
    let command = std::env::var("DSH_ESCAPE_COMMAND").unwrap();
    let (preset, confinement): (PermissionPreset, Arc<dyn CommandConfinement>) = if mechanism
        == "none"
    {
        (PermissionPreset::DangerFullAccess, Arc::new(NoSandbox))
    } else {
        let sandbox = Mechanism::from_name(&mechanism).sandbox(PermissionPreset::WorkspaceWrite);
        (PermissionPreset::WorkspaceWrite, sandbox.confinement())
    };
    let spill_dir = tempfile::tempdir().unwrap();
    let spill = SpillDir::create(spill_dir.path().join("spill")).unwrap();
    let ctx = ToolContext::new(&cwd, spill)
        .unwrap()
        .with_permission(preset)
        .with_confinement(confinement);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let args = json!({"command": command, "description": "helper", "timeoutMs": 60000});
    let result =
        runtime.block_on(ToolRegistry::with_builtins().invoke("bash", &args.to_string(), &ctx));
    println!("{}", text(&result));
    println!("HELPER-DONE");
}

fn encodings(key: &str) -> Vec<(&'static str, String)> {
    let b64 = {
        let out = Command::new("base64")
            .arg("-w0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(key.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    vec![
        ("plain", key.to_string()),
        ("base64", b64),
        ("reversed", key.chars().rev().collect()),
        ("hex", hex),
    ]
}

#[test]
fn the_key_in_dshs_environment_stays_out_of_reach() {
    let scratch = tempfile::tempdir_in(scratch_parent()).unwrap();
    let cwd = std::fs::canonicalize(scratch.path()).unwrap();
    let forms = encodings(FAKE_KEY);
    let key_env = [(FAKE_KEY_ENV, FAKE_KEY)];
    // The control: unconfined (and as root), the same commands reveal every form.
    let shown = helper_output(spawn_helper_none(&cwd, &steal_command(), &key_env));
    if is_root() {
        for (name, form) in &forms {
            assert!(
                shown.contains(form.as_str()),
                "control: {name} form not read: {shown}"
            );
        }
        assert!(shown.contains("SEES-DSH"), "control: {shown}");
    } else {
        eprintln!("the_key_in_dshs_environment_stays_out_of_reach: control not checked: not root, so a non-dumpable dsh is unreadable even unconfined");
    }
    for mechanism in BOTH {
        let shown = helper_output(spawn_helper(mechanism, &cwd, &steal_command(), &key_env));
        for (name, form) in &forms {
            assert!(
                !shown.contains(form.as_str()),
                "{}: the key leaked ({name}): {shown}",
                mechanism.name()
            );
        }
        if mechanism == Mechanism::Bubblewrap {
            assert!(
                !shown.contains("SEES-DSH"),
                "bubblewrap: dsh's /proc entry is visible: {shown}"
            );
        }
    }
}

/// The commands a model would run to steal the key from dsh's environment, in every
/// encoding: from `$PPID` (dsh itself under Landlock and unconfined) and from every process
/// in `/proc` (under bubblewrap dsh is not in the sandbox's pid namespace at all).
fn steal_command() -> String {
    let value =
        format!("tr '\\0' '\\n' < /proc/$p/environ | grep '^{FAKE_KEY_ENV}=' | cut -d= -f2");
    let per_pid = [
        value.clone(),
        format!("{value} | base64 -w0; echo"),
        format!("{value} | rev"),
        format!("{value} | od -An -tx1 | tr -d ' \\n'; echo"),
        "grep -q 'helper_[p]rocess' /proc/$p/cmdline && echo SEES-DSH".to_string(),
    ]
    .join("; ");
    format!("for p in $PPID $(ls /proc | grep -E '^[0-9]+$'); do {per_pid}; done 2>/dev/null; true")
}

#[test]
fn children_die_with_dsh() {
    for mechanism in BOTH {
        let scratch = tempfile::tempdir_in(scratch_parent()).unwrap();
        let cwd = std::fs::canonicalize(scratch.path()).unwrap();
        let marker = format!("dsh-deathsig-{}-{}", std::process::id(), mechanism.name());
        let command = format!(
            "(while true; do echo x >> tick; sleep 0.05; done) & setsid sh -c 'while true; do echo y >> tock; sleep 0.05; done' & echo {marker} > started; exec sleep 600 # {marker}"
        );
        let mut helper = spawn_helper(mechanism, &cwd, &command, &[]);
        let started = Instant::now();
        while !(cwd.join("started").exists()
            && cwd.join("tick").exists()
            && cwd.join("tock").exists())
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{}: the command never started",
                mechanism.name()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        helper.kill().unwrap();
        helper.wait().unwrap();
        // Within a bounded time, nothing of the command is alive and the files stop growing.
        let deadline = Instant::now() + Duration::from_secs(5);
        let size = |name: &str| {
            std::fs::metadata(cwd.join(name))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        loop {
            let a = (size("tick"), size("tock"));
            std::thread::sleep(Duration::from_millis(300));
            let b = (size("tick"), size("tock"));
            if a == b {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: the command kept writing after dsh died",
                mechanism.name()
            );
        }
        let alive = Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap();
        assert!(
            alive.stdout.is_empty(),
            "{}: processes outlived dsh: {}",
            mechanism.name(),
            String::from_utf8_lossy(&alive.stdout)
        );
        let writers = Command::new("pgrep")
            .args(["-f", "echo y >> tock"])
            .output()
            .unwrap();
        let cwd_text = cwd.display().to_string();
        for pid in String::from_utf8_lossy(&writers.stdout).split_whitespace() {
            let dir = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            assert!(
                !dir.display().to_string().starts_with(&cwd_text),
                "{}: a detached writer (pid {pid}) outlived dsh",
                mechanism.name()
            );
        }
    }
}

/// dsh's home (credentials, trust records, the web UI's token page) is invisible to confined
/// commands: bubblewrap and the Landlock path's mount layer cover it with an empty read-only
/// tmpfs; a session whose cwd lies inside the home keeps its workspace.
fn hides_dsh_home(mechanism: Mechanism) {
    let scratch = tempfile::tempdir_in(scratch_parent()).unwrap();
    let base = std::fs::canonicalize(scratch.path()).unwrap();
    let home = base.join("dsh-home");
    let cwd = base.join("ws");
    std::fs::create_dir_all(home.join("web")).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(home.join("web/launch.html"), "TOKEN-abcdef").unwrap();
    let home_text = home.display().to_string();
    // Also through every process's view of the file system (`/proc/<pid>/root`: dsh's, the
    // user's shell's), which a mount namespace alone would not hide.
    let command = format!("cat {home_text}/web/launch.html; ls {home_text}/web >/dev/null && echo LISTED; echo x > {home_text}/planted; for p in /proc/[0-9]*; do cat $p/root{home_text}/web/launch.html; done 2>/dev/null; true");
    let control = spawn_helper_none(&cwd, &command, &[("DSH_HOME", &home_text)]);
    let shown = helper_output(control);
    assert!(
        shown.contains("TOKEN-abcdef") && shown.contains("LISTED"),
        "{shown}"
    );
    std::fs::remove_file(home.join("planted")).unwrap();
    let child = spawn_helper(mechanism, &cwd, &command, &[("DSH_HOME", &home_text)]);
    let shown = helper_output(child);
    let name = mechanism.name();
    assert!(!shown.contains("TOKEN"), "{name}: {shown}");
    assert!(!shown.contains("LISTED"), "{name}: {shown}");
    assert!(!home.join("planted").exists(), "{name}");
    // A session whose cwd lies inside the home keeps its workspace.
    let inner = home.join("project");
    std::fs::create_dir_all(&inner).unwrap();
    let child = spawn_helper(
        mechanism,
        &inner,
        &format!("echo ok > mine && cat mine; cat {home_text}/web/launch.html"),
        &[("DSH_HOME", &home_text)],
    );
    let shown = helper_output(child);
    assert!(
        shown.contains("ok") && !shown.contains("TOKEN"),
        "{name}: {shown}"
    );
    assert!(inner.join("mine").exists(), "{name}");
    std::fs::remove_file(inner.join("mine")).unwrap();
}

#[test]
fn bubblewrap_hides_dsh_home() {
    hides_dsh_home(Mechanism::Bubblewrap);
}

#[test]
fn landlock_hides_dsh_home() {
    if landlock_layer_applies("landlock_hides_dsh_home") {
        hides_dsh_home(Mechanism::Landlock);
    }
}

fn spawn_helper_none(cwd: &Path, command: &str, envs: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "root_escapes::helper_process",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER_ENV, "none")
    .env("DSH_ESCAPE_CWD", cwd)
    .env("DSH_ESCAPE_COMMAND", command)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Serialises the tests of prepared namespaces: one of them mounts on the host, which starts
/// new namespaces for the others.
static HOST_MOUNTS: std::sync::LazyLock<tokio::sync::Mutex<()>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));

/// The mount namespace of the next confined `bash` call, as `/proc/self/ns/mnt` names it.
async fn namespace_of(s: &Scratch) -> String {
    let out = s.bash("readlink /proc/self/ns/mnt").await;
    assert!(out.starts_with("mnt:["), "{out}");
    out.trim().to_string()
}

/// The Landlock path as root prepares its read-only mount namespace once per layout and lets
/// later calls enter it (docs/SECURITY.md, "A prepared mount namespace per layout"). A call
/// cannot change that namespace for the next one: every way of altering a mount fails, and the
/// next call still finds the layout intact.
#[tokio::test]
async fn landlock_prepared_namespace_is_shared_but_cannot_be_changed() {
    if !require_root("landlock_prepared_namespace_is_shared_but_cannot_be_changed") {
        return;
    }
    let sandbox = Mechanism::Landlock.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    std::fs::write(s.cwd.join(".env"), "A=1\n").unwrap();
    let _serial = HOST_MOUNTS.lock().await;
    let first = namespace_of(&s).await;
    let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    assert_ne!(first, own.display().to_string(), "not dsh's own namespace");
    let out = s.outside.display();
    let ws = s.cwd.display();
    // This test process plays dsh: entering its mount namespace would leave the layout.
    let dsh = std::process::id();
    let changes = [
        format!("umount {ws}/.env && echo ESCAPED"),
        format!("umount -l {ws}/.env && echo ESCAPED"),
        "umount -l / && echo ESCAPED".to_string(),
        format!("mount -o remount,rw,bind {out} && echo ESCAPED"),
        "mount -o remount,rw,bind / && echo ESCAPED".to_string(),
        format!("mount -t tmpfs none {out} && echo ESCAPED"),
        format!("mount --bind {ws} {out} && echo ESCAPED"),
        "unshare -m true && echo ESCAPED".to_string(),
        format!("nsenter -t {dsh} -m true && echo ESCAPED"),
        python(&format!("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = open('/proc/{dsh}/ns/mnt')\nprint('ESCAPED' if libc.setns(fd.fileno(), 0x20000) == 0 else 'refused')")),
    ];
    let next = format!(
        "echo x > {out}/f && echo ESCAPED; echo y >> .env && echo ESCAPED; chmod 777 {out} && echo ESCAPED; echo ok > inside.txt && cat inside.txt"
    );
    for change in &changes {
        // The change and the next call must have run in the same namespace for this to show
        // anything; a mount elsewhere on the host (another test) may start a new one between
        // them, so such a pair is tried again.
        let mut shared = false;
        for _ in 0..5 {
            let confined = s
                .bash(&format!("readlink /proc/self/ns/mnt; {change}"))
                .await;
            assert!(
                !confined.contains("ESCAPED"),
                "`{change}` worked: {confined}"
            );
            let after = s.bash(&format!("readlink /proc/self/ns/mnt; {next}")).await;
            assert!(!after.contains("ESCAPED"), "after `{change}`: {after}");
            assert!(after.contains("\nok"), "after `{change}`: {after}");
            if confined.lines().next() == after.lines().next() {
                shared = true;
                break;
            }
        }
        assert!(
            shared,
            "`{change}` and the next call never shared a namespace"
        );
    }
    assert_eq!(
        std::fs::read_to_string(s.cwd.join(".env")).unwrap(),
        "A=1\n"
    );
    assert!(std::fs::read_dir(&s.outside).unwrap().next().is_none());
    // The control: unconfined, mount, umount and nsenter work (the attempts are real).
    let control = s
        .free(&format!(
            "unshare -m sh -c 'mount -t tmpfs none {out} && umount -l {out}' && nsenter -t {dsh} -m true && echo ESCAPED"
        ))
        .await;
    assert!(control.contains("ESCAPED"), "{control}");
}

/// A layout that changes between calls gets its own namespace: a protected entry created by
/// one call (`.env`, a new `.git`) is read-only in the next, a `.git` replaced behind the
/// sandbox's back is pinned again, and a mount made on the host shows up (read-only).
#[tokio::test]
async fn landlock_prepared_namespace_follows_the_layout() {
    if !require_root("landlock_prepared_namespace_follows_the_layout") {
        return;
    }
    let _serial = HOST_MOUNTS.lock().await;
    let sandbox = Mechanism::Landlock.sandbox(PermissionPreset::WorkspaceWrite);
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    // A protected entry that did not exist: the command may create it (nothing is bound
    // there yet), and from the next call on it is read-only.
    let made = s
        .bash("echo A=1 > .env && mkdir -p .git/hooks && echo made")
        .await;
    assert!(made.contains("made"), "{made}");
    let write = s
        .bash("echo B=2 >> .env && echo ESCAPED; echo x > .git/hooks/pre-commit && echo ESCAPED")
        .await;
    assert!(!write.contains("ESCAPED"), "{write}");
    assert_eq!(
        std::fs::read_to_string(s.cwd.join(".env")).unwrap(),
        "A=1\n"
    );
    // `.git` replaced by dsh or the user (unconfined): the new one is pinned and protected.
    s.free("rm -rf .git && mkdir -p .git/hooks && echo '[core]' > .git/config")
        .await;
    let replaced = s
        .bash("echo x > .git/hooks/pre-commit && echo ESCAPED; echo evil >> .git/config && echo ESCAPED; cat .git/config")
        .await;
    assert!(!replaced.contains("ESCAPED"), "{replaced}");
    assert!(
        replaced.contains("[core]"),
        "the new .git is the one seen: {replaced}"
    );
    // A mount on the host after the namespace was made: the next call sees it, read-only.
    // (Namespace numbers are not compared here: a dropped namespace's number is reused.)
    namespace_of(&s).await;
    let mounted = s.outside.join("mounted");
    std::fs::create_dir_all(&mounted).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "bench-tmpfs"])
        .arg(&mounted)
        .status()
        .unwrap();
    assert!(status.success(), "mount a tmpfs on the host");
    std::fs::write(mounted.join("marker"), "host\n").unwrap();
    let seen = s
        .bash(&format!(
            "cat {m}/marker; echo x > {m}/f && echo ESCAPED",
            m = mounted.display()
        ))
        .await;
    let _ = Command::new("umount").arg(&mounted).status();
    assert!(
        seen.contains("host"),
        "the host's new mount is visible: {seen}"
    );
    assert!(!seen.contains("ESCAPED"), "{seen}");
}

/// Not a check: prints the mean wall time of a confined `bash` call running `true` for each
/// mechanism (`cargo test -p dsh-sandbox --test it -- --ignored --nocapture
/// confined_true_timing`), the figure docs/PERFORMANCE.md quotes.
#[tokio::test]
#[ignore = "measurement, run by hand"]
async fn confined_true_timing() {
    const RUNS: u32 = 40;
    for mechanism in BOTH {
        let sandbox = mechanism.sandbox(PermissionPreset::WorkspaceWrite);
        let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
        s.bash("true").await;
        let started = Instant::now();
        for _ in 0..RUNS {
            s.bash("true").await;
        }
        let mean = started.elapsed() / RUNS;
        println!(
            "{}: bash `true` {:.2} ms",
            mechanism.name(),
            mean.as_secs_f64() * 1000.0
        );
    }
    // Landlock without its mount-namespace layer, for the layer's own cost.
    let abi = dsh_sandbox::kernel_abi()
        .unwrap()
        .min(dsh_sandbox::TARGET_ABI);
    let probe = SandboxProbe {
        bubblewrap: Err("not measured".into()),
        landlock: Ok(dsh_sandbox::Landlock::with_abi(abi)),
    };
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Landlock,
        &probe,
    );
    let s = Scratch::new(PermissionPreset::WorkspaceWrite, sandbox.confinement());
    s.bash("true").await;
    let started = Instant::now();
    for _ in 0..RUNS {
        s.bash("true").await;
    }
    let mean = started.elapsed() / RUNS;
    println!(
        "landlock without mount layer: bash `true` {:.2} ms",
        mean.as_secs_f64() * 1000.0
    );
    let s = Scratch::new(PermissionPreset::DangerFullAccess, Arc::new(NoSandbox));
    let started = Instant::now();
    for _ in 0..RUNS {
        s.free("true").await;
    }
    let mean = started.elapsed() / RUNS;
    println!(
        "unconfined: bash `true` {:.2} ms",
        mean.as_secs_f64() * 1000.0
    );
}
