//! The Anthropic Messages adapter of dsh (docs/providers.md, "Anthropic Messages"): Claude, and any
//! endpoint that speaks the Messages format (DeepSeek's Anthropic-compatible endpoint among them).
//!
//! - [`AnthropicAdapter`] implements [`dsh_llm::Adapter`]: one streaming `POST /v1/messages`
//!   per call, idle watchdog, live cancellation, failures mapped to the codes of
//!   docs/model-calls.md.
//! - [`build_request_body`] translates a [`dsh_llm::GenerateRequest`]: system prompt and tools
//!   as the cached prefix, content blocks, `tool_use`/`tool_result`, `thinking` blocks with their
//!   signatures round-tripped verbatim, and `cache_control` breakpoints.
//! - [`MessagesDecoder`] turns the response bytes (SSE events `message_start`,
//!   `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`) into dsh chunks
//!   without I/O, so tests drive it directly.
//! - [`errors`] maps HTTP statuses and in-stream errors to failures.
//! - [`WebSearch`] runs one query through the endpoint's server-side `web_search` tool, for
//!   dsh's `web_search` tool (a non-streaming call outside the adapter seam).
//!
//! The HTTP side (client, headers, streamed calls, watchdogs, cancel, scrubbing) is
//! [`dsh_http::Endpoint`], shared with the chat-completions adapter. The configured model table
//! ([`dsh_llm::ModelTable`], in [`AnthropicConfig::models`]) is read over [`model_info`].
//!
//! The API key is only written into the `x-api-key` header: `Debug` redacts it and failure
//! messages are scrubbed of it.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod adapter;
mod config;
mod decode;
pub mod errors;
mod models;
mod request;
mod web_search;

pub use adapter::AnthropicAdapter;
pub use config::{
    AnthropicConfig, ThinkingBudgets, API_KEY_ENV, API_VERSION, BASE_URL_ENV, DEFAULT_BASE_URL,
};
pub use decode::MessagesDecoder;
pub use models::{model_info, GENERIC_CONTEXT_WINDOW, GENERIC_DEFAULT_MAX_TOKENS};
pub use request::{build_request_body, EMPTY_TOOL_OUTPUT_PLACEHOLDER, MIN_THINKING_BUDGET};
pub use web_search::{
    SearchError, SearchErrorKind, SearchResult, SearchSource, WebSearch, WebSearchConfig,
    DEFAULT_SEARCH_BASE_URL, SEARCH_PROMPT_PREFIX,
};
