//! Drawing the [`App`]: conversation, queue, hint, approval prompt or composer, status line,
//! and the completion and `/resume` popups. Only the cells in view are laid out, and each
//! cell's lines are cached until it changes, so long sessions draw as fast as short ones.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::app::App;
use crate::cards::render_cell;
use crate::transcript::{Cell, ToolStatus};

/// Rendered lines of one cell, valid while its key and the width are unchanged.
#[derive(Default)]
struct CachedCell {
    key: u64,
    width: u16,
    lines: Vec<Line<'static>>,
    height: usize,
}

/// Per-cell layout cache owned by the runtime across frames.
#[derive(Default)]
pub struct ViewCache {
    cells: Vec<CachedCell>,
}

/// A cheap fingerprint of what a cell shows: texts only grow while streaming, so lengths and
/// flags are enough.
fn cell_key(cell: &Cell, expand: bool) -> u64 {
    let mut h = DefaultHasher::new();
    match cell {
        Cell::User { text } => (0u8, text.len()).hash(&mut h),
        Cell::Assistant {
            text,
            streaming,
            interrupted,
        } => (1u8, text.len(), streaming, interrupted).hash(&mut h),
        Cell::Reasoning { text, streaming } => (2u8, text.len(), streaming, expand).hash(&mut h),
        Cell::Tool(card) => {
            let status = match &card.status {
                ToolStatus::Running => (0u8, 0),
                ToolStatus::Done { output, .. } => (1, output.len()),
                ToolStatus::Failed { message, .. } => (2, message.len()),
            };
            (3u8, status, &card.call_id).hash(&mut h)
        }
        Cell::Notice { text, .. } => (4u8, text.len()).hash(&mut h),
    }
    h.finish()
}

fn wrapped_height(lines: &[Line<'static>], width: u16) -> usize {
    Paragraph::new(lines.to_vec())
        .wrap(Wrap { trim: false })
        .line_count(width)
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, app: &mut App, cache: &mut ViewCache) {
    let area = frame.area();
    let width = area.width.max(4);
    let (composer_rows, cursor) = app.composer.layout(width.saturating_sub(2));
    let bottom_height: u16 = if app.approvals.is_empty() {
        (composer_rows.len() as u16).clamp(1, 8) + 2
    } else {
        6
    };
    let queue_height = app.queue.len().min(4) as u16;
    let hint_height = u16::from(app.hint.is_some() || app.transcript.running || app.loading);
    let [conversation, queue, hint, bottom, status] = Layout::vertical([
        Constraint::Min(1),
        Constraint::Length(queue_height),
        Constraint::Length(hint_height),
        Constraint::Length(bottom_height),
        Constraint::Length(1),
    ])
    .areas(area);
    app.page = usize::from(conversation.height);
    draw_conversation(frame, app, cache, conversation);

    let queue_lines: Vec<Line<'static>> = app
        .queue
        .iter()
        .take(4)
        .map(|(steer, text)| {
            let label = if *steer {
                "↪ steer: "
            } else {
                "⋯ queued: "
            };
            Line::from(vec![
                Span::styled(label, Style::default().fg(Color::Magenta)),
                Span::raw(text.replace('\n', " ⏎ ")),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(queue_lines), queue);

    let hint_text = match (&app.hint, app.loading, app.transcript.running) {
        (Some(hint), _, _) => hint.clone(),
        (None, true, _) => "opening the session…".to_string(),
        (None, false, true) => {
            "working… Ctrl-C cancels · Enter queues a followup · Ctrl-S steers".to_string()
        }
        _ => String::new(),
    };
    frame.render_widget(
        Paragraph::new(Span::styled(hint_text, Style::default().fg(Color::Yellow))),
        hint,
    );

    if let Some(pending) = app.approvals.front() {
        let request = &pending.request;
        let args: String = request
            .arguments
            .replace('\n', " ")
            .chars()
            .take(
                usize::from(bottom.width.saturating_sub(4))
                    .saturating_sub(request.tool_name.len() + 1),
            )
            .collect();
        let lines = vec![
            Line::from(vec![
                Span::styled("[y] allow once", Style::default().fg(Color::Green)),
                Span::raw("   "),
                Span::styled("[n] reject", Style::default().fg(Color::Red)),
            ]),
            Line::from(vec![
                Span::styled(
                    format!("{} ", request.tool_name),
                    Style::default().add_modifier(Modifier::BOLD),
                ),
                Span::raw(args),
            ]),
            Line::from(Span::styled(
                request.reason.clone(),
                Style::default().fg(Color::Gray),
            )),
        ];
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::default().fg(Color::Yellow))
            .title(" approval needed ");
        frame.render_widget(
            Paragraph::new(lines)
                .block(block)
                .wrap(Wrap { trim: false }),
            bottom,
        );
    } else {
        let visible = usize::from(bottom.height.saturating_sub(2)).max(1);
        let first = usize::from(cursor.0).saturating_sub(visible - 1);
        let rows: Vec<Line<'static>> = if app.composer.is_empty() {
            vec![Line::from(Span::styled(
                "Ask dsh anything · /help for commands",
                Style::default().fg(Color::DarkGray),
            ))]
        } else {
            composer_rows
                .iter()
                .skip(first)
                .map(|r| Line::from(r.clone()))
                .collect()
        };
        let block = Block::default()
            .borders(Borders::TOP | Borders::BOTTOM)
            .border_style(Style::default().fg(Color::DarkGray));
        frame.render_widget(Paragraph::new(rows).block(block), bottom);
        if app.picker.is_none() {
            let x = bottom.x + cursor.1.min(bottom.width.saturating_sub(1));
            let y = bottom.y + 1 + cursor.0.saturating_sub(first as u16);
            frame.set_cursor_position(Position::new(x, y));
        }
        draw_completions(frame, app, bottom);
    }
    frame.render_widget(Paragraph::new(status_line(app)), status);
    draw_picker(frame, app, area);
}

fn draw_conversation(frame: &mut Frame<'_>, app: &App, cache: &mut ViewCache, area: Rect) {
    let cells = &app.transcript.cells;
    cache.cells.resize_with(cells.len(), CachedCell::default);
    let want = usize::from(area.height) + app.scroll;
    let mut total = 0;
    let mut first = cells.len();
    while first > 0 && total < want {
        first -= 1;
        let key = cell_key(&cells[first], app.expand_reasoning);
        let entry = &mut cache.cells[first];
        if entry.key != key || entry.width != area.width || entry.lines.is_empty() {
            let mut lines = vec![Line::default()];
            lines.extend(render_cell(&cells[first], app.expand_reasoning));
            entry.height = wrapped_height(&lines, area.width);
            entry.lines = lines;
            entry.key = key;
            entry.width = area.width;
        }
        total += entry.height;
    }
    let lines: Vec<Line<'static>> = cache.cells[first..]
        .iter()
        .flat_map(|c| c.lines.iter().cloned())
        .collect();
    let view = usize::from(area.height);
    // When scrolled past the top, clamp to the first line.
    let top = total.saturating_sub(view + app.scroll);
    let top = u16::try_from(top).unwrap_or(u16::MAX);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((top, 0)),
        area,
    );
}

fn draw_completions(frame: &mut Frame<'_>, app: &App, composer: Rect) {
    let matches = app.completions();
    if matches.is_empty() {
        return;
    }
    let height = (matches.len() as u16).min(composer.y);
    let area = Rect::new(
        composer.x,
        composer.y.saturating_sub(height),
        composer.width,
        height,
    );
    let lines: Vec<Line<'static>> = matches
        .iter()
        .enumerate()
        .map(|(i, (name, about))| {
            let style = if i == app.completion {
                Style::default().bg(Color::DarkGray).fg(Color::White)
            } else {
                Style::default()
            };
            Line::from(vec![
                Span::styled(format!("{name:<13}"), style.add_modifier(Modifier::BOLD)),
                Span::styled((*about).to_string(), style.fg(Color::Gray)),
            ])
        })
        .collect();
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_picker(frame: &mut Frame<'_>, app: &App, screen: Rect) {
    let Some(picker) = &app.picker else { return };
    let width = screen.width.saturating_sub(4).min(100);
    let height = screen
        .height
        .saturating_sub(4)
        .min(picker.sessions.len() as u16 + 2)
        .max(3);
    let area = Rect::new(
        screen.x + (screen.width - width) / 2,
        screen.y + 1,
        width,
        height,
    );
    let rows = usize::from(height.saturating_sub(2)).max(1);
    let first = picker.selected.saturating_sub(rows - 1);
    let lines: Vec<Line<'static>> = if picker.sessions.is_empty() {
        vec![Line::from("no earlier session in this directory")]
    } else {
        picker
            .sessions
            .iter()
            .enumerate()
            .skip(first)
            .take(rows)
            .map(|(i, s)| {
                let style = if i == picker.selected {
                    Style::default().bg(Color::Blue).fg(Color::White)
                } else {
                    Style::default()
                };
                let short: String = s.id.chars().take(8).collect();
                let title = s.title.clone().unwrap_or_else(|| "(untitled)".to_string());
                Line::from(Span::styled(
                    format!("{short}  {:>3} turns  {title}", s.turns),
                    style,
                ))
            })
            .collect()
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" resume a session (Enter opens, Esc closes) ");
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// Tokens in a short form: 950, 12.3k, 1.0M.
pub fn short_tokens(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 1_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}

/// The status line: model and effort, permission, context used versus window, cache-hit ratio
/// of the last request, session cost.
pub fn status_line(app: &App) -> Line<'static> {
    let stats = &app.transcript.stats;
    let model = stats
        .model
        .clone()
        .unwrap_or_else(|| app.status.model.clone());
    let effort = stats
        .effort
        .clone()
        .or_else(|| app.status.effort.clone())
        .unwrap_or_else(|| "default".to_string());
    let window = app.status.context_window.max(1);
    let used = stats.context_tokens;
    let percent = used as f64 * 100.0 / window as f64;
    let cache = stats
        .last_cache_hit
        .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    let cost = stats
        .cost(&app.status.prices)
        .map_or("$?".to_string(), |c| format!("${c:.4}"));
    let sep = Span::styled(" · ", Style::default().fg(Color::DarkGray));
    let ctx_style = if percent >= 80.0 {
        Style::default().fg(Color::Red)
    } else {
        Style::default()
    };
    Line::from(vec![
        Span::styled(model, Style::default().fg(Color::Cyan)),
        Span::raw(" "),
        Span::styled(effort, Style::default().fg(Color::Gray)),
        sep.clone(),
        Span::raw(app.status.permission.clone()),
        sep.clone(),
        Span::styled(
            format!(
                "ctx {}/{} {percent:.0}%",
                short_tokens(used),
                short_tokens(window)
            ),
            ctx_style,
        ),
        sep.clone(),
        Span::raw(format!("cache {cache}")),
        sep,
        Span::raw(cost),
    ])
}
