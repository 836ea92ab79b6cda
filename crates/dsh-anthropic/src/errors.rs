//! HTTP and in-stream error mapping of the Messages API (docs/providers.md, "Anthropic Messages").
//!
//! Anthropic error bodies are `{"type": "error", "error": {"type": "...", "message": "..."}}`;
//! the `error.type` refines what the status alone says.

use std::time::SystemTime;

use dsh_http::errors::{parse_retry_after, provider_message, truncate_chars};
use dsh_llm::{Failure, FailureCode};
use serde_json::Value;

/// Response headers that may carry the provider's request id, in order of preference.
pub const REQUEST_ID_HEADERS: &[&str] = &["request-id", "x-request-id", "anthropic-request-id"];

/// The parts of a failed HTTP response that decide its failure.
#[derive(Debug, Clone, Default)]
pub struct HttpErrorResponse<'a> {
    /// The status code.
    pub status: u16,
    /// The `Retry-After` header value (seconds or an HTTP-date), if any.
    pub retry_after: Option<&'a str>,
    /// The provider's request id, if a header carried one.
    pub request_id: Option<String>,
    /// The response body, possibly truncated.
    pub body: &'a [u8],
    /// The variable the key came from, named in `AUTH` messages.
    pub key_variable: &'a str,
}

/// The `error.type` of an Anthropic error body, if it has one.
pub fn error_type(body: &[u8]) -> Option<String> {
    let json: Value = serde_json::from_slice(body).ok()?;
    json.get("error")?.get("type")?.as_str().map(str::to_string)
}

fn mentions_context_length(lower: &str) -> bool {
    [
        "prompt is too long",
        "context window",
        "context length",
        "context_length",
        "maximum context",
        "too many tokens",
        "exceed context limit",
        "input length and `max_tokens` exceed",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

fn mentions_quota(lower: &str) -> bool {
    ["credit balance", "billing", "quota", "insufficient balance"]
        .iter()
        .any(|w| lower.contains(w))
}

/// Maps a non-success response: 401/403 `AUTH`; 402, `billing_error` or credit/quota wording
/// `QUOTA`; 429 `RATE_LIMIT`; 529 (`overloaded_error`) and other 5xx `SERVER`; 400 with
/// context-length wording `CONTEXT_WINDOW_EXCEEDED`; other 400, 404 with `not_found_error`,
/// 413 and 422 `INVALID_REQUEST`; anything else `HTTP_<n>`. Keeps status, `Retry-After` in ms
/// and the request id; the message names the status and quotes the provider (truncated).
pub fn failure_from_http(response: &HttpErrorResponse<'_>, now: SystemTime) -> Failure {
    let status = response.status;
    let kind = error_type(response.body).unwrap_or_default();
    let provider = provider_message(response.body);
    let lower = provider.to_ascii_lowercase();
    let code = match status {
        401 | 403 => FailureCode::Auth,
        402 => FailureCode::Quota,
        _ if kind == "billing_error" => FailureCode::Quota,
        400 if mentions_quota(&lower) => FailureCode::Quota,
        429 => FailureCode::RateLimit,
        400 if mentions_context_length(&lower) => FailureCode::ContextWindowExceeded,
        400 | 413 | 422 => FailureCode::InvalidRequest,
        404 if kind == "not_found_error" => FailureCode::InvalidRequest,
        500..=599 => FailureCode::Server,
        other => FailureCode::Http(other),
    };
    let mut message = format!("provider returned HTTP {status}");
    if !kind.is_empty() {
        message.push_str(&format!(" ({kind})"));
    }
    if !provider.is_empty() {
        message.push_str(": ");
        message.push_str(&provider);
    }
    if code == FailureCode::Auth {
        message.push_str(&format!(" - check the API key ({})", response.key_variable));
    }
    let mut failure = Failure::new(code, message).with_status(status);
    failure.retry_after_ms = response
        .retry_after
        .and_then(|value| parse_retry_after(value, now));
    failure.request_id = response.request_id.clone();
    failure
}

/// Maps an `error` event received inside a stream by its `error.type`: `overloaded_error` and
/// `api_error` `SERVER`, `rate_limit_error` `RATE_LIMIT`, `authentication_error` and
/// `permission_error` `AUTH`, `billing_error` `QUOTA`, `invalid_request_error` /
/// `request_too_large` `INVALID_REQUEST` (or `CONTEXT_WINDOW_EXCEEDED` by wording); an unknown
/// type is `SERVER`.
pub fn failure_from_stream_error(payload: &[u8]) -> Failure {
    let kind = error_type(payload).unwrap_or_default();
    let provider = provider_message(payload);
    let lower = provider.to_ascii_lowercase();
    let code = match kind.as_str() {
        "rate_limit_error" => FailureCode::RateLimit,
        "authentication_error" | "permission_error" => FailureCode::Auth,
        "billing_error" => FailureCode::Quota,
        "invalid_request_error" | "request_too_large" if mentions_context_length(&lower) => {
            FailureCode::ContextWindowExceeded
        }
        "invalid_request_error" | "request_too_large" | "not_found_error" => {
            FailureCode::InvalidRequest
        }
        _ => FailureCode::Server,
    };
    let shown = if kind.is_empty() {
        truncate_chars(&provider, 500)
    } else {
        format!("{kind}: {provider}")
    };
    Failure::new(
        code,
        format!("provider reported an error mid-stream: {shown}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str, message: &str) -> String {
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
            .to_string()
    }

    #[test]
    fn status_table() {
        let cases = [
            (
                401,
                body("authentication_error", "invalid x-api-key"),
                FailureCode::Auth,
            ),
            (403, body("permission_error", "no"), FailureCode::Auth),
            (
                429,
                body("rate_limit_error", "slow"),
                FailureCode::RateLimit,
            ),
            (
                529,
                body("overloaded_error", "Overloaded"),
                FailureCode::Server,
            ),
            (500, body("api_error", "boom"), FailureCode::Server),
            (
                400,
                body(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum",
                ),
                FailureCode::ContextWindowExceeded,
            ),
            (
                400,
                body("invalid_request_error", "messages.1: bad"),
                FailureCode::InvalidRequest,
            ),
            (
                400,
                body("invalid_request_error", "Your credit balance is too low"),
                FailureCode::Quota,
            ),
            (
                413,
                body("request_too_large", "too big"),
                FailureCode::InvalidRequest,
            ),
            (
                404,
                body("not_found_error", "model: x"),
                FailureCode::InvalidRequest,
            ),
            (418, String::new(), FailureCode::Http(418)),
        ];
        for (status, text, code) in cases {
            let failure = failure_from_http(
                &HttpErrorResponse {
                    status,
                    body: text.as_bytes(),
                    key_variable: "ANTHROPIC_API_KEY",
                    ..HttpErrorResponse::default()
                },
                SystemTime::now(),
            );
            assert_eq!(failure.code, code, "{status} {text}");
        }
    }

    #[test]
    fn stream_errors_by_type() {
        let f = failure_from_stream_error(body("overloaded_error", "Overloaded").as_bytes());
        assert_eq!(f.code, FailureCode::Server);
        assert!(f.message.contains("overloaded_error: Overloaded"));
        let f = failure_from_stream_error(body("rate_limit_error", "x").as_bytes());
        assert_eq!(f.code, FailureCode::RateLimit);
    }
}
