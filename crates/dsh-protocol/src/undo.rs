//! `/undo` (docs/protocol.md, "Undo"), from the snapshots `write` and `edit` keep before changing
//! a file (docs/tools.md, "Snapshots"). It reads the session log: every successful
//! `tool/result` whose `meta.snapshot` names a change, numbered by its turn, and the
//! `files/undo` events of earlier undos.
//!
//! Undo reverts the latest turn with file changes that was not undone yet: it refuses, and
//! changes nothing, when one of its files changed since (another tool call, `bash`, an editor);
//! otherwise it restores the files, deletes the ones the turn created, logs `files/undo`
//! (docs/sessions.md) and queues a note for the model's next turn. Changes made by `bash` are not
//! covered, and the message says so. Every front end undoes through [`crate::Op::Undo`].

use std::collections::HashSet;
use std::path::Path;

use dsh_agent::AgentHandle;
use dsh_session::{Envelope, Event};
use dsh_tools::{apply_undo, plan_undo, FileSnapshot};
use serde_json::json;

/// The event an undo logs.
pub const UNDO_EVENT: &str = "files/undo";

/// The file changes of the log: `(turn, change)` in log order, and the turns undone since.
pub fn changes(events: &[Envelope]) -> (Vec<(u64, FileSnapshot)>, HashSet<u64>) {
    let mut changes = Vec::new();
    let mut undone = HashSet::new();
    for envelope in events {
        match &envelope.event {
            Event::ToolResult(result) if result.error.is_none() => {
                if let Some(snapshot) = result.meta.as_ref().and_then(FileSnapshot::from_data) {
                    changes.push((result.turn, snapshot));
                }
            }
            Event::Opaque { event_type, data } if event_type == UNDO_EVENT => {
                if let Some(turn) = data.get("turn").and_then(|t| t.as_u64()) {
                    undone.insert(turn);
                }
            }
            _ => {}
        }
    }
    (changes, undone)
}

/// What an undo did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoReport {
    /// True when files were reverted (an info notice); false for a refusal (an error notice).
    pub done: bool,
    /// The message.
    pub message: String,
}

const BASH_NOTE: &str = "changes made by bash commands are not tracked and were not reverted";

/// Undoes the latest turn with file changes of the session behind `handle`, whose log holds `events`; files are shown relative
/// to `cwd`.
pub fn undo_last_turn(events: &[Envelope], handle: &AgentHandle, cwd: &Path) -> UndoReport {
    let (changes, undone) = changes(events);
    let Some(turn) = changes
        .iter()
        .map(|(turn, _)| *turn)
        .filter(|turn| !undone.contains(turn))
        .max()
    else {
        return UndoReport {
            done: false,
            message: format!("nothing to undo: no turn of this session changed files with write or edit that was not undone already ({BASH_NOTE})"),
        };
    };
    let turn_changes: Vec<FileSnapshot> = changes
        .into_iter()
        .filter(|(t, _)| *t == turn)
        .map(|(_, change)| change)
        .collect();
    let show = |path: &Path| path.strip_prefix(cwd).unwrap_or(path).display().to_string();
    let steps = match plan_undo(&turn_changes) {
        Ok(steps) => steps,
        Err(conflicts) => {
            let list: Vec<String> = conflicts
                .iter()
                .map(|c| format!("{} {}", show(&c.path), c.reason))
                .collect();
            return UndoReport {
                done: false,
                message: format!(
                    "cannot undo turn {turn}: {}; nothing was reverted. Revert those files by hand (/diff shows the session's changes)",
                    list.join(", ")
                ),
            };
        }
    };
    let (done, failure) = match apply_undo(&steps) {
        Ok(done) => (done, None),
        Err((done, message)) => (done, Some(message)),
    };
    let files: Vec<serde_json::Value> = steps
        .iter()
        .filter(|step| done.iter().any(|d| d == step.path()))
        .map(|step| {
            let action = match step {
                dsh_tools::UndoStep::Restore { .. } => "restored",
                dsh_tools::UndoStep::Delete { .. } => "deleted",
            };
            json!({"path": step.path(), "action": action})
        })
        .collect();
    let described: Vec<String> = steps
        .iter()
        .filter(|step| done.iter().any(|d| d == step.path()))
        .map(|step| match step {
            dsh_tools::UndoStep::Restore { path, .. } => format!("{} (restored)", show(path)),
            dsh_tools::UndoStep::Delete { path } => {
                format!("{} (deleted: the turn created it)", show(path))
            }
        })
        .collect();
    if !done.is_empty() {
        let event = Event::Opaque {
            event_type: UNDO_EVENT.to_string(),
            data: json!({"turn": turn, "files": files, "complete": failure.is_none()}),
        };
        let note = format!(
            "The user ran /undo: the file changes your write/edit calls made in turn {turn} were reverted: {}. Changes made by bash commands were not reverted. Read these files again before you change them.",
            described.join(", ")
        );
        let logged = handle
            .log_event(event)
            .and_then(|_| handle.inject(dsh_agent::plugin_message("dsh", UNDO_EVENT, note)));
        if let Err(err) = logged {
            return UndoReport {
                done: false,
                message: format!(
                    "reverted {} but could not log it ({err}); the model does not know, tell it",
                    described.join(", ")
                ),
            };
        }
    }
    match failure {
        None => UndoReport {
            done: true,
            message: format!("undid turn {turn}: {}; {BASH_NOTE}", described.join(", ")),
        },
        Some(message) => UndoReport {
            done: false,
            message: if described.is_empty() {
                format!("{message}; nothing was reverted")
            } else {
                format!("{message}; already reverted: {}", described.join(", "))
            },
        },
    }
}
