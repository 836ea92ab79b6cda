//! The probe verdict cache (docs/SECURITY.md, "Probe verdict cache"), attacked: caches planted
//! with the right key that claim a mechanism works when it does not (a `bwrap` that fails, one
//! that runs the command unconfined), that claim no mechanism works, that hide bubblewrap to get
//! the weaker Landlock, and files planted by another user, with loose permissions, through a
//! symlink, malformed or under another key. Each must end with the command confined or refused,
//! never run unconfined or less confined. Planting files as another user needs root (CI runs as
//! root); as another user that one test says so and stops.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use dsh_sandbox::{
    load_cached_probe, probe_through_cache, store_probe, Bubblewrap, Landlock, ProbeKey,
    ProbeOrigin, Sandbox, SandboxMode, SandboxPreference, SandboxProbe, PROBE_CACHE_FILE,
};
use dsh_test_support::process::spawn_helper_test;
use dsh_tools::{
    PermissionPreset, SpillDir, ToolContext, ToolError, ToolErrorCode, ToolOutput, ToolRegistry,
};
use serde_json::json;

use crate::escapes::scratch_parent;

/// A dsh home, a workspace and a folder outside every writable root, all under the scratch
/// parent (outside the temp dirs, which a sandbox leaves writable).
struct Area {
    _root: tempfile::TempDir,
    home: PathBuf,
    bin: PathBuf,
    cwd: PathBuf,
    outside: PathBuf,
}

impl Area {
    fn new() -> Self {
        let root = tempfile::tempdir_in(scratch_parent()).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let [home, bin, cwd, outside] =
            ["home", "bin", "ws", "outside"].map(|name| real.join(name));
        for dir in [&home, &bin, &cwd, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Self {
            _root: root,
            home,
            bin,
            cwd,
            outside,
        }
    }

    fn cache(&self) -> PathBuf {
        self.home.join(PROBE_CACHE_FILE)
    }

    /// Plants `probe` under the key of the search path `path` and reads it back through the
    /// cache, as a new process would ([`Area::read_back`]).
    fn plant(&self, path: Option<&OsStr>, probe: &SandboxProbe) -> (SandboxProbe, ProbeOrigin) {
        store_probe(&self.cache(), &ProbeKey::current(path), probe).unwrap();
        self.read_back(path)
    }

    /// The verdict a new process with the search path `path` reads; it must come from the
    /// cache.
    fn read_back(&self, path: Option<&OsStr>) -> (SandboxProbe, ProbeOrigin) {
        let (probe, origin) = probe_through_cache(&self.cache(), path);
        assert_eq!(
            origin,
            ProbeOrigin::Cache(self.cache()),
            "the cache must be read"
        );
        (probe, origin)
    }

    /// A `bwrap` stand-in in `bin` running `body` (logs every invocation's arguments).
    fn fake_bwrap(&self, body: &str) -> PathBuf {
        let fake = self.bin.join("bwrap");
        let log = self.bin.join("calls.log");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$*\" >> '{}'\n{body}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        fake
    }

    fn fake_calls(&self) -> String {
        std::fs::read_to_string(self.bin.join("calls.log")).unwrap_or_default()
    }

    /// The `PATH` of a probe that finds this area's `bwrap` (and `sh` and friends after it).
    fn search_path(&self) -> OsString {
        let mut path = self.bin.clone().into_os_string();
        path.push(":/usr/local/bin:/usr/bin:/bin");
        path
    }

    /// Runs `command` through the `bash` tool under `preset` in `sandbox`.
    async fn bash(
        &self,
        sandbox: &Sandbox,
        preset: PermissionPreset,
        command: &str,
    ) -> Result<ToolOutput, ToolError> {
        let spill = SpillDir::create(self.home.join(format!("spill-{}", rand_suffix()))).unwrap();
        let ctx = ToolContext::new(&self.cwd, spill)
            .unwrap()
            .with_permission(preset)
            .with_confinement(sandbox.confinement());
        let args = json!({"command": command, "description": "probe cache attack"});
        ToolRegistry::with_builtins()
            .invoke("bash", &args.to_string(), &ctx)
            .await
    }

    /// The attack: write a marker outside and inside; returns the tool's result.
    async fn attempt(
        &self,
        sandbox: &Sandbox,
        preset: PermissionPreset,
    ) -> Result<ToolOutput, ToolError> {
        let command = format!(
            "echo escaped > '{}/marker'; echo ran > ran.txt",
            self.outside.display()
        );
        self.bash(sandbox, preset, &command).await
    }

    fn escaped(&self) -> bool {
        self.outside.join("marker").exists()
    }

    fn ran(&self) -> bool {
        self.cwd.join("ran.txt").exists()
    }
}

/// The `workspace-write` sandbox for `preference` from a verdict read through the cache.
fn choose(
    preference: SandboxPreference,
    probe: &SandboxProbe,
    origin: &ProbeOrigin,
    path: Option<&OsStr>,
) -> Sandbox {
    Sandbox::choose_cached(
        PermissionPreset::WorkspaceWrite,
        preference,
        probe,
        origin,
        path,
    )
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The verdict a trial gives on this host (with the system's `bwrap`).
fn true_probe() -> SandboxProbe {
    let probe = SandboxProbe::cached().clone();
    assert!(
        probe.bubblewrap.is_ok(),
        "bubblewrap must work for these tests (install the `bubblewrap` package; .ci/run does): {:?}",
        probe.bubblewrap
    );
    probe
}

fn assert_refused(result: &Result<ToolOutput, ToolError>, what: &str) {
    match result {
        Err(err) => assert_eq!(err.code, ToolErrorCode::SandboxUnavailable, "{what}: {err}"),
        Ok(out) => panic!(
            "{what}: the command was not refused: {}",
            out.text_content()
        ),
    }
}

#[test]
fn a_trial_is_stored_0600_and_read_back_under_its_key_only() {
    let area = Area::new();
    let path = std::env::var_os("PATH");
    let (first, origin) = probe_through_cache(&area.cache(), path.as_deref());
    assert_eq!(origin, ProbeOrigin::Trial);
    let meta = std::fs::symlink_metadata(area.cache()).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o7777, 0o600, "the cache must be 0600");
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    let (second, _) = area.read_back(path.as_deref());
    assert_eq!(
        second.bubblewrap.as_ref().ok(),
        first.bubblewrap.as_ref().ok()
    );
    assert_eq!(second.landlock.as_ref().ok(), first.landlock.as_ref().ok());
    // No temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(&area.home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![OsString::from(PROBE_CACHE_FILE)]);

    // Another `bwrap` (another search path) is another key.
    area.fake_bwrap("exit 1");
    let other = ProbeKey::current(Some(area.search_path().as_os_str()));
    assert!(load_cached_probe(&area.cache(), &other).is_none());
}

#[test]
fn the_key_follows_the_bwrap_binary() {
    let area = Area::new();
    let copy = area.bin.join("bwrap");
    std::fs::copy("/usr/bin/bwrap", &copy).unwrap();
    let search = area.search_path();
    let key = ProbeKey::current(Some(&search));
    assert_eq!(
        key,
        ProbeKey::current(Some(&search)),
        "the key must be stable"
    );
    let copied = SandboxProbe {
        bubblewrap: Ok(Bubblewrap::new(&copy)),
        ..true_probe()
    };
    store_probe(&area.cache(), &key, &copied).unwrap();
    assert!(load_cached_probe(&area.cache(), &key).is_some());
    // A verdict about /usr/bin/bwrap is not one about the copy.
    store_probe(&area.cache(), &key, &true_probe()).unwrap();
    assert!(load_cached_probe(&area.cache(), &key).is_none());
    store_probe(&area.cache(), &key, &copied).unwrap();
    // Same content, new modification time: another binary as far as the cache knows.
    let file = std::fs::File::options().write(true).open(&copy).unwrap();
    file.set_modified(std::time::SystemTime::UNIX_EPOCH)
        .unwrap();
    drop(file);
    let touched = ProbeKey::current(Some(&search));
    assert_ne!(key, touched);
    assert!(load_cached_probe(&area.cache(), &touched).is_none());
    // Replaced by another file at the same path.
    std::fs::remove_file(&copy).unwrap();
    area.fake_bwrap("exit 0");
    assert!(load_cached_probe(&area.cache(), &ProbeKey::current(Some(&search))).is_none());
}

#[test]
fn a_cache_file_that_is_loose_linked_malformed_or_inconsistent_is_ignored() {
    let area = Area::new();
    let path = std::env::var_os("PATH");
    let key = ProbeKey::current(path.as_deref());
    let lie = SandboxProbe::nothing_works("planted", "planted");
    let file = area.cache();
    store_probe(&file, &key, &lie).unwrap();
    assert!(
        load_cached_probe(&file, &key).is_some(),
        "the control must load"
    );

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(load_cached_probe(&file, &key).is_none(), "0644 was read");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(load_cached_probe(&file, &key).is_none(), "0400 was read");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Through a symlink (the name links to a well-formed verdict of ours).
    let target = area.home.join("elsewhere.json");
    std::fs::rename(&file, &target).unwrap();
    std::os::unix::fs::symlink(&target, &file).unwrap();
    assert!(
        load_cached_probe(&file, &key).is_none(),
        "a symlink was followed"
    );
    std::fs::remove_file(&file).unwrap();

    let text = std::fs::read_to_string(&target).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let write = |value: &serde_json::Value| {
        std::fs::write(&file, serde_json::to_vec(value).unwrap()).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write(&value);
    assert!(
        load_cached_probe(&file, &key).is_some(),
        "the copy must load"
    );
    // Malformed.
    std::fs::write(&file, &text[..text.len() / 2]).unwrap();
    assert!(
        load_cached_probe(&file, &key).is_none(),
        "half a file was read"
    );
    // Another key (another kernel).
    let mut other = value.clone();
    other["key"]["kernel"] = json!("0.0.0-planted");
    write(&other);
    assert!(
        load_cached_probe(&file, &key).is_none(),
        "another key was read"
    );
    // A bubblewrap verdict about another program than the key's `bwrap`.
    if let Some(real) = key_bwrap_path(&value) {
        value["bubblewrap"] = json!({"program": "/bin/sh", "user_namespace": false});
        write(&value);
        assert!(load_cached_probe(&file, &key).is_none(), "{real}");
    }
    // A Landlock ABI out of range.
    let mut abi = serde_json::from_str::<serde_json::Value>(&text).unwrap();
    abi["landlock"] = json!({"abi": 99, "mounts": "privileged"});
    write(&abi);
    assert!(load_cached_probe(&file, &key).is_none(), "ABI 99 was read");

    // Ignored means tried again, and the true verdict replaces the file.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (probe, origin) = probe_through_cache(&file, path.as_deref());
    assert_eq!(origin, ProbeOrigin::Trial);
    assert!(probe.bubblewrap.is_ok(), "{probe:?}");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
}

fn key_bwrap_path(value: &serde_json::Value) -> Option<String> {
    value["key"]["bwrap"]["path"].as_str().map(str::to_string)
}

#[test]
fn a_cache_planted_by_another_user_is_ignored() {
    if !is_root() {
        eprintln!("a_cache_planted_by_another_user_is_ignored: NOT RUN: chown to another user needs root (CI runs as root)");
        return;
    }
    let area = Area::new();
    let path = std::env::var_os("PATH");
    let key = ProbeKey::current(path.as_deref());
    let file = area.cache();
    store_probe(
        &file,
        &key,
        &SandboxProbe::nothing_works("planted", "planted"),
    )
    .unwrap();
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
    assert!(
        load_cached_probe(&file, &key).is_none(),
        "nobody's file was read"
    );
    let (probe, origin) = probe_through_cache(&file, path.as_deref());
    assert_eq!(origin, ProbeOrigin::Trial);
    assert!(probe.bubblewrap.is_ok(), "{probe:?}");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert_eq!(meta.uid(), 0, "the planted file must be replaced by ours");
}

/// Plants, under the right key, a verdict saying the area's `bwrap` stand-in works.
fn plant_working_fake(area: &Area, body: &str) -> (SandboxProbe, ProbeOrigin) {
    let fake = area.fake_bwrap(body);
    let search = area.search_path();
    let lie = SandboxProbe {
        bubblewrap: Ok(Bubblewrap::new(&fake)),
        landlock: true_probe().landlock,
    };
    let (probe, origin) = area.plant(Some(&search), &lie);
    assert_eq!(probe.bubblewrap.as_ref().ok(), lie.bubblewrap.as_ref().ok());
    (probe, origin)
}

async fn a_planted_bwrap_is_refused(body: &str) {
    let area = Area::new();
    let (probe, origin) = plant_working_fake(&area, body);
    let search = area.search_path();
    for preference in [SandboxPreference::Auto, SandboxPreference::Bubblewrap] {
        let sandbox = choose(preference, &probe, &origin, Some(&search));
        assert_eq!(sandbox.mode(), SandboxMode::Bubblewrap, "the cache said so");
        for preset in [PermissionPreset::WorkspaceWrite, PermissionPreset::ReadOnly] {
            let result = area.attempt(&sandbox, preset).await;
            assert_refused(&result, &format!("{preference:?} {preset}"));
            let message = result.unwrap_err().message;
            assert!(message.contains(PROBE_CACHE_FILE), "{message}");
            assert!(
                !area.escaped(),
                "{preference:?} {preset}: the command escaped"
            );
            assert!(!area.ran(), "{preference:?} {preset}: the command ran");
        }
    }
    // The stand-in ran only as the trial, never with the command.
    let calls = area.fake_calls();
    assert!(
        !calls.contains("marker"),
        "the command reached the stand-in: {calls}"
    );
    // The cache now holds the fresh verdict: the stand-in does not work.
    let key = ProbeKey::current(Some(&search));
    let fresh = load_cached_probe(&area.cache(), &key).expect("the fresh verdict is stored");
    assert!(fresh.bubblewrap.is_err(), "{fresh:?}");
}

#[tokio::test]
async fn a_cached_bwrap_that_fails_makes_bash_fail_closed() {
    a_planted_bwrap_is_refused("echo 'bwrap: planted failure' >&2; exit 1").await;
}

#[tokio::test]
async fn a_cached_bwrap_that_runs_commands_unconfined_makes_bash_fail_closed() {
    // Drops every option and runs what follows `--`, unconfined.
    a_planted_bwrap_is_refused(
        "while [ \"$#\" -gt 0 ] && [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"",
    )
    .await;
}

#[tokio::test]
async fn a_cached_no_mechanism_verdict_runs_nothing_and_heals() {
    let area = Area::new();
    let path = std::env::var_os("PATH");
    let none = SandboxProbe::nothing_works("planted: none", "planted: none");
    let (probe, origin) = area.plant(path.as_deref(), &none);
    let sandbox = choose(SandboxPreference::Auto, &probe, &origin, path.as_deref());
    assert_eq!(sandbox.mode(), SandboxMode::Unavailable);
    for preset in [PermissionPreset::WorkspaceWrite, PermissionPreset::ReadOnly] {
        let result = area.attempt(&sandbox, preset).await;
        assert_refused(&result, &format!("{preset}"));
        assert!(!area.escaped() && !area.ran(), "{preset}: the command ran");
    }
    // The next process reads the healed verdict and confines with it.
    let (healed, origin) = area.read_back(path.as_deref());
    let sandbox = choose(SandboxPreference::Auto, &healed, &origin, path.as_deref());
    assert_eq!(sandbox.mode(), SandboxMode::Bubblewrap);
    let result = area
        .attempt(&sandbox, PermissionPreset::WorkspaceWrite)
        .await;
    assert!(area.ran(), "a true cached verdict must run: {result:?}");
    assert!(!area.escaped(), "the command escaped");
}

#[tokio::test]
async fn a_cache_hiding_bubblewrap_does_not_downgrade_to_landlock() {
    let area = Area::new();
    let truth = true_probe();
    let Ok(landlock) = truth.landlock.clone() else {
        panic!(
            "Landlock must work for this test (kernel 5.13+ with Landlock enabled): {:?}",
            truth.landlock
        );
    };
    let path = std::env::var_os("PATH");
    let lie = SandboxProbe {
        bubblewrap: Err("planted: bwrap broken".into()),
        landlock: Ok(landlock),
    };
    let (probe, origin) = area.plant(path.as_deref(), &lie);
    let sandbox = choose(SandboxPreference::Auto, &probe, &origin, path.as_deref());
    assert_eq!(sandbox.mode(), SandboxMode::Landlock, "the cache said so");
    let result = area
        .attempt(&sandbox, PermissionPreset::WorkspaceWrite)
        .await;
    assert_refused(&result, "Landlock instead of bubblewrap");
    assert!(!area.escaped() && !area.ran(), "the command ran");
    // Forcing Landlock is what the user asked for: the same lie is then no downgrade.
    let forced = choose(
        SandboxPreference::Landlock,
        &probe,
        &origin,
        path.as_deref(),
    );
    let result = area
        .attempt(&forced, PermissionPreset::WorkspaceWrite)
        .await;
    assert!(area.ran(), "forced Landlock must run: {result:?}");
    assert!(!area.escaped(), "the command escaped Landlock");
}

#[tokio::test]
async fn a_true_cached_verdict_confines_with_each_mechanism() {
    let area = Area::new();
    let path = std::env::var_os("PATH");
    let (probe, origin) = area.plant(path.as_deref(), &true_probe());
    for (preference, mode) in [
        (SandboxPreference::Bubblewrap, SandboxMode::Bubblewrap),
        (SandboxPreference::Landlock, SandboxMode::Landlock),
    ] {
        let sandbox = choose(preference, &probe, &origin, path.as_deref());
        assert_eq!(sandbox.mode(), mode);
        std::fs::remove_file(area.cwd.join("ran.txt")).ok();
        let result = area
            .attempt(&sandbox, PermissionPreset::WorkspaceWrite)
            .await;
        assert!(area.ran(), "{mode}: {result:?}");
        assert!(!area.escaped(), "{mode}: the command escaped");
    }
}

/// Env var naming the scratch dir of [`helper_process_wide_cache`]; unset, it does nothing.
const CACHE_HELPER_ENV: &str = "DSH_PROBE_CACHE_HELPER_DIR";

/// dsh's own path through the cache, in a fresh process: `use_probe_cache(home)` then
/// `confinement_for`, with a planted verdict saying a `bwrap` stand-in that runs commands
/// unconfined works. The first command is refused; a sandbox chosen after it (a `/permission`
/// switch) comes from the fresh trial and confines.
#[test]
fn the_process_wide_cache_is_tried_before_the_first_command() {
    let area = Area::new();
    let (_, _) = plant_working_fake(
        &area,
        "while [ \"$#\" -gt 0 ] && [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"",
    );
    let dir = area.home.parent().unwrap().to_path_buf();
    let status = spawn_helper_test(
        "probe_cache::helper_process_wide_cache",
        CACHE_HELPER_ENV,
        &dir,
    )
    .unwrap()
    .wait()
    .unwrap();
    let report = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|err| panic!("the helper wrote no report ({status}): {err}"));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["first_mode"], "bubblewrap", "{report}");
    assert_eq!(report["first_code"], "SANDBOX_UNAVAILABLE", "{report}");
    assert_ne!(report["second_mode"], "bubblewrap", "{report}");
    assert_eq!(report["second_ran"], true, "{report}");
    assert!(!area.escaped(), "a command escaped: {report}");
    assert!(status.success(), "{report}");
}

#[tokio::test]
#[ignore = "helper process of the_process_wide_cache_is_tried_before_the_first_command"]
async fn helper_process_wide_cache() {
    let Some(dir) = std::env::var_os(CACHE_HELPER_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let area = Area {
        _root: tempfile::tempdir().unwrap(),
        home: dir.join("home"),
        bin: dir.join("bin"),
        cwd: dir.join("ws"),
        outside: dir.join("outside"),
    };
    // The probe reads `PATH` as dsh's does; this helper is the only thread that runs code.
    std::env::set_var("PATH", area.search_path());
    dsh_sandbox::use_probe_cache(&area.home);
    let first = dsh_sandbox::confinement_for(PermissionPreset::WorkspaceWrite).unwrap();
    let first_result = area.attempt(&first, PermissionPreset::WorkspaceWrite).await;
    let first_ran = area.ran() || area.escaped();
    let second = dsh_sandbox::confinement_for(PermissionPreset::WorkspaceWrite).unwrap();
    let second_result = area
        .attempt(&second, PermissionPreset::WorkspaceWrite)
        .await;
    let report = json!({
        "first_mode": first.mode().as_str(),
        "first_code": first_result.as_ref().err().map(|e| e.code.as_str()),
        "first_ran": first_ran,
        "second_mode": second.mode().as_str(),
        "second_error": second_result.as_ref().err().map(|e| e.message.clone()),
        "second_ran": area.ran(),
    });
    write_report(&dir, &report);
}

fn write_report(dir: &Path, report: &serde_json::Value) {
    let temp = dir.join("report.tmp");
    std::fs::write(&temp, report.to_string()).unwrap();
    std::fs::rename(&temp, dir.join("report.json")).unwrap();
}

#[test]
fn landlock_verdicts_round_trip() {
    let area = Area::new();
    let key = ProbeKey::current(None);
    for mounts in [
        dsh_sandbox::MountNamespace::Privileged,
        dsh_sandbox::MountNamespace::UserNamespace,
        dsh_sandbox::MountNamespace::Unavailable,
    ] {
        let probe = SandboxProbe {
            bubblewrap: Err("no bwrap".into()),
            landlock: Ok(Landlock::with_abi(1).with_mount_namespace(mounts)),
        };
        store_probe(&area.cache(), &key, &probe).unwrap();
        assert_eq!(load_cached_probe(&area.cache(), &key), Some(probe));
    }
}
