//! Model arguments are untrusted: any JSON for any built-in tool gives a result or an error
//! with a code, never a panic. Also pipes and devices are refused instead of blocking.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use common::Scratch;
use dsh_tools::{PermissionPreset, ToolErrorCode};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const KEYS: [&str; 14] = [
    "command",
    "description",
    "timeoutMs",
    "workdir",
    "run_in_background",
    "file_path",
    "offset",
    "limit",
    "content",
    "old_string",
    "new_string",
    "replace_all",
    "pattern",
    "todos",
];
const TOOLS: [&str; 7] = [
    "bash",
    "edit",
    "glob",
    "grep",
    "read",
    "todo_write",
    "write",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        // Relative names only, so a search never leaves the scratch tree.
        "[a-z.*?{}\\[\\]()\\\\ é]{0,12}".prop_map(Value::String),
        Just(json!("a.txt")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z]{1,8}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn args() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(&KEYS[..]), value()), 0..6).prop_map(|kv| {
        let map: Map<String, Value> = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Value::Object(map)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_arguments_give_a_result_or_a_coded_error(tool in prop::sample::select(&TOOLS[..]), args in args()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // read-only: write/edit are refused after parsing and bash has no sandbox, so
        // nothing is modified or executed whatever the arguments say.
        let s = Scratch::new(PermissionPreset::ReadOnly);
        s.put("a.txt", "alpha\nbeta\n");
        let result = runtime.block_on(s.call(tool, args));
        if let Err(err) = result {
            prop_assert!(!err.message.is_empty());
            prop_assert!(err.result_text().starts_with("Error: "));
        }
    }

    #[test]
    fn any_raw_string_parses_or_is_invalid_args(raw in ".{0,40}") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let s = Scratch::new(PermissionPreset::ReadOnly);
        if let Err(err) = runtime.block_on(s.call_raw("todo_write", &raw)) {
            prop_assert_eq!(err.code, ToolErrorCode::InvalidArgs);
        }
    }
}

#[tokio::test]
async fn pipes_are_refused_not_read() {
    let s = Scratch::new(PermissionPreset::WorkspaceWrite);
    let fifo = s.path("fifo");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    s.err(
        "read",
        json!({"file_path": "fifo"}),
        ToolErrorCode::NotAFile,
    )
    .await;
    s.err(
        "write",
        json!({"file_path": "fifo", "content": "x"}),
        ToolErrorCode::NotAFile,
    )
    .await;
    s.err(
        "read",
        json!({"file_path": "/dev/null"}),
        ToolErrorCode::NotAFile,
    )
    .await;
}
