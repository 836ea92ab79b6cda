//! Compatibility with what dsh writes that the vocabulary of `dsh-llm` does not accept as is:
//! message sources it does not name, and user messages without `id` or `role`.
//!
//! dsh writes sources beyond `user | plugin | model | tool`, e.g.
//! `{"kind":"agent-instructions","form":"instructions",...}` for project instructions. They are
//! injected context, so they load as [`dsh_llm::MessageSource::Plugin`] with `plugin` set to the
//! original kind and the original kind also kept in the field [`SOURCE_KIND_FIELD`]; the rest of
//! the object is kept in `extra`. Nothing is dropped, and the message still projects as the
//! user-role message it is. This path is taken only when the strict decode fails, so ordinary
//! lines pay nothing for it.

use serde_json::Value;

/// Extra field recording the original `kind` of a source read as a plugin source.
pub const SOURCE_KIND_FIELD: &str = "dshSourceKind";

const KNOWN_KINDS: [&str; 4] = ["user", "plugin", "model", "tool"];

/// Rewrites unknown message-source kinds in `value` (recursively) as described in the module
/// docs. Returns true when something was rewritten.
pub(crate) fn normalise_sources(value: &mut Value) -> bool {
    let mut changed = false;
    match value {
        Value::Object(map) => {
            let is_message = map.contains_key("role") && map.contains_key("content");
            if is_message {
                if let Some(Value::Object(source)) = map.get_mut("source") {
                    let kind = source
                        .get("kind")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    if let Some(kind) = kind.filter(|k| !KNOWN_KINDS.contains(&k.as_str())) {
                        source.insert("kind".into(), Value::String("plugin".into()));
                        if !source.contains_key("plugin") {
                            source.insert("plugin".into(), Value::String(kind.clone()));
                        }
                        source.insert(SOURCE_KIND_FIELD.into(), Value::String(kind));
                        changed = true;
                    }
                }
            }
            for child in map.values_mut() {
                changed |= normalise_sources(child);
            }
        }
        Value::Array(items) => {
            for child in items {
                changed |= normalise_sources(child);
            }
        }
        _ => {}
    }
    changed
}

/// The id given to a user message dsh logged without one: unique within the log because it
/// names the event's seq (`dsh-seq-<seq>`; `-<n>` added for the n-th message an inbox splice
/// inserts).
pub fn missing_message_id(seq: u64, index: Option<usize>) -> String {
    match index {
        Some(n) => format!("dsh-seq-{seq}-{n}"),
        None => format!("dsh-seq-{seq}"),
    }
}

/// Fills what dsh's recordings leave out (docs/sessions.md, "Reading dsh's logs"); returns
/// true when something was added:
/// - user messages logged as `{content, source}` only (dsh's `NewUserMessage`), as
///   `user/message` data and as the `inserted` items of `agent/inbox/spliced`, get
///   `role: "user"` and the id of [`missing_message_id`];
/// - `assistant/message` and `tool/result` in the older shape without `message` are lifted
///   into the current one;
/// - a `request/header` config without `provider` gets an empty one.
pub(crate) fn fill_missing_fields(event_type: &str, value: &mut Value, seq: u64) -> bool {
    fn fill(message: &mut Value, id: impl FnOnce() -> String) -> bool {
        let Value::Object(map) = message else {
            return false;
        };
        if !map.contains_key("content") {
            return false;
        }
        let mut changed = false;
        if !map.contains_key("id") {
            map.insert("id".into(), Value::String(id()));
            changed = true;
        }
        if !map.contains_key("role") {
            map.insert("role".into(), Value::String("user".into()));
            changed = true;
        }
        changed
    }
    match event_type {
        "user/message" => fill(value, || missing_message_id(seq, None)),
        "assistant/message" => lift_assistant_message(value, seq),
        "tool/result" => lift_tool_result(value, seq),
        "request/header" => {
            // dsh's hand-written test logs name only the model: the route reads as empty.
            match value.pointer_mut("/header/config") {
                Some(Value::Object(config)) if !config.contains_key("provider") => {
                    config.insert("provider".into(), Value::String(String::new()));
                    true
                }
                _ => false,
            }
        }
        "agent/inbox/spliced" => {
            let Some(Value::Array(items)) = value.get_mut("inserted") else {
                return false;
            };
            let mut changed = false;
            for (n, item) in items.iter_mut().enumerate() {
                changed |= fill(item, || missing_message_id(seq, Some(n)));
            }
            changed
        }
        _ => false,
    }
}

/// dsh's web-app recordings write `assistant/message` in an older shape: the message's
/// `content` and `provenance {provider, model}` beside `turn`, `step` and `usage`, with no
/// `message`. Such data is read as `{turn, step, usage, message: {id, role: "assistant",
/// content, source: {kind: "model", provider, model, ...}}}` (the id as in
/// [`missing_message_id`]; other provenance fields kept in the source). Returns true when the
/// data had that shape.
fn lift_assistant_message(value: &mut Value, seq: u64) -> bool {
    let Value::Object(map) = value else {
        return false;
    };
    if map.contains_key("message") || !map.contains_key("content") {
        return false;
    }
    let content = map.remove("content").unwrap_or(Value::Array(Vec::new()));
    let mut source = match map.remove("provenance") {
        Some(Value::Object(provenance)) => provenance,
        _ => serde_json::Map::new(),
    };
    source.insert("kind".into(), Value::String("model".into()));
    for field in ["provider", "model"] {
        source
            .entry(field)
            .or_insert_with(|| Value::String(String::new()));
    }
    let id = map
        .remove("id")
        .unwrap_or_else(|| Value::String(missing_message_id(seq, None)));
    let mut message = serde_json::Map::new();
    message.insert("id".into(), id);
    message.insert("role".into(), Value::String("assistant".into()));
    message.insert("content".into(), content);
    message.insert("source".into(), Value::Object(source));
    map.insert("message".into(), Value::Object(message));
    true
}

/// The same older shape for `tool/result` (dsh's web-app recordings): `callId`, `content` and
/// `isError` beside `turn` and `step`, no `message`. Read as `{turn, step, message: {id, role:
/// "user", content: [{type: "tool-result", toolCallId, content, isError}], source: {kind:
/// "tool", callId}}}`; `error` and `meta` stay where they are. Returns true when the data had
/// that shape.
fn lift_tool_result(value: &mut Value, seq: u64) -> bool {
    let Value::Object(map) = value else {
        return false;
    };
    if map.contains_key("message") || !map.contains_key("content") {
        return false;
    }
    let Some(Value::String(call_id)) = map.remove("callId") else {
        return false;
    };
    let content = map.remove("content").unwrap_or(Value::Array(Vec::new()));
    let is_error = map.remove("isError").unwrap_or(Value::Bool(false));
    let mut block = serde_json::Map::new();
    block.insert("type".into(), Value::String("tool-result".into()));
    block.insert("toolCallId".into(), Value::String(call_id.clone()));
    block.insert("content".into(), content);
    block.insert("isError".into(), is_error);
    let mut source = serde_json::Map::new();
    source.insert("kind".into(), Value::String("tool".into()));
    source.insert("callId".into(), Value::String(call_id));
    let mut message = serde_json::Map::new();
    message.insert("id".into(), Value::String(missing_message_id(seq, None)));
    message.insert("role".into(), Value::String("user".into()));
    message.insert("content".into(), Value::Array(vec![Value::Object(block)]));
    message.insert("source".into(), Value::Object(source));
    map.insert("message".into(), Value::Object(message));
    true
}
