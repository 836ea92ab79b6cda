//! `dsh mcp import` (docs/mcp.md, "Importing from Codex and Claude Code"): the MCP servers of
//! Codex's `config.toml` (`[mcp_servers.<name>]`) or Claude Code's `~/.claude.json`
//! (`mcpServers`) copied into the user's `$DSH_HOME/config.toml`, each through the same checks
//! as `dsh mcp add` (a secret-looking header or variable value is refused: configuration files
//! never hold secrets). The source file is only read.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Largest source file read.
const MAX_SOURCE_BYTES: u64 = 4 * 1024 * 1024;

/// Where the servers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Source {
    /// `$CODEX_HOME/config.toml`, else `~/.codex/config.toml`.
    Codex,
    /// `~/.claude.json` (the user's servers of Claude Code).
    Claude,
}

/// One server of the source, as `dsh mcp add` would be given it, or why it is not imported.
pub(crate) struct Found {
    pub(crate) name: String,
    pub(crate) args: Result<super::mcp_cmd::AddArgs, String>,
    /// Settings of the source that dsh does not take, named for the user.
    pub(crate) dropped: Vec<String>,
}

/// The default file of `source`.
pub(crate) fn default_file(source: Source) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    match source {
        Source::Codex => std::env::var_os("CODEX_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.map(|h| h.join(".codex")))
            .map(|dir| dir.join("config.toml")),
        Source::Claude => home.map(|h| h.join(".claude.json")),
    }
}

/// The servers of `file`, read as `source` writes them.
pub(crate) fn read(source: Source, file: &Path) -> anyhow::Result<Vec<Found>> {
    let fail = |why: String| crate::run::user_error("IMPORT", format!("{}: {why}", file.display()));
    let text = crate::home::read_small_file(file, MAX_SOURCE_BYTES).map_err(fail)?;
    let servers: Vec<(String, Value)> = match source {
        Source::Codex => {
            let table: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| fail(format!("not valid TOML: {}", e.message())))?;
            let servers = table.get("mcp_servers").and_then(toml::Value::as_table);
            servers
                .into_iter()
                .flatten()
                .map(|(name, value)| {
                    let json = serde_json::to_value(value).unwrap_or(Value::Null);
                    (name.clone(), json)
                })
                .collect()
        }
        Source::Claude => {
            let json: Value =
                serde_json::from_str(&text).map_err(|e| fail(format!("not valid JSON: {e}")))?;
            json.get("mcpServers")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect()
        }
    };
    Ok(servers
        .into_iter()
        .map(|(name, server)| {
            let mut dropped = Vec::new();
            let args = add_args(source, &name, &server, &mut dropped);
            Found {
                name,
                args,
                dropped,
            }
        })
        .collect())
}

/// `server` as the arguments of `dsh mcp add NAME`; settings dsh does not take go to
/// `dropped`.
fn add_args(
    source: Source,
    name: &str,
    server: &Value,
    dropped: &mut Vec<String>,
) -> Result<super::mcp_cmd::AddArgs, String> {
    let Some(object) = server.as_object() else {
        return Err("not a table of settings".into());
    };
    if object.get("enabled").and_then(Value::as_bool) == Some(false)
        || object.get("disabled").and_then(Value::as_bool) == Some(true)
    {
        return Err("disabled there".into());
    }
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
    let list = |key: &str| -> Vec<String> {
        object
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let pairs = |key: &str, separator: char| -> Vec<String> {
        object
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}{separator}{}", v.as_str().unwrap_or_default()))
            .collect()
    };
    let (headers_key, bearer_key) = match source {
        Source::Codex => ("http_headers", "bearer_token_env_var"),
        Source::Claude => ("headers", "bearer_token_env"),
    };
    let known = [
        "command",
        "args",
        "env",
        "env_vars",
        "cwd",
        "url",
        "type",
        "enabled",
        "disabled",
        headers_key,
        bearer_key,
    ];
    for key in object.keys().filter(|key| !known.contains(&key.as_str())) {
        dropped.push(key.clone());
    }
    if object.get("type").and_then(Value::as_str) == Some("sse") {
        return Err("an SSE server (dsh speaks streamable HTTP and stdio)".into());
    }
    let mut args = super::mcp_cmd::AddArgs::named(name);
    match (text("url"), text("command")) {
        (Some(url), None) => {
            args.url = Some(url);
            args.headers = pairs(headers_key, ':');
            args.bearer_token_env = text(bearer_key);
        }
        (None, Some(command)) => {
            args.command = std::iter::once(command).chain(list("args")).collect();
            args.env = pairs("env", '=');
            args.env_vars = list("env_vars");
            args.cwd = text("cwd").map(PathBuf::from);
        }
        (Some(_), Some(_)) => return Err("has both a command and a URL".into()),
        (None, None) => return Err("has neither a command nor a URL".into()),
    }
    Ok(args)
}
