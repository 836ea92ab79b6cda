//! Issue 20's TUI items as snapshots and key tests: the welcome header, the working
//! indicator and Esc, the approval box with every argument (scrollable), wrapped code and tool
//! lines keeping their gutter, the `read` card counting the lines read, popups leaving the
//! conversation's first line alone, headings, and the inline mode's live area.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_agent::{ApprovalChoice, ApprovalRequest};
use dsh_session::PriceTable;
use dsh_tui::app::{PendingApproval, CANCELLING};
use dsh_tui::cards::{render_cell, short_path};
use dsh_tui::markdown::render_markdown;
use dsh_tui::view::{draw, draw_live, hint_line, live_height, ViewCache};
use dsh_tui::wrap::wrap_lines;
use dsh_tui::{Action, App, Cell, Header, StatusInfo};

use crate::support::{tool_cell, Outcome};
use ratatui::backend::TestBackend;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::text::Line;
use ratatui::{Terminal, TerminalOptions, Viewport};
use serde_json::json;

fn status() -> StatusInfo {
    StatusInfo {
        model: "deepseek-v4-flash".into(),
        effort: Some("high".into()),
        permission: "workspace-write".into(),
        context_window: 128_000,
        prices: PriceTable::default(),
    }
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn text(lines: &[Line<'static>]) -> String {
    lines
        .iter()
        .map(|l| {
            let row: String = l.spans.iter().map(|s| s.content.to_string()).collect();
            format!("{}\n", row.trim_end())
        })
        .collect()
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

fn draw_app(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut cache = ViewCache::default();
    terminal.draw(|f| draw(f, app, &mut cache)).unwrap();
    buffer_text(&terminal)
}

fn header(resumed: Option<&str>) -> Header {
    Header {
        version: "0.9.0".into(),
        model: "deepseek-v4-pro".into(),
        effort: Some("high".into()),
        preset: "workspace-write".into(),
        cwd: short_path(
            std::path::Path::new("/home/ada/src/dsh"),
            Some(std::path::Path::new("/home/ada")),
        ),
        resumed: resumed.map(str::to_string),
    }
}

#[test]
fn welcome_header_on_start_and_on_resume() {
    let start = text(&render_cell(&Cell::Header(header(None)), false));
    insta::assert_snapshot!("welcome_header", start);
    assert!(start.contains("v0.9.0"));
    assert!(start.contains("deepseek-v4-pro · effort high"));
    assert!(start.contains("~/src/dsh"));
    assert_eq!(start.matches("tip: ").count(), 3, "{start}");
    let resumed = text(&render_cell(&Cell::Header(header(Some("0197abcd"))), false));
    assert!(resumed.contains("resumed:   0197abcd"), "{resumed}");
    assert_eq!(
        short_path(
            std::path::Path::new("/srv/x"),
            Some(std::path::Path::new("/home/ada"))
        ),
        "/srv/x"
    );
    assert_eq!(
        short_path(
            std::path::Path::new("/home/ada"),
            Some(std::path::Path::new("/home/ada"))
        ),
        "~"
    );
}

#[test]
fn working_indicator_shows_time_tokens_and_esc() {
    let mut app = App::new(status());
    app.loading = false;
    assert_eq!(text(&[hint_line(&app)]), "\n", "idle: no indicator");
    app.transcript.running = true;
    app.transcript.streamed = 1234;
    app.transcript.turn_started =
        Some(std::time::Instant::now() - std::time::Duration::from_secs(75));
    let line = text(&[hint_line(&app)]);
    assert!(
        line.contains("Working (1m 15s · ↓ 1.2k tokens · Esc to interrupt)"),
        "{line}"
    );
    let spinner = line.chars().next().unwrap();
    assert!("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏".contains(spinner), "{line}");
    app.hint = Some(CANCELLING.to_string());
    assert_eq!(text(&[hint_line(&app)]), format!("{CANCELLING}\n"));
}

#[test]
fn esc_closes_the_command_list_first_then_interrupts_the_turn() {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.composer.insert_str("/co");
    assert!(!app.completions().is_empty());
    assert_eq!(app.on_key(key(KeyCode::Esc)), Vec::<Action>::new());
    assert!(app.completions().is_empty(), "Esc closed the list");
    assert_eq!(app.composer.text(), "/co", "the draft is kept");
    assert_eq!(app.on_key(key(KeyCode::Esc)), vec![Action::Cancel]);
    assert_eq!(app.hint.as_deref(), Some(CANCELLING));
    // Typing reopens the list.
    app.on_key(key(KeyCode::Char('m')));
    assert!(!app.completions().is_empty());
    // Idle: Esc does not cancel anything.
    let mut idle = App::new(status());
    idle.loading = false;
    assert_eq!(idle.on_key(key(KeyCode::Esc)), Vec::<Action>::new());
}

fn long_request() -> ApprovalRequest {
    let command = (1..=12)
        .map(|i| format!("echo step-{i}"))
        .collect::<Vec<_>>()
        .join("\n");
    ApprovalRequest {
        id: "a1".into(),
        call_id: "c1".into(),
        tool_name: "bash".into(),
        arguments: json!({
            "command": command,
            "description": "run every step of the release check, one after the other, and report",
            "sandbox_permissions": "danger-full-access",
            "justification": "the release check writes to /var/cache and needs the network",
        })
        .to_string(),
        reason: "bash asks for danger-full-access instead of workspace-write".into(),
        escalation: Some(dsh_tools::PermissionPreset::DangerFullAccess),
        choices: vec![
            ApprovalChoice::AllowOnce,
            ApprovalChoice::AllowSession,
            ApprovalChoice::AllowAlways,
            ApprovalChoice::Reject,
        ],
        rule: None,
    }
}

/// An asked `edit` or `write` shows its change as a diff, the path first, and does not list
/// the arguments the diff shows (issue 41: a diff preview, path before content).
#[test]
fn approval_box_previews_a_file_change_as_a_diff() {
    let asked = |tool: &str, arguments: serde_json::Value| ApprovalRequest {
        id: "a1".into(),
        call_id: "c1".into(),
        tool_name: tool.into(),
        arguments: arguments.to_string(),
        reason: format!("{tool} needs approval under the ask preset"),
        escalation: None,
        choices: vec![ApprovalChoice::AllowOnce, ApprovalChoice::Reject],
        rule: None,
    };
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.approvals.push_back(PendingApproval::new(asked(
        "edit",
        json!({"file_path": "src/lib.rs", "old_string": "fn a() {}\nfn b() {}\n", "new_string": "fn a() {}\nfn c() {}\n"}),
    )));
    let screen = draw_app(&mut app, 70, 20);
    let rows: Vec<&str> = screen.lines().collect();
    let path = rows
        .iter()
        .position(|r| r.contains("--- src/lib.rs"))
        .expect(&screen);
    let removed = rows
        .iter()
        .position(|r| r.contains("-fn b() {}"))
        .expect(&screen);
    let added = rows
        .iter()
        .position(|r| r.contains("+fn c() {}"))
        .expect(&screen);
    assert!(path < removed && removed < added, "{screen}");
    assert!(screen.contains(" fn a() {}"), "context kept: {screen}");
    assert!(!screen.contains("old_string:"), "{screen}");
    assert!(!screen.contains("new_string:"), "{screen}");
    // The reason is on screen once.
    assert_eq!(
        screen.matches("needs approval under").count(),
        1,
        "{screen}"
    );
    app.on_key(key(KeyCode::Char('y')));

    app.approvals.push_back(PendingApproval::new(asked(
        "write",
        json!({"content": "hello\nworld\n", "file_path": "notes.txt"}),
    )));
    let screen = draw_app(&mut app, 70, 20);
    let rows: Vec<&str> = screen.lines().collect();
    let path = rows
        .iter()
        .position(|r| r.contains("+++ notes.txt"))
        .expect(&screen);
    let first = rows
        .iter()
        .position(|r| r.contains("+hello"))
        .expect(&screen);
    assert!(path < first, "path before content: {screen}");
    assert!(screen.contains("+world"), "{screen}");
    assert!(!screen.contains("content:"), "{screen}");
}

#[test]
fn approval_box_shows_every_argument_and_scrolls() {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.running = true;
    app.approvals
        .push_back(PendingApproval::new(long_request()));
    let first = draw_app(&mut app, 60, 24);
    insta::assert_snapshot!("approval_box_long_arguments", first);
    assert!(first.contains("[s] for this session"), "{first}");
    assert!(first.contains("[a] always"), "{first}");
    assert!(first.contains("[n] deny"), "{first}");
    assert!(first.contains("PgDn scroll"), "{first}");
    // One-line arguments first; the preset asked for is in the reason, not listed again.
    assert!(first.contains("description: run every step"), "{first}");
    assert!(
        first.contains("justification: the release check"),
        "{first}"
    );
    assert!(!first.contains("sandbox_permissions:"), "{first}");
    assert!(
        !first.contains("step-12"),
        "below the fold at first: {first}"
    );
    // Down to the end: the command's last lines come into view.
    for _ in 0..40 {
        app.on_key(key(KeyCode::Down));
    }
    let last = draw_app(&mut app, 60, 24);
    assert!(last.contains("echo step-12"), "{last}");
    assert!(!last.contains("description:"), "{last}");
    // The view clamped the scroll: one PgUp moves back at once.
    let clamped = app.approvals.front().unwrap().scroll;
    assert!(clamped < 40, "{clamped}");
    app.on_key(key(KeyCode::PageUp));
    assert!(app.approvals.front().unwrap().scroll < clamped);
    // The box still answers: `n` denies.
    app.on_key(key(KeyCode::Char('n')));
    assert!(app.approvals.is_empty());
}

#[test]
fn wrapped_code_and_tool_lines_keep_their_gutter() {
    let reply = Cell::Assistant {
        text: "```rust\nlet total = first_value + second_value + third_value + fourth;\n```".into(),
        streaming: false,
        interrupted: false,
    };
    let bash = tool_cell(
        "bash",
        &json!({"command": "cat log"}).to_string(),
        Outcome::Done(
            "error: the configuration value is out of range for this machine",
            json!({"exitCode": 0}),
        ),
    );
    let mut out = String::new();
    for cell in [reply, bash] {
        let rows = wrap_lines(&render_cell(&cell, false), 30);
        for row in text(&rows).lines() {
            assert!(row.chars().count() <= 30, "{row}");
        }
        out.push_str(&text(&rows));
        out.push_str("----\n");
    }
    insta::assert_snapshot!("gutter_kept_when_wrapped", out);
    let gutter_rows = out.lines().filter(|l| l.starts_with("  │ ")).count();
    assert!(gutter_rows >= 6, "{out}");
}

#[test]
fn read_card_counts_the_lines_read() {
    let card = |args: serde_json::Value, output: &str, meta: serde_json::Value| {
        tool_cell("read", &args.to_string(), Outcome::Done(output, meta))
    };
    // Asked for 2000 lines of a 3-line file: 3 were read.
    let output = "<path>/w/a.txt</path>\n<type>file</type>\n<content>\n1: a\n2: b\n3: c\n\n(End of file - total 3 lines)\n</content>";
    let short = card(
        json!({"file_path": "a.txt", "offset": 1, "limit": 2000}),
        output,
        json!({"offset": 1, "linesShown": 3, "totalLines": 3}),
    );
    let part = card(
        json!({"file_path": "big.rs", "offset": 10, "limit": 5}),
        "",
        json!({"offset": 10, "linesShown": 5, "totalLines": 900}),
    );
    // No meta: the numbered lines of the output.
    let old = card(json!({"file_path": "a.txt"}), output, json!(null));
    let rendered = [short, part, old]
        .iter()
        .map(|c| text(&render_cell(c, false)))
        .collect::<String>();
    assert_eq!(
        rendered,
        "● read a.txt  3 lines read\n● read big.rs  5 lines read (10-14 of 900)\n● read a.txt  3 lines read\n"
    );
}

#[test]
fn popups_leave_the_first_line_of_the_conversation_visible() {
    let mut app = App::new(status());
    app.loading = false;
    for i in 0..6 {
        app.transcript.cells.push(Cell::User {
            text: format!("prompt {i}"),
        });
    }
    app.composer.insert_str("/");
    let screen = draw_app(&mut app, 70, 10);
    let first = screen.lines().next().unwrap_or_default().to_string();
    assert!(first.contains("› prompt") || first.is_empty(), "{screen}");
    assert!(
        !first.contains("/compact") && !first.contains("/model"),
        "{screen}"
    );
    insta::assert_snapshot!("popup_below_first_line", screen);
}

#[test]
fn headings_render_as_headings() {
    let lines = render_markdown("# Plan\n## Steps ##\n### Details\n#### Notes\n#\nnot # a heading");
    let rows = text(&lines);
    assert_eq!(rows, "Plan\nSteps\nDetails\nNotes\n\nnot # a heading\n");
    for line in &lines[..4] {
        let style = line.spans[0].style;
        assert!(style.add_modifier.contains(Modifier::BOLD), "{line:?}");
    }
    assert_eq!(lines[0].spans[0].style.fg, Some(Color::Cyan));
    assert_eq!(lines[2].spans[0].style.fg, Some(Color::LightBlue));
}

#[test]
fn inline_live_area_holds_only_the_cells_not_yet_in_history() {
    let mut app = App::new(status());
    app.loading = false;
    app.transcript.cells.push(Cell::User {
        text: "written to history already".into(),
    });
    app.transcript.cells.push(Cell::Assistant {
        text: "streaming **now**".into(),
        streaming: true,
        interrupted: false,
    });
    app.transcript.running = true;
    let mut cache = ViewCache::default();
    let height = live_height(&app, &mut cache, 60, 30, 1);
    // Blank + reply + working line + composer (3) + status.
    assert_eq!(height, 7);
    let area = Rect::new(0, 23, 60, height);
    let mut terminal = Terminal::with_options(
        TestBackend::new(60, 30),
        TerminalOptions {
            viewport: Viewport::Fixed(area),
        },
    )
    .unwrap();
    terminal
        .draw(|f| draw_live(f, &mut app, &mut cache, 1, 30))
        .unwrap();
    let screen = buffer_text(&terminal);
    insta::assert_snapshot!("inline_live_area", screen);
    assert!(!screen.contains("written to history"), "{screen}");
    assert!(screen.contains("streaming now▌"), "{screen}");
    // The command list gets rows of its own instead of covering the reply.
    app.composer.insert_str("/");
    let with_popup = live_height(&app, &mut cache, 60, 30, 1);
    assert!(with_popup > height + 3, "{with_popup}");
}
