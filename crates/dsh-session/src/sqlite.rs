//! The SQLite store: the same events in one database (`$DSH_HOME/sessions.db`), with an index
//! for listing sessions by cwd and time and FTS5 full-text search over message text.
//!
//! Durability: WAL journal, `synchronous=FULL`, one transaction per flushed append batch.
//! Each event row holds exactly the JSON line the JSONL store would write for it (unpacked),
//! so both stores read through the same decoder. Writers lock
//! `sessions.db.locks/<id>.lock` with `flock`, like the JSONL store locks its file.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use crate::envelope::{Envelope, SessionHeader};
use crate::error::{io_err, Location, Result, SessionError};
use crate::listing::{message_text, SessionSummary};
use crate::lock::lock_exclusive;
use crate::projection::Projector;
use crate::reader::{decode_stored, LoadedLog};
use crate::state::SessionTracker;
use crate::store::{
    filter_on, finish_resume, is_flush_point, pick_id, ListFilter, Listing, Resumed, SearchHit,
    SessionStore, SessionWriter,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    header TEXT NOT NULL,
    title TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}',
    open INTEGER NOT NULL DEFAULT 0,
    event_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, updated_at DESC);
CREATE INDEX IF NOT EXISTS sessions_by_time ON sessions (updated_at DESC);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS message_fts USING fts5(text, session_id UNINDEXED, seq UNINDEXED);
";

fn open_connection(path: &Path) -> Result<Connection> {
    let sql = |source| SessionError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        crate::private::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    crate::private::precreate_file(path).map_err(io_err("creating", path))?;
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(sql)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql)?;
    conn.execute_batch(SCHEMA).map_err(sql)?;
    Ok(conn)
}

/// The database and session id of a SQLite session's `location` (`sqlite:<db>#<id>`); `None`
/// for a JSONL log's path.
pub(crate) fn sqlite_location(location: &str) -> Option<(&str, &str)> {
    location
        .strip_prefix("sqlite:")
        .and_then(|rest| rest.rsplit_once('#'))
}

/// A path whose folder is where the sub-agents of the session written at `location` (a
/// writer's `location()`) keep their logs: the log file itself for a JSONL session (children go
/// to `<folder>/subagents/<child>/`); for a SQLite session (`sqlite:<db>#<id>`) a file name in
/// `<db>.subagents/<id>/`, the folder [`SqliteStore`]'s `sub_agent_logs` reads.
pub fn sub_agent_anchor(location: &str) -> PathBuf {
    if let Some((db, id)) = sqlite_location(location) {
        let mut name = std::ffi::OsString::from(db);
        name.push(".subagents");
        return PathBuf::from(name).join(id).join("session.jsonl");
    }
    PathBuf::from(location)
}

/// The log written at `location` (a writer's `location()`): a JSONL file, or a SQLite session
/// (`sqlite:<db>#<id>`).
pub fn load_location(location: &str) -> Result<crate::LoadedLog> {
    match sqlite_location(location) {
        Some((db, id)) => SqliteStore::open(Path::new(db))?.load(id),
        None => crate::load_file(Path::new(location)),
    }
}

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    conn: Connection,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        Ok(SqliteStore {
            path: path.to_path_buf(),
            conn: open_connection(path)?,
        })
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> SessionError + '_ {
        move |source| SessionError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Where sub-agents of session `id` keep their JSONL logs: `<db>.subagents/<id>/`.
    fn sub_agent_dir(&self, id: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".subagents");
        PathBuf::from(name).join(id)
    }

    fn lock_path(&self, id: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".locks");
        PathBuf::from(name).join(format!("{id}.lock"))
    }

    fn lock(&self, id: &str) -> Result<File> {
        let path = self.lock_path(id);
        if let Some(dir) = path.parent() {
            crate::private::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        let file = crate::private::open_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("opening lock file", &path))?;
        lock_exclusive(&file, &path)?;
        Ok(file)
    }

    fn header_of(&self, id: &str) -> Result<SessionHeader> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT header FROM sessions WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.sql())?;
        let text = text.ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        serde_json::from_str(&text).map_err(|e| SessionError::Malformed {
            at: self.at(id, 1),
            reason: format!("stored header: {e}"),
        })
    }

    fn at(&self, id: &str, line: u64) -> Location {
        Location {
            source: format!("sqlite:{}#{id}", self.path.display()),
            line,
        }
    }

    /// Streams the events of session `id` in seq order into `sink`.
    fn for_each_event(&self, id: &str, mut sink: impl FnMut(Envelope) -> Result<()>) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, line FROM events WHERE session_id = ?1 ORDER BY seq")
            .map_err(self.sql())?;
        let mut rows = stmt.query([id]).map_err(self.sql())?;
        while let Some(row) = rows.next().map_err(self.sql())? {
            let seq: i64 = row.get(0).map_err(self.sql())?;
            let line: String = row.get(1).map_err(self.sql())?;
            let seq = u64::try_from(seq).unwrap_or(0);
            for env in decode_stored(line.as_bytes(), seq, &self.at(id, seq + 2))? {
                sink(env)?;
            }
        }
        Ok(())
    }
}

/// `blobs/<id>/` beside the database `db` (docs/sessions.md, "Images").
fn sqlite_blobs(db: &Path, id: &str) -> crate::blobs::BlobStore {
    let root = db
        .parent()
        .map_or_else(|| PathBuf::from("blobs"), |dir| dir.join("blobs"));
    crate::blobs::BlobStore::new(root.join(id))
}

impl SessionStore for SqliteStore {
    fn blobs(&self, key: &str) -> Result<crate::blobs::BlobStore> {
        Ok(sqlite_blobs(&self.path, &self.resolve(key)?))
    }

    fn create_with_header(&self, header: SessionHeader) -> Result<Box<dyn SessionWriter>> {
        let lock = self.lock(&header.id)?;
        let conn = open_connection(&self.path)?;
        let header_json = serde_json::to_string(&header).map_err(|e| SessionError::Encode {
            event_type: "session".into(),
            reason: e.to_string(),
        })?;
        let inserted = conn
            .execute(
                "INSERT OR IGNORE INTO sessions (id, cwd, created_at, updated_at, header) VALUES (?1, ?2, ?3, ?3, ?4)",
                params![header.id, header.cwd, header.created_at as i64, header_json],
            )
            .map_err(self.sql())?;
        if inserted == 0 {
            return Err(SessionError::Io {
                action: "creating session",
                path: self.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("session {} already exists", header.id),
                ),
            });
        }
        Ok(Box::new(SqliteWriter {
            path: self.path.clone(),
            conn,
            header,
            tracker: SessionTracker::new(),
            pending: Vec::new(),
            _lock: lock,
        }))
    }

    fn load(&self, key: &str) -> Result<LoadedLog> {
        let id = self.resolve(key)?;
        let header = self.header_of(&id)?;
        let mut events = Vec::new();
        self.for_each_event(&id, |env| {
            events.push(env);
            Ok(())
        })?;
        Ok(LoadedLog {
            header,
            events,
            torn_tail: None,
        })
    }

    fn resume(&self, key: &str) -> Result<Resumed> {
        let id = self.resolve(key)?;
        let lock = self.lock(&id)?;
        let header = self.header_of(&id)?;
        let mut tracker = SessionTracker::new();
        let mut history = Projector::new();
        self.for_each_event(&id, |env| {
            tracker.push(&env);
            history.push_owned(env)
        })?;
        let writer = SqliteWriter {
            path: self.path.clone(),
            conn: open_connection(&self.path)?,
            header,
            tracker,
            pending: Vec::new(),
            _lock: lock,
        };
        finish_resume(Box::new(writer), history)
    }

    fn list(&self, filter: &ListFilter) -> Result<Listing> {
        let mut listing = Listing::default();
        let mut stmt = self
            .conn
            // `cwd = ?1` alone when filtering, so that `sessions_by_cwd` serves the rows.
            .prepare(&format!(
                "SELECT header, title, turns, usage, updated_at, open FROM sessions
                 WHERE {} ORDER BY updated_at DESC, id",
                filter_on("cwd = ?1", filter.cwd.as_deref())
            ))
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([filter.cwd.as_deref()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, bool>(5)?,
                ))
            })
            .map_err(self.sql())?;
        for row in rows {
            let (header, title, turns, usage, updated_at, open) = row.map_err(self.sql())?;
            let parsed: std::result::Result<SessionHeader, _> = serde_json::from_str(&header);
            let Ok(header) = parsed else {
                listing
                    .problems
                    .push(format!("{}: unreadable stored header", self.describe()));
                continue;
            };
            listing.sessions.push(SessionSummary {
                location: format!("sqlite:{}#{}", self.path.display(), header.id),
                id: header.id,
                title,
                cwd: header.cwd,
                turns: u64::try_from(turns).unwrap_or(0),
                usage_by_model: serde_json::from_str(&usage).unwrap_or_default(),
                created_at: header.created_at,
                updated_at: u64::try_from(updated_at).unwrap_or(0),
                parent_session: header.parent_session,
                open,
            });
        }
        Ok(listing)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>> {
        // Quoted as one FTS5 string so user text is never parsed as query syntax.
        let phrase = format!("\"{}\"", query.replace('"', "\"\""));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT f.session_id, f.seq, e.type, snippet(message_fts, 0, '', '', '…', 16)
                 FROM message_fts f JOIN events e ON e.session_id = f.session_id AND e.seq = f.seq
                 WHERE message_fts MATCH ?1 ORDER BY rank LIMIT ?2",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![phrase, limit as i64], |r| {
                Ok(SearchHit {
                    session_id: r.get(0)?,
                    seq: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    event_type: r.get(2)?,
                    snippet: r.get::<_, String>(3)?.replace(['\n', '\r'], " "),
                })
            })
            .map_err(self.sql())?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .map_err(self.sql())
    }

    fn remove(&self, key: &str) -> Result<()> {
        let id = self.resolve(key)?;
        let _lock = self.lock(&id)?;
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        tx.execute("DELETE FROM events WHERE session_id = ?1", [&id])
            .map_err(self.sql())?;
        tx.execute("DELETE FROM message_fts WHERE session_id = ?1", [&id])
            .map_err(self.sql())?;
        tx.execute("DELETE FROM sessions WHERE id = ?1", [&id])
            .map_err(self.sql())?;
        tx.commit().map_err(self.sql())?;
        let _ = fs::remove_file(self.lock_path(&id)); // only a lock file; absence is harmless
                                                      // Its sub-agents' logs go with it (absent when it had none).
        let _ = fs::remove_dir_all(self.sub_agent_dir(&id));
        Ok(())
    }

    fn resolve(&self, key: &str) -> Result<String> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM sessions WHERE id = ?1 OR substr(id, 1, length(?1)) = ?1")
            .map_err(self.sql())?;
        let ids = stmt
            .query_map([key], |r| r.get::<_, String>(0))
            .map_err(self.sql())?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(self.sql())?;
        pick_id(key, ids)
    }

    /// The sub-agent logs of a session of this store (docs/sessions.md, "SQLite store"): the
    /// JSONL logs sub-agents write in `<db>.subagents/<id>/` (see [`sub_agent_anchor`]), and
    /// any sub-agent session kept in the database itself (a header naming this session, or one
    /// of its sub-agents, as `parentSession` with a delegation depth above 0), encoded as JSONL.
    fn session_folder(&self, key: &str) -> Result<PathBuf> {
        Ok(self.sub_agent_dir(&self.resolve(key)?))
    }

    fn sub_agent_logs(&self, key: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let id = self.resolve(key)?;
        let mut out = Vec::new();
        let dir = self.sub_agent_dir(&id);
        if dir.is_dir() {
            crate::jsonl::collect_jsonl(&dir, &dir, &mut out)?;
        }
        let mut parents = vec![id];
        let mut seen = std::collections::HashSet::new();
        while let Some(parent) = parents.pop() {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT id FROM sessions WHERE json_extract(header, '$.parentSession') = ?1 \
                     AND COALESCE(json_extract(header, '$.delegationDepth'), 0) > 0",
                )
                .map_err(self.sql())?;
            let children = stmt
                .query_map([&parent], |r| r.get::<_, String>(0))
                .map_err(self.sql())?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(self.sql())?;
            for child in children {
                if !seen.insert(child.clone()) {
                    continue;
                }
                let log = self.load(&child)?;
                let bytes = crate::export::encode_jsonl(&log.header, &log.events, false)?;
                out.push((format!("sqlite/{child}.jsonl"), bytes));
                parents.push(child);
            }
        }
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("sqlite store {}", self.path.display())
    }
}

/// The locked append side of one session in the SQLite store.
pub struct SqliteWriter {
    path: PathBuf,
    conn: Connection,
    header: SessionHeader,
    tracker: SessionTracker,
    pending: Vec<Envelope>,
    _lock: File,
}

impl SqliteWriter {
    fn sql(&self) -> impl Fn(rusqlite::Error) -> SessionError + '_ {
        move |source| SessionError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn write_batch(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO events (session_id, seq, type, line) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(self.sql())?;
            let mut fts = tx
                .prepare_cached(
                    "INSERT INTO message_fts (text, session_id, seq) VALUES (?1, ?2, ?3)",
                )
                .map_err(self.sql())?;
            let mut line = Vec::new();
            for env in &self.pending {
                line.clear();
                env.encode_line(&mut line)
                    .map_err(|e| SessionError::Encode {
                        event_type: env.event.event_type().to_string(),
                        reason: e.to_string(),
                    })?;
                let text = String::from_utf8_lossy(&line);
                insert
                    .execute(params![
                        self.header.id,
                        env.seq as i64,
                        env.event.event_type(),
                        text.trim_end()
                    ])
                    .map_err(self.sql())?;
                if let Some(message) = env.event.message() {
                    fts.execute(params![
                        message_text(message),
                        self.header.id,
                        env.seq as i64
                    ])
                    .map_err(self.sql())?;
                }
            }
        }
        let usage = serde_json::to_string(self.tracker.usage_by_model()).unwrap_or_default();
        let updated = self.tracker.last_time().unwrap_or(self.header.created_at) as i64;
        tx.execute(
            "UPDATE sessions SET updated_at = max(updated_at, ?2), title = ?3, turns = ?4, usage = ?5, open = ?6, event_count = ?7 WHERE id = ?1",
            params![
                self.header.id,
                updated,
                self.tracker.title(),
                self.tracker.turn_count() as i64,
                usage,
                !self.tracker.is_closed(),
                self.tracker.next_seq() as i64
            ],
        )
        .map_err(self.sql())?;
        tx.commit().map_err(self.sql())?;
        self.pending.clear();
        Ok(())
    }
}

impl SessionWriter for SqliteWriter {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn location(&self) -> String {
        format!("sqlite:{}#{}", self.path.display(), self.header.id)
    }

    fn state(&self) -> &SessionTracker {
        &self.tracker
    }

    fn blobs(&self) -> crate::blobs::BlobStore {
        sqlite_blobs(&self.path, &self.header.id)
    }

    fn append_verbatim(&mut self, mut env: Envelope) -> Result<u64> {
        // An event's image files are written before the event (docs/sessions.md, "Images").
        if crate::blobs::carries_images(&env.event) {
            self.blobs().store_event(&env.event)?;
        }
        env.seq = self.tracker.next_seq();
        self.tracker.push(&env);
        let seq = env.seq;
        let flush_now = is_flush_point(&env.event);
        self.pending.push(env);
        if flush_now || self.pending.len() >= 4096 {
            self.write_batch()?;
        }
        Ok(seq)
    }

    fn flush(&mut self) -> Result<()> {
        self.write_batch()
    }
}

impl Drop for SqliteWriter {
    fn drop(&mut self) {
        // Best effort: an error here cannot be reported; callers that care flush first.
        let _ = self.write_batch();
    }
}
