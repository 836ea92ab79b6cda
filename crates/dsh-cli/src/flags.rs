//! The flags that choose a session's provider, model, effort and preset, defined once for every
//! front end that opens sessions: the interactive UI (`dsh`, `dsh resume`), `dsh run`,
//! `dsh web`, `dsh acp` and `dsh mcp-server` (issue 41: each declared its own).

use dsh_runtime::Choices;

// A plain comment: clap would take a doc comment as the help of the commands it is flattened
// into.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SessionFlags {
    /// Provider name from the configuration (default: `provider` in config.toml, else
    /// deepseek).
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Model id (default: the configured model, else the provider's default_model).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Reasoning effort, one the model supports (`dsh models` lists them; the DeepSeek models
    /// take off, low, high or max).
    #[arg(long)]
    pub(crate) effort: Option<String>,
    /// Permission preset: read-only, ask (workspace-write's sandbox, every edit and command
    /// approved first; headless runs refuse them unless a remembered rule allows), workspace-write
    /// or danger-full-access (default: $DSH_PERMISSION_MODE, else workspace-write).
    #[arg(long)]
    pub(crate) permission: Option<String>,
    /// Apply the workspace's own project settings without a recorded `dsh trust`.
    #[arg(long)]
    pub(crate) trust_workspace: bool,
}

impl SessionFlags {
    /// The runtime's choices these flags make.
    pub(crate) fn choices(&self) -> Choices {
        Choices {
            provider: self.provider.clone(),
            model: self.model.clone(),
            effort: self.effort.clone(),
            permission: self.permission.clone(),
            trust_workspace: self.trust_workspace,
            keyless: false,
        }
    }

    /// True when any flag was given.
    pub(crate) fn any(&self) -> bool {
        self.provider.is_some()
            || self.model.is_some()
            || self.effort.is_some()
            || self.permission.is_some()
            || self.trust_workspace
    }
}
