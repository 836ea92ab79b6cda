//! Confinement with Landlock (Linux 5.13+): the child restricts itself between `fork` and
//! `exec`, so the command and everything it starts can read and execute everywhere but write
//! only beneath the writable roots.
//!
//! The ruleset is built in the parent for every call (opening the roots needs allocation, which
//! the child may not do); the child's `pre_exec` hook only makes two system calls:
//! `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`. A failure of either aborts the
//! spawn, so a command never runs with less confinement than planned.
//!
//! Enforcement is never best-effort: the ruleset handles every file-system right of the ABI the
//! kernel reports (capped at [`TARGET_ABI`]) with [`CompatLevel::HardRequirement`], so an
//! unsupported right is an error, not a silently ignored rule. Rights handled and granted:
//! * everywhere (`/`): execute, read files, read directories (and device ioctls, ABI 5+);
//! * beneath each writable root (`workspace-write` only): every handled right;
//! * the character devices `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`: writing, so
//!   `> /dev/null` works under every preset.
//!
//! Not restricted by this mechanism: the network (TCP rights are not handled), signals and
//! abstract Unix sockets (scopes are not handled), and reading.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_tools::{
    CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset, PreExecHook, ToolError,
    ToolErrorCode,
};
use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, ABI,
};

/// The newest Landlock ABI whose rights this crate handles. Newer kernels are used at this ABI
/// (the kernel keeps older ABIs' semantics); older kernels at theirs.
pub const TARGET_ABI: i32 = 5;

/// Device files every command may write (they store nothing).
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// `landlock_create_ruleset` flag asking for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version of the running kernel, or why Landlock cannot be used.
pub fn kernel_abi() -> Result<i32, String> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the call only returns
    // a number (or -1 with errno); it reads and writes no memory of ours.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version >= 1 {
        return i32::try_from(version).map_err(|_| format!("unexpected Landlock ABI {version}"));
    }
    let err = io::Error::last_os_error();
    Err(match err.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel has no Landlock support (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)"
                .to_string()
        }
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built into the kernel but disabled (add `landlock` to the `lsm=` boot parameter)"
                .to_string()
        }
        Some(libc::EPERM) => {
            "a seccomp filter (e.g. a container runtime's) forbids the Landlock system calls"
                .to_string()
        }
        _ => format!("the Landlock version query failed: {err}"),
    })
}

/// Restricts children with Landlock at a fixed ABI (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Landlock {
    abi: i32,
}

impl Landlock {
    /// Landlock at the kernel's ABI (capped at [`TARGET_ABI`]); `Err` says why it is unusable.
    /// This only checks availability; whether restrictions really hold is the probe's job.
    pub fn detect() -> Result<Self, String> {
        Ok(Self {
            abi: kernel_abi()?.min(TARGET_ABI),
        })
    }

    /// Landlock at `abi` (1 to [`TARGET_ABI`]); rulesets fail to build when the kernel lacks it.
    pub fn with_abi(abi: i32) -> Self {
        Self {
            abi: abi.clamp(1, TARGET_ABI),
        }
    }

    /// The ABI whose rights are handled.
    pub fn abi(&self) -> i32 {
        self.abi
    }

    /// Builds the ruleset for `request` and returns its file descriptor (close-on-exec). The
    /// writable roots are used only under `workspace-write`; roots that do not exist are skipped.
    pub fn ruleset(&self, request: &ConfinementRequest) -> Result<OwnedFd, String> {
        let abi = ABI::from(self.abi);
        let all = AccessFs::from_all(abi);
        let everywhere = AccessFs::from_read(abi) | (all & AccessFs::IoctlDev);
        let devices = all & (AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev);
        let writable: Vec<&PathBuf> = match request.preset {
            PermissionPreset::WorkspaceWrite | PermissionPreset::DangerFullAccess => request
                .writable_roots
                .iter()
                .filter(|root| root.is_dir())
                .collect(),
            PermissionPreset::ReadOnly => Vec::new(),
        };
        let fail = |what: &str, err: &dyn std::fmt::Display| format!("{what}: {err}");
        let created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all)
            .map_err(|e| fail("Landlock cannot handle the file-system rights", &e))?
            .create()
            .map_err(|e| fail("cannot create a Landlock ruleset", &e))?
            .add_rules(path_beneath_rules([Path::new("/")], everywhere))
            .map_err(|e| fail("cannot allow reading /", &e))?
            .add_rules(path_beneath_rules(WRITABLE_DEVICES, devices))
            .map_err(|e| fail("cannot allow writing /dev/null", &e))?
            .add_rules(path_beneath_rules(writable, all))
            .map_err(|e| fail("cannot allow writing the workspace", &e))?;
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or_else(|| {
            "the kernel did not create a Landlock ruleset (Landlock is not enforced here)"
                .to_string()
        })
    }
}

/// The child side: `no_new_privs`, then `landlock_restrict_self` with the parent's ruleset.
/// Only two system calls: async-signal-safe, no allocation.
fn restrict_hook(ruleset: Arc<OwnedFd>) -> PreExecHook {
    Arc::new(move || {
        // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: landlock_restrict_self takes a file descriptor (kept open by the Arc) and flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                ruleset.as_raw_fd(),
                0 as libc::c_uint,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })
}

impl CommandConfinement for Landlock {
    fn name(&self) -> &str {
        "landlock"
    }

    /// Adds the restricting hook after `plan`'s own hooks. `danger-full-access` returns `plan`
    /// unchanged; a ruleset that cannot be built is `SANDBOX_UNAVAILABLE` with the reason.
    fn confine(
        &self,
        mut plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        if request.preset == PermissionPreset::DangerFullAccess {
            return Ok(plan);
        }
        let fd = self.ruleset(request).map_err(|reason| {
            ToolError::new(
                ToolErrorCode::SandboxUnavailable,
                format!(
                    "bash cannot run under the {} preset: {reason}; commands never run unconfined outside danger-full-access",
                    request.preset
                ),
            )
        })?;
        plan.pre_exec.push(restrict_hook(Arc::new(fd)));
        Ok(plan)
    }
}
