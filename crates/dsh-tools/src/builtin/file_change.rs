//! What `write` and `edit` share: the observation check, atomic replacement (through
//! directory descriptors beneath the writable root, see `beneath`), and the diff summary of a
//! change.

use crate::gate::Access;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write;
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use similar::{ChangeTag, TextDiff};

#[cfg(windows)]
use crate::builtin::beneath::OwnedFd;
use crate::builtin::beneath::{
    is_swapped, open_dir_beneath, open_root, read_file_at, replace_file_at, Existing,
};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::observe::Observation;
use crate::os::{OpenOptionsExt, PermissionsExt};
use crate::paths::temp_sibling;
use crate::snapshot::{FileSnapshot, SNAPSHOT_DATA_KEY};

/// Most diff lines shown in a result.
const MAX_DIFF_LINES: usize = 60;

/// The state of a write target before the change.
pub(crate) struct Target {
    /// Real path that will be written.
    pub real: PathBuf,
    /// Path as requested, made absolute (what results show).
    pub shown: PathBuf,
    /// Current content and metadata, when the file exists.
    pub existing: Option<(Vec<u8>, std::fs::Metadata)>,
    /// How the file is reached.
    place: Place,
}

/// How a target is reached.
enum Place {
    /// By path (`danger-full-access`: no root to stay beneath).
    Path,
    /// Through descriptors beneath a writable root (`workspace-write`).
    Beneath {
        root: PathBuf,
        /// The real path's directory, relative to `root`.
        dir: PathBuf,
        /// The file's name in that directory.
        name: OsString,
        /// That directory, opened while preparing when it existed: the content was read
        /// through it and the new content is written through it.
        opened: Option<OwnedFd>,
    },
}

/// The error for a path whose directories changed between the check and the write.
fn changed(shown: &Path) -> ToolError {
    ToolError::new(
        ToolErrorCode::Io,
        format!(
            "the path changed while writing {}: a directory or file on it was replaced (for example by a symbolic link) after the path was checked, so nothing was written; retry",
            shown.display()
        ),
    )
}

/// Resolves `file_path`, applies the permission preset, loads the current content, and checks
/// the observation rules for an existing file.
pub(crate) fn prepare(ctx: &ToolContext, file_path: &str) -> Result<Target, ToolError> {
    if file_path.is_empty() {
        return Err(ToolError::invalid_args("file_path must not be empty"));
    }
    let shown = ctx.absolute(file_path);
    let real = ctx.check_writable(file_path)?;
    // `danger-full-access` has no writable root: its writes go beneath `/`, through the same
    // descriptor walk, so a link put on the checked path is never followed (the file gate).
    let root = ctx
        .write_root(&real)
        .or_else(|| cfg!(unix).then(|| PathBuf::from("/")));
    let (existing, place) = match root {
        None => (existing_by_path(&real, &shown)?, Place::Path),
        Some(root) => existing_beneath(root, &real, &shown)?,
    };
    if let Some((content, meta)) = &existing {
        // A hard link to a denied file is neither shown (the diff holds the old content) nor
        // replaced (the file gate, docs/SECURITY.md).
        ctx.gate().check_identity(&shown, meta)?;
        ctx.gate().check_access(&shown, meta, Access::Write)?;
        ctx.gate().check_folders(&real, None)?;
        ctx.observations().check_current(&real, content)?;
    } else if let Some(parent) = real.parent() {
        // A new file: as root, only in a folder the sandboxed commands could write in too.
        if let Ok(meta) = std::fs::metadata(parent) {
            ctx.gate().check_access(parent, &meta, Access::CreateIn)?;
            ctx.gate().check_folders(parent, None)?;
        }
    }
    Ok(Target {
        real,
        shown,
        existing,
        place,
    })
}

fn not_a_file(shown: &Path, directory: bool) -> ToolError {
    let what = if directory {
        "is a directory"
    } else {
        "is not a regular file"
    };
    ToolError::new(
        ToolErrorCode::NotAFile,
        format!("{} {what}", shown.display()),
    )
}

fn existing_by_path(
    real: &Path,
    shown: &Path,
) -> Result<Option<(Vec<u8>, std::fs::Metadata)>, ToolError> {
    match std::fs::metadata(real) {
        Ok(meta) if meta.is_dir() => Err(not_a_file(shown, true)),
        Ok(meta) if !meta.is_file() => Err(not_a_file(shown, false)),
        Ok(meta) => {
            let content =
                std::fs::read(real).map_err(|err| ToolError::io("cannot read", shown, &err))?;
            Ok(Some((content, meta)))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ToolError::io("cannot inspect", shown, &err)),
    }
}

/// Opens the target's directory beneath `root` (when it exists) and reads the file through it.
#[allow(clippy::type_complexity)]
fn existing_beneath(
    root: PathBuf,
    real: &Path,
    shown: &Path,
) -> Result<(Option<(Vec<u8>, std::fs::Metadata)>, Place), ToolError> {
    let relative = real.strip_prefix(&root).unwrap_or(Path::new(""));
    let Some(name) = relative.file_name().map(ToOwned::to_owned) else {
        // The root itself.
        return Err(not_a_file(shown, true));
    };
    let dir = relative.parent().unwrap_or(Path::new("")).to_path_buf();
    let root_fd = open_root(&root).map_err(|err| ToolError::io("cannot open", &root, &err))?;
    let opened = match open_dir_beneath(&root_fd, &dir, false) {
        Ok(fd) => Some(fd),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) if is_swapped(&err) => return Err(changed(shown)),
        Err(err) => return Err(ToolError::io("cannot open the directory of", shown, &err)),
    };
    let existing = match &opened {
        None => None,
        Some(fd) => match read_file_at(fd, &name) {
            Ok(Existing::Missing) => None,
            Ok(Existing::File(content, meta)) => Some((content, meta)),
            Ok(Existing::Directory) => return Err(not_a_file(shown, true)),
            Ok(Existing::Special) => return Err(not_a_file(shown, false)),
            Err(err) if is_swapped(&err) => return Err(changed(shown)),
            Err(err) => return Err(ToolError::io("cannot read", shown, &err)),
        },
    };
    Ok((
        existing,
        Place::Beneath {
            root,
            dir,
            name,
            opened,
        },
    ))
}

/// Replaces `target.real` with `content` atomically: a new file in the same directory, fully
/// written and synced, then renamed over the target, so readers see the old or the new content
/// and never a mix. An existing file keeps its permission bits; a new one gets `0666 & !umask`.
/// Missing parent directories are created. Under `workspace-write` every step goes through
/// directory descriptors beneath the writable root without following links, so a directory
/// swapped for a symlink after the check fails the write instead of redirecting it. The
/// observation is updated to the new content.
///
/// Before anything is written, the file's current content (or its absence) is kept in the
/// session's snapshot folder (docs/tools.md, "Snapshots"); the returned record goes into the
/// result data so `/undo` and `/diff` find it in the log. No snapshot, no write.
pub(crate) fn commit(
    ctx: &ToolContext,
    target: &Target,
    content: &[u8],
) -> Result<FileSnapshot, ToolError> {
    let shown = &target.shown;
    let before = target.existing.as_ref().map(|(bytes, _)| bytes.as_slice());
    let snapshot = ctx
        .snapshots()
        .take(&target.real, before, content)
        .map_err(|err| {
            ToolError::new(
                ToolErrorCode::Io,
                format!(
                    "cannot keep the snapshot of {} in {} ({err}), so nothing was written: /undo could not revert it; free space or fix that folder and retry",
                    shown.display(),
                    ctx.snapshots().path().display()
                ),
            )
        })?;
    let mode = target
        .existing
        .as_ref()
        .map(|(_, meta)| meta.permissions().mode());
    let meta = match &target.place {
        Place::Path => commit_by_path(target, content)?,
        Place::Beneath {
            root,
            dir,
            name,
            opened,
        } => {
            let made;
            let dir_fd = match opened {
                Some(fd) => fd,
                None => {
                    let root_fd =
                        open_root(root).map_err(|err| ToolError::io("cannot open", root, &err))?;
                    made = open_dir_beneath(&root_fd, dir, true).map_err(|err| {
                        if is_swapped(&err) {
                            changed(shown)
                        } else {
                            ToolError::io("cannot create the directory of", shown, &err)
                        }
                    })?;
                    &made
                }
            };
            replace_file_at(dir_fd, name, content, mode).map_err(|err| {
                if is_swapped(&err) {
                    changed(shown)
                } else {
                    ToolError::io("cannot write", shown, &err)
                }
            })?
        }
    };
    ctx.observations()
        .record(&target.real, Observation::of(content, Some(&meta)));
    Ok(snapshot)
}

/// The plain-path replacement of `danger-full-access`.
fn commit_by_path(target: &Target, content: &[u8]) -> Result<std::fs::Metadata, ToolError> {
    let shown = &target.shown;
    if let Some(parent) = target.real.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|err| ToolError::io("cannot create the directory of", shown, &err))?;
    }
    let mode = (target.existing.as_ref()).map(|(_, meta)| meta.permissions().mode() & 0o7777);
    replace_by_path(&target.real, content, mode)
        .map_err(|err| ToolError::io("cannot write", shown, &err))
}

/// Replaces the file at `real` by path: `content` goes into a new temp file beside it (with
/// `mode`, when given), which is synced and renamed over `real`. On failure the temp file is
/// removed. Returns the new file's metadata.
pub(crate) fn replace_by_path(
    real: &Path,
    content: &[u8],
    mode: Option<u32>,
) -> std::io::Result<std::fs::Metadata> {
    let temp = temp_sibling(real);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .custom_flags(crate::os::O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(content)?;
        if let Some(mode) = mode {
            crate::os::set_file_mode(&file, mode)?;
        }
        file.sync_all()?;
        let meta = file.metadata()?;
        drop(file);
        std::fs::rename(&temp, real)?;
        Ok(meta)
    })();
    if written.is_err() {
        // Best effort: the temp file is ours and useless now; if removing it fails too,
        // the original error is the one worth reporting.
        let _ignored = std::fs::remove_file(&temp);
    }
    written
}

/// Line counts and a short unified diff of a change.
pub(crate) struct DiffSummary {
    pub added: usize,
    pub removed: usize,
    /// Unified diff (3 lines of context), at most [`MAX_DIFF_LINES`] lines plus a cut notice.
    pub unified: String,
}

/// Diffs `old` against `new` line by line; `label` names the file in the diff header.
pub(crate) fn diff(old: &str, new: &str, label: &str) -> DiffSummary {
    let (added, removed, full) = line_diff(old, new, label, label);
    let mut unified = String::new();
    let total = full.lines().count();
    for line in full.lines().take(MAX_DIFF_LINES) {
        unified.push_str(line);
        unified.push('\n');
    }
    if total > MAX_DIFF_LINES {
        unified.push_str(&format!(
            "... ({} more diff lines not shown)\n",
            total - MAX_DIFF_LINES
        ));
    }
    DiffSummary {
        added,
        removed,
        unified,
    }
}

/// Lines added and removed from `old` to `new`, and the whole unified diff (3 lines of
/// context) with headers `old_label` and `new_label`.
pub(crate) fn line_diff(
    old: &str,
    new: &str,
    old_label: &str,
    new_label: &str,
) -> (usize, usize, String) {
    let diff = TextDiff::from_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(old_label, new_label)
        .to_string();
    (added, removed, unified)
}

/// Largest combined old + new text copied into structured data; bigger changes carry only the
/// unified diff, so logs do not balloon.
const MAX_DATA_TEXT: usize = 256 * 1024;

/// Structured data for a change: dsh's `meta.diffs` shape (`path`, `oldText`, `newText`; the
/// texts only for changes up to 256 KB), plus line counts and the shown unified diff.
///
/// `data.snapshot` of the result is the [`FileSnapshot`] of the change.
pub(crate) fn change_data(
    label: &str,
    old: Option<&str>,
    new: &str,
    d: &DiffSummary,
    snapshot: &FileSnapshot,
) -> Value {
    let small = old.map_or(0, str::len) + new.len() <= MAX_DATA_TEXT;
    let diffs = if small {
        json!([{"path": label, "oldText": old, "newText": new}])
    } else {
        json!([{"path": label}])
    };
    json!({
        "diffs": diffs,
        "added": d.added,
        "removed": d.removed,
        "created": old.is_none(),
        "unifiedDiff": d.unified,
        SNAPSHOT_DATA_KEY: snapshot.to_value(),
    })
}

/// How `write` and `edit` calls are shown: the file, as a diff.
pub(crate) fn present(name: &str, args: &Value) -> crate::ToolPresentation {
    let path = crate::string_arg(args, "file_path").unwrap_or("?");
    crate::ToolPresentation::new(name)
        .subject(path)
        .kind(crate::ToolKind::Edit)
        .view(crate::ToolView::Diff)
        .location(path)
}

/// Largest arguments (old and new text together) a preview diffs: past it the approval box
/// lists the arguments themselves, all of them, scrollable.
const MAX_PREVIEW_BYTES: usize = 512 * 1024;

/// Longest a preview's diff may search for the smallest change (it runs on the front end's
/// loop while the user waits); past it the diff is still correct, only coarser.
const PREVIEW_DIFF_TIME: std::time::Duration = std::time::Duration::from_millis(50);

/// The diff an `edit` call would make, from its strings: hunks numbered within `old_string`,
/// since the file is not read.
pub(crate) fn preview_edit(args: &Value) -> Option<crate::ChangePreview> {
    let path = crate::string_arg(args, "file_path")?;
    let old = args.get("old_string")?.as_str()?;
    let new = args.get("new_string")?.as_str()?;
    if old.len() + new.len() > MAX_PREVIEW_BYTES {
        return None;
    }
    let every = args.get("replace_all").and_then(Value::as_bool) == Some(true);
    let new_label = if every {
        format!("{path} (at every occurrence)")
    } else {
        path.to_string()
    };
    Some(crate::ChangePreview {
        diff: preview_diff(old, new, path, &new_label),
        covers: vec!["file_path", "old_string", "new_string", "replace_all"],
    })
}

/// The content a `write` call would leave, as a diff adding every line (what the file holds
/// now is not read).
pub(crate) fn preview_write(args: &Value) -> Option<crate::ChangePreview> {
    let path = crate::string_arg(args, "file_path")?;
    let content = args.get("content")?.as_str()?;
    if content.len() > MAX_PREVIEW_BYTES {
        return None;
    }
    let old_label = format!("{path} (its content now is not shown)");
    Some(crate::ChangePreview {
        diff: preview_diff("", content, &old_label, path),
        covers: vec!["file_path", "content"],
    })
}

/// The whole unified diff from `old` to `new` (3 lines of context), its search bounded by
/// [`PREVIEW_DIFF_TIME`].
fn preview_diff(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    TextDiff::configure()
        .timeout(PREVIEW_DIFF_TIME)
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_label, new_label)
        .to_string()
}

/// `+added -removed` of a change (`new file` first for a created one).
pub(crate) fn summarize(result: &crate::ResultFacts<'_>) -> Option<crate::ResultSummary> {
    if result.error.is_some() {
        return None;
    }
    let added = result.meta_u64("added").unwrap_or(0);
    let removed = result.meta_u64("removed").unwrap_or(0);
    let created = result.meta_value("created").and_then(Value::as_bool) == Some(true);
    Some(crate::ResultSummary::new(format!(
        "{}+{added} -{removed}",
        if created { "new file " } else { "" }
    )))
}
