//! Command hooks in the Claude Code format (`hooks` in settings files, `hooks.json`): shell
//! commands that run at `SessionStart`, `UserPromptSubmit`, `PreToolUse`, `PostToolUse` and
//! `Stop`, get the event as JSON on stdin, and answer with their exit code (0 ok, 2 block with
//! stderr as the reason, anything else a non-blocking error) or a JSON object on stdout
//! (`decision`, `hookSpecificOutput.permissionDecision`, `additionalContext`, `continue`).
//!
//! [`ClaudeCodeHooks`] is one extension on the matching points (docs/agent.md, "Extensions"):
//! `pre_step` for session start and prompts, `tool_pre` for `PreToolUse` (deny, or ask the
//! approver), `tool_post` for `PostToolUse`, `turn_stopping` for `Stop`. Every run is logged as
//! `hook/invoked` and `hook/result` (not model-visible); context a hook adds reaches the model as a
//! `user/message` from the plugin `hooks-claude-code`.

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
    HookCommand, HookConfigError, HookEvent, HookGroup, HooksConfig, DEFAULT_HOOK_TIMEOUT,
    HOOKS_FILE,
};
use runner::{run_command, RunEnd, RunOutput};

use crate::extension::{
    AttachedAgent, Extension, PreStepContext, ToolCallInfo, ToolPostContext, ToolVerdict,
    TurnStoppingContext,
};

/// The plugin name on messages hooks add to the conversation.
pub const HOOKS_PLUGIN: &str = "hooks-claude-code";

/// The `dialect` recorded in `hook/invoked`.
const DIALECT: &str = "claude-code";

/// A `Stop` hook may keep a turn going at most this many times; then the turn ends anyway.
const MAX_STOP_CONTINUATIONS: u32 = 8;

/// Longest stderr kept in `hook/result.stderrSummary`.
const SUMMARY_CHARS: usize = 2000;

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
    stop_continuations: u32,
    stop_requested: Option<String>,
}

/// The hooks extension. Build it with [`ClaudeCodeHooks::new`] from a checked
/// [`HooksConfig`]; commands run in the session's working directory.
pub struct ClaudeCodeHooks {
    config: HooksConfig,
    state: Mutex<State>,
}

impl ClaudeCodeHooks {
    /// Runs the hooks of `config`.
    pub fn new(config: HooksConfig) -> Self {
        ClaudeCodeHooks {
            config,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain data updated in single statements; a panic elsewhere cannot leave
        // it inconsistent, so a poisoned lock is recovered.
        self.state.lock_or_recover()
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
        let (attached, turn) = {
            let state = self.state();
            (state.attached.clone(), state.turn)
        };
        let Some(attached) = attached else {
            return Vec::new();
        };
        payload.insert("session_id".into(), json!(attached.session_id));
        payload.insert("transcript_path".into(), json!(attached.location));
        payload.insert("cwd".into(), json!(attached.cwd.display().to_string()));
        payload.insert("hook_event_name".into(), json!(event.as_str()));
        let input = Value::Object(payload).to_string();
        let mut env = dsh_tools::scrubbed_env();
        for name in ["CLAUDE_PROJECT_DIR", "DSH_PROJECT_DIR"] {
            env.push((name.into(), attached.cwd.clone().into_os_string()));
        }
        let mut verdicts = Vec::new();
        for group in groups {
            for command in &group.commands {
                let n = {
                    let mut state = self.state();
                    let counter = state.invocations.entry(event).or_insert(0);
                    *counter += 1;
                    *counter
                };
                let handler_id = format!("{DIALECT}:{}:{n}", event.as_str());
                let mut invoked = json!({
                    "turn": turn,
                    "point": event.as_str(),
                    "dialect": DIALECT,
                    "handlerId": handler_id,
                });
                if let Some(matcher) = &group.matcher {
                    invoked["matcher"] = json!(matcher);
                }
                log(&attached, "hook/invoked", invoked);
                let output = blocking(|| {
                    run_command(
                        &command.command,
                        &attached.cwd,
                        &env,
                        input.as_bytes(),
                        command.timeout,
                    )
                });
                let (verdict, error) = interpret(event, &output, command.timeout);
                let mut result = json!({
                    "turn": turn,
                    "point": event.as_str(),
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

/// A model-facing message from the hooks plugin.
fn hook_message(text: &str) -> Message {
    Message {
        id: uuid::Uuid::new_v4().to_string(),
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        source: MessageSource::Plugin {
            plugin: HOOKS_PLUGIN.to_string(),
            form: None,
            extra: Map::new(),
        },
    }
}

/// Turns a run into a verdict, and an error message when the hook failed (non-blocking).
fn interpret(event: HookEvent, output: &RunOutput, timeout: Duration) -> (Verdict, Option<String>) {
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
        RunEnd::TimedOut => error(format!(
            "did not finish within {:.0} s and was killed with its process group",
            timeout.as_secs_f64()
        )),
        RunEnd::Exited(Some(2)) => (
            Verdict {
                decision: "block",
                reason: Some(if stderr.is_empty() {
                    format!("blocked by a {} hook", event.as_str())
                } else {
                    stderr.to_string()
                }),
                ..Verdict::default()
            },
            None,
        ),
        RunEnd::Exited(Some(0)) => interpret_stdout(event, output.stdout.trim()),
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

fn interpret_stdout(event: HookEvent, stdout: &str) -> (Verdict, Option<String>) {
    let pass = Verdict {
        decision: "pass",
        ..Verdict::default()
    };
    if stdout.is_empty() {
        return (pass, None);
    }
    if !stdout.starts_with('{') {
        // Plain text: context for the events where Claude Code adds stdout to the context.
        let context = matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
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
    let specific = value.get("hookSpecificOutput");
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

impl Extension for ClaudeCodeHooks {
    fn name(&self) -> &str {
        HOOKS_PLUGIN
    }

    fn attach(&self, agent: &AttachedAgent) {
        self.state().attached = Some(agent.clone());
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
            let source = if resumed { "resume" } else { "startup" };
            let mut payload = Map::new();
            payload.insert("source".into(), json!(source));
            let verdicts = self.run(HookEvent::SessionStart, Some(source), payload);
            ctx.inject.extend(
                verdicts
                    .iter()
                    .filter_map(|v| v.context.as_deref())
                    .map(hook_message),
            );
            self.note_stop(&verdicts);
        }
        for prompt in prompts {
            let mut payload = Map::new();
            payload.insert("prompt".into(), json!(prompt));
            let verdicts = self.run(HookEvent::UserPromptSubmit, None, payload);
            if let Some(blocked) = verdicts.iter().find(|v| v.decision == "block") {
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
                    .map(hook_message),
            );
        }
        Ok(())
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        let mut payload = Map::new();
        payload.insert("tool_name".into(), json!(call.name));
        payload.insert("tool_input".into(), tool_input(&call.arguments));
        payload.insert("tool_use_id".into(), json!(call.call_id));
        let verdicts = self.run(HookEvent::PreToolUse, Some(&call.name), payload);
        self.note_stop(&verdicts);
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
                    let _ = handle.inject(hook_message(context));
                }
            }
        }
        let refused = |v: &&Verdict| matches!(v.decision, "block" | "deny" | "stop");
        if let Some(denied) = verdicts.iter().find(refused) {
            let reason = denied
                .reason
                .clone()
                .or_else(|| denied.stop.clone())
                .unwrap_or_else(|| format!("`{}` was refused by a PreToolUse hook", call.name));
            return ToolVerdict::Deny { reason };
        }
        if let Some(ask) = verdicts.iter().find(|v| v.decision == "ask") {
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
        let text: String = output
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut payload = Map::new();
        payload.insert("tool_name".into(), json!(ctx.call.name));
        payload.insert("tool_input".into(), tool_input(&ctx.call.arguments));
        payload.insert("tool_use_id".into(), json!(ctx.call.call_id));
        payload.insert(
            "tool_response".into(),
            json!({"output": text, "data": output.data}),
        );
        let verdicts = self.run(HookEvent::PostToolUse, Some(&ctx.call.name), payload);
        self.note_stop(&verdicts);
        ctx.inject_next_step.extend(
            verdicts
                .iter()
                .filter_map(|v| v.context.as_deref())
                .map(hook_message),
        );
        if let Some(blocked) = verdicts.iter().find(|v| v.decision == "block") {
            let reason = blocked.reason.clone().unwrap_or_else(|| {
                format!(
                    "the output of `{}` was rejected by a PostToolUse hook",
                    ctx.call.name
                )
            });
            *ctx.outcome = Err(ToolError::new(ToolErrorCode::PermissionDenied, reason));
        }
    }

    fn turn_stopping(&self, ctx: &TurnStoppingContext<'_>) -> Option<Message> {
        let active = {
            let state = self.state();
            if state.stop_requested.is_some() {
                return None;
            }
            state.stop_continuations
        };
        let mut payload = Map::new();
        payload.insert("stop_hook_active".into(), json!(active > 0));
        payload.insert("last_assistant_message".into(), json!(ctx.final_text));
        let verdicts = self.run(HookEvent::Stop, None, payload);
        if verdicts.iter().any(|v| v.stop.is_some()) {
            return None;
        }
        let reason = verdicts
            .iter()
            .find(|v| v.decision == "block")
            .map(|v| v.reason.clone().unwrap_or_else(|| "Continue.".into()))?;
        let mut state = self.state();
        if state.stop_continuations >= MAX_STOP_CONTINUATIONS {
            return None;
        }
        state.stop_continuations += 1;
        Some(hook_message(&reason))
    }
}
