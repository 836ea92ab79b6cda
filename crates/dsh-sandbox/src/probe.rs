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

/// How long one trial may take before the mechanism is declared broken.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(10);

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
        // The two trials are independent processes: run them side by side, so start-up waits
        // for the slower one only.
        let bubblewrap = || {
            find_program("bwrap", search_path)
                .ok_or_else(|| {
                    "the `bwrap` executable is not on PATH (install the `bubblewrap` package)"
                        .to_string()
                })
                .and_then(|program| {
                    // With a user namespace when the host allows one, else without (some
                    // containers forbid them); capabilities are dropped either way.
                    let with_userns = Bubblewrap::new(&program);
                    match trial(&with_userns) {
                        Ok(()) => Ok(with_userns),
                        Err(first) => {
                            let without = with_userns.without_user_namespace();
                            trial(&without).map(|()| without).map_err(|reason| {
                                format!(
                                    "bubblewrap does not work here: {reason} (with a user namespace: {first})"
                                )
                            })
                        }
                    }
                })
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

    /// The probe of this process, run once on first use with this process's `PATH`.
    pub fn cached() -> &'static SandboxProbe {
        static PROBE: OnceLock<SandboxProbe> = OnceLock::new();
        PROBE.get_or_init(|| {
            let path = std::env::var_os("PATH");
            SandboxProbe::run(path.as_deref())
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

/// The first executable file called `name` in the `PATH`-style list `search_path`.
fn find_program(name: &str, search_path: Option<&OsStr>) -> Option<PathBuf> {
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
            "dsh-sandbox-probe-{}-{}-{nanos}",
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
    trial_with(confinement, false)
}

fn landlock_trial(landlock: &Landlock) -> Result<(), String> {
    trial_with(
        landlock,
        landlock.mount_namespace() != MountNamespace::Unavailable,
    )
}

fn trial_with(confinement: &dyn CommandConfinement, check_metadata: bool) -> Result<(), String> {
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
    };
    let plan = CommandPlan {
        program: "sh".into(),
        args: vec![
            "-c".into(),
            "echo ok > ok; echo escaped > \"$0/escaped\" 2>/dev/null; chmod 600 \"$0/meta\" 2>/dev/null; exit 0".into(),
            outside.clone().into_os_string(),
        ],
        pre_exec: Vec::new(),
    };
    let plan = confinement.confine(plan, &request).map_err(|e| e.message)?;
    let stderr = run_plan(&plan, &ws)?;
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
fn run_plan(plan: &CommandPlan, cwd: &Path) -> Result<String, String> {
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
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot start {}: {err}", Path::new(&plan.program).display()))?;
    let deadline = Instant::now() + TRIAL_TIMEOUT;
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
                // Best effort: the child may exit between the check and the kill.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the trial did not finish within {} s",
                    TRIAL_TIMEOUT.as_secs()
                ));
            }
            Err(err) => return Err(format!("cannot wait for the trial: {err}")),
        }
    }
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
