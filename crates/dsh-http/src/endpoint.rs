//! The streamed-call driver and the provider endpoint both wire formats share (the
//! chat-completions adapter in `dsh-deepseek`, the Anthropic Messages adapter in
//! `dsh-anthropic`). An [`Endpoint`] holds the client, URLs, headers and key of one provider
//! and makes its calls: a streamed model call ([`HttpCall`]: send the request, turn a non-2xx
//! response into a [`Failure`] through the format's error table, feed the body to the format's
//! [`BodyDecoder`], honour cancellation, the idle timeout and the overall reply deadline at every
//! await, scrub the key from every failure) and the model listing ([`get_model_ids`]). What
//! differs per format is the request body, the decoder, the error table and how the key is sent.

use std::collections::VecDeque;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use crate::{HttpClient, RequestBody};
use dsh_llm::{Chunk, ChunkStream, Failure, FailureCode, FinishReason};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use tokio_util::sync::CancellationToken;

/// Most bytes of an error response body kept for the failure message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// What is read, at most, of a body after its reply finished cleanly (normally only the chunked
/// terminator after `[DONE]`), and for how long, so the connection goes back to the pool.
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// A wire format's decoder of a streamed response body into chunks.
pub trait BodyDecoder: Send + Sync + 'static {
    /// Decodes the next bytes of the body.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>);
    /// The body ended (a missing terminal event becomes an error here).
    fn end_of_stream(&mut self, out: &mut Vec<Chunk>);
    /// The body broke off with `failure`.
    fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>);
    /// A finish chunk was emitted: nothing more will come.
    fn is_finished(&self) -> bool;
}

/// A non-2xx response, for the format's error mapping.
#[derive(Debug)]
pub struct HttpErrorParts<'a> {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers (`Retry-After`, request ids).
    pub headers: &'a HeaderMap,
    /// The start of the body (at most 64 KiB; empty when it stalled or broke).
    pub body: &'a [u8],
}

impl HttpErrorParts<'_> {
    /// The value of header `name`, when it is present and readable as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string)
    }
}

/// Builds the request when the stream is first polled: checks credentials and serialises the
/// body, or says why it cannot.
pub type PrepareRequest = Box<dyn FnOnce() -> Result<reqwest::RequestBuilder, Failure> + Send>;

/// Maps a non-2xx response to the failure of the call.
pub type HttpFailure = Box<dyn Fn(&HttpErrorParts<'_>) -> Failure + Send + Sync>;

/// Removes secrets from a failure before it leaves the adapter.
pub type Scrub = Box<dyn Fn(Failure) -> Failure + Send + Sync>;

/// Everything one streamed call needs.
pub struct HttpCall<D> {
    /// Builds the request on first poll (credentials and body checked then).
    pub prepare: PrepareRequest,
    /// The endpoint, for "could not reach" messages.
    pub url: String,
    /// Longest wait for the response headers or for the next bytes of the body.
    pub idle_timeout: Duration,
    /// Longest time for the whole reply, from sending the request to its last byte, however
    /// steadily bytes (keep-alive comments included) arrive.
    pub reply_timeout: Duration,
    /// Cancels the call; the stream then ends with an aborted finish.
    pub cancel: CancellationToken,
    /// The wire format's body decoder: response bytes to chunks.
    pub decoder: D,
    /// The wire format's error table for non-2xx responses.
    pub http_failure: HttpFailure,
    /// Removes the key from every failure before it is returned.
    pub scrub: Scrub,
}

impl<D: BodyDecoder> HttpCall<D> {
    /// The chunks of the call: deltas, then exactly one finish chunk (aborted on cancel).
    pub fn into_stream(self) -> ChunkStream {
        let state = CallState {
            phase: Phase::Start(Box::new(self)),
            queue: VecDeque::new(),
            scratch: Vec::new(),
        };
        Box::pin(futures::stream::unfold(state, |mut state| async move {
            let chunk = state.next_chunk().await?;
            Some((chunk, state))
        }))
    }
}

/// The finish chunk of a cancelled call.
pub fn aborted_chunk() -> Chunk {
    Chunk::Finish {
        reason: FinishReason::Aborted {
            failure: Failure::new(FailureCode::Aborted, "the model call was cancelled"),
        },
    }
}

/// The finish chunk of a failed call.
pub fn error_chunk(failure: Failure) -> Chunk {
    Chunk::Finish {
        reason: FinishReason::Error { failure },
    }
}

/// The error and its sources, joined, without the URL (which reqwest puts in `Display`).
pub fn describe_transport_error(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    if text.contains("invalid peer certificate") {
        text.push_str(&format!(
            " (no trusted authority signed the provider's certificate; behind a proxy or gateway \
             with an authority of its own, point {} at that authority's PEM file)",
            crate::EXTRA_ROOTS_ENV
        ));
    }
    text
}

/// The failure of a wait longer than `idle_timeout` for `waiting_for`.
pub fn timeout_failure(idle_timeout: Duration, waiting_for: &str) -> Failure {
    Failure::new(
        FailureCode::Timeout,
        format!(
            "no data from the provider for {:.1} s while waiting for {waiting_for}",
            idle_timeout.as_secs_f64()
        ),
    )
}

/// The failure of a reply still unfinished after `reply_timeout`: `TIMEOUT`, retryable like
/// the idle watchdog's, with a message that names the deadline and how to change it.
pub fn reply_deadline_failure(reply_timeout: Duration, waiting_for: &str) -> Failure {
    Failure::new(
        FailureCode::Timeout,
        format!(
            "the reply took longer than the overall deadline of {:.1} s (while waiting for \
             {waiting_for}); the provider kept the connection open without finishing. Raise \
             `reply_timeout_secs` for this provider if its replies are really this long",
            reply_timeout.as_secs_f64()
        ),
    )
}

/// When a wait for `waiting_for` ends: at the idle timeout, or at the reply deadline when that
/// comes first. Gives the time left and which limit it runs into.
fn next_wait(call: &Sent<impl Sized>, waiting_for: &'static str) -> (Duration, Late) {
    let left = call
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    let deadline = left < call.idle_timeout;
    let wait = if deadline { left } else { call.idle_timeout };
    (
        wait,
        Late {
            deadline,
            waiting_for,
        },
    )
}

/// Which limit a wait of [`next_wait`] runs into, for the failure when it does (built only
/// then: a wait happens for every body read, a timeout rarely).
struct Late {
    /// The overall reply deadline comes before the idle timeout.
    deadline: bool,
    waiting_for: &'static str,
}

impl Late {
    fn failure(&self, call: &Sent<impl Sized>) -> Failure {
        if self.deadline {
            reply_deadline_failure(call.reply_timeout, self.waiting_for)
        } else {
            timeout_failure(call.idle_timeout, self.waiting_for)
        }
    }
}

enum Phase<D> {
    Start(Box<HttpCall<D>>),
    Streaming(Box<Streaming<D>>),
    Done,
}

/// A call past preparing: what the rest of it needs.
struct Sent<D> {
    url: String,
    idle_timeout: Duration,
    reply_timeout: Duration,
    /// When the reply must be complete (`reply_timeout` after the request was sent).
    deadline: tokio::time::Instant,
    cancel: CancellationToken,
    decoder: D,
    http_failure: HttpFailure,
    scrub: Scrub,
}

/// A call whose response headers arrived and whose body is being read.
struct Streaming<D> {
    response: reqwest::Response,
    call: Sent<D>,
}

struct CallState<D> {
    phase: Phase<D>,
    queue: VecDeque<Chunk>,
    scratch: Vec<Chunk>,
}

impl<D: BodyDecoder> CallState<D> {
    async fn next_chunk(&mut self) -> Option<Chunk> {
        loop {
            if let Some(chunk) = self.queue.pop_front() {
                return Some(chunk);
            }
            self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Start(call) => self.start(*call).await,
                Phase::Streaming(streaming) => self.read(streaming).await,
            };
        }
    }

    fn finish_with(&mut self, scrub: &Scrub, failure: Failure) -> Phase<D> {
        self.queue.push_back(error_chunk(scrub(failure)));
        Phase::Done
    }

    fn aborted(&mut self) -> Phase<D> {
        self.queue.push_back(aborted_chunk());
        Phase::Done
    }

    async fn start(&mut self, call: HttpCall<D>) -> Phase<D> {
        let HttpCall {
            prepare,
            url,
            idle_timeout,
            reply_timeout,
            cancel,
            decoder,
            http_failure,
            scrub,
        } = call;
        if cancel.is_cancelled() {
            return self.aborted();
        }
        let request = match prepare() {
            Ok(request) => request,
            Err(failure) => return self.finish_with(&scrub, failure),
        };
        let call = Sent {
            url,
            idle_timeout,
            reply_timeout,
            deadline: tokio::time::Instant::now() + reply_timeout,
            cancel,
            decoder,
            http_failure,
            scrub,
        };
        let (wait, late) = next_wait(&call, "the response headers");
        let outcome = tokio::select! {
            biased;
            _ = call.cancel.cancelled() => return self.aborted(),
            outcome = tokio::time::timeout(wait, request.send()) => outcome,
        };
        let response = match outcome {
            Err(_elapsed) => {
                let failure = late.failure(&call);
                return self.finish_with(&call.scrub, failure);
            }
            Ok(Err(err)) => {
                let failure = Failure::new(
                    FailureCode::Transport,
                    format!(
                        "could not reach the provider at {}: {}",
                        call.url,
                        describe_transport_error(err)
                    ),
                );
                return self.finish_with(&call.scrub, failure);
            }
            Ok(Ok(response)) => response,
        };
        if response.status().is_success() {
            return Phase::Streaming(Box::new(Streaming { response, call }));
        }
        self.http_error(response, &call).await
    }

    async fn http_error(&mut self, mut response: reqwest::Response, call: &Sent<D>) -> Phase<D> {
        let mut body = Vec::new();
        // The body only adds the provider's wording; a body that stalls, breaks or is cancelled
        // is cut short and the status alone decides the failure.
        loop {
            let (wait, _) = next_wait(call, "the error body");
            let next = tokio::select! {
                biased;
                _ = call.cancel.cancelled() => return self.aborted(),
                next = tokio::time::timeout(wait, response.chunk()) => next,
            };
            match next {
                Ok(Ok(Some(bytes))) if body.len() < ERROR_BODY_LIMIT => {
                    body.extend_from_slice(&bytes);
                }
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_LIMIT);
        let status = response.status().as_u16();
        let failure =
            redirect_failure(&call.url, status, response.headers()).unwrap_or_else(|| {
                (call.http_failure)(&HttpErrorParts {
                    status,
                    headers: response.headers(),
                    body: &body,
                })
            });
        self.finish_with(&call.scrub, failure)
    }

    async fn read(&mut self, mut streaming: Box<Streaming<D>>) -> Phase<D> {
        let Streaming { response, call } = &mut *streaming;
        let (wait, late) = next_wait(call, "the next stream event");
        let next = tokio::select! {
            biased;
            _ = call.cancel.cancelled() => return self.aborted(),
            next = tokio::time::timeout(wait, response.chunk()) => next,
        };
        let end_of_body = matches!(next, Ok(Ok(None)));
        let scratch = &mut self.scratch;
        match next {
            Err(_elapsed) => call.decoder.fail(late.failure(call), scratch),
            Ok(Err(err)) => call.decoder.fail(
                Failure::new(
                    FailureCode::Transport,
                    format!(
                        "the connection to the provider broke mid-stream: {}",
                        describe_transport_error(err)
                    ),
                ),
                scratch,
            ),
            Ok(Ok(None)) => call.decoder.end_of_stream(scratch),
            Ok(Ok(Some(bytes))) => call.decoder.push(&bytes, scratch),
        }
        for chunk in self.scratch.drain(..) {
            let chunk = match chunk {
                Chunk::Finish {
                    reason: FinishReason::Error { failure },
                } => error_chunk((call.scrub)(failure)),
                other => other,
            };
            self.queue.push_back(chunk);
        }
        if call.decoder.is_finished() {
            let clean = matches!(
                self.queue.back(),
                Some(Chunk::Finish {
                    reason: FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens
                })
            );
            if clean && !end_of_body {
                release_connection(streaming.response);
            }
            Phase::Done
        } else {
            Phase::Streaming(streaming)
        }
    }
}

/// Reads the rest of a reply whose decoder finished cleanly (the `[DONE]` event can arrive
/// before the chunked body's terminator) on a task of its own, bounded by [`DRAIN_LIMIT`] and
/// [`DRAIN_TIME`], then drops it. The HTTP client returns a connection to its pool only once
/// its response body was read to the end; dropping the body early closes the connection, and
/// the next model call would set up a new one (docs/PERFORMANCE.md, "Step 1: fixed costs").
/// The caller does not wait: its chunks are already delivered.
fn release_connection(mut response: reqwest::Response) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let drain = async {
            let mut read = 0usize;
            while let Ok(Some(bytes)) = response.chunk().await {
                read += bytes.len();
                if read > DRAIN_LIMIT {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    });
}

/// `GET` a model list (`{"data": [{"id": ...}, ...]}`, the shape both wire formats use) and
/// return its ids. `request` carries the URL and headers; `url` names the endpoint in
/// messages; a non-2xx response goes through `http_failure`. Secrets are the caller's to
/// scrub.
pub async fn get_model_ids(
    request: reqwest::RequestBuilder,
    url: &str,
    idle_timeout: Duration,
    http_failure: &(dyn Fn(&HttpErrorParts<'_>) -> Failure + Sync),
) -> Result<Vec<String>, Failure> {
    let response = match tokio::time::timeout(idle_timeout, request.send()).await {
        Err(_) => return Err(timeout_failure(idle_timeout, "the model list")),
        Ok(Err(err)) => {
            return Err(Failure::new(
                FailureCode::Transport,
                format!(
                    "could not reach the provider at {url}: {}",
                    describe_transport_error(err)
                ),
            ))
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = match tokio::time::timeout(idle_timeout, response.bytes()).await {
        Ok(Ok(body)) => body,
        Ok(Err(err)) => {
            return Err(Failure::new(
                FailureCode::Transport,
                format!(
                    "the model list broke off: {}",
                    describe_transport_error(err)
                ),
            ))
        }
        Err(_) => return Err(timeout_failure(idle_timeout, "the model list")),
    };
    if let Some(failure) = redirect_failure(url, status, &headers) {
        return Err(failure);
    }
    if !(200..300).contains(&status) {
        return Err(http_failure(&HttpErrorParts {
            status,
            headers: &headers,
            body: &body,
        }));
    }
    let json: serde_json::Value = serde_json::from_slice(&body).map_err(|err| {
        Failure::new(
            FailureCode::MalformedResponse,
            format!("the model list is not JSON: {err}"),
        )
    })?;
    let list = json
        .get("data")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| {
            Failure::new(
                FailureCode::MalformedResponse,
                "the model list has no `data` array",
            )
        })?;
    Ok(list
        .iter()
        .filter_map(|m| m.get("id").and_then(serde_json::Value::as_str))
        .map(str::to_string)
        .collect())
}

/// The failure for a 3xx answer (redirects are not followed, see `Endpoint::new`), naming where
/// it pointed so the user can configure that address; `None` for any other status.
fn redirect_failure(url: &str, status: u16, headers: &HeaderMap) -> Option<Failure> {
    if !(300..400).contains(&status) {
        return None;
    }
    let target = headers
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .map_or_else(
            || "no Location".to_string(),
            |location| format!("`{location}`"),
        );
    Some(Failure::new(
        FailureCode::Http(status),
        format!(
            "the provider at {url} answered HTTP {status} redirecting to {target}; dsh does not \
             follow redirects so the API key never reaches another address. Set the base URL \
             (e.g. DEEPSEEK_BASE_URL or the provider's `base_url`) to the final address."
        ),
    ))
}

/// How an adapter reaches its provider: the client, the two URLs, the headers (the key's
/// included, marked sensitive), the key itself (for scrubbing only), the idle timeout and the
/// wire format's error table. Both wire formats' adapters hold one; it makes their streamed
/// calls and model listings.
#[derive(Clone)]
pub struct Endpoint {
    client: HttpClient,
    url: String,
    /// `url` parsed once, not at every call (`None` when it does not parse: the call then
    /// fails as the HTTP client reports it).
    parsed_url: Option<reqwest::Url>,
    /// `scheme://host:port/` of `url`: what a preconnect opens, and under which the client
    /// notes its use.
    origin: Option<reqwest::Url>,
    models_url: String,
    headers: HeaderMap,
    secret: Option<String>,
    /// The endpoint takes no key: calls go without one ([`crate::ApiKey::keyless`]).
    keyless: bool,
    /// The key and the configured header values in every form the matcher knows
    /// (docs/SECURITY.md, "Secrets and redaction").
    scrubber: Arc<crate::SecretMatcher>,
    key_variable: String,
    idle_timeout: Duration,
    reply_timeout: Duration,
    http_failure: fn(&HttpErrorParts<'_>, &str) -> Failure,
}

/// What an [`Endpoint`] is built from.
pub struct EndpointConfig<'a> {
    /// Streamed model calls are POSTed here.
    pub url: String,
    /// `GET` here lists the models.
    pub models_url: String,
    /// The wire format's own headers (e.g. an API version), besides content type and accept.
    pub format_headers: Vec<(HeaderName, HeaderValue)>,
    /// The key, if configured, and how the format sends it: header name and value text.
    pub key: Option<(&'a crate::ApiKey, HeaderName, String)>,
    /// Where the key was looked for, named in messages.
    pub key_variable: String,
    /// Headers the user configured.
    pub extra_headers: &'a [(String, String)],
    /// Longest wait for the TCP and TLS connection to be set up.
    pub connect_timeout: Duration,
    /// The connection pool to share (docs/providers.md, "Shared connections and preconnect");
    /// `None`, or one with another connect timeout, makes the endpoint a pool of its own.
    pub client: Option<HttpClient>,
    /// Longest wait for the response headers or for the next bytes of a body.
    pub idle_timeout: Duration,
    /// Overall deadline of one streamed reply (see [`HttpCall::reply_timeout`]).
    pub reply_timeout: Duration,
    /// The wire format's error table: a non-2xx response and the key variable to a failure.
    pub http_failure: fn(&HttpErrorParts<'_>, &str) -> Failure,
}

impl Endpoint {
    /// Builds the endpoint. Fails when the key or an extra header cannot be sent as an HTTP
    /// header, or the HTTP client cannot start. A missing key is not an error here: calls then
    /// finish with `MISSING_CREDENTIAL`.
    pub fn new(config: EndpointConfig<'_>) -> Result<Self, crate::AdapterConfigError> {
        use crate::AdapterConfigError;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        for (name, value) in config.format_headers {
            headers.insert(name, value);
        }
        let mut secret = None;
        let keyless = config
            .key
            .as_ref()
            .is_some_and(|(key, _, _)| key.is_keyless());
        if let Some((key, name, text)) = config
            .key
            .filter(|(key, _, _)| !key.is_empty() && !key.is_keyless())
        {
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                AdapterConfigError(format!(
                    "the API key ({}) holds characters that cannot be sent in an HTTP header",
                    config.key_variable
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
            secret = Some(key.expose_secret().to_string());
        }
        for (name, value) in config.extra_headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                AdapterConfigError(format!(
                    "extra header name `{name}` is not a valid HTTP header name"
                ))
            })?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                AdapterConfigError(format!(
                    "extra header `{name}` has a value that cannot be sent in HTTP"
                ))
            })?;
            headers.insert(header_name, header_value);
        }
        let mut known: Vec<&str> = secret.as_deref().into_iter().collect();
        known.extend(config.extra_headers.iter().map(|(_, value)| value.as_str()));
        let scrubber = Arc::new(crate::SecretMatcher::new(
            known.into_iter().map(|value| ("<redacted>", value)),
        ));
        // The client never follows redirects: a 3xx is reported with its target instead
        // (docs/providers.md, "Redirects").
        let client = match config.client {
            Some(shared) if shared.connect_timeout() == config.connect_timeout => shared,
            _ => HttpClient::new(config.connect_timeout)?,
        };
        let parsed_url = reqwest::Url::parse(&config.url).ok();
        Ok(Endpoint {
            client,
            origin: parsed_url.as_ref().and_then(crate::client::origin_root),
            parsed_url,
            url: config.url,
            models_url: config.models_url,
            headers,
            secret,
            keyless,
            scrubber,
            key_variable: config.key_variable,
            idle_timeout: config.idle_timeout,
            reply_timeout: config.reply_timeout,
            http_failure: config.http_failure,
        })
    }

    /// Opens a connection to the provider ahead of the first call, in the background: a `HEAD /`
    /// of the endpoint's origin without credentials (docs/providers.md, "Shared connections and
    /// preconnect"). Nothing is sent without a key (no call would follow), nor to an origin
    /// used in the last 30 s. Returns the task, or `None` when nothing is sent.
    pub fn preconnect(&self) -> Option<tokio::task::JoinHandle<()>> {
        if !self.has_key() {
            return None;
        }
        self.client.preconnect(self.origin.as_ref()?)
    }

    fn note_use(&self) {
        if let Some(origin) = &self.origin {
            self.client.note_use(origin.as_str());
        }
    }

    /// Where streamed calls go.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Longest wait for the provider.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// True when a key is configured, or the endpoint takes none.
    pub fn has_key(&self) -> bool {
        self.secret.is_some() || self.keyless
    }

    /// Removes the key and the configured header values from a failure message, whatever put
    /// them there (e.g. a provider echoing the rejected key), plain or encoded (base64, hex,
    /// reversed, pieces of 12 bytes and more; docs/SECURITY.md, "Secrets and redaction").
    pub fn scrub(&self, mut failure: Failure) -> Failure {
        if let Some(secret) = self.secret.as_deref().filter(|s| !s.is_empty()) {
            // Keys shorter than the matcher's minimum are still replaced where they appear
            // whole.
            if failure.message.contains(secret) {
                failure.message = failure.message.replace(secret, "<redacted>");
            }
        }
        if let std::borrow::Cow::Owned(clean) = self.scrubber.scrub(&failure.message) {
            failure.message = clean;
        }
        failure
    }

    /// The failure of a call made without a key.
    pub fn missing_credential(&self) -> Failure {
        Failure::new(
            FailureCode::MissingCredential,
            format!(
                "no API key: set {} or configure an API key for this provider",
                self.key_variable
            ),
        )
    }

    /// One streamed call: `body` serialises the request when the stream is first polled
    /// (after the cancel and key checks); `decoder` reads the reply.
    pub fn stream<D: BodyDecoder, B: Into<RequestBody>>(
        &self,
        cancel: CancellationToken,
        decoder: D,
        body: impl FnOnce() -> Result<B, Failure> + Send + 'static,
    ) -> ChunkStream {
        // One copy of the endpoint for the call's three closures.
        let endpoint = Arc::new(self.clone());
        let errors = Arc::clone(&endpoint);
        let scrubber = Arc::clone(&endpoint);
        let prepare: PrepareRequest = Box::new(move || {
            if !endpoint.has_key() {
                return Err(endpoint.missing_credential());
            }
            let body = body()?.into().into_reqwest();
            endpoint.note_use();
            let client = endpoint.client.reqwest();
            let request = match &endpoint.parsed_url {
                Some(url) => client.post(url.clone()),
                None => client.post(&endpoint.url),
            };
            Ok(request.headers(endpoint.headers.clone()).body(body))
        });
        HttpCall {
            prepare,
            url: self.url.clone(),
            idle_timeout: self.idle_timeout,
            reply_timeout: self.reply_timeout,
            cancel,
            decoder,
            http_failure: Box::new(move |response| {
                (errors.http_failure)(response, &errors.key_variable)
            }),
            scrub: Box::new(move |failure| scrubber.scrub(failure)),
        }
        .into_stream()
    }

    /// The ids of the provider's model list (`GET` on the models URL), failures scrubbed.
    pub async fn model_ids(&self) -> Result<Vec<String>, Failure> {
        if !self.has_key() {
            return Err(self.missing_credential());
        }
        let mut headers = self.headers.clone();
        headers.remove(CONTENT_TYPE);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        self.note_use();
        let request = self.client.reqwest().get(&self.models_url).headers(headers);
        get_model_ids(request, &self.models_url, self.idle_timeout, &|response| {
            (self.http_failure)(response, &self.key_variable)
        })
        .await
        .map_err(|failure| self.scrub(failure))
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("api_key", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("idle_timeout", &self.idle_timeout)
            .field("reply_timeout", &self.reply_timeout)
            .finish_non_exhaustive()
    }
}
