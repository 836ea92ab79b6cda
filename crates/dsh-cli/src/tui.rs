//! `dsh` with no subcommand, and `dsh resume [id|--last]`: the interactive terminal UI
//! (`dsh-tui`), with agents opened by the process's [`dsh_runtime::Runtime`] like every front
//! end's.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use dsh_runtime::SessionFactory;
use dsh_session::StoreKind;
use dsh_tui::{StartWith, StatusInfo, TuiOptions};

// Arguments of `dsh resume` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// Session id, id prefix or path (default: the latest session of this directory).
    pub(crate) id: Option<String>,
    /// Continue the latest session of this directory.
    #[arg(long, conflicts_with = "id")]
    pub(crate) last: bool,
    /// Full-screen on the alternate screen instead of inline (also `[tui] alt_screen = true`).
    #[arg(long)]
    pub(crate) alt_screen: bool,
    // The session's provider, model, effort and preset (`dsh resume --model M`).
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
}

/// What `dsh [OPTIONS] [PROMPT]` asks of the interactive UI (the options before a subcommand).
#[derive(Debug, Default)]
pub(crate) struct Interactive {
    /// `--alt-screen`.
    pub(crate) alt_screen: bool,
    /// A first message, sent once the session is open.
    pub(crate) prompt: Option<String>,
    /// `-C DIR`: the working directory.
    pub(crate) cd: Option<std::path::PathBuf>,
    /// Provider, model, effort, preset.
    pub(crate) session: crate::flags::SessionFlags,
    /// `--worktree[=NAME]`: a new git worktree to work in.
    pub(crate) worktree: Option<String>,
}

impl Interactive {
    /// True when an option that only the interactive UI takes was given (not `--alt-screen`,
    /// which `dsh --alt-screen resume` uses too).
    pub(crate) fn any(&self) -> bool {
        self.prompt.is_some() || self.cd.is_some() || self.session.any() || self.worktree.is_some()
    }
}

/// Opens the UI on a new session (`dsh`), in a new worktree with `--worktree`.
pub(crate) fn run_new(mut interactive: Interactive) -> anyhow::Result<ExitCode> {
    if let Some(name) = interactive.worktree.take() {
        let from = match &interactive.cd {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()?,
        };
        let home = crate::home::dsh_home()?;
        interactive.cd = Some(crate::worktree::create(&from, Some(name.as_str()), &home)?.path);
    }
    run(StartWith::New, interactive)
}

/// Opens the UI on an existing session (`dsh resume`).
/// `alt_screen`: `dsh --alt-screen resume`; `dsh resume --alt-screen` works too.
pub(crate) fn run_resume(
    args: ResumeArgs,
    mut interactive: Interactive,
) -> anyhow::Result<ExitCode> {
    interactive.alt_screen |= args.alt_screen;
    // Flags after `resume` win over the same ones before it.
    let mine = args.session;
    let theirs = std::mem::take(&mut interactive.session);
    interactive.session = crate::flags::SessionFlags {
        provider: mine.provider.or(theirs.provider),
        model: mine.model.or(theirs.model),
        effort: mine.effort.or(theirs.effort),
        permission: mine.permission.or(theirs.permission),
        trust_workspace: mine.trust_workspace || theirs.trust_workspace,
        add_dirs: theirs.add_dirs.into_iter().chain(mine.add_dirs).collect(),
    };
    match args.id {
        Some(id) => run(StartWith::Resume(id), interactive),
        None => run(StartWith::Last, interactive),
    }
}

/// `alt_screen` from the flag; the configuration's `[tui] alt_screen` turns it on too.
fn run(start: StartWith, interactive: Interactive) -> anyhow::Result<ExitCode> {
    let alt_screen = interactive.alt_screen;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "the interactive UI needs a terminal; for scripts use `dsh run \"task\"` (see `dsh --help`)"
        );
    }
    // Untrusted project settings: show them and ask before the UI takes the terminal.
    let home = crate::home::dsh_home()?;
    let cwd = match &interactive.cd {
        Some(dir) => std::fs::canonicalize(dir)
            .with_context(|| format!("-C {}: no such directory", dir.display()))?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    crate::trust::ask_at_start(&home, &cwd)?;
    let sessions = crate::run::runtime(Some(&cwd), interactive.session.choices())?;
    let setup = sessions
        .configuration(&start.spec())
        .map_err(crate::run::runtime_error)?;
    // A session that cannot be found is one line and exit 1, before the UI takes the terminal;
    // the latest one, once found, is opened by its id (not looked up a second time).
    let found = sessions
        .session_to_resume(&start.spec(), sessions.store().as_ref())
        .map_err(crate::run::runtime_error)?;
    let start = match (start, found) {
        (StartWith::Last, Some(id)) => StartWith::Resume(id),
        (start, _) => start,
    };
    let tui = setup.config.tui();
    let options = TuiOptions {
        home: setup.home.clone(),
        cwd: setup.cwd.clone(),
        store: StoreKind::Jsonl,
        status: StatusInfo {
            model: setup.call.model.clone(),
            effort: dsh_tui::status::effective_effort(
                setup.call.reasoning_effort,
                sessions.model_info(&setup.call.model).as_ref(),
            ),
            permission: setup.permission.to_string(),
            context_window: 0,
            prices: setup.prices.clone(),
        },
        start,
        alt_screen: alt_screen || tui.alt_screen,
        notifications: (
            dsh_tui::notify::TerminalNotice::resolve(&tui.notifications, |name| {
                std::env::var(name).ok()
            }),
            tui.notify_command.clone(),
        ),
        status_command: tui.status_command.clone(),
        initial_prompt: interactive.prompt,
    };
    let runtime = crate::run::async_runtime()?;
    let factory = Arc::new(sessions);
    let exit = runtime.block_on(dsh_tui::run(options, factory))?;
    // The input thread may still block in a terminal read; do not wait for it.
    runtime.shutdown_background();
    if !exit.draft.trim().is_empty() {
        eprintln!("dsh: your unsent draft:\n{}", exit.draft);
    }
    if let Some(id) = exit.session_id {
        eprintln!("dsh: session {id} saved; continue with `dsh resume {id}`");
    }
    Ok(ExitCode::SUCCESS)
}
