//! Notifications (docs/tui.md, "Notifications"): when a turn ends or a question waits (an
//! approval, `ask_user_question`, a plan review) while the terminal is not focused, the
//! terminal is told (`[tui] notifications`: OSC 9, OSC 777 or BEL), and the user's
//! `[notify] command` runs with a JSON payload as its last argument, focused or not.
//!
//! Focus comes from the terminal's focus reports (`CSI ?1004h`, enabled by the terminal guard);
//! a terminal that sends none counts as focused, so it is never notified by escape sequence.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How the terminal is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalNotice {
    /// `ESC ] 9 ; body BEL` (iTerm2, WezTerm, ghostty, Windows Terminal).
    Osc9,
    /// `ESC ] 777 ; notify ; title ; body BEL` (foot, urxvt, some VTE terminals).
    Osc777,
    /// The bell: every terminal has one; tmux and others turn it into an alert.
    Bel,
    /// Nothing.
    Off,
}

impl TerminalNotice {
    /// The kind `setting` names (`tui.notifications`); `auto` picks by the terminal's
    /// environment (`lookup` reads a variable): BEL inside tmux or screen (which would swallow
    /// an OSC), OSC 9 for the terminals known to show it, OSC 777 for foot, else BEL.
    pub fn resolve(setting: &str, lookup: impl Fn(&str) -> Option<String>) -> TerminalNotice {
        match setting {
            "osc9" => return TerminalNotice::Osc9,
            "osc777" => return TerminalNotice::Osc777,
            "bel" => return TerminalNotice::Bel,
            "off" => return TerminalNotice::Off,
            _ => {}
        }
        if lookup("TMUX").is_some() || lookup("STY").is_some() {
            return TerminalNotice::Bel;
        }
        let program = lookup("TERM_PROGRAM").unwrap_or_default();
        if ["iTerm.app", "WezTerm", "ghostty"].contains(&program.as_str())
            || lookup("WT_SESSION").is_some()
        {
            return TerminalNotice::Osc9;
        }
        if lookup("TERM").is_some_and(|term| term.starts_with("foot")) {
            return TerminalNotice::Osc777;
        }
        TerminalNotice::Bel
    }

    /// The bytes that tell the terminal, control characters (and `;`, OSC 777's separator)
    /// left out of the text.
    pub fn sequence(self, title: &str, body: &str) -> String {
        let clean = |text: &str| -> String {
            text.chars()
                .filter(|c| !dsh_tools::is_unsafe_for_terminal(*c) && *c != '\n' && *c != ';')
                .take(200)
                .collect()
        };
        match self {
            TerminalNotice::Osc9 => format!("\x1b]9;{}: {}\x07", clean(title), clean(body)),
            TerminalNotice::Osc777 => {
                format!("\x1b]777;notify;{};{}\x07", clean(title), clean(body))
            }
            TerminalNotice::Bel => "\x07".to_string(),
            TerminalNotice::Off => String::new(),
        }
    }
}

/// What the UI notifies of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moment {
    /// The turn ended (`reason`: `completed`, `aborted`, `error`, ...).
    TurnEnded {
        /// The logged reason's kind.
        reason: String,
    },
    /// An approval waits for the user.
    ApprovalRequested {
        /// The tool asked about.
        tool: String,
    },
    /// Questions (or a plan review) wait for the user.
    QuestionAsked,
}

impl Moment {
    fn kind(&self) -> &'static str {
        match self {
            Moment::TurnEnded { .. } => "turn-ended",
            Moment::ApprovalRequested { .. } => "approval-requested",
            Moment::QuestionAsked => "question-asked",
        }
    }

    fn text(&self) -> String {
        match self {
            Moment::TurnEnded { reason } if reason == "completed" => "the turn is done".into(),
            Moment::TurnEnded { reason } => format!("the turn ended: {reason}"),
            Moment::ApprovalRequested { tool } => format!("{tool} waits for your approval"),
            Moment::QuestionAsked => "a question waits for your answer".into(),
        }
    }
}

/// The notifications of one UI.
#[derive(Debug)]
pub struct Notifier {
    terminal: TerminalNotice,
    command: Vec<String>,
    focused: bool,
}

/// Longest a `[notify] command` may run before its process group is killed.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

impl Notifier {
    /// Notifies the terminal as `terminal` says and runs `command` (none when empty).
    pub fn new(terminal: TerminalNotice, command: Vec<String>) -> Notifier {
        Notifier {
            terminal,
            command,
            focused: true,
        }
    }

    /// The terminal reported focus gained (`true`) or lost.
    pub fn set_focused(&mut self, focused: bool) {
        self.focused = focused;
    }

    /// Tells of `moment` in session `session` (working directory `cwd`): the terminal through
    /// `out` when it is not focused, the user's command always.
    pub fn notify(&self, moment: &Moment, session: &str, cwd: &str, out: &mut impl Write) {
        if !self.focused && self.terminal != TerminalNotice::Off {
            let _ = out.write_all(self.terminal.sequence("dsh", &moment.text()).as_bytes());
            let _ = out.flush();
        }
        if !self.command.is_empty() {
            let payload = json!({
                "type": moment.kind(),
                "sessionId": session,
                "cwd": cwd,
                "message": moment.text(),
                "focused": self.focused,
            });
            run_command(&self.command, &payload);
        }
    }
}

/// A program of the user's (`[notify] command`, `tui.status_command`) ready to start: `command`
/// and its arguments, with the environment bash gets (no `*KEY*`, `*TOKEN*`, ... variables), no
/// error output, in its own process group that dies with dsh as a hook's does
/// (`dsh_tools::guard_group_std`); start it with `dsh_tools::spawn_std_child`. `None` for an
/// empty command.
pub(crate) fn user_program(command: &[String]) -> Option<Command> {
    let (program, args) = command.split_first()?;
    let mut process = Command::new(program);
    process
        .args(args)
        .env_clear()
        .envs(dsh_tools::scrubbed_env())
        .stderr(Stdio::null());
    #[cfg(unix)]
    dsh_tools::guard_group_std(&mut process);
    Some(process)
}

/// Kills what is left of a [`user_program`]'s process group and reaps it.
pub(crate) fn stop_group(child: &mut std::process::Child) {
    #[cfg(unix)]
    if let Ok(pgid) = i32::try_from(child.id()) {
        dsh_tools::kill_group_now(pgid);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts `command` with `payload` as its last argument and no input or output
/// ([`user_program`]); a thread reaps it and kills the group past [`COMMAND_LIMIT`]. Nothing
/// waits for it.
fn run_command(command: &[String], payload: &Value) {
    let Some(mut process) = user_program(command) else {
        return;
    };
    process
        .arg(payload.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let Ok(mut child) = dsh_tools::spawn_std_child(process) else {
        return;
    };
    std::thread::spawn(move || {
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(None) if started.elapsed() < COMMAND_LIMIT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(None) => return stop_group(&mut child),
                _ => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_by_the_terminal_and_sequences_carry_no_controls() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            TerminalNotice::resolve("auto", env(&[("TERM_PROGRAM", "WezTerm")])),
            TerminalNotice::Osc9
        );
        assert_eq!(
            TerminalNotice::resolve(
                "auto",
                env(&[("TERM_PROGRAM", "WezTerm"), ("TMUX", "/tmp/t,1,0")])
            ),
            TerminalNotice::Bel
        );
        assert_eq!(
            TerminalNotice::resolve("auto", env(&[("TERM", "foot")])),
            TerminalNotice::Osc777
        );
        assert_eq!(
            TerminalNotice::resolve("auto", env(&[("TERM", "xterm-256color")])),
            TerminalNotice::Bel
        );
        assert_eq!(
            TerminalNotice::resolve("off", env(&[("TERM_PROGRAM", "WezTerm")])),
            TerminalNotice::Off
        );
        assert_eq!(
            TerminalNotice::Osc9.sequence("dsh", "bash\x1b]52;c;x\x07 waits; ok"),
            "\x1b]9;dsh: bash]52cx waits ok\x07"
        );
        assert_eq!(
            TerminalNotice::Osc777.sequence("d;sh", "done"),
            "\x1b]777;notify;dsh;done\x07"
        );
    }

    #[test]
    fn the_terminal_is_told_only_when_not_focused() {
        let mut notifier = Notifier::new(TerminalNotice::Osc9, Vec::new());
        let moment = Moment::TurnEnded {
            reason: "completed".into(),
        };
        let mut out = Vec::new();
        notifier.notify(&moment, "s1", "/w", &mut out);
        assert!(out.is_empty());
        notifier.set_focused(false);
        notifier.notify(&moment, "s1", "/w", &mut out);
        assert_eq!(out, b"\x1b]9;dsh: the turn is done\x07");
    }
}
