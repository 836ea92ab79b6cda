//! Key handling of the prompts the runtime opens, through [`App::on_key`]: `ask_user_question`
//! answers reaching the asker, a cancelled turn closing the form, the `/permission` list and
//! its danger-full-access confirmation, the extensions' slash commands, and keys while a
//! `/review` runs.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_agent::{QuestionOption, QuestionRequest, UserAnswer, UserCommand, UserQuestion};
use dsh_protocol::Reply;
use dsh_tools::PermissionPreset;
use dsh_tui::app::{PendingQuestion, PermissionMenu};
use dsh_tui::commands::SlashCommand;
use dsh_tui::question::QuestionForm;
use dsh_tui::{Action, App, StatusInfo};

fn app() -> App {
    let mut app = App::new(StatusInfo {
        model: "m".into(),
        permission: "workspace-write".into(),
        ..StatusInfo::default()
    });
    app.loading = false;
    app
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn typed(app: &mut App, text: &str) -> Vec<Action> {
    let mut actions = Vec::new();
    for c in text.chars() {
        actions.extend(app.on_key(key(KeyCode::Char(c))));
    }
    actions
}

fn ask(app: &mut App, options: &[&str]) {
    app.questions.push_back(PendingQuestion {
        form: QuestionForm::new(QuestionRequest {
            call_id: "call_1".into(),
            questions: vec![UserQuestion {
                id: "q1".into(),
                question: "Which one?".into(),
                header: None,
                options: options
                    .iter()
                    .map(|label| QuestionOption {
                        label: (*label).into(),
                        description: None,
                    })
                    .collect(),
                multi_select: false,
            }],
        }),
    });
}

/// The one answer `actions` holds, for call `call_1`.
fn answer(actions: Vec<Action>) -> Reply {
    match actions.as_slice() {
        [Action::Answer { call_id, reply }] if call_id == "call_1" => reply.clone(),
        other => panic!("not one answer: {other:?}"),
    }
}

#[test]
fn an_answer_goes_to_the_asker_and_the_composer_is_left_alone() {
    let mut app = app();
    app.transcript.running = true;
    app.composer.insert_str("draft");
    ask(&mut app, &["a", "b"]);
    assert!(typed(&mut app, "2").is_empty());
    let actions = app.on_key(key(KeyCode::Enter));
    assert!(app.questions.is_empty());
    assert_eq!(
        answer(actions),
        Reply::Answers(vec![UserAnswer {
            id: "q1".into(),
            answers: vec!["b".into()],
        }])
    );
    assert_eq!(app.composer.text(), "draft");
}

#[test]
fn esc_then_enter_declines_with_the_typed_message() {
    let mut app = app();
    app.transcript.running = true;
    ask(&mut app, &[]);
    app.on_key(key(KeyCode::Esc));
    typed(&mut app, "skip it");
    let actions = app.on_key(key(KeyCode::Enter));
    assert_eq!(answer(actions), Reply::Decline("skip it".into()));
}

#[test]
fn ctrl_c_cancels_the_turn_and_closes_the_form() {
    let mut app = app();
    app.transcript.running = true;
    ask(&mut app, &["a"]);
    let actions = app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    // The cancel is the only thing sent: no answer (the broker forgets the question when the
    // turn ends).
    assert_eq!(actions, vec![Action::Cancel]);
    assert!(app.questions.is_empty());
}

/// The form's answer, submitted as the runtime submits it (`Op::Answer`), reaches the tool
/// waiting in the session's broker; closing the broker (quitting the UI) answers what still
/// waits "unavailable".
#[test]
fn the_forms_answer_reaches_the_waiting_tool_through_the_broker() {
    use dsh_agent::{AskOutcome, Asker};
    let broker = dsh_protocol::Interactions::interactive();
    let request = QuestionRequest {
        call_id: "call_1".into(),
        questions: vec![UserQuestion {
            id: "q1".into(),
            question: "Which one?".into(),
            header: None,
            options: vec![QuestionOption {
                label: "a".into(),
                description: None,
            }],
            multi_select: false,
        }],
    };
    let asked = broker.ask(request.clone());
    let mut app = app();
    app.questions.push_back(PendingQuestion {
        form: QuestionForm::new(request.clone()),
    });
    let reply = answer(app.on_key(key(KeyCode::Enter)));
    broker.answer("call_1", reply).unwrap();
    assert_eq!(
        futures::executor::block_on(asked),
        AskOutcome::Answered(vec![UserAnswer {
            id: "q1".into(),
            answers: vec!["a".into()],
        }])
    );

    let asked = broker.ask(request);
    broker.close("the terminal UI closed before the user answered");
    assert!(matches!(
        futures::executor::block_on(asked),
        AskOutcome::Unavailable { .. }
    ));
}

#[test]
fn permission_list_and_confirmation() {
    let mut app = app();
    // `/permission` with no argument: the runtime opens the list on the preset in force.
    typed(&mut app, "/permission");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Permission(None))]
    );
    app.permission_menu = Some(PermissionMenu::new(PermissionPreset::WorkspaceWrite));
    assert_eq!(app.permission_menu.unwrap().selected, 2);
    app.on_key(key(KeyCode::Up));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Permission(Some(
            "ask".into()
        )))]
    );
    // Four presets: 1 is read-only, 4 danger-full-access, and 9 stops at the last.
    app.permission_menu = Some(PermissionMenu::new(PermissionPreset::WorkspaceWrite));
    app.on_key(key(KeyCode::Char('1')));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Permission(Some(
            "read-only".into()
        )))]
    );
    app.permission_menu = Some(PermissionMenu::new(PermissionPreset::ReadOnly));
    app.on_key(key(KeyCode::Char('9')));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Permission(Some(
            "danger-full-access".into()
        )))]
    );
    // Esc keeps the preset.
    app.permission_menu = Some(PermissionMenu::new(PermissionPreset::ReadOnly));
    assert!(app.on_key(key(KeyCode::Esc)).is_empty());
    assert!(app.permission_menu.is_none());

    // Typed with a prefix, Enter completes the preset.
    typed(&mut app, "/permission wo");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Permission(Some(
            "workspace-write".into()
        )))]
    );

    // The danger-full-access confirmation: Enter does nothing, n keeps, y switches.
    app.confirm_permission = Some(PermissionPreset::DangerFullAccess);
    assert!(app.on_key(key(KeyCode::Enter)).is_empty());
    assert!(typed(&mut app, "n").is_empty());
    assert!(app.confirm_permission.is_none());
    assert_eq!(app.hint.as_deref(), Some("kept workspace-write"));
    app.confirm_permission = Some(PermissionPreset::DangerFullAccess);
    assert_eq!(
        typed(&mut app, "y"),
        vec![Action::SetPermission(PermissionPreset::DangerFullAccess)]
    );
    assert!(app.composer.is_empty());
}

#[test]
fn extension_commands_complete_and_dispatch() {
    let mut app = app();
    app.user_commands = vec![UserCommand {
        name: "audit".into(),
        description: "Audit the changes.".into(),
        hint: None,
    }];
    typed(&mut app, "/aud");
    let names: Vec<String> = app.completions().into_iter().map(|c| c.0).collect();
    assert_eq!(names, ["/audit"]);
    app.on_key(key(KeyCode::Tab));
    assert_eq!(app.composer.text(), "/audit ");
    typed(&mut app, "the parser");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::User {
            name: "audit".into(),
            arguments: "the parser".into(),
        })]
    );
    // An unknown name stays in the composer with a hint.
    typed(&mut app, "/nope");
    assert!(app.on_key(key(KeyCode::Enter)).is_empty());
    assert_eq!(app.composer.text(), "/nope");
    assert!(app
        .hint
        .as_deref()
        .unwrap()
        .contains("unknown command /nope"));
}

/// The first text typed or pasted into an empty composer while no turn runs asks the runtime to
/// warm the provider connection (docs/tui.md, "Connection warm-up"); the keys after it, keys
/// while a turn runs, and keys that leave the composer empty do not.
#[test]
fn starting_a_message_while_idle_warms_the_connection() {
    let warms = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::WarmConnection))
            .count()
    };
    let mut app = app();
    assert_eq!(warms(&typed(&mut app, "f")), 1);
    assert_eq!(warms(&typed(&mut app, "ix it")), 0);
    // Emptied and started again: another message, another warm-up.
    for _ in 0.."fix it".len() {
        app.on_key(key(KeyCode::Backspace));
    }
    assert!(app.composer.is_empty());
    assert_eq!(warms(&app.on_key(key(KeyCode::Left))), 0);
    assert_eq!(warms(&app.on_paste("a pasted task")), 1);
    assert_eq!(warms(&app.on_paste(" and more")), 0);
    // While a turn runs the connection is in use: a steer or a queued message needs nothing.
    let mut busy = self::app();
    busy.transcript.running = true;
    assert_eq!(warms(&typed(&mut busy, "also")), 0);
    assert_eq!(warms(&busy.on_paste("x")), 0);
}

/// While a `/review` runs (docs/review.md, "In the TUI"): a message waits in the composer with
/// a hint, slash commands still go, Esc and Ctrl-C mark the review cancelled (the runtime
/// cancels it) and cancel no turn.
#[test]
fn a_running_review_holds_messages_and_esc_or_ctrl_c_cancel_it() {
    let request = dsh_tui::review::parse_args("--base main").unwrap();
    let mut app = app();
    app.review = Some(dsh_tui::review::Progress::new(&request));
    typed(&mut app, "fix it");
    assert!(app.on_key(key(KeyCode::Enter)).is_empty());
    assert_eq!(app.composer.text(), "fix it");
    assert!(app.hint.as_deref().unwrap().contains("a review is running"));
    assert!(app.on_key(key(KeyCode::Esc)).is_empty());
    assert!(app.review.as_ref().unwrap().cancelling);

    app.review.as_mut().unwrap().cancelling = false;
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert!(app.on_key(ctrl_c).is_empty());
    assert!(app.review.as_ref().unwrap().cancelling);
    assert_eq!(app.composer.text(), "fix it", "the draft is kept");

    app.composer.take();
    typed(&mut app, "/cost");
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        vec![Action::Command(SlashCommand::Cost)]
    );
}
