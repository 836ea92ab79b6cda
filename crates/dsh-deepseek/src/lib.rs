//! The DeepSeek chat-completions adapter of dsh (docs/providers.md, "Chat completions"), usable
//! with any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama).
//!
//! - [`DeepSeekAdapter`] implements [`dsh_llm::Adapter`]: one streaming HTTP attempt per call,
//!   idle watchdog, live cancellation, and failures mapped to the codes of docs/model-calls.md.
//! - [`build_request_body`] translates a [`dsh_llm::GenerateRequest`] into the JSON body,
//!   round-tripping `reasoning_content` and raw tool-call arguments byte for byte.
//! - [`StreamDecoder`] (a [`dsh_http::SseDecoder`] feeding a [`ReplyDecoder`]) turns response
//!   bytes into dsh chunks without I/O, so tests and benchmarks drive it directly.
//! - [`models`] holds what dsh knows about DeepSeek's own models; the configured model table
//!   ([`dsh_llm::ModelTable`], in [`DeepSeekConfig::models`]) is read over it.
//!
//! The HTTP side (client, headers, streamed calls, watchdogs, cancel, scrubbing) is
//! [`dsh_http::Endpoint`], shared with the Anthropic adapter. The API key never leaves the
//! `Authorization` header: `Debug` redacts it and failure messages are scrubbed of it.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod adapter;
mod config;
mod decode;
pub mod errors;
pub mod models;
mod request;

pub use adapter::DeepSeekAdapter;
pub use config::{
    DeepSeekConfig, MaxTokensField, OpenAiQuirks, API_KEY_ENV, BASE_URL_ENV, DEFAULT_BASE_URL,
};
pub use decode::{ReplyDecoder, StreamDecoder};
/// The shared HTTP layer's key, error and timeouts, under the names this crate always had.
pub use dsh_http::{
    AdapterConfigError, ApiKey, HttpClient, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_REPLY_TIMEOUT,
};
pub use models::{model_info, DEFAULT_MODEL};
pub use request::{build_request_body, build_request_body_with, EMPTY_TOOL_OUTPUT_PLACEHOLDER};
