//! The few file-system calls whose form differs between Unix and Windows, under one name.
//!
//! On Unix these are the standard extension traits (`mode`, `custom_flags(O_NOFOLLOW)`) and
//! `chmod`. Windows has no POSIX modes: files and folders get the ACL they inherit from their
//! parent folder, so the mode arguments do nothing there, and "do not follow a link" is
//! `FILE_FLAG_OPEN_REPARSE_POINT` (docs/SECURITY.md, "Platforms").

use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(unix)]
pub(crate) use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

/// The open flag that refuses to follow a symbolic link in the last component.
#[cfg(unix)]
pub(crate) const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// The open flag that opens a reparse point (a symbolic link or junction) itself instead of
/// following it: Windows' counterpart of `O_NOFOLLOW`.
#[cfg(windows)]
pub(crate) const O_NOFOLLOW: u32 = 0x0020_0000;

/// Gives `path` the permission bits `mode` (Unix); nothing on Windows (inherited ACLs).
pub(crate) fn set_path_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Gives the open `file` the permission bits `mode` (Unix); nothing on Windows.
pub(crate) fn set_file_mode(file: &File, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (file, mode);
        Ok(())
    }
}

/// `OpenOptions::mode` and `custom_flags` for Windows: the mode is ignored (inherited ACLs),
/// the flags are Windows' `dwFlagsAndAttributes`.
#[cfg(windows)]
pub(crate) trait OpenOptionsExt {
    /// Ignored on Windows.
    fn mode(&mut self, mode: u32) -> &mut Self;
    /// Windows file flags, such as [`O_NOFOLLOW`].
    fn custom_flags(&mut self, flags: u32) -> &mut Self;
}

#[cfg(windows)]
impl OpenOptionsExt for std::fs::OpenOptions {
    fn mode(&mut self, _mode: u32) -> &mut Self {
        self
    }
    fn custom_flags(&mut self, flags: u32) -> &mut Self {
        std::os::windows::fs::OpenOptionsExt::custom_flags(self, flags)
    }
}

/// `DirBuilder::mode` for Windows: ignored (inherited ACLs).
#[cfg(windows)]
pub(crate) trait DirBuilderExt {
    /// Ignored on Windows.
    fn mode(&mut self, mode: u32) -> &mut Self;
}

#[cfg(windows)]
impl DirBuilderExt for std::fs::DirBuilder {
    fn mode(&mut self, _mode: u32) -> &mut Self {
        self
    }
}

/// `Permissions::mode` for Windows: `0o444` for a read-only file, else `0o666`.
#[cfg(windows)]
pub(crate) trait PermissionsExt {
    /// The closest POSIX mode.
    fn mode(&self) -> u32;
}

#[cfg(windows)]
impl PermissionsExt for std::fs::Permissions {
    fn mode(&self) -> u32 {
        if self.readonly() {
            0o444
        } else {
            0o666
        }
    }
}

#[cfg(unix)]
pub(crate) use std::os::unix::process::ExitStatusExt;

/// `ExitStatus::signal` for Windows, where a process ends with an exit code only.
#[cfg(windows)]
pub(crate) trait ExitStatusExt {
    /// Always `None` on Windows.
    fn signal(&self) -> Option<i32>;
}

#[cfg(windows)]
impl ExitStatusExt for std::process::ExitStatus {
    fn signal(&self) -> Option<i32> {
        None
    }
}
