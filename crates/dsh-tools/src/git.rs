//! git as dsh itself runs it on a workspace's behalf (the TUI's `/diff`, `dsh review`): in the
//! read-only sandbox without network, with the scrubbed environment, and with the overrides
//! that keep a repository's configuration from starting programs (docs/SECURITY.md,
//! "Snapshots, /undo, /diff and @ mentions"). A repository's configuration can make git start
//! programs in ways no list of overrides closes (an adversarial review planted a clean
//! filter in a submodule, which `git diff` checks with its own `git status`), so what git
//! starts is held like the model's `read-only` commands; the overrides are a second layer.

use std::path::Path;

use crate::{CommandConfiner, CommandPlan};

/// Configuration dsh sets for the git it runs, passed in the environment
/// (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`), never as `-c`: git splits
/// a `-c` at its first `=`, so `-c filter.x=y.clean=` set nothing and a filter driver named
/// `x=y` in a planted configuration still ran (found by the adversarial review of issue 43).
/// The environment carries key and value apart, whatever the name holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigOverrides {
    /// Keys and values as bytes: a filter's name need not be UTF-8.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl ConfigOverrides {
    /// What every git dsh runs on a workspace's behalf takes: no fsmonitor hook, and no
    /// transport (a planted partial clone would fetch a missing blob by running the remote's
    /// `uploadpack` or `core.sshCommand`).
    pub fn base() -> ConfigOverrides {
        let mut overrides = ConfigOverrides::default();
        overrides.set("core.fsmonitor", "false");
        overrides.set("protocol.allow", "never");
        overrides
    }

    /// Sets `key` to `value` (a later setting of the same key wins, as in git).
    pub fn set(&mut self, key: &str, value: &str) {
        self.pairs
            .push((key.as_bytes().to_vec(), value.as_bytes().to_vec()));
    }

    /// Empties every filter driver named in `listing`, the output of [`FILTER_LISTING`]
    /// (`filter.<name>.clean`, `.smudge`, `.process` set to nothing, which is no filter, and
    /// `.required` to false, so a file of that filter is read as stored).
    pub fn empty_filters(&mut self, listing: &[u8]) {
        let mut names: Vec<&[u8]> = listing
            .split(|b| *b == 0)
            .filter_map(|key| key.strip_prefix(b"filter."))
            .filter_map(|rest| {
                rest.iter()
                    .rposition(|b| *b == b'.')
                    .map(|dot| &rest[..dot])
            })
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            for (key, value) in [
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ] {
                let mut full = b"filter.".to_vec();
                full.extend_from_slice(name);
                full.push(b'.');
                full.extend_from_slice(key.as_bytes());
                self.pairs.push((full, value.as_bytes().to_vec()));
            }
        }
    }

    /// Adds `other`'s settings after these.
    pub fn extend(&mut self, other: &ConfigOverrides) {
        self.pairs.extend(other.pairs.iter().cloned());
    }

    /// The keys set, in order.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.pairs.iter().map(|(key, _)| key.as_slice())
    }

    /// The variables that carry the settings, after the user's own `GIT_CONFIG_COUNT`
    /// entries (which are kept).
    pub fn env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let first: usize = std::env::var("GIT_CONFIG_COUNT")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let mut env = Vec::with_capacity(self.pairs.len() * 2 + 1);
        for (i, (key, value)) in self.pairs.iter().enumerate() {
            env.push((
                format!("GIT_CONFIG_KEY_{}", first + i).into(),
                os_string(key),
            ));
            env.push((
                format!("GIT_CONFIG_VALUE_{}", first + i).into(),
                os_string(value),
            ));
        }
        env.push((
            "GIT_CONFIG_COUNT".into(),
            (first + self.pairs.len()).to_string().into(),
        ));
        env
    }
}

/// `bytes` as an environment value: exactly on Unix; on Windows, where values are UTF-16,
/// as UTF-8 (a name that is not is replaced lossily).
fn os_string(bytes: &[u8]) -> std::ffi::OsString {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(bytes).to_os_string()
    }
    #[cfg(not(unix))]
    {
        String::from_utf8_lossy(bytes).into_owned().into()
    }
}

/// The arguments of `git config` that list the keys of every filter driver the configuration
/// defines (its includes read too), NUL-separated, for [`ConfigOverrides::empty_filters`].
/// Reading the configuration runs nothing.
pub const FILTER_LISTING: [&str; 5] = [
    "config",
    "--null",
    "--name-only",
    "--get-regexp",
    r"^filter\.",
];

/// Runs `git -C cwd <args>` in the read-only sandbox without network (`confine`), with the
/// scrubbed environment (code-loading variables without empty or relative entries),
/// `overrides` and no lazy fetch. `Err` says why git could not run confined.
pub fn confined_git(
    cwd: &Path,
    confine: &CommandConfiner,
    overrides: &ConfigOverrides,
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
    env.extend(overrides.env());
    crate::plan_command(&plan, cwd, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|err| err.to_string())
}

/// The overrides every diff-like git command dsh runs in `cwd` takes: [`ConfigOverrides::base`]
/// and every filter driver the repository's configuration defines emptied. Add
/// `--no-ext-diff --no-textconv` to the command itself.
pub fn diff_overrides(cwd: &Path, confine: &CommandConfiner) -> ConfigOverrides {
    let mut overrides = ConfigOverrides::base();
    if let Ok(listed) = confined_git(cwd, confine, &ConfigOverrides::default(), &FILTER_LISTING) {
        overrides.empty_filters(&listed.stdout);
    }
    overrides
}

/// Whether `cwd` is inside a git work tree (`Err`: git could not run confined).
pub fn inside_work_tree(cwd: &Path, confine: &CommandConfiner) -> Result<bool, String> {
    let inside = confined_git(
        cwd,
        confine,
        &ConfigOverrides::base(),
        &["rev-parse", "--is-inside-work-tree"],
    )?;
    Ok(inside.status.success() && String::from_utf8_lossy(&inside.stdout).trim() == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_filter_is_emptied_by_its_exact_name() {
        let mut overrides = ConfigOverrides::base();
        overrides.empty_filters(b"filter.lfs.smudge\0filter.x=y.clean\0filter.a.b.process\0filter.\xff.clean\0filter.lfs.clean\0");
        let keys: Vec<&[u8]> = overrides.keys().collect();
        for name in [&b"lfs"[..], b"x=y", b"a.b", b"\xff"] {
            for key in ["clean", "smudge", "process", "required"] {
                let mut full = b"filter.".to_vec();
                full.extend_from_slice(name);
                full.push(b'.');
                full.extend_from_slice(key.as_bytes());
                assert_eq!(keys.iter().filter(|k| **k == full.as_slice()).count(), 1);
            }
        }
        assert_eq!(keys.len(), 2 + 4 * 4);
    }

    #[test]
    fn overrides_travel_in_the_environment_key_and_value_apart() {
        let mut overrides = ConfigOverrides::default();
        overrides.set("filter.x=y.clean", "");
        let env = overrides.env();
        let first: usize = std::env::var("GIT_CONFIG_COUNT")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let get = |name: String| {
            env.iter()
                .find(|(k, _)| *k == *name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(
            get(format!("GIT_CONFIG_KEY_{first}")).as_deref(),
            Some("filter.x=y.clean")
        );
        assert_eq!(
            get(format!("GIT_CONFIG_VALUE_{first}")).as_deref(),
            Some("")
        );
        assert_eq!(
            get("GIT_CONFIG_COUNT".into()),
            Some((first + 1).to_string())
        );
    }
}
