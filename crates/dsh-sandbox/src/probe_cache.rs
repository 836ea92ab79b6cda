//! The probe's verdict kept across processes (docs/SECURITY.md, "Probe verdict cache").
//!
//! A trial of each mechanism costs about 10 ms per process, and the sandbox mode is part of the
//! system context of the first request, so without a cache every new process pays it before the
//! first request byte. The verdict is stored in `$DSH_HOME/sandbox-probe.json` together with a
//! key of everything it depends on ([`ProbeKey`]); a file that is not ours, not `0600`, not a
//! regular file, malformed, or stored under another key is ignored and the mechanisms are tried
//! again.
//!
//! A cached verdict is never trusted to run a command: the first confined command of a process
//! whose verdict came from the cache waits for a fresh trial of every mechanism
//! ([`verified_probe`]), and runs only when the fresh trial chooses exactly the mechanism (and its
//! set-up) the cache chose. Otherwise the command is refused with `SANDBOX_UNAVAILABLE`, the cache
//! gets the fresh verdict, and later sandboxes of the process are chosen from the fresh trial.
//! So a wrong cache makes `bash` fail closed, never run unconfined or less confined; what it can
//! get wrong is only the sandbox mode the model reads before its first command.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dsh_tools::{
    CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset, ToolError, ToolErrorCode,
};
use serde_json::{json, Map, Value};

use crate::bubblewrap::Bubblewrap;
use crate::landlock::Landlock;
use crate::mounts::MountNamespace;
use crate::probe::{find_program, SandboxProbe};

/// The cache's file name in `$DSH_HOME`.
pub const PROBE_CACHE_FILE: &str = "sandbox-probe.json";

/// Bumped when the file's shape or the meaning of a verdict changes.
const FORMAT: u64 = 1;

/// A cache file larger than this is not ours.
const MAX_LEN: u64 = 64 * 1024;

/// The kernel settings a trial's outcome depends on (user namespaces, AppArmor's restriction
/// of them, seccomp). A missing file is part of the key too.
const SYSCTLS: &[&str] = &[
    "kernel/unprivileged_userns_clone",
    "kernel/apparmor_restrict_unprivileged_userns",
    "kernel/apparmor_restrict_unprivileged_unconfined",
    "user/max_user_namespaces",
    "user/max_mnt_namespaces",
    "user/max_pid_namespaces",
    "kernel/seccomp/actions_avail",
    "kernel/yama/ptrace_scope",
];

/// The lines of `/proc/self/status` that decide what this process may do (capabilities, a
/// seccomp filter inherited from a container runtime, `no_new_privs`).
const STATUS_FIELDS: &[&str] = &["CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp"];

/// Where the trial's outcome comes from: the host as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKey(Value);

impl ProbeKey {
    /// Reads the key now: dsh's version, the effective user and group, the kernel release and
    /// boot id, the Landlock ABI, the `bwrap` found on `search_path` (path, device, inode, size,
    /// mode, owner, modification and change times), the `SYSCTLS`, this process's user, mount
    /// and pid namespaces and its capability, seccomp and `no_new_privs` state. A few dozen
    /// small reads of `/proc`; no process is started.
    pub fn current(search_path: Option<&OsStr>) -> ProbeKey {
        // SAFETY: geteuid and getegid have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|text| Value::from(text.trim_end()))
                .unwrap_or(Value::Null)
        };
        let bwrap =
            find_program("bwrap", search_path).map_or(Value::Null, |path| match std::fs::metadata(
                &path,
            ) {
                Ok(meta) => json!({
                    "path": path.to_string_lossy(),
                    "dev": meta.dev(),
                    "ino": meta.ino(),
                    "size": meta.size(),
                    "mode": meta.mode(),
                    "uid": meta.uid(),
                    "mtime": [meta.mtime(), meta.mtime_nsec()],
                    "ctime": [meta.ctime(), meta.ctime_nsec()],
                }),
                Err(err) => Value::from(format!("{}: {err}", path.display())),
            });
        let sysctls: Map<String, Value> = SYSCTLS
            .iter()
            .map(|name| (name.to_string(), read(&format!("/proc/sys/{name}"))))
            .collect();
        let namespaces: Map<String, Value> = ["user", "mnt", "pid"]
            .iter()
            .map(|ns| {
                let link = std::fs::read_link(format!("/proc/self/ns/{ns}"))
                    .map(|target| Value::from(target.to_string_lossy().into_owned()))
                    .unwrap_or(Value::Null);
                (ns.to_string(), link)
            })
            .collect();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let status: Map<String, Value> = status
            .lines()
            .filter_map(|line| line.split_once(':'))
            .filter(|(name, _)| STATUS_FIELDS.contains(name))
            .map(|(name, value)| (name.to_string(), Value::from(value.trim())))
            .collect();
        let landlock = match crate::landlock::kernel_abi() {
            Ok(abi) => Value::from(abi),
            Err(reason) => Value::from(reason),
        };
        ProbeKey(json!({
            "format": FORMAT,
            "dsh": env!("CARGO_PKG_VERSION"),
            "euid": euid,
            "egid": egid,
            "kernel": read("/proc/sys/kernel/osrelease"),
            "boot_id": read("/proc/sys/kernel/random/boot_id"),
            "landlock_abi": landlock,
            "bwrap": bwrap,
            "sysctl": sysctls,
            "ns": namespaces,
            "status": status,
        }))
    }
}

/// Where a probe's verdict came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOrigin {
    /// A trial in this process.
    Trial,
    /// The cache file at this path, stored by an earlier process (not yet tried in this one).
    Cache(PathBuf),
}

/// The cached verdict in `file` when it is ours (a regular file owned by this effective user,
/// mode `0600`, not a symlink), well formed and stored under `key`; `None` otherwise.
pub fn load_cached_probe(file: &Path, key: &ProbeKey) -> Option<SandboxProbe> {
    let mut handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(file)
        .ok()?;
    let meta = handle.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file()
        || meta.uid() != euid
        || meta.permissions().mode() & 0o7777 != 0o600
        || meta.len() > MAX_LEN
    {
        return None;
    }
    let mut text = String::new();
    Read::by_ref(&mut handle)
        .take(MAX_LEN)
        .read_to_string(&mut text)
        .ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    if value.get("key")? != &key.0 {
        return None;
    }
    let bubblewrap = match value.get("bubblewrap")? {
        Value::Object(ok) if ok.contains_key("program") => {
            let program = ok.get("program")?.as_str()?;
            // The verdict is about the `bwrap` the key identifies, and no other.
            if key.0.get("bwrap")?.get("path")?.as_str()? != program {
                return None;
            }
            let bwrap = Bubblewrap::new(program);
            let bwrap = match ok.get("user_namespace")?.as_bool()? {
                true => bwrap,
                false => bwrap.without_user_namespace(),
            };
            // Files written before the prepared sandbox existed name no way: `new`'s default.
            Ok(match ok.get("prepared").map(Value::as_bool) {
                None | Some(Some(true)) => bwrap,
                Some(Some(false)) => bwrap.per_call(),
                Some(None) => return None,
            })
        }
        Value::String(reason) => Err(reason.clone()),
        _ => return None,
    };
    let landlock = match value.get("landlock")? {
        Value::Object(ok) => {
            let abi = i32::try_from(ok.get("abi")?.as_i64()?).ok()?;
            if !(1..=crate::landlock::TARGET_ABI).contains(&abi) {
                return None;
            }
            let mounts = match ok.get("mounts")?.as_str()? {
                "privileged" => MountNamespace::Privileged,
                "user-namespace" => MountNamespace::UserNamespace,
                "none" => MountNamespace::Unavailable,
                _ => return None,
            };
            Ok(Landlock::with_abi(abi).with_mount_namespace(mounts))
        }
        Value::String(reason) => Err(reason.clone()),
        _ => return None,
    };
    Some(SandboxProbe {
        bubblewrap,
        landlock,
    })
}

/// Stores `probe` under `key` in `file`: written to a new `0600` file beside it and renamed
/// over it, so a reader sees the old verdict or the new one, never a mix. The folder is
/// created (`0700`) when missing. Not synced: a verdict lost in a crash is tried again.
pub fn store_probe(file: &Path, key: &ProbeKey, probe: &SandboxProbe) -> std::io::Result<()> {
    let bubblewrap = match &probe.bubblewrap {
        Ok(bwrap) => {
            let program = bwrap.program().to_str().ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the bwrap path is not UTF-8",
                )
            })?;
            json!({
                "program": program,
                "user_namespace": bwrap.user_namespace(),
                "prepared": bwrap.prepared(),
            })
        }
        Err(reason) => Value::from(reason.as_str()),
    };
    let landlock = match &probe.landlock {
        Ok(landlock) => json!({
            "abi": landlock.abi(),
            "mounts": match landlock.mount_namespace() {
                MountNamespace::Privileged => "privileged",
                MountNamespace::UserNamespace => "user-namespace",
                MountNamespace::Unavailable => "none",
            },
        }),
        Err(reason) => Value::from(reason.as_str()),
    };
    let text = serde_json::to_vec_pretty(&json!({
        "key": key.0,
        "bubblewrap": bubblewrap,
        "landlock": landlock,
    }))
    .map_err(std::io::Error::other)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let temp = dir.join(format!(
        ".{PROBE_CACHE_FILE}.{}.{nanos}.tmp",
        std::process::id()
    ));
    let written = (|| {
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        // Exactly 0600 whatever the umask.
        out.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        out.write_all(&text)?;
        std::fs::rename(&temp, file)
    })();
    if written.is_err() {
        // Best effort: a leftover temp file is only clutter.
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// The verdict for this host: from `file` when it holds one for the current key, else a trial
/// now (stored in `file`; a failure to store only means the next process tries again).
pub fn probe_through_cache(
    file: &Path,
    search_path: Option<&OsStr>,
) -> (SandboxProbe, ProbeOrigin) {
    let key = ProbeKey::current(search_path);
    if let Some(probe) = load_cached_probe(file, &key) {
        return (probe, ProbeOrigin::Cache(file.to_path_buf()));
    }
    let probe = SandboxProbe::run(search_path);
    let _ = store_probe(file, &key, &probe);
    (probe, ProbeOrigin::Trial)
}

/// What the selection picked, compared between the cached verdict and a fresh trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Bubblewrap(Bubblewrap),
    Landlock(Landlock),
    Unavailable,
}

impl Choice {
    fn describe(&self) -> String {
        match self {
            Choice::Bubblewrap(bwrap) => format!(
                "bubblewrap ({}{}{})",
                bwrap.program().display(),
                if bwrap.user_namespace() {
                    ", user namespace"
                } else {
                    ", no user namespace"
                },
                if bwrap.prepared() {
                    ", prepared sandbox"
                } else {
                    ", sandbox per command"
                }
            ),
            Choice::Landlock(landlock) => format!(
                "Landlock ABI {} ({})",
                landlock.abi(),
                landlock.mount_namespace().describe()
            ),
            Choice::Unavailable => "no mechanism".to_string(),
        }
    }
}

/// The cache file of this process, once a front end named dsh's home ([`use_probe_cache`]).
static CACHE_FILE: OnceLock<PathBuf> = OnceLock::new();

/// See [`crate::use_probe_cache`].
pub(crate) fn set_cache_home(home: &Path) {
    let _ = CACHE_FILE.set(home.join(PROBE_CACHE_FILE));
}

/// The cache file named by [`use_probe_cache`], if any.
pub(crate) fn cache_file() -> Option<&'static Path> {
    CACHE_FILE.get().map(PathBuf::as_path)
}

/// The fresh probe of a process whose verdict came from the cache: run once, on the first
/// confined command, and stored in the cache file when it differs from the cached verdict.
/// Later sandboxes of the process are chosen from it.
static FRESH: OnceLock<SandboxProbe> = OnceLock::new();

/// The fresh trial of this process, if one ran.
pub(crate) fn fresh_probe() -> Option<&'static SandboxProbe> {
    FRESH.get()
}

/// Runs the fresh trial once per process (`search_path` as for the cached one) and, when its
/// verdict differs from `cached`, replaces the cache in `file` with it.
pub(crate) fn verified_probe(
    cached: &SandboxProbe,
    file: &Path,
    search_path: Option<&OsStr>,
) -> &'static SandboxProbe {
    verify_once(&FRESH, cached, file, search_path)
}

/// The fresh trial kept in `once` (run on the first call): [`verified_probe`] for a given
/// once-cell, so a sandbox that is not the process's keeps its own trial.
pub(crate) fn verify_once<'a>(
    once: &'a OnceLock<SandboxProbe>,
    cached: &SandboxProbe,
    file: &Path,
    search_path: Option<&OsStr>,
) -> &'a SandboxProbe {
    once.get_or_init(|| {
        let key = ProbeKey::current(search_path);
        let fresh = SandboxProbe::run(search_path);
        if !same_verdict(&fresh, cached) {
            let _ = store_probe(file, &key, &fresh);
        }
        fresh
    })
}

/// Same mechanisms working with the same set-up (failure texts may differ).
fn same_verdict(a: &SandboxProbe, b: &SandboxProbe) -> bool {
    a.bubblewrap.as_ref().ok() == b.bubblewrap.as_ref().ok()
        && a.landlock.as_ref().ok() == b.landlock.as_ref().ok()
}

/// How [`Unverified`] gets its fresh verdict: the process-wide once-only trial, or (tests) a
/// given one.
pub(crate) type Verifier = Arc<dyn Fn() -> SandboxProbe + Send + Sync>;

/// A confinement chosen from a cached verdict. Its first use (per process, shared by every
/// confinement of the process through [`verified_probe`]) waits for a fresh trial; a command
/// runs only when the fresh trial chooses the same [`Choice`] under the same preference;
/// otherwise it is refused (`SANDBOX_UNAVAILABLE`), the cache already holding the fresh verdict.
pub(crate) struct Unverified {
    pub(crate) inner: Arc<dyn CommandConfinement>,
    pub(crate) choice: Choice,
    pub(crate) preference: crate::SandboxPreference,
    pub(crate) verify: Verifier,
    pub(crate) file: PathBuf,
}

impl CommandConfinement for Unverified {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        if request.preset == PermissionPreset::DangerFullAccess {
            return self.inner.confine(plan, request);
        }
        let fresh = (self.verify)();
        let now = crate::choice_of(self.preference, &fresh);
        if now == self.choice {
            return self.inner.confine(plan, request);
        }
        Err(ToolError::new(
            ToolErrorCode::SandboxUnavailable,
            format!(
                "bash cannot run under the {} preset: the sandbox verdict cached in {} chose {}, but a trial now chooses {}; the cache holds the new verdict, so a new session (or a /permission switch) uses it. Commands never run unconfined outside danger-full-access",
                request.preset,
                self.file.display(),
                self.choice.describe(),
                now.describe()
            ),
        ))
    }
}
