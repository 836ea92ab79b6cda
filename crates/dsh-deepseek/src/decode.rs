//! Stream decoding (docs/providers.md, "Chat completions"): SSE bytes of a chat-completions stream
//! become dsh [`Chunk`]s.
//!
//! Payloads are deserialised into borrowed structs (`Cow<str>` borrows unless the JSON string
//! has escapes), so the hot path allocates only the chunk strings it hands out.

use std::borrow::Cow;
use std::ops::ControlFlow;

use dsh_http::errors::truncate_chars;
use dsh_http::{SseDecoder, SseEvent};
use dsh_llm::{BlockType, Chunk, ContentBlock, Failure, FailureCode, FinishReason, Usage};
use serde::Deserialize;

use crate::errors::failure_from_stream_error;

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    /// Some OpenAI-compatible servers (vLLM, Ollama) name the reasoning field `reasoning`.
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<WireToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<WireFunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct WireFunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
    #[serde(default)]
    prompt_cache_miss_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Deserialize, Default)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct CompletionTokensDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// Disjoint dsh usage: DeepSeek's `prompt_tokens` includes cache hits, so they are
    /// subtracted out.
    fn to_usage(&self) -> Usage {
        let cache_read = self
            .prompt_cache_hit_tokens
            .or_else(|| self.prompt_tokens_details.as_ref()?.cached_tokens)
            .unwrap_or(0);
        let input = match self.prompt_tokens {
            Some(prompt) => prompt.saturating_sub(cache_read),
            None => self.prompt_cache_miss_tokens.unwrap_or(0),
        };
        Usage {
            input_tokens: input,
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cache_read,
            cache_write_tokens: 0,
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

/// The text or reasoning block being streamed.
struct OpenProse {
    index: u32,
    reasoning: bool,
    text: String,
}

/// One tool call of the reply.
struct ToolSlot {
    wire_index: Option<u32>,
    block_index: u32,
    id: String,
    name: String,
    arguments: String,
    open: bool,
}

/// Turns the JSON payloads of one reply into chunks.
///
/// Blocks are numbered in order of appearance. A text or reasoning block closes when any other
/// block receives a delta; tool calls stay open while only tool calls stream (providers may
/// interleave parallel calls) and close together when text or reasoning starts, or at the end.
/// `usage` comes after the last `block-end` and before `finish`; nothing comes after `finish`.
#[derive(Default)]
pub struct ReplyDecoder {
    next_index: u32,
    prose: Option<OpenProse>,
    tools: Vec<ToolSlot>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    finished: bool,
}

impl ReplyDecoder {
    /// A decoder for a new reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a `finish` chunk was emitted; later input is ignored.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Handles the data of one SSE event: `[DONE]` ends the reply; a JSON chunk emits deltas;
    /// anything unparsable ends the reply with `MALFORMED_RESPONSE`; an `error` object ends it
    /// with the mapped failure.
    pub fn data(&mut self, payload: &[u8], out: &mut Vec<Chunk>) {
        if self.finished {
            return;
        }
        if payload.trim_ascii() == b"[DONE]" {
            self.done(out);
            return;
        }
        let chunk: WireChunk<'_> = match serde_json::from_slice(payload) {
            Ok(chunk) => chunk,
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
        if chunk.error.is_some() {
            self.fail(failure_from_stream_error(payload), out);
            return;
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.to_usage());
        }
    }

    /// The stream ended without `[DONE]`: the reply finishes `error {STREAM_CLOSED}`.
    pub fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        if !self.finished {
            self.fail(
                Failure::new(
                    FailureCode::StreamClosed,
                    "the provider closed the stream before `data: [DONE]`",
                ),
                out,
            );
        }
    }

    /// Ends the reply with `failure` (no `block-end`): a failed attempt produces no message. The
    /// usage the provider reported before the failure comes first, unless it is all zeros: the
    /// call was billed (docs/model-calls.md, "Usage").
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

    fn delta(&mut self, delta: WireDelta<'_>, out: &mut Vec<Chunk>) {
        let reasoning = delta
            .reasoning_content
            .filter(|r| !r.is_empty())
            .or(delta.reasoning.filter(|r| !r.is_empty()));
        if let Some(text) = reasoning {
            self.prose_delta(true, text, out);
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.prose_delta(false, text, out);
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_delta(call, out);
        }
    }

    fn prose_delta(&mut self, reasoning: bool, text: Cow<'_, str>, out: &mut Vec<Chunk>) {
        let same = matches!(&self.prose, Some(p) if p.reasoning == reasoning);
        if !same {
            self.close_all(out);
            let index = self.take_index();
            out.push(Chunk::BlockStart {
                index,
                block_type: if reasoning {
                    BlockType::Reasoning
                } else {
                    BlockType::Text
                },
            });
            self.prose = Some(OpenProse {
                index,
                reasoning,
                text: String::new(),
            });
        }
        if let Some(prose) = &mut self.prose {
            prose.text.push_str(&text);
            let text = text.into_owned();
            out.push(if reasoning {
                Chunk::ReasoningDelta {
                    index: prose.index,
                    text,
                }
            } else {
                Chunk::TextDelta {
                    index: prose.index,
                    text,
                }
            });
        }
    }

    fn tool_delta(&mut self, call: WireToolCallDelta<'_>, out: &mut Vec<Chunk>) {
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        let id = call.id.filter(|id| !id.is_empty());
        let name = name.filter(|name| !name.is_empty());
        let arguments = arguments.unwrap_or(Cow::Borrowed(""));
        if self.prose.is_some() {
            self.close_all(out);
        }
        let position = self.tools.iter().rposition(|slot| {
            slot.open
                && match (call.index, &id) {
                    (Some(index), _) => slot.wire_index == Some(index),
                    (None, Some(id)) => slot.id == id.as_ref(),
                    (None, None) => true,
                }
        });
        let position = match position {
            Some(position) => position,
            None => {
                if id.is_none() && name.is_none() && arguments.is_empty() {
                    return;
                }
                let block_index = self.take_index();
                out.push(Chunk::BlockStart {
                    index: block_index,
                    block_type: BlockType::ToolCall,
                });
                self.tools.push(ToolSlot {
                    wire_index: call.index,
                    block_index,
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                    open: true,
                });
                self.tools.len() - 1
            }
        };
        let slot = &mut self.tools[position];
        if let Some(id) = &id {
            slot.id.clear();
            slot.id.push_str(id);
        }
        if let Some(name) = &name {
            slot.name.clear();
            slot.name.push_str(name);
        }
        slot.arguments.push_str(&arguments);
        out.push(Chunk::ToolCallDelta {
            index: slot.block_index,
            id: id.map(Cow::into_owned).unwrap_or_default(),
            name: name.map(Cow::into_owned),
            arguments_delta: arguments.into_owned(),
        });
    }

    fn take_index(&mut self) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        index
    }

    /// Emits `block-end` for every open block, in index order.
    fn close_all(&mut self, out: &mut Vec<Chunk>) {
        if let Some(prose) = self.prose.take() {
            out.push(Chunk::BlockEnd {
                index: prose.index,
                block: if prose.reasoning {
                    ContentBlock::Reasoning {
                        text: prose.text,
                        signature: None,
                    }
                } else {
                    ContentBlock::Text { text: prose.text }
                },
            });
        }
        for slot in self.tools.iter_mut().filter(|slot| slot.open) {
            slot.open = false;
            let id = if slot.id.is_empty() {
                format!("call-{}", slot.block_index)
            } else {
                std::mem::take(&mut slot.id)
            };
            out.push(Chunk::BlockEnd {
                index: slot.block_index,
                block: ContentBlock::ToolCall {
                    id,
                    name: std::mem::take(&mut slot.name),
                    arguments: std::mem::take(&mut slot.arguments),
                },
            });
        }
    }

    /// `[DONE]`: close the blocks, then usage, then the mapped finish.
    fn done(&mut self, out: &mut Vec<Chunk>) {
        self.close_all(out);
        if let Some(usage) = self.usage {
            out.push(Chunk::Usage { usage });
        }
        let produced_blocks = self.next_index > 0;
        let reason = match self.finish_reason.as_deref() {
            Some("stop") | None if !produced_blocks => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::EmptyResponse,
                    "the model finished without producing any content",
                ),
            },
            Some("stop") => FinishReason::Stop,
            None => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::MissingFinish,
                    "the provider ended the stream with `data: [DONE]` but sent no `finish_reason`",
                ),
            },
            Some("tool_calls") => FinishReason::ToolCalls,
            Some("length") => FinishReason::MaxTokens,
            Some(other) => FinishReason::Error {
                failure: Failure::new(
                    FailureCode::Other(other.to_ascii_uppercase()),
                    format!("the provider stopped the reply with finish_reason `{other}`"),
                ),
            },
        };
        self.finished = true;
        out.push(Chunk::Finish { reason });
    }
}

/// SSE bytes in, chunks out: an [`SseDecoder`] feeding a [`ReplyDecoder`]. Pure (no I/O), so
/// it can be driven by the HTTP adapter, by tests and by benchmarks alike.
#[derive(Default)]
pub struct StreamDecoder {
    sse: SseDecoder,
    reply: ReplyDecoder,
    comments: u64,
}

impl StreamDecoder {
    /// A decoder for a new reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `bytes`, appending chunks to `out`. Returns true once the reply is finished (its
    /// `finish` chunk is in `out`); later calls append nothing.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>) -> bool {
        if self.reply.is_finished() {
            return true;
        }
        let reply = &mut self.reply;
        let comments = &mut self.comments;
        let _ = self.sse.push(bytes, |event| {
            match event {
                SseEvent::Data(payload) => reply.data(payload, out),
                SseEvent::Comment => *comments += 1,
            }
            if reply.is_finished() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        self.reply.is_finished()
    }

    /// The byte stream ended: a pending event is decoded, and a reply still unfinished ends
    /// with `STREAM_CLOSED`.
    pub fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        if !self.reply.is_finished() {
            let reply = &mut self.reply;
            self.sse.finish(|event| {
                if let SseEvent::Data(payload) = event {
                    reply.data(payload, out);
                }
                if reply.is_finished() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
        }
        self.reply.end_of_stream(out);
    }

    /// Ends the reply with `failure` unless it already finished.
    pub fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>) {
        self.reply.fail(failure, out);
    }

    /// True once the `finish` chunk was emitted.
    pub fn is_finished(&self) -> bool {
        self.reply.is_finished()
    }

    /// How many SSE comment lines (keep-alives) were seen.
    pub fn comments_seen(&self) -> u64 {
        self.comments
    }
}

impl dsh_http::BodyDecoder for StreamDecoder {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>) {
        StreamDecoder::push(self, bytes, out);
    }
    fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        StreamDecoder::end_of_stream(self, out);
    }
    fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>) {
        StreamDecoder::fail(self, failure, out);
    }
    fn is_finished(&self) -> bool {
        StreamDecoder::is_finished(self)
    }
}
