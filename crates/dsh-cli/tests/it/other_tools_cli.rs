//! The files of other tools read where users keep them (issue 43, point 6;
//! docs/other-tools.md), with the real binary and the fake provider: Claude Code's
//! `.claude/commands`, `.mcp.json`, `.claude/settings.json` hooks and `.claude/skills` of an
//! untrusted workspace are named in the warning and none applies; after `dsh trust --yes` the
//! command runs through ACP, the `.mcp.json` server's tools are offered (the real
//! `mcp-server-everything`, skipped with a message when absent), the hook runs confined and
//! the skill is listed; a changed `.mcp.json` voids the trust; `dsh doctor` lists them.
//! Adversarial: a `.mcp.json` server that is a workspace script runs only as pinned.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::common::{dsh_command, model_stepping, output, scratch_dirs, text};
use crate::custom_commands_cli::{fake_provider, model_requests, prompt, Acp};
use dsh_test_support::SseReply;

const EVERYTHING: &str = "mcp-server-everything";

fn everything_installed() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(EVERYTHING).is_file()));
    if !found {
        eprintln!(
            "NOT RUN (the .mcp.json server part): {EVERYTHING} is not on PATH; install it with \
             `npm install -g @modelcontextprotocol/server-everything`"
        );
    }
    found
}

struct Ws {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    outside: PathBuf,
}

/// A workspace with all four kinds of Claude Code files. The hook notes that it ran in the
/// workspace, then tries to write outside it (confined, it cannot).
fn workspace(with_server: bool) -> Ws {
    let (root, [home, cwd, outside]) = scratch_dirs(["home", "ws", "outside"]);
    std::fs::create_dir_all(cwd.join(".git")).unwrap();
    std::fs::create_dir_all(cwd.join(".claude/commands")).unwrap();
    std::fs::create_dir_all(cwd.join(".claude/skills/greet")).unwrap();
    std::fs::write(
        cwd.join(".claude/commands/hello.md"),
        "---\ndescription: Greet someone\nallowed-tools: Read\ndisable-model-invocation: true\n---\nSay hello to $ARGUMENTS.\n",
    )
    .unwrap();
    std::fs::write(
        cwd.join(".claude/skills/greet/SKILL.md"),
        "---\nname: greet\ndescription: Greets people politely\n---\nSay hello.\n",
    )
    .unwrap();
    let servers = if with_server {
        json!({"everything": {"command": EVERYTHING}, "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}})
    } else {
        json!({"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}, "local": {"command": "true"}})
    };
    std::fs::write(
        cwd.join(".mcp.json"),
        json!({"mcpServers": servers}).to_string(),
    )
    .unwrap();
    let hook = format!(
        "echo hook >> hook-ran.txt; echo escaped > '{}/escaped.txt'; true",
        outside.display()
    );
    std::fs::write(
        cwd.join(".claude/settings.json"),
        json!({
            "permissions": {"allow": ["Bash(ls:*)"]},
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "true"}]}]
            }
        })
        .to_string(),
    )
    .unwrap();
    Ws {
        _root: root,
        home,
        cwd,
        outside,
    }
}

impl Ws {
    async fn run(&self, base_url: &str) -> (String, String) {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-other-tools")
            .args(["run", "--permission", "workspace-write", "go"]);
        let out = output(cmd).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        (stdout, stderr)
    }

    async fn dsh(&self, args: &[&str]) -> (String, String) {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.args(args);
        let out = output(cmd).await;
        text(&out)
    }
}

fn offered_tools(provider: &dsh_test_support::FakeProvider) -> Vec<String> {
    provider
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .flat_map(|r| {
            r.body["tools"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_files_apply_only_after_trust() {
    let server = everything_installed();
    let ws = workspace(server);
    let bash = ("bash", json!({"command": "true", "description": "noop"}));

    // Untrusted: the one warning line names every file, and nothing applies.
    let provider = model_stepping(std::slice::from_ref(&bash), SseReply::new().text("done")).await;
    let (_, stderr) = ws.run(&provider.base_url()).await;
    let warning = stderr
        .lines()
        .find(|l| l.contains("untrusted project settings"))
        .unwrap_or_else(|| panic!("{stderr}"));
    for file in [
        ".mcp.json",
        ".claude/settings.json",
        ".claude/commands/hello.md",
    ] {
        assert!(warning.contains(file), "{file}: {warning}");
    }
    assert!(
        !ws.cwd.join("hook-ran.txt").exists(),
        "an untrusted hook ran"
    );
    assert!(
        warning.contains(".claude/skills/greet/SKILL.md"),
        "{warning}"
    );
    let listed: String = provider
        .requests()
        .into_iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert!(
        !listed.contains("Greets people politely"),
        "an untrusted skill was listed"
    );
    assert!(
        !offered_tools(&provider)
            .iter()
            .any(|t| t.starts_with("mcp__")),
        "{:?}",
        offered_tools(&provider)
    );

    // The review lists what each file would apply.
    let (stdout, stderr) = ws.dsh(&["trust", "--yes"]).await;
    assert!(stdout.contains(".mcp.json would set:"), "{stdout}{stderr}");
    assert!(stdout.contains("sse"), "{stdout}");
    assert!(
        stdout.contains("PreToolUse (matcher Bash): runs `echo hook"),
        "{stdout}"
    );
    assert!(stdout.contains("/hello: Greet someone"), "{stdout}");
    assert!(
        stdout.contains("skill greet: Greets people politely"),
        "{stdout}"
    );
    assert!(stdout.contains("trusted "), "{stdout}");

    // Trusted: the hook runs, confined; the server's tools are offered; the unused parts warn.
    let provider = model_stepping(std::slice::from_ref(&bash), SseReply::new().text("done")).await;
    let (_, stderr) = ws.run(&provider.base_url()).await;
    let ran = std::fs::read_to_string(ws.cwd.join("hook-ran.txt")).unwrap_or_default();
    assert!(
        ran.contains("hook"),
        "the trusted hook did not run: {stderr}"
    );
    assert!(
        !ws.outside.join("escaped.txt").exists(),
        "a .claude/settings.json hook wrote outside the workspace"
    );
    assert!(!stderr.contains("untrusted project settings"), "{stderr}");
    assert!(
        stderr.contains("mcpServers.old") && stderr.contains("sse"),
        "{stderr}"
    );
    assert!(stderr.contains("Notification"), "{stderr}");
    assert!(stderr.contains("not used: permissions"), "{stderr}");
    let system = provider
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body["messages"].to_string())
        .collect::<String>();
    assert!(
        system.contains("Greets people politely"),
        "the .claude/skills skill is not listed"
    );
    if server {
        let tools = offered_tools(&provider);
        assert!(
            tools.iter().any(|t| t.starts_with("mcp__everything__")),
            "{tools:?} {stderr}"
        );
    }

    // The command runs through ACP with Claude Code's tool name mapped.
    let provider = fake_provider(1).await;
    let mut acp = Acp::start(&ws.home, &ws.cwd, &provider.base_url());
    let session = acp.call("session/new", json!({"cwd": ws.cwd, "mcpServers": []}));
    let id = session["sessionId"].as_str().unwrap().to_string();
    let commands = acp.available_commands();
    assert!(
        commands.iter().any(|c| c["name"] == "hello"),
        "{commands:?}"
    );
    acp.call("session/prompt", prompt(&id, "/hello world"));
    drop(acp);
    let requests = model_requests(&provider);
    let (_, tools, _) = &requests[0];
    assert_eq!(tools, &["read"]);
    let sent = provider.requests()[0].body["messages"].to_string();
    assert!(sent.contains("Say hello to world."), "{sent}");

    // A changed .mcp.json voids the trust.
    let text = std::fs::read_to_string(ws.cwd.join(".mcp.json")).unwrap();
    std::fs::write(ws.cwd.join(".mcp.json"), format!("{text}\n")).unwrap();
    std::fs::remove_file(ws.cwd.join("hook-ran.txt")).unwrap();
    let provider = model_stepping(std::slice::from_ref(&bash), SseReply::new().text("done")).await;
    let (_, stderr) = ws.run(&provider.base_url()).await;
    assert!(stderr.contains("changed since you trusted"), "{stderr}");
    assert!(!ws.cwd.join("hook-ran.txt").exists());
    assert!(!offered_tools(&provider)
        .iter()
        .any(|t| t.starts_with("mcp__")));
}

/// A `.mcp.json` server that runs a workspace script starts only with the bytes pinned by the
/// trust: rewritten afterwards (as the model could), it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mcp_json_server_script_in_the_workspace_runs_only_as_pinned() {
    let (_root, [home, cwd]) = scratch_dirs(["home", "ws"]);
    std::fs::create_dir_all(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join("srv.sh"), "echo started >> srv-ran.txt\nexit 0\n").unwrap();
    std::fs::write(
        cwd.join(".mcp.json"),
        json!({"mcpServers": {"proj": {"command": "sh", "args": ["srv.sh"]}}}).to_string(),
    )
    .unwrap();
    let run = |home: PathBuf, cwd: PathBuf| async move {
        let provider = model_stepping(&[], SseReply::new().text("done")).await;
        let mut cmd = dsh_command(&home, &cwd);
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-other-tools")
            .args(["run", "go"]);
        let out = output(cmd).await;
        text(&out).1
    };
    let mut trust = dsh_command(&home, &cwd);
    trust.args(["trust", "--yes"]);
    let (stdout, _) = text(&output(trust).await);
    assert!(
        stdout.contains(&cwd.join("srv.sh").display().to_string()),
        "the review names the pinned script: {stdout}"
    );
    // Pinned: it runs (and, no MCP server, fails its handshake with a warning).
    let stderr = run(home.clone(), cwd.clone()).await;
    assert!(cwd.join("srv-ran.txt").exists(), "{stderr}");
    std::fs::remove_file(cwd.join("srv-ran.txt")).unwrap();
    // Rewritten after trust: the trust is void (the pin covers the script) and it never runs.
    std::fs::write(cwd.join("srv.sh"), "echo evil >> srv-ran.txt\n").unwrap();
    let stderr = run(home.clone(), cwd.clone()).await;
    assert!(!cwd.join("srv-ran.txt").exists(), "{stderr}");
    assert!(stderr.contains(".mcp.json"), "{stderr}");
}

/// Without trust, `dsh doctor` names each file of another tool and why it is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_other_tools_files() {
    let ws = workspace(false);
    let (stdout, stderr) = ws.dsh(&["doctor"]).await;
    let all = format!("{stdout}{stderr}");
    for file in [".mcp.json", ".claude/settings.json", ".claude/commands"] {
        assert!(all.contains(file), "{file}: {all}");
    }
    let line = |all: &str| {
        all.lines()
            .find(|l| l.split_whitespace().nth(1) == Some("other"))
            .unwrap_or_else(|| panic!("no `other` line: {all}"))
            .to_string()
    };
    let untrusted = line(&all);
    assert!(
        untrusted.contains("not used, the workspace is not trusted"),
        "{untrusted}"
    );
    assert!(
        untrusted.contains("1 .claude/skills skill(s)"),
        "{untrusted}"
    );
    // Trusted: used, and what is not used says why (the SSE server).
    let (stdout, stderr) = ws.dsh(&["trust", "--yes"]).await;
    assert!(!stdout.is_empty(), "{stderr}");
    let (stdout, stderr) = ws.dsh(&["doctor"]).await;
    let trusted = line(&format!("{stdout}{stderr}"));
    assert!(
        trusted.contains("found and used:") && trusted.contains("old"),
        "{trusted}"
    );
    let _: &Path = &ws.cwd;
}

/// Runs `cmd`, killed if it is still running after 60 seconds (`None`): a planted FIFO must
/// not leave a hung dsh behind when this test fails.
async fn finished(cmd: std::process::Command) -> Option<std::process::Output> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .ok()
        .map(|out| out.expect("dsh runs"))
}

/// Project files read before the user trusted anything (adversarial review of issue 43): a
/// `.env` that is a FIFO, a `.mcp.json` of 64 MiB (sparse: a repository unpacked from an
/// archive can hold one, and a link to `/proc/kmsg` never ends), a `.claude/settings.json`
/// that is a link to a file outside the project. Each is named in a warning and never read:
/// `dsh trust --yes` finishes, and pins nothing of them, so the outside file's hook does not
/// run after it. Before, `dsh trust` waited on the FIFO for ever, the 64 MiB were read whole,
/// and the linked settings were pinned and their hook ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_links_fifos_and_huge_files_are_never_read() {
    let (_root, [home, cwd, outside]) = scratch_dirs(["home", "ws", "outside"]);
    std::fs::create_dir_all(cwd.join(".git")).unwrap();
    std::fs::create_dir_all(cwd.join(".claude")).unwrap();
    let fifo = std::ffi::CString::new(cwd.join(".env").as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::fs::File::create(cwd.join(".mcp.json"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let settings = outside.join("settings.json");
    std::fs::write(
        &settings,
        json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [
            {"type": "command", "command": "echo hook >> hook-ran.txt"}
        ]}]}})
        .to_string(),
    )
    .unwrap();
    std::os::unix::fs::symlink(&settings, cwd.join(".claude/settings.json")).unwrap();

    let mut trust = dsh_command(&home, &cwd);
    trust.args(["trust", "--yes"]);
    let out = finished(trust)
        .await
        .expect("dsh trust hung on the planted .env");
    assert!(out.status.success(), "{}", text(&out).1);

    let provider = model_stepping(
        &[("bash", json!({"command": "true", "description": "noop"}))],
        SseReply::new().text("done"),
    )
    .await;
    let mut run = dsh_command(&home, &cwd);
    run.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-other-tools")
        .args(["run", "--permission", "workspace-write", "go"]);
    let out = finished(run).await.expect("dsh run hung");
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(".mcp.json not read: it is larger than 1024 KiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("settings.json not read: it leads to"),
        "{stderr}"
    );
    assert!(
        stderr.contains(".env ignored: it is not a regular file"),
        "{stderr}"
    );
    assert!(
        !cwd.join("hook-ran.txt").exists(),
        "the hook of a settings file outside the project ran"
    );
}
