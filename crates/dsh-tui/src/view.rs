//! Drawing the [`App`]: conversation, queue, hint, approval prompt, question form,
//! permission confirmation or composer, status line, and the completion, `/permission` and
//! `/resume` popups. Only the cells in view are laid out, and each
//! cell's lines are cached until it changes, so long sessions draw as fast as short ones.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::app::{App, PendingApproval};
use crate::cards::render_cell;
use crate::commands::PERMISSION_PRESETS;
use crate::question::QuestionForm;
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
    let question = app.questions.front().map(|q| question_lines(&q.form));
    let confirm = app
        .confirm_permission
        .map(|preset| confirm_lines(app, preset));
    let bottom_height: u16 = if !app.approvals.is_empty() {
        6
    } else if let Some((lines, _)) = &question {
        let inner = wrapped_height(lines, width.saturating_sub(2));
        let most = (area.height.saturating_mul(2) / 3).max(5);
        (u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)).clamp(3, most)
    } else if let Some(lines) = &confirm {
        let inner = wrapped_height(lines, width.saturating_sub(2));
        u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)
    } else {
        (composer_rows.len() as u16).clamp(1, 8) + 2
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

    frame.render_widget(Paragraph::new(queue_lines(app)), queue);

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
        draw_approval(frame, pending, bottom);
    } else if let (Some(pending), Some((lines, highlight))) = (app.questions.front(), question) {
        draw_question(frame, &pending.form, lines, highlight, bottom);
    } else if let Some(lines) = confirm {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::default().fg(Color::Red))
            .title(" confirm permission preset ");
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
        if app.picker.is_none() && app.permission_menu.is_none() {
            let x = bottom.x + cursor.1.min(bottom.width.saturating_sub(1));
            let y = bottom.y + 1 + cursor.0.saturating_sub(first as u16);
            frame.set_cursor_position(Position::new(x, y));
        }
        draw_completions(frame, app, bottom);
        draw_permission_menu(frame, app, bottom);
    }
    frame.render_widget(Paragraph::new(status_line(app)), status);
    draw_picker(frame, app, area);
}

/// The box asking to approve a tool call, with the choices the request offers and the rule
/// they would remember.
fn draw_approval(frame: &mut Frame<'_>, pending: &PendingApproval, bottom: Rect) {
    let request = &pending.request;
    let args: String = request
        .arguments
        .replace('\n', " ")
        .chars()
        .take(
            usize::from(bottom.width.saturating_sub(4)).saturating_sub(request.tool_name.len() + 1),
        )
        .collect();
    let mut choices = vec![Span::styled(
        "[y] allow once",
        Style::default().fg(Color::Green),
    )];
    if request.offers(dsh_agent::ApprovalChoice::AllowSession) {
        choices.push(Span::raw("   "));
        choices.push(Span::styled(
            "[s] this session",
            Style::default().fg(Color::Green),
        ));
    }
    if request.offers(dsh_agent::ApprovalChoice::AllowAlways) {
        choices.push(Span::raw("   "));
        choices.push(Span::styled(
            "[a] always",
            Style::default().fg(Color::Green),
        ));
    }
    choices.push(Span::raw("   "));
    choices.push(Span::styled("[n] reject", Style::default().fg(Color::Red)));
    let mut lines = vec![
        Line::from(choices),
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
    if let Some(rule) = request.rule.as_ref().filter(|_| {
        request.offers(dsh_agent::ApprovalChoice::AllowSession)
            || request.offers(dsh_agent::ApprovalChoice::AllowAlways)
    }) {
        lines.push(Line::from(Span::styled(
            format!("[s]/[a] would allow {}", rule.describe()),
            Style::default().fg(Color::Gray),
        )));
    }
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
}

/// Queued followups and steering messages, at most four.
fn queue_lines(app: &App) -> Vec<Line<'static>> {
    app.queue
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
        .collect()
}

/// The inside of the box asking to confirm a switch to `preset` (danger-full-access).
fn confirm_lines(app: &App, preset: dsh_tools::PermissionPreset) -> Vec<Line<'static>> {
    vec![
        Line::from(format!(
            "Switch to {preset}? bash then runs without a sandbox and tools may read and \
             change anything this user can."
        )),
        Line::from(vec![
            Span::styled(
                format!("[y] switch to {preset}"),
                Style::default().fg(Color::Red),
            ),
            Span::raw("   "),
            Span::styled(
                format!("[n] keep {}", app.status.permission),
                Style::default().fg(Color::Green),
            ),
        ]),
    ]
}

/// The inside of the question box: the question, its numbered options and the "Other" row, and
/// a key reminder; or the dismiss prompt. Also returns the index of the highlighted row's line.
pub fn question_lines(form: &QuestionForm) -> (Vec<Line<'static>>, usize) {
    let dim = Style::default().fg(Color::DarkGray);
    let caret = Span::styled(" ", Style::default().add_modifier(Modifier::REVERSED));
    if let Some(message) = &form.declining {
        let lines = vec![
            Line::from("Dismiss the questions without answering? The model is told you declined."),
            Line::from(vec![
                Span::raw("Message for the model (optional): "),
                Span::raw(message.clone()),
                caret,
            ]),
            Line::from(Span::styled(
                "Enter dismisses · Esc returns to the questions",
                dim,
            )),
        ];
        return (lines, 1);
    }
    let Some(question) = form.request.questions.get(form.current) else {
        return (Vec::new(), 0);
    };
    let draft = form.drafts.get(form.current).cloned().unwrap_or_default();
    let options = question.options.len();
    let mut lines = vec![Line::from(Span::styled(
        question.question.clone(),
        Style::default().add_modifier(Modifier::BOLD),
    ))];
    let chosen = Style::default()
        .fg(Color::Cyan)
        .add_modifier(Modifier::BOLD);
    for (i, option) in question.options.iter().enumerate() {
        let here = draft.highlight == i;
        let mut spans = vec![Span::raw(if here { "› " } else { "  " })];
        if question.multi_select {
            let mark = if draft.chosen.contains(&i) {
                "[x] "
            } else {
                "[ ] "
            };
            spans.push(Span::raw(mark));
        }
        spans.push(Span::styled(
            format!("{}. {}", i + 1, option.label),
            if here { chosen } else { Style::default() },
        ));
        if let Some(description) = &option.description {
            spans.push(Span::styled(format!("  {description}"), dim));
        }
        lines.push(Line::from(spans));
    }
    let here = draft.highlight >= options;
    let label = if options == 0 {
        "Answer: ".to_string()
    } else if question.multi_select {
        format!("    {}. Other: ", options + 1)
    } else {
        format!("{}. Other: ", options + 1)
    };
    let mut other = vec![
        Span::raw(if here { "› " } else { "  " }),
        Span::styled(label, if here { chosen } else { Style::default() }),
    ];
    if draft.other.is_empty() && !here {
        other.push(Span::styled("type your own answer", dim));
    } else {
        other.push(Span::raw(draft.other.clone()));
    }
    if here {
        other.push(caret);
    }
    lines.push(Line::from(other));
    let highlight = 1 + draft.highlight.min(options);
    let keys = match (options, question.multi_select) {
        (0, _) => "type an answer · Enter confirms · Esc dismisses",
        (_, false) => "↑↓ or 1-9 choose · type for Other · Enter confirms · Esc dismisses",
        (_, true) => {
            "↑↓ move · Space or 1-9 toggle · type for Other · Enter confirms · Esc dismisses"
        }
    };
    let mut keys = keys.to_string();
    if form.current > 0 {
        keys.push_str(" · Shift-Tab back");
    }
    lines.push(Line::from(Span::styled(keys, dim)));
    (lines, highlight)
}

fn draw_question(
    frame: &mut Frame<'_>,
    form: &QuestionForm,
    lines: Vec<Line<'static>>,
    highlight: usize,
    area: Rect,
) {
    let inner_width = area.width.saturating_sub(2);
    // Scroll just enough to keep the highlighted row in view.
    let above: usize = lines
        .iter()
        .take(highlight + 1)
        .map(|l| wrapped_height(std::slice::from_ref(l), inner_width))
        .sum();
    let visible = usize::from(area.height.saturating_sub(2)).max(1);
    let top = u16::try_from(above.saturating_sub(visible)).unwrap_or(u16::MAX);
    let total = form.request.questions.len();
    let header = form
        .request
        .questions
        .get(form.current)
        .and_then(|q| q.header.as_deref())
        .map_or(String::new(), |h| format!(" · {h}"));
    let title = if form.declining.is_some() {
        " dismiss the questions ".to_string()
    } else {
        format!(" question {}/{total}{header} ", form.current + 1)
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(Color::Cyan))
        .title(title);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((top, 0)),
        area,
    );
}

/// A popup of `height` rows (at most what fits) right above the composer, as wide as it.
fn above(composer: Rect, height: u16) -> Rect {
    let height = height.min(composer.y);
    Rect::new(composer.x, composer.y - height, composer.width, height)
}

fn draw_permission_menu(frame: &mut Frame<'_>, app: &App, composer: Rect) {
    let Some(menu) = &app.permission_menu else {
        return;
    };
    let area = above(composer, PERMISSION_PRESETS.len() as u16 + 2);
    let lines: Vec<Line<'static>> = PERMISSION_PRESETS
        .iter()
        .enumerate()
        .map(|(i, (preset, about))| {
            let style = if i == menu.selected {
                Style::default().bg(Color::Blue).fg(Color::White)
            } else {
                Style::default()
            };
            let current = if *preset == menu.current {
                " (current)"
            } else {
                ""
            };
            Line::from(vec![
                Span::styled(
                    format!("{}. {:<19}", i + 1, preset.as_str()),
                    style.add_modifier(Modifier::BOLD),
                ),
                Span::styled(format!("{about}{current}"), style),
            ])
        })
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" permission preset · Enter switches · Esc keeps ");
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
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
    let area = above(composer, matches.len() as u16);
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
                Span::styled(format!("{name:<12} "), style.add_modifier(Modifier::BOLD)),
                Span::styled(about.clone(), style.fg(Color::Gray)),
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
