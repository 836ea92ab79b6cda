//! Fuzz targets for tool-argument parsing and the built-in tools, written as property tests (no
//! nightly toolchain for `cargo fuzz` here).
//!
//! Properties:
//! - `parse_raw_arguments` never panics; it accepts exactly the blank strings and the JSON
//!   objects (agreeing with `serde_json`), on arbitrary strings and on mutated valid arguments;
//! - every built-in tool, called through the registry with mutated valid arguments or arbitrary
//!   JSON in a real temp dir (`workspace-write`), returns a result or an error with a code and an
//!   `Error: ` text, never panics, and never creates anything outside the workspace and temp
//!   dirs. `bash` runs under `read-only` (no sandbox is configured, so it never executes).
//!
//! Case counts are bounded for CI; `DSH_FUZZ_CASES=<n>` runs each property `n` times instead
//! (for example `DSH_FUZZ_CASES=20000 cargo test --release -p dsh-tools --test it fuzz_props`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use common::Scratch;
use dsh_test_support::fuzz::config;
use dsh_tools::{parse_raw_arguments, PermissionPreset, ToolErrorCode};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Valid arguments of each tool, the starting points of mutation.
fn seeds() -> Vec<(&'static str, Value)> {
    vec![
        ("read", json!({"file_path": "a.txt"})),
        (
            "read",
            json!({"file_path": "dir/b.rs", "offset": 2, "limit": 3}),
        ),
        (
            "write",
            json!({"file_path": "new.txt", "content": "hello\n"}),
        ),
        ("write", json!({"file_path": "a.txt", "content": "over"})),
        (
            "edit",
            json!({"file_path": "a.txt", "old_string": "alpha", "new_string": "gamma"}),
        ),
        (
            "edit",
            json!({"file_path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": true}),
        ),
        ("glob", json!({"pattern": "**/*.rs"})),
        ("glob", json!({"pattern": "*", "path": "dir"})),
        ("grep", json!({"pattern": "fn\\s+\\w+", "include": "*.rs"})),
        ("grep", json!({"pattern": "alpha", "path": "."})),
        (
            "todo_write",
            json!({"todos": [{"content": "x", "status": "pending"}]}),
        ),
        (
            "bash",
            json!({"command": "echo hi", "description": "say hi"}),
        ),
    ]
}

/// Replacement values: wrong types, extremes, path tricks, regex and glob edge cases.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(1.5e300)),
        Just(json!(true)),
        Just(json!([])),
        Just(json!({})),
        Just(json!("")),
        Just(json!("..")),
        Just(json!("../../escape.txt")),
        Just(json!("/etc/passwd")),
        Just(json!("/proc/self/mem")),
        Just(json!("dir")),
        Just(json!("a.txt/child")),
        Just(json!("nul\u{0}byte")),
        Just(json!("(((((")),
        Just(json!("[z-a]")),
        Just(json!("**/**/**")),
        Just(json!("{a,{b,{c")),
        Just(json!("\\")),
        Just(json!("é😀\u{202e}")),
        Just(json!([{"content": 1, "status": "done"}])),
        Just(json!([{"content": "x", "status": "in_progress"}, {"content": "y"}])),
        "[a-z.*?{}\\[\\]()\\\\/ é]{0,12}".prop_map(Value::String),
    ]
}

#[derive(Debug, Clone)]
enum Edit {
    Replace(prop::sample::Index, Value),
    Remove(prop::sample::Index),
    Add(&'static str, Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    let keys = vec![
        "file_path",
        "offset",
        "limit",
        "content",
        "old_string",
        "new_string",
        "replace_all",
        "pattern",
        "path",
        "include",
        "todos",
        "extra",
    ];
    prop_oneof![
        3 => (any::<prop::sample::Index>(), odd_value()).prop_map(|(k, v)| Edit::Replace(k, v)),
        1 => any::<prop::sample::Index>().prop_map(Edit::Remove),
        1 => (prop::sample::select(keys), odd_value()).prop_map(|(k, v)| Edit::Add(k, v)),
    ]
}

fn apply(mut args: Value, edits: &[Edit]) -> Value {
    let map = args.as_object_mut().unwrap();
    for e in edits {
        let keys: Vec<String> = map.keys().cloned().collect();
        match e {
            Edit::Replace(k, v) if !keys.is_empty() => {
                map.insert(k.get(&keys).clone(), v.clone());
            }
            Edit::Remove(k) if !keys.is_empty() => {
                map.remove(k.get(&keys));
            }
            Edit::Add(k, v) => {
                map.insert((*k).to_string(), v.clone());
            }
            _ => {}
        }
    }
    args
}

/// Byte-level mutations of an argument string.
fn mutate_text(text: &str, cuts: &[(usize, u8)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(at, b) in cuts {
        let len = bytes.len();
        match b % 3 {
            0 if len > 0 => {
                bytes.remove(at % len);
            }
            1 => {
                let alphabet = b"{}[]\",:\\ 0e-";
                bytes.insert(at % (len + 1), alphabet[(b as usize) % alphabet.len()]);
            }
            _ => bytes.truncate(at % (len + 1)),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn scratch(preset: PermissionPreset) -> Scratch {
    let s = Scratch::new(preset);
    s.put("a.txt", "alpha\nbeta\nalpha\n");
    s.put("dir/b.rs", "fn main() {}\nfn other() {}\n");
    s
}

fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn raw_arguments_parse_exactly_when_they_are_blank_or_an_object(
        raw in prop_oneof![".{0,40}", "[{}\\[\\]\":,0-9a-z \\\\]{0,30}"],
    ) {
        let expected_ok = raw.trim().is_empty()
            || serde_json::from_str::<Value>(&raw).is_ok_and(|v| v.is_object());
        match parse_raw_arguments(&raw) {
            Ok(value) => {
                prop_assert!(expected_ok, "accepted {:?}", raw);
                prop_assert!(value.is_object());
            }
            Err(err) => {
                prop_assert!(!expected_ok, "refused {:?}: {}", raw, err.message);
                prop_assert_eq!(err.code, ToolErrorCode::InvalidArgs);
                prop_assert!(!err.message.is_empty());
            }
        }
    }

    #[test]
    fn mutated_argument_text_parses_or_is_invalid_args(
        seed in any::<prop::sample::Index>(),
        cuts in prop::collection::vec((any::<usize>(), any::<u8>()), 1..5),
    ) {
        let (_, args) = seed.get(&seeds()).clone();
        let raw = mutate_text(&args.to_string(), &cuts);
        if let Err(err) = parse_raw_arguments(&raw) {
            prop_assert_eq!(err.code, ToolErrorCode::InvalidArgs);
        }
    }
}

proptest! {
    // Each case builds a temp tree and runs a real tool: fewer cases by default.
    #![proptest_config(config(96))]

    #[test]
    fn tools_on_mutated_arguments_give_a_result_or_a_coded_error(
        seed in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 0..4),
        raw_cuts in prop::option::of(prop::collection::vec((any::<usize>(), any::<u8>()), 1..3)),
    ) {
        let (tool, args) = seed.get(&seeds()).clone();
        let preset = if tool == "bash" { PermissionPreset::ReadOnly } else { PermissionPreset::WorkspaceWrite };
        let s = scratch(preset);
        let args = apply(args, &edits);
        let raw = match &raw_cuts {
            Some(cuts) => mutate_text(&args.to_string(), cuts),
            None => args.to_string(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let result = runtime.block_on(s.call_raw(tool, &raw));
        if let Err(err) = result {
            prop_assert!(!err.message.is_empty());
            prop_assert!(err.result_text().starts_with("Error: "), "{}", err.result_text());
        }
        prop_assert_eq!(entries(&s.outside), 0, "{} {} wrote outside the workspace", tool, raw);
    }
}
