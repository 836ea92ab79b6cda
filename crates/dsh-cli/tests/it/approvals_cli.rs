//! `dsh approvals list|remove` with the real binary and a temporary DSH_HOME, and `dsh run`
//! using a remembered rule (fake provider on loopback), also under `--permission ask`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{dsh_command, output, session_files};

use dsh_agent::{approvals_path, proposed_rule, read_rules, write_rules, ApprovalRule};
use dsh_tools::PermissionPreset;

fn dsh(home: &Path, args: &[&str]) -> Output {
    dsh_command(home, home).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn rules() -> Vec<ApprovalRule> {
    let cwd = Path::new("/work");
    let bash = |command: &str| serde_json::json!({"command": command}).to_string();
    vec![
        proposed_rule("bash", &bash("cargo test --all"), cwd, None).unwrap(),
        proposed_rule("mcp__github__create_issue", "{}", cwd, None).unwrap(),
        proposed_rule(
            "bash",
            &bash("npm install"),
            cwd,
            Some(PermissionPreset::DangerFullAccess),
        )
        .unwrap(),
        proposed_rule("write", r#"{"file_path":".env"}"#, cwd, None).unwrap(),
    ]
}

#[test]
fn list_and_remove_rules() {
    let home = tempfile::tempdir().unwrap();
    let path: PathBuf = approvals_path(home.path());

    let empty = stdout(&dsh(home.path(), &["approvals", "list"]));
    assert!(empty.contains("no remembered approvals"), "{empty}");

    write_rules(&path, &rules()).unwrap();
    let listed = stdout(&dsh(home.path(), &["approvals", "list"]));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(
        lines,
        vec![
            "  1  `bash` commands starting with `cargo test`",
            "  2  every call of `mcp__github__create_issue`",
            "  3  `bash` commands starting with `npm install` (under danger-full-access)",
            "  4  `write` of /work/.env",
        ]
    );

    let removed = stdout(&dsh(home.path(), &["approvals", "remove", "2"]));
    assert!(removed.contains("mcp__github__create_issue"), "{removed}");
    let left = read_rules(&path).unwrap();
    assert_eq!(left.len(), 3);
    assert!(left.iter().all(|r| r.tool != "mcp__github__create_issue"));

    for bad in ["9", "0", "two"] {
        let failed = dsh(home.path(), &["approvals", "remove", bad]);
        assert_eq!(failed.status.code(), Some(1), "{bad}");
        let err = String::from_utf8_lossy(&failed.stderr);
        assert!(err.contains("dsh approvals list"), "{bad}: {err}");
    }
    assert_eq!(read_rules(&path).unwrap().len(), 3);

    let all = stdout(&dsh(home.path(), &["approvals", "remove", "all"]));
    assert!(all.contains("removed 3 rule(s)"), "{all}");
    assert!(read_rules(&path).unwrap().is_empty());

    // A damaged file is named, with the way out.
    std::fs::write(&path, "not json").unwrap();
    let damaged = dsh(home.path(), &["approvals", "list"]);
    assert_eq!(damaged.status.code(), Some(1));
    let err = String::from_utf8_lossy(&damaged.stderr);
    assert!(
        err.contains("approvals.json") && err.contains("approvals remove all"),
        "{err}"
    );
    let cleared = stdout(&dsh(home.path(), &["approvals", "remove", "all"]));
    assert!(cleared.contains("removed"), "{cleared}");
    assert!(read_rules(&path).unwrap().is_empty());
}

/// One escalated `bash` call, then a final text.
async fn provider_escalating(command: &str) -> dsh_test_support::FakeProvider {
    use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
    let args = serde_json::json!({
        "command": command,
        "description": "needs more",
        "sandbox_permissions": "danger-full-access",
        "justification": "the test asks",
    })
    .to_string();
    FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_1", "bash", &args)
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("done")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap()
}

/// `dsh run` in `cwd` against `base_url`; returns the output and the session log's text.
async fn dsh_run(home: &Path, cwd: &Path, base_url: &str) -> (Output, String) {
    let mut cmd = dsh_command(home, cwd);
    cmd.env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-test-approvals-0123456789")
        .args(["run", "go"]);
    let out = output(cmd).await;
    // A run refused at start leaves no session: its log is empty.
    let log = session_files(home)
        .last()
        .map(|file| std::fs::read_to_string(file).unwrap())
        .unwrap_or_default();
    (out, log)
}

/// The data of the session's only `tool/result`.
fn tool_result(log: &str) -> serde_json::Value {
    let results: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "tool/result")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(results.len(), 1, "{log}");
    results[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_run_uses_a_remembered_rule_and_refuses_without_one() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".git")).unwrap();

    // Without a rule, headless refuses and says how to allow it.
    let provider = provider_escalating("printf remembered").await;
    let (out, log) = dsh_run(home.path(), cwd.path(), &provider.base_url()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = tool_result(&log);
    assert_eq!(result["error"]["code"], "PERMISSION_DENIED", "{result}");
    assert!(result.to_string().contains("always allow"), "{result}");

    // With the rule an interactive "always allow" would have written, the call runs.
    let rule = proposed_rule(
        "bash",
        r#"{"command":"printf remembered"}"#,
        cwd.path(),
        Some(PermissionPreset::DangerFullAccess),
    )
    .unwrap();
    write_rules(&approvals_path(home.path()), &[rule]).unwrap();
    std::fs::remove_dir_all(home.path().join("sessions")).unwrap();
    let provider = provider_escalating("printf remembered").await;
    let (out, log) = dsh_run(home.path(), cwd.path(), &provider.base_url()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = tool_result(&log);
    assert!(result["error"].is_null(), "{result}");
    assert!(
        result.to_string().contains("\"text\":\"remembered\""),
        "{result}"
    );
    assert!(log.contains("\"scope\":\"rule\""), "{log}");

    // A damaged rules file stops dsh at start, naming the file and the way out.
    std::fs::write(approvals_path(home.path()), "{").unwrap();
    let (out, _) = dsh_run(home.path(), cwd.path(), "http://127.0.0.1:9").await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("approvals.json") && err.contains("approvals remove all"),
        "{err}"
    );
}

/// `dsh run --permission ask` (the real binary, headless): nobody can approve, so a write and
/// a command are refused with the headless message; a remembered "always" rule lets exactly
/// its command run, and the write stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_run_under_ask_runs_only_what_a_rule_allows() {
    use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let provider = || async {
        let step = |id: &str, tool: &str, args: serde_json::Value| {
            ScriptedReply::from(
                SseReply::new()
                    .tool_call(0, id, tool, &args.to_string())
                    .finish("tool_calls", Some(WireUsage::default())),
            )
        };
        FakeProvider::start([
            step(
                "call_w",
                "write",
                serde_json::json!({"file_path": "written.txt", "content": "x"}),
            ),
            step(
                "call_b",
                "bash",
                serde_json::json!({"command": "printf remembered", "description": "print"}),
            ),
            ScriptedReply::from(
                SseReply::new()
                    .text("done")
                    .finish("stop", Some(WireUsage::default())),
            ),
        ])
        .await
        .unwrap()
    };
    let run = |base_url: String| {
        let mut cmd = dsh_command(home.path(), cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-test-approvals-0123456789")
            .args(["run", "--permission", "ask", "go"]);
        output(cmd)
    };
    let results = |log: &str| -> Vec<serde_json::Value> {
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["type"] == "tool/result")
            .map(|event| event["data"].clone())
            .collect()
    };

    let fake = provider().await;
    let out = run(fake.base_url()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(session_files(home.path()).last().unwrap()).unwrap();
    assert!(log.contains("\"preset\":\"ask\""), "{log}");
    let refused = results(&log);
    assert_eq!(refused.len(), 2, "{log}");
    for result in &refused {
        assert_eq!(result["error"]["code"], "PERMISSION_DENIED", "{result}");
        assert!(
            result.to_string().contains("nobody can approve"),
            "{result}"
        );
    }
    assert!(!cwd.path().join("written.txt").exists());

    let rule = proposed_rule(
        "bash",
        r#"{"command":"printf remembered"}"#,
        cwd.path(),
        None,
    )
    .unwrap();
    write_rules(&approvals_path(home.path()), &[rule]).unwrap();
    std::fs::remove_dir_all(home.path().join("sessions")).unwrap();
    let fake = provider().await;
    let out = run(fake.base_url()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(session_files(home.path()).last().unwrap()).unwrap();
    let results = results(&log);
    assert_eq!(results.len(), 2, "{log}");
    assert_eq!(
        results[0]["error"]["code"], "PERMISSION_DENIED",
        "{}",
        results[0]
    );
    assert!(results[1]["error"].is_null(), "{}", results[1]);
    assert!(
        results[1].to_string().contains("remembered"),
        "{}",
        results[1]
    );
    assert!(!cwd.path().join("written.txt").exists());
}
