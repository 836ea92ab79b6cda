//! HTTP and in-stream error mapping (docs/providers.md, "Chat completions"): status, wording and
//! headers become a [`Failure`] with one of the product's codes.

use std::time::SystemTime;

use dsh_llm::{Failure, FailureCode};

use dsh_http::errors::{parse_retry_after, provider_message};

/// Response headers that may carry the provider's request id, in order of preference.
pub const REQUEST_ID_HEADERS: &[&str] = &[
    "x-request-id",
    "request-id",
    "x-ds-request-id",
    "x-trace-id",
    "trace-id",
];

/// The parts of a failed HTTP response that decide its failure.
#[derive(Debug, Clone, Default)]
pub struct HttpErrorResponse<'a> {
    /// The status code.
    pub status: u16,
    /// The `Retry-After` header value (seconds or an HTTP-date), if any.
    pub retry_after: Option<&'a str>,
    /// The `retry-after-ms` header value some OpenAI-compatible servers send, if any.
    pub retry_after_ms: Option<&'a str>,
    /// The provider's request id, if a header carried one.
    pub request_id: Option<String>,
    /// The response body (JSON error object or plain text), possibly truncated.
    pub body: &'a [u8],
    /// The variable the key comes from, named in `AUTH` messages (`DEEPSEEK_API_KEY` when
    /// `None`).
    pub key_variable: Option<&'a str>,
}

/// Maps a non-success response to a failure: 401/403 `AUTH`; 402 or quota wording `QUOTA`;
/// 429 `RATE_LIMIT`; 400 with context-length wording `CONTEXT_WINDOW_EXCEEDED`; other 400, 413
/// and 422 `INVALID_REQUEST`; 5xx `SERVER`; anything else `HTTP_<n>`. The failure keeps the
/// status, the retry delay (ms) and the request id; its message names the status and quotes the
/// provider's message (truncated to
/// [`PROVIDER_MESSAGE_LIMIT`](dsh_http::errors::PROVIDER_MESSAGE_LIMIT) characters). `now`
/// resolves an HTTP-date `Retry-After`.
pub fn failure_from_http(response: &HttpErrorResponse<'_>, now: SystemTime) -> Failure {
    let status = response.status;
    let provider_message = provider_message(response.body);
    let lower = provider_message.to_ascii_lowercase();
    let code = match status {
        401 | 403 => FailureCode::Auth,
        402 => FailureCode::Quota,
        400..=499 if mentions_quota(&lower) => FailureCode::Quota,
        429 => FailureCode::RateLimit,
        400 if mentions_context_length(&lower) => FailureCode::ContextWindowExceeded,
        400 | 413 | 422 => FailureCode::InvalidRequest,
        500..=599 => FailureCode::Server,
        other => FailureCode::Http(other),
    };
    let mut message = format!("provider returned HTTP {status}");
    if let Some(reason) = reason_phrase(status) {
        message.push_str(&format!(" ({reason})"));
    }
    if !provider_message.is_empty() {
        message.push_str(": ");
        message.push_str(&provider_message);
    }
    if code == FailureCode::Auth {
        message.push_str(&format!(
            " - check the API key ({})",
            response.key_variable.unwrap_or(crate::config::API_KEY_ENV)
        ));
    }
    if code == FailureCode::InvalidRequest {
        if let Some(quirk) = refused_field_quirk(&lower) {
            message.push_str(&format!(
                " - this endpoint does not take a field dsh sends: set \
                 `providers.<name>.quirks.{quirk}` in config.toml for it \
                 (docs/configuration.md lists the quirks)"
            ));
        }
    }
    let mut failure = Failure::new(code, message).with_status(status);
    failure.retry_after_ms = response
        .retry_after_ms
        .and_then(|value| value.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| ms.round() as u64)
        .or_else(|| response.retry_after.and_then(|v| parse_retry_after(v, now)));
    failure.request_id = response.request_id.clone();
    failure
}

/// Maps an error object received inside an otherwise successful stream (`data: {"error":
/// ...}`): quota, rate-limit and context-length wording pick their codes, anything else is
/// `SERVER`.
pub fn failure_from_stream_error(payload: &[u8]) -> Failure {
    let provider_message = provider_message(payload);
    let lower = provider_message.to_ascii_lowercase();
    let code = if mentions_quota(&lower) {
        FailureCode::Quota
    } else if mentions_context_length(&lower) {
        FailureCode::ContextWindowExceeded
    } else if lower.contains("rate limit") || lower.contains("rate_limit") {
        FailureCode::RateLimit
    } else {
        FailureCode::Server
    };
    Failure::new(
        code,
        format!("provider reported an error mid-stream: {provider_message}"),
    )
}

/// The quirk that turns off a request field an OpenAI-compatible server refused, when the error
/// names one: LiteLLM says "UnsupportedParamsError: openai does not support parameters:
/// ['thinking']", others "Unrecognized request argument supplied: thinking" or "extra fields
/// not permitted". Only fields a quirk controls are named; when the message names several (an
/// OpenAI model saying "'max_tokens' is not supported ... use 'max_completion_tokens'"), the
/// first one is the refused one.
fn refused_field_quirk(lower: &str) -> Option<&'static str> {
    const REFUSAL_WORDS: [&str; 7] = [
        "unsupported",
        "not support",
        "unrecognized",
        "unknown",
        "not permitted",
        "not allowed",
        "extra",
    ];
    if !REFUSAL_WORDS.iter().any(|w| lower.contains(w)) {
        return None;
    }
    [
        ("reasoning_effort", "send_reasoning_effort = false"),
        ("stream_options", "send_stream_options = false"),
        ("reasoning_content", "send_reasoning_content = false"),
        ("max_completion_tokens", "max_tokens_field = \"max_tokens\""),
        ("max_tokens", "max_tokens_field = \"max_completion_tokens\""),
        ("thinking", "send_thinking = false"),
    ]
    .into_iter()
    .filter_map(|(field, quirk)| lower.find(field).map(|at| (at, quirk)))
    .min_by_key(|(at, _)| *at)
    .map(|(_, quirk)| quirk)
}

fn mentions_quota(lower: &str) -> bool {
    [
        "insufficient balance",
        "insufficient_balance",
        "quota",
        "insufficient funds",
        "billing",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

fn mentions_context_length(lower: &str) -> bool {
    [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "too many tokens",
        "prompt is too long",
        "reduce the length",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

fn reason_phrase(status: u16) -> Option<&'static str> {
    Some(match status {
        400 => "bad request",
        401 => "authentication failed",
        402 => "insufficient balance",
        403 => "forbidden",
        404 => "not found",
        413 => "request too large",
        422 => "invalid parameters",
        429 => "rate limit reached",
        500 => "server error",
        502 => "bad gateway",
        503 => "server overloaded",
        504 => "gateway timeout",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_field_names_the_quirk_that_turns_it_off() {
        let litellm = r#"{"error":{"message":"litellm.UnsupportedParamsError: openai does not support parameters: ['thinking'], for model=deepseek-chat. To drop these, set `litellm.drop_params=True`"}}"#;
        let failure = fail(400, litellm);
        assert_eq!(failure.code, FailureCode::InvalidRequest);
        assert!(
            failure.message.contains("quirks.send_thinking = false"),
            "{}",
            failure.message
        );
        let openai = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."}}"#;
        assert!(fail(400, openai)
            .message
            .contains(r#"max_tokens_field = "max_completion_tokens""#));
        let vllm = r#"{"object":"error","message":"[{'type': 'extra_forbidden', 'loc': ('body', 'reasoning_effort'), 'msg': 'Extra inputs are not permitted'}]"}"#;
        assert!(fail(400, vllm)
            .message
            .contains("send_reasoning_effort = false"));
        let plain = r#"{"error":{"message":"messages must not be empty"}}"#;
        assert!(!fail(400, plain).message.contains("quirks"));
    }

    fn fail(status: u16, body: &str) -> Failure {
        failure_from_http(
            &HttpErrorResponse {
                status,
                body: body.as_bytes(),
                ..HttpErrorResponse::default()
            },
            SystemTime::now(),
        )
    }

    #[test]
    fn status_table() {
        let cases = [
            (401, "{}", FailureCode::Auth),
            (403, "", FailureCode::Auth),
            (402, "{\"error\":{\"message\":\"Insufficient Balance\"}}", FailureCode::Quota),
            (429, "{\"error\":{\"message\":\"You exceeded your current quota\"}}", FailureCode::Quota),
            (429, "slow down", FailureCode::RateLimit),
            (400, "{\"error\":{\"message\":\"This model's maximum context length is 1000000 tokens\"}}", FailureCode::ContextWindowExceeded),
            (400, "{\"error\":\"bad field\"}", FailureCode::InvalidRequest),
            (413, "", FailureCode::InvalidRequest),
            (422, "", FailureCode::InvalidRequest),
            (500, "", FailureCode::Server),
            (503, "", FailureCode::Server),
            (404, "", FailureCode::Http(404)),
        ];
        for (status, body, code) in cases {
            let failure = fail(status, body);
            assert_eq!(failure.code, code, "{status} {body}");
            assert_eq!(failure.status, Some(status));
        }
        assert!(fail(400, "{\"error\":{\"message\":\"bad field\"}}")
            .message
            .contains("bad field"));
    }
}
