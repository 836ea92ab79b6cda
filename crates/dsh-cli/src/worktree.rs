//! Sessions in their own git worktree (docs/worktrees.md): `dsh --worktree[=NAME]` and
//! `dsh run --worktree[=NAME]` make a worktree of the current repository on a new branch
//! `dsh/NAME`, beside the repository (`<parent>/<repo>.worktrees/NAME`), and start the session
//! there; `dsh worktree list` and `dsh worktree remove NAME` manage them. Removing is explicit,
//! and refused while the worktree has uncommitted changes (unless `--force`). What dsh made is
//! recorded in `$DSH_HOME/worktrees.json`, which `sessions list` reads to mark their sessions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::run::user_error;

/// The record of the worktrees dsh made, in `$DSH_HOME`.
const REGISTRY_FILE: &str = "worktrees.json";

/// The branch prefix of dsh's worktrees.
const BRANCH_PREFIX: &str = "dsh/";

/// One worktree dsh made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Worktree {
    /// Its name (`--worktree=NAME`).
    pub(crate) name: String,
    /// Its folder.
    pub(crate) path: PathBuf,
    /// Its branch (`dsh/NAME`).
    pub(crate) branch: String,
    /// The repository's top folder it was made from.
    pub(crate) repository: PathBuf,
    /// When it was made (ms since the epoch).
    pub(crate) created_ms: u64,
}

// `dsh worktree` (a plain comment: clap would make a doc comment the subcommand's help line).
#[derive(Debug, clap::Args)]
pub(crate) struct WorktreeArgs {
    #[command(subcommand)]
    command: WorktreeCommand,
}

#[derive(Debug, clap::Subcommand)]
enum WorktreeCommand {
    /// List the worktrees dsh made: name, branch, folder, and whether it has uncommitted
    /// changes.
    List,
    /// Remove a worktree dsh made (its folder and git's record of it; the branch is kept).
    /// Refused while it has uncommitted changes, unless --force.
    Remove {
        /// Its name.
        name: String,
        /// Remove it even with uncommitted changes (they are lost).
        #[arg(long)]
        force: bool,
    },
}

/// Runs `dsh worktree`.
pub(crate) fn run(args: WorktreeArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    match args.command {
        WorktreeCommand::List => {
            let list = registered(&home);
            if list.is_empty() {
                println!("no worktrees (make one with `dsh --worktree` or `dsh run --worktree`)");
            }
            for worktree in list {
                let state = match changes(&worktree, &home) {
                    _ if !worktree.path.is_dir() => "gone".to_string(),
                    Ok(0) => "clean".to_string(),
                    Ok(n) => format!("{n} uncommitted changes"),
                    Err(why) => format!("state unknown: {why}"),
                };
                println!(
                    "{}  {}  {}  ({state})",
                    worktree.name,
                    worktree.branch,
                    worktree.path.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        WorktreeCommand::Remove { name, force } => {
            remove(&home, &name, force)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The worktrees dsh made (an unreadable record reads as none).
pub(crate) fn registered(home: &Path) -> Vec<Worktree> {
    std::fs::read(home.join(REGISTRY_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn save(home: &Path, list: &[Worktree]) -> anyhow::Result<()> {
    let path = home.join(REGISTRY_FILE);
    let text = serde_json::to_vec_pretty(list)?;
    crate::home::write_private(&path, &text)
        .map_err(|e| user_error("IO", format!("cannot write {}: {e}", path.display())))
}

/// Makes a worktree of the repository holding `cwd`, named `name` (else a new name), on a new
/// branch `dsh/<name>`, records it, and returns it. git runs unconfined (it writes the
/// repository's `.git`) but starts none of the programs a configuration can name: no hooks, no
/// fsmonitor, no transport, and no filter driver. The worktree is made without files first, so
/// the filters are listed with its own configuration (an `includeIf "onbranch:dsh/**"` or
/// `"gitdir:"` can define a filter only it sees), then checked out with them emptied: files are
/// as stored in git (an LFS file is its pointer until `git lfs pull`).
pub(crate) fn create(cwd: &Path, name: Option<&str>, home: &Path) -> anyhow::Result<Worktree> {
    let name = match name.map(str::trim).filter(|n| !n.is_empty()) {
        Some(name) => checked_name(name)?,
        None => fresh_name(),
    };
    let top = git_text(cwd, &no_programs(), &["rev-parse", "--show-toplevel"]).map_err(|why| {
        user_error(
            "NOT_A_REPOSITORY",
            format!(
                "--worktree needs a git repository: {} is not in one ({why})",
                cwd.display()
            ),
        )
    })?;
    let repository = PathBuf::from(top.trim());
    let repo_name = repository
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repository".into());
    let parent = repository.parent().unwrap_or(Path::new("/"));
    let path = parent.join(format!("{repo_name}.worktrees")).join(&name);
    let folder = parent.join(format!("{repo_name}.worktrees"));
    if folder.is_symlink() {
        return Err(user_error(
            "WORKTREE",
            format!(
                "{} is a link: dsh makes worktrees only in a real folder beside the repository",
                folder.display()
            ),
        ));
    }
    if path.exists() || path.is_symlink() {
        return Err(user_error(
            "WORKTREE_EXISTS",
            format!("{} exists already: choose another name", path.display()),
        ));
    }
    let branch = format!("{BRANCH_PREFIX}{name}");
    let path_text = path.to_string_lossy().into_owned();
    let failed = |why: String| {
        user_error(
            "WORKTREE",
            format!("git could not make the worktree: {why}"),
        )
    };
    git_text(
        &repository,
        &no_programs_in(&repository),
        &[
            "worktree",
            "add",
            "--no-checkout",
            "-b",
            &branch,
            "--end-of-options",
            &path_text,
            "HEAD",
        ],
    )
    .map_err(failed)?;
    let mut overrides = no_programs_in(&repository);
    overrides.extend(&no_programs_in(&path));
    if let Err(why) = git_text(&path, &overrides, &["reset", "--hard", "--quiet"]) {
        let _ = git_text(
            &repository,
            &overrides,
            &[
                "worktree",
                "remove",
                "--force",
                "--end-of-options",
                &path_text,
            ],
        );
        return Err(failed(why));
    }
    let worktree = Worktree {
        name,
        path: std::fs::canonicalize(&path).unwrap_or(path),
        branch,
        repository,
        created_ms: dsh_session::now_ms(),
    };
    let mut list = registered(home);
    list.push(worktree.clone());
    save(home, &list)?;
    eprintln!(
        "dsh: working in the new worktree {} (branch {}); `dsh worktree remove {}` removes it",
        worktree.path.display(),
        worktree.branch,
        worktree.name
    );
    Ok(worktree)
}

/// Removes the worktree `name` dsh made: refused while it has uncommitted changes unless
/// `force`; the branch stays (its commits may be unmerged).
fn remove(home: &Path, name: &str, force: bool) -> anyhow::Result<()> {
    let mut list = registered(home);
    let Some(at) = list.iter().position(|w| w.name == name) else {
        return Err(user_error(
            "NOT_FOUND",
            format!("dsh made no worktree named `{name}` (`dsh worktree list` lists them)"),
        ));
    };
    let worktree = list[at].clone();
    if worktree.path.is_dir() {
        let dirty = changes(&worktree, home)
            .map_err(|why| user_error("WORKTREE", format!("cannot tell its state: {why}")))?;
        if dirty > 0 && !force {
            return Err(user_error(
                "UNCOMMITTED_CHANGES",
                format!(
                    "{} has {dirty} uncommitted changes: commit or stash them there, or remove \
                     it with --force (they are lost)",
                    worktree.path.display()
                ),
            ));
        }
        let path = worktree.path.to_string_lossy().into_owned();
        let mut args = vec!["worktree", "remove"];
        if force {
            args.push("--force");
        }
        args.extend(["--end-of-options", path.as_str()]);
        // Without --force, git checks the worktree with its own `git status`, which runs the
        // clean filters of files whose timestamps changed: the worktree's filters are emptied.
        let mut overrides = no_programs_in(&worktree.repository);
        overrides.extend(&no_programs_in(&worktree.path));
        git_text(&worktree.repository, &overrides, &args)
            .map_err(|why| user_error("WORKTREE", format!("git could not remove it: {why}")))?;
    } else {
        // Its folder went another way: git forgets it too.
        let _ = git_text(
            &worktree.repository,
            &no_programs_in(&worktree.repository),
            &["worktree", "prune"],
        );
    }
    list.remove(at);
    save(home, &list)?;
    println!(
        "removed worktree {} ({}); its branch {} is kept (`git branch -D {}` deletes it)",
        worktree.name,
        worktree.path.display(),
        worktree.branch,
        worktree.branch
    );
    Ok(())
}

/// How many entries `git status --porcelain` lists in `worktree` (read confined, as `/diff`
/// reads). The sandbox's root is the folder holding both the worktree and its repository,
/// whose `.git` the worktree's git reads: a repository under `/tmp` (private in the sandbox)
/// was otherwise not found, and the worktree could not be removed, even with `--force`.
fn changes(worktree: &Worktree, home: &Path) -> Result<usize, String> {
    let path = worktree.path.as_path();
    let common = worktree
        .repository
        .ancestors()
        .find(|dir| path.starts_with(dir))
        .unwrap_or(path);
    let confine = dsh_runtime::read_only_confiner(common, home);
    let overrides = dsh_tools::git::diff_overrides(path, &confine);
    let args = ["status", "--porcelain", "--ignore-submodules=all"];
    let out = dsh_tools::git::confined_git(path, &confine, &overrides, &args)?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().count())
}

/// The settings under which git starts none of the programs a configuration names: no hooks,
/// no fsmonitor, no transport, no submodule recursion (filters: [`no_programs_in`]).
fn no_programs() -> dsh_tools::git::ConfigOverrides {
    let mut overrides = dsh_tools::git::ConfigOverrides::base();
    overrides.set("core.hooksPath", "/dev/null");
    overrides.set("submodule.recurse", "false");
    overrides
}

/// [`no_programs`], and every filter driver git sees from `dir` emptied (listing the
/// configuration runs nothing).
fn no_programs_in(dir: &Path) -> dsh_tools::git::ConfigOverrides {
    let mut overrides = no_programs();
    if let Ok(listed) = git_output(dir, &overrides, &dsh_tools::git::FILTER_LISTING) {
        overrides.empty_filters(&listed);
    }
    overrides
}

/// `git -C dir <args>` unconfined, with the scrubbed environment, `overrides` (carried in the
/// environment, see [`dsh_tools::git::ConfigOverrides`]) and no terminal prompts; its stdout,
/// or why it failed.
fn git_text(
    dir: &Path,
    overrides: &dsh_tools::git::ConfigOverrides,
    args: &[&str],
) -> Result<String, String> {
    git_output(dir, overrides, args).map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// [`git_text`]'s stdout as bytes.
fn git_output(
    dir: &Path,
    overrides: &dsh_tools::git::ConfigOverrides,
    args: &[&str],
) -> Result<Vec<u8>, String> {
    let mut command = std::process::Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .envs(dsh_tools::scrubbed_env())
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .envs(overrides.env())
        .stdin(std::process::Stdio::null());
    let out = command
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `name` if it is a safe folder and branch name: letters, digits, `.`, `-`, `_`, not
/// starting with `.` or `-`, at most 64 characters.
fn checked_name(name: &str) -> anyhow::Result<String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && !name.contains("..")
        && !name.ends_with(".lock")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    match ok {
        true => Ok(name.to_string()),
        false => Err(user_error(
            "INVALID_ARGS",
            format!(
                "`{}` is not a worktree name: use letters, digits, `.`, `-` and `_` (not first)",
                dsh_tools::printable(name)
            ),
        )),
    }
}

/// A new name: the date and four random hex digits (`dsh-20261207-3fa1`).
fn fresh_name() -> String {
    let days = dsh_session::now_ms() / 86_400_000;
    let date = dsh_agent::civil_date(days).replace('-', "");
    format!("dsh-{date}-{:04x}", rand::random::<u16>())
}

/// The name of the worktree dsh made that holds `cwd`, for `sessions list`.
pub(crate) fn holding<'a>(list: &'a [Worktree], cwd: &str) -> Option<&'a str> {
    let cwd = Path::new(cwd);
    list.iter()
        .find(|w| cwd.starts_with(&w.path))
        .map(|w| w.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["feat", "fix-1.2", "a_b"] {
            assert!(checked_name(good).is_ok(), "{good}");
        }
        for bad in ["-x", ".x", "a/b", "a..b", "x.lock", "a b", "", "é"] {
            assert!(checked_name(bad).is_err(), "{bad}");
        }
        let fresh = fresh_name();
        assert!(checked_name(&fresh).is_ok(), "{fresh}");
    }
}
