//! Confinement of dsh's child processes (docs/SECURITY.md, "Platforms"), behind the
//! [`dsh_tools::CommandConfinement`] seam that `bash` uses.
//!
//! On Linux:
//!
//! * `Bubblewrap`: the command runs in `bwrap` with a read-only root and only the writable
//!   roots bound read-write (preferred: it also hides host processes and gives `read-only` a
//!   private `/tmp`).
//! * `Landlock`: the child restricts itself before `exec` (read and execute everywhere,
//!   write only beneath the writable roots), inside a read-only mount namespace where the host
//!   allows one (`MountNamespace`: permission bits and timestamps outside, the protected
//!   entries, dsh's home).
//! * [`Unavailable`]: neither works; `bash` fails with `SANDBOX_UNAVAILABLE` and the reasons.
//!
//! On macOS, [`Seatbelt`]: the command runs under `/usr/bin/sandbox-exec` with a profile made
//! by [`seatbelt_profile`] (a pure function, built and tested on every platform). Everywhere
//! else, [`Unavailable`]. The Linux mechanisms and their probe are compiled on Linux only.
//!
//! Invariant: a command never runs unconfined unless the preset is `danger-full-access`
//! (decision record `docs/decisions/0001-sandbox.md`). Reading is not restricted (but for dsh's
//! home and devices); the network only when the request says so ([`Sandbox::with_network`],
//! docs/SECURITY.md "Network").
//!
//! ```no_run
//! use dsh_tools::PermissionPreset;
//! # fn demo(ctx: dsh_tools::ToolContext) -> Result<(), dsh_sandbox::SandboxSettingError> {
//! let sandbox = dsh_sandbox::confinement_for(PermissionPreset::WorkspaceWrite)?;
//! eprintln!("sandbox: {} ({})", sandbox.mode(), sandbox.detail());
//! let ctx = ctx.with_confinement(sandbox.confinement());
//! # let _ = ctx; Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

#[cfg(target_os = "linux")]
mod bubblewrap;
#[cfg(target_os = "linux")]
mod landlock;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod prepared;
#[cfg(target_os = "linux")]
mod prepared_bwrap;
#[cfg(target_os = "linux")]
mod probe;
#[cfg(target_os = "linux")]
mod probe_cache;
mod seatbelt;
#[cfg(target_os = "linux")]
mod seccomp;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use dsh_tools::{
    CommandConfinement, CommandPlan, ConfinementRequest, NoSandbox, PermissionPreset, ToolError,
    ToolErrorCode,
};

#[cfg(target_os = "linux")]
pub use crate::bubblewrap::Bubblewrap;
#[cfg(target_os = "linux")]
pub use crate::landlock::{kernel_abi, Landlock, TARGET_ABI};
#[cfg(target_os = "linux")]
pub use crate::mounts::MountNamespace;
#[cfg(target_os = "linux")]
pub use crate::probe::{remove_stale_trial_dirs, SandboxProbe};
#[cfg(target_os = "linux")]
pub use crate::probe_cache::{
    load_cached_probe, probe_through_cache, store_probe, ProbeKey, ProbeOrigin, PROBE_CACHE_FILE,
};
pub use crate::seatbelt::{
    seatbelt_profile, GitEntry, Seatbelt, SeatbeltPolicy, SeatbeltRoot, SANDBOX_EXEC,
};

/// The environment variable (and setting) choosing the mechanism: `auto` (default),
/// `bubblewrap`, `landlock` (Linux) or `seatbelt` (macOS). A forced mechanism that does not work
/// (or does not exist on this platform) is not replaced by another one: `bash` then fails with
/// `SANDBOX_UNAVAILABLE`.
pub const SANDBOX_ENV: &str = "DSH_SANDBOX";

/// Which mechanism to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxPreference {
    /// Bubblewrap when it works, else Landlock (Linux); Seatbelt (macOS).
    #[default]
    Auto,
    /// Bubblewrap only.
    Bubblewrap,
    /// Landlock only.
    Landlock,
    /// Seatbelt only (macOS).
    Seatbelt,
}

impl FromStr for SandboxPreference {
    type Err = SandboxSettingError;

    /// Parses `auto`, `bubblewrap` (or `bwrap`), `landlock` and `seatbelt`, ignoring case and surrounding
    /// blanks; anything else is an error naming the accepted values.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "bubblewrap" | "bwrap" => Ok(Self::Bubblewrap),
            "landlock" => Ok(Self::Landlock),
            "seatbelt" => Ok(Self::Seatbelt),
            other => Err(SandboxSettingError(format!(
                "unknown {SANDBOX_ENV} value `{other}` (expected auto, bubblewrap, landlock or seatbelt)"
            ))),
        }
    }
}

/// A sandbox setting that makes no sense (fail at start rather than guess).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettingError(pub String);

impl fmt::Display for SandboxSettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SandboxSettingError {}

/// The mechanism a session's commands run under, as logged (`sandbox/mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// bubblewrap.
    Bubblewrap,
    /// Landlock.
    Landlock,
    /// Seatbelt (macOS `sandbox-exec`).
    Seatbelt,
    /// No mechanism works: commands are refused with `SANDBOX_UNAVAILABLE`.
    Unavailable,
    /// `danger-full-access`: commands run unconfined, as asked.
    Unconfined,
}

impl SandboxMode {
    /// The spelling in logs: `bubblewrap`, `landlock`, `seatbelt`, `unavailable`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bubblewrap => "bubblewrap",
            Self::Landlock => "landlock",
            Self::Seatbelt => "seatbelt",
            Self::Unavailable => "unavailable",
            Self::Unconfined => "none",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The confinement chosen for a session: the mechanism, a one-line explanation, and the value
/// to give [`dsh_tools::ToolContext::with_confinement`].
#[derive(Clone)]
pub struct Sandbox {
    mode: SandboxMode,
    detail: String,
    confinement: Arc<dyn CommandConfinement>,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("mode", &self.mode)
            .field("detail", &self.detail)
            .finish()
    }
}

impl Sandbox {
    /// The mechanism.
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// Why this mechanism: what works, and for the others why not.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The confinement for the tool context.
    pub fn confinement(&self) -> Arc<dyn CommandConfinement> {
        Arc::clone(&self.confinement)
    }

    /// This sandbox with the session's network setting (`[sandbox] network`) in its detail line:
    /// with `network` false a confined mechanism says how the network is withheld (each
    /// call's [`ConfinementRequest::network`] decides; docs/SECURITY.md, "Network").
    /// `danger-full-access` and an unavailable sandbox are unchanged.
    pub fn with_network(mut self, network: bool) -> Sandbox {
        if network {
            return self;
        }
        let how = match self.mode {
            SandboxMode::Bubblewrap => {
                "no network (a network namespace of its own with only a loopback; approve one \
                 call's `network: true` to give it the host's)"
            }
            SandboxMode::Landlock => {
                "no network (sockets other than Unix and netlink refused, loopback included; \
                 approve one call's `network: true` to allow them)"
            }
            SandboxMode::Seatbelt => {
                "no network (IP connections and binds denied by the profile; approve one call's \
                 `network: true` to allow them)"
            }
            SandboxMode::Unconfined | SandboxMode::Unavailable => return self,
        };
        self.detail = self.detail.replace("network not restricted", how);
        self
    }

    /// `danger-full-access`: no mechanism, commands run as asked.
    fn unconfined() -> Sandbox {
        Sandbox {
            mode: SandboxMode::Unconfined,
            detail: "danger-full-access: commands run without a sandbox".to_string(),
            confinement: Arc::new(NoSandbox),
        }
    }

    /// No mechanism: every command outside `danger-full-access` is refused with `reasons`.
    fn unavailable(reasons: String) -> Sandbox {
        Sandbox {
            mode: SandboxMode::Unavailable,
            confinement: Arc::new(Unavailable {
                reason: reasons.clone(),
            }),
            detail: reasons,
        }
    }

    /// Chooses on macOS for `preset` from the outcome of Seatbelt's trial
    /// ([`Seatbelt::cached`]) honouring `preference`: a forced Linux mechanism is unavailable.
    /// Compiled everywhere, so its choices are tested on Linux too.
    pub fn choose_seatbelt(
        preset: PermissionPreset,
        preference: SandboxPreference,
        seatbelt: Result<Seatbelt, String>,
    ) -> Sandbox {
        if preset == PermissionPreset::DangerFullAccess {
            return Self::unconfined();
        }
        match (preference, seatbelt) {
            (SandboxPreference::Auto | SandboxPreference::Seatbelt, Ok(seatbelt)) => Sandbox {
                mode: SandboxMode::Seatbelt,
                detail: format!(
                    "Seatbelt ({}); network not restricted",
                    seatbelt.program().display()
                ),
                confinement: Arc::new(seatbelt),
            },
            (SandboxPreference::Auto, Err(reason)) => Self::unavailable(reason),
            (SandboxPreference::Seatbelt, Err(reason)) => {
                Self::unavailable(format!("{SANDBOX_ENV}=seatbelt: {reason}"))
            }
            (SandboxPreference::Bubblewrap, _) => Self::unavailable(format!(
                "{SANDBOX_ENV}=bubblewrap: bubblewrap is used on Linux only"
            )),
            (SandboxPreference::Landlock, _) => Self::unavailable(format!(
                "{SANDBOX_ENV}=landlock: Landlock exists only on Linux"
            )),
        }
    }

    /// Chooses for `preset` from `probe` honouring `preference`. `danger-full-access` needs no
    /// mechanism ([`SandboxMode::Unconfined`], whatever the probe says); otherwise the
    /// preferred working mechanism, or [`SandboxMode::Unavailable`] with every reason.
    #[cfg(target_os = "linux")]
    pub fn choose(
        preset: PermissionPreset,
        preference: SandboxPreference,
        probe: &SandboxProbe,
    ) -> Sandbox {
        if preset == PermissionPreset::DangerFullAccess {
            return Self::unconfined();
        }
        match choice_of(preference, probe) {
            probe_cache::Choice::Bubblewrap(bwrap) => Sandbox {
                mode: SandboxMode::Bubblewrap,
                detail: format!(
                    "bubblewrap ({}{}{}); network not restricted",
                    bwrap.program().display(),
                    if bwrap.user_namespace() {
                        ", user namespace"
                    } else {
                        ", no user namespace on this host"
                    },
                    if bwrap.prepared() {
                        ", one prepared sandbox per layout"
                    } else {
                        ", one sandbox per command"
                    }
                ),
                confinement: Arc::new(bwrap),
            },
            probe_cache::Choice::Landlock(landlock) => {
                let head = format!(
                    "Landlock ABI {} ({}); network not restricted",
                    landlock.abi(),
                    landlock.mount_namespace().describe()
                );
                Sandbox {
                    mode: SandboxMode::Landlock,
                    detail: match preference {
                        SandboxPreference::Auto => {
                            format!("{head}; {}", reason(&probe.bubblewrap))
                        }
                        _ => head,
                    },
                    confinement: Arc::new(landlock),
                }
            }
            probe_cache::Choice::Unavailable => {
                let reasons = match preference {
                    SandboxPreference::Auto => {
                        format!("{}; {}", reason(&probe.bubblewrap), reason(&probe.landlock))
                    }
                    SandboxPreference::Bubblewrap => {
                        format!("{SANDBOX_ENV}=bubblewrap: {}", reason(&probe.bubblewrap))
                    }
                    SandboxPreference::Landlock => {
                        format!("{SANDBOX_ENV}=landlock: {}", reason(&probe.landlock))
                    }
                    SandboxPreference::Seatbelt => {
                        format!("{SANDBOX_ENV}=seatbelt: Seatbelt exists only on macOS")
                    }
                };
                Self::unavailable(reasons)
            }
        }
    }

    /// [`Sandbox::choose`] for a probe whose verdict came from `origin`. From a trial, the same
    /// as [`Sandbox::choose`]. From the cache, the chosen confinement (also "no mechanism")
    /// first waits for a fresh trial with `search_path` (once per returned sandbox and its
    /// clones) and confines commands only when that trial chooses the same mechanism with the
    /// same set-up; otherwise it refuses them with `SANDBOX_UNAVAILABLE` and the cache file gets
    /// the fresh verdict (docs/SECURITY.md, "Probe verdict cache").
    #[cfg(target_os = "linux")]
    pub fn choose_cached(
        preset: PermissionPreset,
        preference: SandboxPreference,
        probe: &SandboxProbe,
        origin: &ProbeOrigin,
        search_path: Option<&std::ffi::OsStr>,
    ) -> Sandbox {
        let ProbeOrigin::Cache(file) = origin else {
            return Self::choose(preset, preference, probe);
        };
        let once = Arc::new(std::sync::OnceLock::<SandboxProbe>::new());
        let (cached, file_for_trial) = (probe.clone(), file.clone());
        let search_path = search_path.map(std::ffi::OsStr::to_os_string);
        let verify: probe_cache::Verifier = Arc::new(move || {
            probe_cache::verify_once(&once, &cached, &file_for_trial, search_path.as_deref())
                .clone()
        });
        Self::unverified(preset, preference, probe, file, verify)
    }

    /// [`Sandbox::choose`] with the confinement wrapped in [`probe_cache::Unverified`].
    #[cfg(target_os = "linux")]
    fn unverified(
        preset: PermissionPreset,
        preference: SandboxPreference,
        probe: &SandboxProbe,
        file: &std::path::Path,
        verify: probe_cache::Verifier,
    ) -> Sandbox {
        let chosen = Self::choose(preset, preference, probe);
        if chosen.mode == SandboxMode::Unconfined {
            return chosen;
        }
        Sandbox {
            confinement: Arc::new(probe_cache::Unverified {
                inner: chosen.confinement,
                choice: choice_of(preference, probe),
                preference,
                verify,
                file: file.to_path_buf(),
            }),
            ..chosen
        }
    }
}

/// What `preference` picks from `probe`: the preferred working mechanism, or none.
#[cfg(target_os = "linux")]
pub(crate) fn choice_of(
    preference: SandboxPreference,
    probe: &SandboxProbe,
) -> probe_cache::Choice {
    use probe_cache::Choice;
    let bubblewrap = || {
        probe
            .bubblewrap
            .as_ref()
            .ok()
            .cloned()
            .map(Choice::Bubblewrap)
    };
    let landlock = || probe.landlock.as_ref().ok().copied().map(Choice::Landlock);
    match preference {
        SandboxPreference::Auto => bubblewrap().or_else(landlock),
        SandboxPreference::Bubblewrap => bubblewrap(),
        SandboxPreference::Landlock => landlock(),
        SandboxPreference::Seatbelt => None,
    }
    .unwrap_or(Choice::Unavailable)
}

/// The failure text of a probe result (empty when it worked).
#[cfg(target_os = "linux")]
fn reason<T>(result: &Result<T, String>) -> String {
    result.as_ref().err().cloned().unwrap_or_default()
}

/// The sandbox for a session with `preset` on this host: the preference from [`SANDBOX_ENV`]
/// and the process-wide probe (Linux: `SandboxProbe::cached`; macOS: [`Seatbelt::cached`];
/// probed on first use, not at all for `danger-full-access`). Other platforms have no
/// mechanism yet: every preset but `danger-full-access` is [`SandboxMode::Unavailable`]. An
/// invalid [`SANDBOX_ENV`] value is an error.
pub fn confinement_for(preset: PermissionPreset) -> Result<Sandbox, SandboxSettingError> {
    // `ask` is confined exactly as `workspace-write` (its approvals are the agent's business).
    let preset = preset.confinement();
    let preference = preference_from_env()?;
    if preset == PermissionPreset::DangerFullAccess {
        return Ok(Sandbox::unconfined());
    }
    Ok(platform_sandbox(preset, preference))
}

/// [`confinement_for`] from a trial of each mechanism made now, not from the process-wide
/// probe or the verdict cached in the home: what works on this host at this moment, for
/// `dsh doctor` (docs/doctor.md). Linux: a fresh [`SandboxProbe::run`] with this process's
/// `PATH` (a few tens of milliseconds); elsewhere the same as [`confinement_for`], whose trial
/// is the process's own.
pub fn confinement_tried(preset: PermissionPreset) -> Result<Sandbox, SandboxSettingError> {
    let preset = preset.confinement();
    let preference = preference_from_env()?;
    if preset == PermissionPreset::DangerFullAccess {
        return Ok(Sandbox::unconfined());
    }
    #[cfg(target_os = "linux")]
    {
        let path = std::env::var_os("PATH");
        Ok(Sandbox::choose(
            preset,
            preference,
            &SandboxProbe::run(path.as_deref()),
        ))
    }
    #[cfg(not(target_os = "linux"))]
    Ok(platform_sandbox(preset, preference))
}

/// The mechanism [`SANDBOX_ENV`] asks for (`auto` when unset); an invalid value is an error.
fn preference_from_env() -> Result<SandboxPreference, SandboxSettingError> {
    match std::env::var(SANDBOX_ENV) {
        Ok(value) => value.parse(),
        Err(std::env::VarError::NotPresent) => Ok(SandboxPreference::Auto),
        Err(std::env::VarError::NotUnicode(_)) => Err(SandboxSettingError(format!(
            "{SANDBOX_ENV} is not valid UTF-8 (expected auto, bubblewrap or landlock)"
        ))),
    }
}

/// Linux: from the process-wide probe. A verdict read from the cache is tried again before the
/// first confined command (once per process, shared by all its sandboxes); once that trial ran,
/// later sandboxes are chosen from it.
#[cfg(target_os = "linux")]
fn platform_sandbox(preset: PermissionPreset, preference: SandboxPreference) -> Sandbox {
    if let Some(fresh) = probe_cache::fresh_probe() {
        return Sandbox::choose(preset, preference, fresh);
    }
    let (probe, origin) = SandboxProbe::cached_with_origin();
    let ProbeOrigin::Cache(file) = origin else {
        return Sandbox::choose(preset, preference, probe);
    };
    let file_for_trial = file.clone();
    let verify: probe_cache::Verifier = Arc::new(move || {
        let path = std::env::var_os("PATH");
        probe_cache::verified_probe(probe, &file_for_trial, path.as_deref()).clone()
    });
    Sandbox::unverified(preset, preference, probe, file, verify)
}

#[cfg(target_os = "macos")]
fn platform_sandbox(preset: PermissionPreset, preference: SandboxPreference) -> Sandbox {
    Sandbox::choose_seatbelt(preset, preference, Seatbelt::cached())
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn platform_sandbox(_preset: PermissionPreset, _preference: SandboxPreference) -> Sandbox {
    Sandbox::unavailable(format!(
        "dsh has no process sandbox for {} yet (docs/SECURITY.md, \"Platforms\")",
        std::env::consts::OS
    ))
}

/// Keeps the sandbox probe's verdict in `home` (`$DSH_HOME`, file [`PROBE_CACHE_FILE`] on
/// Linux) for this process: the process-wide probe ([`SandboxProbe::cached`]) reads it from there
/// when it holds a verdict for this host, or stores its trial there, so a new process need not
/// try each mechanism before its first request. A cached verdict is tried again before the first
/// confined command (docs/SECURITY.md, "Probe verdict cache"). Call before the first sandbox is
/// chosen; later calls change nothing. Elsewhere than on Linux it does nothing.
pub fn use_probe_cache(home: &std::path::Path) {
    #[cfg(target_os = "linux")]
    probe_cache::set_cache_home(home);
    #[cfg(not(target_os = "linux"))]
    let _ = home;
}

/// Starts the process-wide probe ([`SandboxProbe::cached`]: the verdict read from the cache
/// [`use_probe_cache`] names, else a trial) on a thread of its own, so it runs beside what
/// the caller does next (reading the configuration) instead of when the first session is
/// composed, which then takes the verdict or waits for it (docs/PERFORMANCE.md, "Where the
/// first request's time goes"). Call after [`use_probe_cache`]. Linux only: elsewhere the
/// verdict costs nothing and this does nothing.
pub fn probe_in_background() {
    #[cfg(target_os = "linux")]
    {
        // One thread per process: later runtimes find the probe started (or done).
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            // A thread that cannot start leaves the probe to its first use, as before.
            let _ = std::thread::Builder::new()
                .name("dsh-probe".to_string())
                .spawn(|| {
                    SandboxProbe::cached_with_origin();
                });
        });
    }
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE 0`), so that a process without
/// `CAP_SYS_PTRACE`, which every confined command is (they drop all capabilities, also as
/// root), can read neither `/proc/<dsh>/environ`, where the provider key may be, nor this
/// process's memory (docs/SECURITY.md, "dsh's own environment"). `dsh` calls it first thing.
/// Failure is ignored: it leaves the default, and nothing else depends on it. Linux only:
/// elsewhere it does nothing (on macOS a process of the same user can read another's initial
/// environment through `sysctl(KERN_PROCARGS2)`, which no Seatbelt rule stops; docs/SECURITY.md,
/// "Platforms").
pub fn make_undumpable() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// What both mount-based mechanisms do to one writable root (docs/SECURITY.md, "Protected
/// paths"): `.git`, when it is a directory, is bound onto itself so it cannot be renamed away
/// (its missing `hooks` folder is created first, so it can be bound read-only); then every
/// existing protected entry is bound read-only.
#[cfg(target_os = "linux")]
pub(crate) struct RootProtection {
    /// The `.git` directory to pin, if there is one.
    pub(crate) pinned_git: Option<std::path::PathBuf>,
    /// The protected entries to bind read-only.
    pub(crate) read_only: Vec<std::path::PathBuf>,
}

#[cfg(target_os = "linux")]
impl RootProtection {
    /// The protection of `root` (creates `.git/hooks` when `.git` exists without it).
    pub(crate) fn of(root: &std::path::Path) -> Self {
        let git = root.join(".git");
        let pinned_git = if std::fs::symlink_metadata(&git).is_ok_and(|meta| meta.is_dir()) {
            let hooks = git.join("hooks");
            if std::fs::symlink_metadata(&hooks).is_err() {
                // Best effort: git creates it anyway; if it cannot be created, the command
                // cannot create it either (`.git` is then not writable).
                let _ = std::fs::create_dir(&hooks);
            }
            Some(git)
        } else {
            None
        };
        Self {
            pinned_git,
            read_only: dsh_tools::existing_protected_entries(root),
        }
    }
}

/// Refuses a request whose writable roots are no longer their own real paths. The roots are
/// made canonical when the session starts (the cwd, the temp directories, `--add-dir`); a
/// symbolic link that appeared on the way to one since then (a confined command renamed a
/// directory above it that lies in another writable root, e.g. `/tmp/x` above a workspace
/// `/tmp/x/ws`, and put `x/ws -> ../../etc` in its place) would have the mechanism, which
/// resolves paths when it sets up, make the link's target writable (adversarial review of
/// issue 42: `/etc` written as root under both mechanisms). Roots that do not exist are left to
/// the mechanism, which skips them. The mount-based mechanisms also pin every directory on
/// such a path ([`nested_root_chains`]), so a command cannot make the change in the first
/// place; this check also covers Landlock without a mount namespace.
#[cfg(target_os = "linux")]
pub(crate) fn check_roots(request: &ConfinementRequest) -> Result<(), String> {
    if !matches!(
        request.preset,
        PermissionPreset::WorkspaceWrite | PermissionPreset::Ask
    ) {
        return Ok(());
    }
    for root in &request.writable_roots {
        match std::fs::canonicalize(root) {
            Ok(real) if real != *root => {
                return Err(format!(
                    "the writable directory {} now leads to {} (a directory on its path was \
                     replaced by a symbolic link since the session started); start the session \
                     again",
                    dsh_tools::printable(&root.display().to_string()),
                    dsh_tools::printable(&real.display().to_string())
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The directories to bind onto themselves so that no confined command can rename or remove a
/// directory on the path of a writable root nested in another (a mount point can be neither):
/// for each root inside another, every directory from just below the closest root holding it
/// down to the root itself, parents first. Without them, a command could move `/tmp/x` aside
/// (the temp directory is writable) and put a symbolic link at `/tmp/x/ws`, the workspace's
/// path, for the next command's sandbox to follow ([`check_roots`]).
#[cfg(target_os = "linux")]
pub(crate) fn nested_root_chains(roots: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut chains: Vec<std::path::PathBuf> = Vec::new();
    for root in roots {
        let Some(holder) = roots
            .iter()
            .filter(|other| *other != root && root.starts_with(other))
            .max_by_key(|other| other.components().count())
        else {
            continue;
        };
        let Ok(below) = root.strip_prefix(holder) else {
            continue;
        };
        let mut dir = holder.clone();
        for component in below.components() {
            dir.push(component);
            if !chains.contains(&dir) {
                chains.push(dir.clone());
            }
        }
    }
    chains.sort_by_key(|dir| dir.components().count());
    chains
}

/// `SANDBOX_UNAVAILABLE` for a mechanism that works on this host but could not set up one
/// command (a ruleset, a filter or a descriptor failed): the command is refused, never run with
/// less confinement.
pub(crate) fn setup_failed(preset: PermissionPreset, reason: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::SandboxUnavailable,
        format!(
            "bash cannot run under the {preset} preset: {reason}; commands never run unconfined outside danger-full-access"
        ),
    )
}

/// What makes a mechanism work on this platform, for the `SANDBOX_UNAVAILABLE` message and
/// `dsh doctor`.
#[cfg(target_os = "linux")]
pub const INSTALL_ADVICE: &str =
    "install bubblewrap (Debian/Ubuntu package `bubblewrap`) or enable Landlock";
/// What makes a mechanism work on this platform, for the `SANDBOX_UNAVAILABLE` message and
/// `dsh doctor`.
#[cfg(target_os = "macos")]
pub const INSTALL_ADVICE: &str = "dsh needs /usr/bin/sandbox-exec, which macOS ships, to work";
/// What makes a mechanism work on this platform, for the `SANDBOX_UNAVAILABLE` message and
/// `dsh doctor`.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub const INSTALL_ADVICE: &str =
    "this platform has no dsh sandbox yet (docs/decisions/0007-windows-confinement.md)";

/// The confinement when no mechanism works: runs commands unconfined only under
/// `danger-full-access`, and refuses them otherwise with `SANDBOX_UNAVAILABLE`, the reasons, and
/// what to do.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// Why each mechanism failed.
    pub reason: String,
}

impl CommandConfinement for Unavailable {
    fn name(&self) -> &str {
        "unavailable"
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        match request.preset {
            PermissionPreset::DangerFullAccess => Ok(plan),
            preset @ (PermissionPreset::ReadOnly
            | PermissionPreset::WorkspaceWrite
            | PermissionPreset::Ask) => {
                Err(ToolError::new(
                    ToolErrorCode::SandboxUnavailable,
                    format!(
                        "bash cannot run under the {preset} preset: no process sandbox works on this host ({}). Commands never run unconfined outside danger-full-access: {INSTALL_ADVICE}, or ask the user to restart with --permission danger-full-access",
                        self.reason
                    ),
                ))
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod root_path_tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use dsh_tools::{ConfinementRequest, PermissionPreset};

    #[test]
    fn every_folder_between_a_root_and_one_nested_in_it_is_pinned() {
        let roots: Vec<PathBuf> = ["/tmp", "/tmp/a/b/ws", "/tmp/a/b/ws/sub/data", "/srv/x"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let pins = super::nested_root_chains(&roots);
        let expected: Vec<PathBuf> = [
            "/tmp/a",
            "/tmp/a/b",
            "/tmp/a/b/ws",
            "/tmp/a/b/ws/sub",
            "/tmp/a/b/ws/sub/data",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(pins, expected);
        assert!(super::nested_root_chains(&roots[3..]).is_empty());
    }

    #[test]
    fn a_root_that_became_a_link_refuses_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("x/ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut request = ConfinementRequest {
            preset: PermissionPreset::WorkspaceWrite,
            cwd: ws.clone(),
            workdir: ws.clone(),
            writable_roots: vec![ws.clone(), base.clone(), base.join("missing")],
            hidden_dirs: Vec::new(),
            network: true,
        };
        super::check_roots(&request).unwrap();
        std::fs::rename(base.join("x"), base.join("moved")).unwrap();
        std::fs::create_dir(base.join("x")).unwrap();
        std::os::unix::fs::symlink(base.join("moved/ws"), &ws).unwrap();
        let refused = super::check_roots(&request).unwrap_err();
        assert!(refused.contains("symbolic link"), "{refused}");
        request.preset = PermissionPreset::ReadOnly;
        super::check_roots(&request).unwrap();
    }
}
