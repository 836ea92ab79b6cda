//! `dsh trust`: review a workspace's own settings and trust them (docs/configuration.md,
//! "Workspace trust"). The TUI asks the same question before it starts ([`ask_at_start`]).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dsh_config::trust::{self, TrustReason, TrustStore, WorkspaceTrust};

// Arguments of `dsh trust` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct TrustArgs {
    /// Workspace to review (default: the current directory's).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Trust without asking (for scripts; the review is still printed).
    #[arg(long, short)]
    pub(crate) yes: bool,
    /// List the trusted workspaces and whether their files still match.
    #[arg(long, conflicts_with_all = ["yes", "revoke"])]
    pub(crate) list: bool,
    /// Remove the trust of a workspace (default: the current directory's).
    #[arg(long, value_name = "PATH", num_args = 0..=1, conflicts_with = "yes")]
    pub(crate) revoke: Option<Option<PathBuf>>,
}

use crate::run::user_error;

fn current_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match given {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    std::fs::canonicalize(&dir)
        .with_context(|| format!("working directory {} does not exist", dir.display()))
}

/// Runs `dsh trust`.
pub(crate) fn run(args: TrustArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    if args.list {
        return list(&home);
    }
    if let Some(target) = &args.revoke {
        let cwd = current_dir(args.cwd.as_deref())?;
        let workspace = match target {
            Some(path) => std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()),
            None => trust::workspace_root(&cwd),
        };
        let mut store = TrustStore::load(&home).map_err(|e| user_error("INVALID_CONFIG", e))?;
        if !store.revoke(&workspace) {
            return Err(user_error(
                "NOT_FOUND",
                format!(
                    "{} is not a trusted workspace (`dsh trust --list` shows them)",
                    workspace.display()
                ),
            ));
        }
        store
            .save(&home)
            .map_err(|e| user_error("INVALID_CONFIG", e))?;
        println!("revoked the trust of {}", workspace.display());
        return Ok(ExitCode::SUCCESS);
    }
    let cwd = current_dir(args.cwd.as_deref())?;
    let state = trust::inspect(&home, &cwd).map_err(|e| user_error("INVALID_CONFIG", e))?;
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{}", review(&state, &cwd))?;
    if !state.has_ignored() {
        writeln!(
            stdout,
            "Nothing here needs trust: the project's settings only narrow what dsh does."
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(reason) = &state.trusted {
        let how = match reason {
            TrustReason::Recorded => "you trusted these exact files with `dsh trust`".to_string(),
            TrustReason::UserConfig(prefix) => format!(
                "it is under {} in [trust] workspaces of $DSH_HOME/config.toml",
                prefix.display()
            ),
            TrustReason::Flag => "--trust-workspace".to_string(),
        };
        writeln!(stdout, "This workspace is already trusted: {how}.")?;
        return Ok(ExitCode::SUCCESS);
    }
    drop(stdout);
    let yes = args.yes || ask("Trust this workspace and apply these settings? [y/N] ")?;
    if !yes {
        println!("not trusted; dsh keeps ignoring these settings");
        return Ok(ExitCode::from(1));
    }
    record(&home, &cwd, &state)?;
    println!(
        "trusted {}; changing any of these files asks again",
        state.workspace.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Asks `question` on stderr and reads one line from stdin; only `y`/`yes` is yes (end of
/// input is no).
fn ask(question: &str) -> anyhow::Result<bool> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("cannot read the answer")?;
    let answer = answer.trim().to_ascii_lowercase();
    Ok(answer == "y" || answer == "yes")
}

/// Records trust in the files exactly as reviewed: when they changed meanwhile, nothing is
/// recorded.
fn record(home: &Path, cwd: &Path, reviewed: &WorkspaceTrust) -> anyhow::Result<()> {
    let now = trust::inspect(home, cwd).map_err(|e| user_error("INVALID_CONFIG", e))?;
    let (Some(pin), true) = (
        &reviewed.pin,
        now.pin == reviewed.pin && now.files == reviewed.files,
    ) else {
        return Err(user_error(
            "CHANGED",
            "the project files changed while you were reviewing them; run `dsh trust` again",
        ));
    };
    let mut store = TrustStore::load(home).map_err(|e| user_error("INVALID_CONFIG", e))?;
    store.record(&reviewed.workspace, pin, &reviewed.files);
    store
        .save(home)
        .map_err(|e| user_error("INVALID_CONFIG", e))?;
    Ok(())
}

/// The review: each file, and what trusting it would apply (hook commands, MCP servers with
/// command and arguments, permission, providers and base URLs), then the `.env` keys. Built by
/// `dsh_runtime::trust`, which the web UI's trust card shares.
pub(crate) fn review(state: &WorkspaceTrust, cwd: &Path) -> String {
    dsh_runtime::trust::review(state, cwd).text()
}

fn list(home: &Path) -> anyhow::Result<ExitCode> {
    let store = TrustStore::load(home).map_err(|e| user_error("INVALID_CONFIG", e))?;
    if store.entries.is_empty() {
        println!("no trusted workspaces");
        return Ok(ExitCode::SUCCESS);
    }
    for entry in &store.entries {
        let now = trust::pin_files(&entry.files, &entry.workspace).ok();
        let state = if !entry.workspace.is_dir() {
            "workspace is gone"
        } else if now.as_deref() == Some(entry.pin.as_str()) {
            "files unchanged"
        } else {
            "files changed since: not trusted until `dsh trust` again"
        };
        let files: Vec<String> = entry
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        println!(
            "{}  ({state}; trusted at {} s since epoch; files: {})",
            entry.workspace.display(),
            entry.trusted_at,
            files.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Before the TUI starts: when the workspace has untrusted settings, shows the review and asks
/// on the terminal; `y` records trust. Any other answer starts with them ignored.
pub(crate) fn ask_at_start(home: &Path, cwd: &Path) -> anyhow::Result<()> {
    let Ok(state) = trust::inspect(home, cwd) else {
        // Unreadable project files are reported by the configuration loader.
        return Ok(());
    };
    if state.trusted.is_some() || !state.has_ignored() || !std::io::stdin().is_terminal() {
        return Ok(());
    }
    eprint!("{}", review(&state, cwd));
    if state.changed_since_trusted {
        eprintln!("These files changed since you trusted this workspace.");
    }
    if ask("Trust this workspace and apply these settings? [y/N] ")? {
        record(home, cwd, &state)?;
        eprintln!("trusted {}", state.workspace.display());
    } else {
        eprintln!("not trusted: starting with these settings ignored");
    }
    Ok(())
}
