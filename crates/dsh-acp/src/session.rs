//! One ACP session: an agent, the task that runs its turns, and the stream of its events to
//! the client.
//!
//! Prompts are queued to the session's task and run one at a time. While a turn runs, the task
//! forwards every appended event as `session/update` notifications; after the turn it forwards
//! whatever is still queued and only then answers the prompt, so the response is always the
//! last line of its turn.
//!
//! The task also forwards the live events of the agent's subagents, as progress on the card of
//! the call that waits for them ([`crate::children`]; docs/acp.md, "Subagents"), between
//! prompts too (background children).
//!
//! What the client asks of the session (prompts, cancels, model, effort, mode) goes through the
//! session's one `dsh_protocol::SessionControl`; its approvals and questions wait in the
//! session's `dsh_protocol::Interactions`, carried to the client by [`crate::broker`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_agent::{Agent, AgentError, ChildActivity, ChildFeed, SessionEvent, TurnOutcome};
use dsh_llm::{ModelInfo, ReasoningEffort};
use dsh_protocol::{Interactions, ModelLookup, Op, OpError, SessionControl};
use dsh_session::{Event, TurnEndReason};
use dsh_tools::PermissionPreset;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::broker::{self, Transport};
use crate::children::ChildProgress;
use crate::commands::{self, COMPACT, FORK, PERMISSION, UNDO};
use crate::modes;
use crate::rpc::{Outgoing, RpcError, INVALID_PARAMS};
use crate::updates::UpdateMapper;

/// Shared by the connection and the session's task.
struct Flags {
    /// `session/cancel` arrived during the current turn.
    cancelled: Arc<AtomicBool>,
    /// The connection is closing: queued prompts are not run.
    stopping: Arc<AtomicBool>,
}

/// A prompt waiting for its turn.
struct PromptJob {
    request_id: Value,
    text: String,
    /// The whole prompt as content blocks when it has an image (docs/acp.md, "Images"); such a
    /// prompt is never read as a command.
    content: Option<Vec<dsh_llm::ContentBlock>>,
}

/// Keeps the client's view in order: before [`crate::broker`] sends a
/// `session/request_permission`, the session's task forwards every event already published
/// (the `tool/call` the question is about among them), so the `tool_call` notification always
/// precedes its permission request (docs/acp.md, "Ordering").
#[derive(Clone)]
pub(crate) struct UpdateBarrier {
    flushes: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

impl UpdateBarrier {
    /// Returns once the session's task has forwarded the events published so far (at once
    /// when the task is gone: then nothing more is forwarded anyway).
    pub(crate) async fn flushed(&self) {
        let (done, wait) = oneshot::channel();
        if self.flushes.send(done).is_ok() {
            // An Err means the task dropped the request while stopping: nothing to wait for.
            let _ = wait.await;
        }
    }
}

/// Config option ids (`session/set_config_option`).
pub(crate) const MODEL_OPTION: &str = "model";
/// Config option id of the reasoning effort.
pub(crate) const EFFORT_OPTION: &str = "effort";
/// The effort value meaning "the model's default".
const DEFAULT_EFFORT: &str = "default";

/// A running ACP session.
pub(crate) struct AcpSession {
    /// Its operations: every request of the client about the session goes through it.
    pub(crate) control: SessionControl,
    out: Outgoing,
    /// The models the editor may pick from (ACP config option `model`, `session/set_model`).
    models: Vec<String>,
    /// What describes a model (its efforts).
    lookup: ModelLookup,
    prompts: mpsc::UnboundedSender<PromptJob>,
    cancelled: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
    task: JoinHandle<()>,
    /// Carries the broker's questions to the client.
    broker: broker::Carrier,
}

/// Where the session is opened: its working directory, the client, the model choices and
/// whether the client renders forms.
pub(crate) struct Setting {
    /// The session's working directory.
    pub(crate) cwd: PathBuf,
    /// The client.
    pub(crate) out: Outgoing,
    /// The model ids the editor may pick from (the one in use is added).
    pub(crate) models: Vec<String>,
    /// What describes a model: the runtime's model table (`SessionFactory::model_info`).
    pub(crate) lookup: ModelLookup,
    /// The client renders `elicitation/create` forms.
    pub(crate) forms: bool,
}

/// An operation's refusal as the client's error: `Invalid params` with the words for the user.
fn refused(error: OpError) -> RpcError {
    RpcError::new(INVALID_PARAMS, error.message)
}

/// The ACP answer for how a turn ended: a stop reason, or an error for a failed turn.
pub(crate) fn stop_reason(
    reason: &TurnEndReason,
    cancelled: bool,
) -> Result<&'static str, RpcError> {
    if cancelled {
        // ACP: after session/cancel the answer is `cancelled`, whatever the cancel caused.
        return Ok("cancelled");
    }
    match reason {
        TurnEndReason::Completed => Ok("end_turn"),
        TurnEndReason::MaxTokens => Ok("max_tokens"),
        TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => Ok("cancelled"),
        TurnEndReason::Blocked { .. } => Ok("refusal"),
        // A budget that ran out is a limit, not a failure (docs/harbor.md, "Budgets").
        TurnEndReason::Error { .. } if dsh_agent::budget_of(reason).is_some() => {
            Ok("max_turn_requests")
        }
        TurnEndReason::Error { error } => Err(RpcError::internal(format!(
            "turn failed: {}",
            error.message
        ))
        .with_data(json!({"code": error.code.to_string(), "status": error.status}))),
    }
}

impl AcpSession {
    /// Starts the session's task for `agent` in `setting`; `children` is the live feed of
    /// the agent's subagents (docs/acp.md, "Subagents"). The agent's approver and asker is an
    /// interactive broker, whose questions [`crate::broker`] carries to the client.
    pub(crate) fn start(mut agent: Agent, children: &ChildFeed, setting: Setting) -> Self {
        let Setting {
            cwd,
            out,
            mut models,
            lookup,
            forms,
        } = setting;
        let handle = agent.handle();
        let session_id = handle.session_id();
        let interactions = Interactions::interactive();
        agent.set_approver(Arc::new(interactions.clone()));
        agent.set_asker(Arc::new(interactions.clone()));
        let call = agent.call().clone();
        let info = agent.model_info().clone();
        if !models.contains(&call.model) {
            models.insert(0, call.model.clone());
        }
        let control = SessionControl::new(
            handle.clone(),
            interactions,
            call.clone(),
            Arc::clone(&lookup),
            cwd.clone(),
        );
        let (flushes, flush_requests) = mpsc::unbounded_channel();
        let broker = broker::spawn(Transport {
            control: control.clone(),
            out: out.clone(),
            session_id: session_id.clone(),
            barrier: UpdateBarrier { flushes },
            forms,
        });
        let mapper = UpdateMapper::new(cwd)
            .with_usage(agent.prices().clone(), &call.model, info.context_window)
            .with_tools(&handle.tools());
        let (prompts, jobs) = mpsc::unbounded_channel();
        let cancelled = Arc::new(AtomicBool::new(false));
        let stopping = Arc::new(AtomicBool::new(false));
        let view = View {
            session_id,
            out: out.clone(),
            mapper,
            progress: ChildProgress::new(),
            // Subscribed before any prompt runs, so no child event is missed.
            children: children.subscribe(),
            children_open: true,
        };
        let task = tokio::spawn(run_session(
            agent,
            control.clone(),
            Inputs {
                jobs,
                flushes: flush_requests,
            },
            view,
            Flags {
                cancelled: Arc::clone(&cancelled),
                stopping: Arc::clone(&stopping),
            },
        ));
        AcpSession {
            control,
            out,
            models,
            lookup,
            prompts,
            cancelled,
            stopping,
            task,
            broker,
        }
    }

    /// The session's id.
    pub(crate) fn id(&self) -> String {
        self.control.handle().session_id()
    }

    /// Queues a prompt; its response is sent when its turn ends.
    pub(crate) fn prompt(
        &self,
        request_id: Value,
        text: String,
        content: Option<Vec<dsh_llm::ContentBlock>>,
    ) -> Result<(), RpcError> {
        self.prompts
            .send(PromptJob {
                request_id,
                text,
                content,
            })
            .map_err(|_| RpcError::internal("the session has stopped"))
    }

    /// The `modes` of the session's `session/new` / `session/load` result.
    pub(crate) fn modes(&self) -> Value {
        let handle = self.control.handle();
        crate::plan::with_plan_mode(modes::mode_state(handle.permission()), handle)
    }

    /// What describes `model`: the runtime's model table, else what dsh assumes of a model
    /// it does not know.
    fn describe(&self, model: &str) -> ModelInfo {
        (self.lookup)(model).unwrap_or_else(|| dsh_agent::generic_model_info(model))
    }

    /// The session's config options (`configOptions` of `session/new`, `session/load` and
    /// `session/set_config_option`): the model and the reasoning effort (those the model in use
    /// takes), as selects.
    pub(crate) fn config_options(&self) -> Value {
        let call = self.control.call();
        let models: Vec<Value> = self
            .models
            .iter()
            .map(|m| json!({"value": m, "name": m}))
            .collect();
        let mut efforts = vec![json!({"value": DEFAULT_EFFORT, "name": "Model default"})];
        efforts.extend(
            self.describe(&call.model)
                .offered_efforts()
                .iter()
                .map(|e| json!({"value": e.as_str(), "name": e.as_str()})),
        );
        let effort = call
            .reasoning_effort
            .map_or(DEFAULT_EFFORT, ReasoningEffort::as_str);
        json!([
            {"id": MODEL_OPTION, "name": "Model", "category": "model", "type": "select",
             "currentValue": call.model, "options": models},
            {"id": EFFORT_OPTION, "name": "Reasoning effort", "category": "thought_level",
             "type": "select", "currentValue": effort, "options": efforts},
        ])
    }

    /// The legacy `models` state of `session/new` (`currentModelId`, `availableModels`),
    /// for clients that switch with `session/set_model`.
    pub(crate) fn model_state(&self) -> Value {
        let available: Vec<Value> = self
            .models
            .iter()
            .map(|m| json!({"modelId": m, "name": m}))
            .collect();
        json!({"currentModelId": self.control.call().model, "availableModels": available})
    }

    /// Switches the model of the next requests (`Op::SetModel`: an effort the new model does
    /// not take is replaced by its default). Offered models only.
    pub(crate) fn set_model(&self, model: &str) -> Result<(), RpcError> {
        if !self.models.iter().any(|m| m == model) {
            return Err(RpcError::invalid_params(format!(
                "unknown model `{model}`; this session offers: {}",
                self.models.join(", ")
            )));
        }
        if self.control.call().model != model {
            self.control
                .submit(Op::SetModel(model.to_string()))
                .map_err(refused)?;
        }
        Ok(())
    }

    /// Sets the reasoning effort of the next requests (`default`: the model's own), through
    /// `Op::SetEffort`, which refuses one the model does not take.
    pub(crate) fn set_effort(&self, value: &str) -> Result<(), RpcError> {
        let effort = if value == DEFAULT_EFFORT {
            None
        } else {
            let Some(effort) = ReasoningEffort::parse(value) else {
                return Err(RpcError::invalid_params(format!(
                    "effort `{value}` is not offered for {}; pick one of: {DEFAULT_EFFORT}, {}",
                    self.control.call().model,
                    self.control.efforts()
                )));
            };
            Some(effort)
        };
        self.control
            .submit(Op::SetEffort(effort))
            .map(|_| ())
            .map_err(|error| RpcError::invalid_params(error.message))
    }

    /// `session/set_mode`: enters plan mode (`plan`), or switches the permission preset (from
    /// the next step on), leaving plan mode first; sends `current_mode_update` when the mode
    /// changed. A preset this session cannot use is an error carrying the reason.
    pub(crate) fn set_mode(&self, mode_id: &str) -> Result<(), RpcError> {
        let plan = |on: bool| {
            self.control
                .submit(Op::SetPlanMode(on))
                .map(|_| ())
                .map_err(refused)
        };
        if mode_id == crate::plan::PLAN_MODE_ID {
            plan(true)?;
            self.out.notify(
                "session/update",
                json!({"sessionId": self.id(), "update": crate::plan::mode_update(true, None)}),
            );
            return Ok(());
        }
        let preset: PermissionPreset = mode_id.parse().map_err(|_| {
            RpcError::invalid_params(format!(
                "unknown mode `{mode_id}` (expected read-only, ask, workspace-write, \
                 danger-full-access or {})",
                crate::plan::PLAN_MODE_ID
            ))
        })?;
        if self.control.handle().plan_mode() {
            plan(false)?;
        }
        modes::switch(&self.control, &self.out, preset)
            .map(|_| ())
            .map_err(|message| RpcError::new(INVALID_PARAMS, message))
    }

    /// Sends the session's slash commands (dsh's own and its user commands) as an
    /// `available_commands_update`.
    pub(crate) fn advertise_commands(&self) {
        self.out.notify(
            "session/update",
            json!({"sessionId": self.id(), "update": {
                "sessionUpdate": "available_commands_update",
                "availableCommands": commands::available(&self.control.handle().user_commands()),
            }}),
        );
    }

    /// `session/cancel`: cancels the running turn (queued input is dropped, as ACP wants the
    /// prompt answered `cancelled`).
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        // Refused only by a closed agent, which runs nothing to cancel.
        let _ = self.control.submit(Op::Cancel { keep_queued: false });
    }

    /// Stops the session: closes its broker (what waits for the client is refused), cancels a
    /// running turn, lets it close its log, answers queued prompts `cancelled` without running
    /// them, and ends the tasks.
    pub(crate) async fn stop(self) {
        let AcpSession {
            control,
            prompts,
            stopping,
            task,
            broker,
            ..
        } = self;
        stopping.store(true, Ordering::SeqCst);
        control
            .interactions()
            .close("the ACP session was closed before the user answered");
        let _ = control.submit(Op::Cancel { keep_queued: false });
        drop(prompts);
        broker.stop().await;
        // A task that panicked has nothing left to close; report nothing more.
        let _ = task.await;
    }
}

fn say(session_id: &str, out: &Outgoing, text: &str) {
    out.notify(
        "session/update",
        json!({"sessionId": session_id, "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text},
        }}),
    );
}

/// `/permission [preset]`: the answer for the user (the switch itself is reported as a
/// `current_mode_update` too).
fn permission_command(control: &SessionControl, out: &Outgoing, arguments: &str) -> String {
    if arguments.is_empty() {
        return format!(
            "Permission preset: {}. Switch with /permission read-only, ask, workspace-write or danger-full-access (or the editor's mode selector).",
            control.handle().permission()
        );
    }
    let preset: PermissionPreset = match arguments.parse() {
        Ok(preset) => preset,
        Err(message) => return format!("Permission preset unchanged: {message}."),
    };
    match modes::switch(control, out, preset) {
        Ok(true) => format!("Permission preset switched to {preset} (from the next step on)."),
        Ok(false) => format!("Permission preset is already {preset}."),
        Err(message) => format!("Permission preset unchanged: {message}."),
    }
}

/// Compacts the conversation now and says how it went.
async fn compact_command(agent: &mut Agent) -> String {
    let never = dsh_agent::CompactionCancel::new();
    let outcome = agent
        .compact(dsh_agent::CompactionTrigger::Requested, &never)
        .await;
    match outcome {
        Ok(o) => match o.warning {
            Some(warning) => format!("Compaction incomplete: {warning}"),
            None => format!(
                "Compacted: {} old messages summarised, {} tool results pruned, ~{} -> ~{} tokens.",
                o.summarized, o.pruned, o.tokens_before, o.tokens_after
            ),
        },
        Err(err) => format!("Compaction failed: {err}"),
    }
}

/// Queues the prompt's input: the expansion of a user command (`/name arguments` for one of
/// the session's user commands, `Op::Command`), else the text as is (`Op::Prompt`).
/// Returns what a command said for the user (`/goal` shows the goal).
fn queue_input(control: &SessionControl, text: String) -> Result<Vec<String>, RpcError> {
    if let Some(command) = commands::parse(&text) {
        let known = !commands::OWN.contains(&command.name)
            && control
                .handle()
                .user_commands()
                .iter()
                .any(|c| c.name == command.name);
        if known {
            return control
                .submit(Op::Command {
                    name: command.name.to_string(),
                    arguments: command.arguments.to_string(),
                })
                .map_err(refused);
        }
    }
    prompt_message(control, dsh_agent::new_user_message(text)).map(|()| Vec::new())
}

/// Queues a user message for the next turn (`Op::Prompt`).
fn prompt_message(control: &SessionControl, message: dsh_llm::Message) -> Result<(), RpcError> {
    control
        .submit(Op::Prompt(message))
        .map(|_| ())
        .map_err(|error| RpcError::internal(error.message))
}

/// What the client is shown of the session: its own events through the [`UpdateMapper`], its
/// children's through the [`ChildProgress`] (docs/acp.md, "Subagents").
struct View {
    session_id: String,
    out: Outgoing,
    mapper: UpdateMapper,
    progress: ChildProgress,
    children: broadcast::Receiver<ChildActivity>,
    /// False once the feed closed (no subagents left to report).
    children_open: bool,
}

impl View {
    fn send(&self, updates: Vec<Value>) {
        for update in updates {
            self.out.notify(
                "session/update",
                json!({"sessionId": self.session_id, "update": update}),
            );
        }
    }

    /// The `usage_update` that closes a prompt, sent before its answer however the turn
    /// ended (a budget, a cancel, an error): the session's sums as the answer finds them.
    fn close_usage(&self) {
        self.send(vec![self.mapper.closing_usage()]);
    }

    /// One event of the session's own log.
    fn event(&mut self, event: &SessionEvent) {
        if let Event::ToolResult(result) = &event.event {
            if let Some(call) = result.call_id() {
                // A child's run ends before the call's result is logged, so the feed holds
                // all of it: its last progress goes out before the result completes the card.
                self.drain_children();
                let held = self.progress.settle(call, Instant::now());
                self.send(held);
            }
        }
        let updates = self.mapper.live(event);
        self.send(updates);
    }

    /// One event of a child (or what the feed says instead).
    fn child(&mut self, received: Result<ChildActivity, broadcast::error::RecvError>) {
        match received {
            Ok(activity) => {
                let updates = self.progress.observe(&activity, Instant::now());
                self.send(updates);
            }
            Err(broadcast::error::RecvError::Lagged(n)) => lagged_children(n),
            Err(broadcast::error::RecvError::Closed) => self.children_open = false,
        }
    }

    fn drain_children(&mut self) {
        loop {
            match self.children.try_recv() {
                Ok(activity) => self.child(Ok(activity)),
                Err(broadcast::error::TryRecvError::Lagged(n)) => lagged_children(n),
                Err(_) => break,
            }
        }
    }

    /// Sends the children's held progress whose time has come.
    fn due(&mut self) {
        let updates = self.progress.due(Instant::now());
        self.send(updates);
    }

    /// When [`View::due`] has something to send (far in the future when nothing is held).
    fn next_due(&self) -> (tokio::time::Instant, bool) {
        match self.progress.next_due() {
            Some(at) => (at.into(), true),
            None => (
                tokio::time::Instant::now() + Duration::from_secs(3600),
                false,
            ),
        }
    }
}

/// What the session's task receives: prompts, and flush requests of the [`UpdateBarrier`].
struct Inputs {
    jobs: mpsc::UnboundedReceiver<PromptJob>,
    flushes: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
}

/// Forwards every event published so far: the session's own, then its children's.
fn drain(view: &mut View, events: &mut broadcast::Receiver<SessionEvent>) {
    loop {
        match events.try_recv() {
            Ok(event) => view.event(&event),
            Err(broadcast::error::TryRecvError::Lagged(n)) => lagged(n),
            Err(_) => break,
        }
    }
    view.drain_children();
}

fn lagged(n: u64) {
    eprintln!("dsh acp: the client view skipped {n} session events (the log has them all)");
}

fn lagged_children(n: u64) {
    eprintln!(
        "dsh acp: the client view skipped {n} events of subagents (their logs have them all)"
    );
}

/// Waits for the next prompt; meanwhile shows what background children do. `None` when the
/// connection is gone.
async fn next_job(
    jobs: &mut mpsc::UnboundedReceiver<PromptJob>,
    view: &mut View,
) -> Option<PromptJob> {
    loop {
        let (due, held) = view.next_due();
        tokio::select! {
            biased;
            job = jobs.recv() => return job,
            received = view.children.recv(), if view.children_open => view.child(received),
            _ = tokio::time::sleep_until(due), if held => view.due(),
        }
    }
}

/// Runs one queued prompt's turns until the agent is idle, forwarding their events (and the
/// children's) as they come.
async fn run_turns(
    agent: &mut Agent,
    view: &mut View,
    events: &mut broadcast::Receiver<SessionEvent>,
    flushes: &mut mpsc::UnboundedReceiver<oneshot::Sender<()>>,
) -> Result<Vec<TurnOutcome>, AgentError> {
    let run = agent.run_until_idle();
    tokio::pin!(run);
    let mut open = true;
    loop {
        let (due, held) = view.next_due();
        // Biased: the session's own events go before its children's, so a subagent call's
        // `tool_call` always precedes the progress shown on it.
        tokio::select! {
            biased;
            result = &mut run => break result,
            event = events.recv(), if open => match event {
                Ok(event) => view.event(&event),
                Err(broadcast::error::RecvError::Lagged(n)) => lagged(n),
                Err(broadcast::error::RecvError::Closed) => open = false,
            },
            Some(done) = flushes.recv() => {
                drain(view, events);
                // The asker may have stopped waiting (cancelled turn): nobody to tell.
                let _ = done.send(());
            }
            received = view.children.recv(), if view.children_open => view.child(received),
            _ = tokio::time::sleep_until(due), if held => view.due(),
        }
    }
}

async fn run_session(
    mut agent: Agent,
    control: SessionControl,
    inputs: Inputs,
    mut view: View,
    flags: Flags,
) {
    let Flags {
        cancelled,
        stopping,
    } = flags;
    let Inputs {
        mut jobs,
        mut flushes,
    } = inputs;
    let handle = control.handle().clone();
    let session_id = handle.session_id();
    let out = view.out.clone();
    while let Some(job) = next_job(&mut jobs, &mut view).await {
        if stopping.load(Ordering::SeqCst) {
            out.respond(job.request_id, json!({"stopReason": "cancelled"}));
            continue;
        }
        cancelled.store(false, Ordering::SeqCst);
        // Subscribed before the input is queued, so no event of the turn is missed.
        let mut events = handle.subscribe();
        let command = match job.content {
            None => commands::parse(&job.text),
            Some(_) => None,
        };
        if command
            .as_ref()
            .is_some_and(|c| c.name == COMPACT && c.arguments.is_empty())
        {
            // `/compact` compacts the conversation now instead of sending a prompt.
            let text = compact_command(&mut agent).await;
            drain(&mut view, &mut events);
            say(&session_id, &out, &text);
            view.close_usage();
            // The summary call's usage is this prompt's (docs/acp.md, "Usage").
            let mut answer = json!({"stopReason": "end_turn"});
            if let Some(usage) = view.mapper.take_turn_usage() {
                answer["usage"] = usage;
            }
            out.respond(job.request_id, answer);
            continue;
        }
        // dsh's own commands answered without a model call: a message and `end_turn`.
        let reply = match &command {
            Some(command) if command.name == UNDO && command.arguments.is_empty() => {
                // `Op::Undo`: the latest turn's file changes reverted, or why not.
                let text = match control.submit(Op::Undo) {
                    Ok(notes) => notes.join("\n"),
                    Err(err) => format!("Nothing was undone: {}", err.message),
                };
                drain(&mut view, &mut events);
                Some(text)
            }
            Some(command) if command.name == FORK => {
                Some(fork_command(&control, command.arguments))
            }
            Some(command) if command.name == PERMISSION => {
                Some(permission_command(&control, &out, command.arguments))
            }
            _ => None,
        };
        if let Some(text) = reply {
            say(&session_id, &out, &text);
            view.close_usage();
            out.respond(job.request_id, json!({"stopReason": "end_turn"}));
            continue;
        }
        let queued = match job.content {
            Some(content) => {
                let mut message = dsh_agent::new_user_message("");
                message.content = content;
                prompt_message(&control, message).map(|()| Vec::new())
            }
            None => queue_input(&control, job.text),
        };
        match queued {
            Err(error) => {
                out.respond_error(job.request_id, &error);
                continue;
            }
            Ok(notes) if !notes.is_empty() => say(&session_id, &out, &notes.join("\n")),
            Ok(_) => {}
        }
        let result = run_turns(&mut agent, &mut view, &mut events, &mut flushes).await;
        drain(&mut view, &mut events);
        view.close_usage();
        let was_cancelled = cancelled.swap(false, Ordering::SeqCst);
        let usage = view.mapper.take_turn_usage();
        respond(&out, job.request_id, result, was_cancelled, usage);
    }
    drop(agent);
}

/// `/fork [turn]` (`Op::Fork`): the new session the editor can `session/load` (this one goes
/// on), or why there is none.
fn fork_command(control: &SessionControl, arguments: &str) -> String {
    let at_turn = match arguments {
        "" => None,
        turn => match turn.parse::<u64>() {
            Ok(turn) => Some(turn),
            Err(_) => {
                return format!("Not forked: `{turn}` is no turn number (try /fork or /fork 2)")
            }
        },
    };
    match control.submit(Op::Fork { at_turn }) {
        Ok(notes) => notes.join("\n"),
        Err(err) => format!("Not forked: {}", err.message),
    }
}

/// Answers a prompt: its stop reason and, when the turn's calls reported usage, their token
/// counts (`usage`, ACP's `PromptResponse.usage`).
fn respond(
    out: &Outgoing,
    request_id: Value,
    result: Result<Vec<TurnOutcome>, AgentError>,
    cancelled: bool,
    usage: Option<Value>,
) {
    // Which budget ended the turn, and its message (`_meta.dsh`): `max_turn_requests` alone
    // does not say (docs/acp.md, "session/prompt").
    let budget = result
        .as_ref()
        .ok()
        .and_then(|o| o.last())
        .and_then(|outcome| {
            let name = dsh_agent::budget_of(&outcome.reason)?;
            let TurnEndReason::Error { error } = &outcome.reason else {
                return None;
            };
            Some(json!({"budget": name, "message": error.message}))
        });
    let reason = match result {
        Err(err) if cancelled => {
            eprintln!("dsh acp: after a cancel: {err}");
            Ok("cancelled")
        }
        Err(err) => Err(RpcError::internal(err)),
        Ok(outcomes) => match outcomes.last() {
            Some(outcome) => stop_reason(&outcome.reason, cancelled),
            None if cancelled => Ok("cancelled"),
            None => Ok("end_turn"),
        },
    };
    match reason {
        Ok(reason) => {
            let mut answer = json!({"stopReason": reason});
            if let Some(usage) = usage {
                answer["usage"] = usage;
            }
            if let Some(budget) = budget.filter(|_| reason == "max_turn_requests") {
                answer["_meta"] = json!({"dsh": budget});
            }
            out.respond(request_id, answer)
        }
        Err(error) => out.respond_error(request_id, &error),
    }
}

#[cfg(test)]
mod budget_stop_tests {
    use super::stop_reason;
    use dsh_llm::{Failure, FailureCode};
    use dsh_session::TurnEndReason;

    #[test]
    fn a_budget_ends_the_prompt_with_max_turn_requests_and_other_errors_fail() {
        for code in [
            dsh_agent::BUDGET_STEPS,
            dsh_agent::BUDGET_WALL_TIME,
            dsh_agent::BUDGET_COST,
        ] {
            let reason = TurnEndReason::Error {
                error: Failure::new(FailureCode::Other(code.into()), "used up"),
            };
            assert_eq!(stop_reason(&reason, false).ok(), Some("max_turn_requests"));
        }
        let failed = TurnEndReason::Error {
            error: Failure::new(FailureCode::Server, "overloaded"),
        };
        assert!(stop_reason(&failed, false).is_err());
    }
}
