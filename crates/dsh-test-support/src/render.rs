//! dsh chunks to DeepSeek wire replies: the inverse of the adapter's stream decoding.

use std::collections::HashMap;

use dsh_llm::{Chunk, ContentBlock, Failure, FailureCode, FinishReason};
use serde_json::json;

use crate::script::{chunk_event, ScriptedReply, SseReply, StreamEnd, WireUsage};

/// Renders `chunks` (one reply in dsh's vocabulary) as DeepSeek SSE events, ending with
/// `data: [DONE]`. See [`sse_reply_from_chunks`] for the mapping.
pub fn render_chunks_as_sse(chunks: &[Chunk]) -> Vec<u8> {
    sse_reply_from_chunks(chunks).body_bytes()
}

/// What a block has streamed so far, to recover content a recording only put in `block-end`.
#[derive(Default)]
struct Streamed {
    text: String,
    wire_tool_index: Option<u32>,
    id_sent: bool,
}

/// Builds the streamed reply of `chunks`:
/// reasoning and text deltas become `delta.reasoning_content` / `delta.content` events; tool-call
/// deltas become `delta.tool_calls` with the wire index counting the reply's tool calls from 0
/// (id and name on the first delta of each call); a `block-end` whose content was not streamed
/// (or only partly, as a prefix) sends the rest as one more delta; `usage` is sent with the
/// finish event (`prompt_tokens` = input + cache read); the finish maps `stop`, `tool-calls`,
/// `max-tokens` to `stop`, `tool_calls`, `length`, an `error` with an unrecognised code to that
/// code lower-cased (e.g. `CONTENT_FILTER` to `content_filter`), and `EMPTY_RESPONSE` to `stop`.
/// Without a finish chunk no finish event is written. Other failures are not expressible in a
/// stream: [`reply_for_call`] turns them into HTTP faults.
pub fn sse_reply_from_chunks(chunks: &[Chunk]) -> SseReply {
    let mut reply = SseReply::new();
    let mut blocks: HashMap<u32, Streamed> = HashMap::new();
    let mut next_tool_index = 0u32;
    let mut usage: Option<WireUsage> = None;
    let mut tool_index = |blocks: &mut HashMap<u32, Streamed>, index: u32| -> u32 {
        let entry = blocks.entry(index).or_default();
        *entry.wire_tool_index.get_or_insert_with(|| {
            next_tool_index += 1;
            next_tool_index - 1
        })
    };
    for chunk in chunks {
        match chunk {
            Chunk::BlockStart { .. } => {}
            Chunk::ReasoningDelta { index, text } => {
                blocks.entry(*index).or_default().text.push_str(text);
                reply = reply.reasoning(text);
            }
            Chunk::TextDelta { index, text } => {
                blocks.entry(*index).or_default().text.push_str(text);
                reply = reply.text(text);
            }
            Chunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let wire = tool_index(&mut blocks, *index);
                let streamed = blocks.entry(*index).or_default();
                let mut call = json!({"index": wire, "function": {"arguments": arguments_delta}});
                if !id.is_empty() && !streamed.id_sent {
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                    streamed.id_sent = true;
                }
                if let Some(name) = name {
                    call["function"]["name"] = json!(name);
                }
                streamed.text.push_str(arguments_delta);
                reply = reply.data(chunk_event(json!({"tool_calls": [call]}), None, None));
            }
            Chunk::BlockEnd { index, block } => {
                let missing = |streamed: &str, full: &str| -> Option<String> {
                    full.strip_prefix(streamed)
                        .filter(|rest| !rest.is_empty())
                        .map(str::to_string)
                };
                match block {
                    ContentBlock::Reasoning { text, .. } => {
                        let streamed = blocks.entry(*index).or_default();
                        if let Some(rest) = missing(&streamed.text, text) {
                            streamed.text.push_str(&rest);
                            reply = reply.reasoning(&rest);
                        }
                    }
                    ContentBlock::Text { text } => {
                        let streamed = blocks.entry(*index).or_default();
                        if let Some(rest) = missing(&streamed.text, text) {
                            streamed.text.push_str(&rest);
                            reply = reply.text(&rest);
                        }
                    }
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => {
                        let wire = tool_index(&mut blocks, *index);
                        let streamed = blocks.entry(*index).or_default();
                        if !streamed.id_sent {
                            streamed.id_sent = true;
                            let rest = missing(&streamed.text, arguments).unwrap_or_default();
                            streamed.text.push_str(&rest);
                            reply = reply.tool_call(wire, id, name, &rest);
                        } else if let Some(rest) = missing(&streamed.text, arguments) {
                            streamed.text.push_str(&rest);
                            reply = reply.tool_args(wire, &rest);
                        }
                    }
                    _ => {}
                }
            }
            Chunk::Usage { usage: u } => usage = Some(WireUsage::from_usage(u)),
            Chunk::Finish { reason } => {
                reply = reply.finish(&wire_finish_reason(reason), usage.take());
            }
        }
    }
    if let Some(usage) = usage {
        reply = reply.usage(usage);
    }
    reply
}

/// The chat-completions `finish_reason` of a finish (see [`sse_reply_from_chunks`]).
fn wire_finish_reason(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".to_string(),
        FinishReason::ToolCalls => "tool_calls".to_string(),
        FinishReason::MaxTokens => "length".to_string(),
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            match &failure.code {
                FailureCode::Other(code) => code.to_ascii_lowercase(),
                _ => "stop".to_string(),
            }
        }
    }
}

/// The reply that makes the adapter reproduce a recorded call.
///
/// Finished calls stream normally. A recorded `error {code}` becomes the matching fault:
/// `AUTH`/`MISSING_CREDENTIAL`/`INVALID_CREDENTIAL` 401, `QUOTA` 402, `RATE_LIMIT` 429 (with
/// `Retry-After` when recorded), `CONTEXT_WINDOW_EXCEEDED` a 400 with context-length wording,
/// `INVALID_REQUEST` 400, `SERVER` 500 (or the recorded 5xx), `HTTP_<n>` n, `EMPTY_RESPONSE` an
/// empty completion, `STREAM_CLOSED` no `[DONE]`, `MISSING_FINISH` a `[DONE]` without any
/// `finish_reason`, `MALFORMED_RESPONSE` a non-JSON line,
/// `TRANSPORT` a dropped connection, `TIMEOUT` a stall, an unrecognised code an unknown
/// `finish_reason`, anything else a 500. An `aborted` call, or one without a finish (cancelled
/// while streaming), streams its chunks and then stalls until the client goes away.
pub fn reply_for_call(chunks: &[Chunk]) -> ScriptedReply {
    let finish = chunks.iter().rev().find_map(|chunk| match chunk {
        Chunk::Finish { reason } => Some(reason),
        _ => None,
    });
    let body: Vec<Chunk> = chunks
        .iter()
        .filter(|chunk| !matches!(chunk, Chunk::Finish { .. }))
        .cloned()
        .collect();
    let streamed = |end: StreamEnd| ScriptedReply::Stream(sse_reply_from_chunks(&body).end(end));
    let failure = match finish {
        None | Some(FinishReason::Aborted { .. }) => return streamed(StreamEnd::Stall),
        Some(FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens) => {
            return ScriptedReply::Stream(sse_reply_from_chunks(chunks));
        }
        Some(FinishReason::Error { failure }) => failure,
    };
    fault_for_failure(failure, chunks, &body)
}

fn fault_for_failure(failure: &Failure, chunks: &[Chunk], body: &[Chunk]) -> ScriptedReply {
    let status_in = |range: std::ops::RangeInclusive<u16>, default: u16| {
        failure
            .status
            .filter(|status| range.contains(status))
            .unwrap_or(default)
    };
    let streamed = |end: StreamEnd| ScriptedReply::Stream(sse_reply_from_chunks(body).end(end));
    let mut reply = match &failure.code {
        FailureCode::Auth | FailureCode::MissingCredential | FailureCode::InvalidCredential => {
            ScriptedReply::http_error(status_in(401..=403, 401), &failure.message)
        }
        FailureCode::Quota => ScriptedReply::http_error(402, &failure.message),
        FailureCode::RateLimit => ScriptedReply::http_error(429, &failure.message),
        FailureCode::ContextWindowExceeded => ScriptedReply::http_error(
            400,
            &format!("maximum context length exceeded: {}", failure.message),
        ),
        FailureCode::InvalidRequest => ScriptedReply::http_error(
            failure
                .status
                .filter(|s| matches!(s, 400 | 413 | 422))
                .unwrap_or(400),
            &failure.message,
        ),
        FailureCode::Server => {
            ScriptedReply::http_error(status_in(500..=599, 500), &failure.message)
        }
        FailureCode::Http(status) => ScriptedReply::http_error(*status, &failure.message),
        FailureCode::EmptyResponse => ScriptedReply::Stream(sse_reply_from_chunks(chunks)),
        FailureCode::StreamClosed => streamed(StreamEnd::CloseWithoutDone),
        FailureCode::MissingFinish => streamed(StreamEnd::Done),
        FailureCode::MalformedResponse => ScriptedReply::Stream(
            sse_reply_from_chunks(body)
                .malformed()
                .end(StreamEnd::CloseWithoutDone),
        ),
        FailureCode::Transport => streamed(StreamEnd::DropConnection),
        FailureCode::Timeout | FailureCode::Aborted => streamed(StreamEnd::Stall),
        FailureCode::Other(_) => ScriptedReply::Stream(sse_reply_from_chunks(chunks)),
        FailureCode::NoAdapter | FailureCode::UnsupportedReasoningEffort | FailureCode::Unknown => {
            ScriptedReply::http_error(500, &failure.message)
        }
    };
    if let (Some(ms), ScriptedReply::Http { .. }) = (failure.retry_after_ms, &reply) {
        reply = reply.with_header("retry-after", &ms.div_ceil(1000).to_string());
    }
    reply
}
