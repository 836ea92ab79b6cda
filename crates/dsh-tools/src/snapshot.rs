//! File snapshots for `/undo` and `/diff` (docs/tools.md, "Snapshots").
//!
//! Before `write` or `edit` replaces a file, the file's previous content (or the fact that it did
//! not exist) is kept in a private folder of the session, and the change is described by a
//! [`FileSnapshot`] in the tool result's structured data (`data.snapshot`, logged with the
//! result as `tool/result.meta`). A front end rebuilds the changes of a turn from the log and
//! hands them to [`plan_undo`], which refuses when a file changed since the tool wrote it, and
//! [`apply_undo`], which puts the old contents back and deletes the files the turn created.
//! [`session_diff`] diffs the first recorded content of each file against what is on disk now.
//!
//! `bash` is not covered: a shell command can change anything, and nothing records it.

#[cfg(windows)]
use crate::builtin::beneath::OwnedFd;
use crate::builtin::beneath::{
    is_swapped, open_dir_beneath, open_root, read_file_at, remove_file_at, replace_file_at,
    Existing,
};
use crate::os::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Key of the snapshot in a `write`/`edit` result's data (`tool/result.meta.snapshot`).
pub const SNAPSHOT_DATA_KEY: &str = "snapshot";

/// A private folder of the session holding the previous contents of changed files. Created
/// with mode `0700` when the first snapshot is taken; each snapshot file is created fresh
/// (`O_EXCL|O_NOFOLLOW`) with mode `0600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDir {
    path: PathBuf,
}

impl SnapshotDir {
    /// Snapshots will go to `path` (not created until the first one is taken).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the content of `real` before a change: `before` is its content, `None` when the
    /// file does not exist yet. `after` is what the tool is about to write. Returns the record
    /// the tool puts into its result data.
    pub fn take(
        &self,
        real: &Path,
        before: Option<&[u8]>,
        after: &[u8],
    ) -> io::Result<FileSnapshot> {
        let before = match before {
            None => None,
            Some(content) => Some(self.store(content)?),
        };
        Ok(FileSnapshot {
            path: real.to_path_buf(),
            before,
            after_sha256: sha256_hex(after),
        })
    }

    fn store(&self, content: &[u8]) -> io::Result<PathBuf> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)?;
        let meta = std::fs::symlink_metadata(&self.path)?;
        if !meta.is_dir() {
            return Err(io::Error::other(format!(
                "snapshot folder {} is not a directory",
                self.path.display()
            )));
        }
        crate::os::set_path_mode(&self.path, 0o700)?;
        let name = format!("{}.before", uuid::Uuid::new_v4().simple());
        let path = self.path.join(name);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(crate::os::O_NOFOLLOW)
            .open(&path)?;
        file.write_all(content)?;
        file.sync_all()?;
        Ok(path)
    }
}

/// One file change made by `write` or `edit`: which file, where its previous content is kept
/// (`None`: the change created the file) and the SHA-256 of the content written, which tells
/// whether the file changed again since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSnapshot {
    /// The real path that was written.
    pub path: PathBuf,
    /// The snapshot file with the previous content; `None` when the file did not exist.
    pub before: Option<PathBuf>,
    /// Lowercase hex SHA-256 of the content the tool wrote.
    pub after_sha256: String,
}

impl FileSnapshot {
    /// The snapshot recorded in a tool result's data (`data.snapshot`), if any.
    pub fn from_data(data: &Value) -> Option<Self> {
        serde_json::from_value(data.get(SNAPSHOT_DATA_KEY)?.clone()).ok()
    }

    /// This snapshot as JSON, for the result data.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::checkpoint::hex(&crate::checkpoint::sha256(bytes))
}

/// One step of an undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UndoStep {
    /// Put the content of `from` (a snapshot file) back into `path`.
    Restore {
        /// The file to restore.
        path: PathBuf,
        /// The snapshot with its content before the turn.
        from: PathBuf,
    },
    /// Delete `path`: the turn created it.
    Delete {
        /// The file to delete.
        path: PathBuf,
    },
}

impl UndoStep {
    /// The file this step changes.
    pub fn path(&self) -> &Path {
        match self {
            UndoStep::Restore { path, .. } | UndoStep::Delete { path } => path,
        }
    }
}

/// A file an undo refuses to touch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoConflict {
    /// The file.
    pub path: PathBuf,
    /// What changed since the tool wrote it.
    pub reason: String,
}

/// What the current content of `path` is, read without following a symbolic link.
enum Current {
    Missing,
    File(Vec<u8>),
    Other(&'static str),
}

/// The folder of `path` opened without following any link from the file system root down
/// (the file gate's walk: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` per component, an
/// `O_NOFOLLOW` walk elsewhere), and the file's name in it. A component that is a link now (put
/// on the recorded path since, e.g. by a `bash` call) fails the walk: an undo writes, deletes and
/// reads only where the tool wrote, through that descriptor, and nowhere else.
fn open_parent(path: &Path) -> io::Result<(OwnedFd, OsString)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("the path has no file name"))?
        .to_os_string();
    let parent = path
        .parent()
        .ok_or_else(|| io::Error::other("the path has no parent folder"))?;
    let mut root = PathBuf::new();
    let mut relative = PathBuf::new();
    for component in parent.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => root.push(component),
            Component::Normal(part) => relative.push(part),
            Component::CurDir | Component::ParentDir => {
                return Err(io::Error::other("the recorded path is not a real path"))
            }
        }
    }
    let root_fd = open_root(&root)?;
    let dir = open_dir_beneath(&root_fd, &relative, false).map_err(|err| {
        if is_swapped(&err) {
            io::Error::other(
                "its folder is no longer the real folder recorded (a symbolic link was put on the path)",
            )
        } else {
            err
        }
    })?;
    Ok((dir, name))
}

fn read_current(path: &Path) -> io::Result<Current> {
    let (dir, name) = match open_parent(path) {
        Ok(opened) => opened,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Current::Missing),
        Err(err) => return Err(err),
    };
    match read_file_at(&dir, &name) {
        Ok(Existing::Missing) => Ok(Current::Missing),
        Ok(Existing::File(content, _)) => Ok(Current::File(content)),
        Ok(Existing::Directory) => Ok(Current::Other("is now a directory")),
        Ok(Existing::Special) => Ok(Current::Other("is not a regular file")),
        Err(err) if is_swapped(&err) => Ok(Current::Other("is now a symbolic link")),
        Err(err) => Err(err),
    }
}

/// The steps that revert `changes` (the file changes of one turn, in the order they were made),
/// or the files that changed since the turn wrote them (by another tool call, `bash`, an editor).
/// For each file the first change gives the content to go back to and the last change the
/// content that must still be there.
pub fn plan_undo(changes: &[FileSnapshot]) -> Result<Vec<UndoStep>, Vec<UndoConflict>> {
    let mut order: Vec<&Path> = Vec::new();
    let mut first: HashMap<&Path, &FileSnapshot> = HashMap::new();
    let mut last: HashMap<&Path, &FileSnapshot> = HashMap::new();
    for change in changes {
        let path = change.path.as_path();
        if !first.contains_key(path) {
            order.push(path);
            first.insert(path, change);
        }
        last.insert(path, change);
    }
    let mut steps = Vec::new();
    let mut conflicts = Vec::new();
    for path in order {
        let (Some(first), Some(last)) = (first.get(path), last.get(path)) else {
            continue;
        };
        let conflict = |reason: String| UndoConflict {
            path: path.to_path_buf(),
            reason,
        };
        match read_current(path) {
            Ok(Current::Missing) => conflicts.push(conflict("was deleted since".into())),
            Ok(Current::Other(what)) => conflicts.push(conflict(what.into())),
            Ok(Current::File(content)) if sha256_hex(&content) != last.after_sha256 => {
                conflicts.push(conflict("was changed since".into()))
            }
            Ok(Current::File(_)) => {}
            Err(err) => conflicts.push(conflict(format!("cannot be read: {err}"))),
        }
        match &first.before {
            None => steps.push(UndoStep::Delete {
                path: path.to_path_buf(),
            }),
            Some(from) if from.is_file() => steps.push(UndoStep::Restore {
                path: path.to_path_buf(),
                from: from.clone(),
            }),
            Some(from) => conflicts.push(conflict(format!(
                "has no snapshot any more ({} is missing)",
                from.display()
            ))),
        }
    }
    if conflicts.is_empty() {
        Ok(steps)
    } else {
        Err(conflicts)
    }
}

/// Carries out `steps` (from [`plan_undo`]). Each file is restored atomically (a new file in
/// the same folder renamed over it, keeping the current permission bits) or deleted. Returns
/// the files undone; the first failure stops it and says which file and why (the files before
/// it are already undone).
pub fn apply_undo(steps: &[UndoStep]) -> Result<Vec<PathBuf>, (Vec<PathBuf>, String)> {
    let mut done = Vec::new();
    for step in steps {
        let result = match step {
            UndoStep::Delete { path } => {
                open_parent(path).and_then(|(dir, name)| remove_file_at(&dir, &name))
            }
            UndoStep::Restore { path, from } => restore(path, from),
        };
        match result {
            Ok(()) => done.push(step.path().to_path_buf()),
            Err(err) => {
                let message = format!("cannot undo {}: {err}", step.path().display());
                return Err((done, message));
            }
        }
    }
    Ok(done)
}

/// Puts the snapshot `from` back into `path`: a new file in the folder opened by
/// [`open_parent`], renamed over the target relative to that descriptor (`renameat`), keeping
/// the current permission bits.
fn restore(path: &Path, from: &Path) -> io::Result<()> {
    let (dir, name) = open_parent(path)?;
    let content = std::fs::read(from)?;
    let mode = match read_file_at(&dir, &name)? {
        Existing::File(_, meta) => Some(meta.permissions().mode() & 0o7777),
        Existing::Missing => None,
        Existing::Directory | Existing::Special => {
            return Err(io::Error::other("it is no longer a regular file"))
        }
    };
    replace_file_at(&dir, &name, &content, mode).map(drop)
}

/// The session's change to one file, for `/diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// The file.
    pub path: PathBuf,
    /// Unified diff (3 lines of context) from the first recorded content to the current one;
    /// empty when they are equal.
    pub unified: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// A note instead of (or next to) the diff: `new file`, `deleted`, `binary`...
    pub note: Option<String>,
}

impl FileDiff {
    /// A file whose diff cannot be shown, with the reason.
    fn unshown(path: &Path, why: String) -> FileDiff {
        FileDiff {
            path: path.to_path_buf(),
            unified: String::new(),
            added: 0,
            removed: 0,
            note: Some(why),
        }
    }
}

/// For every file in `changes` (all the session's snapshots, in order): its content before
/// the session first changed it, diffed against its content now. Files back to their first
/// content are left out.
pub fn session_diff(changes: &[FileSnapshot], label_base: &Path) -> Vec<FileDiff> {
    let mut order: Vec<&Path> = Vec::new();
    let mut first: HashMap<&Path, &FileSnapshot> = HashMap::new();
    for change in changes {
        if !first.contains_key(change.path.as_path()) {
            order.push(&change.path);
            first.insert(&change.path, change);
        }
    }
    let mut out = Vec::new();
    for path in order {
        let Some(first) = first.get(path) else {
            continue;
        };
        let old = match &first.before {
            None => None,
            Some(from) => match std::fs::read(from) {
                Ok(content) => Some(content),
                Err(err) => {
                    out.push(FileDiff::unshown(
                        path,
                        format!("snapshot unreadable: {err}"),
                    ));
                    continue;
                }
            },
        };
        let new = match read_current(path) {
            Ok(Current::File(content)) => Some(content),
            Ok(Current::Missing) => None,
            Ok(Current::Other(what)) => {
                out.push(FileDiff::unshown(path, what.to_string()));
                continue;
            }
            Err(err) => {
                out.push(FileDiff::unshown(path, format!("cannot be read: {err}")));
                continue;
            }
        };
        if old == new {
            continue;
        }
        let label = path
            .strip_prefix(label_base)
            .unwrap_or(path)
            .display()
            .to_string();
        out.push(file_diff(path, &label, old.as_deref(), new.as_deref()));
    }
    out
}

fn file_diff(path: &Path, label: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> FileDiff {
    let note = match (old, new) {
        (None, _) => Some("new file".to_string()),
        (_, None) => Some("deleted".to_string()),
        _ => None,
    };
    let old_text = old.map(std::str::from_utf8);
    let new_text = new.map(std::str::from_utf8);
    let (Ok(old_text), Ok(new_text)) = (
        old_text.transpose().map(Option::unwrap_or_default),
        new_text.transpose().map(Option::unwrap_or_default),
    ) else {
        return FileDiff::unshown(path, "binary content changed".to_string());
    };
    let old_label = if old.is_some() {
        format!("a/{label}")
    } else {
        "/dev/null".to_string()
    };
    let new_label = if new.is_some() {
        format!("b/{label}")
    } else {
        "/dev/null".to_string()
    };
    let (added, removed, unified) =
        crate::builtin::line_diff(old_text, new_text, &old_label, &new_label);
    FileDiff {
        path: path.to_path_buf(),
        unified,
        added,
        removed,
        note,
    }
}
