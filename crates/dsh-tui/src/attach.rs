//! Image attachments in the composer (docs/tui.md, "Images"): a sent message whose text names an
//! image file (typed, pasted, a `file://` URI from a copied file, or an `@image.png` mention)
//! carries that image as an image block after its text, and the transcript shows it as a chip
//! `[image: name 1200x800]`. The image is checked like every image (`docs/model-calls.md`,
//! "Images": PNG/JPEG/GIF/WebP from the bytes, at most 20 MB) and logged once beside the session
//! (`docs/sessions.md`, "Images"). Paths are read as the user's own input: they may lie outside
//! the working directory (the user chose the file), but an `@` mention keeps the mention rules.
//! Either way the file is opened through the file gate (docs/SECURITY.md, "The file gate"):
//! without following links, a regular file only, never dsh's home or other tools' credentials,
//! and, as root, never another user's file its mode keeps private; it is read through that
//! descriptor alone.

use std::path::{Path, PathBuf};

use dsh_llm::{ContentBlock, ImageAttachment, Message};
use dsh_tools::{GateError, GatePolicy};

/// Most images one message attaches.
pub const MAX_IMAGES: usize = 20;

/// What attaching the images of a message did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImageAttach {
    /// One chip per attached image.
    pub chips: Vec<String>,
    /// One line per image that could not be attached, with the reason.
    pub problems: Vec<String>,
}

/// The chip of an attached image: `[image: name 1200x800]`.
pub fn chip(image: &ImageAttachment) -> String {
    let name = image.name.as_deref().unwrap_or("image");
    match image.dimensions() {
        Some(dims) => format!("[image: {name} {dims}]"),
        None => format!("[image: {name}]"),
    }
}

/// The chips of the images of a user message, on one line (`None` without images).
pub fn chip_line(message: &Message) -> Option<String> {
    let chips: Vec<String> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image { attachment } => Some(chip(attachment)),
            _ => None,
        })
        .collect();
    (!chips.is_empty()).then(|| chips.join(" "))
}

/// Words of `text` that may name an image file: bare or quoted paths, `~/` paths and `file://`
/// URIs (what a terminal pastes for a copied file), with an image extension.
fn candidate_paths(text: &str, cwd: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for word in text.split_whitespace() {
        if word.starts_with('@') {
            continue; // mentions come from the mention parser
        }
        let word = word.trim_matches(['"', '\'']);
        let word = word.strip_prefix("file://").unwrap_or(word);
        let word = percent_decode(word);
        let path = match word.strip_prefix("~/") {
            Some(rest) => match std::env::var_os("HOME") {
                Some(home) => PathBuf::from(home).join(rest),
                None => continue,
            },
            None => cwd.join(&word),
        };
        if crate::mentions::is_image(&path) && path.is_file() && !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// `%20` and friends of a `file://` URI decoded (anything malformed is kept as it is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = text.get(i + 1..i + 3).unwrap_or("");
            if let Ok(byte) = u8::from_str_radix(hex, 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// Reads one image file into an attachment through `gate`, refusing what is not an image or
/// too large. A `mentioned` file (an `@` mention) must lie in the working directory; a typed
/// or pasted path is read where the gate lets dsh read.
pub fn load(gate: &GatePolicy, path: &Path, mentioned: bool) -> Result<ImageAttachment, String> {
    use std::io::Read;
    let too_big = |len: u64| {
        format!(
            "{}: {len} bytes, over the 20 MB image limit; attach a smaller copy",
            path.display()
        )
    };
    // Only regular files, checked before and after opening: opening a FIFO would block the UI
    // and a device (`/dev/zero`) never ends.
    let opened = if mentioned {
        gate.open_workspace_file(path)
    } else {
        gate.open_read(path)
    };
    let opened = opened.map_err(|err| match err {
        GateError::NotAFile { .. } => format!("{}: not a regular file", path.display()),
        err => format!("{}: {}", path.display(), crate::mentions::reason(err)),
    })?;
    let meta = opened.meta;
    if meta.len() > dsh_llm::MAX_IMAGE_BYTES {
        return Err(too_big(meta.len()));
    }
    // Read at most one byte over the limit, in case the file grew after the size was read.
    let mut data = Vec::with_capacity(meta.len() as usize);
    opened
        .file
        .take(dsh_llm::MAX_IMAGE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if data.len() as u64 > dsh_llm::MAX_IMAGE_BYTES {
        return Err(too_big(data.len() as u64));
    }
    let name = path.file_name().and_then(|n| n.to_str());
    ImageAttachment::from_bytes(data, name).map_err(|e| format!("{}: {e}", path.display()))
}

/// Adds the images `text` names (and the `mentioned` image paths) to `message`, after its text.
pub fn attach_images(
    message: &mut Message,
    text: &str,
    mentioned: &[PathBuf],
    cwd: &Path,
) -> ImageAttach {
    let mut out = ImageAttach::default();
    let mut paths: Vec<(PathBuf, bool)> = mentioned.iter().map(|p| (p.clone(), true)).collect();
    for path in candidate_paths(text, cwd) {
        if !paths.iter().any(|(p, _)| *p == path) {
            paths.push((path, false));
        }
    }
    let workspace = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let gate = GatePolicy::new(&workspace);
    let mut seen: Vec<String> = Vec::new();
    for (path, mentioned) in paths {
        if seen.len() >= MAX_IMAGES {
            out.problems.push(format!(
                "{}: not attached, a message takes at most {MAX_IMAGES} images",
                path.display()
            ));
            continue;
        }
        match load(&gate, &path, mentioned) {
            Ok(image) => {
                if seen.contains(&image.attachment_id) {
                    continue;
                }
                seen.push(image.attachment_id.clone());
                out.chips.push(chip(&image));
                message
                    .content
                    .push(ContentBlock::Image { attachment: image });
            }
            Err(reason) => out.problems.push(format!("{reason}, not attached")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RED_PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x04, 0xb0, 0x00, 0x00, 0x03, 0x20, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90,
    ];

    #[test]
    fn devices_and_directories_are_refused_without_reading_them() {
        let dir = tempfile::tempdir().unwrap();
        let gate = GatePolicy::new(&std::fs::canonicalize(dir.path()).unwrap());
        for path in [Path::new("/dev/zero"), dir.path()] {
            let err = load(&gate, path, false).unwrap_err();
            assert!(err.contains("not a regular file"), "{err}");
        }
    }

    #[test]
    fn typed_pasted_and_mentioned_images_attach_with_chips() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shot one.png"), RED_PNG).unwrap();
        std::fs::write(dir.path().join("b.png"), RED_PNG).unwrap();
        std::fs::write(dir.path().join("fake.png"), b"not an image").unwrap();
        let uri = format!("file://{}/shot%20one.png", dir.path().display());
        let text = format!("compare {uri} and fake.png");
        let mut message = dsh_agent::new_user_message(&text);
        let result = attach_images(&mut message, &text, &[dir.path().join("b.png")], dir.path());
        // Same bytes twice: one image block.
        assert_eq!(result.chips, vec!["[image: b.png 1200x800]"]);
        assert_eq!(message.content.len(), 2);
        assert!(
            result.problems[0].contains("fake.png") && result.problems[0].contains("not a PNG")
        );
        assert_eq!(
            chip_line(&message).as_deref(),
            Some("[image: b.png 1200x800]")
        );
        let text = "look at b.png";
        let mut message = dsh_agent::new_user_message(text);
        let result = attach_images(&mut message, text, &[], dir.path());
        assert_eq!(result.chips.len(), 1);
        assert!(matches!(message.content[1], ContentBlock::Image { .. }));
    }
}
