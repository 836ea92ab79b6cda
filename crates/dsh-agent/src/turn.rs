//! One turn: steps of request, stream and tools until nothing more is owed (docs/agent.md, "Turns
//! and steps").

use std::sync::Arc;

use dsh_llm::{
    AssembledReply, BlockAssembler, Chunk, ContentBlock, Failure, FailureCode, FinishReason,
    GenerateRequest, Message, MessageSource, RetryDecision, Role, UsageTotals,
};
use dsh_session::{
    AbortCause, AssistantChunk, AssistantMessage, Envelope, Event, HeaderReason, HeaderTools,
    LlmRetry, RequestContext, RequestHeader, RequestHeaderEvent, SessionTitle, StepRef, TurnEnd,
    TurnEndReason, TurnStart,
};
use futures::StreamExt;
use serde_json::Map;
use tokio_util::sync::CancellationToken;

use crate::agent::{plugin_message, Agent, AgentError, TurnOutcome};
use crate::compaction::CompactionTrigger;
use crate::extension::{PreStepContext, TurnStoppingContext};
use crate::prompt::{assemble_system_prompt, PromptContext};

/// The text told to the model at the start of the turn after a cancelled one.
const INTERRUPTED_NOTICE: &str = "The previous turn was interrupted by the user before it \
    finished. Any tool call without a result did not run. Do not assume that work completed; \
    check the current state before continuing.";

/// How one model call ended, after retries.
enum CallEnd {
    /// A reply to store (stop, tool-calls or max-tokens).
    Reply {
        reply: AssembledReply,
        chunk_seqs: Vec<u64>,
    },
    /// The retry policy gave up on a failure.
    Failed(Failure),
    /// Cancelled; holds what was received so far.
    Cancelled {
        partial: Vec<ContentBlock>,
        chunk_seqs: Vec<u64>,
    },
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
        *self
            .shared
            .turn_cancel
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(cancel.clone());
        let result = self.run_steps(turn, claimed, &cancel).await;
        *self
            .shared
            .turn_cancel
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
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
        let mut usage = UsageTotals::default();
        let mut cache_reports = Vec::new();
        let mut final_text = String::new();
        let mut step = 0u64;
        let interrupted_before = matches!(
            self.shared.log().last_turn_end(),
            Some(TurnEndReason::Aborted { .. })
        );
        let mut first_step = true;
        // The model-title call for a new session: (task, seq of the titled message, fallback).
        let mut title_task: Option<(tokio::task::JoinHandle<Option<String>>, u64, String)> = None;
        let reason = 'steps: loop {
            step += 1;
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
            {
                let mut log = self.shared.log();
                if !first_step {
                    let (more, splices) = log.inbox.claim(false);
                    for splice in &splices {
                        log.append_splice(splice)?;
                    }
                    claimed.extend(more);
                }
                log.append(Event::StepStart(StepRef { turn, step }))?;
                if first_step && interrupted_before {
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
                        title_task = self
                            .spawn_title(&message.text())
                            .map(|task| (task, seq, fallback));
                    }
                }
            }
            first_step = false;

            // pre-step: extensions add model-facing context or refuse the step.
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
                    blocked = Some(reason);
                    break;
                }
            }
            {
                let mut log = self.shared.log();
                for event in pre.log_events {
                    log.append(event)?;
                }
                for message in pre.inject {
                    log.append(Event::UserMessage(message))?;
                }
                if let Some(message) = blocked {
                    log.append(Event::StepEnd(StepRef { turn, step }))?;
                    break TurnEndReason::Blocked {
                        message: Some(message),
                    };
                }
            }

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
            let mut overflow_compacted = false;
            let (pending_report, call_end) = loop {
                let request = match self.build_request(cancel) {
                    Ok(request) => request,
                    Err(failure) => {
                        self.shared
                            .log()
                            .append(Event::StepEnd(StepRef { turn, step }))?;
                        break 'steps TurnEndReason::Error { error: failure };
                    }
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
                break (pending_report, end);
            };
            match call_end {
                CallEnd::Failed(failure) => {
                    self.shared
                        .log()
                        .append(Event::StepEnd(StepRef { turn, step }))?;
                    break TurnEndReason::Error { error: failure };
                }
                CallEnd::Cancelled {
                    partial,
                    chunk_seqs,
                } => {
                    let mut log = self.shared.log();
                    if !partial.is_empty() {
                        let message = self.assistant_message(partial);
                        final_text = message.text();
                        log.append_envelope(
                            Envelope::new(Event::AssistantMessage(AssistantMessage {
                                turn,
                                step,
                                message,
                                usage: None,
                                interrupted: true,
                            }))
                            .with_sources(chunk_seqs),
                        )?;
                    }
                    log.append(Event::StepEnd(StepRef { turn, step }))?;
                    break self.abort_reason(&mut log)?;
                }
                CallEnd::Reply { reply, chunk_seqs } => {
                    if let Some(u) = &reply.usage {
                        usage.add(u);
                    }
                    let finish = reply.finish.clone();
                    let report = pending_report.with_usage(
                        reply.usage.as_ref(),
                        self.options.prices.models.get(&self.options.call.model),
                    );
                    let message = self.assistant_message(reply.blocks);
                    let text = message.text();
                    if !text.is_empty() {
                        final_text = text;
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
                    cache_reports.push(report);
                    if let Some(u) = reply.usage.filter(|u| u.billed_input() > 0) {
                        let bytes = self.shared.log().history_bytes();
                        self.last_usage = Some((u.billed_input() + u.output_tokens, bytes));
                    }
                    if matches!(finish, FinishReason::MaxTokens) {
                        self.shared
                            .log()
                            .append(Event::StepEnd(StepRef { turn, step }))?;
                        break TurnEndReason::MaxTokens;
                    }
                    let aborted = if calls.is_empty() {
                        false
                    } else {
                        self.run_tools(turn, step, calls.clone(), cancel).await?
                    };
                    usage.merge(&std::mem::take(&mut self.delegated_usage));
                    let mut log = self.shared.log();
                    log.append(Event::StepEnd(StepRef { turn, step }))?;
                    if aborted || cancel.is_cancelled() {
                        break self.abort_reason(&mut log)?;
                    }
                    if !calls.is_empty() || log.inbox.has_next_step() {
                        continue;
                    }
                    drop(log);
                    let mut steer = None;
                    for extension in self.extensions.snapshot() {
                        let ctx = TurnStoppingContext {
                            turn,
                            step,
                            final_text: &final_text,
                        };
                        if let Some(message) = extension.turn_stopping(&ctx) {
                            steer = Some(message);
                            break;
                        }
                    }
                    match steer {
                        Some(message) => {
                            let mut log = self.shared.log();
                            let splice =
                                log.inbox.push(crate::inbox::InboxTarget::NextStep, message);
                            log.append_splice(&splice)?;
                        }
                        None => break TurnEndReason::Completed,
                    }
                }
            }
        };
        self.shared.log().append(Event::TurnEnd(TurnEnd {
            turn,
            reason: reason.clone(),
        }))?;
        if let Some((task, seq, fallback)) = title_task {
            // The title call ran alongside the turn; give it a moment more, then keep the
            // fallback. Dropping the handle does not stop the task, so abort it explicitly.
            let abort = task.abort_handle();
            match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
                Ok(Ok(Some(title))) => {
                    let mut log = self.shared.log();
                    // A title set meanwhile (a user's rename) wins over the model's.
                    if log.writer().state().title() == Some(fallback.as_str()) {
                        log.append(Event::SessionTitle(SessionTitle {
                            title,
                            message_seqs: vec![seq],
                            source: Some(serde_json::json!({
                                "kind": "model",
                                "model": self.title_route().1,
                            })),
                        }))?;
                        // Logged after the turn's last flush point: make it durable now, so
                        // readers of the file (session lists) see it.
                        log.flush()?;
                    }
                }
                _ => abort.abort(),
            }
        }
        Ok(TurnOutcome {
            turn,
            reason,
            final_text,
            usage,
            cache_reports,
        })
    }

    /// Clears the inbox unless asked to keep it; the `aborted` reason.
    fn abort_reason(&self, log: &mut crate::log::SessionLog) -> Result<TurnEndReason, AgentError> {
        let keep = *self
            .shared
            .keep_inbox_on_cancel
            .lock()
            .unwrap_or_else(|p| p.into_inner());
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
        self.step_tools = self.effective_tools()?;
        let tools = self.step_tools.schemas();
        self.header_bytes = system.len() + serde_json::to_vec(&tools).map(|v| v.len()).unwrap_or(0);
        let header = RequestHeader {
            config: config.clone(),
            system: system.clone(),
            tools: HeaderTools::Schemas(tools.clone()),
        };
        let mut log = self.shared.log();
        let reason = if !self.header_logged {
            Some(if self.resumed {
                HeaderReason::Resume
            } else {
                HeaderReason::Initial
            })
        } else if log.writer().state().last_header() != Some(&header) {
            Some(HeaderReason::Change)
        } else {
            None
        };
        let log_err = |e: dsh_session::SessionError| {
            Failure::new(FailureCode::Other("SESSION_LOG".into()), e.to_string())
        };
        if let Some(reason) = reason {
            log.append(Event::RequestHeader(RequestHeaderEvent { header, reason }))
                .map_err(log_err)?;
            log.append(Event::RequestContext(RequestContext {
                provider: self.options.call.provider.clone(),
                model: self.options.call.model.clone(),
            }))
            .map_err(log_err)?;
            self.header_logged = true;
        }
        let mut request = GenerateRequest {
            config,
            system,
            messages: Arc::new(log.history()),
            tools: Arc::new(tools),
            cancel: cancel.clone(),
            session_id: Some(log.session_id().to_string()),
            purpose: None,
        };
        drop(log);
        for extension in &extensions {
            extension.request(&mut request);
        }
        Ok(request)
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
            self.shared.log().flush()?;
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
                return Ok(CallEnd::Cancelled {
                    partial: assembler.interrupted(),
                    chunk_seqs,
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
                            return Ok(CallEnd::Cancelled { partial: Vec::new(), chunk_seqs: Vec::new() });
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
    fn spawn_title(&self, prompt: &str) -> Option<tokio::task::JoinHandle<Option<String>>> {
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
