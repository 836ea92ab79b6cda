//! Approval choices through the real loop with the real `bash` tool: allow once, allow for the
//! session, always allow (persisted in `$DSH_HOME/approvals.json` and used by a new agent in the
//! same home), reject, and compound commands that a prefix rule must not cover.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::tool_result_text;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_agent::{
    approvals_path, read_rules, Agent, AgentOptions, AgentParts, ApprovalChoice, ApprovalDecision,
    ApprovalRequest, ApprovalRules, Approver, ExtensionSet, ReplayAdapter, SafetyPolicy,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk};
use dsh_session::{load_file, open_store, Event, StoreKind};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use futures::future::BoxFuture;
use serde_json::{json, Value};

/// Answers questions from a script, in order, and keeps them.
struct Scripted {
    answers: Mutex<VecDeque<ApprovalDecision>>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Scripted {
    fn new(answers: Vec<ApprovalDecision>) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.into()),
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl Approver for Scripted {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        self.asked.lock().unwrap().push(request);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("asked more often than the script expected");
        Box::pin(async move { answer })
    }
}

/// A `bash` call asking to run `command` under danger-full-access (so the safety policy asks).
fn escalated(id: &str, command: &str) -> Vec<Chunk> {
    tool_call(
        id,
        "bash",
        &json!({
            "command": command,
            "description": "test",
            "sandbox_permissions": "danger-full-access",
            "justification": "the test needs it",
        })
        .to_string(),
    )
}

struct Outcome {
    /// `(text, error code)` per tool result.
    results: Vec<(String, Option<String>)>,
    decided: Vec<Value>,
}

/// One turn in `home` with `calls`, answered by `approver` (headless when `None`).
async fn run(home: &Path, calls: Vec<Vec<Chunk>>, approver: Option<Arc<dyn Approver>>) -> Outcome {
    let cwd = tempfile::tempdir().unwrap();
    let mut replies = calls;
    replies.push(text("done"));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(replies)))
        .unwrap();
    let extensions = ExtensionSet::new();
    let _guard = extensions.register(Arc::new(SafetyPolicy::new(
        PermissionPreset::WorkspaceWrite,
        "none",
        "test",
    )));
    let mut options = AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path());
    options.approval_rules = Arc::new(ApprovalRules::load(home).unwrap());
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(cwd.path(), SpillDir::create(home.join("spill")).unwrap())
            .unwrap()
            .with_permission(PermissionPreset::WorkspaceWrite),
        options,
    };
    let store = open_store(StoreKind::Jsonl, &home.join("sessions")).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    if let Some(approver) = approver {
        agent.set_approver(approver);
    }
    let handle = agent.handle();
    handle.followup("go").unwrap();
    agent.run_turn().await.unwrap().unwrap();
    let location = handle.location();
    drop(agent);
    let events = load_file(Path::new(&location)).unwrap().events;
    let mut outcome = Outcome {
        results: Vec::new(),
        decided: Vec::new(),
    };
    for envelope in &events {
        match &envelope.event {
            Event::ToolResult(r) => {
                let text = tool_result_text(&r.message);
                outcome
                    .results
                    .push((text, r.error.as_ref().map(|e| e.code.clone())));
            }
            Event::Opaque { event_type, data } if event_type == "approval/decided" => {
                outcome.decided.push(data.clone())
            }
            _ => {}
        }
    }
    outcome
}

fn ran(result: &(String, Option<String>), output: &str) {
    assert_eq!(result.1, None, "{result:?}");
    assert!(result.0.contains(output), "{result:?}");
}

fn refused(result: &(String, Option<String>)) {
    assert_eq!(result.1.as_deref(), Some("PERMISSION_DENIED"), "{result:?}");
}

#[tokio::test]
async fn once_session_always_and_reject() {
    let home = tempfile::tempdir().unwrap();
    let approver = Scripted::new(vec![
        ApprovalDecision::AllowOnce,
        ApprovalDecision::AllowSession,
        ApprovalDecision::Reject {
            message: "not that one".into(),
        },
        ApprovalDecision::AllowAlways,
    ]);
    let first = run(
        home.path(),
        vec![
            escalated("c1", "echo one"),
            // "once" remembered nothing: asked again, allowed for the session.
            escalated("c2", "echo one"),
            // Covered by the session rule `echo one`: not asked.
            escalated("c3", "echo one more"),
            // A compound command: no rule covers it, and none is offered.
            escalated("c4", "echo one; echo two"),
            escalated("c5", "printf hi"),
        ],
        Some(approver.clone()),
    )
    .await;
    ran(&first.results[0], "one");
    ran(&first.results[1], "one");
    ran(&first.results[2], "one more");
    refused(&first.results[3]);
    assert!(first.results[3].0.contains("not that one"));
    ran(&first.results[4], "hi");

    let asked = approver.asked.lock().unwrap().clone();
    let commands: Vec<String> = asked
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.arguments).unwrap()["command"].to_string())
        .collect();
    assert_eq!(
        commands,
        vec![
            "\"echo one\"",
            "\"echo one\"",
            "\"echo one; echo two\"",
            "\"printf hi\""
        ]
    );
    let all = vec![
        ApprovalChoice::AllowOnce,
        ApprovalChoice::AllowSession,
        ApprovalChoice::AllowAlways,
        ApprovalChoice::Reject,
    ];
    assert_eq!(asked[0].choices, all);
    assert_eq!(
        asked[0].rule.as_ref().unwrap().describe(),
        "`bash` commands starting with `echo one` (under danger-full-access)"
    );
    assert_eq!(
        asked[2].choices,
        vec![ApprovalChoice::AllowOnce, ApprovalChoice::Reject]
    );
    assert!(asked[2].rule.is_none());

    let scopes: Vec<&str> = first
        .decided
        .iter()
        .map(|d| d["scope"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, vec!["once", "session", "rule", "once", "always"]);
    assert_eq!(first.decided[2]["ruleScope"], "session");

    // Only the "always" rule reached the file.
    let rules = read_rules(&approvals_path(home.path())).unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].command_prefix.as_deref(), Some("printf hi"));
    assert_eq!(rules[0].escalation.as_deref(), Some("danger-full-access"));

    // A new agent in the same home, headless: the persisted rule answers for `printf hi ...`;
    // the session rule of the first agent is gone; compound commands are never covered.
    let second = run(
        home.path(),
        vec![
            escalated("d1", "printf hi-again"),
            escalated("d2", "printf hi there"),
            escalated("d3", "echo one"),
            escalated("d4", "printf hi && touch pwned"),
            escalated("d5", "printf hi $(touch pwned)"),
            escalated("d6", "printf hi\ntouch pwned"),
        ],
        None,
    )
    .await;
    // `printf hi-again` is another word than `hi`: asked, so refused headless.
    refused(&second.results[0]);
    // `printf hi there` prints its format, `hi`.
    ran(&second.results[1], "hi");
    refused(&second.results[2]);
    refused(&second.results[3]);
    refused(&second.results[4]);
    refused(&second.results[5]);
    assert!(
        second.results[3].0.contains("headless"),
        "{:?}",
        second.results[3]
    );
    assert_eq!(second.decided[1]["scope"], "rule");
    assert_eq!(second.decided[1]["ruleScope"], "always");
}

#[tokio::test]
async fn an_answer_that_was_not_offered_only_allows_once() {
    let home = tempfile::tempdir().unwrap();
    // "always" for a compound command (no rule offered) allows this call only.
    let approver = Scripted::new(vec![
        ApprovalDecision::AllowAlways,
        ApprovalDecision::Reject {
            message: "no".into(),
        },
    ]);
    let outcome = run(
        home.path(),
        vec![
            escalated("c1", "echo a; echo b"),
            escalated("c2", "echo a; echo b"),
        ],
        Some(approver.clone()),
    )
    .await;
    ran(&outcome.results[0], "a");
    refused(&outcome.results[1]);
    assert_eq!(outcome.decided[0]["scope"], "once");
    assert!(read_rules(&approvals_path(home.path())).unwrap().is_empty());
    assert_eq!(approver.asked.lock().unwrap().len(), 2);
}
