//! What dsh keeps for the user is private (docs/SECURITY.md, "Other local users"): folders it
//! creates are 0700 and files 0600, whatever the umask, so session logs, the catalog and the
//! SQLite store are not readable by other local users even when `$DSH_HOME` was created by a
//! command that made nothing else there first.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates `dir` and any missing parent with mode 0700 (on Windows: with the ACL inherited
/// from the parent, which for a home under the user's profile is the user's alone).
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    builder.mode(0o700);
    builder.create(dir)
}

/// `OpenOptions` whose newly created file gets mode 0600.
pub(crate) fn open_options() -> OpenOptions {
    #[cfg(unix)]
    {
        let mut options = OpenOptions::new();
        options.mode(0o600);
        options
    }
    #[cfg(not(unix))]
    {
        OpenOptions::new()
    }
}

/// Creates `path` empty with mode 0600 when it does not exist (for files another library
/// creates, such as SQLite's, which would otherwise get 0644; SQLite gives its `-wal` and
/// `-shm` files the mode of the database file).
pub(crate) fn precreate_file(path: &Path) -> io::Result<()> {
    open_options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(drop)
}
