//! Export (docs/sessions.md, "Resume, fork and export"): JSON lines, a readable Markdown
//! transcript, and a zip archive with the sub-agent logs.

use std::io::{Seek, Write};

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource};

use crate::envelope::{Envelope, SessionHeader, SurfaceOp};
use crate::error::{Result, SessionError};
use crate::event::Event;
use crate::packed::PackRun;
use crate::reader::LoadedLog;

/// Longest tool-result text a transcript shows before truncating (head and tail are kept).
pub const TRANSCRIPT_RESULT_LIMIT: usize = 2000;

/// Encodes a log as JSONL bytes (header line, then one line per event; with `pack`, runs of
/// deltas become packed rows exactly as the JSONL writer writes them).
pub fn encode_jsonl(header: &SessionHeader, events: &[Envelope], pack: bool) -> Result<Vec<u8>> {
    let enc = |e: serde_json::Error| SessionError::Encode {
        event_type: "session".into(),
        reason: e.to_string(),
    };
    let mut out = Vec::new();
    header.encode_line(&mut out).map_err(enc)?;
    let mut run: Option<PackRun> = None;
    for env in events {
        if pack && run.as_mut().is_some_and(|r| r.push(env)) {
            continue;
        }
        if let Some(done) = run.take() {
            done.encode(&mut out).map_err(enc)?;
        }
        match PackRun::start(env).filter(|_| pack) {
            Some(started) => run = Some(started),
            None => env.encode_line(&mut out).map_err(enc)?,
        }
    }
    if let Some(done) = run.take() {
        done.encode(&mut out).map_err(enc)?;
    }
    Ok(out)
}

/// Writes a zip archive: `session.jsonl` (the given bytes) plus each sub-agent log under its
/// relative name.
pub fn export_zip<W: Write + Seek>(
    out: W,
    session_jsonl: &[u8],
    sub_agent_logs: &[(String, Vec<u8>)],
) -> Result<()> {
    let zip_err = |e: zip::result::ZipError| SessionError::Zip(e.to_string());
    let io = |e: std::io::Error| SessionError::Zip(e.to_string());
    let mut zip = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("session.jsonl", options).map_err(zip_err)?;
    zip.write_all(session_jsonl).map_err(io)?;
    for (name, bytes) in sub_agent_logs {
        zip.start_file(name.as_str(), options).map_err(zip_err)?;
        zip.write_all(bytes).map_err(io)?;
    }
    zip.finish().map_err(zip_err)?;
    Ok(())
}

/// Renders a readable Markdown transcript: turns, user messages, assistant text, reasoning in
/// collapsed quoted blocks, tool calls with their arguments, tool results (truncated to
/// [`TRANSCRIPT_RESULT_LIMIT`]), retries, compactions and turn ends. Injected context
/// (plugin messages) is collapsed. Each dsh-only event ([`Event::DshOnly`]) gets a one-line note
/// naming its type.
pub fn export_markdown(log: &LoadedLog) -> String {
    let mut out = String::new();
    let title = log
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::SessionTitle(t) => Some(t.title.clone()),
            _ => None,
        })
        .unwrap_or_else(|| format!("Session {}", log.header.id));
    out.push_str(&format!("# {}\n\n", title.trim()));
    out.push_str(&format!(
        "- id: `{}`\n- cwd: `{}`\n- created: {}\n",
        log.header.id, log.header.cwd, log.header.created_at
    ));
    if let Some(parent) = &log.header.parent_session {
        out.push_str(&format!(
            "- {}\n",
            parent_line(parent, log.header.seed_length)
        ));
    }
    let mut ledger = crate::usage::UsageLedger::new();
    for env in &log.events {
        ledger.push(&env.event);
    }
    out.push_str(&format!("- usage: {}\n", usage_text(&ledger.total())));
    out.push('\n');
    for env in &log.events {
        render_event(env, &mut out);
    }
    if let Some(torn) = &log.torn_tail {
        out.push_str(&format!(
            "\n_(a torn last line {} was ignored)_\n",
            torn.line
        ));
    }
    out
}

fn render_event(env: &Envelope, out: &mut String) {
    let replace_note = |out: &mut String| {
        if let Some(SurfaceOp::Replace { start, end }) = env.surface_op {
            out.push_str(&format!(
                "_(replaces history messages {start}..={end}: compaction)_\n\n"
            ));
        }
    };
    match &env.event {
        Event::TurnStart(t) => out.push_str(&format!("## Turn {}\n\n", t.turn)),
        Event::TurnEnd(t) => {
            let detail = match &t.reason {
                crate::event::TurnEndReason::Error { error } => format!(": {error}"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "_turn {} ended: {}{detail}_\n\n",
                t.turn,
                t.reason.kind()
            ));
        }
        Event::UserMessage(message) => {
            replace_note(out);
            render_user(message, out);
        }
        Event::AssistantMessage(event) => {
            replace_note(out);
            if event.message.is_empty() {
                return;
            }
            out.push_str("**Assistant**");
            if event.interrupted {
                out.push_str(" _(interrupted)_");
            }
            out.push_str("\n\n");
            render_blocks(&event.message.content, out);
        }
        Event::ToolCall(_) | Event::ToolStarted(_) => {}
        Event::ToolResult(result) => render_tool_result(result, out),
        Event::AssistantChunk(chunk) => {
            if let Chunk::Finish { reason } = &chunk.chunk {
                if let Some(failure) = reason.failure() {
                    out.push_str(&format!("_model call failed: {failure}_\n\n"));
                }
            }
        }
        Event::LlmRetry(retry) => out.push_str(&format!(
            "_retry {} in {} ms after: {}_\n\n",
            retry.retry, retry.delay_ms, retry.failure
        )),
        Event::TodoWrite(todo) => {
            out.push_str("**Todo list**\n\n");
            for item in &todo.todos {
                let mark = match item.status.as_str() {
                    "completed" => "x",
                    "in_progress" => "~",
                    _ => " ",
                };
                out.push_str(&format!("- [{mark}] {}\n", item.content));
            }
            out.push('\n');
        }
        Event::EndSeed(_) => {
            out.push_str("_(end of the events inherited from the parent session)_\n\n")
        }
        Event::DshOnly(event) => render_dsh_only(event, out),
        Event::GoalChange(change) => render_goal_change(change, out),
        Event::Opaque { event_type, .. } if event_type.starts_with("compaction/") => {
            out.push_str(&format!("_{event_type}_\n\n"));
        }
        Event::Opaque { event_type, .. } if event_type == crate::usage::USAGE_CALL_EVENT => {
            if let Some(call) = crate::usage::UsageCall::from_event(&env.event) {
                let u = &call.usage;
                out.push_str(&format!(
                    "_billed call ({}) to {}: {} input / {} output tokens_\n\n",
                    call.purpose,
                    call.model,
                    u.billed_input(),
                    u.output_tokens
                ));
            }
        }
        _ => {}
    }
}

/// A session's usage as the transcript's header shows it: requests, then the disjoint token
/// counts (docs/model-calls.md, "Usage").
pub(crate) fn usage_text(total: &dsh_llm::UsageTotals) -> String {
    let u = &total.usage;
    format!(
        "{} requests · input {} uncached + {} cache read + {} cache write · output {} (reasoning {})",
        total.requests,
        u.input_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.output_tokens,
        u.reasoning_tokens
    )
}

/// A tool result: its code when it failed, then its text, fenced and cut in the middle.
/// How a session relates to its parent: a fork copied `seed_length` events of it; a session with
/// a parent and no seed is a sub-agent the parent started.
fn parent_line(parent: &str, seed_length: Option<u64>) -> String {
    match seed_length {
        Some(events) => format!("forked from `{parent}` after {events} events"),
        None => format!("sub-agent started by `{parent}`"),
    }
}

/// A dsh-only event: the two that this build writes itself say what they are; the others are
/// carried as read.
/// One line per goal change: `_(goal create: "objective", active, 0/256 rounds)_`.
fn render_goal_change(change: &crate::GoalChange, out: &mut String) {
    let operation = serde_json::to_value(change.operation)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    match &change.goal {
        Some(goal) => {
            let blocked = goal
                .blocked_reason
                .as_ref()
                .map(|r| format!(", blocked: {} ({})", r.message, r.code))
                .unwrap_or_default();
            out.push_str(&format!(
                "_(goal {operation}: {:?}, {}, {}/{} rounds{blocked})_\n\n",
                goal.objective,
                goal.phase.as_str(),
                change.rounds_started.unwrap_or(0),
                goal.max_goal_rounds
            ));
        }
        None => out.push_str(&format!("_(goal {operation})_\n\n")),
    }
}

fn render_dsh_only(event: &crate::event::DshOnlyEvent, out: &mut String) {
    let data = event.data();
    let field = |key: &str| {
        data.get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    let line = match event.event_type() {
        "subagent/descriptor" => format!(
            "_(sub-agent `{}`{}{})_",
            field("name").unwrap_or_else(|| "?".into()),
            field("label").map(|l| format!(": {l}")).unwrap_or_default(),
            field("agentModel")
                .map(|m| format!(" on {m}"))
                .unwrap_or_default(),
        ),
        "web/deepseek-search-llm-request" => format!(
            "_(web_search sent a request to {})_",
            field("endpoint").unwrap_or_else(|| "its endpoint".into())
        ),
        other => {
            format!("_(dsh event `{other}`: no feature for it in this build; kept as written)_")
        }
    };
    out.push_str(&line);
    out.push_str("\n\n");
}

fn render_tool_result(result: &crate::event::ToolResult, out: &mut String) {
    let failed = result.message.content.iter().any(|b| {
        matches!(
            b,
            ContentBlock::ToolResult {
                is_error: Some(true),
                ..
            }
        )
    });
    let code = result
        .error
        .as_ref()
        .map(|e| format!(" `{}`", e.code))
        .unwrap_or_default();
    out.push_str(&format!(
        "**Tool result**{}{code}\n\n",
        if failed { " (error)" } else { "" }
    ));
    for block in &result.message.content {
        if let ContentBlock::ToolResult { content, .. } = block {
            let text: String = content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            fenced("", &truncate_middle(&text, TRANSCRIPT_RESULT_LIMIT), out);
        }
    }
}

fn render_user(message: &Message, out: &mut String) {
    match &message.source {
        MessageSource::Plugin { plugin, .. } => {
            out.push_str(&format!(
                "<details><summary>Context from {plugin}</summary>\n\n"
            ));
            render_blocks(&message.content, out);
            out.push_str("</details>\n\n");
        }
        _ => {
            out.push_str("**User**\n\n");
            render_blocks(&message.content, out);
        }
    }
}

fn render_blocks(blocks: &[ContentBlock], out: &mut String) {
    for block in blocks {
        match block {
            ContentBlock::Text { text } => {
                out.push_str(text.trim_end());
                out.push_str("\n\n");
            }
            ContentBlock::Reasoning { text, .. } => {
                if text.trim().is_empty() {
                    continue;
                }
                out.push_str("<details><summary>Reasoning</summary>\n\n");
                for line in text.trim_end().lines() {
                    out.push_str("> ");
                    out.push_str(line);
                    out.push('\n');
                }
                out.push_str("\n</details>\n\n");
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                out.push_str(&format!("**Tool call** `{name}` (`{id}`)\n\n"));
                let pretty = serde_json::from_str::<serde_json::Value>(arguments)
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| arguments.clone());
                fenced("json", &pretty, out);
            }
            ContentBlock::ToolResult { content, .. } => render_blocks(content, out),
            ContentBlock::Image { .. } => out.push_str("_(image)_\n\n"),
            ContentBlock::Unknown(value) => {
                let kind = value.get("type").and_then(|t| t.as_str()).unwrap_or("?");
                out.push_str(&format!("_(block of unknown type `{kind}`)_\n\n"));
            }
        }
    }
}

/// A fenced code block whose fence is longer than any backtick run in `text`.
fn fenced(lang: &str, text: &str, out: &mut String) {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    out.push_str(&format!("{fence}{lang}\n{}\n{fence}\n\n", text.trim_end()));
}

/// `text` cut to about `limit` bytes, keeping the head and the tail around a marker.
fn truncate_middle(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut head = limit * 2 / 3;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (limit - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes omitted ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::DshOnlyEvent;
    use crate::reader::LoadedLog;

    fn dsh_only(event_type: &str, data: &str) -> Envelope {
        Envelope::new(Event::DshOnly(DshOnlyEvent::new(event_type, data).unwrap()))
    }

    /// The two dsh-only events this build writes say what they are; a child says who started
    /// it instead of "forked after 0 events".
    #[test]
    fn events_dsh_writes_and_children_are_shown_for_what_they_are() {
        let mut header = SessionHeader::new("child-1", "/w", 0);
        header.parent_session = Some("parent-1".into());
        let log = LoadedLog {
            header,
            events: vec![
                dsh_only(
                    "subagent/descriptor",
                    r#"{"name":"agent-1","label":"find tests","agentModel":"deepseek-v4-flash"}"#,
                ),
                dsh_only(
                    "web/deepseek-search-llm-request",
                    r#"{"endpoint":"https://api.deepseek.com/anthropic/v1/messages","body":{}}"#,
                ),
                dsh_only("schedule/change", r#"{"status":"open"}"#),
            ],
            torn_tail: None,
        };
        let text = export_markdown(&log);
        assert!(text.contains("sub-agent started by `parent-1`"), "{text}");
        assert!(!text.contains("after 0 events"), "{text}");
        assert!(
            text.contains("_(sub-agent `agent-1`: find tests on deepseek-v4-flash)_"),
            "{text}"
        );
        assert!(
            text.contains(
                "_(web_search sent a request to https://api.deepseek.com/anthropic/v1/messages)_"
            ),
            "{text}"
        );
        assert!(
            text.contains("`schedule/change`: no feature for it"),
            "{text}"
        );
        assert_eq!(text.matches("no feature for it").count(), 1, "{text}");
    }
}
