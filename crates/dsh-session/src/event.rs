//! The event vocabulary of the session log (docs/sessions.md, "Event types"), with dsh's type names
//! and field names.
//!
//! Each variant of [`Event`] is one `type` string; its payload is the line's `data` object.
//! Event types that dsh writes but that never reach a model (hooks, approvals, title requests)
//! are *known and opaque*: they load as [`Event::Opaque`] and are written back unchanged. The
//! rest of dsh's persistence catalog, the types this build has no feature for (slash
//! commands, teams, workflows, ...), load as [`Event::DshOnly`] with their data kept byte for
//! byte (docs/sessions.md, "dsh-only events").

use std::sync::Arc;

use dsh_llm::{Chunk, Failure, Message, PreparedCallConfig, ToolSchema, Usage};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Error code of a crash-repair tool result for a call whose body never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// Error code of a crash-repair tool result for a call whose body started (or may have started)
/// but whose outcome was never logged: the tool's side effects may or may not have happened.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";

/// `tool/progress {callId, progress, total?, message?}`: how far a long tool call has come (an
/// MCP server's `notifications/progress`), at most a few a second per call. Ours, written
/// `"ignorable": true`, never model-visible; front ends show it on the call's card.
pub const TOOL_PROGRESS_EVENT: &str = "tool/progress";

/// Event types dsh writes that are known but carry nothing model-visible. They load as
/// [`Event::Opaque`] without needing `ignorable: true`.
pub const KNOWN_OPAQUE_TYPES: &[&str] = &[
    "hook/invoked",
    "hook/result",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "permission/preset",
    "sandbox/mode",
    "session/title-llm-request",
    "compaction/start",
    "compaction/summary",
    "compaction/end",
    // Written by `web_search` before each auxiliary search request (docs/tools.md, "web_search").
    "web/deepseek-search-llm-request",
    // Plan mode on/off (`dsh_agent::PlanMode`, docs/agent.md, "Plan mode").
    "plan/mode",
];

/// `user/command {name, messageId, origin, model?, tools?}`: a custom slash command queued a
/// message (`dsh_agent` turn settings, docs/commands.md). Ours, not in dsh's catalog: written
/// `"ignorable": true`, read back as [`Event::Opaque`].
pub const USER_COMMAND_EVENT: &str = "user/command";

/// `workspace/checkpoint {turn, at, tree?, files?, large?, error?}`: the workspace's files were
/// checkpointed at the start or end of a turn, or after a rewind restored them (`at`: `start`,
/// `end`, `rewind`; docs/rewind.md). Ours, not in dsh's catalog: written `"ignorable": true`,
/// read back as [`Event::Opaque`], never model-visible.
pub const WORKSPACE_CHECKPOINT_EVENT: &str = "workspace/checkpoint";

/// `review/findings {reviewSession, target, focus, summary, findings, requests, costUsd}`: the
/// TUI's `/review` put a read-only review's findings into this session (docs/review.md). Ours,
/// not in dsh's catalog: written `"ignorable": true`, read back as [`Event::Opaque`]. Not
/// model-visible: the model reads the findings in a queued `user/message` with a plugin
/// source (`dsh`, form `review/findings`).
pub const REVIEW_FINDINGS_EVENT: &str = "review/findings";

/// Event types of dsh's persistence catalog (dsh 0.1.1-rc.2) that this build has no feature
/// for. They load as [`Event::DshOnly`], never reach the model, and are written back with their
/// data unchanged (docs/sessions.md, "dsh-only events"). Every other catalog type is decoded
/// ([`Event`]'s typed variants) or in [`KNOWN_OPAQUE_TYPES`].
pub const DSH_ONLY_TYPES: &[&str] = &[
    "agent-preset/selected",
    "command/done",
    "command/run",
    "compaction/prune",
    "feedback/record",
    "schedule/change",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
];

/// An event of dsh's persistence catalog that this build has no feature for (see
/// [`DSH_ONLY_TYPES`]): its type and its `data` exactly as read, so fork, export and the
/// SQLite store write the same bytes back.
#[derive(Debug, Clone)]
pub struct DshOnlyEvent {
    event_type: String,
    data: Box<RawValue>,
}

impl DshOnlyEvent {
    /// Keeps `data` (a JSON text) of an event of type `event_type` verbatim. Fails when `data`
    /// is not one JSON value.
    pub fn new(event_type: impl Into<String>, data: &str) -> Result<Self, serde_json::Error> {
        Ok(DshOnlyEvent {
            event_type: event_type.into(),
            data: RawValue::from_string(data.to_string())?,
        })
    }

    /// The event type (one of [`DSH_ONLY_TYPES`]).
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The `data` JSON text, byte for byte as read.
    pub fn raw_data(&self) -> &str {
        self.data.get()
    }

    /// The `data` parsed (`Value::Null` cannot fail to parse: the text was checked on read).
    pub fn data(&self) -> Value {
        serde_json::from_str(self.data.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for DshOnlyEvent {
    fn eq(&self, other: &Self) -> bool {
        self.event_type == other.event_type && self.data.get() == other.data.get()
    }
}

/// True when `event_type` is a type this build reads: a typed variant of [`Event`], one of
/// [`KNOWN_OPAQUE_TYPES`] or of [`DSH_ONLY_TYPES`]. Packed rows (`text-chunks`, ...) are read
/// too but are not event types.
pub fn is_known_type(event_type: &str) -> bool {
    TYPED_TYPES.contains(&event_type)
        || KNOWN_OPAQUE_TYPES.contains(&event_type)
        || DSH_ONLY_TYPES.contains(&event_type)
}

/// The types [`Event`] decodes into typed variants.
const TYPED_TYPES: &[&str] = &[
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/started",
    "tool/result",
    "request/header",
    "request/context",
    "llm/retry",
    "llm/retry-started",
    "session/title",
    "goal/change",
    "agent/inbox/spliced",
    "todo/write",
    "session/end-seed",
];

fn is_false(value: &bool) -> bool {
    !*value
}

/// `turn/start {turn}`. Turns are numbered from 1 and keep counting across resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The turn number.
    pub turn: u64,
}

/// `step/start {turn, step}` and `step/end {turn, step}`. Steps are numbered from 1 per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRef {
    /// The turn number.
    pub turn: u64,
    /// The step number inside the turn.
    pub step: u64,
}

/// Why a user abort happened (`{kind: user}`, `{kind: parent}`, ...). Other fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbortCause {
    /// Who aborted: `user`, `parent`, `api`, ...
    pub kind: String,
    /// Fields this build does not interpret, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Why a turn ended (`turn/end.reason`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnEndReason {
    /// Nothing more was owed.
    Completed,
    /// Cancelled. dsh writes the cause as `reason`; `cause` is read too (docs/sessions.md, "Event
    /// types").
    Aborted {
        /// Who cancelled.
        #[serde(default, alias = "cause", skip_serializing_if = "Option::is_none")]
        reason: Option<AbortCause>,
    },
    /// A hook or policy blocked the turn.
    Blocked {
        /// A human-readable reason, when one was given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The model call failed and the retry policy gave up.
    Error {
        /// The failure.
        error: Failure,
    },
    /// The reply hit the output limit; its tool calls were dropped.
    MaxTokens,
    /// Written only by crash repair: the process died while the turn was open.
    Interrupted,
}

impl TurnEndReason {
    /// The wire `kind` string.
    pub fn kind(&self) -> &'static str {
        match self {
            TurnEndReason::Completed => "completed",
            TurnEndReason::Aborted { .. } => "aborted",
            TurnEndReason::Blocked { .. } => "blocked",
            TurnEndReason::Error { .. } => "error",
            TurnEndReason::MaxTokens => "max-tokens",
            TurnEndReason::Interrupted => "interrupted",
        }
    }
}

/// `turn/end {turn, reason}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn number.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
}

/// `assistant/chunk {turn, step, chunk}`: one streamed chunk of a model reply, as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The chunk.
    pub chunk: Chunk,
}

/// `assistant/message {turn, step, message, usage?, interrupted?}`: the reply of one successful
/// model call (or the partial reply saved on cancel, with `interrupted: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The assembled reply.
    pub message: Message,
    /// Token usage of the call, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// True for a partial reply saved after a cancel.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
}

/// `tool/call {turn, step, callId, name, arguments, presentation?}`: logged before anything
/// about the call runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The model's call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The raw argument string the model produced, verbatim.
    pub arguments: String,
    /// How front ends show the call, as the tool described it when the call was logged
    /// (`dsh_tools::ToolPresentation`, docs/tools.md, "Presentation"); absent in older logs
    /// and in dsh's, whose readers then ask the session's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presentation: Option<Value>,
}

/// `tool/started {turn, step, callId}`: written (and flushed) by this implementation right before
/// a tool body runs, so crash repair can tell `TOOL_NOT_STARTED` from `TOOL_OUTCOME_UNKNOWN`.
/// Always written with `ignorable: true`, so readers that do not know it skip it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStarted {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The call whose body is about to run.
    pub call_id: String,
}

/// The structured error of a failed tool call (`{name?, code}`, docs/agent.md, "Tool pipeline").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// The error code (`UNKNOWN_TOOL`, `INVALID_ARGS`, `TOOL_TIMEOUT`, `TOOL_NOT_STARTED`, ...).
    pub code: String,
    /// The tool name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `tool/result {turn, step, message, error?, meta?, summary?}`. The message is user-role with
/// one `tool-result` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The result message the model will see.
    pub message: Message,
    /// The structured error, for failed calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Tool-specific details for front ends (dsh writes e.g. file windows); never model-visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The tool's short summary of the result (`dsh_tools::ResultSummary`: `exit 1`, `3
    /// matches`), when it gave one; never model-visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Value>,
}

impl ToolResult {
    /// The call this result answers (from the message source, else from its first block).
    pub fn call_id(&self) -> Option<&str> {
        if let dsh_llm::MessageSource::Tool { call_id } = &self.message.source {
            return Some(call_id);
        }
        self.message.content.iter().find_map(|block| match block {
            dsh_llm::ContentBlock::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
    }
}

/// The tool list of a request header: the schemas, or what dsh's recordings store instead (a
/// placeholder string such as `{{tools}}`, a list of tool names, or nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(untagged)]
pub enum HeaderTools {
    /// The tool schemas, in request order: the list the request sent, shared, not a copy
    /// (the loop sends the same list at every step where its tools do not change).
    Schemas(Arc<Vec<ToolSchema>>),
    /// A stand-in string.
    Placeholder(String),
    /// Only the tool names (some of dsh's recordings).
    Names(Vec<String>),
    /// No `tools` field (some of dsh's recordings); written back without one.
    #[default]
    Absent,
}

impl HeaderTools {
    /// True for [`HeaderTools::Absent`].
    pub fn is_absent(&self) -> bool {
        matches!(self, HeaderTools::Absent)
    }
}

/// The request header (docs/model-calls.md, "Call config"): call config, system text and tool
/// schemas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    /// The prepared call config.
    pub config: PreparedCallConfig,
    /// The system prompt.
    pub system: String,
    /// The tool schemas.
    #[serde(default, skip_serializing_if = "HeaderTools::is_absent")]
    pub tools: HeaderTools,
}

/// Why a request header was logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeaderReason {
    /// First request of a new session's loop.
    Initial,
    /// First request after resuming an existing session.
    Resume,
    /// The header really changed.
    Change,
}

/// `request/header {header, reason}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeaderEvent {
    /// The header.
    pub header: RequestHeader,
    /// Why it was logged.
    pub reason: HeaderReason,
}

/// `request/context {provider, model}`: the route of the next request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestContext {
    /// The provider route.
    pub provider: String,
    /// The model.
    pub model: String,
}

/// `llm/retry {turn, step, retry, delayMs, failure, ...}`: logged before waiting to retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetry {
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The 1-based retry number.
    pub retry: u64,
    /// The wait before the retry, in milliseconds.
    pub delay_ms: u64,
    /// The failure that caused the retry.
    pub failure: Failure,
    /// Fields this build does not interpret (`retryId`, `provider`, `policyKey`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `llm/retry-started {retryId?, turn, step, retry}`: the wait is over and the retry begins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetryStarted {
    /// Correlates with [`LlmRetry`]'s `retryId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_id: Option<String>,
    /// The turn number.
    pub turn: u64,
    /// The step number.
    pub step: u64,
    /// The 1-based retry number.
    pub retry: u64,
}

/// `session/title {title, messageSeqs?, source?}`. The latest one is the session's title.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTitle {
    /// The title.
    pub title: String,
    /// Seqs of the messages the title was derived from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_seqs: Vec<u64>,
    /// How the title was made (`{kind: fallback}`, `{kind: llm}`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
}

/// `agent/inbox/spliced {target, start, removedCount?, inserted, outcome?}`: a change to one of
/// the durable inbox lists (docs/agent.md, "Inbox"). Not model-visible: claimed items reach the
/// model as `user/message` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxSplice {
    /// `next-turn` or `next-step`.
    pub target: String,
    /// Index of the splice in the list.
    pub start: u64,
    /// How many items were removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_count: Option<u64>,
    /// Items inserted at `start`.
    #[serde(default)]
    pub inserted: Vec<Message>,
    /// Why items were removed (`canceled`, ...), when not claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// One todo item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoItem {
    /// What to do.
    pub content: String,
    /// Its status: `pending`, `in_progress` or `completed` (kept as written, so a status a
    /// newer writer adds does not refuse the log).
    pub status: String,
    /// Fields this build does not interpret.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `todo/write {todos}`: the whole todo list after a `todo_write` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoWrite {
    /// The list, replacing the previous one.
    pub todos: Vec<TodoItem>,
}

/// `session/end-seed {inherited?}`: marks the end of the events a fork copied from its parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndSeed {
    /// True when the events before this one were inherited from `parentSession`.
    #[serde(default)]
    pub inherited: bool,
}

/// One event of the log. See the module docs for the opaque variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `turn/start`.
    TurnStart(TurnStart),
    /// `turn/end`.
    TurnEnd(TurnEnd),
    /// `step/start`.
    StepStart(StepRef),
    /// `step/end`.
    StepEnd(StepRef),
    /// `user/message` (the data is the message itself).
    UserMessage(Message),
    /// `assistant/chunk`.
    AssistantChunk(AssistantChunk),
    /// `assistant/message`.
    AssistantMessage(AssistantMessage),
    /// `tool/call`.
    ToolCall(ToolCall),
    /// `tool/started` (this implementation's addition; see [`ToolStarted`]).
    ToolStarted(ToolStarted),
    /// `tool/result`.
    ToolResult(ToolResult),
    /// `request/header`.
    RequestHeader(RequestHeaderEvent),
    /// `request/context`.
    RequestContext(RequestContext),
    /// `llm/retry`.
    LlmRetry(LlmRetry),
    /// `llm/retry-started`.
    LlmRetryStarted(LlmRetryStarted),
    /// `session/title`.
    SessionTitle(SessionTitle),
    /// `agent/inbox/spliced`.
    InboxSpliced(InboxSplice),
    /// `todo/write`.
    TodoWrite(TodoWrite),
    /// `session/end-seed`.
    EndSeed(EndSeed),
    /// `goal/change` (docs/goals.md): the session's goal after a mutation, in dsh's shape.
    GoalChange(crate::GoalChange),
    /// A type of dsh's persistence catalog this build has no feature for (see
    /// [`DSH_ONLY_TYPES`]), kept byte for byte. Never model-visible.
    DshOnly(DshOnlyEvent),
    /// A known non-model-visible type (see [`KNOWN_OPAQUE_TYPES`]) or an unknown type marked
    /// `ignorable`, kept verbatim.
    Opaque {
        /// The event type.
        event_type: String,
        /// The data object, verbatim (`null` when the line had none).
        data: Value,
    },
}

impl Event {
    /// The wire `type` string.
    pub fn event_type(&self) -> &str {
        match self {
            Event::TurnStart(_) => "turn/start",
            Event::TurnEnd(_) => "turn/end",
            Event::StepStart(_) => "step/start",
            Event::StepEnd(_) => "step/end",
            Event::UserMessage(_) => "user/message",
            Event::AssistantChunk(_) => "assistant/chunk",
            Event::AssistantMessage(_) => "assistant/message",
            Event::ToolCall(_) => "tool/call",
            Event::ToolStarted(_) => "tool/started",
            Event::ToolResult(_) => "tool/result",
            Event::RequestHeader(_) => "request/header",
            Event::RequestContext(_) => "request/context",
            Event::LlmRetry(_) => "llm/retry",
            Event::LlmRetryStarted(_) => "llm/retry-started",
            Event::SessionTitle(_) => "session/title",
            Event::InboxSpliced(_) => "agent/inbox/spliced",
            Event::TodoWrite(_) => "todo/write",
            Event::EndSeed(_) => "session/end-seed",
            Event::GoalChange(_) => crate::GOAL_CHANGE_EVENT,
            Event::DshOnly(event) => event.event_type(),
            Event::Opaque { event_type, .. } => event_type,
        }
    }

    /// The message of a message event (`user/message`, `assistant/message`, `tool/result`).
    pub fn message(&self) -> Option<&Message> {
        match self {
            Event::UserMessage(message) => Some(message),
            Event::AssistantMessage(event) => Some(&event.message),
            Event::ToolResult(event) => Some(&event.message),
            _ => None,
        }
    }

    /// True for the event types that carry a `surfaceOp` (the message events).
    pub fn is_message(&self) -> bool {
        self.message().is_some()
    }

    /// Decodes the `data` of a line of type `event_type`. Returns `Ok(None)` when the type is
    /// unknown to this build (the caller decides between refusing and keeping it opaque).
    /// Message sources of kinds `dsh-llm` does not name are read as described in
    /// [`crate::compat`].
    pub fn decode(event_type: &str, data: &str) -> Result<Option<Event>, serde_json::Error> {
        Event::decode_at(event_type, data, None)
    }

    /// [`Event::decode`] for the event at `seq`: user messages dsh wrote without `id` or `role`
    /// get them as described in [`crate::compat::fill_missing_fields`].
    pub(crate) fn decode_at(
        event_type: &str,
        data: &str,
        seq: Option<u64>,
    ) -> Result<Option<Event>, serde_json::Error> {
        match Event::decode_strict(event_type, data) {
            Err(err) => {
                let Ok(mut value) = serde_json::from_str::<Value>(data) else {
                    return Err(err);
                };
                let mut changed = crate::compat::normalise_sources(&mut value);
                if let Some(seq) = seq {
                    changed |= crate::compat::fill_missing_fields(event_type, &mut value, seq);
                }
                if !changed {
                    return Err(err);
                }
                Event::decode_strict(event_type, &value.to_string()).map_err(|_| err)
            }
            decoded => decoded,
        }
    }

    fn decode_strict(event_type: &str, data: &str) -> Result<Option<Event>, serde_json::Error> {
        use serde_json::from_str;
        let event = match event_type {
            "turn/start" => Event::TurnStart(from_str(data)?),
            "turn/end" => Event::TurnEnd(from_str(data)?),
            "step/start" => Event::StepStart(from_str(data)?),
            "step/end" => Event::StepEnd(from_str(data)?),
            "user/message" => Event::UserMessage(from_str(data)?),
            "assistant/chunk" => Event::AssistantChunk(from_str(data)?),
            "assistant/message" => Event::AssistantMessage(from_str(data)?),
            "tool/call" => Event::ToolCall(from_str(data)?),
            "tool/started" => Event::ToolStarted(from_str(data)?),
            "tool/result" => Event::ToolResult(from_str(data)?),
            "request/header" => Event::RequestHeader(from_str(data)?),
            "request/context" => Event::RequestContext(from_str(data)?),
            "llm/retry" => Event::LlmRetry(from_str(data)?),
            "llm/retry-started" => Event::LlmRetryStarted(from_str(data)?),
            "session/title" => Event::SessionTitle(from_str(data)?),
            "agent/inbox/spliced" => Event::InboxSpliced(from_str(data)?),
            "todo/write" => Event::TodoWrite(from_str(data)?),
            "session/end-seed" => Event::EndSeed(from_str(data)?),
            crate::GOAL_CHANGE_EVENT => Event::GoalChange(from_str(data)?),
            other if DSH_ONLY_TYPES.contains(&other) => {
                Event::DshOnly(DshOnlyEvent::new(other, data)?)
            }
            other if KNOWN_OPAQUE_TYPES.contains(&other) => Event::Opaque {
                event_type: other.to_string(),
                data: from_str(data)?,
            },
            _ => return Ok(None),
        };
        Ok(Some(event))
    }

    /// Serialises the event's `data` object.
    pub fn encode_data<W: std::io::Write>(&self, out: W) -> Result<(), serde_json::Error> {
        use serde_json::to_writer;
        match self {
            Event::TurnStart(d) => to_writer(out, d),
            Event::TurnEnd(d) => to_writer(out, d),
            Event::StepStart(d) | Event::StepEnd(d) => to_writer(out, d),
            Event::UserMessage(d) => to_writer(out, d),
            Event::AssistantChunk(d) => to_writer(out, d),
            Event::AssistantMessage(d) => to_writer(out, d),
            Event::ToolCall(d) => to_writer(out, d),
            Event::ToolStarted(d) => to_writer(out, d),
            Event::ToolResult(d) => to_writer(out, d),
            Event::RequestHeader(d) => to_writer(out, d),
            Event::RequestContext(d) => to_writer(out, d),
            Event::LlmRetry(d) => to_writer(out, d),
            Event::LlmRetryStarted(d) => to_writer(out, d),
            Event::SessionTitle(d) => to_writer(out, d),
            Event::InboxSpliced(d) => to_writer(out, d),
            Event::TodoWrite(d) => to_writer(out, d),
            Event::EndSeed(d) => to_writer(out, d),
            Event::GoalChange(d) => to_writer(out, d),
            Event::DshOnly(d) => {
                let mut out = out;
                out.write_all(d.raw_data().as_bytes())
                    .map_err(serde_json::Error::io)
            }
            Event::Opaque { data, .. } => to_writer(out, data),
        }
    }
}
