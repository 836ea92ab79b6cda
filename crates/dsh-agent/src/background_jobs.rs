//! Background jobs for an agent: the job tools, and a message when a job finishes.
//!
//! The [`JobTable`] itself lives in the agent's [`dsh_tools::ToolContext`]
//! ([`ToolContext::with_jobs`](dsh_tools::ToolContext::with_jobs)), so the jobs die with the
//! agent. This extension only holds a weak reference: it never keeps jobs alive.
//!
//! Completion (docs/agent.md, "Wake-ups"; dsh's `completionDelivery: wakeup`):
//! - while a turn runs, every job that finished since the last step and whose end the model has
//!   not already seen (through `job_output` or `job_kill`) is announced before the next step in
//!   one model-facing message (plugin `background-jobs`, form `completion`);
//! - when the agent is idle, a finished job wakes it: the same message is queued as input for a
//!   new turn ([`crate::AgentHandle::followup_message`], logged as `agent/inbox/spliced` with
//!   target `next-turn`, then a turn whose `user/message` carries the plugin source). At most
//!   [`MAX_CONSECUTIVE_WAKES`] turns in a row are opened this way; the user's next message
//!   refills the budget. Past the budget the notice waits for the next step, as before.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use dsh_llm::{LockExt, MessageSource};
use dsh_session::{Envelope, Event};
use dsh_tools::{job_tools, JobTable, Tool, WeakJobTable};

use crate::agent::{plugin_message, WeakAgentHandle};
use crate::extension::{AttachedAgent, Extension, PreStepContext};

/// Plugin name of the completion messages.
pub const BACKGROUND_JOBS_PLUGIN: &str = "background-jobs";

/// The event type logged when jobs still running at the end of a headless run are stopped
/// ([`crate::Agent::stop_background_jobs`]).
pub const JOBS_STOPPED_EVENT: &str = "jobs/stopped";

/// Turns that finished jobs may open in a row before the user speaks again (dsh's
/// `maxConsecutiveWakes`): bounds a chain where each woken turn starts the next job.
pub const MAX_CONSECUTIVE_WAKES: u32 = 3;

/// The background-jobs extension: contributes `job_output`, `job_list` and `job_kill`, and
/// announces finished jobs at the next step, or by waking the idle agent.
pub struct BackgroundJobs {
    wake: Arc<Wake>,
}

/// What the wake-up needs, shared with the table's finish callback.
struct Wake {
    table: WeakJobTable,
    agent: Mutex<Option<WeakAgentHandle>>,
    /// No turn is running (set at `turn/end`, cleared at `turn/start`).
    idle: AtomicBool,
    /// Turns opened by wake-ups since the user last spoke.
    spent: AtomicU32,
}

impl Wake {
    /// Wakes the idle agent with the unreported completions, within the budget.
    fn try_wake(&self) {
        if !self.idle.load(Ordering::SeqCst)
            || self.spent.load(Ordering::SeqCst) >= MAX_CONSECUTIVE_WAKES
        {
            return;
        }
        let Some(handle) = self
            .agent
            .lock_or_recover()
            .as_ref()
            .and_then(|a| a.upgrade())
        else {
            return;
        };
        let Some(table) = self.table.upgrade() else {
            return;
        };
        if !table.has_unreported() {
            return;
        }
        // Claim the idle agent before taking the notices, so two finishing jobs open one turn.
        if self
            .idle
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let Some(text) = completion_text(&table) else {
            self.idle.store(true, Ordering::SeqCst);
            return;
        };
        self.spent.fetch_add(1, Ordering::SeqCst);
        let message = plugin_message(BACKGROUND_JOBS_PLUGIN, "completion", text);
        if handle.followup_message(message).is_err() {
            // The log refused the input (closed session): nothing left to wake.
            self.idle.store(true, Ordering::SeqCst);
        }
    }
}

/// The notices of every unreported finished job, as one message text.
fn completion_text(table: &JobTable) -> Option<String> {
    let notices = table.take_finished();
    if notices.is_empty() {
        return None;
    }
    Some(
        notices
            .iter()
            .map(|n| n.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
    )
}

impl BackgroundJobs {
    /// Announces the jobs of `table`, which must be the table given to the agent's tool
    /// context with `ToolContext::with_jobs`.
    pub fn new(table: &JobTable) -> Self {
        let wake = Arc::new(Wake {
            table: table.downgrade(),
            agent: Mutex::new(None),
            idle: AtomicBool::new(true),
            spent: AtomicU32::new(0),
        });
        // The callback holds the wake state weakly: the table must not keep the extension.
        let weak = Arc::downgrade(&wake);
        table.on_finish(Arc::new(move || {
            if let Some(wake) = weak.upgrade() {
                wake.try_wake();
            }
        }));
        BackgroundJobs { wake }
    }
}

impl Extension for BackgroundJobs {
    fn name(&self) -> &str {
        BACKGROUND_JOBS_PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        job_tools()
    }

    fn attach(&self, agent: &AttachedAgent) {
        *self.wake.agent.lock_or_recover() = Some(agent.handle.clone());
    }

    fn on_event(&self, envelope: &Envelope) {
        match &envelope.event {
            Event::TurnStart(_) => self.wake.idle.store(false, Ordering::SeqCst),
            Event::TurnEnd(_) => {
                self.wake.idle.store(true, Ordering::SeqCst);
                // A job that ended after the turn's last step wakes the agent now. Events are
                // delivered under the log's lock, which queuing input takes too: wake from a
                // task instead.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let wake = Arc::clone(&self.wake);
                    runtime.spawn(async move { wake.try_wake() });
                }
            }
            Event::UserMessage(message) if matches!(message.source, MessageSource::User) => {
                self.wake.spent.store(0, Ordering::SeqCst);
            }
            _ => {}
        }
    }

    fn keeps_waking(&self) -> bool {
        if self.wake.spent.load(Ordering::SeqCst) >= MAX_CONSECUTIVE_WAKES {
            return false;
        }
        self.wake
            .table
            .upgrade()
            .is_some_and(|table| table.any_running() || table.has_unreported())
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        let Some(table) = self.wake.table.upgrade() else {
            return Ok(());
        };
        if let Some(text) = completion_text(&table) {
            ctx.inject
                .push(plugin_message(BACKGROUND_JOBS_PLUGIN, "completion", text));
        }
        Ok(())
    }
}
