//! Slash commands: the table, parsing and completion. The built-in commands come first;
//! commands contributed by the session's extensions (user-invocable skills,
//! [`dsh_agent::UserCommand`]) follow, and a built-in name always wins over theirs.

use dsh_agent::UserCommand;
use dsh_tools::PermissionPreset;

/// A parsed slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashCommand {
    /// `/compact`: summarise the conversation now.
    Compact,
    /// `/model [id]`: show or switch the model.
    Model(Option<String>),
    /// `/effort [level]`: show or switch the reasoning effort.
    Effort(Option<String>),
    /// `/cost`: usage and cost of the session.
    Cost,
    /// `/permission [preset]`: choose the permission preset, or switch to the one given.
    Permission(Option<String>),
    /// `/resume`: pick a session of this directory to continue.
    Resume,
    /// `/fork`: continue in a copy of this session.
    Fork,
    /// `/export [path]`: write a Markdown transcript (by default into the session's folder).
    Export(Option<String>),
    /// `/new`: start a new session.
    New,
    /// `/undo`: revert the files the last turn changed (docs/tui.md, "Undo and diff").
    Undo,
    /// `/rewind`: go back to the start of an earlier turn (docs/rewind.md).
    Rewind,
    /// `/diff`: the session's file changes, and `git diff`, in a scrollable view.
    Diff,
    /// `/init`: ask the agent to write AGENTS.md for the repository.
    Init,
    /// `/review [--uncommitted|--base B|--commit SHA] [focus]`: a read-only review of a
    /// change (crate::review); the arguments as typed.
    Review(String),
    /// `/status`: session, model, preset, sandbox, usage, MCP servers.
    Status,
    /// `/memory [user]`: edit the project's (or the user's) instructions file in `$VISUAL` /
    /// `$EDITOR` (docs/tui.md, "Notes to the instructions").
    Memory(bool),
    /// `/agents [name]`: list the session's sub-agents, or follow the one named
    /// (docs/tui.md, "Children").
    Agents(Option<String>),
    /// `/help`: keys and commands.
    Help,
    /// `/quit`: leave.
    Quit,
    /// `/name [arguments]`: a command of the session's extensions (e.g. a skill).
    User {
        /// The name, without the `/`.
        name: String,
        /// What followed the name (trimmed; may be empty).
        arguments: String,
    },
}

/// Name and one-line description of every built-in command, in the order `/help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/compact", "summarise older messages now to free context"),
    ("/model", "show or switch the model: /model deepseek-v4-pro"),
    (
        "/effort",
        "show or switch the reasoning effort (the ones the model takes)",
    ),
    ("/cost", "token usage, cache hits and cost of this session"),
    (
        "/permission",
        "choose the permission preset: /permission read-only",
    ),
    ("/resume", "pick an earlier session of this directory"),
    ("/fork", "continue in a copy of this session"),
    (
        "/export",
        "write a Markdown transcript into the session's folder: /export [path]",
    ),
    ("/new", "start a new session"),
    (
        "/undo",
        "revert the files the last turn changed with write/edit",
    ),
    (
        "/rewind",
        "go back to an earlier turn: files (bash's changes too), conversation or both",
    ),
    (
        "/diff",
        "this session's file changes (and git diff), scrollable",
    ),
    (
        "/init",
        "have the agent write AGENTS.md for this repository",
    ),
    (
        "/review",
        "read-only review of the changes: [--base B|--commit SHA] [focus]",
    ),
    (
        "/memory",
        "edit the project's AGENTS.md in $EDITOR (/memory user: your own)",
    ),
    (
        "/status",
        "session, model, preset, sandbox, tokens, context, MCP",
    ),
    (
        "/agents",
        "the session's sub-agents; Enter follows one live: /agents [name]",
    ),
    ("/help", "keys and commands"),
    ("/quit", "leave dsh"),
];

/// What `/init` asks the agent (docs/tui.md, "Commands"): our own wording of the task Codex's
/// `/init` gives its agent.
pub const INIT_PROMPT: &str = "Write an AGENTS.md file at the root of this repository: the guide a coding agent (or a new contributor) reads before changing anything here. \
First look around: the README and docs, the build and package files, the CI configuration, the layout of the source and test folders, and a few representative files. \
Then write AGENTS.md in Markdown, concise (about 200 to 400 words) and specific to this repository, with these sections: \
`## Layout` (the main folders and what lives where), \
`## Build and test` (the exact commands, including how to run a single test, and any lint or format checks CI runs), \
`## Conventions` (coding style, naming, error handling, and patterns the code follows that are not obvious), \
`## Before you finish` (what to check before considering a change done). \
Only state what you found in the repository; do not invent commands or rules. \
If an AGENTS.md already exists, read it first and improve it, keeping what is still true. \
When done, reply with a two-line summary of what you wrote.";

/// Other spellings of built-in commands (they also shadow extension commands).
const ALIASES: &[&str] = &["/permissions", "/clear", "/?", "/exit"];

/// The permission presets `/permission` offers, with what each allows.
pub const PERMISSION_PRESETS: &[(PermissionPreset, &str)] = &[
    (
        PermissionPreset::ReadOnly,
        "no file writes; bash runs in a read-only sandbox",
    ),
    (
        PermissionPreset::Ask,
        "as workspace-write, but every edit and bash call is approved first",
    ),
    (
        PermissionPreset::WorkspaceWrite,
        "writes inside the working directory and temp dirs; bash sandboxed",
    ),
    (
        PermissionPreset::DangerFullAccess,
        "no sandbox: bash and tools may change anything (asks to confirm)",
    ),
];

/// True for a built-in command name or alias (with its `/`).
pub fn is_builtin(name: &str) -> bool {
    COMMANDS.iter().any(|(n, _)| *n == name) || ALIASES.contains(&name)
}

/// Parses a draft that starts with `/`; `user` are the extensions' commands. `Err` carries a
/// message for the user.
pub fn parse(input: &str, user: &[UserCommand]) -> Result<SlashCommand, String> {
    let input = input.trim();
    let (name, rest) = match input.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, rest.trim()),
        None => (input, ""),
    };
    let arg = (!rest.is_empty()).then(|| rest.to_string());
    let no_arg = |command: SlashCommand| {
        if rest.is_empty() {
            Ok(command)
        } else {
            Err(format!("{name} takes no argument"))
        }
    };
    match name {
        "/compact" => no_arg(SlashCommand::Compact),
        "/model" => Ok(SlashCommand::Model(arg)),
        "/effort" => Ok(SlashCommand::Effort(arg)),
        "/cost" => no_arg(SlashCommand::Cost),
        "/permission" | "/permissions" => Ok(SlashCommand::Permission(arg)),
        "/resume" => no_arg(SlashCommand::Resume),
        "/fork" => no_arg(SlashCommand::Fork),
        "/export" => Ok(SlashCommand::Export(arg)),
        "/new" | "/clear" => no_arg(SlashCommand::New),
        "/undo" => no_arg(SlashCommand::Undo),
        "/rewind" => no_arg(SlashCommand::Rewind),
        "/diff" => no_arg(SlashCommand::Diff),
        "/init" => no_arg(SlashCommand::Init),
        "/review" => Ok(SlashCommand::Review(rest.to_string())),
        "/memory" => match rest {
            "" | "project" => Ok(SlashCommand::Memory(false)),
            "user" => Ok(SlashCommand::Memory(true)),
            _ => Err("/memory takes `user` or nothing (the project's file)".to_string()),
        },
        "/status" => no_arg(SlashCommand::Status),
        "/agents" => Ok(SlashCommand::Agents(arg)),
        "/help" | "/?" => no_arg(SlashCommand::Help),
        "/quit" | "/exit" => no_arg(SlashCommand::Quit),
        other => {
            let bare = &other[1..];
            if user.iter().any(|c| c.name == bare) {
                Ok(SlashCommand::User {
                    name: bare.to_string(),
                    arguments: rest.to_string(),
                })
            } else {
                Err(format!("unknown command {other}; /help lists them"))
            }
        }
    }
}

/// Completions for the draft: commands whose name starts with it while the draft is a bare
/// `/word` (built-ins first, then the extensions' commands), or presets while it is
/// `/permission <prefix>` with a non-empty prefix. Each is `(text to complete to, description)`.
pub fn completions(draft: &str, user: &[UserCommand]) -> Vec<(String, String)> {
    if !draft.starts_with('/') {
        return Vec::new();
    }
    if let Some(prefix) = draft.strip_prefix("/permission ") {
        if prefix.is_empty() || prefix.contains(char::is_whitespace) {
            return Vec::new();
        }
        return PERMISSION_PRESETS
            .iter()
            .filter(|(preset, _)| preset.as_str().starts_with(prefix))
            .map(|(preset, about)| (format!("/permission {preset}"), (*about).to_string()))
            .collect();
    }
    if draft.contains(char::is_whitespace) {
        return Vec::new();
    }
    let builtin = COMMANDS
        .iter()
        .filter(|(name, _)| name.starts_with(draft))
        .map(|(name, about)| ((*name).to_string(), (*about).to_string()));
    let extension = user_entries(user).filter(|(name, _)| name.starts_with(draft));
    builtin.chain(extension).collect()
}

/// The extensions' commands as `(/name, description)`, without those a built-in shadows.
fn user_entries(user: &[UserCommand]) -> impl Iterator<Item = (String, String)> + '_ {
    user.iter()
        .map(|c| (format!("/{}", c.name), c.description.clone()))
        .filter(|(name, _)| !is_builtin(name))
}

/// The `/help` text; `user` are the extensions' commands, listed after the built-ins. `inline`:
/// the inline mode's keys (docs/tui.md, "Modes"), else the full screen's.
pub fn help_text(user: &[UserCommand], inline: bool) -> String {
    let view = if inline {
        // The conversation is in the terminal's scrollback: PgUp/PgDn have nothing to scroll.
        "Ctrl-T the conversation with its reasoning in full · the terminal scrolls the conversation"
    } else {
        "Ctrl-T expand/collapse reasoning · PgUp/PgDn scroll"
    };
    let mut out = format!(
        "Keys: Enter send (queues a followup while a turn runs) · Ctrl-S send as steering · \
         Shift/Alt-Enter or Ctrl-J newline · Ctrl-C cancel turn / clear draft (twice) / quit \
         (twice, when empty) · Ctrl-D quit · {view} · Up/Down recall · Tab complete\nCommands:",
    );
    for (name, about) in COMMANDS {
        out.push_str(&format!("\n  {name:<12} {about}"));
    }
    let mut extension = user_entries(user).peekable();
    if extension.peek().is_some() {
        out.push_str("\nSkills and extension commands (/name [arguments]):");
        for (name, about) in extension {
            out.push_str(&format!("\n  {name:<12} {about}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(names: &[&str]) -> Vec<UserCommand> {
        names
            .iter()
            .map(|n| UserCommand {
                name: (*n).to_string(),
                description: format!("the {n} skill"),
                hint: None,
            })
            .collect()
    }

    #[test]
    fn parses_and_completes() {
        assert_eq!(
            parse("/model  x ", &[]),
            Ok(SlashCommand::Model(Some("x".into())))
        );
        assert_eq!(parse("/cost", &[]), Ok(SlashCommand::Cost));
        assert!(parse("/cost now", &[]).is_err());
        assert!(parse("/nope", &[]).is_err());
        let names: Vec<_> = completions("/e", &[]).into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["/effort", "/export"]);
        assert!(completions("/model x", &[]).is_empty());
    }

    #[test]
    fn permission_arguments_complete() {
        let names: Vec<_> = completions("/permission d", &[])
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(names, ["/permission danger-full-access"]);
        let ask = completions("/permission a", &[]);
        assert_eq!(ask.len(), 1, "{ask:?}");
        assert_eq!(ask[0].0, "/permission ask");
        assert!(ask[0].1.contains("approved first"), "{ask:?}");
        let listed: Vec<_> = PERMISSION_PRESETS.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            listed,
            ["read-only", "ask", "workspace-write", "danger-full-access"]
        );
        // An empty argument completes nothing, so Enter opens the preset list.
        assert!(completions("/permission ", &[]).is_empty());
        assert_eq!(
            parse("/permission read-only", &[]),
            Ok(SlashCommand::Permission(Some("read-only".into())))
        );
    }

    #[test]
    fn extension_commands_follow_builtins_and_never_shadow_them() {
        let user = user(&["audit", "export", "clear", "explain", "review"]);
        let names: Vec<_> = completions("/e", &user).into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["/effort", "/export", "/explain"]);
        assert_eq!(
            parse("/audit  the parser\nplease ", &user),
            Ok(SlashCommand::User {
                name: "audit".into(),
                arguments: "the parser\nplease".into()
            })
        );
        assert_eq!(parse("/export", &user), Ok(SlashCommand::Export(None)));
        assert_eq!(parse("/clear", &user), Ok(SlashCommand::New));
        // A skill named `review` is shadowed by the built-in `/review`.
        assert_eq!(
            parse("/review --base main", &user),
            Ok(SlashCommand::Review("--base main".into()))
        );
        assert!(parse("/auditor", &user).is_err());
        let help = help_text(&user, false);
        assert!(help.contains("\n  /audit       the audit skill"), "{help}");
        assert!(!help.contains("the review skill"), "{help}");
        assert!(!help.contains("the export skill"), "{help}");
        assert!(!help_text(&[], false).contains("Skills"));
        assert!(help_text(&[], true).contains("\n  /review      read-only review"));
        // PgUp/PgDn scroll the full screen's conversation; inline, the terminal holds it.
        assert!(help_text(&[], false).contains("PgUp/PgDn scroll"));
        assert!(!help_text(&[], true).contains("PgUp"));
    }
}
