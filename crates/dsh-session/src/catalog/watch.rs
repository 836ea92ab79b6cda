//! The catalog of a long-lived process (`dsh web`), kept in line with the logs by inotify
//! instead of a walk per listing (docs/sessions.md, "The session catalog", "Watched listing").
//!
//! A listing must notice any log changed behind the catalog's back, and only a walk that
//! `stat`s every log can tell that without help: an append changes no folder's mtime. A process
//! that lists again and again can get that help from the kernel. Before its first (full) walk it
//! watches the session root, every working-directory folder and every session folder; after
//! that, a listing reads the queued events, `stat`s only the session folders they name (and
//! walks a whole working-directory folder only when one appears or goes), then reads its page
//! through the catalog's index. Any sign that an event may be missing (the kernel's queue
//! overflowed, the root was moved or removed, a watch could not be added) drops every watch,
//! and the next listing starts again with watches and a full walk; when watches cannot be had
//! at all (no inotify, a file system whose changes may not raise events, the watch budget
//! spent), every listing walks, as `JsonlStore::list_page` does.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::jsonl::JsonlStore;
use crate::store::{ListFilter, ListPage, Listing, SessionStore};

/// The session catalog of one dsh home for a process that lists many times (see the module
/// docs). Not shared between threads: callers keep it behind a lock.
pub struct WatchedCatalog {
    store: JsonlStore,
    root: PathBuf,
    #[cfg(target_os = "linux")]
    inner: linux::Inner,
    full_walks: u64,
}

impl WatchedCatalog {
    /// The catalog of the JSONL store at `home` (`$DSH_HOME`); nothing is opened or watched
    /// until the first listing.
    pub fn new(home: &Path) -> WatchedCatalog {
        let store = JsonlStore::new(home);
        WatchedCatalog {
            root: store.root(),
            #[cfg(target_os = "linux")]
            inner: linux::Inner::new(home),
            store,
            full_walks: 0,
        }
    }

    /// Caps the number of inotify watches this catalog holds. Reaching the cap is handled as
    /// the kernel refusing a watch (`ENOSPC` at `max_user_watches`): every listing then walks.
    /// The default cap is half of `/proc/sys/fs/inotify/max_user_watches`, so that the rest of
    /// the user's budget stays for editors and other tools.
    pub fn set_watch_limit(&mut self, limit: usize) {
        #[cfg(target_os = "linux")]
        {
            self.inner.limit = limit;
        }
        #[cfg(not(target_os = "linux"))]
        let _ = limit;
    }

    /// True when the last listing was answered from the watches (events, then the changed
    /// session folders only) or set them up; false when watches could not be had and every
    /// listing walks.
    pub fn watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inner.watching()
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// How many listings walked every session folder (the first one does, and every one after
    /// a watch was lost or when there are none).
    pub fn full_walks(&self) -> u64 {
        self.full_walks
    }

    /// One page of the listing, as [`SessionStore::list_page`] of the JSONL store returns it.
    pub fn list_page(&mut self, filter: &ListFilter, page: &ListPage) -> Result<Listing> {
        #[cfg(target_os = "linux")]
        {
            match self.inner.list_page(&self.root, filter, page) {
                Ok((listing, walked)) => {
                    self.full_walks += u64::from(walked);
                    return Ok(listing);
                }
                // A bad cursor is the caller's mistake, not the catalog's.
                Err(e @ crate::error::SessionError::BadCursor(_)) => return Err(e),
                // Anything else: forget the watches; the store's own listing heals or reads
                // every log.
                Err(_) => self.inner.reset(),
            }
        }
        self.full_walks += 1;
        self.store.list_page(filter, page)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeSet, HashMap};
    use std::ffi::{CString, OsStr, OsString};
    use std::fs;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    use crate::catalog::Catalog;
    use crate::error::{Result, SessionError};
    use crate::store::{cwd_folder_name, parse_cursor, ListFilter, ListPage, Listing};

    /// Events of the root and of each working-directory folder: entries made, removed, renamed.
    const FOLDER_MASK: u32 = libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_ATTRIB
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR;

    /// Events of a session folder: anything done to the log (or any other file there).
    const SESSION_MASK: u32 = FOLDER_MASK | libc::IN_MODIFY | libc::IN_CLOSE_WRITE;

    /// Events after which a watch may have missed something, or no longer exists.
    const LOST: u32 = libc::IN_Q_OVERFLOW | libc::IN_IGNORED | libc::IN_UNMOUNT;

    /// File systems whose changes always raise inotify events on this machine (local ones). On
    /// others (NFS, SMB, FUSE, ...) a change made by another machine raises none, so their
    /// listings walk.
    const LOCAL_FILE_SYSTEMS: [u32; 7] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0x794C_7630, // overlayfs (changes made through the overlay)
    ];

    /// What a watch descriptor stands for.
    enum Target {
        Root,
        Folder(String),
        Session(String, OsString),
    }

    /// The watches of one inotify instance and what they stand for.
    struct Watches {
        fd: OwnedFd,
        targets: HashMap<i32, Target>,
        /// The root's device: a folder on another one (a mount) is walked on every listing.
        dev: u64,
    }

    /// What the queued events said changed.
    struct Changes {
        /// Working-directory folders that appeared (or whose watch went): watched, then walked.
        new_folders: BTreeSet<String>,
        /// Working-directory folders to walk again.
        folders: BTreeSet<String>,
        /// Session folders to look at again: `(working-directory folder, session folder)`.
        sessions: BTreeSet<(String, OsString)>,
        /// Session folders that appeared (or whose watch went): watched, then looked at.
        created: Vec<(String, OsString)>,
    }

    /// The watched state behind [`super::WatchedCatalog`].
    pub(super) struct Inner {
        home: PathBuf,
        catalog: Option<Catalog>,
        watches: Option<Watches>,
        /// Working-directory folders walked on every listing: symlinks and mounts (their
        /// targets can change without an event on the watched path), or folders that hold a
        /// symlinked session folder.
        always: BTreeSet<String>,
        /// The inode of `catalog.db` when it was opened.
        catalog_ino: u64,
        /// Set when watches cannot be had on this home: every listing walks.
        unwatchable: bool,
        pub(super) limit: usize,
    }

    /// Why a watch could not be added.
    enum WatchError {
        /// The path is gone or is not a directory: nothing to watch, and no loss (the parent's
        /// watch reports what happens to it).
        Absent,
        /// The kernel refused (or the cap was reached): events may be missed.
        Refused,
    }

    impl Inner {
        pub(super) fn new(home: &Path) -> Inner {
            let budget = fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
                .ok()
                .and_then(|t| t.trim().parse::<usize>().ok())
                .unwrap_or(8192);
            Inner {
                home: home.to_path_buf(),
                catalog: None,
                catalog_ino: 0,
                watches: None,
                always: BTreeSet::new(),
                unwatchable: false,
                limit: budget / 2,
            }
        }

        pub(super) fn watching(&self) -> bool {
            self.watches.is_some()
        }

        /// Drops the watches and the catalog connection; the next listing starts over.
        pub(super) fn reset(&mut self) {
            self.watches = None;
            self.catalog = None;
            self.always.clear();
        }

        fn catalog(&mut self) -> Result<&mut Catalog> {
            let catalog = match self.catalog.take() {
                Some(catalog) => catalog,
                None => {
                    let catalog = Catalog::open(&self.home)?;
                    // Read through SQLite's page cache (2 MiB at most), not a map of the file:
                    // this process lives on, and the pages its first (full) listing touched
                    // stayed mapped, ~20 MiB of the resident set over 10,000 sessions
                    // (docs/PERFORMANCE.md, "Session listing"). Later pages read 50 rows. A
                    // refusal only leaves the map on.
                    let _ = catalog.conn.pragma_update(None, "mmap_size", 0i64);
                    self.catalog_ino = fs::metadata(catalog.path()).map_or(0, |m| m.ino());
                    catalog
                }
            };
            Ok(self.catalog.insert(catalog))
        }

        /// One page, and whether it took a full walk.
        pub(super) fn list_page(
            &mut self,
            root: &Path,
            filter: &ListFilter,
            page: &ListPage,
        ) -> Result<(Listing, bool)> {
            if let Some(after) = page.after.as_deref() {
                parse_cursor(after)?;
            }
            if self.unwatchable {
                return Err(not_watched(root));
            }
            if self.watches.is_some() {
                match self.catch_up(root) {
                    Ok(true) => {
                        let folder = filter.cwd.as_deref().map(cwd_folder_name);
                        let listing = self.catalog()?.page(folder.as_deref(), page)?;
                        return Ok((listing, false));
                    }
                    Ok(false) => self.reset(),
                    Err(e) => {
                        self.reset();
                        return Err(e);
                    }
                }
            }
            // Watches first, then the full walk: whatever changes after a watch is in place
            // raises an event, and whatever changed before it is seen by the walk.
            match self.watch_all(root) {
                Ok(()) => {}
                Err(WatchError::Absent) => {
                    // No session root yet: nothing to list, and nothing to watch until a
                    // session is made (the next listing tries again).
                    self.reset();
                }
                Err(WatchError::Refused) => {
                    self.reset();
                    self.unwatchable = true;
                    return Err(not_watched(root));
                }
            }
            let listing = self.catalog()?.list(root, filter, page)?;
            Ok((listing, true))
        }

        /// Adds the watches of the whole tree under `root`.
        fn watch_all(&mut self, root: &Path) -> std::result::Result<(), WatchError> {
            self.reset();
            let Ok(meta) = fs::symlink_metadata(root) else {
                return Err(WatchError::Absent);
            };
            if !meta.is_dir() {
                // A symlink could be pointed elsewhere without an event on any watch.
                return Err(WatchError::Refused);
            }
            if !local_file_system(root) {
                return Err(WatchError::Refused);
            }
            // SAFETY: inotify_init1 takes flags only; a non-negative result is a new descriptor
            // that nothing else owns.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd < 0 {
                return Err(WatchError::Refused);
            }
            // SAFETY: `fd` was just returned by inotify_init1 and is owned by nobody else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            self.watches = Some(Watches {
                fd,
                targets: HashMap::new(),
                dev: meta.dev(),
            });
            self.add(root, Target::Root, FOLDER_MASK)?;
            let Ok(entries) = fs::read_dir(root) else {
                return Err(WatchError::Refused);
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                self.watch_folder(root, &name)?;
            }
            Ok(())
        }

        /// Watches the working-directory folder `name` and each of its session folders.
        fn watch_folder(&mut self, root: &Path, name: &str) -> std::result::Result<(), WatchError> {
            let path = root.join(name);
            let Ok(meta) = fs::symlink_metadata(&path) else {
                return Ok(());
            };
            let dev = self.watches.as_ref().map_or(0, |w| w.dev);
            if meta.file_type().is_symlink() || (meta.is_dir() && meta.dev() != dev) {
                self.always.insert(name.to_string());
                return Ok(());
            }
            if !meta.is_dir() {
                return Ok(());
            }
            match self.add(&path, Target::Folder(name.to_string()), FOLDER_MASK) {
                Ok(()) => {}
                Err(WatchError::Absent) => return Ok(()),
                Err(e) => return Err(e),
            }
            let Ok(entries) = fs::read_dir(&path) else {
                // Unreadable now: walked on every listing (as the walk skips it, so does this).
                self.always.insert(name.to_string());
                return Ok(());
            };
            for entry in entries.flatten() {
                self.watch_session(&path, name, &entry.file_name(), entry.file_type().ok())?;
            }
            Ok(())
        }

        /// Watches the session folder `session` of the working-directory folder `folder`.
        fn watch_session(
            &mut self,
            folder_path: &Path,
            folder: &str,
            session: &OsStr,
            file_type: Option<fs::FileType>,
        ) -> std::result::Result<(), WatchError> {
            let path = folder_path.join(session);
            // The type `readdir` gave, else an `lstat`.
            let file_type = match file_type {
                Some(file_type) => file_type,
                None => match fs::symlink_metadata(&path) {
                    Ok(meta) => meta.file_type(),
                    Err(_) => return Ok(()),
                },
            };
            if file_type.is_symlink() {
                self.always.insert(folder.to_string());
                return Ok(());
            }
            if !file_type.is_dir() {
                return Ok(());
            }
            let target = Target::Session(folder.to_string(), session.to_os_string());
            match self.add(&path, target, SESSION_MASK) {
                Err(WatchError::Absent) => Ok(()),
                other => other,
            }
        }

        /// `inotify_add_watch`; a path that is already watched (the same inode, e.g. after a
        /// rename) keeps its descriptor, which then stands for the new name.
        fn add(
            &mut self,
            path: &Path,
            target: Target,
            mask: u32,
        ) -> std::result::Result<(), WatchError> {
            let limit = self.limit;
            let Some(watches) = self.watches.as_mut() else {
                return Err(WatchError::Refused);
            };
            if watches.targets.len() >= limit {
                return Err(WatchError::Refused);
            }
            let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
                return Err(WatchError::Absent);
            };
            // SAFETY: a valid inotify descriptor and a NUL-terminated path.
            let wd = unsafe {
                libc::inotify_add_watch(
                    watches.fd.as_raw_fd(),
                    c_path.as_ptr(),
                    mask | libc::IN_DONT_FOLLOW,
                )
            };
            if wd < 0 {
                return match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::ENOENT | libc::ENOTDIR) => Err(WatchError::Absent),
                    _ => Err(WatchError::Refused),
                };
            }
            watches.targets.insert(wd, target);
            Ok(())
        }

        /// Reads every queued event: what changed, or `None` when an event may have been lost.
        fn read_events(&mut self) -> Option<Changes> {
            let mut new_folders = BTreeSet::new();
            let mut folders = BTreeSet::new();
            let mut sessions: BTreeSet<(String, OsString)> = BTreeSet::new();
            let mut created: Vec<(String, OsString)> = Vec::new();
            let watches = self.watches.as_mut()?;
            let mut buffer = vec![0u64; 8192];
            loop {
                let bytes = buffer.len() * 8;
                // SAFETY: the buffer is `bytes` long, writable and u64-aligned (enough for
                // `inotify_event`); the descriptor is non-blocking.
                let n = unsafe {
                    libc::read(watches.fd.as_raw_fd(), buffer.as_mut_ptr().cast(), bytes)
                };
                if n < 0 {
                    let err = std::io::Error::last_os_error();
                    if err.kind() == std::io::ErrorKind::WouldBlock {
                        break;
                    }
                    if err.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return None;
                }
                let n = usize::try_from(n).unwrap_or(0);
                if n == 0 {
                    break;
                }
                // SAFETY: the first `n` bytes were written by the kernel.
                let data = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), n) };
                let header = std::mem::size_of::<libc::inotify_event>();
                let mut at = 0;
                while at + header <= n {
                    // SAFETY: `at + header <= n`; read_unaligned copes with any alignment.
                    let event: libc::inotify_event =
                        unsafe { std::ptr::read_unaligned(data[at..].as_ptr().cast()) };
                    let len = event.len as usize;
                    let name_bytes = data.get(at + header..at + header + len).unwrap_or(&[]);
                    let name_end = name_bytes.iter().position(|b| *b == 0).unwrap_or(len);
                    let name = OsStr::from_bytes(&name_bytes[..name_end]);
                    at += header + len;
                    if event.mask & libc::IN_Q_OVERFLOW != 0 {
                        return None;
                    }
                    let lost = event.mask & LOST != 0;
                    match watches.targets.get(&event.wd) {
                        Some(Target::Root) => {
                            if lost || event.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
                            {
                                return None;
                            }
                            let folder = name.to_string_lossy().into_owned();
                            if event.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                                new_folders.insert(folder.clone());
                            }
                            folders.insert(folder);
                        }
                        Some(Target::Folder(folder)) => {
                            if lost || name.is_empty() {
                                // The folder itself changed, went or moved (the root's events
                                // name it): walked, and watched again if it is still there.
                                if lost {
                                    new_folders.insert(folder.clone());
                                }
                                folders.insert(folder.clone());
                            } else {
                                if event.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                                    created.push((folder.clone(), name.to_os_string()));
                                }
                                sessions.insert((folder.clone(), name.to_os_string()));
                            }
                        }
                        Some(Target::Session(folder, session)) => {
                            if lost {
                                // Watched again if it is still there.
                                created.push((folder.clone(), session.clone()));
                            }
                            sessions.insert((folder.clone(), session.clone()));
                        }
                        // Events of a watch already dropped.
                        None => {}
                    }
                    if event.mask & libc::IN_IGNORED != 0 {
                        watches.targets.remove(&event.wd);
                    }
                }
            }
            Some(Changes {
                new_folders,
                folders,
                sessions,
                created,
            })
        }

        /// Reads the queued events and mends the rows they concern. `Ok(false)` when an event
        /// may have been missed (the watches must be set up again with a full walk).
        fn catch_up(&mut self, root: &Path) -> Result<bool> {
            // The rows this catalog kept in line are only good while nobody else replaced them:
            // another process that rebuilt `catalog.db` (damage, another schema version) made a
            // new file or emptied the table.
            if !self.catalog_is_current() {
                return Ok(false);
            }
            let Some(Changes {
                new_folders,
                mut folders,
                mut sessions,
                created,
            }) = self.read_events()
            else {
                return Ok(false);
            };
            // New folders and session folders get their watches before they are looked at.
            for folder in &new_folders {
                match self.watch_folder(root, folder) {
                    Ok(()) => {}
                    Err(_) => return Ok(false),
                }
            }
            for (folder, session) in created {
                // A new folder's sessions were watched with it; a folder walked every time
                // has none.
                if new_folders.contains(&folder) || self.always.contains(&folder) {
                    continue;
                }
                match self.watch_session(&root.join(&folder), &folder, &session, None) {
                    Ok(()) => {}
                    Err(_) => return Ok(false),
                }
            }
            // A folder may have become one to walk every time (a symlinked session folder).
            folders.extend(self.always.iter().cloned());
            sessions.retain(|(folder, _)| !folders.contains(folder));
            let sessions: Vec<(String, OsString)> = sessions.into_iter().collect();
            let catalog = self.catalog()?;
            for folder in &folders {
                catalog.sync(root, Some(folder))?;
            }
            if !sessions.is_empty() {
                catalog.sync_sessions(root, &sessions)?;
            }
            Ok(true)
        }
    }

    impl Inner {
        /// True when `catalog.db` is still the file this catalog opened, with its schema.
        fn catalog_is_current(&self) -> bool {
            let Some(catalog) = &self.catalog else {
                return false;
            };
            fs::metadata(catalog.path()).is_ok_and(|m| m.ino() == self.catalog_ino)
                && catalog.has_current_schema()
        }
    }

    /// The error that makes a listing walk everything (watches cannot be had here).
    fn not_watched(root: &Path) -> SessionError {
        SessionError::Io {
            action: "watching the session folders in",
            path: root.to_path_buf(),
            source: std::io::Error::other("no watches on this home; listing walks every folder"),
        }
    }

    /// True when `path` is on a file system listed in [`LOCAL_FILE_SYSTEMS`].
    fn local_file_system(path: &Path) -> bool {
        let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: a NUL-terminated path and a statfs buffer the kernel fills when it returns 0.
        if unsafe { libc::statfs(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: statfs returned 0, so `st` is filled.
        let st = unsafe { st.assume_init() };
        // f_type's integer type differs between targets; the magic numbers fit in 32 bits.
        #[allow(clippy::unnecessary_cast)]
        let magic = (st.f_type as i64 & 0xFFFF_FFFF) as u32;
        LOCAL_FILE_SYSTEMS.contains(&magic)
    }
}
