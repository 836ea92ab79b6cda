//! File access beneath a writable root that no concurrent rename can redirect
//! (docs/SECURITY.md, "write/edit confinement").
//!
//! `write` and `edit` resolve the real target first (symlinks the user placed inside the
//! workspace keep working), check it against the writable roots, and then touch the file only
//! through directory descriptors: the root is opened once, every directory below it is opened
//! relative to its parent with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` (an `O_NOFOLLOW` walk where the kernel lacks `openat2`), missing
//! directories are made with `mkdirat`, and the file is read, created and renamed with
//! `openat`/`renameat` relative to its directory's descriptor. A directory swapped for a
//! symbolic link after the check makes the walk fail (`ELOOP`), it is never followed.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata, Permissions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Prefix of the temp files `write`/`edit` create beside their target; the rest of the name is
/// 32 lowercase hex digits. Leftovers of a crash are removed on resume (see
/// [`remove_leftover_temps`]).
pub const TEMP_PREFIX: &str = ".dsh-tmp-";

/// The flag of a descriptor used only to walk and to name a directory: `O_PATH` on Linux;
/// elsewhere (macOS) a read-only open, the closest portable form (docs/SECURITY.md,
/// "Platforms").
#[cfg(target_os = "linux")]
const DIR_HANDLE: libc::c_int = libc::O_PATH;
#[cfg(not(target_os = "linux"))]
const DIR_HANDLE: libc::c_int = libc::O_RDONLY;

/// Set once `openat2` returned `ENOSYS`: later walks go straight to the `O_NOFOLLOW` walk.
#[cfg(target_os = "linux")]
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// True when `err` means a path component turned into a symbolic link (or left the root) after
/// the path was resolved and checked: the caller reports it as a concurrent change.
pub(crate) fn is_swapped(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV))
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path component contains a NUL byte",
        )
    })
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open call and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `fstat` of an open descriptor.
fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the duration of the call and `st` is a valid out pointer.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn lstat_at(dir: BorrowedFd<'_>, name: &CString) -> io::Result<libc::stat> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is open, `name` is NUL-terminated and `st` is a valid out pointer.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

fn is_kind(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

fn loop_error() -> io::Error {
    io::Error::from_raw_os_error(libc::ELOOP)
}

/// Opens the writable root `root` (canonical, absolute) as an `O_PATH` directory descriptor.
pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let path = cstring(root.as_os_str())?;
    // SAFETY: `path` is NUL-terminated; the flags ask for a descriptor only.
    let fd = check(unsafe {
        libc::open(
            path.as_ptr(),
            DIR_HANDLE | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    Ok(owned(fd))
}

/// Opens the directory `name` inside `dir` without following a symbolic link, as an `O_PATH`
/// descriptor. A symbolic link gives `ELOOP`.
fn open_child_dir(dir: BorrowedFd<'_>, name: &CString, walk_only: bool) -> io::Result<OwnedFd> {
    // `openat2` is Linux's; elsewhere every walk is the `O_NOFOLLOW` walk.
    #[cfg(not(target_os = "linux"))]
    let _ = walk_only;
    #[cfg(target_os = "linux")]
    if !walk_only && !OPENAT2_MISSING.load(Ordering::Relaxed) {
        // SAFETY: an all-zero `open_how` is valid (no flags, no mode, no resolve rules).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
        how.resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: `dir` is open, `name` is NUL-terminated, `how` is a valid `open_how` whose
        // size is passed alongside.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                name.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            let fd = owned(rc as libc::c_int);
            // Belt and braces: what was opened must be a directory.
            if !is_kind(&fstat(fd.as_fd())?, libc::S_IFDIR) {
                return Err(loop_error());
            }
            return Ok(fd);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOSYS) {
            return Err(err);
        }
        OPENAT2_MISSING.store(true, Ordering::Relaxed);
    }
    // The walk without openat2: one plain name at a time, never following a link.
    // SAFETY: `dir` is open and `name` is NUL-terminated.
    let rc = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            DIR_HANDLE | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    match check(rc) {
        Ok(fd) => {
            let fd = owned(fd);
            // With O_PATH | O_NOFOLLOW a link may be opened as itself: refuse it.
            if !is_kind(&fstat(fd.as_fd())?, libc::S_IFDIR) {
                return Err(loop_error());
            }
            Ok(fd)
        }
        Err(err) if err.raw_os_error() == Some(libc::ENOTDIR) => {
            // ENOTDIR for a link (O_DIRECTORY) is a swap; for a file it is what it says.
            match lstat_at(dir, name) {
                Ok(st) if is_kind(&st, libc::S_IFLNK) => Err(loop_error()),
                _ => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}

/// The directory `relative` (plain names only) below the directory `root`, opened component by
/// component without following links. With `create`, missing directories are made (mode
/// `0777 & !umask`, as `mkdir -p`).
pub(crate) fn open_dir_beneath(
    root: &OwnedFd,
    relative: &Path,
    create: bool,
) -> io::Result<OwnedFd> {
    walk(root, relative, create, false)
}

fn walk(root: &OwnedFd, relative: &Path, create: bool, walk_only: bool) -> io::Result<OwnedFd> {
    let mut current = root.try_clone()?;
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a plain relative path beneath its root",
                    relative.display()
                ),
            ));
        };
        let name = cstring(name)?;
        let next = match open_child_dir(current.as_fd(), &name, walk_only) {
            Err(err) if create && err.kind() == io::ErrorKind::NotFound => {
                // SAFETY: `current` is open and `name` is NUL-terminated.
                let rc = unsafe { libc::mkdirat(current.as_raw_fd(), name.as_ptr(), 0o777) };
                if let Err(err) = check(rc) {
                    if err.kind() != io::ErrorKind::AlreadyExists {
                        return Err(err);
                    }
                }
                open_child_dir(current.as_fd(), &name, walk_only)?
            }
            other => other?,
        };
        current = next;
    }
    Ok(current)
}

/// What a name in a directory is, as far as `write`/`edit` care.
pub(crate) enum Existing {
    /// Nothing by that name.
    Missing,
    /// A regular file: its content and metadata.
    File(Vec<u8>, Metadata),
    /// A directory.
    Directory,
    /// A device, FIFO or socket.
    Special,
}

/// Reads the regular file `name` in `dir` without following a link (`ELOOP` when it is one).
pub(crate) fn read_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Existing> {
    let cname = cstring(name)?;
    let st = match lstat_at(dir.as_fd(), &cname) {
        Ok(st) => st,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(err) => return Err(err),
    };
    if is_kind(&st, libc::S_IFLNK) {
        return Err(loop_error());
    }
    if is_kind(&st, libc::S_IFDIR) {
        return Ok(Existing::Directory);
    }
    if !is_kind(&st, libc::S_IFREG) {
        return Ok(Existing::Special);
    }
    // O_NONBLOCK: should the name turn into a FIFO meanwhile, the open does not hang.
    // SAFETY: `dir` is open and `cname` is NUL-terminated.
    let rc = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            cname.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    let mut file = File::from(owned(check(rc)?));
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Ok(Existing::Directory);
    }
    if !meta.is_file() {
        return Ok(Existing::Special);
    }
    let mut content = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut content)?;
    Ok(Existing::File(content, meta))
}

/// A fresh temp-file name: [`TEMP_PREFIX`] and 32 hex digits.
fn temp_name() -> OsString {
    OsString::from(format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple()))
}

/// Replaces `name` in `dir` with `content` atomically: a new temp file in the same directory
/// (`O_CREAT | O_EXCL | O_NOFOLLOW`), written, given `mode` (when replacing a file) and synced,
/// then renamed over `name` relative to the same descriptor. Returns the metadata of the new
/// file. The temp file is removed when any step fails.
pub(crate) fn replace_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
) -> io::Result<Metadata> {
    write_file_at(dir, name, content, mode, true)
}

/// Like [`replace_file_at`], but `name` must not exist: the temp file is hard-linked to `name`
/// (`linkat`, which never replaces an entry) and then unlinked, so whatever appeared under
/// `name` meanwhile is left as it is and the call fails with `AlreadyExists`.
pub(crate) fn create_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
) -> io::Result<Metadata> {
    write_file_at(dir, name, content, mode, false)
}

fn write_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
    replace: bool,
) -> io::Result<Metadata> {
    let target = cstring(name)?;
    let temp = cstring(&temp_name())?;
    // SAFETY: `dir` is open and `temp` is NUL-terminated; the mode is an integer argument.
    let rc = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            temp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o666 as libc::c_uint,
        )
    };
    let file = File::from(owned(check(rc)?));
    // As root, the new content keeps the old file's owner: a file of another user that its
    // modes let dsh change stays theirs (docs/SECURITY.md, "The file gate").
    if let Some((uid, gid)) = other_owner(dir, &target) {
        // SAFETY: `file` is an open descriptor; fchown has no memory-safety preconditions.
        check(unsafe { libc::fchown(file.as_raw_fd(), uid, gid) })?;
    }
    let result = fill_and_rename(dir, file, &temp, &target, content, mode, replace);
    if result.is_err() || !replace {
        // Best effort: the temp file is ours and useless now; the first error is the one
        // worth reporting.
        // SAFETY: `dir` is open and `temp` is NUL-terminated.
        unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
    }
    result
}

/// The owner of `name` in `dir` when this process is root and the file belongs to someone else.
fn other_owner(dir: &OwnedFd, name: &CString) -> Option<(libc::uid_t, libc::gid_t)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    // SAFETY: `stat` is plain data that fstatat fills; `dir` is open and `name` NUL-terminated.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    (rc == 0 && (stat.st_uid != 0 || stat.st_gid != 0)).then_some((stat.st_uid, stat.st_gid))
}

fn fill_and_rename(
    dir: &OwnedFd,
    mut file: File,
    temp: &CString,
    target: &CString,
    content: &[u8],
    mode: Option<u32>,
    replace: bool,
) -> io::Result<Metadata> {
    file.write_all(content)?;
    if let Some(mode) = mode {
        // The old file's permission bits, never its set-user-ID, set-group-ID or sticky bits:
        // new content under a set-id bit would run with its owner's power (docs/SECURITY.md,
        // "The file gate").
        file.set_permissions(Permissions::from_mode(mode & 0o777))?;
    }
    file.sync_all()?;
    let meta = file.metadata()?;
    drop(file);
    if !replace {
        // SAFETY: `dir` is open and both names are NUL-terminated; flags 0 links the temp
        // file itself (no link followed) and fails with EEXIST when `target` exists.
        check(unsafe {
            libc::linkat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
                0,
            )
        })?;
        return Ok(meta);
    }
    // SAFETY: `dir` is open and both names are NUL-terminated.
    check(unsafe {
        libc::renameat(
            dir.as_raw_fd(),
            temp.as_ptr(),
            dir.as_raw_fd(),
            target.as_ptr(),
        )
    })?;
    Ok(meta)
}

/// Removes the regular file (or link) `name` in `dir`, never a directory; a missing name is
/// not an error.
pub(crate) fn remove_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let cname = cstring(name)?;
    // SAFETY: `dir` is open and `cname` is NUL-terminated; flags 0 removes non-directories.
    match check(unsafe { libc::unlinkat(dir.as_raw_fd(), cname.as_ptr(), 0) }) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// Removes the directory `name` in `dir` when it is empty (`unlinkat(AT_REMOVEDIR)`, which
/// never follows a link); a missing name is not an error, a directory with entries is.
pub(crate) fn remove_empty_dir_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let cname = cstring(name)?;
    // SAFETY: `dir` is open and `cname` is NUL-terminated.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), cname.as_ptr(), libc::AT_REMOVEDIR) };
    match check(rc) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// The target of the symbolic link `name` in `dir` (`readlinkat`: the link itself, never a
/// link on the way to it).
pub(crate) fn read_link_at(dir: &OwnedFd, name: &OsStr) -> io::Result<OsString> {
    let cname = cstring(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `dir` is open, `cname` is NUL-terminated and `buf` has `buf.len()` bytes.
    let len = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let len = usize::try_from(len).map_err(|_| io::Error::last_os_error())?;
    if len >= buf.len() {
        return Err(io::Error::other("the link's target is too long"));
    }
    buf.truncate(len);
    Ok(OsStr::from_bytes(&buf).to_os_string())
}

/// Makes the symbolic link `name` in `dir` pointing at `target` (`symlinkat`; an existing name
/// fails with `AlreadyExists`).
pub(crate) fn symlink_at(dir: &OwnedFd, name: &OsStr, target: &OsStr) -> io::Result<()> {
    let cname = cstring(name)?;
    let ctarget = cstring(target)?;
    // SAFETY: `dir` is open and both strings are NUL-terminated.
    let rc = unsafe { libc::symlinkat(ctarget.as_ptr(), dir.as_raw_fd(), cname.as_ptr()) };
    check(rc).map(drop)
}

/// True for names `write`/`edit` give their temp files: [`TEMP_PREFIX`] and exactly 32
/// lowercase hex digits.
pub fn is_temp_name(name: &OsStr) -> bool {
    let Some(rest) = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes()) else {
        return false;
    };
    rest.len() == 32
        && rest
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Removes the temp files `write`/`edit` leave when the process dies between creating and
/// renaming them, from the directory `relative` below `root` (opened without following links,
/// so a swapped directory is skipped, never followed). Only regular files named as
/// [`is_temp_name`] says are removed. Returns the names removed.
pub fn remove_leftover_temps(root: &Path, relative: &Path) -> io::Result<Vec<OsString>> {
    let root = open_root(root)?;
    let dir = open_dir_beneath(&root, relative, false)?;
    // A readable descriptor of the same directory, for listing it.
    let dot = cstring(OsStr::new("."))?;
    // SAFETY: `dir` is open and `dot` is NUL-terminated.
    let rc = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            dot.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let listing = owned(check(rc)?);
    let names = list_names(listing)?;
    let mut removed = Vec::new();
    for name in names.into_iter().filter(|n| is_temp_name(n)) {
        let cname = cstring(&name)?;
        match lstat_at(dir.as_fd(), &cname) {
            Ok(st) if is_kind(&st, libc::S_IFREG) => {}
            _ => continue,
        }
        // SAFETY: `dir` is open and `cname` is NUL-terminated; flags 0 removes files only.
        if check(unsafe { libc::unlinkat(dir.as_raw_fd(), cname.as_ptr(), 0) }).is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}

/// The entry names of an open directory (without `.` and `..`).
pub(crate) fn list_names(fd: OwnedFd) -> io::Result<Vec<OsString>> {
    let raw = fd.as_raw_fd();
    // SAFETY: `raw` is an open directory descriptor; on success `fdopendir` owns it, so
    // ownership is released from `fd` first.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fd);
    let mut names = Vec::new();
    loop {
        // SAFETY: `dirp` is a valid stream until `closedir` below.
        let entry = unsafe { libc::readdir(dirp) };
        if entry.is_null() {
            break;
        }
        // SAFETY: `d_name` of a returned entry is a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(OsStr::from_bytes(bytes).to_os_string());
        }
    }
    // SAFETY: `dirp` is valid and closed exactly once (it closes the descriptor too).
    unsafe { libc::closedir(dirp) };
    Ok(names)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn both_walks_refuse_links_and_create_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::create_dir(root.join("elsewhere")).unwrap();
        symlink(root.join("elsewhere"), root.join("real/link")).unwrap();
        std::fs::write(root.join("real/file"), "x").unwrap();
        let fd = open_root(&root).unwrap();
        for walk_only in [false, true] {
            let err = walk(&fd, Path::new("real/link/x"), true, walk_only).unwrap_err();
            assert!(is_swapped(&err), "walk_only={walk_only}: {err}");
            assert!(!root.join("elsewhere/x").exists());
            let err = walk(&fd, Path::new("real/file"), false, walk_only).unwrap_err();
            assert!(!is_swapped(&err), "a file is not a swap: {err}");
            let made = format!("made{walk_only}/a/b");
            walk(&fd, Path::new(&made), true, walk_only).unwrap();
            assert!(root.join(&made).is_dir());
            let err = walk(&fd, Path::new("../x"), true, walk_only).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn files_are_read_and_replaced_relative_to_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("f"), "old").unwrap();
        symlink(root.join("f"), root.join("l")).unwrap();
        let fd = open_root(&root).unwrap();
        let Existing::File(content, meta) = read_file_at(&fd, OsStr::new("f")).unwrap() else {
            panic!("f is a file");
        };
        assert_eq!(content, b"old");
        assert!(matches!(
            read_file_at(&fd, OsStr::new("missing")).unwrap(),
            Existing::Missing
        ));
        assert!(is_swapped(
            &read_file_at(&fd, OsStr::new("l")).err().unwrap()
        ));
        replace_file_at(
            &fd,
            OsStr::new("f"),
            b"new",
            Some(meta.permissions().mode()),
        )
        .unwrap();
        assert_eq!(std::fs::read(root.join("f")).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "no temp file left");
    }

    #[test]
    fn only_exact_temp_names_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let leftover = format!("{TEMP_PREFIX}{}", "0123456789abcdef0123456789abcdef");
        let keep = [
            format!("{TEMP_PREFIX}0123"),
            format!("{TEMP_PREFIX}{}", "0123456789ABCDEF0123456789ABCDEF"),
            format!("x{leftover}"),
            "notes.txt".to_string(),
        ];
        std::fs::write(root.join("sub").join(&leftover), "partial").unwrap();
        for name in &keep {
            std::fs::write(root.join("sub").join(name), "keep").unwrap();
        }
        let dir_named_like_temp = format!("{TEMP_PREFIX}{}", "f".repeat(32));
        std::fs::create_dir(root.join("sub").join(&dir_named_like_temp)).unwrap();
        let removed = remove_leftover_temps(&root, Path::new("sub")).unwrap();
        assert_eq!(removed, [OsString::from(&leftover)]);
        for name in &keep {
            assert!(root.join("sub").join(name).exists(), "{name}");
        }
        assert!(root.join("sub").join(&dir_named_like_temp).is_dir());
    }
}
