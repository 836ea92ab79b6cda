//! `dsh sessions rewind ID [--to-turn N] [--files | --conversation | --both] [--force]`
//! (docs/rewind.md): go back to the start of an earlier turn. The files are restored from the
//! workspace checkpoints dsh took at that turn's start (`dsh_runtime::rewind`), the conversation
//! continues in a new session forked just before that turn. Without `--to-turn`, the turns one
//! can go back to are listed.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use dsh_runtime::rewind::{
    checkpoint_store, record_restore, restore_files, rewind_points, RewindMode,
};
use dsh_session::SessionStore;

// Arguments of `dsh sessions rewind` (a plain comment: the variant's doc in sessions.rs is
// the subcommand's help line).
#[derive(Debug, clap::Args)]
pub(crate) struct RewindArgs {
    /// Session id or unique id prefix.
    session: String,
    /// The turn to go back to: the state just before its first message.
    #[arg(long, value_name = "N")]
    to_turn: Option<u64>,
    /// Restore the files only; the session goes on from them.
    #[arg(long, conflicts_with_all = ["conversation", "both"])]
    files: bool,
    /// Restore the conversation only (a new session forked before that turn).
    #[arg(long, conflicts_with = "both")]
    conversation: bool,
    /// Restore both (the default).
    #[arg(long)]
    both: bool,
    /// Restore the files even when they changed outside dsh since then (those changes are
    /// overwritten).
    #[arg(long)]
    force: bool,
}

/// Runs `dsh sessions rewind`.
pub(crate) fn run(
    store: &dyn SessionStore,
    home: &Path,
    args: RewindArgs,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let mode = match (args.files, args.conversation) {
        (true, _) => RewindMode::Files,
        (_, true) => RewindMode::Conversation,
        _ => RewindMode::Both,
    };
    rewind(
        store,
        home,
        &args.session,
        args.to_turn,
        mode,
        args.force,
        out,
    )
}

/// Rewinds `session` of `store` to the start of turn `to_turn` (`None`: lists the turns).
fn rewind(
    store: &dyn SessionStore,
    home: &Path,
    session: &str,
    to_turn: Option<u64>,
    mode: RewindMode,
    force: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let id = store.resolve(session)?;
    let log = store.load(&id)?;
    let points = rewind_points(&log.events);
    let Some(turn) = to_turn else {
        if points.is_empty() {
            writeln!(out, "session {id} has no turn to go back to")?;
        }
        for point in &points {
            let files = if point.files.is_ok() {
                "files+conversation"
            } else {
                "conversation only"
            };
            writeln!(
                out,
                "{:>4}  {:<18}  {}",
                point.turn,
                files,
                point.first_line(72)
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let Some(point) = points.iter().find(|p| p.turn == turn) else {
        anyhow::bail!(
            "session {id} has no turn {turn}; `dsh sessions rewind {id}` lists its turns"
        );
    };
    let mut restored = None;
    if mode.files() {
        let cwd = dsh_runtime::delegated_cwd(Path::new(&log.header.cwd), home)
            .context("cannot restore the session's files")?;
        let lookup = |name: &str| std::env::var(name).ok();
        let settings = dsh_config::Config::load(home, &cwd, &lookup, &crate::flags::config_flags())
            .map(|config| config.rewind)
            .unwrap_or_default();
        let checkpoints = checkpoint_store(home, &cwd, &settings);
        let files = restore_files(&checkpoints, &log.events, turn, force)?;
        for line in files.lines(Some(&cwd)) {
            writeln!(out, "{line}")?;
        }
        if !files.report.failed.is_empty() {
            anyhow::bail!(
                "{} files could not be restored (listed above); the rest were",
                files.report.failed.len()
            );
        }
        restored = Some(files.tree);
    }
    if mode.conversation() {
        let forked = dsh_session::fork_before_turn(store, &id, turn)?;
        if let Some(tree) = &restored {
            record_restore(store, &forked.header.id, tree)?;
        }
        writeln!(
            out,
            "{}\nthe conversation as before turn {turn}, in a new session; continue it with `dsh --resume {}`",
            forked.header.id, forked.header.id
        )?;
        if !point.message.is_empty() {
            writeln!(out, "turn {turn} began with: {}", point.first_line(72))?;
        }
    } else if let Some(tree) = &restored {
        // The session goes on from the restored files: its next turn is compared with them.
        record_restore(store, &id, tree).context(
            "the files were restored, but the session could not record it (is it open elsewhere?)",
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
