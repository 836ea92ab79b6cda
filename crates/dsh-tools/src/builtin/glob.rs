//! `glob`: files whose path matches a pattern, newest first.

use dsh_llm::LockExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use futures::future::BoxFuture;
use ignore::WalkState;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::parse_args;
use crate::builtin::search::{
    capped_notice, gated_root, search_root, split_absolute_pattern, walker, Collector, PathPattern,
    SearchRoot,
};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::paths::display_relative;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation};
use crate::tool::Tool;

/// Default of `[tools.glob] max_results`.
pub const GLOB_MAX_RESULTS: usize = 100;

/// The description for a cap of `max` paths, with or without sampling (byte-stable for given
/// settings: the tool list is part of the cached prompt prefix, docs/agent.md).
fn describe(max: usize, sample_over_cap: bool) -> String {
    let over_cap = if sample_over_cap {
        format!(
            "When more files match, {max} of them are shown, picked in turns from each top-level entry of the search directory (every entry gets one path before any gets a second) so the page spans the whole tree rather than one busy subfolder; a final `(Showing {max} of N files, sampled across K of the T top-level entries ...)` note says so and names a file holding the full newest-first list (read or grep it)."
        )
    } else {
        format!(
            "When more files match, the {max} newest are shown and a final `(Showing {max} of N files ...)` note names a file holding the full list (read or grep it)."
        )
    };
    format!(
        "Finds files by name pattern and lists their paths, most recently modified first, one per line. \
A pattern without `/` matches file names at any depth (`*.rs`, `Cargo.toml`; so `*` is every file in the tree, not just the top level); a pattern with `/` matches the path below the search directory (`src/**/*.ts`, `tests/*.rs`), where `*` stays within one directory and `**` crosses directories; `{{a,b}}` alternatives work. \
Only files are listed, never directories (use `ls` in bash to see one directory). \
`path` is the directory to search (default: the session working directory). \
Files ignored by .gitignore/.ignore are skipped, and so is `.git`; hidden files are included. \
Paths inside the working directory are shown relative to it. \
{over_cap} \
Errors start with `Error:`: an invalid pattern (INVALID_ARGS) or a missing path (NOT_FOUND). To search file contents use grep."
    )
}

/// The `glob` tool. See `docs/tools.md`.
#[derive(Debug, Clone)]
pub struct GlobTool {
    max_results: usize,
    sample_over_cap: bool,
    description: String,
}

impl Default for GlobTool {
    /// 100 paths, sampled across top-level entries over the cap.
    fn default() -> Self {
        Self::new(GLOB_MAX_RESULTS, true)
    }
}

impl GlobTool {
    /// A `glob` that shows at most `max_results` paths (at least 1) and, over that cap, samples
    /// across the top-level entries when `sample_over_cap` (`[tools.glob]`, docs/tools.md).
    pub fn new(max_results: usize, sample_over_cap: bool) -> Self {
        let max_results = max_results.max(1);
        GlobTool {
            max_results,
            sample_over_cap,
            description: describe(max_results, sample_over_cap),
        }
    }
}

#[derive(Debug, Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

impl Tool for GlobTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        crate::builtin::search::present(self.name(), args)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        crate::builtin::search::summarize(result, "file", "files")
    }

    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, e.g. `*.rs` (any depth) or `src/**/*.ts` (relative to path)."},
                "path": {"type": "string", "description": "Directory to search. Defaults to the session working directory."}
            },
            "required": ["pattern"]
        })
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: GlobArgs = parse_args("glob", args)?;
            let ctx = ctx.clone();
            let cap = (self.max_results, self.sample_over_cap);
            tokio::task::spawn_blocking(move || glob_files(&args, &ctx, cap))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("glob failed: {err}")))?
        })
    }
}

/// Every file under `root` matching `pattern`, as (path, mtime), in no particular order.
/// Stops early (returning what it has) when `ctx` is cancelled.
pub(crate) fn find_files(
    ctx: &ToolContext,
    root: &SearchRoot,
    pattern: &PathPattern,
) -> Vec<(PathBuf, Option<SystemTime>)> {
    let found: Mutex<Vec<(PathBuf, Option<SystemTime>)>> = Mutex::new(Vec::new());
    walker(root).build_parallel().run(|| {
        let mut local = Collector::new(&found);
        let cancel = ctx.cancel().clone();
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            let is_file = entry
                .file_type()
                .is_some_and(|t| t.is_file() || t.is_symlink());
            if !is_file {
                return WalkState::Continue;
            }
            let relative = entry
                .path()
                .strip_prefix(&root.real)
                .unwrap_or(entry.path());
            // A name is listed only when it is still there beneath the root's descriptor with
            // no link on the way (the file gate): a folder swapped for a link to somewhere
            // else while the walk read it lists nothing from there.
            if pattern.is_match(relative) && root.confirm(entry.path()) {
                let mtime = entry.metadata().ok().and_then(|m| m.modified().ok());
                local.push((root.shown_path(entry.path()), mtime));
            }
            WalkState::Continue
        })
    });
    found.into_inner_or_recover()
}

fn glob_files(
    args: &GlobArgs,
    ctx: &ToolContext,
    (max, sample_over_cap): (usize, bool),
) -> Result<ToolOutput, ToolError> {
    let (searched, pattern_text) = if args.pattern.starts_with('/') && args.path.is_none() {
        let (base, rest) = split_absolute_pattern(&args.pattern);
        (gated_root(ctx, base)?, rest)
    } else {
        (
            search_root(ctx, args.path.as_deref())?,
            args.pattern.clone(),
        )
    };
    if searched.dir.is_none() {
        return Err(ToolError::new(
            ToolErrorCode::NotAFile,
            format!("{} is not a directory", searched.shown.display()),
        ));
    }
    let root = searched.shown.clone();
    let pattern = PathPattern::new(&pattern_text, "pattern")?;
    let mut files = find_files(ctx, &searched, &pattern);
    if ctx.cancel().is_cancelled() {
        return Err(ToolError::new(ToolErrorCode::Aborted, "glob was cancelled"));
    }
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let total = files.len();
    if total == 0 {
        return Ok(ToolOutput::text(format!(
            "No files matched `{}` in {}.",
            args.pattern,
            root.display()
        ))
        .with_summary(format!("glob {}: no files", args.pattern))
        .with_data(json!({"total": 0, "shown": 0})));
    }
    let lines: Vec<String> = files
        .iter()
        .map(|(path, _)| display_relative(ctx.cwd(), path))
        .collect();
    if total <= max {
        return Ok(ToolOutput::text(lines.join("\n"))
            .with_summary(format!("glob {}: {total} files", args.pattern))
            .with_data(json!({"total": total, "shown": total})));
    }
    let spill = ctx
        .spill()
        .write("glob", lines.join("\n").as_bytes())
        .map_err(|err| ToolError::io("cannot write spill file in", ctx.spill().path(), &err));
    let (text, data) = over_cap_page(ctx, &root, &files, &lines, (max, sample_over_cap), spill);
    Ok(ToolOutput::text(text)
        .with_summary(format!("glob {}: {total} files", args.pattern))
        .with_data(data))
}

/// The text and data of a result over the cap: the newest `max` paths, or a sample across the
/// top-level entries of `root` (docs/tools.md, "glob").
fn over_cap_page(
    ctx: &ToolContext,
    root: &std::path::Path,
    files: &[(PathBuf, Option<SystemTime>)],
    lines: &[String],
    (max, sample_over_cap): (usize, bool),
    spill: Result<PathBuf, ToolError>,
) -> (String, Value) {
    let total = files.len();
    let mut data = json!({"total": total, "shown": max});
    if !sample_over_cap {
        let mut text = lines[..max].join("\n");
        text.push_str(&capped_notice(
            max,
            &total.to_string(),
            "files",
            ", newest first",
            spill,
            "the pattern or path",
        ));
        return (text, data);
    }
    let entries: Vec<String> = files
        .iter()
        .map(|(path, _)| top_level_entry(root, path))
        .collect();
    let sample = sample_across_entries(&entries, max);
    let mut text = sample
        .picked
        .iter()
        .map(|&k| lines[k].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    data["entriesShown"] = json!(sample.entries_shown);
    data["entriesTotal"] = json!(sample.entries_total);
    // A flat result (one path per entry) or a single entry is the newest-first head: nothing
    // more to say.
    let order = if sample.entries_total == total || sample.entries_total == 1 {
        ", newest first".to_string()
    } else {
        let under = if root == ctx.cwd() {
            "the search directory".to_string()
        } else {
            display_relative(ctx.cwd(), root)
        };
        let mut note = format!(
            ", sampled across {} of the {} top-level entries under {under} (in turns, newest first within each) rather than the newest overall",
            sample.entries_shown, sample.entries_total,
        );
        if sample.entries_shown < sample.entries_total {
            note.push_str("; narrow `path` to one subfolder to see the entries left out");
        }
        note
    };
    text.push_str(&capped_notice(
        max,
        &total.to_string(),
        "files",
        &order,
        spill,
        "the pattern or path",
    ));
    (text, data)
}

/// The first path component of `path` below `root` (the path itself when it has one
/// component, or lies outside `root`).
fn top_level_entry(root: &std::path::Path, path: &std::path::Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .find(|c| matches!(c, std::path::Component::Normal(_)))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Which results an over-cap page shows, and how many top-level entries they reach.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Indices into the result, grouped by entry (entries in order of first appearance), in
    /// result order within each entry.
    pub(crate) picked: Vec<usize>,
    /// Distinct entries among the picked results.
    pub(crate) entries_shown: usize,
    /// Distinct entries in the whole result.
    pub(crate) entries_total: usize,
}

/// Picks `max` results in turns across their top-level entries (`entries[k]` is the entry of
/// result `k`): every entry gets one pick before any gets a second, an entry with nothing left
/// drops out, and each entry keeps the result order. The same rule as dsh's over-cap glob
/// sampling (docs/tools.md, "glob").
pub(crate) fn sample_across_entries(entries: &[String], max: usize) -> Sample {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (k, entry) in entries.iter().enumerate() {
        let group = groups.entry(entry.as_str()).or_default();
        if group.is_empty() {
            order.push(entry.as_str());
        }
        group.push(k);
    }
    let mut taken: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    let mut count = 0;
    let mut round = 0;
    while count < max {
        let mut any = false;
        for (g, entry) in order.iter().enumerate() {
            if count >= max {
                break;
            }
            if let Some(&k) = groups.get(entry).and_then(|items| items.get(round)) {
                taken[g].push(k);
                count += 1;
                any = true;
            }
        }
        if !any {
            break;
        }
        round += 1;
    }
    let entries_shown = taken.iter().filter(|t| !t.is_empty()).count();
    Sample {
        picked: taken.into_iter().flatten().collect(),
        entries_shown,
        entries_total: order.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn every_entry_gets_a_turn_before_any_gets_a_second() {
        let e = entries(&["a", "a", "a", "b", "c", "a", "b"]);
        let sample = sample_across_entries(&e, 4);
        // a gets 0 and 1 (second round), b gets 3, c gets 4; grouped by entry.
        assert_eq!(sample.picked, vec![0, 1, 3, 4]);
        assert_eq!((sample.entries_shown, sample.entries_total), (3, 3));
    }

    #[test]
    fn fewer_slots_than_entries_reach_only_the_first_entries() {
        let e = entries(&["a", "a", "a", "b", "c", "d", "e", "f"]);
        let sample = sample_across_entries(&e, 4);
        assert_eq!(sample.picked, vec![0, 3, 4, 5]);
        assert_eq!((sample.entries_shown, sample.entries_total), (4, 6));
    }

    #[test]
    fn exhausted_entries_drop_out() {
        let e = entries(&["a", "b", "b", "b", "b"]);
        let sample = sample_across_entries(&e, 4);
        assert_eq!(sample.picked, vec![0, 1, 2, 3]);
        assert_eq!((sample.entries_shown, sample.entries_total), (2, 2));
    }

    #[test]
    fn the_description_states_the_cap_and_the_mode() {
        let sampled = GlobTool::new(7, true);
        assert!(sampled.description().contains("7 of them are shown"));
        assert!(sampled.description().contains("top-level entry"));
        let head = GlobTool::new(7, false);
        assert!(head.description().contains("the 7 newest are shown"));
        assert_eq!(GlobTool::new(0, true).max_results, 1);
        assert_eq!(GlobTool::default().description(), sampled_default());
    }

    fn sampled_default() -> String {
        describe(GLOB_MAX_RESULTS, true)
    }
}
