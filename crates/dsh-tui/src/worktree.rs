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

/// Runs `git -C cwd <args>` in the read-only sandbox without network (`confine`), with the
/// scrubbed environment (code-loading variables without empty or relative entries): every git
/// `/diff` starts, not only `git diff` itself (the fifth adversarial review had the unconfined
/// `rev-parse` load a library planted in the workspace through dsh's own `LD_LIBRARY_PATH`).
/// `Err` says why git could not run confined.
fn git(
    cwd: &Path,
    confine: &dsh_tools::CommandConfiner,
    args: &[&str],
) -> Result<std::process::Output, String> {
    let mut argv: Vec<std::ffi::OsString> = vec!["-C".into(), cwd.as_os_str().to_os_string()];
    argv.extend(args.iter().map(Into::into));
    let plan = dsh_tools::CommandPlan::new("git", argv);
    let plan = confine(plan, cwd).map_err(|err| {
        format!(
            "not shown: git runs only in the read-only sandbox here, and {}",
            err.message
        )
    })?;
    let mut env = dsh_tools::scrubbed_env();
    env.push(("GIT_NO_LAZY_FETCH".into(), "1".into()));
    dsh_tools::plan_command(&plan, cwd, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|err| err.to_string())
}

/// `-c` overrides that empty every filter driver the configuration of `cwd`'s repository
/// defines (`filter.<name>.clean`, `.smudge`, `.process`; an empty command is no filter), so
/// `git diff` runs none of them on the work tree. Reading the configuration runs nothing.
fn filters_off(cwd: &Path, confine: &dsh_tools::CommandConfiner) -> Vec<String> {
    let listed = git(
        cwd,
        confine,
        &[
            "config",
            "--null",
            "--name-only",
            "--get-regexp",
            r"^filter\.",
        ],
    );
    let Ok(listed) = listed else {
        return Vec::new();
    };
    let mut names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split('\0')
        .filter_map(|key| key.strip_prefix("filter."))
        .filter_map(|rest| rest.rsplit_once('.').map(|(name, _)| name.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .flat_map(|name| {
            ["clean", "smudge", "process"]
                .iter()
                .flat_map(move |key| ["-c".to_string(), format!("filter.{name}.{key}=")])
                .chain(["-c".to_string(), format!("filter.{name}.required=false")])
        })
        .collect()
}

/// `git diff` of `cwd`: `None` when it is not in a git work tree (or git is not installed).
/// It runs confined (`confine`: read-only, no network): a repository's configuration can make
/// git start programs in ways no list of `-c` overrides closes (the fourth adversarial review
/// planted a clean filter in a submodule, which `git diff` checks with its own `git status`),
/// so what git starts is held like the model's `read-only` commands. Without a sandbox, no git
/// diff is shown.
fn git_diff(cwd: &Path, confine: &dsh_tools::CommandConfiner) -> Option<Result<String, String>> {
    let inside = match git(cwd, confine, &["rev-parse", "--is-inside-work-tree"]) {
        Ok(inside) => inside,
        Err(message) => return Some(Err(message)),
    };
    if !inside.status.success() || String::from_utf8_lossy(&inside.stdout).trim() != "true" {
        return None;
    }
    let mut args: Vec<String> = vec![
        // No pager, external diff, textconv, clean/process filter or fsmonitor hook: the
        // overrides stay as a second layer under the sandbox (docs/SECURITY.md, "Protected
        // paths").
        "-c".into(),
        "core.fsmonitor=false".into(),
        // No transport: a planted partial clone would fetch a missing blob by running the
        // remote's `uploadpack` (or `core.sshCommand`); `diff` needs no network.
        "-c".into(),
        "protocol.allow=never".into(),
    ];
    args.extend(filters_off(cwd, confine));
    args.extend(
        [
            "--no-pager",
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--ignore-submodules=all",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = match git(cwd, confine, &args) {
        Ok(output) => output,
        Err(message) => return Some(Err(message)),
    };
    Some(match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
    })
}
