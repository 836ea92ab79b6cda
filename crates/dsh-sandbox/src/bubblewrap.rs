//! Confinement with bubblewrap (`bwrap`): the command runs in new mount and pid namespaces where
//! the whole file system is a read-only bind of the host's, with only the writable roots bound
//! read-write.
//!
//! Layout inside the sandbox:
//! * `/` read-only (`--ro-bind / /`), a minimal `/dev` (`--dev`), a fresh `/proc` (`--proc`)
//!   remounted read-only as a whole (`--remount-ro /proc`): as root the command is the host's
//!   uid 0 to the kernel, and the permission checks of `/proc/sys` (sysctls such as
//!   `kernel.core_pattern`, whose helper the kernel runs as real root), `/proc/sysrq-trigger`
//!   and other root-owned `/proc` files look at that uid, not at capabilities. bubblewrap
//!   itself covers only `/proc/irq` and `/proc/bus` (its check skips `/proc/sys`, whose
//!   directory reports itself not writable). `/sys` is read-only with the root bind;
//! * `workspace-write`: every writable root (session cwd, temp directories) bound read-write,
//!   at the same path, so paths mean the same inside and out;
//! * `read-only`: nothing of the host writable; `/tmp` is a private, empty tmpfs (thrown away
//!   when the command ends) so programs that need scratch files still work; the cwd and workdir
//!   are bound back read-only when they live under `/tmp`;
//! * `--unshare-pid` (the command cannot see or signal host processes, and everything it started
//!   dies with it), `--unshare-ipc` (System V objects and message queues are the sandbox's own:
//!   as root, the host's root-owned ones would be open to the command's uid 0),
//!   `--die-with-parent` (killing `bwrap` kills the sandbox), `--new-session` (no terminal
//!   injection through `TIOCSTI`).
//!
//! * `workspace-write`: the protected entries of each root (`.git/hooks`, `.git/config`,
//!   `.dsh`, `.env*`, ...; `dsh_tools::existing_protected_entries`) bound read-only on top,
//!   and `.git` bound onto itself so it cannot be renamed away;
//! * dsh's home (`ConfinementRequest::hidden_dirs`): an empty read-only tmpfs.
//!
//! Privileges: `--unshare-user` where the host allows it (probed), `--cap-drop ALL` (as root,
//! bubblewrap would otherwise keep uid 0's capabilities inside and `mount -o remount,rw` would
//! undo the read-only root), and the seccomp filter ([`crate::seccomp`]) passed as a memfd with
//! `--add-seccomp-fd`. bubblewrap sets `no_new_privs` itself.
//!
//! The network: shared with the host when the request allows it
//! ([`ConfinementRequest::network`], the default `[sandbox] network = "on"`), else a network
//! namespace of the command's own (`--unshare-net`, only a loopback) and a seccomp filter that
//! refuses the address families a network namespace does not confine (`AF_VSOCK`, ...).
//! Every bind bubblewrap makes is `nosuid` and `nodev` (bubblewrap adds both to each bind it
//! does not make with `--dev-bind`).
//!
//! Two ways to run a command with these options: one `bwrap` per command (`bwrap <options> --
//! bash -c ...`), or, where the probe found it works ([`Bubblewrap::prepared`]), one long-lived
//! `bwrap` per distinct layout that every command with that layout enters
//! ([`crate::prepared_bwrap`]); a sandbox that cannot be started falls back to one per command.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_tools::{
    CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset, PreExecHook, ToolError,
};

use crate::seccomp::{Network, Profile, Program};

/// The seccomp filter's network rules for `request`.
pub(crate) fn network(request: &ConfinementRequest) -> Network {
    if request.network {
        Network::On
    } else {
        Network::Off
    }
}

/// The directory made private (tmpfs) under `read-only`.
const PRIVATE_TMP: &str = "/tmp";

/// Runs commands inside `bwrap` (see the module docs for the layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bubblewrap {
    program: PathBuf,
    user_namespace: bool,
    prepared: bool,
}

impl Bubblewrap {
    /// Confinement through the `bwrap` executable at `program`, in a user namespace
    /// (`--unshare-user`), with a prepared sandbox per layout. Whether it works on this host is
    /// the probe's business ([`crate::SandboxProbe`]).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            user_namespace: true,
            prepared: true,
        }
    }

    /// The same with one `bwrap` per command instead of a prepared sandbox per layout (for
    /// hosts where entering a sandbox's namespaces fails, e.g. under some security modules).
    pub fn per_call(mut self) -> Self {
        self.prepared = false;
        self
    }

    /// Whether commands enter a prepared sandbox per layout (docs/SECURITY.md, "A prepared
    /// bubblewrap sandbox per layout") rather than each starting its own `bwrap`.
    pub fn prepared(&self) -> bool {
        self.prepared
    }

    /// The same without a user namespace (for hosts, e.g. some containers, where creating
    /// one fails); capabilities are dropped and the seccomp filter loaded all the same.
    pub fn without_user_namespace(mut self) -> Self {
        self.user_namespace = false;
        self
    }

    /// The `bwrap` executable used.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Whether commands run in a new user namespace.
    pub fn user_namespace(&self) -> bool {
        self.user_namespace
    }

    /// The `bwrap` options (everything before `--`) for `request`; `seccomp_fd` is the
    /// descriptor bubblewrap reads the seccomp filter from. Writable roots and hidden
    /// directories that do not exist are skipped: bubblewrap would fail on them, and there is
    /// nothing to write or to hide there.
    pub fn options(&self, request: &ConfinementRequest, seccomp_fd: Option<i32>) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&OsStr]| {
            args.extend(items.iter().map(|s| s.to_os_string()));
        };
        push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
        push(&["--dev".as_ref(), "/dev".as_ref()]);
        push(&["--proc".as_ref(), "/proc".as_ref()]);
        push(&["--remount-ro".as_ref(), "/proc".as_ref()]);
        let hidden = hidden_dirs(request);
        let under_hidden = |dir: &Path| hidden.iter().any(|h| dir.starts_with(h) && dir != h);
        match request.preset {
            PermissionPreset::ReadOnly => {
                push(&["--tmpfs".as_ref(), PRIVATE_TMP.as_ref()]);
                let covered: Vec<&PathBuf> = hidden
                    .iter()
                    .filter(|dir| !dir.starts_with(PRIVATE_TMP))
                    .collect();
                for dir in &covered {
                    push(&["--tmpfs".as_ref(), dir.as_os_str()]);
                }
                // Only the session's cwd is bound back, never the command's `workdir`: the model
                // or a project chooses that, and naming dsh's home (or the host's /tmp) there
                // must not un-hide it (found by the fourth adversarial review).
                let dir = &request.cwd;
                let hidden_here =
                    dir.starts_with(PRIVATE_TMP) || hidden.iter().any(|h| dir.starts_with(h));
                if hidden_here && dir.is_dir() {
                    push(&["--ro-bind".as_ref(), dir.as_os_str(), dir.as_os_str()]);
                }
                // Read-only only now: bubblewrap creates the mount points of the binds above
                // inside the tmpfs, which it cannot once the tmpfs is read-only.
                for dir in &covered {
                    push(&["--remount-ro".as_ref(), dir.as_os_str()]);
                }
            }
            PermissionPreset::WorkspaceWrite
            | PermissionPreset::Ask
            | PermissionPreset::DangerFullAccess => {
                // Parents before children, so a nested root is bound on top of its parent.
                let mut roots: Vec<&PathBuf> = request
                    .writable_roots
                    .iter()
                    .filter(|root| root.is_dir())
                    .collect();
                roots.sort_by_key(|root| root.components().count());
                roots.dedup();
                // Each directory between a root and a root nested in it becomes a mount point
                // too, parents first, so no command can rename it and put a symbolic link
                // on the nested root's path (`crate::nested_root_chains`).
                let owned: Vec<PathBuf> = roots.iter().map(|root| (*root).clone()).collect();
                let pins: Vec<PathBuf> = crate::nested_root_chains(&owned)
                    .into_iter()
                    .filter(|dir| !owned.contains(dir))
                    .collect();
                let mut order: Vec<(&PathBuf, bool)> = roots
                    .iter()
                    .map(|root| (*root, true))
                    .chain(pins.iter().map(|dir| (dir, false)))
                    .collect();
                order.sort_by_key(|(dir, _)| dir.components().count());
                for (dir, is_root) in order {
                    if is_root {
                        bind_root(&mut push, dir);
                    } else {
                        push(&["--bind".as_ref(), dir.as_os_str(), dir.as_os_str()]);
                    }
                }
                for dir in &hidden {
                    push(&["--tmpfs".as_ref(), dir.as_os_str()]);
                }
                // A root inside dsh's home (a session run there) stays usable.
                for root in roots
                    .iter()
                    .filter(|root| under_hidden(root) || hidden.contains(root))
                {
                    bind_root(&mut push, root);
                }
                // Read-only only now (non-recursive: the roots bound inside stay writable);
                // bubblewrap cannot create mount points in a tmpfs that is already read-only.
                for dir in &hidden {
                    push(&["--remount-ro".as_ref(), dir.as_os_str()]);
                }
            }
        }
        push(&["--chdir".as_ref(), request.workdir.as_os_str()]);
        if self.user_namespace {
            push(&["--unshare-user".as_ref()]);
        }
        if !request.network {
            push(&["--unshare-net".as_ref()]);
        }
        push(&[
            "--cap-drop".as_ref(),
            "ALL".as_ref(),
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
            "--unshare-pid".as_ref(),
            "--unshare-ipc".as_ref(),
        ]);
        if let Some(fd) = seccomp_fd {
            let fd = OsString::from(fd.to_string());
            push(&["--add-seccomp-fd".as_ref(), fd.as_os_str()]);
        }
        args
    }
}

/// Binds writable `root` read-write, then its protected entries (docs/SECURITY.md,
/// "Protected paths") read-only on top. A `.git` directory without `hooks` gets an empty one
/// first (git creates it anyway), so planting a hook is blocked too; and `.git` itself is
/// bound read-write onto itself, which makes it a mount point: it can then be neither renamed
/// nor removed, so a command cannot move the real `.git` aside and put a new one, with its
/// own hooks, in its place.
fn bind_root(push: &mut impl FnMut(&[&OsStr]), root: &Path) {
    push(&["--bind".as_ref(), root.as_os_str(), root.as_os_str()]);
    let protection = crate::RootProtection::of(root);
    if let Some(git) = &protection.pinned_git {
        push(&["--bind".as_ref(), git.as_os_str(), git.as_os_str()]);
    }
    for entry in &protection.read_only {
        push(&["--ro-bind".as_ref(), entry.as_os_str(), entry.as_os_str()]);
    }
}

/// The request's hidden directories that exist, resolved, without `/` itself.
fn hidden_dirs(request: &ConfinementRequest) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = request
        .hidden_dirs
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .filter(|dir| dir.is_dir() && dir.parent().is_some())
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// In the child before `bwrap` starts: let the seccomp filter file survive `exec` and read it
/// from its start. Two system calls: async-signal-safe.
fn seccomp_fd_hook(fd: Arc<OwnedFd>) -> PreExecHook {
    Arc::new(move || {
        // SAFETY: fcntl and lseek on a descriptor kept open by the Arc.
        unsafe {
            if libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    })
}

impl Bubblewrap {
    /// `plan` run in the prepared sandbox of `request`'s layout: the program stays, a hook
    /// enters the sandbox ([`crate::prepared_bwrap`]). `cached`: the sandbox is kept for later
    /// calls with the same layout (else it ends with the plan: the probe's trial). `Err` says
    /// why no sandbox could be prepared.
    pub(crate) fn confine_prepared(
        &self,
        mut plan: CommandPlan,
        request: &ConfinementRequest,
        cached: bool,
    ) -> Result<CommandPlan, String> {
        let filter = Program::get(Profile::Common, network(request))?;
        // Checked before a sandbox is started for nothing.
        crate::prepared_bwrap::signal_scope()?;
        let workdir = CString::new(request.workdir.as_os_str().as_bytes())
            .map_err(|_| "the working directory's path holds a NUL byte".to_string())?;
        let layout = crate::prepared_bwrap::Layout::new(
            &self.program,
            &request.cwd,
            self.options(request, None),
        );
        let sandbox = if cached {
            crate::prepared_bwrap::sandbox_for(layout)?
        } else {
            crate::prepared_bwrap::uncached(&layout)?
        };
        let image = Arc::clone(&plan.exec_image);
        plan.pre_exec.push(crate::prepared_bwrap::enter_hook(
            sandbox, filter, workdir, image,
        )?);
        Ok(plan)
    }
}

/// Bubblewrap with a prepared sandbox that never falls back to one per command: the probe's
/// trial of the prepared way, so it is chosen only where it works.
pub(crate) struct StrictlyPrepared<'a>(pub(crate) &'a Bubblewrap);

impl CommandConfinement for StrictlyPrepared<'_> {
    fn name(&self) -> &str {
        "bubblewrap"
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        crate::check_roots(request)
            .map_err(|reason| crate::setup_failed(request.preset, &reason))?;
        self.0
            .confine_prepared(plan, request, false)
            .map_err(|reason| crate::setup_failed(request.preset, &reason))
    }
}

impl CommandConfinement for Bubblewrap {
    fn name(&self) -> &str {
        "bubblewrap"
    }

    /// With a prepared sandbox ([`Bubblewrap::prepared`]): `plan` with a hook that enters the
    /// sandbox of its layout. Otherwise (or when no sandbox can be prepared now) wraps `plan` as
    /// `bwrap <options> -- <program> <args>`; its `pre_exec` hooks stay and run before `bwrap`
    /// itself starts, followed by the one that hands bubblewrap the seccomp filter.
    /// `danger-full-access` returns `plan` unchanged.
    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        if request.preset == PermissionPreset::DangerFullAccess {
            return Ok(plan);
        }
        crate::check_roots(request)
            .map_err(|reason| crate::setup_failed(request.preset, &reason))?;
        if self.prepared {
            // A sandbox that cannot be prepared now (bwrap failed to start it) leaves the
            // command to a `bwrap` of its own: the same options, so the same confinement.
            if let Ok(prepared) = self.confine_prepared(plan.clone(), request, true) {
                return Ok(prepared);
            }
        }
        let unavailable = |reason: String| crate::setup_failed(request.preset, &reason);
        let filter = Program::get(Profile::Common, network(request))
            .and_then(Program::memfd)
            .map_err(unavailable)?;
        let mut args = self.options(request, Some(filter.as_raw_fd()));
        args.push("--".into());
        // `bwrap` itself runs unconfined: the spawner starts it in `/` with a fixed
        // environment, and the command's environment is set inside (`Launcher`).
        let command_at = args.len();
        args.push(plan.program);
        args.extend(plan.args);
        let mut pre_exec = plan.pre_exec;
        pre_exec.push(seccomp_fd_hook(Arc::new(filter)));
        Ok(CommandPlan {
            pre_exec,
            launcher: Some(dsh_tools::Launcher { command_at }),
            ..CommandPlan::new(self.program.clone().into_os_string(), args)
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
            hidden_dirs: Vec::new(),
            network: true,
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
        let line = text(&Bubblewrap::new("bwrap").options(&req, None));
        let p = parent.display();
        let c = child.display();
        assert!(
            line.starts_with("--ro-bind / / --dev /dev --proc /proc --remount-ro /proc"),
            "{line}"
        );
        assert!(
            line.contains(&format!("--bind {p} {p} --bind {c} {c}")),
            "{line}"
        );
        assert!(!line.contains("missing"), "{line}");
        assert!(
            line.ends_with(
                "--unshare-user --cap-drop ALL --die-with-parent --new-session --unshare-pid --unshare-ipc"
            ),
            "{line}"
        );
        assert!(!line.contains("--unshare-net"), "network stays: {line}");
        let offline = ConfinementRequest {
            network: false,
            ..req
        };
        let line = text(&Bubblewrap::new("bwrap").options(&offline, None));
        assert!(line.contains(" --unshare-net "), "no network: {line}");
    }

    #[test]
    fn read_only_binds_nothing_writable_and_keeps_a_private_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        let req = request(PermissionPreset::ReadOnly, &cwd, vec![cwd.clone()]);
        let line = text(&Bubblewrap::new("bwrap").options(&req, None));
        assert!(!line.contains("--bind "), "{line}");
        assert!(line.contains("--tmpfs /tmp"), "{line}");
        if cwd.starts_with("/tmp") {
            let c = cwd.display();
            assert!(line.contains(&format!("--ro-bind {c} {c}")), "{line}");
        }
    }

    #[test]
    fn the_hidden_home_turns_read_only_after_the_roots_inside_it_are_bound() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let home = base.join("home");
        let ws = home.join("project");
        std::fs::create_dir_all(&ws).unwrap();
        let mut req = request(PermissionPreset::WorkspaceWrite, &ws, vec![ws.clone()]);
        req.hidden_dirs = vec![home.clone()];
        let line = text(&Bubblewrap::new("bwrap").options(&req, None));
        let (h, w) = (home.display(), ws.display());
        // bubblewrap creates the mount point inside the tmpfs, so the tmpfs must still be
        // writable when the root is bound there.
        assert!(
            line.contains(&format!("--tmpfs {h} --bind {w} {w} --remount-ro {h}")),
            "{line}"
        );
    }

    #[test]
    fn danger_full_access_is_untouched() {
        let plan = CommandPlan::new("bash", vec!["-c".into(), "true".into()]);
        let req = request(PermissionPreset::DangerFullAccess, Path::new("/"), vec![]);
        let out = Bubblewrap::new("bwrap").confine(plan, &req).unwrap();
        assert_eq!(out.program, OsString::from("bash"));
    }
}
