//! Delegation: the `subagent` and `subagent_fork` tools run a child agent with a fresh context
//! (or, for `subagent_fork`, the parent's history) and return its final text.
//!
//! A child runs the same loop with its own session log in the parent's session folder
//! (`subagents/<child-id>/session.jsonl`, header `parentSession` and `delegationDepth`). A call
//! that would start a child deeper than [`MAX_DELEGATION_DEPTH`] is refused. Delegation calls
//! are concurrency-safe: several in one reply run together, at most `max_concurrent` children
//! of one parent at a time (docs/agent.md, "Delegation"). Foreground children block the
//! parent's step; background children (`run_in_background`) are jobs of the parent's
//! [`JobTable`](dsh_tools::JobTable) (`subagent-N`, read with `job_output`, stopped with
//! `job_kill`, announced and waking the parent like a `bash` job). Cancelling the parent's call
//! cancels the child. The child's usage is returned in the result's data (`usage`), which the
//! parent adds to its turn usage.

use dsh_llm::LockExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_llm::{Message, UsageTotals};
use dsh_session::{Envelope, Event, JsonlWriter, Projector, SessionHeader};
use dsh_tools::{TaskDone, TaskSpec, Tool, ToolContext, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::agent::{Agent, AgentParts};
use crate::extension::{AttachedAgent, Extension};
use crate::SubagentError;
use dsh_session::TurnEndReason;

/// Deepest delegation allowed (a top-level session is depth 0).
pub const MAX_DELEGATION_DEPTH: u64 = 3;

/// Most children of one parent that run at the same time unless configured
/// (`[agents] max_concurrent`).
pub const DEFAULT_MAX_CONCURRENT: usize = 4;

/// Builds the parts of a child agent at `depth` (tools, adapters, extensions, options), or says
/// why it cannot. The front end supplies it so that children get the same providers and
/// policies as the parent.
pub type ChildFactory = Arc<dyn Fn(u64) -> Result<AgentParts, crate::SubagentError> + Send + Sync>;

/// Where the parent lives and how to reach it; set once the parent agent exists.
#[derive(Clone)]
pub struct ParentLink {
    /// The parent's session log path.
    pub location: PathBuf,
    /// The parent's session id.
    pub session_id: String,
    /// The parent's working directory.
    pub cwd: String,
    /// The parent's delegation depth (0 for a top-level session).
    pub depth: u64,
    /// Used to report background completions (weak: the parent owns this extension).
    pub handle: crate::WeakAgentHandle,
}

struct Shared {
    factory: ChildFactory,
    parent: Mutex<Option<ParentLink>>,
    history: Mutex<Projector>,
    /// One permit per running child (foreground or background).
    slots: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    /// The depth this extension was built for (the attached agent's may be deeper).
    depth: u64,
}

/// The delegation extension: contributes `subagent` and `subagent_fork`.
pub struct Subagents {
    shared: Arc<Shared>,
}

impl Subagents {
    /// Delegation for an agent at `depth`, building children with `factory`, running at
    /// most [`DEFAULT_MAX_CONCURRENT`] children at once.
    pub fn new(depth: u64, factory: ChildFactory) -> Self {
        Self::with_max_concurrent(depth, factory, DEFAULT_MAX_CONCURRENT)
    }

    /// Like [`Subagents::new`] with at most `max_concurrent` (at least 1) children running at
    /// once; further calls wait for a slot.
    pub fn with_max_concurrent(depth: u64, factory: ChildFactory, max_concurrent: usize) -> Self {
        let max_concurrent = max_concurrent.max(1);
        Subagents {
            shared: Arc::new(Shared {
                factory,
                parent: Mutex::new(None),
                history: Mutex::new(Projector::new()),
                slots: Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
                max_concurrent,
                depth,
            }),
        }
    }
}

impl Extension for Subagents {
    fn name(&self) -> &str {
        "subagents"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        // Offered at every depth, as in dsh: a call past the limit is refused with a result
        // that says so (see `SubagentTool::execute`).
        vec![
            Arc::new(SubagentTool {
                shared: Arc::clone(&self.shared),
                fork: false,
            }),
            Arc::new(SubagentTool {
                shared: Arc::clone(&self.shared),
                fork: true,
            }),
        ]
    }

    fn attach(&self, agent: &AttachedAgent) {
        let link = ParentLink {
            location: PathBuf::from(&agent.location),
            session_id: agent.session_id.clone(),
            cwd: agent.cwd.to_string_lossy().into_owned(),
            depth: agent.depth,
            handle: agent.handle.clone(),
        };
        *self.shared.parent.lock_or_recover() = Some(link);
    }

    fn restore(&self, events: &[Envelope]) {
        let mut history = self.shared.history.lock_or_recover();
        for envelope in events {
            // A projection error means a malformed replace span; the child then starts from
            // whatever projected before it, which is still a valid history.
            let _ = history.push(envelope);
        }
    }

    fn on_event(&self, event: &Envelope) {
        let _ = self.shared.history.lock_or_recover().push(event);
    }
}

struct SubagentTool {
    shared: Arc<Shared>,
    fork: bool,
}

/// The parent's history without its unfinished last step (an assistant message whose calls
/// have no results yet, and anything after it).
fn settled_history(history: &[Message]) -> Vec<Message> {
    let mut end = history.len();
    for (index, message) in history.iter().enumerate().rev() {
        if message.tool_calls().next().is_some() {
            let answered = message.tool_calls().all(|(id, _, _)| {
                history[index + 1..].iter().any(|m| {
                    m.content.iter().any(|b| {
                        matches!(b, dsh_llm::ContentBlock::ToolResult { tool_call_id, .. } if tool_call_id == id)
                    })
                })
            });
            if !answered {
                end = index;
            }
            break;
        }
    }
    history[..end].to_vec()
}

impl SubagentTool {
    async fn run_child(
        shared: Arc<Shared>,
        link: ParentLink,
        seed: Vec<Message>,
        prompt: String,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<(String, UsageTotals, String), ToolError> {
        let depth = link.depth.max(shared.depth) + 1;
        // Wait for a slot (docs/agent.md, "Delegation"); a cancel while waiting starts nothing.
        let slots = Arc::clone(&shared.slots);
        let _slot = tokio::select! {
            permit = slots.acquire_owned() => permit.map_err(|_| {
                ToolError::new(ToolErrorCode::Aborted, "delegation was shut down")
            })?,
            _ = cancel.cancelled() => {
                return Err(ToolError::new(
                    ToolErrorCode::Aborted,
                    "the subagent was cancelled before it started",
                ));
            }
        };
        let child_id = uuid::Uuid::new_v4().to_string();
        let folder = link
            .location
            .parent()
            .map(|p| p.join("subagents").join(&child_id))
            .ok_or_else(|| ToolError::new(ToolErrorCode::Io, "the parent log has no folder"))?;
        let path = folder.join("session.jsonl");
        let mut header = SessionHeader::new(&child_id, &link.cwd, dsh_session::now_ms());
        header.delegation_depth = Some(depth);
        header.parent_session = Some(link.session_id.clone());
        let io = |e: dsh_session::SessionError| ToolError::new(ToolErrorCode::Io, e.to_string());
        let mut writer = JsonlWriter::create(&path, header).map_err(io)?;
        let mut projector = Projector::new();
        if !seed.is_empty() {
            for message in seed {
                let event = match message.role {
                    dsh_llm::Role::Assistant => {
                        Event::AssistantMessage(dsh_session::AssistantMessage {
                            turn: 0,
                            step: 0,
                            message,
                            usage: None,
                            interrupted: false,
                        })
                    }
                    _ => Event::UserMessage(message),
                };
                let mut envelope = Envelope::new(event);
                envelope.seq =
                    dsh_session::SessionWriter::append_envelope(&mut writer, envelope.clone())
                        .map_err(io)?;
                projector.push(&envelope).map_err(io)?;
            }
            let end = Envelope::new(Event::EndSeed(dsh_session::EndSeed { inherited: true }));
            dsh_session::SessionWriter::append_envelope(&mut writer, end).map_err(io)?;
        }
        let parts = (shared.factory)(depth).map_err(|why| {
            ToolError::new(why.tool_code(), format!("cannot start the subagent: {why}"))
        })?;
        let (outcomes, path) = Self::drive_child(parts, writer, projector, prompt, cancel, path)
            .await
            .map_err(|e| ToolError::new(e.tool_code(), e.to_string()))?;
        Self::child_result(&outcomes, path)
            .map_err(|e| ToolError::new(e.tool_code(), e.to_string()))
    }

    /// Starts a child as a job of the parent's job table (`subagent-N`): `job_output` reads
    /// its answer, `job_kill` cancels it, and its end is announced (and wakes an idle parent)
    /// like a `bash` job's (docs/agent.md, "Wake-ups").
    fn start_background(
        shared: &Arc<Shared>,
        link: ParentLink,
        seed: Vec<Message>,
        prompt: String,
        description: String,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let jobs = ctx.jobs().ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::Unsupported,
                "background subagents are jobs, and background jobs are not enabled in this session; call `subagent` without `run_in_background`",
            )
        })?;
        let first_line = prompt.lines().next().unwrap_or("").to_string();
        let spec = TaskSpec {
            command: format!(
                "{}: {first_line}",
                if seed.is_empty() {
                    "subagent"
                } else {
                    "subagent_fork"
                }
            ),
            description: description.clone(),
            data: json!({"kind": "subagent"}),
        };
        let shared = Arc::clone(shared);
        let (id, data) = jobs.start_task("subagent", spec, ctx.spill(), move |kill| {
            Box::pin(async move {
                match Self::run_child(shared, link, seed, prompt, kill).await {
                    Ok((answer, usage, log)) => Ok(TaskDone {
                        text: if answer.trim().is_empty() {
                            "(the subagent finished without a final answer)".to_string()
                        } else {
                            answer
                        },
                        // Not `usage`: the parent's turn usage counts foreground children only
                        // (a job's result may be read more than once).
                        data: json!({
                            "childUsage": serde_json::to_value(usage).unwrap_or(Value::Null),
                            "childLog": log,
                        }),
                    }),
                    Err(err) => Err(TaskDone {
                        text: format!("Error: {}", err.message),
                        data: json!({"errorCode": err.code.as_str()}),
                    }),
                }
            })
        })?;
        Ok(ToolOutput::text(format!(
            "Started background subagent job {id}. Read its answer with job_output {{\"job_id\": \"{id}\"}} (add \"wait\": true to block until it ends), stop it with job_kill. You will be told when it finishes; keep working meanwhile."
        ))
        .with_summary(format!("subagent (background {id}): {description}"))
        .with_data(data))
    }

    /// Runs the child agent on its log until it is idle.
    async fn drive_child(
        parts: AgentParts,
        writer: JsonlWriter,
        projector: Projector,
        prompt: String,
        cancel: tokio_util::sync::CancellationToken,
        path: PathBuf,
    ) -> Result<(Vec<crate::TurnOutcome>, PathBuf), SubagentError> {
        let mut agent = Agent::with_writer(parts, Box::new(writer), projector)?;
        let handle = agent.handle();
        handle.followup(prompt)?;
        let canceller = {
            let handle = handle.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                cancel.cancelled().await;
                handle.cancel(false);
            })
        };
        let outcomes = agent.run_until_idle().await;
        canceller.abort();
        Ok((outcomes?, path))
    }

    /// The child's final text, usage and log path, or why its last turn did not complete
    /// (with the child's own code, e.g. its model failure's).
    fn child_result(
        outcomes: &[crate::TurnOutcome],
        path: PathBuf,
    ) -> Result<(String, UsageTotals, String), SubagentError> {
        let Some(outcome) = outcomes.last() else {
            return Err(SubagentError::NoTurn);
        };
        let mut usage = UsageTotals::default();
        for o in outcomes {
            usage.merge(&o.usage);
        }
        match &outcome.reason {
            TurnEndReason::Completed => Ok((
                outcome.final_text.clone(),
                usage,
                path.display().to_string(),
            )),
            TurnEndReason::Aborted { .. } => Err(SubagentError::Cancelled),
            TurnEndReason::Blocked { message } => {
                Err(SubagentError::Blocked(message.clone().or_else(|| {
                    (!outcome.final_text.is_empty()).then(|| outcome.final_text.clone())
                })))
            }
            TurnEndReason::Error { error } => Err(SubagentError::ModelFailed(error.clone())),
            other => Err(SubagentError::Ended {
                kind: other.kind(),
                final_text: outcome.final_text.clone(),
            }),
        }
    }
}

impl Tool for SubagentTool {
    fn concurrency_safe(&self) -> bool {
        // Children never write the parent's log; several run together up to the cap.
        true
    }

    fn name(&self) -> &str {
        if self.fork {
            "subagent_fork"
        } else {
            "subagent"
        }
    }

    fn description(&self) -> &str {
        if self.fork {
            "Hand a subtask to a child agent that starts with a copy of this conversation (so it \
             knows the context) but works in its own context from then on. Returns the child's \
             final answer. Use `run_in_background: true` to run it as a job (returns a job id; \
             read the answer with `job_output`, stop it with `job_kill`). Several calls in one \
             reply run at the same time."
        } else {
            "Hand a self-contained subtask to a child agent with a fresh context and the same \
             tools. Write `prompt` as a complete brief: the child sees nothing of this \
             conversation. Returns the child's final answer (its intermediate work stays out of \
             your context). Several calls in one reply run at the same time. Use \
             `run_in_background: true` to run it as a job (returns a job id; read the answer \
             with `job_output`, stop it with `job_kill`; you are told when it finishes). \
             Delegation nests at most 3 deep."
        }
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) label for the subtask."},
                "prompt": {"type": "string", "description": "The complete task for the child agent."},
                "run_in_background": {"type": "boolean", "description": "Run as a background job and return its id at once; collect the answer with job_output, stop it with job_kill."}
            },
            "required": ["description", "prompt"],
            "additionalProperties": false
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let prompt = args
                .get("prompt")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty())
                .ok_or_else(|| ToolError::invalid_args("`prompt` must be a non-empty string"))?
                .to_string();
            let description = args
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("subtask")
                .to_string();
            let background = args
                .get("run_in_background")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let link = self
                .shared
                .parent
                .lock_or_recover()
                .clone()
                .ok_or_else(|| {
                    ToolError::new(
                        ToolErrorCode::Unsupported,
                        "delegation is not set up in this session",
                    )
                })?;
            // The deeper of the two counts wins: a depth can be deepened, never lowered.
            let current = link.depth.max(self.shared.depth);
            let attempted = current.saturating_add(1);
            if attempted > MAX_DELEGATION_DEPTH {
                // dsh's wording (`subagent depth <attempted> exceeds maxDepth <max>`).
                return Err(ToolError::new(
                    ToolErrorCode::LimitReached,
                    format!(
                        "subagent depth {attempted} exceeds maxDepth {MAX_DELEGATION_DEPTH}: this agent is already a subagent {} levels deep; do this subtask yourself",
                        current
                    ),
                ));
            }
            let seed = if self.fork {
                let history = self.shared.history.lock_or_recover().history();
                settled_history(&history)
            } else {
                Vec::new()
            };
            if background {
                return Self::start_background(&self.shared, link, seed, prompt, description, ctx);
            }
            let (answer, usage, log) = Self::run_child(
                Arc::clone(&self.shared),
                link,
                seed,
                prompt,
                ctx.cancel().clone(),
            )
            .await?;
            let usage_value = serde_json::to_value(usage).unwrap_or(Value::Null);
            Ok(ToolOutput::text(if answer.trim().is_empty() {
                "(the subagent finished without a final answer)".to_string()
            } else {
                answer
            })
            .with_summary(format!("subagent: {description}"))
            .with_data(json!({
                "usage": usage_value,
                "log": log,
                "description": description,
                "maxConcurrent": self.shared.max_concurrent,
            })))
        })
    }
}
