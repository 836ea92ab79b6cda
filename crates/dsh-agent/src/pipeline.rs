//! The tool pipeline (SPEC S4.4): log every call first, then policy, body (through the
//! `tool_execute` middleware), post-processing, and results logged in the model's order.
//! Concurrency-safe tools run together (up to the configured pool size); every other call runs
//! alone.

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageSource, Role};
use dsh_session::{Envelope, Event, ToolCall, ToolStarted};
use dsh_tools::{ToolError, ToolErrorCode};
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentError};
use crate::extension::{ToolCallInfo, ToolFuture, ToolOutcome, ToolPostContext, ToolVerdict};
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
                }))?;
            }
        }

        let mut next = 0;
        while next < infos.len() {
            // A batch: one unsafe call, or a run of concurrency-safe calls.
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
            {
                let mut log = self.shared.log();
                for info in batch {
                    log.append(Event::ToolStarted(ToolStarted {
                        turn,
                        step,
                        call_id: info.call_id.clone(),
                    }))?;
                }
                log.flush()?;
            }
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
            next = end;
        }
        Ok(cancel.is_cancelled())
    }

    /// Policy, then the body wrapped by every extension's middleware (first registered is
    /// outermost).
    fn dispatch(&self, info: &ToolCallInfo) -> ToolFuture {
        let extensions = self.extensions.snapshot();
        for extension in &extensions {
            if let ToolVerdict::Deny { reason } = extension.tool_pre(info) {
                return Box::pin(async move {
                    Err(ToolError::new(ToolErrorCode::PermissionDenied, reason))
                });
            }
        }
        let tools = Arc::clone(&self.step_tools);
        let ctx = self
            .tool_context
            .for_call()
            .with_cancel(info.cancel.clone());
        let name = info.name.clone();
        let arguments = info.arguments.clone();
        let mut future: ToolFuture =
            Box::pin(async move { tools.invoke(&name, &arguments, &ctx).await });
        for extension in extensions.iter().rev() {
            future = extension.tool_execute(info, future);
        }
        future
    }

    fn log_result(
        &self,
        info: &ToolCallInfo,
        outcome: ToolOutcome,
        extra_events: Vec<Event>,
    ) -> Result<(), AgentError> {
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
        })))?;
        Ok(())
    }
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
