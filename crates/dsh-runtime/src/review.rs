//! What `dsh review` and the TUI's `/review` share (docs/review.md): the change to review,
//! taken by git as dsh runs it on a workspace's behalf (`dsh_tools::git`: confined, read-only,
//! no network, no filter, fsmonitor, external diff or textconv), the reviewer's instructions
//! and task, the findings schema its answer is checked against ([`OutputSchema`]), and the
//! findings as text. The front ends differ only in how they run the read-only session and
//! where the text goes.

use std::path::Path;

use serde_json::{json, Value};

use crate::output_schema::OutputSchema;

/// Largest diff put into the review's task; the rest is named by `git diff --stat` and left to
/// the model to read with its read-only tools.
pub const MAX_DIFF_BYTES: usize = 256 * 1024;

/// The preset every review session runs under, whatever the caller's own.
pub const PRESET: &str = "read-only";

/// What the findings look like.
pub fn findings_schema() -> Value {
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

/// The findings schema, compiled.
pub fn schema() -> Result<OutputSchema, String> {
    OutputSchema::from_value(&findings_schema(), "dsh review's findings")
}

/// How the reviewer works, after the system prompt's stable part.
pub const INSTRUCTIONS: &str = "# Code review\n\nYou are reviewing a change, not making \
one: you cannot edit files, and you do not need to. Read the diff in the user's message, then \
read whatever else you need (the changed files in full, their callers, tests) with your \
read-only tools. Report real problems a careful senior reviewer would raise: bugs, wrong edge \
cases, security issues, broken error handling, races, missing tests for risky code, misleading \
names or docs. Do not report style nits a formatter settles, and do not praise. Priorities: P0 \
breaks users or data now; P1 a bug or security problem to fix before merging; P2 should be \
fixed soon; P3 a minor improvement. Point each finding at the line where the fix goes, in the \
file as it is now. An empty list is a fine answer when nothing is wrong.";

/// What the review session appends to its system prompt: [`INSTRUCTIONS`], then `schema`'s
/// answer format.
pub fn system_prompt(schema: &OutputSchema) -> String {
    format!("{INSTRUCTIONS}\n\n{}", schema.instructions())
}

/// Why no change could be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewError {
    /// The directory is not in a git work tree (its path, printable).
    NotARepository(String),
    /// A branch or commit that does not exist or looks like an option.
    InvalidArgs(String),
    /// git could not be run, or failed.
    Git(String),
}

impl ReviewError {
    /// The error code front ends report (`NOT_A_REPOSITORY`, `INVALID_ARGS`, `GIT`).
    pub fn code(&self) -> &'static str {
        match self {
            ReviewError::NotARepository(_) => "NOT_A_REPOSITORY",
            ReviewError::InvalidArgs(_) => "INVALID_ARGS",
            ReviewError::Git(_) => "GIT",
        }
    }
}

impl std::fmt::Display for ReviewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReviewError::NotARepository(dir) => write!(f, "{dir} is not in a git work tree"),
            ReviewError::InvalidArgs(message) | ReviewError::Git(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ReviewError {}

/// Which change is reviewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Staged, unstaged and new files.
    Uncommitted,
    /// What the branch changed since it left this one (the merge base), uncommitted changes
    /// included.
    Base(String),
    /// One commit.
    Commit(String),
}

impl Target {
    /// The target of `--base` / `--commit` (neither: the uncommitted changes; `base` wins).
    /// Names only: anything git could read as an option is refused.
    pub fn new(base: Option<&str>, commit: Option<&str>) -> Result<Target, ReviewError> {
        let checked = |what: &str, value: &str| -> Result<String, ReviewError> {
            if value.is_empty() || value.starts_with('-') || value.chars().any(char::is_control) {
                return Err(ReviewError::InvalidArgs(format!(
                    "`{}` is not a {what}",
                    dsh_tools::printable(value)
                )));
            }
            Ok(value.to_string())
        };
        Ok(match (base, commit) {
            (Some(base), _) => Target::Base(checked("branch name", base)?),
            (None, Some(commit)) => Target::Commit(checked("commit", commit)?),
            (None, None) => Target::Uncommitted,
        })
    }

    /// The target in words, as the task names it.
    pub fn describe(&self) -> String {
        match self {
            Target::Uncommitted => {
                "the uncommitted changes (staged, unstaged and new files)".into()
            }
            Target::Base(base) => format!("the changes of this branch since it left `{base}`"),
            Target::Commit(sha) => format!("commit `{sha}`"),
        }
    }
}

/// A change to review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The target in words ([`Target::describe`]).
    pub described: String,
    /// The diff (cut at [`MAX_DIFF_BYTES`], then the `--stat` of the whole).
    pub diff: String,
    /// New files not tracked yet.
    pub untracked: Vec<String>,
}

/// The change `target` names in `cwd`, taken by git run under `confine` (a read-only
/// confiner, [`crate::read_only_confiner`]); `None` when there is nothing to review. Blocks:
/// front ends call it off their async threads.
pub fn change_of(
    cwd: &Path,
    confine: &dsh_tools::CommandConfiner,
    target: &Target,
) -> Result<Option<Change>, ReviewError> {
    if !dsh_tools::git::inside_work_tree(cwd, confine).map_err(ReviewError::Git)? {
        return Err(ReviewError::NotARepository(
            dsh_tools::printable(&cwd.display().to_string()).into_owned(),
        ));
    }
    let overrides = dsh_tools::git::diff_overrides(cwd, confine);
    let git = |args: &[&str]| -> Result<String, ReviewError> {
        let mut all: Vec<&str> = vec!["--no-pager"];
        all.extend_from_slice(args);
        let output = dsh_tools::git::confined_git(cwd, confine, &overrides, &all)
            .map_err(ReviewError::Git)?;
        if !output.status.success() {
            return Err(ReviewError::Git(format!(
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
            .map_err(|_| ReviewError::InvalidArgs(format!("no branch or commit `{base}`")))?;
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
            .map_err(|_| ReviewError::InvalidArgs(format!("no commit `{sha}`")))?;
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
    Ok(Some(Change {
        described: target.describe(),
        diff,
        untracked,
    }))
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

/// The review's task: what to review, the user's focus, the diff, the new files, with
/// `secrets` redacted: the diff is dsh reading files for the model, so it hides what a tool's
/// output hides (before the adversarial review of issue 43 a changed tracked `.env` holding
/// dsh's key reached the provider and the session log).
pub fn task_text(
    change: &Change,
    focus: Option<&str>,
    secrets: &dsh_tools::SecretRedactor,
) -> String {
    let mut task = format!("Review {}.", change.described);
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        task.push_str(&format!("\n\nLook especially at: {focus}"));
    }
    task.push_str(&format!("\n\n```diff\n{}\n```", change.diff));
    if !change.untracked.is_empty() {
        task.push_str("\n\nNew files, not tracked yet (read them):\n");
        for name in change.untracked.iter().take(200) {
            task.push_str(&format!("- {name}\n"));
        }
    }
    secrets.redact(&task).into_owned()
}

/// The findings (a value valid under [`findings_schema`]) as text: the summary, then one block
/// per finding (priority, `file:line`, title; then what is wrong and the fix, indented), or
/// `no findings`. `numbered`: each block starts with its number (`2. P1  ...`), so a finding
/// can be named later ("fix finding 2", the TUI's `/review`). Terminal control characters are
/// shown escaped ([`dsh_tools::printable`]). Ends with a newline.
pub fn findings_text(findings: &Value, numbered: bool) -> String {
    let shown = |text: &str| dsh_tools::printable(text).into_owned();
    let mut out = String::new();
    if let Some(summary) = findings["summary"].as_str() {
        out.push_str(&format!("{}\n\n", shown(summary.trim())));
    }
    let list = findings["findings"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if list.is_empty() {
        out.push_str("no findings\n");
    }
    for (index, finding) in list.iter().enumerate() {
        let text = |key: &str| finding[key].as_str().unwrap_or_default().trim().to_string();
        if numbered {
            out.push_str(&format!("{}. ", index + 1));
        }
        out.push_str(&format!(
            "{}  {}:{}  {}\n",
            shown(&text("priority")),
            shown(&text("file")),
            finding["line"].as_u64().unwrap_or(0),
            shown(&text("title"))
        ));
        for line in text("body").lines() {
            out.push_str(&format!("    {}\n", shown(line)));
        }
        let fix = text("suggested_fix");
        if !fix.is_empty() {
            out.push_str("    fix:\n");
            for line in fix.lines() {
                out.push_str(&format!("      {}\n", shown(line)));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn findings() -> Value {
        json!({
            "summary": "One bug.",
            "findings": [
                {"file": "a.rs", "line": 3, "priority": "P1", "title": "Off by one",
                 "body": "Reads past the end.\nTwice.", "suggested_fix": "Use `<`."},
                {"file": "b\u{1b}[2J.rs", "line": 9, "priority": "P3", "title": "Name",
                 "body": "Misleading."}
            ]
        })
    }

    #[test]
    fn findings_read_as_blocks_numbered_or_not() {
        let plain = findings_text(&findings(), false);
        assert_eq!(
            plain,
            "One bug.\n\nP1  a.rs:3  Off by one\n    Reads past the end.\n    Twice.\n    fix:\n      \
             Use `<`.\n\nP3  b^[[2J.rs:9  Name\n    Misleading.\n\n"
        );
        let numbered = findings_text(&findings(), true);
        assert!(
            numbered.contains("\n1. P1  a.rs:3  Off by one\n"),
            "{numbered}"
        );
        assert!(numbered.contains("\n2. P3  b"), "{numbered}");
        assert!(!numbered.contains('\u{1b}'), "{numbered}");
        let empty = findings_text(&json!({"summary": "Fine.", "findings": []}), true);
        assert_eq!(empty, "Fine.\n\nno findings\n");
    }

    #[test]
    fn the_schema_takes_findings_and_refuses_prose() {
        let schema = schema().unwrap();
        assert!(schema.check(&findings().to_string()).is_ok());
        let fenced = format!("```json\n{}\n```", findings());
        assert!(schema.check(&fenced).is_ok());
        let problem = schema
            .check(r#"{"summary": "x", "findings": [{"file": "a", "line": 0}]}"#)
            .unwrap_err();
        assert!(problem.contains("/findings/0"), "{problem}");
        assert!(schema.check("Looks good to me.").is_err());
        let prompt = system_prompt(&schema);
        assert!(prompt.starts_with("# Code review") && prompt.contains("\"priority\""));
    }

    #[test]
    fn targets_refuse_what_git_would_read_as_options() {
        assert_eq!(Target::new(None, None), Ok(Target::Uncommitted));
        assert_eq!(
            Target::new(Some("main"), Some("abc")),
            Ok(Target::Base("main".into()))
        );
        assert_eq!(
            Target::new(None, Some("abc")),
            Ok(Target::Commit("abc".into()))
        );
        for bad in ["", "--upload-pack=x", "a\nb"] {
            let error = Target::new(Some(bad), None).unwrap_err();
            assert_eq!(error.code(), "INVALID_ARGS", "{bad:?}");
        }
    }

    #[test]
    fn a_long_diff_is_cut_on_a_character_boundary_and_followed_by_its_stat() {
        let diff = "é".repeat(MAX_DIFF_BYTES);
        let cut = cut_diff(&diff, " a.rs | 2 +-\n");
        assert!(
            cut.contains("[diff cut at 262144 of 524288 bytes"),
            "{}",
            &cut[cut.len() - 120..]
        );
        assert!(cut.ends_with(" a.rs | 2 +-\n"));
        let task = task_text(
            &Change {
                described: "commit `abc`".into(),
                diff: "+x".into(),
                untracked: vec!["new.rs".into()],
            },
            Some("  errors "),
            &dsh_tools::SecretRedactor::new(),
        );
        assert!(task
            .starts_with("Review commit `abc`.\n\nLook especially at: errors\n\n```diff\n+x\n```"));
        assert!(task.ends_with("- new.rs\n"), "{task}");
    }
}
