//! What the dsh-tools benches share: the large real tree they run over.

use std::path::PathBuf;

/// `$DSH_BENCH_TREE`, else the cargo registry source cache (`~/.cargo/registry/src`), as a real
/// path; `None` when neither exists.
pub fn tree() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DSH_BENCH_TREE") {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    home.join("registry/src")
        .canonicalize()
        .ok()
        .filter(|p| p.is_dir())
}
