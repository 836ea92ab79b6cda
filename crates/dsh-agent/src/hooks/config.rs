//! The hook formats: Claude Code's (`{"hooks": {<Event>: [{matcher, hooks: [{type, command,
//! timeout}]}]}}`) and Codex's (the same shape, bare or wrapped, five events, unanchored regex
//! matchers, `timeoutSec`), parsed and checked. Every problem names its origin (a file, or a
//! config key), the key path, what is wrong and how to fix it (docs/hooks.md).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

/// File name of the hooks files in `$DSH_HOME` and in a project's `.dsh` folder.
pub const HOOKS_FILE: &str = "hooks.json";

/// File name of the Codex-dialect hooks file in `$DSH_HOME` (dsh's `codex-hooks.json`).
pub const CODEX_HOOKS_FILE: &str = "codex-hooks.json";

/// Timeout of a hook command that does not set `timeout` (seconds, as in Claude Code).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Timeout of a Codex-dialect hook command that sets neither `timeout` nor `timeoutSec`.
pub const DEFAULT_CODEX_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// Which hook format a configuration was written in; it decides the events, matchers,
/// payloads and answers (docs/hooks.md, "The Codex dialect").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookDialect {
    /// Claude Code's hooks (`hooks.json`, `[hooks]`).
    #[default]
    ClaudeCode,
    /// Codex's hooks (`codex-hooks.json`).
    Codex,
}

impl HookDialect {
    /// The name logged in `hook/invoked` and `hook/result` (`claude-code`, `codex`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookDialect::ClaudeCode => "claude-code",
            HookDialect::Codex => "codex",
        }
    }

    /// The plugin named on messages its hooks add to the conversation.
    pub fn plugin(self) -> &'static str {
        match self {
            HookDialect::ClaudeCode => "hooks-claude-code",
            HookDialect::Codex => "hooks-codex",
        }
    }

    /// The events this dialect runs.
    pub fn events(self) -> &'static [HookEvent] {
        match self {
            HookDialect::ClaudeCode => &HookEvent::ALL,
            HookDialect::Codex => &HookEvent::ALL[..5],
        }
    }
}

/// The points a hook can run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    /// Once, before the first step of a session (new or resumed).
    SessionStart,
    /// Before a step that carries new user-typed input.
    UserPromptSubmit,
    /// Before a tool body runs.
    PreToolUse,
    /// After a tool body finished successfully.
    PostToolUse,
    /// When a turn is about to end.
    Stop,
    /// Once, before the first step of a subagent (Claude Code dialect; in place of
    /// `SessionStart` in a child session).
    SubagentStart,
    /// When a subagent's turn is about to end (Claude Code dialect; in place of `Stop` in a
    /// child session).
    SubagentStop,
}

impl HookEvent {
    /// Every supported event (the first five are the Codex dialect's).
    pub const ALL: [HookEvent; 7] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
        HookEvent::SubagentStart,
        HookEvent::SubagentStop,
    ];

    /// The Claude Code spelling (`PreToolUse`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStart => "SubagentStart",
            HookEvent::SubagentStop => "SubagentStop",
        }
    }

    fn parse(name: &str, dialect: HookDialect) -> Option<HookEvent> {
        dialect
            .events()
            .iter()
            .copied()
            .find(|e| e.as_str() == name)
    }

    /// True when the event filters on its matcher (tool events, `SessionStart` on the start
    /// source, the subagent events on the agent type); `UserPromptSubmit` and `Stop` ignore
    /// matchers, as Claude Code and Codex do.
    fn uses_matcher(self) -> bool {
        !matches!(self, HookEvent::UserPromptSubmit | HookEvent::Stop)
    }
}

/// Claude Code events that dsh does not run; a file naming them loads with a warning.
const UNSUPPORTED_EVENTS: &[&str] = &[
    "Notification",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
    "PermissionRequest",
    "PostToolUseFailure",
];

/// Claude Code's names for dsh's built-in tools: a matcher matches a tool when it matches
/// either name, so `"Bash"` and `"Edit|Write"` work unchanged.
const CLAUDE_CODE_TOOL_NAMES: &[(&str, &str)] = &[
    ("bash", "Bash"),
    ("read", "Read"),
    ("write", "Write"),
    ("edit", "Edit"),
    ("glob", "Glob"),
    ("grep", "Grep"),
    ("todo_write", "TodoWrite"),
    ("web_fetch", "WebFetch"),
    ("subagent", "Task"),
];

/// Codex's name for dsh's shell tool: a Codex matcher `"Bash"` matches `bash` too.
const CODEX_TOOL_NAMES: &[(&str, &str)] = &[("bash", "Bash")];

/// One command to run.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// Shell text, run with `bash -c` (or `sh -c` where bash is missing) in the session's cwd.
    pub command: String,
    /// Killed (with its process group) after this long.
    pub timeout: Duration,
    /// Set for a command the project configured (its `.dsh/hooks.json` or `[hooks]` in its
    /// `.dsh/config.toml`): it runs in the session's confinement, like `bash`, and is refused
    /// when there is none (docs/hooks.md, "Project hooks run confined").
    pub confined: bool,
}

/// A matcher group: commands that run when the matcher accepts the subject.
#[derive(Debug, Clone)]
pub struct HookGroup {
    /// The matcher as written (`None`, `""` and `"*"` match everything).
    pub matcher: Option<String>,
    regex: Option<Regex>,
    /// Other names of dsh's tools the matcher may name (per dialect).
    aliases: &'static [(&'static str, &'static str)],
    /// Commands, run in order.
    pub commands: Vec<HookCommand>,
}

impl HookGroup {
    /// True when the group applies to `subject` (a tool name, or a session start source).
    pub fn matches(&self, subject: &str) -> bool {
        let Some(regex) = &self.regex else {
            return true;
        };
        if regex.is_match(subject) {
            return true;
        }
        self.aliases
            .iter()
            .any(|(ours, theirs)| *ours == subject && regex.is_match(theirs))
    }
}

/// One problem in a hook configuration. `Display` gives ``<origin>: `<key>`: <problem>`` and,
/// on the next line, `  fix: <fix>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfigError {
    /// The file (or config key) the hooks came from.
    pub origin: String,
    /// Dotted key path inside it (`hooks.PreToolUse[0].matcher`).
    pub key: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for HookConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: `{}`: {}\n  fix: {}",
            self.origin, self.key, self.problem, self.fix
        )
    }
}

impl std::error::Error for HookConfigError {}

/// The check a hook command passes before it runs: `Err` says why it must not (its script lies
/// where the model can write and is not pinned, or changed since it was pinned; dsh-config's
/// `ScriptGate`, docs/hooks.md "Scripts in the workspace are pinned").
pub type ScriptCheck = std::sync::Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

#[derive(Clone, Default)]
struct Gate(
    Option<ScriptCheck>,
    Option<std::ffi::OsString>,
    Option<dsh_tools::CommandConfiner>,
);

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("script_check", &self.0.is_some())
            .field("path", &self.1)
            .field("confiner", &self.2.is_some())
            .finish()
    }
}

/// The `[hooks]` event map of one configuration file, for [`HooksConfig::load_session`].
#[derive(Debug, Clone)]
pub struct HookTable {
    /// The file it came from, for messages.
    pub origin: String,
    /// The event map (`{<Event>: [group, ...]}`).
    pub hooks: Value,
    /// Whether the project set it (any of its keys): its commands then run confined.
    pub from_project: bool,
}

/// Every configured hook, by event, in the order the sources and files list them.
#[derive(Debug, Clone, Default)]
pub struct HooksConfig {
    dialect: HookDialect,
    groups: Vec<(HookEvent, HookGroup)>,
    /// Non-fatal remarks (events dsh does not run), for the front end to show.
    pub warnings: Vec<String>,
    gate: Gate,
}

impl HooksConfig {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks every command with `check` right before it runs; a refused command does not run
    /// (a `PreToolUse` hook's refusal denies the tool call, elsewhere it is a hook error).
    /// Commands get `path` as their `PATH` when it is given (dsh-config's
    /// `ScriptGate::command_path`: the user's without entries the model can write).
    pub fn with_script_check(
        mut self,
        check: ScriptCheck,
        path: Option<std::ffi::OsString>,
    ) -> Self {
        self.gate.0 = Some(check);
        self.gate.1 = path;
        self
    }

    /// Runs the project's commands (those marked [`HookCommand::confined`]) through
    /// `confiner`, the session's confinement; without one they are refused.
    pub fn with_confiner(mut self, confiner: dsh_tools::CommandConfiner) -> Self {
        self.gate.2 = Some(confiner);
        self
    }

    /// The confinement for the project's commands, when [`Self::with_confiner`] set one.
    pub fn confiner(&self) -> Option<&dsh_tools::CommandConfiner> {
        self.gate.2.as_ref()
    }

    /// Marks every command as the project's: each runs confined (see
    /// [`HookCommand::confined`]).
    pub fn from_project(mut self) -> Self {
        for (_, group) in &mut self.groups {
            for command in &mut group.commands {
                command.confined = true;
            }
        }
        self
    }

    /// The refusal of every configured command its script check refuses now, for a warning
    /// when the session opens (each is checked again before every run).
    pub fn refusals(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, group) in &self.groups {
            for command in &group.commands {
                if let Some(reason) = self.refusal(&command.command) {
                    if !out.contains(&reason) {
                        out.push(reason);
                    }
                }
            }
        }
        out
    }

    /// The `PATH` commands run with, when [`Self::with_script_check`] set one.
    pub fn command_path(&self) -> Option<&std::ffi::OsStr> {
        self.gate.1.as_deref()
    }

    /// Why `command` must not run now, if it must not (see [`Self::with_script_check`]).
    pub fn refusal(&self, command: &str) -> Option<String> {
        self.gate.0.as_ref().and_then(|check| check(command).err())
    }

    /// The dialect the hooks were written in.
    pub fn dialect(&self) -> HookDialect {
        self.dialect
    }

    /// True when no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The groups configured for `event`.
    pub fn groups(&self, event: HookEvent) -> impl Iterator<Item = &HookGroup> {
        self.groups
            .iter()
            .filter(move |(e, _)| *e == event)
            .map(|(_, g)| g)
    }

    /// Adds `other`'s hooks after these (hooks from every source run; none replaces another).
    /// Both must be of one dialect; the Codex file is a configuration of its own.
    pub fn extend(&mut self, other: HooksConfig) {
        self.groups.extend(other.groups);
        self.warnings.extend(other.warnings);
    }

    /// The hooks of a session, all of them (none replaces another): the `[hooks]` event maps
    /// of the configuration (`tables`: `(origin, event map)` per file that set one), then
    /// `$DSH_HOME/hooks.json`, then `project_file`: the project's `.dsh/hooks.json` with its
    /// text as pinned, which the caller passes only when the workspace is trusted (dsh-config's
    /// `WorkspaceTrust::project_hooks`; docs/configuration.md, "Workspace trust"): a planted
    /// hooks file must never run, and the file is not read again here. Every problem of every
    /// source is reported.
    pub fn load_session(
        tables: &[HookTable],
        home: &Path,
        project_file: Option<(&Path, &str)>,
    ) -> Result<HooksConfig, Vec<HookConfigError>> {
        let mut config = HooksConfig::new();
        let mut errors = Vec::new();
        let mut add = |result: Result<HooksConfig, Vec<HookConfigError>>| match result {
            Ok(more) => config.extend(more),
            Err(more) => errors.extend(more),
        };
        for table in tables {
            let parsed = HooksConfig::parse(&table.origin, "hooks", &table.hooks);
            add(match table.from_project {
                true => parsed.map(HooksConfig::from_project),
                false => parsed,
            });
        }
        add(HooksConfig::load_file(&home.join(HOOKS_FILE)));
        if let Some((project, text)) = project_file {
            if project != home.join(HOOKS_FILE) {
                add(
                    HooksConfig::parse_file_text(&project.display().to_string(), text)
                        .map(HooksConfig::from_project),
                );
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// Reads a Claude Code settings or `hooks.json` file: a JSON object whose `hooks` member
    /// holds the hooks (other members are ignored). A missing file is no hooks.
    pub fn load_file(path: &Path) -> Result<HooksConfig, Vec<HookConfigError>> {
        let origin = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(HooksConfig::new()),
            Err(err) => {
                return Err(vec![error(
                    &origin,
                    "",
                    format!("cannot be read: {err}"),
                    "check the file's permissions, or remove it",
                )])
            }
        };
        HooksConfig::parse_file_text(&origin, &text)
    }

    /// Parses the text of a hooks file (as [`HooksConfig::load_file`] does after reading it);
    /// `origin` names it in messages.
    pub fn parse_file_text(origin: &str, text: &str) -> Result<HooksConfig, Vec<HookConfigError>> {
        let origin = origin.to_string();
        let value: Value = serde_json::from_str(text).map_err(|err| {
            vec![error(
                &origin,
                "",
                format!("is not valid JSON: {err}"),
                "fix the syntax (hooks files are JSON objects: {\"hooks\": {...}})",
            )]
        })?;
        match value.get("hooks") {
            Some(hooks) => HooksConfig::parse(&origin, "hooks", hooks),
            None if value.is_object() => Ok(HooksConfig::new()),
            None => Err(vec![error(
                &origin,
                "",
                "is not a JSON object",
                "write {\"hooks\": {\"PreToolUse\": [...]}}",
            )]),
        }
    }

    /// Parses the event map `hooks` (`{<Event>: [group, ...]}`); `key` is its path inside
    /// `origin`, used in messages. Every problem is reported.
    pub fn parse(
        origin: &str,
        key: &str,
        hooks: &Value,
    ) -> Result<HooksConfig, Vec<HookConfigError>> {
        let mut config = HooksConfig::new();
        let mut errors = Vec::new();
        let Some(events) = hooks.as_object() else {
            return Err(vec![error(
                origin,
                key,
                "must be an object of events",
                "write {\"PreToolUse\": [{\"matcher\": \"bash\", \"hooks\": [...]}]}",
            )]);
        };
        for (name, groups) in events {
            let event_key = format!("{key}.{name}");
            let Some(event) = HookEvent::parse(name, HookDialect::ClaudeCode) else {
                if UNSUPPORTED_EVENTS.contains(&name.as_str()) {
                    config.warnings.push(format!(
                        "{origin}: `{event_key}`: dsh does not run {name} hooks; they are ignored"
                    ));
                } else {
                    errors.push(error(
                        origin,
                        &event_key,
                        format!("unknown hook event `{name}`"),
                        format!("use one of: {}", event_list(&HookEvent::ALL)),
                    ));
                }
                continue;
            };
            let Some(groups) = matcher_groups(origin, &event_key, groups, &mut errors) else {
                continue;
            };
            for (i, group) in groups.iter().enumerate() {
                let group_key = format!("{event_key}[{i}]");
                if let Some(group) = parse_group(origin, &group_key, event, group, &mut errors) {
                    config.groups.push((event, group));
                }
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }
}

/// The matcher groups of one event (both dialects write them as an array), or an error naming
/// the event's key.
fn matcher_groups<'a>(
    origin: &str,
    event_key: &str,
    groups: &'a Value,
    errors: &mut Vec<HookConfigError>,
) -> Option<&'a Vec<Value>> {
    let groups = groups.as_array();
    if groups.is_none() {
        errors.push(error(
            origin,
            event_key,
            "must be an array of matcher groups",
            "write [{\"matcher\": \"...\", \"hooks\": [{\"type\": \"command\", \"command\": \"...\"}]}]",
        ));
    }
    groups
}

/// `events`' names, comma-separated, for "use one of: ..." errors.
fn event_list(events: &[HookEvent]) -> String {
    events
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn error(
    origin: &str,
    key: &str,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> HookConfigError {
    HookConfigError {
        origin: origin.to_string(),
        key: key.to_string(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

fn parse_group(
    origin: &str,
    key: &str,
    event: HookEvent,
    group: &Value,
    errors: &mut Vec<HookConfigError>,
) -> Option<HookGroup> {
    let Some(object) = group.as_object() else {
        errors.push(error(
            origin,
            key,
            "must be an object",
            "write {\"matcher\": \"...\", \"hooks\": [...]}",
        ));
        return None;
    };
    let before = errors.len();
    for member in object.keys() {
        if !matches!(member.as_str(), "matcher" | "hooks" | "description") {
            errors.push(error(
                origin,
                &format!("{key}.{member}"),
                format!("unknown key `{member}`"),
                "a matcher group has `matcher` and `hooks`",
            ));
        }
    }
    let matcher = match object.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => {
            errors.push(error(
                origin,
                &format!("{key}.matcher"),
                "must be a string",
                "write a tool name or a regular expression, e.g. \"Edit|Write\"",
            ));
            None
        }
    };
    let regex = match &matcher {
        Some(m) if event.uses_matcher() && !m.is_empty() && m != "*" => {
            match Regex::new(&format!("^(?:{m})$")) {
                Ok(regex) => Some(regex),
                Err(err) => {
                    let detail = err.to_string();
                    let last = detail.lines().last().unwrap_or_default().trim().to_string();
                    errors.push(error(
                        origin,
                        &format!("{key}.matcher"),
                        format!("`{m}` is not a valid regular expression ({last})"),
                        "write a tool name (\"bash\"), alternatives (\"edit|write\"), \"*\" for \
                         every tool, or escape special characters (\"\\\\[\")",
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let mut commands = Vec::new();
    match object.get("hooks") {
        Some(Value::Array(items)) => {
            for (j, item) in items.iter().enumerate() {
                if let Some(command) =
                    parse_command(origin, &format!("{key}.hooks[{j}]"), item, errors)
                {
                    commands.push(command);
                }
            }
        }
        _ => errors.push(error(
            origin,
            &format!("{key}.hooks"),
            "is missing or not an array",
            "write \"hooks\": [{\"type\": \"command\", \"command\": \"...\"}]",
        )),
    }
    (errors.len() == before).then_some(HookGroup {
        matcher,
        regex,
        aliases: CLAUDE_CODE_TOOL_NAMES,
        commands,
    })
}

fn parse_command(
    origin: &str,
    key: &str,
    item: &Value,
    errors: &mut Vec<HookConfigError>,
) -> Option<HookCommand> {
    let Some(object) = item.as_object() else {
        errors.push(error(
            origin,
            key,
            "must be an object",
            "write {\"type\": \"command\", \"command\": \"...\"}",
        ));
        return None;
    };
    match object.get("type").and_then(Value::as_str) {
        Some("command") => {}
        Some(other) => {
            errors.push(error(
                origin,
                &format!("{key}.type"),
                format!("hook type `{other}` is not supported"),
                "dsh runs `command` hooks only",
            ));
            return None;
        }
        None => {
            errors.push(error(
                origin,
                &format!("{key}.type"),
                "is missing",
                "add \"type\": \"command\"",
            ));
            return None;
        }
    }
    let Some(command) = object
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
    else {
        errors.push(error(
            origin,
            &format!("{key}.command"),
            "is missing or empty",
            "add the shell command to run, e.g. \"command\": \"./check.sh\"",
        ));
        return None;
    };
    let timeout = match object.get("timeout") {
        None | Some(Value::Null) => DEFAULT_HOOK_TIMEOUT,
        Some(value) => match value.as_f64() {
            Some(secs) if secs > 0.0 && secs <= 86_400.0 => Duration::from_secs_f64(secs),
            _ => {
                errors.push(error(
                    origin,
                    &format!("{key}.timeout"),
                    "must be a positive number of seconds (at most 86400)",
                    "write e.g. \"timeout\": 30, or leave it out for 60 s",
                ));
                return None;
            }
        },
    };
    Some(HookCommand {
        command: command.to_string(),
        timeout,
        confined: false,
    })
}

impl HooksConfig {
    /// Reads a Codex-dialect hooks file (`$DSH_HOME/codex-hooks.json`); a missing file is no
    /// hooks (docs/hooks.md, "The Codex dialect").
    pub fn load_codex_file(path: &Path) -> Result<HooksConfig, Vec<HookConfigError>> {
        let origin = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => HooksConfig::parse_codex_text(&origin, &text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(HooksConfig {
                dialect: HookDialect::Codex,
                ..HooksConfig::default()
            }),
            Err(err) => Err(vec![error(
                &origin,
                "",
                format!("cannot be read: {err}"),
                "check the file's permissions, or remove it",
            )]),
        }
    }

    /// Parses the text of a Codex hooks file; `origin` names it in messages.
    pub fn parse_codex_text(origin: &str, text: &str) -> Result<HooksConfig, Vec<HookConfigError>> {
        let value: Value = serde_json::from_str(text).map_err(|err| {
            vec![error(
                origin,
                "",
                format!("is not valid JSON: {err}"),
                "fix the syntax (a Codex hooks file is {\"hooks\": {...}} or the event map itself)",
            )]
        })?;
        HooksConfig::parse_codex(origin, &value)
    }

    /// Parses a Codex hooks document: `{"hooks": {<Event>: [...]}}` or the bare event map.
    /// Only `PreToolUse`, `PostToolUse`, `SessionStart`, `UserPromptSubmit` and `Stop` run;
    /// other events, hooks of another `type` and `async: true` hooks are skipped with a warning,
    /// as dsh's Codex bridge does. Every problem is reported.
    pub fn parse_codex(origin: &str, value: &Value) -> Result<HooksConfig, Vec<HookConfigError>> {
        let mut config = HooksConfig {
            dialect: HookDialect::Codex,
            ..HooksConfig::default()
        };
        let Some(root) = value.as_object() else {
            return Err(vec![error(
                origin,
                "",
                "is not a JSON object",
                "write {\"hooks\": {\"PreToolUse\": [...]}}",
            )]);
        };
        let (key, events) = match root.get("hooks").and_then(Value::as_object) {
            Some(map) => ("hooks", map),
            None => ("", root),
        };
        let mut errors = Vec::new();
        for (name, groups) in events {
            let event_key = if key.is_empty() {
                name.clone()
            } else {
                format!("{key}.{name}")
            };
            let Some(event) = HookEvent::parse(name, HookDialect::Codex) else {
                if groups.is_array() {
                    config.warnings.push(format!(
                        "{origin}: `{event_key}`: the Codex dialect runs {} hooks only; {name} is ignored",
                        event_list(HookDialect::Codex.events())
                    ));
                }
                continue;
            };
            let Some(groups) = matcher_groups(origin, &event_key, groups, &mut errors) else {
                continue;
            };
            for (i, group) in groups.iter().enumerate() {
                let group_key = format!("{event_key}[{i}]");
                let parsed = parse_codex_group(origin, &group_key, event, group, &mut config);
                match parsed {
                    Ok(Some(group)) => config.groups.push((event, group)),
                    Ok(None) => {}
                    Err(problem) => errors.push(problem),
                }
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }
}

/// One Codex matcher group: `None` when none of its hooks can run (all skipped).
fn parse_codex_group(
    origin: &str,
    key: &str,
    event: HookEvent,
    group: &Value,
    config: &mut HooksConfig,
) -> Result<Option<HookGroup>, HookConfigError> {
    let Some(items) = group.get("hooks").and_then(Value::as_array) else {
        return Err(error(
            origin,
            &format!("{key}.hooks"),
            "is missing or not an array (or the group is not an object)",
            "write {\"matcher\": \"...\", \"hooks\": [{\"type\": \"command\", \"command\": \"...\"}]}",
        ));
    };
    let mut commands = Vec::new();
    for (j, item) in items.iter().enumerate() {
        let item_key = format!("{key}.hooks[{j}]");
        let Some(hook) = item.as_object() else {
            return Err(error(
                origin,
                &item_key,
                "must be an object",
                "write {\"type\": \"command\", \"command\": \"...\"}",
            ));
        };
        let kind = hook
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("command");
        if kind != "command" {
            config.warnings.push(format!(
                "{origin}: `{item_key}`: skipping the unsupported \"{kind}\" hook (only command hooks run)"
            ));
            continue;
        }
        if hook.get("async") == Some(&Value::Bool(true)) {
            config.warnings.push(format!(
                "{origin}: `{item_key}`: skipping the async hook (only synchronous command hooks run)"
            ));
            continue;
        }
        let Some(command) = hook
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty())
        else {
            return Err(error(
                origin,
                &format!("{item_key}.command"),
                "is missing or empty",
                "add the shell command to run, e.g. \"command\": \"./check.sh\"",
            ));
        };
        // Codex accepts `timeout` or its alias `timeoutSec`, in seconds.
        let (timeout_key, timeout) = match (hook.get("timeout"), hook.get("timeoutSec")) {
            (Some(value), _) if !value.is_null() => ("timeout", Some(value)),
            (_, Some(value)) if !value.is_null() => ("timeoutSec", Some(value)),
            _ => ("timeout", None),
        };
        let timeout = match timeout.map(Value::as_f64) {
            None => DEFAULT_CODEX_HOOK_TIMEOUT,
            Some(Some(secs)) if secs > 0.0 && secs <= 86_400.0 => Duration::from_secs_f64(secs),
            Some(_) => {
                return Err(error(
                    origin,
                    &format!("{item_key}.{timeout_key}"),
                    "must be a positive number of seconds (at most 86400)",
                    "write e.g. \"timeout\": 30, or leave it out for 600 s",
                ))
            }
        };
        commands.push(HookCommand {
            command: command.to_string(),
            timeout,
            confined: false,
        });
    }
    if commands.is_empty() {
        return Ok(None);
    }
    let (matcher, regex) = codex_matcher(origin, key, event, group)?;
    Ok(Some(HookGroup {
        matcher,
        regex,
        aliases: CODEX_TOOL_NAMES,
        commands,
    }))
}

/// The matcher of a Codex group as written and compiled: `None` for match-all, and for
/// `UserPromptSubmit` and `Stop`, which have no matcher subject and discard it unread.
fn codex_matcher(
    origin: &str,
    key: &str,
    event: HookEvent,
    group: &Value,
) -> Result<(Option<String>, Option<Regex>), HookConfigError> {
    let matcher = if event.uses_matcher() {
        match group.get("matcher") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(_) => {
                return Err(error(
                    origin,
                    &format!("{key}.matcher"),
                    "must be a string",
                    "write a regular expression, e.g. \"bash|Bash\"",
                ))
            }
        }
    } else {
        None
    };
    let regex = match &matcher {
        // Codex matchers are unanchored regular expressions: "as" matches "bash".
        Some(m) if !m.is_empty() && m != "*" => Some(Regex::new(m).map_err(|err| {
            let detail = err.to_string();
            let last = detail.lines().last().unwrap_or_default().trim().to_string();
            error(
                origin,
                &format!("{key}.matcher"),
                format!("`{m}` is not a valid regular expression ({last})"),
                "write a tool name (\"bash\"), alternatives (\"bash|write\"), \"*\" for every \
                 tool, or escape special characters (\"\\\\[\")",
            )
        })?),
        _ => None,
    };
    Ok((matcher, regex))
}
