//! The server's gate over real HTTP: launch codes, the sign-in cookie, the launch page, an
//! attacker process reading `$DSH_HOME`, Host (DNS rebinding), Origin, content type, bind.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use crate::support;

use std::time::Duration;

use crate::support::Web;
use serde_json::json;

#[tokio::test]
async fn missing_or_wrong_token_is_401() {
    let mut web = Web::start(vec![]).await;
    let url = format!("{}/api/sessions", web.base);
    let missing = web.client.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    let wrong = web
        .client
        .get(&url)
        .bearer_auth("0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let wrong_query = web
        .client
        .get(format!("{url}?token=abc"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_query.status(), 401);
    let page = web
        .client
        .get(format!("{}/", web.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 401);
    let post = web.client.post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(post.status(), 401);
    let (status, body) = web.json(web.get("/api/sessions")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["workspaces"], json!([]));
    web.stop().await;
}

#[tokio::test]
async fn a_launch_code_works_once_and_sets_a_strict_httponly_cookie() {
    let mut web = Web::start(vec![]).await;
    let url = web.server.as_ref().unwrap().issue_url(None);
    let code = url.split_once("?code=").unwrap().1.to_string();
    // The code is no credential by itself.
    let (status, _) = web
        .json(
            web.client
                .get(format!("{}/api/info", web.base))
                .bearer_auth(&code),
        )
        .await;
    assert_eq!(status, 401);
    let response = web.client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    assert!(!pair.contains(&code), "the cookie is not the code");
    let page = web
        .client
        .get(format!("{}/", web.base))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    // The composer previews images from `blob:` URLs; only images may come from there.
    assert!(csp.contains("img-src 'self' data: blob:;"), "{csp}");
    assert_eq!(csp.matches("blob:").count(), 1, "{csp}");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert!(page.text().await.unwrap().contains("<title>dsh</title>"));
    let script = web
        .client
        .get(format!("{}/ui/app.js", web.base))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    let api = web
        .client
        .get(format!("{}/api/sessions", web.base))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);

    // A second use is refused, on the page and on the API, with the reason.
    let again = web.client.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 401);
    assert!(again.headers().get("set-cookie").is_none());
    assert!(again.text().await.unwrap().contains("already used"));
    let (status, body) = web
        .json(web.client.get(format!("{}/api/info?code={code}", web.base)))
        .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("launch code works once"));
    // A signed-in browser reloading the old address is sent to the clean one, no new cookie.
    let reload = web
        .client
        .get(&url)
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 303);
    assert_eq!(reload.headers()["location"], "/");
    assert!(reload.headers().get("set-cookie").is_none());
    // A code is only redeemed by a GET.
    let fresh = web.server.as_ref().unwrap().issue_url(None);
    let fresh_code = fresh.split_once("?code=").unwrap().1;
    let post = web
        .client
        .post(format!("{}/api/sessions?code={fresh_code}", web.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 401);
    // A signed-in client can mint a code for another browser; it works once too.
    let (status, body) = web.json(web.post("/api/launch", json!({}))).await;
    assert_eq!(status, 201, "{body}");
    let shared = format!("{}{}", web.base, body["path"].as_str().unwrap());
    assert_eq!(web.client.get(&shared).send().await.unwrap().status(), 303);
    assert_eq!(web.client.get(&shared).send().await.unwrap().status(), 401);
    let (status, _) = web
        .json(
            web.client
                .post(format!("{}/api/launch", web.base))
                .json(&json!({})),
        )
        .await;
    assert_eq!(status, 401);
    web.stop().await;
}

#[tokio::test]
async fn the_launch_page_is_private_and_dies_with_its_code() {
    use std::os::unix::fs::PermissionsExt;
    let mut web = Web::start(vec![]).await;
    let dir = web.home.path().join("web");
    let server = web.server.as_ref().unwrap();
    let page = server.write_launch_page(&dir).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&page), 0o600);
    let html = std::fs::read_to_string(&page).unwrap();
    let url = launch_url_in(&html);
    // The browser fetches the address: the page is gone at once and its code is dead.
    let token = support::sign_in(&web.client, &url).await;
    assert!(!page.exists(), "the launch page outlived its first use");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(web.client.get(&url).send().await.unwrap().status(), 401);
    let (status, _) = web
        .json(
            web.client
                .get(format!("{}/api/info", web.base))
                .bearer_auth(&token),
        )
        .await;
    assert_eq!(status, 200);

    // A second page at the same path replaces the first: the first's code dies with it.
    let first = web
        .server
        .as_ref()
        .unwrap()
        .write_launch_page(&dir)
        .unwrap();
    let first_url = launch_url_in(&std::fs::read_to_string(&first).unwrap());
    let second = web
        .server
        .as_ref()
        .unwrap()
        .write_launch_page(&dir)
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(
        web.client.get(&first_url).send().await.unwrap().status(),
        401
    );
    let second_url = launch_url_in(&std::fs::read_to_string(&second).unwrap());
    support::sign_in(&web.client, &second_url).await;
    assert!(!second.exists());

    // A page nobody fetched is deleted when the server stops, and its code dies with it.
    let unused = web
        .server
        .as_ref()
        .unwrap()
        .write_launch_page(&dir)
        .unwrap();
    assert!(unused.exists());
    web.stop().await;
    assert!(!unused.exists(), "the launch page outlived the server");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// The address a launch page redirects to.
fn launch_url_in(html: &str) -> String {
    let start = html.find("url=").unwrap() + 4;
    let end = start + html[start..].find('"').unwrap();
    html[start..end].to_string()
}

/// The attacker: a separate process (this test binary again, see [`attacker_process`]) that
/// reads every file under `$DSH_HOME`, tries every token-looking string in it as a launch code,
/// a bearer token and the sign-in cookie, and with whatever works asks to switch the session
/// to `danger-full-access`, confirmation included. It runs once while a launch page is still
/// unfetched (it must get in: that proves it can), then after the browser fetched another page
/// (it must get nothing, and the preset must stay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_reading_dsh_home_cannot_switch_the_preset() {
    let mut web = Web::start(vec![support::text("One.")]).await;
    let id = web.create("hi").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let path = format!("/api/sessions/{id}/permission");
    let (status, body) = web
        .json(web.post(&path, json!({"preset": "read-only"})))
        .await;
    assert_eq!(status, 200, "{body}");
    let dir = web.home.path().join("web");
    let port = web.server.as_ref().unwrap().address().port();

    // Control: with an unfetched launch page on disk, the attacker gets in.
    let first = web
        .server
        .as_ref()
        .unwrap()
        .write_launch_page(&dir)
        .unwrap();
    let probe = attack(web.home.path(), port, &id, "probe").await;
    assert!(
        probe.working >= 1,
        "the attacker found no working secret: {probe:?}"
    );
    assert!(!first.exists());

    // The real case: the browser fetched its page; then the attacker reads everything.
    let page = web
        .server
        .as_ref()
        .unwrap()
        .write_launch_page(&dir)
        .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    let browser = support::sign_in(&web.client, &launch_url_in(&html)).await;
    let report = attack(web.home.path(), port, &id, "switch").await;
    eprintln!("attacker after the browser's fetch: {report:?} (control before it: {probe:?})");
    assert!(report.candidates > 0, "{report:?}");
    assert_eq!(report.working, 0, "{report:?}");
    assert_eq!(report.switched, 0, "{report:?}");
    let (_, detail) = web
        .json(
            web.client
                .get(format!("{}/api/sessions/{id}", web.base))
                .bearer_auth(&browser),
        )
        .await;
    assert_eq!(detail["permission"], "read-only");
    // Nothing was logged after the user's own switch to read-only.
    let mut logged = Vec::new();
    while let Ok(event) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        logged.push(event);
    }
    let presets: Vec<_> = logged
        .iter()
        .filter(|e| e.kind() == "permission/preset")
        .map(|e| e.data["data"]["preset"].clone())
        .collect();
    assert_eq!(presets, [json!("read-only")], "{logged:?}");
    web.stop().await;
}

#[derive(Debug, Default)]
struct Attack {
    candidates: usize,
    working: usize,
    switched: usize,
}

async fn attack(home: &std::path::Path, port: u16, id: &str, mode: &str) -> Attack {
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        // The test's full name inside the merged `it` binary (tests/it/main.rs).
        .args([
            "--exact",
            "security::attacker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "DSH_WEB_ATTACK",
            format!("{mode} {port} {id} {}", home.display()),
        )
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "attacker failed: {stdout}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("ATTACK ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the attacker did not run: {stdout}"));
    let numbers: Vec<usize> = line
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    Attack {
        candidates: numbers[0],
        working: numbers[1],
        switched: numbers[2],
    }
}

/// The attacker's body; does nothing unless started by [`attack`] with `DSH_WEB_ATTACK`.
#[test]
fn attacker_process() {
    let Ok(spec) = std::env::var("DSH_WEB_ATTACK") else {
        return;
    };
    let mut parts = spec.splitn(4, ' ');
    let (mode, port, id, home) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().parse::<u16>().unwrap(),
        parts.next().unwrap().to_string(),
        std::path::PathBuf::from(parts.next().unwrap()),
    );
    let mut texts = Vec::new();
    read_all(&home, &mut texts);
    let mut candidates: Vec<String> = Vec::new();
    for bytes in &texts {
        let text = String::from_utf8_lossy(bytes);
        for run in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')) {
            if run.len() >= 16 && !candidates.iter().any(|c| c == run) {
                candidates.push(run.to_string());
            }
        }
    }
    let cookie_name = format!("dsh_web_{port}");
    let mut secrets: Vec<String> = Vec::new();
    for candidate in &candidates {
        let (status, head) = raw(port, "GET", &format!("/api/info?code={candidate}"), &[], "");
        if status == 303 {
            if let Some(value) = head
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
                .and_then(|l| l.split_once('='))
                .map(|(_, v)| v.split(';').next().unwrap().to_string())
            {
                secrets.push(value);
            }
        }
        let bearer = format!("Authorization: Bearer {candidate}");
        if raw(port, "GET", "/api/info", &[&bearer], "").0 == 200 {
            secrets.push(candidate.clone());
        }
        let cookie = format!("Cookie: {cookie_name}={candidate}");
        if raw(port, "GET", "/api/info", &[&cookie], "").0 == 200 {
            secrets.push(candidate.clone());
        }
    }
    let mut switched = 0;
    if mode == "switch" {
        for secret in &secrets {
            let bearer = format!("Authorization: Bearer {secret}");
            let body = r#"{"preset":"danger-full-access","confirm":true}"#;
            let path = format!("/api/sessions/{id}/permission");
            if raw(port, "POST", &path, &[&bearer], body).0 == 200 {
                switched += 1;
            }
        }
    }
    println!("ATTACK {} {} {switched}", candidates.len(), secrets.len());
}

fn read_all(dir: &std::path::Path, out: &mut Vec<Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            read_all(&path, out);
        } else if kind.is_file() {
            if let Ok(bytes) = std::fs::read(&path) {
                out.push(bytes);
            }
        }
    }
}

/// One HTTP/1.1 request over a plain socket: the status and the response head.
fn raw(port: u16, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    socket.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer).to_string();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head)
}

#[tokio::test]
async fn bad_host_or_origin_is_403_even_with_the_token() {
    let mut web = Web::start(vec![]).await;
    let port = web.server.as_ref().unwrap().address().port();
    for host in [
        "evil.example",
        "evil.example:1",
        "localhost.evil.example",
        "127.0.0.1:1",
    ] {
        let host = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        let response = web
            .get("/api/sessions")
            .header("Host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{host}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "BAD_HOST");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = web
            .get("/api/sessions")
            .header("Host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{host}");
    }
    let response = web
        .post("/api/sessions", json!({}))
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    web.stop().await;
}

#[tokio::test]
async fn mutating_requests_must_be_json() {
    let mut web = Web::start(vec![]).await;
    let url = format!("{}/api/sessions", web.base);
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut request = web.client.post(&url).bearer_auth(&web.token).body("{}");
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 415, "{content_type:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "UNSUPPORTED_MEDIA_TYPE");
    }
    let bad = web
        .client
        .post(&url)
        .bearer_auth(&web.token)
        .header("Content-Type", "application/json; charset=utf-8")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    web.stop().await;
}

#[tokio::test]
async fn non_loopback_bind_is_refused_without_allow_remote() {
    let refused = dsh_server::bind("0.0.0.0:0".parse().unwrap(), false).await;
    let err = refused.expect_err("0.0.0.0 must be refused");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("--allow-remote"), "{err}");
    assert!(dsh_server::bind("0.0.0.0:0".parse().unwrap(), true)
        .await
        .is_ok());
}

#[tokio::test]
async fn errors_are_json_with_codes() {
    let mut web = Web::start(vec![]).await;
    let (status, body) = web.json(web.get("/api/sessions/0000-no-such")).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "NOT_FOUND");
    let (status, body) = web.json(web.get("/api/sessions/..%2F..%2Fetc")).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = web.json(web.get("/api/nothing")).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "NOT_FOUND");
    let (status, body) = web
        .json(web.post("/api/sessions", json!({"cwd": "/definitely/not/here"})))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = web
        .json(web.post("/api/sessions", json!({"bogus": 1})))
        .await;
    assert_eq!(status, 400);
    web.stop().await;
}
