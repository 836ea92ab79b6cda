//! The server's gate (docs/web.md, "Security model"): loopback binding, `Host` and `Origin` checks
//! against DNS rebinding, one-time launch codes exchanged for a sign-in cookie, and JSON-only
//! mutating requests.
//!
//! Every request passes [`gate`] in this order: `Host` (403 `BAD_HOST`), `Origin` when present
//! (403 `BAD_ORIGIN`), sign-in (401 `UNAUTHORIZED`), then for methods other than GET, HEAD and
//! OPTIONS a `Content-Type` of `application/json` (415 `UNSUPPORTED_MEDIA_TYPE`).
//!
//! Sign-in: the address `dsh web` prints (and the launch page it opens) carries a launch code
//! (`?code=`). A GET with an outstanding code kills the code and answers with a redirect to the
//! same address without it, setting a fresh sign-in secret as the cookie (HttpOnly,
//! SameSite=Strict). Requests then authenticate with that cookie, or with the same secret as
//! `Authorization: Bearer` (for scripts, which exchange a code the same way). Sign-in secrets
//! live only in the server's memory and in the client that redeemed a code; codes are never
//! accepted as credentials for anything but that one exchange (docs/web.md).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use dsh_llm::LockExt;
use rand::RngCore;

use crate::error::ApiError;

/// A random secret: 32 bytes from the operating system, hex-encoded. Launch codes and
/// sign-in secrets are both of this kind.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// A fresh random secret.
    pub fn generate() -> AccessToken {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        AccessToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The secret's text (for the launch URL and the cookie; never logged).
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

/// One outstanding launch code: dead once redeemed, revoked, or past its deadline.
struct LaunchCode {
    code: AccessToken,
    /// The launch page that holds this code, deleted with it.
    page: Option<PathBuf>,
    /// After this instant the code is refused (and its page deleted at the next sweep).
    expires: Option<Instant>,
}

/// Who may use the server: outstanding one-time launch codes, and the sign-in secrets that
/// redeeming them minted (held by browsers as the `HttpOnly` cookie). Nothing here is ever
/// written to disk except a launch page's code, and that page is deleted when its code dies
/// (docs/web.md, "Security model").
#[derive(Default)]
pub struct Access {
    codes: Mutex<Vec<LaunchCode>>,
    signed_in: Mutex<Vec<AccessToken>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Access(<redacted>)")
    }
}

fn remove_page(page: &Path) {
    // Already gone is fine: the point is that it does not exist afterwards.
    let _ = std::fs::remove_file(page);
}

impl Access {
    /// A new one-time launch code, valid for `ttl` (forever while unused when `None`); when
    /// `page` is given, that file is deleted as soon as the code dies.
    pub fn issue_code(&self, page: Option<PathBuf>, ttl: Option<Duration>) -> AccessToken {
        let code = AccessToken::generate();
        let mut codes = self.codes.lock_or_recover();
        codes.push(LaunchCode {
            code: code.clone(),
            page,
            expires: ttl.map(|ttl| Instant::now() + ttl),
        });
        code
    }

    /// Records the launch page that holds `code` (written after the code was issued).
    pub fn attach_page(&self, code: &AccessToken, page: PathBuf) {
        let mut codes = self.codes.lock_or_recover();
        if let Some(entry) = codes.iter_mut().find(|c| c.code == *code) {
            entry.page = Some(page);
        } else {
            remove_page(&page);
        }
    }

    /// Exchanges a launch code for a new sign-in secret; the code (and its page) dies. `None`
    /// when the code is unknown, used or expired.
    pub fn redeem(&self, candidate: &str) -> Option<AccessToken> {
        self.sweep();
        let entry = {
            let mut codes = self.codes.lock_or_recover();
            let index = codes.iter().position(|c| c.code.matches(candidate))?;
            codes.swap_remove(index)
        };
        if let Some(page) = &entry.page {
            remove_page(page);
        }
        let secret = AccessToken::generate();
        self.signed_in.lock_or_recover().push(secret.clone());
        Some(secret)
    }

    /// Kills `code` (and deletes its page) if it is still outstanding.
    pub fn revoke(&self, code: &AccessToken) {
        let removed: Vec<LaunchCode> = {
            let mut codes = self.codes.lock_or_recover();
            let (dead, live) = std::mem::take(&mut *codes)
                .into_iter()
                .partition(|c| c.code == *code);
            *codes = live;
            dead
        };
        for page in removed.iter().filter_map(|c| c.page.as_deref()) {
            remove_page(page);
        }
    }

    /// Kills every outstanding code whose launch page is `page` (and deletes the page).
    pub fn revoke_page(&self, page: &Path) {
        let removed: Vec<LaunchCode> = {
            let mut codes = self.codes.lock_or_recover();
            let (dead, live) = std::mem::take(&mut *codes)
                .into_iter()
                .partition(|c| c.page.as_deref() == Some(page));
            *codes = live;
            dead
        };
        if !removed.is_empty() {
            remove_page(page);
        }
    }

    /// Drops expired codes and deletes their pages.
    pub fn sweep(&self) {
        let now = Instant::now();
        let removed: Vec<LaunchCode> = {
            let mut codes = self.codes.lock_or_recover();
            let (dead, live) = std::mem::take(&mut *codes)
                .into_iter()
                .partition(|c| c.expires.is_some_and(|at| at <= now));
            *codes = live;
            dead
        };
        for page in removed.iter().filter_map(|c| c.page.as_deref()) {
            remove_page(page);
        }
    }

    /// Kills every outstanding code and deletes every launch page (server exit).
    pub fn close(&self) {
        let removed = std::mem::take(&mut *self.codes.lock_or_recover());
        for page in removed.iter().filter_map(|c| c.page.as_deref()) {
            remove_page(page);
        }
        self.signed_in.lock_or_recover().clear();
    }

    /// True when `candidate` is a sign-in secret this server minted.
    pub fn signed_in(&self, candidate: &str) -> bool {
        self.signed_in
            .lock_or_recover()
            .iter()
            .fold(false, |found, secret| secret.matches(candidate) | found)
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
             anyone who obtains a launch code or the sign-in cookie can run commands as you",
            address.ip()
        ))
    }
}

/// What the gate checks requests against.
#[derive(Debug, Clone)]
pub struct GatePolicy {
    /// Launch codes and sign-in secrets.
    pub access: Arc<Access>,
    /// The port the server is bound to (the only port accepted in `Host`).
    pub port: u16,
    /// Also accept IP-literal `Host` values that are not loopback (`--allow-remote`). Names
    /// other than `localhost` are never accepted: that is what defeats DNS rebinding.
    pub allow_remote: bool,
}

impl GatePolicy {
    /// The cookie that carries the sign-in secret; named per port because cookies ignore ports.
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

/// The `code` query parameter and the query without it.
fn split_code(query: &str) -> (Option<String>, String) {
    let mut code = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("code=") {
            Some(value) => code = Some(value.to_string()),
            None => rest.push(pair),
        }
    }
    (code, rest.join("&"))
}

const NOT_SIGNED_IN: &str = "not signed in: open the address that `dsh web` printed in this \
     browser (its launch code works once and leaves a sign-in cookie); scripts exchange a launch \
     code the same way and send the cookie or `Authorization: Bearer <its value>`";

const CODE_REFUSED: &str = "this launch code was already used, has expired or was not issued by \
     this server: a launch code works once. Restart `dsh web` for a new one, or get one from a \
     signed-in browser (`POST /api/launch`). If you did not use it yourself, something else did: \
     stop `dsh web`";

fn unauthorized(path: &str, message: &str) -> Response {
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
            "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; \
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
    let signed_in = policy
        .token_from(headers)
        .is_some_and(|t| policy.access.signed_in(&t));
    let (code, rest) = split_code(request.uri().query().unwrap_or(""));
    if let (Some(code), true) = (code, request.method() == Method::GET) {
        let location = if rest.is_empty() {
            path.clone()
        } else {
            format!("{path}?{rest}")
        };
        if let Some(secret) = policy.access.redeem(&code) {
            let cookie = format!(
                "{}={}; Path=/; HttpOnly; SameSite=Strict",
                policy.cookie_name(),
                secret.as_str()
            );
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, location), (header::SET_COOKIE, cookie)],
            )
                .into_response();
        }
        if signed_in {
            // A dead code in the address of a browser that is signed in already: drop it.
            return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        }
        return unauthorized(&path, CODE_REFUSED);
    }
    if !signed_in {
        return unauthorized(&path, NOT_SIGNED_IN);
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
            access: Arc::new(Access::default()),
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
        let secret = AccessToken::generate();
        let token = secret.as_str().to_string();
        assert!(secret.matches(&token));
        assert!(!secret.matches(&token[1..]));
        assert_eq!(token.len(), 64);
        assert!(!format!("{secret:?}").contains(&token));
    }

    #[test]
    fn launch_codes_work_once_and_take_their_page_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let access = Access::default();
        let page = dir.path().join("open.html");
        std::fs::write(&page, "code").unwrap();
        let code = access.issue_code(Some(page.clone()), None);
        assert!(!access.signed_in(code.as_str()), "a code is not a sign-in");
        let secret = access.redeem(code.as_str()).expect("first use");
        assert!(!page.exists(), "the page dies with its code");
        assert!(access.signed_in(secret.as_str()));
        assert!(access.redeem(code.as_str()).is_none(), "second use");
        assert!(
            access.redeem(secret.as_str()).is_none(),
            "a sign-in is not a code"
        );

        let short = access.issue_code(None, Some(Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(access.redeem(short.as_str()).is_none(), "expired");

        let page = dir.path().join("later.html");
        let revoked = access.issue_code(None, None);
        std::fs::write(&page, "code").unwrap();
        access.attach_page(&revoked, page.clone());
        access.revoke(&revoked);
        assert!(!page.exists());
        assert!(access.redeem(revoked.as_str()).is_none());

        let page = dir.path().join("replaced.html");
        std::fs::write(&page, "code").unwrap();
        let replaced = access.issue_code(Some(page.clone()), None);
        access.revoke_page(&page);
        assert!(!page.exists());
        assert!(access.redeem(replaced.as_str()).is_none());

        let page = dir.path().join("exit.html");
        std::fs::write(&page, "code").unwrap();
        let open = access.issue_code(Some(page.clone()), None);
        access.close();
        assert!(!page.exists());
        assert!(access.redeem(open.as_str()).is_none());
        assert!(!access.signed_in(secret.as_str()));
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
    fn query_code_split() {
        assert_eq!(
            split_code("code=abc&x=1"),
            (Some("abc".into()), "x=1".into())
        );
        assert_eq!(split_code(""), (None, String::new()));
    }
}
