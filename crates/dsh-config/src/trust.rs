//! Workspace trust (docs/configuration.md, "Workspace trust"; docs/SECURITY.md, "Planted
//! configuration and workspace trust").
//!
//! A repository can carry files that dsh reads as configuration: `.dsh/config.toml` and
//! `.dsh/hooks.json`. Anything that could write into the workspace (a confined command, the
//! write tool, a cloned repository) could have planted them, so the settings in them that run
//! commands or widen power apply only when the user trusted the workspace:
//!
//! - by `dsh trust` (or the TUI's question), recorded in `$DSH_HOME/trust.toml` under the
//!   workspace's canonical path and pinned to a SHA-256 of the exact list and content of the
//!   project files; any change to them (a byte, a new file, a removed file) voids it;
//! - by a `[trust] workspaces = [...]` path prefix in the user's own `$DSH_HOME/config.toml`;
//! - for one run, by `--trust-workspace`.
//!
//! Untrusted, `restrict_project_layer` removes those settings from the project layer and
//! names each one, so that the front end can say what it ignored.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use toml::{Table, Value};

use crate::load::{same_file, PROJECT_DIR};

/// File of recorded trust in `$DSH_HOME`.
pub const TRUST_FILE: &str = "trust.toml";

/// Name of the project hooks file in `.dsh/` (the same name dsh-agent's hooks loader reads).
pub const PROJECT_HOOKS_FILE: &str = "hooks.json";

/// Folder of slash command files in `.dsh/` and in `$DSH_HOME` (docs/commands.md).
pub const COMMANDS_DIR: &str = "commands";

/// Claude Code's folder, in a project and in the user's home (docs/other-tools.md).
pub const CLAUDE_DIR: &str = ".claude";

/// The user's own Claude Code folder, `~/.claude` (from `$HOME`), if `$HOME` is set.
pub fn user_claude_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(CLAUDE_DIR))
}

/// Largest command file (dsh-agent refuses a larger one; only this much is pinned).
const MAX_COMMAND_BYTES: u64 = 64 * 1024;

/// Most command files pinned per folder, and the deepest nesting walked.
const MAX_COMMAND_FILES: usize = 1000;
const MAX_COMMAND_DEPTH: usize = 8;

/// A file and its bytes as pinned.
pub type PinnedFile = (PathBuf, Vec<u8>);

/// Why a workspace is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustReason {
    /// `--trust-workspace` on the command line.
    Flag,
    /// A `[trust] workspaces` prefix in the user's own config file.
    UserConfig(PathBuf),
    /// An entry of `$DSH_HOME/trust.toml` whose pin matches the files as they are now.
    Recorded,
}

/// The project files of a workspace and whether their settings may apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceTrust {
    /// The workspace: the nearest ancestor of the working directory holding `.git`, else the
    /// working directory itself (canonical).
    pub workspace: PathBuf,
    /// The project files found (config file, hooks file), in that order, then the scripts
    /// their hooks and MCP servers run from places the model can write (see [`Self::scripts`]).
    pub files: Vec<PathBuf>,
    /// The project hooks file, if there is one.
    pub hooks_file: Option<PathBuf>,
    /// `sha256:<hex>` of the list and content of `files`; `None` when a file cannot be read.
    pub pin: Option<String>,
    /// `Some` when trusted.
    pub trusted: Option<TrustReason>,
    /// The exact text of the config file and of the hooks file as pinned: what applies is
    /// what was pinned, even if a file changes after the check (see [`Self::project_hooks`]).
    pub config_text: Option<String>,
    /// The exact text of the hooks file as pinned.
    pub hooks_text: Option<String>,
    /// What was ignored because the workspace is not trusted: `(file, keys)`; the hooks file
    /// is listed with no keys (all of it is ignored).
    pub ignored: Vec<(PathBuf, Vec<String>)>,
    /// A recorded entry for this workspace exists but its pin no longer matches.
    pub changed_since_trusted: bool,
    /// The scripts the project's hooks and MCP servers run that lie where the model can write
    /// (the workspace, the temp directories), resolved, each with `sha256:<hex>` of its bytes
    /// when pinned; part of [`Self::files`] and of the pin (docs/hooks.md, "Scripts in the
    /// workspace are pinned").
    pub scripts: Vec<(PathBuf, String)>,
    /// The project config file did not parse or check; it was left out (untrusted) with this
    /// message.
    pub invalid_project: Option<String>,
    /// The project's `.dsh/commands` folders (canonical; docs/commands.md).
    pub command_dirs: Vec<PathBuf>,
    /// The command files in them, part of [`Self::files`] and of the pin, each with its bytes
    /// as pinned: only a file that still has them is used.
    pub commands: Vec<(PathBuf, Vec<u8>)>,
    /// Claude Code's `.mcp.json` at the workspace root, if there is one (docs/other-tools.md).
    pub mcp_json: Option<PathBuf>,
    /// Its text as pinned.
    pub mcp_json_text: Option<String>,
    /// Claude Code's `.claude/settings.json` of the workspace, if there is one.
    pub claude_settings: Option<PathBuf>,
    /// Its text as pinned.
    pub claude_settings_text: Option<String>,
    /// The project's Claude Code skills (`.claude/skills/<name>/SKILL.md`, regular files
    /// only), part of [`Self::files`] and of the pin, each with its bytes as pinned: only
    /// these bytes are used (docs/other-tools.md).
    pub skills: Vec<(PathBuf, Vec<u8>)>,
    /// Warnings about other tools' files found but not (all) used: an unsupported server type
    /// or key, a server shadowed by `.dsh/config.toml`, settings dsh does not read. One line
    /// each, said at session start (docs/other-tools.md).
    pub notes: Vec<String>,
}

impl WorkspaceTrust {
    /// The project hooks file and its text as pinned: only when the workspace is trusted.
    /// Callers parse this text rather than reading the file again, so a hooks file rewritten
    /// after the trust check (by the session itself, say) never runs.
    pub fn project_hooks(&self) -> Option<(&Path, &str)> {
        match self.trusted {
            Some(_) => self.hooks_file.as_deref().zip(self.hooks_text.as_deref()),
            None => None,
        }
    }

    /// The project's command folders and files as pinned: only when the workspace is trusted.
    pub fn project_commands(&self) -> Option<(&[PathBuf], &[PinnedFile])> {
        self.trusted
            .as_ref()
            .map(|_| (self.command_dirs.as_slice(), self.commands.as_slice()))
    }

    /// The hooks of Claude Code's `.claude/settings.json` with its text as pinned: only when
    /// the workspace is trusted.
    pub fn project_claude_hooks(&self) -> Option<(&Path, &str)> {
        match self.trusted {
            Some(_) => self
                .claude_settings
                .as_deref()
                .zip(self.claude_settings_text.as_deref()),
            None => None,
        }
    }

    /// Lists the other tools' project files as ignored (untrusted): `.mcp.json` by the servers
    /// it would add (`mcp.servers.<name>`), `.claude/settings.json` whole (its hooks).
    pub(crate) fn ignore_other_tools(&mut self) {
        if let (Some(file), Some(text)) = (&self.mcp_json, &self.mcp_json_text) {
            let keys = match crate::other_tools::mcp_json_layer(&file.display().to_string(), text) {
                Ok((layer, _)) => layer
                    .get("mcp")
                    .and_then(|m| m.get("servers"))
                    .and_then(Value::as_table)
                    .map(|servers| {
                        servers
                            .keys()
                            .map(|name| crate::load::key_path("mcp.servers", name))
                            .collect()
                    })
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            if !keys.is_empty() {
                self.ignored.push((file.clone(), keys));
            }
        }
        if let Some(file) = &self.claude_settings {
            self.ignored.push((file.clone(), Vec::new()));
        }
        for (file, _) in &self.skills {
            self.ignored.push((file.clone(), Vec::new()));
        }
    }

    /// The project's Claude Code skills as pinned: only when the workspace is trusted.
    pub fn project_skills(&self) -> Option<&[PinnedFile]> {
        self.trusted.as_ref().map(|_| self.skills.as_slice())
    }

    /// True when `file` is one of the project's Claude Code skill files.
    pub fn is_skill(&self, file: &Path) -> bool {
        self.skills.iter().any(|(path, _)| path == file)
    }

    /// True when `file` is one of the project's command files.
    pub fn is_command(&self, file: &Path) -> bool {
        self.commands.iter().any(|(path, _)| path == file)
    }

    /// The gate that hooks and MCP servers of a session in `cwd` (with `$DSH_HOME` `home`) pass before they start: the
    /// scripts pinned with the trust apply only when the workspace is trusted, and a command
    /// that runs any other model-writable file is refused ([`crate::scripts::ScriptGate`]).
    pub fn script_gate(&self, cwd: &Path, home: &Path) -> crate::scripts::ScriptGate {
        let pins = match self.trusted {
            Some(_) => self.scripts.iter().cloned().collect(),
            None => Default::default(),
        };
        crate::scripts::ScriptGate {
            workspace: self.workspace.clone(),
            cwd: std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf()),
            home: Some(home.to_path_buf()),
            pins,
            extra_roots: Vec::new(),
        }
    }

    /// Lists the command files as ignored (all of each).
    pub(crate) fn ignore_commands(&mut self) {
        for (file, _) in &self.commands {
            self.ignored.push((file.clone(), Vec::new()));
        }
    }

    /// True when some project setting was ignored for lack of trust.
    pub fn has_ignored(&self) -> bool {
        !self.ignored.is_empty()
    }

    /// The one warning line of a headless front end (without the `dsh: ` prefix), or `None`
    /// when nothing was ignored.
    pub fn warning(&self) -> Option<String> {
        if let Some(problem) = &self.invalid_project {
            let mut text =
                format!("ignoring the untrusted project config file, which has errors:\n{problem}");
            if let Some(more) = self.ignored_warning() {
                text.push_str(&format!("\ndsh: {more}"));
            }
            return Some(text);
        }
        self.ignored_warning()
    }

    fn ignored_warning(&self) -> Option<String> {
        if self.ignored.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .ignored
            .iter()
            .map(|(file, keys)| {
                if keys.is_empty() {
                    file.display().to_string()
                } else {
                    format!("{} ({})", file.display(), keys.join(", "))
                }
            })
            .collect();
        let changed = if self.changed_since_trusted {
            " (they changed since you trusted this workspace)"
        } else {
            ""
        };
        Some(format!(
            "ignoring untrusted project settings in {}{changed}; run 'dsh trust' to review and \
             trust them",
            parts.join(" and ")
        ))
    }
}

/// The workspace of `cwd`: its nearest ancestor holding `.git`, else `cwd` (canonical when
/// possible).
pub fn workspace_root(cwd: &Path) -> PathBuf {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map_or_else(|| cwd.clone(), Path::to_path_buf)
}

/// The project hooks file that applies in `cwd`: the first `.dsh/hooks.json` found from `cwd`
/// up to the directory holding `.git`, never `$DSH_HOME/hooks.json` itself.
pub fn project_hooks_path(cwd: &Path, home: &Path) -> Option<PathBuf> {
    let user = home.join(PROJECT_HOOKS_FILE);
    for dir in cwd.ancestors() {
        let candidate = dir.join(PROJECT_DIR).join(PROJECT_HOOKS_FILE);
        if candidate.is_file() {
            return (!same_file(&candidate, &user)).then_some(candidate);
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    None
}

/// The project command folders of a session in `cwd` (canonical): Claude Code's
/// `.claude/commands` of the working directory and of the workspace, then dsh's own
/// `.dsh/commands` of both (a later folder's command replaces an earlier one's of the same
/// name), never `$DSH_HOME/commands` or `~/.claude/commands` themselves (those are the user's).
pub fn project_command_dirs(cwd: &Path, workspace: &Path, home: &Path) -> Vec<PathBuf> {
    let user = home.join(COMMANDS_DIR);
    let user_claude = user_claude_dir().map(|dir| dir.join(COMMANDS_DIR));
    let mut dirs = Vec::new();
    for folder in [CLAUDE_DIR, PROJECT_DIR] {
        for base in [cwd, workspace] {
            let dir = base.join(folder).join(COMMANDS_DIR);
            let users =
                same_file(&dir, &user) || user_claude.as_ref().is_some_and(|u| same_file(&dir, u));
            if dir.is_dir() && !users && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// True when `dir` is a Claude Code folder of commands or skills (`…/.claude/<name>`): its
/// files are read in Claude Code's dialect.
pub fn is_claude_folder(dir: &Path) -> bool {
    dir.parent()
        .and_then(Path::file_name)
        .is_some_and(|name| name == CLAUDE_DIR)
}

/// The `.md` files below `dir` to pin: regular files, and links to a regular file inside
/// `dir` (a link leading out is left to the loader, which refuses it with a warning). Folders
/// are entered only when they are real folders, never through a link.
fn command_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(real_root: &Path, dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if out.len() >= MAX_COMMAND_FILES {
                return;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if depth < MAX_COMMAND_DEPTH {
                    walk(real_root, &path, depth + 1, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let inside = meta.is_file()
                || (meta.file_type().is_symlink()
                    && std::fs::canonicalize(&path).is_ok_and(|real| {
                        real.starts_with(real_root)
                            && std::fs::metadata(&real).is_ok_and(|m| m.is_file())
                    }));
            if inside {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    let real_root = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    walk(&real_root, dir, 0, &mut out);
    out
}

/// The `SKILL.md` files of the project's `.claude/skills` folders (of the working directory
/// and the workspace): `<dir>/<name>/SKILL.md` where both are real (no link is followed, so a
/// pinned skill is never a file outside the workspace), sorted.
fn claude_skill_files(cwd: &Path, workspace: &Path) -> Vec<PathBuf> {
    let user = user_claude_dir().map(|dir| dir.join("skills"));
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for base in [cwd, workspace] {
        let dir = base.join(CLAUDE_DIR).join("skills");
        let real_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
        if !real_dir || seen.contains(&dir) || user.as_ref().is_some_and(|u| same_file(&dir, u)) {
            continue;
        }
        seen.push(dir.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path().join("SKILL.md"))
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
            .take(MAX_COMMAND_FILES)
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// At most [`MAX_COMMAND_BYTES`] + 1 bytes of a command file (a larger one is refused by the
/// loader; its first bytes are enough to pin it).
fn read_command(path: &Path) -> std::io::Result<Vec<u8>> {
    read_checked(path, &[project_dir_of(path)], MAX_COMMAND_BYTES + 1, true)
        .map_err(std::io::Error::other)
}

/// Largest project file read whole: `.dsh/config.toml`, `.dsh/hooks.json`, `.mcp.json`,
/// `.claude/settings.json`, a script they run from where the model can write.
pub const MAX_PROJECT_FILE: u64 = 1024 * 1024;

/// The folder a project file belongs to (canonical when it exists): the repository holding it
/// (the nearest folder with `.git`, so links between its folders keep working), else the
/// folder holding its `.dsh` or `.claude` folder, else its own folder.
pub fn project_dir_of(file: &Path) -> PathBuf {
    let dir = file
        .ancestors()
        .skip(1)
        .find(|dir| {
            dir.file_name()
                .is_some_and(|name| name == PROJECT_DIR || name == CLAUDE_DIR)
        })
        .and_then(Path::parent)
        .or_else(|| file.parent())
        .unwrap_or(Path::new("/"));
    workspace_root(dir)
}

/// The bytes of a file dsh reads before the user trusted it (a repository may have planted
/// it): only a regular file whose real path lies in one of `within` (a link to `/proc/kmsg`,
/// which never ends, to `/dev/zero` or out of the project is not read), opened without
/// blocking (a FIFO), the very file that was checked (its device and inode compared after the
/// open), and at most `cap` bytes: more is an error, or, with `cut`, the first `cap` bytes.
/// The error says why, for a warning.
pub fn read_checked(
    path: &Path,
    within: &[PathBuf],
    cap: u64,
    cut: bool,
) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    if !within.is_empty() && !within.iter().any(|root| real.starts_with(root)) {
        return Err(format!(
            "it leads to {}, outside {}",
            real.display(),
            within[0].display()
        ));
    }
    let checked = std::fs::metadata(&real).map_err(|e| e.to_string())?;
    if !checked.is_file() {
        return Err("it is not a regular file".to_string());
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NONBLOCK | libc::O_NOCTTY,
    );
    let file = options.open(&real).map_err(|e| e.to_string())?;
    let opened = file.metadata().map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
            return Err("it changed while it was read".to_string());
        }
    }
    if !opened.is_file() {
        return Err("it is not a regular file".to_string());
    }
    let too_large = || format!("it is larger than {} KiB", cap / 1024);
    if opened.len() > cap && !cut {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(cap + u64::from(!cut))
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `sha256:<hex>` over the list of `files` and their exact bytes (each: path, NUL, length as
/// 8 little-endian bytes, content). Fails when a file cannot be read as [`read_checked`] reads
/// (inside `workspace` or a temp directory).
pub fn pin_files(files: &[PathBuf], workspace: &Path) -> std::io::Result<String> {
    let roots = crate::scripts::writable_roots(workspace, workspace, &[]);
    let mut contents = Vec::new();
    for file in files {
        contents.push(
            read_checked(file, &roots, MAX_PROJECT_FILE, false).map_err(std::io::Error::other)?,
        );
    }
    Ok(hash_files(files, &contents))
}

/// The pin of `files` with their `contents` (see [`pin_files`]).
fn hash_files(files: &[PathBuf], contents: &[Vec<u8>]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for (file, bytes) in files.iter().zip(contents) {
        context.update(file.to_string_lossy().as_bytes());
        context.update(&[0]);
        context.update(&(bytes.len() as u64).to_le_bytes());
        context.update(bytes);
    }
    let digest = context.finish();
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The project files' bytes, then the scripts their commands run from model-writable places
/// (read once: what is pinned is what applies), and the pin over all of them.
struct ReadProject {
    pin: String,
    contents: Vec<Vec<u8>>,
    scripts: Vec<(PathBuf, String)>,
    /// Scripts not read, and why (they stay unpinned, so the script gate refuses them).
    notes: Vec<String>,
}

fn read_project(
    project: &[PathBuf],
    config_file: Option<&Path>,
    slash_commands: &[PathBuf],
    places: (&Path, &Path, &Path),
) -> std::io::Result<ReadProject> {
    let (workspace, cwd, home) = places;
    let mut contents = Vec::new();
    let mut commands = crate::scripts::ProjectCommands::default();
    for file in project {
        if slash_commands.contains(file) {
            contents.push(read_command(file)?);
            continue;
        }
        let bytes = read_checked(file, &[project_dir_of(file)], MAX_PROJECT_FILE, false)
            .map_err(std::io::Error::other)?;
        let text = String::from_utf8_lossy(&bytes);
        if Some(file.as_path()) == config_file {
            commands.add_toml(&text);
        } else if file
            .file_name()
            .is_some_and(|n| n == crate::other_tools::MCP_JSON_FILE)
        {
            commands.add_mcp_json(&text);
        } else {
            commands.add_json(&text);
        }
        contents.push(bytes);
    }
    let mut files = project.to_vec();
    let mut scripts = Vec::new();
    let mut notes = Vec::new();
    let roots = crate::scripts::writable_roots(workspace, cwd, &[]);
    for script in commands.writable_scripts(workspace, cwd, home) {
        let bytes = match read_checked(&script, &roots, MAX_PROJECT_FILE, false) {
            Ok(bytes) => bytes,
            Err(why) => {
                notes.push(format!(
                    "{} not pinned: {why}; a hook or server running it is refused",
                    script.display()
                ));
                continue;
            }
        };
        scripts.push((script.clone(), crate::scripts::sha256(&bytes)));
        files.push(script);
        contents.push(bytes);
    }
    let pin = hash_files(&files, &contents);
    contents.truncate(project.len());
    Ok(ReadProject {
        pin,
        contents,
        scripts,
        notes,
    })
}

/// Whether `file` can be read as [`read_checked`] reads a project file; if not, a note says
/// why.
fn readable(file: &Path, cap: u64, cut: bool, notes: &mut Vec<String>) -> bool {
    match read_checked(file, &[project_dir_of(file)], cap, cut) {
        Ok(_) => true,
        Err(why) => {
            notes.push(format!("{} not read: {why}", file.display()));
            false
        }
    }
}

/// One recorded trust decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustEntry {
    /// Canonical workspace path.
    pub workspace: PathBuf,
    /// The pin the files had when trusted.
    pub pin: String,
    /// The files covered.
    pub files: Vec<PathBuf>,
    /// Seconds since the Unix epoch.
    pub trusted_at: u64,
}

/// `$DSH_HOME/trust.toml`: the workspaces the user trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustStore {
    /// One entry per trusted workspace.
    pub entries: Vec<TrustEntry>,
}

impl TrustStore {
    /// Path of the store.
    pub fn path(home: &Path) -> PathBuf {
        home.join(TRUST_FILE)
    }

    /// Reads the store; a missing file is empty. A damaged file is an error naming it (trust
    /// is then not given: nothing in a damaged file is believed).
    pub fn load(home: &Path) -> Result<TrustStore, String> {
        let path = TrustStore::path(home);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TrustStore::default())
            }
            Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
        };
        let table: Table = text.parse().map_err(|err: toml::de::Error| {
            format!(
                "{} is not valid TOML ({}); fix it or delete it and trust your workspaces again",
                path.display(),
                err.message().trim()
            )
        })?;
        let mut store = TrustStore::default();
        for item in table
            .get("workspace")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(entry) = item.as_table() else {
                continue;
            };
            let (Some(workspace), Some(pin)) = (
                entry.get("path").and_then(Value::as_str),
                entry.get("pin").and_then(Value::as_str),
            ) else {
                continue;
            };
            store.entries.push(TrustEntry {
                workspace: PathBuf::from(workspace),
                pin: pin.to_string(),
                files: entry
                    .get("files")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(PathBuf::from)
                    .collect(),
                trusted_at: entry
                    .get("trusted_at")
                    .and_then(Value::as_integer)
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
            });
        }
        Ok(store)
    }

    /// Writes the store (created with mode 0600, replaced atomically).
    pub fn save(&self, home: &Path) -> Result<(), String> {
        std::fs::create_dir_all(home)
            .map_err(|err| format!("cannot create {}: {err}", home.display()))?;
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|entry| {
                let mut t = Table::new();
                t.insert(
                    "path".into(),
                    Value::String(entry.workspace.to_string_lossy().into_owned()),
                );
                t.insert("pin".into(), Value::String(entry.pin.clone()));
                t.insert(
                    "files".into(),
                    Value::Array(
                        entry
                            .files
                            .iter()
                            .map(|f| Value::String(f.to_string_lossy().into_owned()))
                            .collect(),
                    ),
                );
                t.insert(
                    "trusted_at".into(),
                    Value::Integer(i64::try_from(entry.trusted_at).unwrap_or(i64::MAX)),
                );
                Value::Table(t)
            })
            .collect();
        let mut root = Table::new();
        root.insert("workspace".into(), Value::Array(entries));
        let text =
            format!("# Workspaces trusted with `dsh trust`; see docs/configuration.md.\n{root}");
        let path = TrustStore::path(home);
        let tmp = home.join(format!(".{TRUST_FILE}.{}.tmp", std::process::id()));
        write_private(&tmp, text.as_bytes())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|err| {
                let _ = std::fs::remove_file(&tmp);
                format!("cannot write {}: {err}", path.display())
            })
    }

    /// The entry of `workspace`, if any.
    pub fn find(&self, workspace: &Path) -> Option<&TrustEntry> {
        self.entries.iter().find(|e| e.workspace == workspace)
    }

    /// Records (or replaces) the trust of `workspace` at `pin`.
    pub fn record(&mut self, workspace: &Path, pin: &str, files: &[PathBuf]) {
        self.entries.retain(|e| e.workspace != workspace);
        self.entries.push(TrustEntry {
            workspace: workspace.to_path_buf(),
            pin: pin.to_string(),
            files: files.to_vec(),
            trusted_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
    }

    /// Removes the entry of `workspace`; true when there was one.
    pub fn revoke(&mut self, workspace: &Path) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.workspace != workspace);
        before != self.entries.len()
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

/// The `[trust] workspaces` prefixes of the user's own config table (already checked).
pub(crate) fn user_prefixes(user: Option<&Table>) -> Vec<PathBuf> {
    user.and_then(|t| t.get("trust"))
        .and_then(Value::as_table)
        .and_then(|t| t.get("workspaces"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)))
        .collect()
}

/// Finds the project files of `cwd` and decides whether they are trusted (`flag`: the run was
/// given `--trust-workspace`; `prefixes`: the user's `[trust] workspaces`). `ignored` is
/// filled later, by the loader.
pub fn assess(home: &Path, cwd: &Path, flag: bool, prefixes: &[PathBuf]) -> WorkspaceTrust {
    // Canonical paths, so that the pin does not depend on how the directory was named.
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let workspace = workspace_root(&cwd);
    let config_file = crate::load::project_config_path(&cwd, home);
    let hooks_file = project_hooks_path(&cwd, home);
    let command_dirs = project_command_dirs(&cwd, &workspace, home);
    // A commands folder that leads out of the workspace is not read (the loader says so).
    let command_paths: Vec<PathBuf> = command_dirs
        .iter()
        .filter(|dir| std::fs::canonicalize(dir).is_ok_and(|real| real.starts_with(&workspace)))
        .flat_map(|dir| command_files(dir))
        .collect();
    let mcp_json = crate::other_tools::project_mcp_json_path(&workspace);
    let claude_settings = crate::other_tools::project_claude_settings_path(&workspace);
    let mut skill_paths = claude_skill_files(&cwd, &workspace);
    // A file that cannot be read safely (a link out of the project or to `/proc`, a FIFO, a
    // file over the cap) is left out, with a warning, before anything is pinned or applied.
    let mut notes = Vec::new();
    let [config_file, hooks_file, mcp_json, claude_settings] =
        [config_file, hooks_file, mcp_json, claude_settings]
            .map(|file| file.filter(|f| readable(f, MAX_PROJECT_FILE, false, &mut notes)));
    let mut command_paths = command_paths;
    command_paths.retain(|f| readable(f, MAX_COMMAND_BYTES + 1, true, &mut notes));
    skill_paths.retain(|f| readable(f, MAX_COMMAND_BYTES + 1, true, &mut notes));
    let mut files: Vec<PathBuf> = config_file
        .iter()
        .chain(hooks_file.iter())
        .chain(mcp_json.iter())
        .chain(claude_settings.iter())
        .chain(command_paths.iter())
        .chain(skill_paths.iter())
        .cloned()
        .collect();
    let capped: Vec<PathBuf> = command_paths.iter().chain(&skill_paths).cloned().collect();
    let (pin, contents, scripts) = match read_project(
        &files,
        config_file.as_deref(),
        &capped,
        (&workspace, &cwd, home),
    ) {
        Ok(read) => {
            notes.extend(read.notes);
            (Some(read.pin), read.contents, read.scripts)
        }
        Err(_) => (None, Vec::new(), Vec::new()),
    };
    files.extend(scripts.iter().map(|(path, _)| path.clone()));
    let mut contents = contents.into_iter();
    let mut texts = contents
        .by_ref()
        .take(
            usize::from(config_file.is_some())
                + usize::from(hooks_file.is_some())
                + usize::from(mcp_json.is_some())
                + usize::from(claude_settings.is_some()),
        )
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let config_text = config_file.as_ref().and_then(|_| texts.next());
    let hooks_text = hooks_file.as_ref().and_then(|_| texts.next());
    let mcp_json_text = mcp_json.as_ref().and_then(|_| texts.next());
    let claude_settings_text = claude_settings.as_ref().and_then(|_| texts.next());
    drop(texts);
    let commands: Vec<(PathBuf, Vec<u8>)> =
        command_paths.into_iter().zip(contents.by_ref()).collect();
    let skills: Vec<(PathBuf, Vec<u8>)> = skill_paths.into_iter().zip(contents).collect();
    let mut changed_since_trusted = false;
    let trusted = if flag {
        Some(TrustReason::Flag)
    } else if let Some(prefix) = prefixes.iter().find(|p| workspace.starts_with(p)) {
        Some(TrustReason::UserConfig(prefix.clone()))
    } else {
        match TrustStore::load(home) {
            Ok(store) => match (store.find(&workspace), &pin) {
                (Some(entry), Some(pin)) if entry.pin == *pin => Some(TrustReason::Recorded),
                (Some(_), _) => {
                    changed_since_trusted = true;
                    None
                }
                (None, _) => None,
            },
            // A damaged store gives no trust; `dsh trust` reports the problem.
            Err(_) => None,
        }
    };
    WorkspaceTrust {
        workspace,
        files,
        hooks_file,
        pin,
        trusted,
        config_text,
        hooks_text,
        ignored: Vec::new(),
        changed_since_trusted,
        scripts,
        invalid_project: None,
        command_dirs,
        commands,
        mcp_json,
        mcp_json_text,
        claude_settings,
        claude_settings_text,
        skills,
        notes,
    }
}

/// What a preset lets the model do without asking (an unknown one counts as the widest).
fn rank(preset: &str) -> u8 {
    match preset {
        "read-only" => 0,
        "ask" => 1,
        "workspace-write" => 2,
        _ => 3,
    }
}

/// Removes from an untrusted project layer every setting that runs commands or widens power,
/// and returns the dotted keys removed. `below` is the merge of the layers under the project
/// file (built-in defaults and the user's file). What stays: a `permission` no wider than the
/// one below (default `workspace-write`), `provider` when it names a provider defined below,
/// `model`, `effort`, `compaction`, the model table (minus `provider` fields naming providers
/// not defined below) and `[tools]` (which a project file can only narrow; see schema.rs).
pub(crate) fn restrict_project_layer(project: &mut Table, below: &Table) -> Vec<String> {
    let mut ignored = Vec::new();
    let below_providers = below.get("providers").and_then(Value::as_table);
    let known = |name: &str| below_providers.is_some_and(|p| p.contains_key(name));
    if let Some(value) = project.get("permission").and_then(Value::as_str) {
        let floor = below
            .get("permission")
            .and_then(Value::as_str)
            .unwrap_or("workspace-write");
        if rank(value) > rank(floor) {
            project.remove("permission");
            ignored.push("permission".to_string());
        }
    }
    if let Some(name) = project.get("provider").and_then(Value::as_str) {
        if !known(name) {
            project.remove("provider");
            ignored.push("provider".to_string());
        }
    }
    if let Some(Value::Table(providers)) = project.remove("providers") {
        for name in providers.keys() {
            ignored.push(crate::load::key_path("providers", name));
        }
    }
    if let Some(mcp) = project.remove("mcp") {
        match mcp
            .as_table()
            .and_then(|t| t.get("servers"))
            .and_then(Value::as_table)
        {
            Some(servers) if !servers.is_empty() => {
                for name in servers.keys() {
                    ignored.push(crate::load::key_path("mcp.servers", name));
                }
            }
            _ => ignored.push("mcp".to_string()),
        }
    }
    // `[notify] command` and `tui.status_command` run a program, as hooks do.
    if project.remove("notify").is_some() {
        ignored.push("notify".to_string());
    }
    if let Some(Value::Table(tui)) = project.get_mut("tui") {
        if tui.remove("status_command").is_some() {
            ignored.push("tui.status_command".to_string());
        }
    }
    if let Some(hooks) = project.remove("hooks") {
        match hooks.as_table() {
            Some(events) if !events.is_empty() => {
                for event in events.keys() {
                    ignored.push(crate::load::key_path("hooks", event));
                }
            }
            _ => ignored.push("hooks".to_string()),
        }
    }
    if let Some(Value::Table(models)) = project.get_mut("models") {
        for (id, row) in models.iter_mut() {
            let Some(row) = row.as_table_mut() else {
                continue;
            };
            if let Some(provider) = row.get("provider").and_then(Value::as_str) {
                if !known(provider) {
                    row.remove("provider");
                    ignored.push(format!("{}.provider", crate::load::key_path("models", id)));
                }
            }
        }
    }
    ignored
}

/// The trust of the workspace of `cwd` as `dsh trust` reviews it: recorded trust and the
/// user's `[trust] workspaces` count (not `--trust-workspace`), and `ignored` lists what would
/// be left out without trust even when the workspace is trusted now. Fails when a project file
/// cannot be read or parsed.
pub fn inspect(home: &Path, cwd: &Path) -> Result<WorkspaceTrust, String> {
    let user = crate::load::read_layer(
        &crate::load::user_config_path(home),
        &crate::error::Source::UserFile(crate::load::user_config_path(home)),
    )
    .map_err(|e| e.to_string())?;
    let mut state = assess(home, cwd, false, &user_prefixes(user.as_ref()));
    let mut below = crate::builtin::builtin_layer();
    if let Some(user) = user {
        below = crate::load::merge_layers(&[
            (crate::error::Source::Default, below),
            (
                crate::error::Source::UserFile(crate::load::user_config_path(home)),
                user,
            ),
        ])
        .0;
    }
    if let Some(path) = crate::load::project_config_path(cwd, home) {
        let source = crate::error::Source::ProjectFile(path.clone());
        if let Some(mut table) =
            crate::load::read_layer(&path, &source).map_err(|e| e.to_string())?
        {
            let keys = restrict_project_layer(&mut table, &below);
            if !keys.is_empty() {
                state.ignored.push((path, keys));
            }
        }
    }
    if let Some(hooks) = &state.hooks_file {
        state.ignored.push((hooks.clone(), Vec::new()));
    }
    state.ignore_other_tools();
    state.ignore_commands();
    Ok(state)
}

/// `key = value` lines of `file` (a project config file) under the dotted `keys`, values as
/// `dsh config show` renders them (secrets redacted): what trusting would apply.
pub fn describe_keys(file: &Path, keys: &[String]) -> Vec<String> {
    let source = crate::error::Source::ProjectFile(file.to_path_buf());
    let Ok(Some(table)) = crate::load::read_layer(file, &source) else {
        return Vec::new();
    };
    let mut leaves = Vec::new();
    flatten(&table, "", &mut leaves);
    leaves
        .into_iter()
        .filter(|(path, _)| {
            keys.iter()
                .any(|k| path == k || path.starts_with(&format!("{k}.")))
        })
        .map(|(path, value)| format!("{path} = {}", crate::show::render_value(&path, value)))
        .collect()
}

/// `key = value` lines of the servers a `.mcp.json` (its `text` as pinned) would add, in
/// `[mcp.servers]`'s keys, then its warnings: what trusting would apply, and what not.
pub fn describe_mcp_json(file: &Path, text: &str) -> Vec<String> {
    match crate::other_tools::mcp_json_layer(&file.display().to_string(), text) {
        Ok((layer, warnings)) => {
            let mut leaves = Vec::new();
            flatten(&layer, "", &mut leaves);
            leaves
                .into_iter()
                .map(|(path, value)| {
                    format!("{path} = {}", crate::show::render_value(&path, value))
                })
                .chain(warnings.into_iter().map(|w| format!("warning: {w}")))
                .collect()
        }
        Err(problem) => vec![format!("not used: {problem}")],
    }
}

fn flatten<'a>(table: &'a Table, path: &str, out: &mut Vec<(String, &'a Value)>) {
    for (key, value) in table {
        let full = crate::load::key_path(path, key);
        match value {
            Value::Table(inner) if !inner.is_empty() => flatten(inner, &full, out),
            other => out.push((full, other)),
        }
    }
}
