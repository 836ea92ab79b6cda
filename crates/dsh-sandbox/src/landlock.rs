//! Confinement with Landlock (Linux 5.13+): the child restricts itself between `fork` and
//! `exec`, so the command and everything it starts can read and execute everywhere but write
//! only beneath the writable roots.
//!
//! The ruleset and the seccomp filter are built in the parent for every call (opening the
//! roots needs allocation, which the child may not do). The child's `pre_exec` hook then makes
//! system calls only, in this order: `PR_SET_PDEATHSIG` (and a check that dsh is still its
//! parent), `PR_SET_NO_NEW_PRIVS`, dropping every capability (locked securebits as root,
//! bounding and ambient sets, `capset`), the seccomp filter ([`crate::seccomp`], Landlock
//! profile), `landlock_restrict_self`, and, with ABI 6+, the split into keeper and command
//! (see `keep_tree`; the command's process is started from the spawner's [`ExecImage`] without a
//! copy of dsh's memory). A failure of any step aborts the spawn (or, after the split, ends the
//! command's process with 127 before `exec`), so a command never runs with less confinement
//! than planned.
//!
//! Enforcement is never best-effort: the ruleset handles every file-system right of the ABI the
//! kernel reports (capped at [`TARGET_ABI`]) with [`CompatLevel::HardRequirement`], so an
//! unsupported right is an error, not a silently ignored rule. Rights handled and granted:
//! * everywhere but `/dev` (each entry of `/`): execute, read files, read directories (and
//!   device ioctls, ABI 5+); in `/dev` listing directories, and reading only the devices of
//!   `READABLE_DEVICES` (docs/SECURITY.md, "No real root in the sandbox");
//! * beneath each writable root (`workspace-write` only): every handled right;
//! * the character devices `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`: writing, so
//!   `> /dev/null` works under every preset.
//!
//! With ABI 6+ the domain is also scoped: no signals to processes outside it (dsh, the user's
//! shell) and no connecting to abstract Unix sockets created outside it.
//!
//! Landlock does not govern permission bits and timestamps: where the probe found that a mount
//! namespace can be made, the hook first builds a read-only view of the file system with only
//! the writable roots writable, the protected entries read-only and dsh's home hidden
//! ([`crate::mounts`], [`MountNamespace`]). Where it cannot (no `CAP_SYS_ADMIN` and no user
//! namespaces), permission bits and timestamps of files the user owns outside the workspace,
//! and the protected entries, are not protected (docs/SECURITY.md, "What is not protected").
//!
//! Not restricted by this mechanism: reading (except dsh's home, hidden by the mount layer, and
//! devices). The network is withheld (`ConfinementRequest::network` false) by the seccomp
//! filter, not by Landlock's TCP rights, which are not handled (docs/SECURITY.md, "Network").

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_tools::{
    CommandConfinement, CommandPlan, ConfinementRequest, ExecImage, ExecSlot, PermissionPreset,
    PreExecHook, ToolError,
};
use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};

use crate::mounts::{MountNamespace, MountPlan};
use crate::seccomp::{Profile, Program};

/// The newest Landlock ABI whose rights this crate handles. Newer kernels are used at this ABI
/// (the kernel keeps older ABIs' semantics); older kernels at theirs.
pub const TARGET_ABI: i32 = 6;

/// Device files every command may write (they store nothing).
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// What of `/dev` a command may read: these devices and terminals, nothing else. Reading is
/// allowed everywhere else, but a device is no file: as root (no capability needed, only the
/// owner's permission bits) a command could read the host's disks (`/dev/vda`, `/dev/loop*`,
/// past every mount rule and dsh's hidden home), keyboards (`/dev/input`), consoles' screens
/// (`/dev/vcs*`), or start the watchdog by opening it (docs/SECURITY.md, "No real root in the
/// sandbox"). bubblewrap's `--dev` offers the same set.
const READABLE_DEVICES: [&str; 9] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

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

/// Restricts children with Landlock at a fixed ABI, with or without the mount-namespace layer
/// (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landlock {
    abi: i32,
    mounts: MountNamespace,
}

impl Landlock {
    /// Landlock at the kernel's ABI (capped at [`TARGET_ABI`]); `Err` says why it is unusable.
    /// This only checks availability; whether restrictions really hold is the probe's job.
    pub fn detect() -> Result<Self, String> {
        Ok(Self {
            abi: kernel_abi()?.min(TARGET_ABI),
            mounts: MountNamespace::Unavailable,
        })
    }

    /// Landlock at `abi` (1 to [`TARGET_ABI`]); rulesets fail to build when the kernel lacks it.
    /// No mount-namespace layer: use [`Landlock::with_mount_namespace`] for one.
    pub fn with_abi(abi: i32) -> Self {
        Self {
            abi: abi.clamp(1, TARGET_ABI),
            mounts: MountNamespace::Unavailable,
        }
    }

    /// The same with the mount-namespace layer made the way `mounts` says (the probe found
    /// which works; a spawn whose layer fails is refused, never run without it).
    pub fn with_mount_namespace(mut self, mounts: MountNamespace) -> Self {
        self.mounts = mounts;
        self
    }

    /// How the mount-namespace layer is made ([`MountNamespace::Unavailable`]: not at all).
    pub fn mount_namespace(&self) -> MountNamespace {
        self.mounts
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
            PermissionPreset::WorkspaceWrite
            | PermissionPreset::Ask
            | PermissionPreset::DangerFullAccess => request
                .writable_roots
                .iter()
                .filter(|root| root.is_dir())
                .collect(),
            PermissionPreset::ReadOnly => Vec::new(),
        };
        let fail = |what: &str, err: &dyn std::fmt::Display| format!("{what}: {err}");
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all)
            .map_err(|e| fail("Landlock cannot handle the file-system rights", &e))?;
        if self.abi >= 6 {
            // ABI 6 scopes: no signals to processes outside the sandbox (dsh itself, the
            // user's shell) and no connecting to abstract Unix sockets created outside it.
            ruleset = ruleset
                .scope(Scope::from_all(abi))
                .map_err(|e| fail("Landlock cannot scope signals and abstract sockets", &e))?;
        }
        let created = ruleset
            .create()
            .map_err(|e| fail("cannot create a Landlock ruleset", &e))?
            .add_rules(path_beneath_rules(
                [Path::new("/")],
                all & AccessFs::ReadDir,
            ))
            .map_err(|e| fail("cannot allow listing /", &e))?
            .add_rules(path_beneath_rules(readable_tops(), everywhere))
            .map_err(|e| fail("cannot allow reading /", &e))?
            .add_rules(path_beneath_rules(
                READABLE_DEVICES
                    .iter()
                    .filter(|dev| Path::new(dev).exists()),
                everywhere,
            ))
            .map_err(|e| fail("cannot allow reading /dev/null", &e))?
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

/// The entries of `/` a command may read everything beneath: all but `/dev` (see
/// [`READABLE_DEVICES`]).
fn readable_tops() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        // A top entry that resolves into `/dev` (a symbolic link) would open it again.
        .filter(|path| std::fs::canonicalize(path).is_ok_and(|real| !real.starts_with("/dev")))
        .collect()
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per capability set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
/// SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED`: executing a program as uid 0 no
/// longer grants capabilities, and the child cannot undo that.
const LOCKED_NOROOT_SECUREBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Drops every capability of the calling process for good: locked securebits (as root, so an
/// `exec` does not hand root its capabilities back), the bounding set emptied, the ambient set
/// cleared, then effective/permitted/inheritable set to nothing. A process without
/// `CAP_SETPCAP` (not root) cannot change its securebits or bounding set, and needs not: it
/// has no capabilities to regain (`no_new_privs` stops setuid and file capabilities).
/// Async-signal-safe: only system calls on stack memory.
pub(crate) fn drop_capabilities() -> io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, LOCKED_NOROOT_SECUREBITS, 0, 0, 0) } != 0
        && (root || errno() != libc::EPERM)
    {
        return Err(io::Error::last_os_error());
    }
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            match errno() {
                // Past the kernel's last capability.
                libc::EINVAL => break,
                libc::EPERM if !root => break,
                _ => return Err(io::Error::last_os_error()),
            }
        }
    }
    // SAFETY: prctl with integer arguments only. EINVAL: a kernel without ambient sets.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
        && errno() != libc::EINVAL
    {
        return Err(io::Error::last_os_error());
    }
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads the header and two data records, both alive on this stack frame.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The child side, in this order: die with the parent (`PR_SET_PDEATHSIG`; if the parent is
/// already gone, stop), the mount-namespace layer when planned ([`crate::mounts`]),
/// `no_new_privs`, drop every capability, install the seccomp filter,
/// then `landlock_restrict_self` with the parent's ruleset. (The spawner has already made the
/// child a session leader without a terminal and pointed stdin at `/dev/null`.) Only system
/// calls on memory prepared by the parent: async-signal-safe, no allocation.
fn restrict_hook(
    ruleset: Arc<OwnedFd>,
    filter: &'static Program,
    parent: libc::pid_t,
    keeper: bool,
    mounts: Option<Layer>,
    image: ExecSlot,
) -> PreExecHook {
    Arc::new(move || {
        arm_death_signal(libc::SIGKILL)?;
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            // The parent died before the death signal was armed.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        match &mounts {
            Some(Layer::Build(plan)) => plan.apply()?,
            Some(Layer::Enter(namespace)) => crate::prepared::enter(namespace)?,
            None => {}
        }
        if mounts.is_some() {
            // An IPC namespace of its own (the layer gave the capability for it): System V
            // objects and message queues are checked by uid, so as root the host's root-owned
            // ones would be open (docs/SECURITY.md, "No real root in the sandbox").
            // SAFETY: unshare takes flags only; the child is single-threaded.
            if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        drop_capabilities()?;
        filter.install()?;
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
        if keeper {
            keep_tree(parent, image.get(), &|| Ok(()))?;
        }
        Ok(())
    })
}

/// How the child gets its read-only mount layer ([`crate::mounts`]).
enum Layer {
    /// Builds it itself (a user namespace, or no prepared namespace could be made).
    Build(Arc<MountPlan>),
    /// Enters the namespace prepared for an equal plan ([`crate::prepared`]).
    Enter(Arc<OwnedFd>),
}

/// The layer for `plan`: the prepared namespace where one can be used, else the plan itself.
fn layer(plan: MountPlan) -> Layer {
    let plan = Arc::new(plan);
    if plan.privileged() {
        if let Some(namespace) = crate::prepared::namespace_for(&plan) {
            return Layer::Enter(namespace);
        }
    }
    Layer::Build(plan)
}

/// The keeper's wait (see [`keep_tree`]): returns the exit code the keeper leaves with once the
/// tree must end, when the shell `shell` exited (its status), a stop signal of `watched`
/// arrived (128 + the signal) or dsh (`parent`) died (128 + `SIGKILL`). Reaps the orphans it
/// adopted meanwhile. Async-signal-safe: system calls on stack memory only.
fn wait_for_end(watched: &libc::sigset_t, parent: libc::pid_t, shell: libc::pid_t) -> i32 {
    // SAFETY: plain system calls on stack memory; `watched` is a valid, blocked signal set.
    unsafe {
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        let mut code = 1;
        loop {
            let sig = libc::sigtimedwait(watched, std::ptr::null_mut(), &timeout);
            if sig == libc::SIGTERM || sig == libc::SIGINT || sig == libc::SIGHUP {
                code = 128 + sig;
                break;
            }
            if libc::getppid() != parent {
                code = 128 + libc::SIGKILL;
                break;
            }
            let mut shell_done = false;
            loop {
                let mut status = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == shell {
                    shell_done = true;
                    code = if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else if libc::WIFSIGNALED(status) {
                        128 + libc::WTERMSIG(status)
                    } else {
                        1
                    };
                }
            }
            if shell_done {
                break;
            }
        }
        code
    }
}

/// Splits the restricted child in two: the new child runs the command; this process stays
/// behind as its keeper and never returns. The keeper is what dsh tracks (it leads the process
/// group), so it ends the command's whole tree, also processes that left the group with
/// `setsid`, when the command's shell exits, when dsh sends it `SIGTERM`, `SIGINT` or
/// `SIGHUP`, and when dsh dies: it becomes a subreaper (orphans of the tree are re-parented to
/// it, not to init) and ends the tree with `kill(-1, SIGKILL)`, which the Landlock signal
/// scope confines to its own domain, that is to the command's tree. It is used only when the
/// scope is in force (ABI 6+): without it `kill(-1)` would reach every process of the user.
///
/// The command's process runs `before_exec`, then executes the command. With `image` it is
/// started without a copy of the keeper's memory (see [`start_command`]) and this function
/// returns only with an error; without, it is forked and returns `Ok` in it, for the spawner
/// to `exec`. Async-signal-safe: system calls on stack memory only.
pub(crate) fn keep_tree(
    parent: libc::pid_t,
    image: Option<&ExecImage>,
    before_exec: &dyn Fn() -> io::Result<()>,
) -> io::Result<()> {
    // SAFETY: every call below is a plain system call on stack memory; sigset functions only
    // write the set they are given.
    unsafe {
        // dsh's death must reach the keeper as a signal it can act on (SIGHUP, watched below),
        // not as the SIGKILL armed earlier.
        arm_death_signal(libc::SIGHUP)?;
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut watched: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut watched);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut watched, sig);
        }
        let mut previous: libc::sigset_t = std::mem::zeroed();
        if libc::sigprocmask(libc::SIG_BLOCK, &watched, &mut previous) != 0 {
            return Err(io::Error::last_os_error());
        }
        let shell = match image {
            Some(image) => start_command(&CommandStart {
                image,
                mask: &previous,
                before_exec,
                keeper: libc::getpid(),
            })?,
            None => {
                let shell = libc::fork();
                if shell < 0 {
                    return Err(io::Error::last_os_error());
                }
                if shell == 0 {
                    // The command: dies with its keeper, runs with the signal mask it had.
                    command_setup(&previous)?;
                    before_exec()?;
                    return Ok(());
                }
                shell
            }
        };
        // The keeper: it must hold no descriptor of the spawner beyond stdio (the spawner
        // waits for its exec-status pipe to close), and needs none.
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        ) != 0
        {
            for fd in 3..4096 {
                libc::close(fd);
            }
        }
        // The tree ends with the shell, a stop request, or dsh.
        let code = wait_for_end(&watched, parent, shell);
        libc::kill(-1, libc::SIGKILL);
        // Reap what the kill ended, then leave with the shell's status.
        while libc::waitpid(-1, std::ptr::null_mut(), 0) > 0 {}
        libc::_exit(code);
    }
}

/// The command's process, first thing: dies with its keeper (`PR_SET_PDEATHSIG(SIGKILL)`) and
/// gets back the signal mask `mask` the keeper had before blocking the ones it waits for.
fn command_setup(mask: &libc::sigset_t) -> io::Result<()> {
    arm_death_signal(libc::SIGKILL)?;
    // SAFETY: sigprocmask reads `mask`.
    unsafe {
        if libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `PR_SET_PDEATHSIG(sig)`: `sig` when the parent thread ends. Async-signal-safe.
fn arm_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the command's process needs when [`start_command`] starts it.
struct CommandStart<'a> {
    image: &'a ExecImage,
    mask: &'a libc::sigset_t,
    before_exec: &'a dyn Fn() -> io::Result<()>,
    /// The keeper's pid: the command's parent, checked once its death signal is armed.
    keeper: libc::pid_t,
}

/// Stack of the command's process until its `exec` (it runs a few system calls).
const COMMAND_STACK: usize = 128 * 1024;

/// Starts the command's process as a `vfork` does (`clone(CLONE_VM | CLONE_VFORK)`), on a
/// stack of its own: it shares the keeper's memory instead of copying it (the keeper is a
/// copy of dsh: a copy costs about as much as the first fork did, and its teardown at `exec`
/// again), and the keeper waits until the command has executed or failed. Returns the
/// command's pid. The command's process runs [`command_start`].
fn start_command(start: &CommandStart<'_>) -> io::Result<libc::pid_t> {
    // SAFETY: mmap of fresh anonymous memory; clone runs `command_start` on it with a pointer
    // to `start`, which lives on this frame: the keeper is suspended until the command's
    // process has executed or exited (CLONE_VFORK), so `start` outlives its use there, and the
    // stack is unmapped only after that.
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            COMMAND_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // The stack grows down on every architecture dsh builds for.
        let top = stack.cast::<u8>().add(COMMAND_STACK).cast::<libc::c_void>();
        let pid = libc::clone(
            command_start,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(start).cast_mut().cast::<libc::c_void>(),
        );
        let cloned = io::Error::last_os_error();
        libc::munmap(stack, COMMAND_STACK);
        if pid < 0 {
            return Err(cloned);
        }
        Ok(pid)
    }
}

/// The command's process started by [`start_command`]: its setup, `before_exec`, then the
/// image. Returns only when one of them failed (then the process exits with 127, after a
/// line on its stderr): the command never runs with less confinement. Async-signal-safe, on
/// its own stack, reading only what the keeper prepared.
extern "C" fn command_start(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `CommandStart` of `start_command`, alive while this runs.
    let start = unsafe { &*arg.cast::<CommandStart<'_>>() };
    let failed = command_setup(start.mask)
        .and_then(|()| {
            // SAFETY: getppid has no preconditions.
            if unsafe { libc::getppid() } == start.keeper {
                Ok(())
            } else {
                // The keeper died before the death signal was armed.
                Err(io::Error::from_raw_os_error(libc::ESRCH))
            }
        })
        .and_then(|()| (start.before_exec)())
        .err()
        .unwrap_or_else(|| start.image.exec());
    report_start_failure(failed.raw_os_error().unwrap_or(0));
    // SAFETY: _exit ends this process only (no CLONE_THREAD) without running any handler.
    unsafe { libc::_exit(127) }
}

/// Writes `dsh: cannot start the command (errno N)` on stderr without allocating.
fn report_start_failure(errno: i32) {
    const PREFIX: &[u8] = b"dsh: cannot start the command (errno ";
    let mut out = [0u8; 64];
    out[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut at = PREFIX.len();
    // At most 10 digits (u32::MAX).
    let mut digits = [0u8; 10];
    let mut n = errno.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in digits[..len].iter().rev() {
        out[at] = digit;
        at += 1;
    }
    out[at..at + 2].copy_from_slice(b")\n");
    at += 2;
    // SAFETY: write of a stack buffer to stderr; a failure only loses the message.
    unsafe {
        libc::write(2, out.as_ptr().cast(), at);
    }
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
        let unavailable = |reason: String| crate::setup_failed(request.preset, &reason);
        crate::check_roots(request).map_err(unavailable)?;
        let fd = self.ruleset(request).map_err(unavailable)?;
        let filter = Program::get(Profile::Landlock, crate::bubblewrap::network(request))
            .map_err(unavailable)?;
        let parent = libc::pid_t::try_from(std::process::id())
            .map_err(|_| unavailable("the process id does not fit a pid_t".to_string()))?;
        // The keeper needs the signal scope (ABI 6+) to end the tree safely.
        let keeper = self.abi >= 6;
        let mounts = MountPlan::new(self.mounts, request)
            .map_err(|reason| unavailable(format!("cannot plan the mount namespace: {reason}")))?
            .map(layer);
        let image = Arc::clone(&plan.exec_image);
        plan.pre_exec.push(restrict_hook(
            Arc::new(fd),
            filter,
            parent,
            keeper,
            mounts,
            image,
        ));
        Ok(plan)
    }
}
