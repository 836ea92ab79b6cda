//! The agent: one session's loop, and the handle front ends use to drive it.

use dsh_llm::LockExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use dsh_llm::{
    AdapterRegistry, CallConfig, ContentBlock, Failure, FailureCode, Message, MessageSource,
    ModelInfo, ReasoningEffort, Role, UsageTotals,
};
use dsh_session::{Envelope, Event, SessionStore, SessionWriter, TurnEndReason};
use dsh_tools::{ToolContext, ToolRegistry};
use serde_json::Map;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::extension::ExtensionSet;
use crate::inbox::{Inbox, InboxTarget, Splice};
use crate::log::{SessionEvent, SessionLog};

/// Settings of one loop instance.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Route, model and sampling as the caller asked for them.
    pub call: CallConfig,
    /// The session's working directory.
    pub cwd: PathBuf,
    /// How long started tools get to stop after a cancel before they are dropped (killed).
    pub cancel_grace: Duration,
    /// Most tool calls run at once (concurrency-safe tools only).
    pub max_parallel_tools: usize,
    /// Keep queued input when a turn is cancelled (default: clear it).
    pub keep_inbox_on_cancel: bool,
    /// Most steps in one turn before it ends with an error (a runaway guard).
    pub max_steps_per_turn: u64,
    /// Budgets of each turn for unattended runs (steps, wall time, cost; see [`crate::TurnBudget`]).
    pub budget: crate::TurnBudget,
    /// When and how to compact.
    pub compaction: crate::CompactionSettings,
    /// Overrides the model's context window (from configuration).
    pub context_window: Option<u64>,
    /// How session titles are made.
    pub titles: crate::TitleMode,
    /// Prices per model, for the cost of each request (`request/cache` events).
    pub prices: dsh_session::PriceTable,
    /// Remembered approvals consulted before asking the approver (default: in memory only, no
    /// "always allow"; front ends load `$DSH_HOME/approvals.json` with
    /// [`crate::ApprovalRules::load`]). Subagents may share their parent's.
    pub approval_rules: Arc<crate::ApprovalRules>,
    /// Which tools the model is offered (`dsh run --allowed-tools` / `--disallowed-tools`);
    /// `None`: every tool.
    pub tool_filter: Option<ToolFilter>,
}

/// Which tools a session offers, by name or by a pattern with `*` (`mcp__github__*`): with
/// `allowed`, only tools it names; never the ones `disallowed` names. A tool left out is not
/// offered, so a call of it fails as a call of an unknown tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Names or patterns of the tools offered (empty: all).
    pub allowed: Vec<String>,
    /// Names or patterns of tools never offered.
    pub disallowed: Vec<String>,
}

impl ToolFilter {
    /// True when tool `name` is offered.
    pub fn admits(&self, name: &str) -> bool {
        let named = |patterns: &[String]| patterns.iter().any(|p| glob_match(p, name));
        (self.allowed.is_empty() || named(&self.allowed)) && !named(&self.disallowed)
    }

    /// `registry` without the tools this filter leaves out.
    fn apply(&self, mut registry: ToolRegistry) -> ToolRegistry {
        let left_out: Vec<String> = registry
            .names()
            .filter(|name| !self.admits(name))
            .map(str::to_string)
            .collect();
        for name in left_out {
            registry.unregister(&name);
        }
        registry
    }
}

/// `pattern` matches all of `name`; `*` stands for any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl AgentOptions {
    /// Defaults for `call` in `cwd`.
    pub fn new(call: CallConfig, cwd: impl Into<PathBuf>) -> Self {
        AgentOptions {
            call,
            cwd: cwd.into(),
            cancel_grace: Duration::from_secs(5),
            max_parallel_tools: 10,
            keep_inbox_on_cancel: false,
            max_steps_per_turn: 500,
            budget: crate::TurnBudget::default(),
            compaction: crate::CompactionSettings::default(),
            context_window: None,
            titles: crate::TitleMode::Fallback,
            prices: dsh_session::PriceTable::default_deepseek(),
            approval_rules: Arc::new(crate::ApprovalRules::in_memory()),
            tool_filter: None,
        }
    }
}

/// Why an agent could not be set up or could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The session log refused an operation; the loop stops rather than run unlogged.
    #[error("session log: {0}")]
    Session(#[from] dsh_session::SessionError),
    /// The configuration cannot work (unknown route, unsupported effort, ...).
    #[error("{0}")]
    Config(Failure),
}

/// How a turn ended, for front ends.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// The number of the turn that ended.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
    /// Text of the last assistant message of the turn (possibly partial when aborted).
    pub final_text: String,
    /// Usage of every billed call of the turn (its steps, failed and cancelled replies whose
    /// usage arrived, compaction, the session title, tools' own calls, children), summed: the
    /// session log's usage at the turn's end less its usage at the start (docs/sessions.md,
    /// "Cost").
    pub usage: UsageTotals,
    /// The same, per model (what costs are computed from).
    pub usage_by_model: std::collections::BTreeMap<String, UsageTotals>,
    /// One prompt-cache report per successful model call of the turn.
    pub cache_reports: Vec<crate::CacheReport>,
}

/// State shared by the loop and its handles.
pub(crate) struct Shared {
    pub(crate) log: Mutex<SessionLog>,
    pub(crate) wake: Notify,
    pub(crate) turn_cancel: Mutex<Option<CancellationToken>>,
    pub(crate) compact_requested: std::sync::atomic::AtomicBool,
    /// A new call config asked for by a front end (`/model`, `/effort`), applied at the next
    /// request (and logged there as a header `change`).
    pub(crate) call_change: Mutex<Option<CallConfig>>,
    pub(crate) keep_inbox_on_cancel: Mutex<bool>,
    /// The preset and how to switch it (see [`crate::permission`]).
    pub(crate) permission: Mutex<PermissionState>,
    /// The agent's extensions (for commands they offer front ends).
    pub(crate) extensions: ExtensionSet,
    /// Plan mode is on (kept by `crate::plan::PlanMode`, docs/agent.md, "Plan mode").
    pub(crate) plan_mode: std::sync::atomic::AtomicBool,
    /// The tools of the latest step (the agent's own before the first), for front ends that
    /// present logged calls ([`AgentHandle::tools`]).
    pub(crate) tools: Mutex<Arc<ToolRegistry>>,
    /// The model in use (or the one a queued `/model` switches to) takes images: input with an
    /// image is refused before it is logged when it does not (docs/model-calls.md, "Images").
    pub(crate) takes_images: std::sync::atomic::AtomicBool,
    /// The agent's own adapters, to learn whether a model a front end switches to takes images.
    pub(crate) adapters: AdapterRegistry,
    /// Turn settings of queued command messages, by message id (`crate::turn_settings`).
    pub(crate) command_turns: Mutex<Vec<(String, crate::TurnSettings)>>,
}

/// The session's preset as last switched, the switch waiting for the next step, and the
/// front end's source of settings.
pub(crate) struct PermissionState {
    pub(crate) current: dsh_tools::PermissionPreset,
    pub(crate) pending: Option<Arc<crate::PermissionSetting>>,
    /// `sandbox/mode` data of the last switch (unknown before the first).
    pub(crate) sandbox: Option<serde_json::Value>,
    pub(crate) source: Option<crate::PermissionSource>,
}

impl Shared {
    pub(crate) fn log(&self) -> MutexGuard<'_, SessionLog> {
        // A panic while holding the lock cannot leave the log half-written: appends are single
        // calls into the writer. Recover the guard rather than poison every later operation.
        self.log.lock_or_recover()
    }
}

/// Drives a session from front ends: queue input, cancel, watch events. Cheap to clone.
#[derive(Clone)]
pub struct AgentHandle {
    pub(crate) shared: Arc<Shared>,
}

/// A handle that does not keep the agent alive. Extensions are owned by the agent, so they
/// keep this one (a strong handle would make a cycle: the session and its log would never be
/// freed, and `subscribe` receivers would never see the channel close).
#[derive(Clone)]
pub struct WeakAgentHandle {
    shared: Weak<Shared>,
}

impl WeakAgentHandle {
    /// The handle, while the agent exists.
    pub fn upgrade(&self) -> Option<AgentHandle> {
        self.shared.upgrade().map(|shared| AgentHandle { shared })
    }
}

impl AgentHandle {
    /// A handle that does not keep the agent alive.
    pub fn downgrade(&self) -> WeakAgentHandle {
        WeakAgentHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }

    fn enqueue(&self, target: InboxTarget, message: Message, wake: bool) -> Result<(), AgentError> {
        if !self.takes_images() && dsh_llm::content_has_image(&message.content) {
            return Err(AgentError::Config(Failure::new(
                FailureCode::Other(dsh_llm::UNSUPPORTED_CONTENT.into()),
                "the session's model takes text only, so the message with an image was not sent; \
                 switch to a model that takes images (`/model`) or send the message without it",
            )));
        }
        {
            let mut log = self.shared.log();
            let splice = log.inbox.push(target, message);
            log.append_splice(&splice)?;
            // A message for the next turn while no turn is open is claimed by that turn, whose
            // flush before its model call syncs it: written through now. Anything else (a steer
            // while a tool runs) is synced at once (docs/sessions.md, "Durability and crash
            // repair").
            let idle =
                target == InboxTarget::NextTurn && log.writer().state().open_turn().is_none();
            if idle {
                log.write_through()?;
            } else {
                log.flush()?;
            }
        }
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Queues user text for the next turn and wakes the loop.
    pub fn followup(&self, text: impl Into<String>) -> Result<(), AgentError> {
        self.enqueue(InboxTarget::NextTurn, new_user_message(text), true)
    }

    /// Queues a model-facing message for a new turn and wakes the loop: how an extension wakes
    /// an idle agent (a finished background job, docs/agent.md, "Wake-ups"). Logged like any
    /// queued input (`agent/inbox/spliced`, target `next-turn`).
    pub fn followup_message(&self, message: Message) -> Result<(), AgentError> {
        self.enqueue(InboxTarget::NextTurn, message, true)
    }

    /// Queues user text for the next step of the running turn and wakes the loop.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), AgentError> {
        self.enqueue(InboxTarget::NextStep, new_user_message(text), true)
    }

    /// Queues a model-facing message for the next step and wakes the loop (used for
    /// completions of background work, e.g. a background subagent).
    pub fn steer_message(&self, message: Message) -> Result<(), AgentError> {
        self.enqueue(InboxTarget::NextStep, message, true)
    }

    /// Queues model-facing context for the next step without waking the loop.
    pub fn inject(&self, message: Message) -> Result<(), AgentError> {
        self.enqueue(InboxTarget::NextStep, message, false)
    }

    /// Cancels the running turn, if any (docs/agent.md, "Cancellation"). Queued input is cleared
    /// unless `keep_inbox` is set. Returns true when a turn was running.
    pub fn cancel(&self, keep_inbox: bool) -> bool {
        *self.shared.keep_inbox_on_cancel.lock_or_recover() = keep_inbox;
        let token = self.shared.turn_cancel.lock_or_recover().clone();
        match token {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Asks for a compaction (`/compact`): it runs before the next step, or at once when the
    /// loop is idle and running (`serve`, `run_until_idle`).
    pub fn request_compaction(&self) {
        self.shared
            .compact_requested
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Switches route, model or sampling from the next request on (`/model`, `/effort`). The
    /// new config is validated against the model's metadata when it is applied; the change is
    /// logged as a `request/header {reason: change}`.
    pub fn set_call(&self, call: CallConfig) {
        // A route only an extension knows keeps the current answer until the switch applies.
        if let Ok(adapter) = self.shared.adapters.get(&call.provider) {
            let images = adapter
                .model_info(&call.model)
                .is_some_and(|info| dsh_llm::takes_images(&info));
            self.set_takes_images(images);
        }
        *self.shared.call_change.lock_or_recover() = Some(call);
    }

    /// Whether the session's model takes images (after a queued `/model` switch, the new
    /// model's answer): front ends offer image input only then, and input with an image is
    /// refused otherwise (docs/model-calls.md, "Images").
    pub fn takes_images(&self) -> bool {
        self.shared
            .takes_images
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set_takes_images(&self, images: bool) {
        self.shared
            .takes_images
            .store(images, std::sync::atomic::Ordering::SeqCst);
    }

    /// Switches the permission preset (`/permission`): logs `permission/preset` (and
    /// `sandbox/mode` when the confinement changes) now, and applies the preset from the next
    /// step on (see `crate::permission`). Switching to the preset in force does nothing.
    /// Fails when the front end installed no [`crate::PermissionSource`] or the preset cannot
    /// be used on this host; the session keeps its preset then.
    pub fn set_permission(&self, preset: dsh_tools::PermissionPreset) -> Result<(), AgentError> {
        let mut state = self.shared.permission.lock_or_recover();
        if state.current == preset {
            return Ok(());
        }
        let Some(source) = state.source.clone() else {
            return Err(AgentError::Config(Failure::new(
                FailureCode::InvalidRequest,
                "this session cannot switch its permission preset; start a new one with --permission",
            )));
        };
        let setting = source(preset).map_err(|reason| {
            AgentError::Config(Failure::new(
                FailureCode::InvalidRequest,
                format!("cannot switch to {preset}: {reason}"),
            ))
        })?;
        {
            let mut log = self.shared.log();
            log.append(Event::Opaque {
                event_type: crate::PERMISSION_PRESET_EVENT.to_string(),
                data: setting.preset_data(),
            })?;
            if state.sandbox.as_ref() != Some(&setting.sandbox_data()) {
                log.append(Event::Opaque {
                    event_type: crate::SANDBOX_MODE_EVENT.to_string(),
                    data: setting.sandbox_data(),
                })?;
            }
            log.flush()?;
        }
        state.current = preset;
        state.sandbox = Some(setting.sandbox_data());
        state.pending = Some(Arc::new(setting));
        Ok(())
    }

    /// Slash commands the session's extensions offer (e.g. user-invocable skills), sorted by
    /// name; front ends list them with their own commands.
    pub fn user_commands(&self) -> Vec<crate::UserCommand> {
        let mut commands: Vec<crate::UserCommand> = self
            .shared
            .extensions
            .snapshot()
            .iter()
            .flat_map(|extension| extension.user_commands())
            .collect();
        commands.sort_by(|a, b| a.name.cmp(&b.name));
        commands.dedup_by(|a, b| a.name == b.name);
        commands
    }

    /// Runs `/name arguments` for one of [`AgentHandle::user_commands`]: queues the message it
    /// expands to as the next turn's user input (like [`AgentHandle::followup`]). An unknown
    /// name, or a command that refuses, is an error for the user and queues nothing.
    pub fn run_user_command(&self, name: &str, arguments: &str) -> Result<Vec<String>, AgentError> {
        let expanded = self
            .shared
            .extensions
            .snapshot()
            .iter()
            .find_map(|extension| extension.expand_user_command(name, arguments))
            .unwrap_or_else(|| Err(crate::ExtensionError::UnknownCommand(name.to_string())));
        match expanded {
            Ok(mut expansion) => {
                let notes: Vec<String> = expansion.note.take().into_iter().collect();
                // A command that only switches something (`/plan`, `/plan off`) queues nothing.
                if !expansion.text.trim().is_empty() {
                    self.queue_expansion(name, expansion)?;
                }
                Ok(notes)
            }
            Err(message) => Err(AgentError::Config(Failure::new(
                FailureCode::InvalidRequest,
                message.to_string(),
            ))),
        }
    }

    /// Appends the user's note to the instructions file of `scope` ([`crate::Extension::remember`]);
    /// the model is told at its next step, as of any change to a loaded instructions file.
    pub fn remember(
        &self,
        scope: crate::NoteScope,
        text: &str,
    ) -> Result<std::path::PathBuf, String> {
        self.shared
            .extensions
            .snapshot()
            .iter()
            .find_map(|extension| extension.remember(scope, text))
            .unwrap_or_else(|| Err("this session keeps no instructions files".to_string()))
    }

    /// The instructions file of `scope` ([`crate::Extension::instructions_file`]): where a
    /// note goes and what `/memory` opens.
    pub fn instructions_file(&self, scope: crate::NoteScope) -> Result<std::path::PathBuf, String> {
        self.shared
            .extensions
            .snapshot()
            .iter()
            .find_map(|extension| extension.instructions_file(scope))
            .unwrap_or_else(|| Err("this session keeps no instructions files".to_string()))
    }

    /// The user edited the instructions file `path`: the model is told at its next step.
    pub fn instructions_edited(&self, path: &std::path::Path) {
        for extension in self.shared.extensions.snapshot().iter() {
            extension.instructions_edited(path);
        }
    }

    /// Whether plan mode is on (docs/agent.md, "Plan mode"; `/plan` and `/plan off` switch it).
    pub fn plan_mode(&self) -> bool {
        self.shared
            .plan_mode
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set_plan_flag(&self, on: bool) {
        self.shared
            .plan_mode
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// The permission preset in force (or waiting for the next step after a switch).
    pub fn permission(&self) -> dsh_tools::PermissionPreset {
        self.shared.permission.lock_or_recover().current
    }

    /// Every event appended from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.shared.log().subscribe()
    }

    /// The session's tools as of its latest step (before the first step, its own tools,
    /// without those its extensions add): what a [`crate::Presenter`] asks about calls a log
    /// holds without their presentation.
    pub fn tools(&self) -> Arc<ToolRegistry> {
        Arc::clone(&self.shared.tools.lock_or_recover())
    }

    /// The session id.
    pub fn session_id(&self) -> String {
        self.shared.log().session_id().to_string()
    }

    /// Where the session is stored.
    pub fn location(&self) -> String {
        self.shared.log().location()
    }

    /// Appends a record that is not model-visible (e.g. `hook/result`) to the session log.
    /// Message events must not come this way: model-visible input goes through the inbox.
    /// The event is flushed before this returns (front ends log from outside the loop, e.g.
    /// a rename, and expect a reader of the file to see it).
    pub fn log_event(&self, event: Event) -> Result<u64, AgentError> {
        let mut log = self.shared.log();
        let seq = log.append(event)?;
        log.flush()?;
        Ok(seq)
    }

    /// Input waiting in the inbox: `(next-turn, next-step)`.
    pub fn pending(&self) -> (Vec<Message>, Vec<Message>) {
        self.shared.log().inbox.pending()
    }
}

/// A new user-typed message with a fresh id.
pub fn new_user_message(text: impl Into<String>) -> Message {
    Message::user_text(uuid::Uuid::new_v4().to_string(), text)
}

/// A model-facing message injected by an extension.
pub fn plugin_message(plugin: &str, form: &str, text: impl Into<String>) -> Message {
    Message {
        id: uuid::Uuid::new_v4().to_string(),
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        source: MessageSource::Plugin {
            plugin: plugin.to_string(),
            form: Some(form.to_string()),
            extra: Map::new(),
        },
    }
}

/// The parts an agent is built from.
pub struct AgentParts {
    /// Model adapters by route.
    pub adapters: AdapterRegistry,
    /// The tools the model may call.
    pub tools: Arc<ToolRegistry>,
    /// The extensions, consulted in order at every hook.
    pub extensions: ExtensionSet,
    /// The session context for tools (cwd, permission, spill dir, observations).
    pub tool_context: ToolContext,
    /// Call config, cwd and limits of the agent.
    pub options: AgentOptions,
}

/// One session's loop. Run it with [`Agent::run_until_idle`] (or [`Agent::run_turn`]); drive it
/// from elsewhere through [`Agent::handle`].
pub struct Agent {
    pub(crate) shared: Arc<Shared>,
    pub(crate) adapters: AdapterRegistry,
    pub(crate) tools: Arc<ToolRegistry>,
    /// The tools of the current step: the agent's own plus those of registered extensions.
    pub(crate) step_tools: Arc<ToolRegistry>,
    pub(crate) extensions: ExtensionSet,
    pub(crate) tool_context: ToolContext,
    pub(crate) options: AgentOptions,
    /// Answers `ToolVerdict::Ask` (default: [`crate::HeadlessApprover`], which rejects).
    pub(crate) approver: Arc<dyn crate::Approver>,
    /// Turn number of the last turn started (continues across resume).
    pub(crate) turn: u64,
    /// Whether this loop instance has logged its first header (`initial` / `resume`).
    pub(crate) header_logged: bool,
    /// Extensions' work started at a turn boundary ([`crate::Extension::turn_boundary`]): the
    /// start's runs beside the turn's first request and is settled before any tool runs and
    /// before the turn ends; the end's is settled at once.
    pub(crate) turn_work: Vec<tokio::task::JoinHandle<Vec<Event>>>,
    pub(crate) resumed: bool,
    pub(crate) model_info: ModelInfo,
    pub(crate) cache: crate::CacheTracker,
    /// Tokens of the last request plus its reply, and the history size right after the reply:
    /// the base of the context estimate (docs/agent.md, "Context discipline").
    pub(crate) last_usage: Option<(u64, usize)>,
    /// Serialized size of system prompt and tools of the last request.
    pub(crate) header_bytes: usize,
    /// The tool schemas of the last request: a step whose schemas equal them shares them
    /// instead of serializing and copying them again (their size is the cache report's,
    /// `CacheTracker::tools_bytes`; docs/PERFORMANCE.md, "Step 1: fixed costs").
    pub(crate) last_tools: Option<Arc<Vec<dsh_llm::ToolSchema>>>,
    /// What the running turn changed for a command (`crate::turn_settings`).
    pub(crate) turn_settings: crate::turn_settings::ActiveTurnSettings,
}

impl Agent {
    /// Starts a new session in `store`.
    pub fn create(parts: AgentParts, store: &dyn SessionStore) -> Result<Agent, AgentError> {
        let cwd = parts.options.cwd.to_string_lossy().into_owned();
        let writer = store.create(&cwd, dsh_session::CreateOptions::default())?;
        Self::assemble(
            parts,
            writer,
            dsh_session::Projector::new(),
            Inbox::new(),
            None,
            0,
            false,
        )
    }

    /// Starts an agent on a session log the caller created (e.g. a subagent's log in its
    /// parent's folder), whose existing messages project to `history`.
    pub fn with_writer(
        parts: AgentParts,
        writer: Box<dyn SessionWriter>,
        history: dsh_session::Projector,
    ) -> Result<Agent, AgentError> {
        Self::assemble(parts, writer, history, Inbox::new(), None, 0, false)
    }

    /// Reopens a session (id, id prefix or path) to add turns: repairs a crashed tail, restores
    /// the inbox, continues turn numbering and logs a `resume` header at the first request.
    pub fn resume(
        parts: AgentParts,
        store: &dyn SessionStore,
        key: &str,
    ) -> Result<Agent, AgentError> {
        let loaded = store.load(key)?;
        let mut inbox = Inbox::new();
        for envelope in &loaded.events {
            if let Event::InboxSpliced(splice) = &envelope.event {
                inbox.apply(&Splice {
                    target: if splice.target == "next-step" {
                        InboxTarget::NextStep
                    } else {
                        InboxTarget::NextTurn
                    },
                    start: splice.start as usize,
                    removed: splice.removed_count.unwrap_or(0) as usize,
                    inserted: splice.inserted.clone(),
                });
            }
        }
        for extension in parts.extensions.snapshot() {
            extension.restore(&loaded.events);
        }
        let command_turns =
            crate::turn_settings::restore_settings(&loaded.events, &inbox.pending().0);
        drop(loaded);
        let resumed = store.resume(key)?;
        let last_end = resumed
            .writer
            .state()
            .closed_turns()
            .last()
            .map(|t| t.reason.clone());
        let last_turn = resumed.next_turn.saturating_sub(1);
        let agent = Self::assemble(
            parts,
            resumed.writer,
            resumed.history,
            inbox,
            last_end,
            last_turn,
            true,
        )?;
        *agent.shared.command_turns.lock_or_recover() = command_turns;
        Ok(agent)
    }

    fn assemble(
        mut parts: AgentParts,
        writer: Box<dyn SessionWriter>,
        projector: dsh_session::Projector,
        inbox: Inbox,
        last_turn_end: Option<TurnEndReason>,
        turn: u64,
        resumed: bool,
    ) -> Result<Agent, AgentError> {
        let adapter = match parts.adapters.get(&parts.options.call.provider) {
            Ok(adapter) => adapter,
            Err(not_found) => parts
                .extensions
                .snapshot()
                .iter()
                .flat_map(|e| e.adapters())
                .find(|(route, _)| *route == parts.options.call.provider)
                .map(|(_, adapter)| adapter)
                .ok_or(AgentError::Config(not_found))?,
        };
        let model_info = adapter
            .model_info(&parts.options.call.model)
            .unwrap_or_else(|| generic_model_info(&parts.options.call.model));
        // Reject a bad effort before anything runs.
        parts
            .options
            .call
            .clone()
            .prepare(&model_info)
            .map_err(AgentError::Config)?;
        // The session's own tools are filtered once; extensions' tools at each step.
        if let Some(filter) = &parts.options.tool_filter {
            parts.tools = Arc::new(filter.apply((*parts.tools).clone()));
        }
        let depth = writer.header().delegation_depth.unwrap_or(0);
        let parent_session = writer.header().parent_session.clone();
        let log = SessionLog::new(
            writer,
            projector,
            parts.extensions.clone(),
            inbox,
            last_turn_end,
        );
        let agent = Agent {
            shared: Arc::new(Shared {
                log: Mutex::new(log),
                wake: Notify::new(),
                turn_cancel: Mutex::new(None),
                compact_requested: std::sync::atomic::AtomicBool::new(false),
                call_change: Mutex::new(None),
                keep_inbox_on_cancel: Mutex::new(parts.options.keep_inbox_on_cancel),
                permission: Mutex::new(PermissionState {
                    current: parts.tool_context.permission(),
                    pending: None,
                    sandbox: None,
                    source: None,
                }),
                extensions: parts.extensions.clone(),
                plan_mode: std::sync::atomic::AtomicBool::new(false),
                tools: Mutex::new(Arc::clone(&parts.tools)),
                takes_images: std::sync::atomic::AtomicBool::new(dsh_llm::takes_images(
                    &model_info,
                )),
                adapters: parts.adapters.clone(),
                command_turns: Mutex::new(Vec::new()),
            }),
            adapters: parts.adapters,
            step_tools: Arc::clone(&parts.tools),
            tools: parts.tools,
            extensions: parts.extensions,
            tool_context: parts.tool_context,
            options: parts.options,
            approver: Arc::new(crate::HeadlessApprover),
            turn,
            header_logged: false,
            turn_work: Vec::new(),
            resumed,
            model_info,
            cache: crate::CacheTracker::new(),
            last_usage: None,
            header_bytes: 0,
            last_tools: None,
            turn_settings: Default::default(),
        };
        let handle = agent.handle();
        let attached = crate::extension::AttachedAgent {
            location: handle.location(),
            session_id: handle.session_id(),
            cwd: agent.options.cwd.clone(),
            depth,
            parent_session,
            handle: handle.downgrade(),
        };
        for extension in agent.extensions.snapshot() {
            extension.attach(&attached);
        }
        Ok(agent)
    }

    /// The agent's tools plus those contributed by registered extensions.
    pub(crate) fn effective_tools(&self) -> Result<Arc<ToolRegistry>, Failure> {
        let mut contributed = Vec::new();
        for extension in self.extensions.snapshot() {
            for tool in extension.tools() {
                contributed.push((extension.name().to_string(), tool));
            }
        }
        let turn_filtered = !self.turn_settings.filters.is_empty();
        if contributed.is_empty() && !turn_filtered {
            return Ok(Arc::clone(&self.tools));
        }
        let mut registry = (*self.tools).clone();
        for (extension, tool) in contributed {
            let name = tool.name().to_string();
            if self
                .options
                .tool_filter
                .as_ref()
                .is_some_and(|filter| !filter.admits(&name))
            {
                continue;
            }
            registry.register(tool).map_err(|err| {
                Failure::new(
                    FailureCode::InvalidRequest,
                    format!("extension `{extension}` cannot add tool `{name}`: {err}"),
                )
            })?;
        }
        if turn_filtered {
            let left_out: Vec<String> = registry
                .names()
                .filter(|name| !self.turn_settings.admits(name))
                .map(str::to_string)
                .collect();
            for name in left_out {
                registry.unregister(&name);
            }
        }
        Ok(Arc::new(registry))
    }

    /// The adapter for `route`: the agent's registry first, then registered extensions.
    pub(crate) fn adapter_for(&self, route: &str) -> Result<Arc<dyn dsh_llm::Adapter>, Failure> {
        match self.adapters.get(route) {
            Ok(adapter) => Ok(adapter),
            Err(not_found) => self
                .extensions
                .snapshot()
                .iter()
                .flat_map(|e| e.adapters())
                .find(|(r, _)| r == route)
                .map(|(_, adapter)| adapter)
                .ok_or(not_found),
        }
    }

    /// Replaces the approver that answers `ToolVerdict::Ask` (interactive front ends pass one
    /// that asks the user; the default rejects every question).
    pub fn set_approver(&mut self, approver: Arc<dyn crate::Approver>) {
        self.approver = approver;
    }

    /// Replaces who answers `ask_user_question` (interactive front ends pass one that shows
    /// the questions to the user; the default, `dsh_tools::HeadlessAsker`, answers that nobody
    /// can, and the tool tells the model to decide on its own).
    pub fn set_asker(&mut self, asker: Arc<dyn dsh_tools::Asker>) {
        self.tool_context = self.tool_context.clone().with_asker(asker);
    }

    /// Lets front ends switch the permission preset ([`AgentHandle::set_permission`]):
    /// `source` builds what each preset means on this host.
    pub fn set_permission_source(&mut self, source: crate::PermissionSource) {
        self.shared.permission.lock_or_recover().source = Some(source);
    }

    /// Sets the budgets of the following turns (`dsh run --max-steps` and friends).
    pub fn set_budget(&mut self, budget: crate::TurnBudget) {
        self.options.budget = budget;
    }

    /// The budgets of each turn.
    pub fn budget(&self) -> crate::TurnBudget {
        self.options.budget
    }

    /// Applies a preset switch queued by [`AgentHandle::set_permission`] to the tool context;
    /// returns it for the step's extensions.
    pub(crate) fn apply_permission_change(&mut self) -> Option<Arc<crate::PermissionSetting>> {
        let change = self.shared.permission.lock_or_recover().pending.take()?;
        self.tool_context = self
            .tool_context
            .clone()
            .with_permission(change.preset)
            .with_confinement(Arc::clone(&change.confinement));
        Some(change)
    }

    /// A handle for front ends.
    pub fn handle(&self) -> AgentHandle {
        AgentHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The call config in use (as the caller gave it, before adapter defaults).
    pub fn call(&self) -> &CallConfig {
        &self.options.call
    }

    /// Applies a call config change queued by [`AgentHandle::set_call`].
    pub(crate) fn apply_call_change(&mut self) -> Result<(), Failure> {
        let change = self.shared.call_change.lock_or_recover().take();
        let Some(call) = change else { return Ok(()) };
        let adapter = self.adapter_for(&call.provider)?;
        let info = adapter
            .model_info(&call.model)
            .unwrap_or_else(|| generic_model_info(&call.model));
        call.clone().prepare(&info)?;
        // A switch during a command's turn is the user's choice: it stays after the turn.
        self.turn_settings.restore = None;
        self.options.call = call;
        self.handle().set_takes_images(dsh_llm::takes_images(&info));
        self.model_info = info;
        Ok(())
    }

    /// Metadata of the model in use.
    pub fn model_info(&self) -> &ModelInfo {
        &self.model_info
    }

    /// Prices per model this agent reports costs with (ACP `usage_update`, docs/acp.md).
    pub fn prices(&self) -> &dsh_session::PriceTable {
        &self.options.prices
    }

    /// Runs turns while input is queued; returns their outcomes.
    pub async fn run_until_idle(&mut self) -> Result<Vec<TurnOutcome>, AgentError> {
        if self
            .shared
            .compact_requested
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.compact(
                crate::CompactionTrigger::Requested,
                &CancellationToken::new(),
            )
            .await?;
        }
        let mut outcomes = Vec::new();
        loop {
            while let Some(outcome) = self.run_turn().await? {
                outcomes.push(outcome);
            }
            self.idle();
            if !self.shared.log().inbox.has_next_turn() {
                return Ok(outcomes);
            }
        }
    }

    /// Tells the extensions that the agent is idle ([`crate::Extension::on_idle`]): they may
    /// queue follow-up input (a goal's next round). [`Agent::run_until_idle`] does it each
    /// time it ran out of input; `dsh replay` before a recorded turn nobody typed.
    pub fn idle(&self) {
        for extension in self.shared.extensions.snapshot() {
            extension.on_idle();
        }
    }

    /// Runs turns while input is queued, then, while an extension says work it started may
    /// still wake the agent ([`crate::Extension::keeps_waking`]: a running background job
    /// within its wake budget), waits for that wake-up and runs again; returns every outcome
    /// once nothing can wake the agent or `stop` is cancelled (`dsh run`, docs/agent.md,
    /// "Wake-ups").
    pub async fn run_until_settled(
        &mut self,
        stop: &CancellationToken,
    ) -> Result<Vec<TurnOutcome>, AgentError> {
        self.run_until_settled_within(stop, None).await
    }

    /// [`Agent::run_until_settled`], waiting at most `max_wait` for a wake-up after the agent
    /// went idle (the clock starts again after each woken turn). What is still running then is
    /// left to the caller: [`Agent::stop_background_jobs`] (`dsh run --jobs-wait`).
    pub async fn run_until_settled_within(
        &mut self,
        stop: &CancellationToken,
        max_wait: Option<Duration>,
    ) -> Result<Vec<TurnOutcome>, AgentError> {
        let mut outcomes = Vec::new();
        loop {
            outcomes.extend(self.run_until_idle().await?);
            if stop.is_cancelled() {
                return Ok(outcomes);
            }
            let idle_since = tokio::time::Instant::now();
            if self.wait_for_wake(stop, idle_since, max_wait).await {
                continue;
            }
            return Ok(outcomes);
        }
    }

    /// Waits while input is queued or an extension may still wake the agent. True when there is
    /// input to run; false when nothing can wake the agent any more, `stop` was cancelled or
    /// `max_wait` passed since `idle_since`.
    async fn wait_for_wake(
        &self,
        stop: &CancellationToken,
        idle_since: tokio::time::Instant,
        max_wait: Option<Duration>,
    ) -> bool {
        loop {
            if stop.is_cancelled() {
                return false;
            }
            let queued = self.shared.log().inbox.has_next_turn();
            let waking = self
                .shared
                .extensions
                .snapshot()
                .iter()
                .any(|e| e.keeps_waking());
            if queued {
                return true;
            }
            if !waking || max_wait.is_some_and(|limit| idle_since.elapsed() >= limit) {
                return false;
            }
            // A wake-up notifies `wake`; the timeout re-checks the extensions in case the work
            // ended without one (its wake budget was spent), and the wait's limit.
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                _ = stop.cancelled() => return false,
            }
        }
    }

    /// Stops every background job still running (their whole process groups) and logs which
    /// (`jobs/stopped {reason, jobs: [{id, command, description, elapsedMs}]}`, ignorable).
    /// Returns them; nothing is logged when none was running.
    pub async fn stop_background_jobs(
        &self,
        reason: &str,
    ) -> Result<Vec<dsh_tools::StoppedJob>, AgentError> {
        let Some(jobs) = self.tool_context.jobs() else {
            return Ok(Vec::new());
        };
        let stopped = jobs.stop_running().await;
        if !stopped.is_empty() {
            let mut envelope = Envelope::new(Event::Opaque {
                event_type: crate::JOBS_STOPPED_EVENT.to_string(),
                data: serde_json::json!({"reason": reason, "jobs": stopped}),
            });
            envelope.ignorable = true;
            let mut log = self.shared.log();
            log.append_envelope(envelope)?;
            log.flush()?;
        }
        Ok(stopped)
    }

    /// Waits until input arrives, then runs turns until idle again. Returns when woken with
    /// nothing to do only if `stop` is cancelled.
    pub async fn serve(&mut self, stop: CancellationToken) -> Result<(), AgentError> {
        loop {
            self.run_until_idle().await?;
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = stop.cancelled() => return Ok(()),
            }
        }
    }
}

/// Metadata for a model its adapter does not know: a conservative window and output limit.
pub fn generic_model_info(model: &str) -> ModelInfo {
    ModelInfo {
        id: model.to_string(),
        context_window: 128_000,
        default_max_tokens: 8_192,
        efforts: vec![
            ReasoningEffort::Off,
            ReasoningEffort::Low,
            ReasoningEffort::Medium,
            ReasoningEffort::High,
            ReasoningEffort::Max,
        ],
        default_effort: None,
        modalities: vec!["text".to_string()],
        temperature: None,
        stop: None,
    }
}

/// A `Failure` for a session-log error, so front ends can report it like any other.
pub fn session_failure(err: &AgentError) -> Failure {
    match err {
        AgentError::Config(failure) => failure.clone(),
        AgentError::Session(err) => {
            Failure::new(FailureCode::Other("SESSION_LOG".into()), err.to_string())
        }
    }
}

#[cfg(test)]
mod tool_filter_tests {
    use super::ToolFilter;

    #[test]
    fn names_and_patterns_admit_and_leave_out() {
        let filter = ToolFilter {
            allowed: vec!["read".into(), "mcp__github__*".into(), "*_list".into()],
            disallowed: vec!["mcp__github__delete*".into()],
        };
        for (name, admitted) in [
            ("read", true),
            ("bash", false),
            ("mcp__github__issues", true),
            ("mcp__github__delete_repo", false),
            ("job_list", true),
            ("readme", false),
        ] {
            assert_eq!(filter.admits(name), admitted, "{name}");
        }
        let deny = ToolFilter {
            allowed: Vec::new(),
            disallowed: vec!["bash".into()],
        };
        assert!(deny.admits("read") && !deny.admits("bash"));
        assert!(ToolFilter::default().admits("anything"));
    }
}
