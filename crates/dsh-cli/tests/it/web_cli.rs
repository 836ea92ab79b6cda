//! `dsh web` as a process: prints its address, answers within milliseconds, drives a session
//! through `dsh run`'s agent wiring against the fake provider, refuses non-loopback binds.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_test_support::{FakeProvider, SseReply, WireUsage};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::dsh_command;

/// A running `dsh web` (also started by `accounting_cli`).
pub(crate) struct Launch {
    pub(crate) child: tokio::process::Child,
    /// Kept open: the server may print more.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    url: String,
    pub(crate) token: String,
    pub(crate) base: String,
    /// From spawn to the first answered request.
    startup: Duration,
}

/// Redeems the launch code of `url` as a browser does; returns the sign-in cookie's value.
async fn sign_in(url: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 303, "redeeming {url}");
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let pair = cookie.split(';').next().unwrap();
    pair.split_once('=').unwrap().1.to_string()
}

pub(crate) async fn launch(
    home: &std::path::Path,
    cwd: &std::path::Path,
    base_url: &str,
) -> Launch {
    launch_as(home, cwd, base_url, "danger-full-access").await
}

/// [`launch`] with the permission preset `preset`.
pub(crate) async fn launch_as(
    home: &std::path::Path,
    cwd: &std::path::Path,
    base_url: &str,
    preset: &str,
) -> Launch {
    let started = Instant::now();
    let mut child = tokio::process::Command::from(dsh_command(home, cwd))
        .env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-web-cli")
        .env("DSH_PERMISSION_MODE", preset)
        .args(["web", "--port", "0", "--no-open"])
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
    let (base, _code) = url.split_once("/?code=").unwrap();
    let token = sign_in(&url).await;
    let client = reqwest::Client::new();
    let info = client
        .get(format!("{base}/api/info"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let startup = started.elapsed();
    assert_eq!(info.status(), 200);
    Launch {
        child,
        _stdout: lines,
        url: url.clone(),
        token,
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

/// The browser opener gets a private launch page; it is deleted as soon as the browser used its
/// code, and a page nobody fetched is deleted when `dsh web` is stopped (SIGTERM).
#[tokio::test]
async fn the_launch_page_dies_after_its_first_use_and_at_exit() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let opened = bin.path().join("opened.log");
    let opener = bin.path().join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\necho \"$1\" >> '{}'\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for fetch in [true, false] {
        let _ = std::fs::remove_file(&opened);
        let mut child = tokio::process::Command::from(dsh_command(home.path(), cwd.path()))
            .env("PATH", &path)
            .env("DEEPSEEK_API_KEY", "sk-web-cli")
            .args(["web", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let printed = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(printed.contains("/?code="), "{printed}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let page = loop {
            if let Ok(text) = std::fs::read_to_string(&opened) {
                if let Some(line) = text.lines().next() {
                    break std::path::PathBuf::from(line);
                }
            }
            assert!(Instant::now() < deadline, "the opener was never run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            page.starts_with(home.path().join("web")),
            "{}",
            page.display()
        );
        let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let html = std::fs::read_to_string(&page).unwrap();
        let start = html.find("url=").unwrap() + 4;
        let url = html[start..start + html[start..].find('"').unwrap()].to_string();
        assert_ne!(
            url,
            printed.trim_start_matches("dsh web: serving "),
            "one code each"
        );
        if fetch {
            let token = sign_in(&url).await;
            assert!(!page.exists(), "the launch page outlived its first use");
            let again = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap()
                .get(&url)
                .send()
                .await
                .unwrap();
            assert_eq!(again.status(), 401);
            let base = url.split_once("/?code=").unwrap().0;
            let info = reqwest::Client::new()
                .get(format!("{base}/api/info"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(info.status(), 200);
        } else {
            assert!(page.exists());
        }
        // SAFETY: kill(2) on our own child's pid.
        let pid = child.id().unwrap() as i32;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .expect("dsh web did not stop on SIGTERM")
            .unwrap();
        assert!(status.success(), "{status:?}");
        assert!(!page.exists(), "the launch page outlived dsh web");
        let left: Vec<_> = std::fs::read_dir(home.path().join("web"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
