//! HTTP and in-stream error mapping (docs/providers.md, "Chat completions"): status, wording and
//! headers become a [`Failure`] with one of the product's codes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dsh_llm::{Failure, FailureCode};
use serde_json::Value;

/// Longest provider message kept in a failure message, in characters.
pub const PROVIDER_MESSAGE_LIMIT: usize = 500;

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
/// provider's message (truncated to [`PROVIDER_MESSAGE_LIMIT`] characters). `now` resolves an
/// HTTP-date `Retry-After`.
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

/// The provider's own error message from a body: `error.message`, `error` (a string),
/// `message` or `detail`; an HTML page (a proxy's 413 or 502 in front of the provider) gives its
/// `<title>`, or its text without tags; otherwise the body text. Truncated, control characters
/// flattened.
pub fn provider_message(body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|json| {
        let error = json.get("error");
        error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .or_else(|| error.and_then(Value::as_str))
            .or_else(|| json.get("message").and_then(Value::as_str))
            .or_else(|| json.get("detail").and_then(Value::as_str))
            .map(str::to_string)
    });
    let text = match from_json {
        Some(text) => text,
        None => {
            let raw = String::from_utf8_lossy(body).trim().to_string();
            html_text(&raw).unwrap_or(raw)
        }
    };
    truncate_chars(&text.replace(['\r', '\n'], " "), PROVIDER_MESSAGE_LIMIT)
}

/// What an HTML error page says, when `text` is one: its `<title>`, else its text without tags,
/// with the note that a proxy answered. `None` for anything that is not HTML.
fn html_text(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let is_html = lower.starts_with('<')
        && ["<html", "<!doctype html", "<head", "<body", "<title"]
            .iter()
            .any(|tag| lower.contains(tag));
    if !is_html {
        return None;
    }
    let title = lower.find("<title").and_then(|open| {
        let start = open + lower[open..].find('>')? + 1;
        let end = start + lower[start..].find("</title")?;
        Some(text[start..end].trim().to_string())
    });
    let shown = match title.filter(|t| !t.is_empty()) {
        Some(title) => title,
        None => {
            let mut plain = String::new();
            let mut in_tag = false;
            for c in text.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' if in_tag => {
                        in_tag = false;
                        plain.push(' ');
                    }
                    _ if !in_tag => plain.push(c),
                    _ => {}
                }
            }
            plain.split_whitespace().collect::<Vec<_>>().join(" ")
        }
    };
    Some(format!(
        "{shown} (an HTML page, not the provider's JSON error: probably a proxy in front of it)"
    ))
}

/// `text` cut to at most `limit` characters, with `...` appended when cut.
pub fn truncate_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
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

/// Parses a `Retry-After` value: delay-seconds (decimals accepted) or an IMF-fixdate HTTP-date
/// (a date in the past means 0). Returns milliseconds, or `None` when unparsable.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64);
    }
    let at = parse_http_date(value)?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .as_millis()
            .try_into()
            .unwrap_or(u64::MAX),
    )
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP-date form servers
/// must send.
pub fn parse_http_date(value: &str) -> Option<SystemTime> {
    let mut parts = value.split_ascii_whitespace();
    let _weekday = parts.next()?.strip_suffix(',')?;
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let hour: u64 = clock.next()?.parse().ok()?;
    let minute: u64 = clock.next()?.parse().ok()?;
    let second: u64 = clock.next()?.parse().ok()?;
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if days < 0 {
        return None;
    }
    let secs = (days as u64) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_error_pages_are_reduced_to_their_title() {
        let nginx = b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
        let message = provider_message(nginx);
        assert!(
            message.starts_with("413 Request Entity Too Large (an HTML page"),
            "{message}"
        );
        assert!(!message.contains('<'), "{message}");
        let untitled = provider_message(b"<html><body><p>Payload   too\nlarge</p></body></html>");
        assert!(
            untitled.starts_with("Payload too large (an HTML page"),
            "{untitled}"
        );
        assert_eq!(provider_message(b"<not html> plain"), "<not html> plain");
        assert_eq!(provider_message(b"plain text"), "plain text");
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

    #[test]
    fn retry_after_seconds_and_http_date() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("2", now), Some(2000));
        assert_eq!(parse_retry_after("0.5", now), Some(500));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now),
            Some(3000)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(0)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn long_provider_messages_are_truncated() {
        let body = format!("{{\"error\":{{\"message\":\"{}\"}}}}", "é".repeat(2000));
        let message = provider_message(body.as_bytes());
        assert_eq!(message.chars().count(), PROVIDER_MESSAGE_LIMIT + 3);
    }
}
