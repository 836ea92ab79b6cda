//! Secrets and terminal escapes end to end (docs/SECURITY.md, "Secrets and redaction" and
//! "Terminal output (dsh run, sessions show)"): the real `dsh run` binary against the fake
//! provider, with real `bash`.
//!
//! * A command prints the active key (from `./.env`), another provider's key (from
//!   `$DSH_HOME/.env`) and a database password (from a URL in `./.env`) as base64 at each
//!   offset (wrapped and not, standard and URL-safe), hex (wrapped, both cases), reversed,
//!   folded, and cut in two; none of it reaches stdout, stderr, the session file or the
//!   request sent back to the provider.
//! * A secret cut in two tool results, and one the model streams in pieces.
//! * Escape sequences from the model (OSC 52, CSI, C1, BEL, CR, backspace) and from a tool
//!   result are shown as text by `dsh run` (text and `--json`) and `dsh sessions show`, and
//!   kept by `dsh sessions show --raw`.

use std::path::PathBuf;
use std::process::Command;

use base64::Engine as _;
use dsh_test_support::{FakeProvider, SseReply};
use serde_json::{json, Value};

use crate::common::{
    dsh_command, model_stepping, output as run, scratch_dirs, session_files, text,
};

/// The key in use, from the project's `./.env`.
const ACTIVE_KEY: &str = "sk-dsA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6";
/// Another provider's key, in `$DSH_HOME/.env` only.
const OTHER_KEY: &str = "sk-ant-api03-Zq9Xw8Vu7Ts6Rr5Qp4On3Ml2Kk1Jj0";
/// A password inside a URL of `./.env` (a value dsh never uses).
const DB_PASSWORD: &str = "Pw7rT9qXz2LmN4vB";

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [home, cwd]) = scratch_dirs(["home", "ws"]);
        std::fs::write(
            cwd.join(".env"),
            format!(
                "DEEPSEEK_API_KEY={ACTIVE_KEY}\nDATABASE_URL=postgres://app:{DB_PASSWORD}@db:5432/app\n"
            ),
        )
        .unwrap();
        std::fs::write(
            home.join(".env"),
            format!("ANTHROPIC_API_KEY={OTHER_KEY}\n"),
        )
        .unwrap();
        Env {
            _root: root,
            home,
            cwd,
        }
    }

    fn command(&self, base_url: &str) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url).env("NO_COLOR", "1");
        cmd
    }

    fn session_text(&self) -> String {
        let text: String = session_files(&self.home)
            .iter()
            .map(|file| std::fs::read_to_string(file).unwrap())
            .collect();
        assert!(!text.is_empty(), "no session file");
        text
    }
}

/// One bash call per command, then `last` as the final text.
async fn provider_running(commands: &[&str], last: SseReply) -> FakeProvider {
    let calls: Vec<(&str, Value)> = commands
        .iter()
        .map(|command| ("bash", json!({"command": command, "description": "print"})))
        .collect();
    model_stepping(&calls, last).await
}

/// The base64 characters that encode `secret`'s own bytes at stream offset `offset`.
fn base64_middle(secret: &str, offset: usize, url_safe: bool) -> String {
    let stream = [&b"\0\0"[..offset], secret.as_bytes()].concat();
    let encoded = if url_safe {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(stream)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(stream)
    };
    encoded[(8 * offset).div_ceil(6)..8 * (offset + secret.len()) / 6].to_string()
}

/// `text` with `%XX` and `\u00XX` escapes decoded.
fn unescaped(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |at: usize| {
        std::str::from_utf8(bytes.get(at..at + 2)?)
            .ok()
            .and_then(|pair| u8::from_str_radix(pair, 16).ok())
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match (bytes[at], bytes.get(at + 1..at + 4)) {
            (b'%', _) if hex(at + 1).is_some() => {
                out.extend(hex(at + 1));
                at += 3;
            }
            (b'\\', Some(b"u00")) if hex(at + 4).is_some() => {
                out.extend(hex(at + 4));
                at += 6;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Fails when `haystack` (with whitespace and JSON `\n` escapes left out, so wrapped output
/// counts, escapes decoded and in lower case) holds 12 bytes or more of `secret` in any form
/// the command printed.
fn assert_no_trace(what: &str, haystack: &str, secret: &str) {
    let flat: String = unescaped(&haystack.replace("\\n", ""))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_lowercase();
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    let mut forms = vec![
        (secret.to_string(), 12),
        (secret.chars().rev().collect(), 12),
        (hex.to_uppercase(), 24),
        (hex, 24),
    ];
    for offset in 0..3 {
        forms.push((base64_middle(secret, offset, false), 16));
        forms.push((base64_middle(secret, offset, true), 16));
    }
    for (form, width) in forms {
        let chars: Vec<char> = form.chars().collect();
        for window in chars.windows(width.min(chars.len())) {
            let piece: String = window.iter().collect::<String>().to_lowercase();
            assert!(
                !flat.contains(&piece),
                "{what} holds `{piece}`, a piece of a secret:\n{haystack}"
            );
        }
    }
}

/// A shell script printing `$1` in every form the test checks.
const PRINT_FORMS: &str = r#"p() {
  printf %s "$1" | base64 -w0; echo
  printf x%s "$1" | base64; echo
  printf xy%s "$1" | base64 | tr '+/' '-_'; echo
  printf %s "$1" | xxd -p; echo
  printf %s "$1" | xxd -p | tr a-f A-F; echo
  printf %s "$1" | rev; echo
  printf %s "$1" | fold -w 7; echo
  printf %s "$1" | tr a-z A-Z; echo
  printf %s "$1" | od -An -tx1 | tr -d ' \n' | sed 's/../%&/g'; echo
  printf %s "$1" | od -An -tx1 | tr -d ' \n' | sed 's/../\\u00&/g'; echo
  echo "first ${1:0:14} then ${1:14}"
}"#;

#[tokio::test]
async fn keys_from_both_env_files_never_leave_in_any_encoding() {
    let env = Env::new();
    let home_env = env.home.join(".env");
    let script = format!(
        "{PRINT_FORMS}\n\
         p \"$(sed -n 's/^DEEPSEEK_API_KEY=//p' .env)\"\n\
         p \"$(sed -n 's/^ANTHROPIC_API_KEY=//p' {})\"\n\
         p \"$(sed -n 's/.*app:\\(.*\\)@db.*/\\1/p' .env)\"\n\
         sleep 1.6",
        home_env.display()
    );
    // The script sleeps after printing, so its output is reported live too (`tool/progress`,
    // redacted as results are).
    // Half of the active key in one result, the other half in the next.
    let halves = [
        "sed -n 's/^DEEPSEEK_API_KEY=\\(.\\{18\\}\\).*/\\1/p' .env".to_string(),
        "sed -n 's/^DEEPSEEK_API_KEY=.\\{18\\}//p' .env".to_string(),
    ];
    let provider = provider_running(
        &[&script, &halves[0], &halves[1]],
        SseReply::new().text("done"),
    )
    .await;
    let mut cmd = env.command(&provider.base_url());
    // Unconfined, so `bash` can read `$DSH_HOME/.env` too: redaction does not rely on the
    // sandbox hiding the home.
    cmd.args([
        "run",
        "--json",
        "--permission",
        "danger-full-access",
        "print the keys",
    ]);
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "stderr: {stderr}");
    let log = env.session_text();
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    let results: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "tool/result")
        .collect();
    assert_eq!(results.len(), 3);
    let live = log
        .lines()
        .filter(|line| line.contains("\"tool/progress\""))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        live.contains("[REDACTED:"),
        "no live output was logged: {live}"
    );
    let printed = results[0]["data"].to_string();
    for marker in ["DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY", "DATABASE_URL"] {
        assert!(
            printed.contains(&format!("[REDACTED:{marker}]")),
            "bash did not print {marker}'s value: {printed}"
        );
    }
    for half in &results[1..] {
        assert!(half["data"].to_string().contains("[REDACTED:"), "{half}");
    }
    for secret in [ACTIVE_KEY, OTHER_KEY, DB_PASSWORD] {
        assert_no_trace("stdout (--json)", &stdout, secret);
        assert_no_trace("stderr", &stderr, secret);
        assert_no_trace("the session file", &log, secret);
        for request in &requests[1..] {
            assert_no_trace(
                "a request to the provider",
                &request.body.to_string(),
                secret,
            );
        }
    }
}

#[tokio::test]
async fn a_key_the_model_streams_in_pieces_is_not_printed() {
    let env = Env::new();
    let (a, b) = ACTIVE_KEY.split_at(9);
    let provider = provider_running(
        &[],
        SseReply::new()
            .text("the key is ")
            .text(a)
            .text(b)
            .text(" and backwards ")
            .text(&OTHER_KEY.chars().rev().collect::<String>()),
    )
    .await;
    let mut cmd = env.command(&provider.base_url());
    cmd.args(["run", "--verbose", "say the key"]);
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(
        stdout.contains("the key is [REDACTED:DEEPSEEK_API_KEY] and backwards [REDACTED:"),
        "{stdout}"
    );
    assert!(
        stderr.contains("the key is [REDACTED:DEEPSEEK_API_KEY]"),
        "{stderr}"
    );
    // The log keeps the model's text as written; `sessions show` (raw or not) replaces it.
    let session = session_files(&env.home)[0].clone();
    let mut shown = Vec::new();
    for raw in [false, true] {
        let mut cmd = dsh_command(&env.home, &env.cwd);
        cmd.args(["sessions", "show", session.to_str().unwrap()]);
        if raw {
            cmd.arg("--raw");
        }
        let out = run(cmd).await;
        assert!(out.status.success(), "{}", text(&out).1);
        shown.push(text(&out).0);
    }
    for secret in [ACTIVE_KEY, OTHER_KEY] {
        assert_no_trace("stdout", &stdout, secret);
        assert_no_trace("stderr (streamed progress)", &stderr, secret);
        for transcript in &shown {
            assert!(transcript.contains("[REDACTED:"), "{transcript}");
            assert_no_trace("sessions show", transcript, secret);
        }
    }
}

/// What the model says: a clipboard write (OSC 52), screen erase and colour (CSI), C1 CSI,
/// a window title (OSC 0) ended by ESC \, a carriage return and a backspace.
const HOSTILE: &str =
    "hi \x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b[31mred \u{9b}0m \x1b]0;title\x1b\\ ok\rX\x08!";

/// True when `text` holds a byte or character a terminal would obey.
fn has_controls(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c)
    })
}

#[tokio::test]
async fn escape_sequences_from_the_model_are_shown_not_obeyed() {
    let env = Env::new();
    let tool = "printf 'tool \\033]52;c;Zm9v\\007 \\033[1A done'";
    let provider = provider_running(&[tool], SseReply::new().text(HOSTILE)).await;
    let mut cmd = env.command(&provider.base_url());
    cmd.args(["run", "--verbose", "be hostile"]);
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(!has_controls(&stdout), "stdout obeys escapes: {stdout:?}");
    assert!(!has_controls(&stderr), "stderr obeys escapes: {stderr:?}");
    assert!(
        stdout.contains("hi ^[]52;c;cHduZWQ=^G ^[[2J^[[31mred <U+009B>0m ^[]0;title^[\\ ok^MX^H!"),
        "{stdout:?}"
    );
    assert!(stderr.contains("^[]52;c;cHduZWQ=^G"), "{stderr:?}");
    assert!(
        stderr.contains("tool ^[]52;c;Zm9v^G ^[[1A done"),
        "{stderr:?}"
    );

    // `--json`: every line is JSON, and none carries a raw control character.
    let provider = provider_running(&[tool], SseReply::new().text(HOSTILE)).await;
    let mut cmd = env.command(&provider.base_url());
    cmd.args(["run", "--json", "--json-deltas", "be hostile"]);
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(!has_controls(&stdout), "--json obeys escapes: {stdout:?}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["output"], HOSTILE,
        "the JSON text is the model's, escaped"
    );
    for line in stdout.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }

    // `sessions show`: printable by default, as logged with `--raw`.
    let session = session_files(&env.home)[0].clone();
    let mut cmd = dsh_command(&env.home, &env.cwd);
    cmd.args(["sessions", "show", session.to_str().unwrap()]);
    let shown = run(cmd).await;
    let (shown_text, shown_err) = text(&shown);
    assert!(shown.status.success(), "{shown_err}");
    assert!(
        !has_controls(&shown_text),
        "sessions show obeys escapes: {shown_text:?}"
    );
    assert!(shown_text.contains("^[]52;c;cHduZWQ=^G"), "{shown_text}");
    let mut cmd = dsh_command(&env.home, &env.cwd);
    cmd.args(["sessions", "show", "--raw", session.to_str().unwrap()]);
    let raw = run(cmd).await;
    assert!(raw.status.success());
    assert!(
        String::from_utf8_lossy(&raw.stdout).contains("\x1b]52;c;cHduZWQ=\x07"),
        "--raw keeps the sequences as logged"
    );
}
