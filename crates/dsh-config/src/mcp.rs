//! `[mcp.servers.<name>]`: MCP servers for the MCP client, checked key by key and turned into
//! [`McpServerConfig`]s. No server is configured by default: MCP servers run outside the
//! sandbox, so each one is an explicit choice.

use std::path::PathBuf;
use std::time::Duration;

use toml::{Table, Value};

use crate::error::{ConfigError, Source};

/// Default limit for one tool call.
pub const DEFAULT_MCP_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Default limit for starting a server and listing its tools.
pub const DEFAULT_MCP_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

const SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "headers",
    "bearer_token_env",
    "tool_timeout_secs",
    "startup_timeout_secs",
    "enabled",
    "trust",
];

/// How far the user trusts a server's tools (`trust` under `[mcp.servers.<name>]`; only the
/// user's own `$DSH_HOME/config.toml` may widen it). See docs/mcp.md, "Approvals".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McpTrust {
    /// `"none"`: every call is asked (except under `danger-full-access`), even of tools that
    /// declare `readOnlyHint`.
    None,
    /// `"read-only"` (default): tools that declare `readOnlyHint = true` run without asking;
    /// the others are asked under `read-only`, `ask` and `workspace-write`.
    #[default]
    ReadOnly,
    /// `"all"`: under `workspace-write` no call is asked; under `read-only` and `ask` tools
    /// without `readOnlyHint` are still asked.
    All,
}

impl McpTrust {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            McpTrust::None => "none",
            McpTrust::ReadOnly => "read-only",
            McpTrust::All => "all",
        }
    }
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to run (looked up in `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it (after the environment was scrubbed of secrets).
        env: Vec<(String, String)>,
        /// Variables passed through from dsh's own environment by name (e.g. a token).
        env_vars: Vec<String>,
        /// Working directory (default: the session's).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra request headers (not secrets: use `bearer_token_env` for a token).
        headers: Vec<(String, String)>,
        /// Variable holding a bearer token sent as `Authorization: Bearer <token>`.
        bearer_token_env: Option<String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The name under `[mcp.servers]`; tools appear as `mcp__<name>__<tool>`.
    pub name: String,
    /// How dsh reaches the server (stdio child or streamable HTTP).
    pub transport: McpTransport,
    /// Limit for one tool call.
    pub tool_timeout: Duration,
    /// Limit for starting the server and listing its tools.
    pub startup_timeout: Duration,
    /// Which calls run without the user's approval.
    pub trust: McpTrust,
    /// Set when the project's `.dsh/config.toml` set any of the server's keys: a stdio server
    /// then runs in the session's confinement, like `bash` (docs/mcp.md, "Project servers
    /// run confined").
    pub from_project: bool,
}

fn err(
    source: &Source,
    key: &str,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> ConfigError {
    ConfigError::new(source, key, problem, fix)
}

fn strings(
    source: &Source,
    key: &str,
    value: &Value,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    match value.as_array() {
        Some(items) if items.iter().all(Value::is_str) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => {
            errors.push(err(
                source,
                key,
                "must be an array of strings",
                "write e.g. `args = [\"-y\", \"@modelcontextprotocol/server-everything\"]`",
            ));
            Vec::new()
        }
    }
}

fn string_table(
    source: &Source,
    key: &str,
    value: &Value,
    errors: &mut Vec<ConfigError>,
) -> Vec<(String, String)> {
    match value.as_table() {
        Some(t) if t.values().all(Value::is_str) => t
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
        _ => {
            errors.push(err(
                source,
                key,
                "must be a table of strings",
                "write e.g. `env = { LOG_LEVEL = \"debug\" }`",
            ));
            Vec::new()
        }
    }
}

fn seconds(
    source: &Source,
    key: &str,
    value: &Value,
    errors: &mut Vec<ConfigError>,
) -> Option<Duration> {
    match value.as_integer() {
        Some(n) if (1..=86_400).contains(&n) => Some(Duration::from_secs(n as u64)),
        _ => {
            errors.push(err(
                source,
                key,
                "must be a whole number of seconds from 1 to 86400",
                "write e.g. `tool_timeout_secs = 60`",
            ));
            None
        }
    }
}

/// Checks `[mcp]` of one layer and returns the servers it enables. `source_of` gives the layer
/// that set a key (for messages).
pub(crate) fn mcp_servers(
    mcp: Option<&Table>,
    source_of: &dyn Fn(&str) -> Source,
) -> (Vec<McpServerConfig>, Vec<ConfigError>) {
    let mut servers = Vec::new();
    let mut errors = Vec::new();
    let Some(mcp) = mcp else {
        return (servers, errors);
    };
    for (key, value) in mcp {
        let path = format!("mcp.{key}");
        if key != "servers" {
            errors.push(err(
                &source_of(&path),
                &path,
                format!("unknown key `{key}`"),
                "servers are configured as `[mcp.servers.<name>]`",
            ));
            continue;
        }
        let Some(table) = value.as_table() else {
            errors.push(err(
                &source_of(&path),
                &path,
                "must be a table",
                "write `[mcp.servers.<name>]` sections",
            ));
            continue;
        };
        for (name, server) in table {
            let key = format!("mcp.servers.{name}");
            if let Some(server) = parse_server(name, &key, server, source_of, &mut errors) {
                servers.push(server);
            }
        }
    }
    (servers, errors)
}

/// The dotted key of the first leaf value below `prefix`.
fn first_leaf_key(prefix: &str, value: &Value) -> String {
    match value.as_table().and_then(|t| t.iter().next()) {
        Some((k, v)) => first_leaf_key(&format!("{prefix}.{k}"), v),
        None => prefix.to_string(),
    }
}

fn parse_server(
    name: &str,
    key: &str,
    value: &Value,
    source_of: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> Option<McpServerConfig> {
    let before = errors.len();
    let source = source_of(key);
    let Some(table) = value.as_table() else {
        errors.push(err(
            &source,
            key,
            "must be a table",
            "write `[mcp.servers.<name>]` with `command` or `url`",
        ));
        return None;
    };
    // Provenance is kept per leaf value: name the file of the server's first leaf.
    let source = match first_leaf_key(key, value) {
        leaf if leaf != key => source_of(&leaf),
        _ => source,
    };
    check_server_name(name, key, &source, errors);
    let options = server_options(key, table, &source, source_of, errors);
    let server = ServerTable {
        key,
        table,
        source: &source,
    };
    let command = server.text("command", errors);
    let url = server.text("url", errors);
    let transport = match (command, url) {
        (Some(command), None) => server.stdio(command, errors),
        (None, Some(url)) => server.http(url, errors),
        (Some(_), Some(_)) => {
            errors.push(err(
                &source,
                key,
                "sets both `command` and `url`",
                "keep `command` for a local (stdio) server or `url` for a streamable-HTTP server",
            ));
            return None;
        }
        (None, None) => {
            if errors.len() == before {
                errors.push(err(
                    &source,
                    key,
                    "sets neither `command` nor `url`",
                    "add `command = \"...\"` (stdio) or `url = \"http://...\"` (streamable HTTP)",
                ));
            }
            return None;
        }
    };
    (errors.len() == before && options.enabled).then(|| McpServerConfig {
        name: name.to_string(),
        transport,
        tool_timeout: options.tool_timeout,
        startup_timeout: options.startup_timeout,
        trust: options.trust,
        // Set from the provenance of all its keys by `Config` (a project may set one key of
        // a server the user defined).
        from_project: false,
    })
}

/// A server name becomes part of tool names (`mcp__<server>__<tool>`).
fn check_server_name(name: &str, key: &str, source: &Source, errors: &mut Vec<ConfigError>) {
    if name.is_empty()
        || name.contains("__")
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        errors.push(err(
            source,
            key,
            format!("`{name}` is not a usable server name"),
            "use letters, digits, `-` and single `_` (it becomes part of tool names `mcp__<server>__<tool>`)",
        ));
    }
}

/// The settings of a server beside its transport.
struct ServerOptions {
    tool_timeout: Duration,
    startup_timeout: Duration,
    enabled: bool,
    trust: McpTrust,
}

/// Reads `trust`, the timeouts and `enabled`, and reports unknown keys.
fn server_options(
    key: &str,
    table: &Table,
    source: &Source,
    source_of: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> ServerOptions {
    let mut options = ServerOptions {
        tool_timeout: DEFAULT_MCP_TOOL_TIMEOUT,
        startup_timeout: DEFAULT_MCP_STARTUP_TIMEOUT,
        enabled: true,
        trust: McpTrust::default(),
    };
    for (k, v) in table {
        let full = format!("{key}.{k}");
        match k.as_str() {
            "trust" => {
                if let Some(level) = parse_trust(key, table, &full, v, source_of, errors) {
                    options.trust = level;
                }
            }
            "tool_timeout_secs" => {
                options.tool_timeout =
                    seconds(source, &full, v, errors).unwrap_or(options.tool_timeout)
            }
            "startup_timeout_secs" => {
                options.startup_timeout =
                    seconds(source, &full, v, errors).unwrap_or(options.startup_timeout)
            }
            "enabled" => match v.as_bool() {
                Some(b) => options.enabled = b,
                None => errors.push(err(
                    source,
                    &full,
                    "must be true or false",
                    "write `enabled = false` to keep the entry but not start it",
                )),
            },
            known if SERVER_KEYS.contains(&known) => {}
            other => errors.push(err(
                source,
                &full,
                format!("unknown key `{other}`"),
                format!("known keys here: {}", SERVER_KEYS.join(", ")),
            )),
        }
    }
    options
}

/// One `[mcp.servers.<name>]` table being read: its dotted key and the file it came from.
struct ServerTable<'a> {
    key: &'a str,
    table: &'a Table,
    source: &'a Source,
}

impl ServerTable<'_> {
    /// A string value that must not be empty, when present.
    fn text(&self, k: &str, errors: &mut Vec<ConfigError>) -> Option<String> {
        let value = self.table.get(k)?;
        match value.as_str() {
            Some(s) if !s.trim().is_empty() => Some(s.to_string()),
            _ => {
                errors.push(err(
                    self.source,
                    &format!("{}.{k}", self.key),
                    "must be a non-empty string",
                    format!("write `{k} = \"...\"`"),
                ));
                None
            }
        }
    }

    /// Reports each of `keys` that is set but belongs to the other transport.
    fn refuse(&self, keys: &[&str], problem: &str, fix: &str, errors: &mut Vec<ConfigError>) {
        for k in keys {
            if self.table.contains_key(*k) {
                errors.push(err(self.source, &format!("{}.{k}", self.key), problem, fix));
            }
        }
    }

    /// A local server started with `command`.
    fn stdio(&self, command: String, errors: &mut Vec<ConfigError>) -> McpTransport {
        let (key, table, source) = (self.key, self.table, self.source);
        self.refuse(
            &["headers", "bearer_token_env"],
            "applies to `url` servers only",
            "remove it, or configure the server by `url`",
            errors,
        );
        McpTransport::Stdio {
            command,
            args: table
                .get("args")
                .map(|v| strings(source, &format!("{key}.args"), v, errors))
                .unwrap_or_default(),
            env: table
                .get("env")
                .map(|v| string_table(source, &format!("{key}.env"), v, errors))
                .unwrap_or_default(),
            env_vars: table
                .get("env_vars")
                .map(|v| strings(source, &format!("{key}.env_vars"), v, errors))
                .unwrap_or_default(),
            cwd: self.text("cwd", errors).map(PathBuf::from),
        }
    }

    /// A streamable-HTTP server at `url`.
    fn http(&self, url: String, errors: &mut Vec<ConfigError>) -> McpTransport {
        let (key, table, source) = (self.key, self.table, self.source);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            errors.push(err(
                source,
                &format!("{key}.url"),
                "must start with http:// or https://",
                "write e.g. `url = \"http://127.0.0.1:3001/mcp\"`",
            ));
        }
        self.refuse(
            &["args", "env", "env_vars", "cwd"],
            "applies to `command` servers only",
            "remove it, or configure the server by `command`",
            errors,
        );
        McpTransport::Http {
            url,
            headers: table
                .get("headers")
                .map(|v| string_table(source, &format!("{key}.headers"), v, errors))
                .unwrap_or_default(),
            bearer_token_env: self.text("bearer_token_env", errors),
        }
    }
}

/// `trust` of one server. Widening trust (`read-only` is the default, `all` is wider) is the
/// user's decision: it must come from the user's own file, and the server's `command`/`url`
/// must come from there too (a project cannot borrow the user's trust for another program).
fn parse_trust(
    key: &str,
    table: &Table,
    full: &str,
    value: &Value,
    source_of: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> Option<McpTrust> {
    let source = source_of(full);
    let level = match value.as_str() {
        Some("none") => McpTrust::None,
        Some("read-only") => McpTrust::ReadOnly,
        Some("all") => McpTrust::All,
        _ => {
            errors.push(err(
                &source,
                full,
                "must be \"none\", \"read-only\" or \"all\"",
                "write e.g. `trust = \"all\"` (tools run without asking under workspace-write)",
            ));
            return None;
        }
    };
    if level != McpTrust::All {
        return Some(level);
    }
    let from_user = |s: &Source| matches!(s, Source::UserFile(_));
    if !from_user(&source) {
        errors.push(err(
            &source,
            full,
            "only the user's own configuration can trust an MCP server",
            format!("remove it here; set `trust = \"all\"` under [{key}] in $DSH_HOME/config.toml if you trust this server"),
        ));
        return None;
    }
    // Every value that decides what runs (or where it connects) must be the user's too.
    let mut leaves = Vec::new();
    for k in [
        "command", "url", "args", "cwd", "env", "env_vars", "headers",
    ] {
        match table.get(k) {
            Some(Value::Table(inner)) => {
                leaves.extend(inner.keys().map(|name| format!("{key}.{k}.{name}")))
            }
            Some(_) => leaves.push(format!("{key}.{k}")),
            None => {}
        }
    }
    for leaf in leaves {
        let origin = source_of(&leaf);
        if !from_user(&origin) {
            errors.push(err(
                &origin,
                &leaf,
                "changes a server the user's configuration trusts",
                format!("remove it here, or remove `trust` from [{key}] in $DSH_HOME/config.toml"),
            ));
            return None;
        }
    }
    Some(level)
}
