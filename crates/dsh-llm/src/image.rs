//! Image attachments (docs/model-calls.md, "Images"): what an `image` content block carries, how
//! an image is recognised from its bytes, and the check that keeps images away from models that
//! only read text.
//!
//! A block names its image by content (`sha256:<hex>`) with its media type, byte size and, when
//! known, its pixel size. The bytes travel beside the block, never inside its JSON: the session
//! log stores them once as a file (docs/sessions.md, "Images") and loads them into the block for
//! a request.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::adapter::ModelInfo;
use crate::block::ContentBlock;
use crate::failure::{Failure, FailureCode};
use crate::message::Message;

/// Largest image dsh accepts anywhere (tool, prompt, upload): 20 MiB, as dsh.
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

/// The input kind a model row names to take images (`input = ["text", "image"]`).
pub const IMAGE_INPUT: &str = "image";

/// Failure code of a request that carries content the model cannot take.
pub const UNSUPPORTED_CONTENT: &str = "UNSUPPORTED_CONTENT";

/// One image, by reference to its bytes. JSON spelling as dsh's `ImageAttachmentRef`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageAttachment {
    /// `sha256:<64 hex digits>` of the bytes.
    pub attachment_id: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// Exact byte length.
    pub bytes: u64,
    /// Width in pixels, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Height in pixels, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// A display name without any directory part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this build does not know, kept and written back.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The bytes themselves, when loaded. Never serialised.
    #[serde(skip)]
    pub data: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for ImageAttachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageAttachment")
            .field("attachment_id", &self.attachment_id)
            .field("media_type", &self.media_type)
            .field("bytes", &self.bytes)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("name", &self.name)
            .field("loaded", &self.data.is_some())
            .finish()
    }
}

/// Two attachments are equal when their references are: the bytes are named by their hash.
impl PartialEq for ImageAttachment {
    fn eq(&self, other: &Self) -> bool {
        self.attachment_id == other.attachment_id
            && self.media_type == other.media_type
            && self.bytes == other.bytes
            && self.width == other.width
            && self.height == other.height
            && self.name == other.name
            && self.extra == other.extra
    }
}

/// Why bytes are not an image dsh accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Larger than [`MAX_IMAGE_BYTES`].
    #[error("the image is {bytes} bytes, over the {limit} byte (20 MB) limit; make it smaller (scale it down or re-encode it) and attach it again")]
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Not PNG, JPEG, GIF or WebP.
    #[error("the file is not a PNG, JPEG, GIF or WebP image (its first bytes say {found}); convert it to one of those formats")]
    NotAnImage {
        /// What the first bytes look like.
        found: String,
    },
    /// The declared media type is not the one the bytes have.
    #[error("the image was declared {declared} but its bytes are {actual}")]
    WrongType {
        /// What the sender said.
        declared: String,
        /// What the bytes are.
        actual: String,
    },
}

/// The formats dsh accepts, recognised from magic bytes.
fn sniff(data: &[u8]) -> Option<(&'static str, Option<(u32, u32)>)> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some(("image/png", png_size(data)));
    }
    if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some(("image/jpeg", jpeg_size(data)));
    }
    if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") {
        let size = (data.len() >= 10).then(|| {
            (
                u32::from(u16::from_le_bytes([data[6], data[7]])),
                u32::from(u16::from_le_bytes([data[8], data[9]])),
            )
        });
        return Some(("image/gif", size));
    }
    if data.len() >= 12 && &data[0..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        return Some(("image/webp", webp_size(data)));
    }
    None
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn png_size(data: &[u8]) -> Option<(u32, u32)> {
    // The IHDR chunk comes first: length (4), "IHDR" (4), width (4), height (4).
    (data.get(12..16)? == b"IHDR").then_some(())?;
    Some((be32(data, 16)?, be32(data, 20)?))
}

fn jpeg_size(data: &[u8]) -> Option<(u32, u32)> {
    let mut at = 2;
    while at + 4 <= data.len() {
        if data[at] != 0xFF {
            return None;
        }
        let marker = data[at + 1];
        if marker == 0xFF {
            at += 1;
            continue;
        }
        if marker == 0xD8 || marker == 0x01 || (0xD0..=0xD7).contains(&marker) {
            at += 2;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]));
        let is_frame = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_frame {
            let b = data.get(at + 5..at + 9)?;
            let height = u32::from(u16::from_be_bytes([b[0], b[1]]));
            let width = u32::from(u16::from_be_bytes([b[2], b[3]]));
            return Some((width, height));
        }
        if marker == 0xD9 || marker == 0xDA || len < 2 {
            return None;
        }
        at += 2 + len;
    }
    None
}

fn webp_size(data: &[u8]) -> Option<(u32, u32)> {
    let chunk = data.get(12..16)?;
    let body = 20;
    let le24 = |at: usize| -> Option<u32> {
        let b = data.get(at..at + 3)?;
        Some(u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
    };
    match chunk {
        b"VP8X" => Some((le24(body + 4)? + 1, le24(body + 7)? + 1)),
        b"VP8L" => {
            let b = data.get(body + 1..body + 5)?;
            let bits = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8 " => {
            let b = data.get(body + 6..body + 10)?;
            let width = u32::from(u16::from_le_bytes([b[0], b[1]]) & 0x3FFF);
            let height = u32::from(u16::from_le_bytes([b[2], b[3]]) & 0x3FFF);
            Some((width, height))
        }
        _ => None,
    }
}

/// The media types dsh accepts and the file name extension each is stored under.
const IMAGE_TYPES: [(&str, &str); 4] = [
    ("image/png", "png"),
    ("image/jpeg", "jpg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
];

/// The file name extension of a media type dsh accepts (`bin` for anything else).
pub fn media_type_extension(media_type: &str) -> &'static str {
    IMAGE_TYPES
        .iter()
        .find(|(media, _)| *media == media_type)
        .map_or("bin", |(_, ext)| ext)
}

/// The media type of a file name extension [`media_type_extension`] gives, if it is one.
pub fn extension_media_type(extension: &str) -> Option<&'static str> {
    IMAGE_TYPES
        .iter()
        .find(|(_, ext)| *ext == extension)
        .map(|(media, _)| *media)
}

/// `sha256:<hex>` of `data`.
pub fn attachment_id(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest.as_ref() {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

impl ImageAttachment {
    /// An attachment of `data`, recognised from its bytes, with `name` reduced to its last path
    /// component. Refuses anything over [`MAX_IMAGE_BYTES`] and anything that is not PNG, JPEG,
    /// GIF or WebP.
    pub fn from_bytes(data: Vec<u8>, name: Option<&str>) -> Result<Self, ImageError> {
        let bytes = data.len() as u64;
        if bytes > MAX_IMAGE_BYTES {
            return Err(ImageError::TooLarge {
                bytes,
                limit: MAX_IMAGE_BYTES,
            });
        }
        let Some((media_type, size)) = sniff(&data) else {
            let found = data
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ");
            return Err(ImageError::NotAnImage {
                found: if found.is_empty() {
                    "nothing: the file is empty".into()
                } else {
                    found
                },
            });
        };
        let name = name
            .map(|n| n.rsplit(['/', '\\']).next().unwrap_or(n).to_string())
            .filter(|n| !n.is_empty());
        Ok(ImageAttachment {
            attachment_id: attachment_id(&data),
            media_type: media_type.to_string(),
            bytes,
            width: size.map(|s| s.0),
            height: size.map(|s| s.1),
            name,
            extra: Map::new(),
            data: Some(Arc::from(data)),
        })
    }

    /// Like [`ImageAttachment::from_bytes`], and the bytes must be of `declared` media type.
    pub fn from_declared(
        data: Vec<u8>,
        declared: &str,
        name: Option<&str>,
    ) -> Result<Self, ImageError> {
        let image = Self::from_bytes(data, name)?;
        let declared_norm = if declared == "image/jpg" {
            "image/jpeg"
        } else {
            declared
        };
        if image.media_type != declared_norm {
            return Err(ImageError::WrongType {
                declared: declared.to_string(),
                actual: image.media_type,
            });
        }
        Ok(image)
    }

    /// The hex digest of the attachment id (`None` when the id is not `sha256:<64 hex>`, so it
    /// cannot name a file).
    pub fn digest(&self) -> Option<&str> {
        let hex = self.attachment_id.strip_prefix("sha256:")?;
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then_some(hex)
    }

    /// The file name of the stored bytes: `<hex>.<ext>`.
    pub fn file_name(&self) -> Option<String> {
        Some(format!(
            "{}.{}",
            self.digest()?,
            media_type_extension(&self.media_type)
        ))
    }

    /// `1200x800` when the size is known.
    pub fn dimensions(&self) -> Option<String> {
        Some(format!("{}x{}", self.width?, self.height?))
    }

    /// One line a text-only reader (a summary, a transcript) sees instead of the image.
    pub fn placeholder(&self) -> String {
        let short = self
            .digest()
            .map_or(self.attachment_id.as_str(), |d| &d[..12]);
        let mut text = format!("[image {}", self.media_type);
        if let Some(name) = &self.name {
            let _ = write!(text, " {name}");
        }
        if let Some(dims) = self.dimensions() {
            let _ = write!(text, " {dims}");
        }
        let _ = write!(text, ", {} bytes, sha256:{short}]", self.bytes);
        text
    }

    /// `data:<type>;base64,<bytes>` (`None` when the bytes are not loaded).
    pub fn data_url(&self) -> Option<String> {
        use base64::Engine as _;
        let data = self.data.as_ref()?;
        Some(format!(
            "data:{};base64,{}",
            self.media_type,
            base64::engine::general_purpose::STANDARD.encode(data)
        ))
    }

    /// The bytes as standard base64 (`None` when not loaded).
    pub fn base64(&self) -> Option<String> {
        use base64::Engine as _;
        let data = self.data.as_ref()?;
        Some(base64::engine::general_purpose::STANDARD.encode(data))
    }
}

/// True when any block (tool results included) is an image.
pub fn content_has_image(content: &[ContentBlock]) -> bool {
    content.iter().any(|block| match block {
        ContentBlock::Image { .. } => true,
        ContentBlock::ToolResult { content, .. } => content_has_image(content),
        _ => false,
    })
}

/// True when any message carries an image.
pub fn messages_have_images(messages: &[Message]) -> bool {
    messages.iter().any(|m| content_has_image(&m.content))
}

/// True when the model description says it takes images.
pub fn takes_images(info: &ModelInfo) -> bool {
    info.modalities.iter().any(|m| m == IMAGE_INPUT)
}

/// The check every adapter makes before it sends anything: a history with an image goes only to
/// a model that takes images. `image_models` are the models of the route that do, for the error.
pub fn check_image_input(
    model: &str,
    info: Option<&ModelInfo>,
    messages: &[Message],
    image_models: &[String],
) -> Result<(), Failure> {
    if !messages_have_images(messages) || info.is_some_and(takes_images) {
        return Ok(());
    }
    let others = if image_models.is_empty() {
        "no configured model of this provider takes images; add `input = [\"text\", \"image\"]` to the row of a model that does (docs/configuration.md)".to_string()
    } else {
        format!("models that take images: {}", image_models.join(", "))
    };
    Err(Failure::new(
        FailureCode::Other(UNSUPPORTED_CONTENT.into()),
        format!("model `{model}` takes text only, and the conversation has an image; switch to a model that takes images or start a session without the image ({others})"),
    ))
}

/// Fails when an image of `messages` has no bytes loaded: an adapter calls this before it
/// builds a body, so an image is never sent empty (docs/model-calls.md, "Images").
pub fn check_images_loaded(messages: &[Message]) -> Result<(), Failure> {
    fn walk(content: &[ContentBlock]) -> Result<(), Failure> {
        for block in content {
            match block {
                ContentBlock::Image { attachment } if attachment.data.is_none() => {
                    return Err(Failure::new(
                        FailureCode::InvalidRequest,
                        format!(
                            "the image {} has no bytes loaded, so it cannot be sent; resume the session so dsh reads it from the session's image folder, or attach the image again",
                            attachment.attachment_id
                        ),
                    ))
                }
                ContentBlock::ToolResult { content, .. } => walk(content)?,
                _ => {}
            }
        }
        Ok(())
    }
    messages.iter().try_for_each(|m| walk(&m.content))
}

/// Every image block (tool results included) replaced by its text placeholder.
pub fn images_to_placeholders(content: &[ContentBlock]) -> Vec<ContentBlock> {
    replace_images(content, &ImageAttachment::placeholder)
}

/// Every image block (tool results included) replaced by the text `text` gives for it.
pub fn replace_images(
    content: &[ContentBlock],
    text: &dyn Fn(&ImageAttachment) -> String,
) -> Vec<ContentBlock> {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Image { attachment } => ContentBlock::text(text(attachment)),
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => ContentBlock::ToolResult {
                tool_call_id: tool_call_id.clone(),
                content: replace_images(content, text),
                is_error: *is_error,
            },
            other => other.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1x1 red PNG (dsh's `red.png` fixture).
    pub(crate) const RED_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

    fn decode(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    }

    #[test]
    fn png_gets_dshs_id_and_size() {
        let image = ImageAttachment::from_bytes(decode(RED_PNG), Some("/tmp/x/red.png")).unwrap();
        assert_eq!(
            image.attachment_id,
            "sha256:b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640"
        );
        assert_eq!(image.media_type, "image/png");
        assert_eq!(
            (image.bytes, image.width, image.height),
            (69, Some(1), Some(1))
        );
        assert_eq!(image.name.as_deref(), Some("red.png"));
        let json = serde_json::to_value(&image).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"attachmentId": image.attachment_id, "mediaType": "image/png",
                "bytes": 69, "width": 1, "height": 1, "name": "red.png"})
        );
    }

    #[test]
    fn gif_jpeg_webp_sizes_come_from_their_headers() {
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&[0x20, 0x03, 0x58, 0x02, 0, 0, 0]);
        let g = ImageAttachment::from_bytes(gif, None).unwrap();
        assert_eq!(
            (g.media_type.as_str(), g.dimensions()),
            ("image/gif", Some("800x600".into()))
        );

        // SOI, APP0 (length 4), SOF0 with height 480, width 640.
        let jpeg = vec![
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01,
            0xE0, 0x02, 0x80, 0x03,
        ];
        let j = ImageAttachment::from_bytes(jpeg, None).unwrap();
        assert_eq!(
            (j.media_type.as_str(), j.dimensions()),
            ("image/jpeg", Some("640x480".into()))
        );

        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        webp.extend_from_slice(&[0x0F, 0x01, 0x00, 0x3F, 0x00, 0x00]);
        let w = ImageAttachment::from_bytes(webp, None).unwrap();
        assert_eq!(
            (w.media_type.as_str(), w.dimensions()),
            ("image/webp", Some("272x64".into()))
        );
    }

    #[test]
    fn oversize_and_non_images_are_refused_with_what_to_do() {
        let mut big = b"\x89PNG\r\n\x1a\n".to_vec();
        big.resize(usize::try_from(MAX_IMAGE_BYTES).unwrap() + 1, 0);
        let err = ImageAttachment::from_bytes(big, None).unwrap_err();
        assert!(matches!(err, ImageError::TooLarge { .. }));
        assert!(err.to_string().contains("20 MB"), "{err}");
        let err = ImageAttachment::from_bytes(b"%PDF-1.7".to_vec(), None).unwrap_err();
        assert!(err.to_string().contains("25 50 44 46"), "{err}");
        let err = ImageAttachment::from_declared(decode(RED_PNG), "image/gif", None).unwrap_err();
        assert!(matches!(err, ImageError::WrongType { .. }));
    }

    #[test]
    fn summarised_images_become_placeholders_inside_tool_results_too() {
        let image = ImageAttachment::from_bytes(decode(RED_PNG), Some("red.png")).unwrap();
        let content = vec![
            ContentBlock::text("see"),
            ContentBlock::ToolResult {
                tool_call_id: "c".into(),
                content: vec![ContentBlock::Image { attachment: image }],
                is_error: None,
            },
        ];
        let replaced = images_to_placeholders(&content);
        assert!(!content_has_image(&replaced));
        let ContentBlock::ToolResult { content, .. } = &replaced[1] else {
            panic!("kept the tool result");
        };
        assert_eq!(
            content[0],
            ContentBlock::text("[image image/png red.png 1x1, 69 bytes, sha256:b1ff9c8ea3a7]")
        );
    }

    #[test]
    fn text_only_model_refuses_images_naming_the_ones_that_take_them() {
        let image = ImageAttachment::from_bytes(decode(RED_PNG), None).unwrap();
        let message = Message {
            id: "m1".into(),
            role: crate::message::Role::User,
            content: vec![ContentBlock::Image { attachment: image }],
            source: crate::message::MessageSource::User,
        };
        let info = ModelInfo {
            id: "flash".into(),
            context_window: 1,
            default_max_tokens: 1,
            efforts: vec![],
            default_effort: None,
            modalities: vec!["text".into()],
            temperature: None,
            stop: None,
        };
        let err = check_image_input(
            "flash",
            Some(&info),
            std::slice::from_ref(&message),
            &["vision".into()],
        )
        .unwrap_err();
        assert_eq!(err.code.as_str(), UNSUPPORTED_CONTENT);
        assert!(err.message.contains("`flash`") && err.message.contains("vision"));
        let mut vision = info.clone();
        vision.modalities.push("image".into());
        assert!(check_image_input("v", Some(&vision), &[message], &[]).is_ok());
    }
}
