//! The HTTP client endpoints share, its extra root certificates, and the connection opened
//! ahead of the first call (docs/providers.md, "Shared connections and preconnect" and "Extra
//! root certificates").

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dsh_llm::LockExt;

use crate::AdapterConfigError;

/// The variable naming a PEM file of root certificates trusted besides the built-in ones
/// (a company's TLS-inspecting proxy, a private gateway), as OpenSSL-based tools read it.
pub const EXTRA_ROOTS_ENV: &str = "SSL_CERT_FILE";

/// Longest life of a preconnect request: a provider that does not answer it in this time
/// gets its connection closed, and the first call opens its own.
const PRECONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// An origin reached this recently still has its connection in the pool (reqwest keeps an idle
/// connection 90 s; servers commonly close theirs after 60-75 s): no preconnect then, which
/// would only keep that connection busy when the call wants it.
const RECENT_USE: Duration = Duration::from_secs(30);

/// A connection pool with its connect timeout. Cloning shares the pool: endpoints built with
/// the same `HttpClient` (a session's and its subagents', or every session of a TUI or web
/// process) reuse each other's idle connections instead of each opening its own. Requests
/// carry their own headers and key, so nothing of one endpoint's credentials stays with a
/// connection.
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    connect_timeout: Duration,
    /// When each origin (`scheme://host:port/`) was last sent a request or a preconnect.
    last_use: Arc<Mutex<HashMap<String, Instant>>>,
    /// No preconnect to an origin used this recently (`RECENT_USE` unless a test shortens it).
    recent_use: Duration,
}

impl HttpClient {
    /// A client that waits at most `connect_timeout` for a connection (TCP and TLS), trusts the
    /// built-in roots and those of the PEM file `$SSL_CERT_FILE` names, if set
    /// ([`trust_extra_roots`]), and never follows redirects: reqwest
    /// drops `Authorization` on a cross-host hop but not `x-api-key` or an extra header, so a
    /// redirecting endpoint could carry the key to another address (docs/providers.md,
    /// "Redirects").
    pub fn new(connect_timeout: Duration) -> Result<HttpClient, AdapterConfigError> {
        Self::build(
            trust_extra_roots(Self::builder(connect_timeout))?,
            connect_timeout,
        )
    }

    /// [`new`](Self::new) with the extra roots read from `roots` instead of `$SSL_CERT_FILE`
    /// (docs/providers.md, "Extra root certificates"). Fails when the file cannot be read or
    /// holds no PEM certificate, naming the file.
    pub fn with_extra_roots(
        connect_timeout: Duration,
        roots: Option<&Path>,
    ) -> Result<HttpClient, AdapterConfigError> {
        let mut builder = Self::builder(connect_timeout);
        if let Some(path) = roots {
            builder = add_roots(builder, &read_roots(path)?);
        }
        Self::build(builder, connect_timeout)
    }

    fn builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
    }

    fn build(
        builder: reqwest::ClientBuilder,
        connect_timeout: Duration,
    ) -> Result<HttpClient, AdapterConfigError> {
        let client = builder
            .build()
            .map_err(|err| AdapterConfigError(format!("could not start the HTTP client: {err}")))?;
        Ok(HttpClient {
            client,
            connect_timeout,
            last_use: Arc::default(),
            recent_use: RECENT_USE,
        })
    }

    /// This client with another window than 30 s in which an origin already used is not
    /// preconnected again: for tests, which cannot wait 30 s to see a second preconnect.
    pub fn with_recent_use(mut self, window: Duration) -> HttpClient {
        self.recent_use = window;
        self
    }

    /// The longest wait for a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    pub(crate) fn reqwest(&self) -> &reqwest::Client {
        &self.client
    }

    /// Notes a request to `origin` (as [`origin_root`] writes it).
    pub(crate) fn note_use(&self, origin: &str) {
        let mut last_use = self.last_use.lock_or_recover();
        match last_use.get_mut(origin) {
            Some(at) => *at = Instant::now(),
            None => {
                last_use.insert(origin.to_string(), Instant::now());
            }
        }
    }

    /// Opens a connection to `target` (an origin as [`origin_root`] writes it) in the
    /// background, so that the next request there finds it in the pool: a `HEAD /` without
    /// credentials or configured headers, whose answer (any status, or none) is dropped.
    /// Returns the task, or `None` outside a tokio runtime or when the origin was sent
    /// something in the last 30 s (its connection is still in the pool).
    pub(crate) fn preconnect(&self, target: &reqwest::Url) -> Option<tokio::task::JoinHandle<()>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        {
            let mut last_use = self.last_use.lock_or_recover();
            if last_use
                .get(target.as_str())
                .is_some_and(|at| at.elapsed() < self.recent_use)
            {
                return None;
            }
            last_use.insert(target.to_string(), Instant::now());
        }
        let request = self
            .client
            .head(target.clone())
            .timeout(PRECONNECT_DEADLINE);
        // Not `spawn`: called from a worker (as `dsh run` does), a spawned task waits in that
        // worker's next-task slot, which the other workers cannot take, until the caller's
        // task yields: at its first request, too late to help. A blocking-pool thread starts
        // at once and the connection's own task goes to the runtime's shared queue.
        let inner = runtime.clone();
        Some(runtime.spawn_blocking(move || {
            // Whatever the answer, the connection is what was wanted; failures surface on the
            // call itself, with the call's own message.
            let _ = inner.block_on(request.send());
        }))
    }
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// The file `$SSL_CERT_FILE` names, when it is set and not empty.
fn extra_roots_file() -> Option<PathBuf> {
    std::env::var_os(EXTRA_ROOTS_ENV)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// The certificates of `$SSL_CERT_FILE`, read and parsed once per process: the file is often
/// the system's whole bundle (about 150 authorities, 1.5-2 ms to parse), and every client
/// (the providers', `web_search`'s, `web_fetch`'s, MCP's) would read it again. `None` when the
/// variable is not set.
fn extra_roots() -> Option<&'static Result<Vec<reqwest::Certificate>, AdapterConfigError>> {
    static ROOTS: OnceLock<Result<Vec<reqwest::Certificate>, AdapterConfigError>> = OnceLock::new();
    let path = extra_roots_file()?;
    Some(ROOTS.get_or_init(|| read_roots(&path)))
}

/// Reads `$SSL_CERT_FILE`, when it is set, on a thread of its own, so that the first client
/// built finds the certificates parsed instead of parsing them on the way to the first
/// request (docs/PERFORMANCE.md, "Shared connections, preconnect and extra roots").
pub fn read_extra_roots_in_background() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if extra_roots_file().is_none() {
        return;
    }
    STARTED.call_once(|| {
        // Without the thread the first client reads the file itself: slower, not wrong.
        let _ = std::thread::Builder::new()
            .name("dsh-roots".into())
            .spawn(|| {
                extra_roots();
            });
    });
}

/// Adds the root certificates of `$SSL_CERT_FILE`, when it is set, to `builder`: every HTTP
/// client of dsh (the providers', `web_search`, `web_fetch`, MCP over HTTP) trusts the same
/// authorities (docs/providers.md, "Extra root certificates"). Fails, naming the file, when it
/// cannot be read or holds no PEM certificate.
pub fn trust_extra_roots(
    builder: reqwest::ClientBuilder,
) -> Result<reqwest::ClientBuilder, AdapterConfigError> {
    match extra_roots() {
        Some(Ok(roots)) => Ok(add_roots(builder, roots)),
        Some(Err(err)) => Err(err.clone()),
        None => Ok(builder),
    }
}

fn add_roots(
    mut builder: reqwest::ClientBuilder,
    roots: &[reqwest::Certificate],
) -> reqwest::ClientBuilder {
    for certificate in roots {
        builder = builder.add_root_certificate(certificate.clone());
    }
    builder
}

/// The certificates of the PEM file at `path`.
fn read_roots(path: &Path) -> Result<Vec<reqwest::Certificate>, AdapterConfigError> {
    let fix =
        format!("point {EXTRA_ROOTS_ENV} at a PEM file of certificate authorities, or unset it");
    let pem = std::fs::read(path).map_err(|err| {
        AdapterConfigError(format!(
            "cannot read the root certificates {EXTRA_ROOTS_ENV} names ({}): {err}; {fix}",
            path.display()
        ))
    })?;
    let unreadable = |err: String| {
        AdapterConfigError(format!(
            "the root certificates {EXTRA_ROOTS_ENV} names ({}) cannot be read as PEM: {err}; {fix}",
            path.display()
        ))
    };
    let certificates = pem_certificates(&pem)
        .map_err(unreadable)?
        .iter()
        .map(|der| reqwest::Certificate::from_der(der).map_err(|err| unreadable(err.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if certificates.is_empty() {
        return Err(AdapterConfigError(format!(
            "{EXTRA_ROOTS_ENV} names {}, which holds no PEM certificate; {fix}",
            path.display()
        )));
    }
    Ok(certificates)
}

/// The DER bytes of each `CERTIFICATE` block of a PEM text, in order; text outside the blocks
/// (comments, other kinds of block) is skipped. Written here rather than taken from
/// `rustls-pki-types` (what reqwest uses) because that decoder is constant-time, made for
/// private keys, and spends about 1.4 ms on a system bundle of 150 public certificates; this
/// one about 0.6 ms (docs/PERFORMANCE.md, "Shared connections, preconnect and extra roots").
fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut certificates = Vec::new();
    let mut rest = pem;
    while let Some(start) = find(rest, BEGIN) {
        rest = &rest[start + BEGIN.len()..];
        let end = find(rest, END)
            .ok_or_else(|| format!("certificate {} has no END line", certificates.len() + 1))?;
        let body = &rest[..end];
        rest = &rest[end + END.len()..];
        let mut der = Vec::with_capacity(body.len() / 4 * 3);
        // Lines are whole base64 groups (64 characters, RFC 7468); a file wrapped otherwise is
        // decoded as one piece instead.
        let by_line = body
            .split(|&byte| byte == b'\n')
            .map(<[u8]>::trim_ascii)
            .filter(|line| !line.is_empty())
            .try_for_each(|line| engine.decode_vec(line, &mut der));
        if by_line.is_err() {
            let joined: Vec<u8> = body
                .iter()
                .copied()
                .filter(|byte| !byte.is_ascii_whitespace())
                .collect();
            der = engine.decode(joined).map_err(|err| {
                format!(
                    "certificate {} is not base64: {err}",
                    certificates.len() + 1
                )
            })?;
        }
        certificates.push(der);
    }
    Ok(certificates)
}

/// The offset of the first `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(offset) = haystack[from..].iter().position(|&byte| byte == first) {
        let at = from + offset;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `scheme://host:port/` of `url`, user name, password, query and fragment removed.
pub(crate) fn origin_root(url: &reqwest::Url) -> Option<reqwest::Url> {
    let mut url = url.clone();
    if url.host_str().is_none() || !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.set_path("/");
    url.set_query(None);
    url.set_fragment(None);
    Some(url)
}

#[cfg(test)]
mod tests {
    use super::{origin_root, pem_certificates};
    use base64::Engine as _;

    const CERT_A: &[u8] = b"certificate a: any bytes \x00\x01\xfe\xff will do";
    const CERT_B: &[u8] =
        b"a second, longer certificate body that needs more than one line of base64 text";

    fn block(der: &[u8], width: usize, newline: &str) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = text
            .as_bytes()
            .chunks(width)
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or_default())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----{newline}{}{newline}-----END CERTIFICATE-----{newline}",
            lines.join(newline)
        )
    }

    #[test]
    fn pem_blocks_decode_whatever_the_wrapping_and_skip_what_lies_between() {
        for (width, newline) in [(64, "\n"), (64, "\r\n"), (76, "\n"), (17, "\n")] {
            let text = format!(
                "# a bundle\n{}junk between\n-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n{}",
                block(CERT_A, width, newline),
                block(CERT_B, width, newline)
            );
            let found = pem_certificates(text.as_bytes()).unwrap();
            assert_eq!(found, [CERT_A.to_vec(), CERT_B.to_vec()], "width {width}");
        }
        assert_eq!(pem_certificates(b"no blocks here"), Ok(Vec::new()));
    }

    #[test]
    fn broken_pem_blocks_are_named() {
        let open = "-----BEGIN CERTIFICATE-----\nAAAA\n";
        assert_eq!(
            pem_certificates(open.as_bytes()),
            Err("certificate 1 has no END line".to_string())
        );
        let bad = "-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n";
        let err = pem_certificates(bad.as_bytes()).unwrap_err();
        assert!(err.starts_with("certificate 1 is not base64"), "{err}");
    }

    #[test]
    fn the_preconnect_target_is_the_origin_without_credentials() {
        let root = |url: &str| {
            reqwest::Url::parse(url)
                .ok()
                .and_then(|url| origin_root(&url))
                .map(|u| u.to_string())
        };
        assert_eq!(
            root("https://api.deepseek.com/chat/completions").as_deref(),
            Some("https://api.deepseek.com/")
        );
        assert_eq!(
            root("http://user:secret@127.0.0.1:8000/v1/chat/completions?x=1#f").as_deref(),
            Some("http://127.0.0.1:8000/")
        );
        assert_eq!(root("unix:/run/socket"), None);
        assert_eq!(root("not a url"), None);
    }
}
