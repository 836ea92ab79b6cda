//! The JSONL store (docs/sessions.md, "Where sessions live"):
//! `$DSH_HOME/sessions/--<cwd>--/<id>/session.jsonl`.
//!
//! Writers take an exclusive `flock` on the session file, buffer appended lines in memory
//! (packing delta runs into dsh's packed rows), write the buffer when it grows past 1 MiB, and
//! write + `fdatasync` on [`SessionWriter::flush`] and at the flush points of
//! [`crate::is_flush_point`].
//!
//! Resume sets a torn last line aside: its bytes are copied to
//! `session.jsonl.torn-<offset>` next to the log and the file is cut back to the last
//! complete line, so the next append does not glue onto half a line. A torn line is not
//! history (it was never completely written, hence never flushed).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::envelope::{Envelope, SessionHeader};
use crate::error::{io_err, Result, SessionError};
use crate::listing::SessionSummary;
use crate::lock::lock_exclusive;
use crate::packed::PackRun;
use crate::projection::Projector;
use crate::reader::{load_file, LoadedLog, LogReader};
use crate::state::SessionTracker;
use crate::store::{
    cwd_folder_name, finish_resume, is_flush_point, pick_id, session_path, ListFilter, Listing,
    Resumed, SearchHit, SessionStore, SessionWriter,
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
}

impl JsonlWriter {
    /// Creates a new session file at `path` (its folder is created; the file must not exist),
    /// locks it and writes and fsyncs the header.
    pub fn create(path: &Path, header: SessionHeader) -> Result<JsonlWriter> {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(io_err("creating session folder", dir))?;
        let file = OpenOptions::new()
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
        };
        writer
            .header
            .encode_line(&mut writer.buf)
            .map_err(|e| SessionError::Encode {
                event_type: "session".into(),
                reason: e.to_string(),
            })?;
        writer.flush()?;
        if let Ok(dir_handle) = File::open(dir) {
            // Makes the new directory entry durable; a failure here only weakens durability of
            // the file's existence, which the next fsync of the file does not cover, so report.
            dir_handle
                .sync_all()
                .map_err(io_err("syncing session folder", dir))?;
        }
        Ok(writer)
    }

    /// Opens an existing session file for appending: locks it, reads it through (checking every
    /// line), sets a torn tail aside, and returns the writer with the history projected.
    pub fn open(path: &Path) -> Result<(JsonlWriter, Projector)> {
        let mut file = OpenOptions::new()
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
        if let Some(torn) = reader.torn_tail() {
            set_aside(&mut file, path, torn.offset, torn.len)?;
            file.set_len(torn.offset)
                .map_err(io_err("cutting torn tail of", path))?;
            file.sync_data().map_err(io_err("syncing", path))?;
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
        self.buf.clear();
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
    fs::write(&side, &torn).map_err(io_err("saving torn tail to", &side))?;
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

    fn append_verbatim(&mut self, mut env: Envelope) -> Result<u64> {
        self.check_usable()?;
        env.seq = self.tracker.next_seq();
        self.tracker.push(&env);
        let seq = env.seq;
        let flush_now = is_flush_point(&env.event);
        let packed = self.pack && self.run.as_mut().is_some_and(|run| run.push(&env));
        if !packed {
            self.close_run()?;
            match PackRun::start(&env).filter(|_| self.pack) {
                Some(run) => self.run = Some(run),
                None => env
                    .encode_line(&mut self.buf)
                    .map_err(|e| Self::encode_error(&env, e))?,
            }
        }
        if self.buf.len() >= WRITE_THRESHOLD {
            self.write_buf()?;
        }
        if flush_now {
            self.flush()?;
        }
        Ok(seq)
    }

    fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        self.close_run()?;
        self.write_buf()?;
        self.file
            .sync_data()
            .map_err(io_err("syncing session log", &self.path))
    }
}

impl Drop for JsonlWriter {
    fn drop(&mut self) {
        // Best effort: an error here cannot be reported; callers that care flush first.
        if !self.broken {
            let _ = self.flush();
        }
    }
}

/// The JSONL store rooted at a dsh home directory.
#[derive(Debug, Clone)]
pub struct JsonlStore {
    home: PathBuf,
}

impl JsonlStore {
    /// The store under `home` (`$DSH_HOME`); nothing is created until a session is.
    pub fn new(home: &Path) -> JsonlStore {
        JsonlStore {
            home: home.to_path_buf(),
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
                let path = id.path().join("session.jsonl");
                if path.is_file() {
                    out.push((id.file_name().to_string_lossy().into_owned(), path));
                }
            }
        }
        Ok(out)
    }

    /// The session file for `key`: a path to a `session.jsonl` (or its folder), an id, or a
    /// unique id prefix.
    pub fn find(&self, key: &str) -> Result<PathBuf> {
        let as_path = Path::new(key);
        if key.contains('/') || key.ends_with(".jsonl") {
            if as_path.is_file() {
                return Ok(as_path.to_path_buf());
            }
            if as_path.join("session.jsonl").is_file() {
                return Ok(as_path.join("session.jsonl"));
            }
            return Err(SessionError::NotFound(key.to_string()));
        }
        let all = self.all_sessions(None)?;
        let id = pick_id(key, all.iter().map(|(id, _)| id.clone()))?;
        all.into_iter()
            .find(|(candidate, _)| *candidate == id)
            .map(|(_, path)| path)
            .ok_or_else(|| SessionError::NotFound(key.to_string()))
    }
}

impl SessionStore for JsonlStore {
    fn create_with_header(&self, header: SessionHeader) -> Result<Box<dyn SessionWriter>> {
        let path = session_path(&self.home, &header.cwd, &header.id);
        Ok(Box::new(JsonlWriter::create(&path, header)?))
    }

    fn load(&self, key: &str) -> Result<LoadedLog> {
        load_file(&self.find(key)?)
    }

    fn resume(&self, key: &str) -> Result<Resumed> {
        let (writer, history) = JsonlWriter::open(&self.find(key)?)?;
        finish_resume(Box::new(writer), history)
    }

    fn list(&self, filter: &ListFilter) -> Result<Listing> {
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

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>> {
        let needle = query.to_lowercase();
        let mut hits = Vec::new();
        for (_, path) in self.all_sessions(None)? {
            let Ok(mut reader) = LogReader::open(&path) else {
                continue;
            };
            let id = reader.header().id.clone();
            // A damaged log is searched up to the damage; listing reports the damage.
            while let Ok(Some(env)) = reader.next_event() {
                if hits.len() >= limit {
                    return Ok(hits);
                }
                if let Some(hit) = crate::listing::match_event(&id, &env, &needle) {
                    hits.push(hit);
                }
            }
        }
        Ok(hits)
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

    fn sub_agent_logs(&self, key: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let path = self.find(key)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut out = Vec::new();
        collect_jsonl(dir, dir, &mut out)?;
        out.retain(|(name, _)| name != "session.jsonl");
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("jsonl store {}", self.root().display())
    }
}

/// Every `*.jsonl` below `dir` (recursively), named relative to `base`.
fn collect_jsonl(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(io_err("listing", dir))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_jsonl(base, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "jsonl") {
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
