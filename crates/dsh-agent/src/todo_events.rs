//! Built-in extension: log `todo/write` when the todo tool replaced the list, so front ends and
//! resume can show the plan without parsing tool results.

use dsh_session::{Event, TodoItem, TodoWrite};

use crate::extension::{Extension, ToolPostContext};

/// Emits `todo/write` from the structured data of a successful `todo_write` call.
pub struct TodoEvents;

impl Extension for TodoEvents {
    fn name(&self) -> &str {
        "todo-events"
    }

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        if ctx.call.name != "todo_write" {
            return;
        }
        let Ok(output) = &*ctx.outcome else { return };
        let Some(todos) = output.data.as_ref().and_then(|d| d.get("todos")) else {
            return;
        };
        let Ok(todos) = serde_json::from_value::<Vec<TodoItem>>(todos.clone()) else {
            return;
        };
        ctx.log_events.push(Event::TodoWrite(TodoWrite { todos }));
    }
}
