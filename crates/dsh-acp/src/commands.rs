//! Slash commands: dsh's own (`/compact`, `/permission`, `/undo`, `/fork`) and the session's user
//! commands
//! (user-invocable skills), advertised with `available_commands_update` and recognised at the
//! start of a prompt.

use dsh_agent::UserCommand;
use serde_json::{json, Value};

/// `/compact`: compacts the conversation now.
pub const COMPACT: &str = "compact";
/// `/permission [preset]`: shows or switches the permission preset (the session mode).
pub const PERMISSION: &str = "permission";
/// `/undo`: reverts the file changes of the latest turn that made some (`Op::Undo`).
pub(crate) const UNDO: &str = "undo";

/// `/fork [turn]`: copies the session up to that turn into a new one (`Op::Fork`).
pub(crate) const FORK: &str = "fork";

/// dsh's own commands, which a user command of the same name does not shadow.
pub(crate) const OWN: [&str; 4] = [COMPACT, PERMISSION, UNDO, FORK];

/// A prompt that starts with a slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlashCommand<'a> {
    /// The name after `/`.
    pub(crate) name: &'a str,
    /// The rest of the prompt, trimmed.
    pub(crate) arguments: &'a str,
}

/// Splits `/name arguments`; `None` when the prompt does not start with `/` and a name.
pub(crate) fn parse(text: &str) -> Option<SlashCommand<'_>> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, arguments) = match rest.find(char::is_whitespace) {
        Some(at) => (&rest[..at], rest[at..].trim()),
        None => (rest, ""),
    };
    if name.is_empty() {
        return None;
    }
    Some(SlashCommand { name, arguments })
}

/// The `availableCommands` of an `available_commands_update`: dsh's own commands, then the
/// session's user commands (a user command named like one of dsh's is not offered: dsh's own
/// wins when typed).
pub(crate) fn available(user: &[UserCommand]) -> Value {
    let mut commands = vec![
        json!({"name": COMPACT, "description": "Compact the conversation now (summarise older messages)"}),
        json!({
            "name": PERMISSION,
            "description": "Show or switch the permission preset (the session mode)",
            "input": {"hint": "read-only | workspace-write | danger-full-access"},
        }),
        json!({"name": UNDO, "description": "Revert the file changes of the latest turn that made some"}),
        json!({
            "name": FORK,
            "description": "Copy this session up to a turn into a new session (load it to go on there)",
            "input": {"hint": "turn number (default: the last finished turn)"},
        }),
    ];
    for command in user {
        if OWN.contains(&command.name.as_str()) {
            continue;
        }
        let mut entry = json!({"name": command.name, "description": command.description});
        if let Some(hint) = &command.hint {
            entry["input"] = json!({ "hint": hint });
        }
        commands.push(entry);
    }
    Value::Array(commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_commands_are_split_from_their_arguments() {
        assert_eq!(
            parse("  /review  the parser\nplease "),
            Some(SlashCommand {
                name: "review",
                arguments: "the parser\nplease"
            })
        );
        assert_eq!(
            parse("/compact"),
            Some(SlashCommand {
                name: "compact",
                arguments: ""
            })
        );
        assert_eq!(parse("/ nothing"), None);
        assert_eq!(parse("no /command"), None);
    }

    #[test]
    fn own_commands_come_first_and_win() {
        let user = [
            UserCommand {
                name: "compact".into(),
                description: "shadowed".into(),
                hint: None,
            },
            UserCommand {
                name: "review".into(),
                description: "Review code".into(),
                hint: Some("what to review".into()),
            },
        ];
        let list = available(&user);
        let names: Vec<&str> = list
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["compact", "permission", "undo", "fork", "review"]);
        assert_eq!(list[4]["description"], "Review code");
        assert_eq!(list[4]["input"]["hint"], "what to review");
        assert!(list[0].get("input").is_none());
    }
}
