//! The API key, the error of building an adapter, and the default timeouts both wire formats
//! use.

use std::fmt;
use std::time::Duration;

/// Default idle watchdog: a call fails with `TIMEOUT` after this long without a byte
/// (docs/model-calls.md, "Adapter seam").
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Default overall reply deadline: a streamed reply still unfinished after this long fails with
/// `TIMEOUT`, however steadily bytes (keep-alive comments included) arrive (docs/providers.md).
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Default limit for establishing the TCP (and TLS) connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// An API key. It is only ever written into a request header: `Debug` and `Display` print a
/// redacted placeholder, so the key cannot leak through logs or error messages.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    secret: String,
    /// The endpoint takes no key ([`ApiKey::keyless`]).
    keyless: bool,
}

impl ApiKey {
    /// Wraps a key. Surrounding white space (a common copy-paste accident) is trimmed.
    pub fn new(key: impl Into<String>) -> Self {
        let key = key.into();
        let trimmed = key.trim();
        let secret = if trimmed.len() == key.len() {
            key
        } else {
            trimmed.to_string()
        };
        ApiKey {
            secret,
            keyless: false,
        }
    }

    /// The credential of an endpoint that takes none (a local OpenAI-compatible server):
    /// requests go without an `Authorization` header, and calls are not refused for want of a
    /// key (docs/providers.md, "Servers without a key").
    pub fn keyless() -> Self {
        ApiKey {
            secret: String::new(),
            keyless: true,
        }
    }

    /// True for [`ApiKey::keyless`].
    pub fn is_keyless(&self) -> bool {
        self.keyless
    }

    /// The secret itself. Callers must only put it on the wire.
    pub fn expose_secret(&self) -> &str {
        &self.secret
    }

    /// True for an empty key (treated as missing); a keyless one is not missing.
    pub fn is_empty(&self) -> bool {
        self.secret.is_empty() && !self.keyless
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Why an adapter could not be built. Misconfiguration fails here, at start, not per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterConfigError(pub String);

impl fmt::Display for AdapterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AdapterConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyless_credential_is_not_a_missing_key() {
        let keyless = ApiKey::keyless();
        assert!(keyless.is_keyless() && !keyless.is_empty());
        assert_eq!(keyless.expose_secret(), "");
        let blank = ApiKey::new("  ");
        assert!(blank.is_empty() && !blank.is_keyless());
    }

    #[test]
    fn the_key_is_trimmed_and_never_printed() {
        let key = ApiKey::new(" sk-secret-123 \n");
        assert_eq!(key.expose_secret(), "sk-secret-123");
        let text = format!("{key:?} {key}");
        assert!(!text.contains("sk-secret-123"), "{text}");
        assert!(text.contains("redacted"));
        assert!(ApiKey::new("  ").is_empty());
    }
}
