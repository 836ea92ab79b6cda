//! Issue 41's "truthful UI" items that the UI state shows: Ctrl-T reaches finished reasoning in
//! the inline mode too (in a view of its own, since the terminal's scrollback holds it there);
//! PgUp/PgDn scroll only where there is something to scroll; the header and the status line
//! show the effort the requests use before the first one.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_llm::{ModelInfo, ReasoningEffort};
use dsh_tui::status::effective_effort;
use dsh_tui::view::{draw, draw_live, live_height, status_line, ViewCache};
use dsh_tui::{App, Cell, StatusInfo};
use ratatui::backend::TestBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

fn app(inline: bool) -> App {
    let mut app = App::new(StatusInfo {
        model: "deepseek-v4-flash".into(),
        effort: Some("high".into()),
        permission: "workspace-write".into(),
        context_window: 128_000,
        ..StatusInfo::default()
    });
    app.loading = false;
    app.inline = inline;
    app
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
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

/// The inline mode's live area on a `width` x `height` screen, every cell already in history.
fn draw_inline(app: &mut App, width: u16, height: u16) -> String {
    let mut cache = ViewCache::default();
    let first = app.transcript.cells.len();
    let rows = live_height(app, &mut cache, width, height, first);
    let area = Rect::new(0, height - rows, width, rows);
    let mut terminal = Terminal::with_options(
        TestBackend::new(width, height),
        TerminalOptions {
            viewport: Viewport::Fixed(area),
        },
    )
    .unwrap();
    terminal
        .draw(|f| draw_live(f, app, &mut cache, first, height))
        .unwrap();
    buffer_text(&terminal)
}

fn with_finished_reasoning(app: &mut App) {
    app.transcript.cells.push(Cell::User {
        text: "why does the parser fail".into(),
    });
    let long = "then check the lexer, whose tokens carry their spans; ".repeat(4);
    app.transcript.cells.push(Cell::Reasoning {
        text: format!("First read the failing test.\n{long}\nLast, fix the off-by-one."),
        streaming: false,
    });
    app.transcript.cells.push(Cell::Assistant {
        text: "the parser skips the last token".into(),
        streaming: false,
        interrupted: false,
    });
}

#[test]
fn ctrl_t_shows_finished_reasoning_in_the_inline_mode() {
    let mut app = app(true);
    with_finished_reasoning(&mut app);
    // Every cell is in the terminal's scrollback: the live area holds none of them.
    let before = draw_inline(&mut app, 60, 20);
    assert!(!before.contains("First read"), "{before}");

    app.on_key(ctrl('t'));
    assert!(app.pager.is_some(), "Ctrl-T opens the conversation's view");
    assert!(!app.expand_reasoning);
    let view = draw_inline(&mut app, 60, 20);
    assert!(view.contains("reasoning in full"), "{view}");
    // Opened at the bottom: the reply and the whole reasoning above it, wrapped.
    assert!(view.contains("the parser skips the last token"), "{view}");
    assert!(view.contains("First read the failing test."), "{view}");
    assert!(view.contains("Last, fix the off-by-one."), "{view}");
    assert!(view.contains("▾ Thought"), "{view}");
    assert!(!view.contains("Ctrl-T shows it"), "{view}");

    // Ctrl-T closes it again, as Esc does.
    app.on_key(ctrl('t'));
    assert!(app.pager.is_none());
    app.on_key(ctrl('t'));
    app.on_key(key(KeyCode::Esc));
    assert!(app.pager.is_none());
}

#[test]
fn ctrl_t_expands_reasoning_in_place_on_the_full_screen() {
    let mut app = app(false);
    with_finished_reasoning(&mut app);
    let mut terminal = Terminal::new(TestBackend::new(60, 20)).unwrap();
    let mut cache = ViewCache::default();
    terminal.draw(|f| draw(f, &mut app, &mut cache)).unwrap();
    let collapsed = buffer_text(&terminal);
    assert!(collapsed.contains("Ctrl-T shows it"), "{collapsed}");
    assert!(!collapsed.contains("First read"), "{collapsed}");

    app.on_key(ctrl('t'));
    assert!(app.pager.is_none());
    assert!(app.expand_reasoning);
    terminal.draw(|f| draw(f, &mut app, &mut cache)).unwrap();
    let expanded = buffer_text(&terminal);
    assert!(
        expanded.contains("First read the failing test."),
        "{expanded}"
    );
}

#[test]
fn pgup_scrolls_the_full_screen_conversation_and_nothing_inline() {
    let mut full = app(false);
    with_finished_reasoning(&mut full);
    full.page = 10;
    full.on_key(key(KeyCode::PageUp));
    assert_eq!(full.scroll, 9);
    full.on_key(key(KeyCode::PageDown));
    assert_eq!(full.scroll, 0);

    // Inline, the conversation is in the terminal's scrollback: the keys leave the live area
    // as it is (a stale offset would hide the bottom of the next reply).
    let mut inline = app(true);
    with_finished_reasoning(&mut inline);
    inline.page = 10;
    inline.on_key(key(KeyCode::PageUp));
    assert_eq!(inline.scroll, 0);
    assert!(inline.composer.is_empty());
}

fn model(efforts: Vec<ReasoningEffort>, default: Option<ReasoningEffort>) -> ModelInfo {
    ModelInfo {
        id: "m".into(),
        context_window: 1000,
        default_max_tokens: 100,
        efforts,
        default_effort: default,
        modalities: vec!["text".into()],
        temperature: None,
        stop: None,
    }
}

#[test]
fn the_effective_effort_is_the_one_asked_else_the_models_default() {
    use ReasoningEffort::{High, Low, Max, Off};
    let thinking = model(vec![Off, Low, High, Max], Some(High));
    let effort = |asked, model: Option<&ModelInfo>| effective_effort(asked, model);
    assert_eq!(effort(Some(Max), Some(&thinking)).as_deref(), Some("max"));
    assert_eq!(effort(None, Some(&thinking)).as_deref(), Some("high"));
    // Efforts but no default: the provider's, unnamed.
    let open = model(vec![Low, High], None);
    assert_eq!(effort(None, Some(&open)).as_deref(), Some("default"));
    assert_eq!(effort(None, None).as_deref(), Some("default"));
    // No effort control at all: nothing to show.
    let plain = model(Vec::new(), None);
    assert_eq!(effort(None, Some(&plain)), None);

    // The status line shows it until a request header says otherwise.
    let mut app = app(true);
    app.status.effort = effort(None, Some(&thinking));
    let line: String = status_line(&app)
        .spans
        .iter()
        .map(|s| s.content.to_string())
        .collect();
    assert!(line.starts_with("deepseek-v4-flash high · "), "{line}");
}
