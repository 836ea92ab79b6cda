//! The children panel and the followed child (docs/tui.md, "Children"), drawn with ratatui's
//! `TestBackend` from the events a child's feed carries: the panel lists the running child with
//! its label, state, activity and tokens; the parent's `subagent` card shows its activity; the
//! followed view draws the child's streamed text; a finished run closes the panel.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_agent::{ChildActivity, ChildIdentity};
use dsh_llm::Chunk;
use dsh_session::{AssistantChunk, Envelope, Event, ToolCall, TurnEnd, TurnEndReason, TurnStart};
use dsh_tui::view::{draw, ViewCache};
use dsh_tui::{App, Card, CardState, Cell, StatusInfo, ToolCard};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn child() -> Arc<ChildIdentity> {
    Arc::new(ChildIdentity {
        id: "child-session".into(),
        name: "agent-1".into(),
        label: "scan the repo".into(),
        model: "m".into(),
        depth: 1,
        log: PathBuf::from("/nonexistent/session.jsonl"),
    })
}

fn activity(seq: u64, event: Event) -> ChildActivity {
    let mut envelope = Envelope::new(event);
    envelope.seq = seq;
    ChildActivity {
        child: child(),
        call_id: Some("p1".into()),
        background: false,
        event: Arc::new(envelope),
    }
}

fn text(seq: u64, text: &str) -> ChildActivity {
    activity(
        seq,
        Event::AssistantChunk(AssistantChunk {
            turn: 1,
            step: 1,
            chunk: Chunk::TextDelta {
                index: 0,
                text: text.into(),
            },
        }),
    )
}

/// Feeds `activity` to the app as the runtime does.
fn feed(app: &mut App, activity: &ChildActivity) {
    if let Some((call, progress)) = app.children.apply(activity) {
        assert!(app.transcript.set_progress(&call, &progress));
    }
}

fn screen(app: &mut App, cache: &mut ViewCache) -> String {
    let mut terminal = Terminal::new(TestBackend::new(90, 20)).unwrap();
    terminal.draw(|f| draw(f, app, cache)).unwrap();
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            out.push_str(buffer[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

#[test]
fn the_panel_the_card_and_the_followed_view_show_a_child_at_work() {
    let mut app = App::new(StatusInfo::default());
    app.loading = false;
    app.transcript.running = true;
    app.transcript.cells.push(Cell::Tool(ToolCard {
        card: Card {
            call_id: "p1".into(),
            tool: "subagent".into(),
            // As `subagent` presents the call (its tool is the runtime's, not a standard one).
            presentation: dsh_tools::ToolPresentation::new("subagent").subject("scan the repo"),
            arguments: r#"{"description":"scan the repo","prompt":"look"}"#.into(),
            state: CardState::Running,
            summary: None,
            error_code: None,
            result: None,
            meta: None,
            progress: None,
        },
        progress: None,
    }));
    let mut cache = ViewCache::default();
    let before = screen(&mut app, &mut cache);
    assert!(
        before.contains("◌ subagent scan the repo  running…"),
        "{before}"
    );
    assert!(!before.contains("/agents to follow one"), "{before}");

    feed(
        &mut app,
        &activity(1, Event::TurnStart(TurnStart { turn: 1 })),
    );
    feed(&mut app, &text(2, "the child streams "));
    feed(&mut app, &text(3, "its findings"));
    let shown = screen(&mut app, &mut cache);
    let panel = shown
        .lines()
        .find(|l| l.contains("◌ agent-1"))
        .unwrap_or_else(|| panic!("no panel line:\n{shown}"));
    for part in ["scan the repo", "running", "writing", "↓ 2 tokens"] {
        assert!(panel.contains(part), "`{part}` not in `{panel}`");
    }
    assert!(
        shown.contains("◌ subagent scan the repo  agent-1 · writing"),
        "{shown}"
    );

    // A tool call becomes the activity.
    feed(
        &mut app,
        &activity(
            4,
            Event::ToolCall(ToolCall {
                turn: 1,
                step: 1,
                call_id: "c1".into(),
                name: "bash".into(),
                arguments: r#"{"command":"cargo test"}"#.into(),
                presentation: None,
            }),
        ),
    );
    let shown = screen(&mut app, &mut cache);
    assert!(shown.contains("agent-1 · bash $ cargo test"), "{shown}");

    // Following it draws its own transcript.
    app.children.follow("child-session");
    let followed = screen(&mut app, &mut cache);
    assert!(followed.contains("following agent-1"), "{followed}");
    assert!(
        followed.contains("the child streams its findings"),
        "{followed}"
    );
    assert!(followed.contains("bash $ cargo test"), "{followed}");
    app.children.followed = None;

    // Its end closes the panel and shows the state.
    feed(
        &mut app,
        &activity(
            5,
            Event::TurnEnd(TurnEnd {
                turn: 1,
                reason: TurnEndReason::Completed,
            }),
        ),
    );
    let after = screen(&mut app, &mut cache);
    assert!(!after.contains("/agents to follow one"), "{after}");
    assert_eq!(app.children.list[0].state.as_str(), "done");
    app.children.menu = Some(0);
    let menu = screen(&mut app, &mut cache);
    assert!(
        menu.lines()
            .any(|l| l.contains("agent-1") && l.contains("done")),
        "{menu}"
    );
}

#[test]
fn a_childs_missed_end_is_settled_by_the_parents_result() {
    let mut app = App::new(StatusInfo::default());
    let progress = app
        .children
        .apply(&activity(1, Event::TurnStart(TurnStart { turn: 1 })));
    assert_eq!(progress, Some(("p1".into(), "agent-1 · starting".into())));
    assert!(app.children.any_running());
    assert!(app.children.panel_rows() > 0);
    // Another call's result leaves it running; its own ends it.
    app.children.call_settled("other", CardState::Done);
    assert!(app.children.any_running());
    app.children.call_settled("p1", CardState::Failed);
    assert!(!app.children.any_running());
    assert_eq!(app.children.list[0].state.as_str(), "failed");
    assert_eq!(app.children.panel_rows(), 0);
}

/// A child's end is classified as every front end classifies it (docs/protocol.md, "Turn
/// ends"): a reply cut at the output limit failed (its tool calls were dropped), a run the
/// process stopped in was cancelled, an abort was cancelled, a completed run is done.
#[test]
fn a_childs_end_is_the_protocols_end_state() {
    let cases = [
        (TurnEndReason::Completed, "done"),
        (TurnEndReason::MaxTokens, "failed"),
        (TurnEndReason::Interrupted, "cancelled"),
        (TurnEndReason::Aborted { reason: None }, "cancelled"),
    ];
    for (reason, shown) in cases {
        let mut app = App::new(StatusInfo::default());
        app.children
            .apply(&activity(1, Event::TurnStart(TurnStart { turn: 1 })));
        app.children.apply(&activity(
            2,
            Event::TurnEnd(TurnEnd {
                turn: 1,
                reason: reason.clone(),
            }),
        ));
        assert_eq!(app.children.list[0].state.as_str(), shown, "{reason:?}");
        assert_eq!(app.children.list[0].activity, shown, "{reason:?}");
    }
}
