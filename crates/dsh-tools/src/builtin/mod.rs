//! The built-in tools (docs/tools.md), with dsh's names and parameters.

mod bash;
mod beneath;
mod edit;
mod file_change;
mod glob;
mod grep;
mod read;
mod search;
mod todo;
mod write;

use std::sync::Arc;

pub use bash::BashTool;
pub use beneath::{is_temp_name, remove_leftover_temps, TEMP_PREFIX};
pub use edit::EditTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use read::ReadTool;
pub use todo::{TodoItem, TodoStatus, TodoWriteTool};
pub use write::WriteTool;

use crate::tool::Tool;

/// One instance of each built-in tool: `bash`, `edit`, `glob`, `grep`, `read`, `todo_write`,
/// `write`.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(BashTool),
        Arc::new(EditTool),
        Arc::new(GlobTool),
        Arc::new(GrepTool),
        Arc::new(ReadTool),
        Arc::new(TodoWriteTool),
        Arc::new(WriteTool),
    ]
}
