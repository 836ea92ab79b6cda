//! The mount-namespace layer of the Landlock path (docs/SECURITY.md, "Process sandbox").
//!
//! Landlock governs writing file contents and the directory tree, not file metadata:
//! `chmod` and `utimes` on a file the caller owns (every file, for root) outside the writable
//! roots would go through. So before the capability drop, the seccomp filter and
//! `landlock_restrict_self`, the child moves into a private mount namespace where the whole tree
//! is read-only except the writable roots. A read-only mount refuses every change, metadata
//! included (`EROFS`), whoever asks.
//!
//! Layout, built by [`MountPlan::apply`] in the child:
//! 1. `unshare(CLONE_NEWNS)` (root with `CAP_SYS_ADMIN`: [`MountNamespace::Privileged`]) or
//!    `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with the caller's uid and gid mapped to themselves
//!    ([`MountNamespace::UserNamespace`]); every mount made private, so nothing propagates back;
//! 2. a detached copy of each writable root's mount tree (`open_tree(OPEN_TREE_CLONE)`), taken
//!    while the host's flags still hold;
//! 3. the whole tree read-only and `nosuid` (`mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY |
//!    MOUNT_ATTR_NOSUID)`); `/proc` and `/sys` with it, so no kernel setting is written;
//! 4. each copy attached back on its root (`move_mount`) and made `nosuid,nodev`: the roots are
//!    writable again as on the host, but nothing on them gives privilege or opens a device;
//! 5. every directory between a root and a root nested in it (the nested root included) bound
//!    onto itself, parents first (`crate::nested_root_chains`: nothing on a root's path can be
//!    renamed and replaced by a symbolic link); each root's `.git` directory bound onto itself (a mount point cannot be renamed away) and
//!    the protected entries (`dsh_tools::existing_protected_entries`) bound read-only on top;
//! 6. dsh's home (`ConfinementRequest::hidden_dirs`) covered by an empty read-only tmpfs; a
//!    root or the working directory inside it is attached back (copied before the cover).
//!
//! Device nodes stay usable: a read-only mount does not stop writing to a device (`/dev/null`,
//! `/dev/tty`, new terminals from `/dev/ptmx`), only changes to the file system.
//! The seccomp filter installed afterwards denies every mount system call and `unshare`, so the
//! command cannot undo any of this; capabilities are dropped afterwards too.
//!
//! Whether the layer is possible is decided once per process by the probe
//! ([`crate::SandboxProbe`]); a spawn whose layer fails is refused, never run without it.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_tools::{ConfinementRequest, PermissionPreset};

/// How a confined child gets its private mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MountNamespace {
    /// `unshare(CLONE_NEWNS)` with the caller's own privilege (root with `CAP_SYS_ADMIN`).
    Privileged,
    /// A new user namespace first (hosts that allow unprivileged user namespaces).
    UserNamespace,
    /// Neither works (e.g. a container's root without `CAP_SYS_ADMIN` and without user
    /// namespaces): metadata outside the writable roots is not protected.
    #[default]
    Unavailable,
}

impl MountNamespace {
    /// A few words for the sandbox detail line.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Privileged => "read-only mount namespace",
            Self::UserNamespace => "read-only mount namespace in a user namespace",
            Self::Unavailable => "no mount namespace: metadata outside not protected",
        }
    }
}

/// At most this many mount trees are copied per call (writable roots, and directories kept
/// visible inside dsh's home); the copies' descriptors live on the child's stack.
const MAX_TREES: usize = 16;

/// `AT_RECURSIVE` (linux/fcntl.h).
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `MOUNT_ATTR_RDONLY` (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID` and `MOUNT_ATTR_NODEV` (linux/mount.h): no set-id or file-capability
/// gain from a file on the mount, no device opened through a node on it.
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `OPEN_TREE_CLONE` (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `MOVE_MOUNT_F_EMPTY_PATH` (linux/mount.h).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `struct mount_attr` (linux/mount.h, version 0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A directory kept visible inside a hidden one: its path and the directories to create in
/// the covering tmpfs so it has a mount point, outermost first.
#[derive(Debug, PartialEq, Eq)]
struct Kept {
    path: CString,
    mkdirs: Vec<CString>,
}

/// A hidden directory and what stays visible inside it.
#[derive(Debug, PartialEq, Eq)]
struct Hidden {
    dir: CString,
    keep: Vec<Kept>,
}

/// Everything the child needs, prepared in the parent (the child may not allocate). Two equal
/// plans build the same layout over the same files (`identity`), which is what lets a prepared
/// namespace stand in for a new one ([`crate::prepared`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MountPlan {
    /// `Some((uid_map, gid_map))` for [`MountNamespace::UserNamespace`].
    id_maps: Option<(Vec<u8>, Vec<u8>)>,
    /// Top-level writable roots (none nested in another).
    writable: Vec<CString>,
    /// `.git` directories bound onto themselves.
    pinned: Vec<CString>,
    /// Protected entries bound read-only.
    read_only: Vec<CString>,
    hidden: Vec<Hidden>,
    /// Device, inode and birth time of every path above, without and with following a
    /// symbolic link (`None` when missing): a replaced file or directory makes a different plan,
    /// also where the file system gives the new one the old inode number (a `.git` removed and
    /// made again, bound read-only whole).
    identity: Vec<Option<[u64; 6]>>,
}

/// The identity of `path` as [`MountPlan::identity`] records it: the one the prepared
/// bubblewrap layouts record too ([`crate::prepared_bwrap::identity`]).
fn identity_of(path: &std::ffi::CStr) -> Option<[u64; 6]> {
    crate::prepared_bwrap::identity(Path::new(std::ffi::OsStr::from_bytes(path.to_bytes())))
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("the path {} contains a NUL byte", path.display()))
}

/// Keeps only the paths not nested in another of them (sorted, deduplicated).
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for path in paths {
        if !kept.iter().any(|k| path.starts_with(k)) {
            kept.push(path);
        }
    }
    kept
}

/// The hidden directories of `request` (dsh's home, ...) and, inside each, the directories the
/// session must still see (writable roots and the session's cwd), with the directories to create
/// on the way to them. Never the command's `workdir`: the model (a `bash` call's `workdir`) or a
/// project (an MCP server's `cwd`) chooses it, and naming the home there must not un-hide it
/// (found by the fourth adversarial review); a workdir inside a hidden directory is simply not
/// there for the command.
fn hidden_plan(request: &ConfinementRequest, roots: &[PathBuf]) -> Result<Vec<Hidden>, String> {
    let mut hidden = Vec::new();
    let hidden_dirs = outermost(
        request
            .hidden_dirs
            .iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .filter(|dir| dir.is_dir() && dir.parent().is_some())
            .collect(),
    );
    let mut visible: Vec<PathBuf> = roots.to_vec();
    if let Ok(dir) = std::fs::canonicalize(&request.cwd) {
        visible.push(dir);
    }
    for dir in hidden_dirs {
        if visible.contains(&dir) {
            // The session runs in dsh's home itself: nothing to hide.
            continue;
        }
        let inside = outermost(
            visible
                .iter()
                .filter(|v| v.starts_with(&dir) && **v != dir)
                .cloned()
                .collect(),
        );
        if inside.len() > MAX_TREES {
            return Err(format!(
                "{} directories to keep inside {}; the mount layer handles at most {MAX_TREES}",
                inside.len(),
                dir.display()
            ));
        }
        let mut keep = Vec::new();
        for path in inside {
            let mut mkdirs = Vec::new();
            let mut at = dir.clone();
            if let Ok(rest) = path.strip_prefix(&dir) {
                for part in rest.components() {
                    at.push(part);
                    mkdirs.push(c_path(&at)?);
                }
            }
            keep.push(Kept {
                path: c_path(&path)?,
                mkdirs,
            });
        }
        hidden.push(Hidden {
            dir: c_path(&dir)?,
            keep,
        });
    }
    Ok(hidden)
}

impl MountPlan {
    /// The plan for `request` with `mode` ([`MountNamespace::Unavailable`] gives `None`).
    /// Paths that do not exist are skipped, as bubblewrap does.
    pub(crate) fn new(
        mode: MountNamespace,
        request: &ConfinementRequest,
    ) -> Result<Option<Self>, String> {
        let id_maps = match mode {
            MountNamespace::Unavailable => return Ok(None),
            MountNamespace::Privileged => None,
            MountNamespace::UserNamespace => {
                // SAFETY: geteuid and getegid have no preconditions.
                let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
                Some((
                    format!("{uid} {uid} 1\n").into_bytes(),
                    format!("{gid} {gid} 1\n").into_bytes(),
                ))
            }
        };
        let roots: Vec<PathBuf> = match request.preset {
            PermissionPreset::WorkspaceWrite
            | PermissionPreset::Ask
            | PermissionPreset::DangerFullAccess => request
                .writable_roots
                .iter()
                .filter_map(|root| std::fs::canonicalize(root).ok())
                .filter(|root| root.is_dir())
                .collect(),
            PermissionPreset::ReadOnly => Vec::new(),
        };
        // Every directory between a root and a root nested in it, the nested root included,
        // is bound onto itself first (parents first), so no command can rename it and put a
        // symbolic link on the nested root's path (`crate::nested_root_chains`).
        let mut pinned = crate::nested_root_chains(&roots)
            .iter()
            .map(|dir| c_path(dir))
            .collect::<Result<Vec<_>, _>>()?;
        let mut read_only = Vec::new();
        for root in &roots {
            let protection = crate::RootProtection::of(root);
            if let Some(git) = &protection.pinned_git {
                pinned.push(c_path(git)?);
            }
            for entry in &protection.read_only {
                read_only.push(c_path(entry)?);
            }
        }
        let roots = outermost(roots);
        if roots.len() > MAX_TREES {
            return Err(format!(
                "{} writable roots; the mount layer handles at most {MAX_TREES}",
                roots.len()
            ));
        }
        let hidden = hidden_plan(request, &roots)?;
        let writable: Vec<CString> = roots.iter().map(|r| c_path(r)).collect::<Result<_, _>>()?;
        let named = writable.iter().chain(&pinned).chain(&read_only).chain(
            hidden
                .iter()
                .flat_map(|h| std::iter::once(&h.dir).chain(h.keep.iter().map(|k| &k.path))),
        );
        let identity = named.map(|path| identity_of(path)).collect();
        Ok(Some(Self {
            id_maps,
            writable,
            pinned,
            read_only,
            hidden,
            identity,
        }))
    }

    /// True when the layout is made with dsh's own privilege (no user namespace), so a
    /// prepared namespace can be entered with `setns` ([`crate::prepared`]).
    pub(crate) fn privileged(&self) -> bool {
        self.id_maps.is_none()
    }

    /// Builds the layout (module docs) in the calling process. Runs in the forked child before
    /// `exec`: system calls on memory prepared by the parent and on the stack only
    /// (async-signal-safe, no allocation).
    pub(crate) fn apply(&self) -> io::Result<()> {
        let flags = match self.id_maps {
            Some(_) => libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
            None => libc::CLONE_NEWNS,
        };
        // SAFETY: unshare takes flags only; the child is single-threaded.
        check(unsafe { libc::unshare(flags) })?;
        if let Some((uid_map, gid_map)) = &self.id_maps {
            // dsh is non-dumpable (`make_undumpable`), and so is this copy of it: its /proc
            // files then belong to root, and the id maps could not be written. It is made
            // dumpable for these three writes only. Meanwhile no confined command can read it:
            // Landlock denies ptrace-mode access (environ, mem) from a sandboxed process to one
            // outside its domain, and bubblewrap's commands do not see it at all
            // (docs/SECURITY.md, "dsh's own environment"); `exec` makes it dumpable anyway.
            // SAFETY: prctl with integer arguments only.
            check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) })?;
            let written = write_file(c"/proc/self/setgroups", b"deny")
                .and_then(|()| write_file(c"/proc/self/uid_map", uid_map))
                .and_then(|()| write_file(c"/proc/self/gid_map", gid_map));
            // SAFETY: as above.
            check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) })?;
            written?;
        }
        // SAFETY: mount with a static path and null source, type and data.
        check(unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        })?;
        // The spawner changed into the working directory before this hook ran, so the
        // process still sits in the directory as it was before the new mounts covered it:
        // note its path now and enter it again at the end, through the new mounts.
        let mut cwd = [0 as libc::c_char; libc::PATH_MAX as usize];
        // SAFETY: getcwd writes at most `cwd.len()` bytes into the stack buffer.
        if unsafe { libc::getcwd(cwd.as_mut_ptr(), cwd.len()) }.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut copies: [libc::c_int; MAX_TREES] = [-1; MAX_TREES];
        let result = self.apply_with(&mut copies);
        for fd in copies.iter().filter(|fd| **fd >= 0) {
            // SAFETY: closing descriptors this function opened.
            unsafe { libc::close(*fd) };
        }
        result?;
        // SAFETY: chdir to the NUL-terminated path getcwd wrote.
        check(unsafe { libc::chdir(cwd.as_ptr()) })
    }

    fn apply_with(&self, copies: &mut [libc::c_int; MAX_TREES]) -> io::Result<()> {
        for (slot, root) in copies.iter_mut().zip(&self.writable) {
            *slot = copy_tree(root)?;
        }
        set_attr(c"/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0)?;
        for (fd, root) in copies.iter_mut().zip(&self.writable) {
            attach(*fd, root)?;
            // What the command may write is never a source of privilege inside the sandbox
            // (docs/SECURITY.md, "No real root in the sandbox").
            set_attr(root, AT_RECURSIVE, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)?;
            // SAFETY: closing the descriptor copy_tree opened; the tree stays attached.
            unsafe { libc::close(*fd) };
            *fd = -1;
        }
        for git in &self.pinned {
            bind(git)?;
        }
        for entry in &self.read_only {
            bind(entry)?;
            set_attr(entry, AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0)?;
        }
        for hidden in &self.hidden {
            for (slot, kept) in copies.iter_mut().zip(&hidden.keep) {
                *slot = copy_tree(&kept.path)?;
            }
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            // SAFETY: mount with paths and data prepared by the parent or static.
            check(unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    hidden.dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    c"mode=0755,size=16k".as_ptr().cast(),
                )
            })?;
            for (fd, kept) in copies.iter_mut().zip(&hidden.keep) {
                for dir in &kept.mkdirs {
                    // SAFETY: mkdir on a path prepared by the parent.
                    if unsafe { libc::mkdir(dir.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
                        return Err(io::Error::last_os_error());
                    }
                }
                attach(*fd, &kept.path)?;
                // SAFETY: as above.
                unsafe { libc::close(*fd) };
                *fd = -1;
            }
            // Read-only on the tmpfs alone: what was attached inside keeps its own flags.
            set_attr(&hidden.dir, 0, MOUNT_ATTR_RDONLY, 0)?;
        }
        Ok(())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn check_long(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Writes `data` to the file at `path` in one `write`.
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open, write and close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let result = if written == data.len() as isize {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        libc::close(fd);
        result
    }
}

/// `mount_setattr(AT_FDCWD, path, flags, {attr_set, attr_clr})`.
fn set_attr(
    path: &std::ffi::CStr,
    flags: libc::c_uint,
    attr_set: u64,
    attr_clr: u64,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the path and the attribute record live for the call.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// A detached copy of the mount tree at `path` (with everything mounted below it).
fn copy_tree(path: &std::ffi::CStr) -> io::Result<libc::c_int> {
    let flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: open_tree on a NUL-terminated path.
    let fd = check_long(unsafe {
        libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags)
    })?;
    libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// Attaches the detached tree `fd` on `path`.
fn attach(fd: libc::c_int, path: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: move_mount with a live descriptor and NUL-terminated paths.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Binds `path` onto itself (with its submounts), keeping the flags it has.
fn bind(path: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: mount with NUL-terminated paths; type and data unused for a bind.
    check(unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(preset: PermissionPreset, cwd: &Path, roots: Vec<PathBuf>) -> ConfinementRequest {
        ConfinementRequest {
            preset,
            cwd: cwd.to_path_buf(),
            workdir: cwd.to_path_buf(),
            writable_roots: roots,
            hidden_dirs: Vec::new(),
            network: true,
        }
    }

    #[test]
    fn nested_roots_are_copied_once_and_protected_entries_listed() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".env"), "A=1").unwrap();
        let req = request(
            PermissionPreset::WorkspaceWrite,
            &ws,
            vec![ws.clone(), base.clone(), base.join("missing")],
        );
        let plan = MountPlan::new(MountNamespace::Privileged, &req)
            .unwrap()
            .unwrap();
        assert_eq!(plan.writable, [c_path(&base).unwrap()]);
        // The nested root is a mount point first (nothing on its path can be renamed), then
        // its `.git`.
        assert_eq!(
            plan.pinned,
            [c_path(&ws).unwrap(), c_path(&ws.join(".git")).unwrap()]
        );
        // The whole git directory is bound read-only (docs/SECURITY.md, "Protected paths").
        assert!(plan.read_only.contains(&c_path(&ws.join(".env")).unwrap()));
        assert!(plan.read_only.contains(&c_path(&ws.join(".git")).unwrap()));
        assert!(plan.id_maps.is_none());
        assert!(MountPlan::new(MountNamespace::Unavailable, &req)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_root_inside_the_hidden_home_is_kept_with_its_mount_points() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let home = base.join("home");
        let ws = home.join("a/ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut req = request(PermissionPreset::WorkspaceWrite, &ws, vec![ws.clone()]);
        req.hidden_dirs = vec![home.clone()];
        let plan = MountPlan::new(MountNamespace::UserNamespace, &req)
            .unwrap()
            .unwrap();
        assert_eq!(plan.hidden.len(), 1);
        let kept = &plan.hidden[0].keep;
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].path, c_path(&ws).unwrap());
        assert_eq!(
            kept[0].mkdirs,
            [c_path(&home.join("a")).unwrap(), c_path(&ws).unwrap()]
        );
        assert!(plan.id_maps.is_some());
        // The session in the home itself: nothing hidden.
        let mut req = request(PermissionPreset::WorkspaceWrite, &home, vec![home.clone()]);
        req.hidden_dirs = vec![home.clone()];
        let plan = MountPlan::new(MountNamespace::Privileged, &req)
            .unwrap()
            .unwrap();
        assert!(plan.hidden.is_empty());
    }
}
