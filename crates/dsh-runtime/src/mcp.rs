//! MCP in composition (docs/mcp.md): the configured servers as `dsh-mcp` takes them, the
//! configuration's script gate as the hub's command gate, and the hub's tools as an agent
//! extension. Here, so `dsh-mcp` depends on neither the configuration nor the agent
//! (docs/ARCHITECTURE.md, "dsh-mcp").

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use dsh_agent::{Extension, ToolCallInfo, ToolVerdict};
use dsh_config::scripts::ScriptGate;
use dsh_config::{McpServerConfig, McpTransport, McpTrust};
use dsh_mcp::{CommandGate, McpHub, McpTools};
use dsh_tools::Tool;

/// One configured MCP server as [`crate::Runtime::check_mcp`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerCheck {
    /// The server's name (`[mcp.servers.<name>]`).
    pub name: String,
    /// The project's configuration defined it (it runs confined, docs/mcp.md).
    pub from_project: bool,
    /// The tools it listed once started, or why it did not start (every loaded secret
    /// redacted).
    pub outcome: Result<Vec<McpToolCheck>, String>,
}

/// One tool a started server listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpToolCheck {
    /// The tool's name as the server gives it (offered as `mcp__<server>__<name>`).
    pub name: String,
    /// The server's description of it, if any.
    pub description: Option<String>,
}

/// A configured server as the hub takes it.
pub(crate) fn server(config: &McpServerConfig) -> dsh_mcp::McpServerConfig {
    let transport = match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            env_vars,
            cwd,
        } => dsh_mcp::McpTransport::Stdio {
            command: command.clone(),
            args: args.clone(),
            env: env.clone(),
            env_vars: env_vars.clone(),
            cwd: cwd.clone(),
        },
        McpTransport::Http {
            url,
            headers,
            bearer_token_env,
        } => dsh_mcp::McpTransport::Http {
            url: url.clone(),
            headers: headers.clone(),
            bearer_token_env: bearer_token_env.clone(),
        },
    };
    dsh_mcp::McpServerConfig {
        name: config.name.clone(),
        transport,
        tool_timeout: config.tool_timeout,
        startup_timeout: config.startup_timeout,
        trust: match config.trust {
            McpTrust::None => dsh_mcp::McpTrust::None,
            McpTrust::ReadOnly => dsh_mcp::McpTrust::ReadOnly,
            McpTrust::All => dsh_mcp::McpTrust::All,
        },
        from_project: config.from_project,
    }
}

/// The configuration's script gate as the gate a stdio server's command passes (docs/mcp.md,
/// "Servers in the workspace are pinned").
pub(crate) struct Pinned(pub(crate) ScriptGate);

impl CommandGate for Pinned {
    fn check_argv(&self, program: &str, args: &[String], cwd: &Path) -> Result<(), String> {
        self.0.check_argv(program, args, cwd)
    }

    fn command_path(&self) -> Option<OsString> {
        self.0.command_path()
    }
}

/// The extension that offers the hub's tools and asks before the calls their policy names
/// (docs/mcp.md, "Approvals").
pub(crate) struct McpExtension(McpTools);

impl McpExtension {
    pub(crate) fn new(hub: Arc<McpHub>) -> Arc<McpExtension> {
        Arc::new(McpExtension(McpTools::new(hub)))
    }
}

impl Extension for McpExtension {
    fn name(&self) -> &str {
        "mcp"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.tools()
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        match self.0.approval(&call.name, call.preset) {
            Some(reason) => ToolVerdict::Ask {
                reason,
                escalation: None,
            },
            None => ToolVerdict::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_configured_server_keeps_every_field() {
        let config = McpServerConfig {
            name: "fs".into(),
            transport: McpTransport::Stdio {
                command: "mcp-fs".into(),
                args: vec!["--root".into(), ".".into()],
                env: vec![("A".into(), "1".into())],
                env_vars: vec!["TOKEN".into()],
                cwd: Some("/tmp".into()),
            },
            tool_timeout: Duration::from_secs(7),
            startup_timeout: Duration::from_secs(9),
            trust: McpTrust::All,
            from_project: true,
        };
        let given = server(&config);
        assert_eq!(given.name, "fs");
        assert_eq!(
            given.transport,
            dsh_mcp::McpTransport::Stdio {
                command: "mcp-fs".into(),
                args: vec!["--root".into(), ".".into()],
                env: vec![("A".into(), "1".into())],
                env_vars: vec!["TOKEN".into()],
                cwd: Some("/tmp".into()),
            }
        );
        assert_eq!(
            (given.tool_timeout, given.startup_timeout),
            (Duration::from_secs(7), Duration::from_secs(9))
        );
        assert_eq!(given.trust, dsh_mcp::McpTrust::All);
        assert!(given.from_project);
        let http = McpServerConfig {
            transport: McpTransport::Http {
                url: "http://127.0.0.1:3001/mcp".into(),
                headers: vec![("X".into(), "y".into())],
                bearer_token_env: Some("T".into()),
            },
            trust: McpTrust::None,
            ..config
        };
        let given = server(&http);
        assert_eq!(
            given.transport,
            dsh_mcp::McpTransport::Http {
                url: "http://127.0.0.1:3001/mcp".into(),
                headers: vec![("X".into(), "y".into())],
                bearer_token_env: Some("T".into()),
            }
        );
        assert_eq!(given.trust, dsh_mcp::McpTrust::None);
    }
}
