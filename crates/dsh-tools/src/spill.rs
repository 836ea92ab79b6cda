//! Externalising large output (docs/tools.md, "Externalising"): the full text goes to a private
//! file and the model gets a head/tail preview with the path, which it can page through with `read`
//! or `grep`.

use crate::os::{DirBuilderExt, OpenOptionsExt};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Default size above which tool output is externalised, in bytes.
pub const DEFAULT_SPILL_THRESHOLD: usize = 50_000;

/// A private per-session directory for spilled output. Created with mode `0700`; every file in
/// it is created fresh (never reused or followed through a symlink) with mode `0600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillDir {
    path: PathBuf,
}

impl SpillDir {
    /// Uses `path` as the spill directory, creating it (and parents) if needed and restricting
    /// it to the owner. Fails if it exists and is not a directory.
    pub fn create(path: impl Into<PathBuf>) -> io::Result<Self> {
        let path = path.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)?;
        let meta = std::fs::symlink_metadata(&path)?;
        if !meta.is_dir() {
            return Err(io::Error::other(format!(
                "spill directory {} is not a directory",
                path.display()
            )));
        }
        crate::os::set_path_mode(&path, 0o700)?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a new private file named `<random>-<label>.txt` and returns it with its path.
    /// `label` is reduced to `[A-Za-z0-9_-]` so a caller cannot steer the path.
    pub fn create_file(&self, label: &str) -> io::Result<(File, PathBuf)> {
        let clean: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = self.path.join(format!("{}-{clean}.txt", &id[..12]));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(crate::os::O_NOFOLLOW)
            .open(&path)?;
        Ok((file, path))
    }

    /// Writes `content` to a new private file (see [`SpillDir::create_file`]).
    pub fn write(&self, label: &str, content: &[u8]) -> io::Result<PathBuf> {
        let (mut file, path) = self.create_file(label)?;
        file.write_all(content)?;
        file.flush()?;
        Ok(path)
    }
}

/// The result of [`externalize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Externalized {
    /// The text to give the model: the original text when it was small enough, otherwise the
    /// preview with the marker and the notice.
    pub text: String,
    /// Where the full text was saved, when it was externalised.
    pub path: Option<PathBuf>,
}

/// Keeps `text` as is when it is at most `threshold` bytes; otherwise writes it in full to a
/// new file in `spill` and returns a preview of about `threshold` bytes: the head (40%), a
/// marker line `[... N bytes omitted ...]`, the tail (40%), and a closing notice naming the
/// file and how to read it. Cuts fall on line boundaries when one is near, and always on
/// character boundaries.
pub fn externalize(
    text: &str,
    threshold: usize,
    spill: &SpillDir,
    label: &str,
) -> io::Result<Externalized> {
    if text.len() <= threshold {
        return Ok(Externalized {
            text: text.to_string(),
            path: None,
        });
    }
    let path = spill.write(label, text.as_bytes())?;
    let budget = threshold.saturating_mul(2) / 5;
    let head_end = cut_head(text, budget);
    let tail_start = cut_tail(text, budget).max(head_end);
    let omitted = tail_start - head_end;
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 300);
    out.push_str(&text[..head_end]);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("[... {omitted} bytes omitted ...]\n"));
    out.push_str(&text[tail_start..]);
    out.push_str(&format!(
        "\n\n(Output too large: {} bytes; showing the first {} and the last {}. Full output saved to: {}. Use read with offset/limit, or grep on this path, to see the rest.)",
        text.len(),
        head_end,
        text.len() - tail_start,
        path.display()
    ));
    Ok(Externalized {
        text: out,
        path: Some(path),
    })
}

/// End of a head of at most `budget` bytes, preferring to end just after a newline in the last
/// quarter of the budget.
pub(crate) fn cut_head(text: &str, budget: usize) -> usize {
    if text.len() <= budget {
        return text.len();
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind('\n') {
        Some(nl) if nl + 1 >= end - end / 4 => nl + 1,
        _ => end,
    }
}

/// Start of a tail of at most `budget` bytes, preferring to start just after a newline in the
/// first quarter of the budget.
pub(crate) fn cut_tail(text: &str, budget: usize) -> usize {
    if text.len() <= budget {
        return 0;
    }
    let mut start = text.len() - budget;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let window_end = (start + budget / 4).min(text.len());
    let mut probe = window_end;
    while !text.is_char_boundary(probe) {
        probe -= 1;
    }
    match text[start..probe].find('\n') {
        Some(nl) => start + nl + 1,
        None => start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn small_text_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("spill")).unwrap();
        let out = externalize("hello", 10, &spill, "t").unwrap();
        assert_eq!(out.text, "hello");
        assert!(out.path.is_none());
    }

    #[test]
    fn large_text_spills_privately_with_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("spill")).unwrap();
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = externalize(&text, 1000, &spill, "bash out").unwrap();
        let path = out.path.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(spill.path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        assert!(out.text.starts_with("line 0\n"));
        assert!(out.text.contains("line 999\n"));
        assert!(out.text.contains("bytes omitted"));
        assert!(out.text.contains(&path.display().to_string()));
        assert!(out.text.len() < 1400);
    }

    #[test]
    fn cuts_respect_char_boundaries() {
        let text = "é".repeat(5000);
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::create(dir.path().join("s")).unwrap();
        let out = externalize(&text, 1001, &spill, "x").unwrap();
        assert!(out.text.contains("omitted"));
    }
}
