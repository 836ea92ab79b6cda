//! Prepared mount namespaces for the Landlock path (docs/SECURITY.md, "Process sandbox",
//! "A prepared mount namespace per layout").
//!
//! Building the read-only layout of [`crate::mounts`] in every confined child costs a copy of
//! the host's whole mount tree (`unshare(CLONE_NEWNS)`), a recursive `mount_setattr`, the binds,
//! and, when the command ends, the teardown of all of it: about a millisecond or two per `bash`
//! call. With [`MountNamespace::Privileged`](crate::MountNamespace::Privileged) (root with
//! `CAP_SYS_ADMIN`) the layout is instead built once, by a short-lived helper process that
//! applies the very same [`MountPlan`] and waits; dsh keeps a descriptor of the helper's
//! namespace (`/proc/<pid>/ns/mnt`), which keeps the namespace alive after the helper exits.
//! Each later child whose plan is *equal* enters it with `setns` instead of building its own.
//!
//! Why this keeps every property of the per-call layout:
//! * a namespace is used only for a plan equal to the one it was built from, and the plan is
//!   still computed for every call (writable roots, `.git`, every protected entry that exists
//!   now, dsh's home and what stays visible in it), together with the identity (device and
//!   inode) of every path it names: a new `.env`, a re-created `.git`, a replaced workspace
//!   make a different plan and a new namespace;
//! * a mount or unmount on the host (which the per-call copy would have picked up) empties the
//!   cache: `/proc/self/mountinfo` reports every change of dsh's mount table to `poll`;
//! * commands cannot change a namespace: the seccomp filter denies every mount system call and
//!   `unshare`/`setns`, and every capability is dropped before `exec`. The layout holds no
//!   writable state of its own (dsh's home is covered by a read-only tmpfs; everything
//!   writable is a host directory the per-call layout exposes too), so one command cannot
//!   leave anything in it for the next one beyond what it may write in the workspace anyway;
//! * the descriptor is close-on-exec, and the keeper of a confined command closes every
//!   descriptor above stdio, so no command holds it.
//!
//! With a user namespace ([`MountNamespace::UserNamespace`](crate::MountNamespace)) each call
//! still builds its own layout: entering another process's user namespace would need the
//! helper's credentials, not the caller's.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use crate::mounts::MountPlan;

/// Namespaces kept at once (one per distinct layout; a session normally has one).
const CAPACITY: usize = 4;

#[derive(Default)]
struct Cache {
    /// `/proc/self/mountinfo`, open for `poll` (see [`mount_table_changed`]).
    mountinfo: Option<File>,
    entries: Vec<(Arc<MountPlan>, Arc<OwnedFd>)>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// True when dsh's mount table changed since the last call (or cannot be watched).
/// `mountinfo` is the watch, opened on first use (which counts as a change: nothing is cached
/// yet). Shared with the prepared bubblewrap sandboxes (`prepared_bwrap.rs`).
pub(crate) fn mount_table_changed(mountinfo: &mut Option<File>) -> bool {
    let Some(file) = mountinfo.as_ref() else {
        *mountinfo = File::open("/proc/self/mountinfo").ok();
        return true;
    };
    let mut poll = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack, zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    // The kernel marks the file (POLLERR | POLLPRI) once per change and clears the mark when
    // it reports it; an error of poll itself counts as a change.
    ready != 0
}

/// The prepared namespace for `plan`, built now if none is cached; `None` when it cannot be
/// built (the caller then builds the layout in the child, as before).
pub(crate) fn namespace_for(plan: &Arc<MountPlan>) -> Option<Arc<OwnedFd>> {
    let mut cache = match cache().lock() {
        Ok(cache) => cache,
        Err(poisoned) => poisoned.into_inner(),
    };
    if mount_table_changed(&mut cache.mountinfo) {
        cache.entries.clear();
    }
    if let Some((_, fd)) = cache.entries.iter().find(|(p, _)| **p == **plan) {
        return Some(Arc::clone(fd));
    }
    let fd = Arc::new(prepare(plan).ok()?);
    if cache.entries.len() >= CAPACITY {
        cache.entries.remove(0);
    }
    cache.entries.push((Arc::clone(plan), Arc::clone(&fd)));
    Some(fd)
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Builds `plan`'s layout in a helper process and returns a descriptor of its namespace.
fn prepare(plan: &MountPlan) -> io::Result<OwnedFd> {
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    // SAFETY: the child only makes async-signal-safe system calls (see `helper`) and never
    // returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        helper(
            plan,
            ready_read.as_raw_fd(),
            ready_write.as_raw_fd(),
            release_read.as_raw_fd(),
            release_write.as_raw_fd(),
        );
    }
    drop(ready_write);
    drop(release_read);
    let mut code = [0u8; 4];
    let mut got = 0;
    while got < code.len() {
        // SAFETY: reading into the live stack buffer past `got`.
        let n = unsafe {
            libc::read(
                ready_read.as_raw_fd(),
                code[got..].as_mut_ptr().cast(),
                code.len() - got,
            )
        };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    let namespace = if got < code.len() {
        Err(io::Error::other("the namespace helper ended early"))
    } else if i32::from_ne_bytes(code) != 0 {
        Err(io::Error::from_raw_os_error(i32::from_ne_bytes(code)))
    } else {
        File::open(format!("/proc/{pid}/ns/mnt")).map(OwnedFd::from)
    };
    // End-of-file on the release pipe lets the helper exit; the namespace lives on in the
    // descriptor.
    drop(release_write);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
    namespace
}

/// The helper: applies the plan in a new mount namespace, reports the outcome (0 or an errno)
/// and waits until dsh has opened the namespace (end-of-file on the release pipe) or died.
/// Async-signal-safe: system calls on memory prepared before the fork.
fn helper(
    plan: &MountPlan,
    ready_read: libc::c_int,
    ready_write: libc::c_int,
    release_read: libc::c_int,
    release_write: libc::c_int,
) -> ! {
    // SAFETY: plain system calls on descriptors and stack memory of this (forked) process.
    unsafe {
        libc::close(ready_read);
        libc::close(release_write);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let code: i32 = match plan.apply() {
            Ok(()) => 0,
            Err(err) => err.raw_os_error().unwrap_or(libc::EIO),
        };
        let bytes = code.to_ne_bytes();
        libc::write(ready_write, bytes.as_ptr().cast(), bytes.len());
        let mut byte = 0u8;
        while libc::read(release_read, (&mut byte as *mut u8).cast(), 1) < 0 {}
        libc::_exit(0)
    }
}

/// In the confined child before `exec`: enters the prepared namespace `fd` and goes back into
/// the working directory the spawner chose (`setns` moves the caller to the namespace's root).
/// Async-signal-safe: three system calls on the stack.
pub(crate) fn enter(fd: &OwnedFd) -> io::Result<()> {
    let mut cwd = [0 as libc::c_char; libc::PATH_MAX as usize];
    // SAFETY: getcwd writes at most `cwd.len()` bytes into the stack buffer.
    if unsafe { libc::getcwd(cwd.as_mut_ptr(), cwd.len()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setns on a descriptor kept open by the caller; the child is single-threaded.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: chdir to the NUL-terminated path getcwd wrote.
    if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
