//! Every billed call counts (docs/sessions.md, "Cost"): a session whose first turn ran in
//! `dsh web` (with the model-title call beside it) and whose second ran in `dsh run --json`
//! (a child, a reply that failed after its usage arrived, an overflow that compacted). The
//! result line reports the second turn's calls, `sessions show` and `sessions list` the whole
//! session's, each the sum of the usage the fake provider sent.

use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_session::PriceTable;
use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, StreamEnd, WireUsage};
use serde_json::{json, Value};

use crate::common::{dsh_command, output, text};

const MODEL: &str = "deepseek-v4-flash";

fn wire(prompt: u64, hit: u64, completion: u64) -> WireUsage {
    WireUsage {
        prompt_tokens: prompt,
        prompt_cache_hit_tokens: hit,
        completion_tokens: completion,
        reasoning_tokens: 0,
    }
}

/// Requests, uncached input, cache read and output the loop counts for `calls`.
fn sum(calls: &[WireUsage]) -> (u64, u64, u64, u64) {
    calls.iter().fold((0, 0, 0, 0), |t, w| {
        (
            t.0 + 1,
            t.1 + w.prompt_tokens - w.prompt_cache_hit_tokens,
            t.2 + w.prompt_cache_hit_tokens,
            t.3 + w.completion_tokens,
        )
    })
}

/// The cost at the built-in price of [`MODEL`] (`ModelPrice::cost`'s sum).
fn cost((_, input, cache_read, output): (u64, u64, u64, u64)) -> f64 {
    let price = PriceTable::default_deepseek().models[MODEL];
    (input as f64 * price.input_per_mtok
        + cache_read as f64 * price.cache_read_per_mtok
        + output as f64 * price.output_per_mtok)
        / 1_000_000.0
}

fn reply(text: &str, usage: WireUsage) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish("stop", Some(usage))
        .into()
}

/// Turn 1 in `dsh web`: the reply and the title call; returns once the title call's usage is
/// in the log, and stops the server.
async fn first_turn_in_web(home: &std::path::Path, cwd: &std::path::Path, base_url: &str) {
    let mut web = crate::web_cli::launch(home, cwd, base_url).await;
    let created: Value = reqwest::Client::new()
        .post(format!("{}/api/sessions", web.base))
        .bearer_auth(&web.token)
        .json(&json!({"prompt": "hello from the web"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(created["id"].is_string(), "{created}");
    // The title's usage is logged when the turn settles its title, after `turn/end`.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = crate::common::session_files(home)
            .first()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or_default();
        if log.contains("\"purpose\":\"title\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the title call's usage was not logged within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    web.child.start_kill().unwrap();
    web.child.wait().await.unwrap();
}

/// The `- name: value` line of a transcript header.
fn header_line<'a>(transcript: &'a str, name: &str) -> &'a str {
    let prefix = format!("- {name}: ");
    transcript
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no `{prefix}` line in {transcript}"))
}

#[tokio::test]
async fn result_line_and_sessions_show_count_every_billed_call() {
    let (turn1, title, step1, child, failed, summary, last) = (
        wire(800, 0, 8),
        wire(30, 0, 5),
        wire(1000, 200, 10),
        wire(700, 0, 70),
        wire(1000, 600, 20),
        wire(3000, 0, 40),
        wire(900, 800, 9),
    );
    // The parents' calls in order; the title and the child by what they ask.
    let provider = FakeProvider::start(vec![
        reply("Hello.", turn1),
        SseReply::new()
            .tool_call(
                0,
                "p1",
                "subagent",
                &json!({"description": "count", "prompt": "CHILD COUNT"}).to_string(),
            )
            .finish("tool_calls", Some(step1))
            .into(),
        // Fails after its usage arrived; retried.
        SseReply::new()
            .text("par")
            .usage(failed)
            .end(StreamEnd::DropConnection)
            .into(),
        // The retry overflows: a compaction, then the call again.
        ScriptedReply::context_length_exceeded(),
        reply("Summary.", summary),
        reply("All done.", last),
    ])
    .await
    .unwrap();
    provider.route(
        RequestMatch::System("You name coding-assistant sessions".into()),
        [reply("Usage check", title)],
    );
    provider.route(
        RequestMatch::FirstUser("CHILD COUNT".into()),
        [reply("counted", child)],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!("model = \"{MODEL}\"\n"),
    )
    .unwrap();
    first_turn_in_web(home.path(), cwd.path(), &provider.base_url()).await;

    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-accounting")
        .stdin(Stdio::null())
        .args([
            "run",
            "--json",
            "--continue",
            "--permission",
            "danger-full-access",
        ])
        .arg("go on");
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let result: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line in {stdout}"));
    assert_eq!(result["output"], "All done.");
    assert_eq!(
        provider.requests().len(),
        8,
        "7 billed calls and the overflow"
    );

    // The result line: the second turn's calls, the child's and the failed one's included.
    let second = sum(&[step1, child, failed, summary, last]);
    let usage = &result["usage"];
    assert_eq!(
        (
            usage["requests"].as_u64().unwrap(),
            usage["inputTokens"].as_u64().unwrap(),
            usage["cacheReadTokens"].as_u64().unwrap(),
            usage["outputTokens"].as_u64().unwrap(),
        ),
        second,
        "{result}"
    );
    let cost_usd = result["costUsd"].as_f64().unwrap();
    assert!((cost_usd - cost(second)).abs() < 1e-12, "{result}");

    // `sessions show`: the whole session's, the web turn and its title included.
    let all = sum(&[turn1, title, step1, child, failed, summary, last]);
    let id = result["sessionId"].as_str().unwrap();
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.args(["sessions", "show", id]);
    let shown = output(cmd).await;
    let (transcript, stderr) = text(&shown);
    assert!(shown.status.success(), "{stderr}");
    assert_eq!(
        header_line(&transcript, "usage"),
        format!(
            "{} requests · input {} uncached + {} cache read + 0 cache write · output {} (reasoning 0)",
            all.0, all.1, all.2, all.3
        )
    );
    assert_eq!(
        header_line(&transcript, "cost"),
        format!("${:.6}", cost(all))
    );
    for purpose in ["failed-reply", "compaction", "title"] {
        assert!(
            transcript.contains(&format!("_billed call ({purpose}) to {MODEL}")),
            "{transcript}"
        );
    }

    // `sessions list`: tokens are billed input plus output.
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.args(["sessions", "list"]);
    let listed = output(cmd).await;
    let (listing, _) = text(&listed);
    let row = listing
        .lines()
        .find(|line| line.starts_with(id))
        .unwrap_or_else(|| panic!("{id} not in {listing}"));
    let tokens = all.1 + all.2 + all.3;
    assert!(
        row.split_whitespace()
            .any(|cell| cell == tokens.to_string()),
        "{tokens} tokens in {row}"
    );
}
