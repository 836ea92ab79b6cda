//! `glob` and `grep` over real trees: .gitignore, ordering, caps with spill files, errors.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::time::{Duration, SystemTime};

use common::Scratch;
use dsh_tools::{PermissionPreset, ToolErrorCode};
use serde_json::json;

fn scratch() -> Scratch {
    Scratch::new(PermissionPreset::ReadOnly)
}

fn age(s: &Scratch, rel: &str, secs_ago: u64) {
    let t = SystemTime::now() - Duration::from_secs(secs_ago);
    std::fs::File::options()
        .write(true)
        .open(s.path(rel))
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn tree() -> Scratch {
    let s = scratch();
    s.put(".gitignore", "target/\n*.log\n");
    s.put("main.rs", "fn main() {\n    helper();\n}\n");
    s.put("src/lib.rs", "pub fn helper() {}\n// TODO: more\n");
    s.put("src/deep/mod.rs", "// todo lower\nfn helper_two() {}\n");
    s.put("target/gen.rs", "fn helper() {}\n");
    s.put("debug.log", "helper\n");
    s.put(".github/ci.yml", "helper: yes\n");
    s.put(".git/config", "helper\n");
    age(&s, "main.rs", 300);
    age(&s, "src/lib.rs", 100);
    age(&s, "src/deep/mod.rs", 200);
    s
}

#[tokio::test]
async fn glob_respects_gitignore_and_sorts_newest_first() {
    let s = tree();
    let out = s.ok("glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(out, "src/lib.rs\nsrc/deep/mod.rs\nmain.rs");
    let out = s.ok("glob", json!({"pattern": "src/*.rs"})).await;
    assert_eq!(out, "src/lib.rs");
    let out = s.ok("glob", json!({"pattern": "src/**/*.rs"})).await;
    assert_eq!(out, "src/lib.rs\nsrc/deep/mod.rs");
    let out = s.ok("glob", json!({"pattern": "*.{yml,log}"})).await;
    assert_eq!(out, ".github/ci.yml");
    let out = s
        .ok("glob", json!({"pattern": "*.rs", "path": "src/deep"}))
        .await;
    assert_eq!(out, "src/deep/mod.rs");
    let abs = format!("{}/src/**/*.rs", s.cwd.display());
    let out = s.ok("glob", json!({"pattern": abs})).await;
    assert_eq!(out, "src/lib.rs\nsrc/deep/mod.rs");
    let out = s.ok("glob", json!({"pattern": "*.py"})).await;
    assert!(out.starts_with("No files matched"));
}

#[tokio::test]
async fn glob_caps_at_100_and_spills_the_full_list() {
    let s = scratch();
    for i in 0..150 {
        s.put(&format!("f/{i:03}.txt"), "x");
    }
    let out = s.call("glob", json!({"pattern": "*.txt"})).await.unwrap();
    let text = out.text_content();
    let listed = text.lines().take_while(|l| !l.is_empty()).count();
    assert_eq!(listed, 100);
    assert!(text.contains("(Showing 100 of 150 files, newest first. Full list saved to: "));
    let path = text.split("Full list saved to: ").nth(1).unwrap();
    let path = &path[..path.find(". Narrow").unwrap()];
    assert_eq!(std::fs::read_to_string(path).unwrap().lines().count(), 150);
    assert_eq!(out.data.unwrap()["total"], 150);
}

#[tokio::test]
async fn glob_errors() {
    let s = tree();
    s.err(
        "glob",
        json!({"pattern": "a[b"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "glob",
        json!({"pattern": "*.rs", "path": "nowhere"}),
        ToolErrorCode::NotFound,
    )
    .await;
    s.err(
        "glob",
        json!({"pattern": "*.rs", "path": "main.rs"}),
        ToolErrorCode::NotAFile,
    )
    .await;
    let msg = s
        .err("glob", json!({"path": "src"}), ToolErrorCode::InvalidArgs)
        .await;
    assert!(msg.contains("pattern"));
}

#[tokio::test]
async fn grep_formats_and_respects_gitignore() {
    let s = tree();
    let out = s.ok("grep", json!({"pattern": "helper"})).await;
    assert_eq!(
        out,
        ".github/ci.yml:1:helper: yes\nmain.rs:2:    helper();\nsrc/deep/mod.rs:2:fn helper_two() {}\nsrc/lib.rs:1:pub fn helper() {}"
    );
    let out = s
        .ok("grep", json!({"pattern": "(?i)todo", "include": "*.rs"}))
        .await;
    assert_eq!(
        out,
        "src/deep/mod.rs:1:// todo lower\nsrc/lib.rs:2:// TODO: more"
    );
    let out = s
        .ok("grep", json!({"pattern": "helper", "path": "src/lib.rs"}))
        .await;
    assert_eq!(out, "src/lib.rs:1:pub fn helper() {}");
    let out = s
        .ok(
            "grep",
            json!({"pattern": "fn \\w+\\(\\)", "path": "src", "include": "deep/*.rs"}),
        )
        .await;
    assert_eq!(out, "src/deep/mod.rs:2:fn helper_two() {}");
    let out = s.ok("grep", json!({"pattern": "nothing-here"})).await;
    assert!(out.starts_with("No matches found"));
}

#[tokio::test]
async fn grep_skips_binary_files() {
    let s = scratch();
    std::fs::write(s.path("bin.dat"), b"needle\0\x01\x02needle").unwrap();
    s.put("text.txt", "needle\n");
    let out = s.ok("grep", json!({"pattern": "needle"})).await;
    assert_eq!(out, "text.txt:1:needle");
}

#[tokio::test]
async fn grep_caps_at_250_and_spills_the_full_list() {
    let s = scratch();
    let body: String = (1..=200).map(|i| format!("match {i}\n")).collect();
    s.put("a.txt", &body);
    s.put("b.txt", &body);
    let out = s.call("grep", json!({"pattern": "^match"})).await.unwrap();
    let text = out.text_content();
    assert_eq!(text.lines().filter(|l| l.contains(":match ")).count(), 250);
    assert!(text.starts_with("a.txt:1:match 1\na.txt:2:match 2\n"));
    assert!(text.contains("(Showing 250 of 400 matches. Full list saved to: "));
    let path = text.split("Full list saved to: ").nth(1).unwrap();
    let path = &path[..path.find(". Narrow").unwrap()];
    let full = std::fs::read_to_string(path).unwrap();
    assert_eq!(full.lines().count(), 400);
    assert!(full.ends_with("b.txt:200:match 200"));
}

#[tokio::test]
async fn grep_errors() {
    let s = tree();
    let msg = s
        .err(
            "grep",
            json!({"pattern": "fn ("}),
            ToolErrorCode::InvalidArgs,
        )
        .await;
    assert!(msg.contains("regular expression"));
    s.err(
        "grep",
        json!({"pattern": "x", "include": "{a"}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "grep",
        json!({"pattern": "x", "path": "nowhere"}),
        ToolErrorCode::NotFound,
    )
    .await;
    s.err(
        "grep",
        json!({"pattern": ["x"]}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
}

/// Over the cap, `glob` picks in turns across the search directory's top-level entries (as
/// dsh's recording `fs-glob-sampling` shows): 8 files in 6 entries with a cap of 4 reach 4
/// entries, one file each, and the note gives both counts.
#[tokio::test]
async fn glob_over_the_cap_samples_across_top_level_entries() {
    use dsh_tools::Tool;
    let s = scratch();
    for file in [
        "tree/archive/a.ts",
        "tree/archive/b.ts",
        "tree/archive/c.ts",
        "tree/docs/guide.md",
        "tree/src/index.ts",
        "tree/test/spec.ts",
        "tree/top.txt",
        "tree/notes.md",
    ] {
        s.put(file, "fixture\n");
    }
    let glob = dsh_tools::GlobTool::new(4, true);
    let out = glob
        .execute(json!({"pattern": "*", "path": "tree"}), &s.ctx)
        .await
        .unwrap();
    let text = out.text_content();
    let listed: Vec<&str> = text.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(listed.len(), 4, "{text}");
    let mut entries: Vec<&str> = listed
        .iter()
        .map(|l| l.trim_start_matches("tree/").split('/').next().unwrap())
        .collect();
    entries.dedup();
    assert_eq!(entries.len(), 4, "one path from each of 4 entries: {text}");
    assert!(
        text.contains(
            "(Showing 4 of 8 files, sampled across 4 of the 6 top-level entries under tree"
        ),
        "{text}"
    );
    assert!(text.contains("narrow `path`"), "{text}");
    let data = out.data.unwrap();
    assert_eq!(
        (&data["entriesShown"], &data["entriesTotal"]),
        (&json!(4), &json!(6))
    );

    // Head mode keeps the newest four.
    let head = dsh_tools::GlobTool::new(4, false)
        .execute(json!({"pattern": "*", "path": "tree"}), &s.ctx)
        .await
        .unwrap()
        .text_content();
    assert!(
        head.contains("(Showing 4 of 8 files, newest first."),
        "{head}"
    );

    // Within the cap nothing is sampled or noted.
    let all = dsh_tools::GlobTool::new(8, true)
        .execute(json!({"pattern": "*", "path": "tree"}), &s.ctx)
        .await
        .unwrap()
        .text_content();
    assert_eq!(all.lines().count(), 8, "{all}");
}

#[tokio::test]
async fn grep_cap_follows_its_setting() {
    use dsh_tools::Tool;
    let s = scratch();
    s.put("many.txt", &"needle\n".repeat(12));
    let grep = dsh_tools::GrepTool::new(5);
    assert!(grep.description().contains("At most 5 matches"));
    let text = grep
        .execute(json!({"pattern": "needle"}), &s.ctx)
        .await
        .unwrap()
        .text_content();
    assert_eq!(text.lines().take_while(|l| !l.is_empty()).count(), 5);
    assert!(text.contains("(Showing 5 of 12 matches"), "{text}");
}
