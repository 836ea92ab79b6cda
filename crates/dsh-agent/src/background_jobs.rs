//! Background jobs for an agent: the job tools, and a message when a job finishes.
//!
//! The [`JobTable`] itself lives in the agent's [`dsh_tools::ToolContext`]
//! ([`ToolContext::with_jobs`](dsh_tools::ToolContext::with_jobs)), so the jobs die with the
//! agent. This extension only holds a weak reference: it never keeps jobs alive.
//!
//! Completion: before each step, every job that finished since the last step and whose end the
//! model has not already seen (through `job_output` or `job_kill`) is announced in one
//! model-facing message (plugin `background-jobs`, form `completion`), logged like any other
//! context message. An idle agent is not woken: the notice waits for the next step, which
//! comes with the user's next input (the job tools tell the model to keep working or to wait
//! with `job_output` rather than end its turn while a job it needs is running).

use std::sync::Arc;

use dsh_tools::{job_tools, JobTable, Tool, WeakJobTable};

use crate::agent::plugin_message;
use crate::extension::{Extension, PreStepContext};

/// Plugin name of the completion messages.
pub const BACKGROUND_JOBS_PLUGIN: &str = "background-jobs";

/// The background-jobs extension: contributes `job_output`, `job_list` and `job_kill`, and
/// announces finished jobs at the next step.
pub struct BackgroundJobs {
    table: WeakJobTable,
}

impl BackgroundJobs {
    /// Announces the jobs of `table`, which must be the table given to the agent's tool
    /// context with `ToolContext::with_jobs`.
    pub fn new(table: &JobTable) -> Self {
        BackgroundJobs {
            table: table.downgrade(),
        }
    }
}

impl Extension for BackgroundJobs {
    fn name(&self) -> &str {
        BACKGROUND_JOBS_PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        job_tools()
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        let Some(table) = self.table.upgrade() else {
            return Ok(());
        };
        let notices = table.take_finished();
        if notices.is_empty() {
            return Ok(());
        }
        let text = notices
            .iter()
            .map(|n| n.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        ctx.inject
            .push(plugin_message(BACKGROUND_JOBS_PLUGIN, "completion", text));
        Ok(())
    }
}
