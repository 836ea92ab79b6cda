//! Permission presets as ACP session modes: offered in the `session/new` and `session/load`
//! results (`modes`), switched with `session/set_mode` or a `/permission <preset>` prompt
//! (both `Op::SetPreset`), and reported with `current_mode_update` when they change.

use dsh_protocol::{Op, SessionControl};
use dsh_tools::PermissionPreset;
use serde_json::{json, Value};

use crate::rpc::Outgoing;

/// The presets offered as modes, from the most to the least restricted.
pub const MODES: [PermissionPreset; 4] = PermissionPreset::ALL;

fn name(preset: PermissionPreset) -> &'static str {
    match preset {
        PermissionPreset::ReadOnly => "Read only",
        PermissionPreset::Ask => "Ask",
        PermissionPreset::WorkspaceWrite => "Workspace write",
        PermissionPreset::DangerFullAccess => "Full access",
    }
}

fn description(preset: PermissionPreset) -> &'static str {
    match preset {
        PermissionPreset::ReadOnly => {
            "Reads and searches; no file changes, commands run in a read-only sandbox"
        }
        PermissionPreset::WorkspaceWrite => {
            "Edits files in the project and temp directories; commands sandboxed to them"
        }
        PermissionPreset::DangerFullAccess => "No restrictions: commands run unconfined",
        PermissionPreset::Ask => {
            "Sandboxed as workspace write, and every edit, command and MCP tool that may change \
             something asks for your approval first"
        }
    }
}

/// The `modes` object of a session result (`SessionModeState`).
pub(crate) fn mode_state(current: PermissionPreset) -> Value {
    let available: Vec<Value> = MODES
        .iter()
        .map(|preset| {
            json!({
                "id": preset.as_str(),
                "name": name(*preset),
                "description": description(*preset),
            })
        })
        .collect();
    json!({"currentModeId": current.as_str(), "availableModes": available})
}

/// Switches the session's preset. When it changed, tells the client with a
/// `current_mode_update`; returns whether it changed, or the user-facing reason it cannot.
pub(crate) fn switch(
    control: &SessionControl,
    out: &Outgoing,
    preset: PermissionPreset,
) -> Result<bool, String> {
    let handle = control.handle();
    let before = handle.permission();
    control
        .submit(Op::SetPreset(preset))
        .map_err(|error| error.message)?;
    let changed = before != preset;
    if changed {
        out.notify(
            "session/update",
            json!({"sessionId": handle.session_id(), "update": {
                "sessionUpdate": "current_mode_update",
                "currentModeId": preset.as_str(),
            }}),
        );
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_the_four_presets() {
        let state = mode_state(PermissionPreset::WorkspaceWrite);
        assert_eq!(state["currentModeId"], "workspace-write");
        let ids: Vec<&str> = state["availableModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str())
            .collect();
        assert_eq!(
            ids,
            ["read-only", "ask", "workspace-write", "danger-full-access"]
        );
    }
}
