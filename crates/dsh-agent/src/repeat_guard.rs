//! Built-in extension: reminders for repeated identical tool calls (docs/agent.md, "Guards").
//!
//! Identical means same tool name and same arguments once object keys are sorted. Consecutive
//! identical calls are counted within a turn; at the 3rd, 5th and 8th a reminder is queued for the
//! next step (as an `inject`, so it lands in the log as an ordinary `user/message`).

use dsh_llm::LockExt;
use std::sync::Mutex;

use dsh_llm::{ContentBlock, Message, MessageSource, Role};
use serde_json::{Map, Value};

use crate::extension::{canonical_arguments, Extension, ToolPostContext};

/// Counts consecutive identical tool calls and queues reminders.
#[derive(Default)]
pub struct RepeatCallGuard {
    state: Mutex<RepeatState>,
}

#[derive(Default)]
struct RepeatState {
    turn: u64,
    key: Option<(String, String)>,
    count: u32,
}

/// Repetition counts at which a reminder is sent.
const REMIND_AT: [u32; 3] = [3, 5, 8];

impl RepeatCallGuard {
    /// A guard with no history.
    pub fn new() -> Self {
        Self::default()
    }
}

fn reminder(name: &str, arguments: &str, count: u32) -> Message {
    let text = if count < 5 {
        format!(
            "Note: you have now called `{name}` {count} times in a row with identical arguments. \
             Read the last result carefully before calling again; if the task is not done, change \
             the approach or the arguments rather than repeating the call."
        )
    } else {
        format!(
            "Repeated tool call: `{name}` has been called {count} times in a row with the same \
             arguments ({arguments}) and it is not making progress. Do not call it with these \
             arguments again. Use the latest result to choose a different action, or finish the \
             task if you already have what you need."
        )
    };
    let mut extra = Map::new();
    extra.insert(
        "summary".to_string(),
        Value::String(format!("{name} \u{d7} {count}")),
    );
    Message {
        id: uuid::Uuid::new_v4().to_string(),
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        source: MessageSource::Plugin {
            plugin: "repeat-tool-reminder".to_string(),
            form: Some("notice".to_string()),
            extra,
        },
    }
}

impl Extension for RepeatCallGuard {
    fn name(&self) -> &str {
        "repeat-tool-reminder"
    }

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        let arguments = canonical_arguments(&ctx.call.arguments);
        let key = (ctx.call.name.clone(), arguments);
        let mut state = self.state.lock_or_recover();
        if state.turn != ctx.call.turn {
            *state = RepeatState {
                turn: ctx.call.turn,
                ..RepeatState::default()
            };
        }
        if state.key.as_ref() == Some(&key) {
            state.count += 1;
        } else {
            state.key = Some(key);
            state.count = 1;
        }
        if REMIND_AT.contains(&state.count) {
            if let Some((name, arguments)) = &state.key {
                ctx.inject_next_step
                    .push(reminder(name, arguments, state.count));
            }
        }
    }
}
