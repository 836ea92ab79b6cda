//! The dsh home directory (docs/configuration.md): `$DSH_HOME`, else `~/.dsh`.

use std::path::PathBuf;

/// Resolves the home directory. Does not create it.
pub(crate) fn dsh_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("DSH_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".dsh")),
        None => anyhow::bail!("cannot find the dsh home: set DSH_HOME or HOME"),
    }
}

/// Writes `bytes` to `path` in `$DSH_HOME` readable by its owner only (0600 on Unix), through
/// a temporary file renamed over it, so a reader never sees half of it; the folder is made
/// (0700) when missing.
pub(crate) fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut folder = std::fs::DirBuilder::new();
    folder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        folder.mode(0o700);
    }
    folder.create(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = (|| {
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}
