//! The JSONL store (docs/sessions.md, "Where sessions live"):
//! `$DSH_HOME/sessions/--<cwd>--/<id>/session.jsonl`.
//!
//! Writers take an exclusive `flock` on the session file, buffer appended lines in memory
//! (packing delta runs into dsh's packed rows), write the buffer when it grows past 1 MiB and
//! at the flush points of [`crate::is_flush_point`], and `fdatasync` on
//! [`SessionWriter::flush`] and at the sync points of [`crate::is_sync_point`]. A new log's
//! header is written at creation and synced, with the folder's new entry, at the first flush
//! (docs/sessions.md, "Durability and crash repair").
//!
//! Resume sets a torn last line aside: its bytes are copied to
//! `session.jsonl.torn-<offset>` next to the log and the file is cut back to the last
//! complete line, so the next append does not glue onto half a line. A torn line is not
//! history (it was never completely written, hence never flushed).
//!
//! dsh's zstd-compressed logs (`session.jsonl.zstd`, also `.jsonl.zst`) are found, listed and
//! read like plain ones. Resuming one never writes into the compressed file: the log is
//! decompressed once into a plain `session.jsonl` beside it (written whole, fsynced, renamed
//! into place), and appends go there; from then on the plain file is the session and the
//! compressed one stays as dsh wrote it (docs/sessions.md, "Compressed logs").

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::catalog::CatalogLink;
use crate::envelope::{Envelope, SessionHeader};
use crate::error::{io_err, Result, SessionError};
use crate::listing::SessionSummary;
use crate::lock::lock_exclusive;
use crate::packed::PackRun;
use crate::projection::Projector;
use crate::reader::{is_zstd_path, load_file, open_input, LoadedLog, LogReader};
use crate::state::SessionTracker;
use crate::store::{
    cwd_folder_name, finish_resume, is_flush_point, is_sync_point, pick_id, session_path,
    ListFilter, ListPage, Listing, Resumed, SearchHit, SessionStore, SessionWriter,
};

const WRITE_THRESHOLD: usize = 1 << 20;

/// The locked append side of one JSONL session file.
pub struct JsonlWriter {
    path: PathBuf,
    file: File,
    header: SessionHeader,
    tracker: SessionTracker,
    buf: Vec<u8>,
    run: Option<PackRun>,
    pack: bool,
    broken: bool,
    /// Bytes of the file as this writer left it (header and every written buffer).
    len: u64,
    /// Where the writer records its summary, when it belongs to a store (docs/sessions.md,
    /// "The session catalog").
    catalog: Option<CatalogLink>,
    /// The folder of a new log whose entry is not synced yet (done at the first flush).
    unsynced_dir: Option<PathBuf>,
    /// `len` at this writer's last sync (`None` before its first): a flush with nothing written
    /// since has nothing to sync and skips the `fdatasync` (docs/PERFORMANCE.md, "Step 1:
    /// fixed costs").
    synced_len: Option<u64>,
    /// Everything appended since the last sync is `step/start` lines: the step begun right
    /// after the previous one's end was synced. The flush before its model call need not sync
    /// them (docs/sessions.md, "Durability and crash repair").
    only_step_starts_since_sync: bool,
    /// The sync [`SessionWriter::flush_in_background`] started, which every later call waits
    /// for before it does anything else.
    syncing: Option<BackgroundSync>,
}

/// A sync running on the syncer thread: of a new log up to `len`, and of its folder's entry
/// (only a new log's first flush runs there, see `flush_in_background`).
struct BackgroundSync {
    len: u64,
    done: std::sync::mpsc::Receiver<Result<()>>,
}

/// One sync for the syncer thread, and where its outcome goes.
struct SyncJob {
    file: File,
    path: PathBuf,
    dir: Option<PathBuf>,
    done: std::sync::mpsc::Sender<Result<()>>,
}

/// The process's syncer thread, started on first use and kept: a thread started per model call
/// cost more than the sync it saved when the log is on tmpfs (docs/PERFORMANCE.md, "The sync
/// beside the request"). `None` when no thread could be started.
fn syncer() -> Option<&'static std::sync::Mutex<std::sync::mpsc::Sender<SyncJob>>> {
    static SYNCER: std::sync::OnceLock<Option<std::sync::Mutex<std::sync::mpsc::Sender<SyncJob>>>> =
        std::sync::OnceLock::new();
    SYNCER
        .get_or_init(|| {
            let (jobs, queue) = std::sync::mpsc::channel::<SyncJob>();
            std::thread::Builder::new()
                .name("dsh-log-sync".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    for job in queue {
                        let outcome = sync_log(&job.file, &job.path, job.dir.as_deref());
                        // A writer that stopped waiting has nothing to be told.
                        let _ = job.done.send(outcome);
                    }
                })
                .ok()
                .map(|_| std::sync::Mutex::new(jobs))
        })
        .as_ref()
}

/// Syncs the log (through `file`, a second descriptor of it) and then, for a new log, its
/// folder's entry, as [`SessionWriter::flush`] does.
fn sync_log(file: &File, path: &Path, dir: Option<&Path>) -> Result<()> {
    file.sync_data()
        .map_err(io_err("syncing session log", path))?;
    if let Some(dir) = dir {
        if let Ok(dir_handle) = File::open(dir) {
            // Makes the new log's directory entry durable, which the file's own sync does
            // not cover; a failure is reported (and tried again at the next flush).
            dir_handle
                .sync_all()
                .map_err(io_err("syncing session folder", dir))?;
        }
    }
    Ok(())
}

impl JsonlWriter {
    /// Creates a new session file at `path` (its folder is created; the file must not exist),
    /// locks it and writes the header. The header and the folder's new entry are synced by the
    /// first flush, which the loop does before its first model call: nothing leaves dsh before
    /// then (docs/sessions.md, "Durability and crash repair").
    pub fn create(path: &Path, header: SessionHeader) -> Result<JsonlWriter> {
        let dir = path.parent().unwrap_or(Path::new("."));
        crate::private::create_dir_all(dir).map_err(io_err("creating session folder", dir))?;
        let file = crate::private::open_options()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(io_err("creating session log", path))?;
        lock_exclusive(&file, path)?;
        let mut writer = JsonlWriter {
            path: path.to_path_buf(),
            file,
            header,
            tracker: SessionTracker::new(),
            buf: Vec::new(),
            run: None,
            pack: true,
            broken: false,
            len: 0,
            catalog: None,
            unsynced_dir: None,
            synced_len: None,
            only_step_starts_since_sync: false,
            syncing: None,
        };
        writer
            .header
            .encode_line(&mut writer.buf)
            .map_err(|e| SessionError::Encode {
                event_type: "session".into(),
                reason: e.to_string(),
            })?;
        // In the file now (readers, and a process killed before the first flush, see it).
        writer.write_buf()?;
        writer.unsynced_dir = Some(dir.to_path_buf());
        Ok(writer)
    }

    /// Opens an existing session file for appending: locks it, reads it through (checking every
    /// line), sets a torn tail aside, and returns the writer with the history projected. A
    /// zstd-compressed log is continued in its plain copy (see [`plain_continuation`]); the
    /// writer's [`JsonlWriter::path`] is then that copy.
    pub fn open(path: &Path) -> Result<(JsonlWriter, Projector)> {
        let plain;
        let path = if is_zstd_path(path) {
            plain = plain_continuation(path)?;
            plain.as_path()
        } else {
            path
        };
        let mut file = crate::private::open_options()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io_err("opening session log", path))?;
        lock_exclusive(&file, path)?;
        let mut reader = LogReader::open(path)?;
        let mut tracker = SessionTracker::new();
        let mut history = Projector::new();
        while let Some(env) = reader.next_event()? {
            tracker.push(&env);
            history.push_owned(env)?;
        }
        let header = reader.header().clone();
        let valid_len = reader.valid_len();
        let mut len = valid_len;
        if let Some(torn) = reader.torn_tail() {
            set_aside(&mut file, path, torn.offset, torn.len)?;
            file.set_len(torn.offset)
                .map_err(io_err("cutting torn tail of", path))?;
            file.sync_data().map_err(io_err("syncing", path))?;
        } else {
            len = file.metadata().map_err(io_err("reading", path))?.len();
        }
        let mut writer = JsonlWriter {
            path: path.to_path_buf(),
            file,
            header,
            tracker,
            buf: Vec::new(),
            run: None,
            pack: true,
            broken: false,
            len,
            catalog: None,
            unsynced_dir: None,
            synced_len: None,
            only_step_starts_since_sync: false,
            syncing: None,
        };
        if !ends_with_newline(&mut writer.file, path, valid_len)? {
            writer.buf.push(b'\n');
        }
        Ok((writer, history))
    }

    /// Turns packing of delta runs on or off (on by default). Unpacked files are larger but
    /// each delta is written as soon as the buffer is.
    pub fn set_packing(&mut self, pack: bool) {
        self.pack = pack;
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the writer record its summary in the catalog of the store at `home` (at turn
    /// ends, when dropped, and at most once a second at other flush points).
    pub(crate) fn link_catalog(&mut self, home: &Path) {
        self.catalog = Some(CatalogLink::new(home));
    }

    /// Records the summary in the catalog when one is linked and a record is due; only called
    /// right after a successful flush (the file then holds every appended event).
    fn record(&mut self, boundary: bool) {
        if let Some(link) = self.catalog.as_mut() {
            if link.due(boundary) && self.buf.is_empty() && self.run.is_none() {
                link.record(
                    &self.path,
                    &self.file,
                    self.len,
                    &self.header,
                    &self.tracker,
                );
            }
        }
    }

    fn encode_error(env: &Envelope, e: serde_json::Error) -> SessionError {
        SessionError::Encode {
            event_type: env.event.event_type().to_string(),
            reason: e.to_string(),
        }
    }

    fn close_run(&mut self) -> Result<()> {
        if let Some(run) = self.run.take() {
            run.encode(&mut self.buf)
                .map_err(|e| SessionError::Encode {
                    event_type: "assistant/chunk".into(),
                    reason: e.to_string(),
                })?;
        }
        Ok(())
    }

    fn write_buf(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            // Part of the buffer may be in the file: a torn tail the next resume sets aside.
            self.broken = true;
            return Err(io_err("writing session log", &self.path)(e));
        }
        self.len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Waits for the sync [`SessionWriter::flush_in_background`] started, if one runs, and
    /// takes in its outcome: what it synced counts as synced, and its failure is this call's.
    fn settle(&mut self) -> Result<()> {
        let Some(sync) = self.syncing.take() else {
            return Ok(());
        };
        let outcome = sync.done.recv().unwrap_or_else(|_| {
            Err(SessionError::Io {
                action: "syncing session log",
                path: self.path.clone(),
                source: std::io::Error::other("the sync thread stopped"),
            })
        });
        outcome?;
        self.synced_len = Some(sync.len);
        self.only_step_starts_since_sync = true;
        self.unsynced_dir = None;
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        if self.broken {
            return Err(SessionError::Io {
                action: "appending to session log (an earlier write failed; resume the session to repair it)",
                path: self.path.clone(),
                source: std::io::Error::other("writer unusable after a failed write"),
            });
        }
        Ok(())
    }
}

/// The plain log that continues the zstd-compressed log at `zstd_path`: `session.jsonl.zstd`
/// -> `session.jsonl` in the same folder. Made on first use, under a lock on the compressed
/// file, by decompressing it whole into a temporary file that is fsynced and renamed into place,
/// so the plain log is either absent or complete; an existing one is returned as is (it already
/// holds everything the compressed log holds, and what was appended since). The compressed
/// file is never changed.
pub fn plain_continuation(zstd_path: &Path) -> Result<PathBuf> {
    let plain = plain_name(zstd_path);
    let guard = File::open(zstd_path).map_err(io_err("opening session log", zstd_path))?;
    lock_exclusive(&guard, zstd_path)?;
    if plain.is_file() {
        return Ok(plain);
    }
    let dir = zstd_path.parent().unwrap_or(Path::new("."));
    // A new file at an unpredictable name, never a planted one (docs/SECURITY.md, "Planted
    // configuration and workspace trust").
    let (tmp, mut out) = crate::private::create_temp_beside(&plain, "from-zstd")
        .map_err(io_err("creating a temporary file beside", &plain))?;
    let result = (|| -> Result<()> {
        let mut input = open_input(zstd_path)?;
        std::io::copy(&mut input, &mut out).map_err(io_err("decompressing", zstd_path))?;
        out.sync_all().map_err(io_err("syncing", &tmp))?;
        fs::rename(&tmp, &plain).map_err(io_err("renaming into place", &plain))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing session folder", dir))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| plain)
}

/// `x.jsonl.zstd` / `x.jsonl.zst` -> `x.jsonl` (any other name gets `.jsonl` added).
fn plain_name(zstd_path: &Path) -> PathBuf {
    let stem = zstd_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned());
    let name = match stem {
        Some(stem) if stem.ends_with(".jsonl") => stem,
        Some(stem) => format!("{stem}.jsonl"),
        None => "session.jsonl".to_string(),
    };
    zstd_path.with_file_name(name)
}

/// The file names a session folder's log may have, in order of preference: the plain log
/// (which, when a compressed one is beside it, is that log's continuation), then dsh's
/// compressed spellings.
pub(crate) const SESSION_FILE_NAMES: [&str; 3] =
    ["session.jsonl", "session.jsonl.zstd", "session.jsonl.zst"];

/// The session log in the session folder `dir`: `session.jsonl`, else dsh's compressed
/// `session.jsonl.zstd` or `session.jsonl.zst` (docs/sessions.md, "Compressed logs").
pub fn session_file_in(dir: &Path) -> Option<PathBuf> {
    SESSION_FILE_NAMES
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

/// Copies the torn bytes to a side file so nothing read from disk is destroyed.
fn set_aside(file: &mut File, path: &Path, offset: u64, len: u64) -> Result<()> {
    let mut torn = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .map_err(io_err("reading torn tail of", path))?;
    Read::by_ref(file)
        .take(len)
        .read_to_end(&mut torn)
        .map_err(io_err("reading torn tail of", path))?;
    let side = path.with_file_name(format!(
        "{}.torn-{offset}",
        path.file_name()
            .map_or_else(|| "session.jsonl".into(), |n| n.to_string_lossy())
    ));
    // Never through a planted symlink, never over an older side file.
    let mut out = match crate::private::open_options()
        .write(true)
        .create_new(true)
        .open(&side)
    {
        Ok(out) => out,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::private::create_temp_beside(&side, "again")
                .map_err(io_err("saving torn tail beside", &side))?
                .1
        }
        Err(err) => return Err(io_err("saving torn tail to", &side)(err)),
    };
    out.write_all(&torn)
        .map_err(io_err("saving torn tail to", &side))?;
    Ok(())
}

fn ends_with_newline(file: &mut File, path: &Path, len: u64) -> Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))
        .map_err(io_err("reading", path))?;
    file.read_exact(&mut last)
        .map_err(io_err("reading", path))?;
    Ok(last[0] == b'\n')
}

impl SessionWriter for JsonlWriter {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn state(&self) -> &SessionTracker {
        &self.tracker
    }

    fn blobs(&self) -> crate::blobs::BlobStore {
        crate::blobs::BlobStore::new(blob_dir_of(&self.path))
    }

    fn append_verbatim(&mut self, mut env: Envelope) -> Result<u64> {
        self.append_kept(&mut env)
    }

    /// Encodes the event from the caller's envelope: no copy of it is made.
    fn append_kept(&mut self, env: &mut Envelope) -> Result<u64> {
        self.check_usable()?;
        // Nothing is logged after a model call before what preceded the call is durable.
        self.settle()?;
        if !matches!(env.event, crate::event::Event::StepStart(_)) {
            self.only_step_starts_since_sync = false;
        }
        // An event's image files are written before the event (docs/sessions.md, "Images").
        if crate::blobs::carries_images(&env.event) {
            self.blobs().store_event(&env.event)?;
        }
        env.seq = self.tracker.next_seq();
        self.tracker.push(env);
        let seq = env.seq;
        let packed = self.pack && self.run.as_mut().is_some_and(|run| run.push(env));
        if !packed {
            self.close_run()?;
            match PackRun::start(env).filter(|_| self.pack) {
                Some(run) => self.run = Some(run),
                None => env
                    .encode_line(&mut self.buf)
                    .map_err(|e| Self::encode_error(env, e))?,
            }
        }
        if self.buf.len() >= WRITE_THRESHOLD {
            self.write_buf()?;
        }
        if is_sync_point(&env.event) {
            self.flush()?;
            self.record(matches!(env.event, crate::event::Event::TurnEnd(_)));
        } else if is_flush_point(&env.event) {
            // A turn or step start: written through, synced by the flush before the model call.
            self.write_through()?;
        }
        Ok(seq)
    }

    fn write_through(&mut self) -> Result<()> {
        self.check_usable()?;
        self.settle()?;
        self.close_run()?;
        self.write_buf()
    }

    fn flush(&mut self) -> Result<()> {
        self.write_through()?;
        // Every byte this writer wrote is durable already (a sync point followed by the loop's
        // own flush, e.g. `tool/started`): syncing again would change nothing on disk. Nor is
        // there anything to make durable when all that came after the last sync is `step/start`
        // (the step after a synced `step/end`): no model sees it, and a log that lost it ends
        // with a closed step, which resumes as if the next had not begun. The flag is set by
        // each sync and cleared by any other append, so it covers "nothing written since" too.
        if self.synced_len.is_some()
            && self.only_step_starts_since_sync
            && self.unsynced_dir.is_none()
        {
            self.record(false);
            return Ok(());
        }
        sync_log(&self.file, &self.path, self.unsynced_dir.as_deref())?;
        self.synced_len = Some(self.len);
        self.only_step_starts_since_sync = true;
        self.unsynced_dir = None;
        self.record(false);
        Ok(())
    }

    fn flush_in_background(&mut self) -> Result<()> {
        // Only a new log's first flush, which syncs the log and its folder's entry, runs beside
        // the request (the decision of docs/decisions/0009-start-up-floors.md). Later ones sync
        // here. The ~2 ms at step 1,000 once blamed on the background sync was the request
        // body's serialisation changing speed from build to build (docs/PERFORMANCE.md, "The
        // history bytes cache"); moving later syncs off the path is a durability decision of
        // its own, not taken.
        if self.unsynced_dir.is_none() {
            return self.flush();
        }
        self.write_through()?;
        let file = self
            .file
            .try_clone()
            .map_err(io_err("syncing session log", &self.path))?;
        let (done, outcome) = std::sync::mpsc::channel();
        let job = SyncJob {
            file,
            path: self.path.clone(),
            dir: self.unsynced_dir.clone(),
            done,
        };
        let queued = syncer().is_some_and(|jobs| {
            jobs.lock()
                .map(|jobs| jobs.send(job).is_ok())
                .unwrap_or(false)
        });
        if !queued {
            // No syncer thread to be had: sync here, as `flush` does.
            return self.flush();
        }
        self.syncing = Some(BackgroundSync {
            len: self.len,
            done: outcome,
        });
        Ok(())
    }
}

impl Drop for JsonlWriter {
    fn drop(&mut self) {
        // Best effort: an error here cannot be reported; callers that care flush first. A
        // background sync is waited for by `flush`.
        if !self.broken && self.flush().is_ok() {
            self.record(true);
        }
    }
}

/// The JSONL store rooted at a dsh home directory.
#[derive(Debug, Clone)]
pub struct JsonlStore {
    home: PathBuf,
    /// The last search found the catalog's index far behind the logs and scanned them
    /// ([`SessionStore::index_behind`]).
    index_behind: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl JsonlStore {
    /// The store under `home` (`$DSH_HOME`); nothing is created until a session is.
    pub fn new(home: &Path) -> JsonlStore {
        JsonlStore {
            home: home.to_path_buf(),
            index_behind: std::sync::Arc::default(),
        }
    }

    /// `$home/sessions`.
    pub fn root(&self) -> PathBuf {
        self.home.join("sessions")
    }

    /// Every top-level session file: `(cwd folder, id, path)`.
    fn all_sessions(&self, cwd: Option<&str>) -> Result<Vec<(String, PathBuf)>> {
        let root = self.root();
        let mut out = Vec::new();
        let folders = match fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err("listing", &root)(e)),
        };
        let wanted = cwd.map(cwd_folder_name);
        for folder in folders.flatten() {
            let name = folder.file_name().to_string_lossy().into_owned();
            if wanted.as_ref().is_some_and(|w| *w != name) {
                continue;
            }
            let Ok(ids) = fs::read_dir(folder.path()) else {
                continue;
            };
            for id in ids.flatten() {
                if let Some(path) = session_file_in(&id.path()) {
                    out.push((id.file_name().to_string_lossy().into_owned(), path));
                }
            }
        }
        Ok(out)
    }

    /// The log of the session whose id is exactly `id`, found by looking for a folder of that
    /// name in each working directory's folder rather than reading them all: resuming by id
    /// costs one `stat` per working directory, not one per stored session (docs/sessions.md,
    /// "Finding a session"). The first folder in the walk's own order wins, as in
    /// [`JsonlStore::find`]'s walk. `None` when no folder holds it (or `id` is no plain name).
    fn exact_session(&self, id: &str) -> Option<PathBuf> {
        if id.is_empty() || id == "." || id == ".." || id.contains(['/', '\\', '\0']) {
            return None;
        }
        fs::read_dir(self.root())
            .ok()?
            .flatten()
            .find_map(|folder| session_file_in(&folder.path().join(id)))
    }

    /// The session file for `key`: a path to a `session.jsonl` or `session.jsonl.zstd` (or
    /// their folder), an id, or a unique id prefix.
    pub fn find(&self, key: &str) -> Result<PathBuf> {
        let as_path = Path::new(key);
        if key.contains('/') || key.ends_with(".jsonl") || is_zstd_path(as_path) {
            if as_path.is_file() {
                return Ok(as_path.to_path_buf());
            }
            return session_file_in(as_path).ok_or_else(|| SessionError::NotFound(key.to_string()));
        }
        if let Some(path) = self.exact_session(key) {
            return Ok(path);
        }
        let all = self.all_sessions(None)?;
        let id = pick_id(key, all.iter().map(|(id, _)| id.clone()))?;
        all.into_iter()
            .find(|(candidate, _)| *candidate == id)
            .map(|(_, path)| path)
            .ok_or_else(|| SessionError::NotFound(key.to_string()))
    }

    /// The listing made by reading every log (what the catalog must always agree with).
    pub fn scan_list(&self, filter: &ListFilter) -> Result<Listing> {
        let mut listing = Listing::default();
        for (_, path) in self.all_sessions(filter.cwd.as_deref())? {
            match SessionSummary::of_file(&path) {
                Ok(summary) => listing.sessions.push(summary),
                Err(e) => {
                    listing.problems.push(e.to_string());
                    listing.damaged.push(crate::store::DamagedSession {
                        path: path.display().to_string(),
                        updated_at: std::fs::metadata(&path)
                            .and_then(|m| m.modified())
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_millis() as u64),
                        problem: e.to_string(),
                    });
                }
            }
        }
        listing
            .sessions
            .sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        Ok(listing)
    }

    /// Searches every log's message texts for `query` (case-insensitive), at most `limit` hits
    /// in folder order, without the catalog: what a search answers when the catalog's index is
    /// far behind (docs/decisions/0010-cold-search-scans.md). Logs are read on every core; a
    /// plain log whose bytes do not hold the query (ASCII letters compared without case) is
    /// not parsed, so a search costs little more than reading the logs.
    pub fn scan_search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>> {
        let needle = query.to_lowercase();
        let check = RawCheck::new(query);
        let sessions = self.all_sessions(None)?;
        let mut hits = Vec::new();
        crate::catalog::par_stream(
            &sessions,
            |(_, path)| search_log(path, &needle, check.as_ref(), limit),
            |_, found| {
                let room = limit.saturating_sub(hits.len());
                hits.extend(found.into_iter().take(room));
                Ok(())
            },
        )?;
        Ok(hits)
    }
}

/// A check of a log's raw bytes that can only rule a log out: when the query's text cannot
/// appear in the log's bytes, no message of it can hold the query. `None` when the bytes
/// cannot decide: a query with characters JSON writes escaped (`"`, `\`, controls), or with
/// non-ASCII letters, whose other cases the check would miss.
struct RawCheck(aho_corasick::AhoCorasick);

impl RawCheck {
    fn new(query: &str) -> Option<RawCheck> {
        let plain = query
            .chars()
            .all(|c| c.is_ascii() && !c.is_ascii_control() && c != '"' && c != '\\');
        if !plain || query.is_empty() {
            return None;
        }
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build([query])
            .ok()
            .map(RawCheck)
    }

    /// False when `path` is a plain log whose bytes do not hold the query. A compressed log,
    /// or a plain one continuing a compressed one beside it, is left to the parser.
    fn may_hold(&self, path: &Path) -> bool {
        let plain = path
            .file_name()
            .is_some_and(|name| name == SESSION_FILE_NAMES[0]);
        let continues = SESSION_FILE_NAMES[1..]
            .iter()
            .any(|name| path.with_file_name(name).exists());
        if !plain || continues {
            return true;
        }
        match fs::read(path) {
            Ok(bytes) => self.0.is_match(&bytes),
            Err(_) => true,
        }
    }
}

/// The hits of one log (at most `limit`); a damaged log is searched up to the damage (listing
/// reports the damage).
fn search_log(path: &Path, needle: &str, check: Option<&RawCheck>, limit: usize) -> Vec<SearchHit> {
    if check.is_some_and(|check| !check.may_hold(path)) {
        return Vec::new();
    }
    let Ok(mut reader) = LogReader::open(path) else {
        return Vec::new();
    };
    let id = reader.header().id.clone();
    let mut hits = Vec::new();
    while let Ok(Some(env)) = reader.next_event() {
        if hits.len() >= limit {
            break;
        }
        if let Some(hit) = crate::listing::match_event(&id, &env, needle) {
            hits.push(hit);
        }
    }
    hits
}

/// `blobs/` in the folder of the session file `path`.
pub(crate) fn blob_dir_of(path: &Path) -> PathBuf {
    path.parent()
        .map_or_else(|| PathBuf::from("blobs"), |dir| dir.join("blobs"))
}

impl SessionStore for JsonlStore {
    fn blobs(&self, key: &str) -> Result<crate::blobs::BlobStore> {
        Ok(crate::blobs::BlobStore::new(blob_dir_of(&self.find(key)?)))
    }

    fn create_with_header(&self, header: SessionHeader) -> Result<Box<dyn SessionWriter>> {
        let path = session_path(&self.home, &header.cwd, &header.id);
        let mut writer = JsonlWriter::create(&path, header)?;
        writer.link_catalog(&self.home);
        Ok(Box::new(writer))
    }

    fn load(&self, key: &str) -> Result<LoadedLog> {
        load_file(&self.find(key)?)
    }

    fn resume(&self, key: &str) -> Result<Resumed> {
        let (mut writer, history) = JsonlWriter::open(&self.find(key)?)?;
        writer.link_catalog(&self.home);
        finish_resume(Box::new(writer), history)
    }

    fn list(&self, filter: &ListFilter) -> Result<Listing> {
        self.list_page(filter, &ListPage::default())
    }

    /// Reads the catalog (docs/sessions.md, "The session catalog"), which heals itself from
    /// the logs first; when the catalog cannot be used at all, reads every log instead.
    fn list_page(&self, filter: &ListFilter, page: &ListPage) -> Result<Listing> {
        match crate::catalog::list_via_catalog(&self.home, &self.root(), filter, page) {
            Err(SessionError::BadCursor(cursor)) => Err(SessionError::BadCursor(cursor)),
            Ok(listing) => Ok(listing),
            Err(_) => self.scan_list(filter)?.into_page(page),
        }
    }

    /// [`JsonlStore::list_page`]'s whole listing, kept as the catalog's compact rows.
    fn list_all(&self, filter: &ListFilter) -> Result<crate::catalog::ListedSessions> {
        match crate::catalog::list_all_via_catalog(&self.home, &self.root(), filter) {
            Ok(listed) => Ok(listed),
            Err(_) => Ok(crate::catalog::ListedSessions::from_listing(
                self.scan_list(filter)?,
            )),
        }
    }

    /// Searches the catalog's full-text index (docs/sessions.md, "The session catalog") when
    /// it can be used and the query is long enough for it, else every log.
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>> {
        self.index_behind
            .store(false, std::sync::atomic::Ordering::Relaxed);
        match crate::catalog::search_via_catalog(&self.home, &self.root(), query, limit) {
            Ok(crate::catalog::CatalogSearch::Hits(hits)) => return Ok(hits),
            Ok(crate::catalog::CatalogSearch::Scan { reindex }) => {
                self.index_behind
                    .store(reindex, std::sync::atomic::Ordering::Relaxed);
            }
            Err(_) => {}
        }
        self.scan_search(query, limit)
    }

    fn index_behind(&self) -> bool {
        self.index_behind.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn remove(&self, key: &str) -> Result<()> {
        let path = self.find(key)?;
        let file = File::open(&path).map_err(io_err("opening session log", &path))?;
        lock_exclusive(&file, &path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::remove_dir_all(dir).map_err(io_err("removing session folder", dir))
    }

    fn resolve(&self, key: &str) -> Result<String> {
        let path = self.find(key)?;
        Ok(LogReader::open(&path)?.header().id.clone())
    }

    fn session_folder(&self, key: &str) -> Result<PathBuf> {
        let path = self.find(key)?;
        Ok(path.parent().unwrap_or(Path::new(".")).to_path_buf())
    }

    fn sub_agent_logs(&self, key: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let path = self.find(key)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut out = Vec::new();
        collect_jsonl(dir, dir, &mut out)?;
        out.retain(|(name, _)| !SESSION_FILE_NAMES.contains(&name.as_str()));
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("jsonl store {}", self.root().display())
    }
}

/// Every `*.jsonl` (and zstd-compressed `*.jsonl.zstd`, `*.jsonl.zst`, as they are) below
/// `dir` (recursively), named relative to `base`.
pub(crate) fn collect_jsonl(
    base: &Path,
    dir: &Path,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(io_err("listing", dir))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_jsonl(base, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "jsonl") || is_zstd_path(&path) {
            let name = path
                .strip_prefix(base)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let bytes = fs::read(&path).map_err(io_err("reading", &path))?;
            out.push((name, bytes));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::event::{Event, TurnStart};

    #[test]
    fn an_envelope_kept_by_the_caller_is_logged_as_a_given_one_and_gets_its_seq() {
        let dir = tempfile::tempdir().unwrap();
        let events = || {
            (1..=3).map(|turn| {
                let mut env = Envelope::new(Event::TurnStart(TurnStart { turn }));
                env.time = Some(1_000 + turn);
                env
            })
        };
        let mut logs = Vec::new();
        let mut seqs = Vec::new();
        for kept in [false, true] {
            let path = dir.path().join(format!("{kept}")).join("session.jsonl");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut writer = JsonlWriter::create(&path, SessionHeader::new("s", "/s", 0)).unwrap();
            for mut env in events() {
                let seq = if kept {
                    let seq = writer.append_kept(&mut env).unwrap();
                    assert_eq!(env.seq, seq, "the caller's envelope has its seq");
                    seq
                } else {
                    writer.append_verbatim(env).unwrap()
                };
                seqs.push(seq);
            }
            writer.flush().unwrap();
            logs.push(std::fs::read(&path).unwrap());
        }
        assert_eq!(logs[0], logs[1]);
        assert_eq!(seqs[..3], seqs[3..]);
    }

    #[test]
    fn the_next_append_takes_in_the_background_sync_and_the_flush_after_it_has_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s").join("session.jsonl");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut writer = JsonlWriter::create(&path, SessionHeader::new("s", "/s", 0)).unwrap();
        writer
            .append(Event::TurnStart(TurnStart { turn: 1 }))
            .unwrap();
        writer.flush_in_background().unwrap();
        let started = writer.syncing.as_ref().map(|sync| sync.len);
        assert_eq!(
            started,
            Some(writer.len),
            "the sync covers every written byte"
        );
        assert!(
            writer.unsynced_dir.is_some(),
            "the folder's sync is not counted yet"
        );
        writer
            .append(Event::TurnStart(TurnStart { turn: 2 }))
            .unwrap();
        assert!(writer.syncing.is_none(), "the append waited for the sync");
        assert_eq!(writer.synced_len, started);
        assert!(writer.unsynced_dir.is_none(), "and counted the folder's");
        // Nothing new since the last sync: a background flush starts nothing.
        writer.flush().unwrap();
        writer.flush_in_background().unwrap();
        assert!(writer.syncing.is_none());
    }
}
