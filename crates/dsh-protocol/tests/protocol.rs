//! The protocol over the real loop: a real agent on the fake provider over HTTP, the real
//! `bash` tool and safety policy, approvals answered through the broker as a front end would.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ApprovalDecision, ExtensionSet, SafetyPolicy};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_protocol::{
    CardState, EndState, Interactions, Op, SessionControl, ViewEvent, ViewProjector, Waiting,
};
use dsh_session::{load_file, open_store, StoreKind};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::json;

fn text(reply: &str) -> ScriptedReply {
    SseReply::new()
        .text(reply)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

/// A `bash` call that asks for danger-full-access, so the safety policy asks the user.
fn escalated(id: &str, command: &str) -> ScriptedReply {
    let arguments = json!({
        "command": command,
        "description": "test",
        "sandbox_permissions": "danger-full-access",
        "justification": "the test needs it",
    });
    SseReply::new()
        .tool_call(0, id, "bash", &arguments.to_string())
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

struct Session {
    agent: Agent,
    control: SessionControl,
    location: String,
    _guards: Vec<dsh_agent::ExtensionGuard>,
}

fn session(provider: &FakeProvider, home: &Path, cwd: &Path, broker: Interactions) -> Session {
    session_in(provider, home, cwd, broker, StoreKind::Jsonl)
}

fn session_in(
    provider: &FakeProvider,
    home: &Path,
    cwd: &Path,
    broker: Interactions,
    kind: StoreKind,
) -> Session {
    let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
        provider.base_url(),
        Some(dsh_deepseek::ApiKey::new("sk-protocol")),
    ))
    .unwrap();
    let mut adapters = AdapterRegistry::new();
    adapters.register("deepseek", Arc::new(adapter)).unwrap();
    let extensions = ExtensionSet::new();
    let retry = RetryPolicy {
        base_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    let mut guards =
        dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(30));
    guards.push(extensions.register(Arc::new(SafetyPolicy::new(
        PermissionPreset::WorkspaceWrite,
        "none",
        "test",
    ))));
    let call = CallConfig::new("deepseek", "deepseek-chat");
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(cwd, SpillDir::create(home.join("spill")).unwrap())
            .unwrap()
            .with_permission(PermissionPreset::WorkspaceWrite),
        options: AgentOptions::new(call.clone(), cwd),
    };
    let store = open_store(kind, &home.join("sessions")).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    agent.set_approver(Arc::new(broker.clone()));
    agent.set_asker(Arc::new(broker.clone()));
    let handle = agent.handle();
    let location = handle.location();
    let control = SessionControl::new(handle, broker, call, Arc::new(|_: &str| None), cwd);
    Session {
        agent,
        control,
        location,
        _guards: guards,
    }
}

/// The card states of call `id`, in order.
fn states(events: &[ViewEvent], id: &str) -> Vec<CardState> {
    events
        .iter()
        .filter_map(|e| match e {
            ViewEvent::ToolCard(card) if card.call_id == id => Some(card.state),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn live_and_stored_views_agree_and_cards_follow_the_lifecycle() {
    let provider = FakeProvider::start(vec![
        escalated("c1", "echo approved-run"),
        escalated("c2", "echo never"),
        text("done"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let broker = Interactions::interactive();
    let mut session = session(&provider, home.path(), cwd.path(), broker.clone());
    let mut live = session.control.handle().subscribe();

    // The front end: approves the first question, rejects the second, through operations.
    let control = session.control.clone();
    let mut waiting = broker.subscribe();
    let answering = tokio::spawn(async move {
        let mut answered = 0;
        while answered < 2 {
            let Ok(Waiting::Approval(request)) = waiting.recv().await else {
                continue;
            };
            let decision = if answered == 0 {
                ApprovalDecision::AllowOnce
            } else {
                ApprovalDecision::Reject {
                    message: "not this one".into(),
                }
            };
            control
                .submit(Op::Approve {
                    id: request.id,
                    decision,
                })
                .unwrap();
            answered += 1;
        }
    });

    session
        .control
        .submit(Op::Prompt(dsh_agent::new_user_message("go")))
        .unwrap();
    session.agent.run_turn().await.unwrap().unwrap();
    answering.await.unwrap();

    let mut projector = ViewProjector::default();
    let mut live_view = Vec::new();
    while let Ok(envelope) = live.try_recv() {
        live_view.extend(projector.project(&envelope));
    }
    let stored = load_file(Path::new(&session.location)).unwrap().events;
    let stored_view = ViewProjector::default().project_all(&stored);
    assert_eq!(
        live_view, stored_view,
        "a resumed view shows what the live one did"
    );

    assert_eq!(
        states(&stored_view, "c1"),
        [
            CardState::Pending,
            CardState::AwaitingApproval,
            CardState::Pending,
            CardState::Running,
            CardState::Done
        ]
    );
    assert_eq!(
        states(&stored_view, "c2"),
        [
            CardState::Pending,
            CardState::AwaitingApproval,
            CardState::Denied
        ]
    );
    // The question comes before its answer, and the answer before the call runs.
    let position = |pred: &dyn Fn(&ViewEvent) -> bool| stored_view.iter().position(pred).unwrap();
    let asked =
        position(&|e| matches!(e, ViewEvent::ApprovalRequested { call_id, .. } if call_id == "c1"));
    let decided = position(
        &|e| matches!(e, ViewEvent::ApprovalDecided { call_id: Some(c), outcome, .. } if c == "c1" && outcome == "approved"),
    );
    let running = position(
        &|e| matches!(e, ViewEvent::ToolCard(c) if c.call_id == "c1" && c.state == CardState::Running),
    );
    assert!(asked < decided && decided < running, "{stored_view:#?}");
    let card = stored_view
        .iter()
        .rev()
        .find_map(|e| match e {
            ViewEvent::ToolCard(c) if c.call_id == "c1" => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert!(card.result.unwrap().contains("approved-run"));
    assert!(card
        .presentation
        .subject
        .unwrap()
        .contains("echo approved-run"));
    assert!(matches!(
        stored_view.last(),
        Some(ViewEvent::TurnEnded {
            state: EndState::Completed,
            ..
        })
    ));
    // Every billed call is reported, with the session's running total.
    let requests: Vec<u64> = stored_view
        .iter()
        .filter_map(|e| match e {
            ViewEvent::Usage { total_requests, .. } => Some(*total_requests),
            _ => None,
        })
        .collect();
    assert_eq!(requests, [1, 2, 3]);
    // The model the steps called is shown once, when it first appears.
    let models: Vec<&ViewEvent> = stored_view
        .iter()
        .filter(|e| matches!(e, ViewEvent::ModelChanged { .. }))
        .collect();
    assert_eq!(models.len(), 1, "{models:?}");
}

#[tokio::test]
async fn a_cancelled_turn_withdraws_its_question_and_the_card_is_cancelled() {
    let provider = FakeProvider::start(vec![escalated("c1", "echo x"), text("unused")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let broker = Interactions::interactive();
    let mut session = session(&provider, home.path(), cwd.path(), broker.clone());
    let control = session.control.clone();
    let mut waiting = broker.subscribe();
    let cancelling = tokio::spawn(async move {
        let Ok(Waiting::Approval(request)) = waiting.recv().await else {
            panic!("no approval question");
        };
        let notes = control.submit(Op::Cancel { keep_queued: false }).unwrap();
        assert_eq!(notes, ["cancelling the running turn"]);
        request.id
    });
    session
        .control
        .submit(Op::Prompt(dsh_agent::new_user_message("go")))
        .unwrap();
    let _ = session.agent.run_turn().await;
    let id = cancelling.await.unwrap();
    let refused = session.control.submit(Op::Approve {
        id,
        decision: ApprovalDecision::AllowOnce,
    });
    assert_eq!(refused.unwrap_err().code, "NOT_WAITING");
    // The turn is over: a second cancel says nothing was running.
    let again = session.control.submit(Op::Cancel { keep_queued: false });
    assert_eq!(again.unwrap(), ["no turn was running"]);
    let stored = load_file(Path::new(&session.location)).unwrap().events;
    let view = ViewProjector::default().project_all(&stored);
    assert_eq!(
        states(&view, "c1"),
        [
            CardState::Pending,
            CardState::AwaitingApproval,
            CardState::Cancelled
        ]
    );
    assert!(matches!(
        view.last(),
        Some(ViewEvent::TurnEnded {
            state: EndState::Cancelled,
            ..
        })
    ));
}

fn write_call(id: &str, path: &str, content: &str) -> ScriptedReply {
    let arguments = json!({"file_path": path, "content": content});
    SseReply::new()
        .tool_call(0, id, "write", &arguments.to_string())
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

#[tokio::test]
async fn undo_is_an_operation_and_its_view_event_survives_resume() {
    let provider = FakeProvider::start(vec![
        write_call("w1", "notes.txt", "changed\n"),
        text("written"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // SQLite: the operation reads the log wherever the store keeps it.
    let mut session = session_in(
        &provider,
        home.path(),
        cwd.path(),
        Interactions::interactive(),
        StoreKind::Sqlite,
    );
    session
        .control
        .submit(Op::Prompt(dsh_agent::new_user_message("write it")))
        .unwrap();
    session.agent.run_turn().await.unwrap().unwrap();
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("notes.txt")).unwrap(),
        "changed\n"
    );
    let notes = session.control.submit(Op::Undo).unwrap();
    assert!(notes[0].contains("notes.txt (deleted"), "{notes:?}");
    assert!(!cwd.path().join("notes.txt").exists());
    let again = session.control.submit(Op::Undo).unwrap_err();
    assert_eq!(again.code, "UNDO_REFUSED");
    assert!(again.message.contains("nothing to undo"), "{again}");
    let stored = dsh_session::load_location(&session.location)
        .unwrap()
        .events;
    let view = ViewProjector::default().project_all(&stored);
    assert!(
        view.iter().any(|e| matches!(
            e,
            ViewEvent::FilesUndone {
                turn: 1,
                complete: true,
                ..
            }
        )),
        "{view:#?}"
    );
}
