//! Workspace checkpoints, the files side of rewind (docs/rewind.md).
//!
//! A checkpoint records every file of the workspace the way `glob` sees it (the file gate's
//! walk: `.gitignore` honoured, no link followed, nothing the gate denies), minus the protected
//! entries (`.git`, `.dsh`, `.env*`, other agents' settings: never copied, never restored) and
//! files larger than [`CheckpointLimits::max_file_bytes`] (named, not kept). Contents go into a
//! private content-addressed store outside the workspace (`$DSH_HOME/checkpoints/<key>/`): each
//! file once per content (SHA-256, deflated), each folder as a tree object naming its entries,
//! so a checkpoint is one hash and an unchanged folder costs nothing. A stat cache (size, times,
//! inode, mode) lets a checkpoint of an unchanged workspace read no file.
//!
//! [`CheckpointStore::plan_restore`] compares a new checkpoint of the workspace with an older
//! one and [`CheckpointStore::restore`] writes, links and deletes what differs, through the same
//! no-link descriptor walk `write`/`edit` use (`builtin/beneath.rs`). A file the store does not
//! hold (too large, protected, ignored) is never overwritten or deleted.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::builtin::beneath::{
    create_file_at, open_dir_beneath, open_root, read_link_at, remove_empty_dir_at, remove_file_at,
    replace_file_at, symlink_at,
};
use crate::builtin::search::{walk_root, walker, SearchRoot};
use crate::gate::GatePolicy;
use crate::os::{DirBuilderExt, OpenOptionsExt};

/// How much a checkpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointLimits {
    /// Files larger than this are named in the checkpoint but their content is not kept.
    pub max_file_bytes: u64,
    /// A workspace with more files than this is not checkpointed at all.
    pub max_files: usize,
}

impl Default for CheckpointLimits {
    fn default() -> Self {
        CheckpointLimits {
            max_file_bytes: 4 * 1024 * 1024,
            max_files: 50_000,
        }
    }
}

/// Why a checkpoint or a restore could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The workspace has more files than the limit.
    #[error("the workspace has more than {limit} files, too many to checkpoint (raise [rewind] max_files)")]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// A checkpoint this store does not hold (or a corrupt object).
    #[error("checkpoint {0} is not in the store (or is damaged)")]
    Missing(String),
    /// An I/O failure, with what was being done.
    #[error("{0}")]
    Io(String),
}

fn io_error(what: &str, path: &Path, err: &io::Error) -> CheckpointError {
    CheckpointError::Io(format!("{what} {}: {err}", path.display()))
}

/// A checkpoint taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its root tree (64 hex digits).
    pub tree: String,
    /// Files and links recorded.
    pub files: usize,
    /// Files named but not kept (larger than the limit).
    pub large: usize,
    /// Bytes of content the store did not hold before.
    pub new_bytes: u64,
}

pub(crate) type Hash = [u8; 32];

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> Hash {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// `hash` in lowercase hex.
pub(crate) fn hex(hash: &Hash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<Hash> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

/// One entry of a folder's tree object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A regular file: permission bits and content.
    File { mode: u32, hash: Hash },
    /// A symbolic link: its target's bytes, as a blob.
    Link { hash: Hash },
    /// A folder: its tree.
    Dir { hash: Hash },
    /// A file larger than the limit: only its size.
    Large { size: u64 },
}

const KIND_FILE: u8 = 1;
const KIND_LINK: u8 = 2;
const KIND_DIR: u8 = 3;
const KIND_LARGE: u8 = 4;

#[cfg(unix)]
fn name_bytes(name: &OsStr) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    Some(name.as_bytes().to_vec())
}

#[cfg(not(unix))]
fn name_bytes(name: &OsStr) -> Option<Vec<u8>> {
    name.to_str().map(|s| s.as_bytes().to_vec())
}

#[cfg(unix)]
fn name_from(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes).to_os_string()
}

#[cfg(not(unix))]
fn name_from(bytes: &[u8]) -> OsString {
    OsString::from(String::from_utf8_lossy(bytes).into_owned())
}

/// A name a tree may hold: one plain path component.
fn plain_name(bytes: &[u8]) -> bool {
    let separator = |b: &u8| *b == b'/' || *b == 0 || (cfg!(windows) && *b == b'\\');
    !(bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.iter().any(separator))
}

/// A folder's entries, by name.
type Tree = BTreeMap<OsString, Entry>;

fn encode_tree(tree: &Tree) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, entry) in tree {
        let Some(name) = name_bytes(name) else {
            continue;
        };
        let (kind, mode, size, hash) = match entry {
            Entry::File { mode, hash } => (KIND_FILE, *mode, 0, *hash),
            Entry::Link { hash } => (KIND_LINK, 0, 0, *hash),
            Entry::Dir { hash } => (KIND_DIR, 0, 0, *hash),
            Entry::Large { size } => (KIND_LARGE, 0, *size, [0; 32]),
        };
        out.push(kind);
        out.extend_from_slice(&mode.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&hash);
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&name);
    }
    out
}

/// The next `n` bytes of `bytes`, which move past them; `None` when fewer are left.
fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = bytes.split_at_checked(n)?;
    *bytes = rest;
    Some(head)
}

fn decode_tree(mut bytes: &[u8]) -> Option<Tree> {
    let mut tree = Tree::new();
    while !bytes.is_empty() {
        let kind = take(&mut bytes, 1)?[0];
        let mode = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().ok()?);
        let size = u64::from_le_bytes(take(&mut bytes, 8)?.try_into().ok()?);
        let hash: Hash = take(&mut bytes, 32)?.try_into().ok()?;
        let len = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().ok()?) as usize;
        let name = take(&mut bytes, len)?;
        if !plain_name(name) {
            return None;
        }
        let entry = match kind {
            KIND_FILE => Entry::File {
                mode: mode & 0o777,
                hash,
            },
            KIND_LINK => Entry::Link { hash },
            KIND_DIR => Entry::Dir { hash },
            KIND_LARGE => Entry::Large { size },
            _ => return None,
        };
        tree.insert(name_from(name), entry);
    }
    Some(tree)
}

/// What the stat cache compares: a file whose size, times, inode and mode are unchanged is
/// taken to hold the content hashed before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    mode: u32,
}

impl StatKey {
    fn of(meta: &std::fs::Metadata) -> StatKey {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            StatKey {
                size: meta.len(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
                ino: meta.ino(),
                mode: meta.mode() & 0o777,
            }
        }
        #[cfg(not(unix))]
        {
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            StatKey {
                size: meta.len(),
                mtime_ns,
                ctime_ns: 0,
                ino: 0,
                mode: file_mode(meta),
            }
        }
    }
}

/// Permission bits kept for a file on Windows: read-only or not.
#[cfg(not(unix))]
fn file_mode(meta: &std::fs::Metadata) -> u32 {
    if meta.permissions().readonly() {
        0o444
    } else {
        0o644
    }
}

const CACHE_MAGIC: &[u8] = b"dsh-checkpoint-stat-cache 1\n";

/// Relative path (as bytes) to the stat key and content hash of when it was last read.
type StatCache = HashMap<Vec<u8>, (StatKey, Hash)>;

fn encode_cache(cache: &StatCache) -> Vec<u8> {
    let mut out = CACHE_MAGIC.to_vec();
    for (path, (key, hash)) in cache {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&key.size.to_le_bytes());
        out.extend_from_slice(&key.mtime_ns.to_le_bytes());
        out.extend_from_slice(&key.ctime_ns.to_le_bytes());
        out.extend_from_slice(&key.ino.to_le_bytes());
        out.extend_from_slice(&key.mode.to_le_bytes());
        out.extend_from_slice(hash);
    }
    out
}

fn decode_cache(bytes: &[u8]) -> StatCache {
    fn entry(bytes: &mut &[u8]) -> Option<(Vec<u8>, (StatKey, Hash))> {
        let len = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize;
        let path = take(bytes, len)?.to_vec();
        let key = StatKey {
            size: u64::from_le_bytes(take(bytes, 8)?.try_into().ok()?),
            mtime_ns: i128::from_le_bytes(take(bytes, 16)?.try_into().ok()?),
            ctime_ns: i128::from_le_bytes(take(bytes, 16)?.try_into().ok()?),
            ino: u64::from_le_bytes(take(bytes, 8)?.try_into().ok()?),
            mode: u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?),
        };
        let hash: Hash = take(bytes, 32)?.try_into().ok()?;
        Some((path, (key, hash)))
    }
    let mut cache = StatCache::new();
    let Some(mut rest) = bytes.strip_prefix(CACHE_MAGIC) else {
        return cache;
    };
    while !rest.is_empty() {
        match entry(&mut rest) {
            Some((path, value)) => {
                cache.insert(path, value);
            }
            // A damaged cache is only slower: start again.
            None => return StatCache::new(),
        }
    }
    cache
}

/// Writes `bytes` to `path` atomically and privately: a new `0600` temp file beside it
/// (`O_EXCL|O_NOFOLLOW`), renamed over it; the temp file is removed when a step fails.
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!("{name}.tmp-{}", uuid::Uuid::new_v4().simple()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(crate::os::O_NOFOLLOW)
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A file modified this recently is hashed again next time even when its stat looks the same
/// (a write within the file system's time granularity would not show in the times).
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// The store of one workspace's checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    /// `$DSH_HOME/checkpoints/<key>`.
    dir: PathBuf,
    /// The workspace's real path.
    workspace: PathBuf,
    gate: GatePolicy,
    limits: CheckpointLimits,
}

/// A file, link or folder a restore writes, links or deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Delete(PathBuf),
    DeleteDir(PathBuf),
    /// `replace`: the checkpoint of the files now holds a file by that name (so its content is
    /// in the store). Without it the name must not exist: something the checkpoint left out
    /// (ignored, another user's, not a regular file) is never written over.
    Write {
        path: PathBuf,
        mode: u32,
        hash: Hash,
        replace: bool,
    },
    Link {
        path: PathBuf,
        hash: Hash,
    },
}

impl Step {
    fn path(&self) -> &Path {
        match self {
            Step::Delete(path) | Step::DeleteDir(path) => path,
            Step::Write { path, .. } | Step::Link { path, .. } => path,
        }
    }
}

/// The files (not folders) `steps` write or delete.
fn changed_files(steps: &[Step]) -> impl Iterator<Item = PathBuf> + '_ {
    steps
        .iter()
        .filter(|step| !matches!(step, Step::DeleteDir(_)))
        .map(|step| step.path().to_path_buf())
}

/// What a restore will do (from [`CheckpointStore::plan_restore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    /// The checkpoint of the workspace taken to plan it: how the files were before.
    pub before: Checkpoint,
    /// The checkpoint the files go back to.
    pub target: String,
    steps: Vec<Step>,
    /// Files left as they are, each with why (too large to be kept, and so on).
    pub kept: Vec<(PathBuf, String)>,
}

impl RestorePlan {
    /// The files (relative to the workspace) the restore writes or deletes.
    pub fn changed(&self) -> Vec<PathBuf> {
        changed_files(&self.steps).collect()
    }

    /// True when the files already are as in the target.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Files written or linked.
    pub written: Vec<PathBuf>,
    /// Files deleted.
    pub deleted: Vec<PathBuf>,
    /// Files and folders it could not change, with the reason.
    pub failed: Vec<(PathBuf, String)>,
}

impl CheckpointStore {
    /// The store of `workspace` (its real path) under `home` (`$DSH_HOME`): the folder
    /// `home/checkpoints/<first 32 hex digits of the SHA-256 of the path>`, made `0700` when the
    /// first checkpoint is taken. `gate` is the session's file gate (what the walk may see).
    pub fn new(
        home: &Path,
        workspace: &Path,
        gate: GatePolicy,
        limits: CheckpointLimits,
    ) -> CheckpointStore {
        let key = hex(&sha256(workspace.as_os_str().as_encoded_bytes()));
        CheckpointStore {
            dir: home.join("checkpoints").join(&key[..32]),
            workspace: workspace.to_path_buf(),
            gate: gate.for_walk(),
            limits,
        }
    }

    /// The store's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The workspace it checkpoints.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn object_path(&self, hash: &Hash) -> PathBuf {
        let hex = hex(hash);
        self.dir.join("objects").join(&hex[..2]).join(&hex[2..])
    }

    fn private_dir(path: &Path) -> Result<(), CheckpointError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|err| io_error("cannot create", path, &err))
    }

    /// Stores `content` under `hash` unless the store holds it; returns the bytes added.
    fn put(&self, hash: &Hash, content: &[u8]) -> Result<u64, CheckpointError> {
        let path = self.object_path(hash);
        if path.is_file() {
            return Ok(0);
        }
        let folder = path.parent().unwrap_or(&self.dir);
        Self::private_dir(folder)?;
        let mut encoder =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder
            .write_all(content)
            .map_err(|err| io_error("cannot compress", &path, &err))?;
        let packed = encoder
            .finish()
            .map_err(|err| io_error("cannot compress", &path, &err))?;
        write_private(&path, &packed).map_err(|err| io_error("cannot store", &path, &err))?;
        Ok(content.len() as u64)
    }

    fn get(&self, hash: &Hash) -> Result<Vec<u8>, CheckpointError> {
        let missing = || CheckpointError::Missing(hex(hash));
        let packed = std::fs::read(self.object_path(hash)).map_err(|_| missing())?;
        let mut content = Vec::new();
        flate2::read::DeflateDecoder::new(packed.as_slice())
            .read_to_end(&mut content)
            .map_err(|_| missing())?;
        if sha256(&content) != *hash {
            return Err(missing());
        }
        Ok(content)
    }

    fn get_tree(&self, hash: &Hash) -> Result<Tree, CheckpointError> {
        decode_tree(&self.get(hash)?).ok_or_else(|| CheckpointError::Missing(hex(hash)))
    }

    /// True when the store holds checkpoint `tree`.
    pub fn holds(&self, tree: &str) -> bool {
        parse_hex(tree).is_some_and(|hash| self.get_tree(&hash).is_ok())
    }

    fn cache_path(&self) -> PathBuf {
        self.dir.join("stat-cache")
    }

    /// Takes a checkpoint of the workspace now.
    pub fn take(&self) -> Result<Checkpoint, CheckpointError> {
        Self::private_dir(&self.dir)?;
        let started = SystemTime::now();
        let root = walk_root(&self.gate, &self.workspace).map_err(CheckpointError::Io)?;
        let cache = std::fs::read(self.cache_path())
            .map(|bytes| decode_cache(&bytes))
            .unwrap_or_default();
        let mut next_cache = StatCache::new();
        let mut folders: BTreeMap<PathBuf, Tree> = BTreeMap::new();
        folders.insert(PathBuf::new(), Tree::new());
        let mut protected = crate::ProtectedCache::new(&root.real);
        let mut taken = Checkpoint {
            tree: String::new(),
            files: 0,
            large: 0,
            new_bytes: 0,
        };
        for entry in walker(&root).build() {
            let Ok(entry) = entry else { continue };
            let Some(kind) = entry.file_type() else {
                continue;
            };
            let walked = entry.path();
            let Ok(relative) = walked.strip_prefix(&root.real) else {
                continue;
            };
            let Some(name) = relative.file_name() else {
                continue;
            };
            if kind.is_dir() || crate::builtin::is_temp_name(name) || protected.covers(walked) {
                continue;
            }
            let recorded = if kind.is_symlink() {
                self.link_entry(relative, &mut taken)?
            } else if kind.is_file() {
                let found =
                    self.file_entry(&root, walked, relative, &cache, &mut next_cache, started)?;
                found.map(|(entry, added)| {
                    taken.new_bytes += added;
                    entry
                })
            } else {
                None
            };
            let Some(recorded) = recorded else { continue };
            taken.files += 1;
            if taken.files > self.limits.max_files {
                return Err(CheckpointError::TooManyFiles {
                    limit: self.limits.max_files,
                });
            }
            if matches!(recorded, Entry::Large { .. }) {
                taken.large += 1;
            }
            let parent = relative.parent().unwrap_or(Path::new("")).to_path_buf();
            folders
                .entry(parent)
                .or_default()
                .insert(name.to_os_string(), recorded);
        }
        let root_tree = self.write_folders(folders, &mut taken)?;
        taken.tree = hex(&root_tree);
        // The cache is a speed-up: failing to write it loses nothing.
        let _ = write_private(&self.cache_path(), &encode_cache(&next_cache));
        Ok(taken)
    }

    /// The entry of the link `relative`, its target read through its folder opened beneath
    /// the workspace without following a link (a folder swapped for a link meanwhile fails
    /// the walk: nothing outside is read); `None` when that fails.
    fn link_entry(
        &self,
        relative: &Path,
        taken: &mut Checkpoint,
    ) -> Result<Option<Entry>, CheckpointError> {
        if cfg!(not(unix)) {
            return Ok(None);
        }
        let (Some(name), parent) = (
            relative.file_name(),
            relative.parent().unwrap_or(Path::new("")),
        ) else {
            return Ok(None);
        };
        let read = open_root(&self.workspace)
            .and_then(|root| open_dir_beneath(&root, parent, false))
            .and_then(|dir| read_link_at(&dir, name));
        let Ok(target) = read else {
            return Ok(None);
        };
        let Some(bytes) = name_bytes(target.as_os_str()) else {
            return Ok(None);
        };
        let hash = sha256(&bytes);
        taken.new_bytes += self.put(&hash, &bytes)?;
        Ok(Some(Entry::Link { hash }))
    }

    /// The entry of the regular file `walked` and the bytes it added to the store; `None` when
    /// the gate does not let the walk read it.
    fn file_entry(
        &self,
        root: &SearchRoot,
        walked: &Path,
        relative: &Path,
        cache: &StatCache,
        next_cache: &mut StatCache,
        started: SystemTime,
    ) -> Result<Option<(Entry, u64)>, CheckpointError> {
        let Some(key_bytes) = name_bytes(relative.as_os_str()) else {
            return Ok(None);
        };
        // A cache hit reads nothing: it records the content hashed when the file was read
        // through the gate before, so only a file read now is confirmed beneath the root.
        let Ok(meta) = std::fs::symlink_metadata(walked) else {
            return Ok(None);
        };
        if meta.len() > self.limits.max_file_bytes {
            return Ok(root
                .confirm(walked)
                .then_some((Entry::Large { size: meta.len() }, 0)));
        }
        let settled = |meta: &std::fs::Metadata| {
            meta.modified()
                .ok()
                .is_some_and(|modified| modified + RACY_WINDOW < started)
        };
        let key = StatKey::of(&meta);
        if let Some((cached, hash)) = cache.get(&key_bytes) {
            if *cached == key && settled(&meta) {
                next_cache.insert(key_bytes, (key, *hash));
                return Ok(Some((
                    Entry::File {
                        mode: key.mode,
                        hash: *hash,
                    },
                    0,
                )));
            }
        }
        if !root.confirm(walked) {
            return Ok(None);
        }
        let Some(file) = root.open(walked) else {
            return Ok(None);
        };
        let Ok(opened) = file.metadata() else {
            return Ok(None);
        };
        if opened.len() > self.limits.max_file_bytes {
            return Ok(Some((Entry::Large { size: opened.len() }, 0)));
        }
        let mut content = Vec::with_capacity(opened.len() as usize);
        if file
            .take(self.limits.max_file_bytes + 1)
            .read_to_end(&mut content)
            .is_err()
        {
            return Ok(None);
        }
        if content.len() as u64 > self.limits.max_file_bytes {
            return Ok(Some((
                Entry::Large {
                    size: content.len() as u64,
                },
                0,
            )));
        }
        let hash = sha256(&content);
        let added = self.put(&hash, &content)?;
        let key = StatKey::of(&opened);
        if settled(&opened) {
            next_cache.insert(key_bytes, (key, hash));
        }
        Ok(Some((
            Entry::File {
                mode: key.mode,
                hash,
            },
            added,
        )))
    }

    /// Writes the tree objects of `folders` (relative folder -> its files), deepest first, each
    /// folder named in its parent; returns the root tree's hash. Empty folders are left out.
    fn write_folders(
        &self,
        mut folders: BTreeMap<PathBuf, Tree>,
        taken: &mut Checkpoint,
    ) -> Result<Hash, CheckpointError> {
        // Every folder above a recorded one exists in the map.
        let names: Vec<PathBuf> = folders.keys().cloned().collect();
        for folder in names {
            let mut current = folder.as_path();
            while let Some(parent) = current.parent() {
                folders.entry(parent.to_path_buf()).or_default();
                current = parent;
            }
        }
        let mut order: Vec<PathBuf> = folders.keys().cloned().collect();
        order.sort_by_key(|path| std::cmp::Reverse(path.components().count()));
        let mut root = None;
        for folder in order {
            let tree = folders.remove(&folder).unwrap_or_default();
            if tree.is_empty() && !folder.as_os_str().is_empty() {
                continue;
            }
            let encoded = encode_tree(&tree);
            let hash = sha256(&encoded);
            taken.new_bytes += self.put(&hash, &encoded)?;
            match (folder.parent(), folder.file_name()) {
                (Some(parent), Some(name)) => {
                    folders
                        .entry(parent.to_path_buf())
                        .or_default()
                        .insert(name.to_os_string(), Entry::Dir { hash });
                }
                _ => root = Some(hash),
            }
        }
        root.ok_or_else(|| CheckpointError::Io("no root folder was recorded".into()))
    }

    /// The files (relative to the workspace) that differ between checkpoints `from` and `to`.
    pub fn changed_between(&self, from: &str, to: &str) -> Result<Vec<PathBuf>, CheckpointError> {
        let (from, to) = (self.tree_hash(from)?, self.tree_hash(to)?);
        let mut plan = PlanBuilder::default();
        self.diff(Path::new(""), Some(&from), Some(&to), &mut plan)?;
        Ok(changed_files(&plan.steps)
            .chain(plan.kept.into_iter().map(|(path, _)| path))
            .collect())
    }

    fn tree_hash(&self, tree: &str) -> Result<Hash, CheckpointError> {
        let hash = parse_hex(tree).ok_or_else(|| CheckpointError::Missing(tree.to_string()))?;
        self.get_tree(&hash)?;
        Ok(hash)
    }

    /// Takes a checkpoint of the workspace now and plans going back to `target`.
    pub fn plan_restore(&self, target: &str) -> Result<RestorePlan, CheckpointError> {
        let target_hash = self.tree_hash(target)?;
        let before = self.take()?;
        let before_hash = self.tree_hash(&before.tree)?;
        let mut plan = PlanBuilder::default();
        self.diff(
            Path::new(""),
            Some(&before_hash),
            Some(&target_hash),
            &mut plan,
        )?;
        Ok(RestorePlan {
            before,
            target: target.to_string(),
            steps: plan.steps,
            kept: plan.kept,
        })
    }

    /// The steps that turn folder `now` into folder `then` (either may be absent).
    fn diff(
        &self,
        folder: &Path,
        now: Option<&Hash>,
        then: Option<&Hash>,
        plan: &mut PlanBuilder,
    ) -> Result<(), CheckpointError> {
        let now = now.map(|hash| self.get_tree(hash)).transpose()?;
        let then = then.map(|hash| self.get_tree(hash)).transpose()?;
        let empty = Tree::new();
        let (now, then) = (
            now.as_ref().unwrap_or(&empty),
            then.as_ref().unwrap_or(&empty),
        );
        let mut names: Vec<&OsString> = now.keys().chain(then.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let path = folder.join(name);
            match (now.get(name), then.get(name)) {
                (None, None) => {}
                (Some(a), Some(b)) if a == b => {}
                (Some(Entry::Dir { hash: a }), Some(Entry::Dir { hash: b })) => {
                    self.diff(&path, Some(a), Some(b), plan)?;
                }
                (Some(Entry::Large { .. }), _) => plan.kept.push((
                    path,
                    "larger than the checkpoint limit: its content is not kept, so it is left as it is"
                        .into(),
                )),
                (_, Some(Entry::Large { .. })) => plan.kept.push((
                    path,
                    "was larger than the checkpoint limit then: that content was not kept, so the file is left as it is"
                        .into(),
                )),
                (current, wanted) => {
                    match current {
                        Some(Entry::Dir { hash }) => {
                            self.diff(&path, Some(hash), None, plan)?;
                            plan.steps.push(Step::DeleteDir(path.clone()));
                        }
                        Some(Entry::File { .. }) | Some(Entry::Link { .. }) => {
                            // A file replaced by a file is written over in one rename.
                            if !matches!(wanted, Some(Entry::File { .. })) {
                                plan.steps.push(Step::Delete(path.clone()));
                            }
                        }
                        Some(Entry::Large { .. }) | None => {}
                    }
                    match wanted {
                        Some(Entry::File { mode, hash }) => plan.steps.push(Step::Write {
                            path,
                            mode: *mode,
                            hash: *hash,
                            replace: matches!(current, Some(Entry::File { .. })),
                        }),
                        Some(Entry::Link { hash }) => {
                            plan.steps.push(Step::Link { path, hash: *hash })
                        }
                        Some(Entry::Dir { hash }) => self.diff(&path, None, Some(hash), plan)?,
                        Some(Entry::Large { .. }) | None => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Carries out `plan`: deletes, writes (a new file renamed over the old, with the recorded
    /// permission bits) and links, each through the folder opened by the no-link walk from the
    /// workspace. A failure is reported and the rest goes on; a folder that still holds files
    /// no checkpoint covers is left in place.
    pub fn restore(&self, plan: &RestorePlan) -> Result<RestoreReport, CheckpointError> {
        let root = open_root(&self.workspace)
            .map_err(|err| io_error("cannot open", &self.workspace, &err))?;
        let mut report = RestoreReport::default();
        for step in &plan.steps {
            let path = step.path();
            let (Some(name), parent) = (path.file_name(), path.parent().unwrap_or(Path::new("")))
            else {
                continue;
            };
            // A folder that became a git directory since (or any protected entry) is not
            // changed, whatever the checkpoint held there.
            if crate::protected_entry(&self.workspace, &self.workspace.join(path)).is_some() {
                if !matches!(step, Step::DeleteDir(_)) {
                    report.failed.push((
                        path.to_path_buf(),
                        "is a protected entry now (docs/SECURITY.md, \"Protected paths\"), so a rewind does not change it".into(),
                    ));
                }
                continue;
            }
            let create = matches!(step, Step::Write { .. } | Step::Link { .. });
            let result = open_dir_beneath(&root, parent, create).and_then(|dir| match step {
                Step::Delete(_) => remove_file_at(&dir, name),
                Step::DeleteDir(_) => remove_empty_dir_at(&dir, name),
                Step::Write {
                    mode,
                    hash,
                    replace,
                    ..
                } => {
                    let content = self.get(hash).map_err(io::Error::other)?;
                    if *replace {
                        replace_file_at(&dir, name, &content, Some(*mode)).map(drop)
                    } else {
                        create_file_at(&dir, name, &content, Some(*mode))
                            .map(drop)
                            .map_err(|err| match err.kind() {
                                io::ErrorKind::AlreadyExists => io::Error::new(
                                    err.kind(),
                                    "exists now but no checkpoint holds it (ignored, another user's file, or not a regular file), so it is left as it is",
                                ),
                                _ => err,
                            })
                    }
                }
                Step::Link { hash, .. } => {
                    let target = self.get(hash).map_err(io::Error::other)?;
                    symlink_at(&dir, name, &name_from(&target))
                }
            });
            match (result, step) {
                (Ok(()), Step::Delete(_)) => report.deleted.push(path.to_path_buf()),
                (Ok(()), Step::DeleteDir(_)) => {}
                (Ok(()), _) => report.written.push(path.to_path_buf()),
                // Ignored or large files keep the folder: that is what it is for.
                (Err(_), Step::DeleteDir(_)) => {}
                (Err(err), _) => report.failed.push((path.to_path_buf(), err.to_string())),
            }
        }
        Ok(report)
    }
}

#[derive(Default)]
struct PlanBuilder {
    steps: Vec<Step>,
    kept: Vec<(PathBuf, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_round_trip_and_refuse_unsafe_names() {
        let mut tree = Tree::new();
        tree.insert(
            "a.txt".into(),
            Entry::File {
                mode: 0o644,
                hash: [1; 32],
            },
        );
        tree.insert("big".into(), Entry::Large { size: 9 });
        tree.insert("sub".into(), Entry::Dir { hash: [2; 32] });
        tree.insert("ln".into(), Entry::Link { hash: [3; 32] });
        let bytes = encode_tree(&tree);
        assert_eq!(decode_tree(&bytes), Some(tree));
        for bad in [&b".."[..], b"a/b", b"", b"."] {
            let mut one = Tree::new();
            one.insert(name_from(bad), Entry::Large { size: 1 });
            assert_eq!(decode_tree(&encode_tree(&one)), None, "{bad:?}");
        }
        assert_eq!(decode_tree(&bytes[..bytes.len() - 1]), None);
    }

    #[test]
    fn the_stat_cache_round_trips_and_a_damaged_one_is_empty() {
        let mut cache = StatCache::new();
        let key = StatKey {
            size: 3,
            mtime_ns: -5,
            ctime_ns: 7,
            ino: 9,
            mode: 0o755,
        };
        cache.insert(b"x/y".to_vec(), (key, [4; 32]));
        let bytes = encode_cache(&cache);
        assert_eq!(decode_cache(&bytes), cache);
        assert!(decode_cache(&bytes[..bytes.len() - 3]).is_empty());
        assert!(decode_cache(b"other").is_empty());
    }
}
