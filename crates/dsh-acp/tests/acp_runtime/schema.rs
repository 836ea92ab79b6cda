//! Our messages checked against the official ACP schema (`fixtures/acp-schema/schema.json`,
//! from `@agentclientprotocol/sdk`). A small validator for the part of JSON Schema that file
//! uses: `$ref`, `allOf`, `anyOf`, `oneOf`, `type` (one or a list), `const`, `enum`,
//! `required`, `properties`, `items`, `minimum`; annotations (`x-*`, `format`, `default`,
//! `description`, `discriminator`) are not constraints and are skipped.

use std::sync::OnceLock;

use serde_json::Value;

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/acp-schema/schema.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    })
}

fn resolve(reference: &str) -> &'static Value {
    let name = reference
        .strip_prefix("#/$defs/")
        .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
    schema()["$defs"]
        .get(name)
        .unwrap_or_else(|| panic!("no definition {name}"))
}

fn type_matches(kind: &str, value: &Value) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        other => panic!("unknown type {other}"),
    }
}

/// The problems of `value` under `rule` (empty when it is valid).
fn problems(rule: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(reference) = rule.get("$ref").and_then(Value::as_str) {
        out.extend(problems(resolve(reference), value, at));
    }
    for part in rule
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(problems(part, value, at));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = rule.get(key).and_then(Value::as_array) {
            let failures: Vec<Vec<String>> =
                branches.iter().map(|b| problems(b, value, at)).collect();
            if failures.iter().all(|f| !f.is_empty()) {
                out.push(format!("{at}: matches no branch of {key}: {failures:?}"));
            }
        }
    }
    match rule.get("type") {
        Some(Value::String(kind)) if !type_matches(kind, value) => {
            out.push(format!("{at}: expected {kind}, got {value}"));
        }
        Some(Value::Array(kinds))
            if !kinds
                .iter()
                .filter_map(Value::as_str)
                .any(|k| type_matches(k, value)) =>
        {
            out.push(format!("{at}: expected one of {kinds:?}, got {value}"));
        }
        _ => {}
    }
    if let Some(expected) = rule.get("const") {
        if expected != value {
            out.push(format!("{at}: expected {expected}, got {value}"));
        }
    }
    if let Some(allowed) = rule.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            out.push(format!("{at}: {value} not in {allowed:?}"));
        }
    }
    if let (Some(min), Some(n)) = (rule.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if n < min {
            out.push(format!("{at}: {n} below {min}"));
        }
    }
    if let Some(object) = value.as_object() {
        for key in rule
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = key.as_str().unwrap_or_default();
            if !object.contains_key(key) {
                out.push(format!("{at}: `{key}` is required"));
            }
        }
        if let Some(properties) = rule.get("properties").and_then(Value::as_object) {
            for (key, property) in properties {
                if let Some(field) = object.get(key) {
                    out.extend(problems(property, field, &format!("{at}.{key}")));
                }
            }
        }
    }
    if let (Some(items), Some(array)) = (rule.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            out.extend(problems(items, item, &format!("{at}[{i}]")));
        }
    }
    out
}

/// Fails the test unless `value` is a valid `definition` of the ACP schema.
pub(crate) fn assert_valid(definition: &str, value: &Value) {
    let rule = resolve(&format!("#/$defs/{definition}"));
    let found = problems(rule, value, definition);
    assert!(
        found.is_empty(),
        "{value}\nis not a valid {definition}: {found:#?}"
    );
}

#[test]
fn the_validator_rejects_what_the_schema_forbids() {
    use serde_json::json;
    assert_valid(
        "SessionNotification",
        &json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1, "size": 2}}),
    );
    for bad in [
        json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1}}),
        json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": -1, "size": 2}}),
        json!({"sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": 1, "size": 2,
            "cost": {"amount": 1.0}}}),
        json!({"sessionId": "s", "update": {"sessionUpdate": "no_such_update"}}),
        json!({"update": {"sessionUpdate": "session_info_update", "title": "t"}}),
    ] {
        let rule = resolve("#/$defs/SessionNotification");
        assert!(!problems(rule, &bad, "x").is_empty(), "accepted {bad}");
    }
}
