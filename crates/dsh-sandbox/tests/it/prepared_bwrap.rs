//! Escape tests of the prepared bubblewrap sandbox (docs/SECURITY.md, "A prepared bubblewrap
//! sandbox per layout"), as root: commands that run in a sandbox kept across calls try to
//! change it, leave it, reach the processes that share it, outlive their call, and leave
//! something for the next call; the sandbox must follow the layout, a host mount change and
//! a killed waiter.
//!
//! Each scenario runs in a fresh helper process (this test binary, `scenario_helper`) inside a
//! private mount namespace (`unshare -m --propagation private`): the cache of prepared sandboxes
//! is per process, so no other test can evict or reuse a sandbox under it, and its host mounts
//! are invisible to the other tests. Every attempt is first shown to work unconfined where
//! that is possible, so a missing program cannot make a test pass.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::escapes::scratch_parent;
use dsh_sandbox::{Bubblewrap, Sandbox, SandboxMode, SandboxPreference, SandboxProbe};
use dsh_tools::{NoSandbox, PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::json;

const SCENARIO_ENV: &str = "DSH_PREPARED_SCENARIO";
/// A secret in the helper's own environment: copies of the helper (the keeper) carry it in
/// their initial environment block; no command may read it.
const MARKER_ENV: &str = "DSH_PREPARED_FAKE_API_KEY";
const MARKER: &str = "sk-prepared-0123456789abcdefghijklmnopqrstuvwxyz";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `scenario` in a helper process and fails with its output unless it says it passed.
fn run_scenario(scenario: &str) {
    if !is_root() {
        eprintln!("{scenario}: NOT RUN: needs root (CI runs as root): setns, mounts and the unconfined controls need it");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (logs.path().join("out"), logs.path().join("err"));
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "--"])
        .arg(exe)
        .args([
            "--exact",
            "prepared_bwrap::scenario_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_ENV, scenario)
        .env(MARKER_ENV, MARKER)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .expect("`unshare` (util-linux) must be installed for these tests");
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) of the helper's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains(&format!("SCENARIO-OK {scenario}")),
        "scenario {scenario} failed ({status:?}; None: hung for 240 s):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    eprintln!("{stdout}");
}

/// The helper: runs the scenario named by [`SCENARIO_ENV`] (ignored in normal runs).
#[test]
#[ignore = "helper process for the tests in this file"]
fn scenario_helper() {
    let Ok(scenario) = std::env::var(SCENARIO_ENV) else {
        return;
    };
    // As dsh does first thing (crates/dsh-cli/src/main.rs).
    dsh_sandbox::make_undumpable();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match scenario.as_str() {
            "shared" => shared().await,
            "escapes" => escapes().await,
            "nothing_outlives" => nothing_outlives().await,
            "layouts" => layouts().await,
            "waiter_killed" => waiter_killed().await,
            "host_mount" => host_mount().await,
            other => panic!("unknown scenario {other}"),
        }
    });
    println!("SCENARIO-OK {scenario}");
}

/// The bubblewrap set-up the probe chooses in this process: it must be the prepared one here
/// (root, bubblewrap installed, Landlock ABI 6+), or the test fails saying why.
fn prepared_sandbox(preset: PermissionPreset) -> Sandbox {
    let path = std::env::var_os("PATH");
    let probe = SandboxProbe::run(path.as_deref());
    let sandbox = Sandbox::choose(preset, SandboxPreference::Bubblewrap, &probe);
    assert_eq!(
        sandbox.mode(),
        SandboxMode::Bubblewrap,
        "bubblewrap must work for these tests (.ci/run installs it): {:?}",
        probe.bubblewrap
    );
    assert!(
        probe.bubblewrap.as_ref().unwrap().prepared(),
        "as root with Landlock ABI 6+ the probe must choose the prepared sandbox: {}",
        sandbox.detail()
    );
    sandbox
}

struct Scratch {
    _root: tempfile::TempDir,
    real: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    spill: SpillDir,
    registry: ToolRegistry,
}

impl Scratch {
    fn new() -> Self {
        let root = tempfile::tempdir_in(scratch_parent()).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let ws = real.join("ws");
        let outside = real.join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let spill = SpillDir::create(real.join("spill")).unwrap();
        Self {
            _root: root,
            real,
            ws,
            outside,
            spill,
            registry: ToolRegistry::with_builtins(),
        }
    }

    fn ctx(&self, cwd: &Path, preset: PermissionPreset) -> ToolContext {
        ToolContext::new(cwd, self.spill.clone())
            .unwrap()
            .with_permission(preset)
            .with_confinement(prepared_sandbox(preset).confinement())
    }

    fn free(&self) -> ToolContext {
        ToolContext::new(&self.ws, self.spill.clone())
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess)
            .with_confinement(Arc::new(NoSandbox))
    }

    async fn run(&self, ctx: &ToolContext, command: &str) -> String {
        let args = json!({"command": command, "description": "prepared", "timeoutMs": 30000});
        match self.registry.invoke("bash", &args.to_string(), ctx).await {
            Ok(out) => out.text_content(),
            Err(err) => err.result_text(),
        }
    }
}

/// The id of the mount namespace a command runs in.
async fn mnt_ns(s: &Scratch, ctx: &ToolContext) -> String {
    let out = s.run(ctx, "readlink /proc/self/ns/mnt").await;
    let id = out
        .lines()
        .find(|l| l.starts_with("mnt:["))
        .unwrap_or_else(|| panic!("no namespace id in {out}"));
    id.to_string()
}

async fn shared() {
    let s = Scratch::new();
    let ctx = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    let first = mnt_ns(&s, &ctx).await;
    let second = mnt_ns(&s, &ctx).await;
    assert_eq!(first, second, "calls with one layout share one sandbox");
    let host = format!(
        "{}",
        std::fs::read_link("/proc/self/ns/mnt").unwrap().display()
    );
    assert_ne!(first, host, "the sandbox is not the host's namespace");
    // Writes land inside, not outside; /proc, $$ and kill agree (one pid namespace).
    let out = s
        .run(
            &ctx,
            &format!(
                "echo in > inside; echo out > {}/f; test \"$(cut -d' ' -f4 /proc/self/stat)\" = \"$$\" && echo PIDS-AGREE; sleep 30 & kill $! && wait $!; echo killed=$?; tr '\\0' ' ' < /proc/1/cmdline",
                s.outside.display()
            ),
        )
        .await;
    assert!(s.ws.join("inside").exists(), "{out}");
    assert!(!s.outside.join("f").exists(), "{out}");
    assert!(out.contains("PIDS-AGREE"), "{out}");
    assert!(out.contains("killed=143"), "{out}");
    assert!(
        out.contains("bwrap"),
        "pid 1 is the sandbox's bubblewrap: {out}"
    );
    println!("shared: {first}");
}

/// One attempt: prints `ESCAPED` only if the forbidden thing worked.
struct Attempt {
    what: &'static str,
    command: String,
    control: Option<String>,
}

fn attempts(s: &Scratch, host_pid: u32) -> Vec<Attempt> {
    let out = s.outside.display();
    let me = std::process::id();
    let a = |what, command: String, control: Option<String>| Attempt {
        what,
        command,
        control,
    };
    let each_pid = |body: &str| {
        format!("for p in /proc/[0-9]*; do p=${{p#/proc/}}; [ \"$p\" = \"$$\" ] && continue; {body}; done; true")
    };
    vec![
        a("remount / read-write", format!("mount -o remount,rw,bind / && echo x > {out}/remounted && echo ESCAPED"),
          Some("unshare -m sh -c 'mount -o remount,rw,bind / && echo ESCAPED'".into())),
        a("mount a tmpfs", "mount -t tmpfs none /mnt && echo ESCAPED".into(),
          Some("unshare -m sh -c 'mount -t tmpfs none /mnt && echo ESCAPED'".into())),
        a("umount /proc lazily", "umount -l /proc && echo ESCAPED".into(),
          Some("unshare -m sh -c 'umount -l /proc && echo ESCAPED'".into())),
        a("unshare -m", "unshare -m true && echo ESCAPED".into(), None),
        a("unshare -p -f", "unshare -p -f true && echo ESCAPED".into(), None),
        a("nsenter every process's namespaces",
          each_pid("nsenter -t $p -m -U true 2>/dev/null && echo ESCAPED-U-$p; nsenter -t $p -m true 2>/dev/null && echo ESCAPED-m-$p; nsenter -t $p -p true 2>/dev/null && echo ESCAPED-p-$p"),
          Some("unshare -m sleep 30 & sleep 0.3; nsenter -t $! -m true && echo ESCAPED; kill $!".into())),
        a("setns through /proc/<pid>/ns of every process",
          "python3 - <<'PY'\nimport ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor p in os.listdir('/proc'):\n    if not p.isdigit():\n        continue\n    for ns in ('mnt', 'user', 'pid'):\n        try:\n            fd = os.open(f'/proc/{p}/ns/{ns}', os.O_RDONLY)\n        except OSError:\n            continue\n        if libc.setns(fd, 0) == 0:\n            print('ESCAPED', p, ns)\n        os.close(fd)\nPY".to_string(),
          None),
        a("write outside the roots", format!("echo x > {out}/w && echo ESCAPED"),
          Some(format!("echo x > {out}/w && echo ESCAPED && rm {out}/w"))),
        a("see a host process", format!("m=prepared-host-; m=${{m}}marker; for f in $(grep -l \"$m\" /proc/[0-9]*/cmdline 2>/dev/null); do echo ESCAPED $f $(tr '\\0' ' ' < $f); cat ${{f%cmdline}}status; done; kill -0 {host_pid} 2>/dev/null && grep -q \"$m\" /proc/{host_pid}/cmdline 2>/dev/null && echo ESCAPED; true"),
          Some(format!("m=prepared-host-; m=${{m}}marker; kill -0 {host_pid} && grep -q \"$m\" /proc/{host_pid}/cmdline && echo ESCAPED"))),
        a("signal dsh", format!("kill -0 {me} 2>/dev/null && grep -q {me} /proc/{me}/stat 2>/dev/null && echo ESCAPED"),
          Some(format!("kill -0 {me} && echo ESCAPED"))),
        a("signal any process of the sandbox outside the call's tree (waiter, bwrap, keeper)",
          each_pid("if ! grep -q \"^PPid:\" /proc/$p/status; then continue; fi; kill -0 $p 2>/dev/null && ! grep -qx \"NSsid:.*\" /dev/null && case \"$(ps -o sid= -p $p)\" in *\"$(ps -o sid= -p $$)\"*) ;; *) echo ESCAPED-$p ;; esac"),
          None),
        a("read the keeper's environment and memory (a copy of dsh)",
          each_pid(&format!("grep -qa {MARKER} /proc/$p/environ 2>/dev/null && echo ESCAPED-env-$p; head -c 1 /proc/$p/mem >/dev/null 2>&1 && echo ESCAPED-mem-$p")),
          Some(format!("grep -qa {MARKER} /proc/{me}/environ && echo ESCAPED"))),
        a("ptrace a process of the sandbox",
          each_pid("timeout 2 strace -p $p -o /dev/null >/dev/null 2>&1 & sleep 0.2; grep -q '^TracerPid:[[:space:]]*[1-9]' /proc/$p/status 2>/dev/null && echo ESCAPED-$p; wait"),
          None),
    ]
}

async fn escapes() {
    let s = Scratch::new();
    let ctx = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    let free = s.free();
    // A host process whose command line carries a marker (the shell stays, waiting for sleep).
    let mut host = Command::new("sh")
        .args(["-c", "sleep 600; : prepared-host-marker"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let host_pid = host.id();
    let before = mnt_ns(&s, &ctx).await;
    for attempt in attempts(&s, host_pid) {
        if let Some(control) = &attempt.control {
            let out = s.run(&free, control).await;
            assert!(
                out.contains("ESCAPED"),
                "control for `{}` must work unconfined as root: {out}",
                attempt.what
            );
        }
        let out = s.run(&ctx, &attempt.command).await;
        assert!(
            !out.contains("ESCAPED"),
            "{}: escaped the prepared sandbox: {out}",
            attempt.what
        );
        println!("refused: {}", attempt.what);
    }
    assert!(!s.outside.join("remounted").exists());
    // `kill -9 -1` ends only the call's own tree: the next call is in the same sandbox.
    // (kill(-1) spares the caller: the shell goes on, its sleep is gone.)
    let out = s
        .run(&ctx, "sleep 30 & kill -9 -1; wait $!; echo status=$?")
        .await;
    assert!(out.contains("status=137"), "{out}");
    let after = mnt_ns(&s, &ctx).await;
    assert_eq!(before, after, "the waiter survived a command's kill -9 -1");
    // SAFETY: kill(2) of the marker's own process group (the shell and its sleep).
    unsafe { libc::kill(-(host_pid as i32), libc::SIGKILL) };
    let _ = host.wait();
}

/// Host processes whose command line contains `needle` and that are not zombies.
fn live_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(path.join("stat"))
            .map(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if cmdline.contains(needle) && !zombie {
            found.push(format!("{}: {cmdline}", path.display()));
        }
    }
    found
}

async fn nothing_outlives() {
    let s = Scratch::new();
    let ctx = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    // Detached every way, then every other process the command can reach is killed (its
    // keeper would be the target: it must be out of reach).
    let command = "setsid sh -c 'sleep 3001 & sleep 3001' >/dev/null 2>&1 &\n\
        (setsid sleep 3002 >/dev/null 2>&1 &)\n\
        nohup sleep 3003 >/dev/null 2>&1 & disown\n\
        (sh -c 'sleep 3004 &' &)\n\
        sleep 0.3\n\
        for p in /proc/[0-9]*; do p=${p#/proc/}; [ \"$p\" = \"$$\" ] && continue; grep -q sleep /proc/$p/cmdline 2>/dev/null && continue; kill -9 $p 2>/dev/null && echo killed $p; done\n\
        echo started";
    let started = Instant::now();
    let out = s.run(&ctx, command).await;
    assert!(out.contains("started"), "{out}");
    // Checked as soon as the call returned: nothing may be left.
    let left: Vec<String> = ["sleep 3001", "sleep 3002", "sleep 3003", "sleep 3004"]
        .iter()
        .flat_map(|n| live_with(n))
        .collect();
    assert!(
        left.is_empty(),
        "processes outlived their call ({:?} after it started): {left:?}\n{out}",
        started.elapsed()
    );
    // The control: unconfined, the same detached process does outlive its call.
    let out = s
        .run(
            &s.free(),
            "setsid -f sleep 3005 >/dev/null 2>&1; sleep 0.3; echo started",
        )
        .await;
    assert!(out.contains("started"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_with("sleep 3005").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !live_with("sleep 3005").is_empty(),
        "the control must survive: {out}"
    );
    let _ = Command::new("pkill").args(["-f", "sleep 3005"]).status();
}

async fn layouts() {
    let s = Scratch::new();
    // read-only: the private /tmp lives as long as the sandbox of that layout.
    let ro = s.ctx(&s.ws, PermissionPreset::ReadOnly);
    let out = s
        .run(&ro, "echo planted > /tmp/prepared-plant && echo ok")
        .await;
    assert!(out.contains("ok"), "{out}");
    assert!(
        !Path::new("/tmp/prepared-plant").exists(),
        "the private /tmp is not the host's"
    );
    let out = s.run(&ro, "cat /tmp/prepared-plant").await;
    assert!(
        out.contains("planted"),
        "same layout, same sandbox (documented): {out}"
    );
    let other_ws = s.real.join("other");
    std::fs::create_dir_all(&other_ws).unwrap();
    let other = s.ctx(&other_ws, PermissionPreset::ReadOnly);
    let out = s
        .run(&other, "cat /tmp/prepared-plant || echo ABSENT")
        .await;
    assert!(
        out.contains("ABSENT"),
        "another layout gets another /tmp: {out}"
    );
    let ww = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    let out = s.run(&ww, "cat /tmp/prepared-plant || echo ABSENT").await;
    assert!(
        out.contains("ABSENT"),
        "another preset is another layout: {out}"
    );

    // workspace-write: a protected entry created by one call is read-only in the next.
    let first = mnt_ns(&s, &ww).await;
    let out = s
        .run(&ww, "echo A=1 > .env && mkdir -p .git && echo ok")
        .await;
    assert!(out.contains("ok"), "{out}");
    let second = mnt_ns(&s, &ww).await;
    assert_ne!(first, second, "a new .env and .git make a new sandbox");
    for attack in [
        "echo B=2 >> .env && echo ESCAPED",
        "echo '#!/bin/sh' > .git/hooks/pre-commit && echo ESCAPED",
        "mv .git .git-old && echo ESCAPED",
        "rm -f .env && echo ESCAPED",
    ] {
        let out = s.run(&ww, attack).await;
        assert!(!out.contains("ESCAPED"), "{attack}: {out}");
    }
    assert_eq!(std::fs::read_to_string(s.ws.join(".env")).unwrap(), "A=1\n");
    // The user re-creates .git outside the sandbox: the next call protects the new one.
    std::fs::remove_dir_all(s.ws.join(".git")).unwrap();
    std::fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    let third = mnt_ns(&s, &ww).await;
    assert_ne!(second, third, "a re-created .git makes a new sandbox");
    let out = s
        .run(&ww, "echo x > .git/hooks/post-checkout && echo ESCAPED")
        .await;
    assert!(!out.contains("ESCAPED"), "{out}");
    assert!(!s.ws.join(".git/hooks/post-checkout").exists());
    // Neither plant reached the host.
    assert!(!Path::new("/tmp/prepared-plant").exists());
}

/// Parent pid and command name of `pid`.
fn parent_and_name(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, name))
}

/// The `bwrap` processes that descend from this process (its sandboxes run under a keeper).
fn our_bwraps() -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((mut up, name)) = parent_and_name(pid) else {
            continue;
        };
        if name != "bwrap" {
            continue;
        }
        for _ in 0..4 {
            if up == me {
                pids.push(pid);
                break;
            }
            match parent_and_name(up) {
                Some((next, _)) if up > 1 => up = next,
                _ => break,
            }
        }
    }
    pids
}

async fn waiter_killed() {
    let s = Scratch::new();
    let ctx = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    let before = mnt_ns(&s, &ctx).await;
    let bwraps = our_bwraps();
    assert!(!bwraps.is_empty(), "a prepared sandbox runs bwrap");
    for pid in bwraps {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    std::thread::sleep(Duration::from_millis(200));
    let out = s
        .run(
            &ctx,
            &format!(
                "echo in > inside2; echo out > {}/g && echo ESCAPED; readlink /proc/self/ns/mnt",
                s.outside.display()
            ),
        )
        .await;
    assert!(
        !out.contains("ESCAPED"),
        "never unconfined after the waiter died: {out}"
    );
    assert!(s.ws.join("inside2").exists(), "{out}");
    assert!(!s.outside.join("g").exists());
    let after = mnt_ns(&s, &ctx).await;
    assert_ne!(before, after, "a dead sandbox is replaced");
    assert!(!our_bwraps().is_empty(), "the new sandbox runs");
}

async fn host_mount() {
    let s = Scratch::new();
    let ctx = s.ctx(&s.ws, PermissionPreset::WorkspaceWrite);
    let before = mnt_ns(&s, &ctx).await;
    let target = s.outside.join("later");
    std::fs::create_dir_all(&target).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&target)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "mount a tmpfs (private namespace of the helper)"
    );
    std::fs::write(target.join("seen"), "yes").unwrap();
    let out = s
        .run(
            &ctx,
            &format!(
                "cat {0}/seen; echo x > {0}/w && echo ESCAPED",
                target.display()
            ),
        )
        .await;
    assert!(out.contains("yes"), "the new host mount is visible: {out}");
    assert!(!out.contains("ESCAPED"), "and read-only: {out}");
    let after = mnt_ns(&s, &ctx).await;
    assert_ne!(before, after, "a host mount change starts a new sandbox");
    let _ = Command::new("umount").arg(&target).status();
}

#[test]
fn prepared_bubblewrap_is_shared_by_calls_of_one_layout() {
    run_scenario("shared");
}

#[test]
fn prepared_bubblewrap_as_root_blocks_escapes() {
    run_scenario("escapes");
}

#[test]
fn nothing_outlives_a_call_in_a_prepared_sandbox() {
    run_scenario("nothing_outlives");
}

#[test]
fn prepared_sandboxes_follow_the_layout() {
    run_scenario("layouts");
}

#[test]
fn a_killed_waiter_is_replaced_and_calls_stay_confined() {
    run_scenario("waiter_killed");
}

#[test]
fn a_host_mount_change_starts_a_new_sandbox() {
    run_scenario("host_mount");
}

/// A host where the prepared sandbox cannot be made (here: a `bwrap` that refuses
/// `--info-fd`, as one where entering the namespaces fails would fail the trial) gets one
/// `bwrap` per command, never less confinement.
#[tokio::test]
async fn the_probe_falls_back_to_one_bwrap_per_command() {
    let real = SandboxProbe::run(std::env::var_os("PATH").as_deref());
    let bwrap = real
        .bubblewrap
        .as_ref()
        .expect("bubblewrap must work for these tests (.ci/run installs it)")
        .program()
        .to_path_buf();
    let dir = tempfile::tempdir_in(scratch_parent()).unwrap();
    let fake = dir.path().join("bwrap");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --info-fd ] && {{ echo 'refused: --info-fd' >&2; exit 1; }}; done\nexec {} \"$@\"\n",
            bwrap.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = SandboxProbe::run(Some(dir.path().as_os_str()));
    let chosen: &Bubblewrap = probe.bubblewrap.as_ref().unwrap();
    assert!(!chosen.prepared(), "{chosen:?}");
    let s = Scratch::new();
    let sandbox = Sandbox::choose(
        PermissionPreset::WorkspaceWrite,
        SandboxPreference::Bubblewrap,
        &probe,
    );
    assert!(
        sandbox.detail().contains("one sandbox per command"),
        "{}",
        sandbox.detail()
    );
    let ctx = ToolContext::new(&s.ws, s.spill.clone())
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite)
        .with_confinement(sandbox.confinement());
    let out = s
        .run(
            &ctx,
            &format!(
                "echo in > inside; echo out > {}/f && echo ESCAPED",
                s.outside.display()
            ),
        )
        .await;
    assert!(!out.contains("ESCAPED"), "{out}");
    assert!(s.ws.join("inside").exists(), "{out}");
}
