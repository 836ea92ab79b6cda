//! Session events to ACP `session/update` payloads.
//!
//! Tool calls are the cards of the session protocol (`dsh_protocol::ViewProjector`,
//! docs/protocol.md, "Tool cards"): a card's first appearance is a `tool_call` with the tool's
//! own presentation (title, kind, locations) and each change a `tool_call_update` whose status
//! is the card's state in ACP's words: `pending` for pending and awaitingApproval,
//! `in_progress` for running, `completed` for done, `failed` for failed, denied and cancelled.
//! Every card update carries the protocol's state under `_meta.dsh.state` and, once the user
//! answered an approval question about the call, the answer under `_meta.dsh.approval`
//! (`outcome`, `scope`). An ended card carries the result text and, for file changes, the
//! diffs from the result's `meta.diffs`. `todo/write` becomes a `plan`, `plan/mode` a
//! `current_mode_update`.
//!
//! Live: text and reasoning deltas become `agent_message_chunk` / `agent_thought_chunk` as they
//! arrive (a block that arrives whole, without deltas, is sent once at its end).
//!
//! Every event that records billed usage (docs/sessions.md, "Cost": a reply's
//! `assistant/message`, `usage/call` for compaction, title and failed or cancelled replies, a
//! tool's own calls, a child's runs) becomes a `usage_update`: `used` (tokens in context after
//! the last reply: its whole input plus its output), `size` (the model's context window), `cost`
//! (the session's cumulative cost in USD, when the price table knows every model used) and,
//! under `_meta.dsh`, the cumulative token counts and requests (input including cache reads,
//! output, cache reads and writes, reasoning), the usage this event added (`lastCall`) and what
//! it was for (`purpose`: `reply`, a `usage/call` purpose, `tool` or `subagent`). The sums are
//! the session's, the loaded history included. `session/title` becomes a `session_info_update`
//! with the title.
//!
//! Replay (`session/load`): the log's messages instead of its chunks: the user's own messages
//! as `user_message_chunk`, assistant replies as thought and message chunks, and the tool
//! cards, through the same projector, with the same statuses the live session showed. Context
//! injected by extensions is not shown.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use dsh_agent::Presenter;
use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Usage, UsageTotals};
use dsh_protocol::{Card, CardState, ViewEvent, ViewProjector};
use dsh_session::{Billed, BilledKind, Envelope, Event, PriceTable, TodoItem, UsageLedger};
use serde_json::{json, Value};

/// Turns session events into `session/update` payloads (the `update` object of the
/// notification). Keeps what later events need: which blocks were streamed, the cards (in its
/// [`ViewProjector`]) and which of them the client was shown.
#[derive(Debug)]
pub struct UpdateMapper {
    cwd: PathBuf,
    streamed: HashSet<(u64, u64, u32)>,
    /// The session protocol's view of the events: the cards and their states.
    projector: ViewProjector,
    /// Calls whose `tool_call` was sent.
    shown: HashSet<String>,
    /// The user's answer to the approval question of a call (`_meta.dsh.approval`).
    approvals: HashMap<String, Value>,
    usage: UsageBook,
    /// The last logged permission preset (the mode plan mode goes back to).
    preset: Option<String>,
}

/// What `usage_update` needs: prices, the model of the calls and the sums so far.
#[derive(Debug, Default)]
struct UsageBook {
    prices: PriceTable,
    /// The model of the next call (from the latest `request/header`).
    model: String,
    context_window: u64,
    /// The session's billed usage, by the log's one rule (`dsh_session::usage`).
    ledger: UsageLedger,
    /// The calls of the current prompt (`PromptResponse.usage`).
    turn: UsageTotals,
    /// Tokens in context after the last reply (`used`).
    used: u64,
}

/// ACP's token counts (`Usage` of the schema): `inputTokens` counts all input, cache reads
/// included.
pub(crate) fn token_counts(usage: &Usage) -> Value {
    let input = usage.billed_input();
    json!({
        "totalTokens": input.saturating_add(usage.output_tokens),
        "inputTokens": input,
        "outputTokens": usage.output_tokens,
        "thoughtTokens": usage.reasoning_tokens,
        "cachedReadTokens": usage.cache_read_tokens,
        "cachedWriteTokens": usage.cache_write_tokens,
    })
}

fn text_chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

/// ACP's status of a card in `state` (docs/protocol.md, "Tool cards").
pub(crate) fn status(state: CardState) -> &'static str {
    match state {
        CardState::Pending | CardState::AwaitingApproval => "pending",
        CardState::Running => "in_progress",
        CardState::Done => "completed",
        CardState::Failed | CardState::Denied | CardState::Cancelled => "failed",
    }
}

fn title_update(title: &str) -> Value {
    json!({"sessionUpdate": "session_info_update", "title": title})
}

fn plan(todos: &[TodoItem]) -> Value {
    let entries: Vec<Value> = todos
        .iter()
        .map(|todo| {
            let status = match todo.status.as_str() {
                status @ ("pending" | "in_progress" | "completed") => status,
                // A status a newer writer added: shown as not done rather than dropped.
                _ => "pending",
            };
            json!({"content": todo.content, "priority": "medium", "status": status})
        })
        .collect();
    json!({"sessionUpdate": "plan", "entries": entries})
}

impl UpdateMapper {
    /// A mapper for a session working in `cwd` (relative paths in tool arguments are shown
    /// resolved against it, since ACP paths are absolute).
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        UpdateMapper {
            cwd: cwd.into(),
            streamed: HashSet::new(),
            projector: ViewProjector::default(),
            shown: HashSet::new(),
            approvals: HashMap::new(),
            usage: UsageBook::default(),
            preset: None,
        }
    }

    /// Reports `usage_update`s with these prices, for calls to `model` (until a
    /// `request/header` names another) whose context window is `context_window` tokens.
    pub fn with_usage(mut self, prices: PriceTable, model: &str, context_window: u64) -> Self {
        self.usage.prices = prices;
        self.usage.model = model.to_string();
        self.usage.context_window = context_window;
        self
    }

    /// Asks the session's `tools` how to show calls its log holds without their presentation
    /// (logs written before dsh logged it); the tools every session has answer otherwise.
    pub fn with_tools(mut self, tools: &dsh_tools::ToolRegistry) -> Self {
        self.projector = ViewProjector::new(Presenter::new(Some(tools)), PriceTable::default());
        self
    }

    /// The token counts of the calls since the last take (one prompt's), in ACP's `Usage`
    /// shape; `None` when no call reported usage.
    pub fn take_turn_usage(&mut self) -> Option<Value> {
        let turn = std::mem::take(&mut self.usage.turn);
        (turn.requests > 0).then(|| token_counts(&turn.usage))
    }

    /// The `usage_update` that closes a prompt (`purpose: "prompt-end"`, nothing added): the
    /// session's sums as they stand when the prompt is answered, sent after every prompt
    /// however it ended, so a turn a budget or a cancel cut short still leaves the client the
    /// last totals (docs/acp.md, "Usage and title").
    pub fn closing_usage(&self) -> Value {
        self.usage.update("prompt-end", &UsageTotals::default())
    }

    /// The `usage_update` for `billed` (already in the ledger); `reply` is the usage of the
    /// reply it came from, if it is one.
    fn usage_update(&mut self, billed: &Billed, reply: Option<&Usage>) -> Value {
        let book = &mut self.usage;
        let added = billed.total();
        book.turn.merge(&added);
        if let Some(usage) = reply {
            book.used = usage.billed_input().saturating_add(usage.output_tokens);
        }
        let purpose = match &billed.kind {
            BilledKind::Reply => "reply",
            BilledKind::Call(purpose) => purpose.as_str(),
            BilledKind::Auxiliary => "tool",
            BilledKind::Child(_) => "subagent",
        };
        book.update(purpose, &added)
    }
}

impl UsageBook {
    /// A `usage_update` with the session's sums, `added` by the call of `purpose`.
    fn update(&self, purpose: &str, added: &UsageTotals) -> Value {
        let total = self.ledger.total();
        let mut meta = token_counts(&total.usage);
        meta["requests"] = json!(total.requests);
        meta["model"] = json!(self.model);
        meta["lastCall"] = token_counts(&added.usage);
        meta["purpose"] = json!(purpose);
        let mut update = json!({
            "sessionUpdate": "usage_update",
            "used": self.used,
            "size": self.context_window,
            "_meta": {"dsh": meta},
        });
        if let Some(cost) = self.ledger.cost(&self.prices) {
            update["cost"] = json!({"amount": cost, "currency": "USD"});
        }
        update
    }
}

impl UpdateMapper {
    fn absolute(&self, path: &str) -> String {
        let path = Path::new(path);
        if path.is_absolute() {
            path.display().to_string()
        } else {
            self.cwd.join(path).display().to_string()
        }
    }

    /// The updates that show `card` as it is now: its `tool_call` the first time, else a
    /// `tool_call_update` with its status (and, once ended, its content).
    fn card(&mut self, card: &Card) -> Vec<Value> {
        let mut meta = json!({"state": card.state.as_str()});
        if let Some(approval) = self.approvals.get(&card.call_id) {
            meta["approval"] = approval.clone();
        }
        let mut out = Vec::new();
        if self.shown.insert(card.call_id.clone()) {
            out.push(self.tool_call(card, meta.clone()));
            if !card.state.is_final() {
                return out;
            }
        }
        let mut update = json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": card.call_id,
            "status": status(card.state),
            "_meta": {"dsh": meta},
        });
        if card.state.is_final() {
            update["content"] = Value::Array(self.content(card));
            self.approvals.remove(&card.call_id);
        } else if let Some(progress) = &card.progress {
            // A long call's progress (an MCP server's reports): the running card's content.
            update["_meta"]["dsh"]["progress"] = json!(progress);
            update["content"] = json!([{"type": "content",
                "content": {"type": "text", "text": progress.describe()}}]);
        }
        out.push(update);
        out
    }

    fn tool_call(&self, card: &Card, meta: Value) -> Value {
        let arguments = &card.arguments;
        let args: Value = if arguments.trim().is_empty() {
            json!({})
        } else {
            // Arguments that are not JSON are shown as the model wrote them.
            serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.into()))
        };
        let shown = &card.presentation;
        let mut update = json!({
            "sessionUpdate": "tool_call",
            "toolCallId": card.call_id,
            "title": shown.headline(),
            "kind": shown.kind.as_str(),
            "status": status(card.state),
            "rawInput": args,
            "_meta": {"dsh": meta},
        });
        if !shown.locations.is_empty() {
            let locations: Vec<Value> = shown
                .locations
                .iter()
                .map(|path| json!({"path": self.absolute(path)}))
                .collect();
            update["locations"] = Value::Array(locations);
        }
        update
    }

    /// An ended card's content: the diffs of the changes it made (when done), then its
    /// result text.
    fn content(&self, card: &Card) -> Vec<Value> {
        let mut content = Vec::new();
        if card.state == CardState::Done {
            let diffs = card
                .meta
                .as_ref()
                .and_then(|meta| meta.get("diffs"))
                .and_then(Value::as_array);
            for diff in diffs.into_iter().flatten() {
                let (Some(path), Some(new_text)) = (
                    diff.get("path").and_then(Value::as_str),
                    diff.get("newText").and_then(Value::as_str),
                ) else {
                    // A change too large to carry its texts: the result text says what changed.
                    continue;
                };
                content.push(json!({
                    "type": "diff",
                    "path": self.absolute(path),
                    "oldText": diff.get("oldText").cloned().unwrap_or(Value::Null),
                    "newText": new_text,
                }));
            }
        }
        let text = card.result.as_deref().unwrap_or_default();
        if !text.is_empty() {
            content.push(json!({"type": "content", "content": {"type": "text", "text": text}}));
        }
        content
    }

    /// The updates for the view events of one envelope: cards, approvals' answers and (live
    /// only) the mode plan mode leaves in force.
    fn view(&mut self, envelope: &Envelope, live: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for event in self.projector.project(envelope) {
            match event {
                ViewEvent::ToolCard(card) => out.extend(self.card(&card)),
                ViewEvent::ApprovalDecided {
                    call_id: Some(call_id),
                    outcome,
                    scope,
                    ..
                } => {
                    self.approvals
                        .insert(call_id, json!({"outcome": outcome, "scope": scope}));
                }
                ViewEvent::PresetChanged { preset } => self.preset = Some(preset),
                // The goal (docs/acp.md, "Goals"): ACP has no goal update, so it rides in the
                // `_meta` of a `session_info_update` (`null` once cleared).
                ViewEvent::Goal { goal } => out.push(json!({
                    "sessionUpdate": "session_info_update",
                    "_meta": {"dsh": {"goal": goal}},
                })),
                ViewEvent::PlanMode { active } if live => {
                    out.push(crate::plan::mode_update(active, self.preset.as_deref()));
                }
                _ => {}
            }
        }
        out
    }

    /// The updates for one live event, in order (often none).
    pub fn live(&mut self, envelope: &Envelope) -> Vec<Value> {
        let mut out = self.live_event(envelope);
        out.extend(self.view(envelope, true));
        if let Some(billed) = self.usage.ledger.push(&envelope.event) {
            let reply = match &envelope.event {
                Event::AssistantMessage(message) => message.usage.as_ref(),
                _ => None,
            };
            out.push(self.usage_update(&billed, reply));
        }
        out
    }

    fn live_event(&mut self, envelope: &Envelope) -> Vec<Value> {
        match &envelope.event {
            Event::AssistantChunk(chunk) => {
                let key = |index: u32| (chunk.turn, chunk.step, index);
                match &chunk.chunk {
                    Chunk::TextDelta { index, text } if !text.is_empty() => {
                        self.streamed.insert(key(*index));
                        vec![text_chunk("agent_message_chunk", text)]
                    }
                    Chunk::ReasoningDelta { index, text } if !text.is_empty() => {
                        self.streamed.insert(key(*index));
                        vec![text_chunk("agent_thought_chunk", text)]
                    }
                    Chunk::BlockEnd { index, block } if !self.streamed.contains(&key(*index)) => {
                        match block {
                            ContentBlock::Text { text } if !text.is_empty() => {
                                vec![text_chunk("agent_message_chunk", text)]
                            }
                            ContentBlock::Reasoning { text, .. } if !text.is_empty() => {
                                vec![text_chunk("agent_thought_chunk", text)]
                            }
                            _ => Vec::new(),
                        }
                    }
                    _ => Vec::new(),
                }
            }
            Event::StepStart(_) => {
                // Block indexes restart with every step; nothing older is needed.
                self.streamed.clear();
                Vec::new()
            }
            Event::TodoWrite(todos) => vec![plan(&todos.todos)],
            Event::RequestHeader(header) => {
                self.usage.model = header.header.config.config().model.clone();
                Vec::new()
            }
            Event::SessionTitle(title) => vec![title_update(&title.title)],
            _ => Vec::new(),
        }
    }

    fn replay_message(message: &Message, out: &mut Vec<Value>) {
        for block in &message.content {
            match block {
                ContentBlock::Text { text } if !text.is_empty() => {
                    let kind = match message.source {
                        MessageSource::User => "user_message_chunk",
                        _ => "agent_message_chunk",
                    };
                    out.push(text_chunk(kind, text));
                }
                ContentBlock::Reasoning { text, .. } if !text.is_empty() => {
                    out.push(text_chunk("agent_thought_chunk", text));
                }
                _ => {}
            }
        }
    }

    /// The updates that rebuild a conversation from its log (`session/load`).
    pub fn replay(&mut self, events: &[Envelope]) -> Vec<Value> {
        let mut out = Vec::new();
        for envelope in events {
            // The loaded history's usage counts in the session's sums.
            self.usage.ledger.push(&envelope.event);
            match &envelope.event {
                Event::RequestHeader(header) => {
                    self.usage.model = header.header.config.config().model.clone();
                }
                Event::AssistantMessage(reply) => {
                    if let Some(usage) = &reply.usage {
                        self.usage.used = usage.billed_input().saturating_add(usage.output_tokens);
                    }
                }
                _ => {}
            }
            match &envelope.event {
                Event::UserMessage(message) if matches!(message.source, MessageSource::User) => {
                    Self::replay_message(message, &mut out);
                }
                Event::AssistantMessage(reply) => Self::replay_message(&reply.message, &mut out),
                Event::TodoWrite(todos) => out.push(plan(&todos.todos)),
                Event::SessionTitle(title) => out.push(title_update(&title.title)),
                _ => {}
            }
            out.extend(self.view(envelope, false));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dsh_session::{AssistantChunk, StepRef, ToolCall};

    fn env(event: Event) -> Envelope {
        Envelope::new(event)
    }

    #[test]
    fn deltas_stream_and_whole_blocks_are_sent_once() {
        let mut mapper = UpdateMapper::new("/w");
        let chunk = |chunk| {
            env(Event::AssistantChunk(AssistantChunk {
                turn: 1,
                step: 1,
                chunk,
            }))
        };
        assert!(mapper
            .live(&env(Event::StepStart(StepRef { turn: 1, step: 1 })))
            .is_empty());
        let a = mapper.live(&chunk(Chunk::TextDelta {
            index: 0,
            text: "he".into(),
        }));
        assert_eq!(a, vec![text_chunk("agent_message_chunk", "he")]);
        let end = mapper.live(&chunk(Chunk::BlockEnd {
            index: 0,
            block: ContentBlock::text("hello"),
        }));
        assert!(end.is_empty(), "already streamed: {end:?}");
        let whole = mapper.live(&chunk(Chunk::BlockEnd {
            index: 1,
            block: ContentBlock::Reasoning {
                text: "think".into(),
                signature: None,
            },
        }));
        assert_eq!(whole, vec![text_chunk("agent_thought_chunk", "think")]);
    }

    fn call(id: &str, name: &str, arguments: &str, presentation: Option<Value>) -> ToolCall {
        ToolCall {
            turn: 1,
            step: 1,
            call_id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            presentation,
        }
    }

    #[test]
    fn a_running_calls_progress_is_its_cards_content() {
        let mut mapper = UpdateMapper::new("/w");
        mapper.live(&env(Event::ToolCall(call(
            "c1",
            "mcp__s__long",
            "{}",
            None,
        ))));
        mapper.live(&env(Event::ToolStarted(dsh_session::ToolStarted {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
        })));
        let updates = mapper.live(&env(Event::Opaque {
            event_type: dsh_session::TOOL_PROGRESS_EVENT.into(),
            data: json!({"callId": "c1", "progress": 2, "total": 4, "message": "half"}),
        }));
        let [update] = updates.as_slice() else {
            panic!("{updates:?}");
        };
        assert_eq!(update["status"], "in_progress");
        assert_eq!(update["content"][0]["content"]["text"], "2/4 (50%) half");
        assert_eq!(update["_meta"]["dsh"]["progress"]["total"], 4.0);
    }

    #[test]
    fn tool_calls_get_kind_title_and_locations() {
        let mut mapper = UpdateMapper::new("/w");
        let update = mapper.live(&env(Event::ToolCall(call(
            "c1",
            "read",
            r#"{"file_path":"a.txt"}"#,
            None,
        ))))[0]
            .clone();
        assert_eq!(update["kind"], "read");
        assert_eq!(update["title"], "read: a.txt");
        assert_eq!(update["locations"][0]["path"], "/w/a.txt");
        let odd =
            mapper.live(&env(Event::ToolCall(call("c2", "bash", "not json", None))))[0].clone();
        assert_eq!(odd["rawInput"], "not json");
    }

    #[test]
    fn logged_presentations_give_title_kind_and_locations() {
        let mut mapper = UpdateMapper::new("/w");
        let logged = json!({"title": "github · create_issue", "subject": "bug",
            "kind": "fetch", "locations": ["/abs/x"]});
        let update = mapper.live(&env(Event::ToolCall(call(
            "c1",
            "mcp__github__create_issue",
            "{}",
            Some(logged),
        ))))[0]
            .clone();
        assert_eq!(update["title"], "github · create_issue: bug");
        assert_eq!(update["kind"], "fetch");
        assert_eq!(update["locations"][0]["path"], "/abs/x");
        // No presentation logged, a tool the standard ones do not know: its name, `other`.
        let unknown =
            mapper.live(&env(Event::ToolCall(call("c2", "mcp__x__y", "{}", None))))[0].clone();
        assert_eq!(
            (&unknown["title"], &unknown["kind"]),
            (&json!("mcp__x__y"), &json!("other"))
        );
        assert!(unknown.get("locations").is_none());
    }

    /// Every billed call of the session is a `usage_update` and counts in the sums, the loaded
    /// history's too (docs/sessions.md, "Cost").
    #[test]
    fn every_billed_call_updates_the_usage() {
        let usage = |input_tokens, output_tokens| Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        };
        let reply = |id: &str, u: Usage| {
            env(Event::AssistantMessage(dsh_session::AssistantMessage {
                turn: 1,
                step: 1,
                message: Message {
                    id: id.into(),
                    role: dsh_llm::Role::Assistant,
                    content: vec![ContentBlock::text("ok")],
                    source: MessageSource::Model {
                        provider: "deepseek".into(),
                        model: "deepseek-v4-flash".into(),
                        extra: Default::default(),
                    },
                },
                usage: Some(u),
                interrupted: false,
            }))
        };
        let mut mapper = UpdateMapper::new("/w").with_usage(
            PriceTable::default_deepseek(),
            "deepseek-v4-flash",
            1_000_000,
        );
        // A loaded session's reply.
        mapper.replay(&[reply("a0", usage(100, 1))]);
        let first = mapper.live(&reply("a1", usage(1000, 10)));
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0]["used"], 1010);
        assert_eq!(first[0]["_meta"]["dsh"]["purpose"], "reply");
        assert_eq!(first[0]["_meta"]["dsh"]["requests"], 2);
        let compaction = mapper.live(&env(Event::Opaque {
            event_type: "usage/call".into(),
            data: json!({"purpose": "compaction", "model": "deepseek-v4-flash",
                "usage": {"inputTokens": 3000, "outputTokens": 40}}),
        }));
        assert_eq!(compaction.len(), 1, "{compaction:?}");
        let update = &compaction[0];
        assert_eq!(update["sessionUpdate"], "usage_update");
        // The context is the last reply's; the sums grow.
        assert_eq!(update["used"], 1010);
        let meta = &update["_meta"]["dsh"];
        assert_eq!(meta["purpose"], "compaction");
        assert_eq!(meta["requests"], 3);
        assert_eq!(meta["inputTokens"], 4100);
        assert_eq!(meta["lastCall"]["inputTokens"], 3000);
        let price = PriceTable::default_deepseek().models["deepseek-v4-flash"];
        let cost = price.cost(&usage(4100, 51));
        assert!((update["cost"]["amount"].as_f64().unwrap() - cost).abs() < 1e-12);
        // The prompt's usage: its two calls, not the loaded history.
        let turn = mapper.take_turn_usage().unwrap();
        assert_eq!(turn["inputTokens"], 4000);
        assert_eq!(turn["outputTokens"], 50);
    }
}
