//! Secret redaction (docs/SECURITY.md, "Secrets and redaction"): every secret dsh has loaded
//! (secret-looking variables of its environment, every provider's key, MCP tokens and headers,
//! the secret-looking values of each `.env` file it read) is replaced by `[REDACTED:<NAME>]`
//! in tool results before they are logged or sent to the model, and in what `dsh run` and
//! `dsh sessions show` print. Encoded forms and pieces are found too
//! ([`dsh_http::SecretMatcher`]: base64 at each offset, hex, reversed, percent and `\u`
//! escapes, any piece of 12 bytes and more).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use dsh_http::SecretMatcher;
use dsh_llm::ContentBlock;
use serde_json::Value;

use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::process::is_secret_name;

/// Values shorter than this are not redacted: short values (`1`, `true`, `dev`) occur in
/// ordinary text and their replacement would garble output without protecting anything.
pub const MIN_SECRET_LEN: usize = dsh_http::MIN_SECRET_BYTES;

/// A value of a `.env` file whose name does not say it is secret is redacted only from this
/// length on, and only when it looks like a token (see [`env_file_secrets`]).
pub const MIN_UNNAMED_SECRET_LEN: usize = 12;

/// Words of variable names that mark a `.env` value as secret whatever it looks like, also at
/// the end of a word (`APIKEY`, `GHTOKEN`).
const SECRET_SUFFIXES: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"];

/// Words of variable names that mark a value as secret only as whole words (`AUTH`, not
/// `AUTHOR`).
const SECRET_WORDS: [&str; 9] = [
    "PASS",
    "PWD",
    "AUTH",
    "CREDENTIAL",
    "CREDENTIALS",
    "PRIVATE",
    "COOKIE",
    "SIGNATURE",
    "DSN",
];

/// Replaces known secret values in text by `[REDACTED:<NAME>]`, in every form
/// [`SecretMatcher`] knows. `Debug` shows names only, never values. Cheap to clone once built.
#[derive(Clone, Default)]
pub struct SecretRedactor {
    /// `(value, marker)`, in the order added.
    secrets: Vec<(String, String)>,
    /// The matcher over `secrets`, built on first use after the last change; shared by the
    /// clones made since, so a redactor handed to several printers is compiled once.
    matcher: Arc<OnceLock<Arc<SecretMatcher>>>,
}

impl fmt::Debug for SecretRedactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .secrets
            .iter()
            .map(|(_, marker)| marker.as_str())
            .collect();
        f.debug_struct("SecretRedactor")
            .field("markers", &names)
            .finish()
    }
}

/// True for a variable or header name that says its value is secret, in any case: one of its
/// words (split at `_`, `-`, `.`) is or ends with `KEY`, `TOKEN`, `SECRET`, `PASSWORD` or
/// `PASSWD`, or is `PASS`, `PWD`, `AUTH`, `AUTHORIZATION`, `CREDENTIAL(S)`, `PRIVATE`,
/// `COOKIE`, `SIGNATURE` or `DSN`. So `OPENAI_API_KEY`, `GHTOKEN`, `DB_PASS`, `X-Auth` and
/// `Authorization` are secret; `AUTHOR_NAME`, `KEYBOARD` and `PASSENGERS` are not.
pub fn is_secret_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.split(['_', '-', '.']).any(|word| {
        SECRET_SUFFIXES.iter().any(|end| word.ends_with(end))
            || SECRET_WORDS.contains(&word)
            || word == "AUTHORIZATION"
    })
}

/// True for a value that looks like a token rather than a word, number, path or address:
/// at least [`MIN_UNNAMED_SECRET_LEN`] bytes, no whitespace, letters and digits both.
fn looks_like_token(value: &str) -> bool {
    value.len() >= MIN_UNNAMED_SECRET_LEN
        && !value.chars().any(char::is_whitespace)
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && value.chars().any(|c| c.is_ascii_digit())
}

/// The secrets in one `.env` file's entries, as `(name, value)` pairs to add to a redactor.
///
/// The rule (docs/SECURITY.md, "Secrets and redaction"): a variable whose name says it is
/// secret ([`is_secret_variable`]) gives its whole value (from [`MIN_SECRET_LEN`] bytes on);
/// any other value is taken whole when it looks like a token (12+ bytes, no whitespace,
/// letters and digits) and is not a URL; a URL (or any value) gives each of its parts between
/// `/ : @ ? & = # ;` that looks like a token, and the password of `scheme://user:password@`.
/// So `PORT=3000`, `DEBUG=true`, `NODE_ENV=production`, `AWS_REGION=us-east-1` and
/// `API_URL=https://api.example.com/v2` are left alone.
pub fn env_file_secrets<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in entries {
        let value = value.trim();
        if value.len() < MIN_SECRET_LEN {
            continue;
        }
        if is_secret_variable(name) || (looks_like_token(value) && !value.contains("://")) {
            out.push((name.to_string(), value.to_string()));
            continue;
        }
        if let Some(password) = url_password(value) {
            out.push((name.to_string(), password.to_string()));
        }
        for part in value.split(['/', ':', '@', '?', '&', '=', '#', ';']) {
            if looks_like_token(part) {
                out.push((name.to_string(), part.to_string()));
            }
        }
    }
    out
}

/// The password of `scheme://user:password@host...`, when it is long enough to redact.
fn url_password(value: &str) -> Option<&str> {
    let (_, rest) = value.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (password.len() >= MIN_SECRET_LEN).then_some(password)
}

impl SecretRedactor {
    /// No secrets.
    pub fn new() -> Self {
        Self::default()
    }

    /// The values of this process's variables that [`crate::scrubbed_env`] removes from child
    /// environments (names containing `KEY`, `TOKEN`, `SECRET`, `PASSWORD`), when they are
    /// valid UTF-8 and at least [`MIN_SECRET_LEN`] bytes long.
    pub fn from_env() -> Self {
        let mut redactor = Self::new();
        for (name, value) in std::env::vars_os() {
            if let (Some(name), Some(value)) = (name.to_str(), value.to_str()) {
                if is_secret_name(name) {
                    redactor.add(name, value);
                }
            }
        }
        redactor
    }

    /// Adds a secret (e.g. a provider key read from a `.env` file rather than the environment).
    /// Values shorter than [`MIN_SECRET_LEN`] are ignored; adding a known value again keeps
    /// its first name.
    pub fn add(&mut self, name: &str, value: &str) {
        if value.len() < MIN_SECRET_LEN || self.secrets.iter().any(|(v, _)| v == value) {
            return;
        }
        self.secrets
            .push((value.to_string(), format!("[REDACTED:{name}]")));
        self.matcher = Arc::default();
    }

    /// Adds every secret of another redactor.
    pub fn extend(&mut self, other: &SecretRedactor) {
        for (value, marker) in &other.secrets {
            if !self.secrets.iter().any(|(v, _)| v == value) {
                self.secrets.push((value.clone(), marker.clone()));
                self.matcher = Arc::default();
            }
        }
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The number of secrets known.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// The compiled matcher (built once after the last [`SecretRedactor::add`]).
    pub fn matcher(&self) -> Arc<SecretMatcher> {
        Arc::clone(self.matcher.get_or_init(|| {
            Arc::new(SecretMatcher::new(
                self.secrets
                    .iter()
                    .map(|(value, marker)| (marker.as_str(), value.as_str())),
            ))
        }))
    }

    /// `text` with every secret replaced, plain or encoded; borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_empty() {
            return Cow::Borrowed(text);
        }
        self.matcher().scrub(text)
    }

    fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Redacts every string (values, not keys) inside `value`.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(text) => self.redact_in_place(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_json(v)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Redacts a content block: text, reasoning, nested tool results and unknown blocks (as
    /// JSON); tool-call arguments and images are left as they are.
    pub fn redact_block(&self, block: &mut ContentBlock) {
        match block {
            ContentBlock::Text { text } => self.redact_in_place(text),
            ContentBlock::Reasoning { text, .. } => self.redact_in_place(text),
            ContentBlock::ToolResult { content, .. } => {
                content.iter_mut().for_each(|b| self.redact_block(b))
            }
            ContentBlock::Unknown(value) => self.redact_json(value),
            ContentBlock::Image { .. } | ContentBlock::ToolCall { .. } => {}
        }
    }

    /// Redacts a whole tool outcome: content blocks, summary and data, or the error message.
    pub fn redact_outcome(&self, outcome: &mut Result<ToolOutput, ToolError>) {
        if self.is_empty() {
            return;
        }
        match outcome {
            Ok(output) => {
                output.content.iter_mut().for_each(|b| self.redact_block(b));
                self.redact_in_place(&mut output.summary);
                if let Some(data) = output.data.as_mut() {
                    self.redact_json(data);
                }
            }
            Err(err) => self.redact_in_place(&mut err.message),
        }
    }

    /// Redacts a progress report's message and output lines (they are logged and shown, as
    /// a result is).
    pub fn redact_progress(&self, progress: &mut crate::ToolProgress) {
        if self.is_empty() {
            return;
        }
        if let Some(message) = progress.message.as_mut() {
            self.redact_in_place(message);
        }
        progress
            .output
            .iter_mut()
            .for_each(|line| self.redact_in_place(line));
    }

    /// A redactor for text that arrives in pieces (streamed model output): see
    /// [`StreamRedactor`].
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            matcher: self.matcher(),
            pending: String::new(),
        }
    }
}

/// Redacts text that arrives in pieces, so a secret split across two pieces is still found:
/// it holds back the tail that could be the start of a secret (at most the longest pattern,
/// a few hundred bytes) until more text or the end shows what it is.
#[derive(Debug)]
pub struct StreamRedactor {
    matcher: Arc<SecretMatcher>,
    pending: String,
}

impl StreamRedactor {
    /// Takes `piece` and returns the redacted text that is safe to show now.
    pub fn push(&mut self, piece: &str) -> String {
        if self.matcher.is_empty() {
            return piece.to_string();
        }
        self.pending.push_str(piece);
        let cut = self.matcher.settled_prefix(&self.pending);
        let rest = self.pending.split_off(cut);
        let ready = std::mem::replace(&mut self.pending, rest);
        self.matcher.scrub(&ready).into_owned()
    }

    /// The rest, redacted, at the end of the stream.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        self.matcher.scrub(&rest).into_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::error::ToolErrorCode;

    fn redactor() -> SecretRedactor {
        let mut r = SecretRedactor::new();
        r.add("MY_TOKEN", "tok-12345678");
        r.add("LONG_KEY", "tok-12345678-and-more");
        r.add("SHORT_KEY", "abc");
        r
    }

    #[test]
    fn replaces_values_longest_first_and_ignores_short_ones() {
        let r = redactor();
        assert_eq!(
            r.redact("a tok-12345678-and-more b tok-12345678 c abc"),
            "a [REDACTED:LONG_KEY] b [REDACTED:MY_TOKEN] c abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert!(!format!("{r:?}").contains("tok-"));
    }

    #[test]
    fn redacts_outputs_data_and_errors() {
        let r = redactor();
        let mut ok: Result<ToolOutput, ToolError> = Ok(ToolOutput::text("x=tok-12345678")
            .with_summary("tok-12345678")
            .with_data(serde_json::json!({"a": ["tok-12345678"], "tok-12345678": 1})));
        r.redact_outcome(&mut ok);
        let out = ok.unwrap();
        assert_eq!(out.text_content(), "x=[REDACTED:MY_TOKEN]");
        assert_eq!(out.summary, "[REDACTED:MY_TOKEN]");
        assert_eq!(out.data.unwrap()["a"][0], "[REDACTED:MY_TOKEN]");
        let mut err: Result<ToolOutput, ToolError> =
            Err(ToolError::new(ToolErrorCode::Io, "bad tok-12345678"));
        r.redact_outcome(&mut err);
        assert_eq!(err.unwrap_err().message, "bad [REDACTED:MY_TOKEN]");
    }

    /// Every form a redacted secret may take, to check that none is left.
    fn forms_of(secret: &str) -> Vec<String> {
        use base64::Engine as _;
        let engines = [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::URL_SAFE,
        ];
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        let mut out = vec![
            secret.to_string(),
            secret.chars().rev().collect(),
            hex.to_uppercase(),
            hex,
        ];
        // The base64 text that encodes only the secret's own bytes, at each offset.
        for engine in engines {
            for offset in 0..3 {
                let encoded = engine.encode([&b"\0\0"[..offset], secret.as_bytes()].concat());
                let first = (8 * offset).div_ceil(6);
                let end = 8 * (offset + secret.len()) / 6;
                out.push(encoded[first..end].to_string());
            }
        }
        out
    }

    /// The secret in one encoding, with `prefix` bytes before it in the same stream.
    fn encode(secret: &str, encoding: u8, prefix: &str) -> String {
        use base64::Engine as _;
        let stream = format!("{prefix}{secret}");
        match encoding {
            0 => secret.to_string(),
            1 => secret.chars().rev().collect(),
            2 => secret.bytes().map(|b| format!("{b:02x}")).collect(),
            3 => secret.bytes().map(|b| format!("{b:02X}")).collect(),
            4 => base64::engine::general_purpose::STANDARD.encode(stream),
            5 => base64::engine::general_purpose::STANDARD_NO_PAD.encode(stream),
            6 => base64::engine::general_purpose::URL_SAFE.encode(stream),
            7 => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(stream),
            8 => secret.bytes().map(|b| format!("%{b:02X}")).collect(),
            _ => secret.bytes().map(|b| format!("\\u{b:04x}")).collect(),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// A random secret, in a random encoding at a random base64 offset, inside random
        /// text: no form of it is left, and the marker is there.
        #[test]
        fn no_encoding_of_a_secret_survives(
            secret in "[A-Za-z0-9_+/=-]{8,64}",
            encoding in 0u8..10,
            prefix in "[ -~]{0,5}",
            before in "[ -~\n]{0,40}",
            after in "[ -~\n]{0,40}",
        ) {
            let mut r = SecretRedactor::new();
            r.add("S", &secret);
            let text = format!("{before}{}{after}", encode(&secret, encoding, &prefix));
            let out = r.redact(&text);
            proptest::prop_assert!(out.contains("[REDACTED:S]"), "{text:?} -> {out:?}");
            for form in forms_of(&secret) {
                if form.len() >= 8 {
                    proptest::prop_assert!(!out.contains(&form), "{form:?} in {out:?}");
                }
            }
        }

        /// Cut a secret in two pieces of 12 bytes or more, each in its own tool result: both
        /// are redacted; cut anywhere in a stream, the stream redactor shows none of it.
        #[test]
        fn pieces_and_streams_are_redacted(
            secret in "[A-Za-z0-9]{24,64}",
            cut in 12usize..1000,
            stream_cuts in proptest::collection::vec(0usize..200, 0..6),
            before in "[ -~]{0,30}",
        ) {
            let cut = 12 + cut % (secret.len() - 23);
            let mut r = SecretRedactor::new();
            r.add("S", &secret);
            let (a, b) = secret.split_at(cut);
            for piece in [a, b] {
                let text = format!("{before} {piece} end");
                let out = r.redact(&text);
                proptest::prop_assert!(!out.contains(piece), "{piece:?} in {out:?}");
            }
            let folded: String = secret
                .as_bytes()
                .chunks(5)
                .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
                .collect();
            let text = format!(
                "{before}{secret} and {} and {} and {folded} end",
                encode(&secret, 4, "x"),
                encode(&secret, 8, ""),
            );
            let mut stream = r.stream();
            let mut shown = String::new();
            let mut at = 0;
            let mut cuts: Vec<usize> = stream_cuts.iter().map(|c| c % text.len()).collect();
            cuts.sort_unstable();
            for c in cuts {
                shown.push_str(&stream.push(&text[at..c.max(at)]));
                at = c.max(at);
            }
            shown.push_str(&stream.push(&text[at..]));
            shown.push_str(&stream.finish());
            proptest::prop_assert_eq!(shown, r.redact(&text).into_owned());
        }
    }

    #[test]
    fn env_files_give_their_secret_looking_values_only() {
        let entries = [
            ("PORT", "3000"),
            ("DEBUG", "true"),
            ("NODE_ENV", "production"),
            ("AWS_REGION", "us-east-1"),
            ("API_URL", "https://api.example.com/v2"),
            ("GREETING", "hello there, world 12345"),
            ("OPENAI_API_KEY", "sk-other-provider"),
            ("DB_PASS", "hunter2hunter2"),
            ("SENTRY", "a1b2c3d4e5f6a7b8c9d0"),
            ("DATABASE_URL", "postgres://app:s3cret-pw@db:5432/app"),
            (
                "HOOK",
                "https://hooks.example.com/services/T0001/B0002/XyZ123abcDEF456",
            ),
            ("SHORT_TOKEN", "abc"),
            ("AUTHOR_NAME", "Jane Doe Smith"),
            ("KEYBOARD_LAYOUT", "us-international"),
            ("Authorization", "Bearer abcdefgh"),
        ];
        let found = env_file_secrets(entries);
        let values: Vec<&str> = found.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(
            values,
            [
                "sk-other-provider",
                "hunter2hunter2",
                "a1b2c3d4e5f6a7b8c9d0",
                "s3cret-pw",
                "XyZ123abcDEF456",
                "Bearer abcdefgh"
            ]
        );
    }

    #[test]
    fn a_secret_across_two_stream_pieces_is_held_back_until_complete() {
        let mut r = SecretRedactor::new();
        r.add("K", "sk-live-0123456789abcdef");
        let mut stream = r.stream();
        let mut shown = stream.push("the key is sk-live-0123");
        shown.push_str(&stream.push("456789abcdef, done"));
        shown.push_str(&stream.finish());
        assert_eq!(shown, "the key is [REDACTED:K], done");
    }
}
