//! Delegation: the `subagent` and `subagent_fork` tools run a child agent with a fresh context
//! (or, for `subagent_fork`, the parent's history) and return its final text; `send_message`,
//! `list_agents` and `interrupt_agent` steer children that exist, and a child's `report` posts
//! an interim result to its parent.
//!
//! A child runs the same loop with its own session log in the parent's session folder
//! (`subagents/<child-id>/session.jsonl`, header `parentSession` and `delegationDepth`, then a
//! `subagent/descriptor` with its name `agent-N`, label and model). A call that would start a
//! child deeper than [`MAX_DELEGATION_DEPTH`] is refused. Delegation calls are
//! concurrency-safe: several in one reply run together, at most `max_concurrent` children of
//! one parent at a time (docs/agent.md, "Delegation"). Foreground children block the parent's
//! step; background children (`run_in_background`) are jobs of the parent's
//! [`JobTable`](dsh_tools::JobTable) (`subagent-N`). A child outlives its run: its loop is
//! kept (or reopened from its log after a resume) so `send_message` continues the same
//! conversation. Every child's usage, failed and cancelled runs included, is added to the
//! parent's turn usage exactly once.

mod feed;
mod registry;
mod team;

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

pub use feed::{ChildActivity, ChildFeed, ChildIdentity};
pub use registry::{read_children, StoredChild};
use registry::{Child, ChildState, Registry, Status};

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

/// A model a child may be given: its id and, when its `[models]` row names one, its provider.
pub type ModelChoice = (String, Option<String>);

pub(crate) struct Shared {
    factory: ChildFactory,
    parent: Mutex<Option<ParentLink>>,
    history: Mutex<Projector>,
    /// One permit per running child (foreground or background).
    slots: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    /// The depth this extension was built for (the attached agent's may be deeper).
    depth: u64,
    /// The deepest child allowed ([`MAX_DELEGATION_DEPTH`] unless configured).
    max_depth: std::sync::atomic::AtomicU64,
    /// The children of this agent.
    registry: Registry,
    /// Usage of children not yet added to a parent turn: failed foreground runs and every
    /// background run (a successful foreground run's usage travels in its result's data).
    pending_usage: Mutex<UsageTotals>,
    /// The models a child may be given (`[models]` ids, each with its provider if it names
    /// one); `None`: any model an adapter of the child's parts describes.
    models: Mutex<Option<Vec<ModelChoice>>>,
    /// Children's `report`s not yet shown to this agent: each is added before its next step,
    /// as dsh delivers them (they do not wake an idle agent; a child's end does).
    reports: Arc<Mutex<Vec<Message>>>,
    /// Children's events, live, for front ends (docs/agent.md, "Watching children").
    feed: ChildFeed,
}

/// The delegation extension: contributes `subagent`, `subagent_fork`, `send_message`,
/// `list_agents` and `interrupt_agent`.
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
                max_depth: std::sync::atomic::AtomicU64::new(MAX_DELEGATION_DEPTH),
                registry: Registry::default(),
                pending_usage: Mutex::new(UsageTotals::default()),
                models: Mutex::new(None),
                reports: Arc::new(Mutex::new(Vec::new())),
                feed: ChildFeed::default(),
            }),
        }
    }

    /// Allows children at most `max_depth` deep instead of [`MAX_DELEGATION_DEPTH`] (dsh's
    /// `maxDepth`; replays of its recordings made with another cap).
    pub fn with_max_depth(self, max_depth: u64) -> Self {
        self.shared
            .max_depth
            .store(max_depth, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The live events of this agent's children, for its front ends.
    pub fn feed(&self) -> ChildFeed {
        self.shared.feed.clone()
    }

    /// Limits a child's `model` to these ids (the configured `[models]` table, each with its
    /// provider route if the row names one) and the session's own model.
    pub fn with_models(self, models: Vec<ModelChoice>) -> Self {
        *self.shared.models.lock_or_recover() = Some(models);
        self
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
            Arc::new(team::SendMessage {
                shared: Arc::clone(&self.shared),
            }),
            Arc::new(team::ListAgents {
                shared: Arc::clone(&self.shared),
            }),
            Arc::new(team::InterruptAgent {
                shared: Arc::clone(&self.shared),
            }),
        ]
    }

    fn attach(&self, agent: &AttachedAgent) {
        let link = ParentLink {
            // A SQLite session's children go beside the database (docs/sessions.md).
            location: dsh_session::sub_agent_anchor(&agent.location),
            session_id: agent.session_id.clone(),
            cwd: agent.cwd.to_string_lossy().into_owned(),
            depth: agent.depth,
            handle: agent.handle.clone(),
        };
        // A resumed session knows the children in its folder (docs/agent.md, "Delegation").
        if let Some(folder) = link.location.parent() {
            self.shared.registry.load_existing(
                folder,
                &agent.session_id,
                agent.depth.max(self.shared.depth) + 1,
            );
        }
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

    fn pre_step(&self, ctx: &mut crate::PreStepContext) -> Result<(), crate::ExtensionError> {
        ctx.inject
            .extend(std::mem::take(&mut *self.shared.reports.lock_or_recover()));
        Ok(())
    }

    fn take_delegated_usage(&self) -> Option<UsageTotals> {
        let usage = std::mem::take(&mut *self.shared.pending_usage.lock_or_recover());
        (usage.requests > 0).then_some(usage)
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

/// What a child is started with.
struct Launch {
    prompt: String,
    description: String,
    seed: Vec<Message>,
    model: Option<String>,
    effort: Option<String>,
}

/// One finished run of a child: its final text, the usage of this run and its log.
pub(crate) struct RunOutput {
    answer: String,
    usage: UsageTotals,
    log: String,
}

/// A failed run: the error for the parent and the usage the run spent anyway.
pub(crate) struct RunFailure {
    error: ToolError,
    usage: UsageTotals,
}

impl RunFailure {
    fn plain(error: ToolError) -> Self {
        RunFailure {
            error,
            usage: UsageTotals::default(),
        }
    }
}

fn io_error(e: dsh_session::SessionError) -> ToolError {
    ToolError::new(ToolErrorCode::Io, e.to_string())
}

/// Builds a child's parts at `depth` with its model and effort (checked against what the
/// parts can reach) and its `report` tool.
fn child_parts(
    shared: &Shared,
    depth: u64,
    name: &str,
    model: Option<&str>,
    effort: Option<&str>,
) -> Result<AgentParts, ToolError> {
    let mut parts = (shared.factory)(depth).map_err(|why| {
        ToolError::new(why.tool_code(), format!("cannot start the subagent: {why}"))
    })?;
    let allowed = shared.models.lock_or_recover().clone();
    team::choose_model(&mut parts, allowed.as_deref(), model, effort)?;
    parts
        .extensions
        .register_for_life(Arc::new(team::ReportToParent::new(
            Arc::downgrade(&shared.reports),
            name.to_string(),
        )));
    Ok(parts)
}

impl SubagentTool {
    /// Creates the child (log, descriptor, seed, loop) and registers it, running.
    fn create_child(
        shared: &Arc<Shared>,
        link: &ParentLink,
        launch: &Launch,
    ) -> Result<(Arc<Child>, Agent), ToolError> {
        let depth = link.depth.max(shared.depth) + 1;
        let name = shared.registry.next_name();
        let parts = child_parts(
            shared,
            depth,
            &name,
            launch.model.as_deref(),
            launch.effort.as_deref(),
        )?;
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
        header.extra.insert("origin".into(), json!("subagent"));
        let mut writer = JsonlWriter::create(&path, header).map_err(io_error)?;
        let call = parts.options.call.clone();
        // dsh's descriptor, plus this build's name and effort (docs/sessions.md, "Children").
        let descriptor = json!({
            "version": 2,
            "mode": "continuable",
            "provider": if launch.seed.is_empty() { "spawn" } else { "fork" },
            "label": launch.description,
            "agentProvider": call.provider,
            "agentModel": call.model,
            "name": name,
            "effort": call.reasoning_effort.map(|e| e.as_str()),
        });
        let event = dsh_session::DshOnlyEvent::new(registry::DESCRIPTOR, &descriptor.to_string())
            .map_err(|e| ToolError::new(ToolErrorCode::Io, e.to_string()))?;
        dsh_session::SessionWriter::append_envelope(
            &mut writer,
            Envelope::new(Event::DshOnly(event)),
        )
        .map_err(io_error)?;
        let projector = Self::write_seed(&mut writer, &launch.seed)?;
        let prices = parts.options.prices.clone();
        let agent = Agent::with_writer(parts, Box::new(writer), projector)
            .map_err(|e| ToolError::new(ToolErrorCode::Io, e.to_string()))?;
        let child = Arc::new(Child {
            name,
            id: child_id,
            label: launch.description.clone(),
            log: path,
            model: call.model.clone(),
            effort: call.reasoning_effort.map(|e| e.as_str().to_string()),
            depth,
            prices,
            status: Mutex::new(Status {
                state: ChildState::Running,
                last_activity: dsh_session::now_ms(),
                usage: UsageTotals::default(),
                last_text: String::new(),
                handle: Some(agent.handle()),
                queued: Vec::new(),
            }),
            agent: tokio::sync::Mutex::new(None),
        });
        shared.registry.insert(Arc::clone(&child));
        Ok((child, agent))
    }

    /// Writes a fork's seed (the parent's settled history) and `session/end-seed`.
    fn write_seed(writer: &mut JsonlWriter, seed: &[Message]) -> Result<Projector, ToolError> {
        let mut projector = Projector::new();
        if seed.is_empty() {
            return Ok(projector);
        }
        for message in seed {
            let event = match message.role {
                dsh_llm::Role::Assistant => {
                    Event::AssistantMessage(dsh_session::AssistantMessage {
                        turn: 0,
                        step: 0,
                        message: message.clone(),
                        usage: None,
                        interrupted: false,
                    })
                }
                _ => Event::UserMessage(message.clone()),
            };
            let mut envelope = Envelope::new(event);
            envelope.seq = dsh_session::SessionWriter::append_envelope(writer, envelope.clone())
                .map_err(io_error)?;
            projector.push(&envelope).map_err(io_error)?;
        }
        let end = Envelope::new(Event::EndSeed(dsh_session::EndSeed { inherited: true }));
        dsh_session::SessionWriter::append_envelope(writer, end).map_err(io_error)?;
        Ok(projector)
    }

    /// Starts a new child: waits for a slot, creates it and runs its first turn.
    async fn start_child(
        shared: Arc<Shared>,
        link: ParentLink,
        launch: Launch,
        cancel: tokio_util::sync::CancellationToken,
        call_id: Option<String>,
    ) -> Result<(Arc<Child>, RunOutput), RunFailure> {
        let (child, agent) =
            Self::create_child(&shared, &link, &launch).map_err(RunFailure::plain)?;
        let output = run(
            &shared,
            &child,
            Some(agent),
            Some(launch.prompt),
            cancel,
            RunOrigin::call(call_id),
        )
        .await?;
        Ok((child, output))
    }

    /// Starts a child as a job of the parent's job table (`subagent-N`): `job_output` reads
    /// its answer, `job_kill` cancels it, and its end is announced (and wakes an idle parent)
    /// like a `bash` job's (docs/agent.md, "Wake-ups").
    fn start_background(
        shared: &Arc<Shared>,
        link: ParentLink,
        launch: Launch,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let jobs = ctx.jobs().ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::Unsupported,
                "background subagents are jobs, and background jobs are not enabled in this session; call `subagent` without `run_in_background`",
            )
        })?;
        let (child, agent) = Self::create_child(shared, &link, &launch)?;
        let first_line = launch.prompt.lines().next().unwrap_or("").to_string();
        let spec = TaskSpec {
            command: format!(
                "{}: {first_line}",
                if launch.seed.is_empty() {
                    "subagent"
                } else {
                    "subagent_fork"
                }
            ),
            description: launch.description.clone(),
            data: json!({"kind": "subagent", "agent": child.name, "childId": child.id}),
        };
        let started = start_job(shared, &child, Some(agent), launch.prompt, spec, ctx, jobs);
        let (id, data) = match started {
            Ok(started) => started,
            Err(err) => {
                child.status.lock_or_recover().state = ChildState::Failed(err.message.clone());
                return Err(err);
            }
        };
        let name = &child.name;
        Ok(ToolOutput::text(format!(
            "started subagent {name} (background job {id}). Read its answer with job_output {{\"job_id\": \"{id}\"}} (add \"wait\": true to block until it ends), stop it with job_kill; continue it later with send_message {{\"subagent_id\": \"{name}\"}}. You will be told when it finishes; keep working meanwhile."
        ))
        .with_summary(format!("subagent {name} (background {id}): {}", launch.description))
        .with_data(data))
    }
}

/// Runs `child` as a job of `jobs`: `agent` is its loop when it is new, `message` its next
/// turn. The run's usage goes to the parent once (through the extension), not in the job data
/// that `job_output` may read many times.
fn start_job(
    shared: &Arc<Shared>,
    child: &Arc<Child>,
    agent: Option<Agent>,
    message: String,
    spec: TaskSpec,
    ctx: &ToolContext,
    jobs: &dsh_tools::JobTable,
) -> Result<(String, Value), ToolError> {
    let (shared, child) = (Arc::clone(shared), Arc::clone(child));
    let origin = RunOrigin {
        call_id: ctx.call_id().map(str::to_string),
        background: true,
    };
    jobs.start_task("subagent", spec, ctx.spill(), move |kill| {
        Box::pin(async move {
            let result = run(&shared, &child, agent, Some(message), kill, origin).await;
            let usage = match &result {
                Ok(output) => output.usage,
                Err(failure) => failure.usage,
            };
            shared.pending_usage.lock_or_recover().merge(&usage);
            let usage_value = serde_json::to_value(usage).unwrap_or(Value::Null);
            match result {
                Ok(output) => Ok(TaskDone {
                    text: if output.answer.trim().is_empty() {
                        "(the subagent finished without a final answer)".to_string()
                    } else {
                        output.answer
                    },
                    data: json!({
                        "childUsage": usage_value,
                        "childLog": output.log,
                        "agent": child.name,
                    }),
                }),
                Err(failure) => Err(TaskDone {
                    text: format!("Error: {}", failure.error.message),
                    data: json!({
                        "errorCode": failure.error.code.as_str(),
                        "childUsage": usage_value,
                        "agent": child.name,
                    }),
                }),
            }
        })
    })
}

/// What started a run of a child, for the live feed.
pub(crate) struct RunOrigin {
    /// The parent's tool call the run answers.
    pub(crate) call_id: Option<String>,
    /// No tool call waits for the run (it is a job).
    pub(crate) background: bool,
}

impl RunOrigin {
    /// A run a tool call waits for.
    pub(crate) fn call(call_id: Option<String>) -> Self {
        RunOrigin {
            call_id,
            background: false,
        }
    }
}

/// Runs `child` until it is idle: queues `message` as its next turn, runs turns while input
/// is queued (messages sent meanwhile included) and records the outcome in its status.
/// `agent` is its loop when the caller holds it; otherwise it is taken from the child, or
/// reopened from its log (after a resume, or after a run was dropped). Its events go to the
/// parent's [`ChildFeed`] while it runs.
pub(crate) async fn run(
    shared: &Arc<Shared>,
    child: &Arc<Child>,
    agent: Option<Agent>,
    message: Option<String>,
    cancel: tokio_util::sync::CancellationToken,
    origin: RunOrigin,
) -> Result<RunOutput, RunFailure> {
    let fail = |error: ToolError| {
        child.status.lock_or_recover().state = ChildState::Failed(error.message.clone());
        RunFailure::plain(error)
    };
    // Wait for a slot (docs/agent.md, "Delegation"); a cancel while waiting starts nothing.
    let slots = Arc::clone(&shared.slots);
    let _slot = tokio::select! {
        permit = slots.acquire_owned() => permit.map_err(|_| {
            fail(ToolError::new(ToolErrorCode::Aborted, "delegation was shut down"))
        })?,
        _ = cancel.cancelled() => {
            child.status.lock_or_recover().state = ChildState::Cancelled;
            return Err(RunFailure::plain(ToolError::new(
                ToolErrorCode::Aborted,
                "the subagent was cancelled before it started",
            )));
        }
    };
    let mut held = child.agent.lock().await;
    let mut agent = match agent.or_else(|| held.take()) {
        Some(agent) => agent,
        None => reopen(shared, child).map_err(fail)?,
    };
    // A run dropped before it ends (its job killed past the grace, the process ending) leaves
    // the child `interrupted`; its next run reopens it from its log.
    let mut guard = RunGuard { child, done: false };
    let handle = agent.handle();
    // Subscribed before the first input is queued, so the feed sees the whole run.
    let forwarding = shared.feed.forward(
        Arc::new(child.identity()),
        origin.call_id,
        origin.background,
        handle.subscribe(),
    );
    {
        let mut status = child.status.lock_or_recover();
        status.state = ChildState::Running;
        status.handle = Some(handle.clone());
        status.last_activity = dsh_session::now_ms();
        let queued = std::mem::take(&mut status.queued);
        for text in message.into_iter().chain(queued) {
            handle
                .followup(text)
                .map_err(|e| RunFailure::plain(ToolError::new(ToolErrorCode::Io, e.to_string())))?;
        }
    }
    let canceller = {
        let (handle, cancel) = (handle.clone(), cancel.clone());
        tokio::spawn(async move {
            cancel.cancelled().await;
            handle.cancel(false);
        })
    };
    let mut outcomes = Vec::new();
    let mut loop_error = None;
    loop {
        match agent.run_until_idle().await {
            Ok(more) => outcomes.extend(more),
            Err(err) => {
                loop_error = Some(err);
                break;
            }
        }
        // Messages sent while the last turn ran are run now; the status lock makes
        // `send_message` either queue before this check or find the child idle.
        let mut status = child.status.lock_or_recover();
        let queued = std::mem::take(&mut status.queued);
        let waiting = agent.handle().pending().1.len() + queued.len();
        for text in queued {
            let _ = handle.followup(text);
        }
        if waiting == 0 || cancel.is_cancelled() {
            break;
        }
    }
    canceller.abort();
    forwarding.finish().await;
    let mut usage = UsageTotals::default();
    for outcome in &outcomes {
        usage.merge(&outcome.usage);
    }
    let result = match loop_error {
        Some(err) => Err(SubagentError::from(err)),
        None => child_result(&outcomes),
    };
    {
        let mut status = child.status.lock_or_recover();
        status.usage.merge(&usage);
        status.last_activity = dsh_session::now_ms();
        status.state = match &result {
            Ok(answer) => {
                status.last_text = answer.clone();
                ChildState::Idle
            }
            Err(SubagentError::Cancelled) => ChildState::Cancelled,
            Err(err) => ChildState::Failed(err.to_string()),
        };
    }
    *held = Some(agent);
    guard.done = true;
    match result {
        Ok(answer) => Ok(RunOutput {
            answer,
            usage,
            log: child.log.display().to_string(),
        }),
        Err(err) => Err(RunFailure {
            error: ToolError::new(err.tool_code(), err.to_string()),
            usage,
        }),
    }
}

/// Marks a child whose run was dropped before it ended.
struct RunGuard<'a> {
    child: &'a Child,
    done: bool,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut status = self.child.status.lock_or_recover();
            status.state = ChildState::Interrupted;
            status.handle = None;
        }
    }
}

/// Reopens a child's loop from its log (a resumed parent, or a run whose task was dropped).
fn reopen(shared: &Arc<Shared>, child: &Child) -> Result<Agent, ToolError> {
    let parts = child_parts(
        shared,
        child.depth,
        &child.name,
        Some(&child.model)
            .filter(|m| !m.is_empty())
            .map(String::as_str),
        child.effort.as_deref(),
    )?;
    let folder = child
        .log
        .parent()
        .ok_or_else(|| ToolError::new(ToolErrorCode::Io, "the child's log has no folder"))?;
    let store = dsh_session::JsonlStore::new(folder);
    Agent::resume(parts, &store, &child.log.display().to_string()).map_err(|e| {
        ToolError::new(
            ToolErrorCode::Io,
            format!("cannot reopen subagent {} from its log: {e}", child.name),
        )
    })
}

/// The child's final text, or why its last turn did not complete (with the child's own code,
/// e.g. its model failure's).
fn child_result(outcomes: &[crate::TurnOutcome]) -> Result<String, SubagentError> {
    let Some(outcome) = outcomes.last() else {
        return Err(SubagentError::NoTurn);
    };
    match &outcome.reason {
        TurnEndReason::Completed => Ok(outcome.final_text.clone()),
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

fn string_arg(args: &Value, key: &str) -> Option<String> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
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
             reply run at the same time. The child stays available: continue it with \
             `send_message`."
        } else {
            "Hand a self-contained subtask to a child agent with a fresh context and the same \
             tools. Write `prompt` as a complete brief: the child sees nothing of this \
             conversation. Returns the child's final answer (its intermediate work stays out of \
             your context). Several calls in one reply run at the same time. Use \
             `run_in_background: true` to run it as a job (returns a job id; read the answer \
             with `job_output`, stop it with `job_kill`; you are told when it finishes). The \
             child keeps its conversation: `send_message` gives it more work, `list_agents` \
             lists your children. `model`/`effort` pick another configured model or reasoning \
             effort for the child. Delegation nests at most 3 deep."
        }
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) label for the subtask."},
                "prompt": {"type": "string", "description": "The complete task for the child agent."},
                "run_in_background": {"type": "boolean", "description": "Run as a background job and return its id at once; collect the answer with job_output, stop it with job_kill."},
                "model": {"type": "string", "description": "A configured model for the child (default: this session's model)."},
                "effort": {"type": "string", "enum": ["off", "low", "medium", "high", "max"], "description": "The child's reasoning effort (default: this session's); must be one the model supports."}
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
            let prompt = string_arg(&args, "prompt")
                .ok_or_else(|| ToolError::invalid_args("`prompt` must be a non-empty string"))?;
            let description =
                string_arg(&args, "description").unwrap_or_else(|| "subtask".to_string());
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
            let max_depth = self
                .shared
                .max_depth
                .load(std::sync::atomic::Ordering::Relaxed);
            if attempted > max_depth {
                // dsh's wording (`subagent depth <attempted> exceeds maxDepth <max>`).
                return Err(ToolError::new(
                    ToolErrorCode::LimitReached,
                    format!(
                        "subagent depth {attempted} exceeds maxDepth {max_depth}: this agent is already a subagent {} levels deep; do this subtask yourself",
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
            let launch = Launch {
                prompt,
                description: description.clone(),
                seed,
                model: string_arg(&args, "model"),
                effort: string_arg(&args, "effort"),
            };
            if background {
                return Self::start_background(&self.shared, link, launch, ctx);
            }
            let started = Self::start_child(
                Arc::clone(&self.shared),
                link,
                launch,
                ctx.cancel().clone(),
                ctx.call_id().map(str::to_string),
            )
            .await;
            let (child, output) = match started {
                Ok(done) => done,
                Err(failure) => {
                    // The error result carries no data: the spent usage reaches the parent's
                    // turn through the extension (docs/agent.md, "Delegation").
                    self.shared
                        .pending_usage
                        .lock_or_recover()
                        .merge(&failure.usage);
                    return Err(failure.error);
                }
            };
            let usage_value = serde_json::to_value(output.usage).unwrap_or(Value::Null);
            Ok(ToolOutput::text(if output.answer.trim().is_empty() {
                "(the subagent finished without a final answer)".to_string()
            } else {
                output.answer
            })
            .with_summary(format!("subagent {}: {description}", child.name))
            .with_data(json!({
                "usage": usage_value,
                "log": output.log,
                "description": description,
                "agent": child.name,
                "childId": child.id,
                "model": child.model,
                "maxConcurrent": self.shared.max_concurrent,
            })))
        })
    }
}
