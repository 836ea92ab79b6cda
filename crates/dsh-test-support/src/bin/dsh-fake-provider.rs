//! `dsh-fake-provider`: the fake provider as a process, for tests written in another language
//! (`tests/harbor/`, docs/harbor.md, "Tests"). Serves a scripted task in DeepSeek's
//! chat-completions format on 127.0.0.1, prints one JSON line on stdout
//! (`{"base_url": ..., "usage": [...]}`: the address and the usage each reply reports, in
//! order), keeps `--requests <file>` up to date with every request received (a JSON array of
//! `{method, path, body}`), and exits when its stdin closes.
//!
//! Scripts: `tool-task` (a `bash` call writing `harbor-done.txt`, then a final text).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use serde_json::json;

/// The usage of the two replies of `tool-task`.
const TOOL_TASK_USAGE: [WireUsage; 2] = [
    WireUsage {
        prompt_tokens: 1200,
        prompt_cache_hit_tokens: 256,
        completion_tokens: 31,
        reasoning_tokens: 7,
    },
    WireUsage {
        prompt_tokens: 1300,
        prompt_cache_hit_tokens: 1152,
        completion_tokens: 9,
        reasoning_tokens: 0,
    },
];

fn tool_task() -> Vec<ScriptedReply> {
    vec![
        ScriptedReply::from(
            SseReply::new()
                .reasoning("Write the marker file.")
                .tool_call(
                    0,
                    "call_harbor_1",
                    "bash",
                    "{\"command\": \"echo harbor > harbor-done.txt\", \"description\": \"Write the marker\"}",
                )
                .finish("tool_calls", Some(TOOL_TASK_USAGE[0])),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("Done: harbor-done.txt written.")
                .finish("stop", Some(TOOL_TASK_USAGE[1])),
        ),
    ]
}

fn usage_json(usage: &WireUsage) -> serde_json::Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "prompt_cache_hit_tokens": usage.prompt_cache_hit_tokens,
        "completion_tokens": usage.completion_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    })
}

fn usage_error(message: &str) -> ! {
    eprintln!("dsh-fake-provider: {message}");
    eprintln!("usage: dsh-fake-provider --script tool-task [--requests FILE]");
    std::process::exit(2);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut script = None;
    let mut requests_file: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--script" => script = args.next(),
            "--requests" => requests_file = args.next().map(PathBuf::from),
            other => usage_error(&format!("unknown argument `{other}`")),
        }
    }
    let (replies, usage) = match script.as_deref() {
        Some("tool-task") => (tool_task(), TOOL_TASK_USAGE.to_vec()),
        Some(other) => usage_error(&format!("unknown script `{other}`")),
        None => usage_error("--script is required"),
    };
    let provider = match FakeProvider::start(replies).await {
        Ok(provider) => provider,
        Err(err) => {
            eprintln!("dsh-fake-provider: cannot listen on 127.0.0.1: {err}");
            std::process::exit(1);
        }
    };
    let line = json!({
        "base_url": provider.base_url(),
        "usage": usage.iter().map(usage_json).collect::<Vec<_>>(),
    });
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    // Until stdin closes: write the requests whenever a new one arrived.
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::spawn({
        let closed = std::sync::Arc::clone(&closed);
        move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            closed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let mut written = usize::MAX;
    loop {
        let count = provider.requests().len();
        if count != written {
            if let Some(path) = &requests_file {
                let requests: Vec<_> = provider
                    .requests()
                    .into_iter()
                    .map(|r| json!({"method": r.method, "path": r.path, "body": r.body}))
                    .collect();
                let text = serde_json::to_string_pretty(&requests).unwrap_or_default();
                if let Err(err) = std::fs::write(path, text) {
                    eprintln!("dsh-fake-provider: cannot write {}: {err}", path.display());
                    std::process::exit(1);
                }
            }
            written = count;
        }
        if closed.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
