//! `dsh run --plan` with the real binary (docs/agent.md, "Plan mode"): the agent explores
//! read-only, its write and its `touch` change nothing, the presented plan is printed on stdout
//! and the run exits 0; the session log records plan mode.

use std::process::{Command, Stdio};

use crate::common::{dsh_command, output as run, session_file, text};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply};

fn call(id: &str, name: &str, args: serde_json::Value) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .tool_call(0, id, name, &args.to_string())
            .finish("tool_calls", None),
    )
}

const PLAN: &str = "# Add a greeting flag\n\n- parse `--greeting`\n- print it";

#[tokio::test]
async fn dsh_run_plan_prints_the_plan_and_changes_no_file() {
    let provider = FakeProvider::start([
        call(
            "c1",
            "bash",
            serde_json::json!({"command": "touch made.txt; echo x >> main.py", "description": "try"}),
        ),
        call(
            "c2",
            "write",
            serde_json::json!({"file_path": "main.py", "content": "changed\n"}),
        ),
        call(
            "c3",
            "edit",
            serde_json::json!({"file_path": "main.py", "old_string": "hi", "new_string": "yo"}),
        ),
        call("c4", "exit_plan_mode", serde_json::json!({ "plan": PLAN })),
        ScriptedReply::from(SseReply::new().text("Plan presented.").finish("stop", None)),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("main.py"), "print('hi')\n").unwrap();
    let mut cmd: Command = dsh_command(home.path(), cwd.path());
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-plan")
        .stdin(Stdio::null())
        .args(["run", "--plan", "--model", "deepseek-v4-flash"])
        .arg("add a greeting flag");
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(stdout.trim_end(), PLAN);
    // Nothing changed in the workspace.
    let names: Vec<String> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["main.py"]);
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("main.py")).unwrap(),
        "print('hi')\n"
    );
    // The log has plan mode on (and never off: nobody approved), the read-only preset, the
    // refusals and the unreviewed plan.
    let log = std::fs::read_to_string(session_file(home.path())).unwrap();
    let modes: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "plan/mode")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(modes, [serde_json::json!({"active": true})], "{log}");
    assert!(!log.contains(r#""active":false"#));
    assert!(log.contains(r#""preset":"read-only""#));
    assert!(log.contains("Read-only file system"));
    let refused = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "tool/result")
        .filter(|e| e["data"]["error"]["code"] == "PERMISSION_DENIED")
        .filter(|e| {
            e["data"]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the session is in plan mode"))
        })
        .count();
    assert_eq!(refused, 2, "write and edit are refused: {log}");
    assert!(log.contains(r#""decision":"unreviewed""#));
    assert!(!log.contains("sk-plan"));
    // The model was told it is in plan mode and that nobody reviews the plan now.
    let requests = provider.requests();
    assert!(requests[0]
        .body
        .to_string()
        .contains("switched this session to plan mode"));
    assert!(requests[4]
        .body
        .to_string()
        .contains("Nobody can review the plan"));
}
