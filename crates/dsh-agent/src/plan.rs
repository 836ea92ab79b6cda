//! Plan mode (docs/agent.md, "Plan mode"): the agent explores read-only and ends by presenting
//! a Markdown plan with `exit_plan_mode`; the user approves it (the session goes back to the
//! preset it had before), approves an edited version, or keeps planning with feedback.
//!
//! Plan mode is built on the permission preset switch ([`crate::AgentHandle::set_permission`]):
//! entering switches the session to `read-only` (so `bash` runs in the read-only sandbox and
//! every write is refused by the tools themselves), and [`PlanMode`] also refuses `write`,
//! `edit` and escalations with a message that explains plan mode. Leaving switches back to the
//! preset that was in force when plan mode was entered.
//!
//! State is logged as dsh logs it: `plan/mode {active}`, the last one wins, so resume restores
//! the mode ([`PlanMode::reapply`]). The review is the `exit_plan_mode` call and its logged
//! result (decision, plan and feedback). Users enter and leave plan mode with the `/plan`
//! command ([`crate::Extension::user_commands`], so every front end offers it); the review is
//! asked through the session's [`dsh_tools::Asker`] (TUI question prompt, web question card,
//! ACP `session/request_permission`); headless, nobody reviews and the plan is the run's
//! output (`dsh run --plan`).

use std::sync::{Arc, Mutex};

use dsh_llm::LockExt;
use dsh_session::{Envelope, Event};
use dsh_tools::{
    AskOutcome, PermissionPreset, QuestionOption, QuestionRequest, Tool, ToolContext, ToolError,
    ToolErrorCode, ToolOutput, UserQuestion,
};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::extension::{AttachedAgent, Extension, PreStepContext, ToolCallInfo, ToolVerdict};
use crate::{AgentError, ExtensionError, UserCommand, WeakAgentHandle};

/// The event that records whether plan mode is in force from that point on (dsh's
/// `plan/mode {active}`).
pub const PLAN_MODE_EVENT: &str = "plan/mode";
/// The tool that presents the plan for review.
pub const EXIT_PLAN_MODE: &str = "exit_plan_mode";
/// The slash command that enters (`/plan [task]`) and leaves (`/plan off`) plan mode.
pub const PLAN_COMMAND: &str = "plan";
/// Name of the extension (and the plugin name of its model-facing notices).
pub const PLAN_PLUGIN: &str = "plan-mode";
/// Id of the review question (front ends may render it as a plan review).
pub const PLAN_REVIEW_QUESTION: &str = "plan-review";
/// Id of the optional free-text question that carries edits or feedback.
pub const PLAN_EDITS_QUESTION: &str = "plan-edits";
/// The approve choice of the review question.
pub const APPROVE_LABEL: &str = "Approve";
/// The keep-planning choice of the review question.
pub const KEEP_PLANNING_LABEL: &str = "Keep planning";

/// What `write`, `edit` and escalations get while plan mode is on.
pub const PLAN_MODE_REFUSAL: &str = "the session is in plan mode: nothing may be changed until \
the user approved a plan. Explore with read-only tools (read, grep, glob, bash commands that only \
read: bash runs in the read-only sandbox), then present the complete plan with exit_plan_mode; \
after the user approves it you can make the changes";

const ENTER_NOTICE: &str = "The user switched this session to plan mode. Explore the code \
read-only (files cannot be changed: write and edit are refused and bash runs in a read-only \
sandbox) and work out a plan. When it is complete, call exit_plan_mode with the whole plan as \
Markdown, starting with a `#` heading that names it. The user reviews it: on approval you carry \
it out; if they keep planning, their feedback comes back and you revise and present it again.";

const LEAVE_NOTICE: &str = "The user switched this session out of plan mode; you may change \
files again under the session's permission preset.";

const APPROVED_TEXT: &str =
    "Plan approved — plan mode exited; carry out the plan starting with your next step.";

const EXIT_DESCRIPTION: &str = "Use only in plan mode. Present your plan for the user's review \
and, on approval, leave plan mode. Send the COMPLETE plan as Markdown, starting with a # heading \
that names it. The user may approve it (carry it out from your next step; if they edited it, the \
result gives their version, which is the one to carry out) or keep planning: their feedback \
comes back in the tool result; revise and present the plan again.";

/// How a review ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanDecision {
    /// Approved as presented.
    Approved,
    /// Approved with the user's edited plan.
    ApprovedWithEdits {
        /// The user's version of the plan.
        plan: String,
    },
    /// Keep planning; `feedback` may be empty.
    Rejected {
        /// What the user said.
        feedback: String,
    },
    /// The user dismissed the review to say something else.
    Cancelled {
        /// What the user said, if anything.
        message: String,
    },
    /// Nobody can review (headless); the plan is the run's output.
    Unreviewed {
        /// Why nobody can.
        reason: String,
    },
}

impl PlanDecision {
    /// The stable name logged in the result's data (`approved`, `approved-with-edits`,
    /// `rejected`, `cancelled`, `unreviewed`).
    pub fn as_str(&self) -> &'static str {
        match self {
            PlanDecision::Approved => "approved",
            PlanDecision::ApprovedWithEdits { .. } => "approved-with-edits",
            PlanDecision::Rejected { .. } => "rejected",
            PlanDecision::Cancelled { .. } => "cancelled",
            PlanDecision::Unreviewed { .. } => "unreviewed",
        }
    }
}

struct State {
    /// Plan mode is in force (as last logged).
    active: bool,
    /// The preset to go back to when plan mode ends.
    previous: Option<PermissionPreset>,
    /// The model was told about the current mode (a notice or the exit tool's result).
    told: bool,
    handle: Option<WeakAgentHandle>,
}

impl Default for State {
    /// A new session starts out of plan mode, and there is nothing to tell the model about
    /// that: the notices are for changes.
    fn default() -> Self {
        State {
            active: false,
            previous: None,
            told: true,
            handle: None,
        }
    }
}

/// The plan-mode extension: the `/plan` command, the `exit_plan_mode` tool, the refusals while
/// plan mode is on, and the `plan/mode` events. Register one per agent.
#[derive(Clone, Default)]
pub struct PlanMode {
    state: Arc<Mutex<State>>,
}

impl PlanMode {
    /// Plan mode off; see the module docs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether plan mode is in force.
    pub fn is_active(&self) -> bool {
        self.state.lock_or_recover().active
    }

    fn handle(&self) -> Result<crate::AgentHandle, String> {
        self.state
            .lock_or_recover()
            .handle
            .as_ref()
            .and_then(WeakAgentHandle::upgrade)
            .ok_or_else(|| "plan mode is not attached to a running session".to_string())
    }

    /// Enters plan mode: switches the session to `read-only` (logged), logs
    /// `plan/mode {active: true}` and tells the model at the next step. Returns what to tell
    /// the user. Entering while already in plan mode changes nothing.
    pub fn enter(&self) -> Result<String, String> {
        if self.is_active() {
            return Ok("Plan mode is already on. Use /plan off to leave.".to_string());
        }
        let handle = self.handle()?;
        let previous = handle.permission();
        handle
            .set_permission(PermissionPreset::ReadOnly)
            .map_err(|err| format!("cannot enter plan mode: {err}"))?;
        log_mode(&handle, true).map_err(|err| format!("cannot enter plan mode: {err}"))?;
        handle.set_plan_flag(true);
        let mut state = self.state.lock_or_recover();
        state.active = true;
        state.previous = Some(previous);
        state.told = false;
        Ok(
            "Plan mode on: the agent explores read-only and presents a plan for your review. \
            Use /plan off to leave."
                .to_string(),
        )
    }

    /// Leaves plan mode: switches back to the preset in force before it (logged) and logs
    /// `plan/mode {active: false}`. `tell` queues a notice for the model (a `/plan off`; an
    /// approval is told by the tool's result).
    pub fn leave(&self, tell: bool) -> Result<String, String> {
        if !self.is_active() {
            return Ok("Plan mode is already off.".to_string());
        }
        let handle = self.handle()?;
        let previous = self
            .state
            .lock_or_recover()
            .previous
            .unwrap_or(PermissionPreset::WorkspaceWrite);
        handle
            .set_permission(previous)
            .map_err(|err| format!("cannot leave plan mode: {err}"))?;
        log_mode(&handle, false).map_err(|err| format!("cannot leave plan mode: {err}"))?;
        handle.set_plan_flag(false);
        let mut state = self.state.lock_or_recover();
        state.active = false;
        state.told = !tell;
        Ok(format!("Plan mode off; the session is back to {previous}."))
    }

    /// After a resume: when the log says plan mode is on, switches the session to `read-only`
    /// again (the preset of the flags or configuration becomes the one to go back to). Call it
    /// once the agent's permission source is installed (`dsh-runtime` does).
    pub fn reapply(&self) -> Result<(), AgentError> {
        if !self.is_active() {
            return Ok(());
        }
        let Ok(handle) = self.handle() else {
            return Ok(());
        };
        let previous = handle.permission();
        handle.set_permission(PermissionPreset::ReadOnly)?;
        handle.set_plan_flag(true);
        let mut state = self.state.lock_or_recover();
        if previous != PermissionPreset::ReadOnly || state.previous.is_none() {
            state.previous = Some(previous);
        }
        Ok(())
    }

    fn tool(&self) -> Arc<dyn Tool> {
        Arc::new(ExitPlanModeTool { plan: self.clone() })
    }
}

fn log_mode(handle: &crate::AgentHandle, active: bool) -> Result<u64, AgentError> {
    handle.log_event(Event::Opaque {
        event_type: PLAN_MODE_EVENT.to_string(),
        data: json!({ "active": active }),
    })
}

/// Whether a logged event says plan mode is on or off (`None`: not a `plan/mode` event).
/// Reads both our writes and dsh's.
pub fn plan_mode_of(event: &Event) -> Option<bool> {
    let data = match event {
        Event::Opaque { event_type, data } if event_type == PLAN_MODE_EVENT => data.clone(),
        Event::DshOnly(raw) if raw.event_type() == PLAN_MODE_EVENT => raw.data(),
        _ => return None,
    };
    data.get("active").and_then(Value::as_bool)
}

/// Whether plan mode is in force after `events` (the last `plan/mode` wins; none: off).
pub fn fold_plan_mode(events: &[Envelope]) -> bool {
    events
        .iter()
        .rev()
        .find_map(|envelope| plan_mode_of(&envelope.event))
        .unwrap_or(false)
}

/// The plan of the last `exit_plan_mode` call in `events`: the user's edited version when the
/// logged result says it was approved with edits, else the one the model presented.
pub fn last_presented_plan(events: &[Envelope]) -> Option<String> {
    let mut plan = None;
    let mut call = None;
    for envelope in events {
        match &envelope.event {
            Event::ToolCall(c) if c.name == EXIT_PLAN_MODE => {
                call = Some(c.call_id.clone());
                if let Some(presented) = serde_json::from_str::<Value>(&c.arguments)
                    .ok()
                    .and_then(|v| v.get("plan").and_then(Value::as_str).map(str::to_string))
                {
                    plan = Some(presented);
                }
            }
            Event::ToolResult(result) if call.is_some() && result.call_id() == call.as_deref() => {
                let meta = result.meta.as_ref();
                let edited = meta
                    .filter(|m| {
                        m.get("decision").and_then(Value::as_str) == Some("approved-with-edits")
                    })
                    .and_then(|m| m.get("plan").and_then(Value::as_str));
                if let Some(edited) = edited {
                    plan = Some(edited.to_string());
                }
            }
            _ => {}
        }
    }
    plan
}

impl Extension for PlanMode {
    fn name(&self) -> &str {
        PLAN_PLUGIN
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![self.tool()]
    }

    fn attach(&self, agent: &AttachedAgent) {
        let mut state = self.state.lock_or_recover();
        state.handle = Some(agent.handle.clone());
        if let Some(handle) = agent.handle.upgrade() {
            handle.set_plan_flag(state.active);
        }
    }

    fn restore(&self, events: &[Envelope]) {
        let active = fold_plan_mode(events);
        let mut state = self.state.lock_or_recover();
        state.active = active;
        // The notice (or the exit tool's result) is already in the history.
        state.told = true;
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), ExtensionError> {
        let mut state = self.state.lock_or_recover();
        if !state.told {
            state.told = true;
            let text = if state.active {
                ENTER_NOTICE
            } else {
                LEAVE_NOTICE
            };
            ctx.inject
                .push(crate::plugin_message(PLAN_PLUGIN, "notice", text));
        }
        Ok(())
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        if !self.is_active() || call.name == EXIT_PLAN_MODE {
            return ToolVerdict::Continue;
        }
        let refuse = || ToolVerdict::Deny {
            reason: PLAN_MODE_REFUSAL.to_string(),
        };
        if matches!(call.name.as_str(), "write" | "edit") {
            return refuse();
        }
        // An escalation would run this one call under a wider preset.
        let escalates = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|args| args.get("sandbox_permissions").cloned())
            .is_some_and(|mode| mode.as_str().is_some_and(|m| m != "read-only"));
        if escalates {
            return refuse();
        }
        // Entered during a step: that step still runs under the old preset, so only tools
        // that cannot change anything run until the read-only preset applies.
        let harmless = matches!(
            call.name.as_str(),
            "read" | "glob" | "grep" | "todo_write" | "ask_user_question" | "web_fetch"
        ) || call.name == "web_search";
        if call.preset != PermissionPreset::ReadOnly && !harmless {
            return ToolVerdict::Deny {
                reason: format!(
                    "{PLAN_MODE_REFUSAL} (plan mode takes effect with the next step: call it \
                     again then)"
                ),
            };
        }
        ToolVerdict::Continue
    }

    fn user_commands(&self) -> Vec<UserCommand> {
        vec![UserCommand {
            name: PLAN_COMMAND.to_string(),
            description: "Plan mode: explore read-only and present a plan for review \
                          (/plan [task], /plan off)"
                .to_string(),
            hint: Some("task to plan, or off".to_string()),
        }]
    }

    fn expand_user_command(
        &self,
        name: &str,
        arguments: &str,
    ) -> Option<Result<crate::CommandExpansion, ExtensionError>> {
        if name != PLAN_COMMAND {
            return None;
        }
        let arguments = arguments.trim();
        let outcome = if arguments == "off" {
            self.leave(true).map(|_| String::new())
        } else {
            self.enter().map(|_| arguments.to_string())
        };
        Some(
            outcome
                .map(Into::into)
                .map_err(ExtensionError::CommandRefused),
        )
    }
}

struct ExitPlanModeTool {
    plan: PlanMode,
}

/// The first Markdown heading of `plan` (its title), if any.
pub fn plan_title(plan: &str) -> Option<&str> {
    plan.lines().find_map(|line| {
        let rest = line.trim_start_matches('#');
        (rest.len() < line.len() && line.len() - rest.len() <= 6 && rest.starts_with(' '))
            .then(|| rest.trim())
            .filter(|t| !t.is_empty())
    })
}

/// The review questions `exit_plan_mode` asks about `plan` (ids [`PLAN_REVIEW_QUESTION`] and
/// [`PLAN_EDITS_QUESTION`]); front ends may recognise them to render a plan review.
pub fn review_request(call_id: &str, plan: &str) -> QuestionRequest {
    let title = plan_title(plan).unwrap_or("Plan");
    QuestionRequest {
        call_id: call_id.to_string(),
        questions: vec![
            UserQuestion {
                id: PLAN_REVIEW_QUESTION.to_string(),
                question: format!("Approve this plan and leave plan mode?\n\n{plan}"),
                header: Some(format!("Plan review: {title}")),
                options: vec![
                    QuestionOption {
                        label: APPROVE_LABEL.to_string(),
                        description: Some(
                            "Leave plan mode; the plan is carried out from the next step"
                                .to_string(),
                        ),
                    },
                    QuestionOption {
                        label: KEEP_PLANNING_LABEL.to_string(),
                        description: Some(
                            "Stay in plan mode; your feedback goes back to the agent".to_string(),
                        ),
                    },
                ],
                multi_select: false,
            },
            UserQuestion {
                id: PLAN_EDITS_QUESTION.to_string(),
                question: "Optional: with Approve, your edited version of the plan (it replaces \
                           the one shown); with Keep planning, your feedback"
                    .to_string(),
                header: Some("Edits or feedback".to_string()),
                options: Vec::new(),
                multi_select: false,
            },
        ],
    }
}

/// Reads the user's answers to the review questions.
pub fn decision_of(outcome: AskOutcome) -> PlanDecision {
    let answers = match outcome {
        AskOutcome::Answered(answers) => answers,
        AskOutcome::Declined { message } => return PlanDecision::Cancelled { message },
        AskOutcome::Unavailable { reason } => return PlanDecision::Unreviewed { reason },
    };
    let first = |id: &str| {
        answers
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.answers.join("\n").trim().to_string())
            .unwrap_or_default()
    };
    let review = first(PLAN_REVIEW_QUESTION);
    let extra = first(PLAN_EDITS_QUESTION);
    if review == APPROVE_LABEL {
        if extra.is_empty() {
            PlanDecision::Approved
        } else {
            PlanDecision::ApprovedWithEdits { plan: extra }
        }
    } else if review == KEEP_PLANNING_LABEL || !review.is_empty() || !extra.is_empty() {
        // A typed answer instead of a choice is feedback too.
        let feedback = [review.as_str(), extra.as_str()]
            .into_iter()
            .filter(|t| !t.is_empty() && *t != KEEP_PLANNING_LABEL)
            .collect::<Vec<_>>()
            .join("\n");
        PlanDecision::Rejected { feedback }
    } else {
        PlanDecision::Cancelled {
            message: String::new(),
        }
    }
}

impl ExitPlanModeTool {
    async fn run(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let plan = args
            .get("plan")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
            .to_string();
        if !self.plan.is_active() {
            return Err(ToolError::new(
                ToolErrorCode::Unsupported,
                "exit_plan_mode is only available in plan mode; the session is not in plan mode, \
                 so carry on without it",
            ));
        }
        if !plan.starts_with('#') || plan_title(&plan).is_none() {
            return Err(ToolError::invalid_args(
                "exit_plan_mode needs the complete plan as Markdown starting with a `# ` heading \
                 that names it",
            ));
        }
        let request = review_request(ctx.call_id().unwrap_or_default(), &plan);
        let outcome = tokio::select! {
            outcome = ctx.asker().ask(request) => outcome,
            () = ctx.cancel().cancelled() => {
                return Err(ToolError::new(ToolErrorCode::Aborted, "the plan review was cancelled"));
            }
        };
        let decision = decision_of(outcome);
        let data = |extra: Value| {
            let mut data = json!({"decision": decision.as_str(), "plan": plan});
            if let (Some(map), Value::Object(more)) = (data.as_object_mut(), extra) {
                map.extend(more);
            }
            data
        };
        match &decision {
            PlanDecision::Approved | PlanDecision::ApprovedWithEdits { .. } => {
                self.plan
                    .leave(false)
                    .map_err(|msg| ToolError::new(ToolErrorCode::Io, msg))?;
                Ok(match &decision {
                    PlanDecision::ApprovedWithEdits { plan: edited } => ToolOutput::text(format!(
                        "Plan approved with the user's edits — plan mode exited; carry out the \
                         user's version below (not the one you sent) starting with your next \
                         step.\n\n{edited}"
                    ))
                    .with_summary("plan approved with edits")
                    .with_data(json!({"decision": decision.as_str(), "plan": edited,
                        "presented": plan})),
                    _ => ToolOutput::text(APPROVED_TEXT)
                        .with_summary("plan approved")
                        .with_data(data(json!({}))),
                })
            }
            PlanDecision::Rejected { feedback } => Err(ToolError::new(
                ToolErrorCode::PermissionDenied,
                if feedback.is_empty() {
                    "The user chose to keep planning; revise the plan and present it again."
                        .to_string()
                } else {
                    format!("The user chose to keep planning; their feedback: {feedback}")
                },
            )),
            PlanDecision::Cancelled { message } => Err(ToolError::new(
                ToolErrorCode::Aborted,
                if message.is_empty() {
                    "The user dismissed the plan review to speak instead; stay in plan mode, stop \
                     here, and wait for their message."
                        .to_string()
                } else {
                    format!(
                        "The user dismissed the plan review to speak instead ({message}); stay \
                         in plan mode, stop here, and wait for their message."
                    )
                },
            )),
            PlanDecision::Unreviewed { reason } => Ok(ToolOutput::text(format!(
                "Nobody can review the plan now ({reason}). It was handed to the user as the \
                 result of this run. Stay in plan mode: stop here without carrying it out and \
                 without calling more tools."
            ))
            .with_summary("plan presented (not reviewed)")
            .with_data(data(json!({})))),
        }
    }
}

impl Tool for ExitPlanModeTool {
    /// The plan's title; the call waits for the user's review.
    fn present(&self, args: &Value) -> dsh_tools::ToolPresentation {
        let plan = args.get("plan").and_then(Value::as_str).unwrap_or_default();
        dsh_tools::ToolPresentation::new(self.name())
            .subject(plan_title(plan).unwrap_or("plan"))
            .kind(dsh_tools::ToolKind::SwitchMode)
            .view(dsh_tools::ToolView::PlanReview)
    }

    /// The review's outcome: approved (with edits), not reviewed, kept planning (the user's
    /// feedback comes back as `PERMISSION_DENIED`) or dismissed (`ABORTED`).
    fn summarize(
        &self,
        _args: &Value,
        result: &dsh_tools::ResultFacts<'_>,
    ) -> Option<dsh_tools::ResultSummary> {
        use dsh_tools::{ResultSummary, Tone};
        match result.error {
            Some(code) if code == ToolErrorCode::PermissionDenied.as_str() => {
                Some(ResultSummary::new("kept planning"))
            }
            Some(code) if code == ToolErrorCode::Aborted.as_str() => {
                Some(ResultSummary::new("dismissed").tone(Tone::Failure))
            }
            Some(_) => None,
            None => Some(ResultSummary::new(
                match result.meta_value("decision").and_then(Value::as_str) {
                    Some("approved") => "approved",
                    Some("approved-with-edits") => "approved with edits",
                    Some("unreviewed") => "not reviewed",
                    _ => "done",
                },
            )),
        }
    }

    fn name(&self) -> &str {
        EXIT_PLAN_MODE
    }

    fn description(&self) -> &str {
        EXIT_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "plan": {
                    "type": "string",
                    "description": "The complete plan, as Markdown, starting with a # heading that names it."
                }
            },
            "required": ["plan"],
            "additionalProperties": false
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(args, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::UserAnswer;

    fn answered(review: &str, extra: &str) -> AskOutcome {
        AskOutcome::Answered(vec![
            UserAnswer {
                id: PLAN_REVIEW_QUESTION.into(),
                answers: vec![review.into()],
            },
            UserAnswer {
                id: PLAN_EDITS_QUESTION.into(),
                answers: if extra.is_empty() {
                    vec![]
                } else {
                    vec![extra.into()]
                },
            },
        ])
    }

    #[test]
    fn answers_map_to_decisions() {
        assert_eq!(decision_of(answered("Approve", "")), PlanDecision::Approved);
        assert_eq!(
            decision_of(answered("Approve", "# Mine")),
            PlanDecision::ApprovedWithEdits {
                plan: "# Mine".into()
            }
        );
        assert_eq!(
            decision_of(answered("Keep planning", "add tests")),
            PlanDecision::Rejected {
                feedback: "add tests".into()
            }
        );
        assert_eq!(
            decision_of(answered("use a flag instead", "")),
            PlanDecision::Rejected {
                feedback: "use a flag instead".into()
            }
        );
        assert_eq!(
            decision_of(answered("", "")),
            PlanDecision::Cancelled {
                message: String::new()
            }
        );
        assert!(matches!(
            decision_of(AskOutcome::Unavailable { reason: "x".into() }),
            PlanDecision::Unreviewed { .. }
        ));
    }

    #[test]
    fn titles_are_the_first_heading() {
        assert_eq!(plan_title("# Add a flag\n\n- x"), Some("Add a flag"));
        assert_eq!(plan_title("intro\n## Steps"), Some("Steps"));
        assert_eq!(plan_title("#nospace"), None);
        assert_eq!(plan_title("no heading"), None);
    }

    #[test]
    fn plan_reviews_present_their_title_and_summarise_the_decision() {
        let tool = ExitPlanModeTool {
            plan: PlanMode::new(),
        };
        let shown = tool.present(&json!({"plan": "# Add a flag\n\n- x"}));
        assert_eq!(shown.subject.as_deref(), Some("Add a flag"));
        assert_eq!(shown.view, dsh_tools::ToolView::PlanReview);
        let summary = |meta: Value, error: Option<&str>| {
            let facts = dsh_tools::ResultFacts {
                text: "",
                meta: Some(&meta),
                error,
            };
            tool.summarize(&Value::Null, &facts)
                .map(|s| (s.text, s.tone))
        };
        let plain = dsh_tools::Tone::Neutral;
        assert_eq!(
            summary(json!({"decision": "approved-with-edits"}), None),
            Some(("approved with edits".into(), plain))
        );
        assert_eq!(
            summary(Value::Null, Some("PERMISSION_DENIED")),
            Some(("kept planning".into(), plain))
        );
        assert_eq!(
            summary(Value::Null, Some("ABORTED")),
            Some(("dismissed".into(), dsh_tools::Tone::Failure))
        );
        assert_eq!(summary(Value::Null, Some("IO")), None);
    }
}
