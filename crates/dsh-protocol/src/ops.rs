//! Operations: what a front end asks of a session. Every front end turns its input (a key, an
//! HTTP request, a JSON-RPC call, a command-line flag) into an [`Op`] and hands it to the
//! session's [`SessionControl`]; what an operation does is decided here, once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentError, AgentHandle, ApprovalDecision, PLAN_COMMAND};
use dsh_llm::{effort_names, CallConfig, LockExt, Message, ModelInfo, ReasoningEffort};
use dsh_tools::PermissionPreset;

use crate::interactions::{AnswerError, Interactions, Reply};

/// One operation on a session.
#[derive(Debug, Clone)]
pub enum Op {
    /// A user message: starts a turn, or waits for the running one to end (queued).
    Prompt(Message),
    /// A user message for the running turn, read before its next step (steering); starts a
    /// turn when none runs.
    Steer(Message),
    /// Cancels the running turn; `keep_queued` keeps queued prompts for the next turn. The
    /// note says whether a turn was running (`cancelling the running turn` / `no turn was
    /// running`).
    Cancel {
        /// Keep queued prompts.
        keep_queued: bool,
    },
    /// Answers approval question `id`.
    Approve {
        /// The question (`ApprovalRequested`'s `id`).
        id: String,
        /// The answer.
        decision: ApprovalDecision,
    },
    /// Answers the questions (or plan review) of tool call `call_id`.
    Answer {
        /// The waiting call (`QuestionAsked`'s `call_id`).
        call_id: String,
        /// The answer.
        reply: Reply,
    },
    /// Switches the model from the next request, carrying an effort the new model takes. A
    /// model the session's model table does not know is refused (`UNKNOWN_MODEL`).
    SetModel(String),
    /// [`Op::SetModel`] without the model-table check: for a model the table does not list
    /// (a local server's), which the user named on purpose.
    ForceModel(String),
    /// Switches the reasoning effort from the next request (`None`: the model's default).
    SetEffort(Option<ReasoningEffort>),
    /// Switches the permission preset from the next step.
    SetPreset(PermissionPreset),
    /// Enters (`true`) or leaves plan mode.
    SetPlanMode(bool),
    /// Runs a user command (a skill, `/plan`) with its arguments.
    Command {
        /// The command's name, without `/`.
        name: String,
        /// Its arguments.
        arguments: String,
    },
    /// Compacts the context before the next request.
    Compact,
    /// Reverts the file changes `write` and `edit` made in the latest turn that has some and
    /// was not undone yet, and tells the model (`files/undo`, docs/protocol.md, "Undo").
    Undo,
    /// Copies the session up to the end of turn `at_turn` (`None`: the last closed one) into a
    /// new session of the same store, whose id the note gives ([`SessionControl::fork`] returns
    /// it); this session goes on unchanged. `FORK_REFUSED` when there is no such closed turn.
    Fork {
        /// The last turn to copy.
        at_turn: Option<u64>,
    },
    /// Appends the user's note to an instructions file (`# note`: the project's `AGENTS.md`;
    /// `## note`: the user's `$DSH_HOME/AGENTS.md`), after the front end had the user confirm
    /// it; the model is told at its next step (docs/protocol.md, "Notes").
    Remember {
        /// Whose file.
        scope: dsh_agent::NoteScope,
        /// The note (one line; spaces and line breaks collapse).
        text: String,
    },
}

/// Why an operation was refused. `code` is stable (front ends map it to their error forms);
/// `message` says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// `NOT_WAITING`, `INVALID_ANSWER`, `UNSUPPORTED_REASONING_EFFORT`, `UNAVAILABLE`,
    /// `UNDO_REFUSED`; `REFUSED` when the agent refused the setting or input (its own code in
    /// [`OpError::cause`]), `SESSION_LOG` when the session log refused to record it.
    pub code: &'static str,
    /// For the user.
    pub message: String,
    /// For `REFUSED`: the agent's failure code (`UNSUPPORTED_CONTENT` for an image a text-only
    /// model cannot take, `CONFIG` for a preset this host cannot confine, ...).
    pub cause: Option<String>,
}

impl OpError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        OpError {
            code,
            message: message.into(),
            cause: None,
        }
    }

    /// The most specific code: the agent's for `REFUSED`, else [`OpError::code`].
    pub fn specific_code(&self) -> &str {
        self.cause.as_deref().unwrap_or(self.code)
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for OpError {}

impl From<AnswerError> for OpError {
    fn from(err: AnswerError) -> Self {
        match err {
            AnswerError::NotWaiting => OpError::new("NOT_WAITING", err.to_string()),
            AnswerError::Invalid(why) => OpError::new("INVALID_ANSWER", why),
        }
    }
}

impl From<AgentError> for OpError {
    fn from(err: AgentError) -> Self {
        match err {
            // A setting or input the agent refuses (a preset this host cannot confine, an image
            // for a text-only model): the user reads its words, front ends its code.
            AgentError::Config(failure) => OpError {
                code: "REFUSED",
                cause: Some(failure.code.as_str().into_owned()),
                message: failure.message,
            },
            AgentError::Session(err) => OpError::new("SESSION_LOG", err.to_string()),
        }
    }
}

/// What describes a model (its efforts), by id: the runtime's model table.
pub type ModelLookup = Arc<dyn Fn(&str) -> Option<ModelInfo> + Send + Sync>;

/// The operations side of one session: its agent, its broker and its call settings.
#[derive(Clone)]
pub struct SessionControl {
    handle: AgentHandle,
    interactions: Interactions,
    call: Arc<Mutex<CallConfig>>,
    models: ModelLookup,
    cwd: PathBuf,
}

impl std::fmt::Debug for SessionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionControl")
            .field("session", &self.handle.session_id())
            .finish_non_exhaustive()
    }
}

impl SessionControl {
    /// Controls the agent of `handle`, whose approver and asker are `interactions`, and whose
    /// call settings are `call`; `models` describes models for effort checks; `cwd` is the
    /// session's working directory (undo names files relative to it).
    pub fn new(
        handle: AgentHandle,
        interactions: Interactions,
        call: CallConfig,
        models: ModelLookup,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        SessionControl {
            handle,
            interactions,
            call: Arc::new(Mutex::new(call)),
            models,
            cwd: cwd.into(),
        }
    }

    /// The agent.
    pub fn handle(&self) -> &AgentHandle {
        &self.handle
    }

    /// The broker.
    pub fn interactions(&self) -> &Interactions {
        &self.interactions
    }

    /// The call settings the next request uses (model, effort).
    pub fn call(&self) -> CallConfig {
        self.call.lock_or_recover().clone()
    }

    /// Carries out `op`. Returns notes for the user (e.g. "effort set to high from the next
    /// request", or that a model switch changed the effort).
    pub fn submit(&self, op: Op) -> Result<Vec<String>, OpError> {
        match op {
            Op::Prompt(message) => self.handle.followup_message(message)?,
            Op::Steer(message) => self.handle.steer_message(message)?,
            Op::Cancel { keep_queued } => {
                return Ok(vec![if self.handle.cancel(keep_queued) {
                    "cancelling the running turn".to_string()
                } else {
                    "no turn was running".to_string()
                }]);
            }
            Op::Approve { id, decision } => self.interactions.approve(&id, decision)?,
            Op::Answer { call_id, reply } => self.interactions.answer(&call_id, reply)?,
            Op::SetModel(model) => {
                if (self.models)(&model).is_none() {
                    return Err(OpError::new(
                        "UNKNOWN_MODEL",
                        format!(
                            "model `{model}` is not in the model table: check the id (`dsh \
                             models` lists the provider's models), describe it under \
                             [models.\"{model}\"] in config.toml, or switch anyway (`/model \
                             --force {model}` in the terminal UI)"
                        ),
                    ));
                }
                return Ok(self.set_model(model));
            }
            Op::ForceModel(model) => return Ok(self.set_model(model)),
            Op::SetEffort(effort) => return self.set_effort(effort).map(|n| vec![n]),
            Op::SetPreset(preset) => {
                self.handle.set_permission(preset)?;
                return Ok(vec![format!(
                    "permission set to {} from the next step",
                    preset.as_str()
                )]);
            }
            Op::SetPlanMode(on) => {
                if self.handle.plan_mode() != on {
                    let arguments = if on { "" } else { "off" };
                    self.run_command(PLAN_COMMAND, arguments)?;
                }
            }
            Op::Command { name, arguments } => return self.run_command(&name, &arguments),
            Op::Compact => self.handle.request_compaction(),
            Op::Undo => return self.undo().map(|note| vec![note]),
            Op::Remember { scope, text } => {
                let path = self
                    .handle
                    .remember(scope, &text)
                    .map_err(|why| OpError::new("REFUSED", why))?;
                return Ok(vec![format!(
                    "noted in {}; the agent reads it at its next step",
                    path.display()
                )]);
            }
            Op::Fork { at_turn } => {
                let forked = self.fork(at_turn)?;
                return Ok(vec![format!(
                    "forked session {} after turn {} into {}",
                    self.handle.session_id(),
                    forked.turn,
                    forked.header.id
                )]);
            }
        }
        Ok(Vec::new())
    }

    fn run_command(&self, name: &str, arguments: &str) -> Result<Vec<String>, OpError> {
        if !self.handle.user_commands().iter().any(|c| c.name == name) {
            return Err(OpError::new(
                "UNAVAILABLE",
                format!("this session has no command `/{name}`"),
            ));
        }
        Ok(self.handle.run_user_command(name, arguments)?)
    }

    fn set_model(&self, model: String) -> Vec<String> {
        let mut call = self.call.lock_or_recover();
        call.model = model.clone();
        let note = match (self.models)(&model) {
            Some(described) => {
                let carried = described.carry_effort(call.reasoning_effort);
                call.reasoning_effort = carried.effort;
                carried.note
            }
            // A forced model the table does not describe: no effort can be checked for it,
            // so none is sent but `off`.
            None => match call.reasoning_effort {
                Some(effort) if effort != ReasoningEffort::Off => {
                    call.reasoning_effort = None;
                    Some(format!(
                        "model {model} is not in the model table, so reasoning effort `{}` is \
                         not sent: the provider's default applies",
                        effort.as_str()
                    ))
                }
                _ => None,
            },
        };
        self.handle.set_call(call.clone());
        std::iter::once(format!("model set to {model} from the next request"))
            .chain(note)
            .collect()
    }

    fn set_effort(&self, effort: Option<ReasoningEffort>) -> Result<String, OpError> {
        let mut call = self.call.lock_or_recover();
        if let (Some(wanted), Some(described)) = (effort, (self.models)(&call.model)) {
            described
                .check_effort(wanted)
                .map_err(|message| OpError::new("UNSUPPORTED_REASONING_EFFORT", message))?;
        }
        call.reasoning_effort = effort;
        self.handle.set_call(call.clone());
        Ok(format!(
            "effort set to {} from the next request",
            effort.map_or("the model's default", |e| e.as_str())
        ))
    }

    /// [`Op::Fork`]: the new session's header and the last turn it copies.
    pub fn fork(&self, at_turn: Option<u64>) -> Result<dsh_session::Forked, OpError> {
        dsh_session::fork_location(&self.handle.location(), at_turn)
            .map_err(|err| OpError::new("FORK_REFUSED", format!("cannot fork: {err}")))
    }

    fn undo(&self) -> Result<String, OpError> {
        let location = self.handle.location();
        let events = dsh_session::load_location(&location)
            .map_err(|err| {
                OpError::new(
                    "UNDO_REFUSED",
                    format!("cannot read the session log to undo: {err}"),
                )
            })?
            .events;
        let report = crate::undo::undo_last_turn(&events, &self.handle, &self.cwd);
        if report.done {
            Ok(report.message)
        } else {
            Err(OpError::new("UNDO_REFUSED", report.message))
        }
    }

    /// The efforts the session's model takes, in words (`off, high, max`).
    pub fn efforts(&self) -> String {
        let model = self.call.lock_or_recover().model.clone();
        (self.models)(&model).map_or_else(
            || "off, low, medium, high, max".to_string(),
            |d| effort_names(&d.offered_efforts()),
        )
    }
}
