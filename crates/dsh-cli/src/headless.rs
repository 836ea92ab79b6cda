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

/// At most this much piped input is attached to a task given as argument; the rest is cut,
/// with a note saying so.
pub(crate) const PIPED_INPUT_LIMIT: usize = 256 * 1024;

/// The task of `dsh run`: the argument, or standard input when the argument is `-` or missing.
/// A missing argument with a terminal on stdin is refused (nothing was piped, and waiting for
/// typed input would look like a hang). An argument with input piped in (a pipe or a file on
/// stdin, as in `git diff | dsh run "review this change"`) gets that input attached after it
/// ([`with_piped_input`]), as `codex exec` and `claude -p` do.
pub(crate) fn task_text(argument: Option<&str>) -> Result<String, String> {
    match argument {
        Some("-") => {}
        Some(text) => {
            let task = non_empty(text.to_string(), "the task given as argument")?;
            if !stdin_is_piped() {
                return Ok(task);
            }
            let mut input = Vec::new();
            std::io::stdin()
                .take(PIPED_INPUT_LIMIT as u64 + 1)
                .read_to_end(&mut input)
                .map_err(|err| format!("cannot read the piped input: {err}"))?;
            return Ok(with_piped_input(&task, &input));
        }
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

/// True when stdin is a pipe or a regular file: input somebody meant for dsh. A terminal, the
/// null device or a socket is not read (a program that leaves stdin open would make dsh wait).
fn stdin_is_piped() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let stdin = std::io::stdin();
        let Ok(meta) = std::os::fd::AsFd::as_fd(&stdin)
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(|file| file.metadata())
        else {
            return false;
        };
        let kind = meta.file_type();
        kind.is_fifo() || (kind.is_file() && meta.len() > 0)
    }
    #[cfg(not(unix))]
    {
        !std::io::stdin().is_terminal()
    }
}

/// `task` with the piped `input` attached as a block after it: fenced so the model sees where it
/// starts and ends (the fence is longer than any run of backticks in the input), cut at
/// [`PIPED_INPUT_LIMIT`] with a note. Empty input leaves the task as it is.
pub(crate) fn with_piped_input(task: &str, input: &[u8]) -> String {
    if input.iter().all(u8::is_ascii_whitespace) {
        return task.to_string();
    }
    let cut = input.len() > PIPED_INPUT_LIMIT;
    let shown = String::from_utf8_lossy(&input[..input.len().min(PIPED_INPUT_LIMIT)]);
    let longest_ticks = shown.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_ticks.max(2) + 1);
    let mut out = format!("{task}\n\nInput piped to dsh run:\n{fence}\n{shown}");
    if !shown.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
    if cut {
        out.push_str(&format!(
            "\n[the piped input was longer than {} KiB; only its start is shown above]",
            PIPED_INPUT_LIMIT / 1024
        ));
    }
    out
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
    fn piped_input_is_attached_after_the_task_fenced_and_capped() {
        assert_eq!(with_piped_input("review", b" \n"), "review");
        let out = with_piped_input("review this change", b"diff --git a b\n+x\n");
        assert_eq!(
            out,
            "review this change\n\nInput piped to dsh run:\n```\ndiff --git a b\n+x\n```"
        );
        // A fence longer than any backtick run inside.
        let out = with_piped_input("t", b"````code````");
        assert!(out.contains("\n`````\n````code````\n`````"), "{out}");
        // Cut at the limit, with a note.
        let big = vec![b'a'; PIPED_INPUT_LIMIT + 10];
        let out = with_piped_input("t", &big);
        assert!(
            out.ends_with("only its start is shown above]"),
            "{}",
            &out[out.len() - 80..]
        );
        assert!(out.contains(&"a".repeat(PIPED_INPUT_LIMIT)));
        assert!(!out.contains(&"a".repeat(PIPED_INPUT_LIMIT + 1)));
    }

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
