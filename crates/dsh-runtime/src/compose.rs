//! Agent composition: the adapter, the tools in the confinement the preset needs, and the
//! standard extensions (retry, guards, safety policy, context messages, skills, hooks, MCP,
//! delegation, background jobs), built the same way for every front end and every subagent
//! (docs/decisions/0006-composition-root.md).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentParts, ExtensionSet};
use dsh_llm::{AdapterRegistry, LockExt, RetryPolicy};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

use crate::{Configuration, RuntimeError, Warnings};

/// What one session shares with its subagents: its resolved configuration, the MCP servers
/// (started by the first agent that needs them) and its approval rules (remembered ones loaded
/// at open, plus the ones allowed for this session).
pub(crate) struct SessionShared {
    pub(crate) configuration: Arc<Configuration>,
    pub(crate) mcp: OnceLock<Arc<dsh_mcp::McpHub>>,
    /// MCP servers of this session only ([`crate::SessionSpec::mcp_servers`]).
    pub(crate) extra_mcp: Vec<dsh_config::McpServerConfig>,
    pub(crate) approval_rules: Arc<dsh_agent::ApprovalRules>,
    pub(crate) warnings: Warnings,
    /// The connection pool the session's adapters share (`None`: each builds its own).
    pub(crate) http: Option<dsh_http::HttpClient>,
    /// The adapter answering instead of the configured provider ([`crate::SessionSpec::provider`]).
    pub(crate) provider: Option<crate::ProviderReplacement>,
}

/// An agent's parts and how its session switches permission presets.
pub(crate) struct SessionParts {
    pub(crate) parts: AgentParts,
    pub(crate) permission: dsh_agent::PermissionSource,
    /// Plan mode of a top-level session (docs/agent.md, "Plan mode"); subagents have none.
    pub(crate) plan: Option<dsh_agent::PlanMode>,
    /// The live events of this agent's children (docs/agent.md, "Watching children").
    pub(crate) children: dsh_agent::ChildFeed,
    /// Warms the provider connection again before a later call (top-level sessions only).
    pub(crate) preconnect: crate::Preconnector,
}

fn invalid(err: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::InvalidConfig(err.to_string())
}

/// The extensions of the session the user talks to only: plan mode (returned), goals
/// (docs/goals.md, as dsh has them; on unless `[goals] enabled = false`; a replay's goals take
/// the recording's ids) and workspace checkpoints (docs/rewind.md; unless `[rewind] enabled =
/// false`).
fn plan_and_goals(
    shared: &SessionShared,
    depth: u64,
    extensions: &ExtensionSet,
) -> Option<dsh_agent::PlanMode> {
    if depth > 0 {
        return None;
    }
    let plan = dsh_agent::PlanMode::new();
    extensions.register_for_life(Arc::new(plan.clone()));
    let settings = shared.configuration.config.goals;
    if settings.enabled {
        let ids = (shared.provider.as_ref()).map_or_else(Vec::new, |p| p.goal_ids.clone());
        let goals = dsh_agent::Goals::new(settings.max_rounds).with_ids(ids);
        extensions.register_for_life(Arc::new(goals));
    }
    // Workspace checkpoints for rewind (docs/rewind.md).
    if let Some(store) = crate::rewind::configured_store(&shared.configuration) {
        extensions.register_for_life(Arc::new(crate::rewind::Checkpoints::new(store)));
    }
    Some(plan)
}

/// The parts of an agent at delegation `depth` (0 for the session the user talks to).
/// Subagents are built by the same function, so they get the same providers and policies.
/// `permission` is the preset to start with; the returned [`SessionParts::permission`] switches
/// it (`/permission`), and subagents start with the preset in force when they are spawned.
/// Warnings (skipped skills, hook and MCP problems) are reported for depth 0 only.
pub(crate) fn agent_parts(
    shared: &Arc<SessionShared>,
    depth: u64,
    permission: PermissionPreset,
) -> Result<SessionParts, RuntimeError> {
    let setup = &shared.configuration;
    let provider = &setup.selection.provider;
    // A replaced provider (`dsh replay`) answers under the configured route; nothing else of
    // the session changes.
    let mut call = setup.call.clone();
    let adapter = match &shared.provider {
        Some(replacement) => {
            call.model = replacement.model.clone();
            Arc::clone(&replacement.adapter)
        }
        None => crate::adapters::build_adapter(
            &setup.config,
            provider,
            setup.selection.api_key.clone(),
            shared.http.as_ref(),
        )
        .map_err(invalid)?,
    };
    // The connection opens while the rest of the session is built (docs/providers.md, "Shared
    // connections and preconnect"); a subagent finds the session's in the shared pool.
    let preconnect = if depth == 0 && provider.preconnect && shared.provider.is_none() {
        crate::Preconnector::new(Arc::clone(&adapter))
    } else {
        crate::Preconnector::off()
    };
    preconnect.warm();
    // `read_image` is offered only to a model that takes images (docs/tools.md, "read_image").
    let takes_images = adapter
        .model_info(&call.model)
        .is_some_and(|info| dsh_llm::takes_images(&info));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register(provider.name.clone(), adapter)
        .map_err(invalid)?;
    // Process confinement for `bash` (probed once; `danger-full-access` needs none), with the
    // network as `[sandbox] network` says (docs/SECURITY.md, "Network").
    let network = setup.config.sandbox().network;
    let sandbox = dsh_sandbox::confinement_for(permission)
        .map_err(invalid)?
        .with_network(network);
    // Background jobs belong to this agent's tool context: they die with the agent.
    let jobs = dsh_tools::JobTable::new();
    let tool_context = tool_context(setup, permission, &sandbox)?
        .with_jobs(jobs.clone())
        .with_network(network);
    let current_permission = Arc::new(std::sync::Mutex::new(permission));

    let extensions = ExtensionSet::new();
    for guard in dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        Duration::from_secs(15 * 60),
    ) {
        // The set lives exactly as long as the agent built from these parts.
        std::mem::forget(guard);
    }
    let project_confiner = project_confiner(&current_permission, &tool_context, &setup.home);
    register_policies(
        &extensions,
        shared,
        depth,
        permission,
        &sandbox,
        &tool_context,
        project_confiner,
    )?;
    let factory = child_factory(shared, &current_permission);
    // A child's `model` must be a configured one (docs/agent.md, "Delegation").
    let models = (setup.config.models.iter())
        .map(|(id, entry)| (id.clone(), entry.provider.clone()))
        .collect();
    let subagents = dsh_agent::Subagents::with_max_concurrent(
        depth,
        factory,
        setup.config.agents.max_concurrent,
    )
    .with_models(models);
    let children = subagents.feed();
    extensions.register_for_life(Arc::new(subagents));
    extensions.register_for_life(Arc::new(dsh_agent::BackgroundJobs::new(&jobs)));
    let plan = plan_and_goals(shared, depth, &extensions);
    let mut options = AgentOptions::new(call, &setup.cwd);
    options.compaction.threshold = setup.config.compaction.threshold;
    options.compaction.keep_tail = setup.config.compaction.keep_tail;
    // `[budget]` (docs/harbor.md, "Budgets"); front ends may override per session.
    let budget = setup.config.budget;
    options.budget = dsh_agent::TurnBudget {
        max_steps: budget.max_steps,
        max_wall_time: budget
            .max_wall_time_secs
            .map(std::time::Duration::from_secs_f64),
        max_cost_usd: budget.max_cost_usd,
    };
    options.prices = setup.prices.clone();
    options.approval_rules = Arc::clone(&shared.approval_rules);
    let parts = AgentParts {
        adapters,
        tools: Arc::new(session_tools(setup, &extensions, takes_images)?),
        extensions,
        tool_context,
        options,
    };
    Ok(SessionParts {
        parts,
        permission: permission_source(current_permission, network, shared, depth),
        plan,
        children,
        preconnect,
    })
}

/// The user's slash commands (`$DSH_HOME/commands`) and, in a trusted workspace, the
/// project's (`.dsh/commands`, through the file gate, as pinned by the trust; docs/commands.md).
/// Their problems are warnings; a command's `model` must be in the model table.
fn custom_commands(shared: &SessionShared) -> dsh_agent::CustomCommands {
    let setup = &shared.configuration;
    let project = setup
        .config
        .trust
        .project_commands()
        .filter(|(dirs, _)| !dirs.is_empty())
        .map(|(dirs, pinned)| dsh_agent::ProjectCommands {
            dirs: dirs.to_vec(),
            gate: dsh_tools::GatePolicy::new(&setup.config.trust.workspace)
                .with_dsh_home(&setup.home),
            pinned: pinned.to_vec(),
        });
    // Claude Code's `~/.claude/commands` first: dsh's own folder replaces its commands.
    let user = setup.home.join(dsh_config::trust::COMMANDS_DIR);
    let claude = dsh_config::trust::user_claude_dir()
        .map(|dir| dir.join(dsh_config::trust::COMMANDS_DIR))
        .filter(|dir| dir.is_dir());
    let user_dirs: Vec<&std::path::Path> = claude
        .iter()
        .map(|d| d.as_path())
        .chain([user.as_path()])
        .collect();
    let set = dsh_agent::CustomCommandSet::load_all(&user_dirs, project.as_ref());
    for problem in set.problems() {
        shared.warnings.say(&format!(
            "warning: command file {}: {}",
            problem.path.display(),
            problem.message
        ));
    }
    let table = setup.config.model_table();
    dsh_agent::CustomCommands::new(set, move |model| table.get(model).is_some())
}

/// The session's skills: the user's and the project's (through the file gate), the project's
/// `.claude/skills` when trusted (as pinned), none of a project's taking the name of one of
/// the user's own `commands`; their problems are warnings at depth 0.
fn session_skills(
    shared: &SessionShared,
    depth: u64,
    commands: Option<&dsh_agent::CustomCommands>,
) -> dsh_agent::SkillSet {
    let setup = &shared.configuration;
    // The project's skills through the file gate (docs/SECURITY.md, "The file gate").
    let mut skills = dsh_agent::SkillSet::discover_session(&setup.cwd, Some(&setup.home), &[]);
    // The project's `.claude/skills`, trusted and as pinned (docs/other-tools.md).
    if let Some(pinned) = setup.config.trust.project_skills() {
        skills.add_pinned(pinned);
    }
    if let Some(commands) = commands {
        // The user's own commands (not a trusted project's) keep their names.
        let project_dirs = setup
            .config
            .trust
            .project_commands()
            .map(|(dirs, _)| dirs.to_vec())
            .unwrap_or_default();
        let own: Vec<(String, std::path::PathBuf)> = commands
            .set()
            .commands()
            .iter()
            .filter(|c| !project_dirs.iter().any(|dir| c.path.starts_with(dir)))
            .map(|c| (c.name.clone(), c.path.clone()))
            .collect();
        skills.yield_to_commands(&own);
    }
    if depth == 0 {
        for problem in skills.problems() {
            shared.warnings.say(&format!(
                "warning: skipped skill {}: {}",
                problem.path.display(),
                problem.message
            ));
        }
    }
    skills
}

/// The tools' context: the working directory, a fresh spill folder under the home, the
/// preset and the confinement `bash` runs in.
fn tool_context(
    setup: &Configuration,
    permission: PermissionPreset,
    sandbox: &dsh_sandbox::Sandbox,
) -> Result<ToolContext, RuntimeError> {
    let spill_root = setup
        .home
        .join("spill")
        .join(uuid::Uuid::new_v4().to_string());
    let spill = SpillDir::create(&spill_root).map_err(|reason| RuntimeError::Io {
        what: format!("cannot create {}", spill_root.display()),
        reason,
    })?;
    Ok(ToolContext::new(&setup.cwd, spill)
        .map_err(|reason| RuntimeError::Workspace {
            what: format!("cannot use {} as working directory", setup.cwd.display()),
            reason,
        })?
        .with_permission(permission)
        .with_extra_roots(setup.extra_roots.clone())
        .with_confinement(sandbox.confinement())
        // The file gate denies the home the runtime really uses (docs/SECURITY.md, "The file
        // gate"), not only the one the environment names.
        .with_dsh_home(&setup.home)
        // The scripts the project's hooks and MCP servers run, pinned by the trust: `write`
        // and `edit` need approval to change them (docs/SECURITY.md, "Planted configuration
        // and workspace trust").
        .with_run_files(
            setup
                .config
                .trust
                .scripts
                .iter()
                .map(|(file, _)| file.clone())
                .collect(),
        ))
}

/// The extensions that carry the configuration's policy: safety, context messages, skills,
/// hooks and MCP servers.
fn register_policies(
    extensions: &ExtensionSet,
    shared: &SessionShared,
    depth: u64,
    permission: PermissionPreset,
    sandbox: &dsh_sandbox::Sandbox,
    tool_context: &ToolContext,
    project_confiner: dsh_tools::CommandConfiner,
) -> Result<(), RuntimeError> {
    let setup = &shared.configuration;
    // Safety policy: logs preset and sandbox, asks before escalations, redacts secrets
    // (the environment's and the provider key, wherever it was read from).
    // It also asks before write/edit touch protected paths and cleans leftover temp files of
    // write/edit when the session resumes (docs/SECURITY.md, "Protected paths").
    let mut safety =
        dsh_agent::SafetyPolicy::new(permission, sandbox.mode().as_str(), sandbox.detail())
            .with_workspace(tool_context.cwd(), tool_context.writable_roots())
            .with_network(tool_context.network());
    // Every secret loaded for the workspace (docs/SECURITY.md, "Secrets and redaction"),
    // the editor's own MCP servers' tokens and headers, and the key in use.
    let mut secrets = setup.secrets().clone();
    crate::credentials::add_mcp_secrets(
        &mut secrets,
        &shared.extra_mcp,
        &crate::credentials::Settings::default(),
    );
    if let Some(key) = &setup.selection.api_key {
        let provider = &setup.selection.provider;
        let name = provider.api_key_env.as_deref().unwrap_or("API_KEY");
        secrets.add(name, key.expose_secret());
    }
    safety = safety.with_redactor(secrets);
    extensions.register_for_life(Arc::new(safety));
    extensions.register_for_life(Arc::new(dsh_agent::ContextMessages::new(
        &setup.cwd,
        Some(setup.home.clone()),
        Box::new(dsh_agent::SystemContext {
            permission: permission_summary(permission, sandbox.mode().as_str())
                + &added_roots_sentence(tool_context.extra_roots(), permission)
                + network_sentence(tool_context.network(), permission),
        }),
    )));
    let commands = (depth == 0).then(|| custom_commands(shared));
    let skills = session_skills(shared, depth, commands.as_ref());
    extensions.register_for_life(Arc::new(dsh_agent::Skills::new(skills)));
    if let Some(commands) = commands {
        extensions.register_for_life(Arc::new(commands));
    }
    let hooks = session_hooks(setup)?;
    if depth == 0 {
        for warning in &hooks.warnings {
            shared.warnings.say(&format!("warning: {warning}"));
        }
    }
    if !hooks.is_empty() {
        let hooks =
            gated_hooks(setup, shared, depth, hooks).with_confiner(Arc::clone(&project_confiner));
        extensions.register_for_life(Arc::new(dsh_agent::ClaudeCodeHooks::new(hooks)));
    }
    // The Codex dialect: `$DSH_HOME/codex-hooks.json`, the user's own file (docs/hooks.md,
    // "The Codex dialect").
    let codex =
        dsh_agent::HooksConfig::load_codex_file(&setup.home.join(dsh_agent::CODEX_HOOKS_FILE))
            .map_err(|errors| {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                RuntimeError::InvalidConfig(text.join("\n"))
            })?;
    if depth == 0 {
        for warning in &codex.warnings {
            shared.warnings.say(&format!("warning: {warning}"));
        }
    }
    if !codex.is_empty() {
        let codex = gated_hooks(setup, shared, depth, codex);
        let hooks = dsh_agent::CommandHooks::new(codex).with_model(setup.call.model.clone());
        extensions.register_for_life(Arc::new(hooks));
    }
    // MCP servers (none unless configured or given by the front end): started once the session
    // is open and its preset final ([`start_mcp`]). A session's own server replaces a configured
    // one of its name.
    let mut servers: Vec<dsh_config::McpServerConfig> = setup
        .config
        .mcp_servers
        .iter()
        .filter(|s| !shared.extra_mcp.iter().any(|e| e.name == s.name))
        .cloned()
        .collect();
    servers.extend(shared.extra_mcp.iter().cloned());
    if !servers.is_empty() {
        let hub = shared
            .mcp
            .get_or_init(|| mcp_hub(setup, &servers, project_confiner));
        extensions.register_for_life(crate::mcp::McpExtension::new(Arc::clone(hub)));
    }
    Ok(())
}

/// The hub of `servers` as a session has it: each stdio server's command through the
/// configuration's script gate, the project's servers confined by `project_confiner`. Nothing
/// starts yet.
fn mcp_hub(
    setup: &Configuration,
    servers: &[dsh_config::McpServerConfig],
    project_confiner: dsh_tools::CommandConfiner,
) -> Arc<dsh_mcp::McpHub> {
    let servers = servers.iter().map(crate::mcp::server).collect();
    let hub = dsh_mcp::McpHub::new(servers, &setup.cwd, &setup.home.join("logs"));
    let gate = setup.script_gate();
    hub.set_script_gate(Arc::new(crate::mcp::Pinned(gate)));
    hub.set_confiner(project_confiner);
    hub.set_oauth_dir(&setup.home.join(dsh_mcp::oauth::LOGIN_DIR));
    hub
}

/// The longest [`check_mcp`] waits for a server to start.
const CHECK_STARTUP_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The configured MCP servers of `setup` started as a session of its preset starts them
/// ([`mcp_hub`], the project's servers confined under the preset), each one's tools listed,
/// then all stopped: the hub is dropped, which kills each stdio server's process group. For
/// `dsh doctor`; failures are redacted of every loaded secret, as [`start_mcp`]'s warnings are.
pub(crate) fn check_mcp(
    setup: &Configuration,
    only: Option<&str>,
) -> Result<Vec<crate::mcp::McpServerCheck>, RuntimeError> {
    let wanted =
        |server: &&dsh_config::McpServerConfig| only.is_none_or(|name| server.name == name);
    if !setup.config.mcp_servers.iter().any(|s| wanted(&s)) {
        return Ok(Vec::new());
    }
    // A check answers within a bounded time, whatever a server's own `startup_timeout_secs`
    // (a project may set a day); every server starts at the same time.
    let servers: Vec<_> = setup
        .config
        .mcp_servers
        .iter()
        .filter(wanted)
        .cloned()
        .map(|mut server| {
            server.startup_timeout = server.startup_timeout.min(CHECK_STARTUP_LIMIT);
            server
        })
        .collect();
    let servers = &servers;
    let permission = setup.permission;
    let network = setup.config.sandbox().network;
    let sandbox = dsh_sandbox::confinement_for(permission)
        .map_err(invalid)?
        .with_network(network);
    let tool_context = tool_context(setup, permission, &sandbox)?.with_network(network);
    let spill = tool_context.spill().path().to_path_buf();
    let current = Arc::new(std::sync::Mutex::new(permission));
    let hub = mcp_hub(
        setup,
        servers,
        project_confiner(&current, &tool_context, &setup.home),
    );
    let errors = hub.start();
    let tools = hub.tools();
    drop(hub);
    drop(tool_context);
    // The spill folder of this check only: no tool ran, nothing in it is wanted.
    let _ = std::fs::remove_dir_all(spill);
    let redact = |text: &str| setup.secrets().redact(text).into_owned();
    Ok(servers
        .iter()
        .map(|server| {
            let outcome = match errors.iter().find(|e| e.server == server.name) {
                Some(error) => Err(redact(&error.message)),
                None => Ok(tools
                    .iter()
                    .filter(|(name, _)| *name == server.name)
                    .map(|(_, tool)| crate::mcp::McpToolCheck {
                        name: redact(&tool.name),
                        description: tool.description.as_deref().map(redact),
                    })
                    .collect()),
            };
            crate::mcp::McpServerCheck {
                name: server.name.clone(),
                from_project: server.from_project,
                outcome,
            }
        })
        .collect())
}

/// Starts the session's MCP servers and says why any failed. Called by `Runtime::open` once the
/// session's preset is final (plan mode entered or restored), so a project's server never runs
/// its start-up under a wider preset than the session's first step (docs/SECURITY.md, "Project
/// hooks and MCP servers run confined"). A server not started here starts when its tools are
/// first listed.
pub(crate) fn start_mcp(shared: &SessionShared) {
    let Some(hub) = shared.mcp.get() else {
        return;
    };
    for error in hub.start() {
        // The error quotes the server's own stderr, which may print a token it was given:
        // every loaded secret is redacted first (fourth adversarial review).
        let line = format!("warning: {error}\n  its tools are not offered in this session");
        shared
            .warnings
            .say(&shared.configuration.secrets().redact(&line));
    }
}

/// How the project's hooks and MCP servers run: confined exactly as `bash` is, under the preset
/// in force when each starts (docs/SECURITY.md, "Project hooks and MCP servers run confined").
/// The sandbox of a preset is kept for the next command, as `bash`'s is.
fn project_confiner(
    current: &Arc<std::sync::Mutex<PermissionPreset>>,
    tool_context: &ToolContext,
    home: &std::path::Path,
) -> dsh_tools::CommandConfiner {
    let current = Arc::clone(current);
    let cwd = tool_context.cwd().to_path_buf();
    let writable_roots = tool_context.writable_roots();
    let network = tool_context.network();
    let hidden_dirs = hidden_with(home);
    type Kept = Option<(PermissionPreset, Arc<dyn dsh_tools::CommandConfinement>)>;
    let kept: std::sync::Mutex<Kept> = std::sync::Mutex::new(None);
    Arc::new(move |plan, workdir| {
        // `ask` is confined exactly as `workspace-write`.
        let preset = current.lock_or_recover().confinement();
        let confinement = {
            let mut kept = kept.lock_or_recover();
            match &*kept {
                Some((kept_preset, confinement)) if *kept_preset == preset => {
                    Arc::clone(confinement)
                }
                _ => {
                    let confinement = sandbox_confinement(preset, network)?;
                    *kept = Some((preset, Arc::clone(&confinement)));
                    confinement
                }
            }
        };
        let request = dsh_tools::ConfinementRequest {
            preset,
            cwd: cwd.clone(),
            workdir: workdir.to_path_buf(),
            writable_roots: writable_roots.clone(),
            hidden_dirs: hidden_dirs.clone(),
            network,
        };
        confinement.confine(plan, &request)
    })
}

/// A confiner for commands dsh itself runs on the workspace's behalf (the TUI's `/diff` runs
/// `git diff`, which starts the filters, fsmonitor and submodule commands a repository's
/// configuration names): the `read-only` sandbox without network, with dsh's `home` hidden.
/// Whatever the repository makes git run then reads files at most, as the model's own
/// `read-only` commands do (docs/SECURITY.md, "Snapshots, /undo, /diff and @ mentions").
pub fn read_only_confiner(
    cwd: &std::path::Path,
    home: &std::path::Path,
) -> dsh_tools::CommandConfiner {
    let cwd = cwd.to_path_buf();
    let hidden_dirs = hidden_with(home);
    Arc::new(move |plan, workdir| {
        let preset = PermissionPreset::ReadOnly;
        let confinement = sandbox_confinement(preset, false)?;
        let request = dsh_tools::ConfinementRequest {
            preset,
            cwd: cwd.clone(),
            workdir: workdir.to_path_buf(),
            writable_roots: Vec::new(),
            hidden_dirs: hidden_dirs.clone(),
            network: false,
        };
        confinement.confine(plan, &request)
    })
}

/// The confinement of `preset` on this host, with the network as `network` says, or
/// `SANDBOX_UNAVAILABLE` with the reason.
fn sandbox_confinement(
    preset: PermissionPreset,
    network: bool,
) -> Result<Arc<dyn dsh_tools::CommandConfinement>, dsh_tools::ToolError> {
    let sandbox = dsh_sandbox::confinement_for(preset).map_err(|e| {
        dsh_tools::ToolError::new(dsh_tools::ToolErrorCode::SandboxUnavailable, e.to_string())
    })?;
    Ok(sandbox.with_network(network).confinement())
}

/// The folders confined commands must not see, `home` (the home the runtime uses) among them.
fn hidden_with(home: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut hidden_dirs = dsh_tools::hidden_dirs();
    if !hidden_dirs.iter().any(|dir| dir == home) {
        hidden_dirs.push(home.to_path_buf());
    }
    hidden_dirs
}

/// How subagents are built: [`agent_parts`] one level deeper, with the preset in force.
fn child_factory(
    shared: &Arc<SessionShared>,
    current: &Arc<std::sync::Mutex<PermissionPreset>>,
) -> dsh_agent::ChildFactory {
    let shared = Arc::clone(shared);
    let current = Arc::clone(current);
    Arc::new(move |depth| {
        let preset = *current.lock_or_recover();
        agent_parts(&shared, depth, preset)
            .map(|session| session.parts)
            .map_err(|e| match e {
                RuntimeError::Agent(agent) => dsh_agent::SubagentError::Agent(agent),
                e => dsh_agent::SubagentError::Setup {
                    code: e.code().to_string(),
                    message: e.to_string(),
                },
            })
    })
}

/// The check every hook command passes before it runs: a script where the model can write
/// runs only with the bytes pinned when the user trusted the workspace (docs/hooks.md,
/// "Scripts in the workspace are pinned"); and the `PATH` hooks run with, without entries the
/// model can write.
fn script_check(setup: &Configuration) -> (dsh_agent::ScriptCheck, Option<std::ffi::OsString>) {
    let gate = setup.script_gate();
    let path = gate.command_path();
    (
        Arc::new(move |command: &str| gate.check_shell(command)),
        path,
    )
}

/// `hooks` under [`script_check`]; a top-level session names each command refused now.
fn gated_hooks(
    setup: &Configuration,
    shared: &SessionShared,
    depth: u64,
    hooks: dsh_agent::HooksConfig,
) -> dsh_agent::HooksConfig {
    let (check, path) = script_check(setup);
    let hooks = hooks.with_script_check(check, path);
    if depth == 0 {
        for refusal in hooks.refusals() {
            shared.warnings.say(&format!("warning: {refusal}"));
        }
    }
    hooks
}

/// Hooks: `[hooks]` of each config file (named by the file it came from), then
/// `$DSH_HOME/hooks.json`, then the project's `.dsh/hooks.json`, which only a trusted
/// workspace applies (docs/configuration.md, "Workspace trust").
fn session_hooks(setup: &Configuration) -> Result<dsh_agent::HooksConfig, RuntimeError> {
    let tables: Vec<dsh_agent::HookTable> = setup
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
            dsh_agent::HookTable {
                origin,
                hooks: serde_json::json!({ event: value }),
                from_project: setup.config.set_by_project(&key),
            }
        })
        .collect();
    let mut hooks = dsh_agent::HooksConfig::load_session(
        &tables,
        &setup.home,
        setup.config.trust.project_hooks(),
    )
    .map_err(|errors| {
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        RuntimeError::InvalidConfig(text.join("\n"))
    })?;
    // Claude Code's `.claude/settings.json` of a trusted workspace, as pinned: project hooks,
    // confined (docs/other-tools.md). A file written for Claude Code may name what dsh cannot
    // run; that leaves its hooks out with a warning rather than stopping the session.
    if let Some((file, text)) = setup.config.trust.project_claude_hooks() {
        let origin = file.display().to_string();
        match dsh_agent::HooksConfig::parse_file_text(&origin, text) {
            Ok(claude) => hooks.extend(claude.from_project()),
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                hooks.warnings.push(format!(
                    "the hooks of {origin} are not used: {}",
                    text.join("; ")
                ));
            }
        }
    }
    Ok(hooks)
}

/// What each preset means on this host (`/permission`): the sandbox `bash` runs in and the
/// sentence the model reads. `current` follows successful switches (subagents start with it).
/// A top-level session (`depth` 0) also stops the project's running MCP servers on a switch:
/// they start again on their next call under the new preset, so entering plan mode or
/// `/permission read-only` leaves no project server running with write access
/// (docs/SECURITY.md, "Project hooks and MCP servers run confined").
fn permission_source(
    current: Arc<std::sync::Mutex<PermissionPreset>>,
    network: bool,
    shared: &Arc<SessionShared>,
    depth: u64,
) -> dsh_agent::PermissionSource {
    let session = (depth == 0).then(|| Arc::clone(shared));
    let extra_roots = shared.configuration.extra_roots.clone();
    Arc::new(move |preset| {
        let sandbox = dsh_sandbox::confinement_for(preset)
            .map_err(|e| dsh_agent::PermissionError::SandboxUnavailable(e.to_string()))?
            .with_network(network);
        let switched = std::mem::replace(&mut *current.lock_or_recover(), preset) != preset;
        if let Some(hub) = session.as_ref().and_then(|shared| shared.mcp.get()) {
            if switched {
                hub.stop_project_servers();
            }
        }
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: sandbox.confinement(),
            sandbox_mode: sandbox.mode().as_str().to_string(),
            sandbox_detail: sandbox.detail().to_string(),
            summary: permission_summary(preset, sandbox.mode().as_str())
                + &added_roots_sentence(&extra_roots, preset)
                + network_sentence(network, preset),
        })
    })
}

/// What the model reads about the network when `[sandbox] network = "off"` (empty otherwise,
/// and under `danger-full-access`, which confines nothing).
fn network_sentence(network: bool, preset: PermissionPreset) -> &'static str {
    if network || preset == PermissionPreset::DangerFullAccess {
        ""
    } else {
        "; commands have no network access (a command that failed for lack of it may be \
         retried once with `network: true` and a `justification`: the user is asked)"
    }
}

/// The built-in tools, `ask_user_question` (answered by the front end's asker; headless runs
/// get a clear error), `read_image` when the session's model takes images, `web_fetch` when `[tools.web_fetch] enabled = true`, and `web_search`
/// when a DeepSeek key is configured (its request log is an extension of this agent).
fn session_tools(
    setup: &Configuration,
    extensions: &ExtensionSet,
    takes_images: bool,
) -> Result<ToolRegistry, RuntimeError> {
    let config = &setup.config;
    let mut tools = ToolRegistry::with_builtins();
    if takes_images {
        tools
            .register(Arc::new(dsh_tools::ReadImageTool))
            .map_err(invalid)?;
    }
    if let Some(search) = setup.search.as_ref() {
        let (tool, log) = crate::web_search::tool(search);
        tools.register(Arc::new(tool)).map_err(invalid)?;
        extensions.register_for_life(log);
    }
    // `[tools.glob]` / `[tools.grep]` (docs/tools.md): replace the default search tools.
    let search = config.search_tools();
    tools.unregister("glob");
    tools.unregister("grep");
    tools
        .register(Arc::new(dsh_tools::GlobTool::new(
            search.glob_max_results,
            search.glob_sample_over_cap,
        )))
        .map_err(invalid)?;
    tools
        .register(Arc::new(dsh_tools::GrepTool::new(search.grep_max_results)))
        .map_err(invalid)?;
    tools
        .register(Arc::new(dsh_tools::AskUserQuestionTool))
        .map_err(invalid)?;
    let web = config.web_fetch();
    if web.enabled {
        tools
            .register(Arc::new(dsh_tools::WebFetchTool::new(
                dsh_tools::WebFetchSettings {
                    allowed_hosts: web.allowed_hosts,
                    max_bytes: usize::try_from(web.max_bytes).unwrap_or(usize::MAX),
                    timeout: web.timeout,
                    ..dsh_tools::WebFetchSettings::default()
                },
            )))
            .map_err(invalid)?;
    }
    Ok(tools)
}

/// What the model is told of the directories added as writable roots, under the presets that
/// confine writes to roots; empty otherwise.
fn added_roots_sentence(roots: &[std::path::PathBuf], preset: PermissionPreset) -> String {
    let confined = matches!(
        preset,
        PermissionPreset::WorkspaceWrite | PermissionPreset::Ask
    );
    if roots.is_empty() || !confined {
        return String::new();
    }
    let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    format!(
        "; the user also made these directories writable, as the working directory is: {}",
        list.join(", ")
    )
}

/// What the model is told about the permission preset (docs/SECURITY.md).
pub fn permission_summary(preset: PermissionPreset, sandbox_mode: &str) -> String {
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
        PermissionPreset::Ask => format!(
            "ask: every file change (write, edit), every command (bash, also in the background) \
             and every MCP tool not declared read-only waits for the user's approval before it \
             runs; reading and searching run without asking; approved changes are confined as \
             under workspace-write: files can be modified inside the working directory and temp \
             directories only; {commands}; actions outside that are refused. A rejected call \
             fails with PERMISSION_DENIED: do not repeat it unchanged"
        ),
    }
}
