//! What dsh keeps for the user is private (docs/SECURITY.md, "Other local users"): folders it
//! creates are 0700 and files 0600, whatever the umask, so session logs, the catalog and the
//! SQLite store are not readable by other local users even when `$DSH_HOME` was created by a
//! command that made nothing else there first.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Creates `dir` and any missing parent with mode 0700 (on Windows: with the ACL inherited
/// from the parent, which for a home under the user's profile is the user's alone).
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    builder.mode(0o700);
    builder.create(dir)
}

/// `OpenOptions` whose newly created file gets mode 0600 and that never follow a symlink in
/// the last component (`O_NOFOLLOW`): a session folder may come from elsewhere (a path given to
/// `--resume`, an imported folder), and a planted symlink must not redirect a write.
pub(crate) fn open_options() -> OpenOptions {
    #[cfg(unix)]
    {
        let mut options = OpenOptions::new();
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
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

/// Creates a new private file beside `target`, named `.<target name>.<tag>-<32 random hex>`:
/// `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, so that nothing planted at a guessable name (a
/// symlink, a file) is ever written through or reused. Returns its path and the open file.
pub(crate) fn create_temp_beside(target: &Path, tag: &str) -> io::Result<(PathBuf, File)> {
    let name = target
        .file_name()
        .map_or_else(|| "session.jsonl".into(), |n| n.to_string_lossy());
    for _ in 0..16 {
        // 122 random bits from the system's generator (uuid v4).
        let suffix = uuid::Uuid::new_v4().simple();
        let path = target.with_file_name(format!(".{name}.{tag}-{suffix}"));
        match open_options().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "cannot create a temporary file beside {}: 16 random names were taken",
            target.display()
        ),
    ))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn temp_files_are_new_private_and_never_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("session.jsonl");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let (a, _) = create_temp_beside(&target, "from-zstd").unwrap();
        let (b, _) = create_temp_beside(&target, "from-zstd").unwrap();
        assert_ne!(a, b, "names must not repeat");
        assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o600);
        // A symlink at a name opened with `open_options` is refused, not followed.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(open_options().write(true).create(true).open(&link).is_err());
        assert!(open_options().append(true).open(&link).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }
}
