//! `dsh doctor` with the real binary, a temporary DSH_HOME and the fake provider on loopback
//! (its `GET /models`): every check passing, a missing key, an endpoint on a closed port, an
//! MCP server that does not start, no working sandbox, a session store others can read, and
//! the key never printed. Nothing here talks to the internet.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{dsh_command, output, text};

use dsh_test_support::FakeProvider;

const API_KEY: &str = "sk-doctor-secret-7f3e9a21c4";

/// A minimal MCP server in bash (tools `ping` and `echo`) that first starts a child of its
/// own and writes both pids to `mcp.pid` and `child.pid` in its working directory (the
/// workspace).
const MCP_SERVER: &str = r#"#!/usr/bin/env bash
sleep 300 &
echo $! > child.pid.tmp && mv child.pid.tmp child.pid
echo $$ > mcp.pid.tmp && mv mcp.pid.tmp mcp.pid
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}\n' "$id";;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"ping","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}}\n' "$id";;
  esac
done
"#;

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
}

impl Env {
    fn new() -> Env {
        let root = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let (home, cwd) = (real.join("home"), real.join("ws"));
        for dir in [&home, &cwd, &cwd.join(".git")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Env {
            _root: root,
            home,
            cwd,
        }
    }

    /// `dsh doctor ARGS` against `base_url`, with the key in the environment when `key`.
    fn command(&self, base_url: &str, key: bool, args: &[&str]) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .arg("doctor")
            .args(args);
        if key {
            cmd.env("DEEPSEEK_API_KEY", API_KEY);
        }
        cmd
    }

    fn write_user(&self, text: &str) {
        std::fs::write(self.home.join("config.toml"), text).unwrap();
    }
}

/// A fake provider that lists the default model.
async fn provider() -> FakeProvider {
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["deepseek-v4-flash", "deepseek-v4-pro"]);
    provider
}

/// Stdout and stderr, after checking that neither shows the key or a part of it.
fn checked_text(out: &Output) -> (String, String) {
    let (stdout, stderr) = text(out);
    for part in [API_KEY, &API_KEY[3..], &API_KEY[API_KEY.len() - 10..]] {
        assert!(
            !stdout.contains(part) && !stderr.contains(part),
            "the key leaked:\n{stdout}\n{stderr}"
        );
    }
    (stdout, stderr)
}

/// The line of check `name` whose text holds `needle`.
fn line<'a>(stdout: &'a str, name: &str, needle: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name) && l.contains(needle))
        .unwrap_or_else(|| panic!("no `{name}` line with {needle:?}:\n{stdout}"))
}

/// Every check passes: the key's origin is named, the endpoint lists the model, the sandbox
/// works (as every sandbox test here assumes), and the MCP server started, listed its tools
/// and was stopped again.
#[tokio::test]
async fn every_check_passes_and_the_mcp_server_is_stopped_after() {
    let env = Env::new();
    let provider = provider().await;
    // The script lies where the model cannot write (the MCP gate refuses other places).
    let (_scratch, [scripts]) = crate::common::scratch_dirs(["scripts"]);
    let script = scripts.join("fake-mcp.sh");
    std::fs::write(&script, MCP_SERVER).unwrap();
    env.write_user(&format!(
        "[mcp.servers.tools]\ncommand = \"bash\"\nargs = [{}]\nstartup_timeout_secs = 10\n",
        toml_string(&script.display().to_string())
    ));
    let out = output(env.command(&provider.base_url(), true, &[])).await;
    let (stdout, stderr) = checked_text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for l in stdout.lines() {
        assert!(l.starts_with("ok "), "not ok: {l}\n{stdout}");
    }
    assert!(line(&stdout, "config", "provider deepseek").contains("DEEPSEEK_BASE_URL"));
    line(
        &stdout,
        "key",
        "DEEPSEEK_API_KEY of provider deepseek is set, from the environment",
    );
    line(
        &stdout,
        "endpoint",
        "2 models, deepseek-v4-flash among them",
    );
    line(
        &stdout,
        "sandbox",
        "preset workspace-write: bash runs under",
    );
    line(&stdout, "sessions", "does not exist yet");
    line(
        &stdout,
        "mcp",
        "server tools: started, 2 tools (ping, echo), stopped",
    );
    // The server's whole process group was stopped, its child included.
    for name in ["mcp.pid", "child.pid"] {
        let pid = dsh_test_support::process::wait_for_pid(&env.cwd.join(name));
        assert!(
            dsh_test_support::process::poll_until(std::time::Duration::from_secs(5), || {
                !dsh_test_support::process::alive(pid)
            }),
            "{name}: {pid} still runs after dsh doctor"
        );
    }
    assert!(provider
        .requests()
        .iter()
        .all(|r| r.method == "GET" && r.path.ends_with("/models")));
}

/// No key for a provider that needs one (defined with `api_key_env`): `key` fails naming the
/// variable and where to set it, and the endpoint is not asked. Without a key, the built-in
/// provider pointed at another endpoint is keyless, and says so.
#[tokio::test]
async fn a_missing_key_fails_and_names_the_fix() {
    let env = Env::new();
    let provider = provider().await;
    env.write_user(&format!(
        "[providers.lab]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\
         api_key_env = \"LAB_KEY\"\ndefault_model = \"deepseek-v4-flash\"\n",
        provider.base_url()
    ));
    let out = output(env.command(&provider.base_url(), false, &["--provider", "lab"])).await;
    let (stdout, _) = checked_text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let key = line(&stdout, "key", "LAB_KEY");
    assert!(key.starts_with("FAIL"), "{key}");
    assert!(
        key.contains("Fix: set LAB_KEY in the environment, in ./.env or in $DSH_HOME/.env"),
        "{key}"
    );
    assert!(line(&stdout, "endpoint", "no key").starts_with("skip"));
    assert!(provider.requests().is_empty());

    let out = output(env.command(&provider.base_url(), false, &[])).await;
    let (stdout, _) = checked_text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let key = line(&stdout, "key", "DEEPSEEK_API_KEY");
    assert!(
        key.starts_with("ok") && key.contains("without a key"),
        "{key}"
    );
}

/// The key in the project's `./.env` is named by its file; `--json` carries the same checks.
#[tokio::test]
async fn a_key_from_the_projects_env_file_is_named_by_its_file_in_json() {
    let env = Env::new();
    let provider = provider().await;
    std::fs::write(
        env.cwd.join(".env"),
        format!("DEEPSEEK_API_KEY={API_KEY}\n"),
    )
    .unwrap();
    let out = output(env.command(&provider.base_url(), false, &["--json"])).await;
    let (stdout, stderr) = checked_text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    let key = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "key")
        .unwrap();
    assert_eq!(key["status"], "ok");
    let message = key["message"].as_str().unwrap();
    let file = env.cwd.join(".env").display().to_string();
    assert!(
        message.contains(&format!("from the project's {file}")),
        "{message}"
    );
}

/// The endpoint on a closed port: unreachable, a failure, exit 1.
#[tokio::test]
async fn an_unreachable_endpoint_fails() {
    let env = Env::new();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}");
    let out = output(env.command(&url, true, &[])).await;
    let (stdout, _) = checked_text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let endpoint = line(&stdout, "endpoint", "unreachable");
    assert!(endpoint.starts_with("FAIL"), "{endpoint}");
    assert!(endpoint.contains(&url), "{endpoint}");
    assert!(endpoint.contains("DEEPSEEK_BASE_URL"), "{endpoint}");

    // Credentials in the URL are never printed, on any line, keyless or not (adversarial
    // review: the key line and the failure quoted `user:password@`).
    let with_password = format!("http://alice:hunter2pass@127.0.0.1:{closed}/v1?api-key=qs-secret");
    for key in [true, false] {
        let out = output(env.command(&with_password, key, &["--json"])).await;
        let (stdout, stderr) = text(&out);
        for secret in ["hunter2pass", "alice", "qs-secret"] {
            assert!(
                !stdout.contains(secret) && !stderr.contains(secret),
                "{stdout}{stderr}"
            );
        }
    }
}

/// A configured MCP server whose command does not exist is a warning naming it (the session
/// runs without its tools), not a failure.
#[tokio::test]
async fn an_mcp_server_that_does_not_start_is_a_warning_with_its_name() {
    let env = Env::new();
    let provider = provider().await;
    env.write_user(
        "[mcp.servers.ghost]\ncommand = \"/nonexistent/dsh-no-such-mcp-server\"\n\
         startup_timeout_secs = 5\n",
    );
    let out = output(env.command(&provider.base_url(), true, &[])).await;
    let (stdout, stderr) = checked_text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let mcp = line(&stdout, "mcp", "ghost");
    assert!(mcp.starts_with("warn"), "{mcp}");
    assert!(mcp.contains("did not start"), "{mcp}");
    assert!(mcp.contains("Fix: correct [mcp.servers.ghost] in"), "{mcp}");
}

/// A forced mechanism that cannot work here (Seatbelt exists only on macOS): bash could run
/// nothing under the preset, which blocks work.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn no_working_sandbox_fails() {
    let env = Env::new();
    let provider = provider().await;
    let mut cmd = env.command(&provider.base_url(), true, &[]);
    cmd.env("DSH_SANDBOX", "seatbelt");
    let out = output(cmd).await;
    let (stdout, _) = checked_text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let sandbox = line(&stdout, "sandbox", "no sandbox works here");
    assert!(sandbox.starts_with("FAIL"), "{sandbox}");
    assert!(sandbox.contains("unset DSH_SANDBOX=seatbelt"), "{sandbox}");
    // Under danger-full-access nothing is confined: a warning, no failure.
    let mut cmd = env.command(
        &provider.base_url(),
        true,
        &["--permission", "danger-full-access"],
    );
    cmd.env("DSH_SANDBOX", "seatbelt");
    let out = output(cmd).await;
    let (stdout, _) = checked_text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(line(&stdout, "sandbox", "without a sandbox").starts_with("warn"));
}

/// A session store other users can read is a warning with the `chmod`; its sessions are
/// counted through the catalog.
#[cfg(unix)]
#[tokio::test]
async fn a_session_store_others_can_read_is_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let provider = provider().await;
    let sessions = env.home.join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = output(env.command(&provider.base_url(), true, &[])).await;
    let (stdout, _) = checked_text(&out);
    assert!(out.status.success(), "{stdout}");
    let store = line(&stdout, "sessions", "writable, mode 0755, 0 sessions");
    assert!(store.starts_with("warn"), "{store}");
    assert!(
        store.contains(&format!("chmod 700 {}", sessions.display())),
        "{store}"
    );
    assert!(env.home.join("catalog.db").is_file());
    assert_no_probe_left(&sessions);
}

/// The write test leaves nothing in the store.
fn assert_no_probe_left(sessions: &Path) {
    let left: Vec<_> = std::fs::read_dir(sessions)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}
