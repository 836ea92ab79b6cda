//! Built-in extension: the dynamic facts a model needs, kept out of the system prompt so that the
//! prompt prefix stays byte-stable (docs/agent.md, "Context discipline").
//!
//! Two user-role messages, each appended before a step only when its text differs from the
//! last one this session logged:
//! - the runtime context (working directory, platform, date, permission preset);
//! - the project instructions: `$DSH_HOME/AGENTS.md`, then for each directory from the project
//!   root (nearest ancestor with `.git`, else the cwd) down to the cwd: `AGENTS.md`,
//!   `CLAUDE.md`, `AGENTS.local.md`, `CLAUDE.local.md`; de-duplicated by real path and by
//!   content; each file capped, and the whole capped.
//!
//! After that first message the instructions change only through touches, as in dsh
//! (docs/agent.md, "Project instructions"): a successful `read`, `write` or `edit` of a file
//! below the project root reaches every directory between the root and that file, and before
//! the next step one message (plugin `project-instructions`, form `update`) reports
//! - `Additional instructions from: <path>` for an instruction file in a newly reached
//!   directory,
//! - `Updated instructions from: <path>` for a loaded file whose content changed,
//! - `Instructions removed: <path>` for a loaded file that is gone or empty.
//!
//! The message's source carries `changes` (`{action: set|replace|remove, path, digest}`), so a
//! resumed session knows which files the model has; its first touch reports what changed
//! meanwhile. There is no file watcher: an edit made by `bash` shows at the next touch.

use dsh_llm::LockExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_llm::{Message, MessageSource};
use dsh_session::{Envelope, Event};

use crate::extension::{Extension, PreStepContext};

/// Plugin name of the runtime-context message.
pub const RUNTIME_CONTEXT_PLUGIN: &str = "runtime-context";
/// Plugin name of the project-instructions message.
pub const PROJECT_INSTRUCTIONS_PLUGIN: &str = "project-instructions";

/// Largest part of one instruction file that is sent.
const MAX_FILE_BYTES: usize = 32 * 1024;
/// Largest total of all instruction files that is sent.
const MAX_TOTAL_BYTES: usize = 64 * 1024;
/// Instruction file names, in the order they are read within one directory.
const INSTRUCTION_FILES: [&str; 4] = [
    "AGENTS.md",
    "CLAUDE.md",
    "AGENTS.local.md",
    "CLAUDE.local.md",
];

/// Supplies the facts; separate from the extension so tests can fix the date.
pub trait ContextSource: Send + Sync {
    /// Today's date as `YYYY-MM-DD`.
    fn today(&self) -> String;
    /// The permission preset in force, with a sentence on what it allows.
    fn permission(&self) -> String;
}

/// The system clock and a fixed permission description.
pub struct SystemContext {
    /// The permission description given to the model.
    pub permission: String,
}

impl ContextSource for SystemContext {
    fn today(&self) -> String {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        civil_date(secs / 86_400)
    }

    fn permission(&self) -> String {
        self.permission.clone()
    }
}

/// `YYYY-MM-DD` for a count of days since 1970-01-01 (proleptic Gregorian).
pub fn civil_date(days: u64) -> String {
    dsh_llm::calendar::iso_date(i64::try_from(days).unwrap_or(i64::MAX / 2))
}

/// The runtime-context and project-instructions extension.
pub struct ContextMessages {
    cwd: PathBuf,
    home: Option<PathBuf>,
    source: Box<dyn ContextSource>,
    /// The permission sentence after a `/permission` switch (replaces the source's).
    permission: Mutex<Option<String>>,
    last: Mutex<LastSent>,
    gate: InstructionGate,
}

#[derive(Default)]
struct LastSent {
    runtime: Option<String>,
    instructions: Option<String>,
    /// The baseline was checked by this process (the first step after creation or resume).
    baseline_checked: bool,
    /// Instruction files the model has, with the digest of the content it got.
    loaded: std::collections::BTreeMap<PathBuf, String>,
    /// Directories reached by touches (and the cwd chain), so each is searched once.
    reached: std::collections::BTreeSet<PathBuf>,
    /// Directories reached since the last step, not searched yet.
    new_dirs: Vec<PathBuf>,
    /// A touch happened since the last step: loaded files are checked again.
    touched: bool,
}

/// Tools whose successful calls touch a file (`file_path`), as in dsh.
const TOUCHING_TOOLS: [&str; 3] = ["read", "write", "edit"];

/// Digest of instruction content without surrounding whitespace (64-bit FNV-1a, hex): stable
/// across builds, kept in the log.
fn digest(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.trim().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// How instruction files are read (docs/SECURITY.md, "The file gate"): the project's through
/// dsh-tools' file gate, so a file that is a link out of the workspace (`CLAUDE.md ->
/// $DSH_HOME/.env`, `AGENTS.md -> /etc/shadow`), a hard link to a denied file, a FIFO or a
/// device is never loaded; the user's own `$DSH_HOME/AGENTS.md` as it is.
struct InstructionGate {
    policy: dsh_tools::GatePolicy,
    home_file: Option<PathBuf>,
}

impl InstructionGate {
    fn new(cwd: &Path, home: Option<&Path>) -> Self {
        let root = cwd
            .ancestors()
            .find(|dir| dir.join(".git").exists())
            .unwrap_or(cwd);
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let mut policy = dsh_tools::GatePolicy::new(&root);
        if let Some(home) = home {
            policy = policy.with_dsh_home(home);
        }
        InstructionGate {
            policy,
            home_file: home.map(|home| home.join("AGENTS.md")),
        }
    }

    fn is_home_file(&self, path: &Path) -> bool {
        self.home_file.as_deref() == Some(path)
    }

    /// True when `path` may be loaded (see [`InstructionGate::read`]).
    fn allows(&self, path: &Path) -> bool {
        self.is_home_file(path) || self.policy.check_workspace_path(path).is_ok()
    }

    /// At most one byte more than [`MAX_FILE_BYTES`] of `path`, or `None` when it is
    /// missing, unreadable or refused by the gate.
    fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let max = MAX_FILE_BYTES as u64 + 1;
        if self.is_home_file(path) {
            let file = std::fs::File::open(path).ok()?;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(file, max), &mut bytes).ok()?;
            return Some(bytes);
        }
        self.policy.read_workspace_file(path, max).ok()
    }
}

/// The content of an instruction file as sent: at most [`MAX_FILE_BYTES`], `None` when the
/// file is missing, unreadable or blank.
fn read_instruction(gate: &InstructionGate, path: &Path) -> Option<String> {
    let bytes = gate.read(path)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if text.trim().is_empty() {
        return None;
    }
    if text.len() > MAX_FILE_BYTES {
        let mut cut = MAX_FILE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[... truncated: the file is longer than dsh sends ...]");
    }
    Some(text)
}

impl ContextMessages {
    /// Context for a session in `cwd`; `home` is `$DSH_HOME` (for its `AGENTS.md`).
    pub fn new(
        cwd: impl Into<PathBuf>,
        home: Option<PathBuf>,
        source: Box<dyn ContextSource>,
    ) -> Self {
        let cwd = cwd.into();
        let gate = InstructionGate::new(&cwd, home.as_deref());
        ContextMessages {
            cwd,
            gate,
            home,
            source,
            permission: Mutex::new(None),
            last: Mutex::new(LastSent::default()),
        }
    }

    fn runtime_text(&self) -> String {
        let permission = self
            .permission
            .lock_or_recover()
            .clone()
            .unwrap_or_else(|| self.source.permission());
        format!(
            "Runtime context (this replaces any earlier runtime context):\n\
             - working directory: {}\n\
             - platform: {} {}\n\
             - date: {}\n\
             - permissions: {}",
            self.cwd.display(),
            std::env::consts::OS,
            std::env::consts::ARCH,
            self.source.today(),
            permission
        )
    }

    /// The project root: the nearest ancestor of the cwd with `.git`, else the cwd.
    fn project_root(&self) -> PathBuf {
        self.cwd
            .ancestors()
            .find(|dir| dir.join(".git").exists())
            .unwrap_or(&self.cwd)
            .to_path_buf()
    }

    /// `path` as the model is shown it: relative to the cwd when below it.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.cwd)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }

    /// Records a touch of `file` (absolute): every directory from the project root down to
    /// the file's own is reached.
    fn touch(&self, file: &Path) {
        let root = self.project_root();
        let mut last = self.last.lock_or_recover();
        last.touched = true;
        let Some(dir) = file.parent() else {
            return;
        };
        if !dir.starts_with(&root)
            || dir
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return;
        }
        let mut chain: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| d.starts_with(&root))
            .map(Path::to_path_buf)
            .collect();
        chain.reverse();
        for dir in chain {
            if last.reached.insert(dir.clone()) {
                last.new_dirs.push(dir);
            }
        }
    }

    /// The update message for what touches revealed since the last step (see the module
    /// docs), or `None` when nothing changed.
    fn instruction_update(&self) -> Option<Message> {
        let mut last = self.last.lock_or_recover();
        last.touched = false;
        let mut parts: Vec<String> = Vec::new();
        let mut changes: Vec<serde_json::Value> = Vec::new();
        let mut total = 0usize;
        let loaded: Vec<(PathBuf, String)> = last
            .loaded
            .iter()
            .map(|(p, d)| (p.clone(), d.clone()))
            .collect();
        for (path, old) in loaded {
            let shown = self.shown(&path);
            match read_instruction(&self.gate, &path) {
                None => {
                    parts.push(format!(
                        "Instructions removed: {shown}\n\nThe instructions loaded earlier from this file no longer apply."
                    ));
                    changes.push(serde_json::json!({"action": "remove", "path": shown}));
                    last.loaded.remove(&path);
                }
                Some(text) if digest(&text) != old => {
                    if total + text.len() > MAX_TOTAL_BYTES {
                        continue;
                    }
                    total += text.len();
                    let d = digest(&text);
                    parts.push(format!(
                        "Updated instructions from: {shown}\n\nUse this content instead of what was loaded from this file before.\n\n{}",
                        text.trim_end()
                    ));
                    changes
                        .push(serde_json::json!({"action": "replace", "path": shown, "digest": d}));
                    last.loaded.insert(path, d);
                }
                Some(_) => {}
            }
        }
        let dirs = std::mem::take(&mut last.new_dirs);
        for dir in dirs {
            let mut seen_here: Vec<String> = Vec::new();
            for name in INSTRUCTION_FILES {
                let path = dir.join(name);
                let Some(text) = read_instruction(&self.gate, &path) else {
                    continue;
                };
                let d = digest(&text);
                // Same content as an earlier file of this directory, or already loaded (the
                // cwd chain's files came with the first message): not again.
                if seen_here.contains(&d) || last.loaded.contains_key(&path) {
                    seen_here.push(d);
                    continue;
                }
                seen_here.push(d.clone());
                if total + text.len() > MAX_TOTAL_BYTES {
                    // Not sent: reaching the directory again later retries it.
                    last.reached.remove(&dir);
                    continue;
                }
                total += text.len();
                let shown = self.shown(&path);
                let scope = self.shown(&dir);
                let scope = if scope.is_empty() {
                    ".".to_string()
                } else {
                    scope
                };
                parts.push(format!(
                    "Additional instructions from: {shown}\n\nThey apply to work under `{scope}`; more specific instructions take precedence over broader ones, and none of them override the user's direct requests.\n\n{}",
                    text.trim_end()
                ));
                changes.push(serde_json::json!({"action": "set", "path": shown, "digest": d}));
                last.loaded.insert(path, d);
            }
        }
        if parts.is_empty() {
            return None;
        }
        let mut message =
            crate::agent::plugin_message(PROJECT_INSTRUCTIONS_PLUGIN, "update", parts.join("\n\n"));
        if let MessageSource::Plugin { extra, .. } = &mut message.source {
            extra.insert("changes".into(), serde_json::Value::Array(changes));
        }
        Some(message)
    }

    /// The instruction files in the order they apply, after de-duplication.
    pub fn instruction_files(&self) -> Vec<PathBuf> {
        let mut candidates = Vec::new();
        if let Some(home) = &self.home {
            candidates.push(home.join("AGENTS.md"));
        }
        let root = self.project_root();
        let mut chain: Vec<&Path> = self
            .cwd
            .ancestors()
            .take_while(|dir| dir.starts_with(&root))
            .collect();
        chain.reverse();
        for dir in chain {
            for name in INSTRUCTION_FILES {
                candidates.push(dir.join(name));
            }
        }
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for path in candidates {
            // A regular file, its links followed; one `stat` rules out the usual case, a name
            // that is not there, before the real path is resolved (a `readlink` per component).
            if !path.is_file() || !self.gate.allows(&path) {
                continue;
            }
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            if !seen.contains(&real) {
                seen.push(real);
                out.push(path);
            }
        }
        out
    }

    /// The project-instructions snapshot made of `files` (from [`Self::instruction_files`]).
    fn instructions_text(&self, files: &[PathBuf]) -> Option<String> {
        let mut parts: Vec<(&PathBuf, String)> = Vec::new();
        let mut total = 0usize;
        for path in files {
            let Some(bytes) = self.gate.read(path) else {
                continue;
            };
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if text.trim().is_empty() || parts.iter().any(|(_, t)| *t == text) {
                continue;
            }
            let budget = MAX_FILE_BYTES.min(MAX_TOTAL_BYTES.saturating_sub(total));
            if budget == 0 {
                break;
            }
            if text.len() > budget {
                let mut cut = budget;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n[... truncated: the file is longer than dsh sends ...]");
            }
            total += text.len();
            parts.push((path, text));
        }
        if parts.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Project instructions (from AGENTS.md / CLAUDE.md files; they replace any earlier \
             project instructions). Follow them unless the user says otherwise.",
        );
        for (path, text) in parts {
            out.push_str(&format!("\n\n## {}\n\n{}", path.display(), text.trim_end()));
        }
        Some(out)
    }
}

fn context_message(plugin: &str, text: String) -> Message {
    crate::agent::plugin_message(plugin, "snapshot", text)
}

impl ContextMessages {
    /// The file a note of `scope` goes to: the user's `$DSH_HOME/AGENTS.md`; the project's
    /// `AGENTS.md` at the project root, else its `CLAUDE.md` when only that exists there.
    fn note_file(&self, scope: crate::NoteScope) -> Result<(PathBuf, Option<PathBuf>), String> {
        match scope {
            crate::NoteScope::User => match &self.home {
                Some(home) => Ok((home.join("AGENTS.md"), None)),
                None => Err("this session has no dsh home for a user note".to_string()),
            },
            crate::NoteScope::Project => {
                let root = self.project_root();
                let root = std::fs::canonicalize(&root).unwrap_or(root);
                let claude = root.join("CLAUDE.md");
                let agents = root.join("AGENTS.md");
                let file = match (agents.exists(), claude.is_file()) {
                    (false, true) => claude,
                    _ => agents,
                };
                Ok((file, Some(root)))
            }
        }
    }
}

/// Largest instructions file a note is appended to.
const MAX_NOTE_TARGET: u64 = 1024 * 1024;

/// Whether `path` is a file a note may be written to, before anything opens it: not a link
/// (also one that stays in the project: the editor of `/memory` would follow it wherever it
/// leads by then), a regular file of at most [`MAX_NOTE_TARGET`] bytes if it exists, with no
/// other name (a hard link) when it is a project's, and inside `within`. A repository or the
/// model may plant `AGENTS.md` as a link to `~/.bashrc` or `/etc/cron.d/x`.
fn check_note_target(path: &Path, within: Option<&Path>) -> Result<(), String> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(format!("{shown}: {err}")),
    };
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{shown} is a symbolic link; notes and /memory write only a regular file"
        ));
    }
    check_note_meta(path, &meta, within)
}

/// The checks of [`check_note_target`] on the metadata of the file itself, and that its real
/// path lies in `within`.
fn check_note_meta(
    path: &Path,
    meta: &std::fs::Metadata,
    within: Option<&Path>,
) -> Result<(), String> {
    let shown = path.display();
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if meta.len() > MAX_NOTE_TARGET {
        return Err(format!("{shown} is larger than {MAX_NOTE_TARGET} bytes"));
    }
    #[cfg(unix)]
    if within.is_some() && std::os::unix::fs::MetadataExt::nlink(meta) > 1 {
        return Err(format!(
            "{shown} has other names (hard links); notes and /memory write only a file with one"
        ));
    }
    if let Some(root) = within {
        let real = std::fs::canonicalize(path).map_err(|e| format!("{shown}: {e}"))?;
        if !real.starts_with(root) {
            return Err(format!("{shown} leads out of the project"));
        }
    }
    Ok(())
}

/// Appends `line` to `path` (created when missing), after a line break if the file does not
/// end with one. Only a regular file is written, never through a symbolic link at `path`
/// (`O_NOFOLLOW`), and, with `within`, only one whose real path lies in it: a repository may
/// plant `AGENTS.md` as a link to a file elsewhere.
fn append_note(path: &Path, line: &str, within: Option<&Path>) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let shown = path.display();
    let mut options = std::fs::OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
        options.mode(if within.is_some() { 0o644 } else { 0o600 });
    }
    let mut file = options
        .open(path)
        .map_err(|e| format!("cannot open {shown} ({e}); it must be a regular file"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    check_note_meta(path, &meta, within)?;
    let mut text = String::new();
    if meta.len() > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))
            .and_then(|_| file.read_exact(&mut last))
            .map_err(|e| format!("{shown}: {e}"))?;
        if last[0] != b'\n' {
            text.push('\n');
        }
    }
    text.push_str(line);
    text.push('\n');
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {shown}: {e}"))
}

impl Extension for ContextMessages {
    fn name(&self) -> &str {
        "context-messages"
    }

    fn remember(&self, scope: crate::NoteScope, text: &str) -> Option<Result<PathBuf, String>> {
        let note = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if note.is_empty() {
            return Some(Err("the note is empty".to_string()));
        }
        let (path, within) = match self.note_file(scope) {
            Ok(found) => found,
            Err(why) => return Some(Err(why)),
        };
        if let Err(why) = append_note(&path, &format!("- {note}"), within.as_deref()) {
            return Some(Err(why));
        }
        self.instructions_edited(&path);
        Some(Ok(path))
    }

    /// The file `/memory` hands to an editor: only one a note could be written to (no link,
    /// a regular file if it exists, in the project), since an editor writes through whatever
    /// the path names.
    fn instructions_file(&self, scope: crate::NoteScope) -> Option<Result<PathBuf, String>> {
        Some(self.note_file(scope).and_then(|(path, within)| {
            check_note_target(&path, within.as_deref())?;
            Ok(path)
        }))
    }

    /// The next step tells the model: a loaded file is checked again, a new one is looked for
    /// in its folder.
    fn instructions_edited(&self, path: &Path) {
        let mut last = self.last.lock_or_recover();
        last.touched = true;
        if !last.loaded.contains_key(path) {
            if let Some(dir) = path.parent() {
                last.reached.remove(dir);
                if !last.new_dirs.iter().any(|d| d == dir) {
                    last.new_dirs.push(dir.to_path_buf());
                }
            }
        }
    }

    fn restore(&self, events: &[Envelope]) {
        let mut last = self.last.lock_or_recover();
        for envelope in events {
            if let Event::UserMessage(message) = &envelope.event {
                if let MessageSource::Plugin {
                    plugin,
                    form,
                    extra,
                } = &message.source
                {
                    if plugin == RUNTIME_CONTEXT_PLUGIN {
                        last.runtime = Some(message.text());
                    } else if plugin == PROJECT_INSTRUCTIONS_PLUGIN
                        && form.as_deref() == Some("update")
                    {
                        // Which files touches loaded (docs/agent.md, "Project instructions").
                        let changes = extra.get("changes").and_then(|c| c.as_array());
                        for change in changes.into_iter().flatten() {
                            let Some(path) = change["path"].as_str() else {
                                continue;
                            };
                            let path = dsh_tools::absolutize(&self.cwd, path);
                            match (change["action"].as_str(), change["digest"].as_str()) {
                                (Some("remove"), _) => {
                                    last.loaded.remove(&path);
                                }
                                (_, Some(d)) => {
                                    if let Some(dir) = path.parent() {
                                        last.reached.insert(dir.to_path_buf());
                                    }
                                    last.loaded.insert(path, d.to_string());
                                }
                                _ => {}
                            }
                        }
                    } else if plugin == PROJECT_INSTRUCTIONS_PLUGIN {
                        last.instructions = Some(message.text());
                    }
                }
            }
        }
    }

    fn tool_post(&self, ctx: &mut crate::extension::ToolPostContext<'_>) {
        if !TOUCHING_TOOLS.contains(&ctx.call.name.as_str()) || ctx.outcome.is_err() {
            return;
        }
        let Ok(args) = serde_json::from_str::<serde_json::Value>(&ctx.call.arguments) else {
            return;
        };
        if let Some(path) = args["file_path"].as_str() {
            self.touch(&dsh_tools::absolutize(&self.cwd, path));
        }
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        if let Some(change) = &ctx.permission_change {
            *self.permission.lock_or_recover() = Some(change.summary.clone());
        }
        let runtime = self.runtime_text();
        let mut last = self.last.lock_or_recover();
        if last.runtime.as_deref() != Some(runtime.as_str()) {
            ctx.inject
                .push(context_message(RUNTIME_CONTEXT_PLUGIN, runtime.clone()));
            last.runtime = Some(runtime);
        }
        if !last.baseline_checked {
            // The whole chain once per process: sent when it differs from what the log has
            // (a new session, or a resumed one whose files changed meanwhile).
            last.baseline_checked = true;
            let files = self.instruction_files();
            if let Some(instructions) = self.instructions_text(&files) {
                if last.instructions.as_deref() != Some(instructions.as_str()) {
                    ctx.inject.push(context_message(
                        PROJECT_INSTRUCTIONS_PLUGIN,
                        instructions.clone(),
                    ));
                    last.instructions = Some(instructions);
                }
            }
            for path in files {
                if let Some(text) = read_instruction(&self.gate, &path) {
                    last.loaded.insert(path, digest(&text));
                }
            }
            let root = self.project_root();
            for dir in self.cwd.ancestors().take_while(|d| d.starts_with(&root)) {
                last.reached.insert(dir.to_path_buf());
            }
        }
        drop(last);
        // Loaded files are checked before every step (after a resume too); new directories
        // after touches.
        if let Some(update) = self.instruction_update() {
            ctx.inject.push(update);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(civil_date(20_787), "2026-11-30");
        assert_eq!(civil_date(11_016), "2000-02-29");
    }
}
