//! Protected paths: places inside a writable root that configure what runs later (git hooks and
//! config, dsh's project settings, `.env` files, MCP server lists). Under `workspace-write`,
//! confined commands get them read-only and `write`/`edit` need the user's approval for them,
//! so nothing the model writes can run later with more power than it had (docs/SECURITY.md,
//! "Protected paths").
//!
//! A path is protected when, relative to the writable root it lies in, it is (or lies beneath):
//! * `.git/hooks`, `.git/config` (hooks and `core.fsmonitor`, `core.pager`, aliases, filters);
//! * `.git` itself when it is a file (a worktree's or submodule's `gitdir:` pointer);
//! * `.dsh`, `.agents`, `.claude` (project settings, hooks, skills);
//! * `.mcp.json`;
//! * any entry whose name starts with `.env` (`.env`, `.env.local`, `.envrc`).
//!
//! The rules apply at any depth below the root for `write`/`edit` (a nested `sub/.dsh` is
//! protected too); the sandbox makes the ones that exist at the top of each root read-only.

use std::path::{Component, Path, PathBuf};

/// Top-level names that are protected wherever they appear (directories or files).
pub const PROTECTED_NAMES: [&str; 4] = [".dsh", ".agents", ".claude", ".mcp.json"];

/// Entries of `.git` that are protected.
pub const PROTECTED_GIT_ENTRIES: [&str; 2] = ["hooks", "config"];

/// Names starting with this prefix are protected.
pub const PROTECTED_ENV_PREFIX: &str = ".env";

fn is_protected_name(name: &str) -> bool {
    PROTECTED_NAMES.contains(&name) || name.starts_with(PROTECTED_ENV_PREFIX)
}

/// The protected path that covers `path`, if any: `path` must be absolute and real (symlinks
/// resolved); `root` is the writable root it lies in. Returns the protected entry itself (for
/// example `<root>/.git/hooks` for `<root>/.git/hooks/pre-commit`), or `None` when `path` is not
/// beneath `root` or not protected.
pub fn protected_entry(root: &Path, path: &Path) -> Option<PathBuf> {
    let relative = path.strip_prefix(root).ok()?;
    let mut covered = root.to_path_buf();
    let mut previous_was_git = false;
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return None;
        };
        covered.push(name);
        let name = name.to_string_lossy();
        if previous_was_git && PROTECTED_GIT_ENTRIES.contains(&name.as_ref()) {
            return Some(covered);
        }
        if is_protected_name(&name) {
            return Some(covered);
        }
        previous_was_git = name == ".git";
        if previous_was_git && !covered.is_dir() && covered.exists() {
            // `.git` as a file points git at another directory: protect the pointer.
            return Some(covered);
        }
    }
    None
}

/// The protected entries that exist directly at the top of `root` (and inside its `.git`
/// directory), for a sandbox to bind read-only. Entries that do not exist are not listed: a
/// sandbox cannot bind over nothing, and the trust check covers files planted later.
pub fn existing_protected_entries(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        if is_protected_name(&name) {
            found.push(path);
        } else if name == ".git" {
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => {
                    for inner in PROTECTED_GIT_ENTRIES {
                        let inner = path.join(inner);
                        if std::fs::symlink_metadata(&inner).is_ok() {
                            found.push(inner);
                        }
                    }
                }
                Ok(_) => found.push(path),
                Err(_) => {}
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
        assert_eq!(names, [".dsh", ".env", ".git/config", ".git/hooks"]);
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
