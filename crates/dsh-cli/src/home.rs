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

/// Creates `dir` and its missing parents readable by their owner only (0700 on Unix), as
/// `$DSH_HOME` is.
pub(crate) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut folder = std::fs::DirBuilder::new();
    folder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        folder.mode(0o700);
    }
    folder.create(dir)
}

/// Writes `bytes` to `path` readable by its owner only (0600 on Unix); see [`write_file_atomically`].
pub(crate) fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file_atomically(path, bytes, 0o600)
}

/// Writes `bytes` to `path` with the Unix permission bits `mode`, through a new temporary
/// file beside it (created exclusively, 0600 while written) renamed over it, so a reader never
/// sees half of it; the folder is made (0700) when missing.
pub(crate) fn write_file_atomically(
    path: &std::path::Path,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    create_private_dir(dir)?;
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
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// The text of `path`, a regular file of at most `max` bytes (read at most that far, so a file
/// that grows while it is read is refused too); what is wrong otherwise, in words that follow
/// the path in a message.
pub(crate) fn read_small_file(path: &std::path::Path, max: u64) -> Result<String, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let too_big = || format!("larger than {max} bytes");
    if meta.len() > max {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}
