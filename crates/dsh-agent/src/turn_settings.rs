//! Settings one turn runs with instead of the session's ([`crate::TurnSettings`]): the tool
//! filter and model of a custom slash command (docs/commands.md, "Front matter").
//!
//! [`AgentHandle::run_user_command`] queues the command's message and keeps its settings under
//! the message's id, logged as `user/command` (so a resumed session keeps them for a message
//! still queued). The turn that claims the message applies them: its requests offer only the
//! tools the filter admits and go to the command's model; when the turn ends the session's
//! model is back. A `/model` or `/effort` switch made during that turn is the user's choice
//! and stays.

use dsh_llm::{CallConfig, LockExt, Message};
use dsh_session::{Envelope, Event};
use serde_json::{json, Map, Value};

use crate::{Agent, AgentError, AgentHandle, CommandExpansion, ToolFilter, TurnSettings};

/// `user/command {name, messageId, origin, model?, tools?: {allowed, disallowed}}`: a slash command of a file
/// (docs/commands.md) queued the message `messageId`; the turn that claims it runs with the
/// model and tools given. Never model-visible.
pub const USER_COMMAND_EVENT: &str = dsh_session::USER_COMMAND_EVENT;

/// What the turn running now changed, to undo at its end.
#[derive(Debug, Default)]
pub(crate) struct ActiveTurnSettings {
    /// Every claimed command's filter: a tool is offered only when all of them admit it.
    pub(crate) filters: Vec<ToolFilter>,
    /// The session's call config to restore when the turn ends (`None`: the model was not
    /// switched, or the user switched it meanwhile).
    pub(crate) restore: Option<CallConfig>,
}

impl ActiveTurnSettings {
    /// True when `name` is offered in this turn.
    pub(crate) fn admits(&self, name: &str) -> bool {
        self.filters.iter().all(|filter| filter.admits(name))
    }
}

fn allowed_of(filter: &ToolFilter) -> Value {
    json!({"allowed": filter.allowed, "disallowed": filter.disallowed})
}

fn filter_of(value: &Value) -> Option<ToolFilter> {
    let list = |key: &str| -> Vec<String> {
        value
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    value.is_object().then(|| ToolFilter {
        allowed: list("allowed"),
        disallowed: list("disallowed"),
    })
}

impl AgentHandle {
    /// Queues the message of an expanded command, with its turn settings and its record.
    pub(crate) fn queue_expansion(
        &self,
        name: &str,
        expansion: CommandExpansion,
    ) -> Result<(), AgentError> {
        let message = crate::new_user_message(expansion.text);
        if let Some(origin) = &expansion.origin {
            let mut data = Map::new();
            data.insert("name".into(), json!(name));
            data.insert("messageId".into(), json!(message.id));
            data.insert("origin".into(), json!(origin));
            if let Some(model) = &expansion.turn.model {
                data.insert("model".into(), json!(model));
            }
            if let Some(filter) = &expansion.turn.tool_filter {
                data.insert("tools".into(), allowed_of(filter));
            }
            self.shared.log().append(Event::Opaque {
                event_type: USER_COMMAND_EVENT.to_string(),
                data: Value::Object(data),
            })?;
        }
        if !expansion.turn.is_empty() {
            self.shared
                .command_turns
                .lock_or_recover()
                .push((message.id.clone(), expansion.turn.clone()));
        }
        let queued = self.followup_message(message.clone());
        if queued.is_err() {
            self.shared
                .command_turns
                .lock_or_recover()
                .retain(|(id, _)| *id != message.id);
        }
        queued
    }
}

/// The turn settings of the messages still queued in `pending`, from the `user/command`
/// events of a resumed log.
pub(crate) fn restore_settings(
    events: &[Envelope],
    pending: &[Message],
) -> Vec<(String, TurnSettings)> {
    let mut out = Vec::new();
    for envelope in events {
        let Event::Opaque { event_type, data } = &envelope.event else {
            continue;
        };
        if event_type != USER_COMMAND_EVENT {
            continue;
        }
        let Some(id) = data.get("messageId").and_then(Value::as_str) else {
            continue;
        };
        if !pending.iter().any(|m| m.id == id) {
            continue;
        }
        let settings = TurnSettings {
            tool_filter: data.get("tools").and_then(filter_of),
            model: data
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        if !settings.is_empty() {
            out.push((id.to_string(), settings));
        }
    }
    out
}

impl Agent {
    /// Applies the settings of the commands whose messages the turn claimed (`claimed`).
    pub(crate) fn begin_turn_settings(&mut self, claimed: &[Message]) {
        let settings: Vec<TurnSettings> = {
            let mut waiting = self.shared.command_turns.lock_or_recover();
            let mut taken = Vec::new();
            waiting.retain(|(id, settings)| {
                let mine = claimed.iter().any(|m| m.id == *id);
                if mine {
                    taken.push(settings.clone());
                }
                !mine
            });
            taken
        };
        self.turn_settings = ActiveTurnSettings {
            filters: settings
                .iter()
                .filter_map(|s| s.tool_filter.clone())
                .collect(),
            restore: None,
        };
        // With several commands in one turn, the first that names a model chooses it.
        let Some(model) = settings.iter().find_map(|s| s.model.clone()) else {
            return;
        };
        // A `/model` or `/effort` queued before the command is the session's setting to
        // come back to; it is applied (and checked) when the turn ends.
        let pending = self.shared.call_change.lock_or_recover().take();
        let session = pending.unwrap_or_else(|| self.options.call.clone());
        let mut call = session.clone();
        call.model = model;
        let Ok(adapter) = self.adapter_for(&call.provider) else {
            // The route is the session's: if it were gone, the next request says so.
            *self.shared.call_change.lock_or_recover() = Some(session);
            return;
        };
        let info = adapter
            .model_info(&call.model)
            .unwrap_or_else(|| crate::generic_model_info(&call.model));
        // The session's effort may not suit the command's model: then the provider's default
        // applies for the turn.
        if call.clone().prepare(&info).is_err() && call.reasoning_effort.is_some() {
            call.reasoning_effort = None;
        }
        self.options.call = call;
        self.handle().set_takes_images(dsh_llm::takes_images(&info));
        self.model_info = info;
        self.turn_settings.restore = Some(session);
    }

    /// Undoes the turn's settings: the session's model comes back with the next request, as a
    /// `/model` switch does, unless the user switched it during the turn.
    pub(crate) fn end_turn_settings(&mut self) {
        let active = std::mem::take(&mut self.turn_settings);
        if let Some(session) = active.restore {
            self.handle().set_call(session);
        }
    }
}
