//! A resumed session shows what the live view showed (issue 39; docs/tui.md, "Resume"): a real
//! agent asks an approval the user answers through the session's broker (`Op::Approve`), the
//! user runs `/undo` (`Op::Undo`) and `/model` (`Op::SetModel`); the transcript folded from the
//! live feed and the one folded from the stored log are the same cells: the approval asked and
//! answered before its card, the card's final state, the undo and the model switch as notices.

use std::sync::Arc;

use dsh_agent::{ApprovalDecision, ExtensionSet, SafetyPolicy};
use dsh_llm::CallConfig;
use dsh_protocol::{CardState, Interactions, Op, SessionControl, Waiting};
use dsh_test_support::chunks::{text, tool_call};
use dsh_tools::PermissionPreset;
use dsh_tui::{Cell, Transcript};
use serde_json::json;

use crate::undo_diff::Session;

fn notices(cells: &[Cell]) -> Vec<String> {
    cells
        .iter()
        .filter_map(|c| match c {
            Cell::Notice { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_shows_what_the_live_view_showed() {
    let call =
        |id: &str, name: &str, args: serde_json::Value| tool_call(id, name, &args.to_string());
    // The safety policy asks before a call that wants a wider preset.
    let extensions = ExtensionSet::new();
    extensions.register_for_life(Arc::new(SafetyPolicy::new(
        PermissionPreset::WorkspaceWrite,
        "none",
        "test",
    )));
    let mut s = Session::with_extensions(
        vec![
            call(
                "b",
                "bash",
                json!({"command": "echo hi", "description": "greet",
                "sandbox_permissions": "danger-full-access", "justification": "the test"}),
            ),
            call(
                "w",
                "write",
                json!({"file_path": "made.txt", "content": "fresh\n"}),
            ),
            text("done"),
            text("noted"),
        ],
        extensions,
    );
    let broker = Interactions::interactive();
    s.agent.set_approver(Arc::new(broker.clone()));
    s.agent.set_asker(Arc::new(broker.clone()));
    let handle = s.agent.handle();
    let control = SessionControl::new(
        handle.clone(),
        broker.clone(),
        CallConfig::new("scripted", "m"),
        Arc::new(|_: &str| None),
        &s.cwd,
    );

    // The live view: the feed folded as the TUI folds it; the approval answered as the TUI
    // answers it, once the card shows that it waits.
    let mut feed = handle.subscribe();
    let mut waiting = broker.subscribe();
    let tools = handle.tools();
    let answering = control.clone();
    let viewer = tokio::spawn(async move {
        let mut live = Transcript::new();
        live.set_tools(&tools);
        let mut ended = 0;
        let mut seen_waiting = false;
        while ended < 2 {
            let envelope = feed.recv().await.unwrap();
            let end = matches!(envelope.event, dsh_session::Event::TurnEnd(_));
            live.apply(&envelope);
            ended += usize::from(end);
            let awaits = live.cells.iter().any(
                |c| matches!(c, Cell::Tool(card) if card.state() == CardState::AwaitingApproval),
            );
            if awaits && !seen_waiting {
                seen_waiting = true;
                // The working time stands still while the user decides.
                assert!(live.waiting_since.is_some());
                let before = live.working_time();
                tokio::time::sleep(std::time::Duration::from_millis(80)).await;
                assert_eq!(live.working_time(), before);
                let Ok(Waiting::Approval(request)) = waiting.recv().await else {
                    panic!("no approval waits")
                };
                let decision = ApprovalDecision::AllowOnce;
                let id = request.id;
                answering.submit(Op::Approve { id, decision }).unwrap();
            }
        }
        assert!(seen_waiting, "no card awaited approval");
        live
    });
    let first = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        s.turn("greet, then write"),
    )
    .await;
    if first.is_err() {
        // The viewer answers the approval: it failed before it did.
        viewer.await.unwrap();
        panic!("the approval was never answered");
    }
    assert_eq!(s.read("made.txt"), "fresh\n");
    let undone = control.submit(Op::Undo).unwrap();
    assert!(undone[0].contains("made.txt"), "{undone:?}");
    assert!(!s.cwd.join("made.txt").exists());
    control.submit(Op::ForceModel("m2".into())).unwrap();
    s.turn("what now?").await;
    let live = tokio::time::timeout(std::time::Duration::from_secs(20), viewer)
        .await
        .expect("the live view saw both turns")
        .unwrap();

    // Resumed: the stored log folded by a new transcript.
    let mut resumed = Transcript::new();
    resumed.set_tools(&handle.tools());
    for envelope in &s.events() {
        resumed.apply(envelope);
    }
    assert_eq!(resumed.cells, live.cells);

    let shown = notices(&resumed.cells);
    let at = |prefix: &str| {
        resumed
            .cells
            .iter()
            .position(|c| matches!(c, Cell::Notice { text, .. } if text.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no `{prefix}` notice in {shown:?}"))
    };
    let bash = resumed
        .cells
        .iter()
        .position(|c| matches!(c, Cell::Tool(card) if card.card.tool == "bash"))
        .unwrap();
    assert!(at("approval asked for bash") < at("approval approved"));
    assert!(at("approval approved") < bash);
    let Cell::Tool(card) = &resumed.cells[bash] else {
        unreachable!()
    };
    assert_eq!(card.state(), CardState::Done);
    let undo = at("undo: the file changes of turn 1 were reverted: ");
    assert!(
        shown.iter().any(|n| n.ends_with("made.txt (deleted)")),
        "{shown:?}"
    );
    assert!(undo > bash);
    assert!(at("model: m2 (scripted)") > undo);
}
