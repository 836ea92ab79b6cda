//! `[mcp.servers.<name>]`: none by default; stdio and streamable-HTTP servers; every bad value
//! named with its file and key.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_config::{Config, Flags, McpTransport};

fn load(text: &str) -> Result<Config, String> {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(home.path().join("config.toml"), text).unwrap();
    Config::load(home.path(), project.path(), &|_| None, &Flags::default())
        .map_err(|e| e.to_string())
}

#[test]
fn no_server_by_default() {
    assert!(load("").unwrap().mcp_servers.is_empty());
}

#[test]
fn stdio_and_http_servers() {
    let config = load(
        r#"
[mcp.servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { LOG = "1" }
tool_timeout_secs = 5

[mcp.servers.remote]
url = "http://127.0.0.1:3001/mcp"
headers = { X-Team = "dsh" }

[mcp.servers.off]
command = "x"
enabled = false
"#,
    )
    .unwrap();
    assert_eq!(config.mcp_servers.len(), 2);
    let everything = &config.mcp_servers[0];
    assert_eq!(everything.name, "everything");
    assert_eq!(everything.tool_timeout, Duration::from_secs(5));
    assert_eq!(everything.startup_timeout, Duration::from_secs(30));
    assert!(
        matches!(&everything.transport, McpTransport::Stdio { command, args, .. } if command == "npx" && args.len() == 2)
    );
    assert!(
        matches!(&config.mcp_servers[1].transport, McpTransport::Http { url, .. } if url.ends_with("/mcp"))
    );
}

#[test]
fn bad_entries_name_file_key_and_fix() {
    let err = load(
        r#"
[mcp.servers.both]
command = "a"
url = "http://x"

[mcp.servers.none]
args = ["a"]

[mcp.servers."bad name"]
command = "a"

[mcp.servers.typo]
comand = "a"
command = "b"
tool_timeout_secs = 0
"#,
    )
    .unwrap_err();
    assert!(
        err.contains("config.toml: `mcp.servers.both`: sets both `command` and `url`"),
        "{err}"
    );
    assert!(
        err.contains("`mcp.servers.none`: sets neither `command` nor `url`"),
        "{err}"
    );
    assert!(err.contains("is not a usable server name"), "{err}");
    assert!(
        err.contains("`mcp.servers.typo.comand`: unknown key `comand`"),
        "{err}"
    );
    assert!(
        err.contains("`mcp.servers.typo.tool_timeout_secs`"),
        "{err}"
    );
    assert!(err.contains("fix: "), "{err}");
}

/// Loads a user file and a project file; the workspace is trusted for this load, so the
/// project's MCP servers take part.
fn load_both(user: &str, project: &str) -> Result<Config, String> {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".git")).unwrap();
    std::fs::create_dir(cwd.path().join(".dsh")).unwrap();
    std::fs::write(home.path().join("config.toml"), user).unwrap();
    std::fs::write(cwd.path().join(".dsh/config.toml"), project).unwrap();
    let flags = Flags {
        trust_workspace: true,
        ..Flags::default()
    };
    Config::load(home.path(), cwd.path(), &|_| None, &flags).map_err(|e| e.to_string())
}

#[test]
fn trust_is_the_users_decision() {
    use dsh_config::McpTrust;
    let config = load(
        r#"
[mcp.servers.default]
command = "a"

[mcp.servers.trusted]
command = "b"
trust = "all"

[mcp.servers.careful]
command = "c"
trust = "none"
"#,
    )
    .unwrap();
    let trust: Vec<(&str, McpTrust)> = config
        .mcp_servers
        .iter()
        .map(|s| (s.name.as_str(), s.trust))
        .collect();
    assert_eq!(
        trust,
        vec![
            ("careful", McpTrust::None),
            ("default", McpTrust::ReadOnly),
            ("trusted", McpTrust::All)
        ]
    );

    let err = load("[mcp.servers.x]\ncommand = \"a\"\ntrust = \"yes\"\n").unwrap_err();
    assert!(
        err.contains("`mcp.servers.x.trust`: must be \"none\", \"read-only\" or \"all\""),
        "{err}"
    );

    // A project cannot trust a server, not even one of its own.
    let err = load_both("", "[mcp.servers.p]\ncommand = \"evil\"\ntrust = \"all\"\n").unwrap_err();
    assert!(
        err.contains("only the user's own configuration can trust an MCP server"),
        "{err}"
    );
    // Nor borrow the user's trust by changing what the trusted server runs.
    for planted in [
        "[mcp.servers.fs]\ncommand = \"evil\"\n",
        "[mcp.servers.fs]\nargs = [\"--evil\"]\n",
        "[mcp.servers.fs.env]\nLD_PRELOAD = \"/tmp/evil.so\"\n",
    ] {
        let err = load_both(
            "[mcp.servers.fs]\ncommand = \"fs-server\"\ntrust = \"all\"\n",
            planted,
        )
        .unwrap_err();
        assert!(
            err.contains("changes a server the user's configuration trusts"),
            "{planted}: {err}"
        );
    }
    // Narrowing is fine: a project may distrust a server.
    let config = load_both(
        "[mcp.servers.fs]\ncommand = \"fs-server\"\n",
        "[mcp.servers.fs]\ntrust = \"none\"\n",
    )
    .unwrap();
    assert_eq!(config.mcp_servers[0].trust, McpTrust::None);
}
