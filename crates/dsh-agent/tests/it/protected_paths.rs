//! Protected paths through the real loop and the real `write`/`edit` tools
//! (docs/SECURITY.md, "Protected paths"): under `workspace-write` each call to a protected
//! path is asked of the approver with the reason "writes <path>, which configures code that
//! runs later (...)"; approved calls write, rejected ones do not, headless refuses with
//! `PERMISSION_DENIED` naming the path. Also: leftover `.dsh-tmp-<hex>` files of logged
//! write/edit calls are removed when the session resumes.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ApprovalDecision, ApprovalRequest, Approver, ExtensionSet,
    ReplayAdapter, SafetyPolicy,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind};
use dsh_test_support::chunks::{text, tool_call};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use futures::future::BoxFuture;
use serde_json::json;

const REASON_TAIL: &str =
    ", which configures code that runs later (git hooks/config, dsh settings, .env)";

/// `(call path, what the approval reason names)`.
const PROTECTED: [(&str, &str); 10] = [
    (".git/hooks/pre-commit", ".git/hooks/pre-commit"),
    (".git/config", ".git/config"),
    (".dsh/hooks.json", ".dsh/hooks.json"),
    (".dsh/config.toml", ".dsh/config.toml"),
    (".env", ".env"),
    (".env.local", ".env.local"),
    (".mcp.json", ".mcp.json"),
    (".agents/x", ".agents/x"),
    ("sub/.dsh/config.toml", "sub/.dsh/config.toml"),
    ("link/hooks/x", ".git/hooks/x (as link/hooks/x)"),
];

/// Approves the calls whose id is listed, rejects the others, and remembers every question.
struct Scripted {
    allow: BTreeSet<String>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Scripted {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        let allowed = self.allow.contains(&request.call_id);
        self.asked.lock().unwrap().push(request);
        Box::pin(async move {
            if allowed {
                ApprovalDecision::AllowOnce
            } else {
                ApprovalDecision::Reject {
                    message: "the user said no".into(),
                }
            }
        })
    }
}

/// A canonical workspace with `.git/hooks` and `link -> .git`.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(cwd.join(".git/hooks")).unwrap();
    symlink(".git", cwd.join("link")).unwrap();
    (dir, cwd)
}

/// Runs one turn of `replies` with the real built-in tools under `workspace-write` in `cwd`;
/// returns the session's events and the session file.
async fn run(
    cwd: &Path,
    home: &Path,
    replies: Vec<Vec<Chunk>>,
    approver: Option<Arc<dyn Approver>>,
) -> (Vec<Envelope>, String) {
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(replies)))
        .unwrap();
    let tool_context = ToolContext::new(cwd, SpillDir::create(home.join("spill")).unwrap())
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite);
    let extensions = ExtensionSet::new();
    extensions.register_for_life(Arc::new(
        SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "none", "test")
            .with_workspace(tool_context.cwd(), tool_context.writable_roots()),
    ));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context,
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd),
    };
    let store = open_store(StoreKind::Jsonl, home).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    if let Some(approver) = approver {
        agent.set_approver(approver);
    }
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "done");
    let location = handle.location();
    (load_file(Path::new(&location)).unwrap().events, location)
}

/// `(call id, error code, result text)` of every tool result.
fn results(events: &[Envelope]) -> Vec<(String, Option<String>, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => {
                let dsh_llm::MessageSource::Tool { call_id } = &r.message.source else {
                    return None;
                };
                let text = serde_json::to_string(&r.message.content).unwrap();
                Some((
                    call_id.clone(),
                    r.error.as_ref().map(|e| e.code.clone()),
                    text,
                ))
            }
            _ => None,
        })
        .collect()
}

fn write_calls() -> Vec<Vec<Chunk>> {
    let mut replies: Vec<Vec<Chunk>> = PROTECTED
        .iter()
        .enumerate()
        .map(|(i, (path, _))| {
            let args = json!({"file_path": path, "content": format!("planted {i}\n")});
            tool_call(&format!("w{i}"), "write", &args.to_string())
        })
        .collect();
    // An ordinary file asks nothing.
    replies.push(tool_call(
        "plain",
        "write",
        &json!({"file_path": "src/lib.rs", "content": "ok\n"}).to_string(),
    ));
    replies.push(text("done"));
    replies
}

#[tokio::test]
async fn protected_writes_are_asked_and_follow_the_answer() {
    let (_dir, cwd) = workspace();
    let home = tempfile::tempdir().unwrap();
    // Even-numbered calls are approved, odd ones rejected.
    let allow = (0..PROTECTED.len())
        .filter(|i| i % 2 == 0)
        .map(|i| format!("w{i}"))
        .collect();
    let approver = Arc::new(Scripted {
        allow,
        asked: Mutex::new(Vec::new()),
    });
    let (events, _) = run(&cwd, home.path(), write_calls(), Some(approver.clone())).await;

    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), PROTECTED.len(), "{asked:#?}");
    let results = results(&events);
    for (i, (path, named)) in PROTECTED.iter().enumerate() {
        let request = &asked[i];
        assert_eq!(request.call_id, format!("w{i}"));
        assert_eq!(request.tool_name, "write");
        assert_eq!(request.escalation, None);
        assert_eq!(request.reason, format!("writes {named}{REASON_TAIL}"));
        let (id, code, text) = &results[i];
        assert_eq!(id, &format!("w{i}"));
        if i % 2 == 0 {
            assert_eq!(code, &None, "{path}: {text}");
            assert_eq!(
                std::fs::read_to_string(cwd.join(path)).unwrap(),
                format!("planted {i}\n")
            );
        } else {
            assert_eq!(code.as_deref(), Some("PERMISSION_DENIED"), "{path}");
            assert!(text.contains("the user said no"), "{text}");
            assert!(!cwd.join(path).exists(), "{path} was written");
        }
    }
    assert_eq!(results[PROTECTED.len()].1, None);
    assert_eq!(
        std::fs::read_to_string(cwd.join("src/lib.rs")).unwrap(),
        "ok\n"
    );
    let logged: Vec<_> = events
        .iter()
        .filter(|e| matches!(&e.event, Event::Opaque { event_type, .. } if event_type == "approval/asked"))
        .collect();
    assert_eq!(logged.len(), PROTECTED.len());
}

#[tokio::test]
async fn headless_refuses_protected_writes_and_edits_naming_the_path() {
    let (_dir, cwd) = workspace();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(cwd.join(".env"), "MODE=safe\n").unwrap();
    let mut replies = write_calls();
    replies.pop();
    replies.push(tool_call(
        "r",
        "read",
        &json!({"file_path": ".env"}).to_string(),
    ));
    replies.push(tool_call(
        "e",
        "edit",
        &json!({"file_path": ".env", "old_string": "safe", "new_string": "pwned"}).to_string(),
    ));
    replies.push(text("done"));
    let (events, _) = run(&cwd, home.path(), replies, None).await;
    let results = results(&events);
    for (i, (path, named)) in PROTECTED.iter().enumerate() {
        let (_, code, text) = &results[i];
        assert_eq!(code.as_deref(), Some("PERMISSION_DENIED"), "{path}: {text}");
        assert!(text.contains("headless"), "{text}");
        assert!(text.contains(&format!("writes {named}")), "{text}");
        if *path != ".env" {
            assert!(!cwd.join(path).exists(), "{path} was written");
        }
    }
    let (_, code, text) = results.last().unwrap();
    assert_eq!(code.as_deref(), Some("PERMISSION_DENIED"), "{text}");
    assert!(text.contains("writes .env"), "{text}");
    assert_eq!(
        std::fs::read_to_string(cwd.join(".env")).unwrap(),
        "MODE=safe\n"
    );
}

#[tokio::test]
async fn an_approved_edit_of_a_protected_file_is_applied() {
    let (_dir, cwd) = workspace();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.join(".dsh")).unwrap();
    std::fs::write(cwd.join(".dsh/config.toml"), "model = \"a\"\n").unwrap();
    let approver = Arc::new(Scripted {
        allow: ["e".to_string()].into(),
        asked: Mutex::new(Vec::new()),
    });
    let replies = vec![
        tool_call(
            "r",
            "read",
            &json!({"file_path": ".dsh/config.toml"}).to_string(),
        ),
        tool_call(
            "e",
            "edit",
            &json!({"file_path": ".dsh/config.toml", "old_string": "\"a\"", "new_string": "\"b\""})
                .to_string(),
        ),
        text("done"),
    ];
    let (events, _) = run(&cwd, home.path(), replies, Some(approver.clone())).await;
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "reading asks nothing");
    assert_eq!(
        asked[0].reason,
        format!("writes .dsh/config.toml{REASON_TAIL}")
    );
    assert_eq!(results(&events)[1].1, None);
    assert_eq!(
        std::fs::read_to_string(cwd.join(".dsh/config.toml")).unwrap(),
        "model = \"b\"\n"
    );
}

#[tokio::test]
async fn resume_removes_leftover_temp_files_beside_logged_writes() {
    let (_dir, cwd) = workspace();
    let home = tempfile::tempdir().unwrap();
    let replies = vec![
        tool_call(
            "w",
            "write",
            &json!({"file_path": "sub/notes.txt", "content": "x\n"}).to_string(),
        ),
        text("done"),
    ];
    let (_, location) = run(&cwd, home.path(), replies, None).await;
    // What a crash between creating and renaming the temp file leaves behind.
    let leftover = cwd.join("sub/.dsh-tmp-0123456789abcdef0123456789abcdef");
    std::fs::write(&leftover, "half").unwrap();
    let keep = [
        cwd.join("sub/.dsh-tmp-notours"),
        cwd.join("sub/.dsh-tmp-0123456789ABCDEF0123456789ABCDEF"),
        // Not beside a file the session wrote.
        cwd.join("other/.dsh-tmp-fedcba9876543210fedcba9876543210"),
    ];
    std::fs::create_dir(cwd.join("other")).unwrap();
    for path in &keep {
        std::fs::write(path, "keep").unwrap();
    }

    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(vec![text("done")])))
        .unwrap();
    let tool_context = ToolContext::new(&cwd, SpillDir::create(home.path().join("s2")).unwrap())
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite);
    let extensions = ExtensionSet::new();
    extensions.register_for_life(Arc::new(
        SafetyPolicy::new(PermissionPreset::WorkspaceWrite, "none", "test")
            .with_workspace(tool_context.cwd(), tool_context.writable_roots()),
    ));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context,
        options: AgentOptions::new(CallConfig::new("scripted", "m"), &cwd),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let _agent = Agent::resume(parts, store.as_ref(), &location).unwrap();

    assert!(!leftover.exists(), "the leftover temp file is still there");
    assert_eq!(
        std::fs::read_to_string(cwd.join("sub/notes.txt")).unwrap(),
        "x\n"
    );
    for path in &keep {
        assert!(path.exists(), "{} was removed", path.display());
    }
}
