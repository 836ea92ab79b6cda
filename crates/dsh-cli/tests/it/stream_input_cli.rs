//! `dsh run --input-format stream-json` with the real binary and the scripted provider (issue
//! 42, point 5): a program writes user messages as JSON lines and reads each answer's `--json`
//! lines and `result` line before writing the next, all in one session; bad lines are
//! answered with an error line and lose nothing.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::{dsh_command, output_with_input, text, DSH_TIMEOUT};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

fn reply(text: &str) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish(
            "stop",
            Some(WireUsage {
                prompt_tokens: 50,
                completion_tokens: 5,
                ..WireUsage::default()
            }),
        )
        .into()
}

fn command(
    home: &std::path::Path,
    cwd: &std::path::Path,
    provider: &FakeProvider,
) -> std::process::Command {
    let mut cmd = dsh_command(home, cwd);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-stream-test")
        .args(["run", "--input-format", "stream-json"]);
    cmd
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect()
}

/// The program writes the second message only after it read the first answer's result line:
/// dsh answers without waiting for the end of the input, and both turns are one session.
#[tokio::test]
async fn a_program_drives_two_turns_through_one_process() {
    let provider = FakeProvider::start([reply("first answer"), reply("second answer")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = command(home.path(), cwd.path(), &provider);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen: Vec<Value> = Vec::new();
    let messages = [
        r#"{"type": "user", "content": "say one"}"#.to_string(),
        r#"{"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "say two"}]}}"#.to_string(),
    ];
    for message in &messages {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        loop {
            let line = tokio::time::timeout(DSH_TIMEOUT, stdout.next_line())
                .await
                .expect("no result line in time")
                .unwrap()
                .expect("stdout ended before a result line");
            let value: Value = serde_json::from_str(&line).unwrap();
            let done = value["type"] == "result";
            seen.push(value);
            if done {
                break;
            }
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(DSH_TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    let results: Vec<&Value> = seen.iter().filter(|v| v["type"] == "result").collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["output"], "first answer");
    assert_eq!(results[1]["output"], "second answer");
    assert_eq!(results[0]["sessionId"], results[1]["sessionId"]);
    assert_eq!(results[0]["turn"], 1);
    assert_eq!(results[1]["turn"], 2);
    assert_eq!(results[1]["usage"]["requests"], 1, "{}", results[1]);
    // Each result line follows its turn's end.
    let position = |pred: &dyn Fn(&Value) -> bool| seen.iter().position(pred).unwrap();
    let first_end = position(&|v| v["type"] == "session_event" && v["event"]["type"] == "turn/end");
    let first_result = position(&|v| v["type"] == "result");
    assert!(first_end < first_result);
    // The second request carries the first exchange: one conversation.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let history = requests[1].body["messages"].to_string();
    assert!(
        history.contains("say one")
            && history.contains("first answer")
            && history.contains("say two"),
        "{history}"
    );
}

/// A line that cannot be used is answered with an error line (and on stderr), nothing of it is
/// logged or sent, and the next line is answered as usual; the exit status is the last turn's.
#[tokio::test]
async fn bad_lines_are_refused_and_the_run_goes_on() {
    let provider = FakeProvider::start([reply("fine")]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("shot.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    let input = [
        "this is not json",
        "",
        r#"{"type": "assistant", "content": "x"}"#,
        // The default model takes no images.
        r#"{"type": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "path": "shot.png"}]}"#,
        r#"{"type": "user", "content": "now text only"}"#,
    ]
    .join("\n");
    let out = output_with_input(command(home.path(), cwd.path(), &provider), &input).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let lines = lines(&stdout);
    let errors: Vec<&Value> = lines.iter().filter(|v| v["type"] == "error").collect();
    assert_eq!(errors.len(), 3, "{stdout}");
    assert_eq!(errors[0]["line"], 1);
    assert_eq!(errors[1]["line"], 3);
    assert_eq!(errors[2]["line"], 4);
    assert!(errors[2]["message"]
        .as_str()
        .unwrap()
        .contains("takes no images"));
    assert!(stderr.contains("BAD_INPUT: line 1"), "{stderr}");
    let results: Vec<&Value> = lines.iter().filter(|v| v["type"] == "result").collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["output"], "fine");
    let requests = provider.requests();
    assert_eq!(
        requests.len(),
        1,
        "{stderr}\n{:#?}",
        requests
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    let sent = requests[0].body["messages"].to_string();
    assert!(
        !sent.contains("look"),
        "a refused line reached the model: {sent}"
    );
}

#[tokio::test]
async fn no_message_or_a_task_argument_is_an_error() {
    let provider = FakeProvider::start([]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = output_with_input(command(home.path(), cwd.path(), &provider), "\n").await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("NO_TASK") && stderr.contains("\"type\": \"user\""),
        "{stderr}"
    );
    let mut cmd = command(home.path(), cwd.path(), &provider);
    cmd.arg("a task too");
    let out = output_with_input(cmd, "").await;
    assert_eq!(out.status.code(), Some(2), "a task argument was accepted");
    assert!(provider.requests().is_empty());
}
