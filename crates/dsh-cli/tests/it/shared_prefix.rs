//! Cross-session prompt cache (docs/harbor.md, "Prompt cache across sessions"): the first
//! requests of two sessions in different working directories, with different homes (as on two
//! machines), carry the same system prompt and tool schemas byte for byte; the directory only
//! appears in the runtime context message after them.

use std::process::Stdio;

use crate::common::{dsh_command, output as run};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

async fn first_request(project: &str) -> (serde_json::Value, String) {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("ok")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let cwd = root.path().join(project);
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = dsh_command(home.path(), &cwd);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-prefix")
        .stdin(Stdio::null())
        .args(["run", "--permission", "danger-full-access", "say ok"]);
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    (
        requests[0].body.clone(),
        cwd.canonicalize().unwrap().display().to_string(),
    )
}

#[tokio::test]
async fn system_prompt_and_tools_are_identical_across_directories_and_homes() {
    let (a, cwd_a) = first_request("alpha-project").await;
    let (b, cwd_b) = first_request("beta/nested-project").await;
    let system = |body: &serde_json::Value| body["messages"][0].clone();
    assert_eq!(system(&a)["role"], "system");
    assert_eq!(
        serde_json::to_string(&system(&a)).unwrap(),
        serde_json::to_string(&system(&b)).unwrap(),
        "system prompts differ"
    );
    assert!(a["tools"].as_array().is_some_and(|t| !t.is_empty()));
    assert_eq!(
        serde_json::to_string(&a["tools"]).unwrap(),
        serde_json::to_string(&b["tools"]).unwrap(),
        "tool schemas differ"
    );
    // Neither names its directory before the messages that follow the system prompt...
    let head_a = serde_json::to_string(&(system(&a), &a["tools"])).unwrap();
    assert!(!head_a.contains(&cwd_a), "cwd in system prompt or tools");
    let head_b = serde_json::to_string(&(system(&b), &b["tools"])).unwrap();
    assert!(!head_b.contains(&cwd_b));
    // ...and each tells the model its directory in a later message.
    let rest_a = serde_json::to_string(&a["messages"].as_array().unwrap()[1..]).unwrap();
    assert!(rest_a.contains(&cwd_a), "the runtime context lacks the cwd");
}
