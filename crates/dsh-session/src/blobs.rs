//! Image files beside a session (docs/sessions.md, "Images"): each image a session's messages
//! carry is stored once, as `<blob dir>/<sha256 hex>.<ext>`, private like the log, and the events
//! hold only its reference. The writer stores an event's images before it writes the event, so a
//! logged reference always has its file (the log is written before the effect, and the file
//! before the log). Projection loads the bytes back for a request; a file that is missing or
//! whose bytes do not match its hash becomes a text placeholder, never a panic.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use dsh_llm::{ContentBlock, ImageAttachment, Message};

use crate::error::{Result, SessionError};
use crate::event::Event;

/// The folder of one session's image files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStore {
    dir: PathBuf,
}

/// Why a stored image could not be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobProblem {
    /// The image's attachment id.
    pub attachment_id: String,
    /// What went wrong, for the user.
    pub reason: String,
}

impl BlobStore {
    /// The blob folder `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> BlobStore {
        BlobStore { dir: dir.into() }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the bytes of `image` live (`None` when its id cannot name a file).
    pub fn path_of(&self, image: &ImageAttachment) -> Option<PathBuf> {
        image.file_name().map(|name| self.dir.join(name))
    }

    /// Stores the bytes of `image` unless its file exists already. An image without loaded
    /// bytes is left alone (its file was stored when it was first logged). Fails when the bytes
    /// do not hash to the id, or the file cannot be written.
    pub fn store(&self, image: &ImageAttachment) -> Result<()> {
        let Some(data) = &image.data else {
            return Ok(());
        };
        let Some(path) = self.path_of(image) else {
            return Err(SessionError::Blob(format!(
                "the image id `{}` is not `sha256:<64 lower-case hex digits>`, so its bytes cannot be stored",
                image.attachment_id
            )));
        };
        if dsh_llm::attachment_id(data) != image.attachment_id {
            return Err(SessionError::Blob(format!(
                "the bytes given for image {} do not hash to that id; build image blocks with ImageAttachment::from_bytes",
                image.attachment_id
            )));
        }
        if path.exists() {
            return Ok(());
        }
        crate::private::create_dir_all(&self.dir)
            .map_err(crate::error::io_err("creating the image folder", &self.dir))?;
        let write = || -> std::io::Result<()> {
            let (tmp, mut file) = crate::private::create_temp_beside(&path, "tmp")?;
            let done = file
                .write_all(data)
                .and_then(|()| file.sync_all())
                .and_then(|()| fs::rename(&tmp, &path));
            if done.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            done
        };
        write().map_err(crate::error::io_err("writing image file", &path))
    }

    /// Stores every image `event` carries (messages, tool results, inbox items).
    pub fn store_event(&self, event: &Event) -> Result<()> {
        for message in event_messages(event) {
            for_each_image(&message.content, &mut |image| self.store(image))?;
        }
        Ok(())
    }

    /// Reads the bytes of `image`, checking size and hash.
    pub fn load(&self, image: &ImageAttachment) -> std::result::Result<Vec<u8>, String> {
        let path = self
            .path_of(image)
            .ok_or_else(|| "its id does not name a stored file".to_string())?;
        let data = fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        if dsh_llm::attachment_id(&data) != image.attachment_id {
            return Err(format!(
                "{} does not hold the image's bytes (its hash differs)",
                path.display()
            ));
        }
        Ok(data)
    }

    /// Loads the bytes of every image of `messages` that has none. An image that cannot be
    /// read becomes a text block saying so (the model is told to ask for it again); the problems
    /// are returned for the user.
    pub fn load_into(&self, messages: &mut [Message]) -> Vec<BlobProblem> {
        let mut problems = Vec::new();
        for message in messages {
            self.load_blocks(&mut message.content, &mut problems);
        }
        problems
    }

    fn load_blocks(&self, content: &mut [ContentBlock], problems: &mut Vec<BlobProblem>) {
        for block in content.iter_mut() {
            match block {
                ContentBlock::Image { attachment } if attachment.data.is_none() => {
                    match self.load(attachment) {
                        Ok(data) => attachment.data = Some(data.into()),
                        Err(reason) => {
                            let text = format!(
                                "{} (the stored image could not be read: {reason}; ask the user to attach it again if it is still needed)",
                                attachment.placeholder()
                            );
                            problems.push(BlobProblem {
                                attachment_id: attachment.attachment_id.clone(),
                                reason,
                            });
                            *block = ContentBlock::text(text);
                        }
                    }
                }
                ContentBlock::ToolResult { content, .. } => self.load_blocks(content, problems),
                _ => {}
            }
        }
    }

    /// The ids of the images `events` refer to, with their file names, once each.
    pub fn referenced<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<ImageAttachment> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for event in events {
            for message in event_messages(event) {
                let _ = for_each_image(&message.content, &mut |image| {
                    if seen.insert(image.attachment_id.clone()) {
                        out.push(image.clone());
                    }
                    Ok(())
                });
            }
        }
        out
    }

    /// Copies the files of `images` from `from` into this store (fork), skipping any that exist
    /// here or are missing there (resume then reports them).
    pub fn copy_from(&self, from: &BlobStore, images: &[ImageAttachment]) -> Result<()> {
        for image in images {
            let (Some(src), Some(dst)) = (from.path_of(image), self.path_of(image)) else {
                continue;
            };
            if dst.exists() || !src.exists() {
                continue;
            }
            crate::private::create_dir_all(&self.dir)
                .map_err(crate::error::io_err("creating the image folder", &self.dir))?;
            let data = fs::read(&src).map_err(crate::error::io_err("reading image file", &src))?;
            let mut file = crate::private::open_options()
                .write(true)
                .create_new(true)
                .open(&dst)
                .map_err(crate::error::io_err("writing image file", &dst))?;
            file.write_all(&data)
                .and_then(|()| file.sync_all())
                .map_err(crate::error::io_err("writing image file", &dst))?;
        }
        Ok(())
    }
}

/// The image files `events` refer to as zip entries `blobs/<hex>.<ext>` (for `sessions export
/// --format zip`, docs/sessions.md, "Images"). A file that is missing is left out; importing
/// the archive then shows that image as a placeholder.
pub fn zip_image_entries<'a>(
    blobs: &BlobStore,
    events: impl IntoIterator<Item = &'a Event>,
) -> Vec<(String, Vec<u8>)> {
    BlobStore::referenced(events)
        .iter()
        .filter_map(|image| {
            let name = image.file_name()?;
            let data = blobs.load(image).ok()?;
            Some((format!("blobs/{name}"), data))
        })
        .collect()
}

/// The blob folder of the session file at `path` (a session read from a path, not a store).
pub fn blobs_beside(path: &Path) -> BlobStore {
    BlobStore::new(crate::jsonl::blob_dir_of(path))
}

fn for_each_image(
    content: &[ContentBlock],
    f: &mut dyn FnMut(&ImageAttachment) -> Result<()>,
) -> Result<()> {
    for block in content {
        match block {
            ContentBlock::Image { attachment } => f(attachment)?,
            ContentBlock::ToolResult { content, .. } => for_each_image(content, f)?,
            _ => {}
        }
    }
    Ok(())
}

/// True when `event` carries an image (the writers' cheap test before [`BlobStore::store_event`]:
/// no allocation for the events that carry none, which are nearly all).
pub(crate) fn carries_images(event: &Event) -> bool {
    match event {
        Event::UserMessage(message) => dsh_llm::content_has_image(&message.content),
        Event::AssistantMessage(event) => dsh_llm::content_has_image(&event.message.content),
        Event::ToolResult(event) => dsh_llm::content_has_image(&event.message.content),
        Event::InboxSpliced(splice) => splice
            .inserted
            .iter()
            .any(|m| dsh_llm::content_has_image(&m.content)),
        _ => false,
    }
}

/// The messages an event carries.
fn event_messages(event: &Event) -> Vec<&Message> {
    match event {
        Event::UserMessage(message) => vec![message],
        Event::AssistantMessage(event) => vec![&event.message],
        Event::ToolResult(event) => vec![&event.message],
        Event::InboxSpliced(splice) => splice.inserted.iter().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::{MessageSource, Role};

    const RED_PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90,
        0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
        0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00,
        0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];

    fn message(image: ImageAttachment) -> Message {
        Message {
            id: "m".into(),
            role: Role::User,
            content: vec![ContentBlock::Image { attachment: image }],
            source: MessageSource::User,
        }
    }

    #[test]
    fn stored_once_private_and_loaded_back_or_replaced_by_a_placeholder() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let store = BlobStore::new(tmp.path().join("blobs"));
        let image = ImageAttachment::from_bytes(RED_PNG.to_vec(), Some("red.png")).unwrap();
        store
            .store_event(&Event::UserMessage(message(image.clone())))
            .unwrap();
        store.store(&image).unwrap();
        let path = store.path_of(&image).unwrap();
        assert!(
            path.ends_with("b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640.png")
        );
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(store.dir())), (0o600, 0o700));
        assert_eq!(fs::read_dir(store.dir()).unwrap().count(), 1);

        let mut bare = image.clone();
        bare.data = None;
        let mut history = vec![message(bare.clone())];
        assert!(store.load_into(&mut history).is_empty());
        let ContentBlock::Image { attachment } = &history[0].content[0] else {
            panic!("still an image");
        };
        assert_eq!(attachment.data.as_deref(), Some(RED_PNG));

        fs::write(&path, b"not the png").unwrap();
        let mut history = vec![message(bare.clone())];
        let problems = store.load_into(&mut history);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].reason.contains("hash differs"));
        let ContentBlock::Text { text } = &history[0].content[0] else {
            panic!("a placeholder");
        };
        assert!(
            text.contains("red.png") && text.contains("attach it again"),
            "{text}"
        );

        fs::remove_file(&path).unwrap();
        let mut history = vec![message(bare)];
        assert_eq!(store.load_into(&mut history).len(), 1);
    }

    #[test]
    fn bytes_that_do_not_match_the_id_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = BlobStore::new(tmp.path());
        let mut image = ImageAttachment::from_bytes(RED_PNG.to_vec(), None).unwrap();
        image.data = Some(b"other".to_vec().into());
        assert!(matches!(store.store(&image), Err(SessionError::Blob(_))));
        image.attachment_id = "sha256:../../etc/passwd".into();
        assert!(matches!(store.store(&image), Err(SessionError::Blob(_))));
    }
}
