//! One turn: steps of request, stream and tools until nothing more is owed (docs/agent.md, "Turns
//! and steps").

use dsh_llm::LockExt;
use std::sync::Arc;

use std::collections::BTreeMap;

use dsh_llm::{
    AssembledReply, BlockAssembler, Chunk, ContentBlock, Failure, FailureCode, FinishReason,
    GenerateRequest, Message, MessageSource, PreparedCallConfig, RetryDecision, Role, ToolSchema,
    Usage, UsageTotals,
};
use dsh_session::usage::{PURPOSE_CANCELLED_REPLY, PURPOSE_FAILED_REPLY, PURPOSE_TITLE};
use dsh_session::{
    AbortCause, AssistantChunk, AssistantMessage, Envelope, Event, HeaderReason, HeaderTools,
    LlmRetry, RequestContext, RequestHeader, RequestHeaderEvent, SessionTitle, StepRef, TurnEnd,
    TurnEndReason, TurnStart, UsageCall,
};
use futures::StreamExt;
use serde_json::Map;
use tokio_util::sync::CancellationToken;

use crate::agent::{plugin_message, Agent, AgentError, TurnOutcome};
use crate::compaction::CompactionTrigger;
use crate::extension::{PreStepContext, TurnBoundary, TurnStoppingContext};
use crate::prompt::{assemble_system_prompt, PromptContext};

/// The text told to the model at the start of the turn after a cancelled one.
const INTERRUPTED_NOTICE: &str = "The previous turn was interrupted by the user before it \
    finished. Any tool call without a result did not run. Do not assume that work completed; \
    check the current state before continuing.";

/// `messages` with every image block (tool results included) replaced by
/// `[image omitted: <model> takes no images]`, for a model without image input.
pub(crate) fn omit_images(messages: &[Message], model: &str) -> Vec<Message> {
    let placeholder =
        |_: &dsh_llm::ImageAttachment| format!("[image omitted: {model} takes no images]");
    messages
        .iter()
        .map(|message| {
            if dsh_llm::content_has_image(&message.content) {
                Message {
                    content: dsh_llm::replace_images(&message.content, &placeholder),
                    ..message.clone()
                }
            } else {
                message.clone()
            }
        })
        .collect()
}

/// How one model call ended, after retries.
enum CallEnd {
    /// A reply to store (stop, tool-calls or max-tokens).
    Reply {
        reply: AssembledReply,
        chunk_seqs: Vec<u64>,
    },
    /// The retry policy gave up on a failure.
    Failed(Failure),
    /// Cancelled; holds what was received so far, the call's usage included when it arrived.
    Cancelled {
        partial: Vec<ContentBlock>,
        chunk_seqs: Vec<u64>,
        usage: Option<Usage>,
    },
}

/// What a step means for its turn.
enum StepFlow {
    /// Another step follows (tool calls, steering, an extension that steered).
    Next,
    /// The turn ends for this reason.
    End(TurnEndReason),
}

/// What the turn gathered over its steps (its usage is read from the log: [`Agent::turn_usage`]).
#[derive(Default)]
struct TurnTotals {
    cache_reports: Vec<crate::CacheReport>,
    final_text: String,
}

/// The model-title call of a new session: the task, the seq of the titled message and the
/// fallback title logged meanwhile.
struct TitleTask {
    task: tokio::task::JoinHandle<crate::titles::TitleReply>,
    seq: u64,
    fallback: String,
}

impl Agent {
    /// Runs one turn if input is queued; `None` when the inbox is empty.
    pub async fn run_turn(&mut self) -> Result<Option<TurnOutcome>, AgentError> {
        let cancel = CancellationToken::new();
        let (claimed, turn) = {
            let mut log = self.shared.log();
            if !log.inbox.has_next_turn() && !log.inbox.has_next_step() {
                return Ok(None);
            }
            self.turn += 1;
            let turn = self.turn;
            log.append(Event::TurnStart(TurnStart { turn }))?;
            let (claimed, splices) = log.inbox.claim(true);
            for splice in &splices {
                log.append_splice(splice)?;
            }
            (claimed, turn)
        };
        *self.shared.turn_cancel.lock_or_recover() = Some(cancel.clone());
        self.start_turn_work(TurnBoundary::Start(turn));
        // A command's model and tools hold for this turn only (`crate::turn_settings`).
        self.begin_turn_settings(&claimed);
        let result = self.run_steps(turn, claimed, &cancel).await;
        self.end_turn_settings();
        *self.shared.turn_cancel.lock_or_recover() = None;
        let outcome = result?;
        self.shared.log().flush()?;
        Ok(Some(outcome))
    }

    async fn run_steps(
        &mut self,
        turn: u64,
        mut claimed: Vec<Message>,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        let mut totals = TurnTotals::default();
        // The turn's usage is what the session's grows by from here (docs/sessions.md, "Cost").
        let start_usage = self.session_usage();
        let mut step = 0u64;
        let interrupted_before = matches!(
            self.shared.log().last_turn_end(),
            Some(TurnEndReason::Aborted { .. })
        );
        // The model-title call for a new session.
        let mut title_task: Option<TitleTask> = None;
        // The wall-time budget cancels the turn when it passes (docs/harbor.md, "Budgets").
        let budget = self.options.budget;
        let wall_time_hit = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let wall_timer = budget.max_wall_time.map(|limit| {
            let cancel = cancel.clone();
            let hit = Arc::clone(&wall_time_hit);
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                hit.store(true, std::sync::atomic::Ordering::SeqCst);
                cancel.cancel();
            })
        });
        let reason = loop {
            step += 1;
            if wall_time_hit.load(std::sync::atomic::Ordering::SeqCst) {
                break TurnEndReason::Error {
                    error: budget.wall_time_failure(),
                };
            }
            if let Some(error) = budget.check_before_step(
                step,
                &self.turn_usage(&start_usage),
                &self.options.call.model,
                &self.options.prices,
            ) {
                break TurnEndReason::Error { error };
            }
            if step > self.options.max_steps_per_turn {
                let failure = Failure::new(
                    FailureCode::Other("MAX_STEPS".into()),
                    format!(
                        "the turn reached {} steps without finishing; stopped to avoid a runaway loop",
                        self.options.max_steps_per_turn
                    ),
                );
                break TurnEndReason::Error { error: failure };
            }
            let first_step = step == 1;
            self.start_step(
                StepRef { turn, step },
                &mut claimed,
                first_step && interrupted_before,
                &mut title_task,
            )?;
            if let Some(reason) = self.run_pre_step(turn, step)? {
                break reason;
            }
            match self.run_step(turn, step, &mut totals, cancel).await? {
                StepFlow::Next => continue,
                StepFlow::End(reason) => break reason,
            }
        };
        if let Some(timer) = wall_timer {
            timer.abort();
        }
        // A turn the wall-time budget cancelled ends with the budget's reason, not `aborted`.
        let reason = match reason {
            TurnEndReason::Aborted { .. }
                if wall_time_hit.load(std::sync::atomic::Ordering::SeqCst) =>
            {
                TurnEndReason::Error {
                    error: budget.wall_time_failure(),
                }
            }
            other => other,
        };
        self.settle_turn_work().await?;
        self.shared.log().append(Event::TurnEnd(TurnEnd {
            turn,
            reason: reason.clone(),
        }))?;
        self.start_turn_work(TurnBoundary::End(turn));
        self.settle_turn_work().await?;
        if let Some(task) = title_task {
            self.settle_title(turn, task).await?;
        }
        let usage_by_model = self.turn_usage(&start_usage);
        Ok(TurnOutcome {
            turn,
            reason,
            final_text: totals.final_text,
            usage: dsh_session::usage::sum(&usage_by_model),
            usage_by_model,
            cache_reports: totals.cache_reports,
        })
    }

    /// Starts what extensions do at `boundary` ([`crate::Extension::turn_boundary`]) and
    /// keeps it for [`Agent::settle_turn_work`]. A turn's start work runs beside its first
    /// request (a checkpoint of the workspace must not delay it); what an earlier turn that
    /// failed part-way left running is not this turn's and is dropped.
    fn start_turn_work(&mut self, boundary: TurnBoundary) {
        if matches!(boundary, TurnBoundary::Start(_)) {
            for stale in std::mem::take(&mut self.turn_work) {
                stale.abort();
            }
        }
        let work: Vec<_> = self
            .extensions
            .snapshot()
            .iter()
            .filter_map(|extension| extension.turn_boundary(boundary))
            .map(tokio::spawn)
            .collect();
        self.turn_work.extend(work);
    }

    /// Waits for the turn-boundary work still running and logs the events it returned.
    async fn settle_turn_work(&mut self) -> Result<(), AgentError> {
        for work in std::mem::take(&mut self.turn_work) {
            // A panicked task has nothing to log.
            if let Ok(events) = work.await {
                let mut log = self.shared.log();
                for event in events {
                    log.append(event)?;
                }
            }
        }
        Ok(())
    }

    /// The session's usage so far, per model: every billed call its log records.
    fn session_usage(&self) -> BTreeMap<String, UsageTotals> {
        self.shared.log().writer().state().usage_by_model().clone()
    }

    /// What the session's usage grew by since `start` (a turn's usage so far).
    fn turn_usage(&self, start: &BTreeMap<String, UsageTotals>) -> BTreeMap<String, UsageTotals> {
        let log = self.shared.log();
        dsh_session::usage::usage_since(log.writer().state().usage_by_model(), start)
    }

    /// Logs `step/start` with the messages claimed for it: after the first step, whatever the
    /// inbox holds for the next step; the interrupted-turn notice; and, for the session's first
    /// user message, the fallback title (starting the model-title call).
    fn start_step(
        &mut self,
        at: StepRef,
        claimed: &mut Vec<Message>,
        notice_interrupted: bool,
        title_task: &mut Option<TitleTask>,
    ) -> Result<(), AgentError> {
        let mut log = self.shared.log();
        if at.step > 1 {
            let (more, splices) = log.inbox.claim(false);
            for splice in &splices {
                log.append_splice(splice)?;
            }
            claimed.extend(more);
        }
        log.append(Event::StepStart(at))?;
        if notice_interrupted {
            log.append(Event::UserMessage(plugin_message(
                "interrupted-turn",
                "notice",
                INTERRUPTED_NOTICE,
            )))?;
        }
        for message in claimed.drain(..) {
            let is_user = matches!(message.source, MessageSource::User);
            let seq = log.append(Event::UserMessage(message.clone()))?;
            if is_user && log.writer().state().title().is_none() {
                let fallback = fallback_title(&message.text());
                log.append(Event::SessionTitle(SessionTitle {
                    title: fallback.clone(),
                    message_seqs: vec![seq],
                    source: Some(serde_json::json!({"kind": "fallback"})),
                }))?;
                *title_task = self.spawn_title(&message.text()).map(|task| TitleTask {
                    task,
                    seq,
                    fallback,
                });
            }
        }
        Ok(())
    }

    /// The pre-step point: extensions add model-facing context (logged here) or refuse the
    /// step, which then ends the turn `blocked`.
    fn run_pre_step(&mut self, turn: u64, step: u64) -> Result<Option<TurnEndReason>, AgentError> {
        let permission_change = self.apply_permission_change();
        let mut pre = PreStepContext {
            turn,
            step,
            history_len: 0,
            inject: Vec::new(),
            log_events: Vec::new(),
            permission_change,
        };
        let mut blocked = None;
        for extension in self.extensions.snapshot() {
            if let Err(reason) = extension.pre_step(&mut pre) {
                blocked = Some(reason.to_string());
                break;
            }
        }
        let mut log = self.shared.log();
        for event in pre.log_events {
            log.append(event)?;
        }
        for message in pre.inject {
            log.append(Event::UserMessage(message))?;
        }
        match blocked {
            Some(message) => {
                log.append(Event::StepEnd(StepRef { turn, step }))?;
                Ok(Some(TurnEndReason::Blocked {
                    message: Some(message),
                }))
            }
            None => Ok(None),
        }
    }

    /// One step after its pre-step: compaction when due, the model call, and what its end
    /// means for the turn.
    async fn run_step(
        &mut self,
        turn: u64,
        step: u64,
        totals: &mut TurnTotals,
        cancel: &CancellationToken,
    ) -> Result<StepFlow, AgentError> {
        let requested = self
            .shared
            .compact_requested
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if requested || self.needs_compaction() {
            let trigger = if requested {
                CompactionTrigger::Requested
            } else {
                CompactionTrigger::Pressure
            };
            self.compact(trigger, cancel).await?;
        }
        let (pending_report, call_end) = match self.call_with_overflow(turn, step, cancel).await? {
            Ok(called) => called,
            Err(failure) => {
                self.shared
                    .log()
                    .append(Event::StepEnd(StepRef { turn, step }))?;
                return Ok(StepFlow::End(TurnEndReason::Error { error: failure }));
            }
        };
        match call_end {
            CallEnd::Failed(failure) => {
                self.shared
                    .log()
                    .append(Event::StepEnd(StepRef { turn, step }))?;
                Ok(StepFlow::End(TurnEndReason::Error { error: failure }))
            }
            CallEnd::Cancelled {
                partial,
                chunk_seqs,
                usage,
            } => {
                let mut log = self.shared.log();
                // The call's usage, when it arrived, is billed: on the partial reply, else on
                // its own record.
                if !partial.is_empty() {
                    let message = self.assistant_message(partial);
                    totals.final_text = message.text();
                    log.append_envelope(
                        Envelope::new(Event::AssistantMessage(AssistantMessage {
                            turn,
                            step,
                            message,
                            usage,
                            interrupted: true,
                        }))
                        .with_sources(chunk_seqs),
                    )?;
                } else if let Some(usage) = usage {
                    let model = self.options.call.model.clone();
                    let at = (Some(turn), Some(step));
                    log.append(usage_call(PURPOSE_CANCELLED_REPLY, model, usage, at))?;
                }
                log.append(Event::StepEnd(StepRef { turn, step }))?;
                Ok(StepFlow::End(self.abort_reason(&mut log)?))
            }
            CallEnd::Reply { reply, chunk_seqs } => {
                let at = StepRef { turn, step };
                self.handle_reply(at, reply, chunk_seqs, pending_report, totals, cancel)
                    .await
            }
        }
    }

    /// Builds the request and calls the model; a context-window overflow compacts once and
    /// calls again. `Ok(Err)` is a request that could not be built (the turn ends `error`).
    async fn call_with_overflow(
        &mut self,
        turn: u64,
        step: u64,
        cancel: &CancellationToken,
    ) -> Result<Result<(crate::CacheReport, CallEnd), Failure>, AgentError> {
        let mut overflow_compacted = false;
        loop {
            let request = match self.build_request(cancel) {
                Ok(request) => request,
                Err(failure) => return Ok(Err(failure)),
            };
            let pending_report = self.cache.observe(turn, step, &request);
            let end = self.call_model(turn, step, request, cancel).await?;
            if let CallEnd::Failed(failure) = &end {
                if failure.code == FailureCode::ContextWindowExceeded && !overflow_compacted {
                    overflow_compacted = true;
                    self.compact(CompactionTrigger::Overflow, cancel).await?;
                    continue;
                }
            }
            return Ok(Ok((pending_report, end)));
        }
    }

    /// Stores a reply (message and cache report), runs its tool calls, and decides whether the
    /// turn goes on: more calls or steering go to the next step, an extension may steer at the
    /// turn's end, otherwise it completes.
    async fn handle_reply(
        &mut self,
        at: StepRef,
        reply: AssembledReply,
        chunk_seqs: Vec<u64>,
        pending_report: crate::CacheReport,
        totals: &mut TurnTotals,
        cancel: &CancellationToken,
    ) -> Result<StepFlow, AgentError> {
        let StepRef { turn, step } = at;
        let finish = reply.finish.clone();
        let report = pending_report.with_usage(
            reply.usage.as_ref(),
            self.options.prices.models.get(&self.options.call.model),
        );
        let message = self.assistant_message(reply.blocks);
        let text = message.text();
        if !text.is_empty() {
            totals.final_text = text;
        }
        let calls: Vec<(String, String, String)> = message
            .tool_calls()
            .map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string()))
            .collect();
        {
            let mut log = self.shared.log();
            log.append_envelope(
                Envelope::new(Event::AssistantMessage(AssistantMessage {
                    turn,
                    step,
                    message,
                    usage: reply.usage,
                    interrupted: false,
                }))
                .with_sources(chunk_seqs),
            )?;
            let mut envelope = Envelope::new(Event::Opaque {
                event_type: crate::CACHE_REPORT_EVENT.to_string(),
                data: report.to_value(),
            });
            envelope.ignorable = true;
            log.append_envelope(envelope)?;
        }
        totals.cache_reports.push(report);
        if let Some(u) = reply.usage.filter(|u| u.billed_input() > 0) {
            let bytes = self.shared.log().history_bytes();
            self.last_usage = Some((u.billed_input() + u.output_tokens, bytes));
        }
        if matches!(finish, FinishReason::MaxTokens) {
            self.shared.log().append(Event::StepEnd(at))?;
            return Ok(StepFlow::End(TurnEndReason::MaxTokens));
        }
        let aborted = if calls.is_empty() {
            false
        } else {
            // Nothing changes the workspace before the turn-start work (its checkpoint) ended.
            self.settle_turn_work().await?;
            self.run_tools(turn, step, calls.clone(), cancel).await?
        };
        // Usage spent on the agent's behalf that no tool result carries (a failed or
        // background child's run) is logged before the step ends: it counts from there.
        let records: Vec<Event> = self
            .extensions
            .snapshot()
            .iter()
            .flat_map(|extension| extension.take_usage_records())
            .collect();
        let mut log = self.shared.log();
        for record in records {
            log.append(record)?;
        }
        log.append(Event::StepEnd(at))?;
        if aborted || cancel.is_cancelled() {
            return Ok(StepFlow::End(self.abort_reason(&mut log)?));
        }
        if !calls.is_empty() || log.inbox.has_next_step() {
            return Ok(StepFlow::Next);
        }
        drop(log);
        self.turn_stopping(at, &totals.final_text)
    }

    /// The turn is about to complete: the first extension that steers queues its message for
    /// another step; otherwise the turn completes.
    fn turn_stopping(&mut self, at: StepRef, final_text: &str) -> Result<StepFlow, AgentError> {
        let mut steer = None;
        for extension in self.extensions.snapshot() {
            let ctx = TurnStoppingContext {
                turn: at.turn,
                step: at.step,
                final_text,
            };
            if let Some(message) = extension.turn_stopping(&ctx) {
                steer = Some(message);
                break;
            }
        }
        match steer {
            Some(message) => {
                let mut log = self.shared.log();
                let splice = log.inbox.push(crate::inbox::InboxTarget::NextStep, message);
                log.append_splice(&splice)?;
                Ok(StepFlow::Next)
            }
            None => Ok(StepFlow::End(TurnEndReason::Completed)),
        }
    }

    /// The title call ran alongside the turn `turn`; give it a moment more, then keep the
    /// fallback. Its usage, when it arrived, is logged (`usage/call`, purpose `title`) whether
    /// or not it gave a title. Dropping the handle does not stop the task, so it is aborted
    /// explicitly.
    async fn settle_title(&self, turn: u64, title: TitleTask) -> Result<(), AgentError> {
        let TitleTask {
            task,
            seq,
            fallback,
        } = title;
        let abort = task.abort_handle();
        match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
            Ok(Ok(reply)) => {
                let mut log = self.shared.log();
                if let Some(usage) = reply.usage {
                    let model = self.title_route().1;
                    log.append(usage_call(PURPOSE_TITLE, model, usage, (Some(turn), None)))?;
                }
                // A title set meanwhile (a user's rename) wins over the model's.
                let current = log.writer().state().title() == Some(fallback.as_str());
                if let Some(title) = reply.title.filter(|_| current) {
                    log.append(Event::SessionTitle(SessionTitle {
                        title,
                        message_seqs: vec![seq],
                        source: Some(serde_json::json!({
                            "kind": "model",
                            "model": self.title_route().1,
                        })),
                    }))?;
                }
                // Logged after the turn's last flush point: make it durable now, so readers of
                // the file (session lists) see it.
                log.flush()?;
            }
            _ => abort.abort(),
        }
        Ok(())
    }

    /// Clears the inbox unless asked to keep it; the `aborted` reason.
    fn abort_reason(&self, log: &mut crate::log::SessionLog) -> Result<TurnEndReason, AgentError> {
        let keep = *self.shared.keep_inbox_on_cancel.lock_or_recover();
        if !keep {
            for splice in log.inbox.clear() {
                log.append_splice(&splice)?;
            }
        }
        Ok(TurnEndReason::Aborted {
            reason: Some(AbortCause {
                kind: "user".to_string(),
                extra: Map::new(),
            }),
        })
    }

    fn assistant_message(&self, content: Vec<ContentBlock>) -> Message {
        Message {
            id: uuid::Uuid::new_v4().to_string(),
            role: Role::Assistant,
            content,
            source: MessageSource::Model {
                provider: self.options.call.provider.clone(),
                model: self.options.call.model.clone(),
                extra: Map::new(),
            },
        }
    }

    /// Builds the request from the log (history) and the current header, logging the header
    /// and context when this loop instance has not yet, or when they changed.
    pub(crate) fn build_request(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<GenerateRequest, Failure> {
        self.apply_call_change()?;
        let config = self.options.call.clone().prepare(&self.model_info)?;
        let extensions = self.extensions.snapshot();
        let system = assemble_system_prompt(
            &extensions,
            &PromptContext {
                model: &self.options.call.model,
                cwd: &self.options.cwd,
            },
        );
        let registry = self.effective_tools()?;
        // Unchanged schemas (the usual step) are shared with the previous request: no second
        // serialization for their size, no copy for the header comparison. The same registry
        // (the usual case: no extension adds tools) holds the same tool objects, whose schemas
        // are fixed (docs/tools.md); a registry built anew is read and compared.
        let same_registry = Arc::ptr_eq(&registry, &self.step_tools);
        self.step_tools = registry;
        if !same_registry {
            *self.shared.tools.lock_or_recover() = Arc::clone(&self.step_tools);
        }
        let tools = match self.last_tools.take() {
            Some(last) if same_registry => last,
            last => {
                let schemas = self.step_tools.schemas();
                match last {
                    Some(last) if *last == schemas => last,
                    _ => Arc::new(schemas),
                }
            }
        };
        self.last_tools = Some(Arc::clone(&tools));
        // The cache report fingerprints a list once and keeps it: the size of a shared list
        // costs nothing, and the request's own fingerprint later is the same entry.
        self.header_bytes = system.len() + self.cache.tools_bytes(&tools);
        let mut log = self.shared.log();
        let reason = if !self.header_logged {
            Some(if self.resumed {
                HeaderReason::Resume
            } else {
                HeaderReason::Initial
            })
        } else if !log
            .writer()
            .state()
            .last_header()
            .is_some_and(|last| logged_as(last, &config, &system, &tools))
        {
            Some(HeaderReason::Change)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.log_header(&mut log, (&config, &system, &tools), reason)?;
            self.header_logged = true;
        }
        let (messages, lineage) = log.shared_history();
        let mut request = GenerateRequest {
            config,
            system,
            messages: Arc::clone(&messages),
            tools,
            cancel: cancel.clone(),
            session_id: Some(log.session_id().to_string()),
            purpose: None,
            history_lineage: Some(lineage),
        };
        drop(log);
        for extension in &extensions {
            extension.request(&mut request);
        }
        // A model without image input never gets an image: a logged one (a resumed session, a
        // `/model` switch after images were sent) goes as a placeholder line, so the session
        // stays usable (docs/model-calls.md, "Images").
        if !dsh_llm::takes_images(&self.model_info)
            && dsh_llm::messages_have_images(&request.messages)
        {
            request.messages = Arc::new(omit_images(
                &request.messages,
                &request.config.config().model,
            ));
        }
        // An extension that changed the messages made them its own: the log's lineage no
        // longer vouches for them (docs/model-calls.md, "History lineage").
        if !Arc::ptr_eq(&request.messages, &messages) {
            request.history_lineage = None;
        }
        self.log_header_changed_by_hooks(&request)?;
        Ok(request)
    }

    /// A `request` hook that changed the call config, the system prompt or the tools made a
    /// model-visible change: it is logged as a header `change`, like any other (model-visible
    /// means logged).
    fn log_header_changed_by_hooks(&self, request: &GenerateRequest) -> Result<(), Failure> {
        let header = (&request.config, &request.system, &request.tools);
        let mut log = self.shared.log();
        let unchanged = log
            .writer()
            .state()
            .last_header()
            .is_some_and(|last| logged_as(last, header.0, header.1, header.2));
        if unchanged {
            return Ok(());
        }
        self.log_header(&mut log, header, HeaderReason::Change)
    }

    /// Logs the header `(config, system, tools)` and the request context (provider and model)
    /// after it.
    fn log_header(
        &self,
        log: &mut crate::log::SessionLog,
        (config, system, tools): (&PreparedCallConfig, &String, &Arc<Vec<ToolSchema>>),
        reason: HeaderReason,
    ) -> Result<(), Failure> {
        let header = RequestHeader {
            config: config.clone(),
            system: system.clone(),
            tools: HeaderTools::Schemas(Arc::clone(tools)),
        };
        let log_err = |e: dsh_session::SessionError| {
            Failure::new(FailureCode::Other("SESSION_LOG".into()), e.to_string())
        };
        log.append(Event::RequestHeader(RequestHeaderEvent { header, reason }))
            .map_err(log_err)?;
        log.append(Event::RequestContext(RequestContext {
            provider: self.options.call.provider.clone(),
            model: self.options.call.model.clone(),
        }))
        .map_err(log_err)?;
        Ok(())
    }

    /// One model call with retries inside the same step (docs/agent.md, "Retries").
    async fn call_model(
        &mut self,
        turn: u64,
        step: u64,
        request: GenerateRequest,
        cancel: &CancellationToken,
    ) -> Result<CallEnd, AgentError> {
        let adapter = match self.adapter_for(&request.config.config().provider) {
            Ok(adapter) => adapter,
            Err(failure) => return Ok(CallEnd::Failed(failure)),
        };
        let mut retries_done = 0u32;
        loop {
            // The request leaves while the log syncs; the first chunk's append waits for the
            // sync (docs/sessions.md, "Durability and crash repair").
            self.shared.log().flush_in_background()?;
            let mut stream = adapter.stream(request.clone());
            let mut assembler = BlockAssembler::new();
            let mut chunk_seqs = Vec::new();
            let cancelled = loop {
                let next = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break true,
                    next = stream.next() => next,
                };
                let Some(chunk) = next else { break false };
                let is_finish = matches!(chunk, Chunk::Finish { .. });
                if assembler.push(&chunk).is_err() {
                    // Chunks after a finish: the adapter broke its contract; ignore them.
                    break false;
                }
                let seq = self
                    .shared
                    .log()
                    .append(Event::AssistantChunk(AssistantChunk { turn, step, chunk }))?;
                chunk_seqs.push(seq);
                if is_finish {
                    break false;
                }
            };
            drop(stream);
            if cancelled || cancel.is_cancelled() {
                let usage = assembler.usage();
                return Ok(CallEnd::Cancelled {
                    partial: assembler.interrupted(),
                    chunk_seqs,
                    usage,
                });
            }
            let reply = assembler.finish();
            let failure = match &reply.finish {
                FinishReason::Error { failure } => failure.clone(),
                FinishReason::Aborted { failure } => {
                    // The adapter aborted without our token: treat it as a failure of the call.
                    failure.clone()
                }
                FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens => {
                    if reply.is_empty() && !matches!(reply.finish, FinishReason::MaxTokens) {
                        Failure::new(
                            FailureCode::EmptyResponse,
                            "the model returned a completed response with no content",
                        )
                    } else {
                        return Ok(CallEnd::Reply { reply, chunk_seqs });
                    }
                }
            };
            // A failed attempt whose usage arrived was billed (docs/sessions.md, "Cost").
            self.log_failed_attempt(&request, reply.usage, (turn, step))?;
            let mut decision = None;
            for extension in self.extensions.snapshot() {
                if let Some(d) = extension.request_error(&failure, retries_done) {
                    decision = Some(d);
                    break;
                }
            }
            match decision {
                Some(RetryDecision::Retry { retry, delay }) => {
                    self.shared.log().append(Event::LlmRetry(LlmRetry {
                        turn,
                        step,
                        retry: u64::from(retry),
                        delay_ms: delay.as_millis() as u64,
                        failure: failure.clone(),
                        extra: Map::new(),
                    }))?;
                    self.shared.log().flush()?;
                    tokio::select! {
                        _ = cancel.cancelled() => {
                            return Ok(CallEnd::Cancelled {
                                partial: Vec::new(),
                                chunk_seqs: Vec::new(),
                                usage: None,
                            });
                        }
                        _ = tokio::time::sleep(delay) => {}
                    }
                    retries_done += 1;
                }
                Some(RetryDecision::GiveUp { reason }) => {
                    let mut failure = failure;
                    if retries_done > 0 || !reason.ends_with("is not retryable") {
                        failure.message = format!("{} ({reason})", failure.message);
                    }
                    return Ok(CallEnd::Failed(failure));
                }
                None => return Ok(CallEnd::Failed(failure)),
            }
        }
    }
}

impl Agent {
    fn title_route(&self) -> (String, String) {
        match &self.options.titles {
            crate::TitleMode::Model { route, model } => (
                route
                    .clone()
                    .unwrap_or_else(|| self.options.call.provider.clone()),
                model
                    .clone()
                    .unwrap_or_else(|| self.options.call.model.clone()),
            ),
            crate::TitleMode::Fallback => (
                self.options.call.provider.clone(),
                self.options.call.model.clone(),
            ),
        }
    }

    /// Starts the title call when model titles are on.
    fn spawn_title(
        &self,
        prompt: &str,
    ) -> Option<tokio::task::JoinHandle<crate::titles::TitleReply>> {
        if self.options.titles == crate::TitleMode::Fallback {
            return None;
        }
        let (route, model) = self.title_route();
        let adapter = self.adapter_for(&route).ok()?;
        let info = adapter
            .model_info(&model)
            .unwrap_or_else(|| crate::generic_model_info(&model));
        let config = dsh_llm::CallConfig::new(route, model);
        let prompt = prompt.to_string();
        Some(tokio::spawn(async move {
            crate::titles::model_title(adapter, config, &info, &prompt, CancellationToken::new())
                .await
        }))
    }
}

/// The `usage/call` event of a billed call whose usage no assistant message carries, made for
/// `purpose` to `model`, in the `(turn, step)` it belongs to (docs/sessions.md, "Cost").
fn usage_call(
    purpose: &str,
    model: String,
    usage: Usage,
    (turn, step): (Option<u64>, Option<u64>),
) -> Event {
    UsageCall {
        purpose: purpose.to_string(),
        model,
        usage,
        turn,
        step,
    }
    .to_event()
}

impl Agent {
    /// Logs the `usage/call` of a failed attempt of `request` in `(turn, step)`, when its usage
    /// arrived.
    fn log_failed_attempt(
        &self,
        request: &GenerateRequest,
        usage: Option<Usage>,
        (turn, step): (u64, u64),
    ) -> Result<(), AgentError> {
        if let Some(usage) = usage {
            let model = request.config.config().model.clone();
            let at = (Some(turn), Some(step));
            let call = usage_call(PURPOSE_FAILED_REPLY, model, usage, at);
            self.shared.log().append(call)?;
        }
        Ok(())
    }
}

/// A short title from the first words of the first user message.
pub(crate) fn fallback_title(text: &str) -> String {
    let mut title = String::new();
    for word in text.split_whitespace().take(5) {
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    if title.chars().count() > 60 {
        title = title.chars().take(60).collect();
    }
    if title.is_empty() {
        "untitled".to_string()
    } else {
        title
    }
}

/// Whether `last` (the last logged header) is the header `config`, `system`, `tools`. The
/// tools compare by pointer first: while the steps send the list the header was logged with,
/// no schema needs comparing.
fn logged_as(
    last: &RequestHeader,
    config: &PreparedCallConfig,
    system: &str,
    tools: &Arc<Vec<ToolSchema>>,
) -> bool {
    last.config == *config
        && last.system == system
        && matches!(&last.tools, HeaderTools::Schemas(logged)
            if Arc::ptr_eq(logged, tools) || **logged == **tools)
}
