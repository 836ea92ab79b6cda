//! Failures and their codes (docs/model-calls.md, "Finish reasons and failures").

use std::fmt;

use serde::{Deserialize, Serialize};

/// The code of a failure. Serialised as the upper-case string listed in docs/model-calls.md.
///
/// The set is open: `HTTP_<n>` carries a status, and an unrecognised provider stop value becomes
/// [`FailureCode::Other`] holding the value upper-cased (e.g. `CONTENT_FILTER`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// `AUTH`: the provider refused the key.
    Auth,
    /// `QUOTA`: the account has no credit or quota left.
    Quota,
    /// `RATE_LIMIT`: too many requests; retry later.
    RateLimit,
    /// `CONTEXT_WINDOW_EXCEEDED`: the request is too long for the model.
    ContextWindowExceeded,
    /// `INVALID_REQUEST`: the provider rejected the request as malformed.
    InvalidRequest,
    /// `SERVER`: the provider failed (5xx, overloaded).
    Server,
    /// `HTTP_<n>`: another HTTP status.
    Http(u16),
    /// `TRANSPORT`: the connection could not be made or broke.
    Transport,
    /// `TIMEOUT`: nothing arrived within the idle timeout or the reply deadline passed.
    Timeout,
    /// `ABORTED`: the call was cancelled.
    Aborted,
    /// `STREAM_CLOSED`: the stream ended without its terminator.
    StreamClosed,
    /// `MISSING_FINISH`: the stream ended with its terminator but never said why the reply
    /// stopped (no `finish_reason` / `stop_reason`): an incomplete reply, retried like a stream
    /// closed early, never taken for a normal stop.
    MissingFinish,
    /// `MALFORMED_RESPONSE`: the reply could not be decoded.
    MalformedResponse,
    /// `EMPTY_RESPONSE`: the reply had no content.
    EmptyResponse,
    /// `MISSING_CREDENTIAL`: no key is configured.
    MissingCredential,
    /// `INVALID_CREDENTIAL`: the key cannot be sent (e.g. not valid in a header).
    InvalidCredential,
    /// `NO_ADAPTER`: no adapter is registered for the route.
    NoAdapter,
    /// `UNSUPPORTED_REASONING_EFFORT`: the model does not accept the effort asked for.
    UnsupportedReasoningEffort,
    /// `UNKNOWN`: anything else.
    Unknown,
    /// Any other code, already in upper case.
    Other(String),
}

impl FailureCode {
    /// The wire spelling of the code.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow::Borrowed;
        match self {
            FailureCode::Auth => Borrowed("AUTH"),
            FailureCode::Quota => Borrowed("QUOTA"),
            FailureCode::RateLimit => Borrowed("RATE_LIMIT"),
            FailureCode::ContextWindowExceeded => Borrowed("CONTEXT_WINDOW_EXCEEDED"),
            FailureCode::InvalidRequest => Borrowed("INVALID_REQUEST"),
            FailureCode::Server => Borrowed("SERVER"),
            FailureCode::Http(status) => std::borrow::Cow::Owned(format!("HTTP_{status}")),
            FailureCode::Transport => Borrowed("TRANSPORT"),
            FailureCode::Timeout => Borrowed("TIMEOUT"),
            FailureCode::Aborted => Borrowed("ABORTED"),
            FailureCode::StreamClosed => Borrowed("STREAM_CLOSED"),
            FailureCode::MissingFinish => Borrowed("MISSING_FINISH"),
            FailureCode::MalformedResponse => Borrowed("MALFORMED_RESPONSE"),
            FailureCode::EmptyResponse => Borrowed("EMPTY_RESPONSE"),
            FailureCode::MissingCredential => Borrowed("MISSING_CREDENTIAL"),
            FailureCode::InvalidCredential => Borrowed("INVALID_CREDENTIAL"),
            FailureCode::NoAdapter => Borrowed("NO_ADAPTER"),
            FailureCode::UnsupportedReasoningEffort => Borrowed("UNSUPPORTED_REASONING_EFFORT"),
            FailureCode::Unknown => Borrowed("UNKNOWN"),
            FailureCode::Other(code) => Borrowed(code.as_str()),
        }
    }

    /// Parses a wire code. Never fails: anything unrecognised becomes [`FailureCode::Other`]
    /// (upper-cased, so a provider's `content_filter` reads as `CONTENT_FILTER`).
    pub fn parse(code: &str) -> FailureCode {
        match code {
            "AUTH" => FailureCode::Auth,
            "QUOTA" => FailureCode::Quota,
            "RATE_LIMIT" => FailureCode::RateLimit,
            "CONTEXT_WINDOW_EXCEEDED" => FailureCode::ContextWindowExceeded,
            "INVALID_REQUEST" => FailureCode::InvalidRequest,
            "SERVER" => FailureCode::Server,
            "TRANSPORT" => FailureCode::Transport,
            "TIMEOUT" => FailureCode::Timeout,
            "ABORTED" => FailureCode::Aborted,
            "STREAM_CLOSED" => FailureCode::StreamClosed,
            "MISSING_FINISH" => FailureCode::MissingFinish,
            "MALFORMED_RESPONSE" => FailureCode::MalformedResponse,
            "EMPTY_RESPONSE" => FailureCode::EmptyResponse,
            "MISSING_CREDENTIAL" => FailureCode::MissingCredential,
            "INVALID_CREDENTIAL" => FailureCode::InvalidCredential,
            "NO_ADAPTER" => FailureCode::NoAdapter,
            "UNSUPPORTED_REASONING_EFFORT" => FailureCode::UnsupportedReasoningEffort,
            "UNKNOWN" => FailureCode::Unknown,
            other => {
                if let Some(status) = other
                    .strip_prefix("HTTP_")
                    .and_then(|n| n.parse::<u16>().ok())
                {
                    FailureCode::Http(status)
                } else {
                    FailureCode::Other(other.to_ascii_uppercase())
                }
            }
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl Serialize for FailureCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(FailureCode::parse(&code))
    }
}

/// Why a model call failed: `{message, code, status?, retryAfterMs?, requestId?}`.
///
/// Messages are written for the user; they must never contain a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{code}: {message}")]
pub struct Failure {
    /// What went wrong, for the user.
    pub message: String,
    /// The failure's code.
    pub code: FailureCode,
    /// The HTTP status, when the provider answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How long the provider asked to wait (`Retry-After`), in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The provider's request id, for support requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Failure {
    /// A failure with a code and a message and nothing else.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code,
            status: None,
            retry_after_ms: None,
            request_id: None,
        }
    }

    /// The same failure with an HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_spelling() {
        for code in [
            FailureCode::Auth,
            FailureCode::ContextWindowExceeded,
            FailureCode::Http(418),
            FailureCode::UnsupportedReasoningEffort,
            FailureCode::Other("CONTENT_FILTER".into()),
        ] {
            assert_eq!(FailureCode::parse(&code.as_str()), code);
        }
        assert_eq!(
            FailureCode::parse("insufficient_system_resource"),
            FailureCode::Other("INSUFFICIENT_SYSTEM_RESOURCE".into())
        );
    }

    #[test]
    fn failure_uses_camel_case_and_omits_absent_fields() {
        let mut f = Failure::new(FailureCode::RateLimit, "slow down").with_status(429);
        f.retry_after_ms = Some(2000);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"message":"slow down","code":"RATE_LIMIT","status":429,"retryAfterMs":2000})
        );
    }
}
