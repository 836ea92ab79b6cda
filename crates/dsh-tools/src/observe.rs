//! The session's record of which file versions the model has seen.
//!
//! `read` records what it read; `write` and `edit` require that an existing target was recorded
//! and is unchanged, and record the version they wrote. This keeps the model from overwriting a
//! file it never looked at, or one that changed under it (an editor, a formatter, `bash`).

use dsh_llm::LockExt;
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::error::{ToolError, ToolErrorCode};

/// One observed version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Hash of the full content (SipHash via `DefaultHasher`; stable within one process only).
    pub hash: u64,
    /// Length in bytes.
    pub len: u64,
    /// Modification time when observed, if the file system reports one.
    pub mtime: Option<SystemTime>,
}

impl Observation {
    /// The observation of `content` with file metadata `meta`.
    pub fn of(content: &[u8], meta: Option<&std::fs::Metadata>) -> Self {
        let mut hasher = ContentHasher::new();
        hasher.update(content);
        hasher.finish(content.len() as u64, meta)
    }
}

/// Incremental hashing of file content for tools that stream a file.
pub struct ContentHasher {
    inner: std::collections::hash_map::DefaultHasher,
}

impl ContentHasher {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self {
            inner: std::collections::hash_map::DefaultHasher::new(),
        }
    }

    /// Feeds the next bytes of the file.
    pub fn update(&mut self, bytes: &[u8]) {
        self.inner.write(bytes);
    }

    /// The observation of everything fed, which was `len` bytes long.
    pub fn finish(self, len: u64, meta: Option<&std::fs::Metadata>) -> Observation {
        Observation {
            hash: self.inner.finish(),
            len,
            mtime: meta.and_then(|m| m.modified().ok()),
        }
    }
}

impl Default for ContentHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared map from real path to the last version this session saw. Cloning shares the map.
#[derive(Debug, Clone, Default)]
pub struct FileObservations {
    inner: Arc<Mutex<HashMap<PathBuf, Observation>>>,
}

impl FileObservations {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the session has seen `observation` of the file at real path `path`.
    pub fn record(&self, path: &Path, observation: Observation) {
        self.lock().insert(path.to_path_buf(), observation);
    }

    /// The recorded version of `path`, if any.
    pub fn get(&self, path: &Path) -> Option<Observation> {
        self.lock().get(path).copied()
    }

    /// Forgets `path` (e.g. after it was deleted).
    pub fn forget(&self, path: &Path) {
        self.lock().remove(path);
    }

    /// Checks that the existing file at `path`, whose current content is `current`, may be
    /// overwritten: it must have been observed (`FS_NOT_OBSERVED`) and be unchanged since
    /// (`FS_STALE_VERSION`). Identical content with a newer mtime (a `touch`) is not stale.
    pub fn check_current(&self, path: &Path, current: &[u8]) -> Result<(), ToolError> {
        let Some(seen) = self.get(path) else {
            return Err(ToolError::new(
                ToolErrorCode::FsNotObserved,
                format!(
                    "{} exists but has not been read in this session; read it first, then retry",
                    path.display()
                ),
            ));
        };
        let now = Observation::of(current, None);
        if now.hash != seen.hash || now.len != seen.len {
            return Err(ToolError::new(
                ToolErrorCode::FsStaleVersion,
                format!(
                    "{} changed since it was last read in this session ({} bytes then, {} now); read it again, then retry",
                    path.display(),
                    seen.len,
                    now.len
                ),
            ));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Observation>> {
        // A poisoned lock only means another thread panicked while holding it; the map itself
        // is always in a consistent state (single insert/remove), so keep using it.
        self.inner.lock_or_recover()
    }
}
