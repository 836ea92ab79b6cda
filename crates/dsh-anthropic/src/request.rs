//! Request translation (docs/providers.md, "Anthropic Messages"): a [`GenerateRequest`] becomes a
//! Messages API body.
//!
//! The body is serialised from borrowed structs, so the history is not copied on the way out;
//! tool-call arguments are embedded as raw JSON, byte for byte as the model produced them.

use std::borrow::Cow;

use dsh_http::RequestBody;
use dsh_llm::{
    ContentBlock, Failure, FailureCode, GenerateRequest, HistoryLineage, KeptTools, Message,
    Purpose, ReasoningEffort, Role, SharedBytes, ToolSchema, WrittenHistory,
};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::ThinkingBudgets;
use crate::models::GENERIC_DEFAULT_MAX_TOKENS;

/// Text sent as a `tool_result`'s content when the tool produced no output.
pub const EMPTY_TOOL_OUTPUT_PLACEHOLDER: &str = "(no output)";

/// The smallest thinking budget the API accepts; a request whose `max_tokens` leaves less
/// room than this runs without thinking.
pub const MIN_THINKING_BUDGET: u64 = 1_024;

/// Separator between the text blocks of one tool result.
const TEXT_SEPARATOR: &str = "\n\n";

/// The whole body in one serde pass: the plain path, and what the cached path must equal byte
/// for byte (its fields are [`BodyHead`]'s, `messages`, then [`BodyTail`]'s).
#[derive(Serialize)]
struct Body<'a> {
    #[serde(flatten)]
    head: BodyHead<'a>,
    messages: Vec<WireMessage<'a>>,
    #[serde(flatten)]
    tail: BodyTail<'a>,
}

/// The body's fields before `messages`, in wire order.
#[derive(Serialize)]
struct BodyHead<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<WireBlock<'a>>,
}

/// The body's fields after `messages`, in wire order.
#[derive(Serialize)]
struct BodyTail<'a> {
    /// The `tools` array as [`wire_tools`] writes it (kept across steps in [`KeptTools`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<&'a [String]>,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u64,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireBlock<'a> {
    Known {
        #[serde(flatten)]
        kind: BlockKind<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A provider block dsh does not model (e.g. `redacted_thinking`), sent back verbatim.
    Raw(&'a Value),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockKind<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    Image {
        source: ImageSource<'a>,
    },
}

/// A `tool_result`'s content: a string, or blocks when the result holds an image.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<BlockKind<'a>>),
}

/// An image's `source`: always base64 (docs/providers.md, "Images").
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: String,
}

fn image_kind(attachment: &dsh_llm::ImageAttachment) -> BlockKind<'_> {
    BlockKind::Image {
        source: ImageSource {
            kind: "base64",
            media_type: &attachment.media_type,
            // check_images_loaded ran before the body is built: every image has its bytes.
            data: attachment.base64().unwrap_or_default(),
        },
    }
}

impl<'a> WireBlock<'a> {
    fn known(kind: BlockKind<'a>) -> Self {
        WireBlock::Known {
            kind,
            cache_control: None,
        }
    }

    /// Thinking blocks cannot carry a cache breakpoint; everything else can.
    fn cacheable(&self) -> bool {
        matches!(self, WireBlock::Known { kind, .. } if !matches!(kind, BlockKind::Thinking { .. }))
    }

    fn set_breakpoint(&mut self) {
        if let WireBlock::Known { cache_control, .. } = self {
            *cache_control = Some(EPHEMERAL);
        }
    }
}

/// Provider block types that are replayed verbatim from [`ContentBlock::Unknown`] in assistant
/// messages.
const PASSTHROUGH_TYPES: &[&str] = &["redacted_thinking"];

/// The thinking budget for `request`, or `None` when thinking is off: no effort or `off`, a
/// session-title call, or `max_tokens` too small to leave [`MIN_THINKING_BUDGET`].
fn thinking_budget(
    request: &GenerateRequest,
    max_tokens: u64,
    budgets: &ThinkingBudgets,
) -> Option<u64> {
    if request.purpose == Some(Purpose::SessionTitle) {
        return None;
    }
    let wanted = match request.config.config().reasoning_effort? {
        ReasoningEffort::Off => return None,
        ReasoningEffort::Low => budgets.low,
        ReasoningEffort::Medium => budgets.medium,
        ReasoningEffort::High => budgets.high,
        ReasoningEffort::Max => budgets.max,
    };
    let ceiling = max_tokens.checked_sub(1)?;
    if ceiling < MIN_THINKING_BUDGET {
        return None;
    }
    Some(wanted.clamp(MIN_THINKING_BUDGET, ceiling))
}

/// Serialises `request` as the JSON body of `POST {base}/v1/messages`.
///
/// Contract (docs/providers.md, "Anthropic Messages"): `model`; `max_tokens` (the prepared value,
/// else 32,000: the API requires it); `system` as one text block; `messages` with consecutive
/// same-role messages merged (tool results first within a user turn); `tools` with `input_schema`;
/// `stream: true`; `thinking: {type: enabled, budget_tokens}` from the effort (see
/// [`ThinkingBudgets`]; `off`, no effort and the session-title purpose send none); `temperature`
/// only without thinking (the API rejects it with thinking on); `stop_sequences` when set. Two
/// `cache_control` breakpoints mark the stable prefix: the end of system+tools (the system block,
/// or the last tool when there is no system prompt) and the last cacheable block of the last
/// message. Assistant reasoning with a signature becomes a `thinking` block with that signature
/// byte for byte; reasoning without one (from another provider) is dropped, since the API rejects
/// unsigned thinking. Tool calls become `tool_use` with the raw argument JSON (empty arguments are
/// `{}`; arguments that are not a JSON object are sent as `{}` because the API accepts nothing
/// else). System-role history messages are sent as user text. Empty text is skipped, and a message
/// left without blocks is dropped.
pub fn build_request_body(
    request: &GenerateRequest,
    budgets: &ThinkingBudgets,
) -> Result<Vec<u8>, Failure> {
    let (head, mut tail) = body_parts(request, budgets)?;
    dsh_llm::check_images_loaded(&request.messages)?;
    let mut tools = KeptTools::default();
    tail.tools = tools_json(&mut tools, request)?;
    let body = Body {
        head,
        messages: wire_messages(&request.messages),
        tail,
    };
    serde_json::to_vec(&body).map_err(serialise_failure)
}

/// [`build_request_body`], reusing the bytes of the history messages that `cache` holds from
/// the same session's last request (see [`HistoryBytes`]). The body is byte for byte the one
/// [`build_request_body`] builds; the history's bytes go in it uncopied. A call with a purpose
/// (a title), without a session id or without a history lineage takes the plain path and leaves
/// the cache as it was.
pub(crate) fn build_request_body_cached(
    request: &GenerateRequest,
    budgets: &ThinkingBudgets,
    cache: &HistoryBytes,
) -> Result<RequestBody, Failure> {
    let (Some(session), None, Some(lineage)) = (
        request.session_id.as_deref(),
        request.purpose,
        request.history_lineage,
    ) else {
        return build_request_body(request, budgets).map(RequestBody::from);
    };
    let (head, mut tail) = body_parts(request, budgets)?;
    dsh_llm::check_images_loaded(&request.messages)?;
    let mut history = cache.take(session, |_| true).unwrap_or_default();
    history
        .extend_to(&request.messages, Some(lineage))
        .map_err(serialise_failure)?;
    // The next request writes its open message anew: it goes to this body as it is.
    let open = std::mem::take(&mut history.open);
    tail.tools = tools_json(&mut history.tools, request)?;
    let body = splice_body(&head, &history.written.bytes, open, &tail)?;
    cache.put(session, history);
    Ok(body)
}

/// The body as `head`, the `messages` array (the history's closed wire messages, uncopied, then
/// its `open` last one) and `tail`: what serialising one [`Body`] gives, since compact JSON has
/// no whitespace to differ in and [`Body`]'s fields are `head`'s, then `messages`, then `tail`'s.
fn splice_body(
    head: &BodyHead<'_>,
    closed: &SharedBytes,
    open: Vec<u8>,
    tail: &BodyTail<'_>,
) -> Result<RequestBody, Failure> {
    let mut head = serde_json::to_vec(head).map_err(serialise_failure)?;
    let mut end = b"]".to_vec();
    serde_json::to_writer(&mut end, tail).map_err(serialise_failure)?;
    // `head` always holds `model` and `tail` always holds `stream`: both are non-empty objects
    // whose fields continue each other around `messages`.
    if !(head.len() > 2 && head.ends_with(b"}") && end.len() > 3 && end[1] == b'{') {
        return Err(Failure::new(
            FailureCode::InvalidRequest,
            "could not assemble the Messages request: a part of the body is not a JSON object \
             with fields (a bug in dsh; please report it)",
        ));
    }
    head.pop();
    head.extend_from_slice(b",\"messages\":[");
    end[1] = b',';
    let mut body = RequestBody::new();
    body.push(head);
    body.push_elements(false, closed, open);
    body.push(end);
    Ok(body)
}

/// The body's fields before `messages` and after it, from the request's settings.
fn body_parts<'a>(
    request: &'a GenerateRequest,
    budgets: &ThinkingBudgets,
) -> Result<(BodyHead<'a>, BodyTail<'a>), Failure> {
    let config = request.config.config();
    if config.model.trim().is_empty() {
        return Err(Failure::new(
            FailureCode::InvalidRequest,
            "no model named for the Anthropic provider: set a model in the configuration or pass --model",
        ));
    }
    let max_tokens = config.max_tokens.unwrap_or(GENERIC_DEFAULT_MAX_TOKENS);
    let budget = thinking_budget(request, max_tokens, budgets);

    let mut system = Vec::new();
    if !request.system.is_empty() {
        system.push(WireBlock::known(BlockKind::Text {
            text: Cow::Borrowed(request.system.as_str()),
        }));
    }
    // Prefix order on the wire is tools, then system: a breakpoint on the system block caches
    // both; without a system prompt the last tool ends the prefix (`tools_json`).
    if let Some(block) = system.last_mut() {
        block.set_breakpoint();
    }
    let head = BodyHead {
        model: &config.model,
        max_tokens,
        system,
    };
    let tail = BodyTail {
        tools: None,
        stream: true,
        thinking: budget.map(|budget_tokens| Thinking {
            kind: "enabled",
            budget_tokens,
        }),
        temperature: config
            .temperature
            .filter(|t| t.is_finite() && budget.is_none()),
        stop_sequences: config.stop.as_deref().filter(|stop| !stop.is_empty()),
    };
    Ok((head, tail))
}

/// The `tools` array of `request` (`None` when it has none), as `kept` holds it when it was
/// written for the same list, else written now. Without a system prompt the last tool carries
/// the breakpoint that ends the stable prefix.
fn tools_json<'a>(
    kept: &'a mut KeptTools,
    request: &'a GenerateRequest,
) -> Result<Option<&'a RawValue>, Failure> {
    let last_ends_prefix = request.system.is_empty();
    kept.json(&request.tools, last_ends_prefix, |tools| {
        wire_tools(tools, last_ends_prefix)
    })
    .map_err(serialise_failure)
}

/// The wire form of `tools`, in their order; with `last_ends_prefix` the last one carries a
/// cache breakpoint.
fn wire_tools(tools: &[ToolSchema], last_ends_prefix: bool) -> Vec<WireTool<'_>> {
    let mut wire: Vec<WireTool<'_>> = tools
        .iter()
        .map(|tool| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
            cache_control: None,
        })
        .collect();
    if let Some(tool) = wire.last_mut().filter(|_| last_ends_prefix) {
        tool.cache_control = Some(EPHEMERAL);
    }
    wire
}

/// The wire messages of `messages`, with the breakpoint on the last one.
fn wire_messages(messages: &[Message]) -> Vec<WireMessage<'_>> {
    let mut out: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        push_message(&mut out, message);
    }
    set_last_breakpoint(&mut out);
    out
}

/// Puts the moving breakpoint on the last cacheable block of the last wire message.
fn set_last_breakpoint(messages: &mut [WireMessage<'_>]) {
    if let Some(block) = messages
        .last_mut()
        .and_then(|m| m.content.iter_mut().rev().find(|b| b.cacheable()))
    {
        block.set_breakpoint();
    }
}

fn serialise_failure(err: serde_json::Error) -> Failure {
    Failure::new(
        FailureCode::InvalidRequest,
        format!("could not serialise the Messages request: {err}"),
    )
}

/// The history of one request as wire bytes, each wire message preceded by a comma.
///
/// Two things keep a wire message's bytes from being final when its history message is
/// written: the next history message of the same role merges into it (a user turn's tool
/// results even go before its other blocks), and the last wire message carries the moving
/// `cache_control` breakpoint. So `bytes` holds only closed wire messages: those followed by a
/// wire message of the other role. The last wire message is written again on every request,
/// into `open`.
#[derive(Default)]
pub(crate) struct SerializedHistory {
    /// The closed wire messages. A cut is at each history message that began a new wire message
    /// after other wire messages: writing can start again from it, but a longer history may use
    /// it only when it holds that message too, since that message is what closed the wire
    /// message before it.
    written: WrittenHistory,
    /// The last wire message, breakpoint included (comma first), or nothing.
    open: Vec<u8>,
    /// The `tools` array last written, for the steps that send the same list.
    tools: KeptTools,
}

impl SerializedHistory {
    /// Makes the bytes those of `messages`: what the last request of the same lineage wrote is
    /// kept up to the last cut among the messages still shared ([`WrittenHistory::rewind`]),
    /// and the rest is written.
    fn extend_to(
        &mut self,
        messages: &[Message],
        lineage: Option<HistoryLineage>,
    ) -> serde_json::Result<()> {
        let from = self.written.rewind(messages, lineage);
        self.open.clear();

        // At most one wire message is open: a history message merges into it or begins the
        // next one, which closes it.
        let mut open: Vec<WireMessage<'_>> = Vec::with_capacity(2);
        for (index, message) in messages.iter().enumerate().skip(from) {
            let before = open.len();
            push_message(&mut open, message);
            if before > 0 && open.len() > before {
                for closed in open.drain(..before) {
                    let bytes = &mut *self.written.bytes;
                    bytes.push(b',');
                    serde_json::to_writer(bytes, &closed)?;
                }
                self.written.cut(index, index + 1);
            }
            self.written.wrote(message);
        }
        set_last_breakpoint(&mut open);
        for last in &open {
            self.open.push(b',');
            serde_json::to_writer(&mut self.open, last)?;
        }
        Ok(())
    }
}

/// The serialised history of each session's last request, so that the next request of a
/// session writes only its new messages (docs/providers.md, "Anthropic Messages").
///
/// Every request resends the whole conversation; near the context window that is megabytes of
/// JSON escaping (and base64 images) per step, most of it the same bytes as the step before.
/// Nothing but the messages decides their wire form (the breakpoint of the last one is written
/// fresh), so an entry of the session is always usable.
pub(crate) type HistoryBytes = dsh_llm::PerSession<SerializedHistory>;

fn joined_text<'a>(blocks: &'a [ContentBlock]) -> Cow<'a, str> {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    match texts.as_slice() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(one),
        many => Cow::Owned(many.join(TEXT_SEPARATOR)),
    }
}

/// The `input` object of a `tool_use` block: the raw arguments when they are a JSON object,
/// else `{}`.
fn tool_input(arguments: &str) -> ToolInput<'_> {
    let trimmed = arguments.trim();
    if trimmed.starts_with('{') {
        if let Ok(raw) = serde_json::from_str::<&RawValue>(arguments) {
            return ToolInput::Raw(raw);
        }
    }
    ToolInput::Empty
}

/// The `input` object of a `tool_use` block as it is sent.
enum ToolInput<'a> {
    /// The call's arguments, a JSON object, sent byte for byte.
    Raw(&'a RawValue),
    /// `{}`: the arguments were empty or not a JSON object.
    Empty,
}

impl Serialize for ToolInput<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Raw(raw) => raw.serialize(serializer),
            Self::Empty => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

fn push_message<'a>(out: &mut Vec<WireMessage<'a>>, message: &'a Message) {
    let (role, blocks) = match message.role {
        Role::Assistant => ("assistant", assistant_blocks(message)),
        Role::User | Role::System => ("user", user_blocks(message)),
    };
    if blocks.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.role == role => {
            if role == "user" {
                // Tool results must lead their user turn.
                let results = blocks.iter().take_while(|b| is_tool_result(b)).count();
                let insert_at = last
                    .content
                    .iter()
                    .take_while(|b| is_tool_result(b))
                    .count();
                let mut blocks = blocks;
                let rest = blocks.split_off(results);
                last.content.splice(insert_at..insert_at, blocks);
                last.content.extend(rest);
            } else {
                last.content.extend(blocks);
            }
        }
        _ => out.push(WireMessage {
            role,
            content: blocks,
        }),
    }
}

fn is_tool_result(block: &WireBlock<'_>) -> bool {
    matches!(
        block,
        WireBlock::Known {
            kind: BlockKind::ToolResult { .. },
            ..
        }
    )
}

fn user_blocks(message: &Message) -> Vec<WireBlock<'_>> {
    let mut results = Vec::new();
    let mut others = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let content = if dsh_llm::content_has_image(content) {
                    // Text and images in order; Messages takes images inside a tool result.
                    ResultContent::Blocks(
                        content
                            .iter()
                            .filter_map(|block| match block {
                                ContentBlock::Text { text } if !text.is_empty() => {
                                    Some(BlockKind::Text {
                                        text: Cow::Borrowed(text),
                                    })
                                }
                                ContentBlock::Image { attachment } => Some(image_kind(attachment)),
                                _ => None,
                            })
                            .collect(),
                    )
                } else {
                    let text = joined_text(content);
                    ResultContent::Text(if text.is_empty() {
                        Cow::Borrowed(EMPTY_TOOL_OUTPUT_PLACEHOLDER)
                    } else {
                        text
                    })
                };
                results.push(WireBlock::known(BlockKind::ToolResult {
                    tool_use_id: tool_call_id,
                    content,
                    is_error: is_error.filter(|e| *e),
                }));
            }
            ContentBlock::Image { attachment } => {
                others.push(WireBlock::known(image_kind(attachment)));
            }
            ContentBlock::Text { text } if !text.is_empty() => {
                others.push(WireBlock::known(BlockKind::Text {
                    text: Cow::Borrowed(text),
                }));
            }
            _ => {}
        }
    }
    results.extend(others);
    results
}

fn assistant_blocks(message: &Message) -> Vec<WireBlock<'_>> {
    let mut out = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Reasoning {
                text,
                signature: Some(signature),
            } => out.push(WireBlock::known(BlockKind::Thinking {
                thinking: text,
                signature,
            })),
            ContentBlock::Text { text } if !text.is_empty() => {
                out.push(WireBlock::known(BlockKind::Text {
                    text: Cow::Borrowed(text),
                }))
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => out.push(WireBlock::known(BlockKind::ToolUse {
                id,
                name,
                input: tool_input(arguments),
            })),
            ContentBlock::Unknown(value)
                if value
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| PASSTHROUGH_TYPES.contains(&t)) =>
            {
                out.push(WireBlock::Raw(value))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
