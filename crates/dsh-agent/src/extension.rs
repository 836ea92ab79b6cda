//! Extension points (docs/agent.md, "Extensions"). The loop knows no concrete tool, provider,
//! policy or front end: behaviour is added by [`Extension`]s registered in an [`ExtensionSet`].
//! Registration returns an [`ExtensionGuard`]; dropping the guard unregisters the extension.
//!
//! Points, in the order the loop reaches them:
//! `pre_step` (add model-facing context or refuse the step) -> `request` (observe or modify the
//! outgoing request) -> `request_error` (retry decision) -> `tool_pre` (allow / deny / ask the
//! [`Approver`]) ->
//! `tool_execute` (middleware around the tool body) -> `tool_post` (rewrite the result, inject a
//! reminder) -> `turn_stopping` (steer before the turn closes); `on_event` sees every durable
//! session event.

use dsh_llm::RwLockExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use dsh_llm::{Failure, GenerateRequest, Message, RetryDecision};
use dsh_session::{Envelope, Event};
use dsh_tools::{PermissionPreset, Tool, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::approval_rules::{ApprovalChoice, ApprovalRule};
use crate::prompt::{PromptContext, PromptSection};

/// One tool call as the pipeline sees it.
#[derive(Debug, Clone)]
pub struct ToolCallInfo {
    /// The turn of the call.
    pub turn: u64,
    /// The step of the call within its turn.
    pub step: u64,
    /// The provider's id of the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The raw argument string the model produced.
    pub arguments: String,
    /// Cancelled when the turn is cancelled or a middleware (e.g. a timeout) gives up on the call.
    pub cancel: CancellationToken,
    /// The permission preset the call runs under (the session's at the start of the step).
    pub preset: PermissionPreset,
}

/// Verdict of a `tool_pre` handler. Every handler is consulted: a `Deny` anywhere wins, then
/// the first `Ask`, then the call runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolVerdict {
    /// No opinion; later handlers and then the tool decide.
    Continue,
    /// Refuse the call; the model gets `Error: <reason>` with code `PERMISSION_DENIED`.
    Deny {
        /// Why the call is refused; the model sees it.
        reason: String,
    },
    /// Ask the agent's [`Approver`] (the user, in interactive front ends) before running. The
    /// question and the answer are logged (`approval/asked`, `approval/decided`). Allowed once:
    /// the call runs, under `escalation` instead of the session's preset when given. Rejected:
    /// `PERMISSION_DENIED` with the approver's message.
    Ask {
        /// Why approval is needed, shown to the user (e.g. the model's justification).
        reason: String,
        /// The preset this one call runs under when allowed (`None`: the session's).
        escalation: Option<PermissionPreset>,
    },
}

/// A question for the user about one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// Id tying `approval/asked` to `approval/decided`.
    pub id: String,
    /// The tool call.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The raw arguments, as the model wrote them.
    pub arguments: String,
    /// Why approval is needed.
    pub reason: String,
    /// The wider preset asked for, if any.
    pub escalation: Option<PermissionPreset>,
    /// What the user may answer, in the order to offer them. `AllowSession` and `AllowAlways`
    /// are offered only when `rule` is set (`AllowAlways` only when rules are persisted).
    pub choices: Vec<ApprovalChoice>,
    /// The rule "allow for this session" / "always allow" would remember (see
    /// `crate::approval_rules`), or `None` when this call can only be allowed once.
    pub rule: Option<ApprovalRule>,
}

impl ApprovalRequest {
    /// True when `choice` is offered.
    pub fn offers(&self, choice: ApprovalChoice) -> bool {
        self.choices.contains(&choice)
    }
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run this call (only this one).
    AllowOnce,
    /// Run it, and every call the request's rule covers, for the rest of the session. Treated
    /// as [`ApprovalDecision::AllowOnce`] when the request did not offer it.
    AllowSession,
    /// Run it, and remember the request's rule in `$DSH_HOME/approvals.json`. Treated as
    /// [`ApprovalDecision::AllowOnce`] when the request did not offer it.
    AllowAlways,
    /// Refuse it; `message` is what the model is told (`Error: <message>`, `PERMISSION_DENIED`).
    Reject {
        /// Said to the model.
        message: String,
    },
}

/// Decides [`ToolVerdict::Ask`] questions. Interactive front ends implement it by asking the
/// user (the request's `choices`: allow once / for the session / always / reject); the future may take as long as the user does (a cancelled turn
/// stops waiting and ends the call `ABORTED`).
pub trait Approver: Send + Sync {
    /// Answers `request`.
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision>;
}

/// The approver of headless runs: nobody can answer, so every question is rejected, with a
/// message that tells the model to stay within the preset.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadlessApprover;

impl Approver for HeadlessApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        let mut message = format!(
            "`{}` needs the user's approval ({}), but this session is headless and nobody can approve, so it was refused. Stay within the session's permission preset; the user can rerun with a wider --permission",
            request.tool_name, request.reason
        );
        if let Some(server) = request
            .tool_name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split("__").next())
        {
            message.push_str(&format!(
                ", trust the server in their own config (`trust = \"all\"` under `[mcp.servers.{server}]` in ~/.dsh/config.toml)"
            ));
        }
        if let Some(rule) = &request.rule {
            message.push_str(&format!(
                ", or remember a rule by answering \"always allow\" in an interactive session (it would allow {}; `dsh approvals list` shows the rules)",
                rule.describe()
            ));
        }
        message.push('.');
        Box::pin(async move { ApprovalDecision::Reject { message } })
    }
}

/// What a `pre_step` handler sees and may change.
#[derive(Debug, Default)]
pub struct PreStepContext {
    /// The turn about to take a step.
    pub turn: u64,
    /// The step about to start.
    pub step: u64,
    /// The history the model would see (projected from the log).
    pub history_len: usize,
    /// Model-facing context to append (as user-role messages) before this step's request.
    /// Each is logged as a `user/message` event.
    pub inject: Vec<Message>,
    /// Non-model-visible events to log before the injected messages (e.g. `permission/preset`).
    pub log_events: Vec<Event>,
    /// A permission preset switch that takes effect with this step (`/permission`).
    pub permission_change: Option<std::sync::Arc<crate::PermissionSetting>>,
}

/// What a `tool_post` handler sees and may change.
pub struct ToolPostContext<'a> {
    /// The call the result belongs to.
    pub call: &'a ToolCallInfo,
    /// The result, which the handler may replace.
    pub outcome: &'a mut ToolOutcome,
    /// Messages to queue for the next step (e.g. reminders).
    pub inject_next_step: &'a mut Vec<Message>,
    /// Non-model-visible events to log before the call's `tool/result` (e.g. `todo/write`).
    pub log_events: &'a mut Vec<Event>,
}

/// What a tool call produced: output for the model, or a structured error.
pub type ToolOutcome = Result<ToolOutput, ToolError>;

/// The agent an extension was attached to.
#[derive(Clone)]
pub struct AttachedAgent {
    /// Reaches the agent while it exists (weak: the agent owns its extensions).
    pub handle: crate::WeakAgentHandle,
    /// The session log's location (a file path for the JSONL store).
    pub location: String,
    /// The session id.
    pub session_id: String,
    /// The session's working directory.
    pub cwd: std::path::PathBuf,
    /// Delegation depth of the session (0 for a top-level session).
    pub depth: u64,
    /// The parent's session id, for a subagent (the header's `parentSession`).
    pub parent_session: Option<String>,
}

/// What a `turn_stopping` handler sees.
#[derive(Debug)]
pub struct TurnStoppingContext<'a> {
    /// The turn that is about to end.
    pub turn: u64,
    /// The last step of that turn.
    pub step: u64,
    /// The final assistant text of the step that wants to end the turn.
    pub final_text: &'a str,
}

/// Where in a turn [`Extension::turn_boundary`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnBoundary {
    /// Turn `n` begins.
    Start(u64),
    /// Turn `n` ended (completed, failed or cancelled).
    End(u64),
}

/// A future that produces a tool outcome, as passed through `tool_execute` middleware.
pub type ToolFuture = BoxFuture<'static, ToolOutcome>;

/// A bundle of handlers. Every method has a no-op default; implement the points you need.
pub trait Extension: Send + Sync + 'static {
    /// A stable name, used in logs and configuration.
    fn name(&self) -> &str;

    /// Tools this extension contributes. They are offered to the model while the extension is
    /// registered (checked at every step); a name that clashes with another tool ends the turn
    /// with an error naming both.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Model adapters this extension contributes, as `(route, adapter)`. Routes already in the
    /// agent's registry win.
    fn adapters(&self) -> Vec<(String, Arc<dyn dsh_llm::Adapter>)> {
        Vec::new()
    }

    /// Sections this extension contributes to the system prompt. Must be deterministic.
    fn prompt_sections(&self, _ctx: &PromptContext<'_>) -> Vec<PromptSection> {
        Vec::new()
    }

    /// Before each step's request: add model-facing context, or refuse the step with a reason
    /// (the turn then ends `blocked`).
    fn pre_step(&self, _ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        Ok(())
    }

    /// Observe or modify the outgoing request. The loop compares the header (call config,
    /// system prompt, tools) after all handlers ran and logs a `change` when one of them
    /// changed it. Messages added here are not logged: they reach this request only.
    fn request(&self, _request: &mut GenerateRequest) {}

    /// After a failed attempt: decide about a retry. The first handler returning `Some` wins.
    fn request_error(&self, _failure: &Failure, _retries_done: u32) -> Option<RetryDecision> {
        None
    }

    /// Before a tool body runs.
    fn tool_pre(&self, _call: &ToolCallInfo) -> ToolVerdict {
        ToolVerdict::Continue
    }

    /// Middleware around the tool body: return `next`, or a future that awaits it.
    fn tool_execute(&self, _call: &ToolCallInfo, next: ToolFuture) -> ToolFuture {
        next
    }

    /// After a tool body finished (or failed).
    fn tool_post(&self, _ctx: &mut ToolPostContext<'_>) {}

    /// A running call reported progress (an MCP server's message, a command's latest output),
    /// before it is logged and shown: change it in place (the safety policy redacts secrets
    /// here as in `tool_post`).
    fn tool_progress(&self, _progress: &mut dsh_tools::ToolProgress) {}

    /// The turn is about to end: return a message to steer the model into another step instead.
    fn turn_stopping(&self, _ctx: &TurnStoppingContext<'_>) -> Option<Message> {
        None
    }

    /// A turn begins (its `turn/start` and messages are logged, no request made yet) or has
    /// ended (its `turn/end` is logged): work to do at that point, and the events it returns,
    /// which the loop logs (workspace checkpoints, docs/rewind.md). A turn's start work runs
    /// beside its first request and is waited for before any tool of the turn runs and before
    /// the turn ends; the end work is waited for at once. Called with no lock held.
    fn turn_boundary(&self, _boundary: TurnBoundary) -> Option<BoxFuture<'static, Vec<Event>>> {
        None
    }

    /// Called once when an agent is built with this extension, with how to reach that agent.
    fn attach(&self, _agent: &AttachedAgent) {}

    /// Called once when a session is resumed, with every event already in its log, so that
    /// state kept in the extension (what was last sent, counters) continues where it stopped.
    fn restore(&self, _events: &[Envelope]) {}

    /// Every durable session event, after it was appended.
    fn on_event(&self, _event: &Envelope) {}

    /// Records of model usage spent on the agent's behalf that no tool result carries (a
    /// failed or background subagent's run, as `subagent/usage`), not logged yet: the loop
    /// logs them at the end of each step, and from there they count in the session's and the
    /// turn's usage (docs/agent.md, "Delegation"; docs/sessions.md, "Cost").
    fn take_usage_records(&self) -> Vec<Event> {
        Vec::new()
    }

    /// The agent ran every queued turn and has no input left: queue follow-up input now (the
    /// goal driver's next round, docs/goals.md), and [`crate::Agent::run_until_idle`] runs it
    /// before returning. Called with no lock held.
    fn on_idle(&self) {}

    /// Whether work this extension started (e.g. a running background job) may still wake the
    /// idle agent; [`crate::Agent::run_until_settled`] keeps waiting while any extension says
    /// so (docs/agent.md, "Wake-ups").
    fn keeps_waking(&self) -> bool {
        false
    }

    /// Slash commands this extension offers users of interactive front ends (`/name`), e.g.
    /// user-invocable skills. Front ends list them next to their own commands.
    fn user_commands(&self) -> Vec<UserCommand> {
        Vec::new()
    }

    /// Appends the user's note `text` to the instructions file of `scope` (a `# note` typed
    /// in a front end, docs/agent.md "Notes to the instructions"), when this extension owns
    /// the instruction files: `Some(Ok(path))` written, `Some(Err)` why not.
    fn remember(
        &self,
        _scope: NoteScope,
        _text: &str,
    ) -> Option<Result<std::path::PathBuf, String>> {
        None
    }

    /// The instructions file a note of `scope` goes to and `/memory` opens, when this
    /// extension owns the instruction files.
    fn instructions_file(&self, _scope: NoteScope) -> Option<Result<std::path::PathBuf, String>> {
        None
    }

    /// The user edited the instructions file `path` (`/memory`): the model is told at the next
    /// step.
    fn instructions_edited(&self, _path: &std::path::Path) {}

    /// What `/name arguments` expands to, when `name` is one of this extension's
    /// [`Extension::user_commands`]: the user message and the settings of the turn it starts;
    /// `Some(Err)` is a message for the user.
    fn expand_user_command(
        &self,
        _name: &str,
        _arguments: &str,
    ) -> Option<Result<CommandExpansion, crate::ExtensionError>> {
        None
    }
}

/// Whose instructions file a note goes to ([`Extension::remember`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteScope {
    /// The project's (`AGENTS.md` at the project root): `# note`.
    Project,
    /// The user's (`$DSH_HOME/AGENTS.md`): `## note`.
    User,
}

/// A slash command contributed by an extension (see [`Extension::user_commands`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCommand {
    /// The name typed after `/`.
    pub name: String,
    /// One line for completion menus and `/help`.
    pub description: String,
    /// What to type after the name (ACP `input.hint`, completion menus); `None`: nothing said.
    pub hint: Option<String>,
}

/// What a slash command expands to ([`Extension::expand_user_command`]): the text queued as
/// the next turn's user message, and settings that hold for that turn only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandExpansion {
    /// The user message (empty: the command only switched something, nothing is queued).
    pub text: String,
    /// Settings of the turn the message starts (docs/commands.md, "Front matter").
    pub turn: TurnSettings,
    /// Where the command came from (its file), logged with the message as `user/command`;
    /// `None` logs nothing.
    pub origin: Option<String>,
    /// What to tell the user (`/goal` shows the goal); `None`: nothing.
    pub note: Option<String>,
}

impl From<String> for CommandExpansion {
    fn from(text: String) -> Self {
        CommandExpansion {
            text,
            ..CommandExpansion::default()
        }
    }
}

/// Settings one turn runs with instead of the session's, restored when it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnSettings {
    /// Only the tools this filter admits are offered in the turn (within the session's own).
    pub tool_filter: Option<crate::ToolFilter>,
    /// The model of the turn (same provider route); the session's model is back after it.
    pub model: Option<String>,
}

impl TurnSettings {
    /// True when the turn runs as the session does.
    pub fn is_empty(&self) -> bool {
        self.tool_filter.is_none() && self.model.is_none()
    }
}

struct Entry {
    id: u64,
    extension: Arc<dyn Extension>,
}

#[derive(Default)]
struct Inner {
    entries: RwLock<Vec<Entry>>,
    next_id: AtomicU64,
}

/// The registered extensions, in registration order.
#[derive(Clone, Default)]
pub struct ExtensionSet {
    inner: Arc<Inner>,
}

/// Keeps an extension registered; dropping it unregisters the extension.
#[must_use = "dropping the guard unregisters the extension at once"]
pub struct ExtensionGuard {
    id: u64,
    set: Weak<Inner>,
}

impl Drop for ExtensionGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.set.upgrade() {
            // A poisoned lock means a handler panicked while registering; the list itself is
            // still consistent (pushes and removes are single operations), so recover it.
            let mut entries = inner.entries.write_or_recover();
            entries.retain(|e| e.id != self.id);
        }
    }
}

impl ExtensionSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `extension` after those already present.
    pub fn register(&self, extension: Arc<dyn Extension>) -> ExtensionGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner
            .entries
            .write_or_recover()
            .push(Entry { id, extension });
        ExtensionGuard {
            id,
            set: Arc::downgrade(&self.inner),
        }
    }

    /// Registers `extension` for as long as the set lives (no guard to keep): for sets built
    /// for one agent, e.g. a subagent's.
    pub fn register_for_life(&self, extension: Arc<dyn Extension>) {
        std::mem::forget(self.register(extension));
    }

    /// A snapshot of the registered extensions, in order.
    pub fn snapshot(&self) -> Vec<Arc<dyn Extension>> {
        self.inner
            .entries
            .read_or_recover()
            .iter()
            .map(|e| Arc::clone(&e.extension))
            .collect()
    }

    /// Names of the registered extensions, in order.
    pub fn names(&self) -> Vec<String> {
        self.snapshot()
            .iter()
            .map(|e| e.name().to_string())
            .collect()
    }
}

/// Built-in extension: retry failed model calls per [`dsh_llm::RetryPolicy`] (docs/agent.md,
/// "Retries").
pub struct RetryExtension {
    policy: dsh_llm::RetryPolicy,
}

impl RetryExtension {
    /// Retries with `policy`.
    pub fn new(policy: dsh_llm::RetryPolicy) -> Self {
        RetryExtension { policy }
    }
}

impl Extension for RetryExtension {
    fn name(&self) -> &str {
        "retry"
    }

    fn request_error(&self, failure: &Failure, retries_done: u32) -> Option<RetryDecision> {
        let jitter_unit = rand::random::<f64>() * 2.0 - 1.0;
        Some(self.policy.decide(failure, retries_done, jitter_unit))
    }
}

/// Built-in extension: a default timeout for every tool call, and a grace period for the body
/// to stop after cancellation (docs/agent.md, "Guards"). A tool's own declared timeout is applied
/// by the tool.
pub struct ToolTimeoutExtension {
    timeout: Duration,
    grace: Duration,
}

impl ToolTimeoutExtension {
    /// Gives up on a tool body after `timeout`, cancelling it and waiting at most `grace` for it
    /// to stop.
    pub fn new(timeout: Duration, grace: Duration) -> Self {
        ToolTimeoutExtension { timeout, grace }
    }
}

impl Extension for ToolTimeoutExtension {
    fn name(&self) -> &str {
        "tool-timeout"
    }

    fn tool_execute(&self, call: &ToolCallInfo, next: ToolFuture) -> ToolFuture {
        let timeout = self.timeout;
        let grace = self.grace;
        let cancel = call.cancel.clone();
        let name = call.name.clone();
        Box::pin(async move {
            let mut next = next;
            tokio::select! {
                outcome = &mut next => outcome,
                _ = tokio::time::sleep(timeout) => {
                    cancel.cancel();
                    // Give the body a chance to kill its processes and report; its own report
                    // is replaced by the timeout either way.
                    let _ = tokio::time::timeout(grace, next).await;
                    Err(ToolError::new(
                        ToolErrorCode::ToolTimeout,
                        format!(
                            "`{name}` did not finish within {:.1} s and was stopped",
                            timeout.as_secs_f64()
                        ),
                    ))
                }
            }
        })
    }
}

/// A JSON value with object keys sorted, as text: the identity of a call's arguments.
pub(crate) fn canonical_arguments(raw: &str) -> String {
    fn sort(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(String, Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sort).collect()),
            other => other,
        }
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(value) => sort(value).to_string(),
        Err(_) => raw.trim().to_string(),
    }
}
