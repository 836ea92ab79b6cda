//! Parsing of model-written arguments.
//!
//! The model's argument string is untrusted. Parsing never panics: every problem becomes an
//! `INVALID_ARGS` error whose message names the offending field (`todos[1].status`), so the
//! model can correct itself. Unknown fields are ignored: the escalation fields (`sandbox_permissions`,
//! `justification`) are read by the agent's safety policy before the call, not by the tool.

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ToolError;

/// Parses the raw argument string of a tool call. Empty or blank text means `{}` (docs/agent.md,
/// "Tool pipeline"); anything that is not a JSON object is `INVALID_ARGS`.
pub fn parse_raw_arguments(raw: &str) -> Result<Value, ToolError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value: Value = serde_json::from_str(raw)
        .map_err(|err| ToolError::invalid_args(format!("arguments are not valid JSON: {err}")))?;
    if !value.is_object() {
        return Err(ToolError::invalid_args(format!(
            "arguments must be a JSON object, got {}",
            json_kind(&value)
        )));
    }
    Ok(value)
}

/// Deserialises `args` into a tool's argument struct. Errors are `INVALID_ARGS` naming the field
/// path, e.g. `invalid arguments for read: offset: invalid type: string "x", expected a number`.
pub fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(args).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path.is_empty() || path == "." {
            ToolError::invalid_args(format!("invalid arguments for {tool}: {inner}"))
        } else {
            ToolError::invalid_args(format!("invalid arguments for {tool}: {path}: {inner}"))
        }
    })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Deserialises an optional non-negative whole number that the schema declares as `number`.
/// Accepts `5` and `5.0` (models write both); rejects negatives, fractions and non-numbers.
/// `null` counts as absent.
pub(crate) fn opt_count<'de, D: Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Number>::deserialize(de)?;
    let Some(number) = value else {
        return Ok(None);
    };
    if let Some(n) = number.as_u64() {
        return Ok(Some(n));
    }
    match number.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
        _ => Err(D::Error::custom(format!(
            "expected a non-negative whole number, got {number}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Probe {
        #[allow(dead_code)]
        name: String,
        #[serde(default, deserialize_with = "opt_count")]
        count: Option<u64>,
    }

    #[test]
    fn blank_is_empty_object() {
        assert_eq!(parse_raw_arguments("  ").unwrap(), serde_json::json!({}));
    }

    #[test]
    fn non_object_and_bad_json_are_invalid() {
        assert!(parse_raw_arguments("[1]").is_err());
        let err = parse_raw_arguments("{\"a\":").unwrap_err();
        assert!(err.message.contains("not valid JSON"));
    }

    #[test]
    fn errors_name_the_field() {
        let err = parse_args::<Probe>("probe", serde_json::json!({"name": "x", "count": "3"}))
            .unwrap_err();
        assert!(err.message.contains("count"), "{}", err.message);
        let err = parse_args::<Probe>("probe", serde_json::json!({})).unwrap_err();
        assert!(err.message.contains("name"), "{}", err.message);
    }

    #[test]
    fn counts_accept_integral_floats_only() {
        let p: Probe = parse_args("p", serde_json::json!({"name": "x", "count": 4.0})).unwrap();
        assert_eq!(p.count, Some(4));
        assert!(parse_args::<Probe>("p", serde_json::json!({"name": "x", "count": 1.5})).is_err());
        assert!(parse_args::<Probe>("p", serde_json::json!({"name": "x", "count": -1})).is_err());
        let p: Probe = parse_args("p", serde_json::json!({"name": "x", "count": null})).unwrap();
        assert_eq!(p.count, None);
    }
}
