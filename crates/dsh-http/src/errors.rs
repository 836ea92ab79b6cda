//! What both wire formats read from a failed response the same way: the provider's own error
//! message (JSON error object, plain text, or a proxy's HTML page) and the `Retry-After` delay.
//! Which status becomes which failure code is each format's own table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Longest provider message kept in a failure message, in characters.
pub const PROVIDER_MESSAGE_LIMIT: usize = 500;

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
