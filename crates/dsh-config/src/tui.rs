//! `[tui]`: settings of the interactive terminal UI (docs/tui.md, "Modes").

use toml::Value;

use crate::Config;

/// The effective `[tui]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuiConfig {
    /// `tui.alt_screen`: full-screen on the alternate screen instead of the inline mode.
    pub alt_screen: bool,
    /// `tui.notifications`: how the terminal is told that a turn ended or a question waits
    /// while it is not focused (`auto`, `osc9`, `osc777`, `bel`, `off`; default `auto`).
    pub notifications: String,
    /// `notify.command`: a program run with a JSON payload as its last argument at each of those
    /// moments, focused or not (docs/tui.md, "Notifications"). Only the user's own file or a
    /// trusted project sets it: it runs a program.
    pub notify_command: Vec<String>,
    /// `tui.status_command`: a program given the session's state as JSON on stdin, whose
    /// first output line replaces the status line's figures (docs/tui.md, "Status line"). Only
    /// the user's own file or a trusted project sets it.
    pub status_command: Vec<String>,
}

impl Config {
    /// The effective `[tui]`, defaults filled in (values were checked at load).
    pub fn tui(&self) -> TuiConfig {
        let mut settings = TuiConfig {
            notifications: "auto".to_string(),
            ..TuiConfig::default()
        };
        for (key, value, _source) in self.values() {
            match (key.as_str(), value) {
                ("tui.alt_screen", Value::Boolean(on)) => settings.alt_screen = *on,
                ("tui.notifications", Value::String(kind)) => settings.notifications = kind.clone(),
                ("notify.command", Value::Array(words)) => settings.notify_command = strings(words),
                ("tui.status_command", Value::Array(words)) => {
                    settings.status_command = strings(words)
                }
                _ => {}
            }
        }
        settings
    }
}

fn strings(words: &[Value]) -> Vec<String> {
    words
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}
