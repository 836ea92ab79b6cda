//! OAuth for streamable-HTTP servers that ask for it (docs/mcp.md, "OAuth"): the MCP
//! authorization spec's flow (OAuth 2.1 authorization code with PKCE S256; protected resource
//! metadata, RFC 9728; authorization server metadata, RFC 8414; dynamic client registration,
//! RFC 7591), the stored login (`<dir>/<server>.json`, 0600 in a 0700 folder) and its refresh.
//!
//! A stored login is bound to the origin of the URL it was made for: the hub sends its access
//! token only to that origin ([`StoredLogin::fits`]). No message here quotes a token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use serde_json::{json, Value};

/// The folder of stored logins under `$DSH_HOME`.
pub const LOGIN_DIR: &str = "mcp-auth";

/// Longest wait for one request to a server or authorization server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// An access token this close to its expiry is refreshed before use.
const EXPIRY_MARGIN_SECS: u64 = 30;
/// Largest reply body read from a server or authorization server (metadata, registration,
/// tokens): a few kilobytes in practice; a longer one is refused, not buffered.
const MAX_REPLY_BYTES: usize = 1024 * 1024;
/// Longest wait for one connection to the redirect listener to send its request line.
const REDIRECT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Tokens of one server, as stored after `dsh mcp login`.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredLogin {
    /// The server URL the login was made for; its origin is the only one the token goes to.
    pub url: String,
    /// The bearer token sent to the server.
    pub access_token: String,
    /// The token that gets a new access token, when the server gave one.
    pub refresh_token: Option<String>,
    /// Unix time the access token expires, when the server said.
    pub expires_at: Option<u64>,
    /// Where tokens are exchanged and refreshed.
    pub token_endpoint: String,
    /// The client id dsh registered (or was given).
    pub client_id: String,
    /// The client secret a registration returned, if any.
    pub client_secret: Option<String>,
    /// The resource indicator (RFC 8707) tokens are asked for.
    pub resource: String,
}

impl std::fmt::Debug for StoredLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLogin")
            .field("url", &self.url)
            .field("expires_at", &self.expires_at)
            .field("token_endpoint", &self.token_endpoint)
            .finish_non_exhaustive()
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whether `a` and `b` are URLs of the same origin (scheme, host and port).
pub fn same_origin(a: &str, b: &str) -> bool {
    match (Url::parse(a), Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

impl StoredLogin {
    /// Whether the token may be sent to a server configured at `url`: only to the origin it was
    /// issued for (a project that points a server's name elsewhere gets nothing).
    pub fn fits(&self, url: &str) -> bool {
        same_origin(&self.url, url)
    }

    /// Whether the access token has expired (or will within half a minute).
    pub fn expired(&self) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now() + EXPIRY_MARGIN_SECS)
    }

    fn to_json(&self) -> Value {
        json!({
            "url": self.url,
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "token_endpoint": self.token_endpoint,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "resource": self.resource,
        })
    }

    fn from_json(value: &Value) -> Option<StoredLogin> {
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_string);
        Some(StoredLogin {
            url: text("url")?,
            access_token: text("access_token")?,
            refresh_token: text("refresh_token"),
            expires_at: value.get("expires_at").and_then(Value::as_u64),
            token_endpoint: text("token_endpoint")?,
            client_id: text("client_id")?,
            client_secret: text("client_secret"),
            resource: text("resource")?,
        })
    }
}

/// The file of `server`'s login under `dir` (`$DSH_HOME/mcp-auth`).
pub fn login_path(dir: &Path, server: &str) -> PathBuf {
    dir.join(format!("{server}.json"))
}

/// `server`'s stored login; `Ok(None)` when there is none.
pub fn read_login(dir: &Path, server: &str) -> Result<Option<StoredLogin>, String> {
    let path = login_path(dir, server);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
    };
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| StoredLogin::from_json(&v))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{} is damaged; run `dsh mcp logout {server}` and log in again",
                path.display()
            )
        })
}

/// Stores `login` for `server`: `dir` is made 0700, the file written 0600 beside and renamed
/// over the old one.
pub fn write_login(dir: &Path, server: &str, login: &StoredLogin) -> Result<(), String> {
    use std::io::Write;
    let mut folder = std::fs::DirBuilder::new();
    folder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        folder.mode(0o700);
    }
    folder
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // A folder that existed with wider rights is narrowed: it holds tokens.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let path = login_path(dir, server);
    // A new file under a random name (`O_EXCL`, and `O_NOFOLLOW` on Unix): never a planted
    // link, never the temp file of another refresh running at the same time.
    let temp = dir.join(format!(".{server}.json.{}", random_text()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW).mode(0o600);
    }
    let written = (|| -> std::io::Result<()> {
        let mut file = options.open(&temp)?;
        file.write_all(login.to_json().to_string().as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, &path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Deletes `server`'s stored login; `false` when there was none.
pub fn delete_login(dir: &Path, server: &str) -> Result<bool, String> {
    let path = login_path(dir, server);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(format!("cannot delete {}: {err}", path.display())),
    }
}

/// The client for authorization requests: no redirect is followed (a token request must reach
/// the endpoint it names), the extra roots of `SSL_CERT_FILE` trusted as for the servers.
fn client() -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT);
    dsh_http::trust_extra_roots(builder)
        .map_err(|e| e.0)?
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// What an authorization server's error reply says (`error`, `error_description`), never
/// its whole body.
fn oauth_error(status: reqwest::StatusCode, body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let code = value.get("error").and_then(Value::as_str);
    let description = value.get("error_description").and_then(Value::as_str);
    // The server's words reach a terminal (and, through the hub's errors, the model).
    let code = code.map(dsh_tools::printable);
    let description = description.map(dsh_tools::printable);
    match (code, description) {
        (Some(code), Some(text)) => format!("HTTP {status}: {code}: {text}"),
        (Some(code), None) => format!("HTTP {status}: {code}"),
        _ => format!("HTTP {status}"),
    }
}

/// Posts a token request (`grant_type` and the rest in `form`) and reads the tokens.
async fn token_request(
    client: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
) -> Result<(String, Option<String>, Option<u64>), String> {
    let response = client
        .post(endpoint)
        .header(reqwest::header::ACCEPT, "application/json")
        .form(form)
        .send()
        .await
        .map_err(|e| format!("the token request to {endpoint} failed: {}", plain(&e)))?;
    let status = response.status();
    let body = capped_body(response, &format!("the token reply of {endpoint}")).await?;
    if !status.is_success() {
        return Err(format!(
            "{endpoint} refused the token request ({})",
            oauth_error(status, &body)
        ));
    }
    let value: Value = serde_json::from_slice(&body)
        .map_err(|_| format!("{endpoint} answered the token request with something not JSON"))?;
    let access = value
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{endpoint} answered without an access_token"))?;
    let refresh = value
        .get("refresh_token")
        .and_then(Value::as_str)
        .map(str::to_string);
    let expires = value
        .get("expires_in")
        .and_then(Value::as_u64)
        .map(|secs| now() + secs);
    Ok((access.to_string(), refresh, expires))
}

/// A reqwest error without its Rust wrapping.
fn plain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}

/// The body of `response`, at most [`MAX_REPLY_BYTES`]: a longer one is an error before it is
/// all read (a hostile server cannot fill memory; the request's timeout bounds a slow one).
async fn capped_body(mut response: reqwest::Response, what: &str) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_REPLY_BYTES as u64)
    {
        return Err(format!("{what} is larger than {MAX_REPLY_BYTES} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {what} failed: {}", plain(&e)))?
    {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(format!("{what} is larger than {MAX_REPLY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Whether `host` is this machine (`localhost`, `127.0.0.0/8`, `::1`).
fn loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let host = host.to_ascii_lowercase();
            host == "localhost" || host.ends_with(".localhost")
        }
    }
}

/// `endpoint` (an address discovery found: metadata, issuer, authorization, token or
/// registration endpoint) parsed, or why dsh does not use it for the server at `server`: only
/// `https`, or `http` on this machine; and an address on this machine only for a server on
/// this machine. A hostile server's metadata so cannot make dsh open a `file:` or other
/// handler's URL in the browser, send the code verifier, client secret or refresh token in
/// clear over the network, or post them to a service on the user's machine.
fn checked_endpoint(server: &Url, endpoint: &str, what: &str) -> Result<Url, String> {
    let shown = dsh_tools::printable(endpoint);
    let url =
        Url::parse(endpoint).map_err(|e| format!("the {what} `{shown}` is not a URL: {e}"))?;
    let local = loopback(&url);
    match url.scheme() {
        "https" => {}
        "http" if local => {}
        scheme => {
            return Err(format!(
                "the {what} `{url}` uses `{scheme}:`; dsh uses only https (http on this machine) \
                 for OAuth"
            ))
        }
    }
    if local && !loopback(server) {
        return Err(format!(
            "the {what} `{url}` is on this machine but the server is not; dsh does not send it \
             there"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("the {what} `{url}` holds a user name or password"));
    }
    Ok(url)
}

/// A new access token for `login` through its refresh token; the refresh token is kept when
/// the server does not rotate it. `Err` when there is none or the server refuses.
pub async fn refresh(login: &StoredLogin) -> Result<StoredLogin, String> {
    let Some(refresh_token) = &login.refresh_token else {
        return Err("the stored login has no refresh token".into());
    };
    let client = client()?;
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token.as_str()),
        ("client_id", login.client_id.as_str()),
        ("resource", login.resource.as_str()),
    ];
    if let Some(secret) = &login.client_secret {
        form.push(("client_secret", secret.as_str()));
    }
    let (access, rotated, expires) = token_request(&client, &login.token_endpoint, &form).await?;
    Ok(StoredLogin {
        access_token: access,
        refresh_token: rotated.or_else(|| login.refresh_token.clone()),
        expires_at: expires,
        ..login.clone()
    })
}

/// How `dsh mcp login` runs the flow.
pub struct LoginOptions {
    /// A client id registered beforehand; without one dsh registers itself (RFC 7591).
    pub client_id: Option<String>,
    /// How long to wait for the browser's redirect.
    pub timeout: Duration,
}

/// What discovery found.
struct Endpoints {
    authorization: String,
    token: String,
    registration: Option<String>,
    resource: String,
    scope: Option<String>,
}

/// `key="value"` (or `key=value`) of a `WWW-Authenticate` header.
fn auth_param(header: &str, key: &str) -> Option<String> {
    let at = header.find(&format!("{key}="))?;
    let rest = &header[at + key.len() + 1..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_string())
}

async fn get_json(client: &reqwest::Client, url: &str) -> Option<Value> {
    let response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    serde_json::from_slice(&capped_body(response, url).await.ok()?).ok()
}

/// `origin` + `/.well-known/<name>` + the path of `url` (RFC 8414 / RFC 9728 insertion), then
/// without the path.
fn well_known(url: &Url, name: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!("{origin}/.well-known/{name}{path}"));
    }
    out.push(format!("{origin}/.well-known/{name}"));
    out
}

/// The MCP authorization spec's discovery: the server's 401, its protected resource metadata,
/// then its authorization server's metadata.
async fn discover(client: &reqwest::Client, url: &str) -> Result<Endpoints, String> {
    let server = Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let probe = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "dsh", "version": env!("CARGO_PKG_VERSION") }
        }
    });
    let response = client
        .post(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(probe.to_string())
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {}", plain(&e)))?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Err(format!(
            "{url} did not ask for authorization (it answered HTTP {} without a token); it needs \
             no login",
            response.status()
        ));
    }
    let challenge = response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut candidates = Vec::new();
    if let Some(metadata) = auth_param(&challenge, "resource_metadata") {
        candidates
            .push(checked_endpoint(&server, &metadata, "protected resource metadata")?.to_string());
    }
    candidates.extend(well_known(&server, "oauth-protected-resource"));
    let mut resource = url.to_string();
    let mut issuer = server.origin().ascii_serialization();
    let mut scope = auth_param(&challenge, "scope");
    for candidate in candidates {
        let Some(metadata) = get_json(client, &candidate).await else {
            continue;
        };
        if let Some(named) = metadata.get("resource").and_then(Value::as_str) {
            // RFC 9728 3.3: the metadata must be the server's own.
            if !same_origin(named, url) {
                return Err(format!(
                    "the protected resource metadata at {candidate} names another resource \
                     ({named}); dsh does not log in to it"
                ));
            }
            resource = named.to_string();
        }
        if let Some(first) = metadata
            .get("authorization_servers")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
        {
            issuer = checked_endpoint(&server, first, "authorization server")?.to_string();
        }
        if scope.is_none() {
            scope = metadata
                .get("scopes_supported")
                .and_then(Value::as_array)
                .map(|s| {
                    s.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .filter(|s| !s.is_empty());
        }
        break;
    }
    let (authorization, token, registration) = authorization_server(client, &issuer).await?;
    // Every address the flow uses is checked before any is used (docs/SECURITY.md, "Stored MCP
    // OAuth tokens").
    let authorization =
        checked_endpoint(&server, &authorization, "authorization endpoint")?.to_string();
    let token = checked_endpoint(&server, &token, "token endpoint")?.to_string();
    let registration = registration
        .map(|r| checked_endpoint(&server, &r, "registration endpoint").map(|u| u.to_string()))
        .transpose()?;
    Ok(Endpoints {
        authorization,
        token,
        registration,
        resource,
        scope,
    })
}

/// The authorization, token and registration endpoints of the authorization server `issuer`
/// (RFC 8414 metadata, else OpenID configuration, else the 2025-03-26 spec's defaults).
async fn authorization_server(
    client: &reqwest::Client,
    issuer: &str,
) -> Result<(String, String, Option<String>), String> {
    let issuer_url = Url::parse(issuer).map_err(|e| format!("`{issuer}` is not a URL: {e}"))?;
    let mut metadata = None;
    let mut tried = well_known(&issuer_url, "oauth-authorization-server");
    tried.extend(well_known(&issuer_url, "openid-configuration"));
    for candidate in &tried {
        if let Some(found) = get_json(client, candidate).await {
            metadata = Some(found);
            break;
        }
    }
    let origin = issuer_url.origin().ascii_serialization();
    let field = |name: &str, default: Option<String>| {
        metadata
            .as_ref()
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(default)
    };
    if let Some(methods) = metadata
        .as_ref()
        .and_then(|m| m.get("code_challenge_methods_supported"))
        .and_then(Value::as_array)
    {
        if !methods.iter().any(|m| m == "S256") {
            return Err(format!(
                "the authorization server {issuer} does not support PKCE with S256, which MCP \
                 requires"
            ));
        }
    }
    // Without metadata: the 2025-03-26 spec's default endpoints at the server's origin.
    let defaults = metadata.is_none();
    let pick = |name: &str, path: &str| field(name, defaults.then(|| format!("{origin}{path}")));
    Ok((
        pick("authorization_endpoint", "/authorize")
            .ok_or_else(|| format!("the metadata of {issuer} names no authorization_endpoint"))?,
        pick("token_endpoint", "/token")
            .ok_or_else(|| format!("the metadata of {issuer} names no token_endpoint"))?,
        pick("registration_endpoint", "/register"),
    ))
}

/// Registers dsh as a public client with `redirect_uri` (RFC 7591).
async fn register(
    client: &reqwest::Client,
    endpoint: &str,
    redirect_uri: &str,
) -> Result<(String, Option<String>), String> {
    let body = json!({
        "client_name": "dsh",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let response = client
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("client registration at {endpoint} failed: {}", plain(&e)))?;
    let status = response.status();
    let bytes = capped_body(response, &format!("the registration reply of {endpoint}")).await?;
    if !status.is_success() {
        return Err(format!(
            "client registration at {endpoint} was refused ({}); give a registered client id with \
             --client-id",
            oauth_error(status, &bytes)
        ));
    }
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let id = value
        .get("client_id")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("client registration at {endpoint} returned no client_id"))?;
    let secret = value
        .get("client_secret")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((id.to_string(), secret))
}

fn base64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn random_text() -> String {
    let mut bytes = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut bytes);
    base64url(&bytes)
}

/// The PKCE challenge of `verifier` (S256).
pub fn pkce_challenge(verifier: &str) -> String {
    base64url(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()).as_ref())
}

/// Waits on `listener` for the browser's redirect carrying `state`; answers it with a short
/// page and returns the code. Each connection is served on its own: one that sends nothing
/// (within [`REDIRECT_READ_TIMEOUT`]), asks for another path or carries another `state` is
/// answered and ignored, so another local process that connects first can neither stall nor
/// end the login. Only the redirect with the login's `state` ends the wait.
async fn receive_code(
    listener: tokio::net::TcpListener,
    state: &str,
    timeout: Duration,
) -> Result<String, String> {
    let (done, mut outcome) = tokio::sync::mpsc::unbounded_channel();
    let state: std::sync::Arc<str> = state.into();
    let wait = async {
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) =
                        accepted.map_err(|e| format!("the redirect listener failed: {e}"))?;
                    let done = done.clone();
                    let state = std::sync::Arc::clone(&state);
                    tokio::spawn(async move {
                        if let Some(answer) = answer_redirect(stream, &state).await {
                            let _ = done.send(answer);
                        }
                    });
                }
                Some(answer) = outcome.recv() => return answer,
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no redirect arrived within {} s; run `dsh mcp login` again",
                timeout.as_secs()
            ))
        })
}

/// Reads one request on the redirect listener and answers it; `Some` with the login's outcome
/// when it is the redirect carrying `state`, `None` for anything else.
async fn answer_redirect(
    mut stream: tokio::net::TcpStream,
    state: &str,
) -> Option<Result<String, String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let read = async {
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    if tokio::time::timeout(REDIRECT_READ_TIMEOUT, read)
        .await
        .is_err()
    {
        return None;
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.split_whitespace().nth(1).unwrap_or_default();
    let url = Url::parse(&format!("http://127.0.0.1{target}")).ok();
    let param = |name: &str| {
        url.as_ref()?
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let (status, page, outcome) = if url.as_ref().is_none_or(|u| u.path() != "/callback") {
        ("404 Not Found", "", None)
    } else if param("state").as_deref() != Some(state) {
        (
            "400 Bad Request",
            "dsh: this answer does not belong to the login dsh started.",
            None,
        )
    } else if let Some(error) = param("error") {
        (
            "400 Bad Request",
            "dsh: the login was refused.",
            Some(Err(format!(
                "the authorization server refused the login: {}",
                dsh_tools::printable(&error)
            ))),
        )
    } else if let Some(code) = param("code") {
        (
            "200 OK",
            "dsh: logged in. You can close this tab.",
            Some(Ok(code)),
        )
    } else {
        (
            "400 Bad Request",
            "dsh: the redirect carried no code.",
            Some(Err("the redirect carried no authorization code".to_string())),
        )
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
        page.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
    outcome
}

/// Runs the authorization code flow with PKCE for the server at `url` and returns the login to
/// store. `show` is given the authorization URL to open (printed, or opened in a browser).
pub async fn login(
    url: &str,
    options: &LoginOptions,
    show: &(dyn Fn(&str) + Sync),
) -> Result<StoredLogin, String> {
    let client = client()?;
    let endpoints = discover(&client, url).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1 for the redirect: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the redirect listener's port: {e}"))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let (client_id, client_secret) = match &options.client_id {
        Some(id) => (id.clone(), None),
        None => {
            let Some(endpoint) = &endpoints.registration else {
                return Err(
                    "the authorization server offers no client registration; give a \
                            registered client id with --client-id"
                        .into(),
                );
            };
            register(&client, endpoint, &redirect_uri).await?
        }
    };
    let verifier = random_text();
    let state = random_text();
    let mut authorize = Url::parse(&endpoints.authorization).map_err(|e| {
        format!(
            "the authorization endpoint `{}` is not a URL: {e}",
            endpoints.authorization
        )
    })?;
    {
        let mut query = authorize.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("code_challenge", &pkce_challenge(&verifier))
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &endpoints.resource);
        if let Some(scope) = &endpoints.scope {
            query.append_pair("scope", scope);
        }
    }
    show(authorize.as_str());
    let code = receive_code(listener, &state, options.timeout).await?;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect_uri.as_str()),
        ("client_id", client_id.as_str()),
        ("code_verifier", verifier.as_str()),
        ("resource", endpoints.resource.as_str()),
    ];
    if let Some(secret) = &client_secret {
        form.push(("client_secret", secret.as_str()));
    }
    let (access, refresh, expires) = token_request(&client, &endpoints.token, &form).await?;
    Ok(StoredLogin {
        url: url.to_string(),
        access_token: access,
        refresh_token: refresh,
        expires_at: expires,
        token_endpoint: endpoints.token,
        client_id,
        client_secret,
        resource: endpoints.resource,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_matches_rfc_7636() {
        // RFC 7636, appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn tokens_fit_their_origin_only() {
        let login = StoredLogin {
            url: "https://mcp.example.com/mcp".into(),
            access_token: "a".into(),
            refresh_token: None,
            expires_at: None,
            token_endpoint: "https://auth.example.com/token".into(),
            client_id: "c".into(),
            client_secret: None,
            resource: "https://mcp.example.com/mcp".into(),
        };
        assert!(login.fits("https://mcp.example.com/other"));
        assert!(!login.fits("http://mcp.example.com/mcp"));
        assert!(!login.fits("https://mcp.example.com:8443/mcp"));
        assert!(!login.fits("https://evil.example.com/mcp"));
        assert!(!format!("{login:?}").contains("\"a\""));
    }

    #[test]
    fn www_authenticate_parameters() {
        let header = r#"Bearer error="invalid_token", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp", scope=read"#;
        assert_eq!(
            auth_param(header, "resource_metadata").as_deref(),
            Some("http://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(auth_param(header, "scope").as_deref(), Some("read"));
        assert_eq!(auth_param(header, "realm"), None);
    }
    /// A local server answering every request with the reply `route` gives its path (status,
    /// extra header lines, body); it records the paths asked for.
    async fn serve(
        route: impl Fn(&str, u16) -> (u16, String, Vec<u8>) + Send + Sync + 'static,
    ) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (route, log) = (std::sync::Arc::new(route), std::sync::Arc::clone(&seen));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (route, log) = (std::sync::Arc::clone(&route), std::sync::Arc::clone(&log));
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    let path = text
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_string();
                    log.lock().unwrap().push(path.clone());
                    let (status, headers, body) = route(&path, port);
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                });
            }
        });
        (port, seen)
    }

    #[test]
    fn endpoints_are_https_or_this_machines_for_a_server_on_it() {
        let remote = Url::parse("https://mcp.example.com/mcp").unwrap();
        let local = Url::parse("http://127.0.0.1:8080/mcp").unwrap();
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "smb://evil.example/share",
            "http://auth.example.com/token",
            "http://127.0.0.1:9/token",
            "https://localhost/token",
            "https://[::1]/token",
            "https://user:pw@auth.example.com/token",
        ] {
            assert!(
                checked_endpoint(&remote, bad, "token endpoint").is_err(),
                "{bad}"
            );
        }
        assert!(checked_endpoint(&remote, "https://auth.example.com/token", "t").is_ok());
        assert!(checked_endpoint(&local, "http://127.0.0.1:9/token", "t").is_ok());
        assert!(checked_endpoint(&local, "http://localhost:9/token", "t").is_ok());
        assert!(checked_endpoint(&local, "file:///etc/passwd", "t").is_err());
        let shown = checked_endpoint(&remote, "\u{1b}]0;x\u{7}", "t").unwrap_err();
        assert!(!shown.contains('\u{1b}'), "{shown}");
    }

    /// A hostile server's metadata names a `file:` authorization endpoint (dsh would hand it
    /// to `xdg-open`) or a token endpoint in clear on another host: the login stops before
    /// showing anything. Before the adversarial review both were used as given.
    #[tokio::test]
    async fn a_servers_metadata_cannot_name_a_file_or_a_clear_text_endpoint() {
        for (authorize, token) in [
            ("file:///tmp/evil.desktop", "http://127.0.0.1:1/token"),
            (
                "https://auth.example.com/authorize",
                "http://auth.example.com/token",
            ),
        ] {
            let (authorize, token) = (authorize.to_string(), token.to_string());
            let (port, _) = serve(move |path, port| match path {
                "/mcp" => (
                    401,
                    format!(
                        "www-authenticate: Bearer resource_metadata=\"http://127.0.0.1:{port}/prm\"\r\n"
                    ),
                    Vec::new(),
                ),
                "/prm" => (200, String::new(), json!({
                    "resource": format!("http://127.0.0.1:{port}/mcp"),
                    "authorization_servers": [format!("http://127.0.0.1:{port}")],
                }).to_string().into_bytes()),
                _ if path.starts_with("/.well-known/oauth-authorization-server") => (
                    200,
                    String::new(),
                    json!({
                        "authorization_endpoint": authorize,
                        "token_endpoint": token,
                        "registration_endpoint": format!("http://127.0.0.1:{port}/register"),
                        "code_challenge_methods_supported": ["S256"],
                    })
                    .to_string()
                    .into_bytes(),
                ),
                "/register" => (201, String::new(), json!({"client_id": "c"}).to_string().into_bytes()),
                _ => (404, String::new(), Vec::new()),
            })
            .await;
            let shown = std::sync::Mutex::new(Vec::new());
            let show = |link: &str| shown.lock().unwrap().push(link.to_string());
            let options = LoginOptions {
                client_id: None,
                timeout: Duration::from_secs(3),
            };
            let error = login(&format!("http://127.0.0.1:{port}/mcp"), &options, &show)
                .await
                .unwrap_err();
            assert!(error.contains("dsh uses only https"), "{error}");
            assert!(shown.lock().unwrap().is_empty(), "{error}");
        }
    }

    /// A token endpoint answering with more than a mebibyte is refused, not buffered.
    #[tokio::test]
    async fn an_endless_token_reply_is_refused() {
        let (port, seen) = serve(|_, _| {
            let mut body = br#"{"access_token":"a","pad":""#.to_vec();
            body.extend(std::iter::repeat_n(b'x', 8 * 1024 * 1024));
            body.extend_from_slice(b"\"}");
            (200, String::new(), body)
        })
        .await;
        let login = StoredLogin {
            url: format!("http://127.0.0.1:{port}/mcp"),
            access_token: "old".into(),
            refresh_token: Some("r".into()),
            expires_at: None,
            token_endpoint: format!("http://127.0.0.1:{port}/token"),
            client_id: "c".into(),
            client_secret: None,
            resource: format!("http://127.0.0.1:{port}/mcp"),
        };
        let error = refresh(&login).await.unwrap_err();
        assert!(error.contains("larger than"), "{error}");
        assert_eq!(seen.lock().unwrap().as_slice(), ["/token"]);
    }

    /// Another local process that connects to the redirect listener first, sends nothing, or
    /// sends a redirect with another `state`, neither stalls nor ends the login; the browser's
    /// redirect still delivers the code. Before the review a silent connection held the
    /// listener until the login timed out, and a wrong `state` ended the login.
    #[tokio::test]
    async fn the_redirect_listener_ignores_silent_and_foreign_connections() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let waiting =
            tokio::spawn(
                async move { receive_code(listener, "s3cret", Duration::from_secs(20)).await },
            );
        let _silent = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let ask = |target: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            stream
                .write_all(format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut reply = String::new();
            let _ = stream.read_to_string(&mut reply).await;
            reply
        };
        let foreign = tokio::time::timeout(
            Duration::from_secs(8),
            ask("/callback?state=guess&code=planted"),
        )
        .await
        .expect("a silent connection stalled the listener");
        assert!(foreign.starts_with("HTTP/1.1 400"), "{foreign}");
        let good = ask("/callback?state=s3cret&code=real").await;
        assert!(good.starts_with("HTTP/1.1 200"), "{good}");
        assert_eq!(waiting.await.unwrap(), Ok("real".to_string()));
    }
}
