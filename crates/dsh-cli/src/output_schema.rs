//! `dsh run --output-schema FILE` (docs/run-json.md, "Structured output"): the final answer
//! must be one JSON value valid under a JSON Schema. The model is told the schema (after the
//! system prompt's stable part, so the prompt cache holds); an answer that does not parse or
//! validate is sent back once with what is wrong; the value goes to stdout and to the result
//! line's `structuredOutput`. The schema itself, its check and the correction are
//! `dsh_runtime::output_schema`'s; this reads the file and names the failure.

use serde_json::Value;

use crate::run::user_error;

/// Largest schema file read.
const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// A compiled schema and its text as the model is shown it (shared with `dsh review` and the
/// TUI's `/review`: `dsh_runtime::output_schema`).
pub(crate) use dsh_runtime::output_schema::OutputSchema;

/// Reads and compiles the schema at `path` (a regular file of at most 1 MiB holding a JSON
/// Schema, any draft from 4 to 2020-12; references to other documents are not fetched). Every
/// failure is an `OUTPUT_SCHEMA` error naming the file.
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

/// The error of a run whose answer is still invalid after the correction.
pub(crate) fn failure(schema: &OutputSchema, problem: &str, session_id: &str) -> anyhow::Error {
    user_error(
        "OUTPUT_SCHEMA",
        format!(
            "{problem} (schema {}; sent back once; the session {session_id} holds both answers)",
            schema.name()
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn schema(text: &str) -> OutputSchema {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schema.json");
        std::fs::write(&path, text).unwrap();
        load(&path).unwrap()
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
            let error = load(&path).err().unwrap().to_string();
            assert!(error.starts_with("OUTPUT_SCHEMA: "), "{error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error = load(dir.path()).err().unwrap().to_string();
        assert!(error.contains("not a regular file"), "{error}");
    }

    /// A `$ref` to another document is not fetched (no file or network access).
    #[test]
    fn remote_references_are_not_fetched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, r#"{"$ref": "http://127.0.0.1:9/other.json"}"#).unwrap();
        let error = load(&path).err().unwrap().to_string();
        assert!(error.contains("OUTPUT_SCHEMA"), "{error}");
    }
}
