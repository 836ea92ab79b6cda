//! The `dsh` binary: wiring only. Logic lives in the library crates.

mod credentials;
mod home;
mod progress;
mod replay;
mod run;
mod sessions;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// dsh: a coding agent for DeepSeek and OpenAI-compatible models.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one task headless: final answer on stdout, progress on stderr.
    Run(run::RunArgs),
    /// Re-run a recorded session with its recorded model replies and real tools; report what
    /// differed. Needs no API key.
    Replay(replay::ReplayArgs),
    /// List, show, export, fork and delete sessions.
    Sessions(sessions::SessionsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Sessions(args) => sessions::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            match err.downcast_ref::<run::UserError>() {
                Some(user) => eprintln!("dsh: {user}"),
                None => eprintln!("dsh: {err:#}"),
            }
            ExitCode::from(1)
        }
    }
}
