//! A scrollable full-screen view over the conversation (docs/tui.md, "Undo and diff"): `/diff`
//! shows the session's changes in it. Up/Down scroll a line, PgUp/PgDn (and Space) a page,
//! Home/End jump, Esc or q closes.

use crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::app::{Action, App};
use crate::worktree::DiffLine;

/// The open view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pager {
    /// The title.
    pub title: String,
    /// The lines.
    pub lines: Vec<DiffLine>,
    /// The first line shown.
    pub top: usize,
    /// Rows shown at the last draw (for paging).
    pub rows: usize,
}

impl Pager {
    /// A view of `lines` from the top.
    pub fn new(title: impl Into<String>, lines: Vec<DiffLine>) -> Self {
        Pager {
            title: title.into(),
            lines,
            top: 0,
            rows: 20,
        }
    }

    fn last_top(&self) -> usize {
        self.lines.len().saturating_sub(self.rows.max(1))
    }

    /// The pager's keys; `None` when no pager is open (every key goes to it while it is).
    pub fn on_key(app: &mut App, key: &KeyEvent) -> Option<Vec<Action>> {
        let pager = app.pager.as_mut()?;
        let page = pager.rows.max(2) - 1;
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => app.pager = None,
            KeyCode::Up | KeyCode::Char('k') => pager.top = pager.top.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => pager.top = (pager.top + 1).min(pager.last_top()),
            KeyCode::PageUp => pager.top = pager.top.saturating_sub(page),
            KeyCode::PageDown | KeyCode::Char(' ') => {
                pager.top = (pager.top + page).min(pager.last_top())
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
    pager.top = pager.top.min(pager.last_top());
    let lines: Vec<Line<'static>> = pager
        .lines
        .iter()
        .skip(pager.top)
        .take(pager.rows)
        .map(styled)
        .collect();
    let end = (pager.top + pager.rows).min(pager.lines.len());
    let title = format!(
        " {} · lines {}-{end} of {} · ↑↓ PgUp/PgDn scroll · Esc closes ",
        pager.title,
        (pager.top + 1).min(end),
        pager.lines.len()
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Clear, screen);
    frame.render_widget(Paragraph::new(lines).block(block), screen);
}
