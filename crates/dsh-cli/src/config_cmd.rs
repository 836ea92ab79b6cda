//! `dsh config show` and `dsh config path` (docs/configuration.md).

use std::process::ExitCode;

use anyhow::Context;

use crate::credentials::Settings;

// Arguments of `dsh config` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    #[command(subcommand)]
    pub(crate) command: ConfigCommand,
}

// `dsh config` subcommands (a plain comment, as on `ConfigArgs`).
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective configuration, where each value came from, and whether each
    /// provider's key variable is set. Secrets are never printed.
    Show,
    /// Print the paths of the user and project configuration files.
    Path,
}

fn config_error(message: String) -> anyhow::Error {
    crate::run::user_error("INVALID_CONFIG", message)
}

/// Runs `dsh config`.
pub(crate) fn run(args: ConfigArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    match args.command {
        ConfigCommand::Path => {
            let user = dsh_config::user_config_path(&home);
            let state = |path: &std::path::Path| if path.is_file() { "" } else { " (not present)" };
            println!("user: {}{}", user.display(), state(&user));
            match dsh_config::project_config_path(&cwd, &home) {
                Some(project) => println!("project: {}", project.display()),
                None => println!(
                    "project: {} (not present)",
                    cwd.join(dsh_config::PROJECT_DIR)
                        .join(dsh_config::CONFIG_FILE)
                        .display()
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Show => {
            let settings = Settings::load(&cwd, &home);
            let lookup = |name: &str| settings.get(name);
            let config =
                dsh_config::Config::load(&home, &cwd, &lookup, &crate::flags::config_flags())
                    .map_err(|errors| config_error(errors.to_string()))?;
            settings.allow_credentials(config.own_key_variables());
            print!("{}", dsh_config::show::render(&config, &lookup));
            settings.print_warnings();
            if let Some(warning) = config.trust.warning() {
                eprintln!("dsh: {}", dsh_tools::printable(&warning));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
