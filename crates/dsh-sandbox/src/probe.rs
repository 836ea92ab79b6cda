//! Which confinement works on this host, and why the others do not.
//!
//! A mechanism counts as working only after a real trial: a child is started under it with one
//! writable directory and must succeed in writing there and fail to write beside it. Presence
//! of a binary or a kernel feature is not enough (bubblewrap fails in many containers; a
//! Landlock ruleset can be accepted and still enforce nothing on some kernels).
//!
//! Landlock is tried with its mount-namespace layer first (as root without a user namespace,
//! then in a user namespace; [`MountNamespace`]), where the trial must also fail to change the
//! permission bits of a file beside the directory; the first way that works is the one every
//! later spawn uses, and without any, Landlock alone.
//!
//! A trial leaves nothing behind: it leads its own process group and dies with this process
//! (`PR_SET_PDEATHSIG`; a bubblewrap trial also runs under dsh_tools' group keeper, so what
//! `bwrap` started in the group dies too), a trial past its timeout is killed with its whole
//! group, and each probe first removes the scratch directories of earlier probes whose process
//! is gone (the pid is part of the directory name).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dsh_tools::{CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset};

use crate::bubblewrap::Bubblewrap;
use crate::landlock::Landlock;
use crate::mounts::MountNamespace;
use crate::probe_cache::ProbeOrigin;

/// How long one trial may take before the mechanism is declared broken.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// A trial directory of a dead process is removed only when it is at least this old, so a
/// directory of a live trial in another pid namespace sharing the temp dir is left alone.
const STALE_AGE: Duration = Duration::from_secs(60);

/// The prefix of every trial directory's name: `dsh-sandbox-probe-<pid>-<n>-<nanos>`.
const TRIAL_PREFIX: &str = "dsh-sandbox-probe-";

/// Removes the trial directories in `temp_dir` left by probes of processes that are gone:
/// names `dsh-sandbox-probe-<pid>-...` whose `<pid>` is no live process (`kill(pid, 0)` says
/// `ESRCH`) and that were last modified at least `min_age` ago. Directories of live processes,
/// younger ones and anything else are kept. Returns the directories removed. Runs at the start
/// of every [`SandboxProbe::run`] (with a minimum age of one minute).
pub fn remove_stale_trial_dirs(temp_dir: &Path, min_age: Duration) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(temp_dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(TRIAL_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid <= 0 || process_exists(pid) {
            continue;
        }
        // Not followed: a symlink with that name is not ours to remove through.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let old_enough = meta
            .modified()
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if meta.is_dir() && old_enough && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// True unless `kill(pid, 0)` says no such process (`EPERM` means it exists).
fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// What each mechanism's trial found on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxProbe {
    /// The working bubblewrap set-up (executable, and whether a user namespace works), or why
    /// bubblewrap cannot be used.
    pub bubblewrap: Result<Bubblewrap, String>,
    /// The working Landlock set-up (ABI 1..=[`crate::TARGET_ABI`] and how its mount-namespace
    /// layer is made), or why Landlock cannot be used.
    pub landlock: Result<Landlock, String>,
}

impl SandboxProbe {
    /// Tries both mechanisms now. `bwrap` is looked up in `search_path` (a `PATH`-style list;
    /// `None` means no bubblewrap). Takes a few tens of milliseconds; use [`SandboxProbe::cached`]
    /// for the process-wide answer.
    pub fn run(search_path: Option<&OsStr>) -> Self {
        remove_stale_trial_dirs(&std::env::temp_dir(), STALE_AGE);
        // The two trials are independent processes: run them side by side, so start-up waits
        // for the slower one only.
        let bubblewrap = || {
            find_program("bwrap", search_path)
                .ok_or_else(|| {
                    "the `bwrap` executable is not on PATH (install the `bubblewrap` package)"
                        .to_string()
                })
                .and_then(|program| bubblewrap_trials(Bubblewrap::new(&program)))
        };
        let landlock = || {
            Landlock::detect().and_then(|landlock| {
                // SAFETY: geteuid has no preconditions.
                let root = unsafe { libc::geteuid() } == 0;
                let layered = [MountNamespace::Privileged, MountNamespace::UserNamespace];
                let first = if root { 0 } else { 1 };
                layered[first..]
                    .iter()
                    .map(|&mounts| landlock.with_mount_namespace(mounts))
                    .find(|layered| landlock_trial(layered).is_ok())
                    .map(Ok)
                    .unwrap_or_else(|| landlock_trial(&landlock).map(|()| landlock))
                    .map_err(|reason| format!("Landlock does not work here: {reason}"))
            })
        };
        std::thread::scope(|scope| {
            let landlock = scope.spawn(landlock);
            let bubblewrap = bubblewrap();
            let landlock = landlock
                .join()
                .unwrap_or_else(|_| Err("the Landlock trial panicked".to_string()));
            Self {
                bubblewrap,
                landlock,
            }
        })
    }

    /// The probe of this process, made once on first use with this process's `PATH`: read
    /// from the cache file named by [`crate::use_probe_cache`] when it holds a verdict for this
    /// host, else a trial (then stored there). See [`SandboxProbe::cached_with_origin`].
    pub fn cached() -> &'static SandboxProbe {
        &Self::cached_with_origin().0
    }

    /// [`SandboxProbe::cached`] and where its verdict came from. A verdict from the cache is
    /// tried again before the first confined command of the process (docs/SECURITY.md, "Probe
    /// verdict cache").
    pub fn cached_with_origin() -> &'static (SandboxProbe, ProbeOrigin) {
        static PROBE: OnceLock<(SandboxProbe, ProbeOrigin)> = OnceLock::new();
        PROBE.get_or_init(|| {
            let path = std::env::var_os("PATH");
            match crate::probe_cache::cache_file() {
                Some(file) => crate::probe_cache::probe_through_cache(file, path.as_deref()),
                None => (SandboxProbe::run(path.as_deref()), ProbeOrigin::Trial),
            }
        })
    }

    /// A probe that found nothing, with the given reasons (for tests and for hosts where
    /// probing is pointless).
    pub fn nothing_works(bubblewrap: impl Into<String>, landlock: impl Into<String>) -> Self {
        Self {
            bubblewrap: Err(bubblewrap.into()),
            landlock: Err(landlock.into()),
        }
    }
}

/// Tries bubblewrap with a user namespace when the host allows one, else without (some
/// containers forbid them; capabilities are dropped either way); each first with a prepared
/// sandbox per layout, through the very path commands take but without its fallback, then
/// with one `bwrap` per command (docs/SECURITY.md, "A prepared bubblewrap sandbox per
/// layout"). The first set-up that passes is the one commands use.
fn bubblewrap_trials(with_userns: Bubblewrap) -> Result<Bubblewrap, String> {
    let without = with_userns.clone().without_user_namespace();
    let mut failures = Vec::new();
    for (candidate, how) in [
        (with_userns, "with a user namespace"),
        (without, "without a user namespace"),
    ] {
        match trial(&crate::bubblewrap::StrictlyPrepared(&candidate)) {
            Ok(()) => return Ok(candidate),
            Err(reason) => failures.push(format!("{how}, prepared: {reason}")),
        }
        let per_call = candidate.per_call();
        match trial(&per_call) {
            Ok(()) => return Ok(per_call),
            Err(reason) => failures.push(format!("{how}: {reason}")),
        }
    }
    Err(format!(
        "bubblewrap does not work here ({})",
        failures.join("; ")
    ))
}

/// The first executable file called `name` in the `PATH`-style list `search_path`.
pub(crate) fn find_program(name: &str, search_path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(search_path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// A private scratch directory for one trial, removed on drop.
struct TrialDir(PathBuf);

impl TrialDir {
    fn create() -> Result<Self, String> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "{TRIAL_PREFIX}{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let base = std::env::temp_dir().join(name);
        for dir in [base.join("ws"), base.join("outside")] {
            std::fs::create_dir_all(&dir)
                .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        }
        let base = std::fs::canonicalize(&base)
            .map_err(|err| format!("cannot resolve {}: {err}", base.display()))?;
        Ok(Self(base))
    }
}

impl Drop for TrialDir {
    fn drop(&mut self) {
        // Best effort: a leftover probe directory in the temp dir harms nothing.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `sh` under `confinement` (preset `workspace-write`, one writable directory) and checks
/// that it can write inside and cannot write outside; with a Landlock mount layer, also that
/// it cannot change the permission bits of a file outside.
fn trial(confinement: &dyn CommandConfinement) -> Result<(), String> {
    trial_with(confinement, false, true)
}

fn landlock_trial(landlock: &Landlock) -> Result<(), String> {
    trial_with(
        landlock,
        landlock.mount_namespace() != MountNamespace::Unavailable,
        false,
    )
}

/// `keeper`: run the trial under dsh_tools' group keeper (bubblewrap); Landlock's own hooks
/// must run in a direct child of this process and arm the death signal themselves.
fn trial_with(
    confinement: &dyn CommandConfinement,
    check_metadata: bool,
    keeper: bool,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = TrialDir::create()?;
    let ws = dir.0.join("ws");
    let outside = dir.0.join("outside");
    let meta = outside.join("meta");
    std::fs::write(&meta, "")
        .and_then(|()| std::fs::set_permissions(&meta, std::fs::Permissions::from_mode(0o644)))
        .map_err(|err| format!("cannot create {}: {err}", meta.display()))?;
    let request = ConfinementRequest {
        preset: PermissionPreset::WorkspaceWrite,
        cwd: ws.clone(),
        workdir: ws.clone(),
        writable_roots: vec![ws.clone()],
        hidden_dirs: Vec::new(),
        network: true,
    };
    let plan = CommandPlan::new(
        "sh",
        vec![
            "-c".into(),
            "echo ok > ok; echo escaped > \"$0/escaped\" 2>/dev/null; chmod 600 \"$0/meta\" 2>/dev/null; exit 0".into(),
            outside.clone().into_os_string(),
        ],
    );
    let plan = confinement.confine(plan, &request).map_err(|e| e.message)?;
    let stderr = run_plan(&plan, &ws, keeper)?;
    if outside.join("escaped").exists() {
        return Err("a write outside the allowed directory was not blocked".to_string());
    }
    let mode = std::fs::metadata(&meta).map(|m| m.permissions().mode() & 0o777);
    if check_metadata && mode.ok() != Some(0o644) {
        return Err(
            "a permission change outside the allowed directory was not blocked".to_string(),
        );
    }
    match std::fs::read_to_string(ws.join("ok")) {
        Ok(text) if text.trim() == "ok" => Ok(()),
        _ => Err(match first_line(&stderr) {
            Some(line) => format!("the trial command failed: {line}"),
            None => "the trial command could not write inside the allowed directory".to_string(),
        }),
    }
}

fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|line| !line.is_empty())
}

/// Spawns `plan` in `cwd` with a minimal environment; returns its stderr.
/// The trial leads its own process group and dies with this process (under the group keeper
/// when `keeper`); past [`TRIAL_TIMEOUT`] the whole group is killed.
fn run_plan(plan: &CommandPlan, cwd: &Path, keeper: bool) -> Result<String, String> {
    let timeout = TRIAL_TIMEOUT;
    let mut command = Command::new(&plan.program);
    command
        .args(&plan.args)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(default_path),
        )
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if keeper {
        // bubblewrap: under the group keeper, so what `bwrap` starts in its group dies when
        // this process dies, also before `--die-with-parent` is in force.
        dsh_tools::guard_group_std(&mut command);
    } else {
        // Landlock: its own hooks arm the death signal (and on ABI 6+ fork their own keeper,
        // which must be this process's child); the trial only gets its own group first.
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: runs in the forked child before exec; prctl, getppid and setpgid are
        // async-signal-safe system calls.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let hooks = plan.pre_exec.clone();
    // SAFETY: runs in the forked child before exec; the hooks' contract (`PreExecHook`) is to be
    // async-signal-safe, and iterating the Vec only reads memory.
    unsafe {
        command.pre_exec(move || {
            for hook in &hooks {
                hook()?;
            }
            Ok(())
        });
    }
    // The spawner thread lives as long as the process, so the death signal fires only when the
    // process dies, not when the probe's scoped thread ends.
    let mut child = dsh_tools::spawn_std_child(command)
        .map_err(|err| format!("cannot start {}: {err}", Path::new(&plan.program).display()))?;
    let group = libc::pid_t::try_from(child.id()).unwrap_or(0);
    let kill_group = || {
        if group > 1 {
            // SAFETY: kill(2) on the trial's own process group; ESRCH (gone) is fine.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
    };
    let deadline = Instant::now() + timeout;
    // Poll often at first (a working trial ends within milliseconds), then back off.
    let mut pause = Duration::from_micros(250);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Ok(None) => {
                kill_group();
                // Best effort: the child may exit between the check and the kill.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the trial did not finish within {} s",
                    timeout.as_secs()
                ));
            }
            Err(err) => {
                kill_group();
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot wait for the trial: {err}"));
            }
        }
    }
    // Whatever the trial left in its group (it should leave nothing) ends with it.
    kill_group();
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        // A read error leaves the diagnostics empty; the verdict comes from the files.
        let _ = pipe.read_to_string(&mut stderr);
    }
    Ok(stderr)
}

fn default_path() -> OsString {
    "/usr/local/bin:/usr/bin:/bin".into()
}
