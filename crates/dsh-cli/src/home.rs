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
