//! `@path` mentions in a sent message (docs/tui.md, "File mentions"): each mentioned file of the
//! workspace is attached to the user message as context, the way Claude Code does, so the model
//! has it without a `read` call. The attachment is a second text block of the logged
//! `user/message` (model-visible means logged, docs/ARCHITECTURE.md, "Invariants").
//!
//! Limits: a file gives at most [`MAX_FILE_BYTES`] and [`MAX_FILE_LINES`], all attachments of a
//! message together at most [`MAX_TOTAL_BYTES`]; a cut says so, with the size, and points to the
//! `read` tool for the rest. A folder lists its entries (at most [`MAX_DIR_ENTRIES`]). A path
//! outside the working directory, a missing path or a binary file is named with the reason and
//! not read. Images are left to the image attachment ([`is_image`]).

use std::path::{Component, Path, PathBuf};

/// Bytes of one file attached at most.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// Lines of one file attached at most.
pub const MAX_FILE_LINES: usize = 2_000;
/// Bytes of all the attachments of one message at most.
pub const MAX_TOTAL_BYTES: usize = 256 * 1024;
/// Entries of one folder listed at most.
pub const MAX_DIR_ENTRIES: usize = 200;

/// True for a path whose extension names an image format (png, jpeg, gif, webp): such a
/// mention is an image attachment, not text context (the hook for image input).
pub fn is_image(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        matches!(
            e.to_ascii_lowercase().as_str(),
            "png" | "jpg" | "jpeg" | "gif" | "webp"
        )
    })
}

/// The `@path` words of `text`, in order, without duplicates (a trailing `,.;:)!?` is not part
/// of the path; an `@` inside a word, as in an e-mail address, is no mention).
pub fn mentioned_paths(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let Some(path) = word.strip_prefix('@') else {
            continue;
        };
        let path = path.trim_end_matches([',', '.', ';', ':', ')', '!', '?', '"', '\'']);
        if path.is_empty() || out.iter().any(|p| p == path) {
            continue;
        }
        out.push(path.to_string());
    }
    out
}

/// What the mentions of a message attach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachments {
    /// The context block for the model (empty when nothing is attached).
    pub text: String,
    /// Mentioned images, for the image attachment.
    pub images: Vec<PathBuf>,
    /// One line per attached mention: `@src/main.rs (120 lines)`.
    pub summary: Vec<String>,
    /// One line per mention left out, with the reason: `@x: No such file ..., not attached`.
    pub skipped: Vec<String>,
}

/// The user message for `text`: its first block is the text as typed (what the transcript
/// shows), a second block carries the attachments of its mentions, if any.
pub fn user_message(text: &str, cwd: &Path) -> (dsh_llm::Message, Attachments) {
    let attachments = attach(text, cwd);
    let mut message = dsh_agent::new_user_message(text);
    if !attachments.text.is_empty() {
        message
            .content
            .push(dsh_llm::ContentBlock::text(attachments.text.clone()));
    }
    (message, attachments)
}

/// What the user typed of a user message: its text without the attachment block that
/// [`user_message`] added.
pub fn typed_part(message: &dsh_llm::Message) -> String {
    let mut typed = String::new();
    for block in &message.content {
        if let dsh_llm::ContentBlock::Text { text } = block {
            if !text.starts_with(ATTACHMENTS_HEADER) {
                typed.push_str(text);
            }
        }
    }
    typed
}

/// [`typed_part`] plus a line that counts the attached mentions, for the transcript (which
/// does not repeat file contents the user already has).
pub fn typed_text(message: &dsh_llm::Message) -> String {
    let mut typed = typed_part(message);
    if let Some(chips) = crate::attach::chip_line(message) {
        typed = format!("{typed}\n{chips}");
    }
    let attached: usize = message
        .content
        .iter()
        .filter_map(|block| match block {
            dsh_llm::ContentBlock::Text { text } if text.starts_with(ATTACHMENTS_HEADER) => {
                Some(text.matches("<attached path=").count())
            }
            _ => None,
        })
        .sum();
    match attached {
        0 => typed,
        1 => format!("{typed}\n(1 mention attached)"),
        n => format!("{typed}\n({n} mentions attached)"),
    }
}

/// The first line of the attachment block.
const ATTACHMENTS_HEADER: &str = "Files the user mentioned with @, attached as they are now:";

/// Reads the mentions of `text` below `cwd` into [`Attachments`].
pub fn attach(text: &str, cwd: &Path) -> Attachments {
    let mut out = Attachments::default();
    let mut budget = MAX_TOTAL_BYTES;
    let Some(gate) = Gate::new(cwd) else {
        return out;
    };
    for mention in mentioned_paths(text) {
        let path = match gate.inside(&mention) {
            Ok(path) => path,
            Err(reason) => {
                out.skipped
                    .push(format!("@{mention}: {reason}, not attached"));
                continue;
            }
        };
        if is_image(&path) {
            out.images.push(path);
            continue;
        }
        let secret = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(dsh_tools::PROTECTED_ENV_PREFIX));
        if secret {
            // `.env` files hold keys: a user message is logged and sent as is, while the
            // agent's `read` result goes through secret redaction (docs/SECURITY.md).
            out.skipped.push(format!(
                "@{mention}: may hold secrets, not attached (ask the agent to read it: tool output is redacted)"
            ));
            continue;
        }
        let (body, note) = match std::fs::metadata(&path) {
            Err(err) => {
                out.skipped.push(format!("@{mention}: {err}, not attached"));
                continue;
            }
            Ok(meta) if meta.is_dir() => match list_dir(&gate, &path) {
                Ok(pair) => pair,
                Err(reason) => {
                    out.skipped
                        .push(format!("@{mention}: {reason}, not attached"));
                    continue;
                }
            },
            Ok(_) => match read_text(&gate, &path, budget) {
                Ok(pair) => pair,
                Err(reason) => {
                    out.skipped
                        .push(format!("@{mention}: {reason}, not attached"));
                    continue;
                }
            },
        };
        budget = budget.saturating_sub(body.len());
        out.summary.push(format!("@{mention} ({note})"));
        out.text.push_str(&format!(
            "<attached path=\"{mention}\" note=\"{note}\">\n{body}{}</attached>\n",
            if body.ends_with('\n') || body.is_empty() {
                ""
            } else {
                "\n"
            }
        ));
    }
    if !out.text.is_empty() {
        out.text = format!("{ATTACHMENTS_HEADER}\n{}", out.text);
    }
    out
}

/// The file gate of dsh-tools for mentions (docs/SECURITY.md, "The file gate"): a mention is
/// attached only when its real path lies inside the working directory (links that stay inside
/// work), it is not denied (dsh's home, credentials, ...) and, for a file, it is read through
/// a descriptor opened without following links: a regular file, never a FIFO or a device, never
/// a hard link to a denied file.
struct Gate {
    cwd: PathBuf,
    policy: dsh_tools::GatePolicy,
}

impl Gate {
    fn new(cwd: &Path) -> Option<Gate> {
        let cwd = std::fs::canonicalize(cwd).ok()?;
        let policy = dsh_tools::GatePolicy::new(&cwd);
        Some(Gate { cwd, policy })
    }

    /// `mention` made absolute against the cwd (`..` applied lexically) and checked by the
    /// gate: its real path, or why it is left out.
    fn inside(&self, mention: &str) -> Result<PathBuf, String> {
        let joined = self.cwd.join(mention);
        let mut clean = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    clean.pop();
                }
                Component::CurDir => {}
                other => clean.push(other),
            }
        }
        if !clean.starts_with(&self.cwd) {
            return Err("outside the working directory".to_string());
        }
        self.policy.check_workspace_path(&clean).map_err(reason)
    }
}

/// Why the gate left a mention out, in the words of a skipped line.
pub(crate) fn reason(err: dsh_tools::GateError) -> String {
    match err {
        dsh_tools::GateError::Refused(refusal) if refusal.rule == "symlink-out" => {
            "outside the working directory (a link out of it)".to_string()
        }
        dsh_tools::GateError::Refused(refusal) => {
            format!("refused by the file gate (`{}` rule)", refusal.rule)
        }
        err => err.to_string(),
    }
}

/// The first lines of a text file within the limits and `budget`, and a note for the header.
fn read_text(gate: &Gate, path: &Path, budget: usize) -> Result<(String, String), String> {
    use std::io::Read;
    let cap = MAX_FILE_BYTES.min(budget);
    let opened = gate.policy.open_workspace_file(path).map_err(reason)?;
    let size = opened.meta.len();
    let mut bytes = Vec::new();
    opened
        .file
        .take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| err.to_string())?;
    if bytes.contains(&0) {
        return Err("binary file".to_string());
    }
    let cut_bytes = bytes.len() > cap;
    bytes.truncate(cap);
    let text = String::from_utf8_lossy(&bytes);
    let mut kept = String::new();
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        if lines == MAX_FILE_LINES {
            break;
        }
        kept.push_str(line);
        lines += 1;
    }
    let cut = cut_bytes || kept.len() < text.len();
    if cut && !kept.ends_with('\n') {
        // Never end inside a line: drop the partial last one.
        if let Some(end) = kept.rfind('\n') {
            kept.truncate(end + 1);
            lines -= 1;
        }
    }
    let note = if cut {
        format!("truncated: first {lines} lines of {size} bytes; use the read tool for the rest")
    } else {
        format!("{lines} lines")
    };
    Ok((kept, note))
}

/// A folder's entries, sorted, folders marked with `/`, listed through the file gate (a
/// folder another user keeps private is refused as root, as `glob` refuses it).
fn list_dir(gate: &Gate, path: &Path) -> Result<(String, String), String> {
    let mut names: Vec<String> = match gate.policy.list_workspace_dir(path) {
        Ok(entries) => entries
            .into_iter()
            .map(|entry| {
                let mut name = entry.name.to_string_lossy().into_owned();
                if entry.is_dir {
                    name.push('/');
                }
                name
            })
            .collect(),
        Err(err @ dsh_tools::GateError::Refused(_)) => return Err(reason(err)),
        Err(err) => return Ok((String::new(), format!("folder, cannot list: {err}"))),
    };
    names.sort();
    let total = names.len();
    names.truncate(MAX_DIR_ENTRIES);
    let mut body = names.join("\n");
    body.push('\n');
    let note = if total > MAX_DIR_ENTRIES {
        format!("folder, first {MAX_DIR_ENTRIES} of {total} entries")
    } else {
        format!("folder, {total} entries")
    };
    Ok((body, note))
}
