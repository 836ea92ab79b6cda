//! The `dsh` binary: wiring only. Logic lives in the library crates.
//!
//! Lints as in the library crates (docs/ARCHITECTURE.md, "Lints and formatting").
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod acp;
mod approvals;
mod config_cmd;
mod doctor;
mod flags;
mod headless;
mod home;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod math_symbols;
mod mcp_cmd;
mod mcp_edit;
mod mcp_import;
mod mcp_server;
mod models;
mod output_schema;
mod progress;
mod replay;
mod review;
mod rewind;
mod run;
mod sessions;
mod stream_input;
mod trust;
mod tui;
mod web;
mod worktree;

use std::io::Write;
use std::process::ExitCode;

/// Where credentials and other settings come from (`dsh-runtime` owns the lookup).
use dsh_runtime::credentials;

use clap::{Parser, Subcommand};

/// The first line of `dsh --help`: what dsh is and how to start, for a user (the crate's
/// description in Cargo.toml is written for developers).
const ABOUT: &str = "dsh: a coding agent for your terminal, working with DeepSeek, Anthropic and \
OpenAI-compatible models. Run `dsh` to chat, or `dsh run \"task\"` for one task.";

/// dsh: a coding agent for DeepSeek and OpenAI-compatible models.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, about = ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The interactive UI full-screen on the alternate screen instead of inline in the
    /// terminal's scrollback (also `[tui] alt_screen = true` in config.toml).
    #[arg(long)]
    alt_screen: bool,
    /// A first message for the interactive UI, sent once the session is open.
    prompt: Option<String>,
    /// The interactive UI's working directory (default: the current one).
    #[arg(short = 'C', long = "cd", value_name = "DIR")]
    cd: Option<std::path::PathBuf>,
    /// Start the interactive session in a new git worktree of this repository, on a new
    /// branch `dsh/NAME` (docs/worktrees.md).
    #[arg(long, value_name = "NAME", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    worktree: Option<String>,
    // The interactive session's provider, model, effort and preset.
    #[command(flatten)]
    session: flags::SessionFlags,
    /// Set a configuration value for this command, as config.toml would (repeatable):
    /// `-c model=deepseek-reasoner`, `-c budget.max_steps=20`. The value is read as TOML,
    /// else taken as a string.
    #[arg(short = 'c', long = "config", value_name = "KEY=VALUE", global = true)]
    config: Vec<String>,
    /// Apply the `[profiles.NAME]` table of the user's config.toml (also $DSH_PROFILE).
    #[arg(long, value_name = "NAME", global = true)]
    profile: Option<String>,
}

/// Each subcommand's arguments are defined only when it is the one used (`defer`): clap
/// would otherwise build every subcommand's arguments before parsing any
/// (docs/PERFORMANCE.md, "Where the first request's time goes").
#[derive(Debug, Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run one task headless: final answer on stdout, progress on stderr.
    Run(Box<run::RunArgs>),
    /// Re-run a recorded session with its recorded model replies and real tools; report what
    /// differed. Needs no API key.
    Replay(replay::ReplayArgs),
    /// List, show, export, fork and delete sessions.
    Sessions(sessions::SessionsArgs),
    /// Open the interactive UI on an earlier session (default: the latest of this directory).
    Resume(tui::ResumeArgs),
    /// Show the effective configuration (`show`) or the configuration file paths (`path`).
    Config(config_cmd::ConfigArgs),
    /// List or remove the git worktrees `--worktree` made.
    Worktree(worktree::WorktreeArgs),
    /// Review the workspace's changes (uncommitted, a branch against its base, or a commit) in
    /// a read-only session: findings with file:line, priority and a suggested fix.
    Review(review::ReviewArgs),
    /// Serve the local web UI and API (loopback only, token-protected).
    Web(web::WebArgs),
    /// List a provider's models, merged with the configured model table.
    Models(models::ModelsArgs),
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed and others).
    Acp(acp::AcpArgs),
    /// Serve the Model Context Protocol on stdin/stdout: tools `dsh` and `dsh-reply` run tasks
    /// for other agents and editors.
    McpServer(mcp_server::McpServerArgs),
    /// Review the workspace's own settings (project hooks, MCP servers, permission, providers)
    /// and trust them; `--list` and `--revoke` manage recorded trust.
    Trust(trust::TrustArgs),
    /// List or remove the approval rules remembered with "always allow".
    Approvals(approvals::ApprovalsArgs),
    /// Check what a session needs, one line each: configuration, trust, key, endpoint,
    /// sandbox, session store, MCP servers; exit 1 when something blocks work.
    Doctor(doctor::DoctorArgs),
    /// Add, list, inspect and remove MCP servers, and log in to those that use OAuth.
    Mcp(mcp_cmd::McpArgs),
}

/// True when the only argument is `--version` or `-V` (anything more goes through clap). On
/// glibc targets `version_before_runtime` has answered those already.
fn version_only() -> bool {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next()) {
        (Some(arg), None) => arg == "--version" || arg == "-V",
        _ => false,
    }
}

/// `dsh --version` on glibc targets, answered by one of the executable's initialisers, before
/// Rust's runtime starts: that start reads `/proc/self/maps` for the main thread's stack guard
/// and sets up a signal stack and handlers, about an eighth of what the process costs
/// (docs/PERFORMANCE.md, "Start-up floors"). glibc passes `main`'s arguments to `.init_array`
/// functions (Rust's `std::env::args` relies on the same). Elsewhere (the musl release archives,
/// macOS) `main` answers (`version_only`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod version_before_runtime {
    use std::ffi::{c_char, c_int, CStr};

    #[used]
    #[link_section = ".init_array"]
    static ANSWER_VERSION: extern "C" fn(c_int, *const *const c_char, *const *const c_char) =
        answer_version;

    /// Prints clap's version line and ends the process when the only argument is `--version`
    /// or `-V`; returns (and the runtime starts as usual) otherwise.
    extern "C" fn answer_version(
        argc: c_int,
        argv: *const *const c_char,
        _env: *const *const c_char,
    ) {
        if argc != 2 || argv.is_null() {
            return;
        }
        // SAFETY: glibc calls `.init_array` functions with `main`'s argc and argv: argv holds
        // argc NUL-terminated strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(1)) }.to_bytes();
        if arg != b"--version" && arg != b"-V" {
            return;
        }
        let line = concat!("dsh ", env!("CARGO_PKG_VERSION"), "\n");
        // SAFETY: plain system calls on the process's own descriptor; nothing else runs yet.
        // A closed stdout is ignored, as clap does: SIGPIPE is ignored first (the runtime that
        // would ignore it has not started), and the write's result is not needed.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            libc::write(1, line.as_ptr().cast(), line.len());
            libc::_exit(0);
        }
    }
}

fn main() -> ExitCode {
    // First: confined commands must not read dsh's environment (the API key) or memory.
    dsh_sandbox::make_undumpable();
    if version_only() {
        // The line clap prints, without building the whole command tree first
        // (docs/PERFORMANCE.md, "Start-up floors"). A closed stdout is ignored, as clap does.
        let _ = writeln!(std::io::stdout(), "dsh {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    flags::set_config_options(flags::ConfigOptions {
        profile: cli.profile,
        overrides: cli.config,
    });
    let interactive = tui::Interactive {
        alt_screen: cli.alt_screen,
        prompt: cli.prompt,
        cd: cli.cd,
        session: cli.session,
        worktree: cli.worktree,
    };
    if cli.command.is_some()
        && !matches!(cli.command, Some(Command::Resume(_)))
        && interactive.any()
    {
        eprintln!(
            "dsh: the options before a subcommand are the interactive UI's; give them after it (`dsh run --model M \"task\"`)"
        );
        return ExitCode::from(2);
    }
    let result = match cli.command {
        None => tui::run_new(interactive),
        Some(Command::Resume(args)) => tui::run_resume(args, interactive),
        Some(Command::Run(args)) => run::run(*args),
        Some(Command::Replay(args)) => replay::run(args),
        Some(Command::Sessions(args)) => sessions::run(args),
        Some(Command::Config(args)) => config_cmd::run(args),
        Some(Command::Models(args)) => models::run(args),
        Some(Command::Acp(args)) => acp::run(args),
        Some(Command::McpServer(args)) => mcp_server::run(args),
        Some(Command::Web(args)) => web::run(args),
        Some(Command::Review(args)) => review::run(args),
        Some(Command::Worktree(args)) => worktree::run(args),
        Some(Command::Trust(args)) => trust::run(args),
        Some(Command::Approvals(args)) => approvals::run(args),
        Some(Command::Doctor(args)) => doctor::run(args),
        Some(Command::Mcp(args)) => mcp_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            // Errors can quote configuration and repository text: controls shown as text.
            let line = match err.downcast_ref::<run::UserError>() {
                Some(user) => user.to_string(),
                None => format!("{err:#}"),
            };
            eprintln!("dsh: {}", dsh_tools::printable(&line));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Each subcommand's arguments are added when it is used (`defer`); its help line must
    /// still be the variant's doc, not the arguments struct's.
    #[test]
    fn each_subcommand_keeps_its_help_line_once_its_arguments_are_added() {
        let mut cli = Cli::command();
        let names: Vec<String> = cli
            .get_subcommands()
            .map(|sub| sub.get_name().to_string())
            .collect();
        assert!(names.len() >= 10, "{names:?}");
        for name in names {
            let sub = cli.find_subcommand_mut(&name).unwrap();
            let about = sub.get_about().unwrap().to_string();
            let help = sub.render_help().to_string();
            assert_eq!(
                help.lines().next().unwrap(),
                about.trim_end_matches('.'),
                "{name}"
            );
            // The arguments were added: `run --help` lists its options.
            if name == "run" {
                assert!(help.contains("--max-steps"), "{help}");
            }
        }
    }
}
