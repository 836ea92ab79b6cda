//! The review of a workspace's own settings before the user trusts them (docs/configuration.md,
//! "Workspace trust"; docs/SECURITY.md, "Planted configuration and workspace trust"): the same
//! review for `dsh trust`, the TUI's question and the web UI's trust card, and the recording of
//! trust for the files exactly as reviewed.

use std::path::{Path, PathBuf};

use dsh_config::trust::{self as config_trust, TrustStore};

/// The trust state of a workspace and how to read it (re-exported for front ends).
pub use dsh_config::trust::{inspect, WorkspaceTrust};

use crate::credentials::{parse_env_file, BUILTIN_KEY_VARIABLES};

/// One project file and what trusting it would apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewFile {
    /// The file.
    pub file: PathBuf,
    /// True for the hooks file (every command in it runs, confined as `bash` is, once trusted).
    pub hooks: bool,
    /// True for a slash command file (its text is sent as the user's message when typed).
    pub command: bool,
    /// One line per setting: `key = value` (secrets redacted) for a config file,
    /// ``<event> (matcher m): runs `<command>` `` for a hooks file.
    pub lines: Vec<String>,
}

/// The `./.env` of the working directory: not covered by trust, shown so the user sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewEnv {
    /// The file.
    pub file: PathBuf,
    /// The variable names it sets (sorted; values are never shown).
    pub names: Vec<String>,
}

/// What trusting a workspace would apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The files with settings left out for lack of trust.
    pub files: Vec<ReviewFile>,
    /// The `./.env` file, if there is one.
    pub env: Option<ReviewEnv>,
}

/// The review of `state` (from [`dsh_config::trust::inspect`]) for the working directory `cwd`.
pub fn review(state: &WorkspaceTrust, cwd: &Path) -> Review {
    let scripts = state.scripts.iter().map(|(file, pin)| ReviewFile {
        file: file.clone(),
        hooks: true,
        command: false,
        lines: vec![format!(
            "a script the hooks or MCP servers above run; trusting pins these bytes ({pin}), and \
             a changed script is not run until you trust again"
        )],
    });
    let files = state
        .ignored
        .iter()
        .map(|(file, keys)| {
            if state.mcp_json.as_ref() == Some(file) {
                ReviewFile {
                    file: file.clone(),
                    hooks: false,
                    command: false,
                    lines: config_trust::describe_mcp_json(
                        file,
                        state.mcp_json_text.as_deref().unwrap_or_default(),
                    ),
                }
            } else if state.is_skill(file) {
                ReviewFile {
                    file: file.clone(),
                    hooks: false,
                    command: false,
                    lines: skill_lines(state, file),
                }
            } else if state.is_command(file) {
                ReviewFile {
                    file: file.clone(),
                    hooks: false,
                    command: true,
                    lines: command_lines(state, file),
                }
            } else if keys.is_empty() {
                ReviewFile {
                    file: file.clone(),
                    hooks: true,
                    command: false,
                    lines: hook_lines(file),
                }
            } else {
                ReviewFile {
                    file: file.clone(),
                    hooks: false,
                    command: false,
                    lines: config_trust::describe_keys(file, keys),
                }
            }
        })
        .chain(scripts.filter(|_| state.has_ignored()))
        .map(ReviewFile::shown)
        .collect();
    let env_file = cwd.join(".env");
    // Read as the trust check reads a project file: a `.env` planted as a FIFO or a link to
    // `/dev/zero` must not hang or exhaust the review (adversarial review of issue 43).
    let env = config_trust::read_checked(
        &env_file,
        &[config_trust::project_dir_of(&env_file)],
        config_trust::MAX_PROJECT_FILE,
        false,
    )
    .ok()
    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    .map(|text| {
        let mut names: Vec<String> = parse_env_file(&text)
            .into_keys()
            .map(|name| shown(&name))
            .collect();
        names.sort();
        ReviewEnv {
            file: env_file,
            names,
        }
    });
    Review {
        workspace: state.workspace.clone(),
        files,
        env,
    }
}

/// Text of the repository as a review may show it: terminal controls (`CR`, `ESC[2K`, bidi
/// overrides) written out as visible text, so a planted hook command cannot hide its real
/// part from the person asked to trust it (docs/SECURITY.md, "Planted configuration and
/// workspace trust").
fn shown(text: &str) -> String {
    dsh_tools::printable(text).into_owned()
}

impl ReviewFile {
    /// The same with every line, and the file's name, as a review may show them.
    fn shown(self) -> ReviewFile {
        ReviewFile {
            file: PathBuf::from(shown(&self.file.to_string_lossy())),
            hooks: self.hooks,
            command: self.command,
            lines: self.lines.iter().map(|line| shown(line)).collect(),
        }
    }
}

impl Review {
    /// The review as `dsh trust` prints it.
    pub fn text(&self) -> String {
        let mut out = format!("Workspace {}\n", shown(&self.workspace.to_string_lossy()));
        for file in &self.files {
            if file.hooks {
                out.push_str(&format!(
                    "\n{} (hooks: commands run confined, as bash does):\n",
                    file.file.display()
                ));
            } else if file.command {
                out.push_str(&format!(
                    "\n{} (slash command: typing it sends this text as your message; nothing \
                     in it runs):\n",
                    file.file.display()
                ));
            } else {
                out.push_str(&format!("\n{} would set:\n", file.file.display()));
            }
            for line in &file.lines {
                out.push_str(&format!("  {line}\n"));
            }
        }
        if let Some(env) = &self.env {
            out.push_str(&format!("\n{}\n", env_note(env)));
        }
        out.push('\n');
        out
    }
}

/// The sentence about `./.env` (one line).
pub fn env_note(env: &ReviewEnv) -> String {
    format!(
        "{} sets {} (not covered by trust: dsh takes only provider keys from it: {} and the \
         api_key_env variables of $DSH_HOME/config.toml)",
        env.file.display(),
        if env.names.is_empty() {
            "nothing".to_string()
        } else {
            env.names.join(", ")
        },
        BUILTIN_KEY_VARIABLES.join(", ")
    )
}

/// Most body lines of a command file a review shows.
const COMMAND_REVIEW_LINES: usize = 40;

/// What a command file would offer: its name, front matter and (the start of) its text, as
/// pinned.
fn command_lines(state: &WorkspaceTrust, file: &Path) -> Vec<String> {
    let Some((_, bytes)) = state.commands.iter().find(|(path, _)| path == file) else {
        return Vec::new();
    };
    let dir = state.command_dirs.iter().find(|dir| file.starts_with(dir));
    let relative = dir
        .and_then(|dir| file.strip_prefix(dir).ok())
        .unwrap_or(file);
    let claude = dir.is_some_and(|dir| config_trust::is_claude_folder(dir));
    let text = String::from_utf8_lossy(bytes);
    let parsed = dsh_agent::command_name(relative).and_then(|name| match claude {
        true => dsh_agent::parse_claude_command(&name, &text, file),
        false => dsh_agent::parse_command(&name, &text, file),
    });
    let command = match parsed {
        Ok((command, _)) => command,
        Err(err) => return vec![format!("not usable as a command: {err}")],
    };
    let mut out = vec![format!("/{}: {}", command.name, command.description)];
    if let Some(hint) = &command.argument_hint {
        out.push(format!("argument-hint: {hint}"));
    }
    if let Some(model) = &command.model {
        out.push(format!("model: {model}"));
    }
    if let Some(tools) = &command.allowed_tools {
        out.push(format!("allowed-tools: {}", tools.join(", ")));
    }
    let lines: Vec<&str> = command.body.lines().collect();
    for line in lines.iter().take(COMMAND_REVIEW_LINES) {
        out.push(format!("| {line}"));
    }
    if lines.len() > COMMAND_REVIEW_LINES {
        out.push(format!(
            "| … {} more lines",
            lines.len() - COMMAND_REVIEW_LINES
        ));
    }
    out
}

/// What a Claude Code skill would offer: its name and description, as pinned.
fn skill_lines(state: &WorkspaceTrust, file: &Path) -> Vec<String> {
    let Some((_, bytes)) = state.skills.iter().find(|(path, _)| path == file) else {
        return Vec::new();
    };
    let folder = file.parent().unwrap_or(file);
    match dsh_agent::parse_skill(&String::from_utf8_lossy(bytes), folder) {
        Ok(skill) => vec![format!(
            "skill {}: {} (the model may read its instructions)",
            skill.name, skill.description
        )],
        Err(err) => vec![format!("not usable as a skill: {err}")],
    }
}

fn hook_lines(file: &Path) -> Vec<String> {
    match dsh_agent::HooksConfig::load_file(file) {
        Ok(hooks) if hooks.is_empty() => vec!["(no hooks)".to_string()],
        Ok(hooks) => {
            let mut out = Vec::new();
            for event in dsh_agent::HookEvent::ALL {
                for group in hooks.groups(event) {
                    let matcher = group
                        .matcher
                        .as_deref()
                        .filter(|m| !m.is_empty())
                        .map(|m| format!(" (matcher {m})"))
                        .unwrap_or_default();
                    for command in &group.commands {
                        out.push(format!(
                            "{}{matcher}: runs `{}`",
                            event.as_str(),
                            command.command
                        ));
                    }
                }
            }
            out
        }
        Err(errors) => {
            let mut out = vec!["cannot be read as hooks:".to_string()];
            out.extend(errors.iter().map(ToString::to_string));
            out
        }
    }
}

/// Why [`record_pinned`] recorded nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustError {
    /// The project files no longer hash to the pin that was shown.
    Changed,
    /// A project file or the trust store cannot be read or written (the message says which).
    Invalid(String),
}

/// Records trust in the workspace of `cwd` only if its project files still hash to `pin` (the
/// pin of the review the user saw); returns the workspace. Nothing is recorded otherwise.
pub fn record_pinned(home: &Path, cwd: &Path, pin: &str) -> Result<PathBuf, TrustError> {
    let now = config_trust::inspect(home, cwd).map_err(TrustError::Invalid)?;
    if now.pin.as_deref() != Some(pin) || now.files.is_empty() {
        return Err(TrustError::Changed);
    }
    let mut store = TrustStore::load(home).map_err(TrustError::Invalid)?;
    store.record(&now.workspace, pin, &now.files);
    store.save(home).map_err(TrustError::Invalid)?;
    Ok(now.workspace)
}
