//! The built-in tools (docs/tools.md), with dsh's names and parameters.

mod bash;
// Windows has no descriptor walk: `beneath_windows.rs` is the same interface by path.
#[cfg_attr(windows, path = "beneath_windows.rs")]
pub(crate) mod beneath;
mod edit;
mod file_change;
mod glob;
mod grep;
mod read;
mod read_image;
pub(crate) mod search;
mod todo;
mod write;

use std::sync::Arc;

pub use bash::BashTool;
pub use beneath::{is_temp_name, remove_leftover_temps, TEMP_PREFIX};
pub use edit::EditTool;
pub(crate) use file_change::line_diff;
pub use glob::{GlobTool, GLOB_MAX_RESULTS};
pub use grep::{GrepTool, GREP_MAX_RESULTS};
pub use read::ReadTool;
pub use read_image::ReadImageTool;
pub use todo::{TodoItem, TodoStatus, TodoWriteTool};
pub use write::WriteTool;

use serde_json::{json, Value};

use crate::tool::Tool;

/// The escalation sentence of the `bash`, `write` and `edit` descriptions: when and how to ask
/// for a wider preset for one call (docs/SECURITY.md, "Escalation"). The approval itself is the
/// agent's safety policy's business; the tool only runs with what was granted.
pub(crate) fn escalation_text(subject: &str) -> String {
    format!(
        "Escalation: when the session's permission preset denied this {subject} (a sandbox or PERMISSION_DENIED refusal) and a wider preset would let it succeed, retry the very same {subject} once, right away in the same turn, with `sandbox_permissions` set to the narrowest wider preset that suffices (`workspace-write` or `danger-full-access`) and a one-sentence `justification` for the user; that retry is how the user is asked, so do not stop to ask in chat first. \
Only escalate after a real denial (this one, or the same access already denied in this session), never up front; when the session says nobody can approve, do not set `sandbox_permissions` at all. \
A rejected escalation is final for that {subject}: stop and explain instead of working around it (other calls may still be tried, and escalated, later)."
    )
}

/// The `sandbox_permissions` and `justification` properties of an escalatable tool's schema.
pub(crate) fn escalation_properties(subject: &str) -> [(&'static str, Value); 2] {
    [
        (
            "sandbox_permissions",
            json!({
                "type": "string",
                "enum": ["workspace-write", "danger-full-access"],
                "description": format!("The wider permission preset this {subject} needs. Only as a one-time retry of a {subject} the preset just denied; needs `justification` and the user's approval.")
            }),
        ),
        (
            "justification",
            json!({
                "type": "string",
                "description": format!("Required with sandbox_permissions: one sentence for the user on why this exact {subject} needs the wider access.")
            }),
        ),
    ]
}

/// Adds the escalation properties to `schema` (an object schema with `properties`).
pub(crate) fn with_escalation(mut schema: Value, subject: &str) -> Value {
    if let Some(properties) = schema["properties"].as_object_mut() {
        for (name, spec) in escalation_properties(subject) {
            properties.insert(name.to_string(), spec);
        }
    }
    schema
}

/// One instance of each built-in tool: `bash`, `edit`, `glob`, `grep`, `read`, `todo_write`,
/// `write`.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(BashTool),
        Arc::new(EditTool),
        Arc::new(GlobTool::default()),
        Arc::new(GrepTool::default()),
        Arc::new(ReadTool),
        Arc::new(TodoWriteTool),
        Arc::new(WriteTool),
    ]
}
