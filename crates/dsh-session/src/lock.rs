//! Exclusive, non-blocking advisory locks (`flock`), released when the file is closed (also
//! when the process dies, so a crash never leaves a stale lock).

use std::fs::File;
#[cfg(unix)]
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Result, SessionError};

/// Takes an exclusive lock on `file` (opened from `path`) without waiting. A lock held by
/// another open file description (another process, or another writer in this process) gives
/// [`SessionError::Locked`] naming `path`.
#[cfg(unix)]
pub(crate) fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    loop {
        // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(code) if code == libc::EWOULDBLOCK || code == libc::EAGAIN => {
                return Err(SessionError::Locked {
                    path: path.to_path_buf(),
                })
            }
            _ => {
                return Err(SessionError::Io {
                    action: "locking",
                    path: path.to_path_buf(),
                    source: err,
                })
            }
        }
    }
}

/// Windows: `LockFileEx` through `File::try_lock`, also released when the file is closed or the
/// process dies.
#[cfg(windows)]
pub(crate) fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(SessionError::Locked {
            path: path.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(SessionError::Io {
            action: "locking",
            path: path.to_path_buf(),
            source,
        }),
    }
}
