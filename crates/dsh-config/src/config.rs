//! The effective configuration: typed, cross-checked, with the provenance of every value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_http::ApiKey;
use dsh_llm::{ModelInfo, ModelPrice, ModelRow, ModelTable, PriceTable, ReasoningEffort};
use toml::{Table, Value};

use crate::error::{ConfigError, ConfigErrors, Source};
use crate::load::{collect_layers, key_path, merge_layers, Flags, Provenance};

/// The wire format of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// DeepSeek's chat-completions API.
    DeepSeek,
    /// Any other chat-completions server (vLLM, llama.cpp server, Ollama, ...).
    OpenAiCompatible,
    /// The Anthropic Messages API (Claude, DeepSeek's Anthropic-compatible endpoint).
    Anthropic,
}

impl ProviderKind {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::DeepSeek => "deepseek",
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

/// Which request field carries the output token limit (`quirks.max_tokens_field`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens` (DeepSeek, vLLM, llama.cpp server, Ollama).
    #[default]
    MaxTokens,
    /// `max_completion_tokens` (OpenAI's newer name).
    MaxCompletionTokens,
    /// `"none"`: no limit is sent.
    Omit,
}

/// `[providers.<name>.quirks]`: the fields a chat-completions endpoint accepts, as configured
/// (docs/configuration.md). The composition root hands them to the adapter, which owns what
/// each switch does to a request; every switch is on unless the file turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quirks {
    /// `send_reasoning_content`.
    pub send_reasoning_content: bool,
    /// `send_stream_options`.
    pub send_stream_options: bool,
    /// `send_thinking`.
    pub send_thinking: bool,
    /// `send_reasoning_effort`.
    pub send_reasoning_effort: bool,
    /// `max_tokens_field`.
    pub max_tokens_field: MaxTokensField,
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks {
            send_reasoning_content: true,
            send_stream_options: true,
            send_thinking: true,
            send_reasoning_effort: true,
            max_tokens_field: MaxTokensField::MaxTokens,
        }
    }
}

/// One named provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// The provider's name: its key under `[providers]` and its adapter route.
    pub name: String,
    /// The wire format, which picks the adapter.
    pub kind: ProviderKind,
    /// Endpoint prefix.
    pub base_url: String,
    /// Name of the variable holding the key (never the key); `None` for keyless servers.
    pub api_key_env: Option<String>,
    /// Model used with this provider when none is named.
    pub default_model: Option<String>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Idle watchdog override.
    pub idle_timeout: Option<Duration>,
    /// Overall reply deadline override (`reply_timeout_secs`).
    pub reply_timeout: Option<Duration>,
    /// Fields the endpoint accepts (chat-completions kinds only).
    pub quirks: Quirks,
    /// Open a connection when a session starts, before its first call (`preconnect`, default
    /// true; docs/providers.md, "Shared connections and preconnect").
    pub preconnect: bool,
}

/// One row of the model table.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    /// The model id as the provider names it.
    pub id: String,
    /// The provider this model belongs to, for listing; `None` for any.
    pub provider: Option<String>,
    /// Context window in tokens, if configured.
    pub context_window: Option<u64>,
    /// Largest output the model allows, in tokens.
    pub max_output: Option<u64>,
    /// Output limit sent when none is asked for.
    pub default_max_tokens: Option<u64>,
    /// Reasoning efforts the model accepts.
    pub efforts: Option<Vec<ReasoningEffort>>,
    /// Effort used when none is asked for.
    pub default_effort: Option<ReasoningEffort>,
    /// Prices per million tokens, for cost reports.
    pub price: Option<ModelPrice>,
    /// Input kinds (`["text", "image"]`), if configured (docs/model-calls.md, "Images").
    pub input: Option<Vec<String>>,
    /// Sampling temperature sent with each call to the model, if configured.
    pub temperature: Option<f64>,
    /// Stop sequences sent with each call to the model, if configured.
    pub stop: Option<Vec<String>>,
}

impl ModelEntry {
    /// What this row tells an adapter: the facts it states, `default_max_tokens` falling back
    /// to `max_output`.
    pub fn row(&self) -> ModelRow {
        ModelRow {
            context_window: self.context_window,
            default_max_tokens: self.default_max_tokens.or(self.max_output),
            efforts: self.efforts.clone(),
            default_effort: self.default_effort,
            input: self.input.clone(),
            temperature: self.temperature,
            stop: self.stop.clone(),
        }
    }

    /// Adapter metadata from this row, with `fallback` (the adapter's own idea of the model)
    /// filling what the row leaves out.
    pub fn model_info(&self, fallback: ModelInfo) -> ModelInfo {
        ModelInfo {
            id: self.id.clone(),
            ..self.row().apply(fallback)
        }
    }
}

/// Compaction settings (docs/agent.md, "Context discipline"), shares of the context window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionSettings {
    /// Share of the context window at which a turn compacts.
    pub threshold: f64,
    /// Share of the window kept verbatim after compaction.
    pub keep_tail: f64,
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Default provider name.
    pub provider: String,
    /// Default model, if configured.
    pub model: Option<String>,
    /// Default effort, if configured.
    pub effort: Option<ReasoningEffort>,
    /// Permission preset name, if configured.
    pub permission: Option<String>,
    /// Compaction thresholds (`[compaction]`).
    pub compaction: CompactionSettings,
    /// Turn budgets (`[budget]`).
    pub budget: BudgetSettings,
    /// Session goals (`[goals]`, docs/goals.md).
    pub goals: GoalsSettings,
    /// Workspace checkpoints for rewind (`[rewind]`, docs/rewind.md).
    pub rewind: RewindSettings,
    /// Delegation settings (`[agents]`).
    pub agents: AgentsSettings,
    /// Configured providers by name (`[providers.<name>]`).
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The model table by model id (`[models.<id>]`).
    pub models: BTreeMap<String, ModelEntry>,
    /// `[mcp]` kept as written.
    pub mcp: Table,
    /// The MCP servers `[mcp.servers.<name>]` enables (none by default).
    pub mcp_servers: Vec<crate::mcp::McpServerConfig>,
    /// `[hooks]` kept as written, for hooks.
    pub hooks: Table,
    /// The project files and whether their settings applied (docs/configuration.md).
    pub trust: crate::trust::WorkspaceTrust,
    /// The profile applied (`--profile`, `DSH_PROFILE`), if any.
    pub profile: Option<String>,
    /// `(base_url, api_key_env)` of each provider without the project layer.
    own_endpoints: BTreeMap<String, (Option<String>, Option<String>)>,
    merged: Table,
    provenance: Provenance,
}

/// What a run uses: one provider, one model, an effort and the key.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The provider the run calls.
    pub provider: ProviderConfig,
    /// The model id sent to the provider.
    pub model: String,
    /// The reasoning effort asked for, if any.
    pub effort: Option<ReasoningEffort>,
    /// The key (redacted in `Debug`); `None` for a keyless provider.
    pub api_key: Option<ApiKey>,
}

/// Why no selection could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// The provider's key variable is not set (maps to `MISSING_CREDENTIAL`).
    MissingKey(ConfigError),
    /// Anything else (unknown provider, no model).
    Invalid(ConfigError),
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::MissingKey(e) | SelectError::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SelectError {}

impl ProviderConfig {
    /// True when this provider's calls go without a key when its `api_key_env` variable is not
    /// set: a built-in chat-completions provider pointed at another endpoint (`DEEPSEEK_BASE_URL`
    /// or `base_url` naming a local server or a proxy, which often take none). Its own hosted
    /// API, Anthropic's format and providers the user defined with `api_key_env` need the key
    /// (docs/providers.md, "Servers without a key").
    pub fn keyless_when_unset(&self) -> bool {
        let moved = dsh_llm::providers::BUILTIN_PROVIDERS
            .iter()
            .find(|builtin| builtin.name == self.name)
            .is_some_and(|builtin| {
                builtin.base_url.trim_end_matches('/') != self.base_url.trim_end_matches('/')
            });
        moved && self.kind != ProviderKind::Anthropic
    }
}

fn as_u64(value: Option<&Value>) -> Option<u64> {
    value
        .and_then(Value::as_integer)
        .and_then(|n| u64::try_from(n).ok())
}

fn as_f64(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Float(x) => Some(*x),
        Value::Integer(n) => Some(*n as f64),
        _ => None,
    }
}

/// An array of strings (its other items left out: the schema reports them).
fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    value.and_then(Value::as_array).map(|items| {
        items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

fn as_string(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_string)
}

fn effort(value: Option<&Value>) -> Option<ReasoningEffort> {
    value
        .and_then(Value::as_str)
        .and_then(ReasoningEffort::parse)
}

/// `[providers.<name>]` sections; a section without `kind` or `base_url` is an error and left
/// out.
fn parse_providers(
    merged: &Table,
    provenance: &Provenance,
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<String, ProviderConfig> {
    let mut providers = BTreeMap::new();
    for (name, value) in sub_table(merged, "providers").into_iter().flatten() {
        let Some(table) = value.as_table() else {
            continue;
        };
        if let Some(provider) = parse_provider(name, table, provenance, errors) {
            providers.insert(name.clone(), provider);
        }
    }
    providers
}

/// One provider section.
fn parse_provider(
    name: &str,
    table: &Table,
    provenance: &Provenance,
    errors: &mut Vec<ConfigError>,
) -> Option<ProviderConfig> {
    let path = key_path("providers", name);
    let first_source = provenance
        .iter()
        .find(|(k, _)| k.starts_with(&format!("{path}.")))
        .map(|(_, s)| s.clone())
        .unwrap_or(Source::Default);
    let kind = match table.get("kind").and_then(Value::as_str) {
        Some("deepseek") => ProviderKind::DeepSeek,
        Some("openai-compatible") => ProviderKind::OpenAiCompatible,
        Some("anthropic") => ProviderKind::Anthropic,
        _ => {
            errors.push(ConfigError::new(
                &first_source,
                format!("{path}.kind"),
                "is missing",
                "add `kind = \"deepseek\"`, `\"openai-compatible\"` or `\"anthropic\"`",
            ));
            return None;
        }
    };
    let Some(base_url) = as_string(table.get("base_url")) else {
        errors.push(ConfigError::new(
            &first_source,
            format!("{path}.base_url"),
            "is missing",
            "add the endpoint prefix, e.g. `base_url = \"http://localhost:8000/v1\"`",
        ));
        return None;
    };
    let quirk_table = sub_table(table, "quirks");
    let flag = |key: &str| {
        quirk_table
            .and_then(|q| q.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(true)
    };
    let max_tokens_field = match quirk_table
        .and_then(|q| q.get("max_tokens_field"))
        .and_then(Value::as_str)
    {
        Some("max_completion_tokens") => MaxTokensField::MaxCompletionTokens,
        Some("none") => MaxTokensField::Omit,
        _ => MaxTokensField::MaxTokens,
    };
    Some(ProviderConfig {
        name: name.to_string(),
        kind,
        base_url,
        api_key_env: as_string(table.get("api_key_env")),
        default_model: as_string(table.get("default_model")),
        headers: sub_table(table, "headers")
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
        idle_timeout: as_u64(table.get("idle_timeout_secs")).map(Duration::from_secs),
        reply_timeout: as_u64(table.get("reply_timeout_secs")).map(Duration::from_secs),
        preconnect: table
            .get("preconnect")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        quirks: Quirks {
            send_reasoning_content: flag("send_reasoning_content"),
            send_stream_options: flag("send_stream_options"),
            send_thinking: flag("send_thinking"),
            send_reasoning_effort: flag("send_reasoning_effort"),
            max_tokens_field,
        },
    })
}

/// `[models.<id>]` rows; checks that each names a known provider and that its defaults lie
/// within its limits.
fn parse_models(
    merged: &Table,
    providers: &BTreeMap<String, ProviderConfig>,
    src: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<String, ModelEntry> {
    let mut models = BTreeMap::new();
    for (id, value) in sub_table(merged, "models").into_iter().flatten() {
        let Some(table) = value.as_table() else {
            continue;
        };
        let entry = parse_model(id, table, providers, src, errors);
        models.insert(id.clone(), entry);
    }
    models
}

/// One model row.
fn parse_model(
    id: &str,
    table: &Table,
    providers: &BTreeMap<String, ProviderConfig>,
    src: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> ModelEntry {
    let path = key_path("models", id);
    let provider = as_string(table.get("provider"));
    if let Some(p) = &provider {
        if !providers.contains_key(p)
            && !errors
                .iter()
                .any(|e| e.key.starts_with(&format!("providers.{p}")))
        {
            let key = format!("{path}.provider");
            errors.push(ConfigError::new(
                &src(&key),
                key,
                format!("names the unknown provider `{p}`"),
                format!(
                    "use one of: {}, or add a `[providers.{p}]` section",
                    providers.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    let efforts: Option<Vec<ReasoningEffort>> = table
        .get("efforts")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|v| effort(Some(v))).collect());
    let default_effort = effort(table.get("default_effort"));
    if let (Some(efforts), Some(default)) = (&efforts, default_effort) {
        if !efforts.contains(&default) {
            let key = format!("{path}.default_effort");
            errors.push(ConfigError::new(
                &src(&key),
                key,
                format!("`{}` is not among the model's efforts", default.as_str()),
                "pick one of the `efforts` list, or add it there",
            ));
        }
    }
    let max_output = as_u64(table.get("max_output"));
    let default_max_tokens = as_u64(table.get("default_max_tokens"));
    if let (Some(max), Some(default)) = (max_output, default_max_tokens) {
        if default > max {
            let key = format!("{path}.default_max_tokens");
            errors.push(ConfigError::new(
                &src(&key),
                key,
                format!("{default} is larger than max_output ({max})"),
                "lower it to at most max_output",
            ));
        }
    }
    let price = sub_table(table, "price").map(|p| ModelPrice {
        input_per_mtok: as_f64(p.get("input")).unwrap_or(0.0),
        cache_read_per_mtok: as_f64(p.get("cache_read")).unwrap_or(0.0),
        cache_write_per_mtok: as_f64(p.get("cache_write"))
            .or_else(|| as_f64(p.get("input")))
            .unwrap_or(0.0),
        output_per_mtok: as_f64(p.get("output")).unwrap_or(0.0),
    });
    ModelEntry {
        id: id.to_string(),
        provider,
        context_window: as_u64(table.get("context_window")),
        max_output,
        default_max_tokens,
        efforts,
        default_effort,
        price,
        input: strings(table.get("input")),
        temperature: as_f64(table.get("temperature")),
        stop: strings(table.get("stop")),
    }
}

/// The error for a `provider` key naming no configured provider, unless that provider's own
/// section already has an error.
fn unknown_provider(
    provider: &str,
    providers: &BTreeMap<String, ProviderConfig>,
    errors: &[ConfigError],
    src: &dyn Fn(&str) -> Source,
) -> Option<ConfigError> {
    if providers.contains_key(provider)
        || errors
            .iter()
            .any(|e| e.key.starts_with(&format!("providers.{provider}")))
    {
        return None;
    }
    Some(ConfigError::new(
        &src("provider"),
        "provider",
        format!("names the unknown provider `{provider}`"),
        format!(
            "use one of: {}, or add a `[providers.{provider}]` section",
            providers.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// `[compaction]`, with `keep_tail` checked against `threshold`.
fn parse_compaction(
    merged: &Table,
    src: &dyn Fn(&str) -> Source,
    errors: &mut Vec<ConfigError>,
) -> CompactionSettings {
    let compaction_table = sub_table(merged, "compaction");
    let compaction = CompactionSettings {
        threshold: as_f64(compaction_table.and_then(|t| t.get("threshold")))
            .unwrap_or(crate::DEFAULT_COMPACTION_THRESHOLD),
        keep_tail: as_f64(compaction_table.and_then(|t| t.get("keep_tail")))
            .unwrap_or(crate::DEFAULT_KEEP_TAIL),
    };
    if compaction.keep_tail >= compaction.threshold {
        errors.push(ConfigError::new(
            &src("compaction.keep_tail"),
            "compaction.keep_tail",
            format!(
                "{} is not smaller than compaction.threshold ({})",
                compaction.keep_tail, compaction.threshold
            ),
            "keep_tail must leave room to compact: make it smaller than threshold",
        ));
    }
    compaction
}

/// Turn budgets of unattended runs (`[budget]`, docs/harbor.md, "Budgets"); `None` is
/// no limit. `dsh run --max-steps`, `--max-wall-time` and `--max-cost-usd` override them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetSettings {
    /// `budget.max_steps`: most model calls in one turn.
    pub max_steps: Option<u64>,
    /// `budget.max_wall_time_secs`: longest turn in seconds.
    pub max_wall_time_secs: Option<f64>,
    /// `budget.max_cost_usd`: most USD one turn may spend.
    pub max_cost_usd: Option<f64>,
}

/// Session goals (`[goals]`, docs/goals.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoalsSettings {
    /// `goals.enabled`: the goal tools, `/goal` and the continuation rounds (default on).
    pub enabled: bool,
    /// `goals.max_rounds`: the round cap of a goal created without one (default 256, dsh's).
    pub max_rounds: u64,
}

impl Default for GoalsSettings {
    fn default() -> Self {
        GoalsSettings {
            enabled: true,
            max_rounds: 256,
        }
    }
}

/// `[goals]` (its values were checked by the schema).
fn parse_goals(merged: &Table) -> GoalsSettings {
    let table = sub_table(merged, "goals");
    let mut settings = GoalsSettings::default();
    if let Some(on) = table
        .and_then(|t| t.get("enabled"))
        .and_then(Value::as_bool)
    {
        settings.enabled = on;
    }
    if let Some(n) = as_f64(table.and_then(|t| t.get("max_rounds"))) {
        settings.max_rounds = n.max(1.0) as u64;
    }
    settings
}

/// Workspace checkpoints for rewind (`[rewind]`, docs/rewind.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewindSettings {
    /// `rewind.enabled`: checkpoint the workspace at each turn (default on).
    pub enabled: bool,
    /// `rewind.max_file_bytes`: larger files are named, not kept (default 4 MiB).
    pub max_file_bytes: u64,
    /// `rewind.max_files`: a workspace with more files is not checkpointed (default 50,000).
    pub max_files: usize,
}

impl Default for RewindSettings {
    fn default() -> Self {
        RewindSettings {
            enabled: true,
            max_file_bytes: 4 * 1024 * 1024,
            max_files: 50_000,
        }
    }
}

/// `[rewind]` (its values were checked by the schema).
fn parse_rewind(merged: &Table) -> RewindSettings {
    let table = sub_table(merged, "rewind");
    let mut settings = RewindSettings::default();
    if let Some(on) = table
        .and_then(|t| t.get("enabled"))
        .and_then(Value::as_bool)
    {
        settings.enabled = on;
    }
    if let Some(n) = as_f64(table.and_then(|t| t.get("max_file_bytes"))) {
        settings.max_file_bytes = n.max(0.0) as u64;
    }
    if let Some(n) = as_f64(table.and_then(|t| t.get("max_files"))) {
        settings.max_files = n.max(1.0) as usize;
    }
    settings
}

/// Delegation (`[agents]`, docs/configuration.md, "Subagents").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentsSettings {
    /// `agents.max_concurrent`: most children of one agent running at once (default 4).
    pub max_concurrent: usize,
}

impl Default for AgentsSettings {
    fn default() -> Self {
        AgentsSettings { max_concurrent: 4 }
    }
}

/// `[agents]` (its values were checked by the schema).
fn parse_agents(merged: &Table) -> AgentsSettings {
    let table = sub_table(merged, "agents");
    let mut settings = AgentsSettings::default();
    if let Some(n) = as_f64(table.and_then(|t| t.get("max_concurrent"))) {
        settings.max_concurrent = n.max(1.0) as usize;
    }
    settings
}

/// `[budget]` (its values were checked by the schema).
fn parse_budget(merged: &Table) -> BudgetSettings {
    let table = sub_table(merged, "budget");
    let get = |key: &str| as_f64(table.and_then(|t| t.get(key)));
    BudgetSettings {
        max_steps: get("max_steps").map(|n| n.max(1.0) as u64),
        max_wall_time_secs: get("max_wall_time_secs"),
        max_cost_usd: get("max_cost_usd"),
    }
}

/// What the project layer re-points keeps none of the user's credentials: a provider whose
/// `base_url` or `api_key_env` the project changes (from what `own`, every layer but the
/// project's, gives) gets only the project's `headers` (the user's key was already withheld,
/// `Config::select_keyed`), and an MCP server whose `command`, `args`, `url`, `cwd`, `env` or
/// `env_vars` the project changes gets only the project's `headers`, `env`, `env_vars` and
/// `bearer_token_env`. Keys merge one by one, so without this a trusted project naming the
/// user's gateway or MCP server sent the user's header secrets and environment to its own
/// endpoint or program (adversarial reviews of `dsh doctor` and of the notify features).
fn keep_secrets_from_moved_targets(merged: &mut Table, project: &Table, own: &Table) {
    let sections: [(&[&str], &[&str], &[&str]); 2] = [
        (&["providers"], &["base_url", "api_key_env"], &["headers"]),
        // `env` decides what a program runs as much as `command` does (`PYTHONPATH`,
        // `NODE_OPTIONS`, `LD_PRELOAD` point it at the project's code): found by the second
        // adversarial review, a project setting only `env` took the user's server token.
        (
            &["mcp", "servers"],
            &["command", "args", "url", "cwd", "env", "env_vars"],
            &["headers", "env", "env_vars", "bearer_token_env"],
        ),
    ];
    for (path, moves, secrets) in sections {
        let (Some(ours), Some(theirs)) = (table_at_mut(merged, path), table_at(project, path))
        else {
            continue;
        };
        for (name, entry) in theirs {
            let Some(entry) = entry.as_table() else {
                continue;
            };
            let before = table_at(own, path)
                .and_then(|entries| entries.get(name))
                .and_then(Value::as_table);
            let moved = moves.iter().any(|key| {
                entry
                    .get(*key)
                    .is_some_and(|value| before.and_then(|before| before.get(*key)) != Some(value))
            });
            if !moved {
                continue;
            }
            let Some(merged_entry) = ours.get_mut(name).and_then(Value::as_table_mut) else {
                continue;
            };
            for key in secrets {
                match entry.get(*key) {
                    Some(value) => merged_entry.insert((*key).to_string(), value.clone()),
                    None => merged_entry.remove(*key),
                };
            }
        }
    }
}

/// The table at dotted `path` of `table` (`["mcp", "servers"]`).
fn table_at<'a>(table: &'a Table, path: &[&str]) -> Option<&'a Table> {
    path.iter()
        .try_fold(table, |table, key| sub_table(table, key))
}

/// [`table_at`], to change.
fn table_at_mut<'a>(table: &'a mut Table, path: &[&str]) -> Option<&'a mut Table> {
    path.iter()
        .try_fold(table, |table, key| table.get_mut(*key)?.as_table_mut())
}

/// Claude Code's `.mcp.json` (docs/other-tools.md): in a trusted workspace, its servers (as
/// pinned) join the layers as a project layer just below `.dsh/config.toml`, whose server of
/// the same name wins; what it holds that dsh does not use becomes a note. Untrusted, it was
/// listed as ignored and only its unreadable form is a note.
fn add_mcp_json_layer(layers: &mut Vec<(Source, Table)>, trust: &mut crate::trust::WorkspaceTrust) {
    let (Some(file), Some(text)) = (trust.mcp_json.clone(), trust.mcp_json_text.clone()) else {
        return;
    };
    let origin = file.display().to_string();
    let (mut layer, notes) = match crate::other_tools::mcp_json_layer(&origin, &text) {
        Ok(parsed) => parsed,
        Err(problem) => {
            trust.notes.push(format!("not used: {problem}"));
            return;
        }
    };
    if trust.trusted.is_none() {
        return;
    }
    trust.notes.extend(notes);
    let project_servers: Vec<(PathBuf, Vec<String>)> = layers
        .iter()
        .filter_map(|(source, table)| match source {
            Source::ProjectFile(path) => Some((
                path.clone(),
                table_at(table, &["mcp", "servers"])
                    .map(|s| s.keys().cloned().collect())
                    .unwrap_or_default(),
            )),
            _ => None,
        })
        .collect();
    if let Some(servers) = table_at_mut(&mut layer, &["mcp", "servers"]) {
        for (path, names) in &project_servers {
            for name in names {
                if servers.remove(name).is_some() {
                    trust.notes.push(format!(
                        "{origin}: server `{name}` is not used: {} defines a server of that                          name, which wins",
                        path.display()
                    ));
                }
            }
        }
    }
    let at = layers
        .iter()
        .position(|(source, _)| source.precedence() >= 2)
        .unwrap_or(layers.len());
    layers.insert(at, (Source::ProjectFile(file), layer));
}

fn sub_table<'a>(table: &'a Table, key: &str) -> Option<&'a Table> {
    table.get(key).and_then(Value::as_table)
}

impl Config {
    /// Loads and checks the configuration for `cwd`: built-in defaults, `home/config.toml`,
    /// the project's `.dsh/config.toml`, the variables of [`ENV_KEYS`](crate::ENV_KEYS) through
    /// `lookup`, then `flags`. Every problem is reported, each naming its file, key and fix.
    pub fn load(
        home: &Path,
        cwd: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
        flags: &Flags,
    ) -> Result<Config, ConfigErrors> {
        let (mut layers, project_errors) = collect_layers(home, cwd, lookup, flags)?;
        let user_table = layers
            .iter()
            .find(|(source, _)| matches!(source, Source::UserFile(_)))
            .map(|(_, table)| table);
        let prefixes = crate::trust::user_prefixes(user_table);
        let mut trust = crate::trust::assess(home, cwd, flags.trust_workspace, &prefixes);
        if !project_errors.is_empty() {
            // A trusted project's broken file is the user's to fix; an untrusted one may be a
            // plant, which must not stop every run: it is left out with a warning.
            if trust.trusted.is_some() {
                return Err(ConfigErrors(project_errors));
            }
            let text: Vec<String> = project_errors.iter().map(ToString::to_string).collect();
            trust.invalid_project = Some(text.join("\n"));
        }
        // What the provider endpoints would be without the project file: a project layer may
        // not point the user's key at another host (see `select_keyed`).
        let own: Vec<(Source, Table)> = layers
            .iter()
            .filter(|(source, _)| !matches!(source, Source::ProjectFile(_)))
            .cloned()
            .collect();
        let own_merged = merge_layers(&own).0;
        let own_endpoints = endpoints(&own_merged);
        if trust.trusted.is_some() {
            // Apply the project file exactly as pinned, not as read a moment earlier.
            match &trust.config_text {
                Some(text) => {
                    for (source, table) in &mut layers {
                        if matches!(source, Source::ProjectFile(_)) {
                            *table = crate::load::parse_layer(text, source)
                                .map_err(|e| ConfigErrors(vec![e]))?;
                            let errors = crate::schema::check_layer(table, source);
                            if !errors.is_empty() {
                                return Err(ConfigErrors(errors));
                            }
                        }
                    }
                }
                // Nothing pinned (the file appeared after the check, or was not read):
                // nothing of it applies.
                None => layers.retain(|(source, _)| !matches!(source, Source::ProjectFile(_))),
            }
        } else {
            // The user's own settings: defaults, the user file and its profile.
            let below: Vec<(Source, Table)> = layers
                .iter()
                .filter(|(source, _)| {
                    matches!(
                        source,
                        Source::Default | Source::UserFile(_) | Source::Profile { .. }
                    )
                })
                .cloned()
                .collect();
            let below = merge_layers(&below).0;
            for (source, table) in &mut layers {
                if let Source::ProjectFile(path) = source {
                    let keys = crate::trust::restrict_project_layer(table, &below);
                    if !keys.is_empty() {
                        trust.ignored.push((path.clone(), keys));
                    }
                }
            }
            if let Some(hooks) = &trust.hooks_file {
                trust.ignored.push((hooks.clone(), Vec::new()));
            }
            trust.ignore_other_tools();
            trust.ignore_commands();
        }
        add_mcp_json_layer(&mut layers, &mut trust);
        if let (Some(_), Some(file), Some(text)) = (
            &trust.trusted,
            &trust.claude_settings,
            &trust.claude_settings_text,
        ) {
            match crate::other_tools::claude_settings_unused(&file.display().to_string(), text) {
                Ok(Some(note)) => trust.notes.push(note),
                Ok(None) => {}
                Err(problem) => trust.notes.push(format!("not used: {problem}")),
            }
        }
        let (mut merged, provenance) = merge_layers(&layers);
        // The project's own config file (`.mcp.json`'s layer sets no provider).
        if let Some((_, project)) = layers.iter().find(|(source, _)| {
            matches!(source, Source::ProjectFile(path) if Some(path) != trust.mcp_json.as_ref())
        }) {
            keep_secrets_from_moved_targets(&mut merged, project, &own_merged);
        }
        let mut config = Config::from_merged(merged, provenance)?;
        config.profile = layers.iter().find_map(|(source, _)| match source {
            Source::Profile { name, .. } => Some(name.clone()),
            _ => None,
        });
        config.trust = trust;
        config.own_endpoints = own_endpoints;
        Ok(config)
    }

    /// Credential variables that `./.env` may set: the `api_key_env` of every provider the
    /// built-in defaults and the user's own configuration define (never the project's).
    pub fn own_key_variables(&self) -> Vec<String> {
        self.own_endpoints
            .values()
            .filter_map(|(_, variable)| variable.clone())
            .collect()
    }

    /// Where the value at dotted `key` came from.
    pub fn source_of(&self, key: &str) -> Option<&Source> {
        self.provenance.get(key)
    }

    /// True when the project's `.dsh/config.toml` set `key` or any value under it: what the
    /// project configured runs confined (its `[hooks]`, its MCP servers; docs/SECURITY.md,
    /// "Project hooks and MCP servers run confined").
    pub fn set_by_project(&self, key: &str) -> bool {
        set_by_project(&self.provenance, key)
    }

    /// Every leaf value with its dotted key and source, in key order.
    pub fn values(&self) -> Vec<(String, &Value, &Source)> {
        let mut out = Vec::new();
        collect_leaves(&self.merged, "", &self.provenance, &mut out);
        out
    }

    fn source_or_default(&self, key: &str) -> Source {
        self.provenance.get(key).cloned().unwrap_or(Source::Default)
    }

    fn from_merged(merged: Table, provenance: Provenance) -> Result<Config, ConfigErrors> {
        let mut errors = Vec::new();
        let src = |key: &str| provenance.get(key).cloned().unwrap_or(Source::Default);
        let providers = parse_providers(&merged, &provenance, &mut errors);
        let models = parse_models(&merged, &providers, &src, &mut errors);
        let provider = as_string(merged.get("provider")).unwrap_or_default();
        if let Some(error) = unknown_provider(&provider, &providers, &errors, &src) {
            errors.push(error);
        }
        let compaction = parse_compaction(&merged, &src, &mut errors);
        let (mut mcp_servers, mcp_errors) =
            crate::mcp::mcp_servers(sub_table(&merged, "mcp"), &src);
        errors.extend(mcp_errors);
        for server in &mut mcp_servers {
            let key = key_path("mcp.servers", &server.name);
            server.from_project = set_by_project(&provenance, &key);
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Config {
            mcp_servers,
            provider,
            model: as_string(merged.get("model")),
            effort: effort(merged.get("effort")),
            permission: as_string(merged.get("permission")),
            compaction,
            budget: parse_budget(&merged),
            goals: parse_goals(&merged),
            rewind: parse_rewind(&merged),
            agents: parse_agents(&merged),
            providers,
            models,
            mcp: sub_table(&merged, "mcp").cloned().unwrap_or_default(),
            hooks: sub_table(&merged, "hooks").cloned().unwrap_or_default(),
            trust: crate::trust::WorkspaceTrust::default(),
            profile: None,
            own_endpoints: BTreeMap::new(),
            merged,
            provenance,
        })
    }

    /// The model table (`[models]`) as the adapters read it (docs/configuration.md).
    pub fn model_table(&self) -> ModelTable {
        self.models
            .iter()
            .map(|(id, entry)| (id.clone(), entry.row()))
            .collect()
    }

    /// The provider named `name`, or an error listing the known ones.
    pub fn provider_named(
        &self,
        name: &str,
        source: &Source,
        key: &str,
    ) -> Result<&ProviderConfig, ConfigError> {
        self.providers.get(name).ok_or_else(|| {
            ConfigError::new(
                source,
                key,
                format!("names the unknown provider `{name}`"),
                format!(
                    "use one of: {}, or add a `[providers.{name}]` section to the config file",
                    self.providers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
    }

    /// Chooses provider, model, effort and key for a run. The model is the configured `model`
    /// unless the provider was chosen with higher precedence than the model (e.g. `--provider`
    /// on the command line with `model` from a file) and has a `default_model`; then that. The
    /// provider's key variable must be set (through `lookup`), else [`SelectError::MissingKey`].
    ///
    /// A provider whose `base_url` or `api_key_env` the project file changed (or defined) is
    /// given no key at all here; use [`Config::select_keyed`] to let the project's own `.env`
    /// supply one.
    pub fn select(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Selection, SelectError> {
        self.select_keyed(lookup, &|_| None)
    }

    /// True when the project file changed (or defined) `name`'s `base_url` or `api_key_env`:
    /// the endpoint differs from what the built-in defaults, the user's own file, the
    /// environment and flags give.
    pub fn redirected_by_project(&self, provider: &ProviderConfig) -> bool {
        match self.own_endpoints.get(&provider.name) {
            Some((url, variable)) => {
                url.as_deref() != Some(provider.base_url.as_str())
                    || *variable != provider.api_key_env
            }
            None => true,
        }
    }

    /// The provider, model and effort [`Config::select_keyed`] would choose, without looking up
    /// a key (`api_key` is `None`): for a session whose provider is replaced, as `dsh replay`
    /// replaces it with the recorded replies, and which must need no key.
    pub fn select_keyless(&self) -> Result<Selection, SelectError> {
        let provider_source = self.source_or_default("provider");
        let provider = self
            .provider_named(&self.provider, &provider_source, "provider")
            .map_err(SelectError::Invalid)?
            .clone();
        let model_source = self.provenance.get("model");
        let prefer_provider_default = match model_source {
            None => true,
            Some(model_source) => {
                provider_source.precedence() > model_source.precedence()
                    && provider.default_model.is_some()
            }
        };
        let model = if prefer_provider_default {
            provider
                .default_model
                .clone()
                .or_else(|| self.model.clone())
        } else {
            self.model.clone()
        };
        let Some(model) = model.filter(|m| !m.trim().is_empty()) else {
            let key = key_path(&key_path("providers", &provider.name), "default_model");
            return Err(SelectError::Invalid(ConfigError::new(
                &provider_source,
                key,
                format!("no model is configured for provider `{}`", provider.name),
                format!(
                    "pass --model, or set `default_model` in `[providers.{}]` of the config file",
                    provider.name
                ),
            )));
        };
        Ok(Selection {
            provider,
            model,
            effort: self.effort,
            api_key: None,
        })
    }

    /// [`Config::select`], with the key rule of docs/configuration.md ("Keys never follow a
    /// project's endpoint"): the key of a provider [redirected by the project
    /// file](Config::redirected_by_project) is read only through `project_lookup` (the
    /// project's own `./.env`), never through `lookup` (the user's environment and
    /// `$DSH_HOME/.env`), so a project can never send the user's key to a host of its choice.
    pub fn select_keyed(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
        project_lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Selection, SelectError> {
        let Selection {
            provider, model, ..
        } = self.select_keyless()?;
        let api_key = match &provider.api_key_env {
            Some(variable) if self.redirected_by_project(&provider) => {
                let key = project_lookup(variable)
                    .map(ApiKey::new)
                    .filter(|k| !k.is_empty());
                if key.is_none() {
                    let key_name = key_path(&key_path("providers", &provider.name), "base_url");
                    return Err(SelectError::MissingKey(ConfigError::new(
                        &self.source_or_default(&key_name),
                        key_name,
                        format!(
                            "provider `{}` has an endpoint set by the project's configuration; \
                             dsh does not send it {variable} from your environment or \
                             $DSH_HOME/.env",
                            provider.name
                        ),
                        format!(
                            "put the key meant for that host into the project's ./.env as \
                             {variable}, or define `[providers.{}]` with the same base_url and \
                             api_key_env in $DSH_HOME/config.toml",
                            provider.name
                        ),
                    )));
                }
                key
            }
            Some(variable) => {
                let key = lookup(variable).map(ApiKey::new).filter(|k| !k.is_empty());
                if key.is_none() && provider.keyless_when_unset() {
                    return Ok(Selection {
                        provider,
                        model,
                        effort: self.effort,
                        api_key: Some(ApiKey::keyless()),
                    });
                }
                if key.is_none() {
                    let key_name = key_path(&key_path("providers", &provider.name), "api_key_env");
                    return Err(SelectError::MissingKey(ConfigError::new(
                        &self.source_or_default(&key_name),
                        key_name,
                        format!(
                            "no API key: the variable {variable} (used by provider `{}`) is not set",
                            provider.name
                        ),
                        format!(
                            "set {variable} in the environment, in ./.env or in $DSH_HOME/.env, \
                             or point `api_key_env` at the variable that holds the key; for a \
                             server that takes no key, remove `api_key_env` from \
                             [providers.{}] (calls then go without Authorization)",
                            provider.name
                        ),
                    )));
                }
                key
            }
            None if provider.kind == ProviderKind::Anthropic => None,
            None => Some(ApiKey::keyless()),
        };
        Ok(Selection {
            provider,
            model,
            effort: self.effort,
            api_key,
        })
    }

    /// The price table of every model row that has a price (for `costUsd` and `/cost`).
    pub fn price_table(&self) -> PriceTable {
        PriceTable {
            models: self
                .models
                .values()
                .filter_map(|m| Some((m.id.clone(), m.price?)))
                .collect(),
        }
    }
}

/// `(base_url, api_key_env)` of each provider of a merged table.
fn endpoints(merged: &Table) -> BTreeMap<String, (Option<String>, Option<String>)> {
    sub_table(merged, "providers")
        .into_iter()
        .flatten()
        .filter_map(|(name, value)| {
            let table = value.as_table()?;
            Some((
                name.clone(),
                (
                    as_string(table.get("base_url")),
                    as_string(table.get("api_key_env")),
                ),
            ))
        })
        .collect()
}

fn collect_leaves<'a>(
    table: &'a Table,
    path: &str,
    provenance: &'a Provenance,
    out: &mut Vec<(String, &'a Value, &'a Source)>,
) {
    for (key, value) in table {
        let full = key_path(path, key);
        match value {
            Value::Table(inner) if !inner.is_empty() => {
                collect_leaves(inner, &full, provenance, out)
            }
            _ => {
                if let Some(source) = provenance.get(&full) {
                    out.push((full, value, source));
                }
            }
        }
    }
}

/// True when a value at `key` or under it came from the project's file.
fn set_by_project(provenance: &Provenance, key: &str) -> bool {
    let under = format!("{key}.");
    provenance
        .range(key.to_string()..)
        .take_while(|(k, _)| k.as_str() == key || k.starts_with(&under))
        .any(|(_, source)| matches!(source, Source::ProjectFile(_)))
}
