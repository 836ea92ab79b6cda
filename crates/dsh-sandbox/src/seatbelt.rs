//! macOS confinement: Seatbelt, through `/usr/bin/sandbox-exec -p <profile>` (docs/SECURITY.md,
//! "Platforms").
//!
//! The profile is made by [`seatbelt_profile`], a pure function of [`SeatbeltPolicy`] that
//! compiles and is tested on every platform (golden profiles in `tests/golden/`). Its shape:
//!
//! * everything is allowed by default (reading, executing, the network), as on Linux, where
//!   the mechanisms restrict writes and not reads or the network;
//! * every write is denied, then allowed again for a few devices (`/dev/null`, `/dev/tty`, ...)
//!   and, under `workspace-write`, beneath each writable root, minus the protected entries of
//!   `dsh-tools/src/protected.rs` at the top of the root: `.dsh`, `.agents`, `.claude`,
//!   `.mcp.json` and `.env*` whether they exist or not (Seatbelt matches paths, so an entry
//!   created later is covered too), and, when `.git` exists, `.git` itself (it cannot be renamed
//!   or replaced), `.git/hooks` and `.git/config` (a `.git` file, a `gitdir:` pointer, is the
//!   entry itself). The exclusions sit inside the allowing rule (`require-not`), so no rule
//!   order can let a protected write through;
//! * dsh's home is neither readable nor writable (except a writable root or the cwd inside it);
//! * signals and process inspection of processes outside the sandbox are denied.
//!
//! Paths must be canonical: Seatbelt matches the real path (`/tmp` is `/private/tmp`);
//! [`Seatbelt::confine`] resolves them before it builds the profile.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use dsh_tools::{CommandConfinement, CommandPlan, ConfinementRequest, PermissionPreset, ToolError};

/// The one `sandbox-exec` dsh runs: a fixed system path, never one found on `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Devices every confined command may write (output to nowhere, its terminal, its own
/// descriptors, the DTrace helper the dynamic loader opens).
const WRITABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"];

/// What a writable root holds at `.git` when the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitEntry {
    /// Nothing: `git init` may create it.
    Missing,
    /// A repository directory: pinned, with `hooks` and `config` read-only.
    Directory,
    /// A `gitdir:` pointer file (worktree, submodule): read-only.
    File,
}

/// One writable root of a [`SeatbeltPolicy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltRoot {
    /// The canonical absolute path.
    pub path: PathBuf,
    /// What is at `<path>/.git`.
    pub git: GitEntry,
}

/// Everything a Seatbelt profile depends on (no file system access happens in
/// [`seatbelt_profile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltPolicy {
    /// `read-only` or `workspace-write` (`danger-full-access` is never confined).
    pub preset: PermissionPreset,
    /// Where `workspace-write` lets the command write (ignored under `read-only`).
    pub writable_roots: Vec<SeatbeltRoot>,
    /// Directories the command may neither read nor write (dsh's home).
    pub hidden_dirs: Vec<PathBuf>,
    /// Directories that stay readable even inside a hidden one (the session's cwd; never a
    /// command's start directory, which the model chooses).
    pub visible_dirs: Vec<PathBuf>,
    /// Whether the command may reach the network (`ConfinementRequest::network`); without it
    /// every IP connection and bind is denied (Unix sockets stay).
    pub network: bool,
}

/// The SBPL text of the profile for `policy`, or why none can be made: a path that is not
/// absolute, not UTF-8, or holds a character a profile string cannot carry safely (`"`, `\`,
/// control characters); or the `danger-full-access` preset, which is never confined.
pub fn seatbelt_profile(policy: &SeatbeltPolicy) -> Result<String, String> {
    if policy.preset == PermissionPreset::DangerFullAccess {
        return Err("danger-full-access runs commands without a sandbox profile".to_string());
    }
    let mut out = String::new();
    out.push_str("(version 1)\n");
    let _ = writeln!(
        out,
        "; dsh Seatbelt profile, preset {} (docs/SECURITY.md, \"Platforms\")",
        policy.preset
    );
    out.push_str("(allow default)\n");
    out.push_str("(deny signal (target others))\n");
    out.push_str("(deny process-info* (target others))\n");
    if !policy.network {
        // docs/SECURITY.md, "Network". Not run on a Mac yet, like the rest of the profile.
        out.push_str("(deny network-outbound (remote ip))\n");
        out.push_str("(deny network-bind (local ip))\n");
    }
    out.push_str("(deny file-write*)\n");
    out.push_str("(allow file-write*");
    for device in WRITABLE_DEVICES {
        let _ = write!(out, "\n  (literal \"{device}\")");
    }
    out.push_str("\n  (subpath \"/dev/fd\"))\n");
    if policy.preset.confinement() == PermissionPreset::WorkspaceWrite {
        for root in &policy.writable_roots {
            root_rule(&mut out, root)?;
        }
    }
    for hidden in &policy.hidden_dirs {
        let hidden_text = checked(hidden)?;
        let mut kept = Vec::new();
        let roots = policy
            .writable_roots
            .iter()
            .map(|root| &root.path)
            .filter(|_| policy.preset.confinement() == PermissionPreset::WorkspaceWrite);
        for inside in roots.chain(&policy.visible_dirs) {
            if inside.starts_with(hidden) {
                let text = checked(inside)?;
                if !kept.contains(&text) {
                    kept.push(text);
                }
            }
        }
        if kept.is_empty() {
            let _ = writeln!(
                out,
                "(deny file-read* file-write* (subpath \"{hidden_text}\"))"
            );
        } else {
            let _ = write!(
                out,
                "(deny file-read* file-write*\n  (require-all (subpath \"{hidden_text}\")"
            );
            for text in kept {
                let _ = write!(out, "\n    (require-not (subpath \"{text}\"))");
            }
            out.push_str("))\n");
        }
    }
    Ok(out)
}

/// The rule allowing writes beneath `root` except its protected entries.
fn root_rule(out: &mut String, root: &SeatbeltRoot) -> Result<(), String> {
    let base = checked(&root.path)?;
    let _ = write!(
        out,
        "(allow file-write*\n  (require-all (subpath \"{base}\")"
    );
    let mut not = |filter: String| {
        let _ = write!(out, "\n    (require-not {filter})");
    };
    let prefix = if base == "/" { "" } else { base.as_str() };
    for name in dsh_tools::PROTECTED_NAMES
        .iter()
        .chain(&dsh_tools::PROTECTED_MORE_NAMES)
    {
        not(format!("(subpath \"{prefix}/{name}\")"));
    }
    not(format!(
        "(regex #\"^{}/{}[^/]*(/|$)\")",
        regex_escape(prefix),
        regex_escape(dsh_tools::PROTECTED_ENV_PREFIX)
    ));
    match root.git {
        GitEntry::Missing => {}
        GitEntry::File => not(format!("(literal \"{prefix}/.git\")")),
        GitEntry::Directory => not(format!("(subpath \"{prefix}/.git\")")),
    }
    // Every git directory below the root, whole, existing or not (Seatbelt matches paths, so
    // an entry git reads that does not exist yet, such as `commondir`, is covered too;
    // docs/SECURITY.md, "Protected paths").
    not(format!(
        "(regex #\"^{}/(.*/)?\\.git(/|$)\")",
        regex_escape(prefix)
    ));
    out.push_str("))\n");
    Ok(())
}

/// `path` as text that can sit between the quotes of an SBPL string (and of a `#"..."` regex):
/// absolute, UTF-8, no `"`, `\` or control characters, no trailing `/` (except `/` itself).
fn checked(path: &Path) -> Result<String, String> {
    let text = path
        .to_str()
        .ok_or_else(|| format!("{} is not valid UTF-8", path.display()))?;
    if !path.is_absolute() {
        return Err(format!("{text} is not an absolute path"));
    }
    if text
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        return Err(format!(
            "{text:?} contains a quote, a backslash or a control character, which a Seatbelt profile cannot hold safely; use a directory without them"
        ));
    }
    let trimmed = text.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
}

/// `text` with every extended-regex metacharacter escaped.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if ".^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Seatbelt as a [`CommandConfinement`]: the command runs as
/// `/usr/bin/sandbox-exec -p <profile> -- <program> <args>`; `sandbox-exec` applies the
/// profile to itself and `exec`s the command, so the pid, the process group made by `setsid`
/// and the kill on timeout are the command's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seatbelt {
    program: PathBuf,
}

impl Default for Seatbelt {
    fn default() -> Self {
        Self {
            program: PathBuf::from(SANDBOX_EXEC),
        }
    }
}

impl Seatbelt {
    /// The `sandbox-exec` this confinement runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The policy of `request`: roots and hidden directories resolved to their real paths
    /// (missing roots are left out: nothing is allowed there), `.git` of each root looked at.
    pub fn policy_for(request: &ConfinementRequest) -> SeatbeltPolicy {
        let mut writable_roots: Vec<SeatbeltRoot> = Vec::new();
        for root in &request.writable_roots {
            let Ok(path) = std::fs::canonicalize(root) else {
                continue;
            };
            let git = match std::fs::symlink_metadata(path.join(".git")) {
                Ok(meta) if meta.is_dir() => GitEntry::Directory,
                Ok(_) => GitEntry::File,
                Err(_) => GitEntry::Missing,
            };
            if !writable_roots.iter().any(|known| known.path == path) {
                writable_roots.push(SeatbeltRoot { path, git });
            }
        }
        let real = |path: &PathBuf| std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        SeatbeltPolicy {
            preset: request.preset,
            writable_roots,
            hidden_dirs: request.hidden_dirs.iter().map(real).collect(),
            // The session's cwd only: a command's `workdir` (chosen by the model or a project)
            // must not un-hide dsh's home (found by the fourth adversarial review).
            visible_dirs: vec![real(&request.cwd)],
            network: request.network,
        }
    }

    /// Whether Seatbelt works on this host, tried once per process: `sandbox-exec` must exist
    /// and a trial command under a generated profile must write inside its directory and fail
    /// to write beside it. Elsewhere than macOS, the reason it cannot.
    pub fn cached() -> Result<Seatbelt, String> {
        static PROBE: std::sync::OnceLock<Result<Seatbelt, String>> = std::sync::OnceLock::new();
        PROBE.get_or_init(detect).clone()
    }
}

#[cfg(target_os = "macos")]
fn detect() -> Result<Seatbelt, String> {
    use std::process::{Command, Stdio};
    let seatbelt = Seatbelt::default();
    if !seatbelt.program.is_file() {
        return Err(format!("{SANDBOX_EXEC} is missing"));
    }
    let base = std::env::temp_dir().join(format!("dsh-seatbelt-probe-{}", std::process::id()));
    let inside = base.join("ws");
    let outside = base.join("outside");
    for dir in [&inside, &outside] {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    }
    let request = ConfinementRequest {
        preset: PermissionPreset::WorkspaceWrite,
        cwd: inside.clone(),
        workdir: inside.clone(),
        writable_roots: vec![inside.clone()],
        hidden_dirs: Vec::new(),
        network: true,
    };
    let plan = CommandPlan::new(
        "/bin/sh",
        vec![
            "-c".into(),
            "echo ok > ok; echo escaped > \"$0/escaped\" 2>/dev/null; exit 0".into(),
            outside.clone().into_os_string(),
        ],
    );
    let result = seatbelt
        .confine(plan, &request)
        .map_err(|err| err.message)
        .and_then(|plan| {
            Command::new(&plan.program)
                .args(&plan.args)
                .current_dir(&inside)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|err| format!("cannot start {SANDBOX_EXEC}: {err}"))
        })
        .and_then(|_| {
            if outside.join("escaped").exists() {
                Err("a write outside the allowed directory was not blocked".to_string())
            } else if !inside.join("ok").exists() {
                Err("the trial command could not write inside the allowed directory".to_string())
            } else {
                Ok(seatbelt.clone())
            }
        });
    // Best effort: a leftover probe directory in the temp dir harms nothing.
    let _ = std::fs::remove_dir_all(&base);
    result.map_err(|reason| format!("Seatbelt does not work here: {reason}"))
}

#[cfg(not(target_os = "macos"))]
fn detect() -> Result<Seatbelt, String> {
    Err(format!(
        "Seatbelt exists only on macOS (this is {})",
        std::env::consts::OS
    ))
}

impl CommandConfinement for Seatbelt {
    fn name(&self) -> &str {
        "seatbelt"
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        if request.preset == PermissionPreset::DangerFullAccess {
            return Ok(plan);
        }
        let profile = seatbelt_profile(&Self::policy_for(request))
            .map_err(|reason| crate::setup_failed(request.preset, &reason))?;
        let mut args = vec![
            "-p".into(),
            profile.into(),
            "--".into(),
            plan.program.clone(),
        ];
        args.extend(plan.args);
        Ok(CommandPlan {
            pre_exec: plan.pre_exec,
            ..CommandPlan::new(self.program.clone().into_os_string(), args)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn golden(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name)
    }

    /// Compares `text` with the golden file `name`; `DSH_UPDATE_GOLDEN=1` rewrites it.
    fn assert_golden(name: &str, text: &str) {
        let path = golden(name);
        if std::env::var_os("DSH_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!("{}: {err} (DSH_UPDATE_GOLDEN=1 writes it)", path.display())
        });
        assert_eq!(text, expected, "profile differs from {}", path.display());
        assert_balanced(text);
    }

    /// Every `(` outside strings and comments has its `)`.
    fn assert_balanced(text: &str) {
        let mut depth = 0i32;
        for line in text.lines() {
            let mut in_string = false;
            for c in line.chars() {
                match c {
                    '"' => in_string = !in_string,
                    ';' if !in_string => break,
                    '(' if !in_string => depth += 1,
                    ')' if !in_string => depth -= 1,
                    _ => {}
                }
                assert!(depth >= 0, "unbalanced: {line}");
            }
            assert!(!in_string, "unterminated string: {line}");
        }
        assert_eq!(depth, 0, "unbalanced profile:\n{text}");
    }

    fn policy(preset: PermissionPreset) -> SeatbeltPolicy {
        SeatbeltPolicy {
            preset,
            writable_roots: vec![
                SeatbeltRoot {
                    path: "/Users/ana/work/app".into(),
                    git: GitEntry::Directory,
                },
                SeatbeltRoot {
                    path: "/private/tmp".into(),
                    git: GitEntry::Missing,
                },
                SeatbeltRoot {
                    path: "/private/var/folders/x1/a+b (c)/T".into(),
                    git: GitEntry::File,
                },
            ],
            hidden_dirs: vec!["/Users/ana/.dsh".into()],
            visible_dirs: vec!["/Users/ana/work/app".into()],
            network: true,
        }
    }

    #[test]
    fn workspace_write_golden_profile() {
        let profile = seatbelt_profile(&policy(PermissionPreset::WorkspaceWrite)).unwrap();
        assert_golden("seatbelt-workspace-write.sb", &profile);
        // The facts the golden file must keep, named so a regeneration cannot drop them.
        for needle in [
            "(deny file-write*)\n",
            "(require-not (subpath \"/Users/ana/work/app/.dsh\"))",
            "(require-not (regex #\"^/Users/ana/work/app/\\.env[^/]*(/|$)\"))",
            "(require-not (subpath \"/Users/ana/work/app/.git\"))",
            "(require-not (regex #\"^/Users/ana/work/app/(.*/)?\\.git(/|$)\"))",
            "(require-not (subpath \"/Users/ana/work/app/.codex\"))",
            "(regex #\"^/private/var/folders/x1/a\\+b \\(c\\)/T/\\.env[^/]*(/|$)\")",
            "(require-not (literal \"/private/var/folders/x1/a+b (c)/T/.git\"))",
            "(deny file-read* file-write* (subpath \"/Users/ana/.dsh\"))",
        ] {
            assert!(profile.contains(needle), "missing {needle} in\n{profile}");
        }
        assert!(
            !profile.contains("(literal \"/private/tmp/.git\")"),
            "{profile}"
        );
    }

    #[test]
    fn without_network_ip_is_denied_and_unix_sockets_stay() {
        let online = seatbelt_profile(&policy(PermissionPreset::WorkspaceWrite)).unwrap();
        assert!(!online.contains("network"), "{online}");
        let offline = SeatbeltPolicy {
            network: false,
            ..policy(PermissionPreset::WorkspaceWrite)
        };
        let profile = seatbelt_profile(&offline).unwrap();
        assert!(
            profile
                .contains("(deny network-outbound (remote ip))\n(deny network-bind (local ip))\n"),
            "{profile}"
        );
        assert!(!profile.contains("unix"), "{profile}");
        assert_balanced(&profile);
    }

    #[test]
    fn read_only_golden_profile() {
        let profile = seatbelt_profile(&policy(PermissionPreset::ReadOnly)).unwrap();
        assert_golden("seatbelt-read-only.sb", &profile);
        assert!(!profile.contains("/Users/ana/work"), "{profile}");
        assert!(!profile.contains("/private/tmp"), "{profile}");
    }

    #[test]
    fn a_root_inside_the_hidden_home_stays_usable() {
        let mut policy = policy(PermissionPreset::WorkspaceWrite);
        policy.writable_roots = vec![SeatbeltRoot {
            path: "/Users/ana/.dsh/scratch".into(),
            git: GitEntry::Missing,
        }];
        policy.visible_dirs = vec![
            "/Users/ana/.dsh/scratch".into(),
            "/Users/ana/.dsh/scratch".into(),
        ];
        let profile = seatbelt_profile(&policy).unwrap();
        assert_golden("seatbelt-root-in-home.sb", &profile);
        assert_eq!(
            profile
                .matches("(require-not (subpath \"/Users/ana/.dsh/scratch\"))")
                .count(),
            1,
            "{profile}"
        );
    }

    #[test]
    fn unsafe_paths_and_danger_full_access_get_no_profile() {
        for bad in ["/tmp/a\"b", "/tmp/a\\b", "/tmp/a\nb", "relative/dir"] {
            let mut policy = policy(PermissionPreset::WorkspaceWrite);
            policy.writable_roots[0].path = bad.into();
            let err = seatbelt_profile(&policy).unwrap_err();
            assert!(
                err.contains(bad.trim_end_matches('/')) || err.contains("contains"),
                "{err}"
            );
        }
        let err = seatbelt_profile(&policy(PermissionPreset::DangerFullAccess)).unwrap_err();
        assert!(err.contains("danger-full-access"), "{err}");
    }

    #[test]
    fn confine_resolves_real_paths_and_wraps_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let ws = real.join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        let wt = real.join("worktree");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let link = real.join("link");
        std::os::unix::fs::symlink(&ws, &link).unwrap();
        let request = ConfinementRequest {
            preset: PermissionPreset::WorkspaceWrite,
            cwd: link.clone(),
            workdir: link.clone(),
            writable_roots: vec![link.clone(), wt.clone(), real.join("missing")],
            hidden_dirs: vec![real.join("home")],
            network: true,
        };
        let plan = CommandPlan::new("bash", vec!["-c".into(), "echo hi".into()]);
        let confined = Seatbelt::default().confine(plan, &request).unwrap();
        assert_eq!(confined.program, SANDBOX_EXEC);
        assert_eq!(confined.args[0], "-p");
        assert_eq!(confined.args[2], "--");
        assert_eq!(&confined.args[3..], ["bash", "-c", "echo hi"]);
        let profile = confined.args[1].to_str().unwrap();
        let ws = ws.display();
        let wt = wt.display();
        assert!(
            profile.contains(&format!("(subpath \"{ws}\")")),
            "{profile}"
        );
        assert!(
            profile.contains(&format!("(subpath \"{ws}/.git\")")),
            "the whole git directory is protected: {profile}"
        );
        assert!(
            profile.contains(&format!("(literal \"{wt}/.git\")")),
            "{profile}"
        );
        assert!(!profile.contains(&format!("{wt}/.git/hooks")), "{profile}");
        assert!(!profile.contains("missing"), "{profile}");
        assert!(!profile.contains(&link.display().to_string()), "{profile}");
        assert_balanced(profile);

        let danger = ConfinementRequest {
            preset: PermissionPreset::DangerFullAccess,
            ..request
        };
        let plan = CommandPlan::new("bash", vec![]);
        let same = Seatbelt::default().confine(plan, &danger).unwrap();
        assert_eq!(same.program, "bash");
    }

    #[test]
    fn a_profile_that_cannot_be_made_refuses_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("quo\"te");
        std::fs::create_dir(&bad).unwrap();
        let request = ConfinementRequest {
            preset: PermissionPreset::WorkspaceWrite,
            cwd: bad.clone(),
            workdir: bad.clone(),
            writable_roots: vec![bad],
            hidden_dirs: Vec::new(),
            network: true,
        };
        let plan = CommandPlan::new("bash", vec![]);
        let err = Seatbelt::default().confine(plan, &request).unwrap_err();
        assert_eq!(err.code, dsh_tools::ToolErrorCode::SandboxUnavailable);
        assert!(err.message.contains("quote"), "{}", err.message);
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn seatbelt_is_not_offered_off_macos() {
        let err = Seatbelt::cached().unwrap_err();
        assert!(err.contains("only on macOS"), "{err}");
    }
}
