//! The flags that choose a session's provider, model, effort and preset, defined once for every
//! front end that opens sessions: the interactive UI (`dsh`, `dsh resume`), `dsh run`,
//! `dsh web`, `dsh acp` and `dsh mcp-server` (issue 41: each declared its own).

use std::sync::OnceLock;

use dsh_runtime::Choices;

/// `--profile` and `-c key=value`: global options, accepted by every command. Set once by
/// `main` from the command line ([`set_config_options`]) and read by whatever loads the
/// configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigOptions {
    /// `--profile NAME`.
    pub(crate) profile: Option<String>,
    /// `-c key.path=value`, in command-line order.
    pub(crate) overrides: Vec<String>,
}

static CONFIG_OPTIONS: OnceLock<ConfigOptions> = OnceLock::new();

/// Records the command line's [`ConfigOptions`]; called once, by `main`.
pub(crate) fn set_config_options(options: ConfigOptions) {
    let _ = CONFIG_OPTIONS.set(options);
}

fn config_options() -> ConfigOptions {
    CONFIG_OPTIONS.get().cloned().unwrap_or_default()
}

/// The configuration flags of a command that loads the configuration without opening a
/// session (`dsh config show`, `dsh models`, `dsh sessions`): the profile and overrides.
pub(crate) fn config_flags() -> dsh_config::Flags {
    let options = config_options();
    dsh_config::Flags {
        profile: options.profile,
        overrides: options.overrides,
        ..dsh_config::Flags::default()
    }
}

/// Runtime choices that carry only the profile and the overrides.
pub(crate) fn base_choices() -> Choices {
    let options = config_options();
    Choices {
        profile: options.profile,
        overrides: options.overrides,
        ..Choices::default()
    }
}

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
    /// Make this directory writable too, as the working directory is, under workspace-write
    /// and ask (files and sandboxed commands); repeatable. Not dsh's home, not `/`.
    #[arg(long = "add-dir", value_name = "DIR")]
    pub(crate) add_dirs: Vec<std::path::PathBuf>,
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
            add_dirs: self.add_dirs.clone(),
            ..base_choices()
        }
    }

    /// True when any flag was given.
    pub(crate) fn any(&self) -> bool {
        self.provider.is_some()
            || self.model.is_some()
            || self.effort.is_some()
            || self.permission.is_some()
            || self.trust_workspace
            || !self.add_dirs.is_empty()
    }
}
