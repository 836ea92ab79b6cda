//! The fake provider: a minimal HTTP/1.1 server on loopback (plain, or over TLS with a test
//! certificate) that answers chat-completions requests from a script and records what it was
//! sent.
//!
//! It is hand-written on a `TcpListener` so that tests control every byte on the wire
//! (chunk framing, abrupt closes, stalls). Like a real provider it keeps a connection alive
//! after a complete reply and serves the client's next request on it (HTTP/1.1 persistent
//! connections), so a client's connection pool is exercised as in production and a benchmark
//! does not pay a new TCP connection per request (docs/PERFORMANCE.md, "Step 1: fixed costs").
//! A connection is closed, with `connection: close` in the reply head, when the client asks
//! for it, when the reply is a fault that ends the connection (a drop, a stall, a stream that
//! ends without `[DONE]`), and after an early reply whose request body was never read.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dsh_llm::LockExt;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use tokio_rustls::TlsAcceptor;

use crate::routes::{take_routed, RequestMatch, Route};
use crate::script::{ScriptedReply, SseReply, SseStep, StreamEnd, DONE_EVENT};

/// The certificate authority of [`FakeProvider::start_tls`]'s certificate (PEM): what a
/// client adds to its roots to reach it (docs/providers.md, "Extra root certificates").
pub const TEST_CA_PEM: &[u8] = include_bytes!("../tls/ca.pem");
const TEST_SERVER_PEM: &[u8] = include_bytes!("../tls/server.pem");
const TEST_SERVER_KEY: &[u8] = include_bytes!("../tls/server.key");

/// Largest request head accepted, in bytes.
const MAX_HEAD: usize = 1024 * 1024;

/// One request the fake provider received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: String,
    /// The request target as sent (path and query).
    pub path: String,
    /// Header names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// The body bytes exactly as received.
    pub raw_body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// When the bytes of one request and its reply crossed the wire (for benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTiming {
    /// The first byte of the request was read from the socket.
    pub first_byte: Instant,
    /// The whole request (head and body) was read.
    pub request_read: Instant,
    /// The last byte of the reply was written (`None` while streaming, when the connection was
    /// dropped or stalled on purpose, or when the client went away).
    pub reply_done: Option<Instant>,
}

/// Counters tests can wait on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderEvents {
    /// Requests received (chat-completions or not).
    pub requests: usize,
    /// Replies that reached a [`StreamEnd::Stall`].
    pub stalls: usize,
    /// Connections the client closed while a reply was still streaming or stalled.
    pub client_disconnects: usize,
    /// TCP connections accepted (a client that reuses its connections opens fewer than it
    /// sends requests).
    pub connections: usize,
    /// `HEAD` requests (a client opening its connection ahead of its first call), answered
    /// `200` without a body and left out of the `requests` count and [`FakeProvider::requests`].
    pub head_requests: usize,
}

struct Shared {
    replies: Mutex<VecDeque<ScriptedReply>>,
    /// Replies by web search query (`FakeProvider::answer_search`), outside the script.
    search_routes: Mutex<Vec<(String, ScriptedReply)>>,
    /// Replies by request content (`FakeProvider::route`), taken before the script.
    content_routes: Mutex<Vec<Route>>,
    rejected_fields: Mutex<Vec<String>>,
    models: Mutex<Option<Vec<String>>>,
    /// Request bodies larger than this are not read: the next reply is sent at once.
    early_reply_above: Mutex<Option<usize>>,
    requests: Mutex<Vec<RecordedRequest>>,
    head_requests: Mutex<Vec<RecordedRequest>>,
    timings: Mutex<Vec<RequestTiming>>,
    scripted: Mutex<usize>,
    events: watch::Sender<ProviderEvents>,
}

/// A scripted provider on `127.0.0.1` (random port) speaking DeepSeek's chat-completions and
/// Anthropic's Messages formats.
///
/// `POST /chat/completions`, `/v1/chat/completions` (DeepSeek mode), `POST /v1/responses`,
/// `/responses` (Responses mode, see [`ResponsesReply`](crate::ResponsesReply)) and `POST /v1/messages`,
/// `/messages` (Anthropic mode, see [`AnthropicReply`](crate::AnthropicReply)) share one
/// script: model request k gets reply k; once the script is used up every further request gets
/// a 500 whose message names the problem. With [`reject_field`](Self::reject_field), a model
/// request whose JSON body holds that key anywhere gets a 400 and consumes nothing. With
/// [`set_models`](Self::set_models), `GET /models` and `/v1/models` list models. Other paths
/// get a 404 and consume nothing. Every request but a `HEAD` is recorded; a `HEAD` (a
/// client's preconnect) is answered `200` without a body and counted in
/// [`ProviderEvents::head_requests`]. Dropping the provider
/// stops the server and closes its connections.
pub struct FakeProvider {
    /// `http`, or `https` for [`FakeProvider::start_tls`].
    scheme: &'static str,
    address: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeProvider {
    /// Binds `127.0.0.1:0` and starts serving `replies` in order.
    pub async fn start(
        replies: impl IntoIterator<Item = ScriptedReply>,
    ) -> io::Result<FakeProvider> {
        Self::serve(replies, None).await
    }

    /// [`start`](Self::start) over HTTPS: the server presents `tls/server.pem` (for
    /// `127.0.0.1` and `localhost`, signed by [`TEST_CA_PEM`], which a client must trust), and
    /// [`base_url`](Self::base_url) is `https://127.0.0.1:<port>`. A client that does not
    /// trust the certificate gets no answer: the handshake fails.
    pub async fn start_tls(
        replies: impl IntoIterator<Item = ScriptedReply>,
    ) -> io::Result<FakeProvider> {
        Self::serve(replies, Some(test_acceptor()?)).await
    }

    async fn serve(
        replies: impl IntoIterator<Item = ScriptedReply>,
        tls: Option<TlsAcceptor>,
    ) -> io::Result<FakeProvider> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let replies: VecDeque<ScriptedReply> = replies.into_iter().collect();
        let scripted = replies.len();
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies),
            search_routes: Mutex::new(Vec::new()),
            content_routes: Mutex::new(Vec::new()),
            rejected_fields: Mutex::new(Vec::new()),
            models: Mutex::new(None),
            early_reply_above: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            head_requests: Mutex::new(Vec::new()),
            timings: Mutex::new(Vec::new()),
            scripted: Mutex::new(scripted),
            events: watch::Sender::new(ProviderEvents::default()),
        });
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&shared), tls));
        Ok(FakeProvider {
            scheme,
            address,
            shared,
            server,
        })
    }

    /// `http://127.0.0.1:<port>` (`https://` for [`start_tls`](Self::start_tls)): the base
    /// URL to configure an adapter with.
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.address)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Appends a reply to the script.
    pub fn push_reply(&self, reply: impl Into<ScriptedReply>) {
        self.shared
            .replies
            .lock_or_recover()
            .push_back(reply.into());
        *self.shared.scripted.lock_or_recover() += 1;
    }

    /// Answers every `POST /messages` (or `/v1/messages`) whose user text is exactly
    /// `Perform a web search for the query: <query>` (the `web_search` tool's request) with
    /// `reply`, outside the script (see [`crate::web_search`] for the replies). Later routes
    /// for the same query replace earlier ones.
    pub fn answer_search(&self, query: &str, reply: ScriptedReply) {
        let text = format!("Perform a web search for the query: {query}");
        let mut routes = self.shared.search_routes.lock_or_recover();
        routes.retain(|(q, _)| *q != text);
        routes.push((text, reply));
    }

    /// Serves `replies`, in order, to the model requests that match `matcher`, before the
    /// script: concurrent agents (a parent and its subagents) each get their own replies.
    /// Routes are tried in the order they were added; a route whose replies are used up is
    /// passed over, so its next matching request falls through to the script. Requests taken
    /// by a route are recorded like any other.
    pub fn route(&self, matcher: RequestMatch, replies: impl IntoIterator<Item = ScriptedReply>) {
        self.shared.content_routes.lock_or_recover().push(Route {
            matcher,
            replies: replies.into_iter().collect(),
        });
    }

    /// Makes the provider answer 400 (``unknown field `<name>` ``) to any model request whose JSON
    /// body contains an object key `name` at any depth, as strict OpenAI-compatible servers do.
    pub fn reject_field(&self, name: &str) {
        self.shared
            .rejected_fields
            .lock_or_recover()
            .push(name.to_string());
    }

    /// Makes `GET /models` and `GET /v1/models` answer with these model ids (in both the
    /// OpenAI `{"object": "list", "data": [...]}` and Anthropic shapes).
    pub fn set_models(&self, ids: &[&str]) {
        *self.shared.models.lock_or_recover() = Some(ids.iter().map(|id| id.to_string()).collect());
    }

    /// Acts like a proxy with a body-size limit: a request whose `content-length` exceeds
    /// `bytes` gets its reply (the next scripted one, typically a 413) right after its head,
    /// without its body being read, and the connection is closed. It is recorded with an empty
    /// body.
    pub fn reply_early_above(&self, bytes: usize) {
        *self.shared.early_reply_above.lock_or_recover() = Some(bytes);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock_or_recover().clone()
    }

    /// Every `HEAD` request received so far (preconnects), in arrival order.
    pub fn head_requests(&self) -> Vec<RecordedRequest> {
        self.shared.head_requests.lock_or_recover().clone()
    }

    /// When each request arrived and its reply ended, in the order of [`requests`](Self::requests).
    pub fn timings(&self) -> Vec<RequestTiming> {
        self.shared.timings.lock_or_recover().clone()
    }

    /// The current counters.
    pub fn events(&self) -> ProviderEvents {
        *self.shared.events.borrow()
    }

    /// Waits until the counters satisfy `condition`.
    pub async fn wait_until(&self, condition: impl Fn(&ProviderEvents) -> bool) {
        let mut receiver = self.shared.events.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|events| condition(events)).await;
    }

    /// Waits until `count` replies have reached their stall point (see [`StreamEnd::Stall`]).
    pub async fn wait_for_stalls(&self, count: usize) {
        self.wait_until(|events| events.stalls >= count).await;
    }

    /// Waits until the client has closed `count` connections mid-reply.
    pub async fn wait_for_client_disconnects(&self, count: usize) {
        self.wait_until(|events| events.client_disconnects >= count)
            .await;
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.server.abort();
    }
}

/// A connection the server speaks HTTP over: TCP, or TLS over TCP.
trait Wire: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Wire for S {}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tls: Option<TlsAcceptor>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _peer)) = listener.accept().await else {
            continue;
        };
        // Best effort: without NODELAY the test only gets slower, never wrong.
        let _ = stream.set_nodelay(true);
        shared.events.send_modify(|events| events.connections += 1);
        let shared = Arc::clone(&shared);
        match &tls {
            None => {
                connections.spawn(serve_connection(stream, shared));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    // A client that does not trust the certificate ends the handshake.
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve_connection(stream, shared).await;
                    }
                });
            }
        }
    }
}

/// The acceptor of [`FakeProvider::start_tls`]: `tls/server.pem` and its key, HTTP/1.1 only.
fn test_acceptor() -> io::Result<TlsAcceptor> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let invalid =
        |err: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, err.to_string());
    let chain = CertificateDer::pem_slice_iter(TEST_SERVER_PEM)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&e))?;
    let key = PrivateKeyDer::from_pem_slice(TEST_SERVER_KEY).map_err(|e| invalid(&e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(&e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A parsed request head.
struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

fn parse_head(bytes: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let headers = lines
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect();
    Some(Head {
        method,
        path,
        headers,
    })
}

/// One request read off a connection.
struct Request {
    head: Head,
    body: Vec<u8>,
    first_byte: Instant,
    /// The body was not read (an early reply): the connection cannot carry another request.
    body_skipped: bool,
}

/// Reads the next request on a connection. `pending` holds bytes read past the previous
/// request (a client may send its next request as soon as a reply ends) and keeps those read
/// past this one. `None` when the client closed the connection or sent something unusable.
async fn read_request<S: Wire>(
    stream: &mut S,
    pending: &mut Vec<u8>,
    early_reply_above: Option<usize>,
) -> Option<Request> {
    let mut buffer = std::mem::take(pending);
    let mut first_byte = (!buffer.is_empty()).then(Instant::now);
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > MAX_HEAD {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        first_byte.get_or_insert_with(Instant::now);
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = parse_head(&buffer[..head_end])?;
    let length: usize = head
        .headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer.split_off(head_end + 4);
    let first_byte = first_byte.unwrap_or_else(Instant::now);
    if early_reply_above.is_some_and(|limit| length > limit) {
        return Some(Request {
            head,
            body: Vec::new(),
            first_byte,
            body_skipped: true,
        });
    }
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 * 1024)];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    *pending = body.split_off(length);
    Some(Request {
        head,
        body,
        first_byte,
        body_skipped: false,
    })
}

/// True when the client asked for the connection to end after this request.
fn client_closes(head: &Head) -> bool {
    head.headers.iter().any(|(name, value)| {
        name == "connection"
            && value
                .split(',')
                .any(|token| token.trim().eq_ignore_ascii_case("close"))
    })
}

fn is_model_request(head: &Head) -> bool {
    let path = head.path.split('?').next().unwrap_or("");
    head.method == "POST"
        && matches!(
            path,
            "/chat/completions"
                | "/v1/chat/completions"
                | "/v1/messages"
                | "/messages"
                | "/v1/responses"
                | "/responses"
        )
}

/// The reply routed to a web search request by its user text, if any.
fn search_route(head: &Head, body: &Value, shared: &Shared) -> Option<ScriptedReply> {
    let path = head.path.split('?').next().unwrap_or("");
    if head.method != "POST" || !matches!(path, "/messages" | "/v1/messages") {
        return None;
    }
    let text = body
        .pointer("/messages/0/content/0/text")
        .and_then(Value::as_str)?;
    let routes = shared.search_routes.lock_or_recover();
    routes
        .iter()
        .find(|(query, _)| query == text)
        .map(|(_, reply)| reply.clone())
}

fn is_models_listing(head: &Head) -> bool {
    let path = head.path.split('?').next().unwrap_or("");
    head.method == "GET" && matches!(path, "/models" | "/v1/models")
}

/// The first of `names` that occurs as an object key anywhere in `value`.
fn find_key<'a>(value: &Value, names: &'a [String]) -> Option<&'a str> {
    match value {
        Value::Object(map) => names
            .iter()
            .find(|name| map.contains_key(name.as_str()))
            .map(String::as_str)
            .or_else(|| map.values().find_map(|v| find_key(v, names))),
        Value::Array(items) => items.iter().find_map(|v| find_key(v, names)),
        _ => None,
    }
}

fn models_reply(ids: &[String]) -> ScriptedReply {
    let data: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "object": "model", "type": "model", "owned_by": "fake", "display_name": id}))
        .collect();
    ScriptedReply::Http {
        status: 200,
        headers: Vec::new(),
        body: json!({"object": "list", "data": data, "has_more": false}).to_string(),
    }
}

async fn serve_connection<S: Wire>(mut stream: S, shared: Arc<Shared>) {
    let mut pending = Vec::new();
    loop {
        let early = *shared.early_reply_above.lock_or_recover();
        let Some(request) = read_request(&mut stream, &mut pending, early).await else {
            return;
        };
        let keep_alive = !request.body_skipped && !client_closes(&request.head);
        if !serve_request(&mut stream, request, keep_alive, &shared).await {
            return;
        }
    }
}

/// Records and answers one request; true when the connection stays open for the next one.
async fn serve_request<S: Wire>(
    stream: &mut S,
    request: Request,
    keep_alive: bool,
    shared: &Shared,
) -> bool {
    let Request {
        head,
        body,
        first_byte,
        ..
    } = request;
    let request_read = Instant::now();
    if head.method == "HEAD" {
        shared
            .head_requests
            .lock_or_recover()
            .push(RecordedRequest {
                method: head.method.clone(),
                path: head.path.clone(),
                headers: head.headers.clone(),
                body: Value::Null,
                raw_body: body,
            });
        shared
            .events
            .send_modify(|events| events.head_requests += 1);
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n{}\r\n",
            connection_line(keep_alive)
        );
        return stream.write_all(reply.as_bytes()).await.is_ok() && keep_alive;
    }
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rejected =
        find_key(&json_body, &shared.rejected_fields.lock_or_recover()).map(str::to_string);
    let routed = search_route(&head, &json_body, shared);
    let content_routed = if is_model_request(&head) && rejected.is_none() {
        take_routed(&mut shared.content_routes.lock_or_recover(), &json_body)
    } else {
        None
    };
    let number = {
        let mut requests = shared.requests.lock_or_recover();
        requests.push(RecordedRequest {
            method: head.method.clone(),
            path: head.path.clone(),
            headers: head.headers.clone(),
            body: json_body,
            raw_body: body,
        });
        shared.timings.lock_or_recover().push(RequestTiming {
            first_byte,
            request_read,
            reply_done: None,
        });
        requests.len()
    };
    shared.events.send_modify(|events| events.requests += 1);
    let models = shared.models.lock_or_recover().clone();
    let reply = if let Some(routed) = routed {
        routed
    } else if let (true, Some(field)) = (is_model_request(&head), rejected) {
        ScriptedReply::http_error(
            400,
            &format!("fake provider: unknown field `{field}` is not accepted by this endpoint"),
        )
    } else if let (true, Some(ids)) = (is_models_listing(&head), models) {
        models_reply(&ids)
    } else if let Some(routed) = content_routed {
        routed
    } else if is_model_request(&head) {
        let next = shared.replies.lock_or_recover().pop_front();
        next.unwrap_or_else(|| {
            let scripted = *shared.scripted.lock_or_recover();
            let message = format!(
                "fake provider: no scripted reply left for request #{number} (the script had {scripted} replies)"
            );
            ScriptedReply::Http {
                status: 500,
                headers: Vec::new(),
                body: json!({"error": {"message": message, "type": "script_exhausted"}}).to_string(),
            }
        })
    } else {
        ScriptedReply::http_error(
            404,
            &format!("fake provider: no route for {} {}", head.method, head.path),
        )
    };
    // Write errors mean the client went away; there is nobody left to tell.
    match write_reply(stream, reply, keep_alive, shared).await {
        Ok(Some(ReplyEnd { done, kept_alive })) => {
            if let Some(timing) = shared.timings.lock_or_recover().get_mut(number - 1) {
                timing.reply_done = Some(done);
            }
            kept_alive
        }
        Ok(None) | Err(_) => false,
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// How a complete reply ended.
struct ReplyEnd {
    /// Its last byte was written.
    done: Instant,
    /// The connection stays open for the client's next request.
    kept_alive: bool,
}

/// The `connection` line of a reply head: none on a connection that stays open (persistent is
/// HTTP/1.1's default), `connection: close` on one that ends after this reply.
fn connection_line(kept_alive: bool) -> &'static str {
    if kept_alive {
        ""
    } else {
        "connection: close\r\n"
    }
}

/// True when scripted headers already end the connection.
fn headers_close(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("connection") && value.to_ascii_lowercase().contains("close")
    })
}

/// Writes `reply`. `keep_alive`: the request allows the connection to stay open; it does when
/// the reply is complete and not a fault that ends the connection. `Ok(None)` for replies
/// that never complete (dropped or stalled on purpose).
async fn write_reply<S: Wire>(
    stream: &mut S,
    reply: ScriptedReply,
    keep_alive: bool,
    shared: &Shared,
) -> io::Result<Option<ReplyEnd>> {
    match reply {
        ScriptedReply::CloseConnection => Ok(None),
        ScriptedReply::Http {
            status,
            headers,
            body,
        } => {
            let kept_alive = keep_alive && !headers_close(&headers);
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}",
                reason_phrase(status),
                body.len(),
                connection_line(kept_alive)
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            let done = Instant::now();
            if !kept_alive {
                stream.shutdown().await?;
            }
            Ok(Some(ReplyEnd { done, kept_alive }))
        }
        ScriptedReply::Stream(reply) => {
            let kept_alive = keep_alive
                && matches!(reply.end, StreamEnd::Done)
                && !headers_close(&reply.headers);
            let outcome = write_stream(stream, &reply, kept_alive, shared).await;
            if outcome.is_err() {
                shared
                    .events
                    .send_modify(|events| events.client_disconnects += 1);
            }
            outcome
        }
    }
}

async fn write_chunk<S: Wire>(stream: &mut S, bytes: &[u8]) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut framed = Vec::with_capacity(bytes.len() + 16);
    framed.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
    framed.extend_from_slice(bytes);
    framed.extend_from_slice(b"\r\n");
    stream.write_all(&framed).await?;
    stream.flush().await
}

/// Writes a streamed reply; `kept_alive` only when it ends with `[DONE]` and the connection
/// stays open after it.
async fn write_stream<S: Wire>(
    stream: &mut S,
    reply: &SseReply,
    kept_alive: bool,
    shared: &Shared,
) -> io::Result<Option<ReplyEnd>> {
    let mut head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n{}",
        connection_line(kept_alive)
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await?;
    for step in &reply.steps {
        match step {
            SseStep::Delay(pause) => tokio::time::sleep(*pause).await,
            other => {
                if let (SseStep::Data(_), Some(pause)) = (other, reply.chunk_delay) {
                    tokio::time::sleep(pause).await;
                }
                if let Some(bytes) = other.bytes() {
                    write_chunk(stream, &bytes).await?;
                }
            }
        }
    }
    match reply.end {
        StreamEnd::Done => {
            write_chunk(stream, DONE_EVENT).await?;
            stream.write_all(b"0\r\n\r\n").await?;
            let done = Instant::now();
            if !kept_alive {
                stream.shutdown().await?;
            }
            Ok(Some(ReplyEnd { done, kept_alive }))
        }
        StreamEnd::CloseWithoutDone => {
            stream.write_all(b"0\r\n\r\n").await?;
            let done = Instant::now();
            stream.shutdown().await?;
            Ok(Some(ReplyEnd {
                done,
                kept_alive: false,
            }))
        }
        StreamEnd::DropConnection => Ok(None),
        StreamEnd::KeepAliveForever(every) => {
            shared.events.send_modify(|events| events.stalls += 1);
            loop {
                tokio::time::sleep(every).await;
                if let Err(err) = write_chunk(stream, b": keep-alive\n\n").await {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!("client closed a keep-alive-only stream: {err}"),
                    ));
                }
            }
        }
        StreamEnd::Stall => {
            shared.events.send_modify(|events| events.stalls += 1);
            // Hold the connection open and wait for the client to close it.
            let mut sink = [0u8; 1024];
            loop {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "client closed a stalled stream",
                        ))
                    }
                    Ok(_) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpStream;

    /// Sends `requests` (raw HTTP) one after the other on one connection and reads, after
    /// each, until its reply is complete (a chunked body's terminator or `content-length`
    /// bytes); returns the replies and whether the server then closed the connection.
    async fn exchange(address: SocketAddr, requests: &[String]) -> (Vec<String>, bool) {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let mut replies = Vec::new();
        for request in requests {
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut reply = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let text = String::from_utf8_lossy(&reply).to_string();
                let complete = match text.split_once("\r\n\r\n") {
                    Some((head, body)) if head.contains("transfer-encoding: chunked") => {
                        body.ends_with("0\r\n\r\n")
                    }
                    Some((head, body)) => head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|n| n.parse::<usize>().ok())
                        .is_some_and(|n| body.len() >= n),
                    None => false,
                };
                if complete {
                    break;
                }
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "closed mid-reply: {text}");
                reply.extend_from_slice(&chunk[..read]);
            }
            replies.push(String::from_utf8(reply).unwrap());
        }
        let mut rest = [0u8; 16];
        let closed = matches!(
            tokio::time::timeout(
                std::time::Duration::from_millis(300),
                stream.read(&mut rest)
            )
            .await,
            Ok(Ok(0))
        );
        (replies, closed)
    }

    fn post(body: &str, extra_header: &str) -> String {
        format!(
            "POST /chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra_header}content-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn complete_replies_keep_the_connection_for_the_next_request() {
        let provider = FakeProvider::start([
            SseReply::new().text("one").into(),
            ScriptedReply::http_error(429, "slow down"),
            SseReply::new().text("three").into(),
        ])
        .await
        .unwrap();
        let requests = [
            post("{\"n\":1}", ""),
            post("{\"n\":2}", ""),
            post("{\"n\":3}", ""),
        ];
        let (replies, closed) = exchange(provider.address(), &requests).await;
        assert_eq!(replies.len(), 3);
        assert!(replies[0].contains("\"one\"") && replies[2].contains("\"three\""));
        assert!(replies[1].starts_with("HTTP/1.1 429 "), "{}", replies[1]);
        for reply in &replies {
            assert!(!reply.contains("connection: close"), "{reply}");
        }
        assert!(!closed, "the connection stays open after a complete reply");
        let bodies: Vec<Vec<u8>> = provider
            .requests()
            .into_iter()
            .map(|r| r.raw_body)
            .collect();
        assert_eq!(
            bodies,
            [
                b"{\"n\":1}".to_vec(),
                b"{\"n\":2}".to_vec(),
                b"{\"n\":3}".to_vec()
            ]
        );
        let events = provider.events();
        assert_eq!((events.connections, events.requests), (1, 3), "{events:?}");
        assert!(provider.timings().iter().all(|t| t.reply_done.is_some()));
    }

    #[tokio::test]
    async fn a_client_that_asks_for_close_and_faults_that_end_the_stream_close_it() {
        let provider = FakeProvider::start([
            SseReply::new().text("one").into(),
            SseReply::new()
                .text("cut")
                .end(StreamEnd::CloseWithoutDone)
                .into(),
        ])
        .await
        .unwrap();
        let (replies, closed) =
            exchange(provider.address(), &[post("{}", "connection: close\r\n")]).await;
        assert!(
            replies[0].contains("connection: close\r\n"),
            "{}",
            replies[0]
        );
        assert!(
            closed,
            "closed after a reply the client asked to be the last"
        );
        let (replies, closed) = exchange(provider.address(), &[post("{}", "")]).await;
        assert!(
            replies[0].contains("connection: close\r\n"),
            "{}",
            replies[0]
        );
        assert!(
            closed,
            "a stream that ends without [DONE] ends its connection"
        );
        assert_eq!(provider.events().connections, 2);
    }

    #[tokio::test]
    async fn a_request_sent_right_behind_the_previous_one_is_not_lost() {
        let provider = FakeProvider::start([
            SseReply::new().text("one").into(),
            SseReply::new().text("two").into(),
        ])
        .await
        .unwrap();
        // Both requests in one write: the bytes after the first body are the second request.
        let both = post("{\"n\":1}", "") + &post("{\"n\":2}", "");
        let mut stream = TcpStream::connect(provider.address()).await.unwrap();
        stream.write_all(both.as_bytes()).await.unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            provider.wait_until(|e| e.requests >= 2),
        )
        .await
        .expect("the second request was read");
        let bodies: Vec<Vec<u8>> = provider
            .requests()
            .into_iter()
            .map(|r| r.raw_body)
            .collect();
        assert_eq!(bodies, [b"{\"n\":1}".to_vec(), b"{\"n\":2}".to_vec()]);
    }
}
