//! dsh configuration (docs/configuration.md): `$DSH_HOME/config.toml` with a project override
//! `.dsh/config.toml`, environment variables and flags.
//!
//! - [`Config::load`] reads every layer (built-in defaults, user file, project file,
//!   [`ENV_KEYS`], [`Flags`]), checks each key by key, merges them (later layers win per key)
//!   and checks the result. Every problem is a [`ConfigError`] naming the file (or variable or
//!   flag), the key path, what is wrong and how to fix it.
//! - [`Config::source_of`] tells where each effective value came from ([`Source`]).
//! - [`Config::select`] picks provider, model, effort and key for a run; the composition root
//!   (`dsh-runtime`) builds the provider's adapter from it with the model table
//!   ([`Config::model_table`]), which the adapter reads over its own defaults.
//! - [`Config::web_fetch`] gives the settings of the opt-in `web_fetch` tool, [`Config::web_search`]
//!   those of `web_search`.
//! - [`trust`] decides whether the project's files may run commands or widen power; untrusted,
//!   those settings are left out and named in [`Config::trust`].
//! - [`show::render`] prints the effective configuration with secrets redacted.
//!
//! Files never hold keys: a provider names the variable holding its key (`api_key_env`), and a
//! literal key in a file is refused.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod builtin;
mod config;
mod error;
mod load;
mod mcp;
pub mod other_tools;
mod sandbox;
mod schema;
pub mod scripts;
pub mod show;
mod tools;
pub mod trust;
mod tui;
mod web_search;

pub use builtin::{
    builtin_layer, ANTHROPIC_PROVIDER, DEEPSEEK_PROVIDER, DEFAULT_COMPACTION_THRESHOLD,
    DEFAULT_KEEP_TAIL,
};
pub use config::{
    AgentsSettings, BudgetSettings, CompactionSettings, Config, GoalsSettings, MaxTokensField,
    ModelEntry, ProviderConfig, ProviderKind, Quirks, RewindSettings, SelectError, Selection,
};
pub use error::{ConfigError, ConfigErrors, Source};
pub use load::{
    check_user_file, key_path, project_config_path, user_config_path, Flags, CONFIG_FILE, ENV_KEYS,
    PROFILE_ENV, PROJECT_DIR,
};
pub use mcp::{
    McpServerConfig, McpTransport, McpTrust, DEFAULT_MCP_STARTUP_TIMEOUT, DEFAULT_MCP_TOOL_TIMEOUT,
};
pub use sandbox::SandboxConfig;
pub use schema::{EFFORTS, MAX_TOKENS_FIELDS, PERMISSION_PRESETS, PROVIDER_KINDS};
pub use tools::{
    SearchToolsConfig, WebFetchConfig, DEFAULT_GLOB_MAX_RESULTS, DEFAULT_GREP_MAX_RESULTS,
    DEFAULT_WEB_FETCH_MAX_BYTES, DEFAULT_WEB_FETCH_TIMEOUT,
};
pub use tui::TuiConfig;
pub use web_search::{WebSearchConfig, DEFAULT_WEB_SEARCH_BASE_URL, WEB_SEARCH_BASE_URL_ENV};
