//! Plan mode as the ACP session mode `plan` (docs/agent.md, "Plan mode"; docs/acp.md, "Plan
//! mode"): offered beside the permission presets, entered and left with `session/set_mode` (or a
//! `/plan` prompt) through `Op::SetPlanMode`, and reported with `current_mode_update` whenever
//! `plan/mode` is logged (the protocol's `planMode` view event). The review of the plan is an
//! `ask_user_question`-style question of the broker, which [`crate::questions`] shows with
//! `session/request_permission` (Approve / Keep planning).

use dsh_agent::{AgentHandle, PLAN_COMMAND};
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

/// The `current_mode_update` of the mode in force: plan mode when `plan`, else `preset` (the
/// one plan mode goes back to).
pub(crate) fn mode_update(plan: bool, preset: Option<&str>) -> Value {
    let mode = if plan {
        PLAN_MODE_ID
    } else {
        preset.unwrap_or("workspace-write")
    };
    json!({"sessionUpdate": "current_mode_update", "currentModeId": mode})
}
