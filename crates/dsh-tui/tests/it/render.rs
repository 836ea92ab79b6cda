//! Rendering snapshots with ratatui's `TestBackend`: each tool card, reasoning, notices,
//! Markdown while it streams, and a whole screen with queue and status line.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::{AssistantChunk, AssistantMessage, Envelope, Event, PriceTable, ToolCall};
use dsh_tui::cards::render_cell;
use dsh_tui::{App, Cell, StatusInfo, Transcript};

use crate::support::{tool_cell, Outcome};
use ratatui::backend::TestBackend;
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Terminal;
use serde_json::json;

/// The cell drawn into a `width` x `height` test terminal, as text.
fn draw_cell(cell: &Cell, expand: bool, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|f| {
            f.render_widget(
                Paragraph::new(render_cell(cell, expand)).wrap(Wrap { trim: false }),
                f.area(),
            )
        })
        .unwrap();
    buffer_text(&terminal)
}

fn buffer_text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        for x in 0..buffer.area.width {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The foreground colour of the first cell in the buffer row that starts with `prefix`.
fn colour_of_row(cell: &Cell, prefix: &str) -> Option<ratatui::style::Color> {
    let lines = render_cell(cell, false);
    lines.iter().find_map(|line| {
        let text: String = line.spans.iter().map(|s| s.content.to_string()).collect();
        text.trim_start_matches("  │ ")
            .starts_with(prefix)
            .then(|| line.spans.last().and_then(|s| s.style.fg))
            .flatten()
    })
}

fn tool(name: &str, args: serde_json::Value, outcome: Outcome<'_>) -> Cell {
    tool_cell(name, &args.to_string(), outcome)
}

fn done(output: &str, meta: serde_json::Value) -> Outcome<'_> {
    Outcome::Done(output, meta)
}

#[test]
fn bash_cards() {
    let ok = tool(
        "bash",
        json!({"command": "cargo test -q", "description": "run tests"}),
        done(
            "running 3 tests\n...\ntest result: ok",
            json!({"exitCode": 0}),
        ),
    );
    let failed = tool(
        "bash",
        json!({"command": "false"}),
        done("(no output)\n[exit code: 1]", json!({"exitCode": 1})),
    );
    let running = tool("bash", json!({"command": "sleep 5"}), Outcome::Running);
    let text = [ok, failed, running]
        .iter()
        .map(|c| draw_cell(c, false, 60, 6))
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!("bash_cards", text);
}

/// The card's text rows, without the gutter.
fn card_rows(cell: &Cell) -> Vec<String> {
    render_cell(cell, false)
        .iter()
        .map(|line| {
            line.spans
                .iter()
                .map(|s| s.content.to_string())
                .collect::<String>()
        })
        .map(|row| row.trim_start_matches("  │ ").to_string())
        .collect()
}

#[test]
fn a_bash_card_says_how_much_of_a_huge_output_it_hides() {
    let bash = |output: &str, meta: serde_json::Value| {
        card_rows(&tool(
            "bash",
            json!({"command": "make"}),
            done(output, meta),
        ))
    };
    // Short lines: their count says it all.
    let short: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let rows = bash(&short, json!({"exitCode": 0}));
    assert_eq!(rows[1], "… 4 more lines", "{rows:#?}");
    assert_eq!(rows[2], "line 5", "{rows:#?}");
    // 300 KB in seven long lines: one line is hidden, but nearly all of the bytes are.
    let long: String = (0..7)
        .map(|i| format!("{i}{}\n", "x".repeat(42_856)))
        .collect();
    let rows = bash(&long, json!({"exitCode": 0}));
    assert_eq!(
        rows[1], "… 1 more line · 291.8 KiB of 293.0 KiB not shown (long lines cut)",
        "{rows:#?}"
    );
    // One line of 200 KB: no line is hidden, its bytes are.
    let rows = bash(&"y".repeat(200_000), json!({"exitCode": 0}));
    assert_eq!(
        rows[1], "… 195.1 KiB of 195.3 KiB not shown (long lines cut)",
        "{rows:#?}"
    );
    // Output cut before it reached the result (bash keeps a preview, `meta` has the size
    // written): the size of the whole output, and no count of the preview's lines.
    let preview: String = (1..=8).map(|i| format!("tail {i}\n")).collect();
    let rows = bash(
        &preview,
        json!({"exitCode": 0, "stdoutBytes": 300_000, "stderrBytes": 0}),
    );
    assert_eq!(rows[1], "… 292.9 KiB of 293.0 KiB not shown", "{rows:#?}");
    // As bash hands back 300 KB of output: a head and tail preview of about 50 KB naming the
    // file with the rest (docs/tools.md, "Externalising").
    let written: String = (0..3000)
        .map(|i| format!("{i:>5} {}\n", "z".repeat(93)))
        .collect();
    let spill = tempfile::tempdir().unwrap();
    let spill = dsh_tools::SpillDir::create(spill.path().join("spill")).unwrap();
    let preview = dsh_tools::externalize(&written, 50_000, &spill, "bash").unwrap();
    let rows = bash(
        &preview.text,
        json!({"exitCode": 0, "stdoutBytes": written.len(), "stderrBytes": 0}),
    );
    assert_eq!(
        rows[1], "… 292.5 KiB of 293.0 KiB not shown (long lines cut)",
        "{rows:#?}"
    );
    // Nothing hidden: no line about it.
    let rows = bash("ok\n", json!({"exitCode": 0, "stdoutBytes": 3}));
    assert_eq!(rows[1..], ["ok".to_string()], "{rows:#?}");
}

#[test]
fn edit_and_write_cards_show_a_coloured_diff() {
    let edit = tool(
        "edit",
        json!({"file_path": "src/lib.rs", "old_string": "a", "new_string": "b"}),
        done(
            "Edited src/lib.rs",
            json!({
                "diffs": [{"path": "src/lib.rs", "oldText": "fn a() {}\nfn keep() {}\nfn old() {}\n", "newText": "fn a() {}\nfn keep() {}\nfn new() {}\n"}],
                "added": 1, "removed": 1, "created": false
            }),
        ),
    );
    let write = tool(
        "write",
        json!({"file_path": "notes.md", "content": "hello\nworld\n"}),
        done(
            "Wrote notes.md",
            json!({"diffs": [{"path": "notes.md", "oldText": null, "newText": "hello\nworld\n"}], "added": 2, "removed": 0, "created": true}),
        ),
    );
    let text = format!(
        "{}----\n{}",
        draw_cell(&edit, false, 60, 6),
        draw_cell(&write, false, 60, 4)
    );
    insta::assert_snapshot!("edit_write_cards", text);
    assert_eq!(
        colour_of_row(&edit, "   3 + fn new"),
        Some(ratatui::style::Color::Green)
    );
    assert_eq!(
        colour_of_row(&edit, "   3 - fn old"),
        Some(ratatui::style::Color::Red)
    );
}

#[test]
fn read_glob_grep_and_failed_cards() {
    let cards = [
        tool(
            "read",
            json!({"file_path": "src/main.rs", "offset": 10, "limit": 50}),
            done("10\tfn main() {\n11\t}\n", json!({})),
        ),
        tool(
            "glob",
            json!({"pattern": "**/*.rs"}),
            done("a.rs\nb.rs", json!({"total": 2, "shown": 2})),
        ),
        tool(
            "grep",
            json!({"pattern": "TODO", "path": "src"}),
            done("...", json!({"total": 300, "shown": 250, "complete": true})),
        ),
        tool(
            "write",
            json!({"file_path": "/etc/passwd", "content": "x"}),
            Outcome::Failed("PERMISSION_DENIED", "outside the workspace"),
        ),
        // Each end state the protocol names is drawn apart: failed, cancelled, still waiting.
        tool(
            "bash",
            json!({"command": "sleep 99"}),
            Outcome::Failed("TOOL_TIMEOUT", "timed out after 60 s"),
        ),
        tool(
            "bash",
            json!({"command": "make"}),
            Outcome::Failed("ABORTED", "the turn was cancelled"),
        ),
        tool(
            "todo_write",
            json!({"todos": []}),
            done("Todo list updated", json!({})),
        ),
    ];
    let text = cards
        .iter()
        .map(|c| draw_cell(c, false, 60, 2))
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!("read_glob_grep_failed_cards", text);
}

#[test]
fn reasoning_collapsed_and_expanded_and_notices() {
    let reasoning = Cell::Reasoning {
        text: "First look at the tests.\nThen fix the bug.".into(),
        streaming: false,
    };
    let notices = [
        Cell::Notice {
            level: dsh_tui::NoticeLevel::Warn,
            text: "retry 1 in 0.5 s after RATE_LIMIT: slow down".into(),
        },
        Cell::Notice {
            level: dsh_tui::NoticeLevel::Info,
            text: "compacted: 12 old messages summarised".into(),
        },
    ];
    let mut text = draw_cell(&reasoning, false, 60, 1);
    text.push_str("----\n");
    text.push_str(&draw_cell(&reasoning, true, 60, 3));
    for n in &notices {
        text.push_str("----\n");
        text.push_str(&draw_cell(n, false, 60, 1));
    }
    insta::assert_snapshot!("reasoning_and_notices", text);
}

fn env(seq: u64, event: Event) -> Envelope {
    let mut e = Envelope::new(event);
    e.seq = seq;
    e
}

fn chunk(seq: u64, chunk: Chunk) -> Envelope {
    env(
        seq,
        Event::AssistantChunk(AssistantChunk {
            turn: 1,
            step: 1,
            chunk,
        }),
    )
}

fn draw_transcript(transcript: &Transcript, width: u16, height: u16) -> String {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.cells = transcript.cells.clone();
    app.transcript.stats = transcript.stats.clone();
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut cache = dsh_tui::view::ViewCache::default();
    terminal
        .draw(|f| dsh_tui::view::draw(f, &mut app, &mut cache))
        .unwrap();
    buffer_text(&terminal)
}

fn status() -> StatusInfo {
    StatusInfo {
        model: "deepseek-v4-flash".into(),
        effort: Some("high".into()),
        permission: "workspace-write".into(),
        context_window: 1_000_000,
        prices: PriceTable::default_deepseek(),
    }
}

#[test]
fn markdown_streams_and_settles() {
    let reply =
        "Here is **the fix**:\n\n```rust\nfn main() {\n    let x = 1; // one\n}\n```\n\n- done\n";
    let pieces = [0, 14, 40, 60, reply.len()];
    let mut transcript = Transcript::new();
    transcript.apply(&env(
        1,
        Event::TurnStart(dsh_session::TurnStart { turn: 1 }),
    ));
    transcript.apply(&env(
        2,
        Event::UserMessage(Message::user_text("u1", "fix it")),
    ));
    let mut frames = Vec::new();
    let mut seq = 3;
    for window in pieces.windows(2) {
        transcript.apply(&chunk(
            seq,
            Chunk::TextDelta {
                index: 0,
                text: reply[window[0]..window[1]].to_string(),
            },
        ));
        seq += 1;
        frames.push(draw_transcript(&transcript, 90, 16));
    }
    transcript.apply(&env(
        seq,
        Event::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            message: Message {
                id: "a1".into(),
                role: Role::Assistant,
                content: vec![ContentBlock::text(reply)],
                source: MessageSource::Model {
                    provider: "deepseek".into(),
                    model: "deepseek-v4-flash".into(),
                    extra: Default::default(),
                },
            },
            usage: Some(Usage {
                input_tokens: 1000,
                output_tokens: 200,
                cache_read_tokens: 3000,
                cache_write_tokens: 0,
                reasoning_tokens: 0,
            }),
            interrupted: false,
        }),
    ));
    frames.push(draw_transcript(&transcript, 90, 16));
    insta::assert_snapshot!("markdown_streaming", frames.join("=====\n"));
}

#[test]
fn a_retry_discards_the_streamed_attempt_and_tools_get_results() {
    let mut t = Transcript::new();
    t.apply(&chunk(
        1,
        Chunk::TextDelta {
            index: 0,
            text: "half an ans".into(),
        },
    ));
    t.apply(&env(
        2,
        Event::LlmRetry(dsh_session::LlmRetry {
            turn: 1,
            step: 1,
            retry: 1,
            delay_ms: 500,
            failure: dsh_llm::Failure::new(dsh_llm::FailureCode::StreamClosed, "closed"),
            extra: Default::default(),
        }),
    ));
    assert!(matches!(t.cells.as_slice(), [Cell::Notice { .. }]));
    t.apply(&env(
        3,
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}).to_string(),
            presentation: None,
        }),
    ));
    // A duplicate seq (history and live overlap) is ignored.
    t.apply(&env(3, Event::UserMessage(Message::user_text("x", "dup"))));
    assert_eq!(t.cells.len(), 2);
}

#[test]
fn whole_screen_with_queue_and_status() {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.transcript.cells.push(Cell::User {
        text: "list files".into(),
    });
    app.transcript.cells.push(Cell::Reasoning {
        text: "I should run ls".into(),
        streaming: false,
    });
    app.transcript.cells.push(tool(
        "bash",
        json!({"command": "ls"}),
        done("Cargo.toml\nsrc", json!({"exitCode": 0})),
    ));
    app.transcript.stats.context_tokens = 4200;
    app.transcript.stats.last_cache_hit = Some(0.75);
    app.queue = vec![
        (true, "also check tests".into()),
        (false, "then commit".into()),
    ];
    app.composer.insert_str("next idea\nsecond line");
    let mut terminal = Terminal::new(TestBackend::new(90, 18)).unwrap();
    let mut cache = dsh_tui::view::ViewCache::default();
    terminal
        .draw(|f| dsh_tui::view::draw(f, &mut app, &mut cache))
        .unwrap();
    insta::assert_snapshot!("whole_screen", buffer_text(&terminal));
}

#[test]
fn approval_prompt_replaces_the_composer() {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.composer.insert_str("draft stays");
    app.approvals.push_back(dsh_tui::app::PendingApproval::new(dsh_agent::ApprovalRequest {
            id: "a1".into(),
            call_id: "c1".into(),
            tool_name: "bash".into(),
            arguments: json!({"command": "apt-get install jq", "sandbox_permissions": "danger-full-access"}).to_string(),
            reason: "bash asks for danger-full-access instead of workspace-write: install jq".into(),
            escalation: None,
            choices: vec![dsh_agent::ApprovalChoice::AllowOnce, dsh_agent::ApprovalChoice::Reject],
            rule: None,
        }));
    let mut terminal = Terminal::new(TestBackend::new(90, 12)).unwrap();
    let mut cache = dsh_tui::view::ViewCache::default();
    terminal
        .draw(|f| dsh_tui::view::draw(f, &mut app, &mut cache))
        .unwrap();
    insta::assert_snapshot!("approval_prompt", buffer_text(&terminal));
    // Answering removes the prompt; the draft is untouched.
    let key = crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('y'),
        crossterm::event::KeyModifiers::NONE,
    );
    // The answer goes to the session's broker as `Op::Approve`.
    assert_eq!(
        app.on_key(key),
        vec![dsh_tui::Action::Approve {
            id: "a1".into(),
            decision: dsh_agent::ApprovalDecision::AllowOnce
        }]
    );
    assert!(app.approvals.is_empty());
    assert_eq!(app.composer.text(), "draft stays");
}

#[test]
fn approval_prompt_offers_session_and_always_with_the_rule() {
    use dsh_agent::{ApprovalChoice, ApprovalDecision};
    let arguments =
        json!({"command": "cargo test --all", "sandbox_permissions": "danger-full-access"})
            .to_string();
    let request = |choices: Vec<ApprovalChoice>| dsh_agent::ApprovalRequest {
        id: "a1".into(),
        call_id: "c1".into(),
        tool_name: "bash".into(),
        arguments: arguments.clone(),
        reason: "bash asks for danger-full-access instead of workspace-write: run the tests".into(),
        escalation: Some(dsh_tools::PermissionPreset::DangerFullAccess),
        rule: dsh_agent::proposed_rule(
            "bash",
            &arguments,
            std::path::Path::new("/w"),
            Some(dsh_tools::PermissionPreset::DangerFullAccess),
        ),
        choices,
    };
    let all = vec![
        ApprovalChoice::AllowOnce,
        ApprovalChoice::AllowSession,
        ApprovalChoice::AllowAlways,
        ApprovalChoice::Reject,
    ];
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    let answer = |actions: Vec<dsh_tui::Action>| match actions.as_slice() {
        [dsh_tui::Action::Approve { id, decision }] if id == "a1" => decision.clone(),
        other => panic!("not one answer to a1: {other:?}"),
    };
    app.approvals
        .push_back(dsh_tui::app::PendingApproval::new(request(all.clone())));
    insta::assert_snapshot!("approval_prompt_with_rule", draw_app(&mut app, 100, 12));
    let actions = app.on_key(key(crossterm::event::KeyCode::Char('s')));
    assert!(app.approvals.is_empty());
    assert_eq!(answer(actions), ApprovalDecision::AllowSession);

    app.approvals
        .push_back(dsh_tui::app::PendingApproval::new(request(all)));
    let actions = app.on_key(key(crossterm::event::KeyCode::Char('a')));
    assert_eq!(answer(actions), ApprovalDecision::AllowAlways);

    // Keys of choices that are not offered do nothing.
    app.approvals
        .push_back(dsh_tui::app::PendingApproval::new(request(vec![
            ApprovalChoice::AllowOnce,
            ApprovalChoice::Reject,
        ])));
    let screen = draw_app(&mut app, 100, 12);
    assert!(
        !screen.contains("[a] always") && !screen.contains("[s] this session"),
        "{screen}"
    );
    assert!(app
        .on_key(key(crossterm::event::KeyCode::Char('a')))
        .is_empty());
    assert!(app
        .on_key(key(crossterm::event::KeyCode::Char('s')))
        .is_empty());
    assert_eq!(app.approvals.len(), 1);
    let actions = app.on_key(key(crossterm::event::KeyCode::Char('n')));
    assert!(matches!(answer(actions), ApprovalDecision::Reject { .. }));
}

fn draw_app(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut cache = dsh_tui::view::ViewCache::default();
    terminal
        .draw(|f| dsh_tui::view::draw(f, app, &mut cache))
        .unwrap();
    buffer_text(&terminal)
}

fn key(code: crossterm::event::KeyCode) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(code, crossterm::event::KeyModifiers::NONE)
}

fn questions() -> dsh_agent::QuestionRequest {
    use dsh_agent::{QuestionOption, UserQuestion};
    let option = |label: &str, description: Option<&str>| QuestionOption {
        label: label.into(),
        description: description.map(Into::into),
    };
    dsh_agent::QuestionRequest {
        call_id: "call_1".into(),
        questions: vec![
            UserQuestion {
                id: "db".into(),
                question: "Which database should the service use?".into(),
                header: Some("Database".into()),
                options: vec![
                    option("SQLite", Some("one file, no server")),
                    option("PostgreSQL", Some("the production choice")),
                ],
                multi_select: false,
            },
            UserQuestion {
                id: "checks".into(),
                question: "Which checks should CI run?".into(),
                header: None,
                options: vec![
                    option("tests", None),
                    option("clippy", None),
                    option("fmt", None),
                ],
                multi_select: true,
            },
        ],
    }
}

#[test]
fn question_form_single_multi_and_dismiss() {
    use crossterm::event::KeyCode;
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.composer.insert_str("draft stays");
    app.questions.push_back(dsh_tui::app::PendingQuestion {
        form: dsh_tui::question::QuestionForm::new(questions()),
    });
    let mut frames = vec![draw_app(&mut app, 90, 16)];
    app.on_key(key(KeyCode::Down));
    frames.push(draw_app(&mut app, 90, 16));
    // Enter moves to the multi-select question; toggle two and type an extra answer.
    app.on_key(key(KeyCode::Enter));
    for c in "31".chars() {
        app.on_key(key(KeyCode::Char(c)));
    }
    app.on_key(key(KeyCode::Down));
    app.on_key(key(KeyCode::Down));
    app.on_paste("and audit");
    frames.push(draw_app(&mut app, 90, 16));
    app.on_key(key(KeyCode::Esc));
    app.on_paste("later");
    frames.push(draw_app(&mut app, 90, 16));
    insta::assert_snapshot!("question_form", frames.join("=====\n"));
    // Dismissing closes the form; the draft is untouched.
    app.on_key(key(KeyCode::Enter));
    assert!(app.questions.is_empty());
    assert_eq!(app.composer.text(), "draft stays");
}

#[test]
fn question_form_scrolls_to_the_highlighted_option_on_a_small_screen() {
    use dsh_agent::{QuestionOption, UserQuestion};
    let mut app = App::new(status());
    app.loading = false;
    app.questions.push_back(dsh_tui::app::PendingQuestion {
        form: dsh_tui::question::QuestionForm::new(dsh_agent::QuestionRequest {
            call_id: "call_1".into(),
            questions: vec![UserQuestion {
                id: "n".into(),
                question: "Pick a number".into(),
                header: None,
                options: (1..=9)
                    .map(|n| QuestionOption {
                        label: format!("option {n}"),
                        description: None,
                    })
                    .collect(),
                multi_select: false,
            }],
        }),
    });
    app.on_key(key(crossterm::event::KeyCode::Char('9')));
    let screen = draw_app(&mut app, 60, 12);
    assert!(screen.contains("› 9. option 9"), "{screen}");
    assert!(!screen.contains("Pick a number"), "{screen}");
}

#[test]
fn permission_menu_and_danger_confirmation() {
    use crossterm::event::KeyCode;
    let mut app = App::new(status());
    app.loading = false;
    app.permission_menu = Some(dsh_tui::app::PermissionMenu::new(
        dsh_tools::PermissionPreset::WorkspaceWrite,
    ));
    let menu = draw_app(&mut app, 100, 12);
    app.on_key(key(KeyCode::Down));
    let actions = app.on_key(key(KeyCode::Enter));
    assert_eq!(
        actions,
        vec![dsh_tui::Action::Command(
            dsh_tui::commands::SlashCommand::Permission(Some("danger-full-access".into()))
        )]
    );
    assert!(app.permission_menu.is_none());
    // The runtime answers a switch to danger-full-access with this prompt.
    app.confirm_permission = Some(dsh_tools::PermissionPreset::DangerFullAccess);
    let confirm = draw_app(&mut app, 100, 12);
    insta::assert_snapshot!(
        "permission_menu_and_confirm",
        format!("{menu}=====\n{confirm}")
    );
}

#[test]
fn permission_switches_in_the_log_become_notices() {
    let opaque = |seq, event_type: &str, data: serde_json::Value| {
        env(
            seq,
            Event::Opaque {
                event_type: event_type.into(),
                data,
            },
        )
    };
    let mut t = Transcript::new();
    // The session's first records only set the figures.
    t.apply(&opaque(
        1,
        "permission/preset",
        json!({"preset": "workspace-write"}),
    ));
    t.apply(&opaque(
        2,
        "sandbox/mode",
        json!({"mode": "bubblewrap", "detail": "bwrap works"}),
    ));
    assert!(t.cells.is_empty());
    t.apply(&opaque(
        3,
        "permission/preset",
        json!({"preset": "read-only"}),
    ));
    t.apply(&opaque(
        4,
        "permission/preset",
        json!({"preset": "read-only"}),
    ));
    t.apply(&opaque(
        5,
        "sandbox/mode",
        json!({"mode": "none", "detail": "danger-full-access runs unconfined"}),
    ));
    let texts: Vec<String> = t
        .cells
        .iter()
        .map(|c| match c {
            Cell::Notice { text, .. } => text.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        texts,
        [
            "permission preset: read-only (was workspace-write); applies from the next step",
            "sandbox: none (danger-full-access runs unconfined)",
        ]
    );
    assert_eq!(t.stats.permission.as_deref(), Some("read-only"));
}

/// The first line of a cell, as text.
fn header_of(cell: &Cell) -> String {
    let lines = render_cell(cell, false);
    lines[0]
        .spans
        .iter()
        .map(|s| s.content.to_string())
        .collect()
}

#[test]
fn cards_are_drawn_as_the_tool_presents_its_calls() {
    let mut t = Transcript::new();
    // As logged: an MCP tool's title and subject, a summary it gave its result.
    t.apply(&env(
        1,
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "mcp__github__create_issue".into(),
            arguments: json!({"title": "bug"}).to_string(),
            presentation: Some(json!({"title": "github · create_issue", "subject": "bug"})),
        }),
    ));
    t.apply(&env(
        2,
        Event::ToolResult(dsh_session::ToolResult {
            turn: 1,
            step: 1,
            message: Message::tool_result("m1", "c1", vec![ContentBlock::text("#12")], false),
            error: None,
            meta: None,
            summary: Some(json!({"text": "issue #12", "tone": "success"})),
        }),
    ));
    // A log written before calls carried their presentation: the tools present them.
    t.apply(&env(
        3,
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c2".into(),
            name: "bash".into(),
            arguments: json!({"command": "false"}).to_string(),
            presentation: None,
        }),
    ));
    t.apply(&env(
        4,
        Event::ToolResult(dsh_session::ToolResult {
            turn: 1,
            step: 1,
            message: Message::tool_result("m2", "c2", vec![ContentBlock::text("")], false),
            error: None,
            meta: Some(json!({"exitCode": 1})),
            summary: None,
        }),
    ));
    let headers: Vec<String> = t.cells.iter().map(header_of).collect();
    assert_eq!(
        headers,
        [
            "● github · create_issue bug  ✓ issue #12",
            "● bash $ false  ✗ exit 1"
        ]
    );
}

/// `/cost` and `/status` count every billed call of the session (docs/sessions.md, "Cost"):
/// replies, the calls no reply carries (`usage/call`), children's runs, each under its model.
#[test]
fn the_usage_counts_every_billed_call_under_its_model() {
    let usage = |input_tokens, output_tokens| Usage {
        input_tokens,
        output_tokens,
        ..Usage::default()
    };
    let mut t = Transcript::new();
    t.apply(&env(
        0,
        Event::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            message: Message {
                id: "a1".into(),
                role: Role::Assistant,
                content: vec![ContentBlock::text("done")],
                source: MessageSource::Model {
                    provider: "deepseek".into(),
                    model: "deepseek-v4-flash".into(),
                    extra: Default::default(),
                },
            },
            usage: Some(usage(1000, 10)),
            interrupted: false,
        }),
    ));
    t.apply(&env(
        1,
        Event::Opaque {
            event_type: "usage/call".into(),
            data: json!({"purpose": "compaction", "model": "deepseek-v4-flash",
                "usage": {"inputTokens": 3000, "outputTokens": 40}}),
        },
    ));
    t.apply(&env(
        2,
        Event::Opaque {
            event_type: "subagent/usage".into(),
            data: json!({"childId": "c1", "agent": "agent-1", "model": "deepseek-v4-pro",
                "usage": {"inputTokens": 500, "outputTokens": 5, "requests": 2}}),
        },
    ));
    let total = t.stats.total();
    assert_eq!(total.requests, 4);
    assert_eq!(total.usage.input_tokens, 4500);
    assert_eq!(total.usage.output_tokens, 55);
    assert_eq!(
        t.stats.usage_by_model.keys().collect::<Vec<_>>(),
        ["deepseek-v4-flash", "deepseek-v4-pro"]
    );
    let prices = PriceTable::default_deepseek();
    let expected = prices.models["deepseek-v4-flash"].cost(&usage(4000, 50))
        + prices.models["deepseek-v4-pro"].cost(&usage(500, 5));
    let cost = t.stats.cost(&prices).unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
}

/// While an approval waits, the call's card says so and the working time stands still; the
/// question and the answer come before the card, so the scrollback reads asked, answered,
/// result (issue 39: the card said "running…", the timer kept counting, and the finished card
/// reached the scrollback before "approval asked"). While it waits, its reason is in the
/// approval box alone (issue 41: the reason shown once); the asked notice comes with the answer.
#[test]
fn an_approval_is_shown_before_its_card_which_waits_without_counting() {
    let mut t = Transcript::new();
    t.apply(&env(
        1,
        Event::TurnStart(dsh_session::TurnStart { turn: 1 }),
    ));
    t.apply(&env(
        2,
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"command": "rm -rf build", "description": "clean"}).to_string(),
            presentation: None,
        }),
    ));
    let opaque = |seq, event_type: &str, data: serde_json::Value| {
        env(
            seq,
            Event::Opaque {
                event_type: event_type.into(),
                data,
            },
        )
    };
    t.apply(&opaque(
        3,
        "approval/asked",
        json!({"id": "a1", "callId": "c1", "toolName": "bash", "reason": "outside the preset"}),
    ));
    assert!(t.waiting_since.is_some());
    let card_at = t
        .cells
        .iter()
        .position(|c| matches!(c, Cell::Tool(_)))
        .unwrap();
    assert!(
        !t.cells
            .iter()
            .any(|c| matches!(c, Cell::Notice { text, .. } if text.contains("outside the preset"))),
        "the box shows the reason while it waits: {:?}",
        t.cells
    );
    let Cell::Tool(card) = &t.cells[card_at] else {
        unreachable!()
    };
    assert_eq!(card.state(), dsh_tui::CardState::AwaitingApproval);
    let drawn: String = render_cell(&t.cells[card_at], false)
        .iter()
        .map(|line| line.to_string())
        .collect();
    assert!(drawn.contains("awaiting approval"), "{drawn}");
    assert!(!drawn.contains("running"), "{drawn}");
    // The working time does not move while the user decides.
    let before = t.working_time();
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(t.working_time(), before);
    t.apply(&opaque(
        4,
        "approval/decided",
        json!({"id": "a1", "callId": "c1", "outcome": "approved"}),
    ));
    assert!(t.waiting_since.is_none());
    let card_at = t
        .cells
        .iter()
        .position(|c| matches!(c, Cell::Tool(_)))
        .unwrap();
    assert!(
        matches!(&t.cells[card_at - 1], Cell::Notice { text, .. } if text.starts_with("approval approved")),
        "{:?}",
        t.cells
    );
    assert!(
        matches!(&t.cells[card_at - 2], Cell::Notice { text, .. } if text == "approval asked for bash: outside the preset"),
        "{:?}",
        t.cells
    );
    let Cell::Tool(card) = &t.cells[card_at] else {
        unreachable!()
    };
    // Approved: pending again until its body starts (a hook may still refuse it).
    assert_eq!(card.state(), dsh_tui::CardState::Pending);
    let drawn: String = render_cell(&t.cells[card_at], false)
        .iter()
        .map(|line| line.to_string())
        .collect();
    assert!(!drawn.contains("awaiting approval"), "{drawn}");
}
