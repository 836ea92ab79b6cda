//! The server's gate (SPEC S7 server rules): loopback binding, `Host` and `Origin` checks
//! against DNS rebinding, a per-launch token, and JSON-only mutating requests.
//!
//! Every request passes [`gate`] in this order: `Host` (403 `BAD_HOST`), `Origin` when present
//! (403 `BAD_ORIGIN`), the token (401 `UNAUTHORIZED`), then for methods other than GET, HEAD
//! and OPTIONS a `Content-Type` of `application/json` (415 `UNSUPPORTED_MEDIA_TYPE`). The token
//! is accepted as `Authorization: Bearer <token>`, as the launch cookie, or once as the
//! `token` query parameter of a GET, which answers with a redirect that sets the cookie
//! (HttpOnly, SameSite=Strict) and drops the token from the address bar.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::RngCore;

use crate::error::ApiError;

/// The secret of one launch: 32 random bytes from the operating system, hex-encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// A fresh random token.
    pub fn generate() -> AccessToken {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        AccessToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The token text (for the launch URL; never logged elsewhere).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Compares in time independent of where `candidate` differs.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), candidate.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// Refuses to serve on a non-loopback address unless `allow_remote` is set.
pub fn check_bind_address(address: &SocketAddr, allow_remote: bool) -> Result<(), String> {
    if address.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(format!(
            "refusing to listen on {} : it is reachable from other machines. dsh web serves \
             loopback only (127.0.0.1, ::1); pass --allow-remote to override, knowing that \
             anyone who obtains the token can run commands as you",
            address.ip()
        ))
    }
}

/// What the gate checks requests against.
#[derive(Debug, Clone)]
pub struct GatePolicy {
    /// The launch token.
    pub token: AccessToken,
    /// The port the server is bound to (the only port accepted in `Host`).
    pub port: u16,
    /// Also accept IP-literal `Host` values that are not loopback (`--allow-remote`). Names
    /// other than `localhost` are never accepted: that is what defeats DNS rebinding.
    pub allow_remote: bool,
}

impl GatePolicy {
    /// The cookie that carries the token; named per port because cookies ignore ports.
    pub fn cookie_name(&self) -> String {
        format!("dsh_web_{}", self.port)
    }

    /// True when `host` (a `Host` header value) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim();
        let (name, port) = match host.rsplit_once(':') {
            Some((name, _)) if !name.ends_with(']') && name.contains(':') => (host, None),
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        let port_ok = match port {
            Some(port) => port.parse::<u16>().ok() == Some(self.port),
            None => self.port == 80,
        };
        if !port_ok {
            return false;
        }
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || self.allow_remote,
            Err(_) => false,
        }
    }

    /// True when `origin` (an `Origin` header value) is this server.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.host_allowed(host))
    }

    fn token_from(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let text = value.to_str().ok()?;
            return text.strip_prefix("Bearer ").map(|t| t.trim().to_string());
        }
        let name = self.cookie_name();
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The `token` query parameter and the query without it.
fn split_token(query: &str) -> (Option<String>, String) {
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("token=") {
            Some(value) => token = Some(value.to_string()),
            None => rest.push(pair),
        }
    }
    (token, rest.join("&"))
}

fn unauthorized(path: &str) -> Response {
    let message = "missing or wrong access token: open the address that `dsh web` printed \
                   (it carries the token), or send `Authorization: Bearer <token>`";
    if path.starts_with("/api/") {
        return ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message).into_response();
    }
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>dsh web</title><p>{}</p>",
        message.replace('<', "&lt;").replace('>', "&gt;")
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The middleware: checks a request against the policy, then adds the security headers to
/// whatever answers it.
pub async fn gate(State(policy): State<Arc<GatePolicy>>, request: Request, next: Next) -> Response {
    let mut response = check(&policy, request, next).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn check(policy: &GatePolicy, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if !host.is_some_and(|h| policy.host_allowed(h)) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "BAD_HOST",
            "the Host header does not name this server (loopback address and its port only)",
        )
        .into_response();
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| policy.origin_allowed(o));
        if !allowed {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "BAD_ORIGIN",
                "cross-origin requests are refused",
            )
            .into_response();
        }
    }
    let path = request.uri().path().to_string();
    let presented = policy.token_from(headers);
    if !presented
        .as_deref()
        .is_some_and(|t| policy.token.matches(t))
    {
        let query = request.uri().query().unwrap_or("");
        let (query_token, rest) = split_token(query);
        if request.method() == Method::GET && query_token.is_some_and(|t| policy.token.matches(&t))
        {
            let location = if rest.is_empty() {
                path.clone()
            } else {
                format!("{path}?{rest}")
            };
            let cookie = format!(
                "{}={}; Path=/; HttpOnly; SameSite=Strict",
                policy.cookie_name(),
                policy.token.as_str()
            );
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, location), (header::SET_COOKIE, cookie)],
            )
                .into_response();
        }
        return unauthorized(&path);
    }
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !safe && !is_json(request.headers()) {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            "mutating requests must be sent as application/json",
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow_remote: bool) -> GatePolicy {
        GatePolicy {
            token: AccessToken::generate(),
            port: 3080,
            allow_remote,
        }
    }

    #[test]
    fn hosts() {
        let p = policy(false);
        for ok in [
            "127.0.0.1:3080",
            "localhost:3080",
            "LOCALHOST:3080",
            "[::1]:3080",
            "127.1.2.3:3080",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.com:3080",
            "127.0.0.1:3081",
            "127.0.0.1",
            "10.0.0.1:3080",
            "[::1]",
            "",
            "localhost.evil.com:3080",
            "::1",
        ] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
        let remote = policy(true);
        assert!(remote.host_allowed("10.0.0.1:3080"));
        assert!(!remote.host_allowed("rebind.example:3080"));
    }

    #[test]
    fn origins_and_tokens() {
        let p = policy(false);
        assert!(p.origin_allowed("http://127.0.0.1:3080"));
        assert!(!p.origin_allowed("https://127.0.0.1:3080"));
        assert!(!p.origin_allowed("http://evil.com"));
        assert!(!p.origin_allowed("null"));
        let token = p.token.as_str().to_string();
        assert!(p.token.matches(&token));
        assert!(!p.token.matches(&token[1..]));
        assert_eq!(token.len(), 64);
        assert!(!format!("{:?}", p.token).contains(&token));
    }

    #[test]
    fn bind_addresses() {
        let ok: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:3080".parse().unwrap();
        assert!(check_bind_address(&ok, false).is_ok());
        assert!(check_bind_address(&any, false).is_err());
        assert!(check_bind_address(&any, true).is_ok());
    }

    #[test]
    fn query_token_split() {
        assert_eq!(
            split_token("token=abc&x=1"),
            (Some("abc".into()), "x=1".into())
        );
        assert_eq!(split_token(""), (None, String::new()));
    }
}
