//! A prepared bubblewrap sandbox per layout (docs/SECURITY.md, "A prepared bubblewrap sandbox
//! per layout").
//!
//! Starting `bwrap` for every `bash` call costs its own `exec`, new user, mount and pid
//! namespaces, a `/dev`, a `/proc`, and the teardown of all of it when the command ends: about
//! 10 ms per call (docs/PERFORMANCE.md, "Sandbox cost per bash call"). Here one long-lived
//! `bwrap` is started per distinct layout, with exactly the options the per-call path would
//! give it ([`crate::Bubblewrap::options`]) and a waiter as its command (`cat` reading a pipe
//! only dsh writes to, so it ends when dsh drops the sandbox or dies). dsh keeps descriptors of
//! the sandbox's user, mount, pid and IPC namespaces (and network namespace, when it has one
//! of its own: `[sandbox] network = "off"`) (close-on-exec), opened from
//! `/proc/<pid>/ns/*` of the pid bubblewrap reports on `--info-fd`.
//!
//! Each call then runs `bash` itself, with a `pre_exec` hook that enters the sandbox. In the
//! child dsh forked (the *relay*, the process dsh tracks, already in its own session with its
//! death signal armed), in this order:
//! 1. `PR_SET_DUMPABLE 0` (the keeper below is a copy of dsh: nobody in the sandbox may read
//!    its memory or environment);
//! 2. `setns(user)` when bubblewrap made a user namespace (dsh's euid owns it, so the relay gets
//!    every capability inside it, as bubblewrap's own set-up had), `setns(net)` and
//!    `setns(ipc)` when the sandbox has its own, `setns(mnt)` (root and cwd
//!    become the sandbox's), `chdir(workdir)`, `setns(pid)` (for its children);
//! 3. fork: the relay stays behind holding nothing but a pipe, waits for the keeper and leaves
//!    with its status. The *keeper*, in the sandbox's pid namespace, blanks its command line
//!    (dsh's), sets `no_new_privs` and restricts itself with a Landlock ruleset that handles
//!    only the signal and abstract-socket scopes (ABI 6+), a domain of its own; then, as on
//!    the Landlock path, it becomes a subreaper and starts the command
//!    (`crate::landlock::keep_tree`). When the command's shell exits, when dsh sends
//!    `SIGTERM`/`SIGINT`, or when the relay dies (dsh died: `SIGHUP` as its death signal) it
//!    sends `kill(-1, SIGKILL)`, which the scope
//!    confines to its own domain and the ones nested in it: the command's whole tree, also
//!    processes that left the group with `setsid`, never the waiter or another call; and it
//!    waits until every one of them is gone (being in the same pid namespace, the subreaper
//!    gets all their orphans) before it exits;
//! 4. the command (its process started from the spawner's image, sharing the keeper's memory
//!    until its `exec`): a second, nested domain of the same ruleset (it can signal nothing outside
//!    its own tree: not its keeper, the waiter, another call, dsh), every capability dropped
//!    (bounding, ambient, effective/permitted/inheritable, and as root locked securebits), the
//!    same seccomp filter bubblewrap loads ([`crate::seccomp`], common profile: no mount,
//!    `unshare`, `setns`, `ptrace`, ...), then `exec`.
//!
//! The keeper arms `PR_SET_PDEATHSIG` and then checks through a pipe that the relay still
//! holds it, so the death of dsh between the fork and the arming cannot leave a command behind.
//! A failure at any step aborts the spawn with the error: the command never runs with less.
//! Processes of the call live in the sandbox's pid namespace, so `/proc`, `$$`, `ps` and `kill`
//! agree; commands see the sandbox's other processes there (the waiter, `bwrap`, keepers, other
//! calls of the session) but cannot signal or trace them (the scope, and Landlock's ptrace rule).
//!
//! A sandbox is used only for a layout equal to the one it was built from: the options are
//! computed for every call, with the identity (device, inode, with and without following a
//! symbolic link) of every path they name; a mount or unmount in dsh's mount table empties the
//! cache; a sandbox whose `bwrap` ended is replaced. At most [`CAPACITY`] are kept (least
//! recently used first out); one dropped while a call still runs in it lives on until that
//! call's plan is dropped, since every plan holds its sandbox.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dsh_tools::{ExecImage, ExecSlot, PreExecHook};

use crate::seccomp::Program;

/// Sandboxes kept at once (one per distinct layout; a session normally has one or two).
pub(crate) const CAPACITY: usize = 4;

/// How long starting a sandbox may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The waiter run inside: says it is ready (so bubblewrap's set-up is complete), then blocks on
/// the pipe only dsh holds the writing end of; whatever a command might write there is thrown
/// away.
const WAITER: [&str; 3] = ["sh", "-c", "echo ready && exec cat >/dev/null"];

/// What a sandbox was built from: the `bwrap` executable, the options (without `--chdir`,
/// which each call does itself; the user-namespace choice is one of them), the session's cwd
/// (so sessions in different workspaces never share a sandbox, its private `/tmp` included,
/// even where their options are equal) and the identity of every path they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    program: PathBuf,
    cwd: PathBuf,
    options: Vec<OsString>,
    identities: Vec<Option<[u64; 6]>>,
}

impl Layout {
    /// The layout of `options` (from [`crate::Bubblewrap::options`] without a seccomp fd).
    pub(crate) fn new(program: &Path, cwd: &Path, mut options: Vec<OsString>) -> Self {
        if let Some(at) = options.iter().position(|arg| arg == "--chdir") {
            let end = (at + 2).min(options.len());
            options.drain(at..end);
        }
        let identities = options
            .iter()
            .map(Path::new)
            .chain([cwd])
            .filter(|path| path.is_absolute())
            .map(identity)
            .collect();
        Self {
            program: program.to_path_buf(),
            cwd: cwd.to_path_buf(),
            options,
            identities,
        }
    }
}

/// Device, inode and birth time of `path` itself and of what it resolves to. The birth time
/// tells a re-created file from the old one where the file system reuses inode numbers.
pub(crate) fn identity(path: &Path) -> Option<[u64; 6]> {
    let id = |meta: &std::fs::Metadata| {
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        [meta.dev(), meta.ino(), born]
    };
    let own = id(&std::fs::symlink_metadata(path).ok()?);
    let target = std::fs::metadata(path)
        .map(|meta| id(&meta))
        .unwrap_or([0; 3]);
    Some([own[0], own[1], own[2], target[0], target[1], target[2]])
}

/// One running sandbox: its `bwrap` and descriptors of its namespaces.
pub(crate) struct Prepared {
    bwrap: Mutex<Child>,
    user: Option<OwnedFd>,
    mnt: OwnedFd,
    pid: OwnedFd,
    /// The sandbox's network namespace when it has one of its own (`--unshare-net`,
    /// `[sandbox] network = "off"`).
    net: Option<OwnedFd>,
    /// The sandbox's IPC namespace (`--unshare-ipc`: System V objects and message queues of
    /// the host's root out of reach).
    ipc: Option<OwnedFd>,
}

impl Prepared {
    /// True while its `bwrap` runs.
    fn alive(&self) -> bool {
        let mut child = match self.bwrap.lock() {
            Ok(child) => child,
            Err(poisoned) => poisoned.into_inner(),
        };
        matches!(child.try_wait(), Ok(None))
    }

    /// The host pid of the process whose namespaces are kept (for tests: the waiter's parent).
    #[cfg(test)]
    fn bwrap_pid(&self) -> u32 {
        match self.bwrap.lock() {
            Ok(child) => child.id(),
            Err(poisoned) => poisoned.into_inner().id(),
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let child = match self.bwrap.get_mut() {
            Ok(child) => child,
            Err(poisoned) => poisoned.into_inner(),
        };
        // End-of-file for the waiter, and the keeper told to end bwrap's group: its pid
        // namespace, and every process in it, ends with it. Failures: already gone.
        drop(child.stdin.take());
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) of our own child, the keeper.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let _ = child.wait();
    }
}

#[derive(Default)]
struct Cache {
    /// `/proc/self/mountinfo`, open for `poll`.
    mountinfo: Option<File>,
    /// Least recently used first.
    entries: Vec<(Layout, Arc<Prepared>)>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The sandbox for `layout`, started now when none is cached (or the cached one ended).
pub(crate) fn sandbox_for(layout: Layout) -> Result<Arc<Prepared>, String> {
    let mut dropped = Vec::new();
    let result = {
        let mut cache = match cache().lock() {
            Ok(cache) => cache,
            Err(poisoned) => poisoned.into_inner(),
        };
        let cache = &mut *cache;
        if crate::prepared::mount_table_changed(&mut cache.mountinfo) {
            dropped.append(&mut cache.entries);
        }
        if let Some(at) = cache.entries.iter().position(|(l, _)| *l == layout) {
            let entry = cache.entries.remove(at);
            if entry.1.alive() {
                let prepared = Arc::clone(&entry.1);
                cache.entries.push(entry);
                return Ok(prepared);
            }
            dropped.push(entry);
        }
        match start(&layout) {
            Ok(prepared) => {
                let prepared = Arc::new(prepared);
                if cache.entries.len() >= CAPACITY {
                    dropped.push(cache.entries.remove(0));
                }
                cache.entries.push((layout, Arc::clone(&prepared)));
                Ok(prepared)
            }
            Err(err) => Err(err),
        }
    };
    // Ended outside the lock: dropping waits for bwrap to exit.
    drop(dropped);
    result
}

/// A sandbox for `layout` that is not cached (the probe's trial): it ends with the plan.
pub(crate) fn uncached(layout: &Layout) -> Result<Arc<Prepared>, String> {
    start(layout).map(Arc::new)
}

/// The number of sandboxes cached now (tests).
#[cfg(test)]
fn cached_count() -> usize {
    match cache().lock() {
        Ok(cache) => cache.entries.len(),
        Err(poisoned) => poisoned.into_inner().entries.len(),
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot make a pipe: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads from `fd` until the bytes read contain `end` or `deadline` passes.
fn read_until(fd: RawFd, end: u8, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 512];
    while !out.contains(&end) {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one pollfd on the stack.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready == 0 {
            return Err(format!(
                "the sandbox was not ready within {} s",
                START_TIMEOUT.as_secs()
            ));
        }
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("cannot wait for the sandbox: {err}"));
        }
        // SAFETY: reading into the stack buffer, at most its length.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n == 0 {
            return Err("bubblewrap ended before the sandbox was ready".to_string());
        }
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("cannot read from bubblewrap: {err}"));
        }
        out.extend_from_slice(&chunk[..n.unsigned_abs()]);
    }
    Ok(out)
}

/// The number after `"name":` in bubblewrap's info JSON.
fn info_number(info: &str, name: &str) -> Option<u64> {
    let rest = &info[info.find(&format!("\"{name}\""))? + name.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Starts `bwrap` for `layout` with the waiter, waits until it is ready and opens its
/// namespaces.
fn start(layout: &Layout) -> Result<Prepared, String> {
    let (info_read, info_write) = pipe()?;
    let info_fd = info_write.as_raw_fd();
    let mut command = Command::new(&layout.program);
    command
        .args(&layout.options)
        .args(["--chdir", "/", "--info-fd", &info_fd.to_string(), "--"])
        .args(WAITER)
        .env_clear()
        .envs(dsh_tools::scrubbed_env())
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Under dsh_tools' group keeper, as the probe's trials: `bwrap` leads a process group of
    // its own (a Ctrl-C meant for dsh does not reach it) and it, with whatever it started in
    // that group, dies with dsh (docs/SECURITY.md, "Process sandbox"); dsh tracks the keeper.
    dsh_tools::guard_group_std(&mut command);
    // SAFETY: runs in the forked child before exec: fcntl is an async-signal-safe system call
    // on integers.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(info_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = dsh_tools::spawn_std_child(command)
        .map_err(|err| format!("cannot start {}: {err}", layout.program.display()))?;
    drop(info_write);
    match opened(&mut child, &info_read) {
        Ok((user, mnt, pid, net, ipc)) => Ok(Prepared {
            bwrap: Mutex::new(child),
            user,
            mnt,
            pid,
            net,
            ipc,
        }),
        Err(err) => {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) of our own child, the keeper: it ends bwrap's group.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            let _ = child.wait();
            Err(
                match stderr.lines().map(str::trim).find(|l| !l.is_empty()) {
                    Some(line) => format!("{err}: {line}"),
                    None => err,
                },
            )
        }
    }
}

type Namespaces = (
    Option<OwnedFd>,
    OwnedFd,
    OwnedFd,
    Option<OwnedFd>,
    Option<OwnedFd>,
);

/// Reads the info JSON and the waiter's ready line, then opens the namespaces of the pid
/// bubblewrap reported, checking they are the ones it reported.
fn opened(child: &mut Child, info: &OwnedFd) -> Result<Namespaces, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    let text = read_until(info.as_raw_fd(), b'}', deadline)?;
    let text = String::from_utf8_lossy(&text);
    let pid = info_number(&text, "child-pid")
        .ok_or_else(|| format!("bubblewrap reported no child pid: {text}"))?;
    let stdout = child
        .stdout
        .as_ref()
        .ok_or("bubblewrap has no stdout pipe")?;
    read_until(stdout.as_raw_fd(), b'\n', deadline)?;
    let open = |kind: &str| {
        File::open(format!("/proc/{pid}/ns/{kind}"))
            .map(OwnedFd::from)
            .map_err(|err| format!("cannot open the sandbox's {kind} namespace: {err}"))
    };
    let mnt = open("mnt")?;
    let pid_ns = open("pid")?;
    for (fd, name) in [(&mnt, "mnt-namespace"), (&pid_ns, "pid-namespace")] {
        let expected = info_number(&text, name);
        let found = File::from(fd.try_clone().map_err(|err| err.to_string())?)
            .metadata()
            .map(|meta| meta.ino())
            .ok();
        if expected.is_some() && expected != found {
            return Err(format!("the {name} of the sandbox changed under dsh"));
        }
    }
    let user = if user_namespaced(&text) {
        Some(open("user")?)
    } else {
        None
    };
    // Network and IPC namespaces of its own: every call must enter them too, or it would keep
    // dsh's.
    let own = |kind: &str| {
        let fd = open(kind)?;
        let theirs = File::from(fd.try_clone().map_err(|err| err.to_string())?)
            .metadata()
            .map(|meta| meta.ino())
            .map_err(|err| format!("cannot read the sandbox's {kind} namespace: {err}"))?;
        let ours = std::fs::metadata(format!("/proc/self/ns/{kind}"))
            .map(|meta| meta.ino())
            .map_err(|err| format!("cannot read dsh's {kind} namespace: {err}"))?;
        Ok::<_, String>((theirs != ours).then_some(fd))
    };
    Ok((user, mnt, pid_ns, own("net")?, own("ipc")?))
}

/// Whether the sandbox has a user namespace of its own (bubblewrap reports it, and its
/// `/proc/<pid>/ns/user` then differs from dsh's).
fn user_namespaced(info: &str) -> bool {
    let Some(pid) = info_number(info, "child-pid") else {
        return false;
    };
    let theirs = std::fs::metadata(format!("/proc/{pid}/ns/user")).map(|m| m.ino());
    let ours = std::fs::metadata("/proc/self/ns/user").map(|m| m.ino());
    matches!((theirs, ours), (Ok(a), Ok(b)) if a != b)
}

/// The hook that runs a call in `sandbox` (see the module docs for the order). `workdir` is
/// where the command starts; `filter` the seccomp program.
pub(crate) fn enter_hook(
    sandbox: Arc<Prepared>,
    filter: &'static Program,
    workdir: CString,
    image: ExecSlot,
) -> Result<PreExecHook, String> {
    let scope = signal_scope()?;
    ARGV.get_or_init(argv_area);
    Ok(Arc::new(move || {
        // SAFETY: system calls on descriptors kept open (the Arc, a process-wide ruleset)
        // and on stack memory; the relay is a single-threaded forked child (contract of
        // `PreExecHook`).
        unsafe { enter(&sandbox, scope, filter, &workdir, image.get()) }
    }))
}

/// A Landlock ruleset that restricts nothing but its scopes (ABI 6+): a process restricted by
/// it can signal only processes of its own domain and of domains nested in it, and connect to
/// no abstract Unix socket made outside them (with the network on, the sandbox shares the
/// host's network namespace, where root daemons such as container shims listen on abstract
/// sockets: docs/SECURITY.md, "No real root in the sandbox"). Made once per process; each
/// `landlock_restrict_self` with it makes a new domain.
pub(crate) fn signal_scope() -> Result<&'static OwnedFd, String> {
    static SCOPE: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    SCOPE
        .get_or_init(|| {
            use landlock::{CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
            let abi = crate::landlock::kernel_abi()?;
            if abi < 6 {
                return Err(format!(
                    "the kernel's Landlock ABI is {abi}; a prepared sandbox needs ABI 6 (signal scoping) to end a command's processes"
                ));
            }
            let created = Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .scope(Scope::Signal | Scope::AbstractUnixSocket)
                .and_then(|ruleset| ruleset.create())
                .map_err(|err| format!("cannot make the signal-scope ruleset: {err}"))?;
            let fd: Option<OwnedFd> = created.into();
            fd.ok_or_else(|| "the kernel did not create the signal-scope ruleset".to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Where this process's command line lives (`arg_start`, length; fields 48 and 49 of
/// `/proc/self/stat`), read once in the parent: the keeper blanks its copy.
static ARGV: OnceLock<Option<(usize, usize)>> = OnceLock::new();

fn argv_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the command name; fields 48 and 49 follow.
    let mut fields = rest.split_whitespace().skip(45);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (end > start && start > 0).then(|| (start, end - start))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `landlock_restrict_self` with `ruleset`: a new domain for the caller.
///
/// # Safety
/// As [`enter`].
unsafe fn restrict(ruleset: &OwnedFd) -> io::Result<()> {
    let rc = libc::syscall(
        libc::SYS_landlock_restrict_self,
        ruleset.as_raw_fd(),
        0 as libc::c_uint,
    );
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// See [`enter_hook`]. Returns `Ok` only in a forked command process (no `image`), else only
/// with an error.
///
/// # Safety
/// Call only in a forked, single-threaded child before `exec`.
unsafe fn enter(
    sandbox: &Prepared,
    scope: &OwnedFd,
    filter: &Program,
    workdir: &CString,
    image: Option<&ExecImage>,
) -> io::Result<()> {
    check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
    if let Some(user) = &sandbox.user {
        check(libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER))?;
    }
    if let Some(net) = &sandbox.net {
        check(libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET))?;
    }
    if let Some(ipc) = &sandbox.ipc {
        check(libc::setns(ipc.as_raw_fd(), libc::CLONE_NEWIPC))?;
    }
    check(libc::setns(sandbox.mnt.as_raw_fd(), libc::CLONE_NEWNS))?;
    check(libc::chdir(workdir.as_ptr()))?;
    check(libc::setns(sandbox.pid.as_raw_fd(), libc::CLONE_NEWPID))?;
    let (keeper, watch) = fork_watched()?;
    if keeper > 0 {
        relay(keeper, watch);
    }
    // The keeper, in the sandbox's pid namespace (so the command's orphans are re-parented to
    // it, the subreaper, and it waits for every one of them to be gone). Its command line,
    // dsh's, in its own copy of dsh's memory, is blanked: the sandbox's `/proc` shows it.
    if let Some((start, len)) = ARGV.get().copied().flatten() {
        libc::memset(start as *mut libc::c_void, 0, len);
    }
    check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    restrict(scope)?;
    // Its parent (the relay) is in dsh's pid namespace, where getppid() says 0: the keeper
    // notices the relay's death by its death signal only.
    crate::landlock::keep_tree(0, image, &|| {
        // The command: a domain nested in the keeper's, so it cannot signal the keeper, the
        // waiter or another call, while the keeper's `kill(-1)` reaches all it started.
        restrict(scope)?;
        crate::landlock::drop_capabilities()?;
        filter.install()
    })
}

/// Forks; the new process arms `PR_SET_PDEATHSIG(SIGKILL)` and then checks that its parent
/// still holds the watch pipe (it did not die before the signal was armed). Returns the child's
/// pid and the parent's end of the pipe in the parent, `(0, -1)` in the child.
///
/// # Safety
/// As [`enter`].
unsafe fn fork_watched() -> io::Result<(libc::pid_t, RawFd)> {
    let mut fds = [-1; 2];
    check(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
    let pid = libc::fork();
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        libc::close(fds[0]);
        return Ok((pid, fds[1]));
    }
    libc::close(fds[1]);
    check(libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    ))?;
    let mut poll = libc::pollfd {
        fd: fds[0],
        events: libc::POLLIN,
        revents: 0,
    };
    libc::poll(&mut poll, 1, 0);
    if poll.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
        // The parent is gone: run nothing.
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    libc::close(fds[0]);
    Ok((0, -1))
}

/// Closes every descriptor but `keep`.
///
/// # Safety
/// As [`enter`].
unsafe fn close_all_but(keep: RawFd) {
    let close_range = |from: libc::c_uint, to: libc::c_uint| {
        libc::syscall(libc::SYS_close_range, from, to, 0 as libc::c_uint) == 0
    };
    let keep_u = libc::c_uint::try_from(keep).unwrap_or(0);
    let done = if keep_u == 0 {
        close_range(0, libc::c_uint::MAX)
    } else {
        close_range(0, keep_u - 1) && close_range(keep_u + 1, libc::c_uint::MAX)
    };
    if !done {
        for fd in 0..4096 {
            if fd != keep {
                libc::close(fd);
            }
        }
    }
}

/// The relay (the process dsh tracks, in dsh's pid namespace): holds only its watch pipe,
/// waits for the keeper and leaves with its status (the same exit code, or 128 + the signal).
/// Its own death (dsh's, through the death signal) reaches the keeper the same way.
///
/// # Safety
/// As [`enter`].
unsafe fn relay(child: libc::pid_t, watch: RawFd) -> ! {
    close_all_but(watch);
    let mut status = 0;
    loop {
        let pid = libc::waitpid(child, &mut status, 0);
        if pid == child {
            if libc::WIFEXITED(status) {
                libc::_exit(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                libc::_exit(128 + libc::WTERMSIG(status));
            }
            libc::_exit(1);
        }
        if pid < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            libc::_exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_numbers_are_read() {
        let info = "{\n    \"child-pid\": 6514,\n    \"mnt-namespace\": 4026532179\n}";
        assert_eq!(info_number(info, "child-pid"), Some(6514));
        assert_eq!(info_number(info, "mnt-namespace"), Some(4026532179));
        assert_eq!(info_number(info, "pid-namespace"), None);
    }

    #[test]
    fn the_layout_ignores_the_workdir_and_names_identities() {
        let dir = tempfile::tempdir().unwrap();
        let a: Vec<OsString> = ["--ro-bind", "/", "/", "--chdir", "/tmp", "--unshare-pid"]
            .iter()
            .map(OsString::from)
            .collect();
        let mut b = a.clone();
        b[4] = dir.path().as_os_str().to_os_string();
        let (la, lb) = (
            Layout::new(Path::new("bwrap"), Path::new("/"), a),
            Layout::new(Path::new("bwrap"), Path::new("/"), b),
        );
        assert_eq!(la, lb);
        assert_eq!(la.identities.len(), 3);
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let opts = |p: &Path| vec![OsString::from("--ro-bind"), p.into(), p.into()];
        let before = Layout::new(Path::new("bwrap"), Path::new("/"), opts(&file));
        std::fs::remove_file(&file).unwrap();
        std::fs::write(dir.path().join("g"), "x").unwrap();
        std::fs::write(&file, "1").unwrap();
        let after = Layout::new(Path::new("bwrap"), Path::new("/"), opts(&file));
        assert_ne!(before, after, "a re-created file is another layout");
        // The cache is not touched here; other tests of this crate may fill it.
        let _ = cached_count();
        let _ = Prepared::bwrap_pid;
    }
}
