//! Confinement with bubblewrap (`bwrap`): the command runs in new mount and pid namespaces where
//! the whole file system is a read-only bind of the host's, with only the writable roots bound
//! read-write.
//!
//! Layout inside the sandbox:
//! * `/` read-only (`--ro-bind / /`), a minimal `/dev` (`--dev`), a fresh `/proc` (`--proc`,
//!   which bubblewrap itself makes partly read-only: `sys`, `sysrq-trigger`, ...);
//! * `workspace-write`: every writable root (session cwd, temp directories) bound read-write,
//!   at the same path, so paths mean the same inside and out;
//! * `read-only`: nothing of the host writable; `/tmp` is a private, empty tmpfs (thrown away
//!   when the command ends) so programs that need scratch files still work; the cwd and workdir
//!   are bound back read-only when they live under `/tmp`;
//! * `--unshare-pid` (the command cannot see or signal host processes, and everything it started
//!   dies with it), `--die-with-parent` (killing `bwrap` kills the sandbox), `--new-session`
//!   (no terminal injection through `TIOCSTI`).
//!
//! The network namespace is *not* unshared: commands keep network access (package managers,
//! git fetch). bubblewrap drops every capability of the sandboxed process and sets
//! `no_new_privs`, so a setuid binary cannot regain privileges to remount.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use dsh_tools::{CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset, ToolError};

/// The directory made private (tmpfs) under `read-only`.
const PRIVATE_TMP: &str = "/tmp";

/// Runs commands inside `bwrap` (see the module docs for the layout).
#[derive(Debug, Clone)]
pub struct Bubblewrap {
    program: PathBuf,
}

impl Bubblewrap {
    /// Confinement through the `bwrap` executable at `program`. Whether it works on this host
    /// is the probe's business ([`crate::SandboxProbe`]); this type only builds command lines.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
        }
    }

    /// The `bwrap` executable used.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The `bwrap` options (everything before `--`) for `request`. Writable roots that do not
    /// exist are skipped: bubblewrap would fail on them, and nothing can be written there anyway.
    pub fn options(&self, request: &ConfinementRequest) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&std::ffi::OsStr]| {
            args.extend(items.iter().map(|s| s.to_os_string()));
        };
        push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
        push(&["--dev".as_ref(), "/dev".as_ref()]);
        push(&["--proc".as_ref(), "/proc".as_ref()]);
        match request.preset {
            PermissionPreset::ReadOnly => {
                push(&["--tmpfs".as_ref(), PRIVATE_TMP.as_ref()]);
                let mut visible: Vec<&Path> = vec![&request.cwd];
                if request.workdir != request.cwd {
                    visible.push(&request.workdir);
                }
                for dir in visible {
                    if dir.starts_with(PRIVATE_TMP) && dir.is_dir() {
                        push(&["--ro-bind".as_ref(), dir.as_os_str(), dir.as_os_str()]);
                    }
                }
            }
            PermissionPreset::WorkspaceWrite | PermissionPreset::DangerFullAccess => {
                // Parents before children, so a nested root is bound on top of its parent.
                let mut roots: Vec<&PathBuf> = request
                    .writable_roots
                    .iter()
                    .filter(|root| root.is_dir())
                    .collect();
                roots.sort_by_key(|root| root.components().count());
                roots.dedup();
                for root in roots {
                    push(&["--bind".as_ref(), root.as_os_str(), root.as_os_str()]);
                }
            }
        }
        push(&["--chdir".as_ref(), request.workdir.as_os_str()]);
        push(&[
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
            "--unshare-pid".as_ref(),
        ]);
        args
    }
}

impl CommandConfinement for Bubblewrap {
    fn name(&self) -> &str {
        "bubblewrap"
    }

    /// Wraps `plan` as `bwrap <options> -- <program> <args>`; its `pre_exec` hooks stay and run
    /// before `bwrap` itself starts. `danger-full-access` returns `plan` unchanged.
    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        if request.preset == PermissionPreset::DangerFullAccess {
            return Ok(plan);
        }
        let mut args = self.options(request);
        args.push("--".into());
        args.push(plan.program);
        args.extend(plan.args);
        Ok(CommandPlan {
            program: self.program.clone().into_os_string(),
            args,
            pre_exec: plan.pre_exec,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(preset: PermissionPreset, cwd: &Path, roots: Vec<PathBuf>) -> ConfinementRequest {
        ConfinementRequest {
            preset,
            cwd: cwd.to_path_buf(),
            workdir: cwd.to_path_buf(),
            writable_roots: roots,
        }
    }

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn workspace_write_binds_roots_parents_first() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().to_path_buf();
        let child = parent.join("ws");
        std::fs::create_dir(&child).unwrap();
        let req = request(
            PermissionPreset::WorkspaceWrite,
            &child,
            vec![child.clone(), parent.clone(), parent.join("missing")],
        );
        let line = text(&Bubblewrap::new("bwrap").options(&req));
        let p = parent.display();
        let c = child.display();
        assert!(
            line.starts_with("--ro-bind / / --dev /dev --proc /proc"),
            "{line}"
        );
        assert!(
            line.contains(&format!("--bind {p} {p} --bind {c} {c}")),
            "{line}"
        );
        assert!(!line.contains("missing"), "{line}");
        assert!(line.ends_with("--die-with-parent --new-session --unshare-pid"));
        assert!(!line.contains("--unshare-net"), "network stays: {line}");
    }

    #[test]
    fn read_only_binds_nothing_writable_and_keeps_a_private_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        let req = request(PermissionPreset::ReadOnly, &cwd, vec![cwd.clone()]);
        let line = text(&Bubblewrap::new("bwrap").options(&req));
        assert!(!line.contains("--bind "), "{line}");
        assert!(line.contains("--tmpfs /tmp"), "{line}");
        if cwd.starts_with("/tmp") {
            let c = cwd.display();
            assert!(line.contains(&format!("--ro-bind {c} {c}")), "{line}");
        }
    }

    #[test]
    fn danger_full_access_is_untouched() {
        let plan = CommandPlan {
            program: "bash".into(),
            args: vec!["-c".into(), "true".into()],
            pre_exec: Vec::new(),
        };
        let req = request(PermissionPreset::DangerFullAccess, Path::new("/"), vec![]);
        let out = Bubblewrap::new("bwrap").confine(plan, &req).unwrap();
        assert_eq!(out.program, OsString::from("bash"));
    }
}
