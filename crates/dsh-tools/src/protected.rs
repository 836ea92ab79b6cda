//! Protected paths: places inside a writable root that configure what runs later (git hooks and
//! config, dsh's project settings, `.env` files, MCP server lists, the user's shell start-up
//! files). Under `workspace-write`, confined commands get them read-only and `write`/`edit`
//! need the user's approval for them, so nothing the model writes can run later with more
//! power than it had (docs/SECURITY.md, "Protected paths").
//!
//! A path is protected when, relative to the writable root it lies in, it is (or lies beneath):
//! * in any git directory (`.git`, `.git/modules/<sub>` at any depth, `.git/worktrees/<name>`,
//!   a nested repository's `.git`, a folder shaped like a git directory): `hooks`, `config`,
//!   `config.worktree`, `commondir`, `gitdir` (hooks and `core.fsmonitor`, `core.pager`,
//!   aliases, filters, and pointers to other configuration);
//! * `.git` itself when it is a file (a worktree's or submodule's `gitdir:` pointer);
//! * `.dsh`, `.agents`, `.claude`, `.codex` (project settings, hooks, skills), `.vscode`
//!   (tasks);
//! * `.mcp.json`;
//! * any entry whose name starts with `.env` (`.env`, `.env.local`, `.envrc`);
//! * when the root is or contains the user's home: every dot entry directly in the home
//!   (`~/.bashrc`, `~/.profile`, `~/.gitconfig`, `~/.ssh`, `~/.codex`, `~/.claude`, ...).
//!
//! Names compare without regard to ASCII case. The rules apply at any depth below the root for
//! `write`/`edit` (a nested `sub/.dsh` is protected too); [`existing_protected_entries`] lists
//! the ones that exist for the sandbox to make read-only.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// Top-level names that are protected wherever they appear (directories or files).
pub const PROTECTED_NAMES: [&str; 4] = [".dsh", ".agents", ".claude", ".mcp.json"];

/// More names protected wherever they appear: other agents' settings (`.codex`: hooks and MCP
/// servers) and editors' task runners (`.vscode/tasks.json` runs on folder open). Kept apart
/// from [`PROTECTED_NAMES`] so its users can adopt them one by one; [`is_protected_name`] and
/// the functions here cover both.
pub const PROTECTED_MORE_NAMES: [&str; 2] = [".codex", ".vscode"];

/// Entries of `.git` that are protected.
pub const PROTECTED_GIT_ENTRIES: [&str; 2] = ["hooks", "config"];

/// Entries of every git directory (`.git`, `.git/modules/<sub>`, `.git/worktrees/<name>`, a
/// nested repository's `.git`, a bare repository) that make git run or read code or
/// configuration: hooks, `config` (`core.fsmonitor`, `core.pager`, aliases, filters), the
/// per-worktree `config.worktree`, and the `commondir`/`gitdir` pointers that send git to
/// another directory's configuration.
pub const GIT_DIR_CONTROL: [&str; 5] =
    ["hooks", "config", "config.worktree", "commondir", "gitdir"];

/// Names starting with this prefix are protected.
pub const PROTECTED_ENV_PREFIX: &str = ".env";

fn eq_ci(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// True for a name protected wherever it appears (compared without regard to ASCII case, so a
/// case-insensitive file system cannot spell `.DSH` around it).
pub fn is_protected_name(name: &str) -> bool {
    PROTECTED_NAMES
        .iter()
        .chain(&PROTECTED_MORE_NAMES)
        .any(|p| eq_ci(p, name))
        || name
            .get(..PROTECTED_ENV_PREFIX.len())
            .is_some_and(|start| eq_ci(start, PROTECTED_ENV_PREFIX))
}

/// True when the directory `dir` is shaped like a git directory (a `HEAD` file and an
/// `objects` folder): a bare repository or a `gitdir:` target not named `.git`.
fn looks_like_git_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| m.is_file())
        && std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
}

/// The user's home (`$HOME`), canonical when it exists.
fn user_home() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?);
    if !home.is_absolute() {
        return None;
    }
    Some(std::fs::canonicalize(&home).unwrap_or(home))
}

/// The protected path that covers `path`, if any: `path` must be absolute and real (symlinks
/// resolved); `root` is the writable root it lies in. Returns the protected entry itself (for
/// example `<root>/.git/hooks` for `<root>/.git/hooks/pre-commit`), or `None` when `path` is not
/// beneath `root` or not protected.
///
/// Protected: the names of [`is_protected_name`] at any depth; inside any git directory (a
/// `.git` folder at any depth, everything below it such as `.git/modules/<sub>` and
/// `.git/worktrees/<name>`, or a folder shaped like one) the entries of [`GIT_DIR_CONTROL`];
/// a `.git` file; and, when `root` is or contains the user's home, every dot entry directly in
/// the home (`~/.bashrc`, `~/.profile`, `~/.gitconfig`, `~/.ssh`, `~/.config`, ...).
pub fn protected_entry(root: &Path, path: &Path) -> Option<PathBuf> {
    let relative = path.strip_prefix(root).ok()?;
    let home = user_home().filter(|home| home.starts_with(root));
    let mut covered = root.to_path_buf();
    let mut in_git_dir = false;
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return None;
        };
        let parent_is_home = home.as_deref() == Some(covered.as_path());
        let parent_is_git = in_git_dir || looks_like_git_dir(&covered);
        covered.push(name);
        if entry_is_protected(parent_is_git, parent_is_home, name, &covered) {
            return Some(covered);
        }
        in_git_dir |= eq_ci(&name.to_string_lossy(), ".git");
    }
    None
}

/// The rule of [`protected_entry`] for one entry `name` at `path`, given its folder's facts.
fn entry_is_protected(
    parent_is_git: bool,
    parent_is_home: bool,
    name: &OsStr,
    path: &Path,
) -> bool {
    let name = name.to_string_lossy();
    (parent_is_git && GIT_DIR_CONTROL.iter().any(|c| eq_ci(c, &name)))
        || is_protected_name(&name)
        || (parent_is_home && name.starts_with('.'))
        // `.git` as a file points git at another directory: protect the pointer.
        || (eq_ci(&name, ".git") && !path.is_dir() && path.exists())
}

/// [`protected_entry`] for the many paths of a walk below one root: what it learns about each
/// folder (covered by a protected entry, inside or shaped like a git directory) is kept, so each
/// folder is looked at once instead of once per file below it.
#[derive(Debug)]
pub struct ProtectedCache {
    root: PathBuf,
    home: Option<PathBuf>,
    folders: HashMap<PathBuf, FolderFacts>,
}

/// What [`protected_entry`]'s walk knows about a folder when it reaches the folder's entries.
#[derive(Debug, Clone, Copy)]
struct FolderFacts {
    /// The folder is a protected entry or lies in one.
    covered: bool,
    /// A `.git` component is on the way to it (the folder itself included).
    in_git_dir: bool,
    /// Its entries are a git directory's (`in_git_dir`, or the folder is shaped like one).
    is_git: bool,
}

impl ProtectedCache {
    /// For paths below the real path `root`.
    pub fn new(root: &Path) -> Self {
        ProtectedCache {
            root: root.to_path_buf(),
            home: user_home().filter(|home| home.starts_with(root)),
            folders: HashMap::new(),
        }
    }

    /// True when [`protected_entry`] covers `path` (absolute and real, below the root).
    pub fn covers(&mut self, path: &Path) -> bool {
        match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if path.starts_with(&self.root) && path != self.root => {
                let facts = self.folder(parent);
                let parent_is_home = self.home.as_deref() == Some(parent);
                facts.covered || entry_is_protected(facts.is_git, parent_is_home, name, path)
            }
            _ => false,
        }
    }

    /// The facts of the folder `dir` (the root or below it).
    fn folder(&mut self, dir: &Path) -> FolderFacts {
        if let Some(facts) = self.folders.get(dir) {
            return *facts;
        }
        let facts = match (dir.parent(), dir.file_name()) {
            (Some(parent), Some(name)) if dir != self.root && dir.starts_with(&self.root) => {
                let up = self.folder(parent);
                let parent_is_home = self.home.as_deref() == Some(parent);
                let in_git_dir = up.in_git_dir || eq_ci(&name.to_string_lossy(), ".git");
                FolderFacts {
                    covered: up.covered || entry_is_protected(up.is_git, parent_is_home, name, dir),
                    in_git_dir,
                    is_git: in_git_dir || looks_like_git_dir(dir),
                }
            }
            _ => FolderFacts {
                covered: false,
                in_git_dir: false,
                is_git: looks_like_git_dir(dir),
            },
        };
        self.folders.insert(dir.to_path_buf(), facts);
        facts
    }
}

/// How deep below a root [`existing_protected_entries`] looks for nested repositories, and how
/// many folders it reads at most.
const NESTED_DEPTH: usize = 3;
const NESTED_MAX_DIRS: usize = 4096;

/// The protected entries that exist in `root`, for a sandbox to bind read-only: the protected
/// names at its top; every git directory found, whole (the top `.git`, its `modules/**` and
/// `worktrees/*`, nested repositories' `.git` up to three folders down, and the folder a `.git`
/// file points to when it lies in `root`), so confined commands read repositories but change
/// them only through an approved escalation; a `.git` file itself; and, when `root` is or
/// contains the user's home, the dot entries of the home.
/// Entries that do not exist are not listed: a sandbox cannot bind over nothing, and the trust
/// check covers files planted later.
pub fn existing_protected_entries(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if is_protected_name(&name.to_string_lossy()) {
            found.push(entry.path());
        }
    }
    let mut git_dirs = Vec::new();
    nested_git_entries(root, root, 0, &mut 0, &mut git_dirs, &mut found);
    while let Some(dir) = git_dirs.pop() {
        control_entries(&dir, &mut found, &mut git_dirs);
    }
    if let Some(home) = user_home().filter(|home| home.starts_with(root)) {
        let hidden = crate::confinement::hidden_dirs();
        if let Ok(entries) = std::fs::read_dir(&home) {
            for entry in entries.flatten() {
                let path = entry.path();
                let dot = entry.file_name().to_string_lossy().starts_with('.');
                if dot && !hidden.iter().any(|h| path.starts_with(h) || h == &path) {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Walks `dir` (below `root`, at `depth`) for `.git` entries and bare repositories (folders
/// shaped like a git directory): folders go to `git_dirs`, `.git` files to `found` (with the
/// folder they point to, when inside `root`, to `git_dirs`).
fn nested_git_entries(
    root: &Path,
    dir: &Path,
    depth: usize,
    visited: &mut usize,
    git_dirs: &mut Vec<PathBuf>,
    found: &mut Vec<PathBuf>,
) {
    *visited += 1;
    if *visited > NESTED_MAX_DIRS {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut below = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if eq_ci(&name.to_string_lossy(), ".git") {
            if kind.is_dir() {
                git_dirs.push(path);
            } else if kind.is_file() {
                found.push(path.clone());
                if let Some(target) = gitdir_target(&path).filter(|t| t.starts_with(root)) {
                    git_dirs.push(target);
                }
            }
        } else if kind.is_dir() && looks_like_git_dir(&path) {
            // A bare repository (`backup.git`, `vendor/lib`): its hooks run on a push to it
            // (third adversarial review of issue 38).
            git_dirs.push(path);
        } else if kind.is_dir()
            && depth < NESTED_DEPTH
            && !is_protected_name(&name.to_string_lossy())
        {
            below.push(path);
        }
    }
    for sub in below {
        nested_git_entries(root, &sub, depth + 1, visited, git_dirs, found);
    }
}

/// The folder a `.git` file (`gitdir: <path>`) points to, made absolute and real.
fn gitdir_target(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let target = file.parent()?.join(target);
    std::fs::canonicalize(target).ok()
}

/// The git directory `dir` itself, whole: a confined command may not create an entry git
/// reads from it either (`commondir`, absent from every ordinary repository, would send git to
/// a planted directory's `config` and `hooks`; docs/SECURITY.md, "Protected paths"). Its
/// submodules' and worktrees' git directories go to `git_dirs`.
fn control_entries(dir: &Path, found: &mut Vec<PathBuf>, git_dirs: &mut Vec<PathBuf>) {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return;
    }
    found.push(dir.to_path_buf());
    for group in ["modules", "worktrees"] {
        let Ok(entries) = std::fs::read_dir(dir.join(group)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                git_dirs.push(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_cache_agrees_with_protected_entry_on_a_real_tree() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        for dir in [
            ".git/hooks",
            ".git/modules/sub/hooks",
            "src/deep",
            "bare/objects",
            "bare/refs",
            "vendor/lib/.git",
            ".dsh/commands",
            "nested",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            ".git/config",
            ".git/hooks/pre-commit",
            ".git/index",
            ".git/modules/sub/config",
            "bare/HEAD",
            "bare/config",
            "bare/refs/main",
            "vendor/lib/.git/config",
            ".dsh/commands/x.md",
            ".env.local",
            "src/deep/a.rs",
            "src/.envrc",
            "nested/.git",
            "README",
        ] {
            std::fs::write(root.join(file), "x").unwrap();
        }
        let mut cache = ProtectedCache::new(&root);
        let mut stack = vec![root.clone()];
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path.clone());
                }
                let expected = protected_entry(&root, &path).is_some();
                assert_eq!(cache.covers(&path), expected, "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen > 20);
    }

    #[test]
    fn protected_entries_are_found_at_any_depth() {
        let root = Path::new("/w");
        let cases = [
            ("/w/.git/hooks/pre-commit", Some("/w/.git/hooks")),
            ("/w/.git/config", Some("/w/.git/config")),
            ("/w/.git/objects/ab", None),
            ("/w/.git/index", None),
            ("/w/.dsh/hooks.json", Some("/w/.dsh")),
            ("/w/.dsh", Some("/w/.dsh")),
            ("/w/sub/.dsh/config.toml", Some("/w/sub/.dsh")),
            ("/w/.env", Some("/w/.env")),
            ("/w/.env.local", Some("/w/.env.local")),
            ("/w/.envrc", Some("/w/.envrc")),
            ("/w/.mcp.json", Some("/w/.mcp.json")),
            ("/w/.agents/skills/x/SKILL.md", Some("/w/.agents")),
            ("/w/.claude/settings.json", Some("/w/.claude")),
            ("/w/src/main.rs", None),
            ("/w/environment.md", None),
            ("/other/.env", None),
        ];
        for (path, expected) in cases {
            assert_eq!(
                protected_entry(root, Path::new(path)),
                expected.map(PathBuf::from),
                "{path}"
            );
        }
    }

    #[test]
    fn existing_entries_are_listed_for_binding() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        std::fs::create_dir(root.join(".dsh")).unwrap();
        std::fs::write(root.join(".env"), "A=1").unwrap();
        std::fs::write(root.join("README.md"), "").unwrap();
        let found = existing_protected_entries(root);
        let names: Vec<String> = found
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        assert_eq!(names, [".dsh", ".env", ".git"]);
    }

    #[test]
    fn every_git_directory_is_protected_not_only_the_top_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for sub in [
            ".git/hooks",
            ".git/modules/a/hooks",
            ".git/modules/a/modules/b",
            ".git/worktrees/wt",
            "nested/.git/hooks",
            "bare.git/objects",
            "deep/er/repo/.git",
        ] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        for file in [
            ".git/config",
            ".git/modules/a/config",
            ".git/modules/a/modules/b/config",
            ".git/worktrees/wt/commondir",
            "nested/.git/config",
            "bare.git/HEAD",
            "bare.git/config",
            "deep/er/repo/.git/config",
        ] {
            std::fs::write(root.join(file), "").unwrap();
        }
        std::fs::create_dir_all(root.join("sm")).unwrap();
        std::fs::write(root.join("sm/.git"), "gitdir: ../.git/modules/a\n").unwrap();
        let protected = [
            ".git/modules/a/hooks/post-checkout",
            ".git/modules/a/config",
            ".git/modules/a/modules/b/config",
            ".git/modules/a/modules/b/hooks/pre-commit",
            ".git/worktrees/wt/config.worktree",
            ".git/worktrees/wt/commondir",
            ".git/worktrees/wt/gitdir",
            "nested/.git/hooks/x",
            "nested/.GIT/CONFIG",
            "bare.git/config",
            "bare.git/hooks/update",
            "sm/.git",
            ".Codex/config.toml",
            ".vscode/tasks.json",
            ".ENV",
        ];
        for path in protected {
            assert!(
                protected_entry(&root, &root.join(path)).is_some(),
                "{path} must be protected"
            );
        }
        for path in [
            "src/config",
            "hooks/x",
            ".git/objects/ab/cd",
            "nested/src/config",
        ] {
            assert!(
                protected_entry(&root, &root.join(path)).is_none(),
                "{path} is not protected"
            );
        }
        // Whole git directories, so that entries git reads but that do not exist yet
        // (`commondir`) cannot be created by a confined command either.
        let found = existing_protected_entries(&root);
        for path in [
            ".git",
            ".git/modules/a",
            ".git/modules/a/modules/b",
            ".git/worktrees/wt",
            "nested/.git",
            "deep/er/repo/.git",
            "bare.git",
            "sm/.git",
        ] {
            assert!(
                found.contains(&root.join(path)),
                "{path} not listed: {found:?}"
            );
        }
    }

    #[test]
    fn a_git_file_is_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".git"), "gitdir: /elsewhere").unwrap();
        assert_eq!(existing_protected_entries(root), [root.join(".git")]);
        assert_eq!(
            protected_entry(root, &root.join(".git")),
            Some(root.join(".git"))
        );
    }
}
