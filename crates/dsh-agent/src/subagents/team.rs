//! Steering children that exist: `send_message`, `list_agents`, `interrupt_agent`, and the
//! child-side `report` (tool names, schemas and texts follow dsh's; docs/agent.md,
//! "Delegation"). Also the choice of a child's model and effort.

use std::sync::Arc;

use dsh_llm::{ContentBlock, LockExt, Message, MessageSource, ReasoningEffort, Role};
use dsh_tools::{Tool, ToolContext, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use super::registry::{read_children, ChildState};
use super::{required_string, run, start_job, RunOrigin, Shared};
use crate::agent::AgentParts;
use crate::extension::Extension;

/// The parameter schema of a tool whose one argument is the required string `key`.
fn one_string_schema(key: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            key: {"type": "string", "description": description}
        },
        "required": [key],
        "additionalProperties": false
    })
}

fn unavailable(key: &str) -> ToolError {
    // dsh's wording, plus what to do.
    ToolError::new(
        ToolErrorCode::NotFound,
        format!("subagent \"{key}\" is unavailable: no child of this agent has that name or id; call list_agents to see your children"),
    )
}

/// `send_message {subagent_id, message}`: the message becomes the child's next turn.
pub(super) struct SendMessage {
    pub(super) shared: Arc<Shared>,
}

impl Tool for SendMessage {
    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        let to = dsh_tools::string_arg(args, "subagent_id").unwrap_or("?");
        let message = dsh_tools::string_arg(args, "message").unwrap_or_default();
        dsh_tools::ToolPresentation::new(self.name())
            .subject(dsh_tools::one_line(&format!("to {to}: {message}"), 120))
    }

    fn name(&self) -> &str {
        "send_message"
    }

    fn description(&self) -> &str {
        "Send a message to a subagent you started, by its name (agent-N) or subagent id, \
         continuing the same conversation. It becomes the subagent's next turn: if it is still \
         working, the message waits until its current turn finishes, so it cannot redirect work \
         already underway. A finished subagent starts that turn at once, as a background job \
         (you are told when it finishes; job_output reads the answer). This call returns no \
         answer from the subagent, only confirmation that the message was delivered. A failure \
         means the message was NOT delivered."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "subagent_id": {"type": "string", "description": "The subagent's name (agent-N) or id, as returned when it was started."},
                "message": {"type": "string", "description": "The message to deliver to the subagent."}
            },
            "required": ["subagent_id", "message"],
            "additionalProperties": false
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let key = required_string(&args, "subagent_id")?;
            let message = required_string(&args, "message")?;
            // Delegation must be set up (the child's loop is reopened through it).
            self.shared.link()?;
            let child = self
                .shared
                .registry
                .find(&key)
                .ok_or_else(|| unavailable(&key))?;
            let name = child.name.clone();
            {
                let mut status = child.status.lock_or_recover();
                if status.state == ChildState::Running {
                    match &status.handle {
                        Some(handle) => handle.followup(message.clone()).map_err(|e| {
                            ToolError::new(
                                ToolErrorCode::Io,
                                format!("the message was not delivered: {e}"),
                            )
                        })?,
                        None => status.queued.push(message.clone()),
                    }
                    return Ok(ToolOutput::text(format!(
                        "message queued as the next turn for subagent {name}"
                    ))
                    .with_data(json!({"agent": name, "started": false})));
                }
                // Claimed: a message sent now queues for the run started below.
                status.state = ChildState::Running;
            }
            let Some(jobs) = ctx.jobs() else {
                // No job table: the continued turn runs in the foreground and its answer is
                // the result.
                let output = run(
                    &self.shared,
                    &child,
                    None,
                    Some(message),
                    ctx.cancel().clone(),
                    RunOrigin::call(ctx.call_id().map(str::to_string)),
                )
                .await;
                return match output {
                    Ok(output) => Ok(ToolOutput::text(output.answer).with_data(json!({
                        "agent": name,
                        "childId": child.id,
                        "model": child.model,
                        "usage": output.usage,
                        "usageByModel": output.usage_by_model,
                    }))),
                    Err(failure) => {
                        self.shared
                            .account(&child, &failure.usage, &failure.usage_by_model, false);
                        Err(failure.error)
                    }
                };
            };
            let listed = (
                format!(
                    "send_message {name}: {}",
                    message.lines().next().unwrap_or("")
                ),
                child.label.clone(),
            );
            let (id, data) = start_job(&self.shared, &child, None, message, listed, ctx, jobs)?;
            Ok(ToolOutput::text(format!(
                "message queued as the next turn for subagent {name} (running as background job {id}; you will be told when it finishes, job_output {{\"job_id\": \"{id}\"}} reads its answer)"
            ))
            .with_data(data))
        })
    }
}

/// `list_agents {scope?}`: this agent's children (or all descendants) with state and usage.
pub(super) struct ListAgents {
    pub(super) shared: Arc<Shared>,
}

fn ago(ms: u64) -> String {
    let seconds = ms / 1000;
    if seconds < 120 {
        format!("{seconds}s ago")
    } else if seconds < 7200 {
        format!("{}m ago", seconds / 60)
    } else {
        format!("{}h ago", seconds / 3600)
    }
}

fn usage_line(usage: &Value, cost: Option<f64>) -> String {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let mut line = format!(
        "{} requests, {} input / {} output tokens",
        n("requests"),
        n("inputTokens"),
        n("outputTokens")
    );
    if let Some(cost) = cost {
        line.push_str(&format!(", ${cost:.4}"));
    }
    line
}

impl Tool for ListAgents {
    fn name(&self) -> &str {
        "list_agents"
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "List the subagents you started, by name (agent-N), id and label, with their state \
         (running: working right now; idle: finished its last turn and waits for send_message; \
         failed / cancelled: its last turn did not complete; interrupted: it was running when \
         this session stopped, its partial work is kept), last activity, model and usage. Use \
         it to recall which ones you started, not to poll for completion: you are told when \
         one finishes. Every direct child accepts send_message in every state. Scope \
         `descendants` also lists the children of your children (read from their logs)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "scope": {
                    "type": "string",
                    "description": "children (default) lists direct children only; descendants walks the complete tree below you.",
                    "enum": ["children", "descendants"]
                }
            },
            "additionalProperties": false
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let descendants = match args.get("scope").and_then(Value::as_str) {
                None | Some("children") => false,
                Some("descendants") => true,
                Some(other) => {
                    return Err(ToolError::invalid_args(format!(
                        "`scope` must be `children` or `descendants`, not `{other}`"
                    )))
                }
            };
            let now = dsh_session::now_ms();
            let children = self.shared.registry.all();
            if children.is_empty() {
                return Ok(
                    ToolOutput::text("You have started no subagents in this session.")
                        .with_data(json!({"agents": []})),
                );
            }
            let mut lines = Vec::new();
            let mut data = Vec::new();
            for child in &children {
                let entry = child.describe(now);
                let usage = entry.get("usage").cloned().unwrap_or(Value::Null);
                let cost = child.cost();
                lines.push(format!(
                    "- {} ({}) {}: \"{}\"; model {}{}; last activity {}; {}",
                    child.name,
                    child.id,
                    entry.get("state").and_then(Value::as_str).unwrap_or(""),
                    child.label,
                    child.model,
                    child
                        .effort
                        .as_deref()
                        .map(|e| format!(", effort {e}"))
                        .unwrap_or_default(),
                    ago(entry
                        .get("lastActivityMsAgo")
                        .and_then(Value::as_u64)
                        .unwrap_or(0)),
                    usage_line(&usage, cost),
                ));
                data.push(entry);
                if descendants {
                    if let Some(folder) = child.log.parent() {
                        walk(folder, 2, &mut lines, &mut data);
                    }
                }
            }
            Ok(ToolOutput::text(lines.join("\n")).with_data(json!({"agents": data})))
        })
    }
}

/// Lists the children stored below `folder` at `depth` (for `scope: descendants`).
fn walk(folder: &std::path::Path, depth: usize, lines: &mut Vec<String>, data: &mut Vec<Value>) {
    for stored in read_children(folder) {
        let usage = serde_json::to_value(stored.usage).unwrap_or(Value::Null);
        lines.push(format!(
            "{}- {} ({}) {}: \"{}\"; parent {}; depth {depth}; {}",
            "  ".repeat(depth - 1),
            stored.name.as_deref().unwrap_or("-"),
            stored.id,
            stored.state(),
            stored.label,
            stored.parent.as_deref().unwrap_or("-"),
            usage_line(&usage, None),
        ));
        data.push(json!({
            "name": stored.name, "id": stored.id, "state": stored.state(),
            "label": stored.label, "parent": stored.parent, "depth": depth, "usage": usage,
        }));
        if let Some(next) = stored.log.parent() {
            walk(next, depth + 1, lines, data);
        }
    }
}

/// `interrupt_agent {agent_id}`: cancels a child's running turn; the child stays available.
pub(super) struct InterruptAgent {
    pub(super) shared: Arc<Shared>,
}

impl Tool for InterruptAgent {
    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        dsh_tools::ToolPresentation::new(self.name())
            .subject(dsh_tools::string_arg(args, "agent_id").unwrap_or("?"))
    }

    fn name(&self) -> &str {
        "interrupt_agent"
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Request cancellation of a subagent's current turn by its name (agent-N) or id. Only \
         the current turn stops: messages queued for it stay parked and run after your next \
         send_message to it, agents it started as background jobs keep running, and the \
         subagent itself stays available for send_message. This call returns as soon as the stop request is accepted, so the \
         target may keep running briefly; interrupting an agent that is not running is an \
         accepted no-op."
    }

    fn parameters(&self) -> Value {
        one_string_schema(
            "agent_id",
            "The name or id of the running subagent to interrupt.",
        )
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let key = required_string(&args, "agent_id")?;
            let child = self
                .shared
                .registry
                .find(&key)
                .ok_or_else(|| unavailable(&key))?;
            let mut status = child.status.lock_or_recover();
            let running = status.state == ChildState::Running;
            // As dsh (`cancel` with `keepInbox`): only the current turn stops; messages
            // queued for the child stay parked and run with the next `send_message`.
            if running {
                status.parked = true;
                if let Some(handle) = &status.handle {
                    handle.cancel(true);
                }
            }
            // dsh's acceptance line, for a running child and an idle one alike.
            let mut text = format!("interrupt requested for agent {key}");
            if running {
                text.push_str(&format!(
                    "\nSubagent {} stops its current turn; messages queued for it wait for your next send_message, and it stays available.",
                    child.name
                ));
            } else {
                text.push_str(&format!(
                    "\nSubagent {} is not running (state: {}); nothing was stopped.",
                    child.name,
                    status.state.as_str()
                ));
            }
            Ok(ToolOutput::text(text)
                .with_data(json!({"agent": child.name, "interrupted": running})))
        })
    }
}

/// Gives a child its `report` tool, which posts to the parent that started it.
pub(super) struct ReportToParent {
    tool: Arc<Report>,
}

impl ReportToParent {
    pub(super) fn new(
        parent: std::sync::Weak<std::sync::Mutex<Vec<Message>>>,
        name: String,
    ) -> Self {
        ReportToParent {
            tool: Arc::new(Report { parent, name }),
        }
    }
}

impl Extension for ReportToParent {
    fn name(&self) -> &str {
        "subagent-report"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![self.tool.clone() as Arc<dyn Tool>]
    }
}

struct Report {
    /// The parent's queue of reports (weak: the parent may end first).
    parent: std::sync::Weak<std::sync::Mutex<Vec<Message>>>,
    name: String,
}

impl Tool for Report {
    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        let output = dsh_tools::string_arg(args, "output").unwrap_or_default();
        dsh_tools::ToolPresentation::new(self.name()).subject(dsh_tools::one_line(output, 120))
    }

    fn name(&self) -> &str {
        "report"
    }

    fn description(&self) -> &str {
        "Report selected content to the agent that started you. Call this once before you \
         finish, with a self-contained final result, and earlier for progress or findings that \
         change what that agent does next. That agent shares your workspace but does not \
         automatically receive your transcript, tool output, or reasoning, so finishing your \
         work is not itself a result. Reporting does not end your turn or finish your work, \
         and only your direct parent receives it. A failed call may still have arrived, so do \
         not blindly repeat it."
    }

    fn parameters(&self) -> Value {
        one_string_schema(
            "output",
            "Actionable content for your parent; summarize conclusions and reference relevant \
             shared paths.",
        )
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let output = required_string(&args, "output")?;
            let parent = self.parent.upgrade().ok_or_else(|| {
                ToolError::new(
                    ToolErrorCode::Unsupported,
                    "the agent that started you has ended; finish with your answer instead",
                )
            })?;
            // As dsh delivers it: a message for the parent's next step. It does not wake an
            // idle parent; the child's end does, and that step reads both (docs/agent.md,
            // "Delegation").
            let mut extra = Map::new();
            extra.insert("agent".into(), json!(self.name));
            let message = Message {
                id: uuid::Uuid::new_v4().to_string(),
                role: Role::User,
                content: vec![
                    ContentBlock::text(format!("Subagent {} reported:", self.name)),
                    ContentBlock::text(output),
                ],
                source: MessageSource::Plugin {
                    plugin: "subagents".into(),
                    form: Some("report".into()),
                    extra,
                },
            };
            let id = message.id.clone();
            parent.lock_or_recover().push(message);
            Ok(ToolOutput::text(format!(
                "report accepted by the agent that started you as message {id}"
            )))
        })
    }
}

/// Sets the child's model and effort when asked: the model must be one an adapter of the
/// child's parts knows (the configured model table), the effort one that model supports.
pub(super) fn choose_model(
    parts: &mut AgentParts,
    allowed: Option<&[super::ModelChoice]>,
    model: Option<&str>,
    effort: Option<&str>,
) -> Result<(), ToolError> {
    let call = &mut parts.options.call;
    let model = model.filter(|m| *m != call.model);
    if let (Some(model), Some(allowed)) = (model, allowed) {
        let Some((_, provider)) = allowed.iter().find(|(id, _)| id == model) else {
            let mut names: Vec<&str> = allowed.iter().map(|(id, _)| id.as_str()).collect();
            names.push(&call.model);
            names.sort_unstable();
            names.dedup();
            return Err(ToolError::invalid_args(format!(
                "model `{model}` is not a configured model; use one of: {} (the [models] table, docs/configuration.md), or omit `model` to use `{}`",
                names.join(", "),
                call.model
            )));
        };
        if let Some(provider) = provider {
            if parts.adapters.get(provider).is_err() {
                return Err(ToolError::invalid_args(format!(
                    "model `{model}` belongs to provider `{provider}`, which this session has no connection to; omit `model` to use `{}`",
                    call.model
                )));
            }
            call.provider = provider.clone();
        }
        call.model = model.to_string();
    } else if let Some(model) = model {
        let mut routes: Vec<String> = vec![call.provider.clone()];
        routes.extend(
            parts
                .adapters
                .routes()
                .filter(|r| *r != call.provider)
                .map(str::to_string),
        );
        let route = routes.into_iter().find(|route| {
            parts
                .adapters
                .get(route)
                .is_ok_and(|adapter| adapter.model_info(model).is_some())
        });
        let Some(route) = route else {
            return Err(ToolError::invalid_args(format!(
                "model `{model}` is not in the model table of any provider this session can reach; omit `model` to use `{}`, or name a model configured under [models] (docs/configuration.md)",
                call.model
            )));
        };
        call.provider = route;
        call.model = model.to_string();
    }
    if let Some(effort) = effort {
        let parsed = ReasoningEffort::parse(effort).ok_or_else(|| {
            ToolError::invalid_args(format!(
                "`effort` must be one of off, low, medium, high, max, not `{effort}`"
            ))
        })?;
        let info = parts
            .adapters
            .get(&call.provider)
            .ok()
            .and_then(|adapter| adapter.model_info(&call.model))
            .unwrap_or_else(|| crate::generic_model_info(&call.model));
        if !info.efforts.contains(&parsed) {
            let known: Vec<&str> = info.efforts.iter().map(|e| e.as_str()).collect();
            return Err(ToolError::invalid_args(format!(
                "model `{}` does not support effort `{effort}`; it supports: {}",
                call.model,
                known.join(", ")
            )));
        }
        call.reasoning_effort = Some(parsed);
    }
    Ok(())
}
