//! Where settings like `DEEPSEEK_API_KEY` come from (docs/configuration.md, "Credentials"): the
//! environment, then `./.env`, then `$DSH_HOME/.env`. Values are looked up, never printed.
//!
//! `./.env` belongs to the project, and anything that can write into the workspace could
//! have planted it, so it may set credentials only: the key variables of the built-in
//! providers and of the providers the user's own configuration defines. Any other variable
//! dsh asks for (`DSH_PERMISSION_MODE`, `DEEPSEEK_BASE_URL`, ...) is not taken from it, and the
//! refusal is reported once, naming the file and the variable (docs/configuration.md,
//! "The project's .env").
//!
//! Every secret these sources hold is known to the redactor ([`secrets`]; docs/SECURITY.md,
//! "Secrets and redaction"), whether or not this session uses it: another provider's key in
//! `$DSH_HOME/.env` is as secret as the active one.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_llm::LockExt;
use dsh_tools::SecretRedactor;

/// Key variables of the built-in providers, always accepted from `./.env`.
pub const BUILTIN_KEY_VARIABLES: [&str; 2] = ["DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"];

/// Where a setting was found (see [`Settings::origin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// dsh's environment.
    Environment,
    /// The project's `./.env` at this path.
    ProjectEnvFile(PathBuf),
    /// `$DSH_HOME/.env` at this path.
    HomeEnvFile(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Environment => f.write_str("the environment"),
            Origin::ProjectEnvFile(path) => write!(f, "the project's {}", path.display()),
            Origin::HomeEnvFile(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Variables from the environment with `.env` files as fallbacks.
#[derive(Debug, Default)]
pub struct Settings {
    /// `./.env` of the working directory: its path and entries.
    project: Option<(PathBuf, HashMap<String, String>)>,
    /// `$DSH_HOME/.env`.
    home: HashMap<String, String>,
    /// The path of `$DSH_HOME/.env`.
    home_path: PathBuf,
    /// Variables `./.env` may set.
    credentials: Mutex<BTreeSet<String>>,
    /// Variables asked for that only `./.env` had, refused; reported once.
    refused: Mutex<BTreeSet<String>>,
    reported: Mutex<BTreeSet<String>>,
}

/// Largest `.env` file read; a bigger one is ignored with a warning.
const MAX_ENV_FILE: u64 = 1024 * 1024;

/// The entries of the `.env` file at `path`; `None` when there is none. Only a regular file of
/// at most [`MAX_ENV_FILE`] bytes is read: a repository's `./.env` may be planted as a link to
/// `/dev/zero` or a FIFO, which must neither exhaust memory nor stall every command.
fn read_env_file(path: &Path) -> Option<HashMap<String, String>> {
    let warn = |problem: String| {
        let line = format!("{} ignored: {problem}", path.display());
        eprintln!("dsh: warning: {}", dsh_tools::printable(&line));
        None
    };
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => return warn(format!("cannot read it: {err}")),
        Ok(meta) if !meta.is_file() => return warn("it is not a regular file".to_string()),
        Ok(meta) if meta.len() > MAX_ENV_FILE => {
            return warn(format!("it is larger than {MAX_ENV_FILE} bytes"))
        }
        Ok(_) => {}
    }
    let mut text = String::new();
    let read = std::fs::File::open(path).and_then(|file| {
        use std::io::Read;
        file.take(MAX_ENV_FILE + 1).read_to_string(&mut text)
    });
    match read {
        Ok(n) if n as u64 > MAX_ENV_FILE => warn(format!("it is larger than {MAX_ENV_FILE} bytes")),
        Ok(_) => Some(parse_env_file(&text)),
        Err(err) => warn(format!("cannot read it: {err}")),
    }
}

impl Settings {
    /// Reads `./.env` (relative to `cwd`) and `home/.env` if they exist. A line that is not
    /// `KEY=VALUE` is skipped; an unreadable file is reported as a warning on stderr.
    pub fn load(cwd: &Path, home: &Path) -> Settings {
        let project_path = cwd.join(".env");
        let home_path = home.join(".env");
        let same = std::fs::canonicalize(&project_path)
            .ok()
            .zip(std::fs::canonicalize(&home_path).ok())
            .is_some_and(|(a, b)| a == b);
        let project = if same {
            None
        } else {
            read_env_file(&project_path).map(|entries| (project_path, entries))
        };
        Settings {
            project,
            home: read_env_file(&home_path).unwrap_or_default(),
            home_path,
            credentials: Mutex::new(
                BUILTIN_KEY_VARIABLES
                    .iter()
                    .map(|v| v.to_string())
                    .collect(),
            ),
            ..Settings::default()
        }
    }

    /// Accepts `names` (credential variables the user's configuration knows) from `./.env`.
    pub fn allow_credentials(&self, names: impl IntoIterator<Item = String>) {
        self.credentials.lock_or_recover().extend(names);
    }

    /// The value of `name`: environment first, then `./.env` (credentials only), then
    /// `$DSH_HOME/.env`. Blank values count as unset.
    pub fn get(&self, name: &str) -> Option<String> {
        self.find(name).map(|(value, _)| value)
    }

    /// Where [`Settings::get`] finds `name` (never its value): `dsh doctor` says where the
    /// key came from.
    pub fn origin(&self, name: &str) -> Option<Origin> {
        self.find(name).map(|(_, origin)| origin)
    }

    /// The value of `name` and where it was found, in [`Settings::get`]'s order.
    fn find(&self, name: &str) -> Option<(String, Origin)> {
        if let Some(value) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
            return Some((value, Origin::Environment));
        }
        if let Some(value) = self.project_value(name) {
            if self.credentials.lock_or_recover().contains(name) {
                return self
                    .project
                    .as_ref()
                    .map(|(path, _)| (value, Origin::ProjectEnvFile(path.clone())));
            }
            self.refused.lock_or_recover().insert(name.to_string());
        }
        self.home
            .get(name)
            .filter(|v| !v.trim().is_empty())
            .map(|value| (value.clone(), Origin::HomeEnvFile(self.home_path.clone())))
    }

    /// The path of the project's `./.env` when it was read.
    pub fn project_file(&self) -> Option<&Path> {
        self.project.as_ref().map(|(path, _)| path.as_path())
    }

    /// The value of `name` in `./.env` only: the key of a provider whose endpoint the
    /// project set (dsh-config `Config::select_keyed`).
    pub fn project_value(&self, name: &str) -> Option<String> {
        self.project
            .as_ref()
            .and_then(|(_, entries)| entries.get(name))
            .filter(|v| !v.trim().is_empty())
            .cloned()
    }

    /// The secret-looking entries of `./.env` and `$DSH_HOME/.env` as `(name, value)`
    /// pairs, by the rule of [`dsh_tools::env_file_secrets`] (every value of a variable named
    /// like a secret, and other values that look like tokens).
    pub fn env_file_secrets(&self) -> Vec<(String, String)> {
        let project = self.project.iter().flat_map(|(_, entries)| entries.iter());
        dsh_tools::env_file_secrets(
            project
                .chain(self.home.iter())
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
    }

    /// One warning per variable refused from `./.env` since the last call.
    pub fn take_warnings(&self) -> Vec<String> {
        let Some((path, _)) = &self.project else {
            return Vec::new();
        };
        let refused = self.refused.lock_or_recover().clone();
        let mut reported = self.reported.lock_or_recover();
        refused
            .into_iter()
            .filter(|name| reported.insert(name.clone()))
            .map(|name| {
                format!(
                    "ignoring {name} from {}: a project's .env may set only credentials; set \
                     it in your environment or in $DSH_HOME/.env",
                    path.display()
                )
            })
            .collect()
    }

    /// Prints [`Settings::take_warnings`] on stderr.
    pub fn print_warnings(&self) {
        for warning in self.take_warnings() {
            eprintln!("dsh: warning: {}", dsh_tools::printable(&warning));
        }
    }
}

/// Every secret dsh has loaded for a workspace, for redaction (docs/SECURITY.md, "Secrets
/// and redaction"):
///
/// * the secret-named variables of dsh's environment ([`SecretRedactor::from_env`]);
/// * the key of every provider the configuration defines (built-in or configured,
///   active or not) from wherever [`Settings::get`] finds it, and the project's own key;
/// * provider and MCP headers and a stdio MCP server's `env` entries that are secret by
///   name or look like tokens; MCP `bearer_token_env` and `env_vars` values;
/// * the secret-looking entries of `./.env` and `$DSH_HOME/.env`
///   ([`Settings::env_file_secrets`]).
pub fn secrets(settings: &Settings, config: &dsh_config::Config) -> SecretRedactor {
    let mut redactor = SecretRedactor::from_env();
    let mut variables: BTreeSet<String> = BUILTIN_KEY_VARIABLES
        .iter()
        .map(|v| v.to_string())
        .collect();
    let mut literal: Vec<(String, String)> = Vec::new();
    for provider in config.providers.values() {
        variables.extend(provider.api_key_env.clone());
        literal.extend(provider.headers.iter().cloned());
    }
    for name in variables.iter().filter(|name| !is_common_variable(name)) {
        for value in settings
            .get(name)
            .into_iter()
            .chain(settings.project_value(name))
        {
            redactor.add(name, &value);
        }
    }
    add_literal(&mut redactor, &literal);
    add_literal(&mut redactor, &settings.env_file_secrets());
    add_mcp_secrets(&mut redactor, &config.mcp_servers, settings);
    redactor
}

/// Variables every system sets that a configuration may still name as a key variable by
/// mistake (`api_key_env = "PATH"`): their values are no secret, and redacting every piece of
/// `PATH` would garble ordinary output.
fn is_common_variable(name: &str) -> bool {
    const COMMON: [&str; 12] = [
        "PATH", "HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "TERM", "LANG", "TMPDIR",
        "HOSTNAME", "DSH_HOME",
    ];
    COMMON.contains(&name)
}

/// Adds the `(name, value)` pairs that are secret by name or look like tokens
/// ([`dsh_tools::env_file_secrets`]).
/// The tokens `dsh mcp login` stored for `server` (docs/mcp.md, "OAuth"): a server that
/// echoes its token in a tool result, or a command that finds it, shows the model a
/// placeholder. Tokens a session refreshes later are not added.
fn add_oauth_login(redactor: &mut SecretRedactor, server: &str, settings: &Settings) {
    let Some(home) = settings
        .home_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    else {
        return;
    };
    let dir = home.join(dsh_mcp::oauth::LOGIN_DIR);
    let Ok(Some(login)) = dsh_mcp::oauth::read_login(&dir, server) else {
        return;
    };
    let name = format!("mcp-login:{server}");
    redactor.add(&name, &login.access_token);
    for value in [&login.refresh_token, &login.client_secret]
        .into_iter()
        .flatten()
    {
        redactor.add(&name, value);
    }
}

fn add_literal(redactor: &mut SecretRedactor, pairs: &[(String, String)]) {
    let found = dsh_tools::env_file_secrets(
        pairs
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
    );
    for (name, value) in found {
        redactor.add(&name, &value);
    }
}

/// A project's MCP server (`from_project`) gets the variables it names in `env_vars` and
/// `bearer_token_env` from the project's own `./.env` only, as a provider whose endpoint the
/// project set gets its key (docs/configuration.md, "Keys never follow a project's endpoint"):
/// never from the user's environment or `$DSH_HOME/.env`, so a trusted project cannot send the
/// user's provider key to its own code or host (found by the fourth adversarial review). The
/// values found become the server's `env` entries (stdio) or its `Authorization` header (HTTP);
/// returns a warning for each variable the project's `./.env` does not hold.
pub fn project_server_values(
    server: &mut dsh_config::McpServerConfig,
    settings: &Settings,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut missing = |name: &str, server: &str| {
        warnings.push(format!(
            "MCP server `{server}` of the project asks for {name}; a project's server gets \
             variables only from the project's ./.env, which does not set it"
        ));
    };
    let name = server.name.clone();
    match &mut server.transport {
        dsh_config::McpTransport::Stdio { env, env_vars, .. } => {
            for variable in std::mem::take(env_vars) {
                match settings.project_value(&variable) {
                    Some(value) => env.push((variable, value)),
                    None => missing(&variable, &name),
                }
            }
        }
        dsh_config::McpTransport::Http {
            headers,
            bearer_token_env,
            ..
        } => {
            if let Some(variable) = bearer_token_env.take() {
                match settings.project_value(&variable) {
                    Some(token) => {
                        headers.push(("Authorization".into(), format!("Bearer {token}")))
                    }
                    None => missing(&variable, &name),
                }
            }
        }
    }
    warnings
}

/// Adds what MCP servers hold: the value of each `bearer_token_env` (always), and headers,
/// `env` entries and passed-through `env_vars` values that are secret by name or look like
/// tokens. Variables are looked up in `settings` (the environment first).
pub fn add_mcp_secrets(
    redactor: &mut SecretRedactor,
    servers: &[dsh_config::McpServerConfig],
    settings: &Settings,
) {
    for server in servers {
        match &server.transport {
            dsh_config::McpTransport::Stdio { env, env_vars, .. } => {
                let mut pairs = env.clone();
                for name in env_vars {
                    pairs.extend(settings.get(name).map(|value| (name.clone(), value)));
                }
                add_literal(redactor, &pairs);
            }
            dsh_config::McpTransport::Http {
                headers,
                bearer_token_env,
                ..
            } => {
                add_literal(redactor, headers);
                let variable = bearer_token_env
                    .as_deref()
                    .filter(|n| !is_common_variable(n));
                if let Some((name, value)) = variable.and_then(|n| Some((n, settings.get(n)?))) {
                    redactor.add(name, &value);
                }
                add_oauth_login(redactor, &server.name, settings);
            }
        }
    }
}

/// Parses `KEY=VALUE` lines: `#` comments, optional `export `, optional single or double quotes.
pub fn parse_env_file(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')))
        {
            &value[1..value.len() - 1]
        } else {
            value
        };
        out.insert(key.to_string(), value.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planted `./.env` that is a device, a FIFO or huge is ignored at once, not read until
    /// memory runs out or a writer comes (adversarial review).
    #[cfg(unix)]
    #[test]
    fn a_planted_env_that_is_no_small_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join(".env");
        std::os::unix::fs::symlink("/dev/zero", &env).unwrap();
        assert!(read_env_file(&env).is_none());
        std::fs::remove_file(&env).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&env).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(read_env_file(&env).is_none());
            std::fs::remove_file(&env).unwrap();
        }
        std::fs::write(&env, "A=1\n".repeat(300_000)).unwrap();
        assert!(read_env_file(&env).is_none());
        std::fs::write(&env, "A=1\n").unwrap();
        assert_eq!(read_env_file(&env).unwrap()["A"], "1");
    }

    #[test]
    fn parses_common_env_file_forms() {
        let map = parse_env_file(
            "# comment\nexport A=1\nB = \"two words\"\nC='x'\nnot a pair\n=novalue\nD=\n",
        );
        assert_eq!(map.get("A").map(String::as_str), Some("1"));
        assert_eq!(map.get("B").map(String::as_str), Some("two words"));
        assert_eq!(map.get("C").map(String::as_str), Some("x"));
        assert_eq!(map.get("D").map(String::as_str), Some(""));
        assert_eq!(map.len(), 4);
    }

    /// `origin` names the source `get` read, in `get`'s order, and a variable `./.env` may not
    /// set is found in `$DSH_HOME/.env` instead.
    #[test]
    fn origin_names_where_get_found_the_value() {
        let root = tempfile::tempdir().unwrap();
        let (home, cwd) = (root.path().join("home"), root.path().join("ws"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(
            home.join(".env"),
            "ANTHROPIC_API_KEY=from-home\nDSH_ORIGIN_TEST_OTHER=home-other\n",
        )
        .unwrap();
        std::fs::write(
            cwd.join(".env"),
            "DEEPSEEK_API_KEY=from-project\nDSH_ORIGIN_TEST_OTHER=project-other\n",
        )
        .unwrap();
        let settings = Settings::load(&cwd, &home);
        assert_eq!(
            settings.origin("DEEPSEEK_API_KEY"),
            Some(Origin::ProjectEnvFile(cwd.join(".env")))
        );
        assert_eq!(
            settings.origin("ANTHROPIC_API_KEY"),
            Some(Origin::HomeEnvFile(home.join(".env")))
        );
        // Not a credential: `./.env` may not set it.
        assert_eq!(
            settings.origin("DSH_ORIGIN_TEST_OTHER"),
            Some(Origin::HomeEnvFile(home.join(".env")))
        );
        assert_eq!(settings.origin("DSH_ORIGIN_TEST_UNSET"), None);
        assert_eq!(settings.origin("PATH"), Some(Origin::Environment));
        assert_eq!(Origin::Environment.to_string(), "the environment");
    }

    /// Every provider's key (active or not, from either `.env`), MCP bearer tokens, headers
    /// and `env` entries, and the secret-looking `.env` values are known; word-like values are
    /// not (docs/SECURITY.md, "Secrets and redaction").
    #[test]
    fn every_loaded_secret_is_known_active_or_not() {
        let root = tempfile::tempdir().unwrap();
        let (home, cwd) = (root.path().join("home"), root.path().join("ws"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(
            home.join(".env"),
            "ANTHROPIC_API_KEY=sk-ant-other-provider-123\nPROXY_VAR=proxy words for a key\n\
             MCP_BEARER=bearer words for mcp\nMODE=production\n",
        )
        .unwrap();
        std::fs::write(
            cwd.join(".env"),
            "DEEPSEEK_API_KEY=sk-deepseek-active-789\nBUILD_ID=a1b2c3d4e5f6g7h8\n",
        )
        .unwrap();
        std::fs::write(
            home.join("config.toml"),
            r#"
[providers.proxy]
kind = "openai-compatible"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "PROXY_VAR"
[providers.proxy.headers]
X-Api-Key = "hdr-secret-value-1234"
[mcp.servers.remote]
url = "http://127.0.0.1:9/mcp"
bearer_token_env = "MCP_BEARER"
[mcp.servers.remote.headers]
Authorization = "Bearer mcp-header-secret-99"
[mcp.servers.local]
command = "true"
env = { SERVICE_TOKEN = "stdio-env-secret-77" }
"#,
        )
        .unwrap();
        let settings = Settings::load(&cwd, &home);
        let lookup = |name: &str| settings.get(name);
        let config =
            dsh_config::Config::load(&home, &cwd, &lookup, &dsh_config::Flags::default()).unwrap();
        let redactor = secrets(&settings, &config);
        for secret in [
            "sk-ant-other-provider-123",
            "sk-deepseek-active-789",
            "proxy words for a key",
            "bearer words for mcp",
            "hdr-secret-value-1234",
            "Bearer mcp-header-secret-99",
            "stdio-env-secret-77",
            "a1b2c3d4e5f6g7h8",
        ] {
            let shown = redactor.redact(&format!("<{secret}>")).into_owned();
            assert!(!shown.contains(secret), "{secret} is not known: {shown}");
        }
        assert_eq!(redactor.redact("mode production"), "mode production");
        // A key variable that names a common variable by mistake redacts nothing of it.
        std::fs::write(
            home.join("config.toml"),
            "[providers.odd]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             api_key_env = \"PATH\"\n",
        )
        .unwrap();
        let config =
            dsh_config::Config::load(&home, &cwd, &lookup, &dsh_config::Flags::default()).unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(secrets(&settings, &config).redact(&path), path);
    }
}
