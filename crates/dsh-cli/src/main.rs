//! The `dsh` binary: wiring only. Logic lives in the library crates.

mod home;
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
    /// List, show, export, fork and delete sessions.
    Sessions(sessions::SessionsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sessions(args) => sessions::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("dsh: {err:#}");
            ExitCode::from(1)
        }
    }
}
