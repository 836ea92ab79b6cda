//! `dsh doctor` (docs/doctor.md): one line per check of what a session needs, each `ok`,
//! `warn`, `FAIL` (something blocks work; the exit status is then 1) or `skip` (not checked:
//! what it needs failed first), with what to do for a warning or a failure. Every check goes
//! through the code a session uses: the configuration resolved by the runtime, the key by the
//! configuration's selection and the credentials lookup, the endpoint by `dsh models`' listing,
//! the sandbox by a fresh trial of the sandbox's own choice, the MCP servers started by the
//! runtime as a session starts them. No key or any part of one is ever printed.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use dsh_config::{Config, ProviderConfig, SelectError, Source};
use dsh_llm::{FailureCode, LockExt};
use dsh_runtime::{Configuration, Runtime, RuntimeOptions, SessionSpec};
use dsh_sandbox::SandboxMode;

use crate::credentials::Settings;

/// How long the endpoint may take to answer `GET /models` before it counts as unreachable.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// Most tool names shown on an MCP server's line.
const TOOLS_SHOWN: usize = 8;

// Arguments of `dsh doctor` (a plain comment: clap would make a doc comment the subcommand's
// help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// One JSON object on stdout instead of the lines: `ok` (no check failed) and `checks`,
    /// each with `check`, `status` (ok, warn, fail, skip), `message` and `fix`.
    #[arg(long)]
    json: bool,
    // The choices to check, as a session would be given them.
    #[command(flatten)]
    session: crate::flags::SessionFlags,
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

impl Status {
    /// The word of a printed line (a failure stands out).
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }

    /// The value of `status` in `--json`.
    fn json(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
struct Check {
    name: &'static str,
    status: Status,
    message: String,
    /// What to do, for a warning or a failure.
    fix: Option<String>,
}

impl Check {
    fn new(name: &'static str, status: Status, message: impl Into<String>) -> Check {
        Check {
            name,
            status,
            message: message.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// Runs `dsh doctor`: prints the checks and exits 1 when one of them failed.
pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (checks, secrets) = checks(&home, &cwd, &args.session);
    // Every message already avoids secrets; redacting every loaded one again costs nothing.
    let clean = |text: &str| {
        // A URL's own credentials are no loaded secret: removed wherever a URL is quoted.
        let text = dsh_config::show::redact_urls_in(&one_line(text));
        let text = match &secrets {
            Some(secrets) => secrets.redact(&text).into_owned(),
            None => text,
        };
        dsh_tools::printable(&text).into_owned()
    };
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        let checks: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "status": c.status.json(),
                    "message": clean(&c.message),
                    "fix": c.fix.as_deref().map(clean),
                })
            })
            .collect();
        println!("{}", serde_json::json!({"ok": !failed, "checks": checks}));
    } else {
        for check in &checks {
            let fix = match &check.fix {
                Some(fix) => format!(". Fix: {}", clean(fix)),
                None => String::new(),
            };
            println!(
                "{:<5} {:<9} {}{fix}",
                check.status.label(),
                check.name,
                clean(&check.message)
            );
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `text` on one line: its lines trimmed and joined with ` | `.
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" | ")
}

/// Every check in order, and the secrets loaded for the workspace (when its configuration
/// could be resolved).
fn checks(
    home: &Path,
    cwd: &Path,
    flags: &crate::flags::SessionFlags,
) -> (Vec<Check>, Option<dsh_tools::SecretRedactor>) {
    let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&warnings);
    // Keyless: a missing key is this report's `key` line, not a reason to check nothing else.
    let mut choices = flags.choices();
    choices.keyless = true;
    let runtime = Runtime::new(RuntimeOptions {
        home: home.to_path_buf(),
        cwd: cwd.to_path_buf(),
        choices,
        warnings: Arc::new(move |line: &str| sink.lock_or_recover().push(line.to_string())),
    });
    let resolved = runtime.map_err(|e| e.to_string()).and_then(|runtime| {
        let setup = runtime
            .configuration(&SessionSpec::default())
            .map_err(|e| e.to_string())?;
        Ok((runtime, setup))
    });
    let (runtime, setup) = match resolved {
        Ok(resolved) => resolved,
        Err(error) => {
            let (problem, fix) = match error.split_once("\n  fix: ") {
                Some((problem, fix)) => (problem.to_string(), Some(fix.to_string())),
                None => (error, None),
            };
            let mut config = Check::new("config", Status::Fail, problem);
            config.fix = Some(fix.unwrap_or_else(|| {
                "correct the configuration (`dsh config path` names the files)".to_string()
            }));
            let skipped = "not checked: the configuration has errors";
            let mut out = vec![config];
            for name in ["trust", "key", "endpoint", "sandbox"] {
                out.push(Check::new(name, Status::Skip, skipped));
            }
            out.push(sessions_check(home));
            out.push(Check::new("mcp", Status::Skip, skipped));
            return (out, None);
        }
    };
    let mut out = vec![config_check(&setup)];
    // The runtime's own warnings (`.env` refusals, a project server's missing variables); the
    // trust warning is the `trust` line.
    let trust_warning = setup.config.trust.warning();
    for line in warnings.lock_or_recover().iter() {
        if Some(line) != trust_warning.as_ref() {
            let line = line.strip_prefix("warning: ").unwrap_or(line);
            out.push(Check::new("config", Status::Warn, line));
        }
    }
    out.push(trust_check(&setup.config));
    out.push(other_tools_check(&setup.config));
    let settings = Settings::load(&setup.cwd, home);
    settings.allow_credentials(setup.config.own_key_variables());
    let (key, api_key) = key_check(&setup, &settings);
    out.push(key);
    out.push(endpoint_check(&setup, api_key));
    out.push(sandbox_check(&setup));
    out.push(sessions_check(home));
    out.extend(mcp_checks(&runtime, &setup));
    (out, Some(setup.secrets().clone()))
}

/// Where the value at `key` came from, as `dsh config show` says it.
fn source(config: &Config, key: &str) -> String {
    config
        .source_of(key)
        .unwrap_or(&Source::Default)
        .to_string()
}

/// The configuration: resolved as a session resolves it; what it chose and its layers.
fn config_check(setup: &Configuration) -> Check {
    let config = &setup.config;
    let provider = &setup.call.provider;
    let model = &setup.call.model;
    let model_key = if config.model.as_deref() == Some(model.as_str()) {
        "model".to_string()
    } else {
        format!("providers.{provider}.default_model")
    };
    let preset_source = match config.permission {
        Some(_) => source(config, "permission"),
        None => Source::Default.to_string(),
    };
    let mut files = Vec::new();
    let mut variables = std::collections::BTreeSet::new();
    let mut flags = std::collections::BTreeSet::new();
    let mut profiles = std::collections::BTreeSet::new();
    let mut overrides = std::collections::BTreeSet::new();
    for (_, _, source) in config.values() {
        match source {
            Source::Default => {}
            Source::UserFile(path) | Source::ProjectFile(path) => {
                if !files.contains(path) {
                    files.push(path.clone());
                }
            }
            Source::Env(name) => {
                variables.insert(name.clone());
            }
            Source::Profile { name, .. } => {
                profiles.insert(name.clone());
            }
            Source::Override(key) => {
                overrides.insert(key.clone());
            }
            Source::Flag(name) => {
                flags.insert(format!("--{name}"));
            }
        }
    }
    let mut layers = vec!["built-in defaults".to_string()];
    layers.extend(files.iter().map(|path| path.display().to_string()));
    if let Some(name) = profiles.into_iter().next() {
        layers.push(format!("profile {name}"));
    }
    if !variables.is_empty() {
        let names: Vec<String> = variables.into_iter().collect();
        layers.push(format!("environment ({})", names.join(", ")));
    }
    if !overrides.is_empty() {
        let keys: Vec<String> = overrides.into_iter().collect();
        layers.push(format!("-c ({})", keys.join(", ")));
    }
    if !flags.is_empty() {
        let names: Vec<String> = flags.into_iter().collect();
        layers.push(format!("flags ({})", names.join(", ")));
    }
    // Where a choice came from, when not from the built-in defaults.
    let from = |source: String| match source == Source::Default.to_string() {
        true => String::new(),
        false => format!(" (from {source})"),
    };
    Check::new(
        "config",
        Status::Ok,
        format!(
            "provider {provider}{}, model {model}{}, preset {}{}; layers: {} (`dsh config show` \
             says where each value comes from)",
            from(source(config, "provider")),
            from(source(config, &model_key)),
            setup.permission,
            from(preset_source),
            layers.join(", ")
        ),
    )
}

/// Workspace trust: whether the project's own settings apply.
fn trust_check(config: &Config) -> Check {
    let trust = &config.trust;
    let workspace = trust.workspace.display();
    if let Some(problem) = &trust.invalid_project {
        return Check::new(
            "trust",
            Status::Warn,
            format!("the project config file of {workspace} has errors and is left out: {problem}"),
        )
        .fix("correct the file, then review it with `dsh trust`");
    }
    if trust.files.is_empty() {
        return Check::new(
            "trust",
            Status::Ok,
            format!("{workspace} has no project settings"),
        );
    }
    let reason = match &trust.trusted {
        Some(dsh_config::trust::TrustReason::Recorded) => "trusted with `dsh trust`".to_string(),
        Some(dsh_config::trust::TrustReason::Flag) => "trusted by --trust-workspace".to_string(),
        Some(dsh_config::trust::TrustReason::UserConfig(prefix)) => {
            format!("trusted by `[trust] workspaces` ({})", prefix.display())
        }
        None if !trust.has_ignored() => {
            return Check::new(
                "trust",
                Status::Ok,
                format!("{workspace} is not trusted; its project settings need no trust and apply"),
            )
        }
        None => {
            let ignored: Vec<String> = trust
                .ignored
                .iter()
                .map(|(file, keys)| match keys.is_empty() {
                    true => file.display().to_string(),
                    false => format!("{} ({})", file.display(), keys.join(", ")),
                })
                .collect();
            let changed = match trust.changed_since_trusted {
                true => " (they changed since you trusted it)",
                false => "",
            };
            return Check::new(
                "trust",
                Status::Warn,
                format!(
                    "{workspace} is not trusted{changed}: left out {}",
                    ignored.join(", ")
                ),
            )
            .fix("review and trust them with `dsh trust`, or pass --trust-workspace once");
        }
    };
    Check::new(
        "trust",
        Status::Ok,
        format!("{workspace}: project settings apply, {reason}"),
    )
}

/// The project files of other tools (docs/other-tools.md): which were found, whether they
/// apply (only in a trusted workspace), and what of them is not used and why.
fn other_tools_check(config: &Config) -> Check {
    let trust = &config.trust;
    let claude = |path: &std::path::Path| path.components().any(|c| c.as_os_str() == ".claude");
    let mut found: Vec<String> = Vec::new();
    if let Some(path) = &trust.mcp_json {
        found.push(path.display().to_string());
    }
    if let Some(path) = &trust.claude_settings {
        found.push(path.display().to_string());
    }
    let commands = trust
        .commands
        .iter()
        .filter(|(path, _)| claude(path))
        .count();
    if commands > 0 {
        found.push(format!("{commands} .claude/commands file(s)"));
    }
    if !trust.skills.is_empty() {
        found.push(format!("{} .claude/skills skill(s)", trust.skills.len()));
    }
    if found.is_empty() {
        return Check::new(
            "other",
            Status::Ok,
            "no project files of other tools (.mcp.json, .claude/settings.json, .claude/commands, \
             .claude/skills)",
        );
    }
    let found = found.join(", ");
    if trust.trusted.is_none() {
        return Check::new(
            "other",
            Status::Warn,
            format!("found {found}: not used, the workspace is not trusted"),
        )
        .fix("review them with `dsh trust`; they apply once trusted");
    }
    if trust.notes.is_empty() {
        return Check::new("other", Status::Ok, format!("found and used: {found}"));
    }
    Check::new(
        "other",
        Status::Warn,
        format!(
            "found and used: {found}; not all of it: {}",
            trust.notes.join("; ")
        ),
    )
}

/// The provider's key: set, and where it was found (never any of it). Returns the key for the
/// endpoint check, `None` when it is missing.
fn key_check(setup: &Configuration, settings: &Settings) -> (Check, Option<dsh_deepseek::ApiKey>) {
    let config = &setup.config;
    let lookup = |name: &str| settings.get(name);
    let project_lookup = |name: &str| settings.project_value(name);
    let selection = match config.select_keyed(&lookup, &project_lookup) {
        Ok(selection) => selection,
        Err(SelectError::MissingKey(error) | SelectError::Invalid(error)) => {
            let check = Check::new("key", Status::Fail, error.problem).fix(error.fix);
            return (check, None);
        }
    };
    let provider = &selection.provider;
    let Some(variable) = &provider.api_key_env else {
        let check = Check::new(
            "key",
            Status::Ok,
            format!(
                "provider {} needs no key (no api_key_env: a keyless server)",
                provider.name
            ),
        );
        let keyless = dsh_deepseek::ApiKey::keyless();
        return (check, Some(selection.api_key.unwrap_or(keyless)));
    };
    if selection
        .api_key
        .as_ref()
        .is_some_and(|key| key.is_keyless())
    {
        let check = Check::new(
            "key",
            Status::Ok,
            format!(
                "{variable} is not set; provider {} points at {}, which is called without a key \
                 (docs/providers.md, \"Servers without a key\")",
                provider.name, provider.base_url
            ),
        );
        return (check, selection.api_key);
    }
    let origin = if config.redirected_by_project(provider) {
        let file = settings
            .project_file()
            .map_or_else(|| "./.env".to_string(), |p| p.display().to_string());
        format!(
            "the project's {file} (the project set this provider's endpoint, so only its own key \
             is sent there)"
        )
    } else {
        settings
            .origin(variable)
            .map_or_else(|| "an unknown place".to_string(), |o| o.to_string())
    };
    let check = Check::new(
        "key",
        Status::Ok,
        format!(
            "{variable} of provider {} is set, from {origin}",
            provider.name
        ),
    );
    (check, selection.api_key)
}

/// The endpoint: reachable, and its model list, through `dsh models`' listing with a short
/// deadline.
fn endpoint_check(setup: &Configuration, key: Option<dsh_deepseek::ApiKey>) -> Check {
    let Some(key) = key else {
        return Check::new("endpoint", Status::Skip, "not checked: no key to send");
    };
    let config = &setup.config;
    let Some(provider) = config.providers.get(&setup.call.provider) else {
        return Check::new("endpoint", Status::Skip, "not checked: no provider");
    };
    let url = dsh_config::show::redact_url(&provider.base_url);
    let started = Instant::now();
    let listed = match crate::models::provider_models(config, provider, key, Some(ENDPOINT_TIMEOUT))
    {
        Ok(listed) => listed,
        Err(error) => {
            return Check::new("endpoint", Status::Fail, format!("{url}: {error:#}"))
                .fix(endpoint_fix(config, provider))
        }
    };
    let took = started.elapsed().as_millis();
    let model = &setup.call.model;
    match listed {
        Ok(models) => {
            let listed = models.iter().any(|m| &m.id == model);
            let message = format!(
                "{url} answered GET /models in {took} ms: {} models",
                models.len()
            );
            if listed {
                Check::new(
                    "endpoint",
                    Status::Ok,
                    format!("{message}, {model} among them"),
                )
            } else {
                Check::new(
                    "endpoint",
                    Status::Warn,
                    format!("{message}, but not {model}"),
                )
                .fix("pick a listed model with --model or `model` in config.toml (`dsh models`)")
            }
        }
        Err(failure) => match failure.code {
            FailureCode::Transport | FailureCode::Timeout => Check::new(
                "endpoint",
                Status::Fail,
                format!("{url} unreachable: {failure}"),
            )
            .fix(endpoint_fix(config, provider)),
            FailureCode::Auth | FailureCode::Quota | FailureCode::InvalidCredential => Check::new(
                "endpoint",
                Status::Fail,
                format!("{url} refused: {failure}"),
            )
            .fix(format!(
                "check the key in {}, and the account",
                provider
                    .api_key_env
                    .as_deref()
                    .unwrap_or("the key variable")
            )),
            _ => Check::new(
                "endpoint",
                Status::Warn,
                format!("{url} answered but listed no models: {failure}"),
            )
            .fix("if chat requests fail too, check `base_url` (`dsh config show`)"),
        },
    }
}

/// What to do about an endpoint that cannot be reached.
fn endpoint_fix(config: &Config, provider: &ProviderConfig) -> String {
    format!(
        "check the network (a proxy, a firewall) and providers.{}.base_url, set by {}",
        provider.name,
        source(config, &format!("providers.{}.base_url", provider.name))
    )
}

/// The sandbox `bash` runs in under the session's preset, tried now.
fn sandbox_check(setup: &Configuration) -> Check {
    let preset = setup.permission;
    let network = setup.config.sandbox().network;
    let sandbox = match dsh_sandbox::confinement_tried(preset) {
        Ok(sandbox) => sandbox.with_network(network),
        Err(error) => {
            return Check::new("sandbox", Status::Fail, error.to_string()).fix(format!(
                "set {} to auto, bubblewrap, landlock or seatbelt, or unset it",
                dsh_sandbox::SANDBOX_ENV
            ))
        }
    };
    match sandbox.mode() {
        SandboxMode::Unconfined => Check::new(
            "sandbox",
            Status::Warn,
            format!("preset {preset}: bash runs without a sandbox"),
        )
        .fix("choose another preset (--permission, `permission` in config.toml) to confine it"),
        SandboxMode::Unavailable => {
            let forced = std::env::var(dsh_sandbox::SANDBOX_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty() && v.trim() != "auto")
                .map(|v| format!("unset {}={v} or ", dsh_sandbox::SANDBOX_ENV))
                .unwrap_or_default();
            Check::new(
                "sandbox",
                Status::Fail,
                format!(
                    "no sandbox works here, so bash refuses every command under preset {preset}: {}",
                    sandbox.detail()
                ),
            )
            .fix(format!(
                "{forced}{}, or run with --permission danger-full-access",
                dsh_sandbox::INSTALL_ADVICE
            ))
        }
        mode => Check::new(
            "sandbox",
            Status::Ok,
            format!(
                "preset {preset}: bash runs under {mode} (tried now): {}",
                sandbox.detail()
            ),
        ),
    }
}

/// The session store: `$DSH_HOME/sessions` writable and private, its sessions and catalog.
fn sessions_check(home: &Path) -> Check {
    let root = home.join("sessions");
    let shown = root.display();
    let meta = match std::fs::metadata(&root) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let existing = root.ancestors().find(|dir| dir.exists());
            return match existing {
                Some(dir) if writable(dir) => Check::new(
                    "sessions",
                    Status::Ok,
                    format!("{shown} does not exist yet; the first session creates it"),
                ),
                _ => Check::new(
                    "sessions",
                    Status::Fail,
                    format!("{shown} cannot be created: its parent is not writable"),
                )
                .fix("make that folder yours, or point DSH_HOME at one you can write"),
            };
        }
        Err(error) => {
            return Check::new(
                "sessions",
                Status::Fail,
                format!("cannot read {shown}: {error}"),
            )
            .fix("make the folder readable and writable by you, or point DSH_HOME elsewhere")
        }
    };
    if !meta.is_dir() {
        return Check::new("sessions", Status::Fail, format!("{shown} is not a folder"))
            .fix("move it away; the next session creates the folder");
    }
    if let Err(error) = try_write(&root) {
        return Check::new(
            "sessions",
            Status::Fail,
            format!("cannot write in {shown}: {error}"),
        )
        .fix(format!("make {shown} writable by you (chmod u+rwx)"));
    }
    let mut problems: Vec<(String, String)> = Vec::new();
    let mut facts = vec!["writable".to_string()];
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        facts.push(format!("mode {mode:04o}"));
        if mode & 0o077 != 0 {
            problems.push((
                format!("mode {mode:04o} lets other users into your sessions"),
                format!("chmod 700 {shown}"),
            ));
        }
    }
    let listed = dsh_session::Catalog::open(home)
        .and_then(|mut catalog| catalog.list_all(&root, &dsh_session::ListFilter::default()));
    match listed {
        Ok(listed) => {
            facts.push(format!("{} sessions", listed.len()));
            facts.push(format!("catalog {} in line", dsh_session::CATALOG_FILE));
            if let Some(first) = listed.damaged.first() {
                problems.push((
                    format!(
                        "{} session logs cannot be read (first: {}: {})",
                        listed.damaged.len(),
                        first.path,
                        first.problem
                    ),
                    "repair or remove them (`dsh sessions list` names them)".to_string(),
                ));
            }
        }
        Err(error) => problems.push((
            format!("the catalog cannot be used ({error}); listing reads every log instead"),
            format!(
                "remove {} (it is rebuilt from the logs)",
                home.join(dsh_session::CATALOG_FILE).display()
            ),
        )),
    }
    let message = format!("{shown}: {}", facts.join(", "));
    if problems.is_empty() {
        return Check::new("sessions", Status::Ok, message);
    }
    let (what, fixes): (Vec<String>, Vec<String>) = problems.into_iter().unzip();
    Check::new(
        "sessions",
        Status::Warn,
        format!("{message}; {}", what.join("; ")),
    )
    .fix(fixes.join("; "))
}

/// Creates and removes a private file in `dir`: the proof that sessions can be written there.
fn try_write(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".dsh-doctor-{}", uuid::Uuid::new_v4().simple()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(&probe)?;
    std::fs::remove_file(&probe)
}

/// True when this user may create entries in `dir` (without creating any).
fn writable(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(dir).is_ok_and(|meta| !meta.permissions().readonly())
    }
}

/// One line per configured MCP server: started (its tools), or why not. A server that does not
/// start is a warning: the session runs without its tools.
fn mcp_checks(runtime: &Runtime, setup: &Configuration) -> Vec<Check> {
    let servers = match runtime.check_mcp(&SessionSpec::default()) {
        Ok(servers) => servers,
        Err(error) => {
            return vec![Check::new("mcp", Status::Warn, error.to_string())
                .fix("correct the `[mcp.servers]` configuration")]
        }
    };
    if servers.is_empty() {
        return vec![Check::new("mcp", Status::Ok, "no MCP servers configured")];
    }
    servers
        .into_iter()
        .map(|server| {
            let whose = if server.from_project { "project " } else { "" };
            match server.outcome {
                Ok(tools) => {
                    let mut names: Vec<&str> = tools
                        .iter()
                        .take(TOOLS_SHOWN)
                        .map(|t| t.name.as_str())
                        .collect();
                    if tools.len() > TOOLS_SHOWN {
                        names.push("...");
                    }
                    Check::new(
                        "mcp",
                        Status::Ok,
                        format!(
                            "{whose}server {}: started, {} tools ({}), stopped",
                            server.name,
                            tools.len(),
                            names.join(", ")
                        ),
                    )
                }
                Err(error) => {
                    let key = format!("mcp.servers.{}", server.name);
                    let defined = ["command", "url"]
                        .iter()
                        .find_map(|leaf| setup.config.source_of(&format!("{key}.{leaf}")))
                        .map_or_else(|| "the configuration".to_string(), ToString::to_string);
                    Check::new(
                        "mcp",
                        Status::Warn,
                        format!(
                            "{whose}server {} did not start, its tools are not offered: {error}",
                            server.name
                        ),
                    )
                    .fix(format!(
                        "correct [mcp.servers.{}] in {defined}, or set `enabled = false` there",
                        server.name
                    ))
                }
            }
        })
        .collect()
}
