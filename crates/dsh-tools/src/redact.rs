//! Secret redaction of tool output (docs/SECURITY.md, "What is protected"): the value of a
//! secret-looking environment variable that shows up in a result (a `cat .env`, a program echoing
//! its configuration) is replaced by `[REDACTED:<NAME>]` before the result is logged or sent to the
//! model.

use std::borrow::Cow;
use std::fmt;

use dsh_llm::ContentBlock;
use serde_json::Value;

use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::process::is_secret_name;

/// Values shorter than this are not redacted: short values (`1`, `true`, `dev`) occur in
/// ordinary text and their replacement would garble output without protecting anything.
pub const MIN_SECRET_LEN: usize = 8;

/// Replaces known secret values in text by `[REDACTED:<NAME>]`.
///
/// Matching is exact and case-sensitive; longer values are replaced first, so a secret that
/// contains another is reported under its own name. `Debug` shows names only, never values.
#[derive(Clone, Default)]
pub struct SecretRedactor {
    /// `(value, marker)`, longest value first.
    secrets: Vec<(String, String)>,
}

impl fmt::Debug for SecretRedactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .secrets
            .iter()
            .map(|(_, marker)| marker.as_str())
            .collect();
        f.debug_struct("SecretRedactor")
            .field("markers", &names)
            .finish()
    }
}

impl SecretRedactor {
    /// No secrets.
    pub fn new() -> Self {
        Self::default()
    }

    /// The values of this process's variables that [`crate::scrubbed_env`] removes from child
    /// environments (names containing `KEY`, `TOKEN`, `SECRET`, `PASSWORD`), when they are
    /// valid UTF-8 and at least [`MIN_SECRET_LEN`] bytes long.
    pub fn from_env() -> Self {
        let mut redactor = Self::new();
        for (name, value) in std::env::vars_os() {
            if let (Some(name), Some(value)) = (name.to_str(), value.to_str()) {
                if is_secret_name(name) {
                    redactor.add(name, value);
                }
            }
        }
        redactor
    }

    /// Adds a secret (e.g. a provider key read from a `.env` file rather than the environment).
    /// Values shorter than [`MIN_SECRET_LEN`] are ignored; adding a known value again keeps
    /// its first name.
    pub fn add(&mut self, name: &str, value: &str) {
        if value.len() < MIN_SECRET_LEN || self.secrets.iter().any(|(v, _)| v == value) {
            return;
        }
        self.secrets
            .push((value.to_string(), format!("[REDACTED:{name}]")));
        self.secrets
            .sort_by_key(|(value, _)| std::cmp::Reverse(value.len()));
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret value replaced; borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (value, marker) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), marker));
            }
        }
        out
    }

    fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Redacts every string (values, not keys) inside `value`.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(text) => self.redact_in_place(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_json(v)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Redacts a content block: text, reasoning, nested tool results and unknown blocks (as
    /// JSON); tool-call arguments and images are left as they are.
    pub fn redact_block(&self, block: &mut ContentBlock) {
        match block {
            ContentBlock::Text { text } => self.redact_in_place(text),
            ContentBlock::Reasoning { text, .. } => self.redact_in_place(text),
            ContentBlock::ToolResult { content, .. } => {
                content.iter_mut().for_each(|b| self.redact_block(b))
            }
            ContentBlock::Unknown(value) => self.redact_json(value),
            ContentBlock::Image { .. } | ContentBlock::ToolCall { .. } => {}
        }
    }

    /// Redacts a whole tool outcome: content blocks, summary and data, or the error message.
    pub fn redact_outcome(&self, outcome: &mut Result<ToolOutput, ToolError>) {
        if self.is_empty() {
            return;
        }
        match outcome {
            Ok(output) => {
                output.content.iter_mut().for_each(|b| self.redact_block(b));
                self.redact_in_place(&mut output.summary);
                if let Some(data) = output.data.as_mut() {
                    self.redact_json(data);
                }
            }
            Err(err) => self.redact_in_place(&mut err.message),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::error::ToolErrorCode;

    fn redactor() -> SecretRedactor {
        let mut r = SecretRedactor::new();
        r.add("MY_TOKEN", "tok-12345678");
        r.add("LONG_KEY", "tok-12345678-and-more");
        r.add("SHORT_KEY", "abc");
        r
    }

    #[test]
    fn replaces_values_longest_first_and_ignores_short_ones() {
        let r = redactor();
        assert_eq!(
            r.redact("a tok-12345678-and-more b tok-12345678 c abc"),
            "a [REDACTED:LONG_KEY] b [REDACTED:MY_TOKEN] c abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert!(!format!("{r:?}").contains("tok-"));
    }

    #[test]
    fn redacts_outputs_data_and_errors() {
        let r = redactor();
        let mut ok: Result<ToolOutput, ToolError> = Ok(ToolOutput::text("x=tok-12345678")
            .with_summary("tok-12345678")
            .with_data(serde_json::json!({"a": ["tok-12345678"], "tok-12345678": 1})));
        r.redact_outcome(&mut ok);
        let out = ok.unwrap();
        assert_eq!(out.text_content(), "x=[REDACTED:MY_TOKEN]");
        assert_eq!(out.summary, "[REDACTED:MY_TOKEN]");
        assert_eq!(out.data.unwrap()["a"][0], "[REDACTED:MY_TOKEN]");
        let mut err: Result<ToolOutput, ToolError> =
            Err(ToolError::new(ToolErrorCode::Io, "bad tok-12345678"));
        r.redact_outcome(&mut err);
        assert_eq!(err.unwrap_err().message, "bad [REDACTED:MY_TOKEN]");
    }
}
