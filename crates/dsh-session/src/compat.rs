//! Compatibility with message sources the vocabulary of `dsh-llm` does not name.
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
