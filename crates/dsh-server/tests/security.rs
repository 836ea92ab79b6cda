//! The server's gate over real HTTP: token, Host (DNS rebinding), Origin, content type, bind.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

mod support;

use serde_json::json;
use support::Web;

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
async fn query_token_sets_a_strict_httponly_cookie_once() {
    let mut web = Web::start(vec![]).await;
    let response = web
        .client
        .get(format!("{}/?token={}", web.base, web.token))
        .send()
        .await
        .unwrap();
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
    let page = web
        .client
        .get(format!("{}/", web.base))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("default-src 'self'"));
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
    web.stop().await;
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
