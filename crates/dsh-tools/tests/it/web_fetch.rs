//! `web_fetch` against a tiny HTTP server on 127.0.0.1: pages come back as Markdown when the
//! host is allowed; loopback, `localhost`, link-local metadata addresses and names that resolve
//! to loopback are refused when it is not, before and after redirects.
//!
//! Names that resolve to loopback are constructed with a [`HostResolver`] given to the tool
//! (the same seam the system resolver plugs into), because the test cannot edit `/etc/hosts`;
//! `localhost` itself goes through the system resolver.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Scratch;
use dsh_tools::{HostResolver, PermissionPreset, ToolErrorCode, WebFetchSettings, WebFetchTool};
use futures::future::BoxFuture;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PAGE: &str = "<html><head><title>Test page</title></head><body><h1>Hello</h1>\
<p>Some <em>text</em> with <a href=\"/other\">a link</a>.</p><script>evil()</script></body></html>";

/// Serves a few fixed routes, one request per connection.
async fn serve() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, extra, ctype, body): (&str, String, &str, Vec<u8>) =
                    match path.as_str() {
                        "/page" => (
                            "200 OK",
                            String::new(),
                            "text/html; charset=utf-8",
                            PAGE.into(),
                        ),
                        "/text" => (
                            "200 OK",
                            String::new(),
                            "text/plain",
                            b"plain text\n".to_vec(),
                        ),
                        "/big" => ("200 OK", String::new(), "text/plain", vec![b'x'; 200_000]),
                        "/bin" => (
                            "200 OK",
                            String::new(),
                            "image/png",
                            vec![0x89, b'P', b'N', b'G', 0, 0],
                        ),
                        "/to-page" => (
                            "302 Found",
                            "Location: /page\r\n".into(),
                            "text/plain",
                            Vec::new(),
                        ),
                        "/to-metadata" => (
                            "302 Found",
                            "Location: http://169.254.169.254/latest/meta-data/\r\n".into(),
                            "text/plain",
                            Vec::new(),
                        ),
                        "/to-localhost" => (
                            "301 Moved Permanently",
                            format!(
                                "Location: http://localhost:{port}/page\r\n",
                                port = port_of(&head)
                            ),
                            "text/plain",
                            Vec::new(),
                        ),
                        "/slow" => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            ("200 OK", String::new(), "text/plain", b"late".to_vec())
                        }
                        _ => (
                            "404 Not Found",
                            String::new(),
                            "text/html",
                            b"<p>no such page</p>".to_vec(),
                        ),
                    };
                let response = format!(
                    "HTTP/1.1 {status}\r\n{extra}Content-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    port
}

fn port_of(head: &str) -> u16 {
    head.lines()
        .find_map(|l| {
            l.strip_prefix("host: ")
                .or_else(|| l.strip_prefix("Host: "))
        })
        .and_then(|h| h.rsplit(':').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(80)
}

/// Answers from a fixed table; counts lookups.
struct TableResolver {
    answers: Vec<(&'static str, Vec<SocketAddr>)>,
    lookups: Arc<AtomicUsize>,
}

impl HostResolver for TableResolver {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        // The n-th lookup of a name gets its n-th answer (the last one repeats).
        let asked_before = self.lookups.fetch_add(1, Ordering::SeqCst);
        let entries: Vec<&Vec<SocketAddr>> = self
            .answers
            .iter()
            .filter(|(name, _)| *name == host.trim_end_matches('.'))
            .map(|(_, addrs)| addrs)
            .collect();
        let found = entries
            .get(asked_before.min(entries.len().saturating_sub(1)))
            .map(|addrs| {
                addrs
                    .iter()
                    .map(|a| SocketAddr::new(a.ip(), port))
                    .collect::<Vec<_>>()
            });
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::other("no such host in the test table"))
        })
    }
}

fn scratch(settings: WebFetchSettings, resolver: Option<TableResolver>) -> Scratch {
    let mut s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let mut tool = WebFetchTool::new(settings);
    if let Some(resolver) = resolver {
        tool = tool.with_resolver(Arc::new(resolver));
    }
    s.registry.register(Arc::new(tool)).unwrap();
    s
}

fn allowing(hosts: &[&str]) -> WebFetchSettings {
    WebFetchSettings {
        allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        ..WebFetchSettings::default()
    }
}

fn loopback_table(lookups: &Arc<AtomicUsize>) -> TableResolver {
    TableResolver {
        answers: vec![
            ("internal.test", vec!["127.0.0.1:0".parse().unwrap()]),
            (
                "mixed.test",
                vec!["8.8.8.8:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap()],
            ),
            ("pinned.test", vec!["127.0.0.1:0".parse().unwrap()]),
            // Rebinding: the second answer would point elsewhere.
            ("pinned.test", vec!["10.9.9.9:0".parse().unwrap()]),
        ],
        lookups: Arc::clone(lookups),
    }
}

#[tokio::test]
async fn an_allowed_host_is_fetched_as_markdown() {
    let port = serve().await;
    let s = scratch(allowing(&["127.0.0.1"]), None);
    let out = s
        .ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/page")}),
        )
        .await;
    assert!(
        out.starts_with(&format!(
            "URL: http://127.0.0.1:{port}/page\n\n# Test page\n\n# Hello"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Some *text* with [a link](http://127.0.0.1:{port}/other)."
        )),
        "{out}"
    );
    assert!(!out.contains("evil"), "{out}");
    let text = s
        .ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/text")}),
        )
        .await;
    assert!(text.ends_with("plain text\n"), "{text}");
    // A redirect that stays on an allowed host is followed.
    let out = s
        .ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/to-page")}),
        )
        .await;
    assert!(
        out.starts_with(&format!("URL: http://127.0.0.1:{port}/page")),
        "{out}"
    );
}

#[tokio::test]
async fn internal_addresses_are_refused_unless_allowed() {
    let port = serve().await;
    let lookups = Arc::new(AtomicUsize::new(0));
    let s = scratch(WebFetchSettings::default(), Some(loopback_table(&lookups)));
    for url in [
        format!("http://127.0.0.1:{port}/page"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[::1]/".to_string(),
        "http://[::ffff:127.0.0.1]/".to_string(),
        "http://0x7f.1/".to_string(),
        "http://0.0.0.0/".to_string(),
        "http://10.0.0.1/".to_string(),
        format!("http://internal.test:{port}/page"),
        format!("http://INTERNAL.test.:{port}/page"),
        "http://mixed.test/".to_string(),
    ] {
        let msg = s
            .err(
                "web_fetch",
                json!({"url": url}),
                ToolErrorCode::PermissionDenied,
            )
            .await;
        assert!(msg.starts_with("refused to fetch"), "{url}: {msg}");
        assert!(msg.contains("allowed_hosts"), "{msg}");
    }
    // `localhost` through the system resolver.
    let s = scratch(WebFetchSettings::default(), None);
    let msg = s
        .err(
            "web_fetch",
            json!({"url": format!("http://localhost:{port}/page")}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(
        msg.contains("resolves to 127.0.0.1, a loopback address"),
        "{msg}"
    );
    s.err(
        "web_fetch",
        json!({"url": "file:///etc/passwd"}),
        ToolErrorCode::PermissionDenied,
    )
    .await;
    s.err(
        "web_fetch",
        json!({"url": "not a url"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err("web_fetch", json!({}), ToolErrorCode::InvalidArgs)
        .await;
}

#[tokio::test]
async fn redirects_to_refused_addresses_are_refused() {
    let port = serve().await;
    let s = scratch(allowing(&["127.0.0.1"]), None);
    let msg = s
        .err(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/to-metadata")}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(msg.contains("169.254.169.254"), "{msg}");
    // Allowing 127.0.0.1 does not allow the name localhost.
    let msg = s
        .err(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/to-localhost")}),
            ToolErrorCode::PermissionDenied,
        )
        .await;
    assert!(msg.contains("localhost resolves to 127.0.0.1"), "{msg}");
}

#[tokio::test]
async fn the_connection_goes_to_the_vetted_address() {
    let port = serve().await;
    let lookups = Arc::new(AtomicUsize::new(0));
    let s = scratch(allowing(&["pinned.test"]), Some(loopback_table(&lookups)));
    // `pinned.test` exists only in the table, and its second answer would be 10.9.9.9: the
    // fetch works only if the client connects to the first, vetted answer without asking again.
    let out = s
        .ok(
            "web_fetch",
            json!({"url": format!("http://pinned.test:{port}/page")}),
        )
        .await;
    assert!(out.contains("# Hello"), "{out}");
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn size_cap_timeout_binary_and_errors() {
    let port = serve().await;
    let settings = WebFetchSettings {
        max_bytes: 1000,
        timeout: Duration::from_millis(500),
        ..allowing(&["127.0.0.1"])
    };
    let s = scratch(settings, None);
    let out = s
        .ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/big")}),
        )
        .await;
    assert!(
        out.ends_with("[page cut: only the first 1000 bytes were read]"),
        "{out}"
    );
    let msg = s
        .err(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/bin")}),
            ToolErrorCode::BinaryFile,
        )
        .await;
    assert!(msg.contains("image/png"), "{msg}");
    let msg = s
        .err(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/missing")}),
            ToolErrorCode::Io,
        )
        .await;
    assert!(
        msg.contains("HTTP 404 Not Found") && msg.contains("no such page"),
        "{msg}"
    );
    s.err(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/slow")}),
        ToolErrorCode::ToolTimeout,
    )
    .await;
}
