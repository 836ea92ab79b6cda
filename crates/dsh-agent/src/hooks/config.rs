//! The Claude Code hook format: `{"hooks": {<Event>: [{matcher, hooks: [{type, command,
//! timeout}]}]}}`, parsed and checked. Every problem names its origin (a file, or a config key),
//! the key path, what is wrong and how to fix it.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

/// File name of the hooks files in `$DSH_HOME` and in a project's `.dsh` folder.
pub const HOOKS_FILE: &str = "hooks.json";

/// Timeout of a hook command that does not set `timeout` (seconds, as in Claude Code).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

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
}

impl HookEvent {
    /// Every supported event.
    pub const ALL: [HookEvent; 5] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
    ];

    /// The Claude Code spelling (`PreToolUse`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
        }
    }

    fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// True when the event filters on its matcher (tool events, and `SessionStart` on the
    /// start source); `UserPromptSubmit` and `Stop` ignore matchers, as Claude Code does.
    fn uses_matcher(self) -> bool {
        matches!(
            self,
            HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::SessionStart
        )
    }
}

/// Claude Code events that dsh does not run; a file naming them loads with a warning.
const UNSUPPORTED_EVENTS: &[&str] = &[
    "Notification",
    "SubagentStart",
    "SubagentStop",
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

/// One command to run.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// Shell text, run with `bash -c` (or `sh -c` where bash is missing) in the session's cwd.
    pub command: String,
    /// Killed (with its process group) after this long.
    pub timeout: Duration,
}

/// A matcher group: commands that run when the matcher accepts the subject.
#[derive(Debug, Clone)]
pub struct HookGroup {
    /// The matcher as written (`None`, `""` and `"*"` match everything).
    pub matcher: Option<String>,
    regex: Option<Regex>,
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
        CLAUDE_CODE_TOOL_NAMES
            .iter()
            .any(|(ours, theirs)| *ours == subject && regex.is_match(theirs))
    }
}

/// One problem in a hook configuration. `Display` gives `<origin>: `<key>`: <problem>` and,
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

/// Every configured hook, by event, in the order the sources and files list them.
#[derive(Debug, Clone, Default)]
pub struct HooksConfig {
    groups: Vec<(HookEvent, HookGroup)>,
    /// Non-fatal remarks (events dsh does not run), for the front end to show.
    pub warnings: Vec<String>,
}

impl HooksConfig {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
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
        tables: &[(String, Value)],
        home: &Path,
        project_file: Option<(&Path, &str)>,
    ) -> Result<HooksConfig, Vec<HookConfigError>> {
        let mut config = HooksConfig::new();
        let mut errors = Vec::new();
        let mut add = |result: Result<HooksConfig, Vec<HookConfigError>>| match result {
            Ok(more) => config.extend(more),
            Err(more) => errors.extend(more),
        };
        for (origin, map) in tables {
            add(HooksConfig::parse(origin, "hooks", map));
        }
        add(HooksConfig::load_file(&home.join(HOOKS_FILE)));
        if let Some((project, text)) = project_file {
            if project != home.join(HOOKS_FILE) {
                add(HooksConfig::parse_file_text(
                    &project.display().to_string(),
                    text,
                ));
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
            let Some(event) = HookEvent::parse(name) else {
                if UNSUPPORTED_EVENTS.contains(&name.as_str()) {
                    config.warnings.push(format!(
                        "{origin}: `{event_key}`: dsh does not run {name} hooks; they are ignored"
                    ));
                } else {
                    errors.push(error(
                        origin,
                        &event_key,
                        format!("unknown hook event `{name}`"),
                        format!("use one of: {}", supported_list()),
                    ));
                }
                continue;
            };
            let Some(groups) = groups.as_array() else {
                errors.push(error(
                    origin,
                    &event_key,
                    "must be an array of matcher groups",
                    "write [{\"matcher\": \"...\", \"hooks\": [{\"type\": \"command\", \"command\": \"...\"}]}]",
                ));
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

fn supported_list() -> String {
    HookEvent::ALL
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
    })
}
