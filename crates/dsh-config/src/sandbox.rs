//! `[sandbox]`: settings of the process sandbox `bash` runs in (docs/SECURITY.md, "Network").

use toml::Value;

use crate::Config;

/// The effective `[sandbox]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxConfig {
    /// `sandbox.network`: `"on"` (default) lets confined commands reach the network; `"off"`
    /// withholds it, and a `bash` call gets it only when the user approves that call's
    /// `network: true`.
    pub network: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self { network: true }
    }
}

impl Config {
    /// The effective `[sandbox]`, defaults filled in (values were checked at load).
    pub fn sandbox(&self) -> SandboxConfig {
        let mut settings = SandboxConfig::default();
        for (key, value, _source) in self.values() {
            if let ("sandbox.network", Value::String(value)) = (key.as_str(), value) {
                settings.network = value != "off";
            }
        }
        settings
    }
}
