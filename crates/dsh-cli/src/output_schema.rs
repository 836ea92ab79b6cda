//! `dsh run --output-schema FILE` (docs/run-json.md, "Structured output"): the final answer
//! must be one JSON value valid under a JSON Schema. The model is told the schema (after the
//! system prompt's stable part, so the prompt cache holds); an answer that does not parse or
//! validate is sent back once with what is wrong; the value goes to stdout and to the result
//! line's `structuredOutput`.

use serde_json::Value;

use crate::run::user_error;

/// Largest schema file read.
const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// How many validation errors one report names.
const MAX_REPORTED: usize = 8;

/// A compiled schema and its text as the model is shown it.
pub(crate) struct OutputSchema {
    /// Where it was read from, for messages.
    path: String,
    /// The schema as compact JSON.
    text: String,
    validator: jsonschema::Validator,
}

impl OutputSchema {
    /// Reads and compiles the schema at `path` (a regular file of at most 1 MiB holding a
    /// JSON Schema, any draft from 4 to 2020-12; references to other documents are not
    /// fetched). Every failure is an `OUTPUT_SCHEMA` error naming the file.
    pub(crate) fn load(path: &std::path::Path) -> anyhow::Result<OutputSchema> {
        let shown = path.display().to_string();
        let fail = |why: String| user_error("OUTPUT_SCHEMA", format!("{shown}: {why}"));
        let text = crate::home::read_small_file(path, MAX_SCHEMA_BYTES).map_err(fail)?;
        let schema: Value = serde_json::from_str(&text).map_err(|e| {
            fail(format!(
                "is not JSON ({e}); write the schema as a JSON document"
            ))
        })?;
        OutputSchema::from_value(&schema, &shown).map_err(fail)
    }

    /// A schema given as a value (`dsh review`'s own), named `name` in messages.
    pub(crate) fn from_value(schema: &Value, name: &str) -> Result<OutputSchema, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("a JSON Schema is an object (or true / false)".into());
        }
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("is not a valid JSON Schema: {e}"))?;
        Ok(OutputSchema {
            path: name.to_string(),
            text: schema.to_string(),
            validator,
        })
    }

    /// What the model is told, after the system prompt.
    pub(crate) fn instructions(&self) -> String {
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
    pub(crate) fn check(&self, answer: &str) -> Result<Value, String> {
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
    pub(crate) fn correction(&self, problem: &str) -> String {
        format!(
            "Your final answer cannot be used: {problem}. Reply again with only the corrected \
             JSON value, valid under the JSON Schema you were given; no other text."
        )
    }

    /// The error of a run whose answer is still invalid after the correction.
    pub(crate) fn failure(&self, problem: &str, session_id: &str) -> anyhow::Error {
        user_error(
            "OUTPUT_SCHEMA",
            format!(
                "{problem} (schema {}; sent back once; the session {session_id} holds both \
                 answers)",
                self.path
            ),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn schema(text: &str) -> OutputSchema {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schema.json");
        std::fs::write(&path, text).unwrap();
        OutputSchema::load(&path).unwrap()
    }

    const PERSON: &str = r#"{"type":"object","required":["name","age"],
        "properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},
        "additionalProperties":false}"#;

    #[test]
    fn valid_answers_pass_fenced_or_not() {
        let s = schema(PERSON);
        let value = s.check(r#"{"name":"Ada","age":36}"#).unwrap();
        assert_eq!(value["age"], 36);
        assert!(s
            .check("```json\n{\"name\":\"Ada\",\"age\":36}\n```")
            .is_ok());
        assert!(s.check("```\n{\"name\":\"Ada\",\"age\":36}```").is_ok());
    }

    #[test]
    fn invalid_answers_say_where_and_what() {
        let s = schema(PERSON);
        let problem = s.check(r#"{"name":"Ada","age":-1,"x":1}"#).unwrap_err();
        assert!(problem.contains("at /age"), "{problem}");
        assert!(problem.contains("Additional properties"), "{problem}");
        let problem = s.check("Here you go: {}").unwrap_err();
        assert!(problem.contains("not one JSON value"), "{problem}");
        assert!(s.check("  ").unwrap_err().contains("empty"));
    }

    #[test]
    fn bad_schema_files_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("not json", "is not JSON"),
            ("[1, 2]", "is an object"),
            (r#"{"type": 5}"#, "not a valid JSON Schema"),
        ];
        for (text, expected) in cases {
            let path = dir.path().join("s.json");
            std::fs::write(&path, text).unwrap();
            let error = OutputSchema::load(&path).err().unwrap().to_string();
            assert!(error.starts_with("OUTPUT_SCHEMA: "), "{error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error = OutputSchema::load(dir.path()).err().unwrap().to_string();
        assert!(error.contains("not a regular file"), "{error}");
    }

    /// A `$ref` to another document is not fetched (no file or network access).
    #[test]
    fn remote_references_are_not_fetched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, r#"{"$ref": "http://127.0.0.1:9/other.json"}"#).unwrap();
        let error = OutputSchema::load(&path).err().unwrap().to_string();
        assert!(error.contains("OUTPUT_SCHEMA"), "{error}");
    }
}
