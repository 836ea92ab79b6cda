//! The session catalog (docs/sessions.md, "The session catalog"; decision record
//! docs/decisions/0008-session-catalog.md): one summary row per session folder of the JSONL
//! store, in `$DSH_HOME/catalog.db` (SQLite), so that listing reads rows instead of logs.
//!
//! The catalog is a cache and never the truth. Each row carries the key of the log it was made
//! from (path, size, mtime and ctime in ns, inode). Before every listing the session folders are
//! walked and each log is `stat`ed; a row whose key differs from the file (or a folder without a
//! row) is summarised again from its log, and a row whose folder is gone is deleted. A row is
//! always stored with the key taken *before* its log was read, so a log that grew while it was
//! read can never match that row again: the worst a race leaves behind is a row read once more.
//! Writers record their session at turn ends, when closed, and at most once a second at other
//! flush points, from the summary they already keep, only when the file holds exactly what they
//! wrote. A catalog SQLite calls damaged (or of another schema version) is deleted and rebuilt;
//! any other failure makes listing fall back to reading every log (slow, still right).

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, ErrorCode};

use crate::envelope::SessionHeader;
use crate::error::{Result, SessionError};
use crate::jsonl::SESSION_FILE_NAMES;
use crate::listing::{message_text, SessionSummary};
use crate::reader::LogReader;
use crate::state::SessionTracker;
use crate::store::{
    cwd_folder_name, parse_cursor, DamagedSession, ListFilter, ListPage, Listing, SearchHit,
};

/// The catalog's file name in `$DSH_HOME`.
pub const CATALOG_FILE: &str = "catalog.db";

/// Bumped whenever the table changes; a catalog of another version is rebuilt.
const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
DROP TABLE IF EXISTS entries;
DROP TABLE IF EXISTS texts;
CREATE TABLE entries (
    dir TEXT PRIMARY KEY,
    folder TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    id TEXT NOT NULL,
    cwd TEXT NOT NULL,
    title TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    turns INTEGER NOT NULL,
    usage TEXT NOT NULL,
    parent TEXT,
    open INTEGER NOT NULL,
    problem TEXT,
    fts_key TEXT
);
CREATE INDEX entries_by_time ON entries (updated_at DESC, id);
CREATE INDEX entries_by_folder ON entries (folder);
CREATE VIRTUAL TABLE texts USING fts5(
    text, dir UNINDEXED, id UNINDEXED, seq UNINDEXED, type UNINDEXED, tokenize = 'trigram'
);
";

/// The key of a row as one text, to compare with `fts_key` (the key its texts were indexed at).
const ROW_KEY: &str = "size || ':' || mtime_ns || ':' || ctime_ns || ':' || ino";

/// How often a writer records its session at flush points that are not turn ends.
const RECORD_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies one state of a log file: if any part changed, the row is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKey {
    size: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: i64,
}

impl FileKey {
    pub(crate) fn of(meta: &fs::Metadata) -> FileKey {
        FileKey {
            size: i64::try_from(meta.size()).unwrap_or(i64::MAX),
            mtime_ns: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
            ctime_ns: meta
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.ctime_nsec()),
            // Inode numbers are u64; the bit pattern is kept (only compared for equality).
            ino: meta.ino() as i64,
        }
    }
}

/// A session folder found by walking the store, with the state of its log.
struct Found {
    /// `<cwd folder>/<session folder>`, relative to `$DSH_HOME/sessions`.
    dir: String,
    folder: String,
    path: PathBuf,
    key: FileKey,
}

/// True when SQLite says the file is not a usable database (then it is rebuilt).
fn is_damage(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if matches!(e.code, ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// Deletes the catalog and its WAL side files (it holds nothing the logs do not).
fn remove_files(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        // Absent files are fine: the goal is that none is left.
        let _ = fs::remove_file(PathBuf::from(name));
    }
}

fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // A cache: losing the last commits on power loss only means reading those logs again.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Listing reads most pages of the table: map them instead of copying each with pread.
    conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version != SCHEMA_VERSION {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version != SCHEMA_VERSION {
            conn.execute_batch(SCHEMA)?;
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        conn.execute_batch("COMMIT")?;
    }
    // Touches the table so that a damaged file shows here rather than halfway through a list.
    conn.prepare("SELECT dir FROM entries LIMIT 1")?
        .query([])?
        .next()?;
    Ok(conn)
}

/// The session catalog of one dsh home. See the module docs.
pub struct Catalog {
    path: PathBuf,
    conn: Connection,
}

impl Catalog {
    /// Opens `$home/catalog.db`, creating it when missing and rebuilding it (empty; rows come
    /// back from the logs on the next listing) when SQLite calls it damaged or its schema
    /// version differs.
    pub fn open(home: &Path) -> Result<Catalog> {
        let path = home.join(CATALOG_FILE);
        let sql = |source| SessionError::Sqlite {
            path: path.clone(),
            source,
        };
        crate::private::create_dir_all(home).map_err(crate::error::io_err("creating", home))?;
        crate::private::precreate_file(&path).map_err(crate::error::io_err("creating", &path))?;
        let conn = match connect(&path) {
            Ok(conn) => conn,
            Err(e) if is_damage(&e) => {
                remove_files(&path);
                crate::private::precreate_file(&path)
                    .map_err(crate::error::io_err("creating", &path))?;
                connect(&path).map_err(sql)?
            }
            Err(e) => return Err(sql(e)),
        };
        Ok(Catalog { path, conn })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> SessionError + '_ {
        move |source| SessionError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Brings the rows of `filter`'s sessions under `root` (`$DSH_HOME/sessions`) in line with
    /// the logs, then returns one page of them, most recently updated first.
    pub fn list(&mut self, root: &Path, filter: &ListFilter, page: &ListPage) -> Result<Listing> {
        let folder = filter.cwd.as_deref().map(cwd_folder_name);
        self.sync(root, folder.as_deref())?;
        self.page(folder.as_deref(), page)
    }

    /// Walks the session folders (one folder when `folder` is set) and mends the rows.
    fn sync(&mut self, root: &Path, folder: Option<&str>) -> Result<()> {
        let found = scan(root, folder);
        let mut known = self.keys(folder)?;
        let mut stale = Vec::new();
        for entry in found {
            match known.remove(&entry.dir) {
                Some((path, key)) if path == entry.path.to_string_lossy() && key == entry.key => {}
                _ => stale.push(entry),
            }
        }
        if stale.is_empty() && known.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        for dir in known.keys() {
            tx.execute("DELETE FROM entries WHERE dir = ?1", [dir])
                .map_err(self.sql())?;
            tx.execute("DELETE FROM texts WHERE dir = ?1", [dir])
                .map_err(self.sql())?;
        }
        for entry in &stale {
            let summary = SessionSummary::of_file(&entry.path).map_err(|e| e.to_string());
            upsert(&tx, entry, &summary).map_err(self.sql())?;
        }
        tx.commit().map_err(self.sql())
    }

    /// `dir -> (path, key)` of the stored rows.
    fn keys(&self, folder: Option<&str>) -> Result<HashMap<String, (String, FileKey)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT dir, path, size, mtime_ns, ctime_ns, ino FROM entries
                 WHERE (?1 IS NULL OR folder = ?1)",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([folder], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    (
                        r.get::<_, String>(1)?,
                        FileKey {
                            size: r.get(2)?,
                            mtime_ns: r.get(3)?,
                            ctime_ns: r.get(4)?,
                            ino: r.get(5)?,
                        },
                    ),
                ))
            })
            .map_err(self.sql())?;
        rows.collect::<rusqlite::Result<HashMap<_, _>>>()
            .map_err(self.sql())
    }

    /// One page of readable sessions (and, on the first page, every damaged one).
    fn page(&self, folder: Option<&str>, page: &ListPage) -> Result<Listing> {
        let mut listing = Listing::default();
        let (after_time, after_id) = match page.after.as_deref() {
            Some(cursor) => {
                let (time, id) = parse_cursor(cursor)?;
                (Some(clamp(time)), id)
            }
            None => (None, String::new()),
        };
        let limit = page
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT path, id, cwd, title, created_at, updated_at, turns, usage, parent, open
                 FROM entries WHERE problem IS NULL AND (?1 IS NULL OR folder = ?1)
                 AND (?2 IS NULL OR updated_at < ?2 OR (updated_at = ?2 AND id > ?3))
                 ORDER BY updated_at DESC, id LIMIT ?4",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![folder, after_time, after_id, limit], |r| {
                Ok(SessionSummary {
                    location: r.get(0)?,
                    id: r.get(1)?,
                    cwd: r.get(2)?,
                    title: r.get(3)?,
                    created_at: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                    updated_at: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
                    turns: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
                    usage_by_model: serde_json::from_str(&r.get::<_, String>(7)?)
                        .unwrap_or_default(),
                    parent_session: r.get(8)?,
                    open: r.get(9)?,
                })
            })
            .map_err(self.sql())?;
        for row in rows {
            listing.sessions.push(row.map_err(self.sql())?);
        }
        if page.limit.is_some_and(|l| listing.sessions.len() >= l) {
            listing.next = listing
                .sessions
                .last()
                .map(|s| format!("{}:{}", s.updated_at, s.id));
        }
        if page.after.is_none() {
            self.damaged(folder, &mut listing)?;
        }
        Ok(listing)
    }

    fn damaged(&self, folder: Option<&str>, listing: &mut Listing) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT path, updated_at, problem FROM entries
                 WHERE problem IS NOT NULL AND (?1 IS NULL OR folder = ?1) ORDER BY path",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([folder], |r| {
                Ok(DamagedSession {
                    path: r.get(0)?,
                    updated_at: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    problem: r.get(2)?,
                })
            })
            .map_err(self.sql())?;
        for row in rows {
            let damaged = row.map_err(self.sql())?;
            listing.problems.push(damaged.problem.clone());
            listing.damaged.push(damaged);
        }
        Ok(())
    }

    /// Messages of every session whose text contains `query` (case-insensitive), at most
    /// `limit`, from the full-text index (FTS5, trigram tokens), after the rows were mended
    /// and the texts of every changed log indexed again. `None` when `query` is shorter than
    /// three characters, which a trigram index cannot look up.
    pub fn search(
        &mut self,
        root: &Path,
        query: &str,
        limit: usize,
    ) -> Result<Option<Vec<SearchHit>>> {
        if query.chars().count() < 3 {
            return Ok(None);
        }
        self.sync(root, None)?;
        self.index_texts(root)?;
        // Quoted as one FTS5 string so user text is never parsed as query syntax.
        let phrase = format!("\"{}\"", query.replace('"', "\"\""));
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, seq, type, snippet(texts, 0, '', '', '…', 24) FROM texts
                 WHERE texts MATCH ?1 ORDER BY rank LIMIT ?2",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![phrase, clamp(limit as u64)], |r| {
                Ok(SearchHit {
                    session_id: r.get(0)?,
                    seq: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    event_type: r.get(2)?,
                    snippet: r.get::<_, String>(3)?.replace(['\n', '\r'], " "),
                })
            })
            .map_err(self.sql())?;
        let hits = rows
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.sql())?;
        Ok(Some(hits))
    }

    /// Indexes the message texts of every row whose log changed since its texts were indexed.
    /// A damaged log is indexed up to the damage (as the scan searches it).
    fn index_texts(&mut self, root: &Path) -> Result<()> {
        let stale: Vec<(String, String, String)> = {
            let mut stmt = self
                .conn
                .prepare_cached(&format!(
                    "SELECT dir, path, {ROW_KEY} FROM entries WHERE fts_key IS NOT {ROW_KEY}"
                ))
                .map_err(self.sql())?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(self.sql())?;
            rows.collect::<rusqlite::Result<_>>().map_err(self.sql())?
        };
        if stale.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        for (dir, path, key) in &stale {
            tx.execute("DELETE FROM texts WHERE dir = ?1", [dir])
                .map_err(self.sql())?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO texts (text, dir, id, seq, type) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(self.sql())?;
            let path = if Path::new(path).is_absolute() {
                PathBuf::from(path)
            } else {
                root.join(path)
            };
            if let Ok(mut reader) = LogReader::open(&path) {
                let id = reader.header().id.clone();
                while let Ok(Some(env)) = reader.next_event() {
                    if let Some(message) = env.event.message() {
                        insert
                            .execute(params![
                                message_text(message),
                                dir,
                                id,
                                clamp(env.seq),
                                env.event.event_type()
                            ])
                            .map_err(self.sql())?;
                    }
                }
            }
            // The key the row had when this read began: a log that changed meanwhile has a
            // new row key by the next search, which indexes it again.
            tx.execute(
                "UPDATE entries SET fts_key = ?2 WHERE dir = ?1",
                params![dir, key],
            )
            .map_err(self.sql())?;
        }
        tx.commit().map_err(self.sql())
    }

    /// Number of rows (for tests and the bench).
    pub fn len(&self) -> Result<usize> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
            .map_err(self.sql())?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// True when the catalog holds no row.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// The log of a session folder, in the order of preference of
/// [`crate::jsonl::session_file_in`], with its metadata.
fn log_in(dir: &Path) -> Option<(PathBuf, fs::Metadata)> {
    SESSION_FILE_NAMES.iter().find_map(|name| {
        let path = dir.join(name);
        let meta = fs::metadata(&path).ok()?;
        meta.is_file().then_some((path, meta))
    })
}

/// Every session folder under `root` (only `folder` when set) and the state of its log.
/// Unreadable folders are skipped, as listing always did.
fn scan(root: &Path, folder: Option<&str>) -> Vec<Found> {
    let mut out = Vec::new();
    let folders: Vec<(String, PathBuf)> = match folder {
        Some(name) => vec![(name.to_string(), root.join(name))],
        None => match fs::read_dir(root) {
            Ok(entries) => entries
                .flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect(),
            Err(_) => return out,
        },
    };
    for (name, path) in folders {
        let Ok(ids) = fs::read_dir(&path) else {
            continue;
        };
        for id in ids.flatten() {
            if let Some((log, meta)) = log_in(&id.path()) {
                out.push(Found {
                    dir: format!("{name}/{}", id.file_name().to_string_lossy()),
                    folder: name.clone(),
                    path: log,
                    key: FileKey::of(&meta),
                });
            }
        }
    }
    out
}

/// Writes the row of `entry`: its summary, or the problem that kept its log from being read.
fn upsert(
    conn: &Connection,
    entry: &Found,
    summary: &std::result::Result<SessionSummary, String>,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR REPLACE INTO entries (dir, folder, path, size, mtime_ns, ctime_ns, ino, id,
         cwd, title, created_at, updated_at, turns, usage, parent, open, problem)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    )?;
    let path = entry.path.to_string_lossy();
    let k = entry.key;
    match summary {
        Ok(s) => stmt.execute(params![
            entry.dir,
            entry.folder,
            path,
            k.size,
            k.mtime_ns,
            k.ctime_ns,
            k.ino,
            s.id,
            s.cwd,
            s.title,
            clamp(s.created_at),
            clamp(s.updated_at),
            clamp(s.turns),
            serde_json::to_string(&s.usage_by_model).unwrap_or_else(|_| "{}".into()),
            s.parent_session,
            s.open,
            None::<String>,
        ])?,
        Err(problem) => {
            let id = entry.dir.rsplit('/').next().unwrap_or_default();
            let mtime_ms = k.mtime_ns.max(0) / 1_000_000;
            stmt.execute(params![
                entry.dir,
                entry.folder,
                path,
                k.size,
                k.mtime_ns,
                k.ctime_ns,
                k.ino,
                id,
                "",
                None::<String>,
                mtime_ms,
                mtime_ms,
                0,
                "{}",
                None::<String>,
                false,
                problem,
            ])?
        }
    };
    Ok(())
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A writer's way into the catalog of its store (docs/sessions.md, "The session catalog"):
/// opened on first use, and given up for the writer's lifetime after a failure (listing heals
/// whatever a writer did not record).
pub(crate) struct CatalogLink {
    home: PathBuf,
    conn: Option<Connection>,
    last: Option<Instant>,
    failed: bool,
}

impl CatalogLink {
    /// A link to the catalog of the store at `home` (`$DSH_HOME`).
    pub(crate) fn new(home: &Path) -> CatalogLink {
        CatalogLink {
            home: home.to_path_buf(),
            conn: None,
            last: None,
            failed: false,
        }
    }

    /// True when a record is due: always at a turn end or close (`boundary`), else when the
    /// last record is older than a second.
    pub(crate) fn due(&self, boundary: bool) -> bool {
        !self.failed && (boundary || self.last.is_none_or(|t| t.elapsed() >= RECORD_INTERVAL))
    }

    /// Records the session whose log is `file` at `path`, which must hold exactly `expected_len`
    /// bytes (what the writer wrote): otherwise someone else wrote to it and the summary of the
    /// writer would be wrong, so nothing is recorded and listing reads the log instead.
    pub(crate) fn record(
        &mut self,
        path: &Path,
        file: &File,
        expected_len: u64,
        header: &SessionHeader,
        tracker: &SessionTracker,
    ) {
        self.last = Some(Instant::now());
        let Ok(meta) = file.metadata() else {
            return;
        };
        if meta.size() != expected_len {
            return;
        }
        let dir = path.parent();
        let (Some(id), Some(folder)) = (
            dir.and_then(Path::file_name),
            dir.and_then(Path::parent).and_then(Path::file_name),
        ) else {
            return;
        };
        let folder = folder.to_string_lossy().into_owned();
        let entry = Found {
            dir: format!("{folder}/{}", id.to_string_lossy()),
            folder,
            path: path.to_path_buf(),
            key: FileKey::of(&meta),
        };
        let mtime_ms = u64::try_from(entry.key.mtime_ns.max(0) / 1_000_000).unwrap_or(0);
        let summary =
            SessionSummary::from_state(header, tracker, mtime_ms, path.display().to_string());
        if self.conn.is_none() {
            match Catalog::open(&self.home) {
                Ok(catalog) => self.conn = Some(catalog.conn),
                Err(_) => {
                    self.failed = true;
                    return;
                }
            }
        }
        if let Some(conn) = &self.conn {
            if upsert(conn, &entry, &Ok(summary)).is_err() {
                self.failed = true;
                self.conn = None;
            }
        }
    }
}

/// Searches through the catalog of `home` (see [`Catalog::search`]), rebuilding it once when
/// SQLite finds it damaged midway.
pub(crate) fn search_via_catalog(
    home: &Path,
    root: &Path,
    query: &str,
    limit: usize,
) -> Result<Option<Vec<SearchHit>>> {
    let mut catalog = Catalog::open(home)?;
    match catalog.search(root, query, limit) {
        Err(SessionError::Sqlite { source, .. }) if is_damage(&source) => {
            drop(catalog);
            remove_files(&home.join(CATALOG_FILE));
            Catalog::open(home)?.search(root, query, limit)
        }
        other => other,
    }
}

/// Lists through the catalog of `home`, rebuilding it once when SQLite finds it damaged midway.
pub(crate) fn list_via_catalog(
    home: &Path,
    root: &Path,
    filter: &ListFilter,
    page: &ListPage,
) -> Result<Listing> {
    let mut catalog = Catalog::open(home)?;
    match catalog.list(root, filter, page) {
        Err(SessionError::Sqlite { source, .. }) if is_damage(&source) => {
            drop(catalog);
            remove_files(&home.join(CATALOG_FILE));
            Catalog::open(home)?.list(root, filter, page)
        }
        other => other,
    }
}
