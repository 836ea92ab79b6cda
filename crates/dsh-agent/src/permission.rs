//! Switching the permission preset of a running session (`/permission`, docs/agent.md, "Switching
//! the permission preset").
//!
//! The front end builds the agent, so it knows how to confine commands under each preset: it
//! installs a [`PermissionSource`] with [`crate::Agent::set_permission_source`]. A switch
//! ([`crate::AgentHandle::set_permission`]) asks the source for the new
//! [`PermissionSetting`], logs `permission/preset` (and `sandbox/mode` when the confinement
//! changes) at once, and takes effect at the start of the next step: the tool context gets the
//! new preset and confinement, the safety policy judges escalations against it, and the model
//! reads it in the next runtime-context message. A tool call already running finishes under
//! the preset it started with.

use std::sync::Arc;

use dsh_tools::{CommandConfinement, PermissionPreset};
use serde_json::{json, Value};

/// Everything a preset means for one session.
#[derive(Clone)]
pub struct PermissionSetting {
    /// The preset the session runs under.
    pub preset: PermissionPreset,
    /// How `bash` is confined under `preset`.
    pub confinement: Arc<dyn CommandConfinement>,
    /// `bubblewrap`, `landlock`, `unavailable` or `none`.
    pub sandbox_mode: String,
    /// Why that mode was chosen (for the log).
    pub sandbox_detail: String,
    /// One sentence for the model on what the preset allows (runtime context).
    pub summary: String,
}

impl std::fmt::Debug for PermissionSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionSetting")
            .field("preset", &self.preset)
            .field("sandbox_mode", &self.sandbox_mode)
            .field("sandbox_detail", &self.sandbox_detail)
            .finish_non_exhaustive()
    }
}

impl PermissionSetting {
    /// Data of the `permission/preset` event.
    pub fn preset_data(&self) -> Value {
        preset_data(self.preset)
    }

    /// Data of the `sandbox/mode` event.
    pub fn sandbox_data(&self) -> Value {
        sandbox_data(&self.sandbox_mode, &self.sandbox_detail)
    }
}

/// Builds the setting for a preset, or says why it cannot be used on this host.
pub type PermissionSource = Arc<
    dyn Fn(PermissionPreset) -> Result<PermissionSetting, crate::PermissionError> + Send + Sync,
>;

pub(crate) fn preset_data(preset: PermissionPreset) -> Value {
    json!({"preset": preset.as_str()})
}

pub(crate) fn sandbox_data(mode: &str, detail: &str) -> Value {
    // `[sandbox] network = "off"` shows in the detail (`dsh_sandbox::Sandbox::with_network`).
    let network = if detail.contains("no network (") {
        "off"
    } else {
        "unrestricted"
    };
    json!({"mode": mode, "detail": detail, "network": network})
}
