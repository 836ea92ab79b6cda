//! `[tui]`: settings of the interactive terminal UI (docs/tui.md, "Modes").

use toml::Value;

use crate::Config;

/// The effective `[tui]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TuiConfig {
    /// `tui.alt_screen`: full-screen on the alternate screen instead of the inline mode.
    pub alt_screen: bool,
}

impl Config {
    /// The effective `[tui]`, defaults filled in (values were checked at load).
    pub fn tui(&self) -> TuiConfig {
        let mut settings = TuiConfig::default();
        for (key, value, _source) in self.values() {
            if let ("tui.alt_screen", Value::Boolean(on)) = (key.as_str(), value) {
                settings.alt_screen = *on;
            }
        }
        settings
    }
}
