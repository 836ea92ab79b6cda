//! The event loop: terminal input, session events, the questions the session's broker holds
//! (approvals, `ask_user_question`, plan reviews) and background jobs in, frames out. The TUI
//! speaks the session protocol (docs/protocol.md): what the user does becomes an `Op` for the
//! session's [`SessionControl`], and the questions wait in its [`Interactions`].
//!
//! Start-up draws the first frame before any blocking work: the session is opened (and, for a
//! resume, its log read) on a blocking thread while the user can already type; what is sent
//! before it is ready is queued and sent when it is.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::Event as TermEvent;
use dsh_agent::{AgentError, AgentHandle, ChildActivity, SessionEvent};
use dsh_protocol::{CardState, Interactions, ModelLookup, Op, SessionControl, Waiting};
use dsh_runtime::{OpenedSession, Resume, SessionFactory, SessionSpec};
use dsh_session::{open_store, LoadedLog, SessionStore, SessionSummary, StoreKind};
use dsh_tools::PermissionPreset;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::{Terminal, TerminalOptions, Viewport};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::app::{
    Action, App, PendingApproval, PendingQuestion, PermissionMenu, Picker, StatusInfo, CANCELLING,
};
use crate::cards::{render_cell, short_path};
use crate::commands::{help_text, SlashCommand};
use crate::inline::{hyperlinks_supported, InlineScreen, LiveBackend};
use crate::links::LinkOverlay;
use crate::question::QuestionForm;
use crate::terminal::TerminalGuard;
use crate::transcript::{Cell, Header, NoticeLevel, Transcript};
use crate::view::{draw, draw_live, live_height, ViewCache};

/// The terminal the UI draws on.
type Term = Terminal<LiveBackend<std::io::Stdout>>;

/// Which session the UI opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartWith {
    /// A new session.
    New,
    /// The session with this id, id prefix or path.
    Resume(String),
    /// The latest session of the working directory.
    Last,
}

impl StartWith {
    /// The session spec the UI asks the composition root for (docs/ARCHITECTURE.md,
    /// "Bird's-eye view"): the UI differs from `dsh run` only in the session it starts with.
    pub fn spec(&self) -> SessionSpec {
        SessionSpec {
            resume: match self {
                StartWith::New => Resume::New,
                StartWith::Resume(key) => Resume::Id(key.clone()),
                StartWith::Last => Resume::Latest,
            },
            ..SessionSpec::default()
        }
    }
}

/// Settings of a TUI run.
pub struct TuiOptions {
    /// The dsh home (sessions live under it).
    pub home: PathBuf,
    /// The working directory (listing for `/resume`, where an `/export` path is taken from).
    pub cwd: PathBuf,
    /// The session store kind.
    pub store: StoreKind,
    /// What the status line shows before the first request.
    pub status: StatusInfo,
    /// The session to open.
    pub start: StartWith,
    /// Full-screen on the alternate screen (`--alt-screen`, `[tui] alt_screen = true`)
    /// instead of the inline mode (docs/tui.md, "Modes").
    pub alt_screen: bool,
    /// A first message, sent as soon as the session is open (`dsh "fix the failing test"`).
    pub initial_prompt: Option<String>,
    /// How the terminal is told of a finished turn or a waiting question while unfocused
    /// (`[tui] notifications`, resolved), and the user's `[notify] command`.
    pub notifications: (crate::notify::TerminalNotice, Vec<String>),
    /// `tui.status_command`: its output replaces the status line's figures (empty: none).
    pub status_command: Vec<String>,
}

/// How the UI ended.
#[derive(Debug, Clone, Default)]
pub struct TuiExit {
    /// The session that was open.
    pub session_id: Option<String>,
    /// An unsent draft (printed by the caller so it is not lost).
    pub draft: String,
}

/// Results of work done off the UI thread.
enum Background {
    Opened(Box<anyhow::Result<(OpenedSession, LoadedLog)>>),
    Listed(anyhow::Result<Vec<SessionSummary>>),
    /// A later page of the `/resume` listing (the picker fills as pages arrive).
    ListedMore(Vec<SessionSummary>),
    Forked(anyhow::Result<Forked>),
    Exported(anyhow::Result<PathBuf>),
    /// What `/diff` or `/status` found (crate::worktree, crate::status).
    Report(Box<dyn FnOnce(&mut App) + Send>),
    /// What an operation carried out off the UI thread returned (`/undo`).
    Submitted(Result<Vec<String>, dsh_protocol::OpError>),
    Reloaded(anyhow::Result<LoadedLog>),
    /// What `/rewind` did (crate::rewind).
    Rewound(anyhow::Result<crate::rewind::Rewound>),
}

/// A session `/fork` made.
struct Forked {
    /// The new session.
    id: String,
    /// The session it copies.
    parent: String,
    /// The parent's last turn it copies.
    turn: u64,
}

/// A serving agent.
struct Live {
    handle: AgentHandle,
    /// Carries out the user's operations (docs/protocol.md, "Operations").
    control: SessionControl,
    events: broadcast::Receiver<SessionEvent>,
    /// The questions of the session's broker, as they start waiting.
    waiting: broadcast::Receiver<Waiting>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), AgentError>>,
    /// The children's live events (docs/agent.md, "Watching children"); `None` once the feed
    /// closed.
    children: Option<broadcast::Receiver<ChildActivity>>,
    /// Opens the provider connection again when the user starts a message.
    preconnect: dsh_runtime::Preconnector,
}

/// Runs the UI until the user quits. The terminal is restored before this returns.
pub async fn run(options: TuiOptions, factory: Arc<dyn SessionFactory>) -> anyhow::Result<TuiExit> {
    let guard = TerminalGuard::enter(options.alt_screen)?;
    let hyperlinks = hyperlinks_supported(
        std::env::var("NO_COLOR").ok().as_deref(),
        std::env::var("TERM").ok().as_deref(),
    );
    let inline = if options.alt_screen {
        None
    } else {
        let (cols, rows) = crossterm::terminal::size()?;
        // A terminal that did not say where the cursor is: start at the bottom, so that the
        // first frame scrolls whatever is on screen up instead of drawing over it.
        let top = guard.cursor_row.unwrap_or(rows.saturating_sub(1));
        Some(InlineScreen::new(cols, rows, top, hyperlinks))
    };
    let viewport = match &inline {
        Some(screen) => Viewport::Fixed(screen.area(1)),
        None => Viewport::Fullscreen,
    };
    let mut terminal = Terminal::with_options(
        LiveBackend::new(std::io::stdout(), inline.as_ref().map(|screen| screen.rows)),
        TerminalOptions { viewport },
    )?;
    let mut ui = Ui {
        // Full screen: links are bracketed with OSC 8 after each frame (crate::links).
        links: (inline.is_none() && hyperlinks).then(LinkOverlay::default),
        inline,
        live_area: Rect::default(),
        redraw: true,
        header: None,
        app: App {
            finder: crate::finder::Finder::new(&options.cwd),
            inline: !options.alt_screen,
            ..App::new(options.status.clone())
        },
        cache: ViewCache::default(),
        live: None,
        early: Vec::new(),
        resync: None,
        opened_notice: None,
        notifier: crate::notify::Notifier::new(
            options.notifications.0,
            options.notifications.1.clone(),
        ),
        status_running: Arc::default(),
        input_paused: Arc::default(),
        edit_request: None,
        review: None,
        options,
        factory,
        background: mpsc::unbounded_channel(),
    };
    ui.render(&mut terminal)?;

    let (input_tx, mut input) = mpsc::unbounded_channel();
    // Reads the terminal until the UI goes away, on its own thread; while `input_paused` is
    // set (an editor has the terminal) it does not read, so the editor gets every key.
    let paused = Arc::clone(&ui.input_paused);
    std::thread::spawn(move || loop {
        if paused.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match crossterm::event::poll(Duration::from_millis(50)) {
            Ok(true) => match crossterm::event::read() {
                Ok(event) => {
                    if input_tx.send(event).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            },
            Ok(false) if input_tx.is_closed() => break,
            Ok(false) => {}
            Err(_) => break,
        }
    });
    ui.open(ui.options.start.clone());
    if let Some(prompt) = ui.options.initial_prompt.take() {
        // Queued like a message typed while the session opens: sent once it is open.
        ui.act(Action::Send(prompt));
    }
    let result = ui.run_loop(&mut terminal, &mut input).await;
    let exit = TuiExit {
        session_id: ui.app.session_id.clone(),
        draft: ui.app.composer.text(),
    };
    ui.shutdown().await;
    if let Some(screen) = ui.inline.as_mut() {
        // The conversation stays in the terminal: what is still live is written as history
        // (as it stands), and the live area is cleared for the shell.
        let first = screen.emitted.min(ui.app.transcript.cells.len());
        let lines = history_lines(&ui.app, first, ui.app.transcript.cells.len());
        let out = terminal.backend_mut();
        let _ = screen.write_history(out, &lines);
        let _ = screen.finish(out);
    }
    drop(terminal);
    drop(guard);
    result.map(|()| exit)
}

/// The folder of the session whose log is at `location` (a writer's `location()`): the JSONL
/// log's folder, or for a SQLite session the folder its sub-agents' logs go to
/// (docs/sessions.md, "Where sessions live").
fn session_folder(location: &str) -> PathBuf {
    let anchor = dsh_session::sub_agent_anchor(location);
    anchor
        .parent()
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}

/// Creates `dir` and its missing parents, readable by the owner alone where that can be said.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Writes `bytes` to `path`, a new file readable by the owner alone (a transcript holds the
/// whole conversation, as the session log does); an existing file is replaced in place.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

/// Shows `text` as an informational notice in the transcript.
fn info(app: &mut App, text: String) {
    app.transcript.notice(NoticeLevel::Info, text);
}

/// `/cost`: requests, tokens by kind, cache hits and cost of the session so far.
fn show_cost(app: &mut App) {
    let stats = &app.transcript.stats;
    let total = stats.total();
    let cost = crate::status::cost_text(app);
    let text = format!(
        "{} · cache hits {:.0}% · cost {cost}",
        crate::status::usage_text(&total),
        total.usage.cache_hit_ratio() * 100.0,
    );
    info(app, text);
}

/// What a serving agent sent.
// One value per event, moved once into the loop: boxing would add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum FromLive {
    /// An event of the session's log.
    Session(Result<SessionEvent, broadcast::error::RecvError>),
    /// An event of a child (docs/agent.md, "Watching children").
    Child(Result<ChildActivity, broadcast::error::RecvError>),
    /// A question of the session's broker started waiting.
    Waiting(Result<Waiting, broadcast::error::RecvError>),
}

async fn next_live(live: &mut Option<Live>) -> FromLive {
    let Some(live) = live else {
        return std::future::pending().await;
    };
    match live.children.as_mut() {
        Some(children) => tokio::select! {
            event = live.events.recv() => FromLive::Session(event),
            activity = children.recv() => FromLive::Child(activity),
            waiting = live.waiting.recv() => FromLive::Waiting(waiting),
        },
        None => tokio::select! {
            event = live.events.recv() => FromLive::Session(event),
            waiting = live.waiting.recv() => FromLive::Waiting(waiting),
        },
    }
}

/// The next report of the running `/review`, if one runs.
async fn next_review(review: &mut Option<crate::review::Running>) -> Option<crate::review::Update> {
    match review {
        Some(running) => running.next().await,
        None => std::future::pending().await,
    }
}

/// The lines of cells `from..to` as history: each cell after a blank line, as in the view.
fn history_lines(app: &App, from: usize, to: usize) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for cell in &app.transcript.cells[from..to] {
        lines.push(Line::default());
        lines.extend(render_cell(cell, app.expand_reasoning));
    }
    lines
}

struct Ui {
    /// The inline mode's screen (`None` on the alternate screen).
    inline: Option<InlineScreen>,
    /// The full-screen mode's hyperlinks, when the terminal gets them.
    links: Option<LinkOverlay>,
    /// The inline live area of the last frame.
    live_area: Rect,
    /// The next frame clears and redraws the live area (after a resize).
    redraw: bool,
    /// The welcome header of the open session.
    header: Option<Header>,
    app: App,
    cache: ViewCache,
    live: Option<Live>,
    /// Actions taken before the session was open.
    early: Vec<Action>,
    /// Live events held back while the transcript is rebuilt after a lag.
    resync: Option<Vec<SessionEvent>>,
    /// A notice for the session with this id, shown once it is open (what `/fork` made).
    opened_notice: Option<(String, String)>,
    /// Tells of finished turns and waiting questions (docs/tui.md, "Notifications").
    notifier: crate::notify::Notifier,
    /// A `tui.status_command` run is under way (one at a time).
    status_running: Arc<std::sync::atomic::AtomicBool>,
    /// The `/review` running (crate::review).
    review: Option<crate::review::Running>,
    /// The terminal reader stops reading while this is set (`/memory`'s editor has the
    /// terminal).
    input_paused: Arc<std::sync::atomic::AtomicBool>,
    /// A file `/memory` asked to edit: opened in the editor once the current events are
    /// handled (the loop holds the terminal).
    edit_request: Option<PathBuf>,
    options: TuiOptions,
    factory: Arc<dyn SessionFactory>,
    background: (
        mpsc::UnboundedSender<Background>,
        mpsc::UnboundedReceiver<Background>,
    ),
}

impl Ui {
    /// Draws a frame. Inline: cells that became final are written into the terminal's
    /// history first, then the live area is sized and drawn below them.
    fn render(&mut self, terminal: &mut Term) -> std::io::Result<()> {
        let Some(screen) = self.inline.as_mut() else {
            let frame = terminal.draw(|f| draw(f, &mut self.app, &mut self.cache))?;
            let Some(links) = self.links.as_mut() else {
                return Ok(());
            };
            let mut bytes = Vec::new();
            links.after_frame(
                frame.buffer,
                &self.cache.links,
                self.cache.cursor,
                &mut bytes,
            )?;
            if !bytes.is_empty() {
                let out = terminal.backend_mut();
                out.write_all(&bytes)?;
                out.flush()?;
            }
            return Ok(());
        };
        // The terminal's size now, not as of the last resize event: a frame placed for the old
        // size scrolls the live area's rows into the scrollback (issue 41).
        if let Ok((cols, rows)) = crossterm::terminal::size() {
            if (cols.max(1), rows.max(1)) != (screen.cols, screen.rows) {
                screen.resize(cols, rows);
                self.redraw = true;
            }
        }
        let cells = self.app.transcript.cells.len();
        screen.emitted = screen.emitted.min(cells);
        let settled = self.app.transcript.settled_len().min(cells);
        let mut moved = std::mem::take(&mut self.redraw);
        if settled > screen.emitted {
            let lines = history_lines(&self.app, screen.emitted, settled);
            screen.write_history(terminal.backend_mut(), &lines)?;
            screen.emitted = settled;
            moved = true;
        }
        let height = live_height(
            &self.app,
            &mut self.cache,
            screen.cols,
            screen.rows,
            screen.emitted,
        );
        screen.make_room(terminal.backend_mut(), height)?;
        let area = screen.area(height);
        if moved || area != self.live_area {
            // Clears from the live area's first row to the bottom of the screen, line by line.
            terminal.backend_mut().rows = Some(screen.rows);
            terminal.resize(area)?;
            self.live_area = area;
        }
        let (first, rows) = (screen.emitted, screen.rows);
        terminal.draw(|f| draw_live(f, &mut self.app, &mut self.cache, first, rows))?;
        Ok(())
    }

    async fn run_loop(
        &mut self,
        terminal: &mut Term,
        input: &mut mpsc::UnboundedReceiver<TermEvent>,
    ) -> anyhow::Result<()> {
        // The working indicator's spinner and clock move while a turn runs.
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // `tui.status_command` runs at most once a second.
        let mut status_tick = tokio::time::interval(Duration::from_secs(1));
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let custom_status = !self.options.status_command.is_empty();
        loop {
            let mut quit = false;
            tokio::select! {
                _ = tick.tick(), if self.app.transcript.running
                    || self.app.review.is_some()
                    || self.app.children.any_running()
                    || self.app.finder.keeps_redrawing() => {}
                _ = status_tick.tick(), if custom_status => self.refresh_status(),
                event = input.recv() => match event {
                    Some(event) => quit = self.on_terminal(event),
                    None => quit = true,
                },
                event = next_live(&mut self.live) => match event {
                    FromLive::Session(event) => self.on_session_event(event),
                    FromLive::Child(activity) => self.on_child(activity),
                    FromLive::Waiting(waiting) => self.on_waiting(waiting),
                },
                Some(done) = self.background.1.recv() => self.on_background(done),
                update = next_review(&mut self.review) => self.on_review(update),
            }
            // Batch whatever else is ready into the same frame.
            while let Ok(event) = input.try_recv() {
                quit |= self.on_terminal(event);
            }
            while let Some(live) = self.live.as_mut() {
                match live.events.try_recv() {
                    Ok(event) => self.on_session_event(Ok(event)),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        self.on_session_event(Err(broadcast::error::RecvError::Lagged(n)))
                    }
                    Err(_) => break,
                }
            }
            while let Some(children) = self.live.as_mut().and_then(|l| l.children.as_mut()) {
                match children.try_recv() {
                    Ok(activity) => self.on_child(Ok(activity)),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        self.on_child(Err(broadcast::error::RecvError::Lagged(n)))
                    }
                    Err(broadcast::error::TryRecvError::Closed) => {
                        self.on_child(Err(broadcast::error::RecvError::Closed))
                    }
                    Err(broadcast::error::TryRecvError::Empty) => break,
                }
            }
            self.check_served().await;
            if quit {
                return Ok(());
            }
            // The cancel is done once the turn has ended: its hint goes.
            if !self.app.transcript.running && self.app.hint.as_deref() == Some(CANCELLING) {
                self.app.hint = None;
            }
            if let Some(live) = &self.live {
                // A prompt the broker no longer holds (its turn was cancelled) goes away.
                let broker = live.control.interactions();
                self.app
                    .approvals
                    .retain(|a| broker.approval_waits(&a.request.id));
                self.app
                    .questions
                    .retain(|q| broker.question_waits(&q.form.request.call_id));
                self.app.status.permission = live.handle.permission().as_str().to_string();
                let (turn, step) = live.handle.pending();
                // Only what the user typed: notes for the model (`/undo`'s, background
                // jobs') are not the user's queued input.
                self.app.queue = step
                    .iter()
                    .filter(|m| matches!(m.source, dsh_llm::MessageSource::User))
                    .map(|m| (true, crate::mentions::typed_part(m)))
                    .chain(turn.iter().map(|m| (false, crate::mentions::typed_part(m))))
                    .collect();
            }
            if let Some(path) = self.edit_request.take() {
                self.edit(terminal, &path);
            }
            crate::finder::Finder::refresh(&mut self.app);
            self.render(terminal)?;
        }
    }

    /// `/memory [user]`: the instructions file to edit once the loop holds the terminal.
    fn memory(&mut self, handle: &AgentHandle, user: bool) {
        let scope = match user {
            true => dsh_agent::NoteScope::User,
            false => dsh_agent::NoteScope::Project,
        };
        match handle.instructions_file(scope) {
            Ok(path) => self.edit_request = Some(path),
            Err(message) => self.app.transcript.notice(NoticeLevel::Error, message),
        }
    }

    /// `/memory`: hands the terminal to `$VISUAL` / `$EDITOR` (else `vi`) on `path`, takes it
    /// back and redraws; the model is told of the change at its next step.
    fn edit(&mut self, terminal: &mut Term, path: &std::path::Path) {
        use std::sync::atomic::Ordering;
        self.input_paused.store(true, Ordering::SeqCst);
        // The reader's last wait for input ends before the editor reads any.
        std::thread::sleep(Duration::from_millis(120));
        let alt = crate::terminal::suspend();
        let editor = ["VISUAL", "EDITOR"]
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "vi".to_string());
        let mut words = editor.split_whitespace();
        let ran = match words.next() {
            Some(program) => std::process::Command::new(program)
                .args(words)
                .arg(path)
                .env_clear()
                .envs(dsh_tools::scrubbed_env())
                .status()
                .map_err(|e| format!("cannot run `{editor}`: {e}")),
            None => Err("no editor: set $EDITOR".to_string()),
        };
        let back = crate::terminal::resume(alt);
        self.input_paused.store(false, Ordering::SeqCst);
        if back.is_ok() && alt {
            let _ = terminal.clear();
        }
        match ran {
            Ok(status) if status.success() => {
                if let Some(live) = &self.live {
                    live.handle.instructions_edited(path);
                }
                info(
                    &mut self.app,
                    format!(
                        "edited {}; the agent reads it at its next step",
                        path.display()
                    ),
                );
            }
            Ok(status) => self.app.transcript.notice(
                NoticeLevel::Warn,
                format!("the editor `{editor}` ended with {status}"),
            ),
            Err(message) => self.app.transcript.notice(NoticeLevel::Error, message),
        }
    }

    /// Opens a session off the UI thread.
    fn open(&mut self, start: StartWith) {
        self.app.loading = true;
        let factory = Arc::clone(&self.factory);
        let (home, kind) = (self.options.home.clone(), self.options.store);
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            let opened = open_store(kind, &home)
                .map_err(anyhow::Error::from)
                .and_then(|store| {
                    let opened = factory
                        .open(&start.spec(), store.as_ref())
                        .map_err(|err| anyhow::anyhow!(err.describe()))?;
                    let log = store.load(&opened.agent.handle().session_id())?;
                    Ok((opened, log))
                });
            // The UI may be gone (quit while opening); then nobody needs the agent.
            let _ = done.send(Background::Opened(Box::new(opened)));
        });
    }

    fn on_terminal(&mut self, event: TermEvent) -> bool {
        let actions = match event {
            TermEvent::Key(key) => self.app.on_key(key),
            TermEvent::Paste(text) => self.app.on_paste(&text),
            TermEvent::Resize(cols, rows) => {
                if let Some(screen) = self.inline.as_mut() {
                    screen.resize(cols, rows);
                    self.redraw = true;
                }
                Vec::new()
            }
            TermEvent::FocusGained => {
                self.notifier.set_focused(true);
                Vec::new()
            }
            TermEvent::FocusLost => {
                self.notifier.set_focused(false);
                Vec::new()
            }
            _ => Vec::new(),
        };
        let mut quit = false;
        for action in actions {
            quit |= self.act(action);
        }
        // Esc or Ctrl-C marked the running `/review` cancelled (App::cancel_review).
        if let (Some(running), Some(progress)) = (&self.review, &self.app.review) {
            if progress.cancelling {
                running.cancel();
            }
        }
        quit
    }

    /// Appends a confirmed `# note` (`Op::Remember`); while the session is still opening,
    /// once it is open, as a message typed meanwhile is sent.
    fn remember(&mut self, scope: dsh_agent::NoteScope, text: String) {
        if self.live.is_none() && self.app.loading {
            self.early.push(Action::Remember(scope, text));
        } else {
            self.submit(Op::Remember { scope, text });
        }
    }

    /// Carries out an action; returns true to quit.
    fn act(&mut self, action: Action) -> bool {
        match action {
            Action::Quit => return true,
            Action::OpenSession(id) => {
                self.switch(StartWith::Resume(id));
                return false;
            }
            Action::Command(command) => {
                self.command(command);
                return false;
            }
            Action::SetPermission(preset) => {
                self.set_permission(preset);
                return false;
            }
            Action::Rewind(choice) => {
                self.rewind(choice);
                return false;
            }
            Action::Remember(scope, text) => {
                self.remember(scope, text);
                return false;
            }
            Action::WarmConnection => {
                if let Some(live) = &self.live {
                    live.preconnect.warm();
                }
                return false;
            }
            Action::Approve { id, decision } => {
                self.submit(Op::Approve { id, decision });
                return false;
            }
            Action::Answer { call_id, reply } => {
                self.submit(Op::Answer { call_id, reply });
                return false;
            }
            Action::Send(_) | Action::Steer(_) | Action::Cancel => {}
        }
        let Some(live) = &self.live else {
            if let Action::Send(text) | Action::Steer(text) = &action {
                if self.app.loading {
                    self.app.queue.push((false, text.clone()));
                    self.early.push(action);
                    return false;
                }
            }
            self.app.hint = Some("no session is open: /new starts one".to_string());
            return false;
        };
        let result = match action {
            Action::Send(text) => {
                // `@path` mentions attach the files (docs/tui.md, "File mentions").
                let (mut message, attached) =
                    crate::mentions::user_message(&text, &self.options.cwd);
                if !attached.skipped.is_empty() {
                    let text = attached.skipped.join("\n");
                    self.app.transcript.notice(NoticeLevel::Warn, text);
                }
                // Image paths and `@image.png` mentions attach images (docs/tui.md, "Images").
                let images = crate::attach::attach_images(
                    &mut message,
                    &text,
                    &attached.images,
                    &self.options.cwd,
                );
                if !images.problems.is_empty() {
                    let text = images.problems.join("\n");
                    self.app.transcript.notice(NoticeLevel::Warn, text);
                }
                live.control.submit(Op::Prompt(message))
            }
            Action::Steer(text) => live
                .control
                .submit(Op::Steer(dsh_agent::new_user_message(text))),
            Action::Cancel => {
                let (turn, step) = live.handle.pending();
                let cancelled = live.control.submit(Op::Cancel { keep_queued: false });
                let queued: Vec<String> = step
                    .iter()
                    .chain(&turn)
                    .filter(|m| matches!(m.source, dsh_llm::MessageSource::User))
                    .map(crate::mentions::typed_part)
                    .collect();
                if !queued.is_empty() {
                    let mut text = queued.join("\n\n");
                    if !self.app.composer.is_empty() {
                        text = format!("{text}\n\n{}", self.app.composer.text());
                    }
                    self.app.composer.set_text(&text);
                    self.app.hint = Some("queued messages were returned to the composer".into());
                }
                cancelled
            }
            _ => Ok(Vec::new()),
        };
        if let Err(err) = result {
            self.app.transcript.notice(
                NoticeLevel::Error,
                format!("cannot queue input: {}", err.message),
            );
        }
        false
    }

    /// Hands `op` to the session (docs/protocol.md, "Operations"): its notes become info
    /// notices, a refusal an error notice. Returns true when it was carried out.
    fn submit(&mut self, op: Op) -> bool {
        let Some(live) = &self.live else {
            self.app.hint = Some("no session is open yet".to_string());
            return false;
        };
        let result = live.control.submit(op);
        self.show_result(result)
    }

    /// Shows what an operation returned; true when it was carried out.
    fn show_result(&mut self, result: Result<Vec<String>, dsh_protocol::OpError>) -> bool {
        match result {
            Ok(notes) => {
                for note in notes {
                    info(&mut self.app, note);
                }
                true
            }
            Err(err) => {
                self.app.transcript.notice(NoticeLevel::Error, err.message);
                false
            }
        }
    }

    /// The model and effort the next request uses, on the status line.
    fn show_call(&mut self) {
        let Some(live) = &self.live else { return };
        let call = live.control.call();
        let model = self.factory.model_info(&call.model);
        let effort = crate::status::effective_effort(call.reasoning_effort, model.as_ref());
        self.app.status.model = call.model.clone();
        self.app.status.effort = effort.clone();
        self.app.transcript.stats.model = Some(call.model);
        self.app.transcript.stats.effort = effort;
    }

    /// A question of the session's broker started waiting: its prompt replaces the composer
    /// (after those already shown). A lagging feed is caught up from the broker's list.
    fn on_waiting(&mut self, waiting: Result<Waiting, broadcast::error::RecvError>) {
        let pushed = match waiting {
            Ok(waiting) => vec![waiting],
            Err(broadcast::error::RecvError::Lagged(_)) => match &self.live {
                Some(live) => live.control.interactions().waiting(),
                None => Vec::new(),
            },
            Err(broadcast::error::RecvError::Closed) => Vec::new(),
        };
        for waiting in pushed {
            match waiting {
                Waiting::Approval(request) => {
                    if !self
                        .app
                        .approvals
                        .iter()
                        .any(|a| a.request.id == request.id)
                    {
                        self.notify(&crate::notify::Moment::ApprovalRequested {
                            tool: request.tool_name.clone(),
                        });
                        self.app.approvals.push_back(PendingApproval::new(request));
                    }
                }
                Waiting::Question(request) => {
                    let call = &request.call_id;
                    if !self
                        .app
                        .questions
                        .iter()
                        .any(|q| &q.form.request.call_id == call)
                    {
                        self.notify(&crate::notify::Moment::QuestionAsked);
                        self.app.questions.push_back(PendingQuestion {
                            form: QuestionForm::new(request),
                        });
                    }
                }
            }
        }
    }

    /// Carries out a slash command (docs/tui.md, "Slash commands"). Each command is one step
    /// below; the ones that touch the store run off the UI thread and report as [`Background`].
    fn command(&mut self, command: SlashCommand) {
        if command == SlashCommand::Help {
            return self.show_help();
        }
        if command == SlashCommand::New && self.live.is_none() && !self.app.loading {
            return self.open(StartWith::New);
        }
        let Some(live) = self.live.as_mut() else {
            self.app.hint = Some("no session is open yet".to_string());
            return;
        };
        let busy = self.app.transcript.running;
        match command {
            SlashCommand::Help | SlashCommand::Quit => {}
            SlashCommand::Compact => {
                if self.submit(Op::Compact) {
                    info(&mut self.app, "compaction requested".to_string());
                }
            }
            SlashCommand::Model(None) => {
                let text = format!(
                    "model: {} (switch with /model <id>, e.g. deepseek-v4-flash, deepseek-v4-pro)",
                    live.control.call().model
                );
                info(&mut self.app, text);
            }
            SlashCommand::Model(Some(text)) => {
                // `--force` switches to a model the table does not list.
                let words: Vec<&str> = text.split_whitespace().collect();
                let forced = words.contains(&"--force");
                let model = words
                    .iter()
                    .find(|w| **w != "--force")
                    .map(|w| w.to_string());
                let op = match model {
                    Some(model) if forced => Op::ForceModel(model),
                    Some(model) => Op::SetModel(model),
                    None => {
                        info(&mut self.app, "usage: /model [--force] <id>".to_string());
                        return;
                    }
                };
                if self.submit(op) {
                    self.show_call();
                }
            }
            SlashCommand::Effort(text) => self.effort_command(text),
            SlashCommand::Cost => show_cost(&mut self.app),
            SlashCommand::Permission(None) => {
                self.app.permission_menu = Some(PermissionMenu::new(live.handle.permission()));
            }
            SlashCommand::Permission(Some(text)) => self.permission_command(&text),
            SlashCommand::User { name, arguments } => {
                let result = live.control.submit(Op::Command { name, arguments });
                if self.show_result(result) {
                    self.app.scroll = 0;
                }
            }
            SlashCommand::Resume => self.list_sessions(),
            SlashCommand::New | SlashCommand::Fork if busy => {
                self.app.hint = Some("a turn is running: cancel it first (Ctrl-C)".to_string())
            }
            SlashCommand::New => self.switch(StartWith::New),
            SlashCommand::Fork => {
                let control = live.control.clone();
                self.fork_session(control);
            }
            SlashCommand::Export(path) => {
                let (id, location) = (live.handle.session_id(), live.handle.location());
                self.export_session(id, &location, path);
            }
            SlashCommand::Agents(name) => {
                let location = live.handle.location();
                self.agents_command(name, location);
            }
            SlashCommand::Undo => {
                if busy {
                    self.app.hint =
                        Some("a turn is running: cancel it first (Ctrl-C), then /undo".into());
                    return;
                }
                // Undo reads the session log: off the UI thread.
                let control = live.control.clone();
                let done = self.background.0.clone();
                tokio::task::spawn_blocking(move || {
                    let result = control.submit(Op::Undo);
                    let _ = done.send(Background::Submitted(result));
                });
            }
            SlashCommand::Rewind => {
                let location = live.handle.location();
                self.open_rewind(busy, location);
            }
            SlashCommand::Memory(user) => {
                let handle = live.handle.clone();
                self.memory(&handle, user);
            }
            SlashCommand::Diff | SlashCommand::Status | SlashCommand::Init => {
                let handle = live.handle.clone();
                self.session_command(command, handle);
            }
            SlashCommand::Review(arguments) => self.review_command(&arguments),
        }
    }

    /// `/review [--uncommitted|--base B|--commit SHA] [focus]` (crate::review): starts the
    /// review in its own read-only session; [`Ui::on_review`] takes its reports.
    fn review_command(&mut self, arguments: &str) {
        let Some(live) = &self.live else { return };
        if self.review.is_some() {
            self.app.hint = Some("a review is running already (Esc cancels it)".to_string());
            return;
        }
        if self.app.transcript.running {
            self.app.hint =
                Some("a turn is running: /review once it ends (or cancel it)".to_string());
            return;
        }
        let request = match crate::review::parse_args(arguments) {
            Ok(request) => request,
            Err(message) => {
                self.app.transcript.notice(NoticeLevel::Error, message);
                return;
            }
        };
        // The conversation's model and effort, when the model table lists the model.
        let call = live.control.call();
        let model = self.factory.model_info(&call.model).map(|_| {
            let effort = call.reasoning_effort.map(|e| e.as_str().to_string());
            (call.model.clone(), effort)
        });
        let setup = crate::review::Setup {
            factory: Arc::clone(&self.factory),
            home: self.options.home.clone(),
            store: self.options.store,
            cwd: self.options.cwd.clone(),
            model,
        };
        self.app.review = Some(crate::review::Progress::new(&request));
        self.review = Some(crate::review::start(setup, request));
    }

    /// A report of the running `/review`: progress, or its end. Findings go into the
    /// conversation's log (crate::review::deliver), which shows them.
    fn on_review(&mut self, update: Option<crate::review::Update>) {
        use crate::review::{Outcome, Update};
        let outcome = match update {
            Some(Update::Activity {
                tool_calls,
                activity,
            }) => {
                if let Some(progress) = self.app.review.as_mut() {
                    progress.tool_calls = tool_calls;
                    progress.activity = Some(activity);
                }
                return;
            }
            Some(Update::Finished(outcome)) => Some(outcome),
            None => None,
        };
        self.review = None;
        self.app.review = None;
        match outcome {
            Some(Outcome::Done(findings)) => {
                let delivered = match &self.live {
                    Some(live) => crate::review::deliver(&live.handle, &findings),
                    None => Err("no session is open".to_string()),
                };
                if let Err(message) = delivered {
                    // Shown at least, though the model does not have them.
                    let text = crate::review::logged_text(&findings.event_data());
                    info(&mut self.app, text);
                    self.app.transcript.notice(NoticeLevel::Error, message);
                }
            }
            Some(Outcome::Nothing(text)) => info(&mut self.app, text),
            Some(Outcome::Failed(text)) => self.app.transcript.notice(NoticeLevel::Error, text),
            Some(Outcome::Cancelled) => info(&mut self.app, "review cancelled".to_string()),
            None => self
                .app
                .transcript
                .notice(NoticeLevel::Error, "the review stopped without an answer"),
        }
    }

    /// `/diff`, `/status` and `/init` (docs/tui.md, "Undo and diff"). The first two read the
    /// session log off the UI thread and report back as [`Background::Report`].
    fn session_command(&mut self, command: SlashCommand, handle: AgentHandle) {
        let cwd = self.options.cwd.clone();
        let home = self.options.home.clone();
        if command == SlashCommand::Init {
            return crate::worktree::init(&mut self.app, &handle, &cwd);
        }
        let id = handle.session_id();
        let preset = handle.permission().as_str().to_string();
        self.with_store(
            move |store| {
                let events = store.load(&id)?.events;
                let show: Box<dyn FnOnce(&mut App) + Send> = match command {
                    SlashCommand::Diff => {
                        let confine = dsh_runtime::read_only_confiner(&cwd, &home);
                        let lines = crate::worktree::diff_lines(&events, &cwd, &confine);
                        Box::new(move |app: &mut App| {
                            app.pager = Some(crate::pager::Pager::new("/diff", lines));
                        })
                    }
                    _ => {
                        let location = handle.location();
                        Box::new(move |app: &mut App| {
                            let facts = crate::status::StatusFacts {
                                session_id: id,
                                location,
                                preset,
                                cwd: &cwd,
                                events: &events,
                            };
                            let text = crate::status::status_text(app, &facts);
                            info(app, text);
                        })
                    }
                };
                Ok(show)
            },
            |result| {
                Background::Report(result.unwrap_or_else(|err| {
                    Box::new(move |app: &mut App| {
                        app.transcript.notice(
                            NoticeLevel::Error,
                            format!("cannot read the session log: {err:#}"),
                        )
                    })
                }))
            },
        );
    }

    /// `/help`: the built-in commands and the session's own (skills, ...).
    fn show_help(&mut self) {
        if let Some(live) = &self.live {
            self.app.user_commands = live.handle.user_commands();
        }
        let text = help_text(&self.app.user_commands, self.inline.is_some());
        info(&mut self.app, text);
    }

    /// `/effort [level]`: shows the effort and the ones the model takes, or switches it with
    /// `Op::SetEffort`, which refuses an effort the model does not take before any request.
    fn effort_command(&mut self, text: Option<String>) {
        let Some(live) = &self.live else { return };
        let choices = live.control.efforts();
        let call = live.control.call();
        let Some(text) = text else {
            let default = self
                .factory
                .model_info(&call.model)
                .and_then(|m| m.default_effort);
            let current = match (call.reasoning_effort, default) {
                (Some(effort), _) => effort.as_str().to_string(),
                (None, Some(default)) => format!("{} (the model's default)", default.as_str()),
                (None, None) => "the model's default".to_string(),
            };
            let text = format!(
                "reasoning effort: {current} ({} takes: {choices})",
                call.model
            );
            return info(&mut self.app, text);
        };
        match dsh_llm::ReasoningEffort::parse(&text) {
            Some(effort) => {
                if self.submit(Op::SetEffort(Some(effort))) {
                    self.show_call();
                }
            }
            None => self.app.hint = Some(format!("unknown effort `{text}`: {choices}")),
        }
    }

    /// `/permission <preset>`: switching to `danger-full-access` removes the sandbox, so it
    /// asks first (y switches, see `App::confirm_key`); other presets switch at once.
    fn permission_command(&mut self, text: &str) {
        let current = self.live.as_ref().map(|live| live.handle.permission());
        match text.parse::<PermissionPreset>() {
            Ok(preset)
                if preset == PermissionPreset::DangerFullAccess && current != Some(preset) =>
            {
                self.app.confirm_permission = Some(preset);
            }
            Ok(preset) => self.set_permission(preset),
            Err(message) => self.app.transcript.notice(NoticeLevel::Error, message),
        }
    }

    /// Runs `work` on a blocking thread with the session store open; its result comes back to
    /// the UI loop as the [`Background`] that `report` makes of it.
    fn with_store<T, W>(&self, work: W, report: fn(anyhow::Result<T>) -> Background)
    where
        T: Send + 'static,
        W: FnOnce(&dyn SessionStore) -> anyhow::Result<T> + Send + 'static,
    {
        let (home, kind) = (self.options.home.clone(), self.options.store);
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            let result = open_store(kind, &home)
                .map_err(anyhow::Error::from)
                .and_then(|store| work(store.as_ref()));
            // The UI may be gone (quit meanwhile); then nobody needs the result.
            let _ = done.send(report(result));
        });
    }

    /// `/resume`: lists the sessions of the working directory for the picker, page by page
    /// (docs/sessions.md, "Paged listing"): the picker opens with the first page and fills as
    /// the next ones arrive.
    fn list_sessions(&self) {
        const PAGE: usize = 100;
        let cwd = self.options.cwd.to_string_lossy().into_owned();
        let (home, kind) = (self.options.home.clone(), self.options.store);
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            let store = match open_store(kind, &home) {
                Ok(store) => store,
                Err(err) => {
                    let _ = done.send(Background::Listed(Err(err.into())));
                    return;
                }
            };
            let filter = dsh_session::ListFilter { cwd: Some(cwd) };
            let mut page = dsh_session::ListPage {
                limit: Some(PAGE),
                after: None,
            };
            loop {
                let first = page.after.is_none();
                let listing = match store.list_page(&filter, &page) {
                    Ok(listing) => listing,
                    Err(err) => {
                        // A failure after the first page leaves the picker with what it has.
                        if first {
                            let _ = done.send(Background::Listed(Err(err.into())));
                        }
                        return;
                    }
                };
                let message = if first {
                    Background::Listed(Ok(listing.sessions))
                } else {
                    Background::ListedMore(listing.sessions)
                };
                // The UI may be gone (quit meanwhile); then nobody needs the rest.
                if done.send(message).is_err() {
                    return;
                }
                match listing.next {
                    Some(next) => page.after = Some(next),
                    None => return,
                }
            }
        });
    }

    /// `/fork` (`Op::Fork`): copies the session up to its last closed turn into a new session,
    /// which the UI then switches to, saying what it copied.
    fn fork_session(&self, control: SessionControl) {
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            // `Op::Fork`: the last closed turn, copied into a new session of the same store.
            let forked = control
                .fork(None)
                .map(|forked| Forked {
                    id: forked.header.id,
                    parent: control.handle().session_id(),
                    turn: forked.turn,
                })
                .map_err(|err| anyhow::anyhow!(err.message));
            // The UI may be gone (quit meanwhile); then nobody needs the result.
            let _ = done.send(Background::Forked(forked));
        });
    }

    /// `/rewind`: opens the list of the session's turns (read from its log at `location` off
    /// the UI thread), unless a turn runs.
    fn open_rewind(&mut self, busy: bool, location: String) {
        if busy {
            self.app.hint =
                Some("a turn is running: cancel it first (Ctrl-C), then /rewind".into());
            return;
        }
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            let opened = crate::rewind::menu(&location);
            let show = move |app: &mut App| match opened {
                Ok(menu) => app.rewind_menu = Some(menu),
                Err(err) => info(app, format!("/rewind: {err:#}")),
            };
            let _ = done.send(Background::Report(Box::new(show)));
        });
    }

    /// `/rewind`'s choice (docs/rewind.md): restores files and/or forks the conversation off
    /// the UI thread; the result comes back as [`Background::Rewound`].
    fn rewind(&mut self, choice: crate::rewind::RewindChoice) {
        let Some(live) = &self.live else { return };
        if self.app.transcript.running {
            self.app.hint =
                Some("a turn is running: cancel it first (Ctrl-C), then /rewind".into());
            return;
        }
        let handle = live.handle.clone();
        let factory = Arc::clone(&self.factory);
        let cwd = self.options.cwd.clone();
        self.with_store(
            move |store| {
                let checkpoints = factory.checkpoints(&cwd);
                crate::rewind::rewind(&handle, store, checkpoints, &choice)
            },
            Background::Rewound,
        );
    }

    /// `/export [path]`: writes session `id` (its log at `location`) as Markdown, by default to
    /// `dsh-<id8>.md` in the session's folder, not into the working directory (a repository,
    /// usually); a path given is taken from the working directory.
    fn export_session(&self, id: String, location: &str, path: Option<String>) {
        let (path, folder) = match path {
            Some(path) => (self.options.cwd.join(path), None),
            None => {
                let short: String = id.chars().take(8).collect();
                let folder = session_folder(location);
                (folder.join(format!("dsh-{short}.md")), Some(folder))
            }
        };
        self.with_store(
            move |store| {
                let log = store.load(&id)?;
                if let Some(folder) = folder {
                    // A SQLite session's folder is made on first use (0700, as the store's).
                    create_private_dir(&folder)?;
                }
                write_private(&path, dsh_session::export_markdown(&log).as_bytes())?;
                Ok(path)
            },
            Background::Exported,
        );
    }

    /// Switches the permission preset (already confirmed) with `Op::SetPreset`; a refusal is
    /// shown as an error.
    fn set_permission(&mut self, preset: PermissionPreset) {
        let Some(live) = &self.live else {
            self.app.hint = Some("no session is open yet".to_string());
            return;
        };
        if live.handle.permission() == preset {
            self.app.transcript.notice(
                NoticeLevel::Info,
                format!("the permission preset is already {preset}"),
            );
            return;
        }
        if self.submit(Op::SetPreset(preset)) {
            self.app.status.permission = preset.as_str().to_string();
        }
    }

    /// An opened session starts serving: the UI answers its approvals and questions, shows
    /// its log, and sends what the user typed while it was opening.
    fn start_serving(&mut self, mut opened: OpenedSession, log: LoadedLog) {
        // The session's one approver and asker (docs/protocol.md, "Approvals and questions"):
        // its questions wait until the user answers them here.
        let interactions = Interactions::interactive();
        let waiting = interactions.subscribe();
        opened.agent.set_approver(Arc::new(interactions.clone()));
        opened.agent.set_asker(Arc::new(interactions.clone()));
        let handle = opened.agent.handle();
        let events = handle.subscribe();
        let children = Some(opened.children.subscribe());
        let preconnect = opened.preconnect.clone();
        let call = opened.agent.call().clone();
        let factory = Arc::clone(&self.factory);
        let models: ModelLookup = Arc::new(move |model: &str| factory.model_info(model));
        let control = SessionControl::new(
            handle.clone(),
            interactions,
            call.clone(),
            models,
            self.options.cwd.clone(),
        );
        self.app.status.context_window = opened.agent.model_info().context_window;
        self.app.status.model = call.model.clone();
        // Before the first request, the effort it will use (the model's default when none was
        // asked), not a blank.
        let effort =
            crate::status::effective_effort(call.reasoning_effort, Some(opened.agent.model_info()));
        self.app.status.effort = effort.clone();
        self.app.session_id = Some(handle.session_id());
        let header = Header {
            version: env!("CARGO_PKG_VERSION").to_string(),
            model: call.model.clone(),
            effort,
            preset: handle.permission().as_str().to_string(),
            cwd: short_path(
                &self.options.cwd,
                std::env::var_os("HOME").map(PathBuf::from).as_deref(),
            ),
            // A session with turns in its log is a resumed one.
            resumed: log
                .events
                .iter()
                .any(|e| matches!(e.event, dsh_session::Event::TurnStart(_)))
                .then(|| handle.session_id()),
        };
        self.app.transcript.cells.push(Cell::Header(header.clone()));
        self.header = Some(header);
        self.app.transcript.set_tools(&handle.tools());
        for envelope in &log.events {
            self.app.transcript.apply(envelope);
        }
        // The preset in force (a resumed session starts with the configured one,
        // whatever its log recorded last); a logged switch from it is a notice.
        let permission = handle.permission().as_str().to_string();
        self.app.status.permission = permission.clone();
        self.app.transcript.stats.permission = Some(permission);
        self.app.user_commands = handle.user_commands();
        if let Some((_, text)) = self
            .opened_notice
            .take_if(|(id, _)| *id == handle.session_id())
        {
            info(&mut self.app, text);
        }
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            let mut agent = opened.agent;
            async move { agent.serve(stop).await }
        });
        self.live = Some(Live {
            handle,
            control,
            events,
            waiting,
            stop,
            task,
            children,
            preconnect,
        });
        self.app.loading = false;
        self.app.queue.clear();
        for action in std::mem::take(&mut self.early) {
            self.act(action);
        }
    }

    fn on_background(&mut self, done: Background) {
        match done {
            Background::Opened(opened) => match *opened {
                Ok((opened, log)) => self.start_serving(opened, log),
                Err(err) => {
                    self.app.loading = false;
                    self.app.transcript.notice(
                        NoticeLevel::Error,
                        format!("cannot open the session: {err:#}"),
                    );
                }
            },
            Background::Listed(Ok(mut sessions)) => {
                let current = self.app.session_id.clone();
                sessions.retain(|s| Some(&s.id) != current.as_ref());
                self.app.picker = Some(Picker {
                    sessions,
                    selected: 0,
                });
            }
            Background::ListedMore(mut sessions) => {
                let current = self.app.session_id.clone();
                sessions.retain(|s| Some(&s.id) != current.as_ref());
                if let Some(picker) = self.app.picker.as_mut() {
                    // A page of an earlier `/resume` may still arrive: never list a session twice.
                    let shown: std::collections::HashSet<String> =
                        picker.sessions.iter().map(|s| s.id.clone()).collect();
                    sessions.retain(|s| !shown.contains(&s.id));
                    picker.sessions.extend(sessions);
                }
            }
            Background::Forked(Ok(Forked { id, parent, turn })) => {
                let what = format!("forked session {parent} after turn {turn} into {id}");
                if self.app.transcript.running {
                    // A turn started while the fork was made: it is not left for the copy.
                    let text = format!("{what}; not opened, since a turn runs (/resume opens it)");
                    info(&mut self.app, text);
                } else {
                    let text = format!("{what}; this is the copy (the parent is unchanged)");
                    self.opened_notice = Some((id.clone(), text));
                    self.switch(StartWith::Resume(id));
                }
            }
            Background::Exported(Ok(path)) => {
                let home = std::env::var_os("HOME").map(PathBuf::from);
                let shown = short_path(&path, home.as_deref());
                info(&mut self.app, format!("transcript written to {shown}"));
            }
            Background::Reloaded(Ok(log)) => {
                let mut transcript = Transcript::new();
                if let Some(live) = &self.live {
                    transcript.set_tools(&live.handle.tools());
                }
                if let Some(header) = &self.header {
                    transcript.cells.push(Cell::Header(header.clone()));
                }
                for envelope in &log.events {
                    transcript.apply(envelope);
                }
                for event in self.resync.take().unwrap_or_default() {
                    transcript.apply(&event);
                }
                self.app.transcript = transcript;
                self.cache = ViewCache::default();
            }
            Background::Reloaded(Err(err)) => {
                for event in self.resync.take().unwrap_or_default() {
                    self.app.transcript.apply(&event);
                }
                self.app.transcript.notice(
                    NoticeLevel::Error,
                    format!("the display missed events and could not reload the log: {err:#}"),
                );
            }
            Background::Report(show) => show(&mut self.app),
            Background::Rewound(Ok(crate::rewind::Rewound::NeedsForce(point, mode, message))) => {
                self.app.rewind_menu = Some(crate::rewind::RewindMenu::force(point, mode, message));
            }
            Background::Rewound(Ok(crate::rewind::Rewound::Done { notice, fork })) => match fork {
                None => info(&mut self.app, notice),
                Some((id, draft)) => {
                    self.opened_notice = Some((id.clone(), notice));
                    self.switch(StartWith::Resume(id));
                    if self.app.composer.is_empty() {
                        self.app.composer.set_text(&draft);
                    }
                }
            },
            Background::Rewound(Err(err)) => self
                .app
                .transcript
                .notice(NoticeLevel::Error, format!("/rewind: {err:#}")),
            Background::Submitted(result) => {
                self.show_result(result);
            }
            Background::Listed(Err(err))
            | Background::Forked(Err(err))
            | Background::Exported(Err(err)) => self
                .app
                .transcript
                .notice(NoticeLevel::Error, format!("{err:#}")),
        }
    }

    /// Runs `tui.status_command` off the UI thread, unless a run is still under way; its line
    /// (or, when it failed, the usual figures) shows from the next frame.
    fn refresh_status(&self) {
        use std::sync::atomic::Ordering;
        if self.status_running.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = crate::status::status_state(&self.app, &self.options.cwd);
        let command = self.options.status_command.clone();
        let running = Arc::clone(&self.status_running);
        let done = self.background.0.clone();
        tokio::task::spawn_blocking(move || {
            let text = crate::status::run_status_command(&command, &state);
            running.store(false, Ordering::SeqCst);
            let _ = done.send(Background::Report(Box::new(move |app: &mut App| {
                app.status_text = text;
            })));
        });
    }

    /// Tells of `moment` (docs/tui.md, "Notifications").
    fn notify(&self, moment: &crate::notify::Moment) {
        let session = self.app.session_id.clone().unwrap_or_default();
        let cwd = self.options.cwd.to_string_lossy();
        self.notifier
            .notify(moment, &session, &cwd, &mut std::io::stdout());
    }

    fn on_session_event(&mut self, event: Result<SessionEvent, broadcast::error::RecvError>) {
        match event {
            Ok(envelope) => {
                if let dsh_session::Event::TurnEnd(end) = &envelope.event {
                    self.notify(&crate::notify::Moment::TurnEnded {
                        reason: end.reason.kind().to_string(),
                    });
                }
                if let dsh_session::Event::ToolResult(result) = &envelope.event {
                    if let Some(call) = result.call_id() {
                        let code = result.error.as_ref().map(|e| e.code.as_str());
                        let state = CardState::of_result(code);
                        self.app.children.call_settled(call, state);
                    }
                }
                match &mut self.resync {
                    Some(held) => held.push(envelope),
                    None => self.app.transcript.apply(&envelope),
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                if self.resync.is_some() {
                    return;
                }
                let Some(id) = self.app.session_id.clone() else {
                    return;
                };
                self.resync = Some(Vec::new());
                let (home, kind) = (self.options.home.clone(), self.options.store);
                let done = self.background.0.clone();
                tokio::task::spawn_blocking(move || {
                    let loaded = open_store(kind, &home)
                        .and_then(|store| store.load(&id))
                        .map_err(anyhow::Error::from);
                    let _ = done.send(Background::Reloaded(loaded));
                });
            }
            // The agent is gone; `check_served` reports why.
            Err(broadcast::error::RecvError::Closed) => {}
        }
    }

    /// One event of a child (docs/tui.md, "Children"): folded into the child's view; its
    /// activity shown on the parent's `subagent` card.
    fn on_child(&mut self, activity: Result<ChildActivity, broadcast::error::RecvError>) {
        match activity {
            Ok(activity) => {
                if let Some((call, progress)) = self.app.children.apply(&activity) {
                    self.app.transcript.set_progress(&call, &progress);
                }
            }
            // Missed events are in the child's log; the panel catches up with the next ones.
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => {
                if let Some(live) = self.live.as_mut() {
                    live.children = None;
                }
            }
        }
    }

    /// `/agents [name]` (docs/tui.md, "Children"): without a name, the list of the session's
    /// children (those seen live and those in its folder, for a resumed session); with one,
    /// follows that child, reading its log first when its events were not seen live.
    fn agents_command(&mut self, name: Option<String>, location: String) {
        let Some(name) = name else {
            let done = self.background.0.clone();
            tokio::task::spawn_blocking(move || {
                let stored = std::path::Path::new(&location)
                    .parent()
                    .filter(|_| !location.starts_with("sqlite:"))
                    .map(dsh_agent::read_children)
                    .unwrap_or_default();
                let _ = done.send(Background::Report(Box::new(move |app: &mut App| {
                    app.children.add_stored(stored);
                    app.children.menu = Some(0);
                })));
            });
            return;
        };
        let found = self
            .app
            .children
            .list
            .iter()
            .find(|c| c.name == name || c.id == name)
            .map(|c| (c.id.clone(), c.loaded, c.log.clone()));
        match found {
            None => self.app.hint = Some(format!("no sub-agent {name}: /agents lists them")),
            Some((id, true, _)) => {
                self.app.scroll = 0;
                self.app.children.follow(&id);
            }
            Some((id, false, log)) => {
                let done = self.background.0.clone();
                tokio::task::spawn_blocking(move || {
                    let report: Box<dyn FnOnce(&mut App) + Send> =
                        match dsh_session::load_file(&log) {
                            Ok(loaded) => Box::new(move |app: &mut App| {
                                app.children.load(&id, &loaded.events);
                                app.scroll = 0;
                                app.children.follow(&id);
                            }),
                            Err(err) => Box::new(move |app: &mut App| {
                                app.transcript.notice(
                                    NoticeLevel::Error,
                                    format!("cannot read the log of {name}: {err}"),
                                )
                            }),
                        };
                    let _ = done.send(Background::Report(report));
                });
            }
        }
    }

    /// Reports an agent that stopped serving on its own (a session-log failure).
    async fn check_served(&mut self) {
        let finished = self
            .live
            .as_ref()
            .is_some_and(|live| live.task.is_finished());
        if !finished {
            return;
        }
        if let Some(live) = self.live.take() {
            let message = match live.task.await {
                Ok(Ok(())) => "the session stopped".to_string(),
                Ok(Err(err)) => format!("the session stopped: {err}"),
                Err(err) => format!("the session stopped: {err}"),
            };
            self.app.transcript.running = false;
            // Nobody waits for the answers any more.
            self.app.approvals.clear();
            self.app.questions.clear();
            self.app.transcript.notice(NoticeLevel::Error, message);
        }
    }

    /// Closes the current session and opens another.
    fn switch(&mut self, start: StartWith) {
        if self.app.transcript.running {
            self.app.hint = Some("a turn is running: cancel it first (Ctrl-C)".to_string());
            return;
        }
        if let Some(running) = self.review.take() {
            // Its findings were for the session being left.
            running.cancel();
            self.app.review = None;
        }
        if let Some(live) = self.live.take() {
            live.control
                .interactions()
                .close("the user switched to another session");
            self.app.approvals.clear();
            self.app.questions.clear();
            live.stop.cancel();
            // The loop is idle (no turn runs), so it returns at once; the task drops the
            // agent and releases the session lock.
            drop(live.task);
        }
        self.app.transcript = Transcript::new();
        self.app.children = crate::children::Children::default();
        if let Some(screen) = self.inline.as_mut() {
            screen.emitted = 0;
        }
        self.header = None;
        self.app.session_id = None;
        self.app.queue.clear();
        self.app.user_commands.clear();
        self.cache = ViewCache::default();
        self.open(start);
    }

    /// Ends the running turn (logged `aborted`) and stops the loop; queued input stays in the
    /// log for the next resume.
    async fn shutdown(&mut self) {
        if let Some(running) = self.review.take() {
            running.stop(Duration::from_secs(10)).await;
        }
        if let Some(live) = self.live.take() {
            live.control
                .interactions()
                .close("the terminal UI closed before the user answered");
            live.handle.cancel(true);
            live.stop.cancel();
            // A tool that ignores cancellation is dropped after the agent's grace period.
            let _ = tokio::time::timeout(Duration::from_secs(10), live.task).await;
        }
    }
}
