//! Remembered approvals (docs/SECURITY.md, "Approval rules").
//!
//! When a tool call needs the user's approval, the user may answer "allow for this session" or
//! "always allow" instead of "allow once". Either answer records an [`ApprovalRule`] built from
//! the call by [`proposed_rule`]; a later call that the rule covers runs without asking.
//! Session rules live in the agent's [`ApprovalRules`] for the session's life; "always" rules
//! are also written to `$DSH_HOME/approvals.json` and loaded by every later session
//! (`dsh approvals list` / `remove` show and delete them).
//!
//! A rule never covers more than its kind allows:
//!
//! * `bash`: a command prefix of whole words (program, and a subcommand word when there is one,
//!   e.g. `cargo test`). It covers a command only when the command has no shell metacharacter at
//!   all (`;`, `&`, `|`, `<`, `>`, `$`, backquote, parentheses, braces, quotes, backslash, `*`,
//!   `?`, `[`, `]`, `~`, `!`, `#`, newlines) and its words start with the prefix's words. So a rule
//!   for `git status` does not cover `git status; rm -rf ~` or `git status $(rm -rf ~)`, and no
//!   rule is offered for a command that has metacharacters: such calls can only be allowed once.
//! * MCP tools (`mcp__<server>__<tool>`): the tool name.
//! * `write` / `edit`: the file's real path (symlinks of its existing part resolved), so a rule
//!   for `.env` does not cover a write after `.env` became a symlink to `.git/hooks/pre-commit`;
//!   no rule is offered or matched for a dangling symlink.
//! * Every rule keeps the wider preset the call asked for (`escalation`); it covers calls that
//!   ask for the same or a narrower one only.
//! * A `bash` rule keeps whether the approved call asked for the network (`network: true`); a
//!   rule approved without it never covers a call that asks for it, so the network is granted
//!   only where the user saw it asked (under `ask` every command is asked, often without it).
//!
//! Other tools get no rule (allow once or reject only).

use dsh_llm::LockExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use dsh_tools::PermissionPreset;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// File name of the persisted rules under `$DSH_HOME`.
pub const APPROVALS_FILE: &str = "approvals.json";

/// Characters that make a `bash` command ineligible for prefix rules.
const SHELL_METACHARACTERS: &[char] = &[
    ';', '&', '|', '<', '>', '$', '`', '(', ')', '{', '}', '"', '\'', '\\', '*', '?', '[', ']',
    '~', '!', '#', '\n', '\r',
];

/// What the user may answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalChoice {
    /// Run this call only.
    AllowOnce,
    /// Run it, and every call the proposed rule covers, for the rest of this session.
    AllowSession,
    /// Run it, and remember the proposed rule in `$DSH_HOME/approvals.json`.
    AllowAlways,
    /// Refuse the call.
    Reject,
}

impl ApprovalChoice {
    /// The stable name used by front ends (`allow_once`, `allow_session`, `allow_always`,
    /// `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalChoice::AllowOnce => "allow_once",
            ApprovalChoice::AllowSession => "allow_session",
            ApprovalChoice::AllowAlways => "allow_always",
            ApprovalChoice::Reject => "reject",
        }
    }

    /// The choice named `name` (see [`ApprovalChoice::as_str`]).
    pub fn parse(name: &str) -> Option<ApprovalChoice> {
        [
            ApprovalChoice::AllowOnce,
            ApprovalChoice::AllowSession,
            ApprovalChoice::AllowAlways,
            ApprovalChoice::Reject,
        ]
        .into_iter()
        .find(|c| c.as_str() == name)
    }
}

/// One remembered approval (see the module docs for what each kind covers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    /// The tool's name as the model calls it.
    pub tool: String,
    /// `bash` only: the words a command must start with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_prefix: Option<String>,
    /// `write`/`edit` only: the absolute file path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The wider preset the approved call asked for (`None`: the session's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<String>,
    /// `bash` only: the approved call asked for the network (`network: true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

impl ApprovalRule {
    /// One line for the user, e.g. ``bash commands starting with `cargo test` ``.
    pub fn describe(&self) -> String {
        let mut text = if let Some(prefix) = &self.command_prefix {
            format!("`{}` commands starting with `{prefix}`", self.tool)
        } else if let Some(path) = &self.path {
            format!("`{}` of {}", self.tool, path.display())
        } else {
            format!("every call of `{}`", self.tool)
        };
        if let Some(preset) = &self.escalation {
            text.push_str(&format!(" (under {preset})"));
        }
        if self.network {
            text.push_str(" (with network)");
        }
        text
    }

    /// True when this rule covers a call of `tool` with `arguments` (raw JSON), run from `cwd`,
    /// asking for `escalation`.
    pub fn covers(
        &self,
        tool: &str,
        arguments: &str,
        cwd: &Path,
        escalation: Option<PermissionPreset>,
    ) -> bool {
        if self.tool != tool || !self.covers_escalation(escalation) {
            return false;
        }
        let Some(kind) = RuleKind::of(tool) else {
            return false;
        };
        let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        match kind {
            RuleKind::Command => {
                let (Some(prefix), Some(command)) = (
                    &self.command_prefix,
                    args.get("command").and_then(Value::as_str),
                ) else {
                    return false;
                };
                let Some(words) = plain_words(command) else {
                    return false;
                };
                if asks_network(&args) && !self.network {
                    return false;
                }
                let wanted: Vec<&str> = prefix.split_whitespace().collect();
                !wanted.is_empty() && words.len() >= wanted.len() && words[..wanted.len()] == wanted
            }
            RuleKind::Tool => self.command_prefix.is_none() && self.path.is_none(),
            RuleKind::Path => match (&self.path, file_path(&args, cwd)) {
                (Some(mine), Some(theirs)) => *mine == theirs,
                _ => false,
            },
        }
    }

    fn covers_escalation(&self, wanted: Option<PermissionPreset>) -> bool {
        let rank = |preset: Option<PermissionPreset>| match preset {
            None => 0,
            Some(PermissionPreset::ReadOnly) => 1,
            Some(PermissionPreset::WorkspaceWrite | PermissionPreset::Ask) => 2,
            Some(PermissionPreset::DangerFullAccess) => 3,
        };
        // An unreadable escalation covers nothing wider than the session's preset.
        let mine = self
            .escalation
            .as_deref()
            .and_then(|text| text.parse::<PermissionPreset>().ok());
        rank(wanted) <= rank(mine)
    }
}

/// How calls of a tool are matched by rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleKind {
    Command,
    Tool,
    Path,
}

impl RuleKind {
    fn of(tool: &str) -> Option<RuleKind> {
        match tool {
            "bash" => Some(RuleKind::Command),
            "write" | "edit" => Some(RuleKind::Path),
            t if t.starts_with("mcp__") => Some(RuleKind::Tool),
            _ => None,
        }
    }
}

/// The words of `command`, or `None` when it contains a shell metacharacter (then no prefix
/// rule may cover it).
fn plain_words(command: &str) -> Option<Vec<&str>> {
    if command.contains(SHELL_METACHARACTERS) {
        return None;
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    (!words.is_empty()).then_some(words)
}

/// A word that names a program or subcommand (no options, paths, assignments).
fn is_command_word(word: &str) -> bool {
    !word.starts_with('-')
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'))
}

/// The real target of a `write`/`edit` call: symlinks of the existing part resolved, the
/// missing rest appended; `None` for a dangling symlink (where it leads is not a path yet).
fn file_path(args: &Value, cwd: &Path) -> Option<PathBuf> {
    let raw = args
        .get("file_path")
        .or_else(|| args.get("path"))
        .and_then(Value::as_str)?;
    real_target(&normalize(&cwd.join(raw)))
}

/// See [`file_path`]. Matching the real path means a rule for `.env` does not cover a later
/// write through a `.env` that became a symlink to somewhere else.
fn real_target(lexical: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(lexical) {
        return Some(real);
    }
    if lexical.symlink_metadata().is_ok() {
        return None;
    }
    for ancestor in lexical.ancestors().skip(1) {
        if let Ok(real) = std::fs::canonicalize(ancestor) {
            let rest = lexical.strip_prefix(ancestor).ok()?;
            return Some(real.join(rest));
        }
    }
    Some(lexical.to_path_buf())
}

/// Removes `.` and resolves `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The rule "allow for session" / "always" would record for a call, or `None` when this call
/// can only be allowed once (a tool without rules, a command with shell metacharacters or
/// without a program word).
pub fn proposed_rule(
    tool: &str,
    arguments: &str,
    cwd: &Path,
    escalation: Option<PermissionPreset>,
) -> Option<ApprovalRule> {
    let args: Value = serde_json::from_str(arguments).ok()?;
    let mut rule = ApprovalRule {
        tool: tool.to_string(),
        command_prefix: None,
        path: None,
        escalation: escalation.map(|p| p.as_str().to_string()),
        network: false,
    };
    match RuleKind::of(tool)? {
        RuleKind::Command => {
            let words = plain_words(args.get("command")?.as_str()?)?;
            let program = words[0];
            if !is_command_word(program) {
                return None;
            }
            let prefix = match words.get(1) {
                Some(sub) if is_command_word(sub) => format!("{program} {sub}"),
                // `rm -rf x`: the program alone would cover far more than was approved, so
                // the rule is the whole command.
                Some(_) => words.join(" "),
                None => program.to_string(),
            };
            rule.command_prefix = Some(prefix);
            rule.network = asks_network(&args);
        }
        RuleKind::Tool => {}
        RuleKind::Path => rule.path = Some(file_path(&args, cwd)?),
    }
    Some(rule)
}

/// True when a `bash` call's arguments ask for the network (`network: true`).
fn asks_network(args: &Value) -> bool {
    args.get("network") == Some(&Value::Bool(true))
}

/// Where the persisted rules of `home` (`$DSH_HOME`) live.
pub fn approvals_path(home: &Path) -> PathBuf {
    home.join(APPROVALS_FILE)
}

#[derive(Serialize, Deserialize, Default)]
struct RulesFile {
    #[serde(default)]
    rules: Vec<ApprovalRule>,
}

/// Reads the persisted rules at `path`; a missing file holds none.
pub fn read_rules(path: &Path) -> Result<Vec<ApprovalRule>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
    };
    serde_json::from_str::<RulesFile>(&text)
        .map(|file| file.rules)
        .map_err(|err| {
            format!(
                "{} is not a valid approvals file ({err}); fix it or delete it (`dsh approvals remove all`)",
                path.display()
            )
        })
}

/// Replaces the persisted rules at `path` (written to a temporary file, then renamed; mode
/// 0600).
pub fn write_rules(path: &Path, rules: &[ApprovalRule]) -> Result<(), String> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let text = serde_json::to_string_pretty(&RulesFile {
        rules: rules.to_vec(),
    })
    .map_err(|e| format!("cannot encode the approval rules: {e}"))?;
    let tmp = dir.join(format!(".{APPROVALS_FILE}.{}.tmp", uuid::Uuid::new_v4()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    // Windows: the folder's inherited ACL.
    #[cfg(unix)]
    options.mode(0o600);
    let written = options
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Where a covering rule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleScope {
    /// Allowed for this session.
    Session,
    /// Persisted in `$DSH_HOME/approvals.json`.
    Always,
}

impl RuleScope {
    /// `session` or `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleScope::Session => "session",
            RuleScope::Always => "always",
        }
    }
}

/// The rules one agent consults before asking: its session rules plus the persisted ones
/// loaded at start (see the module docs).
#[derive(Debug, Default)]
pub struct ApprovalRules {
    file: Option<PathBuf>,
    persisted: Mutex<Vec<ApprovalRule>>,
    session: Mutex<Vec<ApprovalRule>>,
}

impl ApprovalRules {
    /// Rules kept in memory only; "always allow" is not offered.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// The rules persisted under `home` (`$DSH_HOME`), loaded now; "always allow" adds to them.
    pub fn load(home: &Path) -> Result<Self, String> {
        let file = approvals_path(home);
        let rules = read_rules(&file)?;
        Ok(ApprovalRules {
            file: Some(file),
            persisted: Mutex::new(rules),
            session: Mutex::new(Vec::new()),
        })
    }

    /// True when "always allow" can be remembered (the rules have a file).
    pub fn persists(&self) -> bool {
        self.file.is_some()
    }

    /// The first rule that covers the call, and where it came from.
    pub fn covering(
        &self,
        tool: &str,
        arguments: &str,
        cwd: &Path,
        escalation: Option<PermissionPreset>,
    ) -> Option<(ApprovalRule, RuleScope)> {
        let find = |rules: &Mutex<Vec<ApprovalRule>>| {
            rules
                .lock_or_recover()
                .iter()
                .find(|r| r.covers(tool, arguments, cwd, escalation))
                .cloned()
        };
        find(&self.persisted)
            .map(|r| (r, RuleScope::Always))
            .or_else(|| find(&self.session).map(|r| (r, RuleScope::Session)))
    }

    /// Remembers `rule` for this session.
    pub fn allow_for_session(&self, rule: ApprovalRule) {
        let mut session = self.session.lock_or_recover();
        if !session.contains(&rule) {
            session.push(rule);
        }
    }

    /// Remembers `rule` for this session and in the rules file (re-read first, so rules
    /// other sessions added meanwhile are kept).
    pub fn allow_always(&self, rule: ApprovalRule) -> Result<(), String> {
        self.allow_for_session(rule.clone());
        let Some(file) = &self.file else {
            return Err("these approval rules have no file to be remembered in".into());
        };
        let mut persisted = self.persisted.lock_or_recover();
        let mut on_disk = read_rules(file)?;
        if !on_disk.contains(&rule) {
            on_disk.push(rule.clone());
        }
        write_rules(file, &on_disk)?;
        if !persisted.contains(&rule) {
            persisted.push(rule);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn bash(command: &str) -> String {
        serde_json::json!({"command": command, "description": "d"}).to_string()
    }

    #[test]
    fn a_rule_grants_the_network_only_when_it_was_approved_with_it() {
        let cwd = Path::new("/w");
        let with_network = |command: &str| {
            serde_json::json!({"command": command, "description": "d", "network": true,
                "justification": "x"})
            .to_string()
        };
        let plain = proposed_rule("bash", &bash("curl example.org"), cwd, None).unwrap();
        assert!(!plain.network);
        assert!(plain.covers("bash", &bash("curl example.org"), cwd, None));
        assert!(!plain.covers("bash", &with_network("curl example.org"), cwd, None));
        let online = proposed_rule("bash", &with_network("curl example.org"), cwd, None).unwrap();
        assert!(online.network);
        assert!(
            online.describe().ends_with("(with network)"),
            "{}",
            online.describe()
        );
        assert!(online.covers("bash", &with_network("curl example.org"), cwd, None));
        assert!(online.covers("bash", &bash("curl example.org"), cwd, None));
        // Rules written before the field existed read as approved without the network.
        let old: ApprovalRule =
            serde_json::from_str(r#"{"tool":"bash","command_prefix":"curl example.org"}"#).unwrap();
        assert_eq!(old, plain);
        assert!(!serde_json::to_string(&plain).unwrap().contains("network"));
    }

    #[test]
    fn prefix_rules_cover_plain_commands_only() {
        let cwd = Path::new("/w");
        let rule = proposed_rule("bash", &bash("git status --short"), cwd, None).unwrap();
        assert_eq!(rule.command_prefix.as_deref(), Some("git status"));
        for covered in ["git status", "git  status -s", "git status --short x"] {
            assert!(rule.covers("bash", &bash(covered), cwd, None), "{covered}");
        }
        for refused in [
            "git status; rm -rf ~",
            "git status && rm -rf /",
            "git status | sh",
            "git status $(rm -rf ~)",
            "git status `id`",
            "git status > ~/.bashrc",
            "git status\nrm -rf ~",
            "git statusx",
            "git",
            "rm -rf ~",
        ] {
            assert!(!rule.covers("bash", &bash(refused), cwd, None), "{refused}");
        }
        // Escalated calls need a rule that was approved for the escalation.
        assert!(!rule.covers(
            "bash",
            &bash("git status"),
            cwd,
            Some(PermissionPreset::DangerFullAccess)
        ));
        assert!(proposed_rule("bash", &bash("ls; rm -rf ~"), cwd, None).is_none());
        assert!(proposed_rule("bash", &bash("A=1 make"), cwd, None).is_none());
        let exact = proposed_rule("bash", &bash("rm -rf target"), cwd, None).unwrap();
        assert_eq!(exact.command_prefix.as_deref(), Some("rm -rf target"));
        assert!(!exact.covers("bash", &bash("rm -rf /"), cwd, None));
    }

    #[test]
    fn path_and_tool_rules() {
        let cwd = Path::new("/w");
        let args = serde_json::json!({"file_path": "./.env", "content": "x"}).to_string();
        let rule = proposed_rule("write", &args, cwd, None).unwrap();
        assert_eq!(rule.path.as_deref(), Some(Path::new("/w/.env")));
        let same = serde_json::json!({"file_path": "/w/sub/../.env"}).to_string();
        assert!(rule.covers("write", &same, cwd, None));
        assert!(!rule.covers("edit", &same, cwd, None));
        let other = serde_json::json!({"file_path": ".env.local"}).to_string();
        assert!(!rule.covers("write", &other, cwd, None));
        let mcp = proposed_rule("mcp__s__t", "{}", cwd, None).unwrap();
        assert!(mcp.covers("mcp__s__t", r#"{"a":1}"#, cwd, None));
        assert!(!mcp.covers("mcp__s__u", "{}", cwd, None));
        assert!(proposed_rule("read", "{}", cwd, None).is_none());
    }

    #[test]
    fn path_rules_follow_the_real_target() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(cwd.join(".env"), "A=1").unwrap();
        std::fs::create_dir_all(cwd.join(".git/hooks")).unwrap();
        let args = serde_json::json!({"file_path": ".env"}).to_string();
        let rule = proposed_rule("write", &args, &cwd, None).unwrap();
        assert!(rule.covers("write", &args, &cwd, None));
        // `.env` replaced by a symlink to a git hook: the rule no longer covers it.
        std::fs::remove_file(cwd.join(".env")).unwrap();
        std::os::unix::fs::symlink(cwd.join(".git/hooks/pre-commit"), cwd.join(".env")).unwrap();
        assert!(!rule.covers("write", &args, &cwd, None));
        assert!(proposed_rule("write", &args, &cwd, None).is_none());
    }

    #[test]
    fn always_rules_are_written_and_reloaded() {
        let home = tempfile::tempdir().unwrap();
        let rules = ApprovalRules::load(home.path()).unwrap();
        let rule = proposed_rule("mcp__s__t", "{}", Path::new("/"), None).unwrap();
        rules.allow_always(rule.clone()).unwrap();
        let again = ApprovalRules::load(home.path()).unwrap();
        assert_eq!(
            again.covering("mcp__s__t", "{}", Path::new("/"), None),
            Some((rule, RuleScope::Always))
        );
        std::fs::write(approvals_path(home.path()), "{").unwrap();
        let err = ApprovalRules::load(home.path()).unwrap_err();
        assert!(err.contains("approvals remove all"), "{err}");
    }
}
