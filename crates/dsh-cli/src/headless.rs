//! The parts of `dsh run` that make it fit in a pipeline (README.md, "`dsh run`"): the task read
//! from standard input, the colour choice for stderr, and which session events `--json` prints.

use std::io::{IsTerminal, Read};

use dsh_llm::Chunk;
use dsh_session::{Envelope, Event};

/// `--color`: whether progress on stderr uses ANSI colours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// Colours when stderr is a terminal and `NO_COLOR` is unset or empty.
    #[default]
    Auto,
    /// Always colour, even into a file or pipe (and despite `NO_COLOR`).
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// True when stderr output should carry colour codes. `no_color` is the value of `NO_COLOR`
    /// (any non-empty value turns colours off, as no-color.org describes); `terminal` says
    /// whether stderr is a terminal.
    pub(crate) fn enabled(self, no_color: Option<&str>, terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && no_color.is_none_or(str::is_empty),
        }
    }

    /// [`ColorChoice::enabled`] for this process's environment and stderr.
    pub(crate) fn for_stderr(self) -> bool {
        let no_color = std::env::var("NO_COLOR").ok();
        self.enabled(no_color.as_deref(), std::io::stderr().is_terminal())
    }
}

/// The task of `dsh run`: the argument, or standard input when the argument is `-` or missing.
/// A missing argument with a terminal on stdin is refused (nothing was piped, and waiting for
/// typed input would look like a hang).
pub(crate) fn task_text(argument: Option<&str>) -> Result<String, String> {
    match argument {
        Some("-") => {}
        Some(text) => return non_empty(text.to_string(), "the task given as argument"),
        None if std::io::stdin().is_terminal() => {
            return Err(
                "no task: give it as an argument (`dsh run \"fix the tests\"`) or pipe \
                        it in (`echo \"fix the tests\" | dsh run`)"
                    .to_string(),
            )
        }
        None => {}
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|err| format!("cannot read the task from standard input: {err}"))?;
    non_empty(text, "the task read from standard input")
}

fn non_empty(text: String, what: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err(format!("{what} is empty: say what the agent should do"))
    } else {
        Ok(text)
    }
}

/// True when `--json` prints `envelope`: every event, except the streamed token deltas of a
/// reply unless `deltas` (`--json-deltas`). The reply's text is in the `assistant/message`
/// event that follows the deltas, so nothing is lost without them.
pub(crate) fn json_prints(envelope: &Envelope, deltas: bool) -> bool {
    if deltas {
        return true;
    }
    !matches!(
        &envelope.event,
        Event::AssistantChunk(chunk) if matches!(
            chunk.chunk,
            Chunk::TextDelta { .. } | Chunk::ReasoningDelta { .. } | Chunk::ToolCallDelta { .. }
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_follows_flag_then_no_color_then_terminal() {
        assert!(ColorChoice::Always.enabled(Some("1"), false));
        assert!(!ColorChoice::Never.enabled(None, true));
        assert!(ColorChoice::Auto.enabled(None, true));
        assert!(ColorChoice::Auto.enabled(Some(""), true));
        assert!(!ColorChoice::Auto.enabled(Some("1"), true));
        assert!(!ColorChoice::Auto.enabled(None, false));
    }
}
