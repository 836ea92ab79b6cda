//! The store abstraction both backends implement, and the choice between them.

use std::path::{Path, PathBuf};

use crate::envelope::{now_ms, Envelope, SessionHeader};
use crate::error::{Result, SessionError};
use crate::event::Event;
use crate::listing::SessionSummary;
use crate::projection::Projector;
use crate::reader::LoadedLog;
use crate::repair::closers;
use crate::state::SessionTracker;

/// True for events after which writers put everything appended so far into the store on their
/// own (a reader of the file, and a process killed right after, keep it): step and turn
/// boundaries, and `tool/started`. Most of them are also synced ([`is_sync_point`]); the loop
/// must still call [`SessionWriter::flush`] right before each model call.
pub fn is_flush_point(event: &Event) -> bool {
    matches!(
        event,
        Event::StepStart(_)
            | Event::StepEnd(_)
            | Event::TurnStart(_)
            | Event::TurnEnd(_)
            | Event::ToolStarted(_)
    )
}

/// True for the flush points the JSONL writer also fsyncs: step and turn ends and
/// `tool/started` (the sync "before every tool body"). A `turn/start` or `step/start` is
/// written through but not synced: nothing leaves dsh between it and the loop's
/// [`SessionWriter::flush`] before the model call, which syncs it, unless `step/start` is all
/// that came since the last sync (docs/sessions.md, "Durability and crash repair").
pub fn is_sync_point(event: &Event) -> bool {
    is_flush_point(event) && !matches!(event, Event::TurnStart(_) | Event::StepStart(_))
}

/// The append side of one session, holding its exclusive writer lock until dropped.
///
/// Appends are buffered; [`SessionWriter::flush`] makes everything appended so far durable
/// (fsync). Writers write through after [`is_flush_point`] events and sync after
/// [`is_sync_point`] ones by themselves; the loop calls
/// `flush()` before every model call. Dropping a writer flushes on a best-effort basis (an
/// error at that point cannot be reported; call `flush()` first to see it).
pub trait SessionWriter: Send {
    /// The session header.
    fn header(&self) -> &SessionHeader;

    /// Where the session lives (file path, or `sqlite:<db>#<id>`), for messages.
    fn location(&self) -> String;

    /// The structure of the log so far (open turn, open calls, next seq, ...).
    fn state(&self) -> &SessionTracker;

    /// Where this session's image files live (docs/sessions.md, "Images"). Appending an event
    /// that carries images stores their bytes there first.
    fn blobs(&self) -> crate::blobs::BlobStore;

    /// Appends `env` exactly as given except for `seq`, which the writer assigns; `time` stays
    /// as given (even `None`). Used to copy events (fork, import). Returns the seq.
    fn append_verbatim(&mut self, env: Envelope) -> Result<u64>;

    /// [`append_verbatim`](Self::append_verbatim) of an envelope the caller keeps: the writer
    /// sets its `seq`. A writer that needs no copy of the event to log it does without one
    /// (the agent's log hands every event on after appending it).
    fn append_kept(&mut self, env: &mut Envelope) -> Result<u64> {
        let seq = self.append_verbatim(env.clone())?;
        env.seq = seq;
        Ok(seq)
    }

    /// Appends `env`, stamping `time` with now when it has none. Returns the seq.
    fn append_envelope(&mut self, mut env: Envelope) -> Result<u64> {
        if env.time.is_none() {
            env.time = Some(now_ms());
        }
        self.append_verbatim(env)
    }

    /// Appends an event with the default envelope ([`Envelope::new`]). Returns its seq.
    fn append(&mut self, event: Event) -> Result<u64> {
        self.append_envelope(Envelope::new(event))
    }

    /// Writes everything buffered and fsyncs it. After `Ok`, every appended event survives a
    /// crash.
    fn flush(&mut self) -> Result<()>;

    /// Writes everything buffered now, like [`SessionWriter::flush`], but lets the sync run on
    /// another thread while the caller goes on; every later call on the writer (an append, a
    /// flush, dropping it) first waits for that sync and returns its error. For the flush
    /// before a model call: the request then leaves while the disk works, and the reply can
    /// only be logged once what preceded the request is durable (docs/sessions.md,
    /// "Durability and crash repair"). Stores without a cheaper way flush.
    fn flush_in_background(&mut self) -> Result<()> {
        self.flush()
    }

    /// Writes everything buffered without syncing it: readers and a crash of dsh itself keep
    /// it, a power loss may not until the next [`SessionWriter::flush`]. For events that a
    /// flush follows before anything leaves dsh (docs/sessions.md, "Durability and crash
    /// repair"). Stores without a cheaper step flush.
    fn write_through(&mut self) -> Result<()> {
        self.flush()
    }

    /// Appends the crash-repair closers for whatever is open (see [`crate::repair`]) and
    /// flushes. Returns their seqs (empty when nothing was open).
    fn repair(&mut self) -> Result<Vec<u64>> {
        let envs = closers(self.header(), self.state());
        let mut seqs = Vec::with_capacity(envs.len());
        for env in envs {
            seqs.push(self.append_envelope(env)?);
        }
        self.flush()?;
        Ok(seqs)
    }
}

/// A session reopened for appending (resume).
pub struct Resumed {
    /// The writer, holding the lock, positioned after the last event (and after any closers).
    pub writer: Box<dyn SessionWriter>,
    /// The projected history, ready to be fed further events.
    pub history: Projector,
    /// Seqs of the closers crash repair appended (empty when the log was closed cleanly).
    pub repaired: Vec<u64>,
    /// The number the next turn must use.
    pub next_turn: u64,
    /// Images of the history whose files could not be read; each became a text placeholder in
    /// `history` (docs/sessions.md, "Images"). Front ends tell the user.
    pub image_problems: Vec<crate::blobs::BlobProblem>,
}

/// Options for a new session.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Use this id instead of a fresh UUID.
    pub id: Option<String>,
    /// Delegation depth (0 for a top-level session).
    pub delegation_depth: u64,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only sessions of this cwd (`None`: all).
    pub cwd: Option<String>,
}

/// Which page of a listing to return (docs/sessions.md, "Paged listing"). The default is
/// everything at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// At most this many sessions (`None`: all).
    pub limit: Option<usize>,
    /// Start after this cursor: the [`Listing::next`] of the previous page (`None`: the first
    /// page).
    pub after: Option<String>,
}

/// `"<updated_at>:<id>"` (a [`Listing::next`]) -> its parts.
pub(crate) fn parse_cursor(text: &str) -> Result<(u64, String)> {
    text.split_once(':')
        .and_then(|(time, id)| Some((time.parse().ok()?, id.to_string())))
        .ok_or_else(|| SessionError::BadCursor(text.to_string()))
}

/// The result of listing: the sessions that could be read, and a message for each that could
/// not (listing never fails because one log is damaged).
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Readable sessions, most recently updated first.
    pub sessions: Vec<SessionSummary>,
    /// One message per unreadable session (what and where).
    pub problems: Vec<String>,
    /// The unreadable sessions themselves, so that `--continue` can tell whether the newest
    /// session of a directory is one of them.
    pub damaged: Vec<DamagedSession>,
    /// The cursor of the next page, when this page was cut at its limit.
    pub next: Option<String>,
}

impl Listing {
    /// Cuts a whole listing (most recently updated first) down to `page`: the sessions after
    /// the cursor, at most `limit` of them; damaged sessions are reported on the first page only.
    pub fn into_page(mut self, page: &ListPage) -> Result<Listing> {
        if let Some(after) = &page.after {
            let (time, id) = parse_cursor(after)?;
            self.sessions
                .retain(|s| s.updated_at < time || (s.updated_at == time && s.id > id));
            self.problems.clear();
            self.damaged.clear();
        }
        if let Some(limit) = page.limit {
            if self.sessions.len() > limit {
                self.sessions.truncate(limit);
            }
            if self.sessions.len() == limit {
                self.next = self
                    .sessions
                    .last()
                    .map(|s| format!("{}:{}", s.updated_at, s.id));
            }
        }
        Ok(self)
    }
}

/// A session log that could not be read while listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DamagedSession {
    /// The log file.
    pub path: String,
    /// Its modification time, in milliseconds since the Unix epoch (0 when unknown).
    pub updated_at: u64,
    /// What is wrong.
    pub problem: String,
}

/// A search match.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The session.
    pub session_id: String,
    /// Seq of the message event.
    pub seq: u64,
    /// The event type (`user/message`, `assistant/message`, `tool/result`).
    pub event_type: String,
    /// An excerpt of the message text around the match.
    pub snippet: String,
}

/// A place sessions live. Both the JSONL store and the SQLite store implement it.
pub trait SessionStore {
    /// Creates a session with exactly this header (its id must be new) and returns its locked
    /// writer. The header is durable when this returns.
    fn create_with_header(&self, header: SessionHeader) -> Result<Box<dyn SessionWriter>>;

    /// The image files of session `key` (id, prefix or path; docs/sessions.md, "Images").
    fn blobs(&self, key: &str) -> Result<crate::blobs::BlobStore>;

    /// Creates a new session for `cwd`.
    fn create(&self, cwd: &str, options: CreateOptions) -> Result<Box<dyn SessionWriter>> {
        let id = options
            .id
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut header = SessionHeader::new(id, cwd, now_ms());
        header.delegation_depth = Some(options.delegation_depth);
        self.create_with_header(header)
    }

    /// Reads a whole session (`key`: id, unique id prefix, or for the JSONL store a path).
    fn load(&self, key: &str) -> Result<LoadedLog>;

    /// Reopens a session for appending: takes the lock, sets aside a torn tail, appends the
    /// crash-repair closers if the log was left open, and projects the history.
    fn resume(&self, key: &str) -> Result<Resumed>;

    /// Summaries of the stored sessions.
    fn list(&self, filter: &ListFilter) -> Result<Listing>;

    /// One page of [`SessionStore::list`]: the same order, cut by `page`.
    fn list_page(&self, filter: &ListFilter, page: &ListPage) -> Result<Listing> {
        self.list(filter)?.into_page(page)
    }

    /// The whole of [`SessionStore::list`] as compact rows (what `dsh sessions list` prints):
    /// the same sessions in the same order, without a [`crate::SessionSummary`] per session
    /// (docs/PERFORMANCE.md, "Session listing", fourth pass).
    fn list_all(&self, filter: &ListFilter) -> Result<crate::catalog::ListedSessions> {
        Ok(crate::catalog::ListedSessions::from_listing(
            self.list(filter)?,
        ))
    }

    /// Messages whose text contains `query` (case-insensitive), at most `limit`.
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>>;

    /// True when the last [`SessionStore::search`] found the store's search index far behind
    /// its logs and scanned them instead: the caller may build the index apart (`dsh sessions
    /// reindex`, docs/decisions/0010-cold-search-scans.md).
    fn index_behind(&self) -> bool {
        false
    }

    /// Deletes a session (refused while a writer holds its lock). For the JSONL store, the
    /// whole session folder goes, sub-agent logs included.
    fn remove(&self, key: &str) -> Result<()>;

    /// The session's id for `key` (id, unique prefix, or path).
    fn resolve(&self, key: &str) -> Result<String>;

    /// The folder of the session `key` whose `subagents/` holds its children's logs: the JSONL
    /// log's own folder, or for the SQLite store the session's folder beside the database
    /// (docs/sessions.md, "Children").
    fn session_folder(&self, key: &str) -> Result<PathBuf>;

    /// Sub-agent logs stored with the session, as `(name inside an archive, JSONL bytes)`.
    fn sub_agent_logs(&self, key: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// A description of the store for messages.
    fn describe(&self) -> String;
}

/// Shared resume tail: appends the crash-repair closers (projecting them too) and flushes.
pub(crate) fn finish_resume(
    mut writer: Box<dyn SessionWriter>,
    mut history: Projector,
) -> Result<Resumed> {
    let image_problems = history.load_images(&writer.blobs());
    let mut repaired = Vec::new();
    for mut env in closers(writer.header(), writer.state()) {
        env.time = Some(now_ms());
        writer.append_kept(&mut env)?;
        history.push(&env)?;
        repaired.push(env.seq);
    }
    writer.flush()?;
    let next_turn = writer.state().next_turn();
    Ok(Resumed {
        writer,
        history,
        repaired,
        next_turn,
        image_problems,
    })
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// One JSONL file per session under `$DSH_HOME/sessions/` (the default).
    #[default]
    Jsonl,
    /// One SQLite database `$DSH_HOME/sessions.db`.
    Sqlite,
}

impl StoreKind {
    /// Parses `jsonl` or `sqlite`.
    pub fn parse(text: &str) -> Option<StoreKind> {
        match text.trim().to_ascii_lowercase().as_str() {
            "jsonl" => Some(StoreKind::Jsonl),
            "sqlite" => Some(StoreKind::Sqlite),
            _ => None,
        }
    }
}

/// Opens the store of kind `kind` under the dsh home directory `home` (created if missing).
pub fn open_store(kind: StoreKind, home: &Path) -> Result<Box<dyn SessionStore>> {
    Ok(match kind {
        StoreKind::Jsonl => Box::new(crate::jsonl::JsonlStore::new(home)),
        StoreKind::Sqlite => Box::new(crate::sqlite::SqliteStore::open(&home.join("sessions.db"))?),
    })
}

/// The folder name for a cwd: `--<cwd with / replaced by ->--` (docs/sessions.md, "Where sessions
/// live").
pub fn cwd_folder_name(cwd: &str) -> String {
    format!("--{}--", cwd.replace('/', "-"))
}

/// `$home/sessions/--<cwd>--/<id>/session.jsonl`.
pub fn session_path(home: &Path, cwd: &str, id: &str) -> PathBuf {
    home.join("sessions")
        .join(cwd_folder_name(cwd))
        .join(id)
        .join("session.jsonl")
}

/// The condition of a listing query on an optional filter bound as `?1`: `condition` (e.g.
/// `cwd = ?1`) when there is a value, so that SQLite can take the rows from that column's index
/// instead of reading the whole table; a condition always true when there is none.
/// (`(?1 IS NULL OR cwd = ?1)` in one statement would read every row either way.)
pub(crate) fn filter_on(condition: &'static str, value: Option<&str>) -> &'static str {
    match value {
        Some(_) => condition,
        None => "?1 IS NULL",
    }
}

/// Fails with [`SessionError::NotFound`] unless exactly one candidate matches `key` exactly or
/// as a prefix.
pub(crate) fn pick_id(key: &str, ids: impl IntoIterator<Item = String>) -> Result<String> {
    let mut matches = Vec::new();
    for id in ids {
        if id == key {
            return Ok(id);
        }
        if id.starts_with(key) {
            matches.push(id);
        }
    }
    match matches.len() {
        0 => Err(SessionError::NotFound(key.to_string())),
        1 => Ok(matches.remove(0)),
        _ => Err(SessionError::Ambiguous {
            prefix: key.to_string(),
            candidates: matches,
        }),
    }
}
