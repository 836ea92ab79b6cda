//! `todo_write`: the model's task list, replaced as a whole on every call.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::args::parse_args;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::presentation::{ToolKind, ToolPresentation, ToolView};
use crate::tool::Tool;

const DESCRIPTION: &str = "Replaces the task list for the current work with `todos` (send the whole list every time; there are no partial updates). \
Each item has `content` (a short imperative line) and `status`: `pending`, `in_progress` or `completed`. \
Use it to plan work of several steps and to show progress: mark an item `in_progress` when you start it and `completed` as soon as it is done. Skip it for trivial one-step tasks. \
The result is `Updated todo list: P pending, I in progress, C completed.` followed by the list, one item per line as `[ ]`, `[~]` or `[x]`. \
An unknown status or a missing field fails with `Error:` (INVALID_ARGS) and leaves the list unchanged.";

/// The `todo_write` tool. Stateless: the new list is returned as the output's data
/// (`{"todos": [...]}`, the payload of the `todo/write` session event) and the loop keeps it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TodoWriteTool;

/// The status of a todo item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on now.
    InProgress,
    /// Done.
    Completed,
}

/// One todo item. Fields beyond `content` and `status` that a model sends (dsh-era `id`,
/// `activeForm`, `priority`) are kept verbatim in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoItem {
    /// What the task is.
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct TodoArgs {
    todos: Vec<TodoItem>,
}

impl Tool for TodoWriteTool {
    /// No subject of its own (front ends show the arguments, or the list itself).
    fn present(&self, _args: &Value) -> ToolPresentation {
        ToolPresentation::new(self.name())
            .kind(ToolKind::Think)
            .view(ToolView::Todos)
    }

    fn name(&self) -> &str {
        "todo_write"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "The complete task list; it replaces the previous one.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "description": "The task, as a short imperative line."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"], "description": "pending, in_progress or completed."}
                        },
                        "required": ["content", "status"]
                    }
                }
            },
            "required": ["todos"]
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: TodoArgs = parse_args("todo_write", args)?;
            Ok(render(args.todos))
        })
    }
}

fn render(todos: Vec<TodoItem>) -> ToolOutput {
    let count = |status| todos.iter().filter(|t| t.status == status).count();
    let (pending, active, done) = (
        count(TodoStatus::Pending),
        count(TodoStatus::InProgress),
        count(TodoStatus::Completed),
    );
    let mut text =
        format!("Updated todo list: {pending} pending, {active} in progress, {done} completed.");
    for todo in &todos {
        let mark = match todo.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[~]",
            TodoStatus::Completed => "[x]",
        };
        text.push('\n');
        text.push_str(mark);
        text.push(' ');
        text.push_str(&todo.content);
    }
    let summary = format!("todos: {done}/{} done", todos.len());
    ToolOutput::text(text)
        .with_summary(summary)
        .with_data(json!({ "todos": todos }))
}
