//! Rendering snapshots with ratatui's `TestBackend`: each tool card, reasoning, notices,
//! Markdown while it streams, and a whole screen with queue and status line.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::{AssistantChunk, AssistantMessage, Envelope, Event, PriceTable, ToolCall};
use dsh_tui::cards::render_cell;
use dsh_tui::{App, Cell, StatusInfo, ToolCard, ToolStatus, Transcript};
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

fn tool(name: &str, args: serde_json::Value, status: ToolStatus) -> Cell {
    Cell::Tool(ToolCard {
        call_id: "call_1".into(),
        name: name.into(),
        arguments: args.to_string(),
        status,
    })
}

fn done(output: &str, meta: serde_json::Value) -> ToolStatus {
    ToolStatus::Done {
        output: output.into(),
        meta: Some(meta),
    }
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
    let running = tool("bash", json!({"command": "sleep 5"}), ToolStatus::Running);
    let text = [ok, failed, running]
        .iter()
        .map(|c| draw_cell(c, false, 60, 6))
        .collect::<Vec<_>>()
        .join("----\n");
    insta::assert_snapshot!("bash_cards", text);
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
            ToolStatus::Failed {
                code: "PERMISSION_DENIED".into(),
                message: "outside the workspace".into(),
            },
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
    app.approvals.push_back(dsh_tui::app::PendingApproval {
        request: dsh_agent::ApprovalRequest {
            id: "a1".into(),
            call_id: "c1".into(),
            tool_name: "bash".into(),
            arguments: json!({"command": "apt-get install jq", "sandbox_permissions": "danger-full-access"}).to_string(),
            reason: "bash asks for danger-full-access instead of workspace-write: install jq".into(),
            escalation: None,
        },
        respond: None,
    });
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
    assert!(app.on_key(key).is_empty());
    assert!(app.approvals.is_empty());
    assert_eq!(app.composer.text(), "draft stays");
}
