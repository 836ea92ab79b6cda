//! `read_image` (docs/tools.md, "read_image"): dsh's result text and image block, formats from
//! magic bytes (not names), the 20 MB refusal, and `read`'s path rules.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use crate::common;

use common::Scratch;
use dsh_llm::ContentBlock;
use dsh_tools::{PermissionPreset, ReadImageTool, ToolErrorCode};
use serde_json::json;

/// dsh's `red.png` fixture (1x1, 69 bytes).
const RED_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

fn scratch() -> Scratch {
    let mut s = Scratch::new(PermissionPreset::ReadOnly);
    s.registry.register(Arc::new(ReadImageTool)).unwrap();
    s
}

#[tokio::test]
async fn png_result_matches_dsh_text_and_carries_the_image() {
    let s = scratch();
    std::fs::write(s.path("red.png"), RED_PNG).unwrap();
    let out = s
        .call("read_image", json!({"file_path": "red.png"}))
        .await
        .unwrap();
    let ContentBlock::Text { text } = &out.content[0] else {
        panic!("text first");
    };
    assert_eq!(
        text,
        &format!(
            "<path>{}/red.png</path>\n<type>image</type>\n<content>\nimage/png image, 1x1 px, 69 bytes\n</content>",
            s.cwd.display()
        )
    );
    let ContentBlock::Image { attachment } = &out.content[1] else {
        panic!("image second");
    };
    assert_eq!(
        serde_json::to_value(attachment).unwrap(),
        json!({"attachmentId": "sha256:b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640",
               "mediaType": "image/png", "bytes": 69, "width": 1, "height": 1, "name": "red.png"})
    );
    assert_eq!(attachment.data.as_deref(), Some(RED_PNG));
}

#[tokio::test]
async fn format_comes_from_the_bytes_not_the_name() {
    let s = scratch();
    // A GIF named .png, and a text file named .jpg.
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[0xB0, 0x04, 0x20, 0x03, 0, 0, 0]);
    std::fs::write(s.path("really-a-gif.png"), &gif).unwrap();
    let out = s
        .ok("read_image", json!({"file_path": "really-a-gif.png"}))
        .await;
    assert!(
        out.contains("image/gif image, 1200x800 px, 13 bytes"),
        "{out}"
    );
    s.put("notes.jpg", "just text");
    let err = s
        .err(
            "read_image",
            json!({"file_path": "notes.jpg"}),
            ToolErrorCode::Unsupported,
        )
        .await;
    assert!(err.contains("not a PNG, JPEG, GIF or WebP"), "{err}");
}

#[tokio::test]
async fn over_20_mb_is_refused_with_what_to_do() {
    let s = scratch();
    let file = std::fs::File::create(s.path("huge.png")).unwrap();
    file.set_len(20 * 1024 * 1024 + 1).unwrap();
    let err = s
        .err(
            "read_image",
            json!({"file_path": "huge.png"}),
            ToolErrorCode::LimitReached,
        )
        .await;
    assert!(err.contains("20 MB") && err.contains("smaller"), "{err}");
}

#[tokio::test]
async fn missing_files_directories_and_devices_are_refused_like_read() {
    let s = scratch();
    s.err(
        "read_image",
        json!({"file_path": "absent.png"}),
        ToolErrorCode::NotFound,
    )
    .await;
    std::fs::create_dir_all(s.path("dir.png")).unwrap();
    s.err(
        "read_image",
        json!({"file_path": "dir.png"}),
        ToolErrorCode::NotAFile,
    )
    .await;
    // /dev/zero would never end: refused before reading.
    s.err(
        "read_image",
        json!({"file_path": "/dev/zero"}),
        ToolErrorCode::NotAFile,
    )
    .await;
}
