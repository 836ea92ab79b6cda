//! `dsh mcp-server`: dsh as a Model Context Protocol server on stdin/stdout (docs/mcp-server.md),
//! so other agents and editors can hand dsh a task. Two tools: `dsh` starts a session with a
//! prompt and runs it to the end of its turn, `dsh-reply` adds a turn to a session. Each call is
//! one headless run, `dsh run`'s own (`run::run_headless`): the same configuration layers,
//! trust, sandbox, secrets and headless broker, logged as a `dsh run` session is. Calls run
//! concurrently, each in its own session; `notifications/cancelled` cancels a call's turn.
//!
//! Only MCP messages reach stdout: the protocol writes to a copy of the descriptor, and
//! descriptor 1 itself is pointed at stderr before anything else runs, so a stray print (of dsh
//! or of a child that inherits it) cannot corrupt the stream.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use dsh_llm::LockExt;
use dsh_protocol::{CardState, ViewEvent};
use dsh_runtime::{Choices, Resume, Runtime, SessionSpec};
use dsh_tools::PermissionPreset;
use rmcp::model::{
    CallToolRequestParam, CallToolResult, Content, Implementation, ListToolsResult,
    PaginatedRequestParam, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerInfo, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::progress::one_line;
use crate::run::{HeadlessEnd, RunArgs, UserError, Watch};

// Arguments of `dsh mcp-server` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct McpServerArgs {
    // The sessions' provider, model, effort and preset; a call may choose its own model and
    // effort, and a preset no wider than this one.
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
}

/// The `dsh` tool's name.
const START_TOOL: &str = "dsh";
/// The `dsh-reply` tool's name.
const REPLY_TOOL: &str = "dsh-reply";
/// How long the server waits, once the client has gone, for its calls' turns to end
/// (cancelled) and be logged.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs `dsh mcp-server` until the client closes stdin.
pub(crate) fn run(args: McpServerArgs) -> anyhow::Result<ExitCode> {
    let protocol_out = protocol_stdout()?;
    let runtime = crate::run::runtime(None, args.session.choices())?;
    let server = McpServer {
        inner: Arc::new(Inner {
            runtime,
            sessions: Mutex::new(HashMap::new()),
            calls: Arc::new(tokio::sync::RwLock::new(())),
            shutdown: CancellationToken::new(),
        }),
    };
    let inner = Arc::clone(&server.inner);
    let tokio = crate::run::async_runtime()?;
    tokio.block_on(async move {
        let out = tokio::fs::File::from_std(protocol_out);
        let service = server
            .serve((tokio::io::stdin(), out))
            .await
            .context("the MCP client did not complete the handshake")?;
        let _ = service.waiting().await;
        // The client is gone: cancel the calls still running and let their turns be logged.
        inner.shutdown.cancel();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, inner.calls.write()).await;
        anyhow::Ok(())
    })?;
    // A tool process may still hold a blocking read; do not wait for it.
    tokio.shutdown_background();
    Ok(ExitCode::SUCCESS)
}

/// The stream the protocol is written to: a copy of stdout, after which descriptor 1 is
/// stderr, so nothing else can write to the client (docs/mcp-server.md, "What is confined").
#[cfg(unix)]
fn protocol_stdout() -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsFd;
    let copy = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot take stdout for the MCP stream")?;
    // SAFETY: dup2 on the process's own standard descriptors; the copy above keeps stdout.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot point stdout at stderr");
    }
    Ok(std::fs::File::from(copy))
}

#[cfg(not(unix))]
fn protocol_stdout() -> anyhow::Result<std::fs::File> {
    anyhow::bail!("`dsh mcp-server` runs on Unix only")
}

/// The server: one per process, shared by its calls.
#[derive(Clone)]
struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    /// The process's runtime: configuration resolved per working directory and choices.
    runtime: Runtime,
    /// The settings of the sessions this server started, by id: a reply continues a session
    /// with the settings it started with (its preset above all).
    sessions: Mutex<HashMap<String, CallSettings>>,
    /// Held (read) by every running call; taken (write) at shutdown to wait for them.
    calls: Arc<tokio::sync::RwLock<()>>,
    /// Cancelled when the client has gone.
    shutdown: CancellationToken,
}

/// What a session runs with, beyond its prompt.
#[derive(Debug, Clone, Default)]
struct CallSettings {
    cwd: Option<PathBuf>,
    model: Option<String>,
    effort: Option<String>,
    preset: Option<String>,
    append_system_prompt: Option<String>,
    allowed_tools: Vec<String>,
    disallowed_tools: Vec<String>,
    max_steps: Option<u64>,
    max_wall_time: Option<Duration>,
    max_cost_usd: Option<f64>,
}

/// The arguments of `dsh`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartArgs {
    prompt: String,
    model: Option<String>,
    effort: Option<String>,
    preset: Option<String>,
    cwd: Option<PathBuf>,
    append_system_prompt: Option<String>,
    #[serde(default)]
    allowed_tools: Vec<String>,
    #[serde(default)]
    disallowed_tools: Vec<String>,
    max_steps: Option<u64>,
    max_wall_time_secs: Option<u64>,
    max_cost_usd: Option<f64>,
}

/// The arguments of `dsh-reply`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyArgs {
    session_id: String,
    prompt: String,
}

/// The JSON schema of `dsh`'s arguments.
fn start_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "The task for the agent."},
            "model": {"type": "string", "description": "Model id (default: the configured model; `dsh models` lists them)."},
            "effort": {"type": "string", "description": "Reasoning effort the model supports (DeepSeek: off, low, high, max)."},
            "preset": {
                "type": "string",
                "enum": ["read-only", "ask", "workspace-write", "danger-full-access"],
                "description": "Permission preset of the session; no wider than the server's (default: the server's). `ask` refuses every edit and command, as nobody can approve them."
            },
            "cwd": {"type": "string", "description": "Working directory (the workspace) of the session (default: the server's)."},
            "append_system_prompt": {"type": "string", "description": "Text added at the end of the system prompt."},
            "allowed_tools": {"type": "array", "items": {"type": "string"}, "description": "Offer the model only these tools (names, or patterns with `*`)."},
            "disallowed_tools": {"type": "array", "items": {"type": "string"}, "description": "Never offer these tools (names or patterns)."},
            "max_steps": {"type": "integer", "minimum": 1, "description": "End the turn before its step N+1 (one step is one model call)."},
            "max_wall_time_secs": {"type": "integer", "minimum": 1, "description": "End the turn when it has run this many seconds."},
            "max_cost_usd": {"type": "number", "minimum": 0, "description": "End the turn before the next step once it has spent this many US dollars."}
        },
        "required": ["prompt"],
        "additionalProperties": false
    })
}

/// The JSON schema of `dsh-reply`'s arguments.
fn reply_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": {"type": "string", "description": "The session to continue: the `session_id` a `dsh` call returned (or one `dsh sessions list` shows)."},
            "prompt": {"type": "string", "description": "The next message for the agent."}
        },
        "required": ["session_id", "prompt"],
        "additionalProperties": false
    })
}

/// A tool of this server.
fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let schema = match schema {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(name, description, Arc::new(schema)).annotate(ToolAnnotations {
        read_only_hint: Some(false),
        destructive_hint: Some(true),
        open_world_hint: Some(true),
        ..ToolAnnotations::default()
    })
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerInfo {
        ServerInfo {
            capabilities: ServerCapabilities::builder().enable_tools().build(),
            server_info: Implementation {
                name: "dsh".to_string(),
                title: Some("dsh coding agent".to_string()),
                version: env!("CARGO_PKG_VERSION").to_string(),
                icons: None,
                website_url: None,
            },
            instructions: Some(
                "dsh is a coding agent. `dsh` runs a task in a new session until the agent's \
                 turn ends and returns its answer and session_id; `dsh-reply` continues that \
                 session."
                    .to_string(),
            ),
            ..ServerInfo::default()
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParam>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult {
            tools: vec![
                tool(
                    START_TOOL,
                    "Run a task with the dsh coding agent in a new session, to the end of its \
                     turn: it reads, edits and runs commands in `cwd` within its permission \
                     preset. Returns the agent's final answer and the session_id.",
                    start_schema(),
                ),
                tool(
                    REPLY_TOOL,
                    "Continue a dsh session (its session_id from `dsh`) with a new prompt, to \
                     the end of the turn. Returns the agent's final answer.",
                    reply_schema(),
                ),
            ],
            next_cursor: None,
            meta: None,
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParam,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let (resume, settings, prompt) = match request.name.as_ref() {
            START_TOOL => {
                let args: StartArgs = parse_arguments(START_TOOL, arguments)?;
                // The client's directory is checked as an added one is: never `/`, dsh's home
                // or a protected entry (docs/SECURITY.md, "A delegating client cannot widen
                // the preset").
                let home = self.inner.runtime.home();
                let cwd = args
                    .cwd
                    .as_deref()
                    .map(|dir| dsh_runtime::delegated_cwd(dir, home))
                    .transpose();
                let cwd = match cwd {
                    Ok(cwd) => cwd,
                    Err(err) => {
                        return Ok(failed(&failure_of(&crate::run::runtime_error(err)), None))
                    }
                };
                let settings = CallSettings {
                    cwd,
                    model: args.model,
                    effort: args.effort,
                    preset: args.preset,
                    append_system_prompt: args.append_system_prompt,
                    allowed_tools: args.allowed_tools,
                    disallowed_tools: args.disallowed_tools,
                    max_steps: args.max_steps,
                    max_wall_time: args.max_wall_time_secs.map(Duration::from_secs),
                    max_cost_usd: args.max_cost_usd,
                };
                (Resume::New, settings, args.prompt)
            }
            REPLY_TOOL => {
                let args: ReplyArgs = parse_arguments(REPLY_TOOL, arguments)?;
                match self.inner.reply_settings(&args.session_id) {
                    Ok((id, settings)) => (Resume::Id(id), settings, args.prompt),
                    Err(failure) => return Ok(failed(&failure, None)),
                }
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool `{other}`: this server has `{START_TOOL}` and `{REPLY_TOOL}`"),
                    None,
                ))
            }
        };
        if prompt.trim().is_empty() {
            return Err(McpError::invalid_params(
                "`prompt` is empty: give the agent a task",
                None,
            ));
        }
        Ok(self.inner.call(resume, settings, prompt, context).await)
    }
}

/// `arguments` as `T`, or an invalid-params error naming the tool and the problem.
fn parse_arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> Result<T, McpError> {
    serde_json::from_value(arguments).map_err(|err| {
        McpError::invalid_params(
            format!("invalid arguments for `{tool}`: {err} (tools/list gives the schema)"),
            None,
        )
    })
}

impl Inner {
    /// The session `key` names and the settings to continue it with: those it started with
    /// when this server started it, else the server's own in the session's working directory.
    fn reply_settings(&self, key: &str) -> Result<(String, CallSettings), UserError> {
        // A whole id, never a path or a prefix: a reply continues a session of the store, not
        // any file that looks like a log (`x.jsonl` beside the server), and an ambiguous prefix
        // would list every stored id (docs/SECURITY.md, "A delegating client cannot widen the
        // preset").
        let id_like = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if key.is_empty() || !key.chars().all(id_like) {
            return Err(UserError {
                code: "INVALID_ARGS".to_string(),
                message: format!(
                    "`{key}` is not a session id: give the session_id a `dsh` call returned"
                ),
            });
        }
        let store = self.runtime.store();
        let not_found = || UserError {
            code: "NOT_FOUND".to_string(),
            message: format!(
                "no session `{key}`; give the whole session_id a `dsh` call returned, or start \
                 one with the `dsh` tool"
            ),
        };
        let id = store.resolve(key).map_err(|_| not_found())?;
        if id != key {
            return Err(not_found());
        }
        if let Some(settings) = self.sessions.lock_or_recover().get(&id) {
            return Ok((id, settings.clone()));
        }
        // The directory the session was logged in passes the check a client's `cwd` passes:
        // a session the user ran in dsh's home or in `/` is not the client's to continue there.
        let cwd = store
            .load(&id)
            .ok()
            .map(|log| PathBuf::from(log.header.cwd))
            .filter(|cwd| cwd.is_dir())
            .map(|cwd| dsh_runtime::delegated_cwd(&cwd, self.runtime.home()))
            .transpose()
            .map_err(|err| failure_of(&crate::run::runtime_error(err)))?;
        Ok((
            id,
            CallSettings {
                cwd,
                ..CallSettings::default()
            },
        ))
    }

    /// One tool call: a headless run of `prompt` with `settings`, answered as MCP content.
    async fn call(
        &self,
        resume: Resume,
        settings: CallSettings,
        prompt: String,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _running = Arc::clone(&self.calls).read_owned().await;
        let spec = match self.session_spec(resume, &settings) {
            Ok(spec) => spec,
            Err(failure) => return failed(&failure, None),
        };
        let args = run_args(&settings);
        let cancel = CancellationToken::new();
        let link = tokio::spawn({
            let cancel = cancel.clone();
            let request = context.ct.clone();
            let shutdown = self.shutdown.clone();
            async move {
                tokio::select! {
                    () = request.cancelled() => {}
                    () = shutdown.cancelled() => {}
                }
                cancel.cancel();
            }
        });
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (context.peer.clone(), token));
        let input = crate::run::HeadlessInput::Task(prompt);
        let ended =
            crate::run::run_headless(&self.runtime, &spec, &args, None, input, &cancel, |w| {
                spawn_progress(w, progress)
            })
            .await;
        link.abort();
        let end = match ended {
            Ok(end) => end,
            Err(err) => return failed(&failure_of(&err), None),
        };
        if matches!(spec.resume, Resume::New) {
            self.sessions
                .lock_or_recover()
                .insert(end.session_id.clone(), settings);
        }
        answer(&end)
    }

    /// The session spec of a call: its working directory and choices over the server's, the
    /// preset checked to be no wider than the one the server would give the session.
    fn session_spec(
        &self,
        resume: Resume,
        settings: &CallSettings,
    ) -> Result<SessionSpec, UserError> {
        let mut spec = SessionSpec {
            cwd: settings.cwd.clone(),
            resume,
            choices: Choices {
                model: settings.model.clone(),
                effort: settings.effort.clone(),
                ..Choices::default()
            },
            append_system_prompt: settings
                .append_system_prompt
                .clone()
                .filter(|text| !text.trim().is_empty()),
            tool_filter: crate::run::tool_filter(
                &settings.allowed_tools,
                &settings.disallowed_tools,
            ),
            ..SessionSpec::default()
        };
        let Some(preset) = &settings.preset else {
            return Ok(spec);
        };
        let asked: PermissionPreset = preset.trim().parse().map_err(|message| UserError {
            code: "INVALID_ARGS".to_string(),
            message,
        })?;
        let ceiling = self
            .runtime
            .configuration(&spec)
            .map_err(|err| failure_of(&crate::run::runtime_error(err)))?
            .permission;
        let rank = |preset: PermissionPreset| {
            PermissionPreset::ALL
                .iter()
                .position(|p| *p == preset)
                .unwrap_or(usize::MAX)
        };
        if rank(asked) > rank(ceiling) {
            return Err(UserError {
                code: "PERMISSION_DENIED".to_string(),
                message: format!(
                    "preset `{}` is wider than `{}`, the preset this server gives sessions \
                     here; a call may only narrow it. To allow it, start the server with \
                     `dsh mcp-server --permission {}`",
                    asked.as_str(),
                    ceiling.as_str(),
                    asked.as_str()
                ),
            });
        }
        spec.choices.permission = Some(asked.as_str().to_string());
        Ok(spec)
    }
}

/// The `dsh run` arguments a call amounts to: its budgets, nothing printed, background jobs
/// waited for as `dsh run` waits.
fn run_args(settings: &CallSettings) -> RunArgs {
    RunArgs {
        cwd: settings.cwd.clone(),
        max_wall_time: settings.max_wall_time,
        max_steps: settings.max_steps,
        max_cost_usd: settings.max_cost_usd,
        ..RunArgs::driven()
    }
}

/// `err` as a named failure: a user error as it is, a runtime error under its code (`SESSION`
/// for a session another call holds), anything else as `INTERNAL`, with its causes.
fn failure_of(err: &anyhow::Error) -> UserError {
    if let Some(user) = err.downcast_ref::<UserError>() {
        return UserError {
            code: user.code.clone(),
            message: user.message.clone(),
        };
    }
    match err.downcast_ref::<dsh_runtime::RuntimeError>() {
        // Its message names its cause already.
        Some(runtime) => UserError {
            code: runtime.code().to_string(),
            message: runtime.to_string(),
        },
        None => UserError {
            code: "INTERNAL".to_string(),
            message: format!("{err:#}"),
        },
    }
}

/// A failed call: `isError`, the text `CODE: message`, and the result object when a turn ran.
fn failed(failure: &UserError, structured: Option<Value>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![Content::text(format!(
        "{}: {}",
        failure.code,
        dsh_tools::printable(&failure.message)
    ))]);
    result.structured_content = structured;
    result
}

/// The answer to a call whose run ended: the final text and the session id as text, the
/// result object (`dsh run --json`'s) as structured content; a turn that did not complete is
/// an error named by its code. Secrets are replaced throughout.
fn answer(end: &HeadlessEnd) -> CallToolResult {
    let Some(outcome) = &end.outcome else {
        return failed(
            &UserError {
                code: "UNKNOWN".to_string(),
                message: "no turn ran".to_string(),
            },
            None,
        );
    };
    let secrets = end.setup.secrets();
    let mut structured = crate::run::result_json(end, outcome);
    secrets.redact_json(&mut structured);
    if let Some(failure) = crate::run::turn_failure(&end.setup, &outcome.reason) {
        let mut result = failed(&failure, Some(structured));
        result.content.push(Content::text(session_note(end)));
        return result;
    }
    let text = secrets.redact(outcome.final_text.trim_end());
    let mut result = CallToolResult::success(vec![
        Content::text(text.into_owned()),
        Content::text(session_note(end)),
    ]);
    result.structured_content = Some(structured);
    result
}

/// The line that tells the client's model how to go on with the session.
fn session_note(end: &HeadlessEnd) -> String {
    format!(
        "[dsh session_id: {}; continue it with `{REPLY_TOOL}`]",
        end.session_id
    )
}

/// Sends the run's steps as `notifications/progress` under `progress`'s token (nothing
/// without one): a short line per step, tool call, retry and compaction.
fn spawn_progress(
    watch: Watch,
    progress: Option<(Peer<RoleServer>, ProgressToken)>,
) -> tokio::task::JoinHandle<()> {
    let Watch {
        secrets,
        mut projector,
        mut events,
        finished,
        ..
    } = watch;
    tokio::spawn(async move {
        let Some((peer, token)) = progress else {
            return;
        };
        let mut count = 0u32;
        // A card is announced once, when it first appears.
        let mut announced = HashSet::new();
        loop {
            let envelope = tokio::select! {
                received = events.recv() => match received {
                    Ok(envelope) => envelope,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                () = finished.cancelled() => break,
            };
            for event in projector.project(&envelope) {
                if let ViewEvent::ToolCard(card) = &event {
                    let first = announced.insert(card.call_id.clone());
                    if card.state == CardState::Pending && !first {
                        continue;
                    }
                }
                let Some(line) = step_summary(&event) else {
                    continue;
                };
                count += 1;
                let line = dsh_tools::printable(&secrets.redact(&line)).into_owned();
                let _ = peer
                    .notify_progress(ProgressNotificationParam {
                        progress_token: token.clone(),
                        progress: f64::from(count),
                        total: None,
                        message: Some(line),
                    })
                    .await;
            }
        }
    })
}

/// A view event as one progress line, or `None` when it is not worth one.
fn step_summary(event: &ViewEvent) -> Option<String> {
    match event {
        ViewEvent::StepStarted { step, .. } => Some(format!("step {step}")),
        ViewEvent::ToolCard(card) if card.state == CardState::Pending => {
            let subject = card
                .presentation
                .subject
                .clone()
                .unwrap_or_else(|| card.arguments.clone());
            Some(format!(
                "-> {} {}",
                card.presentation.title,
                one_line(&subject, 120)
            ))
        }
        ViewEvent::ToolCard(card) if card.state.is_final() => {
            let how = match (&card.summary, &card.error_code) {
                (Some(summary), _) => format!("{} ({})", card.state.as_str(), summary.text),
                (None, Some(code)) => format!("{} ({code})", card.state.as_str()),
                (None, None) => card.state.as_str().to_string(),
            };
            Some(format!(
                "   {} {}",
                card.presentation.title,
                one_line(&how, 120)
            ))
        }
        ViewEvent::Retry { retry, code, .. } => Some(format!("retry {retry}: {code}")),
        ViewEvent::Compaction { phase, .. } => Some(format!("compaction {phase}")),
        _ => None,
    }
}
