//! Layers in, one merged table with provenance out: built-in defaults, the user file, the
//! project file, environment variables and flags, each later layer winning per key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::builtin::builtin_layer;
use crate::error::{ConfigError, ConfigErrors, Source};
use crate::schema::check_layer;

/// File name of both configuration files.
pub const CONFIG_FILE: &str = "config.toml";

/// Directory of the project override, relative to a project directory.
pub const PROJECT_DIR: &str = ".dsh";

/// `$DSH_HOME/config.toml`.
pub fn user_config_path(home: &Path) -> PathBuf {
    home.join(CONFIG_FILE)
}

/// The project file that applies in `cwd`: the first `.dsh/config.toml` found in `cwd` or
/// its ancestors, stopping after the directory holding `.git` (the project root). The user
/// file is never taken as a project file. `None` when there is none.
pub fn project_config_path(cwd: &Path, home: &Path) -> Option<PathBuf> {
    let user = user_config_path(home);
    for dir in cwd.ancestors() {
        let candidate = dir.join(PROJECT_DIR).join(CONFIG_FILE);
        if candidate.is_file() && !same_file(&candidate, &user) {
            return Some(candidate);
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    None
}

/// Whether `a` and `b` name the same file (compared canonically when both exist).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Values given on the command line; each becomes its own top-level layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--effort`.
    pub effort: Option<String>,
    /// `--permission`.
    pub permission: Option<String>,
    /// `--trust-workspace`: the project's settings apply for this run without a recorded
    /// trust (docs/configuration.md, "Workspace trust").
    pub trust_workspace: bool,
    /// `--profile`: the `[profiles.<name>]` table of the user file to apply (else
    /// `DSH_PROFILE`).
    pub profile: Option<String>,
    /// `-c key.path=value` overrides in command-line order, each a layer above the environment
    /// (docs/configuration.md, "Profiles and overrides").
    pub overrides: Vec<String>,
}

/// The variable that selects a profile when `--profile` is not given.
pub const PROFILE_ENV: &str = "DSH_PROFILE";

/// Environment variables read as configuration, with the key each sets.
pub const ENV_KEYS: &[(&str, &[&str])] = &[
    (
        dsh_llm::providers::DEEPSEEK.base_url_env,
        &["providers", "deepseek", "base_url"],
    ),
    (
        dsh_llm::providers::ANTHROPIC.base_url_env,
        &["providers", "anthropic", "base_url"],
    ),
    ("DSH_PERMISSION_MODE", &["permission"]),
];

/// Reads and parses one file; a missing file is `Ok(None)`. Parse errors give the line and
/// column but never quote the file's text (it might hold a pasted secret).
pub(crate) fn read_layer(path: &Path, source: &Source) -> Result<Option<Table>, ConfigError> {
    if matches!(source, Source::ProjectFile(_)) && path.exists() {
        // A repository's file: read as the trust check reads it (no link out, no FIFO, at
        // most 1 MiB), so what is checked here is what it pinned.
        let bytes = crate::trust::read_checked(
            path,
            &[crate::trust::project_dir_of(path)],
            crate::trust::MAX_PROJECT_FILE,
            false,
        )
        .map_err(|why| {
            ConfigError::new(
                source,
                "",
                format!("is not read: {why}"),
                "make it a regular file of the project, or remove it",
            )
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ConfigError::new(
                source,
                "",
                "is not UTF-8 text".to_string(),
                "save it as UTF-8",
            )
        })?;
        return parse_layer(&text, source).map(Some);
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(ConfigError::new(
                source,
                "",
                format!("cannot be read: {err}"),
                "check the file's permissions, or remove it",
            ))
        }
    };
    parse_layer(&text, source).map(Some)
}

/// Parses the text of a configuration file; errors as for [`read_layer`].
pub(crate) fn parse_layer(text: &str, source: &Source) -> Result<Table, ConfigError> {
    text.parse::<Table>().map_err(|err| {
        let position = err
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(" at line {line}, column {column}")
            })
            .unwrap_or_default();
        ConfigError::new(
            source,
            "",
            format!("is not valid TOML{position}: {}", err.message().trim()),
            "fix the syntax there (strings need quotes, sections are written `[name]`)",
        )
    })
}

fn nested(path: &[&str], value: Value) -> Table {
    let mut table = Table::new();
    match path {
        [] => {}
        [last] => {
            table.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            table.insert((*first).to_string(), Value::Table(nested(rest, value)));
        }
    }
    table
}

/// Configuration layers with their sources, lowest precedence first.
pub(crate) type Layers = Vec<(Source, Table)>;

/// All layers in precedence order (lowest first), each already checked on its own, and the
/// problems of the project file apart: that layer is left out when it has any, and
/// `Config::load` decides whether they are fatal (a trusted project) or a warning (an
/// untrusted one, which a planted file must not be able to stop).
pub(crate) fn collect_layers(
    home: &Path,
    cwd: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    flags: &Flags,
) -> Result<(Layers, Vec<ConfigError>), ConfigErrors> {
    let mut layers = vec![(Source::Default, builtin_layer())];
    let mut errors = Vec::new();
    let user = user_config_path(home);
    let files = [
        Some((Source::UserFile(user.clone()), user.clone())),
        project_config_path(cwd, home).map(|p| (Source::ProjectFile(p.clone()), p)),
    ];
    let mut project_errors = Vec::new();
    let mut profiles = None;
    for (source, path) in files.into_iter().flatten() {
        let project = matches!(source, Source::ProjectFile(_));
        match read_layer(&path, &source) {
            Ok(Some(mut table)) if !project => {
                if let Some(defined) = table.remove("profiles") {
                    profiles = Some((path.clone(), defined));
                }
                layers.push((source, table));
            }
            Ok(Some(table)) if project => {
                let problems = check_layer(&table, &source);
                if problems.is_empty() {
                    layers.push((source, table));
                } else {
                    project_errors.extend(problems);
                }
            }
            Ok(Some(_)) | Ok(None) => {}
            Err(error) if project => project_errors.push(error),
            Err(error) => errors.push(error),
        }
    }
    if let Some((path, defined)) = &profiles {
        errors.extend(check_profiles(path, defined));
    }
    match profile_layer(&profiles, &user, lookup, flags) {
        Ok(Some(layer)) => layers.push(layer),
        Ok(None) => {}
        Err(error) => errors.push(error),
    }
    for (variable, path) in ENV_KEYS {
        if let Some(value) = lookup(variable).filter(|v| !v.trim().is_empty()) {
            let value = Value::String(value.trim().to_string());
            layers.push((Source::Env(variable.to_string()), nested(path, value)));
        }
    }
    for text in &flags.overrides {
        match override_layer(text) {
            Ok(layer) => layers.push(layer),
            Err(error) => errors.push(error),
        }
    }
    let flag_values = [
        ("provider", &flags.provider),
        ("model", &flags.model),
        ("effort", &flags.effort),
        ("permission", &flags.permission),
    ];
    for (name, value) in flag_values {
        if let Some(value) = value {
            let value = Value::String(value.trim().to_string());
            layers.push((Source::Flag(name.to_string()), nested(&[name], value)));
        }
    }
    for (source, table) in &layers {
        if !matches!(source, Source::ProjectFile(_)) {
            errors.extend(check_layer(table, source));
        }
    }
    if errors.is_empty() {
        Ok((layers, project_errors))
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The selected profile (`--profile`, else `DSH_PROFILE`) as a layer: its table from the
/// user file's `[profiles]` (`defined`, with that file's path). Profiles come from the user
/// file only: the schema refuses `profiles` in a project file, whose settings a profile would
/// otherwise lift above the project's own restrictions.
fn profile_layer(
    defined: &Option<(PathBuf, Value)>,
    user: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    flags: &Flags,
) -> Result<Option<(Source, Table)>, ConfigError> {
    let (name, asked_by) = match (&flags.profile, lookup(PROFILE_ENV)) {
        (Some(name), _) => (name.trim().to_string(), Source::Flag("profile".into())),
        (None, Some(name)) if !name.trim().is_empty() => {
            (name.trim().to_string(), Source::Env(PROFILE_ENV.into()))
        }
        _ => return Ok(None),
    };
    let tables = defined.as_ref().and_then(|(_, value)| value.as_table());
    let Some(table) = tables.and_then(|t| t.get(&name)).and_then(Value::as_table) else {
        let names: Vec<&str> = tables
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let fix = match names.is_empty() {
            true => format!(
                "define it as a `[profiles.{name}]` table in {}, or drop the selection",
                user.display()
            ),
            false => format!(
                "use one of the profiles {} defines: {}",
                user.display(),
                names.join(", ")
            ),
        };
        return Err(ConfigError::new(
            &asked_by,
            "profile",
            format!("no profile is named `{name}`"),
            fix,
        ));
    };
    let file = defined.as_ref().map(|(path, _)| path.clone());
    let source = Source::Profile {
        name,
        file: file.unwrap_or_default(),
    };
    Ok(Some((source, table.clone())))
}

/// Every profile of the user file checked as a layer of its own, selected or not: a typo in
/// a profile is found the day it is written, not the day it is first used.
fn check_profiles(file: &Path, defined: &Value) -> Vec<ConfigError> {
    let user = Source::UserFile(file.to_path_buf());
    let Some(tables) = defined.as_table() else {
        return vec![ConfigError::new(
            &user,
            "profiles",
            "must be a table of profiles",
            "write each profile as a table: `[profiles.NAME]` followed by its keys",
        )];
    };
    let mut errors = Vec::new();
    for (name, table) in tables {
        match table.as_table() {
            Some(table) => {
                let source = Source::Profile {
                    name: name.clone(),
                    file: file.to_path_buf(),
                };
                errors.extend(check_layer(table, &source));
            }
            None => errors.push(ConfigError::new(
                &user,
                key_path("profiles", name),
                "must be a table",
                format!("write it as `[profiles.{name}]` followed by its keys"),
            )),
        }
    }
    errors
}

/// One `-c key.path=value` as a layer. The value is read as a TOML value (`5`, `true`,
/// `["a", "b"]`, `{ x = 1 }`, `"text"`); anything that is not one is taken as a string, so
/// `-c model=deepseek-chat` needs no quotes.
fn override_layer(text: &str) -> Result<(Source, Table), ConfigError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(ConfigError::new(
            &Source::Override(text.trim().to_string()),
            "",
            "is not of the form key=value",
            "write `-c key.path=value`, e.g. `-c model=deepseek-reasoner` or `-c budget.max_steps=20`",
        ));
    };
    let key = key.trim();
    let source = Source::Override(key.to_string());
    let value = value.trim();
    let table = format!("{key} = {value}")
        .parse::<Table>()
        .or_else(|_| format!("{key} = {}", Value::String(value.to_string())).parse::<Table>())
        .map_err(|_| {
            ConfigError::new(
                &source,
                "",
                "is not a key path",
                "name the key as in config.toml, parts joined by dots (`tui.alt_screen`); quote \
                 parts with other characters (`models.\"my.model\".context_window`)",
            )
        })?;
    Ok((source, table))
}

/// Provenance of every leaf value, by dotted key path.
pub(crate) type Provenance = BTreeMap<String, Source>;

/// Merges `layers` (lowest precedence first): tables merge key by key, any other value (arrays
/// included) replaces the one below. Returns the merged table and where each leaf came from.
pub(crate) fn merge_layers(layers: &[(Source, Table)]) -> (Table, Provenance) {
    let mut merged = Table::new();
    let mut provenance = Provenance::new();
    for (source, table) in layers {
        merge_into(&mut merged, table, "", source, &mut provenance);
    }
    (merged, provenance)
}

/// The dotted path of `key` under `path`, quoting keys that are not bare TOML keys.
pub fn key_path(path: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if bare {
        key.to_string()
    } else {
        format!("\"{key}\"")
    };
    if path.is_empty() {
        key
    } else {
        format!("{path}.{key}")
    }
}

fn merge_into(
    target: &mut Table,
    layer: &Table,
    path: &str,
    source: &Source,
    provenance: &mut Provenance,
) {
    for (key, value) in layer {
        let full = key_path(path, key);
        match (target.get_mut(key), value) {
            (Some(Value::Table(existing)), Value::Table(incoming)) => {
                merge_into(existing, incoming, &full, source, provenance);
            }
            _ => {
                let prefix = format!("{full}.");
                provenance.retain(|k, _| !k.starts_with(&prefix));
                record(value, &full, source, provenance);
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

fn record(value: &Value, path: &str, source: &Source, provenance: &mut Provenance) {
    match value {
        Value::Table(table) if !table.is_empty() => {
            for (key, inner) in table {
                record(inner, &key_path(path, key), source, provenance);
            }
        }
        _ => {
            provenance.insert(path.to_string(), source.clone());
        }
    }
}

/// Checks the text of `$DSH_HOME/config.toml` (at `path`) as [`Config::load`](crate::Config::load)
/// checks that layer: syntax, every key, and each `[mcp.servers.<name>]` entry by the loader's
/// rules. What `dsh mcp add` writes passes here before it is written, so it always loads.
pub fn check_user_file(text: &str, path: &Path) -> Result<(), ConfigErrors> {
    let source = Source::UserFile(path.to_path_buf());
    let mut table = parse_layer(text, &source).map_err(|e| ConfigErrors(vec![e]))?;
    // The user file's profiles are checked as loading checks them.
    let profiles = table.remove("profiles");
    let mut errors = check_layer(&table, &source);
    if let Some(profiles) = &profiles {
        errors.extend(check_profiles(path, profiles));
    }
    let mcp = table.get("mcp").and_then(Value::as_table);
    let (_, mcp_errors) = crate::mcp::mcp_servers(mcp, &|_: &str| source.clone());
    errors.extend(mcp_errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}
