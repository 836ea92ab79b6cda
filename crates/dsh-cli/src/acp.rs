//! `dsh acp`: an Agent Client Protocol server on stdin/stdout for editors (crate `dsh-acp`),
//! with agents opened by the process's [`dsh_runtime::Runtime`], which also installs the
//! permission source that ACP session modes switch through.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

// Arguments of `dsh acp` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct AcpArgs {
    // The sessions' provider, model, effort and starting preset (actions outside the preset
    // are asked of the editor's user; the editor can switch it per session, the presets being
    // the sessions' ACP modes).
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
}

/// Runs `dsh acp` until the editor closes stdin.
pub(crate) fn run(args: AcpArgs) -> anyhow::Result<ExitCode> {
    // Sessions name their own cwd; the process's directory is only the runtime's default.
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    let runtime = crate::run::runtime(Some(&cwd), args.session.choices())?;
    let factory = Arc::new(runtime);
    let runtime = crate::run::async_runtime()?;
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
