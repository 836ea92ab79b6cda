//! The HTTP side both of dsh's wire formats share (docs/providers.md, "Shared HTTP layer"):
//! the chat-completions adapter (`dsh-deepseek`) and the Anthropic Messages adapter
//! (`dsh-anthropic`) each plug their request body, body decoder and error table into it.
//!
//! - [`Endpoint`] holds the client, URLs, headers and key of one provider and makes its calls:
//!   a streamed model call ([`HttpCall`]: non-2xx responses through the format's error table,
//!   the body through the format's [`BodyDecoder`], cancellation, the idle watchdog and the
//!   overall reply deadline at every await, the key scrubbed from every failure) and the model
//!   listing ([`get_model_ids`]).
//! - [`HttpClient`] is the connection pool endpoints share, and opens a connection ahead of
//!   the first call ([`Endpoint::preconnect`]).
//! - [`RequestBody`] sends a body as the parts it was built from, shared bytes uncopied.
//! - [`SseDecoder`] turns response bytes into Server-Sent Events without I/O.
//! - [`ApiKey`] keeps the key out of `Debug` and `Display`.
//! - [`errors`] reads a provider's error body ([`errors::provider_message`]) and `Retry-After`
//!   ([`errors::parse_retry_after`]); the status tables stay with each wire format.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod body;
mod client;
mod endpoint;
pub mod errors;
mod key;
mod secrets;
mod sse;

pub use body::RequestBody;
pub use client::{read_extra_roots_in_background, trust_extra_roots, HttpClient, EXTRA_ROOTS_ENV};
pub use endpoint::{
    aborted_chunk, describe_transport_error, error_chunk, get_model_ids, reply_deadline_failure,
    timeout_failure, BodyDecoder, Endpoint, EndpointConfig, HttpCall, HttpErrorParts, HttpFailure,
    PrepareRequest, Scrub,
};
pub use key::{
    AdapterConfigError, ApiKey, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_REPLY_TIMEOUT,
};
pub use secrets::{SecretMatcher, FRAGMENT_BYTES, MIN_SECRET_BYTES};
pub use sse::{SseDecoder, SseEvent, MAX_SSE_EVENT_BYTES, SSE_TOO_LARGE};
