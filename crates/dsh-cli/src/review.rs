//! `dsh review` (docs/review.md): a read-only session reviews a diff of the workspace and
//! answers findings (file, line, priority, what is wrong, a suggested fix) as text or JSON. The
//! diff comes from git run as dsh runs it on a workspace's behalf (`dsh_tools::git`: confined,
//! read-only, no network); the findings come through `--output-schema`'s check
//! (`output_schema.rs`) with dsh's own schema, so an answer that is not findings is sent back
//! once and never printed as if it were.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::output_schema::OutputSchema;
use crate::run::{user_error, HeadlessInput, RunArgs};

// Arguments of `dsh review` (a plain comment: clap would make a doc comment the subcommand's
// help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ReviewArgs {
    /// What to look at first, in words (e.g. "error handling in the parser").
    pub(crate) prompt: Option<String>,
    /// Review the changes not committed yet, staged or not, and new files (the default).
    #[arg(long, conflicts_with_all = ["base", "commit"])]
    pub(crate) uncommitted: bool,
    /// Review what this branch changed since it left BRANCH (the merge base), uncommitted
    /// changes included.
    #[arg(long, value_name = "BRANCH", conflicts_with = "commit")]
    pub(crate) base: Option<String>,
    /// Review one commit.
    #[arg(long, value_name = "SHA")]
    pub(crate) commit: Option<String>,
    /// Print the findings as one JSON object (`sessionId`, `summary`, `findings`, `usage`,
    /// `costUsd`).
    #[arg(long)]
    pub(crate) json: bool,
    /// Working directory (default: the current one).
    #[arg(long, short = 'C', visible_alias = "cd")]
    pub(crate) cwd: Option<PathBuf>,
    // Provider, model and effort; the preset is always read-only.
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
    /// Stop the review once it has spent this many US dollars.
    #[arg(long, value_parser = crate::run::parse_cost)]
    pub(crate) max_cost_usd: Option<f64>,
}

/// Largest diff put into the review's task; the rest is named by `git diff --stat` and left to
/// the model to read with its read-only tools.
const MAX_DIFF_BYTES: usize = 256 * 1024;

/// What the findings look like (checked as `--output-schema` checks an answer).
fn findings_schema() -> Value {
    json!({
        "type": "object",
        "required": ["summary", "findings"],
        "additionalProperties": false,
        "properties": {
            "summary": {"type": "string", "description": "two or three sentences on the change and its state"},
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["file", "line", "priority", "title", "body"],
                    "additionalProperties": false,
                    "properties": {
                        "file": {"type": "string", "description": "path relative to the repository root"},
                        "line": {"type": "integer", "minimum": 1},
                        "end_line": {"type": "integer", "minimum": 1},
                        "priority": {"enum": ["P0", "P1", "P2", "P3"]},
                        "title": {"type": "string", "description": "one line"},
                        "body": {"type": "string", "description": "what is wrong and why it matters"},
                        "suggested_fix": {"type": "string"}
                    }
                }
            }
        }
    })
}

/// How the reviewer works, after the system prompt's stable part.
const REVIEW_INSTRUCTIONS: &str = "# Code review\n\nYou are reviewing a change, not making \
one: you cannot edit files, and you do not need to. Read the diff in the user's message, then \
read whatever else you need (the changed files in full, their callers, tests) with your \
read-only tools. Report real problems a careful senior reviewer would raise: bugs, wrong edge \
cases, security issues, broken error handling, races, missing tests for risky code, misleading \
names or docs. Do not report style nits a formatter settles, and do not praise. Priorities: P0 \
breaks users or data now; P1 a bug or security problem to fix before merging; P2 should be \
fixed soon; P3 a minor improvement. Point each finding at the line where the fix goes, in the \
file as it is now. An empty list is a fine answer when nothing is wrong.";

/// Which change is reviewed.
enum Target {
    Uncommitted,
    Base(String),
    Commit(String),
}

impl Target {
    fn of(args: &ReviewArgs) -> anyhow::Result<Target> {
        let checked = |what: &str, value: &str| -> anyhow::Result<String> {
            // Names only: anything git could read as an option is refused.
            if value.is_empty() || value.starts_with('-') || value.chars().any(char::is_control) {
                return Err(user_error(
                    "INVALID_ARGS",
                    format!("`{value}` is not a {what}"),
                ));
            }
            Ok(value.to_string())
        };
        Ok(match (&args.base, &args.commit) {
            (Some(base), _) => Target::Base(checked("branch name", base)?),
            (None, Some(commit)) => Target::Commit(checked("commit", commit)?),
            (None, None) => Target::Uncommitted,
        })
    }

    fn describe(&self) -> String {
        match self {
            Target::Uncommitted => {
                "the uncommitted changes (staged, unstaged and new files)".into()
            }
            Target::Base(base) => format!("the changes of this branch since it left `{base}`"),
            Target::Commit(sha) => format!("commit `{sha}`"),
        }
    }
}

/// Runs `dsh review`.
pub(crate) fn run(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::run::async_runtime()?;
    runtime.block_on(review(args))
}

async fn review(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let target = Target::of(&args)?;
    let mut choices = args.session.choices();
    if choices
        .permission
        .as_deref()
        .is_some_and(|preset| preset != "read-only")
    {
        return Err(user_error(
            "INVALID_ARGS",
            "a review runs read-only: leave --permission out",
        ));
    }
    choices.permission = Some("read-only".to_string());
    let runtime = crate::run::runtime(args.cwd.as_deref(), choices)?;
    let cwd = runtime.cwd().to_path_buf();
    let confine = dsh_runtime::read_only_confiner(&cwd, runtime.home());
    let diff = tokio::task::spawn_blocking(move || change_of(&cwd, &confine, &target))
        .await
        .map_err(|e| anyhow::anyhow!("the diff could not be read: {e}"))??;
    let Some((described, diff, untracked)) = diff else {
        eprintln!("dsh: nothing to review: no changes");
        print_findings(
            &args,
            None,
            &json!({"summary": "no changes", "findings": []}),
        );
        return Ok(ExitCode::SUCCESS);
    };
    let schema = OutputSchema::from_value(&findings_schema(), "dsh review's findings")
        .map_err(|e| user_error("INTERNAL", e))?;
    let spec = dsh_runtime::SessionSpec {
        append_system_prompt: Some(format!(
            "{REVIEW_INSTRUCTIONS}\n\n{}",
            schema.instructions()
        )),
        ..dsh_runtime::SessionSpec::default()
    };
    let task = task_text(&described, &diff, &untracked, args.prompt.as_deref());
    let run_args = RunArgs {
        max_cost_usd: args.max_cost_usd,
        ..RunArgs::driven()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let signal = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ndsh: cancelling the review");
                cancel.cancel();
            }
        }
    });
    let end = crate::run::run_headless(
        &runtime,
        &spec,
        &run_args,
        Some(schema),
        HeadlessInput::Task(task),
        &cancel,
        // Progress on stderr when it is a terminal, as `dsh run` shows it.
        |watch| crate::run::spawn_printer(&run_args, watch),
    )
    .await;
    signal.abort();
    let end = end?;
    let Some(outcome) = &end.outcome else {
        return Err(user_error("UNKNOWN", "no turn ran"));
    };
    if let Some(failure) = crate::run::turn_failure(&end.setup, &outcome.reason) {
        return Err(anyhow::Error::new(failure));
    }
    match &end.structured {
        Some((_, Ok(findings))) => {
            let mut findings = findings.clone();
            end.setup.secrets().redact_json(&mut findings);
            print_findings(&args, Some(&end), &findings);
            Ok(ExitCode::SUCCESS)
        }
        Some((schema, Err(problem))) => Err(schema.failure(problem, &end.session_id)),
        None => Err(user_error("UNKNOWN", "the review gave no answer")),
    }
}

/// The diff of `target` in `cwd`: its description, the diff text (cut at [`MAX_DIFF_BYTES`],
/// then the `--stat` of the whole) and the new files not yet tracked; `None` when there is
/// nothing to review.
fn change_of(
    cwd: &Path,
    confine: &dsh_tools::CommandConfiner,
    target: &Target,
) -> anyhow::Result<Option<(String, String, Vec<String>)>> {
    let fail = |message: String| user_error("GIT", message);
    if !dsh_tools::git::inside_work_tree(cwd, confine).map_err(fail)? {
        return Err(user_error(
            "NOT_A_REPOSITORY",
            format!(
                "{} is not in a git work tree: `dsh review` reviews git changes",
                cwd.display()
            ),
        ));
    }
    let overrides = dsh_tools::git::diff_overrides(cwd, confine);
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let mut all: Vec<&str> = overrides.iter().map(String::as_str).collect();
        all.push("--no-pager");
        all.extend_from_slice(args);
        let output = dsh_tools::git::confined_git(cwd, confine, &all).map_err(fail)?;
        if !output.status.success() {
            return Err(fail(format!(
                "git {}: {}",
                args.first().copied().unwrap_or_default(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let diff_options = [
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--ignore-submodules=all",
    ];
    let (range, untracked): (Vec<String>, Vec<String>) = match target {
        Target::Uncommitted => {
            let head = git(&["rev-parse", "--verify", "--quiet", "HEAD"]).is_ok();
            // A repository without a commit yet: everything staged is new.
            let range = if head {
                vec!["HEAD".to_string()]
            } else {
                vec!["--cached".to_string()]
            };
            let untracked = git(&["ls-files", "--others", "--exclude-standard", "-z"])?
                .split('\0')
                .filter(|name| !name.is_empty())
                .map(String::from)
                .collect();
            (range, untracked)
        }
        Target::Base(base) => {
            let commit = format!("{base}^{{commit}}");
            git(&[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &commit,
            ])
            .map_err(|_| user_error("INVALID_ARGS", format!("no branch or commit `{base}`")))?;
            let merge_base = git(&["merge-base", "HEAD", "--end-of-options", base])?;
            (vec![merge_base.trim().to_string()], Vec::new())
        }
        Target::Commit(sha) => {
            let commit = format!("{sha}^{{commit}}");
            let full = git(&[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &commit,
            ])
            .map_err(|_| user_error("INVALID_ARGS", format!("no commit `{sha}`")))?;
            let full = full.trim().to_string();
            let parent = git(&["rev-parse", "--verify", "--quiet", &format!("{full}^")]).ok();
            let range = match parent {
                Some(parent) => vec![parent.trim().to_string(), full],
                // The first commit: against the empty tree.
                None => vec!["4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(), full],
            };
            (range, Vec::new())
        }
    };
    let mut args: Vec<&str> = vec!["diff"];
    args.extend(diff_options);
    args.extend(range.iter().map(String::as_str));
    let diff = git(&args)?;
    if diff.trim().is_empty() && untracked.is_empty() {
        return Ok(None);
    }
    let diff = match diff.len() > MAX_DIFF_BYTES {
        true => {
            let mut stat_args: Vec<&str> = vec!["diff", "--stat", "--no-color"];
            stat_args.extend(range.iter().map(String::as_str));
            cut_diff(&diff, &git(&stat_args).unwrap_or_default())
        }
        false => diff,
    };
    Ok(Some((target.describe(), diff, untracked)))
}

/// `diff` cut at [`MAX_DIFF_BYTES`], followed by `stat` (every changed file).
fn cut_diff(diff: &str, stat: &str) -> String {
    let mut cut = MAX_DIFF_BYTES;
    while !diff.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[diff cut at {MAX_DIFF_BYTES} of {} bytes; every changed file:]\n{stat}",
        &diff[..cut],
        diff.len()
    )
}

/// The review's task: what to review, the diff, the new files, the user's focus.
fn task_text(described: &str, diff: &str, untracked: &[String], focus: Option<&str>) -> String {
    let mut task = format!("Review {described}.");
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        task.push_str(&format!("\n\nLook especially at: {focus}"));
    }
    task.push_str(&format!("\n\n```diff\n{diff}\n```"));
    if !untracked.is_empty() {
        task.push_str("\n\nNew files, not tracked yet (read them):\n");
        for name in untracked.iter().take(200) {
            task.push_str(&format!("- {name}\n"));
        }
    }
    task
}

/// Prints the findings: one JSON object with `--json`, else a summary and one block per
/// finding (priority, `file:line`, title; then what is wrong and the fix, indented).
fn print_findings(args: &ReviewArgs, end: Option<&crate::run::HeadlessEnd>, findings: &Value) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if args.json {
        let ran = end.and_then(|end| Some((end, end.outcome.as_ref()?)));
        let (usage, cost) = match ran {
            Some((end, outcome)) => {
                let result = crate::run::result_json(end, outcome);
                (result["usage"].clone(), result["costUsd"].clone())
            }
            None => (Value::Null, Value::Null),
        };
        let line = json!({
            "type": "review",
            "sessionId": end.map(|end| end.session_id.clone()),
            "summary": findings["summary"],
            "findings": findings["findings"],
            "usage": usage,
            "costUsd": cost,
        });
        let _ = writeln!(out, "{line}");
        return;
    }
    let shown = |text: &str| dsh_tools::printable(text).into_owned();
    if let Some(summary) = findings["summary"].as_str() {
        let _ = writeln!(out, "{}\n", shown(summary.trim()));
    }
    let list = findings["findings"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        let _ = writeln!(out, "no findings");
    }
    for finding in &list {
        let text = |key: &str| finding[key].as_str().unwrap_or_default().trim().to_string();
        let _ = writeln!(
            out,
            "{}  {}:{}  {}",
            shown(&text("priority")),
            shown(&text("file")),
            finding["line"].as_u64().unwrap_or(0),
            shown(&text("title"))
        );
        for line in text("body").lines() {
            let _ = writeln!(out, "    {}", shown(line));
        }
        let fix = text("suggested_fix");
        if !fix.is_empty() {
            let _ = writeln!(out, "    fix:");
            for line in fix.lines() {
                let _ = writeln!(out, "      {}", shown(line));
            }
        }
        let _ = writeln!(out);
    }
    if let Some(end) = end {
        let _ = writeln!(out, "(session {})", end.session_id);
    }
}
