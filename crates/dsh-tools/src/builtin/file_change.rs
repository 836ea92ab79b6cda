//! What `write` and `edit` share: the observation check, atomic replacement, and the diff
//! summary of a change.

use std::fs::{OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use similar::{ChangeTag, TextDiff};

use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::observe::Observation;
use crate::paths::temp_sibling;

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
}

/// Resolves `file_path`, applies the permission preset, loads the current content, and checks
/// the observation rules for an existing file.
pub(crate) fn prepare(ctx: &ToolContext, file_path: &str) -> Result<Target, ToolError> {
    if file_path.is_empty() {
        return Err(ToolError::invalid_args("file_path must not be empty"));
    }
    let shown = ctx.absolute(file_path);
    let real = ctx.check_writable(file_path)?;
    let existing = match std::fs::metadata(&real) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::new(
                ToolErrorCode::NotAFile,
                format!("{} is a directory", shown.display()),
            ))
        }
        Ok(meta) if !meta.is_file() => {
            return Err(ToolError::new(
                ToolErrorCode::NotAFile,
                format!("{} is not a regular file", shown.display()),
            ))
        }
        Ok(meta) => {
            let content =
                std::fs::read(&real).map_err(|err| ToolError::io("cannot read", &shown, &err))?;
            ctx.observations().check_current(&real, &content)?;
            Some((content, meta))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(ToolError::io("cannot inspect", &shown, &err)),
    };
    Ok(Target {
        real,
        shown,
        existing,
    })
}

/// Replaces `target.real` with `content` atomically: a new file in the same directory, fully
/// written and synced, then renamed over the target, so readers see the old or the new content
/// and never a mix. An existing file keeps its permission bits; a new one gets `0666 & !umask`.
/// Missing parent directories are created. The observation is updated to the new content.
pub(crate) fn commit(ctx: &ToolContext, target: &Target, content: &[u8]) -> Result<(), ToolError> {
    let shown = &target.shown;
    if let Some(parent) = target.real.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|err| ToolError::io("cannot create the directory of", shown, &err))?;
    }
    let temp = temp_sibling(&target.real);
    let result = write_and_rename(&temp, &target.real, content, target.existing.as_ref());
    if let Err(err) = result {
        // Best effort: the temp file is ours and useless now; if removing it fails too, the
        // original error is the one worth reporting.
        let _ignored = std::fs::remove_file(&temp);
        return Err(ToolError::io("cannot write", shown, &err));
    }
    let meta = std::fs::metadata(&target.real).ok();
    ctx.observations()
        .record(&target.real, Observation::of(content, meta.as_ref()));
    Ok(())
}

fn write_and_rename(
    temp: &Path,
    real: &Path,
    content: &[u8],
    existing: Option<&(Vec<u8>, std::fs::Metadata)>,
) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW)
        .open(temp)?;
    file.write_all(content)?;
    if let Some((_, meta)) = existing {
        file.set_permissions(Permissions::from_mode(meta.permissions().mode() & 0o7777))?;
    }
    file.sync_all()?;
    drop(file);
    std::fs::rename(temp, real)
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
    let diff = TextDiff::from_lines(old, new);
    let mut added = 0;
    let mut removed = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let full = diff
        .unified_diff()
        .context_radius(3)
        .header(label, label)
        .to_string();
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

/// Largest combined old + new text copied into structured data; bigger changes carry only the
/// unified diff, so logs do not balloon.
const MAX_DATA_TEXT: usize = 256 * 1024;

/// Structured data for a change: dsh's `meta.diffs` shape (`path`, `oldText`, `newText`; the
/// texts only for changes up to 256 KB), plus line counts and the shown unified diff.
pub(crate) fn change_data(label: &str, old: Option<&str>, new: &str, d: &DiffSummary) -> Value {
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
    })
}
