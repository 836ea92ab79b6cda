//! `dsh run "task"`: one headless turn (README.md, "`dsh run`").
//!
//! stdout gets only the final assistant text (or, with `--json`, one JSON line per session
//! event and a final `result` line); progress goes to stderr. Exit status: 0 when the turn
//! completed, 1 otherwise (`dsh: <CODE>: <message>` on stderr), 130 after Ctrl-C.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, TurnOutcome};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy, UsageTotals};
use dsh_session::{open_store, PriceTable, SessionStore, StoreKind, TurnEndReason};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

use crate::credentials::Settings;
use crate::progress::{envelope_json, ProgressPrinter};

/// Arguments of `dsh run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The task for the agent.
    pub prompt: String,
    /// Provider name from the configuration (default: `provider` in config.toml, else deepseek).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model id (default: the configured model, else the provider's default_model).
    #[arg(long)]
    pub model: Option<String>,
    /// Reasoning effort: off, low, medium, high or max.
    #[arg(long)]
    pub effort: Option<String>,
    /// Stream reasoning to stderr too.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print one JSON object per session event, then a `result` object, on stdout.
    #[arg(long)]
    pub json: bool,
    /// Add the turn to this session (id, id prefix or path).
    #[arg(long, conflicts_with = "continue_last")]
    pub resume: Option<String>,
    /// Add the turn to the latest session of this directory.
    #[arg(long = "continue")]
    pub continue_last: bool,
    /// Working directory of the session (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Permission preset: read-only, workspace-write or danger-full-access
    /// (default: $DSH_PERMISSION_MODE, else workspace-write).
    #[arg(long)]
    pub permission: Option<String>,
    /// Apply the project's own settings (`.dsh/config.toml` hooks, MCP servers, permission,
    /// providers; `.dsh/hooks.json`) for this run without a recorded `dsh trust`.
    #[arg(long)]
    pub trust_workspace: bool,
}

/// A failure worth a `dsh: CODE: message` line and exit status 1.
#[derive(Debug)]
pub struct UserError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for UserError {}

fn user_error(code: &str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UserError {
        code: code.to_string(),
        message: message.into(),
    })
}

/// Prints `dsh: <line>` on stderr unless this process printed it already (front ends that
/// resolve once per session, like `dsh web` and `dsh acp`, say it once).
pub(crate) fn warn_once(line: &str) {
    static PRINTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut printed = PRINTED.lock().unwrap_or_else(|p| p.into_inner());
    if !printed.iter().any(|l| l == line) {
        eprintln!("dsh: {line}");
        printed.push(line.to_string());
    }
}

/// Everything `dsh run` resolved from flags, environment and files, in one place.
#[derive(Clone)]
pub(crate) struct RunSetup {
    pub(crate) cwd: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) call: CallConfig,
    pub(crate) permission: PermissionPreset,
    pub(crate) config: dsh_config::Config,
    selection: dsh_config::Selection,
    pub(crate) prices: PriceTable,
    /// The MCP servers, started by the first agent that needs them and shared by its subagents.
    mcp: Arc<std::sync::OnceLock<Arc<dsh_mcp::McpHub>>>,
    /// Remembered approvals (`$DSH_HOME/approvals.json`, loaded at start) plus the rules
    /// allowed for this session; shared by the session's subagents.
    approval_rules: Arc<dsh_agent::ApprovalRules>,
}

/// Resolves `dsh run`'s settings in one step: configuration layers (built-in, user file,
/// project file, environment, flags), then the provider, model, effort and key to use.
pub(crate) fn resolve(args: &RunArgs) -> anyhow::Result<RunSetup> {
    let home = crate::home::dsh_home()?;
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .with_context(|| format!("working directory {} does not exist", cwd.display()))?;
    let settings = Settings::load(&cwd, &home);
    let lookup = |name: &str| settings.get(name);
    let flags = dsh_config::Flags {
        provider: args.provider.clone(),
        model: args.model.clone(),
        effort: args.effort.clone(),
        permission: args.permission.clone(),
        trust_workspace: args.trust_workspace,
    };
    let config = dsh_config::Config::load(&home, &cwd, &lookup, &flags)
        .map_err(|errors| user_error("INVALID_CONFIG", errors.to_string()))?;
    // Untrusted project settings were left out: one line naming them (once per process).
    if let Some(warning) = config.trust.warning() {
        warn_once(&warning);
    }
    settings.allow_credentials(config.own_key_variables());
    let project_lookup = |name: &str| settings.project_value(name);
    let selection = config.select_keyed(&lookup, &project_lookup);
    for warning in settings.take_warnings() {
        warn_once(&format!("warning: {warning}"));
    }
    let selection = selection.map_err(|err| match err {
        dsh_config::SelectError::MissingKey(e) => user_error("MISSING_CREDENTIAL", e.to_string()),
        dsh_config::SelectError::Invalid(e) => user_error("INVALID_CONFIG", e.to_string()),
    })?;
    let mut call = CallConfig::new(selection.provider.name.clone(), selection.model.clone());
    call.reasoning_effort = selection.effort;
    let permission = match &config.permission {
        Some(text) => text
            .trim()
            .parse::<PermissionPreset>()
            .map_err(|msg| user_error("INVALID_CONFIG", msg))?,
        None => PermissionPreset::default(),
    };
    let approval_rules = Arc::new(
        dsh_agent::ApprovalRules::load(&home).map_err(|e| user_error("INVALID_CONFIG", e))?,
    );
    Ok(RunSetup {
        cwd,
        home,
        call,
        permission,
        prices: config.price_table(),
        config,
        selection,
        mcp: Arc::default(),
        approval_rules,
    })
}

/// The parts of an agent for `setup` at delegation `depth` (0 for the session the user talks
/// to): the configured adapter, the built-in tools in the confinement the preset needs, and the
/// standard extensions (retry, guards, safety policy, context messages, skills, delegation).
/// Subagents are built by the same function, so they get the same providers and policies.
/// `permission` is the preset to start with; the returned [`SessionParts::permission`] switches
/// it (`/permission`), and subagents start with the preset in force when they are spawned.
pub(crate) fn agent_parts(
    setup: &Arc<RunSetup>,
    depth: u64,
    permission: PermissionPreset,
) -> anyhow::Result<SessionParts> {
    let provider = &setup.selection.provider;
    let adapter =
        dsh_config::build_adapter(&setup.config, provider, setup.selection.api_key.clone())
            .map_err(|e| user_error("INVALID_CONFIG", e.to_string()))?;
    let mut adapters = AdapterRegistry::new();
    adapters.register(provider.name.clone(), adapter)?;

    let spill_root = setup
        .home
        .join("spill")
        .join(uuid::Uuid::new_v4().to_string());
    let spill = SpillDir::create(&spill_root)
        .with_context(|| format!("cannot create {}", spill_root.display()))?;
    // Process confinement for `bash` (probed once; `danger-full-access` needs none).
    let sandbox = dsh_sandbox::confinement_for(permission)
        .map_err(|e| user_error("INVALID_CONFIG", e.to_string()))?;
    let current_permission = Arc::new(std::sync::Mutex::new(permission));
    // Background jobs belong to this agent's tool context: they die with the agent.
    let jobs = dsh_tools::JobTable::new();
    let tool_context = ToolContext::new(&setup.cwd, spill)
        .with_context(|| format!("cannot use {} as working directory", setup.cwd.display()))?
        .with_permission(permission)
        .with_confinement(sandbox.confinement())
        .with_jobs(jobs.clone());

    let extensions = ExtensionSet::new();
    for guard in dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        Duration::from_secs(15 * 60),
    ) {
        // The set lives exactly as long as the agent built from these parts.
        std::mem::forget(guard);
    }
    // Safety policy: logs preset and sandbox, asks before escalations, redacts secrets
    // (the environment's and the provider key, wherever it was read from).
    // It also asks before write/edit touch protected paths and cleans leftover temp files of
    // write/edit when the session resumes (docs/SECURITY.md, "Protected paths").
    let mut safety =
        dsh_agent::SafetyPolicy::new(permission, sandbox.mode().as_str(), sandbox.detail())
            .with_workspace(tool_context.cwd(), tool_context.writable_roots());
    if let Some(key) = &setup.selection.api_key {
        let name = provider.api_key_env.as_deref().unwrap_or("API_KEY");
        safety = safety.with_secret(name, key.expose_secret());
    }
    extensions.register_for_life(Arc::new(safety));
    extensions.register_for_life(Arc::new(dsh_agent::ContextMessages::new(
        &setup.cwd,
        Some(setup.home.clone()),
        Box::new(dsh_agent::SystemContext {
            permission: permission_summary(permission, sandbox.mode().as_str()),
        }),
    )));
    let skills = dsh_agent::SkillSet::discover(&dsh_agent::SkillSet::standard_dirs(
        &setup.cwd,
        Some(&setup.home),
        &[],
    ));
    if depth == 0 {
        for problem in skills.problems() {
            eprintln!(
                "dsh: warning: skipped skill {}: {}",
                problem.path.display(),
                problem.message
            );
        }
    }
    extensions.register_for_life(Arc::new(dsh_agent::Skills::new(skills)));
    // Hooks: `[hooks]` of each config file, then $DSH_HOME/hooks.json, then .dsh/hooks.json.
    let tables: Vec<(String, serde_json::Value)> = setup
        .config
        .hooks
        .iter()
        .map(|(event, value)| {
            let key = format!("hooks.{event}");
            let origin = setup
                .config
                .source_of(&key)
                .map_or_else(|| "config".to_string(), ToString::to_string);
            let value = serde_json::to_value(value).unwrap_or_default();
            (origin, serde_json::json!({ event: value }))
        })
        .collect();
    // The project's `.dsh/hooks.json` only in a trusted workspace (docs/configuration.md).
    let hooks = dsh_agent::HooksConfig::load_session(
        &tables,
        &setup.home,
        setup.config.trust.project_hooks(),
    )
    .map_err(|errors| {
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        user_error("INVALID_CONFIG", text.join("\n"))
    })?;
    if depth == 0 {
        for warning in &hooks.warnings {
            eprintln!("dsh: warning: {warning}");
        }
    }
    if !hooks.is_empty() {
        extensions.register_for_life(Arc::new(dsh_agent::ClaudeCodeHooks::new(hooks)));
    }
    // MCP servers (none unless configured): started when the session's agent is built.
    if !setup.config.mcp_servers.is_empty() {
        let hub = setup.mcp.get_or_init(|| {
            dsh_mcp::McpHub::new(
                setup.config.mcp_servers.clone(),
                &setup.cwd,
                &setup.home.join("logs"),
            )
        });
        for error in hub.start() {
            if depth == 0 {
                eprintln!("dsh: warning: {error}\n  its tools are not offered in this session");
            }
        }
        extensions.register_for_life(Arc::new(dsh_mcp::McpTools::new(Arc::clone(hub))));
    }
    let factory: dsh_agent::ChildFactory = {
        let setup = Arc::clone(setup);
        let current = Arc::clone(&current_permission);
        Arc::new(move |depth| {
            let preset = *current.lock().unwrap_or_else(|p| p.into_inner());
            agent_parts(&setup, depth, preset)
                .map(|session| session.parts)
                .map_err(|e| format!("{e:#}"))
        })
    };
    extensions.register_for_life(Arc::new(dsh_agent::Subagents::new(depth, factory)));
    extensions.register_for_life(Arc::new(dsh_agent::BackgroundJobs::new(&jobs)));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(session_tools(&setup.config)?),
        extensions,
        tool_context,
        options: {
            let mut options = AgentOptions::new(setup.call.clone(), &setup.cwd);
            options.compaction.threshold = setup.config.compaction.threshold;
            options.compaction.keep_tail = setup.config.compaction.keep_tail;
            options.prices = setup.prices.clone();
            options.approval_rules = Arc::clone(&setup.approval_rules);
            options
        },
    };
    Ok(SessionParts {
        parts,
        permission: permission_source(current_permission),
    })
}

/// An agent's parts and how its session switches permission presets.
pub(crate) struct SessionParts {
    pub(crate) parts: AgentParts,
    pub(crate) permission: dsh_agent::PermissionSource,
}

impl SessionParts {
    /// Builds the agent on a new session, or on session `resume`.
    pub(crate) fn into_agent(
        self,
        store: &dyn SessionStore,
        resume: Option<&str>,
    ) -> Result<Agent, dsh_agent::AgentError> {
        let mut agent = match resume {
            Some(key) => Agent::resume(self.parts, store, key)?,
            None => Agent::create(self.parts, store)?,
        };
        agent.set_permission_source(self.permission);
        Ok(agent)
    }
}

/// What each preset means on this host (`/permission`): the sandbox `bash` runs in and the
/// sentence the model reads. `current` follows successful switches (subagents start with it).
fn permission_source(
    current: Arc<std::sync::Mutex<PermissionPreset>>,
) -> dsh_agent::PermissionSource {
    Arc::new(move |preset| {
        let sandbox = dsh_sandbox::confinement_for(preset).map_err(|e| e.to_string())?;
        *current.lock().unwrap_or_else(|p| p.into_inner()) = preset;
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: sandbox.confinement(),
            sandbox_mode: sandbox.mode().as_str().to_string(),
            sandbox_detail: sandbox.detail().to_string(),
            summary: permission_summary(preset, sandbox.mode().as_str()),
        })
    })
}

/// The built-in tools, `ask_user_question` (answered by the front end's asker; headless runs
/// get a clear error), and `web_fetch` when `[tools.web_fetch] enabled = true`.
fn session_tools(config: &dsh_config::Config) -> anyhow::Result<ToolRegistry> {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(dsh_tools::AskUserQuestionTool))?;
    let web = config.web_fetch();
    if web.enabled {
        tools.register(Arc::new(dsh_tools::WebFetchTool::new(
            dsh_tools::WebFetchSettings {
                allowed_hosts: web.allowed_hosts,
                max_bytes: usize::try_from(web.max_bytes).unwrap_or(usize::MAX),
                timeout: web.timeout,
                ..dsh_tools::WebFetchSettings::default()
            },
        )))?;
    }
    Ok(tools)
}

/// Builds the agent for `setup` ([`agent_parts`] at depth 0) on a new, resumed or continued
/// session. The returned guards are empty: the extensions live as long as the agent.
pub(crate) fn build_agent(
    setup: &RunSetup,
    args: &RunArgs,
    store: &dyn SessionStore,
) -> anyhow::Result<(Agent, Vec<dsh_agent::ExtensionGuard>)> {
    let setup = Arc::new(setup.clone());
    let parts = agent_parts(&setup, 0, setup.permission)?;
    let guards = Vec::new();
    let cwd_text = setup.cwd.to_string_lossy().into_owned();
    let resume = if let Some(key) = &args.resume {
        Some(key.clone())
    } else if args.continue_last {
        let listing = store.list(&dsh_session::ListFilter {
            cwd: Some(cwd_text.clone()),
        })?;
        // A damaged log newer than every readable one is the session the user means: stop
        // rather than append to an older one.
        let newest_readable = listing.sessions.first().map(|s| s.updated_at);
        if let Some(damaged) = listing
            .damaged
            .iter()
            .filter(|d| newest_readable.is_none_or(|t| d.updated_at >= t))
            .max_by_key(|d| d.updated_at)
        {
            return Err(user_error(
                "SESSION_DAMAGED",
                format!(
                    "the newest session of {cwd_text} cannot be read: {} ({}). Repair or \
                     remove that file, or pick a session with `dsh run --resume <id>` \
                     (`dsh sessions list` shows them)",
                    damaged.path, damaged.problem
                ),
            ));
        }
        let latest = listing.sessions.first().ok_or_else(|| {
            user_error(
                "NOT_FOUND",
                format!("no session to continue in {cwd_text}; start one with `dsh run`"),
            )
        })?;
        Some(latest.id.clone())
    } else {
        None
    };
    let agent = parts.into_agent(store, resume.as_deref())?;
    Ok((agent, guards))
}

/// What the model is told about the permission preset.
fn permission_summary(preset: PermissionPreset, sandbox_mode: &str) -> String {
    let commands = match sandbox_mode {
        "unavailable" => "`bash` is unavailable: no sandbox works on this machine".to_string(),
        "none" => "commands run unconfined".to_string(),
        mode => format!("commands run in a {mode} sandbox"),
    };
    match preset {
        PermissionPreset::ReadOnly => format!("read-only: files cannot be modified; {commands}"),
        PermissionPreset::WorkspaceWrite => format!(
            "workspace-write: files can be modified inside the working directory and temp \
             directories only; {commands}; actions outside that are refused"
        ),
        PermissionPreset::DangerFullAccess => {
            "danger-full-access: no file or command restrictions".to_string()
        }
    }
}

/// Runs `dsh run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> anyhow::Result<ExitCode> {
    let setup = resolve(&args)?;
    let store = open_store(StoreKind::Jsonl, &setup.home)?;
    let (mut agent, _guards) = build_agent(&setup, &args, store.as_ref())?;
    let handle = agent.handle();
    let session_id = handle.session_id();

    let show_progress = !args.json && (args.verbose || std::io::stderr().is_terminal());
    let mut events = handle.subscribe();
    let json = args.json;
    let show_reasoning = args.show_reasoning;
    // Prints events as they are logged; once the run is over (`finished`), prints what is
    // still buffered and stops.
    let finished = tokio_util::sync::CancellationToken::new();
    let printer = tokio::spawn({
        let session_id = session_id.clone();
        let finished = finished.clone();
        async move {
            let mut progress = ProgressPrinter::new(show_reasoning);
            let mut stdout = std::io::stdout();
            let mut print = |envelope: &dsh_session::Envelope| {
                if json {
                    let line = serde_json::json!({
                        "type": "session_event",
                        "sessionId": session_id,
                        "event": envelope_json(envelope),
                    });
                    let _ = writeln!(stdout, "{line}");
                } else if show_progress {
                    progress.print(envelope);
                }
            };
            loop {
                let received = tokio::select! {
                    received = events.recv() => received,
                    () = finished.cancelled() => {
                        while let Ok(envelope) = events.try_recv() {
                            print(&envelope);
                        }
                        break;
                    }
                };
                match received {
                    Ok(envelope) => print(&envelope),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        if show_progress {
                            eprintln!("dsh: progress display skipped {n} events");
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        }
    });

    handle.followup(args.prompt.clone())?;

    // Ctrl-C cancels the turn (which is then logged as aborted); a second Ctrl-C exits at once.
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signal_task = tokio::spawn({
        let handle = handle.clone();
        let interrupted = Arc::clone(&interrupted);
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("\ndsh: cancelling (press Ctrl-C again to quit at once)");
                handle.cancel(false);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        }
    });

    let outcomes = agent.run_until_idle().await;
    signal_task.abort();
    drop(handle);
    drop(agent);
    // Every event of the run is in the channel by now: the printer drains it and stops.
    finished.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), printer).await;

    let outcomes = outcomes?;
    let outcome = outcomes.last().cloned();
    let was_interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    finish(&args, &setup, &session_id, outcome, was_interrupted)
}

fn finish(
    args: &RunArgs,
    setup: &RunSetup,
    session_id: &str,
    outcome: Option<TurnOutcome>,
    interrupted: bool,
) -> anyhow::Result<ExitCode> {
    let Some(outcome) = outcome else {
        return Err(user_error("UNKNOWN", "no turn ran"));
    };
    let prices = &setup.prices;
    let cost = prices
        .models
        .get(&setup.call.model)
        .map(|price| price.cost(&outcome.usage.usage));
    if args.json {
        let line = serde_json::json!({
            "type": "result",
            "sessionId": session_id,
            "output": outcome.final_text,
            "reason": outcome.reason,
            "usage": usage_json(&outcome.usage),
            "costUsd": cost,
            "cache": cache_json(&outcome.cache_reports),
        });
        println!("{line}");
    } else if !outcome.final_text.is_empty() {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", outcome.final_text.trim_end());
    }
    match &outcome.reason {
        TurnEndReason::Completed => Ok(ExitCode::SUCCESS),
        TurnEndReason::Aborted { .. } if interrupted => {
            eprintln!("dsh: ABORTED: the turn was cancelled; the session was saved ({session_id})");
            Ok(ExitCode::from(130))
        }
        TurnEndReason::Aborted { .. } => Err(user_error("ABORTED", "the turn was cancelled")),
        TurnEndReason::MaxTokens => Err(user_error(
            "MAX_TOKENS",
            "the reply hit the output token limit; its tool calls were not run. Continue with \
             `dsh run --continue \"...\"` or raise the limit.",
        )),
        TurnEndReason::Error { error } => Err(user_error(&error.code.as_str(), &error.message)),
        TurnEndReason::Blocked { message } => Err(user_error(
            "BLOCKED",
            message
                .clone()
                .unwrap_or_else(|| "the turn was blocked".into()),
        )),
        TurnEndReason::Interrupted => Err(user_error("INTERRUPTED", "the turn was interrupted")),
    }
}

/// The turn's prompt-cache reports: a summary and one entry per request.
fn cache_json(reports: &[dsh_agent::CacheReport]) -> serde_json::Value {
    let request_bytes: usize = reports.iter().map(|r| r.request_bytes).sum();
    let reused_bytes: usize = reports.iter().map(|r| r.reused_bytes).sum();
    serde_json::json!({
        "requests": reports.len(),
        "prefixExtensions": reports.iter().filter(|r| r.prefix_extension).count(),
        "requestBytes": request_bytes,
        "reusedBytes": reused_bytes,
        "reports": reports,
    })
}

fn usage_json(usage: &UsageTotals) -> serde_json::Value {
    serde_json::json!({
        "inputTokens": usage.usage.input_tokens,
        "outputTokens": usage.usage.output_tokens,
        "cacheReadTokens": usage.usage.cache_read_tokens,
        "cacheWriteTokens": usage.usage.cache_write_tokens,
        "reasoningTokens": usage.usage.reasoning_tokens,
        "requests": usage.requests,
        "cacheHitRatio": usage.usage.cache_hit_ratio(),
    })
}
