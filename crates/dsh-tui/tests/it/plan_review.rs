//! The plan review of `exit_plan_mode` (docs/agent.md, "Plan mode") in the TUI's question form:
//! approve, approve with an edited plan, keep planning with feedback, and dismiss, each read
//! back by `dsh_agent::decision_of` as the tool reads it.

#![allow(clippy::unwrap_used)]

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_agent::{decision_of, review_request, AskOutcome, Asker, PlanDecision};
use dsh_protocol::Interactions;
use dsh_tui::app::PendingQuestion;
use dsh_tui::question::QuestionForm;
use dsh_tui::{Action, App, StatusInfo};
use futures::future::BoxFuture;

const PLAN: &str = "# Add a greeting flag\n\n- parse `--greeting`";

/// The review waiting in a session's broker, as `exit_plan_mode` asks it, and in the form.
fn review(app: &mut App, broker: &Interactions) -> BoxFuture<'static, AskOutcome> {
    let request = review_request("call_plan", PLAN);
    let asked = broker.ask(request.clone());
    app.questions.push_back(PendingQuestion {
        form: QuestionForm::new(request),
    });
    asked
}

fn app() -> App {
    let mut app = App::new(StatusInfo {
        model: "m".into(),
        permission: "read-only".into(),
        ..StatusInfo::default()
    });
    app.loading = false;
    app.transcript.running = true;
    app
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn decide(keys: &[KeyCode], paste: Option<&str>, after_paste: &[KeyCode]) -> PlanDecision {
    let mut app = app();
    let broker = Interactions::interactive();
    let asked = review(&mut app, &broker);
    let mut actions = Vec::new();
    for code in keys {
        actions.extend(app.on_key(key(*code)));
    }
    if let Some(text) = paste {
        actions.extend(app.on_paste(text));
    }
    for code in after_paste {
        actions.extend(app.on_key(key(*code)));
    }
    assert!(app.questions.is_empty(), "the review is still open");
    // Submitted as the runtime submits it (`Op::Answer`), checked by the broker.
    for action in actions {
        if let Action::Answer { call_id, reply } = action {
            broker.answer(&call_id, reply).unwrap();
        }
    }
    decision_of(futures::executor::block_on(asked))
}

#[test]
fn approve_as_shown() {
    let decision = decide(
        &[KeyCode::Char('1'), KeyCode::Enter, KeyCode::Enter],
        None,
        &[],
    );
    assert_eq!(decision, PlanDecision::Approved);
}

#[test]
fn approve_with_an_edited_plan() {
    let decision = decide(
        &[KeyCode::Char('1'), KeyCode::Enter],
        Some("# Add a greeting flag, default Hello"),
        &[KeyCode::Enter],
    );
    assert_eq!(
        decision,
        PlanDecision::ApprovedWithEdits {
            plan: "# Add a greeting flag, default Hello".into()
        }
    );
}

#[test]
fn keep_planning_with_feedback() {
    let decision = decide(
        &[KeyCode::Char('2'), KeyCode::Enter],
        Some("add tests first"),
        &[KeyCode::Enter],
    );
    assert_eq!(
        decision,
        PlanDecision::Rejected {
            feedback: "add tests first".into()
        }
    );
}

#[test]
fn dismissing_the_review_cancels_it() {
    let decision = decide(&[KeyCode::Esc, KeyCode::Enter], None, &[]);
    assert!(
        matches!(decision, PlanDecision::Cancelled { .. }),
        "{decision:?}"
    );
}
