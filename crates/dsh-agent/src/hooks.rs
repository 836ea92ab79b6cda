//! Command hooks in two dialects: Claude Code's (`hooks` in settings files, `hooks.json`) and
//! Codex's (`codex-hooks.json`). Shell commands run at `SessionStart`, `UserPromptSubmit`,
//! `PreToolUse`, `PostToolUse` and `Stop` (and, Claude Code only, `SubagentStart` and
//! `SubagentStop` in child sessions), get the event as JSON on stdin, and answer with their exit
//! code (0 ok, 2 block with stderr as the reason, anything else a non-blocking error) or a JSON
//! object on stdout (`decision`, `hookSpecificOutput.permissionDecision`, `additionalContext`,
//! `continue`).
//!
//! [`CommandHooks`] is one extension per dialect on the matching points (docs/agent.md,
//! "Extensions"): `pre_step` for session (or subagent) start and prompts, `tool_pre` for
//! `PreToolUse` (deny, or ask the approver), `tool_post` for `PostToolUse`, `turn_stopping` for
//! `Stop` (or `SubagentStop`). Every run is logged as `hook/invoked` and `hook/result` with the
//! dialect's name (not model-visible); context a hook adds reaches the model as a `user/message`
//! from the plugin `hooks-claude-code` or `hooks-codex` (docs/hooks.md).

mod config;
mod runner;

use dsh_llm::LockExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dsh_llm::{ContentBlock, Message, MessageSource, Role};
use dsh_session::{Envelope, Event};
use dsh_tools::{ToolError, ToolErrorCode};
use serde_json::{json, Map, Value};

pub use config::{
    HookCommand, HookConfigError, HookDialect, HookEvent, HookGroup, HookTable, HooksConfig,
    ScriptCheck, CODEX_HOOKS_FILE, DEFAULT_CODEX_HOOK_TIMEOUT, DEFAULT_HOOK_TIMEOUT, HOOKS_FILE,
};
use runner::{run_command, RunEnd, RunOutput};

use crate::extension::{
    AttachedAgent, Extension, PreStepContext, ToolCallInfo, ToolPostContext, ToolVerdict,
    TurnStoppingContext,
};

/// The plugin name on messages Claude Code hooks add to the conversation.
pub const HOOKS_PLUGIN: &str = "hooks-claude-code";

/// The `agent_type` of dsh's subagents in `SubagentStart`/`SubagentStop` payloads (Claude
/// Code's name for its general delegate).
const SUBAGENT_TYPE: &str = "general-purpose";

/// A `Stop` hook may keep a turn going at most this many times; then the turn ends anyway.
const MAX_STOP_CONTINUATIONS: u32 = 8;

/// Longest stderr kept in `hook/result.stderrSummary`.
const SUMMARY_CHARS: usize = 2000;

/// The parent of the child `agent` (docs/sessions.md, "Children"): its session id (the
/// header's `parentSession`) and, when it is a JSONL log, its path
/// (`<parent folder>/subagents/<child id>/session.jsonl`; a SQLite parent's is
/// `sqlite:<db>#<id>`).
fn parent_of(agent: &AttachedAgent) -> Option<(String, Option<String>)> {
    let id = agent.parent_session.clone()?;
    let path = std::path::Path::new(&agent.location);
    let folder = path.parent()?.parent()?.parent()?;
    let log = dsh_session::session_file_in(folder)
        .map(|p| p.display().to_string())
        .or_else(|| {
            let db = folder.parent()?.to_str()?.strip_suffix(".subagents")?;
            Some(format!("sqlite:{db}#{id}"))
        });
    Some((id, log))
}

/// What one hook run decided.
#[derive(Debug, Default, Clone)]
struct Verdict {
    /// `pass`, `block`, `allow`, `deny`, `ask`, `stop` or `error`, as logged.
    decision: &'static str,
    reason: Option<String>,
    context: Option<String>,
    /// `continue: false`: the reason to stop the turn.
    stop: Option<String>,
}

#[derive(Default)]
struct State {
    attached: Option<AttachedAgent>,
    turn: u64,
    pending_prompts: Vec<String>,
    session_started: bool,
    resumed: bool,
    invocations: HashMap<HookEvent, u64>,
    /// Codex numbers its handlers with one counter across all points.
    codex_invocations: u64,
    stop_continuations: u32,
    stop_requested: Option<String>,
    /// The model of the last request header (Codex payloads carry `model`).
    model: String,
    /// In a child session: the parent's session id and log, which Claude Code puts in
    /// `session_id` and `transcript_path` of `SubagentStart`/`SubagentStop` (the child is
    /// `agent_id` and `agent_transcript_path`).
    parent: Option<(String, Option<String>)>,
}

/// The hooks extension. Build it with [`CommandHooks::new`] from a checked [`HooksConfig`];
/// the configuration's dialect decides events, payloads and answers; commands run in the
/// session's working directory.
pub struct CommandHooks {
    config: HooksConfig,
    state: Mutex<State>,
}

/// The name this extension had when it ran Claude Code hooks only.
pub type ClaudeCodeHooks = CommandHooks;

impl CommandHooks {
    /// Runs the hooks of `config`.
    pub fn new(config: HooksConfig) -> Self {
        CommandHooks {
            config,
            state: Mutex::new(State::default()),
        }
    }

    /// Names `model` in Codex payloads until a request header names another.
    pub fn with_model(self, model: impl Into<String>) -> Self {
        self.state().model = model.into();
        self
    }

    fn dialect(&self) -> HookDialect {
        self.config.dialect()
    }

    fn codex(&self) -> bool {
        self.dialect() == HookDialect::Codex
    }

    /// True in a child session, where Claude Code runs `SubagentStart`/`SubagentStop` in place
    /// of `SessionStart`/`Stop`.
    fn in_subagent(&self, attached: Option<&AttachedAgent>) -> bool {
        !self.codex() && attached.is_some_and(|a| a.depth > 0)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain data updated in single statements; a panic elsewhere cannot leave
        // it inconsistent, so a poisoned lock is recovered.
        self.state.lock_or_recover()
    }

    /// `session_id` and `transcript_path` of a payload: the session's own, except that Claude
    /// Code's `SubagentStart`/`SubagentStop` name the main (parent) session (docs/hooks.md).
    fn session_fields(&self, event: HookEvent, attached: &AttachedAgent) -> (String, String) {
        let parent = self.state().parent.clone();
        let subagent_event = matches!(event, HookEvent::SubagentStart | HookEvent::SubagentStop);
        match parent.filter(|_| subagent_event && !self.codex()) {
            Some((id, log)) => (id, log.unwrap_or_else(|| attached.location.clone())),
            None => (attached.session_id.clone(), attached.location.clone()),
        }
    }

    /// Runs every command of every group of `event` that matches `subject` and returns their
    /// verdicts, logging `hook/invoked` and `hook/result` for each.
    fn run(
        &self,
        event: HookEvent,
        subject: Option<&str>,
        mut payload: Map<String, Value>,
    ) -> Vec<Verdict> {
        let groups: Vec<&HookGroup> = self
            .config
            .groups(event)
            .filter(|g| subject.is_none_or(|s| g.matches(s)))
            .collect();
        if groups.is_empty() {
            return Vec::new();
        }
        let (attached, turn, model) = {
            let state = self.state();
            (state.attached.clone(), state.turn, state.model.clone())
        };
        let Some(attached) = attached else {
            return Vec::new();
        };
        let dialect = self.dialect();
        let (session_id, transcript) = self.session_fields(event, &attached);
        payload.insert("session_id".into(), json!(session_id));
        payload.insert("transcript_path".into(), json!(transcript));
        payload.insert("cwd".into(), json!(attached.cwd.display().to_string()));
        payload.insert("hook_event_name".into(), json!(event.as_str()));
        if dialect == HookDialect::Codex {
            // Codex's payload: `model` and `permission_mode` on every event, `turn_id` on the
            // turn-scoped ones (docs/hooks.md, "The Codex dialect").
            payload.insert("model".into(), json!(model));
            payload.insert("permission_mode".into(), json!("default"));
            if event != HookEvent::SessionStart {
                payload.insert("turn_id".into(), json!(turn.to_string()));
            }
        }
        let input = Value::Object(payload).to_string();
        let mut env = dsh_tools::scrubbed_env();
        if let Some(path) = self.config.command_path() {
            env.retain(|(name, _)| name != "PATH");
            env.push(("PATH".into(), path.to_os_string()));
        }
        for name in ["CLAUDE_PROJECT_DIR", "DSH_PROJECT_DIR"] {
            env.push((name.into(), attached.cwd.clone().into_os_string()));
        }
        let mut verdicts = Vec::new();
        for group in groups {
            for command in &group.commands {
                let n = {
                    let mut state = self.state();
                    let counter = match dialect {
                        HookDialect::Codex => &mut state.codex_invocations,
                        HookDialect::ClaudeCode => state.invocations.entry(event).or_insert(0),
                    };
                    *counter += 1;
                    *counter
                };
                let handler_id = format!("{}:{}:{n}", dialect.as_str(), event.as_str());
                let mut invoked = json!({
                    "turn": turn,
                    "point": event.as_str(),
                    "dialect": dialect.as_str(),
                    "handlerId": handler_id,
                });
                if let Some(matcher) = &group.matcher {
                    invoked["matcher"] = json!(matcher);
                }
                log(&attached, "hook/invoked", invoked);
                let output = self.execute(command, &attached.cwd, &env, input.as_bytes());
                let (verdict, error) = interpret(dialect, event, &output, command.timeout);
                // `dialect` here too, so that a result names its dialect without its
                // `hook/invoked`; logs written before it was added simply lack it.
                let mut result = json!({
                    "turn": turn,
                    "point": event.as_str(),
                    "dialect": dialect.as_str(),
                    "handlerId": handler_id,
                    "decision": verdict.decision,
                    "durationMs": output.duration.as_secs_f64() * 1000.0,
                });
                if let RunEnd::Exited(Some(code)) = output.end {
                    result["exitCode"] = json!(code);
                }
                let stderr = output.stderr.trim();
                if !stderr.is_empty() {
                    result["stderrSummary"] =
                        json!(stderr.chars().take(SUMMARY_CHARS).collect::<String>());
                }
                if let Some(error) = error {
                    result["error"] = json!(format!(
                        "{} hook `{}`: {error}",
                        event.as_str(),
                        command.command
                    ));
                }
                log(&attached, "hook/result", result);
                verdicts.push(verdict);
            }
        }
        verdicts
    }

    /// Runs `command` unless its script check refuses it (docs/hooks.md, "Scripts in the
    /// workspace are pinned"): the check is made right before the run, every time.
    fn execute(
        &self,
        command: &HookCommand,
        cwd: &std::path::Path,
        env: &[(std::ffi::OsString, std::ffi::OsString)],
        input: &[u8],
    ) -> RunOutput {
        if let Some(reason) = self.config.refusal(&command.command) {
            return RunOutput {
                end: RunEnd::Refused(reason),
                stdout: String::new(),
                stderr: String::new(),
                duration: Duration::ZERO,
            };
        }
        let confiner = match (command.confined, self.config.confiner()) {
            (false, _) => None,
            (true, Some(confiner)) => Some(confiner),
            (true, None) => {
                return RunOutput {
                    end: RunEnd::Refused(format!(
                        "`{}` is a project hook, and project hooks run only confined; this \
                         session has no confinement for them",
                        command.command
                    )),
                    stdout: String::new(),
                    stderr: String::new(),
                    duration: Duration::ZERO,
                }
            }
        };
        blocking(|| run_command(&command.command, cwd, env, input, command.timeout, confiner))
    }

    /// Remembers a `continue: false` so that the next step is refused.
    fn note_stop(&self, verdicts: &[Verdict]) {
        if let Some(reason) = verdicts.iter().find_map(|v| v.stop.clone()) {
            self.state().stop_requested.get_or_insert(reason);
        }
    }
}

/// Runs blocking work without stalling the other tasks of a multi-threaded runtime.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

fn log(attached: &AttachedAgent, event_type: &str, data: Value) {
    // The hook events are a record for people, not model input; a log that refuses them
    // refuses the next model-visible append too, which ends the turn with that error.
    if let Some(handle) = attached.handle.upgrade() {
        let _ = handle.log_event(Event::Opaque {
            event_type: event_type.to_string(),
            data,
        });
    }
}

/// A model-facing message from the hooks plugin of `dialect`.
fn hook_message(dialect: HookDialect, text: &str) -> Message {
    Message {
        id: uuid::Uuid::new_v4().to_string(),
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        source: MessageSource::Plugin {
            plugin: dialect.plugin().to_string(),
            form: None,
            extra: Map::new(),
        },
    }
}

/// Turns a run into a verdict, and an error message when the hook failed (non-blocking).
fn interpret(
    dialect: HookDialect,
    event: HookEvent,
    output: &RunOutput,
    timeout: Duration,
) -> (Verdict, Option<String>) {
    let error = |message: String| {
        (
            Verdict {
                decision: "error",
                ..Verdict::default()
            },
            Some(message),
        )
    };
    let stderr = output.stderr.trim();
    match &output.end {
        RunEnd::SpawnFailed(message) => error(message.clone()),
        // A guard that may not run denies the tool call it was to judge (fail closed).
        RunEnd::Refused(message) if event == HookEvent::PreToolUse => (
            Verdict {
                decision: "deny",
                reason: Some(format!("a PreToolUse hook was refused: {message}")),
                ..Verdict::default()
            },
            Some(message.clone()),
        ),
        RunEnd::Refused(message) => error(message.clone()),
        RunEnd::TimedOut => error(format!(
            "did not finish within {:.0} s and was killed with its process group",
            timeout.as_secs_f64()
        )),
        RunEnd::Exited(Some(2)) => (
            Verdict {
                decision: "block",
                // Codex's bridge keeps no reason for an empty stderr: the caller's fallback text
                // applies.
                reason: if !stderr.is_empty() {
                    Some(stderr.to_string())
                } else if dialect == HookDialect::Codex {
                    None
                } else {
                    Some(format!("blocked by a {} hook", event.as_str()))
                },
                ..Verdict::default()
            },
            None,
        ),
        RunEnd::Exited(Some(0)) => interpret_stdout(dialect, event, output.stdout.trim()),
        RunEnd::Exited(code) => {
            let how = code.map_or("was killed by a signal".to_string(), |c| {
                format!("exited with code {c}")
            });
            error(if stderr.is_empty() {
                how
            } else {
                format!("{how}: {stderr}")
            })
        }
    }
}

fn interpret_stdout(
    dialect: HookDialect,
    event: HookEvent,
    stdout: &str,
) -> (Verdict, Option<String>) {
    let pass = Verdict {
        decision: "pass",
        ..Verdict::default()
    };
    if stdout.is_empty() {
        return (pass, None);
    }
    if !stdout.starts_with('{') {
        // Plain text: context for the events where Claude Code adds stdout to the context.
        let context = matches!(
            event,
            HookEvent::UserPromptSubmit | HookEvent::SessionStart | HookEvent::SubagentStart
        )
        .then(|| stdout.to_string());
        return (Verdict { context, ..pass }, None);
    }
    let value: Value = match serde_json::from_str(stdout) {
        Ok(value) => value,
        Err(err) => {
            return (
                Verdict {
                    decision: "error",
                    ..Verdict::default()
                },
                Some(format!(
                    "printed invalid JSON on stdout ({err}); its output was ignored. Print one JSON object, or plain text"
                )),
            )
        }
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let specific = value.get("hookSpecificOutput").filter(|s| {
        // Codex's event-scoped answers count only when they name the event that ran.
        dialect == HookDialect::ClaudeCode
            || s.get("hookEventName").and_then(Value::as_str) == Some(event.as_str())
    });
    let mut verdict = pass;
    verdict.context = text(specific.and_then(|s| s.get("additionalContext")));
    match value.get("decision").and_then(Value::as_str) {
        Some("block") => {
            verdict.decision = "block";
            verdict.reason = text(value.get("reason"));
        }
        Some("approve") => verdict.decision = "allow",
        _ => {}
    }
    if event == HookEvent::PreToolUse {
        let reason = text(specific.and_then(|s| s.get("permissionDecisionReason")))
            .or_else(|| text(value.get("reason")));
        match specific
            .and_then(|s| s.get("permissionDecision"))
            .and_then(Value::as_str)
        {
            Some("deny") => {
                verdict.decision = "deny";
                verdict.reason = reason;
            }
            Some("ask") => {
                verdict.decision = "ask";
                verdict.reason = reason;
            }
            Some("allow") => verdict.decision = "allow",
            _ => {}
        }
    }
    if value.get("continue") == Some(&Value::Bool(false)) {
        verdict.decision = "stop";
        verdict.stop = Some(
            text(value.get("stopReason"))
                .unwrap_or_else(|| format!("stopped by a {} hook", event.as_str())),
        );
    }
    (verdict, None)
}

fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

/// Codex's `tool_input`: `{command}`, the call's `command` argument or `""`.
fn codex_tool_input(arguments: &str) -> Value {
    let command = tool_input(arguments)
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    json!({ "command": command })
}

impl CommandHooks {
    /// `tool_name`, `tool_input` and `tool_use_id` of a tool event, in the dialect's shape.
    fn tool_payload(&self, call: &ToolCallInfo) -> Map<String, Value> {
        let mut payload = Map::new();
        payload.insert("tool_name".into(), json!(call.name));
        let input = if self.codex() {
            codex_tool_input(&call.arguments)
        } else {
            tool_input(&call.arguments)
        };
        payload.insert("tool_input".into(), input);
        payload.insert("tool_use_id".into(), json!(call.call_id));
        payload
    }

    /// `SessionStart` (or, in a child session, `SubagentStart`) before the first step.
    fn session_start(&self, ctx: &mut PreStepContext, resumed: bool) {
        let attached = self.state().attached.clone();
        let verdicts = if self.in_subagent(attached.as_ref()) {
            let mut payload = Map::new();
            let id = attached.map(|a| a.session_id).unwrap_or_default();
            payload.insert("agent_id".into(), json!(id));
            payload.insert("agent_type".into(), json!(SUBAGENT_TYPE));
            self.run(HookEvent::SubagentStart, Some(SUBAGENT_TYPE), payload)
        } else {
            let source = if resumed { "resume" } else { "startup" };
            let mut payload = Map::new();
            payload.insert("source".into(), json!(source));
            self.run(HookEvent::SessionStart, Some(source), payload)
        };
        let dialect = self.dialect();
        ctx.inject.extend(
            verdicts
                .iter()
                .filter_map(|v| v.context.as_deref())
                .map(|c| hook_message(dialect, c)),
        );
        self.note_stop(&verdicts);
    }
}

impl Extension for CommandHooks {
    fn name(&self) -> &str {
        self.dialect().plugin()
    }

    fn attach(&self, agent: &AttachedAgent) {
        let parent = (agent.depth > 0).then(|| parent_of(agent)).flatten();
        let mut state = self.state();
        state.attached = Some(agent.clone());
        state.parent = parent;
    }

    fn restore(&self, _events: &[Envelope]) {
        self.state().resumed = true;
    }

    fn on_event(&self, envelope: &Envelope) {
        match &envelope.event {
            Event::TurnStart(start) => {
                let mut state = self.state();
                state.turn = start.turn;
                state.stop_continuations = 0;
            }
            Event::UserMessage(message) if matches!(message.source, MessageSource::User) => {
                self.state().pending_prompts.push(message.text());
            }
            Event::RequestHeader(header) => {
                self.state().model = header.header.config.config().model.clone();
            }
            _ => {}
        }
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        if let Some(reason) = self.state().stop_requested.take() {
            return Err(crate::ExtensionError::Blocked(reason));
        }
        let (start, prompts) = {
            let mut state = self.state();
            let start = (!state.session_started).then_some(state.resumed);
            state.session_started = true;
            (start, std::mem::take(&mut state.pending_prompts))
        };
        if let Some(resumed) = start {
            self.session_start(ctx, resumed);
        }
        let dialect = self.dialect();
        for prompt in prompts {
            let mut payload = Map::new();
            payload.insert("prompt".into(), json!(prompt));
            let verdicts = self.run(HookEvent::UserPromptSubmit, None, payload);
            if let Some(blocked) = verdicts
                .iter()
                .find(|v| matches!(v.decision, "block" | "deny"))
            {
                return Err(crate::ExtensionError::Blocked(
                    blocked.reason.clone().unwrap_or_else(|| {
                        "the prompt was blocked by a UserPromptSubmit hook".into()
                    }),
                ));
            }
            if let Some(reason) = verdicts.iter().find_map(|v| v.stop.clone()) {
                return Err(crate::ExtensionError::Blocked(reason));
            }
            ctx.inject.extend(
                verdicts
                    .iter()
                    .filter_map(|v| v.context.as_deref())
                    .map(|c| hook_message(dialect, c)),
            );
        }
        Ok(())
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        let payload = self.tool_payload(call);
        let verdicts = self.run(HookEvent::PreToolUse, Some(&call.name), payload);
        self.note_stop(&verdicts);
        let dialect = self.dialect();
        let contexts: Vec<&str> = verdicts
            .iter()
            .filter_map(|v| v.context.as_deref())
            .collect();
        if !contexts.is_empty() {
            let handle = self
                .state()
                .attached
                .as_ref()
                .and_then(|a| a.handle.upgrade());
            if let Some(handle) = handle {
                for context in contexts {
                    // Queued for the next step; a log that refuses it fails the step itself.
                    let _ = handle.inject(hook_message(dialect, context));
                }
            }
        }
        let refused = |v: &&Verdict| matches!(v.decision, "block" | "deny" | "stop");
        if let Some(denied) = verdicts.iter().find(refused) {
            let reason = denied
                .reason
                .clone()
                .or_else(|| denied.stop.clone())
                .unwrap_or_else(|| match dialect {
                    HookDialect::Codex => "blocked by PreToolUse hook".into(),
                    HookDialect::ClaudeCode => {
                        format!("`{}` was refused by a PreToolUse hook", call.name)
                    }
                });
            return ToolVerdict::Deny { reason };
        }
        // Codex honours blocking only: its hooks cannot ask for (or grant) approval.
        if let Some(ask) = verdicts
            .iter()
            .find(|v| v.decision == "ask" && dialect == HookDialect::ClaudeCode)
        {
            return ToolVerdict::Ask {
                reason: ask
                    .reason
                    .clone()
                    .unwrap_or_else(|| "a PreToolUse hook asks for approval".into()),
                escalation: None,
            };
        }
        ToolVerdict::Continue
    }

    fn tool_post(&self, ctx: &mut ToolPostContext<'_>) {
        let Ok(output) = &*ctx.outcome else {
            return;
        };
        let texts = output.content.iter().filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        });
        let dialect = self.dialect();
        let mut payload = self.tool_payload(ctx.call);
        let response = match dialect {
            // Codex's `tool_response` is the result's text.
            HookDialect::Codex => json!(texts.collect::<String>()),
            HookDialect::ClaudeCode => json!({
                "output": texts.collect::<Vec<_>>().join("\n"),
                "data": output.data,
            }),
        };
        payload.insert("tool_response".into(), response);
        let verdicts = self.run(HookEvent::PostToolUse, Some(&ctx.call.name), payload);
        self.note_stop(&verdicts);
        ctx.inject_next_step.extend(
            verdicts
                .iter()
                .filter_map(|v| v.context.as_deref())
                .map(|c| hook_message(dialect, c)),
        );
        if let Some(blocked) = verdicts.iter().find(|v| {
            v.decision == "block" || (dialect == HookDialect::Codex && v.decision == "deny")
        }) {
            let reason = blocked.reason.clone().unwrap_or_else(|| match dialect {
                HookDialect::Codex => "blocked by PostToolUse hook".into(),
                HookDialect::ClaudeCode => format!(
                    "the output of `{}` was rejected by a PostToolUse hook",
                    ctx.call.name
                ),
            });
            *ctx.outcome = Err(ToolError::new(ToolErrorCode::PermissionDenied, reason));
        }
    }

    fn turn_stopping(&self, ctx: &TurnStoppingContext<'_>) -> Option<Message> {
        let (active, attached) = {
            let state = self.state();
            if state.stop_requested.is_some() {
                return None;
            }
            (state.stop_continuations, state.attached.clone())
        };
        let mut payload = Map::new();
        payload.insert("stop_hook_active".into(), json!(active > 0));
        payload.insert("last_assistant_message".into(), json!(ctx.final_text));
        let verdicts = if self.in_subagent(attached.as_ref()) {
            if let Some(child) = &attached {
                payload.insert("agent_id".into(), json!(child.session_id));
                payload.insert("agent_transcript_path".into(), json!(child.location));
            }
            payload.insert("agent_type".into(), json!(SUBAGENT_TYPE));
            self.run(HookEvent::SubagentStop, Some(SUBAGENT_TYPE), payload)
        } else {
            self.run(HookEvent::Stop, None, payload)
        };
        if verdicts.iter().any(|v| v.stop.is_some()) {
            return None;
        }
        let dialect = self.dialect();
        let reason = verdicts
            .iter()
            .find(|v| {
                v.decision == "block" || (dialect == HookDialect::Codex && v.decision == "deny")
            })
            .map(|v| {
                v.reason.clone().unwrap_or_else(|| match dialect {
                    HookDialect::Codex => "continue: blocked by Stop hook".into(),
                    HookDialect::ClaudeCode => "Continue.".into(),
                })
            })?;
        let mut state = self.state();
        if state.stop_continuations >= MAX_STOP_CONTINUATIONS {
            return None;
        }
        state.stop_continuations += 1;
        Some(hook_message(dialect, &reason))
    }
}
