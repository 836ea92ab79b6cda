//! The session logs vendored from dsh under `fixtures/dsh/` (origin and licence in its README),
//! listed once for every test that reads them all.

use std::path::{Path, PathBuf};

/// How many session logs `fixtures/dsh/` holds at the least; a listing with fewer means the
/// folder is damaged or was moved.
pub const VENDORED_DSH_LOG_COUNT: usize = 169;

/// Names of JSONL files in the vendored folders that are not session logs: what dsh's ACP
/// server printed (`stdout.expected.jsonl`) and its headless `stream-json` output
/// (`stream-json.expected.jsonl`, whose session events the goal test reads). Every other file ending in `.jsonl`, `.jsonl.zstd`
/// or `.jsonl.zst` is a session log.
pub const NOT_LOGS: &[&str] = &["stdout.expected.jsonl", "stream-json.expected.jsonl"];

/// Vendored logs that dsh refuses, each with the end of its path and what the refusal must say.
/// The one entry is a fragment written by hand as input for a unit test of dsh's snapshot
/// harness, not a log dsh wrote: its `turn/end` has no `turn`.
pub const EXPECTED_REFUSALS: &[(&str, &str)] = &[(
    "packages/test-support/acp-snapshot/tests/fixtures/suite/authored-error/session.jsonl",
    "session.jsonl:2: malformed session line: `turn/end` event has invalid data: missing field `turn`",
)];

/// `fixtures/dsh` at the workspace root.
pub fn dsh_fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/dsh")
}

/// What [`EXPECTED_REFUSALS`] says the refusal of `path` must contain, when `path` is one of
/// the logs dsh refuses.
pub fn expected_refusal(path: &Path) -> Option<&'static str> {
    let path = path.to_string_lossy();
    EXPECTED_REFUSALS
        .iter()
        .find(|(end, _)| path.ends_with(end))
        .map(|(_, message)| *message)
}

/// Every vendored dsh session log, sorted by path. An error names the folder that could not be
/// read, or says how many logs were found when there are fewer than
/// [`VENDORED_DSH_LOG_COUNT`], so a test fails instead of passing over nothing.
pub fn vendored_dsh_logs() -> Result<Vec<PathBuf>, String> {
    let root = dsh_fixtures_dir();
    let mut out = Vec::new();
    collect_logs(&root, &mut out)?;
    out.sort();
    if out.len() < VENDORED_DSH_LOG_COUNT {
        return Err(format!(
            "expected the {VENDORED_DSH_LOG_COUNT} vendored dsh session logs under {}, found {} \
             (they are part of the repository)",
            root.display(),
            out.len()
        ));
    }
    Ok(out)
}

fn collect_logs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| format!("cannot read {}: {error}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|error| format!("cannot list {}: {error}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            collect_logs(&path, out)?;
        } else if (name.ends_with(".jsonl")
            || name.ends_with(".jsonl.zstd")
            || name.ends_with(".jsonl.zst"))
            && !NOT_LOGS.contains(&name.as_str())
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_logs_are_listed_and_the_refused_one_is_among_them() {
        let logs = vendored_dsh_logs().unwrap();
        assert!(logs.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(logs
            .iter()
            .all(|path| !path.ends_with("stdout.expected.jsonl")));
        let refused: Vec<&PathBuf> = logs
            .iter()
            .filter(|path| expected_refusal(path).is_some())
            .collect();
        assert_eq!(refused.len(), EXPECTED_REFUSALS.len(), "{refused:?}");
    }
}
