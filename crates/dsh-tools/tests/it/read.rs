//! `read`: dsh's numbering format, windows, limits, binary refusal, argument errors.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use common::Scratch;
use dsh_tools::{PermissionPreset, ToolErrorCode};
use serde_json::json;

const WORDS: [&str; 10] = [
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
];

fn scratch() -> Scratch {
    Scratch::new(PermissionPreset::WorkspaceWrite)
}

#[tokio::test]
async fn whole_file_matches_dsh_format() {
    let s = scratch();
    s.put("config.txt", "mode=DEBUG\nlevel=info\n");
    let out = s.ok("read", json!({"file_path": "config.txt"})).await;
    let expected = format!(
        "<path>{}/config.txt</path>\n<type>file</type>\n<content>\n1: mode=DEBUG\n2: level=info\n\n(End of file - total 2 lines)\n</content>",
        s.cwd.display()
    );
    assert_eq!(out, expected);
}

#[tokio::test]
async fn window_matches_dsh_format() {
    let s = scratch();
    let body: String = WORDS.iter().map(|w| format!("line {w}\n")).collect();
    s.put("big.txt", &body);
    let out = s
        .call(
            "read",
            json!({"file_path": "big.txt", "offset": 5, "limit": 4}),
        )
        .await
        .unwrap();
    let expected = format!(
        "<path>{}/big.txt</path>\n<type>file</type>\n<content>\n5: line five\n6: line six\n7: line seven\n8: line eight\n\n(Showing lines 5-8 of 10. Use offset=9 to continue.)\n</content>",
        s.cwd.display()
    );
    assert_eq!(out.text_content(), expected);
    let data = out.data.unwrap();
    assert_eq!(data["totalLines"], 10);
    assert_eq!(data["offset"], 5);
    // Float offsets as models sometimes send them, and the last window reaching the end.
    let tail = s
        .ok("read", json!({"file_path": "big.txt", "offset": 9.0}))
        .await;
    assert!(tail.contains("9: line nine\n10: line ten\n\n(End of file - total 10 lines)"));
}

#[tokio::test]
async fn line_and_count_limits() {
    let s = scratch();
    let body: String = (1..=3000).map(|i| format!("row {i}\n")).collect();
    s.put("long.txt", &body);
    let out = s.ok("read", json!({"file_path": "long.txt"})).await;
    assert!(out.contains("\n2000: row 2000\n"));
    assert!(!out.contains("2001: row"));
    assert!(out.contains("(Showing lines 1-2000 of 3000. Use offset=2001 to continue.)"));
    let capped = s
        .ok("read", json!({"file_path": "long.txt", "limit": 99999}))
        .await;
    assert!(capped.contains("Use offset=2001"));

    let wide = format!("{}\nshort\n", "é".repeat(5000));
    s.put("wide.txt", &wide);
    let out = s.ok("read", json!({"file_path": "wide.txt"})).await;
    let first = out.lines().find(|l| l.starts_with("1: ")).unwrap();
    assert_eq!(
        first.chars().count(),
        3 + 2000 + "... [line truncated]".len()
    );
    assert!(out.contains("2: short"));
}

#[tokio::test]
async fn byte_cap_stops_early_with_a_continuation_hint() {
    let s = scratch();
    let body: String = (1..=2000)
        .map(|i| format!("{i:04} {}\n", "x".repeat(95)))
        .collect();
    s.put("fat.txt", &body);
    let out = s.ok("read", json!({"file_path": "fat.txt"})).await;
    assert!(out.len() <= 51_200 + 300, "{}", out.len());
    let last_shown = out
        .lines()
        .filter_map(|l| l.split_once(": ").and_then(|(n, _)| n.parse::<u64>().ok()))
        .max()
        .unwrap();
    assert!(last_shown < 2000);
    assert!(out.contains(&format!(
        "(Output capped at 50 KB. Showing lines 1-{last_shown} of 2000. Use offset={} to continue.)",
        last_shown + 1
    )));
}

#[tokio::test]
async fn empty_crlf_and_binary_files() {
    let s = scratch();
    s.put("empty.txt", "");
    let out = s.ok("read", json!({"file_path": "empty.txt"})).await;
    assert!(out.contains("(End of file - total 0 lines)"));
    s.put("dos.txt", "a\r\nb\r\n");
    let out = s.ok("read", json!({"file_path": "dos.txt"})).await;
    assert!(out.contains("1: a\n2: b\n"));
    std::fs::write(s.path("blob.bin"), [0x7f, b'E', b'L', b'F', 0, 1, 2]).unwrap();
    let msg = s
        .err(
            "read",
            json!({"file_path": "blob.bin"}),
            ToolErrorCode::BinaryFile,
        )
        .await;
    assert!(msg.contains("binary"));
}

#[tokio::test]
async fn failures_have_codes() {
    let s = scratch();
    s.put("a.txt", "one\ntwo\n");
    s.err(
        "read",
        json!({"file_path": "nope.txt"}),
        ToolErrorCode::NotFound,
    )
    .await;
    std::fs::create_dir_all(s.path("dir")).unwrap();
    s.err("read", json!({"file_path": "dir"}), ToolErrorCode::NotAFile)
        .await;
    let msg = s
        .err(
            "read",
            json!({"file_path": "a.txt", "offset": 50}),
            ToolErrorCode::InvalidArgs,
        )
        .await;
    assert!(msg.contains("past the end"));
    let msg = s
        .err(
            "read",
            json!({"file_path": "a.txt", "offset": "x"}),
            ToolErrorCode::InvalidArgs,
        )
        .await;
    assert!(msg.contains("offset"), "{msg}");
    let msg = s.err("read", json!({}), ToolErrorCode::InvalidArgs).await;
    assert!(msg.contains("file_path"), "{msg}");
    let msg = s
        .err("read", json!({"file_path": 7}), ToolErrorCode::InvalidArgs)
        .await;
    assert!(msg.contains("file_path"), "{msg}");
    let err = s.call_raw("read", "{\"file_path\": ").await.unwrap_err();
    assert_eq!(err.code, ToolErrorCode::InvalidArgs);
    let err = s.call_raw("read", "").await.unwrap_err();
    assert_eq!(err.code, ToolErrorCode::InvalidArgs);
    assert!(err.message.contains("file_path"));
}
