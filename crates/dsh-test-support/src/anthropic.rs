//! The Anthropic Messages wire format for the fake provider: a builder of streamed replies
//! (`event: <type>` + `data: <json>` pairs) and Anthropic-style error bodies.

use std::time::Duration;

use dsh_llm::Usage;
use serde_json::{json, Value};

use crate::script::{ScriptedReply, SseReply, SseStep, StreamEnd};

/// Model name written into rendered Anthropic events.
pub const FAKE_ANTHROPIC_MODEL: &str = "claude-fake-1";

/// Usage as the Messages API reports it: the counts are already disjoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnthropicUsage {
    /// `usage.input_tokens`: uncached prompt tokens.
    pub input_tokens: u64,
    /// `usage.output_tokens`.
    pub output_tokens: u64,
    /// `usage.cache_read_input_tokens`: prompt tokens read from the cache.
    pub cache_read_input_tokens: u64,
    /// `usage.cache_creation_input_tokens`: prompt tokens written to the cache.
    pub cache_creation_input_tokens: u64,
}

impl AnthropicUsage {
    /// The wire form of dsh usage (a one-to-one mapping of the disjoint counts).
    pub fn from_usage(usage: &Usage) -> Self {
        AnthropicUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            cache_creation_input_tokens: usage.cache_write_tokens,
        }
    }

    fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        })
    }
}

/// A streamed Messages reply under construction.
///
/// [`new`](Self::new) starts with `message_start` (carrying `start_usage`); each block method
/// appends `content_block_start`, its deltas and `content_block_stop` with the next block
/// index; [`finish`](Self::finish) appends `message_delta` (stop reason, usage) and
/// `message_stop`. A reply converted without `finish` has no terminator (the adapter reports
/// `STREAM_CLOSED`). The wire end ([`StreamEnd`]) decides how the body ends: `Done` closes the
/// body cleanly (Anthropic streams have no `[DONE]`), the others inject their fault.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicReply {
    reply: SseReply,
    next_index: u32,
    end: StreamEnd,
}

impl Default for AnthropicReply {
    fn default() -> Self {
        Self::new()
    }
}

impl AnthropicReply {
    /// A reply that has sent `message_start` with zero usage.
    pub fn new() -> Self {
        Self::with_start_usage(AnthropicUsage::default())
    }

    /// A reply whose `message_start` reports `usage` (input and cache counts, as the API does).
    pub fn with_start_usage(usage: AnthropicUsage) -> Self {
        let start = json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "content": [],
            "model": FAKE_ANTHROPIC_MODEL, "stop_reason": null, "stop_sequence": null,
            "usage": usage.to_json()}});
        AnthropicReply {
            reply: SseReply::new(),
            next_index: 0,
            end: StreamEnd::Done,
        }
        .event(&start)
    }

    /// Appends one event: `event: <its type>` then `data: <json>`.
    pub fn event(mut self, payload: &Value) -> Self {
        let kind = payload
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        self.reply.steps.push(SseStep::Raw(
            format!("event: {kind}\ndata: {payload}\n\n").into_bytes(),
        ));
        self
    }

    /// Takes the next content-block index.
    fn take_index(&mut self) -> u32 {
        self.next_index += 1;
        self.next_index - 1
    }

    fn delta(self, index: u32, delta: Value) -> Self {
        self.event(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
    }

    fn stop(self, index: u32) -> Self {
        self.event(&json!({"type": "content_block_stop", "index": index}))
    }

    /// A text block streamed as the given `text_delta` pieces.
    pub fn text(mut self, pieces: &[&str]) -> Self {
        let index = self.take_index();
        let mut this = self.event(&json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}));
        for piece in pieces {
            this = this.delta(index, json!({"type": "text_delta", "text": piece}));
        }
        this.stop(index)
    }

    /// A thinking block: `thinking_delta` pieces, then one `signature_delta`.
    pub fn thinking(mut self, pieces: &[&str], signature: &str) -> Self {
        let index = self.take_index();
        let mut this = self.event(&json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": ""}}));
        for piece in pieces {
            this = this.delta(index, json!({"type": "thinking_delta", "thinking": piece}));
        }
        this.delta(
            index,
            json!({"type": "signature_delta", "signature": signature}),
        )
        .stop(index)
    }

    /// A `redacted_thinking` block carrying opaque `data`.
    pub fn redacted_thinking(mut self, data: &str) -> Self {
        let index = self.take_index();
        self.event(&json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "redacted_thinking", "data": data}}))
            .stop(index)
    }

    /// A `tool_use` block whose arguments stream as the given `input_json_delta` pieces.
    pub fn tool_use(mut self, id: &str, name: &str, json_pieces: &[&str]) -> Self {
        let index = self.take_index();
        let mut this = self.event(&json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
        for piece in json_pieces {
            this = this.delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
            );
        }
        this.stop(index)
    }

    /// Starts a text block and streams `text` without stopping it (for stalls and drops).
    pub fn open_text(mut self, text: &str) -> Self {
        let index = self.take_index();
        self.event(&json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}))
            .delta(index, json!({"type": "text_delta", "text": text}))
    }

    /// A `ping` event.
    pub fn ping(self) -> Self {
        self.event(&json!({"type": "ping"}))
    }

    /// An in-stream `error` event of `kind` (e.g. `overloaded_error`).
    pub fn error(self, kind: &str, message: &str) -> Self {
        self.event(&json!({"type": "error", "error": {"type": kind, "message": message}}))
    }

    /// `message_delta` with `stop_reason` and (cumulative) `usage`, then `message_stop`.
    pub fn finish(self, stop_reason: &str, usage: Option<AnthropicUsage>) -> Self {
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null}});
        if let Some(usage) = usage {
            delta["usage"] = usage.to_json();
        }
        self.event(&delta).event(&json!({"type": "message_stop"}))
    }

    /// A `data:` line that is not JSON.
    pub fn malformed(mut self) -> Self {
        self.reply.steps.push(SseStep::Raw(
            b"event: content_block_delta\ndata: {\"type\": oops\n\n".to_vec(),
        ));
        self
    }

    /// An SSE comment (keep-alive).
    pub fn comment(mut self, text: &str) -> Self {
        self.reply.steps.push(SseStep::Comment(text.to_string()));
        self
    }

    /// A pause before the next event.
    pub fn delay(mut self, pause: Duration) -> Self {
        self.reply.steps.push(SseStep::Delay(pause));
        self
    }

    /// A response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.reply
            .headers
            .push((name.to_string(), value.to_string()));
        self
    }

    /// How the body ends (see the type's docs).
    pub fn end(mut self, end: StreamEnd) -> Self {
        self.end = end;
        self
    }

    /// The underlying stream reply, ready to serve.
    pub fn into_sse(self) -> SseReply {
        let end = match self.end {
            StreamEnd::Done => StreamEnd::CloseWithoutDone,
            other => other,
        };
        self.reply.end(end)
    }
}

impl From<AnthropicReply> for ScriptedReply {
    fn from(reply: AnthropicReply) -> Self {
        ScriptedReply::Stream(reply.into_sse())
    }
}

impl ScriptedReply {
    /// A status with an Anthropic error body `{"type": "error", "error": {type, message}}`.
    pub fn anthropic_error(status: u16, kind: &str, message: &str) -> Self {
        ScriptedReply::Http {
            status,
            headers: Vec::new(),
            body: json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
        }
    }
}
