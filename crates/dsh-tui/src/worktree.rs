//! `/diff` and `/init` (docs/tui.md, "Undo and diff"). `/diff` shows the session's file changes
//! from the snapshots `write` and `edit` keep (docs/tools.md, "Snapshots"); `/undo` is the
//! protocol's `dsh_protocol::Op::Undo`.

use std::path::Path;

use dsh_agent::AgentHandle;
use dsh_protocol::undo::changes;
use dsh_session::Envelope;
use dsh_tools::{session_diff, FileSnapshot};

/// `/init`: asks the agent to write AGENTS.md (queued like a typed message, so it waits for a
/// running turn). When `cwd` already has one, the first `/init` only says so; a second one
/// in a row asks the agent to improve it.
pub fn init(app: &mut crate::App, handle: &AgentHandle, cwd: &Path) {
    let existing = cwd.join("AGENTS.md");
    if existing.exists() && !app.init_armed {
        app.init_armed = true;
        app.transcript.notice(
            crate::NoticeLevel::Warn,
            format!(
                "{} already exists: run /init again to have the agent revise it (it reads the current one first)",
                existing.display()
            ),
        );
        return;
    }
    app.init_armed = false;
    match handle.followup(crate::commands::INIT_PROMPT) {
        Ok(()) => app.scroll = 0,
        Err(err) => app
            .transcript
            .notice(crate::NoticeLevel::Error, format!("/init: {err}")),
    }
}

/// One line of the `/diff` view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffLine {
    /// A heading (a section or a file).
    Heading(String),
    /// An added line.
    Added(String),
    /// A removed line.
    Removed(String),
    /// A hunk header (`@@ ... @@`).
    Hunk(String),
    /// Anything else (context, notes).
    Plain(String),
}

fn classify(line: &str) -> DiffLine {
    if line.starts_with("+++") || line.starts_with("---") {
        DiffLine::Heading(line.to_string())
    } else if line.starts_with('+') {
        DiffLine::Added(line.to_string())
    } else if line.starts_with('-') {
        DiffLine::Removed(line.to_string())
    } else if line.starts_with("@@") {
        DiffLine::Hunk(line.to_string())
    } else {
        DiffLine::Plain(line.to_string())
    }
}

/// The `/diff` view: the session's changes from its snapshots, then `git diff` when `cwd` is
/// in a git work tree, run through `confine` (the runtime's `read_only_confiner`).
pub fn diff_lines(
    events: &[Envelope],
    cwd: &Path,
    confine: &dsh_tools::CommandConfiner,
) -> Vec<DiffLine> {
    let (changes, _) = changes(events);
    let snapshots: Vec<FileSnapshot> = changes.into_iter().map(|(_, c)| c).collect();
    let diffs = session_diff(&snapshots, cwd);
    let mut out = vec![DiffLine::Heading(
        "Changes made by write/edit in this session (content before its first change → now; bash changes are not tracked)".to_string(),
    )];
    if diffs.is_empty() {
        out.push(DiffLine::Plain("  (none)".to_string()));
    }
    for diff in &diffs {
        let shown = diff.path.strip_prefix(cwd).unwrap_or(&diff.path).display();
        let note = diff
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(", {n}"));
        out.push(DiffLine::Plain(String::new()));
        out.push(DiffLine::Heading(format!(
            "{shown}  +{} -{}{note}",
            diff.added, diff.removed
        )));
        out.extend(diff.unified.lines().map(classify));
    }
    out.push(DiffLine::Plain(String::new()));
    match git_diff(cwd, confine) {
        Some(Ok(text)) => {
            out.push(DiffLine::Heading(
                "git diff (the work tree against the index, whoever made the changes)".to_string(),
            ));
            if text.trim().is_empty() {
                out.push(DiffLine::Plain("  (no unstaged changes)".to_string()));
            }
            out.extend(text.lines().map(classify));
        }
        Some(Err(message)) => out.push(DiffLine::Plain(format!("git diff: {message}"))),
        None => out.push(DiffLine::Plain(
            "(not a git work tree: no git diff)".to_string(),
        )),
    }
    out
}

/// `git diff` of `cwd`: `None` when it is not in a git work tree (or git is not installed).
/// It runs confined and with the overrides of [`dsh_tools::git`].
fn git_diff(cwd: &Path, confine: &dsh_tools::CommandConfiner) -> Option<Result<String, String>> {
    match dsh_tools::git::inside_work_tree(cwd, confine) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(message) => return Some(Err(format!("not shown: {message}"))),
    }
    let overrides = dsh_tools::git::diff_overrides(cwd, confine);
    let args = [
        "--no-pager",
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--ignore-submodules=all",
    ];
    let output = match dsh_tools::git::confined_git(cwd, confine, &overrides, &args) {
        Ok(output) => output,
        Err(message) => return Some(Err(format!("not shown: {message}"))),
    };
    Some(match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
    })
}
