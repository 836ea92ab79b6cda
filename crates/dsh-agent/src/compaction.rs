//! Compaction (docs/agent.md, "Context discipline"): keep a long session under the model's context
//! window without losing the thread.
//!
//! Triggers: before a step when the estimated context passes `threshold` of the window; once on
//! a provider `CONTEXT_WINDOW_EXCEEDED` (then the step is retried); and on request (`/compact`).
//! Stages: (1) prune large tool results outside the recent tail to head + tail with a marker;
//! (2) if still over, summarise the oldest messages with one model call that reuses the last
//! request's system prompt and tools (so it hits the prompt cache), keeping a recent tail and
//! never separating a tool call from its result. The summary must succeed and be smaller than
//! what it replaces; otherwise the session continues uncompacted and the log says why.
//!
//! Log: `compaction/start`, (pruned `tool/result`s with `surfaceOp: replace`),
//! `compaction/summary`, the summary as a `user/message` replacing the summarised span,
//! `compaction/end`. The raw events stay in the log.

use std::sync::Arc;

use dsh_llm::{
    BlockAssembler, ContentBlock, FinishReason, GenerateRequest, Message, MessageSource, Purpose,
    Role,
};
use dsh_session::{Envelope, Event, HistoryEntry, SurfaceOp};
use futures::StreamExt;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentError};
use crate::log::message_bytes;

/// Plugin name of the summary message.
pub const COMPACTION_PLUGIN: &str = "compaction";

/// When and how to compact.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionSettings {
    /// Compact at all (pressure and overflow triggers; `/compact` works regardless).
    pub enabled: bool,
    /// Share of the context window that triggers compaction before a step.
    pub threshold: f64,
    /// Share of the window kept verbatim as the recent tail.
    pub keep_tail: f64,
    /// Tool results larger than this (bytes) outside the tail are pruned first.
    pub prune_above_bytes: usize,
    /// Bytes kept from the start and from the end of a pruned result.
    pub prune_keep_bytes: usize,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            threshold: 0.8,
            keep_tail: 0.16,
            prune_above_bytes: 8 * 1024,
            prune_keep_bytes: 1024,
        }
    }
}

/// Why compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionTrigger {
    /// The request would use more of the window than the threshold.
    Pressure,
    /// The provider refused the request as too long for the window.
    Overflow,
    /// A front end asked for it.
    Requested,
}

impl CompactionTrigger {
    fn as_str(self) -> &'static str {
        match self {
            CompactionTrigger::Pressure => "pressure",
            CompactionTrigger::Overflow => "overflow",
            CompactionTrigger::Requested => "requested",
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionOutcome {
    /// Tool results pruned.
    pub pruned: usize,
    /// Messages replaced by the summary (0 when no summary was made).
    pub summarized: usize,
    /// Estimated tokens of the whole request before (history and header, four bytes a token).
    pub tokens_before: u64,
    /// The same estimate after.
    pub tokens_after: u64,
    /// Set when the summary stage was needed but failed (the session goes on uncompacted), or
    /// when the context is still over its target afterwards.
    pub warning: Option<String>,
}

/// The instruction sent with the messages to summarise.
const SUMMARY_REQUEST: &str = "The conversation so far is about to be replaced by your summary \
to save context. Write a handoff that lets you continue the work exactly where it stopped, \
without access to the original messages. Use these headings:\n\
## Goal\nWhat the user asked for, with every constraint they gave.\n\
## Decisions\nWhat was decided and why.\n\
## Files touched\nEach file read, created or changed, and what was done to it.\n\
## Open problems\nErrors, failing tests, unanswered questions.\n\
## Next step\nThe very next action to take.\n\
Be specific (paths, names, commands, values). Do not call tools.";

/// Rough tokens of a text: four bytes per token.
fn tokens_of_bytes(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

fn is_tool_result(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// The pruned copy of a tool-result message, or `None` when it is small enough.
fn pruned(message: &Message, above: usize, keep: usize) -> Option<Message> {
    let mut changed = false;
    let mut out = message.clone();
    for block in &mut out.content {
        if let ContentBlock::ToolResult { content, .. } = block {
            for inner in content.iter_mut() {
                if let ContentBlock::Text { text } = inner {
                    if text.len() > above {
                        let mut head_end = keep.min(text.len());
                        while !text.is_char_boundary(head_end) {
                            head_end -= 1;
                        }
                        let mut tail_start = text.len().saturating_sub(keep).max(head_end);
                        while !text.is_char_boundary(tail_start) {
                            tail_start += 1;
                        }
                        let removed = tail_start - head_end;
                        *text = format!(
                            "{}\n[... {removed} bytes of this old tool result were pruned to save context ...]\n{}",
                            &text[..head_end],
                            &text[tail_start..]
                        );
                        changed = true;
                    }
                }
            }
        }
    }
    changed.then_some(out)
}

impl Agent {
    /// Estimated tokens of the next request: the last real usage plus an estimate of what was
    /// added since, else an estimate of everything.
    pub(crate) fn estimate_context_tokens(&self) -> u64 {
        let bytes = self.shared.log().history_bytes();
        match self.last_usage {
            Some((tokens, bytes_then)) if bytes >= bytes_then => {
                tokens + tokens_of_bytes(bytes - bytes_then)
            }
            _ => tokens_of_bytes(bytes + self.header_bytes),
        }
    }

    fn context_window(&self) -> u64 {
        self.options
            .context_window
            .unwrap_or(self.model_info.context_window)
            .max(1)
    }

    /// True when the pressure trigger fires.
    pub(crate) fn needs_compaction(&self) -> bool {
        self.options.compaction.enabled
            && self.estimate_context_tokens() as f64
                > self.options.compaction.threshold * self.context_window() as f64
    }

    /// The size of the next request as a compaction measures it, before and after alike: the
    /// whole history and header at four bytes a token (one estimator, so "after" is comparable
    /// with "before").
    fn measured_context_tokens(&self) -> u64 {
        tokens_of_bytes(self.shared.log().history_bytes() + self.header_bytes)
    }

    /// Runs a compaction now. Errors only when the log cannot be written; a failed summary is a
    /// warning in the outcome (and in the log).
    ///
    /// A compaction is `ok` only when it brought the context under its target (`threshold` of
    /// the window): when pruning the head and the summary are not enough, large tool results
    /// in the kept tail are pruned too; when even that is not enough, the outcome says so.
    pub async fn compact(
        &mut self,
        trigger: CompactionTrigger,
        cancel: &CancellationToken,
    ) -> Result<CompactionOutcome, AgentError> {
        let settings = self.options.compaction.clone();
        let window = self.context_window();
        let target = (settings.threshold * window as f64) as u64;
        let tokens_before = self.measured_context_tokens();
        // Keep at most `keep_tail` of the window, and never more than a third of the history,
        // so that a requested or overflow compaction always has something to summarise.
        let history_tokens = tokens_of_bytes(self.shared.log().history_bytes());
        let tail_budget = ((settings.keep_tail * window as f64) as u64).min(history_tokens / 3);
        let entries: Vec<HistoryEntry> = self.shared.log().history_entries().to_vec();

        let split = split_point(&entries, tail_budget);
        // Taken before the log is locked for the append below (the estimate locks it too).
        let estimated = self.estimate_context_tokens();
        self.shared.log().append(Event::Opaque {
            event_type: "compaction/start".into(),
            data: json!({
                "trigger": trigger.as_str(),
                "estimatedTokens": estimated,
                "measuredTokens": tokens_before,
                "targetTokens": target,
                "contextWindow": window,
                "headMessages": split,
            }),
        })?;

        // Stage 1: prune large old tool results.
        let mut pruned_count = self.prune_results(&entries[..split], &settings)?;
        self.last_usage = None;
        let after_prune = self.measured_context_tokens();
        let need_summary = trigger != CompactionTrigger::Pressure || after_prune > target;

        let mut warning = None;
        let mut summarized = 0;
        if need_summary {
            // Stage 2: summarise the head.
            let head: Vec<HistoryEntry> = self.shared.log().history_entries()[..split].to_vec();
            match self.summarize(&head, cancel).await {
                Ok((summary, usage)) => match self.replace_by_summary(&head, summary, usage)? {
                    Ok(replaced) => summarized = replaced,
                    Err(reason) => warning = Some(reason),
                },
                Err(reason) => warning = Some(reason),
            }
        }
        // Stage 3: still over the target, so the kept tail holds what does not fit: its large
        // tool results are pruned as well.
        if self.measured_context_tokens() > target {
            let all: Vec<HistoryEntry> = self.shared.log().history_entries().to_vec();
            pruned_count += self.prune_results(&all, &settings)?;
        }
        let tokens_after = self.measured_context_tokens();
        if tokens_after > target {
            let over = format!(
                "the context is still ~{tokens_after} tokens after compaction, over its target of \
                 {target} ({:.0}% of the {window}-token window)",
                settings.threshold * 100.0
            );
            warning = Some(match warning {
                Some(reason) => format!("{reason}; {over}"),
                None => over,
            });
        }
        let outcome = CompactionOutcome {
            pruned: pruned_count,
            summarized,
            tokens_before,
            tokens_after,
            warning,
        };
        self.shared.log().append(Event::Opaque {
            event_type: "compaction/end".into(),
            data: json!({
                "ok": outcome.warning.is_none(),
                "warning": outcome.warning,
                "pruned": outcome.pruned,
                "summarizedMessages": outcome.summarized,
                "tokensBefore": outcome.tokens_before,
                "tokensAfter": outcome.tokens_after,
                "targetTokens": target,
            }),
        })?;
        self.shared.log().flush()?;
        self.cache.reset();
        Ok(outcome)
    }

    /// Stage 2's end: `summary` replaces `head` in the history when it is smaller. Gives the
    /// number of messages replaced, or why nothing was.
    fn replace_by_summary(
        &mut self,
        head: &[HistoryEntry],
        summary: String,
        usage: Value,
    ) -> Result<Result<usize, String>, AgentError> {
        let replaced_bytes: usize = head.iter().map(|e| message_bytes(&e.message)).sum();
        if head.is_empty() {
            return Ok(Err("nothing old enough to summarise".into()));
        }
        if summary.len() >= replaced_bytes {
            return Ok(Err(format!(
                "the summary ({} bytes) was not smaller than what it would replace \
                 ({replaced_bytes} bytes); kept the history",
                summary.len()
            )));
        }
        let mut log = self.shared.log();
        log.append(Event::Opaque {
            event_type: "compaction/summary".into(),
            data: json!({"summary": summary, "usage": usage, "replacedMessages": head.len()}),
        })?;
        let message = Message {
            id: uuid::Uuid::new_v4().to_string(),
            role: Role::User,
            content: vec![ContentBlock::text(format!(
                "Summary of the earlier conversation (it was compacted to save context):\n\n{summary}"
            ))],
            source: MessageSource::Plugin {
                plugin: COMPACTION_PLUGIN.into(),
                form: Some("summary".into()),
                extra: Map::new(),
            },
        };
        let start = head.first().map(|e| e.seq).unwrap_or_default();
        let end = head.last().map(|e| e.seq).unwrap_or_default();
        log.append_envelope(
            Envelope::new(Event::UserMessage(message))
                .with_surface_op(SurfaceOp::Replace { start, end }),
        )?;
        Ok(Ok(head.len()))
    }

    /// Replaces the large tool results among `entries` by pruned copies (stage 1 over the
    /// head, stage 3 over the whole history). Returns how many were pruned.
    fn prune_results(
        &mut self,
        entries: &[HistoryEntry],
        settings: &CompactionSettings,
    ) -> Result<usize, AgentError> {
        let mut pruned_count = 0;
        {
            let mut log = self.shared.log();
            for entry in entries {
                if let Some(smaller) = pruned(
                    &entry.message,
                    settings.prune_above_bytes,
                    settings.prune_keep_bytes,
                ) {
                    let envelope = Envelope::new(Event::ToolResult(dsh_session::ToolResult {
                        turn: 0,
                        step: 0,
                        message: smaller,
                        error: None,
                        meta: Some(json!({"prunedBy": "compaction"})),
                        summary: None,
                    }))
                    .with_surface_op(SurfaceOp::Replace {
                        start: entry.seq,
                        end: entry.seq,
                    });
                    log.append_envelope(envelope)?;
                    pruned_count += 1;
                }
            }
        }
        Ok(pruned_count)
    }

    /// One summary call over `head` with the last header's system prompt and tools.
    async fn summarize(
        &mut self,
        head: &[HistoryEntry],
        cancel: &CancellationToken,
    ) -> Result<(String, Value), String> {
        if head.is_empty() {
            return Err("nothing old enough to summarise".into());
        }
        let mut request = self
            .build_request(cancel)
            .map_err(|f| format!("cannot build the summary request: {f}"))?;
        // Images of the summarised head reach the summary as text placeholders: the summary
        // replaces them, and the summariser need not take images (docs/agent.md, "Compaction").
        let mut messages: Vec<Message> = head
            .iter()
            .map(|e| Message {
                content: dsh_llm::images_to_placeholders(&e.message.content),
                ..e.message.clone()
            })
            .collect();
        messages.push(crate::agent::plugin_message(
            COMPACTION_PLUGIN,
            "request",
            SUMMARY_REQUEST,
        ));
        request.messages = Arc::new(messages);
        // These messages are not the log's history (images became text, an instruction was
        // added): its lineage does not vouch for them (docs/model-calls.md, "History lineage").
        request.history_lineage = None;
        request.purpose = Some(Purpose::Compaction);
        let adapter = self
            .adapter_for(&request.config.config().provider)
            .map_err(|f| f.to_string())?;
        let model = request.config.config().model.clone();
        let summary_request: GenerateRequest = request;
        let mut stream = adapter.stream(summary_request);
        let mut assembler = BlockAssembler::new();
        let cancelled = loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => break true,
                next = stream.next() => next,
            };
            let Some(chunk) = next else { break false };
            if assembler.push(&chunk).is_err() {
                break false;
            }
        };
        drop(stream);
        // The call's usage, when it arrived, was billed whatever becomes of the summary.
        if let Some(usage) = assembler.usage() {
            let mut log = self.shared.log();
            let (turn, step) = log.writer().state().open_step().unzip();
            let call = dsh_session::UsageCall {
                purpose: dsh_session::usage::PURPOSE_COMPACTION.to_string(),
                model,
                usage,
                turn,
                step,
            };
            log.append(call.to_event())
                .map_err(|e| format!("cannot log the summary's usage: {e}"))?;
        }
        if cancelled {
            return Err("cancelled".into());
        }
        let reply = assembler.finish();
        match &reply.finish {
            FinishReason::Stop => {}
            FinishReason::MaxTokens => {
                return Err("the summary hit the output limit; kept the history".into())
            }
            FinishReason::ToolCalls => {
                return Err(
                    "the model called tools instead of summarising; kept the history".into(),
                )
            }
            FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
                return Err(format!(
                    "the summary call failed ({failure}); kept the history"
                ))
            }
        }
        let text = reply.text();
        if text.trim().is_empty() {
            return Err("the summary came back empty; kept the history".into());
        }
        let usage = serde_json::to_value(reply.usage).unwrap_or(Value::Null);
        Ok((text.trim().to_string(), usage))
    }
}

/// Where the summarised head ends: the tail keeps the newest messages within `tail_budget`
/// tokens, does not start with a tool result (which would separate it from its call), and the
/// newest user message always stays out of the head.
fn split_point(entries: &[HistoryEntry], tail_budget: u64) -> usize {
    // The tail: newest messages within the budget, not starting with a tool result (which
    // would separate it from its call).
    let mut split = entries.len();
    let mut tail_tokens = 0u64;
    while split > 0 {
        let cost = tokens_of_bytes(message_bytes(&entries[split - 1].message));
        if tail_tokens + cost > tail_budget && split < entries.len() {
            break;
        }
        tail_tokens += cost;
        split -= 1;
    }
    while split > 0 && split < entries.len() && is_tool_result(&entries[split].message) {
        split -= 1;
    }
    // Never summarise the whole history: the newest user message stays.
    if split == entries.len() && split > 0 {
        split -= 1;
        while split > 0 && is_tool_result(&entries[split].message) {
            split -= 1;
        }
    }
    split
}
