//! `dsh run --output-schema FILE` with the real binary and the scripted provider (issue 42,
//! point 1): the model is told the schema, a valid answer is printed as JSON and is the result
//! line's `structuredOutput`, an invalid one is sent back once with what is wrong, and one
//! still invalid fails the run with `OUTPUT_SCHEMA` and prints no answer.

use std::process::Command;

use serde_json::Value;

use crate::common::{dsh_command, output, text};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

const SCHEMA: &str = r#"{
  "type": "object",
  "required": ["verdict", "issues"],
  "properties": {
    "verdict": {"enum": ["pass", "fail"]},
    "issues": {"type": "array", "items": {"type": "string"}}
  },
  "additionalProperties": false
}"#;

fn reply(text: &str, prompt_tokens: u64) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish(
            "stop",
            Some(WireUsage {
                prompt_tokens,
                completion_tokens: 7,
                ..WireUsage::default()
            }),
        )
        .into()
}

struct Env {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            cwd: tempfile::tempdir().unwrap(),
        };
        std::fs::write(env.cwd.path().join("schema.json"), SCHEMA).unwrap();
        env
    }

    fn run(&self, provider: &FakeProvider, extra: &[&str]) -> Command {
        let mut cmd = dsh_command(self.home.path(), self.cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-schema-test")
            .args(["run", "--output-schema", "schema.json"])
            .args(extra)
            .arg("check the build");
        cmd
    }
}

fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap().to_string()
}

fn result_line(stdout: &str) -> Value {
    let last = stdout.lines().last().unwrap();
    let line: Value = serde_json::from_str(last).unwrap();
    assert_eq!(line["type"], "result", "{last}");
    line
}

#[tokio::test]
async fn a_valid_answer_is_printed_as_json_and_the_model_was_told_the_schema() {
    let provider = FakeProvider::start([
        reply("{\n  \"verdict\": \"pass\",\n  \"issues\": []\n}", 100),
        reply(
            "```json\n{\"verdict\": \"fail\", \"issues\": [\"x\"]}\n```",
            100,
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let out = output(env.run(&provider, &["--append-system-prompt", "Be brief."])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "{\"issues\":[],\"verdict\":\"pass\"}\n");
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "a valid answer was sent back");
    let system = system_prompt(&requests[0].body);
    assert!(
        system.contains("Be brief.\n\n# Final answer format"),
        "{system}"
    );
    assert!(
        system.contains("\"additionalProperties\":false"),
        "{system}"
    );

    // --json: the value in the result line; a fenced answer is accepted.
    let out = output(env.run(&provider, &["--json"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let line = result_line(&stdout);
    assert_eq!(line["structuredOutput"]["verdict"], "fail", "{line}");
    assert!(line.get("schemaError").is_none(), "{line}");
}

#[tokio::test]
async fn an_invalid_answer_is_sent_back_once_with_what_is_wrong() {
    let provider = FakeProvider::start([
        reply("All good, the build passes.", 100),
        reply("{\"verdict\": \"pass\", \"issues\": []}", 150),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let out = output(env.run(&provider, &["--json"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let correction = messages.last().unwrap()["content"].to_string();
    assert!(
        correction.contains("not one JSON value") && correction.contains("corrected JSON"),
        "{correction}"
    );
    let line = result_line(&stdout);
    assert_eq!(line["structuredOutput"]["verdict"], "pass", "{line}");
    // Both turns' calls are counted.
    assert_eq!(line["usage"]["requests"], 2, "{line}");
    assert_eq!(line["usage"]["outputTokens"], 14, "{line}");
}

#[tokio::test]
async fn an_answer_still_invalid_fails_the_run_and_is_not_printed() {
    let provider = FakeProvider::start([
        reply("{\"verdict\": \"maybe\", \"issues\": []}", 100),
        reply("{\"verdict\": \"pass\", \"issues\": [1]}", 100),
        reply("{\"verdict\": \"maybe\"}", 100),
        reply("{\"verdict\": \"maybe\"}", 100),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let out = output(env.run(&provider, &[])).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "an invalid answer was printed: {stdout}");
    assert!(stderr.contains("OUTPUT_SCHEMA"), "{stderr}");
    assert!(stderr.contains("at /issues/0"), "{stderr}");
    let first = provider.requests()[1].body["messages"].to_string();
    assert!(
        first.contains("at /verdict"),
        "the first problem was not sent back: {first}"
    );

    let out = output(env.run(&provider, &["--json"])).await;
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    let line = result_line(&stdout);
    assert_eq!(line["structuredOutput"], Value::Null, "{line}");
    assert!(
        line["schemaError"].as_str().unwrap().contains("required"),
        "{line}"
    );
    assert_eq!(line["stop"], "completed", "{line}");
}

#[tokio::test]
async fn a_bad_schema_stops_the_run_before_any_request() {
    let provider = FakeProvider::start([]).await.unwrap();
    let env = Env::new();
    std::fs::write(env.cwd.path().join("schema.json"), "{\"type\": 12}").unwrap();
    let out = output(env.run(&provider, &[])).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("OUTPUT_SCHEMA: schema.json: is not a valid JSON Schema"),
        "{stderr}"
    );
    let out = output(env.run(&provider, &["--plan"])).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "--plan with --output-schema was accepted"
    );
    assert!(provider.requests().is_empty());
}
