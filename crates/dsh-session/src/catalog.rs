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

use std::collections::{BTreeMap, HashMap};

#[cfg(unix)]
use std::ffi::CStr;
use std::ffi::OsString;
use std::fs::{self, File};
#[cfg(unix)]
use std::os::fd::AsRawFd;
#[cfg(unix)]
use std::os::unix::ffi::OsStrExt;
#[cfg(unix)]
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_llm::{LockExt, Usage, UsageTotals};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use crate::envelope::SessionHeader;
use crate::error::{Result, SessionError};
use crate::jsonl::SESSION_FILE_NAMES;
use crate::listing::{message_text, SessionSummary};
use crate::reader::LogReader;
use crate::state::SessionTracker;
mod listed;
mod watch;
use listed::{Decoded, Row, Span, Text, TextFull};
pub use listed::{ListedSession, ListedSessions};
pub use watch::WatchedCatalog;

use crate::store::{
    cwd_folder_name, filter_on, parse_cursor, DamagedSession, ListFilter, ListPage, Listing,
    SearchHit,
};

/// The catalog's file name in `$DSH_HOME`.
pub const CATALOG_FILE: &str = "catalog.db";

/// Bumped whenever the table changes, or what a row holds is computed differently; a catalog
/// of another version is rebuilt. 3: usage counts every billed call, children's included
/// (`crate::usage`). 4: `text_spans`, so a session's texts are deleted by rowid.
const SCHEMA_VERSION: i64 = 4;

const SCHEMA: &str = "
DROP TABLE IF EXISTS entries;
DROP TABLE IF EXISTS texts;
DROP TABLE IF EXISTS text_spans;
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
-- The rowids of each session folder's texts (inserted in one run, so one range): FTS5 cannot
-- look up an UNINDEXED column, and deleting by `dir` read the whole table once per session.
CREATE TABLE text_spans (
    dir TEXT PRIMARY KEY,
    lo INTEGER NOT NULL,
    hi INTEGER NOT NULL
) WITHOUT ROWID;
-- Pending terms are kept in memory up to 16 MiB (FTS5's default: 1 MiB) before they are
-- written as a segment: indexing 10,000 logs at once otherwise writes and merges ~30 segments.
INSERT INTO texts (texts, rank) VALUES ('hashsize', 16777216);
";

/// Most logs whose texts a search indexes before it answers; with more, it answers by scanning
/// and leaves the indexing to `dsh sessions reindex` (docs/decisions/0010-cold-search-scans.md).
/// A thousand logs index in about a tenth of a second.
pub const INLINE_INDEX_LIMIT: u64 = 1000;

/// How [`Catalog::search`] answered.
#[derive(Debug)]
pub enum CatalogSearch {
    /// From the full-text index.
    Hits(Vec<SearchHit>),
    /// The caller scans the logs; `reindex`: the index is far behind and worth building apart
    /// ([`Catalog::build_index`]).
    Scan {
        /// Whether the index should be built.
        reindex: bool,
    },
}

/// The key of a row as one text, to compare with `fts_key` (the key its texts were indexed at).
const ROW_KEY: &str = "size || ':' || mtime_ns || ':' || ctime_ns || ':' || ino";

/// How often a writer records its session at flush points that are not turn ends.
const RECORD_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies one state of a log file: if any part changed, the row is read again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FileKey {
    size: i64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: i64,
}

impl FileKey {
    /// The key stored in four columns of a row, from column `first` on.
    fn read(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<FileKey> {
        Ok(FileKey {
            size: r.get(first)?,
            mtime_ns: r.get(first + 1)?,
            ctime_ns: r.get(first + 2)?,
            ino: r.get(first + 3)?,
        })
    }

    #[cfg(unix)]
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

    /// Windows: size, last write and creation times (FILETIME, converted to nanoseconds since
    /// 1970 so listing shows the right dates); no inode number (std reads the file index only
    /// through an open handle), so a replaced file of the same size and times is not noticed.
    #[cfg(windows)]
    pub(crate) fn of(meta: &fs::Metadata) -> FileKey {
        use std::os::windows::fs::MetadataExt;
        // 100 ns ticks between 1601-01-01 and 1970-01-01.
        const UNIX_EPOCH_TICKS: i64 = 116_444_736_000_000_000;
        let ns = |ticks: u64| {
            i64::try_from(ticks)
                .unwrap_or(i64::MAX)
                .saturating_sub(UNIX_EPOCH_TICKS)
                .saturating_mul(100)
        };
        FileKey {
            size: i64::try_from(meta.file_size()).unwrap_or(i64::MAX),
            mtime_ns: ns(meta.last_write_time()),
            ctime_ns: ns(meta.creation_time()),
            ino: 0,
        }
    }
}

/// A session log seen by the walk: its working-directory folder (an index into the walk's
/// folders), session folder, file name (an index into `SESSION_FILE_NAMES`) and state. Kept
/// small: a listing makes one per session, and builds a [`Found`] only for the stale ones.
struct Seen {
    folder: usize,
    name: OsString,
    file: usize,
    key: FileKey,
}

/// The working-directory folders a walk visited: name, path, and the path as text.
struct Folder {
    name: String,
    path: PathBuf,
    text: String,
}

/// True when `path` (a row's) is `<folder>/<name>/<file>`, compared without building it.
fn path_is(path: &str, folder: &str, name: &str, file: &str) -> bool {
    path.strip_prefix(folder)
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(|rest| rest.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix('/'))
        == Some(file)
}

/// A session folder whose row is written, with the state of its log.
struct Found {
    /// `<cwd folder>/<session folder>`, relative to `$DSH_HOME/sessions`.
    dir: String,
    folder: String,
    path: PathBuf,
    key: FileKey,
}

/// Rows of the catalog over one text (catalog/listed.rs): what `Catalog::sync` returns.
struct Rows {
    text: Text,
    rows: Vec<Row>,
}

/// A text column of the current row, borrowed from SQLite (`None` for NULL).
fn text_at<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<&'r str>> {
    r.get_ref(i)?.as_str_or_null().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// A text column that must not be NULL.
fn text_not_null<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    text_at(r, i)?.ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(i, String::new(), rusqlite::types::Type::Null)
    })
}

fn too_big(_: TextFull) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(
        "the catalog's texts exceed 4 GiB; listing reads every log instead",
    )))
}

/// A row as `Catalog::rows` selects it, its texts appended to `text`.
fn read_row(text: &mut Text, r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let time = |i| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
    let mut push = |i| text.push(text_not_null(r, i)?).map_err(too_big);
    let dir = push(0)?;
    let location = push(1)?;
    let id = push(6)?;
    let cwd = push(7)?;
    let usage = push(12)?;
    let mut push_opt = |i| -> rusqlite::Result<Option<Span>> {
        text_at(r, i)?
            .map(|t| text.push(t).map_err(too_big))
            .transpose()
    };
    let title = push_opt(8)?;
    let parent = push_opt(13)?;
    let problem = push_opt(15)?;
    Ok(Row {
        dir,
        location,
        key: FileKey::read(r, 2)?,
        id,
        cwd,
        title,
        parent,
        usage,
        decoded: listed::decode(text, usage),
        created_at: time(9)?,
        updated_at: time(10)?,
        turns: time(11)?,
        open: r.get(14)?,
        problem,
    })
}

/// The row `upsert` writes for `entry` and `summary`, as `read_row` would read it back.
fn row_of(
    text: &mut Text,
    entry: &Found,
    summary: std::result::Result<SessionSummary, String>,
) -> std::result::Result<Row, TextFull> {
    match summary {
        Ok(summary) => {
            let mut row = listed::row_of_summary(text, &summary)?;
            row.dir = text.push(&entry.dir)?;
            row.key = entry.key;
            Ok(row)
        }
        Err(problem) => {
            let mtime_ms = u64::try_from(entry.key.mtime_ns.max(0) / 1_000_000).unwrap_or(0);
            Ok(Row {
                dir: text.push(&entry.dir)?,
                location: text.push(&entry.path.to_string_lossy())?,
                key: entry.key,
                id: text.push(entry.dir.rsplit('/').next().unwrap_or_default())?,
                cwd: text.push("")?,
                title: None,
                parent: None,
                usage: text.push("{}")?,
                decoded: Decoded::Empty,
                created_at: mtime_ms,
                updated_at: mtime_ms,
                turns: 0,
                open: false,
                problem: Some(text.push(&problem)?),
            })
        }
    }
}

/// A small, fast hasher for the walk's map of row keys (session folder names, which come from
/// the user's own `$DSH_HOME`): SipHash was a few percent of a listing (docs/PERFORMANCE.md,
/// "Session listing", fourth pass). FNV-1a over the bytes, eight at a time.
#[derive(Default)]
struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(word))
                .wrapping_mul(PRIME)
                .rotate_left(23);
        }
        for &b in chunks.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        // Mixes the high bits down: hashbrown takes its bucket from the low bits.
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
    }
}

type FastBuild = std::hash::BuildHasherDefault<FastHasher>;

/// A walk's logs against the stored rows: the logs to summarise again (with the index of the
/// row they replace, if any: no row, a different key, or another file of the folder), and the
/// indices of the rows whose folder is gone.
fn compare(
    rows: &Rows,
    folders: &[Folder],
    seen: Vec<Seen>,
) -> (Vec<(Option<usize>, Found)>, Vec<usize>) {
    let mut index: HashMap<&str, usize, FastBuild> =
        HashMap::with_capacity_and_hasher(rows.rows.len(), FastBuild::default());
    for (i, row) in rows.rows.iter().enumerate() {
        index.insert(rows.text.get(row.dir), i);
    }
    let mut stale = Vec::new();
    let mut dir = String::with_capacity(128);
    for entry in seen {
        let Folder {
            name: folder_name,
            path: folder_path,
            text: folder_text,
        } = &folders[entry.folder];
        let name = entry.name.to_string_lossy();
        let file = SESSION_FILE_NAMES[entry.file];
        dir.clear();
        dir.push_str(folder_name);
        dir.push('/');
        dir.push_str(&name);
        match index.remove(dir.as_str()) {
            Some(i)
                if rows.rows[i].key == entry.key
                    && path_is(
                        rows.text.get(rows.rows[i].location),
                        folder_text,
                        &name,
                        file,
                    ) => {}
            found => stale.push((
                found,
                Found {
                    dir: dir.clone(),
                    folder: folder_name.clone(),
                    path: folder_path.join(&entry.name).join(file),
                    key: entry.key,
                },
            )),
        }
    }
    (stale, index.into_values().collect())
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
    ///
    /// The rows are read whole in one pass over the table while the session folders are walked
    /// on other threads, and the page is cut from them in memory: one sequential read instead
    /// of a read of the keys and then one index-ordered read of the page (docs/PERFORMANCE.md,
    /// "Session listing", third pass).
    pub fn list(&mut self, root: &Path, filter: &ListFilter, page: &ListPage) -> Result<Listing> {
        if let Some(after) = page.after.as_deref() {
            // A bad cursor is refused before any work.
            parse_cursor(after)?;
        }
        self.list_all(root, filter)?.into_page(page)
    }

    /// Brings the rows of `filter`'s sessions under `root` in line with the logs, as
    /// [`Catalog::list`] does, and returns all of them as compact rows (what `dsh sessions
    /// list` prints; docs/PERFORMANCE.md, "Session listing", fourth pass).
    pub fn list_all(&mut self, root: &Path, filter: &ListFilter) -> Result<ListedSessions> {
        let folder = filter.cwd.as_deref().map(cwd_folder_name);
        let Rows { text, rows } = self.sync(root, folder.as_deref())?;
        Ok(ListedSessions::of_rows(text, rows))
    }

    /// Walks the session folders (one folder when `folder` is set) and mends the rows; returns
    /// the rows as they now are (unordered).
    ///
    /// The rows are read on this thread while another walks the folders; when this thread is
    /// done with the rows it takes its share of the walk's `fstatat`s.
    fn sync(&mut self, root: &Path, folder: Option<&str>) -> Result<Rows> {
        self.sync_with(root, folder, false)
    }

    /// [`Catalog::sync`]; with `texts`, the message texts of every log read are indexed for
    /// search in the same read (a search after the catalog was removed reads each log once).
    fn sync_with(&mut self, root: &Path, folder: Option<&str>, texts: bool) -> Result<Rows> {
        let synced = self.sync_at_most(root, folder, texts, usize::MAX)?;
        synced.ok_or_else(|| SessionError::Io {
            action: "reading the session logs in",
            path: root.to_path_buf(),
            source: std::io::Error::other("more changed logs than there are"),
        })
    }

    /// [`Catalog::sync_with`], unless more than `most` logs changed since their rows were
    /// written: then nothing is read or written, and `None` says so (a search answers by
    /// scanning instead of reading them all first).
    fn sync_at_most(
        &mut self,
        root: &Path,
        folder: Option<&str>,
        texts: bool,
        most: usize,
    ) -> Result<Option<Rows>> {
        let (rows, walk) = walk(root, folder, || self.rows(folder));
        let Some((folders, seen)) = walk else {
            return Err(SessionError::Io {
                action: "walking the session folders in",
                path: root.to_path_buf(),
                source: std::io::Error::other("a stat thread stopped; listing reads every log"),
            });
        };
        let mut rows = rows?;
        let (mut stale, mut gone) = compare(&rows, &folders, seen);
        if stale.is_empty() && gone.is_empty() {
            return Ok(Some(rows));
        }
        if stale.len() > most {
            return Ok(None);
        }
        // In the order of their folders, not the walk's (its threads make it vary): rows and
        // search texts get their rowids in this order, and equal search ranks come out in
        // rowid order, so the same logs always give the same results in the same order.
        stale.sort_unstable_by(|(_, a), (_, b)| a.dir.cmp(&b.dir));
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        for &index in &gone {
            delete_row(&tx, rows.text.get(rows.rows[index].dir)).map_err(self.sql())?;
        }
        // Parsing the logs, not the row writes, is most of a first listing: many logs (a
        // catalog built anew) are parsed on every core while this thread writes.
        let mut fresh = Vec::with_capacity(stale.len());
        let sql = self.sql();
        par_stream(
            &stale,
            |(_, entry)| {
                if texts {
                    let (summary, texts) = read_log(&entry.path);
                    (summary, Some(texts))
                } else {
                    let summary = SessionSummary::of_file(&entry.path).map_err(|e| e.to_string());
                    (summary, None)
                }
            },
            |i, (summary, log_texts)| {
                let (index, entry) = &stale[i];
                upsert(&tx, entry, &summary, log_texts.is_some()).map_err(&sql)?;
                if let Some(log_texts) = log_texts {
                    replace_texts(&tx, &entry.dir, log_texts).map_err(&sql)?;
                }
                let row = row_of(&mut rows.text, entry, summary)
                    .map_err(too_big)
                    .map_err(&sql)?;
                fresh.push((*index, row));
                Ok(())
            },
        )?;
        tx.commit().map_err(self.sql())?;
        for (index, row) in fresh {
            match index {
                Some(index) => rows.rows[index] = row,
                None => rows.rows.push(row),
            }
        }
        // Highest index first, so each removal leaves the indices still to remove in place.
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for index in gone {
            rows.rows.swap_remove(index);
        }
        Ok(Some(rows))
    }

    /// Mends the rows of the given session folders only (`(working-directory folder, session
    /// folder)`), for a caller that knows which ones changed (catalog/watch.rs): each log is
    /// `stat`ed, read again when its key differs from its row, and the row of a folder without
    /// a log is deleted.
    fn sync_sessions(&mut self, root: &Path, sessions: &[(String, OsString)]) -> Result<()> {
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        for (folder, name) in sessions {
            let dir = format!("{folder}/{}", name.to_string_lossy());
            let session = root.join(folder).join(name);
            let found = log_in(&session).map(|(file, key)| Found {
                dir: dir.clone(),
                folder: folder.clone(),
                key,
                path: session.join(SESSION_FILE_NAMES[file]),
            });
            let row = tx
                .query_row(
                    "SELECT path, size, mtime_ns, ctime_ns, ino FROM entries WHERE dir = ?1",
                    [&dir],
                    |r| Ok((r.get::<_, String>(0)?, FileKey::read(r, 1)?)),
                )
                .optional()
                .map_err(self.sql())?;
            match (found, row) {
                (Some(found), Some((path, key)))
                    if key == found.key && *path == *found.path.to_string_lossy() => {}
                (Some(found), _) => {
                    let summary = SessionSummary::of_file(&found.path).map_err(|e| e.to_string());
                    upsert(&tx, &found, &summary, false).map_err(self.sql())?;
                }
                (None, Some(_)) => delete_row(&tx, &dir).map_err(self.sql())?,
                (None, None) => {}
            }
        }
        tx.commit().map_err(self.sql())
    }

    /// Every row (of `folder` when set), in table order, over one text.
    fn rows(&self, folder: Option<&str>) -> Result<Rows> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT dir, path, size, mtime_ns, ctime_ns, ino, id, cwd, title, created_at,
                 updated_at, turns, usage, parent, open, problem
                 FROM entries WHERE {}",
                filter_on("folder = ?1", folder)
            ))
            .map_err(self.sql())?;
        let mut rows = stmt.query([folder]).map_err(self.sql())?;
        let mut out = Rows {
            text: Text::with_capacity(1 << 20),
            rows: Vec::with_capacity(1 << 10),
        };
        while let Some(r) = rows.next().map_err(self.sql())? {
            let row = read_row(&mut out.text, r).map_err(self.sql())?;
            out.rows.push(row);
        }
        Ok(out)
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
            .prepare_cached(&format!(
                "SELECT path, id, cwd, title, created_at, updated_at, turns, usage, parent, open
                 FROM entries WHERE problem IS NULL AND {}
                 AND (?2 IS NULL OR updated_at < ?2 OR (updated_at = ?2 AND id > ?3))
                 ORDER BY updated_at DESC, id LIMIT ?4",
                filter_on("folder = ?1", folder)
            ))
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
                    usage_by_model: parse_usage(r.get_ref(7)?.as_str().unwrap_or("{}")),
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
            .prepare_cached(&format!(
                "SELECT path, updated_at, problem FROM entries
                 WHERE problem IS NOT NULL AND {} ORDER BY path",
                filter_on("folder = ?1", folder)
            ))
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
    /// and the texts of every changed log indexed again. Answered by scanning the logs
    /// instead ([`CatalogSearch::Scan`]) when `query` is shorter than three characters (a
    /// trigram index cannot look it up), and when the index is far behind the logs: the
    /// catalog has no rows yet (new, removed, rebuilt), or more than [`INLINE_INDEX_LIMIT`]
    /// logs' texts are not indexed. Indexing them all first would make the first search cost
    /// several times a scan (docs/decisions/0010-cold-search-scans.md); the caller indexes
    /// them apart ([`Catalog::build_index`], `dsh sessions reindex`).
    pub fn search(&mut self, root: &Path, query: &str, limit: usize) -> Result<CatalogSearch> {
        if query.chars().count() < 3 {
            return Ok(CatalogSearch::Scan { reindex: false });
        }
        let most = usize::try_from(INLINE_INDEX_LIMIT).unwrap_or(usize::MAX);
        if !self.has_rows()? || self.sync_at_most(root, None, true, most)?.is_none() {
            return Ok(CatalogSearch::Scan { reindex: true });
        }
        if self.unindexed()? > INLINE_INDEX_LIMIT {
            return Ok(CatalogSearch::Scan { reindex: true });
        }
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
        Ok(CatalogSearch::Hits(hits))
    }

    /// Brings everything a search reads up to date: the rows of every log, and the texts of
    /// every log whose texts are not indexed at its current state. What `dsh sessions
    /// reindex` runs, apart from the search that found the index behind.
    pub fn build_index(&mut self, root: &Path) -> Result<()> {
        self.sync_with(root, None, true)?;
        self.index_texts(root)
    }

    /// Whether the catalog holds any row.
    fn has_rows(&self) -> Result<bool> {
        self.conn
            .query_row("SELECT EXISTS (SELECT 1 FROM entries)", [], |r| r.get(0))
            .map_err(self.sql())
    }

    /// How many rows' texts are not indexed at the row's current state.
    fn unindexed(&self) -> Result<u64> {
        self.conn
            .query_row(
                &format!("SELECT count(*) FROM entries WHERE fts_key IS NOT {ROW_KEY}"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(self.sql())
    }

    /// Indexes the message texts of every row whose log changed since its texts were indexed.
    /// A damaged log is indexed up to the damage (as the scan searches it).
    fn index_texts(&mut self, root: &Path) -> Result<()> {
        let stale: Vec<(String, String, String)> = {
            let mut stmt = self
                .conn
                .prepare_cached(&format!(
                    "SELECT dir, path, {ROW_KEY} FROM entries WHERE fts_key IS NOT {ROW_KEY}
                     ORDER BY rowid"
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
        let sql = self.sql();
        // Logs are parsed on every core and their texts written here as they come.
        par_stream(
            &stale,
            |(_, path, _)| {
                if Path::new(path).is_absolute() {
                    log_texts(Path::new(path))
                } else {
                    log_texts(&root.join(path))
                }
            },
            |i, texts| {
                let (dir, _, key) = &stale[i];
                replace_texts(&tx, dir, texts).map_err(&sql)?;
                // The key the row had when this read began: a log that changed meanwhile has
                // a new row key by the next search, which indexes it again.
                tx.prepare_cached("UPDATE entries SET fts_key = ?2 WHERE dir = ?1")
                    .and_then(|mut s| s.execute(params![dir, key]))
                    .map_err(&sql)
                    .map(drop)
            },
        )?;
        tx.commit().map_err(self.sql())
    }

    /// True when the file still has this build's schema version (another process may have
    /// rebuilt it for another one).
    fn has_current_schema(&self) -> bool {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
            .is_ok_and(|v| v == SCHEMA_VERSION)
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

/// Session folders of one working-directory folder, to be `fstatat`ed by whichever thread
/// takes them from the [`StatQueue`].
struct Block {
    /// Index into the walk's list of working-directory folders.
    folder: usize,
    path: PathBuf,
    names: Vec<OsString>,
}

#[derive(Default)]
struct QueueState {
    blocks: Vec<Block>,
    /// True once the folders are all read: an empty queue is then the end of the walk.
    done: bool,
}

/// The blocks of a walk, filled by the thread that reads the folders and emptied by every
/// thread of the walk.
#[derive(Default)]
struct StatQueue {
    state: std::sync::Mutex<QueueState>,
    ready: std::sync::Condvar,
}

impl StatQueue {
    fn push(&self, block: Block) {
        self.state.lock_or_recover().blocks.push(block);
        self.ready.notify_one();
    }

    /// Takes blocks until the folders are all read and no block is left; the logs found.
    fn work(&self) -> Vec<Seen> {
        let mut seen = Vec::new();
        loop {
            let block = {
                let mut state = self.state.lock_or_recover();
                loop {
                    if let Some(block) = state.blocks.pop() {
                        break Some(block);
                    }
                    if state.done {
                        break None;
                    }
                    state = self
                        .ready
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            match block {
                Some(block) => stat_block(block, &mut seen),
                None => return seen,
            }
        }
    }
}

/// Marks the queue done when the thread reading the folders ends, by a panic too, so that no
/// thread of the walk waits for blocks that will never come.
struct Finish<'a>(&'a StatQueue);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.state.lock_or_recover().done = true;
        self.0.ready.notify_all();
    }
}

/// Every session folder under `root` (only `folder` when set) and the state of its log.
/// Unreadable folders are skipped, as listing always did.
///
/// `None` when a stat thread stopped before its work was done (the walk is then incomplete).
#[cfg(test)]
fn scan(root: &Path, folder: Option<&str>) -> Option<Walked> {
    walk(root, folder, || ()).1
}

/// What a walk found: the working-directory folders, and every session log with its key.
type Walked = (Vec<Folder>, Vec<Seen>);

/// Runs `meanwhile` on this thread while another reads the folders under `root` (only
/// `folder` when set), then helps `fstatat` the session logs; returns what `meanwhile`
/// returned and the walk: the folders and every session log with its key.
///
/// This is the part of every listing that grows with the history (docs/PERFORMANCE.md,
/// "Session listing"), so it is cheap: one `readdir` per working-directory folder, then one
/// `fstatat` per session relative to an open descriptor of its folder (a two-component path
/// walk instead of the whole path from `/`). The `fstatat`s are cut into blocks taken from one
/// queue by every thread of the walk as it gets to them: the reading thread as soon as the
/// folders are read, this thread as soon as `meanwhile` is done, and on machines of more than
/// two cores up to two helpers (a fixed share per thread was measured slower than one thread
/// on a loaded machine: a thread that does not get a core holds its share back).
///
/// The walk is `None` when a thread of it stopped (it has no reason to): its blocks were not
/// looked at, and rows of sessions it did not see would be deleted as gone.
fn walk<T>(
    root: &Path,
    folder: Option<&str>,
    meanwhile: impl FnOnce() -> T,
) -> (T, Option<Walked>) {
    let queue = StatQueue::default();
    let helpers = std::thread::available_parallelism()
        .map_or(1, |n| n.get().min(4))
        .saturating_sub(2);
    std::thread::scope(|scope| {
        let queue = &queue;
        let reader = scope.spawn(move || {
            let folders = read_folders(root, folder, queue);
            (folders, queue.work())
        });
        let helpers: Vec<_> = (0..helpers)
            .map(|_| scope.spawn(move || queue.work()))
            .collect();
        let value = meanwhile();
        let mut seen = queue.work();
        let mut complete = true;
        let mut folders = Vec::new();
        match reader.join() {
            Ok((read, more)) => {
                folders = read;
                seen.extend(more);
            }
            Err(_) => complete = false,
        }
        for helper in helpers {
            match helper.join() {
                Ok(more) => seen.extend(more),
                Err(_) => complete = false,
            }
        }
        (value, complete.then_some((folders, seen)))
    })
}

/// Reads the working-directory folders under `root` (only `folder` when set) and queues their
/// session folders in blocks; the folders. Marks the queue done when it returns.
fn read_folders(root: &Path, folder: Option<&str>, queue: &StatQueue) -> Vec<Folder> {
    let _finish = Finish(queue);
    let folder_of = |name: String, path: PathBuf| Folder {
        text: path.to_string_lossy().into_owned(),
        name,
        path,
    };
    let folders: Vec<Folder> = match folder {
        Some(name) => vec![folder_of(name.to_string(), root.join(name))],
        None => match fs::read_dir(root) {
            Ok(entries) => entries
                .flatten()
                .map(|e| folder_of(e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect(),
            Err(_) => return Vec::new(),
        },
    };
    for (index, folder) in folders.iter().enumerate() {
        let Ok(ids) = fs::read_dir(&folder.path) else {
            continue;
        };
        let mut names = Vec::with_capacity(SCAN_BLOCK);
        for id in ids.flatten() {
            // A plain file is no session folder (a symlink may point at one: it is followed,
            // as `stat` of the whole path would).
            if id.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            names.push(id.file_name());
            if names.len() == SCAN_BLOCK {
                let names = std::mem::replace(&mut names, Vec::with_capacity(SCAN_BLOCK));
                queue.push(Block {
                    folder: index,
                    path: folder.path.clone(),
                    names,
                });
            }
        }
        if !names.is_empty() {
            queue.push(Block {
                folder: index,
                path: folder.path.clone(),
                names,
            });
        }
    }
    folders
}

/// Session folders per block of the walk's queue.
const SCAN_BLOCK: usize = 128;

/// Windows: the logs of `block` by path, in the order of preference of
/// [`crate::jsonl::session_file_in`], appended to `out`.
#[cfg(windows)]
fn stat_block(block: Block, out: &mut Vec<Seen>) {
    for name in block.names {
        if let Some((file, key)) = log_in(&block.path.join(&name)) {
            out.push(Seen {
                folder: block.folder,
                name,
                file,
                key,
            });
        }
    }
}

/// The first log of the session folder `session` in the order of
/// [`crate::jsonl::session_file_in`]: its index in [`SESSION_FILE_NAMES`] and its key.
fn log_in(session: &Path) -> Option<(usize, FileKey)> {
    SESSION_FILE_NAMES
        .iter()
        .enumerate()
        .find_map(|(file, name)| {
            let meta = fs::metadata(session.join(name))
                .ok()
                .filter(fs::Metadata::is_file)?;
            Some((file, FileKey::of(&meta)))
        })
}

/// How far ahead of the oldest result not yet handed on [`par_stream`]'s threads may run.
const STREAM_WINDOW: usize = 64;

/// Runs `f` on every item on up to 8 threads, handing each result with its item's index to
/// `sink` on this thread in the items' order: logs are parsed on every core while one thread
/// writes what they gave, in the order one thread would have (search texts get their rowids,
/// the tie-break of equal ranks, as one thread gives them). Threads take the next item as they
/// finish one, but never one [`STREAM_WINDOW`] or more past the oldest result still awaited:
/// however long one log takes, at most that many results wait in memory. The first error of
/// `sink` stops the threads and is returned; a panic in `f` is raised again here.
pub(crate) fn par_stream<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
    mut sink: impl FnMut(usize, R) -> Result<()>,
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || items.len() < 64 {
        return items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| sink(i, f(item)));
    }
    let stream = Stream {
        state: std::sync::Mutex::new(StreamState {
            next: 0,
            due: 0,
            ready: BTreeMap::new(),
            stop: false,
        }),
        taken: std::sync::Condvar::new(),
        done: std::sync::Condvar::new(),
    };
    let (stream, f) = (&stream, &f);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(move || {
                // A panic in `f` stops the stream, so that no thread waits for its result.
                let _stop = Stop {
                    stream,
                    always: false,
                };
                while let Some(i) = stream.take(items.len()) {
                    let result = f(&items[i]);
                    stream.state.lock_or_recover().ready.insert(i, result);
                    stream.done.notify_one();
                }
            });
        }
        // Stops the threads however this returns (an error of `sink` included).
        let _stop = Stop {
            stream,
            always: true,
        };
        for due in 0..items.len() {
            let result = {
                let mut state = stream.state.lock_or_recover();
                loop {
                    if let Some(result) = state.ready.remove(&due) {
                        state.due = due + 1;
                        break result;
                    }
                    if state.stop {
                        // A thread panicked: the scope raises its panic when it ends.
                        return Ok(());
                    }
                    state = stream
                        .done
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            stream.taken.notify_all();
            sink(due, result)?;
        }
        Ok(())
    })
}

/// What [`par_stream`]'s threads share.
struct Stream<R> {
    state: std::sync::Mutex<StreamState<R>>,
    /// Signalled when a result is taken from `ready` (room in the window) or on stop.
    taken: std::sync::Condvar,
    /// Signalled when a result is put in `ready` or on stop.
    done: std::sync::Condvar,
}

struct StreamState<R> {
    /// The next item no thread has taken.
    next: usize,
    /// The oldest item whose result has not been handed on.
    due: usize,
    /// Results not yet handed on, by item.
    ready: BTreeMap<usize, R>,
    /// Set when the stream ends early: a failed `sink` or a panic.
    stop: bool,
}

impl<R> Stream<R> {
    /// The next item for a thread, once it is within the window; `None` when all are taken or
    /// the stream stopped.
    fn take(&self, len: usize) -> Option<usize> {
        let mut state = self.state.lock_or_recover();
        loop {
            if state.stop || state.next >= len {
                return None;
            }
            if state.next < state.due + STREAM_WINDOW {
                state.next += 1;
                return Some(state.next - 1);
            }
            state = self
                .taken
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// Stops a [`Stream`] when dropped: `always`, or during a panic.
struct Stop<'s, R> {
    stream: &'s Stream<R>,
    always: bool,
}

impl<R> Drop for Stop<'_, R> {
    fn drop(&mut self) {
        if self.always || std::thread::panicking() {
            self.stream.state.lock_or_recover().stop = true;
            self.stream.taken.notify_all();
            self.stream.done.notify_all();
        }
    }
}

/// A log's message texts as the FTS table holds them: (text, session id, seq, type).
type LogTexts = Vec<(String, String, i64, String)>;

/// One read of a log for both its row (its summary, or the problem that kept it from being
/// read) and its message texts (up to the damage, as [`log_texts`] gives them).
fn read_log(path: &Path) -> (std::result::Result<SessionSummary, String>, LogTexts) {
    let mut texts = Vec::new();
    let summary = SessionSummary::of_file_visiting(path, |header, env| {
        if let Some(message) = env.event.message() {
            let kind = env.event.event_type().to_string();
            texts.push((
                message_text(message),
                header.id.clone(),
                clamp(env.seq),
                kind,
            ));
        }
    })
    .map_err(|e| e.to_string());
    (summary, texts)
}

/// The message texts of a log, as the FTS table holds them: (text, session id, seq, type).
/// A damaged log gives its texts up to the damage; an unreadable one none.
fn log_texts(path: &Path) -> LogTexts {
    let mut out = Vec::new();
    if let Ok(mut reader) = LogReader::open(path) {
        let id = reader.header().id.clone();
        while let Ok(Some(env)) = reader.next_event() {
            if let Some(message) = env.event.message() {
                let kind = env.event.event_type().to_string();
                out.push((message_text(message), id.clone(), clamp(env.seq), kind));
            }
        }
    }
    out
}

/// Writes the texts of session folder `dir` in place of those it had, in one run of rowids
/// recorded in `text_spans`.
fn replace_texts(
    tx: &rusqlite::Transaction<'_>,
    dir: &str,
    texts: LogTexts,
) -> rusqlite::Result<()> {
    delete_texts(tx, dir)?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO texts (text, dir, id, seq, type) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut span: Option<(i64, i64)> = None;
    for (text, id, seq, kind) in texts {
        insert.execute(params![text, dir, id, seq, kind])?;
        let rowid = tx.last_insert_rowid();
        span = Some(span.map_or((rowid, rowid), |(lo, _)| (lo, rowid)));
    }
    if let Some((lo, hi)) = span {
        tx.prepare_cached("INSERT INTO text_spans (dir, lo, hi) VALUES (?1, ?2, ?3)")?
            .execute(params![dir, lo, hi])?;
    }
    Ok(())
}

/// Removes the row of session folder `dir` and its search text.
fn delete_row(tx: &rusqlite::Transaction<'_>, dir: &str) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM entries WHERE dir = ?1")?
        .execute([dir])?;
    delete_texts(tx, dir)
}

/// Removes the search text of session folder `dir`, by the rowids `text_spans` holds for it
/// (a lookup per row, where a `dir = ?` condition on the FTS table reads all of it).
fn delete_texts(tx: &rusqlite::Transaction<'_>, dir: &str) -> rusqlite::Result<()> {
    let span: Option<(i64, i64)> = tx
        .prepare_cached("DELETE FROM text_spans WHERE dir = ?1 RETURNING lo, hi")?
        .query_row([dir], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((lo, hi)) = span {
        tx.prepare_cached("DELETE FROM texts WHERE rowid BETWEEN ?1 AND ?2")?
            .execute([lo, hi])?;
    }
    Ok(())
}

/// The logs of `block`, each looked up relative to a descriptor of its folder, in the order
/// of preference of [`crate::jsonl::session_file_in`], appended to `out`.
#[cfg(unix)]
fn stat_block(block: Block, out: &mut Vec<Seen>) {
    // An unreadable folder is skipped, as listing always did.
    let Ok(dir) = File::open(&block.path) else {
        return;
    };
    out.reserve(block.names.len());
    let mut rel = Vec::with_capacity(128);
    for name in block.names {
        for (file, log) in SESSION_FILE_NAMES.iter().enumerate() {
            rel.clear();
            rel.extend_from_slice(name.as_bytes());
            rel.push(b'/');
            rel.extend_from_slice(log.as_bytes());
            rel.push(0);
            if let Some(key) = stat_file_at(&dir, &rel) {
                out.push(Seen {
                    folder: block.folder,
                    name,
                    file,
                    key,
                });
                break;
            }
        }
    }
}

/// `fstatat(dir, rel)` (following symlinks, like `fs::metadata`): the key of `rel` when it is a
/// regular file. `rel` ends with its NUL.
#[cfg(unix)]
fn stat_file_at(dir: &File, rel: &[u8]) -> Option<FileKey> {
    let rel = CStr::from_bytes_with_nul(rel).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `rel` is NUL-terminated, `dir` is an open descriptor for the whole call, and
    // `st` is written by the kernel before it is read (only when the call succeeded).
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), rel.as_ptr(), st.as_mut_ptr(), 0) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    Some(FileKey {
        size: st.st_size,
        mtime_ns: st
            .st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(st.st_mtime_nsec),
        ctime_ns: st
            .st_ctime
            .saturating_mul(1_000_000_000)
            .saturating_add(st.st_ctime_nsec),
        // As in `FileKey::of`: the bit pattern of the u64 inode number.
        ino: st.st_ino as i64,
    })
}

/// Writes the row of `entry`: its summary, or the problem that kept its log from being read.
/// With `indexed`, its texts were written from the same read: `fts_key` is its key (as
/// [`ROW_KEY`] computes it), else NULL (indexed by the next search).
fn upsert(
    conn: &Connection,
    entry: &Found,
    summary: &std::result::Result<SessionSummary, String>,
    indexed: bool,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR REPLACE INTO entries (dir, folder, path, size, mtime_ns, ctime_ns, ino, id,
         cwd, title, created_at, updated_at, turns, usage, parent, open, problem, fts_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
         CASE WHEN ?18 THEN ?4 || ':' || ?5 || ':' || ?6 || ':' || ?7 END)",
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
            indexed,
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
                indexed,
            ])?
        }
    };
    Ok(())
}

/// The `usage` column of a row; empty when it does not parse (as before: the numbers then come
/// back when the log is read again). The form serde writes is read by hand
/// ([`parse_usage_as_written`]); anything else goes to serde.
fn parse_usage(text: &str) -> BTreeMap<String, UsageTotals> {
    parse_usage_as_written(text).unwrap_or_else(|| serde_json::from_str(text).unwrap_or_default())
}

/// The `usage` column in exactly the form serde writes it (fields in declaration order, no
/// spaces, model ids without escapes), read without serde: a tenth of the listing thread's time
/// went to decoding this column (docs/PERFORMANCE.md, "Session listing", third pass). `None`
/// for any other text, which [`parse_usage`] then gives to serde.
fn parse_usage_as_written(text: &str) -> Option<BTreeMap<String, UsageTotals>> {
    let mut map = BTreeMap::new();
    // A repeated model id stops the visit: left to serde's rules.
    let written = visit_usage_as_written(text, |model, totals| {
        map.insert(model.to_string(), totals).is_none()
    });
    written.then_some(map)
}

/// Calls `visit` with each model and its totals of a `usage` column in exactly the form serde
/// writes it (see [`parse_usage_as_written`]), in text order, while `visit` returns true.
/// False when the text is not in that form (`visit` may have been called for a part of it)
/// or `visit` returned false.
fn visit_usage_as_written<'t>(
    text: &'t str,
    mut visit: impl FnMut(&'t str, UsageTotals) -> bool,
) -> bool {
    const FIELDS: [&str; 6] = [
        "\"inputTokens\":",
        ",\"outputTokens\":",
        ",\"cacheReadTokens\":",
        ",\"cacheWriteTokens\":",
        ",\"reasoningTokens\":",
        ",\"requests\":",
    ];
    let mut parse = || -> Option<()> {
        let mut rest = text.strip_prefix('{')?;
        if rest == "}" {
            return Some(());
        }
        loop {
            rest = rest.strip_prefix('"')?;
            let end = rest.find('"')?;
            let model = &rest[..end];
            if model.contains('\\') {
                return None;
            }
            rest = rest[end + 1..].strip_prefix(":{")?;
            let mut values = [0u64; 6];
            for (value, field) in values.iter_mut().zip(FIELDS) {
                rest = rest.strip_prefix(field)?;
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                // JSON numbers have no leading zeros; serde would refuse them, so must this.
                if digits == 0 || (digits > 1 && rest.starts_with('0')) {
                    return None;
                }
                *value = rest[..digits].parse().ok()?;
                rest = &rest[digits..];
            }
            rest = rest.strip_prefix('}')?;
            let usage = Usage {
                input_tokens: values[0],
                output_tokens: values[1],
                cache_read_tokens: values[2],
                cache_write_tokens: values[3],
                reasoning_tokens: values[4],
            };
            let totals = UsageTotals {
                usage,
                requests: values[5],
            };
            if !visit(model, totals) {
                return None;
            }
            match rest.strip_prefix(',') {
                Some(more) => rest = more,
                None => return (rest == "}").then_some(()),
            }
        }
    };
    parse().is_some()
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
    ///
    /// The throttle starts now, as if a record had just been made: the flush points between
    /// creating a session and its first model call (header, turn start, the prompt) must not
    /// open the catalog (in a new home: create it, with its fsyncs) on the way to the first
    /// request (docs/sessions.md, "The session catalog").
    pub(crate) fn new(home: &Path) -> CatalogLink {
        CatalogLink {
            home: home.to_path_buf(),
            conn: None,
            last: Some(Instant::now()),
            failed: false,
        }
    }

    /// True when a record is due: always at a turn end or close (`boundary`), else when the
    /// last record (or the link's creation) is older than a second.
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
        if meta.len() != expected_len {
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
            if upsert(conn, &entry, &Ok(summary), false).is_err() {
                self.failed = true;
                self.conn = None;
            }
        }
    }
}

/// Runs `use_it` on the catalog of `home`, rebuilding the catalog once when SQLite finds it
/// damaged midway.
fn with_catalog<T>(home: &Path, use_it: impl Fn(&mut Catalog) -> Result<T>) -> Result<T> {
    let mut catalog = Catalog::open(home)?;
    match use_it(&mut catalog) {
        Err(SessionError::Sqlite { source, .. }) if is_damage(&source) => {
            drop(catalog);
            remove_files(&home.join(CATALOG_FILE));
            use_it(&mut Catalog::open(home)?)
        }
        other => other,
    }
}

/// Searches through the catalog of `home` (see [`Catalog::search`]), rebuilding it once when
/// SQLite finds it damaged midway.
pub(crate) fn search_via_catalog(
    home: &Path,
    root: &Path,
    query: &str,
    limit: usize,
) -> Result<CatalogSearch> {
    // No catalog yet: nothing to open (or create) before the scan.
    if !home.join(CATALOG_FILE).exists() {
        return Ok(CatalogSearch::Scan { reindex: true });
    }
    with_catalog(home, |catalog| catalog.search(root, query, limit))
}

/// Builds the catalog's rows and search index of `home` ([`Catalog::build_index`]) unless
/// another process is already doing it (a lock beside the catalog); true when this call built
/// it.
pub fn build_index(home: &Path, root: &Path) -> Result<bool> {
    crate::private::create_dir_all(home).map_err(crate::error::io_err("creating", home))?;
    let lock_path = home.join(INDEX_LOCK_FILE);
    let lock = crate::private::open_options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(crate::error::io_err("opening", &lock_path))?;
    match crate::lock::lock_exclusive(&lock, &lock_path) {
        Ok(()) => {}
        Err(SessionError::Locked { .. }) => return Ok(false),
        Err(other) => return Err(other),
    }
    with_catalog(home, |catalog| catalog.build_index(root))?;
    Ok(true)
}

/// The lock `dsh sessions reindex` holds while it builds the index.
pub const INDEX_LOCK_FILE: &str = "catalog.index.lock";

/// Lists everything through the catalog of `home` as compact rows, rebuilding the catalog once
/// when SQLite finds it damaged midway.
pub(crate) fn list_all_via_catalog(
    home: &Path,
    root: &Path,
    filter: &ListFilter,
) -> Result<ListedSessions> {
    with_catalog(home, |catalog| catalog.list_all(root, filter))
}

/// Lists through the catalog of `home`, rebuilding it once when SQLite finds it damaged midway.
pub(crate) fn list_via_catalog(
    home: &Path,
    root: &Path,
    filter: &ListFilter,
    page: &ListPage,
) -> Result<Listing> {
    with_catalog(home, |catalog| catalog.list(root, filter, page))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The catalog's own decoding of the `usage` column reads exactly what serde's derive of
    /// `UsageTotals` wrote, and what it would read (missing counts are 0; a missing `requests`
    /// fails, so the column reads as empty, as it did).
    #[test]
    fn the_usage_column_reads_back_what_was_written() {
        let mut map = BTreeMap::new();
        for (k, model) in ["deepseek-v4-flash", "other \"quoted\" é", ""]
            .iter()
            .enumerate()
        {
            let n = k as u64 + 1;
            let mut totals = UsageTotals::default();
            totals.add(&Usage {
                input_tokens: 1000 * n,
                output_tokens: 7 * n,
                cache_read_tokens: u64::MAX - n,
                cache_write_tokens: 3,
                reasoning_tokens: n,
            });
            map.insert(model.to_string(), totals);
        }
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(parse_usage(&text), map);
        assert_eq!(parse_usage("{}"), BTreeMap::new());
        // What the hand-read path must take as written, or leave to serde with the same result.
        let mut plain = map.clone();
        plain.retain(|model, _| !model.contains('"'));
        assert_eq!(
            parse_usage_as_written(&serde_json::to_string(&plain).unwrap()),
            Some(plain)
        );
        // An escaped model id is left to serde.
        assert_eq!(parse_usage_as_written(&text), None);
        let full = r#""inputTokens":1,"outputTokens":2,"cacheReadTokens":3,"cacheWriteTokens":4,"reasoningTokens":5,"requests":6"#;
        for text in [
            r#"{"m":{"inputTokens":5,"requests":2}}"#,
            r#"{"m":{"inputTokens":5}}"#,
            "not json",
            r#"{"m":{"inputTokens":-1,"requests":1}}"#,
            "",
            "{",
            "{}",
            "{} ",
            &format!(r#"{{"m":{{{full}}}}}"#),
            &format!(r#"{{"m":{{{full}}},"n":{{{full}}}}}"#),
            &format!(r#"{{"m":{{{full}}},"m":{{{full}}}}}"#),
            &format!(r#"{{"m\"x":{{{full}}}}}"#),
            &format!(r#"{{"m\u00e9":{{{full}}}}}"#),
            &format!(r#"{{"é ü":{{{full}}}}}"#),
            &format!(r#"{{ "m":{{{full}}}}}"#),
            &format!(r#"{{"m":{{{full}}} }}"#),
            &format!(r#"{{"m":{{{full}}}}}x"#),
            &format!(r#"{{"m":{{{full}}},}}"#),
            &format!(r#"{{"m":{{{full},"extra":1}}}}"#),
            &format!(r#"{{"m":{{{}}}}}"#, full.replace(":1,", ":01,")),
            &format!(r#"{{"m":{{{}}}}}"#, full.replace(":1,", ":1.5,")),
            &format!(
                r#"{{"m":{{{}}}}}"#,
                full.replace(":1,", ":99999999999999999999,")
            ),
            r#"{"m":{"outputTokens":2,"inputTokens":1,"cacheReadTokens":3,"cacheWriteTokens":4,"reasoningTokens":5,"requests":6}}"#,
        ] {
            let derived: BTreeMap<String, UsageTotals> =
                serde_json::from_str(text).unwrap_or_default();
            assert_eq!(parse_usage(text), derived, "{text}");
        }
    }

    /// The compact rows' usage and cost (what `dsh sessions list` prints) equal those of the
    /// summary the same `usage` column reads back as, to the bit: models in order, out of
    /// order (the sum then goes through the map), repeated, unpriced, escaped, saturating, and
    /// texts serde writes differently or not at all.
    #[test]
    fn listed_usage_and_cost_equal_the_summarys() {
        let prices = dsh_llm::PriceTable::default_deepseek();
        let full = |n: u64| {
            format!(
                r#"{{"inputTokens":{n},"outputTokens":7,"cacheReadTokens":333,"cacheWriteTokens":4,"reasoningTokens":5,"requests":6}}"#
            )
        };
        let flash = |n| format!(r#""deepseek-v4-flash":{}"#, full(n));
        let pro = |n| format!(r#""deepseek-v4-pro":{}"#, full(n));
        let texts = [
            "{}".to_string(),
            format!("{{{}}}", flash(123_457)),
            format!("{{{},{}}}", flash(98_765), pro(1_234_567)),
            format!("{{{},{}}}", pro(1_234_567), flash(98_765)),
            format!("{{{},{}}}", flash(1), flash(2)),
            format!("{{{},{}}}", flash(1), full(9).replace('{', r#""other":{"#)),
            format!(r#"{{"a"b":{}}}"#, full(3)),
            format!("{{{},{}}}", flash(u64::MAX), pro(u64::MAX)),
            format!("{{ {} }}", flash(5)),
            r#"{"deepseek-v4-pro":{"requests":2,"inputTokens":11}}"#.to_string(),
            "not json".to_string(),
        ];
        for text in &texts {
            let summary = SessionSummary {
                id: "s".into(),
                title: None,
                cwd: "/w".into(),
                turns: 1,
                usage_by_model: parse_usage(text),
                created_at: 1,
                updated_at: 2,
                parent_session: None,
                location: "/l".into(),
                open: false,
            };
            let mut t = Text::default();
            let mut row = listed::row_of_summary(&mut t, &summary).unwrap();
            row.usage = t.push(text).unwrap();
            row.decoded = listed::decode(&t, row.usage);
            let listed = ListedSessions::of_rows(t, vec![row]);
            let s = listed.iter().next().unwrap();
            let (usage, cost) = s.usage_and_cost(&prices);
            assert_eq!(usage, summary.usage(), "{text}");
            assert_eq!(
                cost.map(f64::to_bits),
                summary.cost(&prices).map(f64::to_bits),
                "{text}"
            );
            assert_eq!(s.summary(), summary, "{text}");
        }
    }

    /// `par_stream` hands every result on in the items' order, however long each takes, with
    /// no thread ever more than the window ahead of the result awaited; an error of the sink
    /// ends it early, and a panic in a thread is raised on the caller's.
    #[test]
    fn the_stream_keeps_order_and_its_window() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let items: Vec<usize> = (0..2000).collect();
        let handed = AtomicUsize::new(0);
        let ahead = AtomicUsize::new(0);
        let mut order = Vec::new();
        par_stream(
            &items,
            |&i| {
                ahead.fetch_max(
                    i.saturating_sub(handed.load(Ordering::SeqCst)),
                    Ordering::SeqCst,
                );
                // Some items take much longer than the others.
                if i % 97 == 0 {
                    std::thread::sleep(Duration::from_millis(3));
                }
                i * 2
            },
            |i, result| {
                assert_eq!(result, i * 2);
                order.push(i);
                handed.store(i + 1, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(order, items);
        // An item is taken only below `due + STREAM_WINDOW`, and `due` is at most one past
        // the results handed on.
        assert!(ahead.load(Ordering::SeqCst) <= STREAM_WINDOW, "{ahead:?}");

        let done = AtomicUsize::new(0);
        let err = par_stream(
            &items,
            |_| done.fetch_add(1, Ordering::SeqCst),
            |i, _| {
                if i == 100 {
                    Err(SessionError::BadCursor("stop".into()))
                } else {
                    Ok(())
                }
            },
        );
        assert!(matches!(err, Err(SessionError::BadCursor(_))));
        assert!(done.load(Ordering::SeqCst) <= 101 + STREAM_WINDOW + 8);

        let panicked = std::panic::catch_unwind(|| {
            par_stream(
                &items,
                |&i| {
                    assert!(i != 500, "item 500");
                    i
                },
                |_, _| Ok(()),
            )
        });
        assert!(panicked.is_err());
    }

    /// The scan's `fstatat` key must equal the key a writer records from `File::metadata`
    /// (`FileKey::of`): if they differed, every row a writer recorded would look stale and be
    /// read again on each listing (never wrong, but the cost the catalog exists to avoid).
    #[test]
    fn the_scan_key_equals_the_writer_key() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("--w--");
        let session = folder.join("abc");
        fs::create_dir_all(&session).unwrap();
        let log = session.join("session.jsonl");
        fs::write(&log, b"{}\n").unwrap();
        let (folders, seen) = scan(dir.path(), None).unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(folders[seen[0].folder].name, "--w--");
        assert_eq!(seen[0].name, "abc");
        assert_eq!(SESSION_FILE_NAMES[seen[0].file], "session.jsonl");
        assert!(path_is(
            &log.to_string_lossy(),
            &folders[seen[0].folder].text,
            "abc",
            "session.jsonl"
        ));
        let meta = File::open(&log).unwrap().metadata().unwrap();
        assert_eq!(seen[0].key, FileKey::of(&meta));
    }

    /// The walk's blocks are taken by several threads; it must find exactly the logs there are, with the plain log
    /// preferred to a compressed one, skipping stray files and folders without a log.
    #[test]
    fn the_parallel_scan_finds_what_one_thread_finds() {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = Vec::new();
        for k in 0..(SCAN_BLOCK * 5 + 7) {
            let folder = format!("--w{}--", k % 5);
            let session = dir.path().join(&folder).join(format!("s{k:04}"));
            fs::create_dir_all(&session).unwrap();
            let name = match k % 7 {
                0 => "session.jsonl.zstd",
                1 => "session.jsonl.zst",
                2 => {
                    // Both: the plain log wins.
                    fs::write(session.join("session.jsonl.zstd"), b"z").unwrap();
                    "session.jsonl"
                }
                3 => {
                    // No log at all: not a session.
                    fs::write(dir.path().join(&folder).join(format!("stray{k}")), b"x").unwrap();
                    continue;
                }
                _ => "session.jsonl",
            };
            fs::write(session.join(name), format!("{k}\n")).unwrap();
            expected.push(session.join(name));
        }
        let paths = |(folders, seen): (Vec<Folder>, Vec<Seen>)| -> Vec<PathBuf> {
            seen.into_iter()
                .map(|s| {
                    folders[s.folder]
                        .path
                        .join(&s.name)
                        .join(SESSION_FILE_NAMES[s.file])
                })
                .collect()
        };
        let mut found = paths(scan(dir.path(), None).unwrap());
        found.sort();
        expected.sort();
        assert_eq!(found, expected);
        let w1 = dir.path().join("--w1--");
        let one_folder = paths(scan(dir.path(), Some("--w1--")).unwrap());
        assert!(one_folder.iter().all(|p| p.starts_with(&w1)));
        let in_w1 = expected.iter().filter(|p| p.starts_with(&w1)).count();
        assert_eq!(one_folder.len(), in_w1);
    }
}
