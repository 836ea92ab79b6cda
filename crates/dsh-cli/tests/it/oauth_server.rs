//! A local OAuth-protected MCP server for `mcp_cli`'s login tests, on 127.0.0.1: protected
//! resource and authorization server metadata, `/register`, `/authorize` (redirects at once to
//! the redirect URI with code and state), `/token` (checks the PKCE verifier; codes and refresh
//! tokens), and `/mcp`, a streamable-HTTP MCP server with one tool (`whoami`) that answers 401
//! without a valid access token. It records who sent which token where.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use base64::Engine;
use reqwest::Url;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request to `/mcp`: its method and the bearer token it carried.
#[derive(Debug, Clone)]
pub(crate) struct McpRequest {
    pub(crate) token: Option<String>,
    pub(crate) rpc: Option<String>,
}

#[derive(Default)]
struct State {
    next: u32,
    /// code -> (PKCE challenge, redirect URI, client id).
    codes: HashMap<String, (String, String, String)>,
    access: HashSet<String>,
    refresh: HashSet<String>,
    refreshes: u32,
    /// Seconds each new access token lives.
    expires_in: u64,
    mcp: Vec<McpRequest>,
}

/// The running server.
pub(crate) struct OAuthServer {
    pub(crate) port: u16,
    state: Arc<Mutex<State>>,
}

impl OAuthServer {
    pub(crate) async fn start() -> OAuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            expires_in: 3600,
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let _ = serve(stream, port, state).await;
                });
            }
        });
        OAuthServer { port, state }
    }

    pub(crate) fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Every access token issued so far stops working.
    pub(crate) fn revoke_access(&self) {
        self.state.lock().unwrap().access.clear();
    }

    pub(crate) fn refreshes(&self) -> u32 {
        self.state.lock().unwrap().refreshes
    }

    pub(crate) fn mcp_requests(&self) -> Vec<McpRequest> {
        self.state.lock().unwrap().mcp.clone()
    }

    /// Every token the server issued and still accepts.
    pub(crate) fn valid_tokens(&self) -> HashSet<String> {
        self.state.lock().unwrap().access.clone()
    }
}

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn url(&self) -> Url {
        Url::parse(&format!("http://127.0.0.1{}", self.target)).unwrap()
    }

    /// Form or query parameters.
    fn params(text: &str) -> HashMap<String, String> {
        Url::parse(&format!("http://x/?{text}"))
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect()
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = data[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

async fn reply(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut text = format!(
        "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

fn json_headers() -> Vec<(&'static str, String)> {
    vec![("content-type", "application/json".to_string())]
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    port: u16,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await else {
        return Ok(());
    };
    let base = format!("http://127.0.0.1:{port}");
    let url = request.url();
    let path = url.path().to_string();
    match (request.method.as_str(), path.as_str()) {
        ("GET", "/.well-known/oauth-protected-resource/mcp") => {
            let body =
                json!({ "resource": format!("{base}/mcp"), "authorization_servers": [base] });
            reply(&mut stream, "200 OK", &json_headers(), &body.to_string()).await
        }
        ("GET", "/.well-known/oauth-authorization-server") => {
            let body = json!({
                "issuer": base,
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
                "registration_endpoint": format!("{base}/register"),
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            });
            reply(&mut stream, "200 OK", &json_headers(), &body.to_string()).await
        }
        ("POST", "/register") => {
            let asked: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let body =
                json!({ "client_id": "dsh-test-client", "redirect_uris": asked["redirect_uris"] });
            reply(
                &mut stream,
                "201 Created",
                &json_headers(),
                &body.to_string(),
            )
            .await
        }
        ("GET", "/authorize") => {
            let q = Request::params(url.query().unwrap_or_default());
            assert_eq!(q["response_type"], "code");
            assert_eq!(q["code_challenge_method"], "S256");
            assert_eq!(q["client_id"], "dsh-test-client");
            assert_eq!(q["resource"], format!("{base}/mcp"));
            let code = {
                let mut s = state.lock().unwrap();
                s.next += 1;
                let code = format!("code-{}", s.next);
                s.codes.insert(
                    code.clone(),
                    (
                        q["code_challenge"].clone(),
                        q["redirect_uri"].clone(),
                        q["client_id"].clone(),
                    ),
                );
                code
            };
            let mut target = Url::parse(&q["redirect_uri"]).unwrap();
            target
                .query_pairs_mut()
                .append_pair("code", &code)
                .append_pair("state", &q["state"]);
            reply(
                &mut stream,
                "302 Found",
                &[("location", target.to_string())],
                "",
            )
            .await
        }
        ("POST", "/token") => {
            let form = Request::params(&String::from_utf8_lossy(&request.body));
            let issued = {
                let mut s = state.lock().unwrap();
                let ok = match form.get("grant_type").map(String::as_str) {
                    Some("authorization_code") => match s.codes.remove(&form["code"]) {
                        Some((challenge, redirect, client)) => {
                            let digest = ring::digest::digest(
                                &ring::digest::SHA256,
                                form["code_verifier"].as_bytes(),
                            );
                            let computed =
                                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
                            computed == challenge
                                && redirect == form["redirect_uri"]
                                && client == form["client_id"]
                        }
                        None => false,
                    },
                    Some("refresh_token") => {
                        let ok = s.refresh.contains(&form["refresh_token"]);
                        if ok {
                            s.refreshes += 1;
                        }
                        ok
                    }
                    _ => false,
                };
                ok.then(|| {
                    s.next += 1;
                    // Token-sized values (the redaction set ignores strings under 12 bytes).
                    let (access, refresh) = (
                        format!(
                            "at-{:016x}",
                            (s.next as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        ),
                        format!(
                            "rt-{:016x}",
                            (s.next as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                        ),
                    );
                    s.access.insert(access.clone());
                    s.refresh.insert(refresh.clone());
                    json!({ "access_token": access, "token_type": "Bearer",
                            "expires_in": s.expires_in, "refresh_token": refresh })
                })
            };
            match issued {
                Some(body) => {
                    reply(&mut stream, "200 OK", &json_headers(), &body.to_string()).await
                }
                None => {
                    let body = json!({ "error": "invalid_grant" }).to_string();
                    reply(&mut stream, "400 Bad Request", &json_headers(), &body).await
                }
            }
        }
        (_, "/mcp") => {
            let token = request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_string);
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let valid = {
                let mut s = state.lock().unwrap();
                s.mcp.push(McpRequest {
                    token: token.clone(),
                    rpc: message["method"].as_str().map(str::to_string),
                });
                token.as_ref().is_some_and(|t| s.access.contains(t))
            };
            if !valid {
                let challenge = format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                );
                return reply(
                    &mut stream,
                    "401 Unauthorized",
                    &[("www-authenticate", challenge)],
                    "",
                )
                .await;
            }
            match request.method.as_str() {
                "GET" => reply(&mut stream, "405 Method Not Allowed", &[], "").await,
                "DELETE" => reply(&mut stream, "200 OK", &[], "").await,
                _ if message.get("id").is_none() => {
                    reply(&mut stream, "202 Accepted", &[], "").await
                }
                _ => {
                    let result = match message["method"].as_str() {
                        Some("initialize") => json!({
                            "protocolVersion": message["params"]["protocolVersion"],
                            "capabilities": { "tools": {} },
                            "serverInfo": { "name": "oauth-test", "version": "1" }
                        }),
                        Some("tools/list") => json!({ "tools": [{
                            "name": "whoami",
                            "description": "Says whose token called it",
                            "inputSchema": { "type": "object" },
                            "annotations": { "readOnlyHint": true }
                        }]}),
                        // A careless server: it echoes the caller's token.
                        Some("tools/call") => json!({
                            "content": [{ "type": "text", "text": format!(
                                "hello, holder of a valid token ({})",
                                token.as_deref().unwrap_or_default()
                            ) }]
                        }),
                        _ => json!({}),
                    };
                    let body = json!({ "jsonrpc": "2.0", "id": message["id"], "result": result });
                    let mut headers = json_headers();
                    headers.push(("mcp-session-id", "session-1".to_string()));
                    reply(&mut stream, "200 OK", &headers, &body.to_string()).await
                }
            }
        }
        _ => reply(&mut stream, "404 Not Found", &[], "").await,
    }
}
