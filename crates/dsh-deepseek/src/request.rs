//! Request translation (docs/providers.md, "Chat completions"): a [`GenerateRequest`] becomes a
//! chat-completions body.
//!
//! The body is serialised from borrowed structs, so the history is not copied on the way out.
//! Absent values are omitted, never sent as `null`.

use std::borrow::Cow;

use dsh_llm::{
    ContentBlock, Failure, FailureCode, GenerateRequest, Message, Purpose, ReasoningEffort, Role,
};
use serde::Serialize;

use crate::config::{MaxTokensField, OpenAiQuirks};
use crate::models::{model_spec, DEFAULT_MODEL};

/// Text sent as a tool message's `content` when the tool produced no output: the provider
/// rejects or misreads empty tool messages.
pub const EMPTY_TOOL_OUTPUT_PLACEHOLDER: &str = "(no output)";

/// Separator between the text blocks of one user or system message.
const USER_TEXT_SEPARATOR: &str = "\n\n";

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
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
        content: Cow<'a, str>,
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
    let config = request.config.config();
    let model = if config.model.is_empty() {
        DEFAULT_MODEL
    } else {
        config.model.as_str()
    };
    let mode = thinking_mode(request, model);
    let thinking_on = matches!(mode, ThinkingMode::Enabled(_));

    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(WireMessage::System {
            content: Cow::Borrowed(request.system.as_str()),
        });
    }
    for message in request.messages.iter() {
        push_message(
            &mut messages,
            message,
            thinking_on,
            quirks.send_reasoning_content,
        );
    }

    let tools = request
        .tools
        .iter()
        .map(|tool| WireTool {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        })
        .collect();

    let (thinking, reasoning_effort) = match mode {
        ThinkingMode::Disabled => (Some(Thinking { kind: "disabled" }), None),
        ThinkingMode::Enabled(effort) => (Some(Thinking { kind: "enabled" }), effort),
        ThinkingMode::Unspecified => (None, None),
    };

    let max_tokens = config.max_tokens;
    let body = Body {
        model,
        messages,
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
    };
    serde_json::to_vec(&body).map_err(|err| {
        Failure::new(
            FailureCode::InvalidRequest,
            format!("could not serialise the chat-completions request: {err}"),
        )
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
    message: &'a Message,
    thinking_on: bool,
    send_reasoning: bool,
) {
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
                    content,
                    ..
                } = block
                {
                    let text = joined_text(content, USER_TEXT_SEPARATOR);
                    let content = if text.is_empty() {
                        Cow::Borrowed(EMPTY_TOOL_OUTPUT_PLACEHOLDER)
                    } else {
                        text
                    };
                    out.push(WireMessage::Tool {
                        tool_call_id,
                        content,
                    });
                }
            }
            let text = joined_text(&message.content, USER_TEXT_SEPARATOR);
            if !text.is_empty() {
                out.push(WireMessage::User { content: text });
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
