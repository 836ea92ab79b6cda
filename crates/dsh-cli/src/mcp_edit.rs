//! `dsh mcp add` and `dsh mcp remove`: `[mcp.servers.<name>]` written into and removed from the
//! user's `$DSH_HOME/config.toml` with `toml_edit`, so the file's comments and layout stay, and
//! checked by the loader's rules (`dsh_config::check_user_file`) before anything is written.

use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table};

/// A server entry to write, as `dsh mcp add` was given it.
pub(crate) enum Entry {
    /// `dsh mcp add NAME -- CMD ARGS...`.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        env_vars: Vec<String>,
        cwd: Option<String>,
    },
    /// `dsh mcp add NAME --url URL`.
    Http {
        url: String,
        headers: Vec<(String, String)>,
        bearer_token_env: Option<String>,
    },
}

fn user_error(message: String) -> anyhow::Error {
    crate::run::user_error("INVALID_ARGS", message)
}

/// The user's configuration file, parsed for editing (empty when it does not exist yet), and
/// the path written to: a symbolic link is followed, so a linked dotfile stays linked.
struct UserFile {
    path: PathBuf,
    target: PathBuf,
    doc: DocumentMut,
    existed: bool,
}

impl UserFile {
    fn open(path: &Path) -> anyhow::Result<UserFile> {
        let (text, existed) = match std::fs::read_to_string(path) {
            Ok(text) => (text, true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => (String::new(), false),
            Err(err) => {
                return Err(user_error(format!(
                    "cannot read {}: {err}; check its permissions",
                    path.display()
                )))
            }
        };
        let doc: DocumentMut = text.parse().map_err(|err: toml_edit::TomlError| {
            // The message names the line; the file's text is not quoted (it may hold a secret).
            let position = err
                .span()
                .map(|span| {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    format!(" at line {line}")
                })
                .unwrap_or_default();
            user_error(format!(
                "{} is not valid TOML{position}; fix it first (`dsh config show` reports the problem)",
                path.display()
            ))
        })?;
        let target = match existed {
            true => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            false => path.to_path_buf(),
        };
        Ok(UserFile {
            path: path.to_path_buf(),
            target,
            doc,
            existed,
        })
    }

    /// `[mcp.servers]` of the file, when present as a table.
    fn servers(&self) -> Option<&Table> {
        self.doc.get("mcp")?.as_table()?.get("servers")?.as_table()
    }

    fn has(&self, name: &str) -> bool {
        self.servers().is_some_and(|s| s.contains_key(name))
            || self
                .doc
                .get("mcp")
                .and_then(|m| m.as_table_like())
                .and_then(|m| m.get("servers"))
                .and_then(|s| s.as_table_like())
                .is_some_and(|s| s.contains_key(name))
    }

    /// `[mcp.servers]`, created (as implicit tables, so no empty headers appear) when absent.
    fn servers_mut(&mut self) -> anyhow::Result<&mut Table> {
        let path = self.path.display().to_string();
        let not_a_table = || {
            user_error(format!(
                "`mcp` or `mcp.servers` in {path} is not written as `[mcp.servers.<name>]` tables; \
                 edit that file by hand"
            ))
        };
        let mcp = self.doc.entry("mcp").or_insert_with(|| {
            let mut table = Table::new();
            table.set_implicit(true);
            Item::Table(table)
        });
        let mcp = mcp.as_table_mut().ok_or_else(not_a_table)?;
        let servers = mcp.entry("servers").or_insert_with(|| {
            let mut table = Table::new();
            table.set_implicit(true);
            Item::Table(table)
        });
        servers.as_table_mut().ok_or_else(not_a_table)
    }

    /// Checks the edited text by the loader's rules, then writes it: to a new file beside the
    /// target, renamed over it, with the old file's mode (0600 for a new one).
    fn save(&self) -> anyhow::Result<()> {
        let text = self.doc.to_string();
        dsh_config::check_user_file(&text, &self.path).map_err(|errors| {
            user_error(format!(
                "the entry would not load, nothing was written:\n{errors}"
            ))
        })?;
        let dir = self
            .target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.exists() {
            crate::home::create_private_dir(dir)
                .map_err(|err| user_error(format!("cannot create {}: {err}", dir.display())))?;
        }
        // The file keeps the rights it had (a new one is the owner's only).
        #[cfg(unix)]
        let mode = match self.existed {
            true => std::fs::metadata(&self.target)
                .map(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    m.permissions().mode() & 0o7777
                })
                .unwrap_or(0o600),
            false => 0o600,
        };
        #[cfg(not(unix))]
        let mode = 0o600;
        crate::home::write_file_atomically(&self.target, text.as_bytes(), mode)
            .map_err(|err| user_error(format!("cannot write {}: {err}", self.target.display())))
    }
}

fn strings(items: &[String]) -> Item {
    let mut array = Array::new();
    for item in items {
        array.push(item.as_str());
    }
    toml_edit::value(array)
}

fn pairs(items: &[(String, String)]) -> Item {
    let mut table = InlineTable::new();
    for (key, value) in items {
        table.insert(key, value.as_str().into());
    }
    toml_edit::value(table)
}

/// Writes `[mcp.servers.<name>]` into the user file at `path`. Refuses an existing name unless
/// `force` (the entry is then replaced whole). Returns whether an entry was replaced.
pub(crate) fn add(path: &Path, name: &str, entry: &Entry, force: bool) -> anyhow::Result<bool> {
    let mut file = UserFile::open(path)?;
    let replaced = file.has(name);
    if replaced && !force {
        return Err(user_error(format!(
            "an MCP server `{name}` is already configured in {}; give --force to replace it, or \
             `dsh mcp remove {name}` first",
            path.display()
        )));
    }
    let mut table = Table::new();
    match entry {
        Entry::Stdio {
            command,
            args,
            env,
            env_vars,
            cwd,
        } => {
            table.insert("command", toml_edit::value(command.as_str()));
            if !args.is_empty() {
                table.insert("args", strings(args));
            }
            if !env.is_empty() {
                table.insert("env", pairs(env));
            }
            if !env_vars.is_empty() {
                table.insert("env_vars", strings(env_vars));
            }
            if let Some(cwd) = cwd {
                table.insert("cwd", toml_edit::value(cwd.as_str()));
            }
        }
        Entry::Http {
            url,
            headers,
            bearer_token_env,
        } => {
            table.insert("url", toml_edit::value(url.as_str()));
            if !headers.is_empty() {
                table.insert("headers", pairs(headers));
            }
            if let Some(variable) = bearer_token_env {
                table.insert("bearer_token_env", toml_edit::value(variable.as_str()));
            }
        }
    }
    let mut servers = file.servers_mut()?;
    match servers.get_mut(name) {
        // Replaced in place, so the entry keeps its position and the comment above it.
        Some(Item::Table(old)) => {
            let decor = old.decor().clone();
            *old = table;
            *old.decor_mut() = decor;
        }
        _ => {
            // Comments at the end of the file stay above the new entry, in file order.
            let trailing = file.doc.trailing().as_str().unwrap_or_default().to_string();
            if !trailing.trim().is_empty() {
                table
                    .decor_mut()
                    .set_prefix(format!("\n{}", trailing.trim_start()));
                file.doc.set_trailing("");
            }
            servers = file.servers_mut()?;
            servers.insert(name, Item::Table(table));
        }
    }
    file.save()?;
    Ok(replaced)
}

/// Removes `[mcp.servers.<name>]` from the user file at `path`; `false` when the file has no
/// such entry (nothing is written then).
pub(crate) fn remove(path: &Path, name: &str) -> anyhow::Result<bool> {
    let mut file = UserFile::open(path)?;
    if !file.existed || !file.has(name) {
        return Ok(false);
    }
    let removed = file
        .doc
        .get_mut("mcp")
        .and_then(|m| m.as_table_like_mut())
        .and_then(|m| m.get_mut("servers"))
        .and_then(|s| s.as_table_like_mut())
        .and_then(|s| s.remove(name))
        .is_some();
    if removed {
        file.save()?;
    }
    Ok(removed)
}

/// Whether the TOML file at `path` defines `[mcp.servers.<name>]` (read only to say where a
/// server `dsh mcp remove` cannot remove is defined).
pub(crate) fn defines(path: &Path, name: &str) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| t.get("mcp")?.get("servers")?.get(name).map(|_| ()))
        .is_some()
}
