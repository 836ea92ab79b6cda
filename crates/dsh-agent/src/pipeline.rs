//! The tool pipeline (docs/agent.md, "Tool pipeline"): log every call first, then policy (allow /
//! deny / ask the approver, with `approval/asked` and `approval/decided` logged), body (through the
//! `tool_execute` middleware), post-processing, and results logged in the model's order.
//! Concurrency-safe tools run together (up to the configured pool size); every other call runs
//! alone.

use std::sync::{Arc, OnceLock};

use dsh_llm::{ContentBlock, LockExt, Message, MessageSource, Role};
use dsh_session::{Envelope, Event, ToolCall, ToolStarted};
use dsh_tools::{PermissionPreset, ToolError, ToolErrorCode};
use futures::future::join_all;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentError, Shared};
use crate::approval_rules::{proposed_rule, ApprovalChoice, ApprovalRule};
use crate::extension::{
    ApprovalDecision, ApprovalRequest, ToolCallInfo, ToolFuture, ToolOutcome, ToolPostContext,
    ToolVerdict,
};
use crate::inbox::InboxTarget;

/// The result text of a call that never started because the turn was cancelled.
pub const ABORTED_BEFORE_DISPATCH: &str = "tool call aborted before dispatch";

impl Agent {
    /// Runs the calls of one step. Returns true when the turn was cancelled meanwhile (every
    /// call still has its result logged).
    pub(crate) async fn run_tools(
        &mut self,
        turn: u64,
        step: u64,
        calls: Vec<(String, String, String)>,
        cancel: &CancellationToken,
    ) -> Result<bool, AgentError> {
        let infos: Vec<ToolCallInfo> = calls
            .into_iter()
            .map(|(call_id, name, arguments)| ToolCallInfo {
                turn,
                step,
                call_id,
                name,
                arguments,
                cancel: cancel.child_token(),
                preset: self.tool_context.permission(),
            })
            .collect();
        {
            let mut log = self.shared.log();
            for info in &infos {
                log.append(Event::ToolCall(ToolCall {
                    turn,
                    step,
                    call_id: info.call_id.clone(),
                    name: info.name.clone(),
                    arguments: info.arguments.clone(),
                    presentation: crate::presentation::logged(
                        &self.step_tools.present(&info.name, &info.arguments),
                    ),
                }))?;
            }
        }

        let mut next = 0;
        while next < infos.len() {
            let end = self.batch_end(&infos, next);
            let batch = &infos[next..end];
            if cancel.is_cancelled() {
                for info in batch {
                    self.log_result(
                        info,
                        Err(ToolError::new(
                            ToolErrorCode::Aborted,
                            ABORTED_BEFORE_DISPATCH,
                        )),
                        Vec::new(),
                    )?;
                }
                next = end;
                continue;
            }
            let mut futures = Vec::with_capacity(batch.len());
            // `tool/started` is logged by each call when its body starts (`dispatch`): after
            // its approval, so no front end shows a call as running while it waits for one.
            for info in batch {
                futures.push(self.dispatch(info));
            }
            let grace = self.options.cancel_grace;
            let all = join_all(futures);
            tokio::pin!(all);
            let outcomes = tokio::select! {
                outcomes = &mut all => outcomes,
                _ = cancel.cancelled() => {
                    // Started tools get a grace period to stop; then they are dropped, which
                    // kills what they started.
                    match tokio::time::timeout(grace, &mut all).await {
                        Ok(outcomes) => outcomes,
                        Err(_) => batch
                            .iter()
                            .map(|info| Err(ToolError::new(
                                ToolErrorCode::Aborted,
                                format!("`{}` was stopped after the turn was cancelled", info.name),
                            )))
                            .collect(),
                    }
                }
            };
            self.post_process(batch, outcomes)?;
            next = end;
        }
        Ok(cancel.is_cancelled())
    }

    /// The end of the batch that starts at `next`: one call that is not concurrency-safe, or a
    /// run of safe calls of at most `max_parallel_tools`.
    fn batch_end(&self, infos: &[ToolCallInfo], next: usize) -> usize {
        let safe = |info: &ToolCallInfo| {
            self.step_tools
                .get(&info.name)
                .map(|t| t.concurrency_safe())
                .unwrap_or(true)
        };
        let mut end = next + 1;
        if safe(&infos[next]) {
            while end < infos.len()
                && end - next < self.options.max_parallel_tools.max(1)
                && safe(&infos[end])
            {
                end += 1;
            }
        }
        end
    }

    /// Runs every extension's `tool_post` on each outcome, logs the results in the model's
    /// order and queues what the extensions inject for the next step.
    fn post_process(
        &mut self,
        batch: &[ToolCallInfo],
        outcomes: Vec<ToolOutcome>,
    ) -> Result<(), AgentError> {
        for (info, mut outcome) in batch.iter().zip(outcomes) {
            let mut inject = Vec::new();
            let mut log_events = Vec::new();
            for extension in self.extensions.snapshot() {
                extension.tool_post(&mut ToolPostContext {
                    call: info,
                    outcome: &mut outcome,
                    inject_next_step: &mut inject,
                    log_events: &mut log_events,
                });
            }
            self.log_result(info, outcome, log_events)?;
            let mut log = self.shared.log();
            for message in inject {
                let splice = log.inbox.push(InboxTarget::NextStep, message);
                log.append_splice(&splice)?;
            }
        }
        Ok(())
    }

    /// Policy, then the body wrapped by every extension's middleware (first registered is
    /// outermost). Policy: every `tool_pre` handler is asked; a `Deny` wins, else the first
    /// `Ask` goes to the approver before the body may start.
    fn dispatch(&self, info: &ToolCallInfo) -> ToolFuture {
        let extensions = self.extensions.snapshot();
        let mut ask = None;
        for extension in &extensions {
            match extension.tool_pre(info) {
                ToolVerdict::Continue => {}
                ToolVerdict::Deny { reason } => {
                    return Box::pin(async move {
                        Err(ToolError::new(ToolErrorCode::PermissionDenied, reason))
                    });
                }
                ToolVerdict::Ask { reason, escalation } => {
                    ask.get_or_insert((reason, escalation));
                }
            }
        }
        // Set once the approver allowed an escalated run; read when the body starts, which is
        // only after the approval future finished.
        let escalated: Arc<OnceLock<PermissionPreset>> = Arc::new(OnceLock::new());
        // Set once the call was approved (by the user or a rule): the tool may then do what the
        // approval covered, e.g. write a protected path (`ToolContext::with_approval`).
        let approved: Arc<OnceLock<()>> = Arc::new(OnceLock::new());
        let tools = Arc::clone(&self.step_tools);
        let ctx = self
            .tool_context
            .for_call()
            .with_cancel(info.cancel.clone())
            .with_call_id(info.call_id.clone())
            .with_progress(progress_sink(
                &self.shared,
                &info.call_id,
                self.extensions.snapshot(),
            ));
        let name = info.name.clone();
        let arguments = info.arguments.clone();
        let body_escalation = Arc::clone(&escalated);
        let body_approved = Arc::clone(&approved);
        let started_log = Arc::clone(&self.shared);
        let started = ToolStarted {
            turn: info.turn,
            step: info.step,
            call_id: info.call_id.clone(),
        };
        let mut future: ToolFuture = Box::pin(async move {
            // The call runs now: whatever had to allow it (its approval, the hooks before
            // it) did. A log that refuses the record refuses the call.
            log_started(&started_log, started)?;
            let ctx = match body_escalation.get() {
                Some(preset) => ctx.with_permission(*preset),
                None => ctx,
            };
            let ctx = ctx.with_approval(body_approved.get().is_some());
            tools.invoke(&name, &arguments, &ctx).await
        });
        for extension in extensions.iter().rev() {
            future = extension.tool_execute(info, future);
        }
        let Some((reason, escalation)) = ask else {
            return future;
        };
        let shared = Arc::clone(&self.shared);
        let rules = Arc::clone(&self.options.approval_rules);
        let cwd = self.tool_context.cwd();
        if let Some((rule, scope)) = rules.covering(&info.name, &info.arguments, cwd, escalation) {
            // A remembered approval answers without asking; the log says which rule did.
            let decided = json!({
                "id": uuid::Uuid::new_v4().to_string(),
                "callId": info.call_id,
                "toolName": info.name,
                "outcome": "approved",
                "scope": "rule",
                "rule": rule.describe(),
                "ruleScope": scope.as_str(),
            });
            return Box::pin(async move {
                log_approval(&shared, "approval/decided", decided)?;
                if let Some(preset) = escalation {
                    let _ = escalated.set(preset);
                }
                let _ = approved.set(());
                future.await
            });
        }
        let request = approval_request(info, reason, escalation, &rules, cwd);
        let approver = Arc::clone(&self.approver);
        let cancel = info.cancel.clone();
        Box::pin(async move {
            let asked = asked_event(&request);
            let (id, offered) = (request.id.clone(), request.choices.clone());
            let rule = request.rule.clone();
            // Held by the approver before it is logged: an answer to `approval/asked` finds it.
            let decide = approver.decide(request);
            log_approval(&shared, "approval/asked", asked)?;
            let decision = tokio::select! {
                decision = decide => Some(decision),
                _ = cancel.cancelled() => None,
            };
            let mut decided = json!({"id": id});
            let result = settle(decision, &offered, rule, &rules, &mut decided);
            if result.is_ok() {
                if let Some(preset) = escalation {
                    // Only this dispatch sets the cell, once; a second set cannot happen.
                    let _ = escalated.set(preset);
                }
                let _ = approved.set(());
            }
            log_approval(&shared, "approval/decided", decided)?;
            result?;
            future.await
        })
    }

    fn log_result(
        &mut self,
        info: &ToolCallInfo,
        outcome: ToolOutcome,
        extra_events: Vec<Event>,
    ) -> Result<(), AgentError> {
        // Usage a tool's data reports (a child's `usage`, `web_search`'s `auxiliaryUsage`)
        // counts from the logged result's meta, by the session's one rule (crate
        // `dsh_session::usage`).
        let block = dsh_tools::tool_result_block(&info.call_id, &outcome);
        let (error, meta) = match &outcome {
            Ok(output) => (None, output.data.clone()),
            Err(err) => (
                Some(dsh_session::ToolError {
                    code: err.code.as_str().to_string(),
                    name: Some(info.name.clone()),
                    message: Some(err.message.clone()),
                }),
                None,
            ),
        };
        let message = Message {
            id: uuid::Uuid::new_v4().to_string(),
            role: Role::User,
            content: vec![block],
            source: MessageSource::Tool {
                call_id: info.call_id.clone(),
            },
        };
        let text = message.tool_result_text();
        let facts = dsh_tools::ResultFacts {
            text: &text,
            meta: meta.as_ref(),
            error: error.as_ref().map(|e| e.code.as_str()),
        };
        let summary = self
            .step_tools
            .summarize(&info.name, &info.arguments, &facts)
            .and_then(|summary| crate::presentation::logged(&summary));
        let mut log = self.shared.log();
        for event in extra_events {
            log.append(event)?;
        }
        log.append_envelope(Envelope::new(Event::ToolResult(dsh_session::ToolResult {
            turn: info.turn,
            step: info.step,
            message,
            error,
            meta,
            summary,
        })))?;
        Ok(())
    }
}

/// Appends a non-model-visible approval event. A log that refuses it refuses the call too:
/// nothing runs unlogged.
/// Logs (and syncs) that a call's body starts.
fn log_started(shared: &Shared, started: ToolStarted) -> Result<(), ToolError> {
    let mut log = shared.log();
    log.append(Event::ToolStarted(started))
        .and_then(|_| log.flush())
        .map_err(|err| {
            ToolError::new(
                ToolErrorCode::Io,
                format!("cannot log the start of the call: {err}"),
            )
        })
}

/// The shortest time between two logged progress reports of one call; a report that comes
/// sooner is dropped, except the one that reaches the total.
const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Logs the call's progress reports as `tool/progress` (throttled; not flushed: progress is
/// worth no fsync, and the call's result is flushed after it anyway), each first through the
/// extensions' `tool_progress` (secrets redacted).
fn progress_sink(
    shared: &Arc<Shared>,
    call_id: &str,
    extensions: Vec<Arc<dyn crate::Extension>>,
) -> dsh_tools::ProgressSink {
    let shared = Arc::clone(shared);
    let call_id = call_id.to_string();
    let last: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    Arc::new(move |mut report: dsh_tools::ToolProgress| {
        let reached_total = report.total.is_some_and(|total| report.progress >= total);
        {
            let mut last = last.lock_or_recover();
            if !reached_total && last.is_some_and(|at| at.elapsed() < PROGRESS_INTERVAL) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        for extension in &extensions {
            extension.tool_progress(&mut report);
        }
        let mut data = serde_json::to_value(&report).unwrap_or_else(|_| json!({}));
        data["callId"] = json!(call_id);
        // A log that refuses a progress report loses only the report.
        let _ = shared.log().append(Event::Opaque {
            event_type: dsh_session::TOOL_PROGRESS_EVENT.to_string(),
            data,
        });
    })
}

fn log_approval(shared: &Shared, event_type: &str, data: Value) -> Result<(), ToolError> {
    let mut log = shared.log();
    log.append(Event::Opaque {
        event_type: event_type.to_string(),
        data,
    })
    .and_then(|_| log.flush())
    .map(|_| ())
    .map_err(|err| {
        ToolError::new(
            ToolErrorCode::Io,
            format!("the approval could not be logged, so the call was not run: {err}"),
        )
    })
}

/// True when `block` is an error result.
pub fn is_error_result(block: &ContentBlock) -> bool {
    matches!(
        block,
        ContentBlock::ToolResult {
            is_error: Some(true),
            ..
        }
    )
}

/// The question put to the approver for `info`: allow once, for the session and (where rules
/// persist) always when a rule can cover the call, or reject.
fn approval_request(
    info: &ToolCallInfo,
    reason: String,
    escalation: Option<PermissionPreset>,
    rules: &crate::ApprovalRules,
    cwd: &std::path::Path,
) -> ApprovalRequest {
    let rule = proposed_rule(&info.name, &info.arguments, cwd, escalation);
    let mut choices = vec![ApprovalChoice::AllowOnce];
    if rule.is_some() {
        choices.push(ApprovalChoice::AllowSession);
        if rules.persists() {
            choices.push(ApprovalChoice::AllowAlways);
        }
    }
    choices.push(ApprovalChoice::Reject);
    ApprovalRequest {
        id: uuid::Uuid::new_v4().to_string(),
        call_id: info.call_id.clone(),
        tool_name: info.name.clone(),
        arguments: info.arguments.clone(),
        reason,
        escalation,
        choices,
        rule,
    }
}

/// The data of the `approval/asked` event for `request`.
fn asked_event(request: &ApprovalRequest) -> Value {
    let mut asked = json!({
        "id": request.id,
        "toolName": request.tool_name,
        "callId": request.call_id,
        "reason": request.reason,
        "choices": request.choices.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
    });
    if let Some(preset) = request.escalation {
        asked["escalation"] = json!(preset.as_str());
    }
    if let Some(rule) = &request.rule {
        asked["rule"] = json!(rule.describe());
    }
    asked
}

/// Applies the approver's answer (`None`: the turn was cancelled meanwhile): records the rule
/// an "allow for the session" or "allow always" answer covers, fills `decided` (outcome, scope,
/// rule) and returns `Ok` when the call may run.
fn settle(
    decision: Option<ApprovalDecision>,
    offered: &[ApprovalChoice],
    rule: Option<ApprovalRule>,
    rules: &crate::ApprovalRules,
    decided: &mut Value,
) -> Result<(), ToolError> {
    // An answer that was not offered counts as "allow once": a rule is never recorded unless
    // the user was shown it.
    let offered_rule = |choice: ApprovalChoice| rule.clone().filter(|_| offered.contains(&choice));
    match decision {
        Some(ApprovalDecision::Reject { message }) => {
            decided["outcome"] = json!("rejected");
            decided["scope"] = json!("once");
            Err(ToolError::new(ToolErrorCode::PermissionDenied, message))
        }
        None => {
            decided["outcome"] = json!("canceled");
            decided["scope"] = json!("once");
            Err(ToolError::new(
                ToolErrorCode::Aborted,
                "the turn was cancelled while waiting for the user's approval",
            ))
        }
        Some(allowed) => {
            decided["outcome"] = json!("approved");
            decided["scope"] = json!("once");
            match allowed {
                ApprovalDecision::AllowSession => {
                    if let Some(rule) = offered_rule(ApprovalChoice::AllowSession) {
                        decided["scope"] = json!("session");
                        decided["rule"] = json!(rule.describe());
                        rules.allow_for_session(rule);
                    }
                }
                ApprovalDecision::AllowAlways => {
                    if let Some(rule) = offered_rule(ApprovalChoice::AllowAlways) {
                        decided["scope"] = json!("always");
                        decided["rule"] = json!(rule.describe());
                        if let Err(err) = rules.allow_always(rule) {
                            // Still remembered for the session; the log says why not for
                            // later ones.
                            decided["scope"] = json!("session");
                            decided["ruleError"] = json!(err);
                        }
                    }
                }
                _ => {}
            }
            Ok(())
        }
    }
}
