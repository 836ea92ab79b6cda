//! `dsh mcp add|list|get|remove` with the real binary and a temporary DSH_HOME: a round trip
//! against the real `mcp-server-everything` (stdio; skipped with a message when it is not on
//! PATH), a broken server's error in `list`, an HTTP server added with `--url`, the file's
//! comments kept, duplicates and secret-looking headers refused, and a project's server left to
//! its own file. Nothing here talks to the internet.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{dsh_command, output, text};

const EVERYTHING: &str = "mcp-server-everything";

fn everything_installed() -> bool {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(EVERYTHING).is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!(
            "skipped: `{EVERYTHING}` is not on PATH; install it with \
             `npm install -g @modelcontextprotocol/server-everything`"
        );
    }
    found
}

pub(crate) struct Env {
    _root: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) cwd: PathBuf,
}

impl Env {
    pub(crate) fn new() -> Env {
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

    pub(crate) fn config(&self) -> PathBuf {
        self.home.join("config.toml")
    }

    /// `dsh mcp ARGS`, to its end.
    pub(crate) async fn mcp(&self, args: &[&str]) -> Output {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.arg("mcp").args(args);
        output(cmd).await
    }
}

/// Stdout and stderr of a run that succeeded.
fn ok(out: &Output) -> (String, String) {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "failed:\n{stdout}\n{stderr}");
    (stdout, stderr)
}

/// Stderr of a run that failed.
fn failed(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(!out.status.success(), "succeeded:\n{stdout}\n{stderr}");
    stderr
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn add_list_get_remove_round_trip_with_server_everything() {
    if !everything_installed() {
        return;
    }
    let env = Env::new();
    let out = env
        .mcp(&[
            "add",
            "ev",
            "--env",
            "LOG_LEVEL=quiet-value",
            "--",
            EVERYTHING,
        ])
        .await;
    let (stdout, _) = ok(&out);
    assert!(stdout.contains("added MCP server `ev`"), "{stdout}");
    // Created owner-only, and it loads as written.
    assert_eq!(mode(&env.config()), 0o600);
    let written = std::fs::read_to_string(env.config()).unwrap();
    assert!(written.contains("[mcp.servers.ev]"), "{written}");

    let (stdout, _) = ok(&env.mcp(&["list"]).await);
    let line = stdout.lines().find(|l| l.starts_with("ev ")).unwrap();
    assert!(
        line.contains("(user)") && line.contains(EVERYTHING),
        "{line}"
    );
    assert!(line.contains(": ok,") && line.contains("echo"), "{line}");

    let (stdout, _) = ok(&env.mcp(&["list", "--json"]).await);
    let list: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(list[0]["name"], "ev");
    assert_eq!(list[0]["layer"], "user");
    assert_eq!(list[0]["status"], "ok");

    let (stdout, _) = ok(&env.mcp(&["get", "ev"]).await);
    assert!(stdout.contains("layer: user"), "{stdout}");
    assert!(stdout.contains("env: LOG_LEVEL=<redacted>"), "{stdout}");
    assert!(!stdout.contains("quiet-value"), "{stdout}");
    assert!(stdout.contains("echo  Echoes back"), "{stdout}");
    let (stdout, _) = ok(&env.mcp(&["get", "ev", "--json"]).await);
    let get: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(get["env"]["LOG_LEVEL"], "<redacted>");
    let echo = get["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap();
    assert!(echo["description"].as_str().unwrap().contains("Echo"));
    assert!(!stdout.contains("quiet-value"), "{stdout}");

    let (stdout, _) = ok(&env.mcp(&["remove", "ev"]).await);
    assert!(stdout.contains("removed MCP server `ev`"), "{stdout}");
    let (stdout, _) = ok(&env.mcp(&["list"]).await);
    assert!(stdout.contains("no MCP servers configured"), "{stdout}");
    let stderr = failed(&env.mcp(&["remove", "ev"]).await);
    assert!(
        stderr.contains("no MCP server `ev`")
            && stderr.contains(&env.config().display().to_string()),
        "{stderr}"
    );
}

/// A server that cannot start is listed with its name, its command and what failed, in words
/// (no Rust type names); a second, working one is listed beside it.
#[tokio::test]
async fn a_broken_server_is_listed_with_its_error() {
    let env = Env::new();
    ok(&env
        .mcp(&[
            "add",
            "ghost",
            "--",
            "/nonexistent/dsh-no-such-mcp-server",
            "--flag",
        ])
        .await);
    // A closed port on loopback: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    ok(&env
        .mcp(&["add", "web", "--url", &url, "--header", "X-Team:platform"])
        .await);
    let (stdout, _) = ok(&env.mcp(&["list"]).await);
    let ghost = stdout.lines().find(|l| l.starts_with("ghost ")).unwrap();
    assert!(
        ghost.contains("/nonexistent/dsh-no-such-mcp-server --flag")
            && ghost.contains("failed: cannot start"),
        "{ghost}"
    );
    let web = stdout.lines().find(|l| l.starts_with("web ")).unwrap();
    assert!(web.contains(&url) && web.contains("failed:"), "{web}");
    assert!(!stdout.contains("::"), "a Rust path in:\n{stdout}");

    let (stdout, _) = ok(&env.mcp(&["list", "--json"]).await);
    let list: Value = serde_json::from_str(&stdout).unwrap();
    let web = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "web")
        .unwrap();
    assert_eq!(web["transport"], "http");
    assert_eq!(web["url"], url.as_str());
    assert_eq!(web["status"], "error");
    assert_eq!(web["headers"]["X-Team"], "<redacted>");
    assert!(!stdout.contains("platform"), "{stdout}");
}

/// The user's comments and layout survive an add and a remove; a duplicate name and a header
/// that looks like a secret are refused without touching the file.
#[tokio::test]
async fn the_file_keeps_its_comments_and_refusals_change_nothing() {
    let env = Env::new();
    let original = "# my settings\nmodel = \"deepseek-v4-flash\"   # the cheap one\n\n\
                    [mcp.servers.first]  # kept\ncommand = \"first-server\"\n";
    std::fs::write(env.config(), original).unwrap();
    ok(&env
        .mcp(&[
            "add",
            "second",
            "--env-var",
            "GITHUB_TOKEN",
            "--",
            "second-server",
            "-v",
        ])
        .await);
    let written = std::fs::read_to_string(env.config()).unwrap();
    assert!(written.starts_with(original), "{written}");
    assert!(
        written.ends_with(
            "\n[mcp.servers.second]\ncommand = \"second-server\"\nargs = [\"-v\"]\nenv_vars = [\"GITHUB_TOKEN\"]\n"
        ),
        "{written}"
    );

    let refusals: [(&[&str], &str); 5] = [
        (&["add", "first", "--", "other"], "--force"),
        (
            &[
                "add",
                "api",
                "--url",
                "https://example.test/mcp",
                "--header",
                "Authorization: Bearer abc",
            ],
            "--bearer-token-env",
        ),
        (
            &[
                "add",
                "api",
                "--url",
                "https://example.test/mcp",
                "--header",
                "X-Api-Key:abc",
            ],
            "--bearer-token-env",
        ),
        (
            &["add", "tool", "--env", "GITHUB_TOKEN=abc", "--", "x"],
            "--env-var GITHUB_TOKEN",
        ),
        (&["add", "bad__name", "--", "x"], "not a usable server name"),
    ];
    for (args, says) in refusals {
        let stderr = failed(&env.mcp(args).await);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("abc"), "the value was quoted: {stderr}");
        assert_eq!(
            std::fs::read_to_string(env.config()).unwrap(),
            written,
            "{args:?}"
        );
    }

    // --force replaces the entry in place, keeping its comment.
    ok(&env
        .mcp(&["add", "first", "--force", "--", "new-first"])
        .await);
    let forced = std::fs::read_to_string(env.config()).unwrap();
    assert!(
        forced.contains("[mcp.servers.first]  # kept\ncommand = \"new-first\"\n"),
        "{forced}"
    );

    ok(&env.mcp(&["remove", "second"]).await);
    let removed = std::fs::read_to_string(env.config()).unwrap();
    assert_eq!(removed, original.replace("first-server", "new-first"));
}

/// A server only the project defines is not removed; the message names the project's file.
#[tokio::test]
async fn remove_leaves_a_project_server_to_its_file() {
    let env = Env::new();
    let project = env.cwd.join(".dsh").join("config.toml");
    std::fs::create_dir_all(project.parent().unwrap()).unwrap();
    std::fs::write(&project, "[mcp.servers.proj]\ncommand = \"proj-server\"\n").unwrap();
    let stderr = failed(&env.mcp(&["remove", "proj"]).await);
    assert!(
        stderr.contains(&project.display().to_string()) && stderr.contains("by hand"),
        "{stderr}"
    );
    assert!(!env.config().exists());
}

/// `dsh mcp --help` says where servers are written and that project servers are not.
#[tokio::test]
async fn help_names_the_user_file_and_the_project_rule() {
    let env = Env::new();
    let (stdout, _) = ok(&env.mcp(&["--help"]).await);
    for needle in [
        "$DSH_HOME/config.toml",
        "dsh trust",
        "add",
        "list",
        "get",
        "remove",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
}

/// Runs `dsh mcp login NAME --no-browser` and plays the browser: reads the authorization URL
/// it prints, follows the authorization server's redirect to dsh's loopback listener.
async fn login(env: &Env, name: &str) -> Output {
    use tokio::io::AsyncBufReadExt;
    let mut cmd = dsh_command(&env.home, &env.cwd);
    cmd.args(["mcp", "login", name, "--no-browser", "--timeout", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let link = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), stderr.next_line())
            .await
            .expect("no authorization URL within 30 s")
            .unwrap()
            .unwrap_or_else(|| panic!("dsh ended without an authorization URL:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if let Some(link) = line
            .trim()
            .strip_prefix("http://")
            .filter(|l| l.contains("/authorize?"))
        {
            break format!("http://{link}");
        }
    };
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = browser.get(&link).send().await.unwrap();
    assert_eq!(answer.status(), 302, "{link}");
    let back = answer.headers()["location"].to_str().unwrap().to_string();
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    let page = browser.get(&back).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let mut rest = String::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        rest.push_str(&line);
    }
    let mut out = tokio::time::timeout(crate::common::DSH_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    out.stderr = format!("{seen}{rest}").into_bytes();
    out
}

/// The line of `dsh mcp list` for `name`.
async fn list_line(env: &Env, name: &str) -> String {
    let (stdout, _) = ok(&env.mcp(&["list"]).await);
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"))
        .to_string()
}

/// OAuth against a local authorization server: `list` says to log in; `login` registers,
/// authorizes with PKCE and stores the tokens 0600 (never in config.toml); a session calls the
/// server's tool with the token; a refused or expired token is refreshed; a server re-pointed
/// to another origin gets no token; `logout` deletes the tokens.
#[tokio::test]
async fn oauth_login_refresh_origin_binding_and_logout() {
    use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
    let server = crate::oauth_server::OAuthServer::start().await;
    let env = Env::new();
    ok(&env
        .mcp(&["add", "secure", "--url", &server.mcp_url()])
        .await);
    let line = list_line(&env, "secure").await;
    assert!(
        line.contains("needs login (run `dsh mcp login secure`)"),
        "{line}"
    );

    let out = login(&env, "secure").await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("logged in to MCP server `secure`"),
        "{stdout}"
    );
    let tokens = env.home.join("mcp-auth").join("secure.json");
    assert_eq!(mode(&tokens), 0o600);
    assert_eq!(mode(tokens.parent().unwrap()), 0o700);
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&tokens).unwrap()).unwrap();
    let first = stored["access_token"].as_str().unwrap().to_string();
    assert!(server.valid_tokens().contains(&first));
    let config = std::fs::read_to_string(env.config()).unwrap();
    assert!(
        !config.contains(&first) && !config.contains("rt-"),
        "{config}"
    );
    assert!(!stdout.contains(&first) && !stderr.contains(&first));

    let line = list_line(&env, "secure").await;
    assert!(line.contains(": ok, 1 tools: whoami"), "{line}");
    let (stdout, _) = ok(&env.mcp(&["get", "secure"]).await);
    assert!(stdout.contains("oauth: logged in"), "{stdout}");
    assert!(!stdout.contains(&first), "{stdout}");

    // A session calls the tool; the server sees the token on the call.
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_1", "mcp__secure__whoami", "{}")
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("the server answered")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let mut cmd = dsh_command(&env.home, &env.cwd);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test-oauth")
        .args(["run", "ask the server who I am"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("the server answered"), "{stdout}");
    let calls: Vec<_> = server
        .mcp_requests()
        .into_iter()
        .filter(|r| r.rpc.as_deref() == Some("tools/call"))
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].token.as_deref(), Some(first.as_str()));
    let requests = provider.requests();
    let second = requests[1].body.to_string();
    assert!(
        second.contains("hello, holder of a valid token"),
        "{second}"
    );
    // The stored token is a secret of the session: the echo reached the model redacted.
    assert!(
        !second.contains(&first),
        "the model saw the token: {second}"
    );
    assert!(second.contains("[REDACTED:mcp-login:secure]"), "{second}");
    assert!(
        !std::fs::read_to_string(crate::common::session_file(&env.home))
            .unwrap()
            .contains(&first),
        "the token reached the session log"
    );

    // The server refuses the token (401): refreshed once, stored, and the list works.
    server.revoke_access();
    let line = list_line(&env, "secure").await;
    assert!(line.contains(": ok,"), "{line}");
    assert_eq!(server.refreshes(), 1);
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&tokens).unwrap()).unwrap();
    let second_token = stored["access_token"].as_str().unwrap().to_string();
    assert_ne!(second_token, first);
    assert!(server.valid_tokens().contains(&second_token));
    assert_eq!(mode(&tokens), 0o600);

    // An expired token is refreshed before it is sent.
    let mut expired = stored.clone();
    expired["expires_at"] = 1.into();
    std::fs::write(&tokens, expired.to_string()).unwrap();
    let before = server.mcp_requests().len();
    let line = list_line(&env, "secure").await;
    assert!(line.contains(": ok,"), "{line}");
    assert_eq!(server.refreshes(), 2);
    assert!(
        server.mcp_requests()[before..]
            .iter()
            .all(|r| r.token.as_deref() != Some(second_token.as_str())),
        "the expired token was sent"
    );

    // A token refreshed during a session (the stored one is refused when the session first
    // calls) is not in the redaction set the session started with: the hub hides it from
    // the results of the server that echoes it.
    server.revoke_access();
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_1", "mcp__secure__whoami", "{}")
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("done")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let mut cmd = dsh_command(&env.home, &env.cwd);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test-oauth")
        .args(["run", "ask again"]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&tokens).unwrap()).unwrap();
    let refreshed = stored["access_token"].as_str().unwrap().to_string();
    assert_eq!(server.refreshes(), 3);
    let sent = provider.requests()[1].body.to_string();
    assert!(
        !sent.contains(&refreshed),
        "the refreshed token reached the model: {sent}"
    );
    assert!(sent.contains("[REDACTED:mcp-login:secure]"), "{sent}");

    // Another origin (here the same listener under another host name) gets no token.
    let moved = server.mcp_url().replace("127.0.0.1", "localhost");
    ok(&env
        .mcp(&["add", "secure", "--force", "--url", &moved])
        .await);
    let before = server.mcp_requests().len();
    let line = list_line(&env, "secure").await;
    assert!(
        line.contains("needs login") && line.contains("another address"),
        "{line}"
    );
    let after = server.mcp_requests();
    assert!(after.len() > before, "the moved server was not asked");
    assert!(
        after[before..].iter().all(|r| r.token.is_none()),
        "a token went to another origin: {:?}",
        &after[before..]
    );

    // Logout deletes the tokens; the server asks for a login again.
    ok(&env
        .mcp(&["add", "secure", "--force", "--url", &server.mcp_url()])
        .await);
    let (stdout, _) = ok(&env.mcp(&["logout", "secure"]).await);
    assert!(stdout.contains("logged out"), "{stdout}");
    assert!(!tokens.exists());
    let line = list_line(&env, "secure").await;
    assert!(
        line.contains("needs login (run `dsh mcp login secure`)"),
        "{line}"
    );
}

/// `dsh mcp import` (issue 43, point 6): Codex's and Claude Code's servers copied into the
/// user's config through `add`'s checks: a secret header is refused (and never printed), a
/// disabled or SSE server skipped with the reason, settings dsh does not take named, an
/// existing name kept unless --force, the source never written; --dry-run writes nothing.
#[tokio::test]
async fn servers_of_codex_and_claude_code_are_imported_through_adds_checks() {
    let env = Env::new();
    let codex = env.home.parent().unwrap().join("codex.toml");
    let source = "model = \"gpt-5\"\n\
        [mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server-filesystem\"]\n\
        env = { LOG_LEVEL = \"info\" }\nstartup_timeout_sec = 20\n\
        [mcp_servers.docs]\nurl = \"https://docs.example/mcp\"\nbearer_token_env_var = \"DOCS_TOKEN\"\n\
        [mcp_servers.leaky]\nurl = \"https://leak.example/mcp\"\n\
        http_headers = { Authorization = \"Bearer sk-never-printed-123\" }\n\
        [mcp_servers.off]\ncommand = \"x\"\nenabled = false\n";
    std::fs::write(&codex, source).unwrap();
    let file = codex.display().to_string();
    let (stdout, _) = ok(&env.mcp(&["import", "--file", &file, "--dry-run"]).await);
    assert!(
        stdout.contains("would import files (not taken: startup_timeout_sec)"),
        "{stdout}"
    );
    assert!(!env.config().exists(), "--dry-run wrote the config");
    let (stdout, stderr) = ok(&env.mcp(&["import", "--file", &file]).await);
    for expected in [
        "imported docs",
        "imported files",
        "skipped leaky: INVALID_ARGS: header `Authorization` looks like a secret",
        "skipped off: disabled there",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
    assert!(!format!("{stdout}{stderr}").contains("sk-never-printed"));
    let config = std::fs::read_to_string(env.config()).unwrap();
    assert!(
        config.contains("bearer_token_env = \"DOCS_TOKEN\""),
        "{config}"
    );
    assert!(config.contains("LOG_LEVEL"), "{config}");
    assert!(!config.contains("leak.example"), "{config}");
    assert_eq!(
        std::fs::read_to_string(&codex).unwrap(),
        source,
        "the source changed"
    );
    assert_eq!(mode(&env.config()), 0o600);
    let (stdout, _) = ok(&env.mcp(&["import", "--file", &file]).await);
    assert!(
        stdout.contains("skipped docs:") && stdout.contains("--force"),
        "{stdout}"
    );
    let (stdout, _) = ok(&env.mcp(&["import", "--file", &file, "--force"]).await);
    assert!(stdout.contains("imported docs"), "{stdout}");

    // Claude Code's user file: stdio and HTTP servers; SSE is not spoken.
    let claude = env.home.parent().unwrap().join("claude.json");
    std::fs::write(
        &claude,
        serde_json::json!({"mcpServers": {
            "memory": {"type": "stdio", "command": "npx", "args": ["-y", "server-memory"]},
            "web": {"type": "http", "url": "https://web.example/mcp"},
            "old": {"type": "sse", "url": "https://old.example/sse"},
        }})
        .to_string(),
    )
    .unwrap();
    let path = claude.display().to_string();
    let (stdout, _) = ok(&env
        .mcp(&["import", "--from", "claude", "--file", &path])
        .await);
    assert!(
        stdout.contains("imported memory") && stdout.contains("imported web"),
        "{stdout}"
    );
    assert!(stdout.contains("skipped old: an SSE server"), "{stdout}");
    let out = env
        .mcp(&["import", "--file", "/nonexistent/config.toml"])
        .await;
    assert!(failed(&out).contains("IMPORT"), "{}", text(&out).1);
}
