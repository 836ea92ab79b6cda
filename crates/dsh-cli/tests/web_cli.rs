//! `dsh web` as a process: prints its address, answers within milliseconds, drives a session
//! through `dsh run`'s agent wiring against the fake provider, refuses non-loopback binds.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_test_support::{FakeProvider, SseReply, WireUsage};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

struct Launch {
    child: tokio::process::Child,
    /// Kept open: the server may print more.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    url: String,
    token: String,
    base: String,
    /// From spawn to the first answered request.
    startup: Duration,
}

async fn launch(home: &std::path::Path, cwd: &std::path::Path, base_url: &str) -> Launch {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home)
        .env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-web-cli")
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .current_dir(cwd)
        .args(["web", "--port", "0", "--no-open"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("dsh web printed nothing")
        .unwrap()
        .expect("dsh web closed stdout");
    let url = line
        .strip_prefix("dsh web: serving ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    let (base, token) = url.split_once("/?token=").unwrap();
    let client = reqwest::Client::new();
    let info = client
        .get(format!("{base}/api/info"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let startup = started.elapsed();
    assert_eq!(info.status(), 200);
    Launch {
        child,
        _stdout: lines,
        url: url.clone(),
        token: token.to_string(),
        base: base.to_string(),
        startup,
    }
}

#[tokio::test]
async fn serves_a_session_end_to_end_and_starts_fast() {
    let reply = SseReply::new()
        .text("Hello over the web.")
        .finish("stop", Some(WireUsage::default()));
    // Twice: the session's title call (made alongside the first turn) takes one of them.
    let provider = FakeProvider::start(vec![reply.clone().into(), reply.into()])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut web = launch(home.path(), cwd.path(), &provider.base_url()).await;
    eprintln!(
        "dsh web start-up (spawn to first answer): {:?}",
        web.startup
    );
    assert!(web.url.starts_with("http://127.0.0.1:"), "{}", web.url);
    assert_eq!(web.token.len(), 64);

    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("{}/api/sessions", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"prompt": "hello"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("a session id").to_string();
    let response = client
        .get(format!("{}/api/sessions/{id}/events", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text.contains("\"type\":\"turn/end\"") {
        assert!(Instant::now() < deadline, "no turn/end: {text}");
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("Hello over the web."));
    assert!(text.contains("\"kind\":\"completed\""), "{text}");
    // `dsh run`'s wiring: the permission preset from the environment is logged and shown.
    assert!(text.contains("permission/preset"), "{text}");

    // The factory installs a permission source: a switch is logged, or refused with the reason
    // when this host has no sandbox for the preset.
    let switched = client
        .post(format!("{}/api/sessions/{id}/permission", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"preset": "read-only"}))
        .send()
        .await
        .unwrap();
    let status = switched.status().as_u16();
    let answer: serde_json::Value = switched.json().await.unwrap();
    if status == 200 {
        assert_eq!(answer["permission"], "read-only");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !text.contains("{\"preset\":\"read-only\"}") {
            assert!(Instant::now() < deadline, "no read-only preset: {text}");
            let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    } else {
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("cannot switch to read-only"), "{message}");
    }

    web.child.start_kill().unwrap();
    web.child.wait().await.unwrap();
}

#[tokio::test]
async fn non_loopback_host_is_refused_without_allow_remote() {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DSH_HOME", home.path())
        .args(["web", "--host", "0.0.0.0", "--port", "0", "--no-open"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    assert!(out.stdout.is_empty());
}
