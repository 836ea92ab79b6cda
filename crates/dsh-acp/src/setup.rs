//! What `session/new` and `session/load` bring besides the working directory: the editor's MCP
//! servers, extra directories (refused), the authentication error for a missing key, and the
//! workspace-trust question (docs/acp.md).

use dsh_agent::AgentError;
use dsh_runtime::{
    McpServerConfig, McpTransport, McpTrust, RuntimeError, TrustQuestion,
    DEFAULT_MCP_STARTUP_TIMEOUT, DEFAULT_MCP_TOOL_TIMEOUT,
};
use dsh_session::SessionError;
use serde_json::{json, Value};

use crate::rpc::{RpcError, AUTH_REQUIRED, INVALID_PARAMS, RESOURCE_NOT_FOUND};

/// Option id of "trust the project settings at the pin shown".
pub const TRUST_WORKSPACE: &str = "trust";
/// Option id of "not now": the project settings stay ignored.
pub const TRUST_NOT_NOW: &str = "not_now";

/// The authentication methods `initialize` advertises: the provider key is read from the
/// environment `dsh acp` starts in (or `$DSH_HOME/.env`); dsh has no login of its own.
pub(crate) fn auth_methods() -> Value {
    json!([{
        "id": "deepseek-api-key",
        "name": "DeepSeek API key",
        "description": "Set DEEPSEEK_API_KEY in the environment the editor starts `dsh acp` with \
                        (or write DEEPSEEK_API_KEY=... into $DSH_HOME/.env), then open a new \
                        session. Other providers read the variable named by `api_key_env` in \
                        $DSH_HOME/config.toml.",
        "_meta": {"dsh": {"envVar": "DEEPSEEK_API_KEY"}},
    }])
}

/// The answer to a session that could not be opened: ACP's authentication error (with the
/// auth methods) for a missing key, "resource not found" for a session id that names no
/// session, else an internal error carrying `CODE: message`.
pub(crate) fn open_error(err: &RuntimeError) -> RpcError {
    match err {
        RuntimeError::MissingCredential(_) => RpcError::new(
            AUTH_REQUIRED,
            format!("Authentication required: {}", err.describe()),
        )
        .with_data(json!({"authMethods": auth_methods()})),
        RuntimeError::NotFound(_)
        | RuntimeError::Session(SessionError::NotFound(_))
        | RuntimeError::Agent(AgentError::Session(SessionError::NotFound(_))) => RpcError::new(
            RESOURCE_NOT_FOUND,
            format!("Resource not found: {}", not_found_message(err)),
        ),
        _ => RpcError::internal(err.describe()),
    }
}

/// The store's own sentence for a missing session, without the wrapping of the layers above.
fn not_found_message(err: &RuntimeError) -> String {
    match err {
        RuntimeError::Agent(AgentError::Session(inner)) => inner.to_string(),
        other => other.to_string(),
    }
}

fn string_field<'a>(server: &'a Value, key: &str, index: usize) -> Result<&'a str, RpcError> {
    server.get(key).and_then(Value::as_str).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "mcpServers[{index}]: `{key}` (a string) is required"
        ))
    })
}

/// `[{name, value}]` pairs (`env` of a stdio server, `headers` of an HTTP one).
fn pairs(server: &Value, key: &str, index: usize) -> Result<Vec<(String, String)>, RpcError> {
    let Some(items) = server.get(key).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = items.as_array().ok_or_else(|| {
        RpcError::invalid_params(format!(
            "mcpServers[{index}]: `{key}` must be an array of {{name, value}}"
        ))
    })?;
    items
        .iter()
        .map(|item| {
            match (
                item.get("name").and_then(Value::as_str),
                item.get("value").and_then(Value::as_str),
            ) {
                (Some(name), Some(value)) => Ok((name.to_string(), value.to_string())),
                _ => Err(RpcError::invalid_params(format!(
                    "mcpServers[{index}]: every `{key}` entry needs `name` and `value` strings"
                ))),
            }
        })
        .collect()
}

/// The editor's `mcpServers` as server configurations of this session: `stdio` (no `type`)
/// and `http` servers; `sse` is refused (`mcpCapabilities.sse` is false). Servers the editor
/// names are the user's own choice, so they get the default trust of a user's server.
pub(crate) fn mcp_servers(params: &Value) -> Result<Vec<McpServerConfig>, RpcError> {
    let Some(list) = params.get("mcpServers").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| RpcError::invalid_params("`mcpServers` must be an array"))?;
    let mut servers: Vec<McpServerConfig> = Vec::new();
    for (index, server) in list.iter().enumerate() {
        let name = string_field(server, "name", index)?;
        if name.is_empty() || servers.iter().any(|s| s.name == name) {
            return Err(RpcError::invalid_params(format!(
                "mcpServers[{index}]: the name `{name}` is empty or used twice"
            )));
        }
        let transport = match server.get("type").and_then(Value::as_str) {
            None | Some("stdio") => McpTransport::Stdio {
                command: string_field(server, "command", index)?.to_string(),
                args: match server.get("args").and_then(Value::as_array) {
                    Some(args) => args
                        .iter()
                        .map(|a| a.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                            RpcError::invalid_params(format!(
                                "mcpServers[{index}]: `args` must be strings"
                            ))
                        })?,
                    None => Vec::new(),
                },
                env: pairs(server, "env", index)?,
                env_vars: Vec::new(),
                cwd: None,
            },
            Some("http") => McpTransport::Http {
                url: string_field(server, "url", index)?.to_string(),
                headers: pairs(server, "headers", index)?,
                bearer_token_env: None,
            },
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "mcpServers[{index}]: transport `{other}` is not supported (stdio and http are)"
                )))
            }
        };
        servers.push(McpServerConfig {
            name: name.to_string(),
            transport,
            tool_timeout: DEFAULT_MCP_TOOL_TIMEOUT,
            startup_timeout: DEFAULT_MCP_STARTUP_TIMEOUT,
            trust: McpTrust::default(),
            // The editor's servers are the user's, as the user's own configuration is.
            from_project: false,
        });
    }
    Ok(servers)
}

/// What `session/new` and `session/load` add to a session beyond its `cwd`: the editor's MCP
/// servers and `additionalDirectories`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionExtras {
    pub(crate) mcp_servers: Vec<McpServerConfig>,
    /// Writable roots besides `cwd` under `workspace-write` and `ask`, as for `dsh run
    /// --add-dir`; the runtime checks them (`dsh_runtime::extra_roots`).
    pub(crate) add_dirs: Vec<std::path::PathBuf>,
}

/// The [`SessionExtras`] of `params`. `additionalDirectories` are absolute paths (as ACP
/// says); anything else is refused with invalid params.
pub(crate) fn session_extras(params: &Value) -> Result<SessionExtras, RpcError> {
    let mut add_dirs = Vec::new();
    match params.get("additionalDirectories") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for entry in list {
                let path = entry.as_str().map(std::path::PathBuf::from);
                match path {
                    Some(path) if path.is_absolute() => add_dirs.push(path),
                    _ => {
                        return Err(RpcError::new(
                            INVALID_PARAMS,
                            format!(
                                "Invalid params: `additionalDirectories` holds absolute \
                                 paths of directories, not {entry}"
                            ),
                        ))
                    }
                }
            }
        }
        Some(other) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: `additionalDirectories` is a list of paths, not {other}"),
            ))
        }
    }
    Ok(SessionExtras {
        mcp_servers: mcp_servers(params)?,
        add_dirs,
    })
}

/// The `session/request_permission` that asks the editor's user whether to trust the
/// workspace's own settings, shown with the review of everything they would apply.
pub(crate) fn trust_request(session_id: &str, question: &TrustQuestion) -> Value {
    json!({
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": format!("dsh-trust-{session_id}"),
            "title": format!(
                "Trust the project settings of {}? They are ignored until you do.",
                question.workspace.display()
            ),
            "kind": "other",
            "status": "pending",
            "content": [{"type": "content", "content": {"type": "text", "text": question.review}}],
            "rawInput": {"workspace": question.workspace, "pin": question.pin},
        },
        "options": [
            {"optionId": TRUST_WORKSPACE, "name": "Trust these settings (as reviewed)", "kind": "allow_always"},
            {"optionId": TRUST_NOT_NOW, "name": "Not now (ignore them)", "kind": "reject_once"},
        ],
    })
}

/// Whether the editor's answer to [`trust_request`] trusts the workspace.
pub(crate) fn trusts(answer: &Result<Value, Value>) -> bool {
    answer
        .as_ref()
        .ok()
        .and_then(|r| r.get("outcome"))
        .is_some_and(|o| {
            o.get("outcome").and_then(Value::as_str) == Some("selected")
                && o.get("optionId").and_then(Value::as_str) == Some(TRUST_WORKSPACE)
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn editor_servers_become_session_servers() {
        let servers = mcp_servers(&json!({"mcpServers": [
            {"name": "a", "command": "node", "args": ["x.js"], "env": [{"name": "K", "value": "v"}]},
            {"type": "http", "name": "b", "url": "http://127.0.0.1:1/mcp", "headers": []},
        ]}))
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert!(
            matches!(&servers[0].transport, McpTransport::Stdio { command, env, .. }
            if command == "node" && env == &vec![("K".to_string(), "v".to_string())])
        );
        assert!(
            matches!(&servers[1].transport, McpTransport::Http { url, .. }
            if url == "http://127.0.0.1:1/mcp")
        );
        for bad in [
            json!({"mcpServers": [{"type": "sse", "name": "s", "url": "u", "headers": []}]}),
            json!({"mcpServers": [{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]}),
            json!({"mcpServers": [{"name": "a"}]}),
            json!({"mcpServers": {}}),
        ] {
            assert_eq!(mcp_servers(&bad).unwrap_err().code, INVALID_PARAMS, "{bad}");
        }
        assert!(mcp_servers(&json!({})).unwrap().is_empty());
    }

    #[test]
    fn only_the_trust_option_trusts() {
        let pick = |id: &str| Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}));
        assert!(trusts(&pick(TRUST_WORKSPACE)));
        assert!(!trusts(&pick(TRUST_NOT_NOW)));
        assert!(!trusts(&Ok(json!({"outcome": {"outcome": "cancelled"}}))));
        assert!(!trusts(&Err(json!({"code": -32603}))));
    }
}
