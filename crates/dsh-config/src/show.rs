//! `dsh config show`: the effective configuration, one `key = value  # source` line per value,
//! secrets redacted.

use std::fmt::Write as _;

use toml::Value;

use crate::config::Config;

/// Placeholder printed instead of a value that may be a secret.
pub const REDACTED: &str = "<redacted>";

/// True for a key whose value may be a credential: header values of `Authorization`-like
/// headers and any key whose last segment mentions key, token, secret, password, auth or cookie
/// (except `api_key_env`, which holds a variable name).
pub fn is_secret_key(path: &str) -> bool {
    let last = path
        .rsplit('.')
        .next()
        .unwrap_or(path)
        .trim_matches('"')
        .to_ascii_lowercase();
    if last == "api_key_env" {
        return false;
    }
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "cookie",
        "credential",
    ]
    .iter()
    .any(|w| last.contains(w))
}

/// A URL with any `user:password@` part replaced by the placeholder.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{REDACTED}@{}", &url[..scheme_end + 3], &rest[at + 1..]),
        None => url.to_string(),
    }
}

fn render_value(path: &str, value: &Value) -> String {
    if is_secret_key(path) {
        return format!("\"{REDACTED}\"");
    }
    match value {
        Value::String(text) if path.ends_with("url") => Value::String(redact_url(text)).to_string(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|v| render_value(path, v)).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Table(table) => {
            let inner: Vec<String> = table
                .iter()
                .map(|(k, v)| format!("{k} = {}", render_value(&format!("{path}.{k}"), v)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        other => other.to_string(),
    }
}

/// The text of `dsh config show`: every effective value with where it came from, then whether
/// each provider's key variable is set (never its value). `lookup` reads variables.
pub fn render(config: &Config, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let lines: Vec<(String, String, String)> = config
        .values()
        .into_iter()
        .map(|(key, value, source)| {
            let text = format!("{key} = {}", render_value(&key, value));
            (key, text, source.to_string())
        })
        .collect();
    let width = lines
        .iter()
        .map(|(_, t, _)| t.len())
        .max()
        .unwrap_or(0)
        .min(72);
    for (_, text, source) in &lines {
        let _ = writeln!(out, "{text:<width$}  # {source}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "# credentials (values are never shown)");
    for provider in config.providers.values() {
        let state = match &provider.api_key_env {
            Some(variable) => {
                let set = lookup(variable).is_some_and(|v| !v.trim().is_empty());
                format!("{variable} is {}", if set { "set" } else { "not set" })
            }
            None => "no key variable (keyless server)".to_string(),
        };
        let marker = if provider.name == config.provider {
            " (default)"
        } else {
            ""
        };
        let _ = writeln!(out, "# provider {}{marker}: {state}", provider.name);
    }
    out
}
