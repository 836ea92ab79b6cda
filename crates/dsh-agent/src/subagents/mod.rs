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
//! conversation. Every child's usage, failed and cancelled runs included, is in the parent's
//! log exactly once, per model (a foreground result's `usage`, or a `subagent/usage` record),
//! and from there in the parent's session and turn usage (docs/sessions.md, "Cost").

mod feed;
mod registry;
mod team;

use dsh_llm::LockExt;
use std::collections::BTreeMap;
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
pub use registry::{child_state_after, read_children, StoredChild};
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

/// Gives the session id of each new child, or `None` for a fresh UUID (replays of recordings
/// whose model quotes the recorded ids; see [`Subagents::with_child_ids`]).
pub type ChildIds = Arc<dyn Fn() -> Option<String> + Send + Sync>;

pub(crate) struct Shared {
    factory: ChildFactory,
    parent: Mutex<Option<ParentLink>>,
    history: Mutex<Projector>,
    /// The parent's history as of its last `turn/end`: what a fork is seeded with (dsh's
    /// completed-turn prefix; the turn that asks for the fork is not part of it).
    settled: Mutex<Vec<Message>>,
    /// One permit per running child (foreground or background).
    slots: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    /// The depth this extension was built for (the attached agent's may be deeper).
    depth: u64,
    /// The deepest child allowed ([`MAX_DELEGATION_DEPTH`] unless configured).
    max_depth: std::sync::atomic::AtomicU64,
    /// The children of this agent.
    registry: Registry,
    /// `subagent/usage` records of children's usage no tool result carries (failed foreground
    /// runs, every background run; a successful foreground run's usage travels in its result's
    /// data), logged in the parent's log at the end of its step, or before its next step
    /// (docs/sessions.md, "Children").
    usage_records: Mutex<Vec<Value>>,
    /// Per child (session id, or name), the usage the parent's log already accounts for (its
    /// foreground results' `usage` and its `subagent/usage` records), read on resume.
    accounted: Mutex<std::collections::HashMap<String, UsageTotals>>,
    /// The models a child may be given (`[models]` ids, each with its provider if it names
    /// one); `None`: any model an adapter of the child's parts describes.
    models: Mutex<Option<Vec<ModelChoice>>>,
    /// Children's `report`s not yet shown to this agent: each is added before its next step,
    /// as dsh delivers them (they do not wake an idle agent; a child's end does).
    reports: Arc<Mutex<Vec<Message>>>,
    /// Children's events, live, for front ends (docs/agent.md, "Watching children").
    feed: ChildFeed,
    /// Where new children's session ids come from (fresh UUIDs when `None`).
    child_ids: Mutex<Option<ChildIds>>,
}

/// The event type of a child's usage added to its parent's turn (docs/sessions.md,
/// "Children").
pub const SUBAGENT_USAGE_EVENT: &str = dsh_session::SUBAGENT_USAGE_EVENT;

impl Shared {
    /// Where the parent lives, once the agent this extension belongs to is attached.
    fn link(&self) -> Result<ParentLink, ToolError> {
        self.parent.lock_or_recover().clone().ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::Unsupported,
                "delegation is not set up in this session",
            )
        })
    }

    /// Records `usage` that `child` spent (per model: `by_model`, when known) for the parent's
    /// log (failed foreground runs, every background run): logged at the end of the parent's
    /// step, it counts in its usage from there.
    fn account(
        &self,
        child: &Child,
        usage: &UsageTotals,
        by_model: &BTreeMap<String, UsageTotals>,
        recovered: bool,
    ) {
        if usage.requests == 0 && usage.usage == dsh_llm::Usage::default() {
            return;
        }
        let mut record = json!({
            "childId": child.id,
            "agent": child.name,
            "model": child.model,
            "usage": serde_json::to_value(usage).unwrap_or(Value::Null),
        });
        if !by_model.is_empty() {
            record["usageByModel"] = serde_json::to_value(by_model).unwrap_or(Value::Null);
        }
        if recovered {
            record["recovered"] = json!(true);
        }
        self.usage_records.lock_or_recover().push(record);
    }

    /// On resume: the usage each child's log holds beyond what the parent's log accounts for
    /// (a background run that ended, or was cut, after the parent's last step) is added to the
    /// parent's next step and recorded then, once. dsh's children (no name in their
    /// descriptor) are left as dsh accounted them.
    fn recover_unaccounted(&self) {
        let accounted = std::mem::take(&mut *self.accounted.lock_or_recover());
        for child in self.registry.all() {
            let stored = child.status.lock_or_recover().usage;
            if !child.named {
                continue;
            }
            let done = accounted.get(&child.id).copied().unwrap_or_default();
            let missing = dsh_session::usage::minus(&stored, &done);
            if missing.requests > 0 {
                self.account(&child, &missing, &BTreeMap::new(), true);
            }
        }
    }
}

/// The usage a parent's log accounts for per child: foreground results' `usage` (with
/// `childId`) and `subagent/usage` records.
fn accounted_usage(events: &[Envelope]) -> std::collections::HashMap<String, UsageTotals> {
    let mut out: std::collections::HashMap<String, UsageTotals> = std::collections::HashMap::new();
    for envelope in events {
        let (id, usage) = match &envelope.event {
            Event::ToolResult(result) => {
                let Some(meta) = &result.meta else { continue };
                (meta.get("childId"), meta.get("usage"))
            }
            Event::Opaque { event_type, data } if event_type == SUBAGENT_USAGE_EVENT => {
                (data.get("childId"), data.get("usage"))
            }
            _ => continue,
        };
        let (Some(id), Some(usage)) = (id.and_then(Value::as_str), usage) else {
            continue;
        };
        if let Ok(usage) = serde_json::from_value::<UsageTotals>(usage.clone()) {
            out.entry(id.to_string()).or_default().merge(&usage);
        }
    }
    out
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
                settled: Mutex::new(Vec::new()),
                slots: Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
                max_concurrent,
                depth,
                max_depth: std::sync::atomic::AtomicU64::new(MAX_DELEGATION_DEPTH),
                registry: Registry::default(),
                usage_records: Mutex::new(Vec::new()),
                accounted: Mutex::new(std::collections::HashMap::new()),
                models: Mutex::new(None),
                reports: Arc::new(Mutex::new(Vec::new())),
                feed: ChildFeed::default(),
                child_ids: Mutex::new(None),
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

    /// Takes each new child's session id from `ids` (a UUID when it gives none, or one a child
    /// of this agent already has). For replaying a recording whose model names its children
    /// by the recorded ids; sessions use fresh UUIDs.
    pub fn with_child_ids(self, ids: ChildIds) -> Self {
        *self.shared.child_ids.lock_or_recover() = Some(ids);
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
        self.shared.recover_unaccounted();
    }

    fn restore(&self, events: &[Envelope]) {
        *self.shared.accounted.lock_or_recover() = accounted_usage(events);
        let mut history = self.shared.history.lock_or_recover();
        let settled_end = events
            .iter()
            .rposition(|e| matches!(e.event, Event::TurnEnd(_)))
            .map_or(0, |k| k + 1);
        for (index, envelope) in events.iter().enumerate() {
            // A projection error means a malformed replace span; the child then starts from
            // whatever projected before it, which is still a valid history.
            let _ = history.push(envelope);
            if index + 1 == settled_end {
                *self.shared.settled.lock_or_recover() = history.history();
            }
        }
    }

    fn on_event(&self, event: &Envelope) {
        let mut history = self.shared.history.lock_or_recover();
        let _ = history.push(event);
        if matches!(event.event, Event::TurnEnd(_)) {
            *self.shared.settled.lock_or_recover() = history.history();
        }
    }

    fn pre_step(&self, ctx: &mut crate::PreStepContext) -> Result<(), crate::ExtensionError> {
        ctx.inject
            .extend(std::mem::take(&mut *self.shared.reports.lock_or_recover()));
        // The usage this step's end adds to the turn, recorded in the parent's log.
        for data in std::mem::take(&mut *self.shared.usage_records.lock_or_recover()) {
            ctx.log_events.push(Event::Opaque {
                event_type: SUBAGENT_USAGE_EVENT.to_string(),
                data,
            });
        }
        Ok(())
    }

    fn take_usage_records(&self) -> Vec<Event> {
        std::mem::take(&mut *self.shared.usage_records.lock_or_recover())
            .into_iter()
            .map(|data| Event::Opaque {
                event_type: SUBAGENT_USAGE_EVENT.to_string(),
                data,
            })
            .collect()
    }
}

struct SubagentTool {
    shared: Arc<Shared>,
    fork: bool,
}

/// What a child is started with.
struct Launch {
    prompt: String,
    description: String,
    seed: Vec<Message>,
    /// Started by `subagent_fork` (its seed may still be empty: nothing settled yet).
    fork: bool,
    model: Option<String>,
    effort: Option<String>,
}

/// One finished run of a child: its final text, the usage of this run and its log.
pub(crate) struct RunOutput {
    answer: String,
    usage: UsageTotals,
    /// The same usage, per model.
    usage_by_model: BTreeMap<String, UsageTotals>,
    log: String,
    /// The last assistant text of the run (dsh's "closing message").
    closing: Option<String>,
}

/// A failed run: the error for the parent and the usage the run spent anyway.
pub(crate) struct RunFailure {
    error: ToolError,
    usage: UsageTotals,
    /// The same usage, per model.
    usage_by_model: BTreeMap<String, UsageTotals>,
    /// How the run ended, as dsh names a child's stop reason (`error`, `aborted`,
    /// `max-tokens`, `refusal`).
    stop: &'static str,
    /// The last assistant text of the run, if it produced any.
    closing: Option<String>,
}

impl RunFailure {
    fn plain(error: ToolError) -> Self {
        let stop = if error.code == ToolErrorCode::Aborted {
            "aborted"
        } else {
            "error"
        };
        RunFailure {
            error,
            usage: UsageTotals::default(),
            usage_by_model: BTreeMap::new(),
            stop,
            closing: None,
        }
    }
}

/// dsh's stop reason for a child run that ended with `err`.
fn stop_reason(err: &SubagentError) -> &'static str {
    match err {
        SubagentError::Cancelled => "aborted",
        SubagentError::Blocked(_) => "refusal",
        SubagentError::Ended { kind, .. } if *kind == "max-tokens" => "max-tokens",
        _ => "error",
    }
}

/// The message that tells the parent a background child settled, in dsh's words: the outcome
/// (`Background subagent <id> finished and will do no further work unless you send it
/// more.`, or the line for a child that was stopped, ran out of room, declined or failed),
/// then `Its closing message:` and the child's last text, or `It left no closing message.`
/// (docs/agent.md, "Delegation").
pub(crate) fn settlement_notice(child_id: &str, stop: &str, closing: Option<&str>) -> String {
    let subject = format!("Background subagent {child_id}");
    let summary = match stop {
        "completed" => {
            format!("{subject} finished and will do no further work unless you send it more.")
        }
        "aborted" => format!("{subject} was stopped before it finished."),
        "max-tokens" => format!("{subject} ran out of room before it finished."),
        "refusal" => format!("{subject} declined the task."),
        "error" => format!("{subject} failed before it finished."),
        other => format!("{subject} ended abnormally ({other}) before it finished."),
    };
    match closing.filter(|text| !text.trim().is_empty()) {
        Some(text) => format!("{summary}\nIts closing message:\n{text}"),
        None => format!("{summary}\nIt left no closing message."),
    }
}

/// The last non-empty final text among a run's turns.
fn closing_text(outcomes: &[crate::TurnOutcome]) -> Option<String> {
    outcomes
        .iter()
        .rev()
        .map(|o| o.final_text.clone())
        .find(|text| !text.trim().is_empty())
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
        let source = shared.child_ids.lock_or_recover().clone();
        let child_id = source
            .and_then(|ids| ids())
            .filter(|id| !id.is_empty() && shared.registry.find(id).is_none())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
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
            "provider": if launch.fork { "fork" } else { "spawn" },
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
            named: true,
            prices,
            status: Mutex::new(Status {
                state: ChildState::Running,
                last_activity: dsh_session::now_ms(),
                usage: UsageTotals::default(),
                last_text: String::new(),
                handle: Some(agent.handle()),
                queued: Vec::new(),
                parked: false,
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
    ) -> Result<(Arc<Child>, RunOutput), (Option<Arc<Child>>, RunFailure)> {
        let (child, agent) = Self::create_child(&shared, &link, &launch)
            .map_err(|e| (None, RunFailure::plain(e)))?;
        match run(
            &shared,
            &child,
            Some(agent),
            Some(launch.prompt),
            cancel,
            RunOrigin::call(call_id),
        )
        .await
        {
            Ok(output) => Ok((child, output)),
            Err(failure) => Err((Some(child), failure)),
        }
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
        let first_line = launch.prompt.lines().next().unwrap_or("");
        let tool = if launch.fork {
            "subagent_fork"
        } else {
            "subagent"
        };
        let listed = (format!("{tool}: {first_line}"), launch.description.clone());
        let (id, data) = start_job(
            shared,
            &child,
            Some(agent),
            launch.prompt,
            listed,
            ctx,
            jobs,
        )?;
        let (name, child_id) = (&child.name, &child.id);
        Ok(ToolOutput::text(format!(
            "started subagent {name} (id {child_id}, background job {id}). Read its answer with job_output {{\"job_id\": \"{id}\"}} (add \"wait\": true to block until it ends), stop it with job_kill; continue it later with send_message {{\"subagent_id\": \"{name}\"}}. You will be told when it finishes; keep working meanwhile."
        ))
        .with_summary(format!("subagent {name} (background {id}): {}", launch.description))
        .with_data(data))
    }
}

/// Runs `child` as a job of `jobs`: `agent` is its loop when it is new, `message` its next
/// turn. The run's usage goes to the parent once (through the extension), not in the job data
/// that `job_output` may read many times.
/// The job is listed as `command` with `description`; a job that cannot start leaves the
/// child `failed`.
fn start_job(
    shared: &Arc<Shared>,
    child: &Arc<Child>,
    agent: Option<Agent>,
    message: String,
    (command, description): (String, String),
    ctx: &ToolContext,
    jobs: &dsh_tools::JobTable,
) -> Result<(String, Value), ToolError> {
    let spec = TaskSpec {
        command,
        description,
        data: json!({"kind": "subagent", "agent": child.name, "childId": child.id}),
    };
    let failed = Arc::clone(child);
    let (shared, child) = (Arc::clone(shared), Arc::clone(child));
    let origin = RunOrigin {
        call_id: ctx.call_id().map(str::to_string),
        background: true,
    };
    let started = jobs.start_task("subagent", spec, ctx.spill(), move |kill| {
        Box::pin(async move {
            let result = run(&shared, &child, agent, Some(message), kill, origin).await;
            let (usage, by_model) = match &result {
                Ok(output) => (output.usage, &output.usage_by_model),
                Err(failure) => (failure.usage, &failure.usage_by_model),
            };
            shared.account(&child, &usage, by_model, false);
            let usage_value = serde_json::to_value(usage).unwrap_or(Value::Null);
            let notice = match &result {
                Ok(output) => settlement_notice(&child.id, "completed", output.closing.as_deref()),
                Err(failure) => {
                    settlement_notice(&child.id, failure.stop, failure.closing.as_deref())
                }
            };
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
                    notice: Some(notice),
                }),
                Err(failure) => Err(TaskDone {
                    text: format!("Error: {}", failure.error.message),
                    data: json!({
                        "errorCode": failure.error.code.as_str(),
                        "childUsage": usage_value,
                        "agent": child.name,
                    }),
                    notice: Some(notice),
                }),
            }
        })
    });
    if let Err(err) = &started {
        failed.status.lock_or_recover().state = ChildState::Failed(err.message.clone());
    }
    started
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
    let (outcomes, loop_error) = run_turns(&mut agent, child, &handle, &cancel).await;
    let parked = std::mem::take(&mut child.status.lock_or_recover().parked);
    canceller.abort();
    forwarding.finish().await;
    let (usage, usage_by_model) = run_usage(&outcomes);
    let result = match loop_error {
        Some(err) => Err(SubagentError::from(err)),
        // Interrupted before a turn of this run started: nothing ran.
        None if parked && outcomes.is_empty() => Err(SubagentError::Cancelled),
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
    let closing = closing_text(&outcomes);
    match result {
        Ok(answer) => Ok(RunOutput {
            answer,
            usage,
            usage_by_model,
            log: child.log.display().to_string(),
            closing,
        }),
        Err(err) => Err(RunFailure {
            error: ToolError::new(err.tool_code(), err.to_string()),
            usage,
            usage_by_model,
            stop: stop_reason(&err),
            closing,
        }),
    }
}

/// The usage of a run's turns: summed, and per model.
fn run_usage(outcomes: &[crate::TurnOutcome]) -> (UsageTotals, BTreeMap<String, UsageTotals>) {
    let mut usage = UsageTotals::default();
    let mut by_model: BTreeMap<String, UsageTotals> = BTreeMap::new();
    for outcome in outcomes {
        usage.merge(&outcome.usage);
        for (model, spent) in &outcome.usage_by_model {
            by_model.entry(model.clone()).or_default().merge(spent);
        }
    }
    (usage, by_model)
}

/// Runs the child's queued turns one at a time, so that an interrupt parks what is still
/// queued (docs/agent.md, "Delegation": it runs on the next `send_message`, as dsh's
/// `keepInbox` cancel). Messages sent while a turn ran are queued and run in turn.
async fn run_turns(
    agent: &mut Agent,
    child: &Child,
    handle: &crate::AgentHandle,
    cancel: &tokio_util::sync::CancellationToken,
) -> (Vec<crate::TurnOutcome>, Option<crate::AgentError>) {
    let mut outcomes = Vec::new();
    loop {
        if child.status.lock_or_recover().parked {
            return (outcomes, None);
        }
        match agent.run_turn().await {
            Ok(Some(outcome)) => {
                outcomes.push(outcome);
                continue;
            }
            Ok(None) => {}
            Err(err) => return (outcomes, Some(err)),
        }
        // The status lock makes `send_message` either queue before this check or find the
        // child idle.
        let mut status = child.status.lock_or_recover();
        let queued = std::mem::take(&mut status.queued);
        let waiting = agent.handle().pending().1.len() + queued.len();
        for text in queued {
            let _ = handle.followup(text);
        }
        if waiting == 0 || cancel.is_cancelled() {
            return (outcomes, None);
        }
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

/// The required, non-empty string argument `key` of a tool call, or an error naming it.
fn required_string(args: &Value, key: &str) -> Result<String, ToolError> {
    string_arg(args, key)
        .ok_or_else(|| ToolError::invalid_args(format!("`{key}` must be a non-empty string")))
}

fn string_arg(args: &Value, key: &str) -> Option<String> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl Tool for SubagentTool {
    /// The task's description, and whether it runs in the background.
    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        let description = dsh_tools::string_arg(args, "description")
            .or_else(|| dsh_tools::string_arg(args, "prompt"))
            .unwrap_or("?");
        let mut subject = dsh_tools::one_line(description, 120);
        if args.get("run_in_background").and_then(Value::as_bool) == Some(true) {
            subject.push_str(" (background)");
        }
        dsh_tools::ToolPresentation::new(self.name()).subject(subject)
    }

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
            let prompt = required_string(&args, "prompt")?;
            let description =
                string_arg(&args, "description").unwrap_or_else(|| "subtask".to_string());
            let background = args
                .get("run_in_background")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let link = self.shared.link()?;
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
            // dsh's completed-turn prefix: the history as of the parent's last `turn/end`
            // (docs/agent.md, "Delegation"); empty before the first turn ended.
            let seed = if self.fork {
                self.shared.settled.lock_or_recover().clone()
            } else {
                Vec::new()
            };
            let launch = Launch {
                prompt,
                description: description.clone(),
                seed,
                fork: self.fork,
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
                Err((child, failure)) => {
                    // The error result carries no data: the spent usage reaches the parent's
                    // turn through the extension (docs/agent.md, "Delegation").
                    if let Some(child) = child {
                        self.shared
                            .account(&child, &failure.usage, &failure.usage_by_model, false);
                    }
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
                "usageByModel": output.usage_by_model,
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
