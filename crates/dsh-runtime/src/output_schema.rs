//! A JSON Schema a session's final answer must satisfy (docs/run-json.md, "Structured
//! output"): what the model is told (after the system prompt's stable part, so the prompt
//! cache holds), the check of an answer, and the message that sends an invalid one back once.
//! `dsh run --output-schema` reads its schema from a file (dsh-cli's `output_schema.rs`);
//! `dsh review` and the TUI's `/review` use the findings schema of [`crate::review`].

use serde_json::Value;

/// How many validation errors one report names.
const MAX_REPORTED: usize = 8;

/// A compiled schema and its text as the model is shown it.
pub struct OutputSchema {
    /// Where it came from, for messages (a file's path, or a name such as `dsh review's
    /// findings`).
    name: String,
    /// The schema as compact JSON.
    text: String,
    validator: jsonschema::Validator,
}

impl OutputSchema {
    /// A schema given as a value, named `name` in messages. References to other documents
    /// are not fetched (jsonschema is built without its resolvers).
    pub fn from_value(schema: &Value, name: &str) -> Result<OutputSchema, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("a JSON Schema is an object (or true / false)".into());
        }
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("is not a valid JSON Schema: {e}"))?;
        Ok(OutputSchema {
            name: name.to_string(),
            text: schema.to_string(),
            validator,
        })
    }

    /// Where the schema came from, as given to [`OutputSchema::from_value`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the model is told, after the system prompt.
    pub fn instructions(&self) -> String {
        format!(
            "# Final answer format\n\nThis run's final answer is read by a program. When the \
             task is done, your final message must be exactly one JSON value valid under the \
             JSON Schema below: no prose before or after it, no Markdown code fence. Use tools \
             as usual before that.\n\n{}",
            self.text
        )
    }

    /// The JSON value `answer` holds when it is valid under the schema; else what is wrong,
    /// in words the model can act on. A whole-answer Markdown fence (```json ... ```) is
    /// tolerated: models add one despite being told not to.
    pub fn check(&self, answer: &str) -> Result<Value, String> {
        let text = unfenced(answer.trim());
        if text.is_empty() {
            return Err("the final answer was empty".to_string());
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("the final answer is not one JSON value ({e})"))?;
        let problems: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(MAX_REPORTED + 1)
            .map(|error| {
                let at = error.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("at {at}: {error}")
            })
            .collect();
        if problems.is_empty() {
            return Ok(value);
        }
        let mut report = problems
            .iter()
            .take(MAX_REPORTED)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if problems.len() > MAX_REPORTED {
            report.push_str("; and more");
        }
        Err(format!(
            "the final answer is not valid under the schema: {report}"
        ))
    }

    /// The message that sends an invalid answer back, once.
    pub fn correction(&self, problem: &str) -> String {
        format!(
            "Your final answer cannot be used: {problem}. Reply again with only the corrected \
             JSON value, valid under the JSON Schema you were given; no other text."
        )
    }
}

/// `text` without a Markdown code fence around all of it.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string (`json`) runs to the end of the first line.
    match body.split_once('\n') {
        Some((info, body)) if !info.contains('{') && !info.contains('[') => body.trim(),
        _ => body.trim(),
    }
}
