//! `dsh sessions ...`: placeholder until the session-log work lands.

/// Arguments of `dsh sessions`.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {}

/// Runs `dsh sessions`.
pub fn run(_args: SessionsArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`dsh sessions` is not implemented yet")
}
