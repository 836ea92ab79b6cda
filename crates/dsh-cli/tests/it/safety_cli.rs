//! Safety end to end: the real `dsh run` binary against the fake provider, with real `bash`
//! confined by the probed sandbox. Secrets never reach the tool result, the request sent back to
//! the provider, the session file, stdout or stderr; escapes fail with Landlock forced too.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{dsh_command, output as run, scratch_dirs, session_files};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

const API_KEY: &str = "sk-live-abcdef1234567890";
const MY_TOKEN: &str = "tok-zyx987654321";

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    outside: PathBuf,
}

impl Env {
    /// Home, cwd and an outside directory under the cargo target dir: outside every temp dir.
    fn new() -> Env {
        let (root, [home, cwd, outside]) = scratch_dirs(["home", "ws", "outside"]);
        Env {
            _root: root,
            home,
            cwd,
            outside,
        }
    }

    fn command(&self, base_url: &str) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", API_KEY)
            .env("MY_TOKEN", MY_TOKEN);
        cmd
    }

    /// The text of every session file, one after the other.
    fn session_text(&self) -> String {
        let text: String = session_files(&self.home)
            .iter()
            .map(|file| std::fs::read_to_string(file).unwrap())
            .collect();
        assert!(!text.is_empty(), "no session file");
        text
    }
}

/// One bash call, then a final text.
async fn provider_running(command: &str) -> FakeProvider {
    let args = json!({"command": command, "description": "look around"}).to_string();
    FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_1", "bash", &args)
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("done")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap()
}

/// The events of the session log with `type`.
fn events_of(log: &str, kind: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == kind)
        .collect()
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(API_KEY), "the API key reached {what}");
    assert!(!text.contains(MY_TOKEN), "MY_TOKEN reached {what}");
}

#[tokio::test]
async fn secrets_never_leave_through_bash() {
    let env = Env::new();
    // A project .env holding the same secrets: `cat` shows them, redaction must hide them.
    std::fs::write(
        env.cwd.join(".env"),
        format!("DEEPSEEK_API_KEY={API_KEY}\nMY_TOKEN={MY_TOKEN}\n"),
    )
    .unwrap();
    let provider = provider_running("env; echo ---; cat .env").await;
    let mut cmd = env.command(&provider.base_url());
    cmd.args(["run", "--json", "show me the environment"]);
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "stderr: {stderr}");

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let sent = requests[1].body.to_string();
    let log = env.session_text();
    let results = events_of(&log, "tool/result");
    assert_eq!(results.len(), 1);
    let result = results[0]["data"].to_string();
    assert!(result.contains("TERM=dumb"), "bash did not run: {result}");
    assert!(
        result.contains("[REDACTED:MY_TOKEN]") && result.contains("[REDACTED:DEEPSEEK_API_KEY]"),
        "{result}"
    );
    assert_clean("the tool result", &result);
    assert_clean("the request sent back to the provider", &sent);
    assert_clean("the session file", &log);
    assert_clean("stdout (--json)", &stdout);
    assert_clean("stderr", &stderr);

    let presets = events_of(&log, "permission/preset");
    assert_eq!(presets.len(), 1);
    assert_eq!(presets[0]["data"]["preset"], "workspace-write");
    let modes = events_of(&log, "sandbox/mode");
    assert_eq!(modes.len(), 1);
    let mode = modes[0]["data"]["mode"].as_str().unwrap().to_string();
    assert!(
        mode == "bubblewrap" || mode == "landlock",
        "a confined run needs a working sandbox here: {}",
        modes[0]
    );
    assert!(
        stdout.contains("sandbox/mode"),
        "--json shows the sandbox mode"
    );
}

async fn escape_fails_with(sandbox: &str) {
    let env = Env::new();
    std::fs::write(env.outside.join("file"), "original\n").unwrap();
    let target = env.outside.join("file");
    let provider = provider_running(&format!(
        "echo pwned > {0}; cd / && touch {0}.new; python3 -c \"open('{0}','w')\"",
        target.display()
    ))
    .await;
    let mut cmd = env.command(&provider.base_url());
    cmd.env("DSH_SANDBOX", sandbox)
        .args(["run", "--permission", "workspace-write", "escape"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original\n");
    assert!(!Path::new(&format!("{}.new", target.display())).exists());
    let log = env.session_text();
    let modes = events_of(&log, "sandbox/mode");
    assert_eq!(modes[0]["data"]["mode"], sandbox, "{}", modes[0]);
    let result = events_of(&log, "tool/result")[0]["data"].to_string();
    assert!(result.contains("[sandbox:"), "{result}");
}

#[tokio::test]
async fn escapes_fail_under_bubblewrap() {
    escape_fails_with("bubblewrap").await;
}

#[tokio::test]
async fn escapes_fail_under_forced_landlock() {
    escape_fails_with("landlock").await;
}

#[tokio::test]
async fn a_bad_sandbox_setting_fails_at_start() {
    let env = Env::new();
    let mut cmd = env.command("http://127.0.0.1:9");
    cmd.env("DSH_SANDBOX", "firejail").args(["run", "hi"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("firejail") && stderr.contains("landlock"),
        "{stderr}"
    );
}
