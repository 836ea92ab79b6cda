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
    capped_notice, search_root, split_absolute_pattern, walker, Collector, PathPattern,
};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::paths::display_relative;
use crate::tool::Tool;

const DESCRIPTION: &str = "Finds files by name pattern and lists their paths, most recently modified first, one per line. \
A pattern without `/` matches file names at any depth (`*.rs`, `Cargo.toml`); a pattern with `/` matches the path below the search directory (`src/**/*.ts`, `tests/*.rs`), where `*` stays within one directory and `**` crosses directories; `{a,b}` alternatives work. \
`path` is the directory to search (default: the session working directory). \
Files ignored by .gitignore/.ignore are skipped, and so is `.git`; hidden files are included. \
Paths inside the working directory are shown relative to it. \
At most 100 paths are returned; when there are more, a final `(Showing 100 of N files ...)` note names a file holding the full list (read or grep it). \
Errors start with `Error:`: an invalid pattern (INVALID_ARGS) or a missing path (NOT_FOUND). To search file contents use grep.";

/// The `glob` tool. See `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobTool;

#[derive(Debug, Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        DESCRIPTION
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
            tokio::task::spawn_blocking(move || glob_files(&args, &ctx))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("glob failed: {err}")))?
        })
    }
}

/// Every file under `root` matching `pattern`, as (path, mtime), in no particular order.
/// Stops early (returning what it has) when `ctx` is cancelled.
pub(crate) fn find_files(
    ctx: &ToolContext,
    root: &std::path::Path,
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
            let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
            if pattern.is_match(relative) {
                let mtime = entry.metadata().ok().and_then(|m| m.modified().ok());
                local.push((entry.path().to_path_buf(), mtime));
            }
            WalkState::Continue
        })
    });
    found.into_inner_or_recover()
}

fn glob_files(args: &GlobArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let (root, pattern_text) = if args.pattern.starts_with('/') && args.path.is_none() {
        let (base, rest) = split_absolute_pattern(&args.pattern);
        (base, rest)
    } else {
        (
            search_root(ctx, args.path.as_deref())?,
            args.pattern.clone(),
        )
    };
    if !root.is_dir() {
        return Err(ToolError::new(
            ToolErrorCode::NotAFile,
            format!("{} is not a directory", root.display()),
        ));
    }
    let pattern = PathPattern::new(&pattern_text, "pattern")?;
    let mut files = find_files(ctx, &root, &pattern);
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
    let max = ctx.limits().glob_max_results;
    let shown = total.min(max);
    let mut text = lines[..shown].join("\n");
    if total > max {
        let spill = ctx
            .spill()
            .write("glob", lines.join("\n").as_bytes())
            .map_err(|err| ToolError::io("cannot write spill file in", ctx.spill().path(), &err));
        text.push_str(&capped_notice(
            shown,
            &total.to_string(),
            "files",
            ", newest first",
            spill,
            "the pattern or path",
        ));
    }
    Ok(ToolOutput::text(text)
        .with_summary(format!("glob {}: {total} files", args.pattern))
        .with_data(json!({"total": total, "shown": shown})))
}
