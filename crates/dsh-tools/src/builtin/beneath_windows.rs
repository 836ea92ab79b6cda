//! `beneath` for Windows (used in place of `beneath.rs` there, same interface): file access
//! beneath a writable root by path.
//!
//! Windows has no `openat`: the "directory handle" is the directory's path, and each step
//! checks with `symlink_metadata` that no component below the root is a symbolic link or
//! junction (a reparse point) before it is used; files are opened with
//! `FILE_FLAG_OPEN_REPARSE_POINT` so a link in the last component is opened, not followed.
//! Limit (docs/SECURITY.md, "Platforms"): between that check and the write, a concurrent
//! process can swap a directory for a junction and redirect the write; on Linux and macOS the
//! descriptor walk of `beneath.rs` closes that window.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use crate::os::{OpenOptionsExt, O_NOFOLLOW};

/// Prefix of the temp files `write`/`edit` create beside their target; the rest of the name is
/// 32 lowercase hex digits.
pub const TEMP_PREFIX: &str = ".dsh-tmp-";

/// A directory beneath a writable root, by path (see the module comment). The name matches
/// the descriptor type of `beneath.rs`, so the callers are the same on every platform.
#[derive(Debug)]
pub(crate) struct OwnedFd(PathBuf);

/// An error meaning a component turned into a link after the path was checked.
fn loop_error(path: &Path) -> io::Error {
    io::Error::other(format!("{} is a symbolic link or junction", path.display()))
}

/// True when `err` means a path component turned into a link after the path was checked.
pub(crate) fn is_swapped(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::Other
        && err.to_string().ends_with("is a symbolic link or junction")
}

/// The writable root `root` (canonical, absolute), checked to be a directory.
pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    if !std::fs::metadata(root)?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    Ok(OwnedFd(root.to_path_buf()))
}

/// The directory `relative` (plain names only) below `root`, each component checked not to be
/// a link; with `create`, missing directories are made.
pub(crate) fn open_dir_beneath(
    root: &OwnedFd,
    relative: &Path,
    create: bool,
) -> io::Result<OwnedFd> {
    let mut current = root.0.clone();
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
        current.push(name);
        let meta = match std::fs::symlink_metadata(&current) {
            Err(err) if create && err.kind() == io::ErrorKind::NotFound => {
                if let Err(err) = std::fs::create_dir(&current) {
                    if err.kind() != io::ErrorKind::AlreadyExists {
                        return Err(err);
                    }
                }
                std::fs::symlink_metadata(&current)?
            }
            other => other?,
        };
        if meta.file_type().is_symlink() {
            return Err(loop_error(&current));
        }
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", current.display()),
            ));
        }
    }
    Ok(OwnedFd(current))
}

/// What a name in a directory is, as far as `write`/`edit` care.
pub(crate) enum Existing {
    /// Nothing by that name.
    Missing,
    /// A regular file: its content and metadata.
    File(Vec<u8>, Metadata),
    /// A directory.
    Directory,
    /// Anything else.
    Special,
}

/// Reads the regular file `name` in `dir` without following a link.
pub(crate) fn read_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Existing> {
    let path = dir.0.join(name);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(err) => return Err(err),
    };
    if meta.file_type().is_symlink() {
        return Err(loop_error(&path));
    }
    if meta.is_dir() {
        return Ok(Existing::Directory);
    }
    if !meta.is_file() {
        return Ok(Existing::Special);
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(O_NOFOLLOW)
        .open(&path)?;
    let meta = file.metadata()?;
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

/// Replaces `name` in `dir` with `content`: a new temp file beside it, written and synced, then
/// renamed over `name`. The mode is ignored (Windows files inherit their folder's ACL). The
/// temp file is removed when any step fails.
pub(crate) fn replace_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
) -> io::Result<Metadata> {
    let _ = mode;
    let temp = dir.0.join(temp_name());
    let target = dir.0.join(name);
    let result = (|| {
        let mut file: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(content)?;
        file.sync_all()?;
        let meta = file.metadata()?;
        drop(file);
        std::fs::rename(&temp, &target)?;
        Ok(meta)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Like [`replace_file_at`], but `name` must not exist: the temp file is hard-linked to `name`
/// (which fails with `AlreadyExists` when it exists) and then removed.
pub(crate) fn create_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
) -> io::Result<Metadata> {
    let _ = mode;
    let temp = dir.0.join(temp_name());
    let result = (|| {
        let mut file: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(content)?;
        file.sync_all()?;
        let meta = file.metadata()?;
        drop(file);
        std::fs::hard_link(&temp, dir.0.join(name))?;
        Ok(meta)
    })();
    let _ = std::fs::remove_file(&temp);
    result
}

/// Removes the file `name` in `dir`, never a directory; a missing name is not an error.
pub(crate) fn remove_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    match std::fs::remove_file(dir.0.join(name)) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes the directory `name` in `dir` when it is empty; a missing name is not an error.
pub(crate) fn remove_empty_dir_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    match std::fs::remove_dir(dir.0.join(name)) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Symbolic links are not read on Windows (checkpoints do not record them there).
pub(crate) fn read_link_at(_dir: &OwnedFd, _name: &OsStr) -> io::Result<OsString> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "symbolic links are not recorded on Windows",
    ))
}

/// Symbolic links are not made on Windows (checkpoints do not record them there).
pub(crate) fn symlink_at(_dir: &OwnedFd, _name: &OsStr, _target: &OsStr) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "symbolic links are not restored on Windows",
    ))
}

/// True for names `write`/`edit` give their temp files: [`TEMP_PREFIX`] and exactly 32
/// lowercase hex digits.
pub fn is_temp_name(name: &OsStr) -> bool {
    let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
        return false;
    };
    rest.len() == 32
        && rest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Removes the temp files `write`/`edit` leave when the process dies between creating and
/// renaming them, from the directory `relative` below `root` (a linked directory is skipped,
/// never followed). Only regular files named as [`is_temp_name`] says are removed.
pub fn remove_leftover_temps(root: &Path, relative: &Path) -> io::Result<Vec<OsString>> {
    let root = open_root(root)?;
    let dir = open_dir_beneath(&root, relative, false)?;
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(&dir.0)? {
        let entry = entry?;
        let name = entry.file_name();
        if !is_temp_name(&name) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_file() && std::fs::remove_file(entry.path()).is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}
