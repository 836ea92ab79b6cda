//! `grep`: lines matching a regular expression, as `path:line:text`.

use dsh_llm::LockExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use futures::future::BoxFuture;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use ignore::WalkState;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::parse_args;
use crate::builtin::search::{
    capped_notice, search_root, walker, Collector, PathPattern, SearchRoot,
};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::paths::display_relative;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation};
use crate::tool::Tool;

/// Characters of a matching line shown in a result.
const MAX_LINE_CHARS: usize = 500;
/// Matches collected at most (for the spill file); the walk stops past this.
const MAX_COLLECTED: usize = 100_000;

/// Default of `[tools.grep] max_results`.
pub const GREP_MAX_RESULTS: usize = 250;

/// The description for a cap of `max` matches (byte-stable for a given cap).
fn describe(max: usize) -> String {
    format!(
        "Searches file contents for a regular expression (Rust regex syntax, like ripgrep: `fn\\s+main`, `(?i)todo`; escape literal braces and dots) and returns matching lines as `path:line:text`, sorted by path and line number. \
`path` is a file or directory to search (default: the session working directory); `include` limits the files searched by a glob (`*.rs`, `*.{{ts,tsx}}`, or a path pattern with `/` such as `src/**/*.go`). \
Files ignored by .gitignore/.ignore, `.git`, and binary files are skipped; hidden files are searched. \
Matching lines longer than 500 characters are cut. Paths inside the working directory are shown relative to it. \
At most {max} matches are returned; when there are more, a final `(Showing {max} of N matches ...)` note names a file holding the full list (read or grep it). \
No match gives `No matches found ...`. Errors start with `Error:`: an invalid regex or include glob (INVALID_ARGS) or a missing path (NOT_FOUND). To find files by name use glob."
    )
}

/// The `grep` tool. See `docs/tools.md`.
#[derive(Debug, Clone)]
pub struct GrepTool {
    max_results: usize,
    description: String,
}

impl Default for GrepTool {
    /// 250 matches.
    fn default() -> Self {
        Self::new(GREP_MAX_RESULTS)
    }
}

impl GrepTool {
    /// A `grep` that shows at most `max_results` matches (at least 1; `[tools.grep]`).
    pub fn new(max_results: usize) -> Self {
        let max_results = max_results.max(1);
        GrepTool {
            max_results,
            description: describe(max_results),
        }
    }
}

#[derive(Debug, Deserialize)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include: Option<String>,
}

impl Tool for GrepTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        crate::builtin::search::present(self.name(), args)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        crate::builtin::search::summarize(result, "match", "matches")
    }

    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to search for (Rust regex syntax)."},
                "path": {"type": "string", "description": "File or directory to search. Defaults to the session working directory."},
                "include": {"type": "string", "description": "Glob limiting which files are searched, e.g. `*.rs` or `*.{ts,tsx}`."}
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
            let args: GrepArgs = parse_args("grep", args)?;
            let ctx = ctx.clone();
            let max = self.max_results;
            tokio::task::spawn_blocking(move || grep_files(&args, &ctx, max))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("grep failed: {err}")))?
        })
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GrepMatch {
    pub path: PathBuf,
    pub line: u64,
    pub text: String,
}

/// Searches `root` (a file or a directory) for `matcher`, honouring ignore files and the
/// optional `include` pattern. Returns the matches (unsorted, at most [`MAX_COLLECTED`]) and
/// whether collection stopped early at that bound.
pub(crate) fn search(
    ctx: &ToolContext,
    root: &SearchRoot,
    matcher: &RegexMatcher,
    include: Option<&PathPattern>,
) -> (Vec<GrepMatch>, bool) {
    let found: Mutex<Vec<GrepMatch>> = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    let searcher_template = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    walker(root).build_parallel().run(|| {
        let mut local = Collector::new(&found);
        let count = &count;
        let cancel = ctx.cancel().clone();
        let mut searcher: Searcher = searcher_template.clone();
        // One matcher per thread, as ripgrep does: a shared one contends on its scratch pool.
        let matcher = matcher.clone();
        Box::new(move |entry| {
            if cancel.is_cancelled() || count.load(Ordering::Relaxed) >= MAX_COLLECTED {
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let walked = entry.path();
            let path_buf = root.shown_path(walked);
            let path = path_buf.as_path();
            if let Some(include) = include {
                let relative = path.strip_prefix(&root.shown).unwrap_or(path);
                let relative = if relative.as_os_str().is_empty() {
                    Path::new(path.file_name().unwrap_or_default())
                } else {
                    relative
                };
                if !include.is_match(relative) {
                    return WalkState::Continue;
                }
            }
            // A file that cannot be read (permissions, vanished meanwhile, refused by the
            // file gate) is skipped: a search over a tree reports what it could read. It is
            // opened beneath the root's descriptor and searched through that descriptor.
            let Some(file) = root.open(walked) else {
                return WalkState::Continue;
            };
            let _unreadable = searcher.search_file(
                &matcher,
                &file,
                Lossy(|line, text| {
                    if count.fetch_add(1, Ordering::Relaxed) >= MAX_COLLECTED {
                        return Ok(false);
                    }
                    local.push(GrepMatch {
                        path: path.to_path_buf(),
                        line,
                        text: clip(text.trim_end_matches(['\n', '\r'])),
                    });
                    Ok(true)
                }),
            );
            WalkState::Continue
        })
    });
    let stopped = count.load(Ordering::Relaxed) >= MAX_COLLECTED;
    let matches = found.into_inner_or_recover();
    (matches, stopped)
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

fn grep_files(args: &GrepArgs, ctx: &ToolContext, max: usize) -> Result<ToolOutput, ToolError> {
    if args.pattern.is_empty() {
        return Err(ToolError::invalid_args("pattern must not be empty"));
    }
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|err| {
            ToolError::invalid_args(format!("pattern is not a valid regular expression: {err}"))
        })?;
    let include = match args.include.as_deref().filter(|s| !s.is_empty()) {
        Some(glob) => Some(PathPattern::new(glob, "include")?),
        None => None,
    };
    let root = search_root(ctx, args.path.as_deref())?;
    let (mut matches, stopped) = search(ctx, &root, &matcher, include.as_ref());
    if ctx.cancel().is_cancelled() {
        return Err(ToolError::new(ToolErrorCode::Aborted, "grep was cancelled"));
    }
    if matches.is_empty() {
        return Ok(ToolOutput::text(format!(
            "No matches found for `{}` in {}.",
            args.pattern,
            root.shown.display()
        ))
        .with_summary(format!("grep {}: no matches", args.pattern))
        .with_data(json!({"total": 0, "shown": 0})));
    }
    matches.sort();
    let total = matches.len();
    let lines: Vec<String> = matches
        .iter()
        .map(|m| {
            format!(
                "{}:{}:{}",
                display_relative(ctx.cwd(), &m.path),
                m.line,
                m.text
            )
        })
        .collect();
    let shown = total.min(max);
    let mut text = lines[..shown].join("\n");
    if total > max {
        let spill = ctx
            .spill()
            .write("grep", lines.join("\n").as_bytes())
            .map_err(|err| ToolError::io("cannot write spill file in", ctx.spill().path(), &err));
        let total_text = if stopped {
            format!("at least {total}")
        } else {
            total.to_string()
        };
        text.push_str(&capped_notice(
            shown,
            &total_text,
            "matches",
            "",
            spill,
            "the pattern, path or include",
        ));
    }
    let text = ctx.externalize(&text, "grep")?;
    Ok(ToolOutput::text(text)
        .with_summary(format!("grep {}: {total} matches", args.pattern))
        .with_data(json!({"total": total, "shown": shown, "complete": !stopped})))
}
