//! `dsh acp`: an Agent Client Protocol server on stdin/stdout for editors (crate `dsh-acp`),
//! with agents built exactly as `dsh run` builds them ([`crate::run::resolve`] and
//! [`crate::run::build_agent`], which also installs the permission source that ACP session
//! modes switch through).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use dsh_acp::{AgentFactory, OpenRequest, OpenedAgent};
use dsh_session::{open_store, StoreKind};

use crate::run::{RunArgs, UserError};

/// Arguments of `dsh acp`.
#[derive(Debug, clap::Args)]
pub struct AcpArgs {
    /// Provider for the sessions (default: the configured one).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model for the sessions (default: the configured one).
    #[arg(long)]
    pub model: Option<String>,
    /// Reasoning effort: off, low, medium, high or max.
    #[arg(long)]
    pub effort: Option<String>,
    /// Permission preset the sessions start with (default: $DSH_PERMISSION_MODE, else
    /// workspace-write). Actions outside it are asked of the editor's user; the editor can
    /// switch it per session (the presets are the sessions' ACP modes).
    #[arg(long)]
    pub permission: Option<String>,
    /// Apply the workspaces' own project settings without a recorded `dsh trust`.
    #[arg(long)]
    pub trust_workspace: bool,
}

/// `dsh run`'s arguments parsed from a command line, so new `run` flags keep their defaults.
#[derive(Debug, Parser)]
struct RunCommandLine {
    #[command(flatten)]
    args: RunArgs,
}

/// Builds session agents with `dsh run`'s resolution, for the cwd the editor names.
struct RunFactory {
    flags: Vec<String>,
}

fn message(err: anyhow::Error) -> String {
    match err.downcast_ref::<UserError>() {
        Some(user) => user.to_string(),
        None => format!("{err:#}"),
    }
}

impl AgentFactory for RunFactory {
    fn open(&self, request: &OpenRequest) -> Result<OpenedAgent, String> {
        let mut argv = vec!["dsh-acp".to_string(), String::new()];
        argv.extend(self.flags.iter().cloned());
        argv.push(format!("--cwd={}", request.cwd.display()));
        if let Some(id) = &request.resume {
            argv.push(format!("--resume={id}"));
        }
        let args = RunCommandLine::try_parse_from(argv)
            .map_err(|err| err.to_string())?
            .args;
        let setup = crate::run::resolve(&args).map_err(message)?;
        let store = open_store(StoreKind::Jsonl, &setup.home).map_err(|e| e.to_string())?;
        let (agent, guards) =
            crate::run::build_agent(&setup, &args, store.as_ref()).map_err(message)?;
        let history = match &request.resume {
            Some(_) => {
                store
                    .load(&agent.handle().session_id())
                    .map_err(|e| e.to_string())?
                    .events
            }
            None => Vec::new(),
        };
        Ok(OpenedAgent {
            agent,
            keep_alive: Box::new(guards),
            history,
        })
    }
}

/// Runs `dsh acp` until the editor closes stdin.
pub fn run(args: AcpArgs) -> anyhow::Result<ExitCode> {
    let mut flags = Vec::new();
    for (name, value) in [
        ("provider", &args.provider),
        ("model", &args.model),
        ("effort", &args.effort),
        ("permission", &args.permission),
    ] {
        if let Some(value) = value {
            flags.push(format!("--{name}={value}"));
        }
    }
    if args.trust_workspace {
        flags.push("--trust-workspace".to_string());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let factory = Arc::new(RunFactory { flags });
    runtime
        .block_on(dsh_acp::serve(
            tokio::io::stdin(),
            tokio::io::stdout(),
            factory,
            "dsh",
            env!("CARGO_PKG_VERSION"),
        ))
        .context("ACP connection failed")?;
    // A tool process may still hold a blocking read; do not wait for it.
    runtime.shutdown_background();
    Ok(ExitCode::SUCCESS)
}
