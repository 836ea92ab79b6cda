//! The sandbox seam of `bash`.
//!
//! `bash` builds a [`CommandPlan`] (`bash -c <command>`) and hands it to the context's
//! [`CommandConfinement`], which returns the plan to actually spawn: for bubblewrap the program
//! becomes `bwrap` with the original program and arguments after its own; for Landlock the plan
//! keeps its program and gains a `pre_exec` hook that restricts the child before `exec`.
//! A confinement that cannot honour the preset returns `SANDBOX_UNAVAILABLE`; it never runs the
//! command unconfined, except under `danger-full-access`, which asks for no confinement.
//!
//! This crate ships only [`NoSandbox`]. The real implementations (bubblewrap, Landlock) belong
//! to the safety work (crate `dsh-sandbox`) and plug in with
//! [`ToolContext::with_confinement`](crate::ToolContext::with_confinement).

#[cfg(unix)]
use std::ffi::OsStr;
use std::ffi::{CString, OsString};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::context::PermissionPreset;
use crate::error::{ToolError, ToolErrorCode};

/// A hook run in the child between `fork` and `exec`. It must only make async-signal-safe
/// calls (no allocation, no locks): it runs in a copy of a multi-threaded process.
pub type PreExecHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// The process to spawn for one command. The spawner always adds: its own session and process
/// group, stdin from `/dev/null`, piped stdout/stderr, the scrubbed environment, and the
/// working directory. Keep the plan until the command has ended: a confinement may tie what
/// the command runs in to it (bubblewrap's prepared sandbox ends when the last plan holding
/// it is dropped and no cache keeps it, docs/SECURITY.md "A prepared bubblewrap sandbox per
/// layout").
#[derive(Clone)]
pub struct CommandPlan {
    /// Program to execute (looked up in `PATH` when not absolute).
    pub program: OsString,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// Hooks run in the child before `exec`, in order.
    pub pre_exec: Vec<PreExecHook>,
    /// What the spawner will execute, filled by the spawner before the fork (see
    /// [`ExecImage`]); a hook reads it with `get()`. Plans made for another program start
    /// with an empty slot of their own.
    pub exec_image: ExecSlot,
    /// Set when `program` is a launcher that runs unconfined and starts the command inside
    /// the sandbox (bubblewrap, one per command): see [`Launcher`].
    pub launcher: Option<Launcher>,
}

/// A launcher plan's command line: the launcher (`bwrap`) runs unconfined, as root when dsh
/// is, so it must not load anything the command's environment or working directory name (a
/// `LD_LIBRARY_PATH` a project set, an empty entry that means "the workspace"). The spawner
/// starts it with [`LAUNCHER_ENV`] only and in `/`, and places the command's environment inside
/// the sandbox with `env -i -- NAME=VALUE...` at `command_at` (the index in `args` where the
/// command starts, right after the launcher's `--`); the launcher changes to the working
/// directory itself (bubblewrap's `--chdir`). Found by the fourth adversarial review, where a
/// planted `libcap.so.2` ran in `bwrap` as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launcher {
    /// Where the command starts in the plan's `args`.
    pub command_at: usize,
}

/// The whole environment of a launcher ([`Launcher`]): a fixed `PATH`, nothing else.
pub const LAUNCHER_ENV: [(&str, &str); 1] = [("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")];

impl CommandPlan {
    /// A plan for `program` with `args`, no hooks yet.
    pub fn new(program: impl Into<OsString>, args: Vec<OsString>) -> CommandPlan {
        CommandPlan {
            program: program.into(),
            args,
            pre_exec: Vec::new(),
            exec_image: ExecSlot::default(),
            launcher: None,
        }
    }

    /// What the spawner runs for this plan with the command's environment `env` in
    /// `workdir`: program arguments, environment and working directory. A plain plan runs as
    /// given; a [`Launcher`] plan gets [`LAUNCHER_ENV`] and `/`, and the command gets `env`
    /// inside the sandbox through `env -i` (variables whose name is empty, holds `=` or a NUL,
    /// or whose value holds a NUL, cannot be passed and are left out).
    pub fn spawn_parts(
        &self,
        env: Vec<(OsString, OsString)>,
        workdir: &std::path::Path,
    ) -> (Vec<OsString>, Vec<(OsString, OsString)>, PathBuf) {
        let Some(launcher) = self.launcher else {
            return (self.args.clone(), env, workdir.to_path_buf());
        };
        let at = launcher.command_at.min(self.args.len());
        let mut args: Vec<OsString> = self.args[..at].to_vec();
        args.extend(["env", "-i", "--"].map(OsString::from));
        for (name, value) in env {
            let name_bytes = name.as_encoded_bytes();
            let passable = !name_bytes.is_empty()
                && !name_bytes.contains(&b'=')
                && !name_bytes.contains(&0)
                && !value.as_encoded_bytes().contains(&0);
            if passable {
                let mut pair = name;
                pair.push("=");
                pair.push(&value);
                args.push(pair);
            }
        }
        args.extend(self.args[at..].iter().cloned());
        let env = LAUNCHER_ENV
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        (args, env, PathBuf::from("/"))
    }
}

/// Where the spawner leaves a plan's [`ExecImage`] for its hooks.
pub type ExecSlot = Arc<OnceLock<ExecImage>>;

/// What the command's process executes, prepared before the fork from the very values the
/// spawner gives the `Command`: the places the program may be (`PATH` searched as `execvp`
/// does), the argument vector and the environment, each NUL-terminated. It lets a hook start
/// the command itself, from a process that must stay behind (the keeper of a Landlock
/// sandbox, which then need not copy dsh's memory for the command: docs/PERFORMANCE.md,
/// "The keeper starts the command without a copy").
#[cfg_attr(not(unix), allow(dead_code))]
pub struct ExecImage {
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    argv_ptrs: Vec<*const std::ffi::c_char>,
    envp_ptrs: Vec<*const std::ffi::c_char>,
}

// SAFETY: the pointers point into the `CString`s owned by the same value, which are never
// changed or moved after `new` (a `CString`'s bytes live on the heap).
unsafe impl Send for ExecImage {}
// SAFETY: as above; nothing is mutated through `&ExecImage`.
unsafe impl Sync for ExecImage {}

impl fmt::Debug for ExecImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecImage")
            .field("candidates", &self.candidates)
            .field("argv", &self.argv)
            .field("envp", &self.envp.len())
            .finish()
    }
}

#[cfg(unix)]
impl ExecImage {
    /// The image of `program` with `args` (without the program name) in `env`; `None` when a
    /// value holds a NUL byte (the spawner then fails as it would have anyway).
    pub fn new(program: &OsStr, args: &[OsString], env: &[(OsString, OsString)]) -> Option<Self> {
        use std::os::unix::ffi::OsStrExt;
        let c = |bytes: &[u8]| CString::new(bytes).ok();
        let name = program.as_bytes();
        let candidates = if name.contains(&b'/') {
            vec![c(name)?]
        } else {
            // `execvp`'s search: each `PATH` entry in order, an empty one meaning the working
            // directory; without `PATH` the C library's default.
            let path = env
                .iter()
                .find(|(key, _)| key == "PATH")
                .map_or(&b"/bin:/usr/bin"[..], |(_, value)| value.as_bytes());
            path.split(|&b| b == b':')
                .map(|dir| match dir {
                    b"" => c(name),
                    dir => c(&[dir, b"/", name].concat()),
                })
                .collect::<Option<Vec<_>>>()?
        };
        let argv = std::iter::once(program)
            .chain(args.iter().map(OsString::as_os_str))
            .map(|arg| c(arg.as_bytes()))
            .collect::<Option<Vec<_>>>()?;
        let envp = env
            .iter()
            .map(|(key, value)| c(&[key.as_bytes(), b"=", value.as_bytes()].concat()))
            .collect::<Option<Vec<_>>>()?;
        let pointers = |strings: &[CString]| {
            (strings.iter().map(|s| s.as_ptr()))
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Some(ExecImage {
            argv_ptrs: pointers(&argv),
            envp_ptrs: pointers(&envp),
            candidates,
            argv,
            envp,
        })
    }

    /// Executes the image: `execve` of each candidate in turn. Returns only when none could
    /// run, with the error `execvp` would give (permission denied when a candidate was found
    /// but not executable, else the last error). Async-signal-safe: system calls on memory
    /// made before the fork, no allocation.
    pub fn exec(&self) -> io::Error {
        let mut denied = false;
        let mut last = libc::ENOENT;
        for candidate in &self.candidates {
            // SAFETY: the path and both vectors are NUL-terminated and outlive the call.
            unsafe {
                libc::execve(
                    candidate.as_ptr(),
                    self.argv_ptrs.as_ptr(),
                    self.envp_ptrs.as_ptr(),
                );
            }
            last = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOENT);
            match last {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                // Found but not runnable for another reason: as execvp, stop here.
                _ => return io::Error::from_raw_os_error(last),
            }
        }
        io::Error::from_raw_os_error(if denied { libc::EACCES } else { last })
    }
}

impl fmt::Debug for CommandPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandPlan")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("pre_exec", &self.pre_exec.len())
            .field("launcher", &self.launcher)
            .finish()
    }
}

/// What a confinement needs to know about the call.
#[derive(Debug, Clone)]
pub struct ConfinementRequest {
    /// The preset whose confinement applies: the session's [`PermissionPreset::confinement`]
    /// (`ask` arrives as `workspace-write`; a confinement given `ask` confines it the same).
    pub preset: PermissionPreset,
    /// The canonical session cwd.
    pub cwd: PathBuf,
    /// The directory the command starts in.
    pub workdir: PathBuf,
    /// Directories the command may write under `workspace-write` (cwd and temp dirs).
    pub writable_roots: Vec<PathBuf>,
    /// Directories the command must not see at all where the mechanism can hide them (dsh's
    /// home: credentials, trust records, the web UI's token page; see [`hidden_dirs`]).
    pub hidden_dirs: Vec<PathBuf>,
    /// Whether the command may reach the network: the session's setting (`[sandbox] network`),
    /// or `true` for one call the user approved with `network: true` (docs/SECURITY.md,
    /// "Network"). `false`: bubblewrap gives the command a network namespace of its own (only
    /// a loopback), and the seccomp filter refuses sockets that could leave the sandbox.
    pub network: bool,
}

/// Confines a command that a trusted project configured (its hooks and MCP servers) exactly as
/// `bash` is confined: the plan to spawn for `plan` started in the given folder, or why it
/// cannot run. Nothing the model can write (a project script, a `Makefile`, a package's
/// scripts) then runs with more power than the model's own commands. The runtime makes one
/// from the session's current preset (docs/SECURITY.md, "Project hooks and MCP servers run
/// confined"); a project command with no confiner is refused, never run unconfined.
pub type CommandConfiner =
    Arc<dyn Fn(CommandPlan, &std::path::Path) -> Result<CommandPlan, ToolError> + Send + Sync>;

/// The directories confined commands must not see: dsh's home, `$DSH_HOME` when set and not
/// empty, else `$HOME/.dsh` (the rule of `dsh-cli`'s `home.rs`, docs/SECURITY.md "Process
/// sandbox"). A relative value is taken from dsh's working directory, as dsh itself uses it.
pub fn hidden_dirs() -> Vec<PathBuf> {
    hidden_dirs_from(
        std::env::var_os("DSH_HOME"),
        std::env::var_os("HOME"),
        std::env::current_dir().ok(),
    )
}

/// [`hidden_dirs`] for the values of `DSH_HOME`, `HOME` and the working directory.
fn hidden_dirs_from(
    dsh_home: Option<OsString>,
    home: Option<OsString>,
    cwd: Option<PathBuf>,
) -> Vec<PathBuf> {
    let home = match dsh_home.filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home),
        None => match home.filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".dsh"),
            None => return Vec::new(),
        },
    };
    if home.is_absolute() {
        return vec![home];
    }
    // A relative home is where dsh uses it: under dsh's working directory (skipping it left
    // the home visible to every confined command; fourth adversarial review).
    cwd.map(|dir| vec![dir.join(home)]).unwrap_or_default()
}

/// Turns a plain command plan into a confined one, or refuses.
pub trait CommandConfinement: Send + Sync {
    /// A short name for logs (`none`, `bubblewrap`, `landlock`).
    fn name(&self) -> &str;

    /// Returns the plan to spawn for `plan` under `request`, or `SANDBOX_UNAVAILABLE` when the
    /// preset requires confinement this implementation cannot provide. Under
    /// `danger-full-access` implementations return `plan` unchanged.
    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError>;
}

/// The confinement of a build without a sandbox: runs commands unconfined under
/// `danger-full-access` and refuses them (`SANDBOX_UNAVAILABLE`) under every other preset,
/// because an unconfined run there would silently exceed what the user allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSandbox;

impl CommandConfinement for NoSandbox {
    fn name(&self) -> &str {
        "none"
    }

    fn confine(
        &self,
        plan: CommandPlan,
        request: &ConfinementRequest,
    ) -> Result<CommandPlan, ToolError> {
        match request.preset {
            PermissionPreset::DangerFullAccess => Ok(plan),
            preset @ (PermissionPreset::ReadOnly
            | PermissionPreset::WorkspaceWrite
            | PermissionPreset::Ask) => {
                Err(ToolError::new(
                    ToolErrorCode::SandboxUnavailable,
                    format!(
                        "bash cannot run under the {preset} preset: no process sandbox is available, and commands never run unconfined outside danger-full-access"
                    ),
                ))
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::path::Path;

    use super::*;

    #[test]
    fn a_relative_home_is_hidden_where_dsh_uses_it() {
        let cwd = Some(PathBuf::from("/work/p"));
        let of = |dsh: Option<&str>, home: Option<&str>| {
            hidden_dirs_from(dsh.map(Into::into), home.map(Into::into), cwd.clone())
        };
        assert_eq!(of(Some("/h/dsh"), None), [PathBuf::from("/h/dsh")]);
        assert_eq!(
            of(Some("rel/home"), None),
            [PathBuf::from("/work/p/rel/home")]
        );
        assert_eq!(of(None, Some("/root")), [PathBuf::from("/root/.dsh")]);
        assert_eq!(of(Some(""), Some("me")), [PathBuf::from("/work/p/me/.dsh")]);
        assert!(of(None, None).is_empty());
    }

    #[test]
    fn a_launcher_gets_a_fixed_environment_and_the_command_its_own_inside() {
        let plan = CommandPlan {
            launcher: Some(Launcher { command_at: 2 }),
            ..CommandPlan::new("bwrap", vec!["--opt".into(), "--".into(), "bash".into()])
        };
        let env = vec![
            (OsString::from("LD_LIBRARY_PATH"), OsString::from("lib")),
            (OsString::from("A"), OsString::from("x y")),
            (OsString::from("BAD=NAME"), OsString::from("v")),
        ];
        let (args, launcher_env, dir) = plan.spawn_parts(env.clone(), Path::new("/ws"));
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            args,
            [
                "--opt",
                "--",
                "env",
                "-i",
                "--",
                "LD_LIBRARY_PATH=lib",
                "A=x y",
                "bash"
            ]
        );
        assert_eq!(launcher_env.len(), 1);
        assert_eq!(launcher_env[0].0, "PATH");
        assert_eq!(dir, Path::new("/"));
        // A plain plan runs as given.
        let plain = CommandPlan::new("bash", vec!["-c".into(), "true".into()]);
        let (args, kept, dir) = plain.spawn_parts(env.clone(), Path::new("/ws"));
        assert_eq!(args, plain.args);
        assert_eq!(kept, env);
        assert_eq!(dir, Path::new("/ws"));
    }

    fn script(dir: &Path, name: &str, says: &str, mode: u32) {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho {says}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Runs `program` through its image only (the `Command`'s own program is `false`): the
    /// output, or the error `exec` gave.
    fn run_image(program: &str, path: &str, cwd: &Path) -> io::Result<String> {
        let env = [(OsString::from("PATH"), OsString::from(path))];
        let image = ExecImage::new(program.as_ref(), &[], &env).unwrap();
        let mut command = std::process::Command::new("false");
        command.current_dir(cwd);
        // SAFETY: `ExecImage::exec` is async-signal-safe.
        unsafe {
            command.pre_exec(move || Err(image.exec()));
        }
        let out = command.output()?;
        Ok(String::from_utf8(out.stdout).unwrap())
    }

    #[test]
    fn the_image_searches_path_in_order_as_execvp_does() {
        let root = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            root.path().join("a"),
            root.path().join("b"),
            root.path().join("c"),
        );
        for dir in [&a, &b, &c] {
            std::fs::create_dir(dir).unwrap();
        }
        script(&b, "prog", "b", 0o755);
        script(&c, "prog", "c", 0o755);
        let path = format!("{}:{}:{}", a.display(), b.display(), c.display());
        assert_eq!(run_image("prog", &path, root.path()).unwrap(), "b\n");
        // A name with a slash is not searched for.
        let err = run_image("./prog", &path, root.path()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(run_image("./prog", &path, &c).unwrap(), "c\n");
    }

    #[test]
    fn a_program_found_but_not_executable_is_skipped_and_reported_if_nothing_else_runs() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        script(&a, "prog", "a", 0o644);
        let only_a = a.display().to_string();
        // Root may execute any file with an execute bit; 0o644 has none for anyone.
        let err = run_image("prog", &only_a, root.path()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EACCES));
        script(&b, "prog", "b", 0o755);
        let both = format!("{}:{}", a.display(), b.display());
        assert_eq!(run_image("prog", &both, root.path()).unwrap(), "b\n");
        let err = run_image("missing", &both, root.path()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn an_empty_path_entry_is_the_working_directory() {
        let root = tempfile::tempdir().unwrap();
        script(root.path(), "prog", "here", 0o755);
        assert_eq!(
            run_image("prog", "/nonexistent:", root.path()).unwrap(),
            "here\n"
        );
    }

    #[test]
    fn arguments_and_environment_are_passed_as_given() {
        let env = [
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
            (OsString::from("ONLY"), OsString::from("this")),
        ];
        let args = [
            OsString::from("-c"),
            OsString::from("echo \"$0 $ONLY $HOME\""),
            OsString::from("zero"),
        ];
        let image = ExecImage::new("sh".as_ref(), &args, &env).unwrap();
        let mut command = std::process::Command::new("false");
        // SAFETY: `ExecImage::exec` is async-signal-safe.
        unsafe {
            command.pre_exec(move || Err(image.exec()));
        }
        let out = command.output().unwrap();
        // `HOME` is not passed on: the image's environment is all the command gets.
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "zero this \n");
        assert!(ExecImage::new("a\0b".as_ref(), &[], &[]).is_none());
    }
}
