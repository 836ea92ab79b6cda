//! The image the image tests share: dsh's `red.png` fixture (1x1, 69 bytes), as bytes, as the
//! base64 its recordings send, and as the attachment the vocabulary carries.

use dsh_llm::ImageAttachment;

/// The PNG's bytes.
pub const RED_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// The same bytes in standard base64, as dsh's `inline-image-prompt` recording sends them.
pub const RED_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

/// The SHA-256 of the bytes in hex: the name of its blob file, and its id after `sha256:`.
pub const RED_PNG_SHA256: &str = "b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640";

/// `red.png` as an image attachment named `red.png`.
pub fn red_png() -> ImageAttachment {
    ImageAttachment::from_bytes(RED_PNG.to_vec(), Some("red.png")).expect("red.png is a valid PNG")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn the_base64_and_the_hash_are_of_the_bytes() {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(super::RED_PNG_BASE64)
            .unwrap();
        assert_eq!(decoded, super::RED_PNG);
        assert_eq!(
            super::red_png().attachment_id,
            format!("sha256:{}", super::RED_PNG_SHA256)
        );
    }
}
