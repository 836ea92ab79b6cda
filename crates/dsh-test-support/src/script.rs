//! Reply scripts: what the fake provider answers, built inline in tests and rendered as the
//! exact bytes of DeepSeek's chat-completions SSE stream.

use std::time::Duration;

use dsh_llm::Usage;
use serde_json::{json, Value};

/// Model name written into rendered stream events.
pub const FAKE_MODEL: &str = "deepseek-v4-flash";

/// Usage as DeepSeek reports it. `prompt_tokens` includes the cache hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireUsage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.completion_tokens`.
    pub completion_tokens: u64,
    /// `usage.prompt_cache_hit_tokens`: prompt tokens served from the cache.
    pub prompt_cache_hit_tokens: u64,
    /// `usage.completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: u64,
}

impl WireUsage {
    /// The wire form of dsh's disjoint usage: `prompt_tokens` = input + cache read,
    /// `prompt_cache_hit_tokens` = cache read, so an adapter maps it back to the same counts.
    pub fn from_usage(usage: &Usage) -> Self {
        WireUsage {
            prompt_tokens: usage.input_tokens + usage.cache_read_tokens,
            completion_tokens: usage.output_tokens,
            prompt_cache_hit_tokens: usage.cache_read_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }
    }

    /// The JSON `usage` object, with the fields DeepSeek sends.
    pub fn to_json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.prompt_cache_hit_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "prompt_cache_hit_tokens": self.prompt_cache_hit_tokens,
            "prompt_cache_miss_tokens": self.prompt_tokens.saturating_sub(self.prompt_cache_hit_tokens),
        })
    }
}

/// One step of a streamed reply.
#[derive(Debug, Clone, PartialEq)]
pub enum SseStep {
    /// A `data: <payload>\n\n` event; the payload is written as given (usually JSON).
    Data(String),
    /// Bytes written verbatim (malformed lines, odd framing).
    Raw(Vec<u8>),
    /// A `: <text>\n\n` comment (a keep-alive).
    Comment(String),
    /// A pause before the next step.
    Delay(Duration),
}

/// How a streamed reply ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// `data: [DONE]\n\n`, then a clean end of the body.
    Done,
    /// A clean end of the body without `[DONE]`.
    CloseWithoutDone,
    /// The TCP connection is closed mid-body (the chunked body is left unterminated).
    DropConnection,
    /// Nothing more is sent and the connection stays open until the client closes it.
    Stall,
    /// A `: keep-alive` comment every given interval, forever: never a byte of content, but
    /// never silent long enough for an idle watchdog either. Ends when the client closes.
    KeepAliveForever(Duration),
}

/// A streamed (HTTP 200, `text/event-stream`) reply under construction.
///
/// Each builder call appends one event in DeepSeek's format (`choices[0].delta...`).
/// Tool-call `index` is the wire index (0 for the first call of the reply), not a dsh block index.
#[derive(Debug, Clone, PartialEq)]
pub struct SseReply {
    /// The events to send, in order.
    pub steps: Vec<SseStep>,
    /// How the stream ends after the steps.
    pub end: StreamEnd,
    /// Pause before every `Data` step (simulates a slow model).
    pub chunk_delay: Option<Duration>,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
}

impl Default for SseReply {
    fn default() -> Self {
        SseReply {
            steps: Vec::new(),
            end: StreamEnd::Done,
            chunk_delay: None,
            headers: Vec::new(),
        }
    }
}

/// The JSON of one `chat.completion.chunk` event with a single choice.
pub fn chunk_event(delta: Value, finish_reason: Option<&str>, usage: Option<&WireUsage>) -> String {
    let mut event = json!({
        "id": "fake-completion",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": FAKE_MODEL,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    });
    if let (Some(usage), Some(object)) = (usage, event.as_object_mut()) {
        object.insert("usage".into(), usage.to_json());
    }
    event.to_string()
}

impl SseReply {
    /// An empty reply that ends with `[DONE]`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a raw event payload.
    pub fn data(mut self, payload: impl Into<String>) -> Self {
        self.steps.push(SseStep::Data(payload.into()));
        self
    }

    /// Appends a `delta.reasoning_content` event.
    pub fn reasoning(self, text: &str) -> Self {
        self.data(chunk_event(json!({"reasoning_content": text}), None, None))
    }

    /// Appends a `delta.content` event.
    pub fn text(self, text: &str) -> Self {
        self.data(chunk_event(json!({"content": text}), None, None))
    }

    /// Appends the first delta of a tool call: id, name and the first argument fragment.
    pub fn tool_call(self, index: u32, id: &str, name: &str, arguments: &str) -> Self {
        let call = json!({"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": arguments}});
        self.data(chunk_event(json!({"tool_calls": [call]}), None, None))
    }

    /// Appends a further argument fragment of tool call `index`.
    pub fn tool_args(self, index: u32, arguments: &str) -> Self {
        let call = json!({"index": index, "function": {"arguments": arguments}});
        self.data(chunk_event(json!({"tool_calls": [call]}), None, None))
    }

    /// Appends a usage-only event (`choices: []`), as OpenAI-style servers send it.
    pub fn usage(self, usage: WireUsage) -> Self {
        let event = json!({"id": "fake-completion", "object": "chat.completion.chunk",
            "created": 0, "model": FAKE_MODEL, "choices": [], "usage": usage.to_json()});
        self.data(event.to_string())
    }

    /// Appends the final event with `finish_reason` (DeepSeek puts usage in the same event).
    pub fn finish(self, finish_reason: &str, usage: Option<WireUsage>) -> Self {
        self.data(chunk_event(
            json!({"content": ""}),
            Some(finish_reason),
            usage.as_ref(),
        ))
    }

    /// Appends bytes verbatim.
    pub fn raw(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.steps.push(SseStep::Raw(bytes.into()));
        self
    }

    /// Appends a `data:` line that is not JSON.
    pub fn malformed(self) -> Self {
        self.raw(b"data: {\"choices\": [ this is not json\n\n".to_vec())
    }

    /// Appends an SSE comment (keep-alive).
    pub fn comment(mut self, text: &str) -> Self {
        self.steps.push(SseStep::Comment(text.to_string()));
        self
    }

    /// Appends a pause.
    pub fn delay(mut self, pause: Duration) -> Self {
        self.steps.push(SseStep::Delay(pause));
        self
    }

    /// Pauses `pause` before every data event.
    pub fn chunk_delay(mut self, pause: Duration) -> Self {
        self.chunk_delay = Some(pause);
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets how the reply ends.
    pub fn end(mut self, end: StreamEnd) -> Self {
        self.end = end;
        self
    }

    /// The body bytes as the client receives them (de-chunked), `[DONE]` included when the end
    /// is [`StreamEnd::Done`]. Delays are ignored.
    pub fn body_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for step in &self.steps {
            if let Some(bytes) = step.bytes() {
                out.extend_from_slice(&bytes);
            }
        }
        if self.end == StreamEnd::Done {
            out.extend_from_slice(DONE_EVENT);
        }
        out
    }
}

/// The terminating event of a chat-completions stream.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

impl SseStep {
    /// The bytes this step writes, or `None` for a delay.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            SseStep::Data(payload) => {
                let mut out = Vec::with_capacity(payload.len() + 8);
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(payload.as_bytes());
                out.extend_from_slice(b"\n\n");
                Some(out)
            }
            SseStep::Raw(bytes) => Some(bytes.clone()),
            SseStep::Comment(text) => Some(format!(": {text}\n\n").into_bytes()),
            SseStep::Delay(_) => None,
        }
    }
}

/// What the fake provider answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    /// HTTP 200 with a `text/event-stream` body.
    Stream(SseReply),
    /// A non-success status with headers and a body.
    Http {
        /// The HTTP status code.
        status: u16,
        /// Response headers, name and value.
        headers: Vec<(String, String)>,
        /// The response body.
        body: String,
    },
    /// The connection is closed without any answer.
    CloseConnection,
}

impl From<SseReply> for ScriptedReply {
    fn from(reply: SseReply) -> Self {
        ScriptedReply::Stream(reply)
    }
}

impl ScriptedReply {
    /// A status with a DeepSeek-style JSON error body `{"error": {message, type, code}}`.
    pub fn http_error(status: u16, message: &str) -> Self {
        let kind = match status {
            401 | 403 => "authentication_error",
            402 => "insufficient_balance",
            429 => "rate_limit_error",
            400 | 413 | 422 => "invalid_request_error",
            _ => "server_error",
        };
        ScriptedReply::Http {
            status,
            headers: Vec::new(),
            body: json!({"error": {"message": message, "type": kind, "code": kind}}).to_string(),
        }
    }

    /// Adds a response header to an [`Http`](ScriptedReply::Http) or stream reply.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        match &mut self {
            ScriptedReply::Http { headers, .. } => headers.push((name.into(), value.into())),
            ScriptedReply::Stream(reply) => reply.headers.push((name.into(), value.into())),
            ScriptedReply::CloseConnection => {}
        }
        self
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_seconds: u64) -> Self {
        Self::http_error(429, "Rate limit reached for requests")
            .with_header("retry-after", &retry_after_seconds.to_string())
    }

    /// 400 whose message says the context length was exceeded.
    pub fn context_length_exceeded() -> Self {
        Self::http_error(
            400,
            "This model's maximum context length is 1000000 tokens. However, you requested 1200000 tokens. Please reduce the length of the messages.",
        )
    }

    /// A complete stream with `finish_reason: stop` and no content at all.
    pub fn empty_completion() -> Self {
        SseReply::new()
            .finish("stop", Some(WireUsage::default()))
            .into()
    }
}
