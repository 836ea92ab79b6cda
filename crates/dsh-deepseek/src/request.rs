//! Request translation (docs/providers.md, "Chat completions"): a [`GenerateRequest`] becomes a
//! chat-completions body.
//!
//! The body is serialised from borrowed structs, so the history is not copied on the way out.
//! Absent values are omitted, never sent as `null`.

use std::borrow::Cow;

use dsh_http::RequestBody;
use dsh_llm::{
    ContentBlock, Failure, FailureCode, GenerateRequest, HistoryLineage, KeptTools, Message,
    Purpose, ReasoningEffort, Role, ToolSchema, WrittenHistory,
};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::config::{MaxTokensField, OpenAiQuirks};
use crate::models::{model_spec, DEFAULT_MODEL};

/// Text sent as a tool message's `content` when the tool produced no output: the provider
/// rejects or misreads empty tool messages.
pub const EMPTY_TOOL_OUTPUT_PLACEHOLDER: &str = "(no output)";

/// Separator between the text blocks of one user or system message.
const USER_TEXT_SEPARATOR: &str = "\n\n";

/// The body's fields after `messages`, in wire order. The body is written as `{"model":…,
/// "messages":[…]` followed by these fields, which is byte for byte what serialising one struct
/// with `model` and `messages` first gives (compact JSON has no whitespace to differ in).
#[derive(Serialize)]
struct BodyTail<'a> {
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    /// The `tools` array as [`wire_tools`] writes it (kept across steps in [`KeptTools`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a [String]>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

/// A user message's content: a string, or parts when it carries an image.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

/// The user message that follows tool results holding images, as dsh writes it (tool messages
/// carry text only).
const TOOL_RESULT_IMAGE_TEXT: &str = "Attached image(s) from tool result:";

fn image_url<'b>(attachment: &dsh_llm::ImageAttachment) -> Part<'b> {
    Part::ImageUrl {
        image_url: ImageUrl {
            // check_images_loaded ran before the body is built: every image has its bytes.
            url: attachment.data_url().unwrap_or_default(),
        },
    }
}

/// The text dsh puts before each image of a user message: its id and pixel size.
fn image_handle(attachment: &dsh_llm::ImageAttachment, after_content: bool) -> Part<'static> {
    let lead = if after_content { "\n" } else { "" };
    let text = match (attachment.width, attachment.height) {
        (Some(w), Some(h)) => format!(
            "{lead}Image {}; request image {w}x{h}px.",
            attachment.attachment_id
        ),
        _ => format!("{lead}Image {}.", attachment.attachment_id),
    };
    Part::Text {
        text: Cow::Owned(text),
    }
}

/// The parts of a user message that has an image: text and images in order.
fn user_parts(content: &[ContentBlock]) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => parts.push(Part::Text {
                text: Cow::Borrowed(text),
            }),
            ContentBlock::Image { attachment } => {
                let handle = image_handle(attachment, !parts.is_empty());
                parts.push(handle);
                parts.push(image_url(attachment));
            }
            _ => {}
        }
    }
    parts
}

/// Sends the images of the tool results just written as one user message.
fn flush_tool_images<'a>(out: &mut Vec<WireMessage<'a>>, pending: &mut Vec<Part<'a>>) {
    if pending.is_empty() {
        return;
    }
    let mut parts = vec![Part::Text {
        text: Cow::Borrowed(TOOL_RESULT_IMAGE_TEXT),
    }];
    parts.append(pending);
    out.push(WireMessage::User {
        content: UserContent::Parts(parts),
    });
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// Whether thinking is on for this request, and with which wire effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThinkingMode {
    /// Send `thinking: {type: disabled}` and no effort.
    Disabled,
    /// Send `thinking: {type: enabled}` and the effort, if any.
    Enabled(Option<&'static str>),
    /// Send neither (an unknown OpenAI-compatible model with no effort asked for).
    Unspecified,
}

fn thinking_mode(request: &GenerateRequest, model: &str) -> ThinkingMode {
    if request.purpose == Some(Purpose::SessionTitle) {
        return ThinkingMode::Disabled;
    }
    match request.config.config().reasoning_effort {
        Some(ReasoningEffort::Off) => ThinkingMode::Disabled,
        Some(ReasoningEffort::Low) => ThinkingMode::Enabled(Some("low")),
        // The provider maps `medium` to `high`; say so explicitly.
        Some(ReasoningEffort::Medium | ReasoningEffort::High) => {
            ThinkingMode::Enabled(Some("high"))
        }
        Some(ReasoningEffort::Max) => ThinkingMode::Enabled(Some("max")),
        None if model_spec(model).is_some() => ThinkingMode::Enabled(None),
        None => ThinkingMode::Unspecified,
    }
}

/// Serialises `request` as the JSON body of `POST {base}/chat/completions`.
///
/// Contract (docs/providers.md, "Chat completions"): `model` (default `deepseek-v4-flash` when
/// empty), `messages` with the system prompt first, `stream: true`, `stream_options.include_usage:
/// true`, `thinking` and `reasoning_effort` from the effort (`off` and the session-title purpose
/// disable thinking and send no effort), `tools` as functions, then `temperature`, `max_tokens`,
/// `stop` when set. Assistant messages carry `content` (joined text, `""` when none), `tool_calls`
/// with the raw argument strings byte for byte, and `reasoning_content` whenever the message has
/// reasoning blocks — and, with thinking on, `""` for a tool-call message without reasoning,
/// because the provider rejects thinking-mode tool-call turns that lack the field. Tool results
/// become one `tool` message each; unknown blocks are skipped. Same as [`build_request_body_with`]
/// with the default (DeepSeek) quirks.
pub fn build_request_body(request: &GenerateRequest) -> Result<Vec<u8>, Failure> {
    build_request_body_with(request, &OpenAiQuirks::default())
}

/// [`build_request_body`] for an endpoint with `quirks`: each switch that is off drops its
/// field (`reasoning_content`, `stream_options`, `thinking`, `reasoning_effort`), and the token
/// limit goes into the field `quirks.max_tokens_field` names (or nowhere).
pub fn build_request_body_with(
    request: &GenerateRequest,
    quirks: &OpenAiQuirks,
) -> Result<Vec<u8>, Failure> {
    build_body(request, quirks, None).map(|body| body.to_vec())
}

/// [`build_request_body_with`], reusing the bytes of the messages that `cache` holds from the
/// same session's last request (see [`HistoryBytes`]). The body is byte for byte the one
/// [`build_request_body_with`] builds; the history's bytes go in it uncopied.
pub(crate) fn build_request_body_cached(
    request: &GenerateRequest,
    quirks: &OpenAiQuirks,
    cache: &HistoryBytes,
) -> Result<RequestBody, Failure> {
    build_body(request, quirks, Some(cache))
}

fn build_body(
    request: &GenerateRequest,
    quirks: &OpenAiQuirks,
    cache: Option<&HistoryBytes>,
) -> Result<RequestBody, Failure> {
    let model = wire_model(request);
    let mode = thinking_mode(request, model);
    let shape = HistoryShape {
        thinking_on: matches!(mode, ThinkingMode::Enabled(_)),
        send_reasoning: quirks.send_reasoning_content,
    };
    dsh_llm::check_images_loaded(&request.messages)?;

    // Only a session's ordinary steps are kept: a call with a purpose (a title) is one-off.
    let session = match (cache, &request.session_id, request.purpose) {
        (Some(cache), Some(session), None) => Some((cache, session)),
        _ => None,
    };
    let mut history = session
        .and_then(|(cache, session)| cache.take(session, |kept| kept.shape == shape))
        .unwrap_or_else(|| SerializedHistory::new(shape));
    history
        .extend_to(&request.messages, request.history_lineage)
        .map_err(serialise_failure)?;

    let mut head = Vec::with_capacity(64 + model.len() + request.system.len() * 11 / 10);
    head.extend_from_slice(b"{\"model\":");
    serde_json::to_writer(&mut head, model).map_err(serialise_failure)?;
    head.extend_from_slice(b",\"messages\":[");
    let has_system = !request.system.is_empty();
    if has_system {
        let system = WireMessage::System {
            content: Cow::Borrowed(request.system.as_str()),
        };
        serde_json::to_writer(&mut head, &system).map_err(serialise_failure)?;
    }
    let mut body = RequestBody::new();
    body.push(head);
    // The next request writes its trailing images anew: they go to this body as they are.
    let images = std::mem::take(&mut history.trailing_images);
    body.push_elements(has_system, &history.written.bytes, images);
    // `tail` is a JSON object that always holds `stream`: its fields continue the body's.
    let tools = history
        .tools
        .json(&request.tools, false, wire_tools)
        .map_err(serialise_failure)?;
    let mut end = b"]".to_vec();
    serde_json::to_writer(&mut end, &body_tail(request, quirks, mode, tools))
        .map_err(serialise_failure)?;
    end[1] = b',';
    body.push(end);

    if let Some((cache, session)) = session {
        cache.put(session, history);
    }
    Ok(body)
}

/// The model named on the wire: the configured one, else the default.
fn wire_model(request: &GenerateRequest) -> &str {
    let model = &request.config.config().model;
    if model.is_empty() {
        DEFAULT_MODEL
    } else {
        model.as_str()
    }
}

/// The body's fields after `messages`.
fn body_tail<'a>(
    request: &'a GenerateRequest,
    quirks: &OpenAiQuirks,
    mode: ThinkingMode,
    tools: Option<&'a RawValue>,
) -> BodyTail<'a> {
    let config = request.config.config();
    let (thinking, reasoning_effort) = match mode {
        ThinkingMode::Disabled => (Some(Thinking { kind: "disabled" }), None),
        ThinkingMode::Enabled(effort) => (Some(Thinking { kind: "enabled" }), effort),
        ThinkingMode::Unspecified => (None, None),
    };
    let max_tokens = config.max_tokens;
    BodyTail {
        stream: true,
        stream_options: quirks.send_stream_options.then_some(StreamOptions {
            include_usage: true,
        }),
        thinking: thinking.filter(|_| quirks.send_thinking),
        reasoning_effort: reasoning_effort.filter(|_| quirks.send_reasoning_effort),
        tools,
        temperature: config.temperature.filter(|t| t.is_finite()),
        max_tokens: max_tokens.filter(|_| quirks.max_tokens_field == MaxTokensField::MaxTokens),
        max_completion_tokens: max_tokens
            .filter(|_| quirks.max_tokens_field == MaxTokensField::MaxCompletionTokens),
        stop: config.stop.as_deref().filter(|stop| !stop.is_empty()),
    }
}

fn serialise_failure(err: serde_json::Error) -> Failure {
    Failure::new(
        FailureCode::InvalidRequest,
        format!("could not serialise the chat-completions request: {err}"),
    )
}

/// What, besides the messages themselves, decides their wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HistoryShape {
    thinking_on: bool,
    send_reasoning: bool,
}

/// The history of one request as wire bytes: each wire message preceded by a comma, ready to
/// follow the system message in the `messages` array.
pub(crate) struct SerializedHistory {
    shape: HistoryShape,
    /// The wire messages written, each comma first, without the user message that carries the
    /// images of trailing tool results (kept apart in `trailing_images`). A cut follows each
    /// history message after which no tool-result image waits to be sent.
    written: WrittenHistory,
    /// The user message that carries the images of the history's last tool results (comma
    /// first), or nothing.
    trailing_images: Vec<u8>,
    /// The `tools` array last written, for the steps that send the same list.
    tools: KeptTools,
}

impl SerializedHistory {
    fn new(shape: HistoryShape) -> Self {
        SerializedHistory {
            shape,
            written: WrittenHistory::default(),
            trailing_images: Vec::new(),
            tools: KeptTools::default(),
        }
    }

    /// Makes the bytes those of `messages`: what the last request of the same lineage wrote is
    /// kept up to the last cut among the messages still shared ([`WrittenHistory::rewind`]),
    /// and the rest is written.
    fn extend_to(
        &mut self,
        messages: &[Message],
        lineage: Option<HistoryLineage>,
    ) -> serde_json::Result<()> {
        let from = self.written.rewind(messages, lineage);
        self.trailing_images.clear();

        let mut waiting_images = Vec::new();
        let mut wire = Vec::new();
        for (index, message) in messages.iter().enumerate().skip(from) {
            push_message(
                &mut wire,
                &mut waiting_images,
                message,
                self.shape.thinking_on,
                self.shape.send_reasoning,
            );
            for wire_message in wire.drain(..) {
                let bytes = &mut *self.written.bytes;
                bytes.push(b',');
                serde_json::to_writer(bytes, &wire_message)?;
            }
            self.written.wrote(message);
            if waiting_images.is_empty() {
                self.written.cut(index + 1, index + 1);
            }
        }
        flush_tool_images(&mut wire, &mut waiting_images);
        for wire_message in wire.drain(..) {
            self.trailing_images.push(b',');
            serde_json::to_writer(&mut self.trailing_images, &wire_message)?;
        }
        Ok(())
    }
}

/// The wire form of `tools`, in their order.
fn wire_tools(tools: &[ToolSchema]) -> Vec<WireTool<'_>> {
    tools
        .iter()
        .map(|tool| WireTool {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        })
        .collect()
}

/// The serialized history of each session's last request, so that the next request of a
/// session writes only its new messages (docs/providers.md, "The history bytes cache").
///
/// Every request resends the whole conversation; near the context window that is megabytes of
/// JSON escaping per step, most of it the same bytes as the step before.
pub(crate) type HistoryBytes = dsh_llm::PerSession<SerializedHistory>;

/// The image parts of a tool result's content.
fn content_images<'a>(content: &'a [ContentBlock]) -> impl Iterator<Item = Part<'a>> + 'a {
    content.iter().filter_map(|block| match block {
        ContentBlock::Image { attachment } => Some(image_url(attachment)),
        _ => None,
    })
}

/// Joins the text blocks of `blocks` with `separator`, borrowing when there is only one.
fn joined_text<'a>(blocks: &'a [ContentBlock], separator: &str) -> Cow<'a, str> {
    let mut texts = blocks.iter().filter_map(|block| match block {
        ContentBlock::Text { text } => Some(text.as_str()),
        _ => None,
    });
    let Some(first) = texts.next() else {
        return Cow::Borrowed("");
    };
    let Some(second) = texts.next() else {
        return Cow::Borrowed(first);
    };
    let mut out = String::with_capacity(first.len() + second.len() + separator.len());
    out.push_str(first);
    out.push_str(separator);
    out.push_str(second);
    for text in texts {
        out.push_str(separator);
        out.push_str(text);
    }
    Cow::Owned(out)
}

fn push_message<'a>(
    out: &mut Vec<WireMessage<'a>>,
    tool_images: &mut Vec<Part<'a>>,
    message: &'a Message,
    thinking_on: bool,
    send_reasoning: bool,
) {
    let only_tool_results = message
        .content
        .iter()
        .all(|b| matches!(b, ContentBlock::ToolResult { .. }));
    if !(message.role == Role::User && only_tool_results) {
        flush_tool_images(out, tool_images);
    }
    match message.role {
        Role::System => {
            let content = joined_text(&message.content, USER_TEXT_SEPARATOR);
            if !content.is_empty() {
                out.push(WireMessage::System { content });
            }
        }
        Role::User => {
            for block in &message.content {
                if let ContentBlock::ToolResult {
                    tool_call_id,
                    content: blocks,
                    ..
                } = block
                {
                    let text = joined_text(blocks, USER_TEXT_SEPARATOR);
                    let content = if text.is_empty() {
                        Cow::Borrowed(EMPTY_TOOL_OUTPUT_PLACEHOLDER)
                    } else {
                        text
                    };
                    out.push(WireMessage::Tool {
                        tool_call_id,
                        content,
                    });
                    tool_images.extend(content_images(blocks));
                }
            }
            if message
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::Image { .. }))
            {
                flush_tool_images(out, tool_images);
                out.push(WireMessage::User {
                    content: UserContent::Parts(user_parts(&message.content)),
                });
                return;
            }
            let text = joined_text(&message.content, USER_TEXT_SEPARATOR);
            if !text.is_empty() {
                flush_tool_images(out, tool_images);
                out.push(WireMessage::User {
                    content: UserContent::Text(text),
                });
            }
        }
        Role::Assistant => {
            // Text and reasoning of one reply are concatenated without separator: several blocks
            // of one kind are pieces of one stream.
            let content = joined_text(&message.content, "");
            let mut reasoning: Option<Cow<'a, str>> = None;
            let mut tool_calls = Vec::new();
            for block in &message.content {
                match block {
                    ContentBlock::Reasoning { text, .. } => {
                        reasoning = Some(match reasoning.take() {
                            None => Cow::Borrowed(text.as_str()),
                            Some(previous) => Cow::Owned(previous.into_owned() + text),
                        });
                    }
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => tool_calls.push(WireToolCall {
                        id,
                        kind: "function",
                        function: WireCallFunction { name, arguments },
                    }),
                    _ => {}
                }
            }
            if reasoning.is_none() && thinking_on && !tool_calls.is_empty() {
                reasoning = Some(Cow::Borrowed(""));
            }
            if !send_reasoning {
                reasoning = None;
            }
            out.push(WireMessage::Assistant {
                content,
                reasoning_content: reasoning,
                tool_calls,
            });
        }
    }
}

#[cfg(test)]
mod tests;
