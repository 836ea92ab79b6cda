//! Custom slash commands: Markdown files in `$DSH_HOME/commands/` (the user's) and the
//! project's `.dsh/commands/` (only in a trusted workspace), one command per file, named by its
//! path (`git/pr.md` is `/git:pr`). Optional front matter (`description`, `argument-hint`,
//! `allowed-tools`, `model`) between `---` lines; the body, with `$ARGUMENTS`, `$1`..`$9` and
//! `$$` substituted, becomes the user message of the turn the command starts (docs/commands.md).
//!
//! Nothing in a body runs: there is no `!command` or `@file` expansion, so a planted command
//! does nothing by being typed but send its text. A project's files are read through the file
//! gate and only as the trust pin saw them ([`ProjectCommands`]).

use std::path::{Path, PathBuf};

use crate::extension::{CommandExpansion, Extension, TurnSettings, UserCommand};
use crate::{ExtensionError, ToolFilter};

/// Largest command file read.
pub const MAX_COMMAND_BYTES: u64 = 64 * 1024;

/// Deepest folder nesting read below a commands folder.
const MAX_DEPTH: usize = 8;

/// dsh's own command names (every front end's, with their aliases): a command file never
/// replaces one of them.
pub const RESERVED_COMMAND_NAMES: &[&str] = &[
    "agents",
    "clear",
    "compact",
    "cost",
    "diff",
    "effort",
    "exit",
    "export",
    "fork",
    "help",
    "init",
    "model",
    "new",
    "permission",
    "permissions",
    "plan",
    "quit",
    "resume",
    "status",
    "undo",
];

/// One command file.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomCommand {
    /// The name typed after `/` (`git:pr`).
    pub name: String,
    /// One line for `/help` and completion.
    pub description: String,
    /// What to type after the name (`argument-hint`).
    pub argument_hint: Option<String>,
    /// The tools the command's turn is offered (`allowed-tools`); `None`: the session's.
    pub allowed_tools: Option<Vec<String>>,
    /// The model of the command's turn (`model`).
    pub model: Option<String>,
    /// The text after the front matter.
    pub body: String,
    /// The file.
    pub path: PathBuf,
}

/// A command file left out, or a front matter key ignored, for a warning.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandProblem {
    /// The file (or folder).
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

/// Parses one command file named `name`: optional `---` front matter, then the body. Unknown
/// keys are returned as warnings; anything else malformed is an error.
pub fn parse_command(
    name: &str,
    text: &str,
    path: &Path,
) -> Result<(CustomCommand, Vec<String>), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = split_front_matter(text)?;
    let mut command = CustomCommand {
        name: name.to_string(),
        description: String::new(),
        argument_hint: None,
        allowed_tools: None,
        model: None,
        body: body.trim_matches(['\r', '\n']).to_string(),
        path: path.to_path_buf(),
    };
    let mut warnings = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut lines = front.lines().enumerate().peekable();
    while let Some((at, line)) = lines.next() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let line_no = at + 2;
        let Some((key, value)) = line
            .split_once(':')
            .filter(|_| !line.starts_with([' ', '\t']))
        else {
            return Err(format!(
                "front matter line {line_no} is not `key: value`: `{trimmed}`"
            ));
        };
        let key = key.trim();
        if seen.iter().any(|k| k == key) {
            return Err(format!("front matter key `{key}` is given twice"));
        }
        seen.push(key.to_string());
        let value = value.trim();
        // A YAML block list: `key:` followed by `  - item` lines.
        let mut items = Vec::new();
        if value.is_empty() {
            while let Some((_, next)) = lines.peek() {
                let Some(item) = next.trim_start().strip_prefix("- ") else {
                    if next.trim().is_empty() {
                        lines.next();
                        continue;
                    }
                    break;
                };
                items.push(unquote(item.trim())?);
                lines.next();
            }
        }
        match key {
            "description" => command.description = one_line(key, value, &items)?,
            "argument-hint" => command.argument_hint = Some(one_line(key, value, &items)?),
            "model" => command.model = Some(one_line(key, value, &items)?),
            "allowed-tools" => command.allowed_tools = Some(tool_list(value, items)?),
            other => warnings.push(format!("front matter key `{other}` is not used by dsh")),
        }
    }
    if command.description.is_empty() {
        command.description = command
            .body
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(|line| line.trim_start_matches('#').trim().to_string())
            .unwrap_or_default();
    }
    if command.description.chars().count() > 120 {
        let cut: String = command.description.chars().take(119).collect();
        command.description = format!("{cut}…");
    }
    Ok((command, warnings))
}

/// True when `dir` is a Claude Code folder (`…/.claude/commands`).
fn is_claude_folder(dir: &Path) -> bool {
    dir.parent()
        .and_then(Path::file_name)
        .is_some_and(|name| name == ".claude")
}

/// Claude Code's names of dsh's tools, as its `allowed-tools` writes them.
const CLAUDE_TOOL_NAMES: &[(&str, &str)] = &[
    ("Bash", "bash"),
    ("Read", "read"),
    ("Write", "write"),
    ("Edit", "edit"),
    ("MultiEdit", "edit"),
    ("Glob", "glob"),
    ("Grep", "grep"),
    ("TodoWrite", "todo_write"),
    ("WebFetch", "web_fetch"),
    ("WebSearch", "web_search"),
    ("Task", "subagent"),
];

/// Front matter keys of Claude Code's command files that dsh reads as its own.
const CLAUDE_KEYS: &[&str] = &["description", "argument-hint", "allowed-tools", "model"];

/// Parses a command file of a `.claude/commands` folder (Claude Code's dialect, docs/other-tools.md):
/// the same format, with Claude Code's tool names in `allowed-tools` (`Bash`, `Edit`, ...)
/// mapped to dsh's (`bash`, `edit`, ...); its other keys (`disable-model-invocation`, ...) are
/// warnings naming them, and argument patterns (`Bash(git add:*)`) refuse the file, as in
/// dsh's own folders.
pub fn parse_claude_command(
    name: &str,
    text: &str,
    path: &Path,
) -> Result<(CustomCommand, Vec<String>), String> {
    let (text, patterns) = without_argument_patterns(text);
    let (mut command, mut warnings) = parse_command(name, &text, path)?;
    if !patterns.is_empty() {
        warnings.push(format!(
            "`allowed-tools` argument patterns ({}) are not enforced: the command's turn is \
             offered the whole tool, under the session's preset and approvals",
            patterns.join(", ")
        ));
    }
    if let Some(tools) = &mut command.allowed_tools {
        for tool in tools.iter_mut() {
            if let Some((_, ours)) = CLAUDE_TOOL_NAMES.iter().find(|(theirs, _)| theirs == tool) {
                *tool = (*ours).to_string();
            }
        }
        tools.dedup();
    }
    for warning in &mut warnings {
        if !CLAUDE_KEYS
            .iter()
            .any(|key| warning.contains(&format!("`{key}`")))
        {
            warning.push_str(" (a Claude Code setting dsh does not support)");
        }
    }
    Ok((command, warnings))
}

/// `text` with Claude Code's argument patterns taken out of its front matter
/// (`Bash(git add:*)` becomes `Bash`), and the patterns taken out. The body is left as it is.
fn without_argument_patterns(text: &str) -> (String, Vec<String>) {
    let Ok((front, _)) = split_front_matter(text) else {
        return (text.to_string(), Vec::new());
    };
    if front.is_empty() || !front.contains('(') {
        return (text.to_string(), Vec::new());
    }
    let mut patterns = Vec::new();
    let mut cleaned = String::with_capacity(front.len());
    let mut rest = front;
    while let Some(open) = rest.find('(') {
        let Some(close) = rest[open..].find(')').map(|at| open + at) else {
            break;
        };
        let before = &rest[..open];
        // Only right after a tool name: `Bash(`, `mcp__x__y(`.
        let named = before
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !named {
            cleaned.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            continue;
        }
        cleaned.push_str(before);
        patterns.push(rest[open..=close].to_string());
        rest = &rest[close + 1..];
    }
    cleaned.push_str(rest);
    let at = text.find(front).unwrap_or(0);
    let rebuilt = format!("{}{cleaned}{}", &text[..at], &text[at + front.len()..]);
    (rebuilt, patterns)
}

/// The front matter (without its `---` lines) and the body.
fn split_front_matter(text: &str) -> Result<(&str, &str), String> {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Ok(("", text));
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Ok((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err("the front matter is not closed by a `---` line".to_string())
}

/// A quoted or plain scalar.
fn unquote(value: &str) -> Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote) {
            return inner
                .strip_suffix(quote)
                .map(str::to_string)
                .ok_or_else(|| format!("the value `{value}` has an unclosed quote"));
        }
    }
    Ok(value.to_string())
}

fn one_line(key: &str, value: &str, items: &[String]) -> Result<String, String> {
    if !items.is_empty() {
        return Err(format!("`{key}` takes one value, not a list"));
    }
    let value = unquote(value)?;
    if value.is_empty() {
        return Err(format!("`{key}` is empty"));
    }
    Ok(value)
}

/// `allowed-tools`: a comma list, a `[a, b]` flow list or a block list of names or `*`
/// patterns.
fn tool_list(value: &str, items: Vec<String>) -> Result<Vec<String>, String> {
    let names: Vec<String> = if !items.is_empty() {
        items
    } else {
        let inner = value
            .strip_prefix('[')
            .map(|v| {
                v.strip_suffix(']')
                    .ok_or("`allowed-tools` has an unclosed `[`")
            })
            .transpose()?
            .unwrap_or(value);
        inner
            .split(',')
            .map(|item| unquote(item.trim()))
            .collect::<Result<_, _>>()?
    };
    let names: Vec<String> = names.into_iter().filter(|n| !n.is_empty()).collect();
    if names.is_empty() {
        return Err("`allowed-tools` names no tool".to_string());
    }
    for name in &names {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '.'))
        {
            return Err(format!(
                "`allowed-tools` entry `{name}` is not a tool name or `*` pattern (dsh offers or \
                 withholds whole tools, `bash`, `read`, `mcp__github__*`; argument patterns such \
                 as `Bash(git add:*)` are not supported)"
            ));
        }
    }
    Ok(names)
}

/// Splits `arguments` as a shell does, without running anything: whitespace separates words,
/// `'…'` is literal, `"…"` keeps spaces (`\"` and `\\` escaped), `\` escapes outside quotes.
pub fn split_arguments(arguments: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = arguments.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("the arguments have an unclosed `'`".to_string()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("the arguments have an unclosed `\"`".to_string()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("the arguments have an unclosed `\"`".to_string()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The body with `$ARGUMENTS` (all of `arguments`, trimmed), `$1`..`$9` (its words, empty
/// when missing) and `$$` (a `$`) replaced; any other `$` stays. When the body names no
/// argument and some were given, they follow it as `ARGUMENTS: …`, so none is lost.
pub fn substitute(body: &str, arguments: &str) -> Result<String, String> {
    let arguments = arguments.trim();
    let words = split_arguments(arguments)?;
    let mut out = String::with_capacity(body.len() + arguments.len());
    let mut used = false;
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(arguments);
            used = true;
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(digit) = after.chars().next().filter(|c| matches!(c, '1'..='9')) {
            let index = (digit as usize) - ('1' as usize);
            out.push_str(words.get(index).map_or("", String::as_str));
            used = true;
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !used && !arguments.is_empty() {
        out.push_str(&format!("\n\nARGUMENTS: {arguments}"));
    }
    Ok(out)
}

/// The command name of `relative` (a path below a commands folder, ending in `.md`): its
/// folders and file stem joined by `:`; an error for an invalid or reserved name.
pub fn command_name(relative: &Path) -> Result<String, String> {
    let mut parts = Vec::new();
    for component in relative.components() {
        let part = component.as_os_str().to_string_lossy();
        parts.push(part.into_owned());
    }
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".md").to_string();
    }
    for part in &parts {
        if part.is_empty()
            || !part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "`{}` is not a command name: file and folder names may only use letters, digits, \
                 `-` and `_`",
                relative.display()
            ));
        }
    }
    let name = parts.join(":");
    if RESERVED_COMMAND_NAMES.contains(&name.as_str()) {
        return Err(format!(
            "`/{name}` is dsh's own command, which a command file does not replace; rename the \
             file"
        ));
    }
    Ok(name)
}

/// A project's command folders as the trust check saw them: the folders, the gate their files
/// pass, and each file's bytes as pinned. Only a file whose bytes are still those is used.
pub struct ProjectCommands {
    /// The `.dsh/commands` folders (canonical).
    pub dirs: Vec<PathBuf>,
    /// The project's file gate.
    pub gate: dsh_tools::GatePolicy,
    /// Each command file the trust pin covers, with its bytes as pinned.
    pub pinned: Vec<(PathBuf, Vec<u8>)>,
}

/// The commands found, and the problems met.
#[derive(Debug, Clone, Default)]
pub struct CustomCommandSet {
    commands: Vec<CustomCommand>,
    problems: Vec<CommandProblem>,
}

impl CustomCommandSet {
    /// The user's commands in `user_dir` (read as they are), then the project's (through the
    /// gate, as pinned), which replace a user command of the same name.
    pub fn load(user_dir: Option<&Path>, project: Option<&ProjectCommands>) -> Self {
        CustomCommandSet::load_all(&user_dir.into_iter().collect::<Vec<_>>(), project)
    }

    /// As [`CustomCommandSet::load`] with several user folders (`~/.claude/commands`, then
    /// `$DSH_HOME/commands`), each replacing an earlier one's command of the same name. A
    /// folder `…/.claude/commands` is read in Claude Code's dialect ([`claude_dialect`]).
    pub fn load_all(user_dirs: &[&Path], project: Option<&ProjectCommands>) -> Self {
        let mut set = CustomCommandSet::default();
        for dir in user_dirs {
            let mut files = Vec::new();
            walk_own(dir, 0, &mut files, &mut set.problems);
            files.sort();
            for path in files {
                set.add(dir, &path, read_own(&path));
            }
        }
        if let Some(project) = project {
            for dir in &project.dirs {
                let mut files = Vec::new();
                walk_gated(project, dir, 0, &mut files, &mut set.problems);
                files.sort();
                for path in files {
                    let text = read_project(project, dir, &path);
                    set.add(dir, &path, text);
                }
            }
        }
        set.commands.sort_by(|a, b| a.name.cmp(&b.name));
        set
    }

    fn add(&mut self, dir: &Path, path: &Path, text: Result<String, String>) {
        let parsed = text.and_then(|text| {
            let relative = path.strip_prefix(dir).unwrap_or(path);
            let name = command_name(relative)?;
            match is_claude_folder(dir) {
                true => parse_claude_command(&name, &text, path),
                false => parse_command(&name, &text, path),
            }
        });
        match parsed {
            Ok((command, warnings)) => {
                for message in warnings {
                    self.problems.push(CommandProblem {
                        path: path.to_path_buf(),
                        message,
                    });
                }
                // A later folder (the project's) replaces an earlier one's command.
                self.commands.retain(|c| c.name != command.name);
                self.commands.push(command);
            }
            Err(message) => self.problems.push(CommandProblem {
                path: path.to_path_buf(),
                message,
            }),
        }
    }

    /// The commands, sorted by name.
    pub fn commands(&self) -> &[CustomCommand] {
        &self.commands
    }

    /// The command called `name`.
    pub fn get(&self, name: &str) -> Option<&CustomCommand> {
        self.commands.iter().find(|c| c.name == name)
    }

    /// Files left out and keys ignored, for warnings.
    pub fn problems(&self) -> &[CommandProblem] {
        &self.problems
    }
}

/// The `.md` files below `dir` (the user's own folder), links followed.
fn walk_own(
    dir: &Path,
    depth: usize,
    files: &mut Vec<PathBuf>,
    problems: &mut Vec<CommandProblem>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if depth < MAX_DEPTH {
                walk_own(&path, depth + 1, files, problems);
            } else {
                problems.push(CommandProblem {
                    path,
                    message: format!("folders nested deeper than {MAX_DEPTH} are not read"),
                });
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// The user's own command file, at most [`MAX_COMMAND_BYTES`].
fn read_own(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|err| err.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    if meta.len() > MAX_COMMAND_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path).map_err(|err| err.to_string())?;
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_COMMAND_BYTES + 1),
        &mut bytes,
    )
    .map_err(|err| err.to_string())?;
    if bytes.len() as u64 > MAX_COMMAND_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

fn too_large() -> String {
    format!("larger than {} KiB; not read", MAX_COMMAND_BYTES / 1024)
}

/// The `.md` entries below `dir` of a project, listed through the gate (a link to a folder is
/// listed as an entry, never entered).
fn walk_gated(
    project: &ProjectCommands,
    dir: &Path,
    depth: usize,
    files: &mut Vec<PathBuf>,
    problems: &mut Vec<CommandProblem>,
) {
    let entries = match project.gate.list_workspace_dir(dir) {
        Ok(entries) => entries,
        Err(dsh_tools::GateError::Io(_) | dsh_tools::GateError::NotAFile { .. }) => return,
        Err(err) => {
            problems.push(CommandProblem {
                path: dir.to_path_buf(),
                message: format!("the folder is not read: {err}"),
            });
            return;
        }
    };
    for entry in entries {
        let path = dir.join(&entry.name);
        if entry.is_dir {
            if depth < MAX_DEPTH {
                walk_gated(project, &path, depth + 1, files, problems);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// A project's command file through the gate: inside its commands folder (a link leading
/// out of it is refused), at most [`MAX_COMMAND_BYTES`], and the bytes the trust pin saw.
fn read_project(project: &ProjectCommands, dir: &Path, path: &Path) -> Result<String, String> {
    let opened = project
        .gate
        .open_workspace_file(path)
        .map_err(|err| format!("not read: {err}"))?;
    if !opened.real.starts_with(dir) {
        return Err(format!(
            "not read: it leads to {}, outside {} (`symlink-out`)",
            opened.real.display(),
            dir.display()
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(opened.file, MAX_COMMAND_BYTES + 1),
        &mut bytes,
    )
    .map_err(|err| format!("not read: {err}"))?;
    if bytes.len() as u64 > MAX_COMMAND_BYTES {
        return Err(too_large());
    }
    match project.pinned.iter().find(|(pinned, _)| pinned == path) {
        Some((_, pinned)) if *pinned == bytes => {}
        _ => {
            return Err(
                "not used: it changed since the workspace's trust was checked; run `dsh trust` \
                 to review it"
                    .to_string(),
            )
        }
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// The extension offering the commands: listed as user commands, expanded into the turn's
/// user message and settings.
pub struct CustomCommands {
    set: CustomCommandSet,
    /// Whether a model is in the model table (a command's `model` must be).
    known_model: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

impl CustomCommands {
    /// Offers `set`; `known_model` says whether a model is in the model table.
    pub fn new(
        set: CustomCommandSet,
        known_model: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Self {
        CustomCommands {
            set,
            known_model: Box::new(known_model),
        }
    }

    /// The commands offered.
    pub fn set(&self) -> &CustomCommandSet {
        &self.set
    }

    fn expand(&self, command: &CustomCommand, arguments: &str) -> Result<CommandExpansion, String> {
        if let Some(model) = &command.model {
            if !(self.known_model)(model) {
                return Err(format!(
                    "/{} asks for model `{model}`, which is not in the model table; add it \
                     under [models] in config.toml or change the command's `model` ({})",
                    command.name,
                    command.path.display()
                ));
            }
        }
        let text = substitute(&command.body, arguments)
            .map_err(|err| format!("/{}: {err}", command.name))?;
        if text.trim().is_empty() {
            return Err(format!(
                "/{} expands to nothing; write its text in {}",
                command.name,
                command.path.display()
            ));
        }
        Ok(CommandExpansion {
            text,
            turn: TurnSettings {
                tool_filter: command.allowed_tools.clone().map(|allowed| ToolFilter {
                    allowed,
                    disallowed: Vec::new(),
                }),
                model: command.model.clone(),
            },
            origin: Some(command.path.display().to_string()),
            note: None,
        })
    }
}

impl Extension for CustomCommands {
    fn name(&self) -> &str {
        "custom-commands"
    }

    fn user_commands(&self) -> Vec<UserCommand> {
        self.set
            .commands()
            .iter()
            .map(|command| UserCommand {
                name: command.name.clone(),
                description: command.description.clone(),
                hint: command.argument_hint.clone(),
            })
            .collect()
    }

    fn expand_user_command(
        &self,
        name: &str,
        arguments: &str,
    ) -> Option<Result<CommandExpansion, ExtensionError>> {
        let command = self.set.get(name)?;
        Some(
            self.expand(command, arguments)
                .map_err(ExtensionError::CommandRefused),
        )
    }
}

#[cfg(test)]
mod tests;
