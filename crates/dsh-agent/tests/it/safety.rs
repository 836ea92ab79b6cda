//! The safety policy through the real loop: preset and sandbox records, escalation asked of the
//! approver (headless rejects, an interactive approver may allow once), and redaction of
//! secrets before results are logged or sent.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::tool_result_text;
use std::sync::{Arc, Mutex};

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ApprovalDecision, ApprovalRequest, Approver, ExtensionSet,
    ReplayAdapter, SafetyPolicy,
};
use dsh_llm::{AdapterRegistry, CallConfig};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind};
use dsh_tools::{
    PermissionPreset, SpillDir, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry,
};
use futures::future::BoxFuture;
use serde_json::{json, Value};

const SECRET: &str = "tok-abcdefgh123";

/// Reports the preset it runs under, and leaks a secret value in its output.
struct WhoAmI;

impl Tool for WhoAmI {
    fn name(&self) -> &str {
        "whoami"
    }
    fn description(&self) -> &str {
        "Reports the permission preset."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn execute<'a>(
        &'a self,
        _args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            Ok(ToolOutput::text(format!(
                "preset={} config=TOKEN={SECRET}",
                ctx.permission()
            )))
        })
    }
}

/// Allows everything and remembers what it was asked.
#[derive(Default)]
struct AllowAll {
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for AllowAll {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        self.asked.lock().unwrap().push(request);
        Box::pin(async { ApprovalDecision::AllowOnce })
    }
}

const ESCALATE: &str =
    r#"{"sandbox_permissions":"danger-full-access","justification":"needs the whole disk"}"#;

/// Runs one turn: a plain call, an escalated call, a plain call again, then text. Returns the
/// logged events and the raw log text.
async fn run(approver: Option<Arc<dyn Approver>>) -> (Vec<Envelope>, String) {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "whoami", "{}"),
        tool_call("c2", "whoami", ESCALATE),
        tool_call("c3", "whoami", "{}"),
        text("done"),
    ]));
    let mut adapters = AdapterRegistry::new();
    adapters.register("scripted", replies).unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(WhoAmI)).unwrap();
    let extensions = ExtensionSet::new();
    let _guard = extensions.register(Arc::new(
        SafetyPolicy::new(
            PermissionPreset::WorkspaceWrite,
            "landlock",
            "Landlock ABI 5",
        )
        .with_secret("MY_TOKEN", SECRET),
    ));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(tools),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite),
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    if let Some(approver) = approver {
        agent.set_approver(approver);
    }
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "done");
    let location = handle.location();
    let raw = std::fs::read_to_string(&location).unwrap();
    (
        load_file(std::path::Path::new(&location)).unwrap().events,
        raw,
    )
}

fn opaque<'a>(events: &'a [Envelope], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == kind => Some(data),
            _ => None,
        })
        .collect()
}

/// `(text, error code)` of every tool result, in order.
fn results(events: &[Envelope]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => Some((
                tool_result_text(&r.message),
                r.error.as_ref().map(|e| e.code.clone()),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn headless_rejects_escalation_logs_the_question_and_redacts() {
    let (events, raw) = run(None).await;

    let presets = opaque(&events, "permission/preset");
    assert_eq!(presets, vec![&json!({"preset": "workspace-write"})]);
    let modes = opaque(&events, "sandbox/mode");
    assert_eq!(modes.len(), 1);
    assert_eq!(modes[0]["mode"], "landlock");
    assert_eq!(modes[0]["network"], "unrestricted");

    let results = results(&events);
    assert_eq!(
        results[0],
        (
            "preset=workspace-write config=TOKEN=[REDACTED:MY_TOKEN]".to_string(),
            None
        )
    );
    assert_eq!(results[1].1.as_deref(), Some("PERMISSION_DENIED"));
    assert!(
        results[1].0.contains("headless") && results[1].0.contains("needs the whole disk"),
        "{}",
        results[1].0
    );
    assert_eq!(results[2].0, results[0].0);

    let asked = opaque(&events, "approval/asked");
    let decided = opaque(&events, "approval/decided");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["toolName"], "whoami");
    assert_eq!(asked[0]["callId"], "c2");
    assert_eq!(asked[0]["escalation"], "danger-full-access");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["id"], asked[0]["id"]);
    assert_eq!(decided[0]["outcome"], "rejected");

    assert!(!raw.contains(SECRET), "the secret reached the session file");
}

#[tokio::test]
async fn an_approver_can_allow_one_escalated_call() {
    let approver = Arc::new(AllowAll::default());
    let (events, raw) = run(Some(approver.clone())).await;
    let results = results(&events);
    assert!(results[0].0.starts_with("preset=workspace-write"));
    assert!(
        results[1].0.starts_with("preset=danger-full-access"),
        "{:?}",
        results[1]
    );
    assert!(
        results[2].0.starts_with("preset=workspace-write"),
        "the escalation must not outlive its call"
    );
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].call_id, "c2");
    assert_eq!(
        asked[0].escalation,
        Some(PermissionPreset::DangerFullAccess)
    );
    assert_eq!(
        opaque(&events, "approval/decided")[0]["outcome"],
        "approved"
    );
    assert!(!raw.contains(SECRET));
}

/// Switches the session to `read-only` through the agent's handle while it runs.
struct Switcher {
    handle: std::sync::OnceLock<dsh_agent::AgentHandle>,
}

impl Tool for Switcher {
    fn name(&self) -> &str {
        "switch"
    }
    fn description(&self) -> &str {
        "Switches the preset to read-only."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn execute<'a>(
        &'a self,
        _args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let handle = self.handle.get().unwrap();
            handle.set_permission(PermissionPreset::ReadOnly).unwrap();
            // The running call keeps the preset it started with.
            Ok(ToolOutput::text(format!(
                "switched under {}",
                ctx.permission()
            )))
        })
    }
}

fn source() -> dsh_agent::PermissionSource {
    Arc::new(|preset: PermissionPreset| {
        if preset == PermissionPreset::DangerFullAccess {
            return Err(dsh_agent::PermissionError::SandboxUnavailable(
                "not on this host".to_string(),
            ));
        }
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: Arc::new(dsh_tools::NoSandbox),
            sandbox_mode: "none".into(),
            sandbox_detail: format!("test for {preset}"),
            summary: format!("{preset} (test summary)"),
        })
    })
}

#[tokio::test]
async fn permission_switch_is_logged_at_once_and_applies_from_the_next_step() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "whoami", "{}"),
        tool_call("c2", "switch", "{}"),
        tool_call("c3", "whoami", "{}"),
        text("done"),
        tool_call("c4", "whoami", "{}"),
        text("again"),
    ]));
    let mut adapters = AdapterRegistry::new();
    adapters.register("scripted", replies).unwrap();
    let switcher = Arc::new(Switcher {
        handle: std::sync::OnceLock::new(),
    });
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(WhoAmI)).unwrap();
    tools.register(switcher.clone()).unwrap();
    let extensions = ExtensionSet::new();
    let _safety = extensions.register(Arc::new(SafetyPolicy::new(
        PermissionPreset::WorkspaceWrite,
        "landlock",
        "Landlock ABI 5",
    )));
    let _context = extensions.register(Arc::new(dsh_agent::ContextMessages::new(
        cwd.path(),
        None,
        Box::new(dsh_agent::SystemContext {
            permission: "workspace-write (initial)".into(),
        }),
    )));
    let parts = AgentParts {
        adapters,
        tools: Arc::new(tools),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite),
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();

    // Without a source the session cannot switch, and says how to get another preset.
    let err = handle
        .set_permission(PermissionPreset::ReadOnly)
        .unwrap_err();
    assert!(err.to_string().contains("--permission"), "{err}");
    assert_eq!(handle.permission(), PermissionPreset::WorkspaceWrite);

    agent.set_permission_source(source());
    assert!(switcher.handle.set(handle.clone()).is_ok());
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "done");
    assert_eq!(handle.permission(), PermissionPreset::ReadOnly);

    // A preset the source refuses leaves the session as it was.
    let err = handle
        .set_permission(PermissionPreset::DangerFullAccess)
        .unwrap_err();
    assert!(err.to_string().contains("not on this host"), "{err}");
    assert_eq!(handle.permission(), PermissionPreset::ReadOnly);
    // Switching to the preset in force logs nothing.
    handle.set_permission(PermissionPreset::ReadOnly).unwrap();

    handle.followup("again").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "again");

    let events = load_file(std::path::Path::new(&handle.location()))
        .unwrap()
        .events;
    let results: Vec<String> = results(&events).into_iter().map(|r| r.0).collect();
    assert!(
        results[0].starts_with("preset=workspace-write"),
        "{results:?}"
    );
    assert_eq!(results[1], "switched under workspace-write");
    assert!(results[2].starts_with("preset=read-only"), "{results:?}");
    assert!(results[3].starts_with("preset=read-only"), "{results:?}");
    assert_eq!(
        opaque(&events, "permission/preset"),
        vec![
            &json!({"preset": "workspace-write"}),
            &json!({"preset": "read-only"})
        ]
    );
    let modes = opaque(&events, "sandbox/mode");
    assert_eq!(modes.len(), 2, "{modes:?}");
    assert_eq!(modes[1]["mode"], "none");
    // The model is told in the runtime context of the step where the switch applies.
    let runtime: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::UserMessage(m) if m.text().starts_with("Runtime context") => Some(m.text()),
            _ => None,
        })
        .collect();
    assert_eq!(runtime.len(), 2, "{runtime:?}");
    assert!(runtime[0].contains("workspace-write (initial)"));
    assert!(runtime[1].contains("read-only (test summary)"));
    // The switch is logged before the step it applies to.
    let switch_seq = events
        .iter()
        .position(|e| matches!(&e.event, Event::Opaque { data, .. } if data == &json!({"preset": "read-only"})))
        .unwrap();
    let c3_seq = events
        .iter()
        .position(|e| matches!(&e.event, Event::ToolCall(c) if c.call_id == "c3"))
        .unwrap();
    assert!(switch_seq < c3_seq);
}
