//! What `glob` and `grep` share: the search root, the ignore-aware walker, and path patterns.

use dsh_llm::LockExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;

use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::gate::{
    exists_beneath, open_directory, open_file_beneath, unsafe_ignore_file, GateDir, GateError,
    GatePolicy,
};

/// Where a search starts, as the file gate checked and opened it (docs/SECURITY.md, "The file
/// gate"): the path as the model gave it (results are shown under it), its real path (walked),
/// and the open directory every file is opened beneath (`None` when the root is one file).
pub(crate) struct SearchRoot {
    /// As given, made absolute (or the cwd).
    pub(crate) shown: PathBuf,
    /// Its real path: what the walk walks.
    pub(crate) real: PathBuf,
    /// The directory opened without following links; files are opened beneath it.
    pub(crate) dir: Option<GateDir>,
    /// The gate's policy (for entries found during the walk).
    pub(crate) gate: GatePolicy,
}

impl SearchRoot {
    /// `path` of a walked entry shown under the root as the model gave it.
    pub(crate) fn shown_path(&self, walked: &Path) -> PathBuf {
        match walked.strip_prefix(&self.real) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.shown.join(rel),
            _ => self.shown.clone(),
        }
    }

    /// Opens the walked file `walked` through the gate: beneath the root's descriptor, no link
    /// followed, a regular file, not denied and not a hard link to a denied file. `None` when
    /// any of that fails (a search reports what it may read).
    pub(crate) fn open(&self, walked: &Path) -> Option<std::fs::File> {
        if self.gate.denied(walked).is_some() {
            return None;
        }
        let file = match &self.dir {
            Some(dir) => {
                let rel = walked.strip_prefix(&self.real).ok()?;
                open_file_beneath(dir, rel).ok()??
            }
            None => self.gate.open_read(&self.real).ok()?.file,
        };
        let meta = file.metadata().ok()?;
        self.gate
            .check_opened(walked, walked, &meta, Some(&self.real))
            .ok()?;
        Some(file)
    }

    /// True when the walked entry `walked` is still beneath the root's descriptor without a
    /// link on the way (a name listed from a folder swapped for a link meanwhile is dropped).
    pub(crate) fn confirm(&self, walked: &Path) -> bool {
        if self.gate.denied(walked).is_some() {
            return false;
        }
        // As root, no name from a folder of another user the sandbox could not enter.
        if self.gate.check_folders(walked, Some(&self.real)).is_err() {
            return false;
        }
        match &self.dir {
            Some(dir) => walked
                .strip_prefix(&self.real)
                .is_ok_and(|rel| exists_beneath(dir, rel)),
            None => true,
        }
    }
}

/// The directory (or single file) a search starts from: `path` resolved against the cwd, or
/// the cwd itself, checked and opened by the file gate. Fails with `NOT_FOUND` when it does
/// not exist, `PERMISSION_DENIED` when the gate refuses it.
pub(crate) fn search_root(ctx: &ToolContext, path: Option<&str>) -> Result<SearchRoot, ToolError> {
    let shown = match path.filter(|p| !p.is_empty()) {
        Some(path) => ctx.absolute(path),
        None => ctx.cwd().to_path_buf(),
    };
    gated_root(ctx, shown)
}

/// [`search_root`] for a path already absolute.
pub(crate) fn gated_root(ctx: &ToolContext, shown: PathBuf) -> Result<SearchRoot, ToolError> {
    root_through(ctx.gate(), shown)
}

/// The root of a walk over the folder `real` (a real path) as `gate` lets it be walked: what
/// workspace checkpoints walk (`checkpoint.rs`). `Err` says why the folder cannot be walked.
pub(crate) fn walk_root(gate: &GatePolicy, real: &Path) -> Result<SearchRoot, String> {
    match root_through(gate, real.to_path_buf()) {
        Ok(root) if root.dir.is_some() => Ok(root),
        Ok(_) => Err(format!("{} is not a folder", real.display())),
        Err(err) => Err(err.message),
    }
}

fn root_through(gate: &GatePolicy, shown: PathBuf) -> Result<SearchRoot, ToolError> {
    let real = gate.resolve(&shown).map_err(|err| match err {
        GateError::Io(err) => ToolError::io("cannot search", &shown, &err),
        other => other.into_tool_error(&shown),
    })?;
    gate.check_read(&shown, &real)?;
    let meta =
        std::fs::metadata(&real).map_err(|err| ToolError::io("cannot search", &shown, &err))?;
    // As root, only where a confined command could look too (the `other-user` rule).
    gate.check_folders(&real, None)?;
    if meta.is_dir() {
        gate.check_access(&shown, &meta, crate::gate::Access::Enter)?;
    }
    let dir = if meta.is_dir() {
        Some(open_directory(&real).map_err(|err| err.into_tool_error(&shown))?)
    } else {
        None
    };
    // The walker reads the ignore files of the root and of every folder above it.
    if let Some(bad) = real.ancestors().find_map(unsafe_ignore_file) {
        return Err(ToolError::new(
            ToolErrorCode::NotAFile,
            format!(
                "{} is not a regular ignore file of at most 1 MiB (a FIFO, a link or a device would hang or flood the search), so the search does not read it; remove or replace it, or search a folder below it",
                bad.display()
            ),
        ));
    }
    Ok(SearchRoot {
        shown,
        real,
        dir,
        gate: gate.for_walk(),
    })
}

/// A walker over `root` that honours `.gitignore` (also outside a git repository), `.ignore`
/// and `.git/info/exclude`, includes hidden files, never descends into `.git`, and skips what
/// the file gate denies (a search of the home skips `~/.ssh` and dsh's home).
pub(crate) fn walker(root: &SearchRoot) -> WalkBuilder {
    let mut builder = WalkBuilder::new(&root.real);
    let gate = root.gate.clone();
    builder
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .parents(true)
        .follow_links(false)
        .filter_entry(move |entry| {
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            entry.file_name() != ".git"
                && gate.denied(entry.path()).is_none()
                // A folder whose ignore file is a FIFO or a device is skipped, not entered.
                && !(is_dir && unsafe_ignore_file(entry.path()).is_some())
        });
    builder
}

/// A file pattern as the tools accept it: without `/` it matches the file name at any depth
/// (`*.rs`); with `/` it matches the path relative to the search root (`src/**/*.rs`), where
/// `*` does not cross directories and `**` does. `{a,b}` alternatives are supported.
#[derive(Debug, Clone)]
pub(crate) struct PathPattern {
    matcher: GlobMatcher,
    name_only: bool,
}

impl PathPattern {
    /// Compiles `pattern`; `field` names the argument in the `INVALID_ARGS` message.
    pub(crate) fn new(pattern: &str, field: &str) -> Result<Self, ToolError> {
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        if pattern.is_empty() {
            return Err(ToolError::invalid_args(format!(
                "{field} must not be empty"
            )));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|err| {
                ToolError::new(
                    ToolErrorCode::InvalidArgs,
                    format!("{field} is not a valid glob: {err}"),
                )
            })?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            name_only: !pattern.contains('/'),
        })
    }

    /// True when the file at `relative` (relative to the search root) matches.
    pub(crate) fn is_match(&self, relative: &Path) -> bool {
        if self.name_only {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(relative)
        }
    }
}

/// Splits an absolute glob such as `/repo/src/**/*.rs` into its literal directory prefix
/// (`/repo/src`) and the pattern below it (`**/*.rs`).
pub(crate) fn split_absolute_pattern(pattern: &str) -> (PathBuf, String) {
    let mut base = PathBuf::from("/");
    let mut rest: Vec<&str> = Vec::new();
    let mut literal = true;
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        if literal && !part.contains(['*', '?', '[', '{']) {
            base.push(part);
        } else {
            literal = false;
            rest.push(part);
        }
    }
    if rest.is_empty() {
        // The whole pattern is literal: it names one path; match its file name in the parent.
        let name = base
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        base.pop();
        return (base, name);
    }
    (base, rest.join("/"))
}

/// A per-thread buffer for a parallel walk that moves its items into the shared vector in
/// batches and on drop, so the lock is taken rarely and nothing is lost when the walk ends.
pub(crate) struct Collector<'a, T> {
    into: &'a Mutex<Vec<T>>,
    local: Vec<T>,
}

impl<'a, T> Collector<'a, T> {
    const BATCH: usize = 256;

    /// A buffer that drains into `into`.
    pub(crate) fn new(into: &'a Mutex<Vec<T>>) -> Self {
        Self {
            into,
            local: Vec::new(),
        }
    }

    /// Adds one item.
    pub(crate) fn push(&mut self, item: T) {
        self.local.push(item);
        if self.local.len() >= Self::BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        // A poisoned lock means another walker thread panicked mid-append; the Vec is still
        // valid, so keep collecting.
        self.into.lock_or_recover().append(&mut self.local);
    }
}

impl<T> Drop for Collector<'_, T> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The note that ends a capped result, naming the spill file with the full list.
pub(crate) fn capped_notice(
    shown: usize,
    total: &str,
    what: &str,
    order: &str,
    spill: Result<PathBuf, ToolError>,
    narrow: &str,
) -> String {
    let saved = match spill {
        Ok(path) => format!("Full list saved to: {}.", path.display()),
        Err(err) => format!("The full list could not be saved ({}).", err.message),
    };
    format!("\n\n(Showing {shown} of {total} {what}{order}. {saved} Narrow {narrow} to see the others.)")
}

/// How `glob` and `grep` calls are shown: `pattern in path (include)`.
pub(crate) fn present(name: &str, args: &serde_json::Value) -> crate::ToolPresentation {
    let mut subject = crate::string_arg(args, "pattern")
        .unwrap_or("?")
        .to_string();
    if let Some(path) = crate::string_arg(args, "path") {
        subject.push_str(&format!(" in {path}"));
    }
    if let Some(include) = crate::string_arg(args, "include") {
        subject.push_str(&format!(" ({include})"));
    }
    crate::ToolPresentation::new(name)
        .subject(crate::one_line(&subject, 200))
        .kind(crate::ToolKind::Search)
        .view(crate::ToolView::Results)
}

/// How many results (`meta.total`, and how many are shown when fewer); the text's lines when
/// the data does not say.
pub(crate) fn summarize(
    result: &crate::ResultFacts<'_>,
    singular: &str,
    plural: &str,
) -> Option<crate::ResultSummary> {
    if result.error.is_some() {
        return None;
    }
    let noun = |n| crate::presentation::count(n, singular, plural);
    let text = match (result.meta_u64("total"), result.meta_u64("shown")) {
        (Some(total), Some(shown)) if shown < total => format!("{} ({shown} shown)", noun(total)),
        (Some(total), _) => noun(total),
        _ => format!("{} lines", result.text.lines().count()),
    };
    Some(crate::ResultSummary::new(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_patterns_split_at_the_first_wildcard() {
        assert_eq!(
            split_absolute_pattern("/a/b/**/*.rs"),
            (PathBuf::from("/a/b"), "**/*.rs".to_string())
        );
        assert_eq!(
            split_absolute_pattern("/a/b/c.txt"),
            (PathBuf::from("/a/b"), "c.txt".to_string())
        );
    }

    #[test]
    fn name_patterns_match_at_any_depth() {
        let p = PathPattern::new("*.rs", "pattern").unwrap();
        assert!(p.is_match(Path::new("a/b/c.rs")));
        let p = PathPattern::new("src/*.rs", "pattern").unwrap();
        assert!(p.is_match(Path::new("src/c.rs")));
        assert!(!p.is_match(Path::new("src/x/c.rs")));
        assert!(PathPattern::new("a[", "pattern").is_err());
    }
}
