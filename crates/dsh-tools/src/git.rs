//! git as dsh itself runs it on a workspace's behalf (the TUI's `/diff`, `dsh review`): in the
//! read-only sandbox without network, with the scrubbed environment, and with the overrides
//! that keep a repository's configuration from starting programs (docs/SECURITY.md,
//! "Snapshots, /undo, /diff and @ mentions"). A repository's configuration can make git start
//! programs in ways no list of `-c` overrides closes (an adversarial review planted a clean
//! filter in a submodule, which `git diff` checks with its own `git status`), so what git
//! starts is held like the model's `read-only` commands; the overrides are a second layer.

use std::path::Path;

use crate::{CommandConfiner, CommandPlan};

/// Runs `git -C cwd <args>` in the read-only sandbox without network (`confine`), with the
/// scrubbed environment (code-loading variables without empty or relative entries) and no lazy
/// fetch. `Err` says why git could not run confined.
pub fn confined_git(
    cwd: &Path,
    confine: &CommandConfiner,
    args: &[&str],
) -> Result<std::process::Output, String> {
    let mut argv: Vec<std::ffi::OsString> = vec!["-C".into(), cwd.as_os_str().to_os_string()];
    argv.extend(args.iter().map(Into::into));
    let plan = CommandPlan::new("git", argv);
    let plan = confine(plan, cwd).map_err(|err| {
        format!(
            "git runs only in the read-only sandbox here, and {}",
            err.message
        )
    })?;
    let mut env = crate::scrubbed_env();
    env.push(("GIT_NO_LAZY_FETCH".into(), "1".into()));
    crate::plan_command(&plan, cwd, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|err| err.to_string())
}

/// The `-c` overrides every diff-like git command dsh runs takes first: no fsmonitor hook, no
/// transport (a planted partial clone would fetch a missing blob by running the remote's
/// `uploadpack` or `core.sshCommand`), and every filter driver the repository's configuration
/// defines emptied (`filter.<name>.clean`, `.smudge`, `.process`; an empty command is no
/// filter). Reading the configuration runs nothing. Add `--no-ext-diff --no-textconv` to the
/// command itself.
pub fn diff_overrides(cwd: &Path, confine: &CommandConfiner) -> Vec<String> {
    let mut args: Vec<String> = ["-c", "core.fsmonitor=false", "-c", "protocol.allow=never"]
        .map(String::from)
        .to_vec();
    let listed = confined_git(
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
        return args;
    };
    let mut names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split('\0')
        .filter_map(|key| key.strip_prefix("filter."))
        .filter_map(|rest| rest.rsplit_once('.').map(|(name, _)| name.to_string()))
        .collect();
    names.sort();
    names.dedup();
    args.extend(names.iter().flat_map(|name| {
        ["clean", "smudge", "process"]
            .iter()
            .flat_map(move |key| ["-c".to_string(), format!("filter.{name}.{key}=")])
            .chain(["-c".to_string(), format!("filter.{name}.required=false")])
    }));
    args
}

/// Whether `cwd` is inside a git work tree (`Err`: git could not run confined).
pub fn inside_work_tree(cwd: &Path, confine: &CommandConfiner) -> Result<bool, String> {
    let inside = confined_git(cwd, confine, &["rev-parse", "--is-inside-work-tree"])?;
    Ok(inside.status.success() && String::from_utf8_lossy(&inside.stdout).trim() == "true")
}
