//! The children of one agent: their names, states, usage and live loops (docs/agent.md,
//! "Delegation"). A child is continuable: after its run ends, its agent is kept (or reopened
//! from its log after a resume) so `send_message` can start another turn on the same
//! conversation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_llm::{LockExt, UsageTotals};
use dsh_session::{load_file, Event, TurnEndReason};
use serde_json::{json, Value};

use crate::agent::{Agent, AgentHandle};

/// The event type of a child's descriptor, dsh's `subagent/descriptor` (docs/sessions.md,
/// "Children"): label, model and, in this build, the child's name.
pub(crate) const DESCRIPTOR: &str = "subagent/descriptor";

/// Where a child is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// A turn is running (or queued input is being worked on).
    Running,
    /// Its last run completed; it waits for `send_message`.
    Idle,
    /// Its last run failed (the reason).
    Failed(String),
    /// Its last run was cancelled or interrupted.
    Cancelled,
    /// It was running when the parent's process stopped (found so on resume); its partial log
    /// is kept and `send_message` continues it.
    Interrupted,
}

/// The state a child is left in when a turn of it ends for `reason`: `idle`, `cancelled`,
/// `interrupted` (crash repair closed the turn) or `failed`, as `list_agents` names it.
pub fn child_state_after(reason: &TurnEndReason) -> &'static str {
    ChildState::after(reason).as_str()
}

impl ChildState {
    /// The state after a turn that ended for `reason`.
    pub(crate) fn after(reason: &TurnEndReason) -> ChildState {
        match reason {
            TurnEndReason::Completed => ChildState::Idle,
            TurnEndReason::Aborted { .. } => ChildState::Cancelled,
            // Crash repair closed the turn: the process stopped while it ran, as a child found
            // running on resume (front ends show both as cancelled, docs/protocol.md).
            TurnEndReason::Interrupted => ChildState::Interrupted,
            other => ChildState::Failed(other.kind().to_string()),
        }
    }

    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            ChildState::Running => "running",
            ChildState::Idle => "idle",
            ChildState::Failed(_) => "failed",
            ChildState::Cancelled => "cancelled",
            ChildState::Interrupted => "interrupted",
        }
    }
}

/// What changes while a child lives.
pub(crate) struct Status {
    pub(crate) state: ChildState,
    /// Milliseconds since the epoch of the last start or end of a run.
    pub(crate) last_activity: u64,
    /// Every turn of every run, failed and cancelled ones included.
    pub(crate) usage: UsageTotals,
    /// The last run's final text.
    pub(crate) last_text: String,
    /// The live loop's handle while the agent exists.
    pub(crate) handle: Option<AgentHandle>,
    /// Messages sent before a run that was already claimed got hold of the loop; that run
    /// queues them.
    pub(crate) queued: Vec<String>,
    /// `interrupt_agent` stopped the current run: it ends after the interrupted turn, and the
    /// input still queued stays parked until the next `send_message` (dsh's `keepInbox`).
    pub(crate) parked: bool,
}

/// One child of this agent.
pub(crate) struct Child {
    /// Unique in the parent's session and kept in the child's descriptor (`agent-N`).
    pub(crate) name: String,
    /// The child's session id.
    pub(crate) id: String,
    /// The `description` it was started with.
    pub(crate) label: String,
    /// Its `session.jsonl`.
    pub(crate) log: PathBuf,
    /// The model it runs.
    pub(crate) model: String,
    /// The reasoning effort it was started with, if one was asked for.
    pub(crate) effort: Option<String>,
    /// Its delegation depth.
    pub(crate) depth: u64,
    /// Its descriptor names it (started by this build; dsh's children have no name).
    pub(crate) named: bool,
    /// Prices to report its cost with (the parts' table; none for a child read back from a
    /// log before it runs again).
    pub(crate) prices: dsh_session::PriceTable,
    pub(crate) status: Mutex<Status>,
    /// The loop between runs (`None` while a run holds it, or before it is reopened from its
    /// log after a resume). Runs take this lock, so one child runs one loop at a time.
    pub(crate) agent: tokio::sync::Mutex<Option<Agent>>,
}

impl Child {
    /// Who the child is, for the live feed.
    pub(crate) fn identity(&self) -> super::ChildIdentity {
        super::ChildIdentity {
            id: self.id.clone(),
            name: self.name.clone(),
            label: self.label.clone(),
            model: self.model.clone(),
            depth: self.depth,
            log: self.log.clone(),
        }
    }

    /// Its cost so far by its price table, when the table prices its model.
    pub(crate) fn cost(&self) -> Option<f64> {
        let usage = self.status.lock_or_recover().usage;
        let mut by_model = BTreeMap::new();
        by_model.insert(self.model.clone(), usage);
        self.prices.cost(&by_model)
    }

    /// The child's usage, state and identity for `list_agents` and tool data.
    pub(crate) fn describe(&self, now: u64) -> Value {
        let status = self.status.lock_or_recover();
        json!({
            "name": self.name,
            "id": self.id,
            "label": self.label,
            "state": status.state.as_str(),
            "model": self.model,
            "effort": self.effort,
            "lastActivityMsAgo": now.saturating_sub(status.last_activity),
            "usage": serde_json::to_value(status.usage).unwrap_or(Value::Null),
            "log": self.log.display().to_string(),
        })
    }
}

/// The children of one agent, by name, in creation order.
#[derive(Default)]
pub(crate) struct Registry {
    children: Mutex<Vec<Arc<Child>>>,
    /// The highest `agent-N` number used, so names stay unique across resume.
    last_number: Mutex<u64>,
}

impl Registry {
    /// A fresh name (`agent-N`), never used before in this session.
    pub(crate) fn next_name(&self) -> String {
        let mut last = self.last_number.lock_or_recover();
        *last += 1;
        format!("agent-{}", *last)
    }

    pub(crate) fn insert(&self, child: Arc<Child>) {
        self.note_name(&child.name);
        self.children.lock_or_recover().push(child);
    }

    fn note_name(&self, name: &str) {
        if let Some(n) = name
            .strip_prefix("agent-")
            .and_then(|n| n.parse::<u64>().ok())
        {
            let mut last = self.last_number.lock_or_recover();
            *last = (*last).max(n);
        }
    }

    pub(crate) fn all(&self) -> Vec<Arc<Child>> {
        self.children.lock_or_recover().clone()
    }

    /// The child called `key`: its name, its session id, or a unique prefix (8 or more
    /// characters) of its id.
    pub(crate) fn find(&self, key: &str) -> Option<Arc<Child>> {
        let key = key.trim();
        let children = self.children.lock_or_recover();
        if let Some(child) = children.iter().find(|c| c.name == key || c.id == key) {
            return Some(Arc::clone(child));
        }
        if key.len() < 8 {
            return None;
        }
        let mut matches = children.iter().filter(|c| c.id.starts_with(key));
        match (matches.next(), matches.next()) {
            (Some(child), None) => Some(Arc::clone(child)),
            _ => None,
        }
    }

    /// Learns the children already in `folder/subagents/` (a resumed session): finished ones
    /// with their last answer, running ones marked interrupted. Logs that cannot be read or
    /// belong to another parent are skipped.
    pub(crate) fn load_existing(&self, folder: &Path, parent_id: &str, depth: u64) {
        let known: Vec<String> = self.all().iter().map(|c| c.id.clone()).collect();
        for stored in read_children(folder) {
            if stored.parent.as_deref() != Some(parent_id) || known.contains(&stored.id) {
                continue;
            }
            let named = stored.name.is_some();
            let name = stored.name.clone().unwrap_or_else(|| self.next_name());
            self.insert(Arc::new(Child {
                name,
                id: stored.id,
                label: stored.label,
                log: stored.log,
                model: stored.model,
                effort: stored.effort,
                depth,
                named,
                prices: dsh_session::PriceTable::default(),
                status: Mutex::new(Status {
                    state: stored.state,
                    last_activity: stored.last_activity,
                    usage: stored.usage,
                    last_text: stored.last_text,
                    handle: None,
                    queued: Vec::new(),
                    parked: false,
                }),
                agent: tokio::sync::Mutex::new(None),
            }));
        }
    }
}

/// A child as read from its log (for resume and `dsh sessions show --children`).
#[derive(Debug, Clone)]
pub struct StoredChild {
    /// The name from its descriptor (`agent-N`), if it has one (dsh's logs do not).
    pub name: Option<String>,
    /// The child's session id.
    pub id: String,
    /// The session that started it (`parentSession`).
    pub parent: Option<String>,
    /// The descriptor's label (the `description` it was started with).
    pub label: String,
    /// The model of its last request (or its descriptor's).
    pub model: String,
    /// The reasoning effort it was started with.
    pub effort: Option<String>,
    /// The path of its log.
    pub log: PathBuf,
    /// Its working directory (the header's `cwd`).
    pub cwd: String,
    /// `interrupted` when its last turn never ended.
    state: ChildState,
    /// Its usage, by model: every billed call its log records, its own children's included
    /// (docs/sessions.md, "Cost").
    pub usage_by_model: BTreeMap<String, UsageTotals>,
    /// Its usage over all models.
    pub usage: UsageTotals,
    /// The final text of its last turn.
    pub last_text: String,
    /// Time of its last event that has one, else its creation.
    last_activity: u64,
}

impl StoredChild {
    /// `idle`, `failed`, `cancelled` or `interrupted` (a stored child is not running).
    pub fn state(&self) -> &'static str {
        self.state.as_str()
    }
}

/// Every child log directly below `folder/subagents/`, oldest first.
pub fn read_children(folder: &Path) -> Vec<StoredChild> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder.join("subagents")) else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(log) = dsh_session::session_file_in(&entry.path()) else {
            continue;
        };
        if let Some(child) = read_child(&log) {
            out.push(child);
        }
    }
    out.sort_by_key(|c| c.last_activity);
    out.sort_by_key(name_number);
    out
}

fn name_number(child: &StoredChild) -> u64 {
    child
        .name
        .as_deref()
        .and_then(|n| n.strip_prefix("agent-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

fn read_child(log: &Path) -> Option<StoredChild> {
    let loaded = load_file(log).ok()?;
    let mut child = StoredChild {
        name: None,
        id: loaded.header.id.clone(),
        parent: loaded.header.parent_session.clone(),
        label: String::new(),
        model: String::new(),
        effort: None,
        log: log.to_path_buf(),
        cwd: loaded.header.cwd.clone(),
        state: ChildState::Idle,
        usage_by_model: BTreeMap::new(),
        usage: UsageTotals::default(),
        last_text: String::new(),
        last_activity: loaded.header.created_at,
    };
    let mut open_turn = false;
    let mut ledger = dsh_session::UsageLedger::new();
    for envelope in &loaded.events {
        if let Some(ts) = envelope.time {
            child.last_activity = child.last_activity.max(ts);
        }
        ledger.push(&envelope.event);
        match &envelope.event {
            Event::DshOnly(event) if event.event_type() == DESCRIPTOR => {
                let data = event.data();
                let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_string);
                child.name = text("name");
                child.label = text("label").unwrap_or_default();
                child.model = text("agentModel").unwrap_or_default();
                child.effort = text("effort");
            }
            Event::TurnStart(_) => open_turn = true,
            Event::TurnEnd(end) => {
                open_turn = false;
                child.state = ChildState::after(&end.reason);
            }
            Event::AssistantMessage(message) => {
                if let dsh_llm::MessageSource::Model { model, .. } = &message.message.source {
                    child.model = model.clone();
                }
                let text = message.message.text();
                if !text.trim().is_empty() {
                    child.last_text = text;
                }
            }
            _ => {}
        }
    }
    if open_turn {
        child.state = ChildState::Interrupted;
    }
    child.usage = ledger.total();
    child.usage_by_model = ledger.by_model().clone();
    Some(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_crash_repair_closed_leaves_the_child_interrupted_not_failed() {
        assert_eq!(
            child_state_after(&TurnEndReason::Interrupted),
            "interrupted"
        );
        assert_eq!(child_state_after(&TurnEndReason::MaxTokens), "failed");
        assert_eq!(child_state_after(&TurnEndReason::Completed), "idle");
        assert_eq!(
            child_state_after(&TurnEndReason::Aborted { reason: None }),
            "cancelled"
        );
    }
}
