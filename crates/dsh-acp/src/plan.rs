//! Plan mode as the ACP session mode `plan` (docs/agent.md, "Plan mode"; docs/acp.md, "Plan
//! mode"): offered beside the permission presets, entered and left with `session/set_mode` (or a
//! `/plan` prompt), and reported with `current_mode_update` whenever `plan/mode` is logged. The
//! review of the plan is an `ask_user_question`-style question, which `AcpAsker` shows with
//! `session/request_permission` (Approve / Keep planning).

use dsh_agent::{AgentHandle, PERMISSION_PRESET_EVENT, PLAN_COMMAND, PLAN_MODE_EVENT};
use serde_json::{json, Value};

/// The mode id of plan mode.
pub(crate) const PLAN_MODE_ID: &str = "plan";

/// `modes` (a `SessionModeState`) with plan mode added when the session offers it (its `/plan`
/// command), current when it is on.
pub(crate) fn with_plan_mode(mut state: Value, handle: &AgentHandle) -> Value {
    let offered = handle
        .user_commands()
        .iter()
        .any(|command| command.name == PLAN_COMMAND);
    if !offered {
        return state;
    }
    if let Some(available) = state
        .get_mut("availableModes")
        .and_then(Value::as_array_mut)
    {
        available.push(json!({
            "id": PLAN_MODE_ID,
            "name": "Plan",
            "description": "Explores read-only and presents a plan for your review before \
                            changing anything",
        }));
    }
    if handle.plan_mode() {
        state["currentModeId"] = json!(PLAN_MODE_ID);
    }
    state
}

/// Enters (`on`) or leaves plan mode through the `/plan` command of the session; the mode
/// update reaches the client through the logged `plan/mode` ([`live_update`]).
pub(crate) fn switch(handle: &AgentHandle, on: bool) -> Result<(), String> {
    if handle.plan_mode() == on {
        return Ok(());
    }
    let arguments = if on { "" } else { "off" };
    handle
        .run_user_command(PLAN_COMMAND, arguments)
        .map_err(crate::modes::user_message)
}

/// Follows `permission/preset` (into `preset`) and turns `plan/mode` into the
/// `current_mode_update` of the mode now in force.
pub(crate) fn live_update(
    preset: &mut Option<String>,
    event_type: &str,
    data: &Value,
) -> Option<Value> {
    if event_type == PERMISSION_PRESET_EVENT {
        *preset = data
            .get("preset")
            .and_then(Value::as_str)
            .map(str::to_string);
        return None;
    }
    if event_type != PLAN_MODE_EVENT {
        return None;
    }
    let active = data.get("active").and_then(Value::as_bool)?;
    let mode = if active {
        PLAN_MODE_ID.to_string()
    } else {
        preset
            .clone()
            .unwrap_or_else(|| "workspace-write".to_string())
    };
    Some(json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}))
}
