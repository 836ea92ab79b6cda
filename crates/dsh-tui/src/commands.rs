//! Slash commands: the table, parsing and completion.

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
    /// `/permission`: show the permission preset.
    Permission(Option<String>),
    /// `/resume`: pick a session of this directory to continue.
    Resume,
    /// `/fork`: continue in a copy of this session.
    Fork,
    /// `/export [path]`: write a Markdown transcript.
    Export(Option<String>),
    /// `/new`: start a new session.
    New,
    /// `/help`: keys and commands.
    Help,
    /// `/quit`: leave.
    Quit,
}

/// Name and one-line description of every command, in the order `/help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/compact", "summarise older messages now to free context"),
    ("/model", "show or switch the model: /model deepseek-v4-pro"),
    (
        "/effort",
        "show or switch reasoning effort: off, low, medium, high, max",
    ),
    ("/cost", "token usage, cache hits and cost of this session"),
    ("/permission", "show the permission preset"),
    ("/resume", "pick an earlier session of this directory"),
    ("/fork", "continue in a copy of this session"),
    ("/export", "write a Markdown transcript: /export [path]"),
    ("/new", "start a new session"),
    ("/help", "keys and commands"),
    ("/quit", "leave dsh"),
];

/// Parses a draft that starts with `/`. `Err` carries a message for the user.
pub fn parse(input: &str) -> Result<SlashCommand, String> {
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
        "/help" | "/?" => no_arg(SlashCommand::Help),
        "/quit" | "/exit" => no_arg(SlashCommand::Quit),
        other => Err(format!("unknown command {other}; /help lists them")),
    }
}

/// Commands whose name starts with the draft, while the draft is a bare `/word` (no space).
pub fn completions(draft: &str) -> Vec<(&'static str, &'static str)> {
    if !draft.starts_with('/') || draft.contains(char::is_whitespace) {
        return Vec::new();
    }
    COMMANDS
        .iter()
        .copied()
        .filter(|(name, _)| name.starts_with(draft))
        .collect()
}

/// The `/help` text.
pub fn help_text() -> String {
    let mut out = String::from(
        "Keys: Enter send (queues a followup while a turn runs) · Ctrl-S send as steering · \
         Shift/Alt-Enter or Ctrl-J newline · Ctrl-C cancel turn / clear draft (twice) / quit \
         (twice, when empty) · Ctrl-D quit · Ctrl-T expand reasoning · PgUp/PgDn scroll · \
         Up/Down recall · Tab complete\nCommands:",
    );
    for (name, about) in COMMANDS {
        out.push_str(&format!("\n  {name:<12} {about}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_completes() {
        assert_eq!(
            parse("/model  x "),
            Ok(SlashCommand::Model(Some("x".into())))
        );
        assert_eq!(parse("/cost"), Ok(SlashCommand::Cost));
        assert!(parse("/cost now").is_err());
        assert!(parse("/nope").is_err());
        let names: Vec<_> = completions("/e").iter().map(|c| c.0).collect();
        assert_eq!(names, ["/effort", "/export"]);
        assert!(completions("/model x").is_empty());
    }
}
