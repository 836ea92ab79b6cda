//! A scrollable full-screen view over the conversation: `/diff` shows the session's changes in
//! it (docs/tui.md, "Undo and diff"), and Ctrl-T in the inline mode the conversation with its
//! reasoning in full (docs/tui.md, "Modes": the reasoning written to the terminal's scrollback
//! cannot be expanded there). Up/Down scroll a line, PgUp/PgDn (and Space) a page, Home/End
//! jump, Esc or q closes (Ctrl-T too).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::app::{Action, App};
use crate::transcript::Transcript;
use crate::worktree::DiffLine;

/// The open view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pager {
    /// The title.
    pub title: String,
    /// The lines.
    lines: Vec<Line<'static>>,
    /// Long lines wrap to the screen (else they are cut at its edge).
    wrap: bool,
    /// `lines` wrapped, and the width they were wrapped to.
    wrapped: Option<(u16, Vec<Line<'static>>)>,
    /// The first row shown.
    pub top: usize,
    /// Rows shown at the last draw (for paging).
    pub rows: usize,
}

impl Pager {
    /// A view of `lines` from the top (`/diff`).
    pub fn new(title: impl Into<String>, lines: Vec<DiffLine>) -> Self {
        Pager {
            title: title.into(),
            lines: lines.iter().map(styled).collect(),
            wrap: false,
            wrapped: None,
            top: 0,
            rows: 20,
        }
    }

    /// The cells of `transcript` as the conversation shows them, reasoning in full, from the
    /// bottom (Ctrl-T in the inline mode).
    pub fn conversation(transcript: &Transcript) -> Self {
        let mut lines = Vec::new();
        for cell in &transcript.cells {
            lines.push(Line::default());
            lines.extend(crate::cards::render_cell(cell, true));
        }
        Pager {
            title: "the conversation, reasoning in full".to_string(),
            lines,
            wrap: true,
            wrapped: None,
            // Clamped to the last page by the first draw.
            top: usize::MAX,
            rows: 20,
        }
    }

    /// The rows the view scrolls over: the lines, wrapped to the last draw's width if they wrap.
    fn shown(&self) -> &[Line<'static>] {
        match &self.wrapped {
            Some((_, rows)) if self.wrap => rows,
            _ => &self.lines,
        }
    }

    fn last_top(&self) -> usize {
        self.shown().len().saturating_sub(self.rows.max(1))
    }

    /// The pager's keys; `None` when no pager is open (every key goes to it while it is).
    pub fn on_key(app: &mut App, key: &KeyEvent) -> Option<Vec<Action>> {
        let pager = app.pager.as_mut()?;
        let page = pager.rows.max(2) - 1;
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => app.pager = None,
            KeyCode::Char('t') | KeyCode::Char('T') if ctrl => app.pager = None,
            KeyCode::Up | KeyCode::Char('k') => {
                pager.top = pager.top.min(pager.last_top()).saturating_sub(1)
            }
            KeyCode::Down | KeyCode::Char('j') => pager.top = (pager.top + 1).min(pager.last_top()),
            KeyCode::PageUp => pager.top = pager.top.min(pager.last_top()).saturating_sub(page),
            KeyCode::PageDown | KeyCode::Char(' ') => {
                pager.top = pager.top.saturating_add(page).min(pager.last_top())
            }
            KeyCode::Home | KeyCode::Char('g') => pager.top = 0,
            KeyCode::End | KeyCode::Char('G') => pager.top = pager.last_top(),
            _ => {}
        }
        Some(Vec::new())
    }
}

fn styled(line: &DiffLine) -> Line<'static> {
    let (text, style) = match line {
        DiffLine::Heading(t) => (t, Style::default().add_modifier(Modifier::BOLD)),
        DiffLine::Added(t) => (t, Style::default().fg(Color::Green)),
        DiffLine::Removed(t) => (t, Style::default().fg(Color::Red)),
        DiffLine::Hunk(t) => (t, Style::default().fg(Color::Cyan)),
        DiffLine::Plain(t) => (t, Style::default()),
    };
    Line::from(Span::styled(text.clone(), style))
}

/// Draws the open pager over `screen` (nothing when none is open).
pub fn draw_pager(frame: &mut Frame<'_>, app: &mut App, screen: Rect) {
    if !app.approvals.is_empty() || !app.questions.is_empty() {
        // A prompt the loop waits on stays visible; the view comes back after it.
        return;
    }
    let Some(pager) = app.pager.as_mut() else {
        return;
    };
    if screen.height < 3 || screen.width < 4 {
        return;
    }
    pager.rows = usize::from(screen.height - 2);
    let width = screen.width - 2;
    if pager.wrap && pager.wrapped.as_ref().is_none_or(|(w, _)| *w != width) {
        pager.wrapped = Some((width, crate::wrap::wrap_lines(&pager.lines, width)));
    }
    pager.top = pager.top.min(pager.last_top());
    let lines: Vec<Line<'static>> = pager
        .shown()
        .iter()
        .skip(pager.top)
        .take(pager.rows)
        .cloned()
        .collect();
    let total = pager.shown().len();
    let end = (pager.top + pager.rows).min(total);
    let title = format!(
        " {} · lines {}-{end} of {} · ↑↓ PgUp/PgDn scroll · Esc closes ",
        pager.title,
        (pager.top + 1).min(end),
        total
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Clear, screen);
    frame.render_widget(Paragraph::new(lines).block(block), screen);
}
