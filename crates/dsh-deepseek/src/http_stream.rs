//! One streamed model call over HTTP, shared by the wire formats (chat completions here, the
//! Anthropic Messages adapter in `dsh-anthropic`): send the request, turn a non-2xx response
//! into a [`Failure`], feed the body to the format's [`BodyDecoder`], and honour cancellation
//! and the idle timeout at every await. What differs per format (the request, the decoder, the
//! error mapping, the secret to scrub) comes in an [`HttpCall`].

use std::collections::VecDeque;
use std::error::Error as _;
use std::time::Duration;

use dsh_llm::{Chunk, ChunkStream, Failure, FailureCode, FinishReason};
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

/// Most bytes of an error response body kept for the failure message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

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
    pub status: u16,
    pub headers: &'a HeaderMap,
    /// The start of the body (at most 64 KiB; empty when it stalled or broke).
    pub body: &'a [u8],
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
    pub prepare: PrepareRequest,
    /// The endpoint, for "could not reach" messages.
    pub url: String,
    /// Longest wait for the response headers or for the next bytes of the body.
    pub idle_timeout: Duration,
    pub cancel: CancellationToken,
    pub decoder: D,
    pub http_failure: HttpFailure,
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

enum Phase<D> {
    Start(Box<HttpCall<D>>),
    Streaming(Box<Streaming<D>>),
    Done,
}

/// A call past preparing: what the rest of it needs.
struct Sent<D> {
    url: String,
    idle_timeout: Duration,
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
            cancel,
            decoder,
            http_failure,
            scrub,
        };
        let outcome = tokio::select! {
            biased;
            _ = call.cancel.cancelled() => return self.aborted(),
            outcome = tokio::time::timeout(call.idle_timeout, request.send()) => outcome,
        };
        let response = match outcome {
            Err(_elapsed) => {
                let failure = timeout_failure(call.idle_timeout, "the response headers");
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
            let next = tokio::select! {
                biased;
                _ = call.cancel.cancelled() => return self.aborted(),
                next = tokio::time::timeout(call.idle_timeout, response.chunk()) => next,
            };
            match next {
                Ok(Ok(Some(bytes))) if body.len() < ERROR_BODY_LIMIT => {
                    body.extend_from_slice(&bytes);
                }
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_LIMIT);
        let failure = (call.http_failure)(&HttpErrorParts {
            status: response.status().as_u16(),
            headers: response.headers(),
            body: &body,
        });
        self.finish_with(&call.scrub, failure)
    }

    async fn read(&mut self, mut streaming: Box<Streaming<D>>) -> Phase<D> {
        let Streaming { response, call } = &mut *streaming;
        let next = tokio::select! {
            biased;
            _ = call.cancel.cancelled() => return self.aborted(),
            next = tokio::time::timeout(call.idle_timeout, response.chunk()) => next,
        };
        let scratch = &mut self.scratch;
        match next {
            Err(_elapsed) => call.decoder.fail(
                timeout_failure(call.idle_timeout, "the next stream event"),
                scratch,
            ),
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
            Phase::Done
        } else {
            Phase::Streaming(streaming)
        }
    }
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
