//! The composition root of dsh (docs/decisions/0006-composition-root.md): one [`Runtime`] per
//! process resolves the configuration (files, environment, `.env` credentials, flags) and
//! builds the agent of every front end (`dsh run`, the TUI, `dsh web`, `dsh acp`) from a typed
//! [`SessionSpec`]. What front ends differ in is a field of the spec, not a code path of their
//! glue; no front end rebuilds a command line to get an agent.
//!
//! A configuration is resolved once per working directory and set of choices, then reused by
//! every session that asks for the same (`dsh web` resolves its default workspace once, at
//! start, and its sessions there reuse that). Each opened session gets its own MCP servers and
//! approval rules, shared only with its subagents.

#![warn(clippy::too_many_lines, missing_docs, unreachable_pub)]

mod adapters;
pub mod credentials;
mod mcp;
pub mod output_schema;
pub mod review;
pub mod trust;

mod compose;
mod error;
pub mod rewind;
mod web_search;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use dsh_agent::{Agent, TitleMode};
use dsh_llm::{CallConfig, LockExt};
use dsh_session::{Envelope, PriceTable, SessionStore};
use dsh_tools::PermissionPreset;

pub use adapters::build_adapter;
pub use compose::{permission_summary, read_only_confiner};
/// What describes the MCP servers of [`SessionSpec::mcp_servers`], so a front end that adds its
/// own (an ACP editor's `mcpServers`) reaches them through the composition root alone.
pub use dsh_config::{
    McpServerConfig, McpTransport, McpTrust, DEFAULT_MCP_STARTUP_TIMEOUT, DEFAULT_MCP_TOOL_TIMEOUT,
};
pub use error::RuntimeError;
pub use mcp::{McpServerCheck, McpToolCheck};

use crate::credentials::Settings;

/// Where warnings go (one line each, without the `dsh: ` prefix): untrusted project settings,
/// `.env` refusals, skipped skills, hook and MCP problems.
pub type WarningSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The choices a user makes with flags (`--provider`, `--model`, `--effort`, `--permission`,
/// `--trust-workspace`): the process's defaults in [`RuntimeOptions`], a session's own in
/// [`SessionSpec`] (the web UI picks model and effort per session).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Choices {
    /// Provider name from the configuration.
    pub provider: Option<String>,
    /// Model id.
    pub model: Option<String>,
    /// Reasoning effort: off, low, medium, high or max.
    pub effort: Option<String>,
    /// Permission preset: read-only, ask, workspace-write or danger-full-access.
    pub permission: Option<String>,
    /// Apply the project's own settings without a recorded `dsh trust`
    /// (docs/configuration.md, "Workspace trust").
    pub trust_workspace: bool,
    /// The provider is replaced ([`SessionSpec::provider`]): its key is not looked up, and a
    /// missing one is no error. Set by [`Runtime::configuration`] for such a spec.
    pub keyless: bool,
    /// `--profile`: a `[profiles.<name>]` of the user file (docs/configuration.md, "Profiles
    /// and overrides").
    pub profile: Option<String>,
    /// `-c key.path=value` overrides, in command-line order; a spec's own replace the
    /// process's when it has any.
    pub overrides: Vec<String>,
    /// Directories writable under `workspace-write` and `ask` besides the working directory
    /// (`--add-dir`, ACP `additionalDirectories`; relative ones against the working
    /// directory). A spec's are added to the process's. Checked by [`extra_roots`].
    pub add_dirs: Vec<PathBuf>,
}

impl Choices {
    /// These choices where set, else `defaults`'; trust applies when either grants it.
    fn over(&self, defaults: &Choices) -> Choices {
        let pick = |mine: &Option<String>, theirs: &Option<String>| {
            mine.clone().or_else(|| theirs.clone())
        };
        Choices {
            provider: pick(&self.provider, &defaults.provider),
            model: pick(&self.model, &defaults.model),
            effort: pick(&self.effort, &defaults.effort),
            permission: pick(&self.permission, &defaults.permission),
            trust_workspace: self.trust_workspace || defaults.trust_workspace,
            keyless: self.keyless || defaults.keyless,
            profile: pick(&self.profile, &defaults.profile),
            overrides: match self.overrides.is_empty() {
                true => defaults.overrides.clone(),
                false => self.overrides.clone(),
            },
            add_dirs: defaults
                .add_dirs
                .iter()
                .chain(&self.add_dirs)
                .cloned()
                .collect(),
        }
    }
}

/// How a [`Runtime`] is set up, once per process.
pub struct RuntimeOptions {
    /// The dsh home (`$DSH_HOME`, else `~/.dsh`).
    pub home: PathBuf,
    /// The working directory of sessions whose spec names none.
    pub cwd: PathBuf,
    /// The process's flags; a spec's own choices win over them.
    pub choices: Choices,
    /// Where warnings are reported.
    pub warnings: WarningSink,
}

/// Which session an [`Runtime::open`] starts or continues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Resume {
    /// A new session.
    #[default]
    New,
    /// The session with this id, id prefix or path.
    Id(String),
    /// The latest session of the working directory (`--continue`, `dsh resume --last`).
    Latest,
}

/// One session a front end asks for.
#[derive(Debug, Clone, Default)]
pub struct SessionSpec {
    /// Working directory (default: the runtime's).
    pub cwd: Option<PathBuf>,
    /// New, or which session to continue.
    pub resume: Resume,
    /// Choices of this session over the process's flags.
    pub choices: Choices,
    /// Whether the session gets a model-written title (one small call alongside the first
    /// turn); off, the title is the first words of the first prompt. The web UI lists sessions
    /// by title, so it asks for them.
    pub model_titles: bool,
    /// Whether [`OpenedSession::history`] carries the events of a resumed session (ACP replays
    /// them to the editor on `session/load`).
    pub history: bool,
    /// MCP servers of this session only, on top of the configured ones (an ACP editor's
    /// `mcpServers`, docs/acp.md). A server with the name of a configured one replaces it.
    pub mcp_servers: Vec<dsh_config::McpServerConfig>,
    /// An adapter that answers every model call of the session instead of the configured
    /// provider (`dsh replay`'s recorded replies); everything else (tools, sandbox, policies,
    /// hooks, MCP servers) is composed as for a live session.
    pub provider: Option<ProviderReplacement>,
    /// Start in plan mode (`dsh run --plan`; docs/agent.md, "Plan mode"): entered while the
    /// session opens, before its MCP servers start, so none of them runs under the wider
    /// preset first.
    pub plan: bool,
    /// Text added at the end of the system prompt, after its stable sections (`dsh run
    /// --append-system-prompt`); this session only, not its subagents.
    pub append_system_prompt: Option<String>,
    /// Which tools the model is offered (`dsh run --allowed-tools` / `--disallowed-tools`);
    /// this session only, not its subagents.
    pub tool_filter: Option<dsh_agent::ToolFilter>,
}

/// The adapter of [`SessionSpec::provider`] and the model name its requests carry. No key is
/// needed: the configured provider is not built, and nothing goes to its network.
#[derive(Clone)]
pub struct ProviderReplacement {
    /// Answers every call, under the configured provider's route.
    pub adapter: Arc<dyn dsh_llm::Adapter>,
    /// The model id requests name (a recording's model).
    pub model: String,
    /// The ids of the goals the recording created, in order: goals created in this session
    /// take them, so recorded calls naming a goal still name it (docs/goals.md, "Replay").
    pub goal_ids: Vec<String>,
}

impl std::fmt::Debug for ProviderReplacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderReplacement")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A resolved configuration: what every session in one working directory with one set of
/// choices is built from.
#[derive(Clone)]
pub struct Configuration {
    /// The working directory (canonical).
    pub cwd: PathBuf,
    /// The dsh home.
    pub home: PathBuf,
    /// Provider route, model and effort of new requests.
    pub call: CallConfig,
    /// The permission preset sessions start with.
    pub permission: PermissionPreset,
    /// The merged configuration layers.
    pub config: dsh_config::Config,
    /// Prices per model, for cost reports.
    pub prices: PriceTable,
    selection: dsh_config::Selection,
    /// `web_search`, when it is on (a DeepSeek key is configured).
    search: Option<web_search::SearchSetup>,
    /// Every secret loaded for this workspace (docs/SECURITY.md, "Secrets and redaction").
    secrets: dsh_tools::SecretRedactor,
    /// The directories added as writable roots ([`Choices::add_dirs`], checked and
    /// canonical): the one list the file tools, the sandbox and the script gate all use.
    pub extra_roots: Vec<PathBuf>,
}

impl Configuration {
    /// The gate hooks and MCP servers pass before they start, knowing every root the model
    /// can write ([`Configuration::extra_roots`] included).
    pub fn script_gate(&self) -> dsh_config::scripts::ScriptGate {
        let mut gate = self.config.trust.script_gate(&self.cwd, &self.home);
        gate.extra_roots = self.extra_roots.clone();
        gate
    }

    /// Every secret dsh loaded for this workspace ([`credentials::secrets`]): what tool
    /// results, the session log and the front ends' output must not show.
    pub fn secrets(&self) -> &dsh_tools::SecretRedactor {
        &self.secrets
    }
}

/// `dirs` checked as writable roots besides `cwd`: each (relative ones against `cwd`) must be
/// an existing directory, and is kept canonical, so the sandbox binds what the file tools
/// check. Refused: the root directory `/` (everything would be writable), and a directory
/// that is `home` (`$DSH_HOME`: credentials, trust records), lies in it or contains it, which
/// would let the model rewrite what decides its own confinement. Duplicates and `cwd` itself
/// are dropped.
pub fn extra_roots(
    dirs: &[PathBuf],
    cwd: &Path,
    home: &Path,
) -> Result<Vec<PathBuf>, RuntimeError> {
    let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let mut roots: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let refuse = |why: &str| {
            RuntimeError::InvalidConfig(format!(
                "added directory {}: {why}",
                dsh_tools::printable(&dir.display().to_string())
            ))
        };
        let real = std::fs::canonicalize(cwd.join(dir))
            .map_err(|e| refuse(&format!("{e}; name an existing directory")))?;
        if !real.is_dir() {
            return Err(refuse("not a directory"));
        }
        if let Some(why) = unsafe_root(&real, &home) {
            return Err(refuse(&why));
        }
        if real != cwd && !roots.contains(&real) {
            roots.push(real);
        }
    }
    Ok(roots)
}

/// Why the real directory `real` may not become writable at the word of someone other than
/// the user at the terminal (an added directory, a delegating MCP client's `cwd`), or `None`:
/// `/`; dsh's `home` (canonical) or a directory holding it; and a protected entry or a
/// directory inside one (`.git` and anything shaped like a git directory, `.dsh`, `.env*`,
/// `.claude`, ..., a dot entry of the user's home such as `~/.ssh`), whose files configure code
/// that runs later. Inside a root those stay read-only, but as a root of their own all of
/// their files were writable (adversarial review of issue 42: `--add-dir .git` let `bash`
/// plant `.git/hooks/pre-commit`).
fn unsafe_root(real: &Path, home: &Path) -> Option<String> {
    if real.parent().is_none() {
        return Some("the root directory cannot be made writable; name a folder".to_string());
    }
    if real.starts_with(home) || home.starts_with(real) {
        return Some(format!(
            "it holds or lies in dsh's home {}, which the model must never write",
            home.display()
        ));
    }
    let in_git_dir = real.ancestors().any(|dir| {
        dir.file_name()
            .is_some_and(|name| name.eq_ignore_ascii_case(".git"))
            || (dir.join("HEAD").is_file() && dir.join("objects").is_dir())
    });
    let protected = dsh_tools::protected_entry(Path::new("/"), real);
    if in_git_dir || protected.is_some() {
        let entry = protected.unwrap_or_else(|| real.to_path_buf());
        return Some(format!(
            "it is or lies in {}, a protected entry (git directories, dsh and editor settings, \
             .env files, the home's dot entries) that configures code that runs later; name a \
             folder outside it",
            dsh_tools::printable(&entry.display().to_string())
        ));
    }
    None
}

/// The working directory a delegating client (`dsh mcp-server`'s `cwd`) names for a session,
/// canonical, or why it is refused: as for an added directory ([`extra_roots`]), not `/`, not
/// dsh's `home` or a directory holding it, not a protected entry. The session would write
/// there; a client must not make dsh's own settings, credentials and approval rules (or
/// `/`) the model's workspace.
pub fn delegated_cwd(dir: &Path, home: &Path) -> Result<PathBuf, RuntimeError> {
    let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let refuse = |why: &str| {
        RuntimeError::InvalidConfig(format!(
            "working directory {}: {why}",
            dsh_tools::printable(&dir.display().to_string())
        ))
    };
    let real = std::fs::canonicalize(dir)
        .map_err(|e| refuse(&format!("{e}; name an existing directory")))?;
    if !real.is_dir() {
        return Err(refuse("not a directory"));
    }
    match unsafe_root(&real, &home) {
        Some(why) => Err(refuse(&why)),
        None => Ok(real),
    }
}

/// A built agent, ready for its front end to install its approver and asker
/// (`Agent::set_approver`, `Agent::set_asker`: they are bound to the session id, which exists
/// only now) and to run it.
pub struct OpenedSession {
    /// The agent; its permission source is installed, so the front end can switch presets.
    pub agent: Agent,
    /// The events of the resumed session when [`SessionSpec::history`] asked for them.
    pub history: Vec<Envelope>,
    /// The live events of the session's subagents, for the front end to show while they run
    /// (docs/agent.md, "Watching children").
    pub children: dsh_agent::ChildFeed,
    /// Opens the provider connection again ahead of the next call, for a front end that knows
    /// one is coming (the TUI, when the user starts typing).
    pub preconnect: Preconnector,
}

/// Opens a session's provider connection ahead of its next call (docs/providers.md, "Shared
/// connections and preconnect"). A connection left idle while the user reads or thinks is
/// closed by the server after a minute or so; the next call would then wait for TCP and TLS.
/// [`Preconnector::warm`] opens one in the background instead, so a front end calls it when a
/// call is near. Does nothing when the provider turns preconnect off, has no key, or was sent
/// something in the last 30 s (its connection is still open). Cheap to clone and to call.
#[derive(Clone, Default)]
pub struct Preconnector {
    adapter: Option<Arc<dyn dsh_llm::Adapter>>,
}

impl Preconnector {
    /// Warms `adapter`'s connection on each [`warm`](Self::warm).
    pub fn new(adapter: Arc<dyn dsh_llm::Adapter>) -> Preconnector {
        Preconnector {
            adapter: Some(adapter),
        }
    }

    /// One that never sends anything (preconnect turned off, or a test's session).
    pub fn off() -> Preconnector {
        Preconnector::default()
    }

    /// Opens the connection in the background, unless one is known to be open; returns at once.
    pub fn warm(&self) {
        if let Some(adapter) = &self.adapter {
            adapter.preconnect();
        }
    }
}

/// The one seam between the front ends (`dsh-tui`, `dsh-server`, `dsh-acp`) and composition:
/// each front end maps its own request (a UI action, an HTTP body, an ACP message) to a
/// [`SessionSpec`] and asks this for the agent. [`Runtime`] is the implementation the binary
/// uses; tests of a front end implement it with scripted adapters.
pub trait SessionFactory: Send + Sync + 'static {
    /// Builds the agent `spec` asks for in `store`. Called on a blocking thread; may read files.
    fn open(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<OpenedSession, RuntimeError>;

    /// The session store the front end should use when it has none of its own.
    fn store(&self) -> Arc<dyn SessionStore + Send + Sync>;

    /// Model ids a front end may offer for [`Choices::model`] (may be empty).
    fn models(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the configured provider says about `model` (its efforts and default effort, from
    /// the model table), so a front end offers and accepts only the efforts it takes; `None`
    /// when unknown.
    fn model_info(&self, _model: &str) -> Option<dsh_llm::ModelInfo> {
        None
    }

    /// The model a session opened from `spec` would use (its `--model`, else the configured
    /// default), so a front end can check an effort before it creates anything; `None` when
    /// unknown.
    fn default_model(&self, spec: &SessionSpec) -> Option<String> {
        spec.choices.model.clone()
    }

    /// The store of the workspace checkpoints sessions in `cwd` take (docs/rewind.md), with
    /// that workspace's `[rewind]` limits; `None` when rewind is off there (or unknown).
    fn checkpoints(&self, _cwd: &Path) -> Option<dsh_tools::CheckpointStore> {
        None
    }

    /// The user just trusted `workspace` (docs/configuration.md, "Workspace trust"): forget
    /// every configuration resolved in it, so the next session there applies its settings.
    fn trusted(&self, _workspace: &Path) {}

    /// The trust question a session in `cwd` raises: `Some` when the workspace has project
    /// settings that are left out until the user trusts them (and the process was not started
    /// with `--trust-workspace`). Front ends that can ask (ACP at `session/new`) show it.
    fn trust_question(&self, _cwd: &Path) -> Option<TrustQuestion> {
        None
    }

    /// Records trust in the workspace of `cwd` at `pin` (the pin of the question shown), as
    /// `dsh trust` does, and forgets the configurations resolved there. Nothing is recorded
    /// when the files changed since: the error says so.
    fn record_trust(&self, _cwd: &Path, _pin: &str) -> Result<PathBuf, String> {
        Err("this front end's sessions cannot record workspace trust".to_string())
    }

    /// Every secret a session opened from `spec` would know ([`Configuration::secrets`]), for
    /// a front end that shows or logs text no tool result carried (the TUI's `/review`
    /// findings, whose task held the diff); by default the ones of the environment.
    fn secrets(&self, _spec: &SessionSpec) -> dsh_tools::SecretRedactor {
        dsh_tools::SecretRedactor::from_env()
    }
}

/// What a front end shows before the user trusts a workspace's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustQuestion {
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The review: every setting trusting would apply ([`trust::Review::text`]).
    pub review: String,
    /// The pin of the reviewed files; trust is recorded only at this pin.
    pub pin: String,
}

impl SessionFactory for Runtime {
    fn open(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<OpenedSession, RuntimeError> {
        Runtime::open(self, spec, store)
    }

    fn store(&self) -> Arc<dyn SessionStore + Send + Sync> {
        Runtime::store(self)
    }

    /// The models of the default workspace's configuration (none while it cannot be resolved).
    fn models(&self) -> Vec<String> {
        self.configuration(&SessionSpec::default())
            .map(|setup| setup.config.models.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The adapter of the default workspace's provider, asked about `model`; `None` for a
    /// model the model table does not list (the adapter would describe it generically).
    fn model_info(&self, model: &str) -> Option<dsh_llm::ModelInfo> {
        let setup = self.configuration(&SessionSpec::default()).ok()?;
        if !setup.config.models.contains_key(model) {
            return None;
        }
        let provider = &setup.selection.provider;
        let adapter = build_adapter(
            &setup.config,
            provider,
            setup.selection.api_key.clone(),
            self.http_client().as_ref(),
        )
        .ok()?;
        adapter.model_info(model)
    }

    fn default_model(&self, spec: &SessionSpec) -> Option<String> {
        let setup = self.configuration(spec).ok()?;
        Some(setup.call.model.clone())
    }

    fn checkpoints(&self, cwd: &Path) -> Option<dsh_tools::CheckpointStore> {
        let spec = SessionSpec {
            cwd: Some(cwd.to_path_buf()),
            ..SessionSpec::default()
        };
        rewind::configured_store(&*self.configuration(&spec).ok()?)
    }

    fn trusted(&self, workspace: &Path) {
        self.forget_workspace(workspace);
    }

    fn trust_question(&self, cwd: &Path) -> Option<TrustQuestion> {
        if self.choices.trust_workspace {
            return None;
        }
        let state = trust::inspect(&self.home, cwd).ok()?;
        if state.trusted.is_some() || !state.has_ignored() {
            return None;
        }
        let pin = state.pin.clone()?;
        Some(TrustQuestion {
            workspace: state.workspace.clone(),
            review: trust::review(&state, cwd).text(),
            pin,
        })
    }

    fn record_trust(&self, cwd: &Path, pin: &str) -> Result<PathBuf, String> {
        let workspace = trust::record_pinned(&self.home, cwd, pin).map_err(|err| match err {
            trust::TrustError::Changed => format!(
                "the project settings of {} changed after they were shown; nothing was trusted",
                cwd.display()
            ),
            trust::TrustError::Invalid(message) => message,
        })?;
        self.forget_workspace(&workspace);
        Ok(workspace)
    }

    /// The configuration's secrets; the environment's when it cannot be resolved (then no
    /// session opens either).
    fn secrets(&self, spec: &SessionSpec) -> dsh_tools::SecretRedactor {
        match self.configuration(spec) {
            Ok(setup) => setup.secrets().clone(),
            Err(_) => dsh_tools::SecretRedactor::from_env(),
        }
    }
}

/// Warnings with the process-wide memory of the ones said once.
#[derive(Clone)]
pub(crate) struct Warnings {
    sink: WarningSink,
    said: Arc<Mutex<Vec<String>>>,
}

impl Warnings {
    pub(crate) fn say(&self, line: &str) {
        (self.sink)(line);
    }

    /// Says `line` unless it was said already: sessions that resolve again (another
    /// workspace, another model) would otherwise repeat the same trust or `.env` warning.
    pub(crate) fn say_once(&self, line: &str) {
        let mut said = self.said.lock_or_recover();
        if !said.iter().any(|l| l == line) {
            (self.sink)(line);
            said.push(line.to_string());
        }
    }
}

type ConfigKey = (PathBuf, Choices);

/// The composition root: resolves configurations (each once) and opens sessions.
pub struct Runtime {
    home: PathBuf,
    cwd: PathBuf,
    choices: Choices,
    warnings: Warnings,
    resolved: Mutex<HashMap<ConfigKey, Arc<Configuration>>>,
    store: OnceLock<Arc<dyn SessionStore + Send + Sync>>,
    /// The connection pool of every session this runtime opens and of their subagents
    /// (docs/providers.md, "Shared connections and preconnect"); `None` when the client could
    /// not start, and each adapter then builds (and reports the failure of) its own.
    http: OnceLock<Option<dsh_http::HttpClient>>,
}

/// `dir` as a canonical path, or the error naming it.
fn canonical_dir(dir: &Path) -> Result<PathBuf, RuntimeError> {
    std::fs::canonicalize(dir).map_err(|reason| RuntimeError::Workspace {
        what: format!("working directory {} does not exist", dir.display()),
        reason,
    })
}

impl Runtime {
    /// Sets the runtime up. Fails only when the default working directory does not exist;
    /// configuration problems surface when a session (or [`Runtime::configuration`]) needs it,
    /// so a front end that can work without one (browsing sessions in `dsh web`) still starts.
    pub fn new(options: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        // The sandbox probe's verdict is kept in the home (docs/SECURITY.md, "Probe verdict
        // cache"), so a new process need not try each mechanism before its first request.
        dsh_sandbox::use_probe_cache(&options.home);
        dsh_sandbox::probe_in_background();
        // `$SSL_CERT_FILE` is parsed beside the configuration too (docs/providers.md, "Extra
        // root certificates").
        dsh_http::read_extra_roots_in_background();
        Ok(Runtime {
            cwd: canonical_dir(&options.cwd)?,
            home: options.home,
            choices: options.choices,
            warnings: Warnings {
                sink: options.warnings,
                said: Arc::default(),
            },
            resolved: Mutex::default(),
            store: OnceLock::new(),
            http: OnceLock::new(),
        })
    }

    /// This runtime with `client` as the connection pool of its sessions instead of one it
    /// builds (docs/providers.md, "Shared connections and preconnect"): for an embedder that
    /// has its own, and for tests that shorten its preconnect window. A client whose connect
    /// timeout is not the default is used only by adapters configured with the same one.
    pub fn with_http_client(self, client: dsh_http::HttpClient) -> Runtime {
        let http = OnceLock::new();
        let _ = http.set(Some(client));
        Runtime { http, ..self }
    }

    /// The default working directory (canonical).
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The dsh home.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The configuration `spec` is built from, resolved on first use and then reused.
    pub fn configuration(&self, spec: &SessionSpec) -> Result<Arc<Configuration>, RuntimeError> {
        let cwd = match &spec.cwd {
            Some(dir) => canonical_dir(dir)?,
            None => self.cwd.clone(),
        };
        let mut choices = spec.choices.over(&self.choices);
        choices.keyless |= spec.provider.is_some();
        let key = (cwd, choices);
        if let Some(found) = self.resolved.lock_or_recover().get(&key) {
            return Ok(Arc::clone(found));
        }
        // Resolved outside the lock: reading files must not hold up other sessions. Two
        // sessions racing here resolve twice; the first result is kept.
        let configuration = Arc::new(self.resolve(&key.0, &key.1)?);
        let mut resolved = self.resolved.lock_or_recover();
        Ok(Arc::clone(resolved.entry(key).or_insert(configuration)))
    }

    /// Resolves in one step: configuration layers (built-in, user file, project file,
    /// environment, flags), then the provider, model, effort and key to use.
    fn resolve(&self, cwd: &Path, choices: &Choices) -> Result<Configuration, RuntimeError> {
        let settings = Settings::load(cwd, &self.home);
        let lookup = |name: &str| settings.get(name);
        let flags = dsh_config::Flags {
            provider: choices.provider.clone(),
            model: choices.model.clone(),
            effort: choices.effort.clone(),
            permission: choices.permission.clone(),
            trust_workspace: choices.trust_workspace,
            profile: choices.profile.clone(),
            overrides: choices.overrides.clone(),
        };
        let mut config = dsh_config::Config::load(&self.home, cwd, &lookup, &flags)
            .map_err(|errors| RuntimeError::InvalidConfig(errors.to_string()))?;
        for server in config.mcp_servers.iter_mut().filter(|s| s.from_project) {
            for warning in credentials::project_server_values(server, &settings) {
                self.warnings.say_once(&format!("warning: {warning}"));
            }
        }
        // Untrusted project settings were left out: one line naming them.
        if let Some(warning) = config.trust.warning() {
            self.warnings.say_once(&warning);
        }
        // Other tools' files found but not (all) used: one line each (docs/other-tools.md).
        for note in &config.trust.notes {
            self.warnings.say_once(&format!("warning: {note}"));
        }
        settings.allow_credentials(config.own_key_variables());
        let search = web_search::setup(&config, &lookup);
        let project_lookup = |name: &str| settings.project_value(name);
        let selection = match choices.keyless {
            true => config.select_keyless(),
            false => config.select_keyed(&lookup, &project_lookup),
        };
        for warning in settings.take_warnings() {
            self.warnings.say_once(&format!("warning: {warning}"));
        }
        // After the warnings: looking up every provider's key must not report the project's
        // `.env` entries the selection did not ask for.
        let secrets = credentials::secrets(&settings, &config);
        let selection = selection.map_err(|err| match err {
            dsh_config::SelectError::MissingKey(e) => {
                RuntimeError::MissingCredential(e.to_string())
            }
            dsh_config::SelectError::Invalid(e) => RuntimeError::InvalidConfig(e.to_string()),
        })?;
        let mut call = CallConfig::new(selection.provider.name.clone(), selection.model.clone());
        call.reasoning_effort = selection.effort;
        let permission = match &config.permission {
            Some(text) => text
                .trim()
                .parse::<PermissionPreset>()
                .map_err(RuntimeError::InvalidConfig)?,
            None => PermissionPreset::default(),
        };
        Ok(Configuration {
            cwd: cwd.to_path_buf(),
            home: self.home.clone(),
            call,
            permission,
            prices: config.price_table(),
            config,
            selection,
            search,
            secrets,
            extra_roots: extra_roots(&choices.add_dirs, cwd, &self.home)?,
        })
    }

    /// Starts each MCP server `spec`'s configuration names as a session would (script gate,
    /// a project's server confined under the session's preset), lists its tools and stops it
    /// again: what `dsh doctor` reports per server. No session is opened. Blocks until every
    /// server is up or has failed, each within its startup timeout.
    pub fn check_mcp(&self, spec: &SessionSpec) -> Result<Vec<McpServerCheck>, RuntimeError> {
        compose::check_mcp(&*self.configuration(spec)?, None)
    }

    /// [`Runtime::check_mcp`] for the one server named `name` (`dsh mcp get`); empty when the
    /// configuration enables no server of that name.
    pub fn check_mcp_server(
        &self,
        spec: &SessionSpec,
        name: &str,
    ) -> Result<Vec<McpServerCheck>, RuntimeError> {
        compose::check_mcp(&*self.configuration(spec)?, Some(name))
    }

    /// Drops the configurations resolved in `workspace` or below it (after its trust changed):
    /// the next session there resolves again. Open sessions keep what they were built with.
    pub fn forget_workspace(&self, workspace: &Path) {
        let workspace =
            std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        self.resolved
            .lock_or_recover()
            .retain(|(cwd, _), _| !cwd.starts_with(&workspace));
    }

    /// The connection pool of this runtime's adapters, built on first use; `None` when the
    /// client cannot start (each adapter then builds its own and reports why it cannot).
    fn http_client(&self) -> Option<dsh_http::HttpClient> {
        self.http
            .get_or_init(|| dsh_http::HttpClient::new(dsh_http::DEFAULT_CONNECT_TIMEOUT).ok())
            .clone()
    }

    /// The session store of the home (JSONL, where every front end keeps its sessions).
    pub fn store(&self) -> Arc<dyn SessionStore + Send + Sync> {
        let store = self
            .store
            .get_or_init(|| Arc::new(dsh_session::JsonlStore::new(&self.home)));
        Arc::clone(store)
    }

    /// The session `spec` continues (the key as given, once `store` knows it; the latest
    /// session of its working directory), or `None` for a new one. A key the store does not
    /// know is `NOT_FOUND`. Front ends call it to refuse a wrong id before they start.
    pub fn session_to_resume(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<Option<String>, RuntimeError> {
        match &spec.resume {
            Resume::New => Ok(None),
            Resume::Id(key) => {
                store.resolve(key).map_err(|err| match err {
                    dsh_session::SessionError::NotFound(_) => {
                        RuntimeError::NotFound(err.to_string())
                    }
                    err => RuntimeError::Session(err),
                })?;
                Ok(Some(key.clone()))
            }
            Resume::Latest => {
                let cwd = self.configuration(spec)?.cwd.clone();
                latest_session(store, &cwd).map(Some)
            }
        }
    }

    /// Builds the agent `spec` asks for, on a new, resumed or latest session of `store`.
    pub fn open(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<OpenedSession, RuntimeError> {
        let configuration = self.configuration(spec)?;
        let approval_rules =
            dsh_agent::ApprovalRules::load(&self.home).map_err(RuntimeError::InvalidConfig)?;
        let shared = Arc::new(compose::SessionShared {
            configuration: Arc::clone(&configuration),
            mcp: OnceLock::new(),
            extra_mcp: spec.mcp_servers.clone(),
            approval_rules: Arc::new(approval_rules),
            warnings: self.warnings.clone(),
            http: self.http_client(),
            provider: spec.provider.clone(),
        });
        // The session to continue is found before anything starts (the provider connection,
        // MCP servers): a wrong id is one clear `NOT_FOUND`, with nothing left running to
        // trip over the runtime's shutdown (issue 41: `dsh run --resume zzzz` panicked).
        let resume = self.session_to_resume(spec, store)?;
        let mut session = compose::agent_parts(&shared, 0, configuration.permission)?;
        if let Some(text) = spec
            .append_system_prompt
            .as_ref()
            .filter(|t| !t.trim().is_empty())
        {
            session
                .parts
                .extensions
                .register_for_life(Arc::new(dsh_agent::AppendedPrompt::new(text.clone())));
        }
        session.parts.options.tool_filter = spec.tool_filter.clone();
        if spec.model_titles {
            session.parts.options.titles = TitleMode::Model {
                route: None,
                model: None,
            };
        }

        let mut agent = match &resume {
            Some(key) => Agent::resume(session.parts, store, key)?,
            None => Agent::create(session.parts, store)?,
        };
        agent.set_permission_source(session.permission);
        // A resumed session in plan mode is read-only again (docs/agent.md, "Plan mode").
        if let Some(plan) = &session.plan {
            plan.reapply().map_err(|err| {
                RuntimeError::InvalidConfig(format!("cannot restore plan mode: {err}"))
            })?;
            if spec.plan {
                plan.enter().map_err(RuntimeError::InvalidConfig)?;
            }
        }
        // The MCP servers start only now, under the preset the session's first step has
        // (plan mode's read-only included): a project's server is confined by the preset in
        // force when it starts (docs/SECURITY.md, "Project hooks and MCP servers run confined").
        compose::start_mcp(&shared);
        let history = match resume {
            Some(_) if spec.history => store.load(&agent.handle().session_id())?.events,
            _ => Vec::new(),
        };
        Ok(OpenedSession {
            agent,
            history,
            children: session.children,
            preconnect: session.preconnect,
        })
    }
}

/// The id of the latest session of `cwd`. A damaged log newer than every readable one is the
/// session the user means: stop rather than append to an older one.
fn latest_session(store: &dyn SessionStore, cwd: &Path) -> Result<String, RuntimeError> {
    let cwd_text = cwd.to_string_lossy().into_owned();
    let listing = store.list(&dsh_session::ListFilter {
        cwd: Some(cwd_text.clone()),
    })?;
    let newest_readable = listing.sessions.first().map(|s| s.updated_at);
    if let Some(damaged) = listing
        .damaged
        .iter()
        .filter(|d| newest_readable.is_none_or(|t| d.updated_at >= t))
        .max_by_key(|d| d.updated_at)
    {
        return Err(RuntimeError::SessionDamaged(format!(
            "the newest session of {cwd_text} cannot be read: {} ({}). Repair or remove that \
             file, or pick a session with `dsh run --resume <id>` (`dsh sessions list` shows \
             them)",
            damaged.path, damaged.problem
        )));
    }
    let latest = listing.sessions.first().ok_or_else(|| {
        RuntimeError::NotFound(format!(
            "no session to continue in {cwd_text}; start one with `dsh run`"
        ))
    })?;
    Ok(latest.id.clone())
}
