//! The OpenAI Responses API wire format for the fake provider, used only by the benchmark that
//! compares dsh with the Codex CLI (which speaks nothing else): a builder of streamed replies
//! (`event: <type>` + `data: <json>` pairs, no `[DONE]`).

use serde_json::{json, Value};

use crate::script::{ScriptedReply, SseReply, SseStep, StreamEnd};

/// Model name written into rendered Responses events.
pub const FAKE_RESPONSES_MODEL: &str = "fake-responses-1";

/// A streamed Responses reply under construction.
///
/// [`new`](Self::new) starts with `response.created`; [`text`](Self::text) appends a `message`
/// output item (`output_item.added`, `content_part.added`, `output_text.delta` per piece,
/// `output_text.done`, `content_part.done`, `output_item.done`);
/// [`function_call`](Self::function_call) appends a `function_call` item with argument deltas;
/// [`finish`](Self::finish) appends `response.completed` carrying every item and the usage.
/// Every event has a `sequence_number`. The body ends cleanly without a terminator line.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesReply {
    reply: SseReply,
    items: Vec<Value>,
    sequence: u64,
}

impl Default for ResponsesReply {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponsesReply {
    /// A reply that has sent `response.created` and `response.in_progress`.
    pub fn new() -> Self {
        let reply = ResponsesReply {
            reply: SseReply::new(),
            items: Vec::new(),
            sequence: 0,
        };
        let created = response_object("in_progress", &[], None);
        reply
            .event("response.created", json!({"response": created}))
            .event("response.in_progress", json!({"response": created}))
    }

    /// Appends one event of `kind` whose payload is `fields` plus `type` and `sequence_number`.
    pub fn event(mut self, kind: &str, mut fields: Value) -> Self {
        if let Some(object) = fields.as_object_mut() {
            object.insert("type".into(), json!(kind));
            object.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        self.reply.steps.push(SseStep::Raw(
            format!("event: {kind}\ndata: {fields}\n\n").into_bytes(),
        ));
        self
    }

    /// An assistant `message` item streamed as the given `output_text.delta` pieces.
    pub fn text(mut self, pieces: &[&str]) -> Self {
        let output_index = self.items.len();
        let id = format!("msg_fake_{output_index}");
        let text: String = pieces.concat();
        let item = |status: &str, content: Value| {
            json!({"type": "message", "id": id, "role": "assistant", "status": status,
                "content": content})
        };
        let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
        let done_item = item("completed", json!([part(&text)]));
        self = self
            .event(
                "response.output_item.added",
                json!({"output_index": output_index, "item": item("in_progress", json!([]))}),
            )
            .event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": output_index, "content_index": 0,
                    "part": part("")}),
            );
        for piece in pieces {
            self = self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": output_index, "content_index": 0,
                    "delta": piece, "logprobs": []}),
            );
        }
        self = self
            .event(
                "response.output_text.done",
                json!({"item_id": id, "output_index": output_index, "content_index": 0,
                    "text": text, "logprobs": []}),
            )
            .event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": output_index, "content_index": 0,
                    "part": part(&text)}),
            )
            .event(
                "response.output_item.done",
                json!({"output_index": output_index, "item": done_item}),
            );
        self.items.push(done_item);
        self
    }

    /// A `function_call` item whose JSON `arguments` stream as the given pieces.
    pub fn function_call(mut self, call_id: &str, name: &str, argument_pieces: &[&str]) -> Self {
        let output_index = self.items.len();
        let id = format!("fc_fake_{output_index}");
        let arguments: String = argument_pieces.concat();
        let item = |status: &str, arguments: &str| {
            json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": status})
        };
        let done_item = item("completed", &arguments);
        self = self.event(
            "response.output_item.added",
            json!({"output_index": output_index, "item": item("in_progress", "")}),
        );
        for piece in argument_pieces {
            self = self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": output_index, "delta": piece}),
            );
        }
        self = self
            .event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": output_index, "arguments": arguments}),
            )
            .event(
                "response.output_item.done",
                json!({"output_index": output_index, "item": done_item}),
            );
        self.items.push(done_item);
        self
    }

    /// `response.completed` with every item so far and the usage
    /// (`input_tokens` includes `cached_tokens`, as the API reports it).
    pub fn finish(self, input_tokens: u64, cached_tokens: u64, output_tokens: u64) -> Self {
        let usage = json!({
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        });
        let completed = response_object("completed", &self.items, Some(usage));
        self.event("response.completed", json!({"response": completed}))
    }

    /// The underlying stream reply, ready to serve (the body ends without a terminator line).
    pub fn into_sse(self) -> SseReply {
        self.reply.end(StreamEnd::CloseWithoutDone)
    }
}

fn response_object(status: &str, output: &[Value], usage: Option<Value>) -> Value {
    json!({
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": FAKE_RESPONSES_MODEL,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "error": null,
        "incomplete_details": null,
        "usage": usage,
    })
}

impl From<ResponsesReply> for ScriptedReply {
    fn from(reply: ResponsesReply) -> Self {
        ScriptedReply::Stream(reply.into_sse())
    }
}
