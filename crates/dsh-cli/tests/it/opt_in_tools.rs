//! `dsh run` offers the job tools and `ask_user_question` always, and `web_fetch` only when
//! `[tools.web_fetch] enabled = true` is in the user's config.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::process::Stdio;

use dsh_test_support::{snapshot_fixtures_dir, FakeProvider, RecordedSession};

async fn offered_tools(config: Option<&str>) -> Vec<String> {
    let fixtures = snapshot_fixtures_dir();
    let recording = RecordedSession::load(&fixtures.join("text-turn")).unwrap();
    let provider = FakeProvider::start(recording.replies()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    if let Some(text) = config {
        std::fs::write(home.path().join("config.toml"), text).unwrap();
    }
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("DSH_HOME", home.path())
        .env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test")
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .args([
            "run",
            "Reply with exactly the word: PONG. Do not use any tools.",
        ]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("dsh run hung")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn web_fetch_is_offered_only_when_enabled() {
    let tools = offered_tools(None).await;
    for name in [
        "ask_user_question",
        "job_kill",
        "job_list",
        "job_output",
        "bash",
    ] {
        assert!(tools.iter().any(|t| t == name), "{name} missing: {tools:?}");
    }
    assert!(!tools.iter().any(|t| t == "web_fetch"), "{tools:?}");
    let tools = offered_tools(Some("[tools.web_fetch]\nenabled = true\n")).await;
    assert!(tools.iter().any(|t| t == "web_fetch"), "{tools:?}");
}
