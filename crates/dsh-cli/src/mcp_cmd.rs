//! `dsh mcp add|list|get|remove|login|logout` (docs/mcp.md, "Managing servers"): the user's
//! MCP servers written to and removed from `$DSH_HOME/config.toml` (`mcp_edit.rs`), and every
//! configured server started and its tools listed through `Runtime::check_mcp`, the check
//! `dsh doctor` runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use dsh_config::{McpServerConfig, McpTransport, Source};
use dsh_llm::LockExt;
use dsh_runtime::{Choices, Configuration, McpServerCheck, Runtime, RuntimeOptions, SessionSpec};
use serde_json::{json, Value};

use crate::mcp_edit::{self, Entry};

/// Shown instead of an `env` or `headers` value.
const REDACTED: &str = "<redacted>";

// Arguments of `dsh mcp` (a plain comment: clap would make a doc comment the subcommand's
// help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Servers are added to and removed from your own $DSH_HOME/config.toml only (`dsh config path`).
A project's servers (.dsh/config.toml) are edited by hand and apply once the workspace is
trusted with `dsh trust`; `list` and `get` show them. Files never hold tokens: pass them with
--env-var or --bearer-token-env, or `dsh mcp login` to an OAuth server. See docs/mcp.md.")]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, clap::Subcommand)]
enum McpCommand {
    /// Add a server to $DSH_HOME/config.toml: `add NAME -- CMD ARGS...` (stdio) or
    /// `add NAME --url URL` (streamable HTTP).
    Add(AddArgs),
    /// Start every configured server (user and trusted project) and list its tools, or why
    /// it failed.
    List {
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show one server's configuration (env and header values redacted) and its tools.
    Get {
        /// The server's name (`[mcp.servers.<name>]`).
        name: String,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Remove a server from $DSH_HOME/config.toml (a project's servers are edited in its
    /// .dsh/config.toml).
    Remove {
        /// The server's name.
        name: String,
    },
    /// Log in to an HTTP server that asks for OAuth: opens (or prints) the authorization URL
    /// and stores the tokens in $DSH_HOME/mcp-auth/NAME.json (0600), never in config.toml.
    Login {
        /// The server's name.
        name: String,
        /// Print the authorization URL instead of opening a browser.
        #[arg(long)]
        no_browser: bool,
        /// A client id registered with the authorization server beforehand (default: dsh
        /// registers itself, RFC 7591).
        #[arg(long, value_name = "ID")]
        client_id: Option<String>,
        /// How long to wait for the browser's redirect, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
    },
    /// Delete the stored OAuth tokens of a server.
    Logout {
        /// The server's name.
        name: String,
    },
    /// Copy the MCP servers of Codex (`~/.codex/config.toml`) or Claude Code
    /// (`~/.claude.json`) into $DSH_HOME/config.toml, each checked as `add` checks it; the
    /// source is only read.
    Import {
        /// Whose servers.
        #[arg(long, value_enum, default_value_t = crate::mcp_import::Source::Codex)]
        from: crate::mcp_import::Source,
        /// Read this file instead of the tool's usual one.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Replace servers of the same name.
        #[arg(long)]
        force: bool,
        /// Say what would be imported; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The server's name: letters, digits, `-` and single `_` (its tools are offered as
    /// `mcp__<name>__<tool>`).
    pub(crate) name: String,
    /// A streamable-HTTP server at this URL (http:// or https://) instead of a command.
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// An extra request header of an HTTP server, `NAME:VALUE` (repeatable; not for secrets:
    /// see --bearer-token-env).
    #[arg(long = "header", value_name = "NAME:VALUE")]
    pub(crate) headers: Vec<String>,
    /// The variable holding a bearer token an HTTP server gets as `Authorization: Bearer`.
    #[arg(long, value_name = "VAR")]
    pub(crate) bearer_token_env: Option<String>,
    /// A variable set for a stdio server, `KEY=VALUE` (repeatable; not for secrets: see
    /// --env-var).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// A variable passed through from dsh's environment to a stdio server by name (repeatable).
    #[arg(long = "env-var", value_name = "NAME")]
    pub(crate) env_vars: Vec<String>,
    /// The working directory of a stdio server (default: the session's).
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// Replace an existing server of that name.
    #[arg(long)]
    pub(crate) force: bool,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub(crate) command: Vec<String>,
}

impl AddArgs {
    /// The arguments of `dsh mcp add NAME` with nothing else given.
    pub(crate) fn named(name: &str) -> AddArgs {
        AddArgs {
            name: name.to_string(),
            url: None,
            headers: Vec::new(),
            bearer_token_env: None,
            env: Vec::new(),
            env_vars: Vec::new(),
            cwd: None,
            force: false,
            command: Vec::new(),
        }
    }
}

fn user_error(message: String) -> anyhow::Error {
    crate::run::user_error("INVALID_ARGS", message)
}

/// Runs `dsh mcp`.
pub(crate) fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    match args.command {
        McpCommand::Add(add) => run_add(&home, &cwd, add),
        McpCommand::List { json } => run_list(&home, &cwd, json),
        McpCommand::Get { name, json } => run_get(&home, &cwd, &name, json),
        McpCommand::Remove { name } => run_remove(&home, &cwd, &name),
        McpCommand::Login {
            name,
            no_browser,
            client_id,
            timeout,
        } => {
            let options = dsh_mcp::oauth::LoginOptions {
                client_id,
                timeout: std::time::Duration::from_secs(timeout.max(1)),
            };
            run_login(&home, &cwd, &name, &options, !no_browser)
        }
        McpCommand::Logout { name } => run_logout(&home, &name),
        McpCommand::Import {
            from,
            file,
            force,
            dry_run,
        } => run_import(&home, &cwd, from, file, force, dry_run),
    }
}

/// A header or variable name that says it carries a secret.
fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "authorization",
        "token",
        "key",
        "secret",
        "password",
        "cookie",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

fn split_pair<'a>(
    text: &'a str,
    separator: char,
    flag: &str,
) -> anyhow::Result<(&'a str, &'a str)> {
    match text.split_once(separator) {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim(), value)),
        _ => Err(user_error(format!(
            "{flag} `{}` is not `NAME{separator}VALUE`",
            dsh_tools::printable(text)
        ))),
    }
}

fn entry(add: &AddArgs, cwd: &Path) -> anyhow::Result<Entry> {
    if let Some(url) = &add.url {
        if !add.command.is_empty() {
            return Err(user_error(
                "give either --url URL (an HTTP server) or `-- CMD ARGS` (a stdio server), not both"
                    .into(),
            ));
        }
        if !add.env.is_empty() || !add.env_vars.is_empty() || add.cwd.is_some() {
            return Err(user_error(
                "--env, --env-var and --cwd apply to stdio servers (`-- CMD ARGS`) only".into(),
            ));
        }
        let mut headers = Vec::new();
        for header in &add.headers {
            let (name, value) = split_pair(header, ':', "--header")?;
            let value = value.trim();
            let bearer = value
                .get(..7)
                .is_some_and(|p| p.eq_ignore_ascii_case("bearer "));
            if secret_name(name) || bearer {
                return Err(user_error(format!(
                    "header `{name}` looks like a secret, and configuration files never hold \
                     secrets: put the token in a variable and give --bearer-token-env VAR (sent \
                     as `Authorization: Bearer`), or run `dsh mcp login {}` for an OAuth server",
                    add.name
                )));
            }
            headers.push((name.to_string(), value.to_string()));
        }
        return Ok(Entry::Http {
            url: url.clone(),
            headers,
            bearer_token_env: add.bearer_token_env.clone(),
        });
    }
    if !add.headers.is_empty() || add.bearer_token_env.is_some() {
        return Err(user_error(
            "--header and --bearer-token-env apply to HTTP servers (--url) only".into(),
        ));
    }
    let Some((command, args)) = add.command.split_first() else {
        return Err(user_error(format!(
            "say how to reach `{}`: `dsh mcp add {} -- CMD ARGS...` (stdio) or `dsh mcp add {} \
             --url URL` (streamable HTTP)",
            add.name, add.name, add.name
        )));
    };
    let mut env = Vec::new();
    for pair in &add.env {
        let (name, value) = split_pair(pair, '=', "--env")?;
        if secret_name(name) {
            return Err(user_error(format!(
                "variable `{name}` looks like a secret, and configuration files never hold \
                 secrets: set it in dsh's environment and give --env-var {name} to pass it \
                 through by name"
            )));
        }
        env.push((name.to_string(), value.to_string()));
    }
    Ok(Entry::Stdio {
        command: command.clone(),
        args: args.to_vec(),
        env,
        env_vars: add.env_vars.clone(),
        cwd: add
            .cwd
            .as_ref()
            .map(|dir| cwd.join(dir).display().to_string()),
    })
}

fn run_add(home: &Path, cwd: &Path, add: AddArgs) -> anyhow::Result<ExitCode> {
    let entry = entry(&add, cwd)?;
    let path = dsh_config::user_config_path(home);
    let replaced = mcp_edit::add(&path, &add.name, &entry, add.force)?;
    let verb = if replaced { "replaced" } else { "added" };
    println!(
        "{verb} MCP server `{}` in {} (`dsh mcp get {}` starts it and lists its tools)",
        add.name,
        path.display(),
        add.name
    );
    Ok(ExitCode::SUCCESS)
}

/// `dsh mcp import`: each server of the source added as `dsh mcp add` would add it, or the
/// reason it was not (one line each); exit status 1 only when the source cannot be read.
fn run_import(
    home: &Path,
    cwd: &Path,
    from: crate::mcp_import::Source,
    file: Option<PathBuf>,
    force: bool,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    let Some(file) = file.or_else(|| crate::mcp_import::default_file(from)) else {
        return Err(user_error(
            "no home folder to find the file in: give --file".into(),
        ));
    };
    let found = crate::mcp_import::read(from, &file)?;
    if found.is_empty() {
        println!("no MCP servers in {}", file.display());
    }
    let path = dsh_config::user_config_path(home);
    let shown = |text: &str| dsh_tools::printable(text).into_owned();
    for server in found {
        let name = shown(&server.name);
        let mut args = match server.args {
            Ok(args) => args,
            Err(why) => {
                println!("skipped {name}: {}", shown(&why));
                continue;
            }
        };
        args.force = force;
        let entry = match entry(&args, cwd) {
            Ok(entry) => entry,
            Err(why) => {
                println!("skipped {name}: {}", shown(&format!("{why:#}")));
                continue;
            }
        };
        let note = match server.dropped.is_empty() {
            true => String::new(),
            false => format!(" (not taken: {})", shown(&server.dropped.join(", "))),
        };
        if dry_run {
            println!("would import {name}{note}");
            continue;
        }
        if !force && mcp_edit::defines(&path, &args.name) {
            println!(
                "skipped {name}: {} defines it already (--force replaces it)",
                path.display()
            );
            continue;
        }
        match mcp_edit::add(&path, &args.name, &entry, force) {
            Ok(_) => println!("imported {name}{note}"),
            Err(why) => println!("skipped {name}: {}", shown(&format!("{why:#}"))),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_remove(home: &Path, cwd: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let path = dsh_config::user_config_path(home);
    if mcp_edit::remove(&path, name)? {
        println!("removed MCP server `{name}` from {}", path.display());
        // Its login goes with it: a later server of the same name starts logged out.
        if dsh_mcp::oauth::delete_login(&login_dir(home), name).map_err(user_error)? {
            println!("deleted its stored OAuth tokens");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(project) = dsh_config::project_config_path(cwd, home) {
        if mcp_edit::defines(&project, name) {
            return Err(user_error(format!(
                "MCP server `{name}` is defined by the project in {}, not in {}; `dsh mcp` edits \
                 only your own file: remove [mcp.servers.{name}] there by hand",
                project.display(),
                path.display()
            )));
        }
    }
    Err(user_error(format!(
        "no MCP server `{name}` in {} (`dsh mcp list` shows the configured ones)",
        path.display()
    )))
}

/// The workspace's configuration, resolved as `dsh doctor` resolves it (keyless: listing
/// servers needs no model key), and the runtime that checks its servers.
fn resolve(home: &Path, cwd: &Path) -> anyhow::Result<(Runtime, Arc<Configuration>)> {
    let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&warnings);
    let runtime = Runtime::new(RuntimeOptions {
        home: home.to_path_buf(),
        cwd: cwd.to_path_buf(),
        choices: Choices {
            keyless: true,
            ..crate::flags::base_choices()
        },
        warnings: Arc::new(move |line: &str| sink.lock_or_recover().push(line.to_string())),
    })
    .map_err(|e| crate::run::user_error("INVALID_CONFIG", e.to_string()))?;
    let setup = runtime
        .configuration(&SessionSpec::default())
        .map_err(|e| crate::run::user_error("INVALID_CONFIG", e.to_string()))?;
    for line in warnings.lock_or_recover().iter() {
        eprintln!("dsh: {}", dsh_tools::printable(line));
    }
    Ok((runtime, setup))
}

/// Which layer defined a server: where its `command` or `url` came from.
fn layer(setup: &Configuration, name: &str) -> (&'static str, String) {
    let key = format!("mcp.servers.{name}");
    let source = ["command", "url"]
        .iter()
        .find_map(|leaf| setup.config.source_of(&format!("{key}.{leaf}")));
    match source {
        Some(Source::ProjectFile(path)) => ("project", path.display().to_string()),
        Some(Source::UserFile(path)) => ("user", path.display().to_string()),
        Some(other) => ("other", other.to_string()),
        None => ("user", "the configuration".into()),
    }
}

/// Servers written with `enabled = false`: configured, never started.
fn disabled(setup: &Configuration) -> Vec<String> {
    let Some(servers) = setup.config.mcp.get("servers").and_then(|s| s.as_table()) else {
        return Vec::new();
    };
    servers
        .iter()
        .filter(|(_, s)| s.get("enabled").and_then(toml::Value::as_bool) == Some(false))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Where a server is reached, for one line: its command line or URL.
fn target(server: &McpServerConfig) -> String {
    match &server.transport {
        McpTransport::Stdio { command, args, .. } => {
            let mut words = vec![command.clone()];
            words.extend(args.iter().cloned());
            words.join(" ")
        }
        McpTransport::Http { url, .. } => url.clone(),
    }
}

/// A server's configuration as JSON, `env` and header values redacted.
fn config_json(server: &McpServerConfig, login_dir: Option<&Path>) -> Value {
    let redacted = |pairs: &[(String, String)]| -> Value {
        pairs
            .iter()
            .map(|(k, _)| (k.clone(), Value::from(REDACTED)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut out = match &server.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            env_vars,
            cwd,
        } => json!({
            "transport": "stdio",
            "command": command,
            "args": args,
            "env": redacted(env),
            "env_vars": env_vars,
            "cwd": cwd.as_ref().map(|c| c.display().to_string()),
        }),
        McpTransport::Http {
            url,
            headers,
            bearer_token_env,
        } => json!({
            "transport": "http",
            "url": url,
            "headers": redacted(headers),
            "bearer_token_env": bearer_token_env,
        }),
    };
    out["tool_timeout_secs"] = server.tool_timeout.as_secs().into();
    if let (
        McpTransport::Http {
            url,
            bearer_token_env: None,
            ..
        },
        Some(dir),
    ) = (&server.transport, login_dir)
    {
        let login = dsh_mcp::oauth::read_login(dir, &server.name).ok().flatten();
        out["oauth"] = match login {
            Some(login) if login.fits(url) => "logged in".into(),
            Some(_) => "stored login is for another address (not sent)".into(),
            None => "not logged in".into(),
        };
    }
    out["startup_timeout_secs"] = server.startup_timeout.as_secs().into();
    out["trust"] = server.trust.as_str().into();
    out
}

/// One server's report: configuration, layer, and what starting it gave.
fn server_json(
    setup: &Configuration,
    server: &McpServerConfig,
    check: Option<&McpServerCheck>,
) -> Value {
    let (layer, file) = layer(setup, &server.name);
    let mut out = json!({ "name": server.name, "layer": layer, "file": file });
    if let (Some(out), Value::Object(config)) = (
        out.as_object_mut(),
        config_json(server, Some(&login_dir(&setup.home))),
    ) {
        out.extend(config);
    }
    match check.map(|c| &c.outcome) {
        Some(Ok(tools)) => {
            out["status"] = "ok".into();
            out["tools"] = tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description }))
                .collect();
        }
        Some(Err(error)) => {
            out["status"] = "error".into();
            out["error"] = error.as_str().into();
        }
        None => out["status"] = "not checked".into(),
    }
    out
}

/// The text or JSON of a report is redacted of every secret loaded for the workspace, and
/// control characters are shown as text.
fn print_out(setup: &Configuration, text: &str) {
    let text = setup.secrets().redact(text);
    print!("{}", dsh_tools::printable(&text));
}

fn run_list(home: &Path, cwd: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let (runtime, setup) = resolve(home, cwd)?;
    let checks = runtime
        .check_mcp(&SessionSpec::default())
        .map_err(|e| crate::run::user_error("INVALID_CONFIG", e.to_string()))?;
    let servers = &setup.config.mcp_servers;
    let off = disabled(&setup);
    let reports: Vec<Value> = servers
        .iter()
        .map(|server| {
            let check = checks.iter().find(|c| c.name == server.name);
            server_json(&setup, server, check)
        })
        .chain(off.iter().map(|name| {
            let (layer, file) = layer(&setup, name);
            json!({ "name": name, "layer": layer, "file": file, "status": "disabled" })
        }))
        .collect();
    if json {
        print_out(&setup, &format!("{}\n", Value::Array(reports)));
        return Ok(ExitCode::SUCCESS);
    }
    if reports.is_empty() {
        println!(
            "no MCP servers configured (add one with `dsh mcp add NAME -- CMD ARGS` or \
             `dsh mcp add NAME --url URL`)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for (report, server) in reports
        .iter()
        .zip(servers.iter().map(Some).chain(std::iter::repeat(None)))
    {
        let name = report["name"].as_str().unwrap_or_default();
        let layer = report["layer"].as_str().unwrap_or_default();
        let place = server.map(target).unwrap_or_default();
        match report["status"].as_str() {
            Some("ok") => {
                let tools: Vec<&str> = report["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t["name"].as_str())
                    .collect();
                text.push_str(&format!(
                    "{name} ({layer}) {place}: ok, {} tools: {}\n",
                    tools.len(),
                    tools.join(", ")
                ));
            }
            Some("error") => text.push_str(&format!(
                "{name} ({layer}) {place}: failed: {}\n",
                report["error"].as_str().unwrap_or_default()
            )),
            _ => text.push_str(&format!("{name} ({layer}): disabled (enabled = false)\n")),
        }
    }
    print_out(&setup, &text);
    Ok(ExitCode::SUCCESS)
}

fn run_get(home: &Path, cwd: &Path, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (runtime, setup) = resolve(home, cwd)?;
    let Some(server) = setup.config.mcp_servers.iter().find(|s| s.name == name) else {
        let why = if disabled(&setup).iter().any(|n| n == name) {
            "is disabled (`enabled = false`)".to_string()
        } else {
            "is not configured (`dsh mcp list` shows the configured ones)".to_string()
        };
        return Err(user_error(format!("MCP server `{name}` {why}")));
    };
    let checks = runtime
        .check_mcp_server(&SessionSpec::default(), name)
        .map_err(|e| crate::run::user_error("INVALID_CONFIG", e.to_string()))?;
    let report = server_json(&setup, server, checks.first());
    if json {
        print_out(&setup, &format!("{report}\n"));
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "{name}\n  layer: {} ({})\n",
        report["layer"].as_str().unwrap_or_default(),
        report["file"].as_str().unwrap_or_default()
    );
    let keys = [
        "transport",
        "command",
        "args",
        "env",
        "env_vars",
        "cwd",
        "url",
        "headers",
        "bearer_token_env",
        "oauth",
        "tool_timeout_secs",
        "startup_timeout_secs",
        "trust",
    ];
    for key in keys {
        let value = &report[key];
        let shown = match value {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            Value::Array(items) if items.is_empty() => continue,
            Value::Object(map) if map.is_empty() => continue,
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" "),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        text.push_str(&format!("  {key}: {shown}\n"));
    }
    match report["status"].as_str() {
        Some("ok") => {
            let tools = report["tools"].as_array().cloned().unwrap_or_default();
            text.push_str(&format!("  status: ok, {} tools\n", tools.len()));
            for tool in tools {
                let description = tool["description"].as_str().unwrap_or_default();
                let first = description.lines().next().unwrap_or_default();
                text.push_str(&format!(
                    "    {}  {first}\n",
                    tool["name"].as_str().unwrap_or_default()
                ));
            }
        }
        _ => text.push_str(&format!(
            "  status: failed: {}\n",
            report["error"].as_str().unwrap_or("not checked")
        )),
    }
    print_out(&setup, &text);
    Ok(ExitCode::SUCCESS)
}

/// `$DSH_HOME/mcp-auth`, where logins are stored.
fn login_dir(home: &Path) -> PathBuf {
    home.join(dsh_mcp::oauth::LOGIN_DIR)
}

fn run_login(
    home: &Path,
    cwd: &Path,
    name: &str,
    options: &dsh_mcp::oauth::LoginOptions,
    browser: bool,
) -> anyhow::Result<ExitCode> {
    let (_runtime, setup) = resolve(home, cwd)?;
    let Some(server) = setup.config.mcp_servers.iter().find(|s| s.name == name) else {
        return Err(user_error(format!(
            "MCP server `{name}` is not configured (`dsh mcp list` shows the configured ones)"
        )));
    };
    let url = match &server.transport {
        McpTransport::Http {
            bearer_token_env: Some(variable),
            ..
        } => {
            return Err(user_error(format!(
                "MCP server `{name}` sends the token of {variable} (bearer_token_env); remove                  that key to log in with OAuth instead"
            )))
        }
        McpTransport::Http { url, .. } => url.clone(),
        McpTransport::Stdio { .. } => {
            return Err(user_error(format!(
                "MCP server `{name}` is a stdio server; OAuth applies to HTTP servers (--url) only"
            )))
        }
    };
    let show = move |link: &str| {
        eprintln!("dsh: open this URL to log in to MCP server `{name}`:\n  {link}");
        if browser {
            open_browser(link);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let login = runtime
        .block_on(dsh_mcp::oauth::login(&url, options, &show))
        .map_err(|e| {
            user_error(format!(
                "login to MCP server `{name}` failed: {}",
                dsh_tools::printable(&e)
            ))
        })?;
    let dir = login_dir(home);
    dsh_mcp::oauth::write_login(&dir, name, &login).map_err(user_error)?;
    println!(
        "logged in to MCP server `{name}`; its tokens are in {} (readable by you only), sent only to {}",
        dsh_mcp::oauth::login_path(&dir, name).display(),
        origin_of(&url)
    );
    Ok(ExitCode::SUCCESS)
}

/// The scheme, host and port of `url`, for messages.
fn origin_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", rest.split('/').next().unwrap_or(rest)),
        None => url.to_string(),
    }
}

/// Best effort: the platform's opener, detached; the URL is printed either way.
fn open_browser(link: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let _ = std::process::Command::new(opener)
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

fn run_logout(home: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let dir = login_dir(home);
    if dsh_mcp::oauth::delete_login(&dir, name).map_err(user_error)? {
        println!("logged out of MCP server `{name}` (its tokens were deleted)");
    } else {
        println!(
            "MCP server `{name}` has no stored login ({} does not exist)",
            dsh_mcp::oauth::login_path(&dir, name).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
