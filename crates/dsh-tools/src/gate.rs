//! The file gate: the one place that decides whether dsh's own code may read or write a file,
//! and the one way it then opens it (docs/SECURITY.md, "The file gate").
//!
//! Every in-process file access on the model's or a repository's behalf goes through here:
//! `read`, `read_image`, `grep`, `glob`, `write`, `edit`, the instruction files (`AGENTS.md`,
//! `CLAUDE.md`), `@` mentions (files, images, folders, the finder's walk), `/undo` and `/diff`.
//! One policy ([`GatePolicy`]) answers:
//!
//! * **Denied** (reads and writes, every preset): `$DSH_HOME` (except the session's own spill
//!   folder and a workspace inside it), other tools' credentials in the home (`~/.ssh`,
//!   `~/.aws`, `~/.config/gh`, `~/.netrc`, `~/.docker/config.json`, keyrings, `~/.codex/auth.json`,
//!   `~/.claude/.credentials.json`, ...), `/etc/shadow` and friends, every `/proc/<pid>`
//!   (`environ`, `mem`, `fd`, `root`, ...). Names compare without regard to ASCII case, so a
//!   case-insensitive file system cannot spell its way around a rule.
//! * **Symlinks out**: a path given inside the workspace whose real target lies outside the
//!   workspace, the temp directories and the system read roots (`/usr`, `/etc`, `/opt`, ...) is
//!   refused; a path given outside the workspace is read as given (a header under `/usr`).
//! * **Protected for writes** is `protected.rs` (asked of the user); **writable roots** are the
//!   preset's (`ToolContext::check_writable`).
//!
//! Opening is kernel-resolved and never re-resolves a checked path: the real path is opened
//! with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (an `O_NOFOLLOW` walk from `/`
//! where `openat2` is missing), so a component swapped for a link after the check fails the
//! call; the file is then read through that descriptor only. Only regular files are opened
//! (`O_NONBLOCK`, so a FIFO cannot block, and a type check first and after), and a file with
//! more than one hard link is compared with the denied files that exist, so a hard link to a
//! secret planted in the workspace is refused too.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::{ToolError, ToolErrorCode};
use crate::paths::resolve_real_path_visiting;

/// Credentials of other tools, relative to the user's home: never read or written by dsh's own
/// tools (a confined `bash` is the sandbox's business).
const HOME_SECRETS: [&str; 22] = [
    ".ssh",
    ".aws",
    ".azure",
    ".config/gh",
    ".config/gcloud",
    ".config/hub",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".kube/config",
    ".gnupg",
    ".local/share/keyrings",
    ".password-store",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".vault-token",
    ".config/op",
];

/// System files that hold password hashes or host keys.
const SYSTEM_SECRETS: [&str; 6] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/master.passwd",
    "/etc/ssl/private",
];

/// Kernel files that look regular but expose memory or block a read until the kernel has
/// something to say (`/proc/kmsg`, tracing pipes): a `read` or `grep` would hang or drain them.
const KERNEL_FILES: [&str; 6] = [
    "/proc/kcore",
    "/proc/kmsg",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    "/sys/kernel/security",
    "/sys/firmware",
];

/// Where a symbolic link inside the workspace may lead for a read: system trees that hold
/// headers, libraries and configuration shared by every user (besides the workspace and the
/// temp directories).
const SYSTEM_READ_ROOTS: [&str; 12] = [
    "/usr",
    "/etc",
    "/opt",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/nix/store",
    "/System",
    "/Library",
    "/Applications",
];

/// A refusal of the gate: the rule that refused and a message saying what the user can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule's short name (`dsh-home`, `credentials`, `system-secret`, `process`,
    /// `symlink-out`, `hard-link`, `other-user`).
    pub rule: &'static str,
    /// The whole sentence: path, rule, and what to do instead.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

impl From<Refusal> for ToolError {
    fn from(refusal: Refusal) -> Self {
        ToolError::new(ToolErrorCode::PermissionDenied, refusal.message)
    }
}

/// What a file tool is about to do with a file or folder ([`check_access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read a file.
    Read,
    /// Replace or change a file.
    Write,
    /// Create a file in a folder.
    CreateIn,
    /// Pass through a folder on the way to a file.
    Enter,
}

/// See [`GatePolicy::check_access`].
fn check_file_mode(shown: &Path, meta: &Metadata, access: Access) -> Result<(), Refusal> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || meta.uid() == 0 {
            return Ok(());
        }
        // Root's own group (and its supplementary groups) use the group bits.
        let shift = if in_own_groups(meta.gid()) { 3 } else { 0 };
        let needed = match access {
            Access::Read => 0o4,
            Access::Write => 0o2,
            Access::CreateIn => 0o3,
            Access::Enter => 0o1,
        };
        if (meta.mode() >> shift) & needed == needed {
            return Ok(());
        }
        let verb = match access {
            Access::Read => "read it",
            Access::Write => "change it",
            Access::CreateIn => "create files in it",
            Access::Enter => "enter it",
        };
        Err(Refusal {
            rule: "other-user",
            message: format!(
                "{} belongs to another user (uid {}) and its mode {:o} does not let others {verb}; dsh runs as root, but its file tools, like its sandboxed commands, do not override file permissions (`other-user` rule of the file gate). Ask that user, or change the file's permissions yourself",
                shown.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = (shown, meta, access);
        Ok(())
    }
}

/// Whether `gid` is this process's group or one of its supplementary groups.
#[cfg(unix)]
fn in_own_groups(gid: u32) -> bool {
    // SAFETY: getegid has no preconditions; getgroups writes at most `len` entries into the
    // buffer it is given.
    unsafe {
        if libc::getegid() == gid {
            return true;
        }
        let mut groups = [0 as libc::gid_t; 64];
        let len = libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr());
        usize::try_from(len).is_ok_and(|len| groups[..len.min(groups.len())].contains(&gid))
    }
}

/// A denied subtree and the rule it belongs to.
#[derive(Debug, Clone)]
struct DenyRule {
    path: PathBuf,
    rule: &'static str,
    why: &'static str,
}

/// A denied file's device and inode, with the index of the rule that denies it.
type Identity = (u64, u64, usize);

/// The one policy for dsh's in-process file access (see the module docs).
#[derive(Debug, Clone)]
pub struct GatePolicy {
    workspace: PathBuf,
    write_roots: Vec<PathBuf>,
    denied: Vec<DenyRule>,
    /// Subtrees inside a denied one that stay readable (the session's spill folder, a
    /// workspace inside `$DSH_HOME`).
    exceptions: Vec<PathBuf>,
    /// Subtrees readable (not writable) although denied: the session's spill folder.
    read_exceptions: Vec<PathBuf>,
    read_roots: Vec<PathBuf>,
    /// The identities (device, inode, rule index) of the denied files, when this policy value
    /// keeps them for a walk (see [`GatePolicy::for_walk`]); `None`: looked up per check.
    identities: Option<Arc<OnceLock<Vec<Identity>>>>,
    /// Files that trusted hooks or MCP servers run (protected for writes like `.git/hooks`).
    run_files: Vec<PathBuf>,
    /// Whether file modes bind dsh as root as they bind its confined commands
    /// ([`GatePolicy::check_access`]); off under `danger-full-access`, where `bash` is
    /// unconfined root too.
    file_modes: bool,
}

/// `path` and, when it differs, its canonical form (a rule must hold for both spellings).
fn both_forms(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![lexical(path)];
    if let Ok(real) = std::fs::canonicalize(path) {
        if !out.contains(&real) {
            out.push(real);
        }
    }
    out
}

/// `path` with `.` and `..` applied lexically (no file system access).
pub(crate) fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// True when `path` lies in (or is) `prefix`, comparing names without regard to ASCII case.
fn within(path: &Path, prefix: &Path) -> bool {
    let mut path = path.components();
    for want in prefix.components() {
        match path.next() {
            Some(have) => {
                let (a, b) = (have.as_os_str(), want.as_os_str());
                if !a
                    .as_encoded_bytes()
                    .eq_ignore_ascii_case(b.as_encoded_bytes())
                {
                    return false;
                }
            }
            None => return false,
        }
    }
    true
}

/// The `/proc/<pid>` (or `self`, `thread-self`) directory `path` lies in, if any.
fn process_dir(path: &Path) -> bool {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) {
        return false;
    }
    let is = |c: Option<Component<'_>>, name: &str| {
        c.is_some_and(|c| c.as_os_str().eq_ignore_ascii_case(OsStr::new(name)))
    };
    if !is(parts.next(), "proc") {
        return false;
    }
    parts.next().is_some_and(|c| {
        let name = c.as_os_str();
        name.eq_ignore_ascii_case("self")
            || name.eq_ignore_ascii_case("thread-self")
            || name.as_encoded_bytes().iter().all(u8::is_ascii_digit)
    })
}

/// The user's home directory from `$HOME`, when set and absolute.
fn env_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

impl GatePolicy {
    /// The policy for a session working in `workspace` (canonical), with dsh's home from
    /// `$DSH_HOME` (else `~/.dsh`) and the user's home from `$HOME`. Writable roots start as the
    /// workspace alone; see [`GatePolicy::with_write_roots`].
    pub fn new(workspace: &Path) -> Self {
        let mut policy = GatePolicy {
            workspace: workspace.to_path_buf(),
            write_roots: vec![workspace.to_path_buf()],
            denied: Vec::new(),
            exceptions: Vec::new(),
            read_exceptions: Vec::new(),
            read_roots: SYSTEM_READ_ROOTS.iter().map(PathBuf::from).collect(),
            identities: None,
            run_files: Vec::new(),
            file_modes: true,
        };
        for path in SYSTEM_SECRETS {
            policy.deny(
                Path::new(path),
                "system-secret",
                "it holds password hashes or keys",
            );
        }
        for path in KERNEL_FILES {
            policy.deny(
                Path::new(path),
                "kernel",
                "it exposes kernel memory or blocks a read until the kernel writes to it",
            );
        }
        // Confined commands get a private `/dev/shm`; the host's holds other programs' shared
        // memory (adversarial review of issue 38). A workspace made there stays usable.
        if !within(workspace, Path::new("/dev/shm")) {
            policy.deny(
                Path::new("/dev/shm"),
                "shared-memory",
                "it holds other programs' shared memory, which confined commands do not see",
            );
        }
        if let Some(home) = env_home() {
            policy = policy.with_user_home(&home);
        }
        for home in crate::confinement::hidden_dirs() {
            policy = policy.with_dsh_home(&home);
        }
        // A relative `$DSH_HOME` (which the sandbox's list leaves out) names a folder below the
        // directory dsh started in: denied all the same.
        let relative = std::env::var_os("DSH_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_relative());
        if let (Some(home), Ok(start)) = (relative, std::env::current_dir()) {
            policy = policy.with_dsh_home(&start.join(home));
        }
        policy
    }

    fn deny(&mut self, path: &Path, rule: &'static str, why: &'static str) {
        for form in both_forms(path) {
            self.denied.push(DenyRule {
                path: form,
                rule,
                why,
            });
        }
    }

    /// Denies the credentials of other tools below the user's home `home`.
    pub fn with_user_home(mut self, home: &Path) -> Self {
        for secret in HOME_SECRETS {
            self.deny(
                &home.join(secret),
                "credentials",
                "it holds another tool's credentials",
            );
        }
        self
    }

    /// Denies dsh's home `home` entirely (credentials, trust records, approvals, hooks, the
    /// web UI's launch codes); a workspace inside it stays usable.
    pub fn with_dsh_home(mut self, home: &Path) -> Self {
        self.deny(
            home,
            "dsh-home",
            "it is dsh's own home (keys, trust, approvals, hooks, launch codes)",
        );
        let workspace = self.workspace.clone();
        if self
            .denied
            .iter()
            .any(|rule| within(&workspace, &rule.path))
        {
            self.exceptions.push(workspace);
        }
        self
    }

    /// Sets the roots `write`/`edit` may write under `workspace-write` (also where a link from
    /// the workspace may lead for a read).
    pub fn with_write_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.write_roots = roots;
        self
    }

    /// Keeps `path` readable although it lies in a denied subtree (the session's spill folder,
    /// which grep and glob name for their full results).
    pub fn with_read_exception(mut self, path: &Path) -> Self {
        self.read_exceptions.extend(both_forms(path));
        self
    }

    /// Protects `files` for writes (the user's approval needed, as for `.git/hooks`): the
    /// programs and scripts that trusted hooks and MCP servers run, so the model cannot rewrite
    /// code that runs later outside the sandbox. The seam for the runtime, which knows them
    /// (`dsh_config`'s script pins); [`GatePolicy::run_file`] answers for a path.
    pub fn with_run_files(mut self, files: impl IntoIterator<Item = PathBuf>) -> Self {
        for file in files {
            self.run_files.extend(both_forms(&file));
        }
        self
    }

    /// The run file (see [`GatePolicy::with_run_files`]) the real path `real` is, if any.
    pub fn run_file(&self, real: &Path) -> Option<&Path> {
        self.run_files
            .iter()
            .find(|file| within(real, file))
            .map(PathBuf::as_path)
    }

    /// The workspace this policy is for.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The deny rule covering `path` (absolute; judged as given, so pass the real path too),
    /// or `None`.
    pub fn denied(&self, path: &Path) -> Option<Refusal> {
        let lexical_path = lexical(path);
        if self
            .read_exceptions
            .iter()
            .any(|allowed| within(&lexical_path, allowed))
        {
            return None;
        }
        self.denied_for_write(path)
    }

    /// [`GatePolicy::denied`] without the read-only exceptions (the spill folder is read, never
    /// written, by the file tools).
    fn denied_for_write(&self, path: &Path) -> Option<Refusal> {
        let path = lexical(path);
        if self.exceptions.iter().any(|allowed| within(&path, allowed)) {
            return None;
        }
        let refusal = |rule: &'static str, why: &str, covered: &Path| {
            Refusal {
            rule,
            message: format!(
                "{} is off limits to dsh's file tools: {why} ({} is denied by the `{rule}` rule of the file gate); dsh never reads or writes it for the model. If the task really needs it, the user can copy what is needed into the workspace",
                path.display(),
                covered.display()
            ),
        }
        };
        if process_dir(&path) {
            return Some(refusal(
                "process",
                "process files under /proc/<pid> hold environments, memory and open files",
                &path,
            ));
        }
        self.denied
            .iter()
            .find(|rule| within(&path, &rule.path))
            .map(|rule| refusal(rule.rule, rule.why, &rule.path))
    }

    /// Whether a read of `requested` (absolute, as asked) whose real path is `real` is allowed:
    /// neither is denied, and a path inside the workspace does not lead outside it by a link
    /// (except to the temp directories and the system read roots).
    pub fn check_read(&self, requested: &Path, real: &Path) -> Result<(), Refusal> {
        if let Some(refusal) = self.denied(requested).or_else(|| self.denied(real)) {
            return Err(refusal);
        }
        let asked = lexical(requested);
        if within(&asked, &self.workspace) && !self.readable_from_workspace(real) {
            return Err(Refusal {
                rule: "symlink-out",
                message: format!(
                    "{} is a link that leads out of the workspace to {}, which dsh's file tools do not follow (`symlink-out` rule of the file gate: only the workspace, the temp directories and system folders such as /usr may be reached through a link). Read the target by its own path if it is meant to be read",
                    requested.display(),
                    real.display()
                ),
            });
        }
        Ok(())
    }

    fn readable_from_workspace(&self, real: &Path) -> bool {
        self.write_roots
            .iter()
            .chain(&self.read_roots)
            .chain(std::iter::once(&self.workspace))
            .chain(&self.exceptions)
            .chain(&self.read_exceptions)
            .any(|root| within(real, root))
    }

    /// Whether a write to the real path `real` is allowed by the deny set (the preset's roots
    /// and the protected paths are checked by the caller).
    pub fn check_write(&self, real: &Path) -> Result<(), Refusal> {
        match self.denied_for_write(real) {
            Some(mut refusal) => {
                refusal.message = refusal.message.replace("reads or writes", "writes");
                Err(refusal)
            }
            None => Ok(()),
        }
    }

    /// A copy for one walk (a `grep` call): the identities of the denied files are looked up
    /// once for the whole walk instead of once per file with several hard links (a pnpm store
    /// links every file).
    pub(crate) fn for_walk(&self) -> GatePolicy {
        let mut copy = self.clone();
        copy.identities = Some(Arc::new(OnceLock::new()));
        copy
    }

    /// The (device, inode, rule index) of every denied file that exists.
    #[cfg_attr(not(unix), allow(dead_code))]
    fn denied_identities(&self) -> Vec<Identity> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let mut out = Vec::new();
            for (index, rule) in self.denied.iter().enumerate() {
                for meta in denied_files(&rule.path) {
                    out.push((meta.dev(), meta.ino(), index));
                }
            }
            out
        }
        #[cfg(not(unix))]
        Vec::new()
    }

    /// As root, dsh's file tools get no more than its confined commands, which hold no
    /// capability (docs/SECURITY.md, "No real root in the sandbox"): a file or folder of
    /// another user is refused unless its mode bits allow `access` without
    /// `CAP_DAC_OVERRIDE` (`other-user` rule). Without root the kernel already decides so;
    /// under `danger-full-access` (see [`GatePolicy::with_file_modes`]) nothing is checked.
    pub(crate) fn check_access(
        &self,
        shown: &Path,
        meta: &Metadata,
        access: Access,
    ) -> Result<(), Refusal> {
        if !self.file_modes {
            return Ok(());
        }
        check_file_mode(shown, meta, access)
    }

    /// [`GatePolicy::check_access`] for the folders on the way to `real` (a real path): each
    /// must let this process enter it, as the kernel demands of a capability-free root (a 0644
    /// file in another user's 0700 home is out of reach). Folders from `stop_at` up are not
    /// looked at (a walk checks its root once).
    pub(crate) fn check_folders(&self, real: &Path, stop_at: Option<&Path>) -> Result<(), Refusal> {
        if !self.file_modes {
            return Ok(());
        }
        for folder in real.ancestors().skip(1) {
            if stop_at.is_some_and(|stop| folder == stop) || folder.parent().is_none() {
                break;
            }
            if let Ok(meta) = std::fs::symlink_metadata(folder) {
                check_file_mode(folder, &meta, Access::Enter)?;
            }
        }
        Ok(())
    }

    /// Whether file modes bind dsh's file tools as root (default: yes; off for
    /// `danger-full-access`, whose commands run as unconfined root).
    pub fn with_file_modes(mut self, on: bool) -> Self {
        self.file_modes = on;
        self
    }

    /// Refuses `meta` (of a file about to be read) when it has more than one hard link and is
    /// one of the denied files that exist: a hard link planted in the workspace.
    pub(crate) fn check_identity(&self, shown: &Path, meta: &Metadata) -> Result<(), Refusal> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            if meta.nlink() <= 1 {
                return Ok(());
            }
            let looked_up;
            let identities = match &self.identities {
                Some(cache) => cache.get_or_init(|| self.denied_identities()),
                None => {
                    looked_up = self.denied_identities();
                    &looked_up
                }
            };
            let found = identities
                .iter()
                .find(|(dev, ino, _)| *dev == meta.dev() && *ino == meta.ino());
            if let Some(rule) = found.and_then(|(_, _, index)| self.denied.get(*index)) {
                return Err(Refusal {
                    rule: "hard-link",
                    message: format!(
                        "{} is a hard link to a file under {}, which is off limits to dsh's file tools (`hard-link` rule of the file gate: {})",
                        shown.display(),
                        rule.path.display(),
                        rule.why
                    ),
                });
            }
        }
        #[cfg(not(unix))]
        let _ = (shown, meta);
        Ok(())
    }

    /// The real path of `path` (absolute), refusing a chain of links that passes through a
    /// denied place on the way (`/dev/fd/3 -> /proc/self/fd/3 -> ...`).
    pub(crate) fn resolve(&self, path: &Path) -> Result<PathBuf, GateError> {
        let mut refused = None;
        let real = resolve_real_path_visiting(path, &mut |hop| {
            if refused.is_none() {
                refused = self.denied(hop);
            }
        })
        .map_err(GateError::Io)?;
        match refused {
            Some(refusal) => Err(GateError::Refused(refusal)),
            None => Ok(real),
        }
    }

    /// The real path of `path` (absolute) when it may be read as a workspace file
    /// (instruction files, `@` mentions): the real path lies inside the workspace (links that
    /// stay inside keep working) and [`GatePolicy::check_read`] allows it.
    pub fn check_workspace_path(&self, path: &Path) -> Result<PathBuf, GateError> {
        let real = self.resolve(path)?;
        if !within(&real, &self.workspace) {
            return Err(GateError::Refused(Refusal {
                rule: "symlink-out",
                message: format!(
                    "{} resolves to {}, outside the workspace {} (`symlink-out` rule of the file gate); files from outside are not attached or loaded",
                    path.display(),
                    real.display(),
                    self.workspace.display()
                ),
            }));
        }
        self.check_read(path, &real).map_err(GateError::Refused)?;
        Ok(real)
    }

    /// Opens a file that must lie in the workspace ([`GatePolicy::check_workspace_path`]):
    /// opened without following links, a regular file, not a hard link to a denied file, and
    /// readable under the `other-user` rule (checked on the open descriptor, with the folders
    /// on the way). Read it through [`GateFile::file`] only.
    pub fn open_workspace_file(&self, path: &Path) -> Result<GateFile, GateError> {
        let real = self.check_workspace_path(path)?;
        let opened = open_regular(&real)?;
        self.check_opened(path, &real, &opened.meta, None)
            .map_err(GateError::Refused)?;
        Ok(opened)
    }

    /// Reads a file that must lie in the workspace ([`GatePolicy::open_workspace_file`]); at
    /// most `max` bytes are returned.
    pub fn read_workspace_file(&self, path: &Path, max: u64) -> Result<Vec<u8>, GateError> {
        let opened = self.open_workspace_file(path)?;
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(opened.file, max), &mut bytes)
            .map_err(GateError::Io)?;
        Ok(bytes)
    }

    /// The real path of a folder that must lie in the workspace, when its entries may be
    /// listed ([`GatePolicy::check_workspace_path`]): a folder this process may read and enter
    /// under the `other-user` rule, as may the folders on the way to it. For walks that list
    /// names by path (the TUI's `@` finder); [`GatePolicy::list_workspace_dir`] lists through
    /// a descriptor.
    pub fn check_workspace_dir(&self, path: &Path) -> Result<PathBuf, GateError> {
        let real = self.check_workspace_path(path)?;
        let meta = std::fs::symlink_metadata(&real).map_err(GateError::Io)?;
        if !meta.is_dir() {
            return Err(GateError::NotAFile { directory: false });
        }
        self.check_listing(path, &real, &meta)?;
        Ok(real)
    }

    /// The checks a folder passes before its entries are listed (`meta` is its own).
    fn check_listing(&self, shown: &Path, real: &Path, meta: &Metadata) -> Result<(), GateError> {
        self.check_access(shown, meta, Access::Read)
            .and_then(|()| self.check_access(shown, meta, Access::Enter))
            .and_then(|()| self.check_folders(real, None))
            .map_err(GateError::Refused)
    }

    /// The entries of a folder that must lie in the workspace, sorted by name: the folder is
    /// checked as [`GatePolicy::check_workspace_dir`] says, opened without following links and
    /// listed through that descriptor (checked again on it); entries the deny set covers are
    /// left out. A link is listed as a link, never as the folder it names.
    pub fn list_workspace_dir(&self, path: &Path) -> Result<Vec<FolderEntry>, GateError> {
        let real = self.check_workspace_path(path)?;
        match std::fs::symlink_metadata(&real) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(GateError::NotAFile { directory: false }),
            Err(err) => return Err(GateError::Io(err)),
        }
        let dir = open_directory(&real)?;
        let meta = dir.metadata().map_err(GateError::Io)?;
        if !meta.is_dir() {
            return Err(GateError::Changed);
        }
        self.check_listing(path, &real, &meta)?;
        let mut entries: Vec<FolderEntry> = dir
            .list()
            .map_err(GateError::Io)?
            .into_iter()
            .filter(|entry| self.denied(&real.join(&entry.name)).is_none())
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Whether a walk that lists names below a folder [`GatePolicy::check_workspace_dir`]
    /// allowed (the TUI's `@` finder) may show the entry `path`, whose metadata (of the entry
    /// itself, links not followed) is `meta`, and descend into it: the entry is not denied, and
    /// a folder lets this process read and enter it under the `other-user` rule (so the names
    /// in another user's private folder are never read).
    pub fn may_list(&self, path: &Path, meta: &Metadata) -> bool {
        if self.denied(path).is_some() {
            return false;
        }
        !meta.is_dir()
            || (self.check_access(path, meta, Access::Read).is_ok()
                && self.check_access(path, meta, Access::Enter).is_ok())
    }

    /// Opens `requested` (absolute) for reading through the gate: checked by
    /// [`GatePolicy::check_read`], opened without following links along the real path,
    /// a regular file, not a hard link to a denied file.
    pub fn open_read(&self, requested: &Path) -> Result<GateFile, GateError> {
        let real = self.resolve(requested)?;
        self.check_read(requested, &real)
            .map_err(GateError::Refused)?;
        let opened = open_regular(&real)?;
        self.check_opened(requested, &real, &opened.meta, None)
            .map_err(GateError::Refused)?;
        Ok(opened)
    }

    /// The checks a file opened for reading passes (`meta` is its descriptor's): not a hard
    /// link to a denied file, and readable under the `other-user` rule, with the folders on
    /// the way to `real` up to `stop_at` (a walk checks its root once).
    pub(crate) fn check_opened(
        &self,
        shown: &Path,
        real: &Path,
        meta: &Metadata,
        stop_at: Option<&Path>,
    ) -> Result<(), Refusal> {
        self.check_identity(shown, meta)?;
        self.check_access(shown, meta, Access::Read)?;
        self.check_folders(real, stop_at)
    }
}

/// The files a denied entry stands for when comparing hard links: the entry itself when it is
/// a file, else the regular files directly inside it and one level below.
#[cfg(unix)]
fn denied_files(path: &Path) -> Vec<Metadata> {
    let mut out = Vec::new();
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return out;
    };
    if meta.is_file() {
        out.push(meta);
        return out;
    }
    if !meta.is_dir() {
        return out;
    }
    let mut dirs = vec![(path.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten().take(4096) {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_file() {
                out.push(meta);
            } else if meta.is_dir() && depth < 2 {
                dirs.push((entry.path(), depth + 1));
            }
        }
    }
    out
}

/// The ignore files a workspace walk reads in a folder (`.gitignore`, `.ignore`, and
/// `.git/info/exclude`).
const IGNORE_FILES: [&str; 3] = [".gitignore", ".ignore", ".git/info/exclude"];

/// Largest ignore file a walk may read.
const MAX_IGNORE_FILE: u64 = 1024 * 1024;

/// The first ignore file of `dir` that a walk (`grep`, `glob`, the TUI's `@` finder) must not
/// read: not a regular file (a FIFO would block the walk forever, a link to `/dev/zero` would
/// fill memory) or larger than 1 MiB. Check it before a folder is entered (the `ignore` crate
/// reads these files itself); a file swapped by a concurrent process after the check is not
/// caught (docs/SECURITY.md, "The file gate").
pub fn unsafe_ignore_file(dir: &Path) -> Option<PathBuf> {
    IGNORE_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|path| unsafe_to_read(path))
        .or_else(|| unsafe_git_file(dir))
}

/// True when `path` exists and is not a regular file of at most [`MAX_IGNORE_FILE`] bytes
/// (a link counts as unsafe: the walker would follow it).
fn unsafe_to_read(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => !meta.is_file() || meta.len() > MAX_IGNORE_FILE,
        Err(_) => false,
    }
}

/// The first line of the small regular file `path` (opened without blocking), `None` when it
/// cannot be read.
fn first_line(path: &Path) -> Option<String> {
    use crate::os::OpenOptionsExt;
    use std::io::Read;
    #[cfg(unix)]
    let flags = crate::os::O_NOFOLLOW | libc::O_NONBLOCK;
    #[cfg(not(unix))]
    let flags = crate::os::O_NOFOLLOW;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_IGNORE_FILE).read_to_end(&mut bytes).ok()?;
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8(line.to_vec()).ok()
}

/// A `.git` file (`gitdir: <dir>`) makes the walker open `<dir>/commondir` and then
/// `<commondir>/info/exclude` by path, wherever they are: the first of those three that is not
/// a small regular file (a FIFO would block the walk forever, a huge file flood it).
fn unsafe_git_file(dir: &Path) -> Option<PathBuf> {
    let dot_git = dir.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return None;
    }
    if unsafe_to_read(&dot_git) {
        return Some(dot_git);
    }
    let line = first_line(&dot_git)?;
    let git_dir = PathBuf::from(line.strip_prefix("gitdir: ")?);
    let commondir = git_dir.join("commondir");
    if unsafe_to_read(&commondir) {
        return Some(commondir);
    }
    let line = first_line(&commondir)?;
    let common = if line.starts_with('.') {
        git_dir.join(line)
    } else {
        PathBuf::from(line)
    };
    let exclude = common.join("info/exclude");
    unsafe_to_read(&exclude).then_some(exclude)
}

/// Why the gate did not hand out a file.
#[derive(Debug)]
pub enum GateError {
    /// A rule of the policy refused it.
    Refused(Refusal),
    /// It is not a regular file (`directory` when it is a folder).
    NotAFile {
        /// True for a folder, false for a device, FIFO or socket.
        directory: bool,
    },
    /// A path component was replaced by a link after the check.
    Changed,
    /// The file system said no.
    Io(io::Error),
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::Refused(refusal) => f.write_str(&refusal.message),
            GateError::NotAFile { directory: true } => f.write_str("is a directory"),
            GateError::NotAFile { directory: false } => {
                f.write_str("is not a regular file (a device, socket or pipe)")
            }
            GateError::Changed => f.write_str(
                "the path changed while it was being opened (a component was replaced by a symbolic link); retry",
            ),
            GateError::Io(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for GateError {}

impl GateError {
    /// The tool error for this failure on `shown` (the path as the model gave it).
    pub fn into_tool_error(self, shown: &Path) -> ToolError {
        match self {
            GateError::Refused(refusal) => refusal.into(),
            GateError::NotAFile { directory: true } => ToolError::new(
                ToolErrorCode::NotAFile,
                format!(
                    "{} is a directory, not a file; use glob to list its files",
                    shown.display()
                ),
            ),
            GateError::NotAFile { directory: false } => ToolError::new(
                ToolErrorCode::NotAFile,
                format!(
                    "{} is not a regular file (a device, socket or pipe); dsh's file tools only read files",
                    shown.display()
                ),
            ),
            GateError::Changed => ToolError::new(
                ToolErrorCode::Io,
                format!(
                    "the path changed while opening {}: a component was replaced by a symbolic link after the path was checked, so nothing was read; retry",
                    shown.display()
                ),
            ),
            GateError::Io(err) => ToolError::io("cannot read", shown, &err),
        }
    }
}

/// A file the gate opened: the open file, its real path and its metadata (of the descriptor).
#[derive(Debug)]
pub struct GateFile {
    /// The open file; read only through it.
    pub file: File,
    /// The real path it was opened at.
    pub real: PathBuf,
    /// Metadata of the open descriptor.
    pub meta: Metadata,
}

/// One entry of a folder the gate listed ([`GatePolicy::list_workspace_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderEntry {
    /// The entry's name.
    pub name: std::ffi::OsString,
    /// True for a folder (a link to one is not).
    pub is_dir: bool,
}

/// Opens the real path `real` (absolute, no links in it) read-only without following any link
/// on it; only a regular file is returned.
pub(crate) fn open_regular(real: &Path) -> Result<GateFile, GateError> {
    // Decide by type before opening: a device or FIFO is never opened at all.
    match std::fs::symlink_metadata(real) {
        Ok(meta) if meta.is_dir() => return Err(GateError::NotAFile { directory: true }),
        Ok(meta) if meta.file_type().is_symlink() => return Err(GateError::Changed),
        Ok(meta) if !meta.is_file() => return Err(GateError::NotAFile { directory: false }),
        Ok(_) => {}
        Err(err) => return Err(GateError::Io(err)),
    }
    let file = fd::open_no_links(real, false).map_err(|err| {
        if fd::is_link_error(&err) {
            GateError::Changed
        } else {
            GateError::Io(err)
        }
    })?;
    let meta = file.metadata().map_err(GateError::Io)?;
    if meta.is_dir() {
        return Err(GateError::NotAFile { directory: true });
    }
    if !meta.is_file() {
        return Err(GateError::NotAFile { directory: false });
    }
    Ok(GateFile {
        file,
        real: real.to_path_buf(),
        meta,
    })
}

/// A directory the gate opened for a walk: files below it are opened beneath it.
#[derive(Debug)]
pub(crate) struct GateDir {
    /// The open directory (Unix); files are opened relative to it.
    #[cfg(unix)]
    fd: File,
    /// Its real path.
    #[cfg_attr(unix, allow(dead_code))]
    pub(crate) real: PathBuf,
}

impl GateDir {
    /// Metadata of the open directory (of its descriptor on Unix).
    fn metadata(&self) -> io::Result<Metadata> {
        #[cfg(unix)]
        {
            self.fd.metadata()
        }
        #[cfg(not(unix))]
        {
            std::fs::metadata(&self.real)
        }
    }

    /// The entries of the open directory (through its descriptor on Unix).
    fn list(&self) -> io::Result<Vec<FolderEntry>> {
        #[cfg(unix)]
        {
            fd::list(&self.fd)
        }
        #[cfg(not(unix))]
        {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(&self.real)? {
                let entry = entry?;
                out.push(FolderEntry {
                    name: entry.file_name(),
                    is_dir: entry.file_type().is_ok_and(|t| t.is_dir()),
                });
            }
            Ok(out)
        }
    }
}

/// Opens the directory at the real path `real` without following any link on it (for walks
/// whose files are then opened beneath it).
pub(crate) fn open_directory(real: &Path) -> Result<GateDir, GateError> {
    #[cfg(unix)]
    {
        let fd = fd::open_no_links(real, true).map_err(|err| {
            if fd::is_link_error(&err) {
                GateError::Changed
            } else {
                GateError::Io(err)
            }
        })?;
        Ok(GateDir {
            fd,
            real: real.to_path_buf(),
        })
    }
    #[cfg(not(unix))]
    {
        if !std::fs::metadata(real).map_err(GateError::Io)?.is_dir() {
            return Err(GateError::NotAFile { directory: false });
        }
        Ok(GateDir {
            real: real.to_path_buf(),
        })
    }
}

/// Opens the regular file `relative` beneath the open directory `dir` without following any
/// link and without leaving it (`RESOLVE_BENEATH`); `None` when it is not a regular file.
pub(crate) fn open_file_beneath(dir: &GateDir, relative: &Path) -> io::Result<Option<File>> {
    #[cfg(unix)]
    let file = fd::open_beneath(&dir.fd, relative)?;
    #[cfg(not(unix))]
    let file = fd::open_no_links(&dir.real.join(relative), false)?;
    let meta = file.metadata()?;
    Ok(meta.is_file().then_some(file))
}

/// True when the entry `relative` (plain names; a file, folder or link) exists beneath the open
/// directory `dir`, reached without following a link on the way.
pub(crate) fn exists_beneath(dir: &GateDir, relative: &Path) -> bool {
    #[cfg(unix)]
    {
        fd::exists_beneath(&dir.fd, relative)
    }
    #[cfg(not(unix))]
    {
        let path = dir.real.join(relative);
        path.parent()
            .is_some_and(|parent| fd::open_no_links(parent, true).is_ok())
            && std::fs::symlink_metadata(&path).is_ok()
    }
}

#[cfg(unix)]
mod fd {
    //! The descriptor calls of the gate (Unix).

    use std::ffi::CString;
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Component, Path};

    use crate::builtin::beneath;

    const FILE_FLAGS: libc::c_int =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;

    fn flags(directory: bool) -> libc::c_int {
        if directory {
            FILE_FLAGS | libc::O_DIRECTORY
        } else {
            FILE_FLAGS
        }
    }

    pub(super) fn is_link_error(err: &io::Error) -> bool {
        beneath::is_swapped(err)
    }

    fn cstring(path: &Path) -> io::Result<CString> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains a NUL byte"))
    }

    /// `openat2(dir, path, flags, resolve)`; `Ok(None)` when the kernel has no `openat2`.
    #[cfg(target_os = "linux")]
    fn openat2(
        dir: libc::c_int,
        path: &CString,
        flags: libc::c_int,
        resolve: u64,
    ) -> io::Result<Option<File>> {
        // SAFETY: an all-zero `open_how` is valid (no flags, no mode, no resolve rules).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        how.resolve = resolve;
        // SAFETY: `dir` is open or AT_FDCWD, `path` is NUL-terminated, `how` is a valid
        // `open_how` whose size is passed alongside.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            // SAFETY: a fresh descriptor owned by nobody else.
            return Ok(Some(File::from(unsafe {
                OwnedFd::from_raw_fd(rc as libc::c_int)
            })));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) if rc == -1 => Ok(None),
            _ => Err(err),
        }
    }

    /// The last component opened relative to `dir` with `O_NOFOLLOW`.
    fn open_last(dir: &OwnedFd, name: &std::ffi::OsStr, directory: bool) -> io::Result<File> {
        let name = CString::new(name.as_bytes()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a path contains a NUL byte")
        })?;
        // SAFETY: `dir` is open and `name` is NUL-terminated.
        let rc = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags(directory)) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ELOOP) => err,
                Some(libc::ENOTDIR) if directory => io::Error::from_raw_os_error(libc::ELOOP),
                _ => err,
            });
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(rc) }))
    }

    /// Opens the absolute `path` following no link on it: `openat2` with
    /// `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, else a walk from `/` one name at a time.
    pub(super) fn open_no_links(path: &Path, directory: bool) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        {
            let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            if let Some(file) = openat2(libc::AT_FDCWD, &cstring(path)?, flags(directory), resolve)?
            {
                return Ok(file);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cstring;
        let root = beneath::open_root(Path::new("/"))?;
        let relative = path
            .strip_prefix("/")
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path is not absolute"))?;
        open_relative(&root, relative, directory)
    }

    fn open_relative(root: &OwnedFd, relative: &Path, directory: bool) -> io::Result<File> {
        let Some(name) = relative.file_name() else {
            // The root itself.
            return open_last(root, std::ffi::OsStr::new("."), directory);
        };
        let parent = relative.parent().unwrap_or(Path::new(""));
        let dir = beneath::open_dir_beneath(root, parent, false)?;
        open_last(&dir, name, directory)
    }

    /// True when `relative` exists beneath `dir` with no link on the way to it (the entry
    /// itself may be a link).
    pub(super) fn exists_beneath(dir: &File, relative: &Path) -> bool {
        let Some(name) = relative.file_name() else {
            return true;
        };
        let Ok(name) = CString::new(name.as_bytes()) else {
            return false;
        };
        let parent = relative.parent().unwrap_or(Path::new(""));
        let Ok(root) = dir.try_clone().map(OwnedFd::from) else {
            return false;
        };
        let Ok(parent) = beneath::open_dir_beneath(&root, parent, false) else {
            return false;
        };
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `parent` is open, `name` is NUL-terminated and `st` a valid out pointer.
        let rc = unsafe {
            libc::fstatat(
                parent.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        rc == 0
    }

    /// The entries of the open directory `dir`, each looked at without following a link.
    pub(super) fn list(dir: &File) -> io::Result<Vec<super::FolderEntry>> {
        let names = beneath::list_names(OwnedFd::from(dir.try_clone()?))?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Ok(cname) = CString::new(name.as_bytes()) else {
                continue;
            };
            // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `dir` is open, `cname` is NUL-terminated and `st` a valid out pointer.
            let rc = unsafe {
                libc::fstatat(
                    dir.as_raw_fd(),
                    cname.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            let is_dir = rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            out.push(super::FolderEntry { name, is_dir });
        }
        Ok(out)
    }

    /// Opens `relative` (plain names) beneath `dir` without following links or leaving it.
    pub(super) fn open_beneath(dir: &File, relative: &Path) -> io::Result<File> {
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain relative path",
            ));
        }
        #[cfg(target_os = "linux")]
        {
            let resolve =
                libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            if let Some(file) =
                openat2(dir.as_raw_fd(), &cstring(relative)?, flags(false), resolve)?
            {
                return Ok(file);
            }
        }
        let root = OwnedFd::from(dir.try_clone()?);
        open_relative(&root, relative, false)
    }
}

#[cfg(not(unix))]
mod fd {
    //! By path on Windows: each component checked not to be a link first (the race a
    //! descriptor walk closes elsewhere stays open there; docs/SECURITY.md, "Platforms").

    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub(super) fn is_link_error(err: &io::Error) -> bool {
        crate::builtin::beneath::is_swapped(err)
    }

    pub(super) fn open_no_links(path: &Path, _directory: bool) -> io::Result<File> {
        let mut current = std::path::PathBuf::new();
        for component in path.components() {
            current.push(component);
            if std::fs::symlink_metadata(&current)?
                .file_type()
                .is_symlink()
            {
                return Err(io::Error::other(format!(
                    "{} is a symbolic link or junction",
                    current.display()
                )));
            }
        }
        File::open(path)
    }
}
