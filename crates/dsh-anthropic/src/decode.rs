//! Stream decoding (docs/providers.md, "Anthropic Messages"): the SSE events of a Messages stream
//! become dsh [`Chunk`]s.
//!
//! Every event's JSON carries its own `type`, so the SSE `event:` line is not needed. Block
//! indices are the provider's content-block indices, which are the positions in the final
//! message. Unknown event and delta types are ignored (the API may add them); unknown block
//! types are passed through as [`ContentBlock::Unknown`] at their `content_block_stop`.

use std::ops::ControlFlow;

use dsh_http::errors::truncate_chars;
use dsh_http::{SseDecoder, SseEvent};
use dsh_llm::{BlockType, Chunk, ContentBlock, Failure, FailureCode, FinishReason, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::errors::failure_from_stream_error;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

/// One content block of the reply being built.
enum Building {
    Text(String),
    Reasoning {
        text: String,
        signature: String,
    },
    Tool {
        id: String,
        name: String,
        arguments: String,
        start_input: String,
    },
    /// A block type dsh does not model, kept as its start object.
    Raw(Value),
}

struct Slot {
    index: u32,
    block: Building,
    open: bool,
}

/// Turns the JSON payloads of one Messages stream into chunks.
///
/// Output order per block: `block-start`, deltas, `block-end` (at `content_block_stop`, or at
/// `message_stop` for a block never stopped). At `message_stop`: usage (when any was reported),
/// then the finish mapped from `stop_reason`: `end_turn` and `stop_sequence` to `stop` (or
/// `EMPTY_RESPONSE` when no block came), `tool_use` to `tool-calls`, `max_tokens` to
/// `max-tokens`, no `stop_reason` at all to `error {MISSING_FINISH}`, anything else to `error`
/// with the value upper-cased. An `error` event, bad
/// JSON or a stream without `message_stop` finish with `error` and no `block-end`s, so a failed
/// attempt yields no message; the usage reported before (`message_start`'s input, a
/// `message_delta`'s output) still comes before that finish, unless it is all zeros. Usage is disjoint: `input_tokens` (which the API reports without
/// cache hits and writes), `cache_read_input_tokens`, `cache_creation_input_tokens`; the latest
/// value of each field wins (`message_delta` usage is cumulative).
#[derive(Default)]
pub struct MessagesDecoder {
    sse: SseDecoder,
    slots: Vec<Slot>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    finished: bool,
}

impl MessagesDecoder {
    /// A decoder for a new reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a `finish` chunk was emitted; later input is ignored.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Decodes `bytes`, appending chunks to `out`. Returns true once the reply is finished.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>) -> bool {
        if self.finished {
            return true;
        }
        let mut sse = std::mem::take(&mut self.sse);
        let _ = sse.push(bytes, |event| self.sse_event(event, out));
        self.sse = sse;
        self.finished
    }

    /// The byte stream ended: a pending event is decoded, and a reply still unfinished ends
    /// with `STREAM_CLOSED`.
    pub fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        if !self.finished {
            let mut sse = std::mem::take(&mut self.sse);
            sse.finish(|event| self.sse_event(event, out));
        }
        if !self.finished {
            self.fail(
                Failure::new(
                    FailureCode::StreamClosed,
                    "the provider closed the stream before `message_stop`",
                ),
                out,
            );
        }
    }

    /// Ends the reply with `failure` unless it already finished: no `block-end`, but the usage
    /// reported so far, when it is not all zeros (the call was billed; docs/model-calls.md,
    /// "Usage").
    pub fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>) {
        if !self.finished {
            self.finished = true;
            if let Some(usage) = self.usage.filter(|u| *u != Usage::default()) {
                out.push(Chunk::Usage { usage });
            }
            out.push(Chunk::Finish {
                reason: FinishReason::Error { failure },
            });
        }
    }

    fn sse_event(&mut self, event: SseEvent<'_>, out: &mut Vec<Chunk>) -> ControlFlow<()> {
        if let SseEvent::Data(payload) = event {
            self.data(payload, out);
        }
        if self.finished {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Handles the data of one SSE event.
    fn data(&mut self, payload: &[u8], out: &mut Vec<Chunk>) {
        let event: Event = match serde_json::from_slice(payload) {
            Ok(event) => event,
            Err(err) => {
                let shown = truncate_chars(&String::from_utf8_lossy(payload), 200);
                self.fail(
                    Failure::new(
                        FailureCode::MalformedResponse,
                        format!("provider sent an unparsable stream event ({err}): {shown}"),
                    ),
                    out,
                );
                return;
            }
        };
        match event.kind.as_str() {
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    self.merge_usage(&usage);
                }
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (event.index, event.content_block) {
                    self.block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (event.index, event.delta) {
                    self.block_delta(index, &delta, out);
                }
            }
            "content_block_stop" => {
                if let Some(index) = event.index {
                    self.block_stop(index, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = event
                    .delta
                    .as_ref()
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = &event.usage {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => self.message_stop(out),
            "error" => self.fail(failure_from_stream_error(payload), out),
            // `ping` and event types added after this build carry nothing dsh needs.
            _ => {}
        }
    }

    fn merge_usage(&mut self, wire: &WireUsage) {
        let usage = self.usage.get_or_insert_with(Usage::default);
        if let Some(n) = wire.input_tokens {
            usage.input_tokens = n;
        }
        if let Some(n) = wire.output_tokens {
            usage.output_tokens = n;
        }
        if let Some(n) = wire.cache_read_input_tokens {
            usage.cache_read_tokens = n;
        }
        if let Some(n) = wire.cache_creation_input_tokens {
            usage.cache_write_tokens = n;
        }
    }

    fn slot(&mut self, index: u32) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.index == index && s.open)
    }

    fn block_start(&mut self, index: u32, block: Value, out: &mut Vec<Chunk>) {
        if self.slots.iter().any(|s| s.index == index) {
            return;
        }
        let text_field = |name: &str| {
            block
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let building = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                out.push(Chunk::BlockStart {
                    index,
                    block_type: BlockType::Text,
                });
                let text = text_field("text");
                if !text.is_empty() {
                    out.push(Chunk::TextDelta {
                        index,
                        text: text.clone(),
                    });
                }
                Building::Text(text)
            }
            Some("thinking") => {
                out.push(Chunk::BlockStart {
                    index,
                    block_type: BlockType::Reasoning,
                });
                let text = text_field("thinking");
                if !text.is_empty() {
                    out.push(Chunk::ReasoningDelta {
                        index,
                        text: text.clone(),
                    });
                }
                Building::Reasoning {
                    text,
                    signature: text_field("signature"),
                }
            }
            Some("tool_use") => {
                let id = text_field("id");
                let name = text_field("name");
                let start_input = match block.get("input") {
                    Some(Value::Object(map)) if !map.is_empty() => {
                        serde_json::to_string(map).unwrap_or_default()
                    }
                    _ => String::new(),
                };
                out.push(Chunk::BlockStart {
                    index,
                    block_type: BlockType::ToolCall,
                });
                out.push(Chunk::ToolCallDelta {
                    index,
                    id: id.clone(),
                    name: Some(name.clone()).filter(|n| !n.is_empty()),
                    arguments_delta: String::new(),
                });
                Building::Tool {
                    id,
                    name,
                    arguments: String::new(),
                    start_input,
                }
            }
            _ => Building::Raw(block),
        };
        self.slots.push(Slot {
            index,
            block: building,
            open: true,
        });
    }

    fn block_delta(&mut self, index: u32, delta: &Value, out: &mut Vec<Chunk>) {
        let field = |name: &str| delta.get(name).and_then(Value::as_str);
        let kind = field("type").unwrap_or("");
        // A delta for a block never started opens it, as the block assembler would.
        if self.slot(index).is_none() && !self.slots.iter().any(|s| s.index == index) {
            let start = match kind {
                "text_delta" => serde_json::json!({"type": "text", "text": ""}),
                "thinking_delta" | "signature_delta" => {
                    serde_json::json!({"type": "thinking", "thinking": ""})
                }
                "input_json_delta" => serde_json::json!({"type": "tool_use", "id": "", "name": ""}),
                _ => return,
            };
            self.block_start(index, start, out);
        }
        let Some(slot) = self.slot(index) else {
            return;
        };
        match (&mut slot.block, kind) {
            (Building::Text(text), "text_delta") => {
                if let Some(piece) = field("text").filter(|t| !t.is_empty()) {
                    text.push_str(piece);
                    out.push(Chunk::TextDelta {
                        index,
                        text: piece.to_string(),
                    });
                }
            }
            (Building::Reasoning { text, .. }, "thinking_delta") => {
                if let Some(piece) = field("thinking").filter(|t| !t.is_empty()) {
                    text.push_str(piece);
                    out.push(Chunk::ReasoningDelta {
                        index,
                        text: piece.to_string(),
                    });
                }
            }
            (Building::Reasoning { signature, .. }, "signature_delta") => {
                if let Some(piece) = field("signature") {
                    signature.push_str(piece);
                }
            }
            (Building::Tool { arguments, .. }, "input_json_delta") => {
                if let Some(piece) = field("partial_json").filter(|t| !t.is_empty()) {
                    arguments.push_str(piece);
                    out.push(Chunk::ToolCallDelta {
                        index,
                        id: String::new(),
                        name: None,
                        arguments_delta: piece.to_string(),
                    });
                }
            }
            // Citations and delta types added later are not part of dsh's vocabulary.
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u32, out: &mut Vec<Chunk>) {
        if let Some(position) = self.slots.iter().position(|s| s.index == index && s.open) {
            Self::close(&mut self.slots[position], out);
        }
    }

    fn close(slot: &mut Slot, out: &mut Vec<Chunk>) {
        slot.open = false;
        let block = match std::mem::replace(&mut slot.block, Building::Text(String::new())) {
            Building::Text(text) => ContentBlock::Text { text },
            Building::Reasoning { text, signature } => ContentBlock::Reasoning {
                text,
                signature: Some(signature).filter(|s| !s.is_empty()),
            },
            Building::Tool {
                id,
                name,
                arguments,
                start_input,
            } => ContentBlock::ToolCall {
                id: if id.is_empty() {
                    format!("call-{}", slot.index)
                } else {
                    id
                },
                name,
                arguments: if !arguments.is_empty() {
                    arguments
                } else if !start_input.is_empty() {
                    start_input
                } else {
                    "{}".to_string()
                },
            },
            Building::Raw(value) => ContentBlock::Unknown(value),
        };
        out.push(Chunk::BlockEnd {
            index: slot.index,
            block,
        });
    }

    fn message_stop(&mut self, out: &mut Vec<Chunk>) {
        for slot in self.slots.iter_mut().filter(|s| s.open) {
            Self::close(slot, out);
        }
        if let Some(usage) = self.usage {
            out.push(Chunk::Usage { usage });
        }
        let produced = !self.slots.is_empty();
        let reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") | None if !produced => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::EmptyResponse,
                    "the model finished without producing any content",
                ),
            },
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("max_tokens") => FinishReason::MaxTokens,
            None => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::MissingFinish,
                    "the provider sent `message_stop` but no `stop_reason`",
                ),
            },
            Some(other) => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::Other(other.to_ascii_uppercase()),
                    format!("the provider stopped the reply with stop_reason `{other}`"),
                ),
            },
        };
        self.finished = true;
        out.push(Chunk::Finish { reason });
    }
}

impl dsh_http::BodyDecoder for MessagesDecoder {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>) {
        MessagesDecoder::push(self, bytes, out);
    }
    fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        MessagesDecoder::end_of_stream(self, out);
    }
    fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>) {
        MessagesDecoder::fail(self, failure, out);
    }
    fn is_finished(&self) -> bool {
        MessagesDecoder::is_finished(self)
    }
}
