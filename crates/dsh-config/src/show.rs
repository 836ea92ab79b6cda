//! `dsh config show`: the effective configuration, one `key = value  # source` line per value,
//! secrets redacted.

use std::fmt::Write as _;

use toml::Value;

use crate::config::Config;

/// Placeholder printed instead of a value that may be a secret.
pub const REDACTED: &str = "<redacted>";

/// Key names (last path segment, lower case, `-` read as `_`) whose values are credentials.
/// A list, not a substring test: `default_max_tokens` or `max_output` are not secrets.
pub const SECRET_KEY_NAMES: &[&str] = &[
    "api_key",
    "apikey",
    "key",
    "x_api_key",
    "token",
    "access_token",
    "auth_token",
    "bearer_token",
    "refresh_token",
    "id_token",
    "session_token",
    "secret",
    "client_secret",
    "secret_key",
    "private_key",
    "password",
    "passwd",
    "authorization",
    "proxy_authorization",
    "auth",
    "cookie",
    "set_cookie",
    "credential",
    "credentials",
];

/// True for a key whose value may be a credential: its last segment is one of
/// [`SECRET_KEY_NAMES`] or ends in `_api_key`, `_token`, `_secret` or `_password`. Keys ending
/// in `_env` (`api_key_env`, `bearer_token_env`) name variables and are shown.
pub fn is_secret_key(path: &str) -> bool {
    let last = path
        .rsplit('.')
        .next()
        .unwrap_or(path)
        .trim_matches('"')
        .to_ascii_lowercase()
        .replace('-', "_");
    if last.ends_with("_env") {
        return false;
    }
    SECRET_KEY_NAMES.contains(&last.as_str())
        || ["_api_key", "_token", "_secret", "_password"]
            .iter()
            .any(|suffix| last.ends_with(suffix))
}

/// True for a value shaped like a credential whatever its key: `sk-`/`sk_` keys, `Bearer ` or
/// `Basic ` header values, and long tokens mixing upper case, lower case and digits.
pub fn looks_secret(value: &str) -> bool {
    let value = value.trim();
    if value.starts_with("sk-")
        || value.starts_with("sk_")
        || value.starts_with("Bearer ")
        || value.starts_with("Basic ")
    {
        return true;
    }
    value.len() >= 32
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_+/=.".contains(c))
        && value.chars().any(|c| c.is_ascii_digit())
        && value.chars().any(|c| c.is_ascii_lowercase())
        && value.chars().any(|c| c.is_ascii_uppercase())
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

/// `text` with the credentials of every URL in it replaced by the placeholder: a
/// `user:password@` part, and the values of query parameters named like a credential (`key`,
/// `token`, `secret`, `password`, `sig`, `auth` in the name). For messages that quote URLs
/// (an endpoint that failed, a redirect's target), whatever put them there.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, url_on) = rest.split_at(at + 3);
        out.push_str(before);
        // A URL already redacted (`scheme://<redacted>@host`) goes on after its placeholder.
        let url_on = match url_on.strip_prefix(REDACTED) {
            Some(after) => {
                out.push_str(REDACTED);
                after
            }
            None => url_on,
        };
        let end = url_on
            .find(|c: char| c.is_whitespace() || "\"'`<>()[]{},".contains(c))
            .unwrap_or(url_on.len());
        let (url, after) = url_on.split_at(end);
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let (authority, path) = url.split_at(authority_end);
        match authority.rfind('@').filter(|&at| at > 0) {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        out.push_str(&redact_query(path));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `path_and_query` with the values of credential-named query parameters replaced.
fn redact_query(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if credential_name(name) => format!("{name}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

fn credential_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["key", "token", "secret", "password", "sig", "auth"]
        .iter()
        .any(|word| name.contains(word))
}

/// `value` of the key `path` as TOML text, secrets replaced by the placeholder.
pub fn render_value(path: &str, value: &Value) -> String {
    if is_secret_key(path) {
        return format!("\"{REDACTED}\"");
    }
    match value {
        Value::String(text) if looks_secret(text) => format!("\"{REDACTED}\""),
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
    if let Some(name) = &config.profile {
        let _ = writeln!(out, "# profile {name} applies");
    }
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
    let trust = &config.trust;
    if !trust.files.is_empty() {
        let _ = writeln!(out);
        let state = match &trust.trusted {
            Some(crate::trust::TrustReason::Recorded) => "trusted (dsh trust)".to_string(),
            Some(crate::trust::TrustReason::Flag) => "trusted (--trust-workspace)".to_string(),
            Some(crate::trust::TrustReason::UserConfig(prefix)) => {
                format!("trusted ([trust] workspaces: {})", prefix.display())
            }
            None => "not trusted".to_string(),
        };
        let _ = writeln!(out, "# workspace {}: {state}", trust.workspace.display());
        for (file, keys) in &trust.ignored {
            let what = if keys.is_empty() {
                "all of it".to_string()
            } else {
                keys.join(", ")
            };
            let _ = writeln!(out, "# ignored in {}: {what}", file.display());
        }
    }
    out
}
