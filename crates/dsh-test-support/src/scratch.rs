//! A parent folder for scratch areas that no sandbox leaves writable.

use std::path::{Path, PathBuf};

/// A folder for scratch areas that lies outside every directory the sandbox leaves writable
/// (the temp dirs, docs/SECURITY.md): `target_tmpdir` (pass `env!("CARGO_TARGET_TMPDIR")`)
/// when it is not itself under a temp dir, else `~/.cache/dsh-test-scratch` (created; `/root`
/// stands in for a missing or temp-dir home). Escape tests put their "outside" files there, so
/// a write that lands proves an escape rather than an allowed temp-dir write.
pub fn scratch_parent(target_tmpdir: &Path) -> std::io::Result<PathBuf> {
    let target = target_tmpdir.to_path_buf();
    let real = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
    let temp_roots: Vec<PathBuf> = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
    ]
    .iter()
    .filter_map(|p| std::fs::canonicalize(p).ok())
    .collect();
    if !temp_roots.iter().any(|t| real.starts_with(t)) {
        return Ok(target);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && !temp_roots.iter().any(|t| h.starts_with(t)))
        .unwrap_or_else(|| PathBuf::from("/root"));
    let dir = home.join(".cache").join("dsh-test-scratch");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
