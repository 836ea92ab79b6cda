//! Delegation: the `subagent` and `subagent_fork` tools run a child agent with a fresh context
//! (or, for `subagent_fork`, the parent's history) and return its final text.
//!
//! A child runs the same loop with its own session log in the parent's session folder
//! (`subagents/<child-id>/session.jsonl`, header `parentSession` and `delegationDepth`). At the
//! maximum depth (3) children get no delegation tools. Foreground children block the parent's
//! step; background children (`run_in_background`) return an id at once and report through a
//! message injected into the parent's next step. Cancelling the parent's call cancels the child.
//! The child's usage is returned in the result's data (`usage`), which the parent adds to its
//! turn usage.

use dsh_llm::LockExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_llm::{Message, UsageTotals};
use dsh_session::{Envelope, Event, JsonlWriter, Projector, SessionHeader};
use dsh_tools::{Tool, ToolContext, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::agent::{Agent, AgentParts};
use crate::extension::{AttachedAgent, Extension};
use crate::SubagentError;
use dsh_session::TurnEndReason;

/// Deepest delegation allowed (a top-level session is depth 0).
pub const MAX_DELEGATION_DEPTH: u64 = 3;

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
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The delegation extension: contributes `subagent` and `subagent_fork` below the depth limit.
pub struct Subagents {
    shared: Arc<Shared>,
    depth: u64,
}

impl Subagents {
    /// Delegation for an agent at `depth`, building children with `factory`.
    pub fn new(depth: u64, factory: ChildFactory) -> Self {
        Subagents {
            shared: Arc::new(Shared {
                factory,
                parent: Mutex::new(None),
                history: Mutex::new(Projector::new()),
                background: Mutex::new(Vec::new()),
            }),
            depth,
        }
    }
}

impl Drop for Subagents {
    fn drop(&mut self) {
        // Background children die with the extension (and so with the session).
        for task in self.shared.background.lock_or_recover().drain(..) {
            task.abort();
        }
    }
}

impl Extension for Subagents {
    fn name(&self) -> &str {
        "subagents"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        if self.depth >= MAX_DELEGATION_DEPTH {
            return Vec::new();
        }
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
        let depth = link.depth + 1;
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
             final answer. Use `run_in_background: true` to keep working while it runs; its \
             answer then arrives as a message in a later step."
        } else {
            "Hand a self-contained subtask to a child agent with a fresh context and the same \
             tools. Write `prompt` as a complete brief: the child sees nothing of this \
             conversation. Returns the child's final answer (its intermediate work stays out of \
             your context). Use `run_in_background: true` to keep working while it runs; its \
             answer then arrives as a message in a later step. Delegation nests at most 3 deep."
        }
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) label for the subtask."},
                "prompt": {"type": "string", "description": "The complete task for the child agent."},
                "run_in_background": {"type": "boolean", "description": "Return at once and report the answer later."}
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
            let seed = if self.fork {
                let history = self.shared.history.lock_or_recover().history();
                settled_history(&history)
            } else {
                Vec::new()
            };
            if background {
                let id = format!("subagent-{}", &uuid::Uuid::new_v4().to_string()[..8]);
                let shared = Arc::clone(&self.shared);
                let parent = link.handle.clone();
                let task_id = id.clone();
                let task = tokio::spawn(async move {
                    let cancel = tokio_util::sync::CancellationToken::new();
                    let result = Self::run_child(shared, link, seed, prompt, cancel).await;
                    let text = match result {
                        Ok((answer, _, log)) => format!(
                            "Background subagent {task_id} ({description}) finished.\nLog: {log}\n\nIts answer:\n{answer}"
                        ),
                        Err(err) => format!(
                            "Background subagent {task_id} ({description}) failed: {}",
                            err.message
                        ),
                    };
                    // Queued for the parent's next step; wakes an idle parent. A parent that
                    // is gone has nobody to tell.
                    let Some(parent) = parent.upgrade() else {
                        return;
                    };
                    let _ = parent.steer_message(crate::agent::plugin_message(
                        "subagents",
                        "completion",
                        text,
                    ));
                });
                self.shared.background.lock_or_recover().push(task);
                return Ok(ToolOutput::text(format!(
                    "Started background subagent {id}. Its answer will arrive as a message in a later step; keep working meanwhile."
                ))
                .with_summary(format!("started {id}")));
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
            .with_data(json!({"usage": usage_value, "log": log})))
        })
    }
}
