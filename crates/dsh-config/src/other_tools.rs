//! The files of other tools that dsh reads as project settings (docs/other-tools.md): Claude
//! Code's `.mcp.json` at the workspace root (its `mcpServers` become project MCP servers, as
//! `[mcp.servers]` of `.dsh/config.toml` are) and `.claude/settings.json` (its `hooks` become
//! project hooks). Both are behind the workspace trust (`trust.rs`); what a file holds that dsh
//! does not use becomes a warning naming it, never silence.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use toml::{Table, Value};

/// Claude Code's project MCP file, at the workspace root.
pub const MCP_JSON_FILE: &str = ".mcp.json";

/// Claude Code's project settings file, in `.claude/` of the workspace.
pub const CLAUDE_SETTINGS_FILE: &str = "settings.json";

/// The `.mcp.json` of `workspace`, if it is a file.
pub fn project_mcp_json_path(workspace: &Path) -> Option<PathBuf> {
    let path = workspace.join(MCP_JSON_FILE);
    path.is_file().then_some(path)
}

/// The `.claude/settings.json` of `workspace`, if it is a file and not the user's own
/// `~/.claude/settings.json` (a workspace that is the home folder).
pub fn project_claude_settings_path(workspace: &Path) -> Option<PathBuf> {
    let path = workspace
        .join(crate::trust::CLAUDE_DIR)
        .join(CLAUDE_SETTINGS_FILE);
    let user = crate::trust::user_claude_dir().map(|dir| dir.join(CLAUDE_SETTINGS_FILE));
    let users = user.is_some_and(|u| crate::load::same_file(&path, &u));
    (path.is_file() && !users).then_some(path)
}

/// `.mcp.json`'s servers as a configuration layer (`{mcp: {servers: {<name>: {...}}}}`, in
/// `[mcp.servers]`'s keys), and one warning per thing left out: a server of an unsupported
/// type (`sse`), an unsupported key, an `${VAR}` that is not a whole value. An error when the
/// text is not a JSON object.
pub fn mcp_json_layer(origin: &str, text: &str) -> Result<(Table, Vec<String>), String> {
    let value: Json = serde_json::from_str(text)
        .map_err(|err| format!("{origin} is not valid JSON ({err}); fix it or remove it"))?;
    let Some(object) = value.as_object() else {
        return Err(format!(
            "{origin} is not a JSON object; write {{\"mcpServers\": {{...}}}}"
        ));
    };
    let mut warnings = Vec::new();
    for key in object.keys().filter(|k| *k != "mcpServers") {
        warnings.push(format!(
            "{origin}: `{key}` is not used by dsh (it reads `mcpServers`)"
        ));
    }
    let mut servers = Table::new();
    match object.get("mcpServers") {
        None => {}
        Some(Json::Object(map)) => {
            for (name, server) in map {
                let key = format!("mcpServers.{name}");
                match mcp_json_server(&key, server, &mut warnings) {
                    Ok(table) => {
                        servers.insert(name.clone(), Value::Table(table));
                    }
                    Err(why) => warnings.push(format!("{origin}: `{key}` is not used: {why}")),
                }
            }
        }
        Some(_) => warnings.push(format!(
            "{origin}: `mcpServers` is not an object of servers; it is not used"
        )),
    }
    let warnings = warnings
        .into_iter()
        .map(|w| match w.starts_with(origin) {
            true => w,
            false => format!("{origin}: {w}"),
        })
        .collect();
    let mut mcp = Table::new();
    if !servers.is_empty() {
        mcp.insert("servers".into(), Value::Table(servers));
    }
    let mut layer = Table::new();
    if !mcp.is_empty() {
        layer.insert("mcp".into(), Value::Table(mcp));
    }
    Ok((layer, warnings))
}

/// `${NAME}` (or `$NAME`) when `text` is exactly one variable reference.
fn whole_variable(text: &str) -> Option<&str> {
    let name = text
        .strip_prefix("${")
        .and_then(|t| t.strip_suffix('}'))
        .or_else(|| text.strip_prefix('$'))?;
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

fn json_strings(key: &str, value: &Json) -> Result<Vec<String>, String> {
    value
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .ok_or_else(|| format!("`{key}` must be an array of strings"))
}

/// One server of `mcpServers` as a `[mcp.servers.<name>]` table.
fn mcp_json_server(key: &str, server: &Json, warnings: &mut Vec<String>) -> Result<Table, String> {
    let Some(object) = server.as_object() else {
        return Err("a server is an object with `command` or `url`".to_string());
    };
    let kind = object.get("type").and_then(Json::as_str);
    let mut table = Table::new();
    let text = |name: &str| object.get(name).and_then(Json::as_str);
    match (kind, text("command"), text("url")) {
        (Some("sse"), _, _) => {
            return Err(
                "type `sse` is not supported (dsh speaks stdio and streamable HTTP); use the \
                 server's streamable-HTTP endpoint with \"type\": \"http\""
                    .to_string(),
            )
        }
        (None | Some("stdio"), Some(command), None) => {
            if command.contains('$') {
                return Err(format!(
                    "`command` `{command}` uses a variable, which dsh does not expand"
                ));
            }
            table.insert("command".into(), Value::String(command.to_string()));
            if let Some(args) = object.get("args") {
                let args = json_strings(&format!("{key}.args"), args)?;
                if let Some(arg) = args.iter().find(|a| a.contains("${")) {
                    return Err(format!(
                        "argument `{arg}` uses a variable, which dsh does not expand"
                    ));
                }
                table.insert(
                    "args".into(),
                    Value::Array(args.into_iter().map(Value::String).collect()),
                );
            }
            if let Some(env) = object.get("env") {
                stdio_env(env, &mut table)?;
            }
            if let Some(cwd) = text("cwd") {
                table.insert("cwd".into(), Value::String(cwd.to_string()));
            }
            for other in object.keys() {
                if !matches!(other.as_str(), "type" | "command" | "args" | "env" | "cwd") {
                    warnings.push(format!("`{key}.{other}` is not used by dsh"));
                }
            }
        }
        (None | Some("http") | Some("streamable-http"), None, Some(url)) => {
            table.insert("url".into(), Value::String(url.to_string()));
            if let Some(headers) = object.get("headers") {
                http_headers(headers, &mut table)?;
            }
            for other in object.keys() {
                if !matches!(other.as_str(), "type" | "url" | "headers") {
                    warnings.push(format!("`{key}.{other}` is not used by dsh"));
                }
            }
        }
        (Some(other), _, _) if !matches!(other, "stdio" | "http" | "streamable-http") => {
            return Err(format!("type `{other}` is not supported"))
        }
        _ => {
            return Err(
                "a server has either `command` (stdio) or `url` (http), not both nor neither"
                    .to_string(),
            )
        }
    }
    Ok(table)
}

/// A stdio server's `env`: plain values as `env`, `"NAME": "${NAME}"` as `env_vars`.
fn stdio_env(env: &Json, table: &mut Table) -> Result<(), String> {
    let Some(env) = env.as_object() else {
        return Err("`env` must be an object of strings".to_string());
    };
    let mut values = Table::new();
    let mut passed = Vec::new();
    for (name, value) in env {
        let Some(value) = value.as_str() else {
            return Err(format!("`env.{name}` must be a string"));
        };
        match whole_variable(value) {
            Some(variable) if variable == name => passed.push(Value::String(name.clone())),
            _ if value.contains('$') => {
                return Err(format!(
                    "`env.{name}` = `{value}`: dsh passes a variable only under its own name \
                     (`\"{name}\": \"${{{name}}}\"`)"
                ))
            }
            _ => {
                values.insert(name.clone(), Value::String(value.to_string()));
            }
        }
    }
    if !values.is_empty() {
        table.insert("env".into(), Value::Table(values));
    }
    if !passed.is_empty() {
        table.insert("env_vars".into(), Value::Array(passed));
    }
    Ok(())
}

/// An HTTP server's `headers`: plain values as `headers`, `Authorization: Bearer ${VAR}` as
/// `bearer_token_env`.
fn http_headers(headers: &Json, table: &mut Table) -> Result<(), String> {
    let Some(headers) = headers.as_object() else {
        return Err("`headers` must be an object of strings".to_string());
    };
    let mut values = Table::new();
    for (name, value) in headers {
        let Some(value) = value.as_str() else {
            return Err(format!("`headers.{name}` must be a string"));
        };
        let bearer = value
            .strip_prefix("Bearer ")
            .and_then(whole_variable)
            .filter(|_| name.eq_ignore_ascii_case("authorization"));
        match bearer {
            Some(variable) => {
                table.insert(
                    "bearer_token_env".into(),
                    Value::String(variable.to_string()),
                );
            }
            None if value.contains('$') => {
                return Err(format!(
                    "header `{name}` uses a variable, which dsh does not expand (only \
                     `Authorization: Bearer ${{VAR}}` is read, as bearer_token_env)"
                ))
            }
            None => {
                values.insert(name.clone(), Value::String(value.to_string()));
            }
        }
    }
    if !values.is_empty() {
        table.insert("headers".into(), Value::Table(values));
    }
    Ok(())
}

/// The keys of a Claude Code settings file other than `hooks`, which dsh does not read: one
/// warning naming them, or `None`. An error when the text is not a JSON object.
pub fn claude_settings_unused(origin: &str, text: &str) -> Result<Option<String>, String> {
    let value: Json = serde_json::from_str(text)
        .map_err(|err| format!("{origin} is not valid JSON ({err}); fix it or remove it"))?;
    let Some(object) = value.as_object() else {
        return Err(format!("{origin} is not a JSON object"));
    };
    let unused: Vec<&str> = object
        .keys()
        .filter(|k| *k != "hooks" && *k != "$schema")
        .map(String::as_str)
        .collect();
    Ok((!unused.is_empty()).then(|| {
        format!(
            "{origin}: dsh reads only `hooks` from Claude Code's settings; not used: {}",
            unused.join(", ")
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_json_servers_become_mcp_servers() {
        let text = r#"{
          "mcpServers": {
            "files": {"command": "npx", "args": ["-y", "srv"], "env": {"MODE": "x", "TOKEN": "${TOKEN}"}},
            "remote": {"type": "http", "url": "https://example.com/mcp",
                       "headers": {"Authorization": "Bearer ${API_TOKEN}", "X-Team": "a"}},
            "old": {"type": "sse", "url": "https://example.com/sse"},
            "bad": {"command": "srv", "env": {"A": "pre-${B}"}},
            "odd": {"command": "srv", "alwaysAllow": ["x"]}
          },
          "other": 1
        }"#;
        let (layer, warnings) = mcp_json_layer(".mcp.json", text).unwrap();
        let servers = layer["mcp"]["servers"].as_table().unwrap();
        let files = servers["files"].as_table().unwrap();
        assert_eq!(files["command"].as_str(), Some("npx"));
        assert_eq!(files["args"].as_array().unwrap().len(), 2);
        assert_eq!(files["env"]["MODE"].as_str(), Some("x"));
        assert_eq!(
            files["env_vars"].as_array().unwrap()[0].as_str(),
            Some("TOKEN")
        );
        let remote = servers["remote"].as_table().unwrap();
        assert_eq!(remote["bearer_token_env"].as_str(), Some("API_TOKEN"));
        assert_eq!(remote["headers"]["X-Team"].as_str(), Some("a"));
        assert!(!servers.contains_key("old") && !servers.contains_key("bad"));
        assert!(servers.contains_key("odd"));
        let all = warnings.join("\n");
        assert!(
            all.contains("mcpServers.old") && all.contains("sse"),
            "{all}"
        );
        assert!(all.contains("mcpServers.bad"), "{all}");
        assert!(all.contains("mcpServers.odd.alwaysAllow"), "{all}");
        assert!(all.contains("`other`"), "{all}");
        assert!(
            warnings.iter().all(|w| w.starts_with(".mcp.json: ")),
            "{all}"
        );
        assert!(mcp_json_layer(".mcp.json", "[1]").is_err());
        assert!(mcp_json_layer(".mcp.json", "{").is_err());
    }

    #[test]
    fn claude_settings_other_keys_are_named() {
        let text = r#"{"hooks": {}, "permissions": {"allow": []}, "env": {}}"#;
        let warning = claude_settings_unused("s.json", text).unwrap().unwrap();
        assert!(
            warning.contains("permissions") && warning.contains("env"),
            "{warning}"
        );
        assert_eq!(
            claude_settings_unused("s.json", r#"{"hooks": {}}"#),
            Ok(None)
        );
    }
}
