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
use crate::links::LinkArea;
use crate::question::QuestionForm;
use crate::transcript::{Cell, Transcript};
use crate::wrap::{wrap_lines, wrap_lines_with_links, LinkSpot};

/// Rendered lines of one cell, valid while its key and the width are unchanged.
#[derive(Default)]
struct CachedCell {
    key: u64,
    width: u16,
    lines: Vec<Line<'static>>,
    height: usize,
    /// Link labels in `lines` (docs/tui.md, "Links").
    links: Vec<LinkSpot>,
}

/// Per-cell layout cache owned by the runtime across frames.
#[derive(Default)]
pub struct ViewCache {
    cells: Vec<CachedCell>,
    /// The link labels the last frame's conversation showed, in screen cells (the full-screen
    /// mode brackets them with OSC 8, [`crate::links`]).
    pub links: Vec<LinkArea>,
    /// Where the last frame put the cursor (`None`: hidden).
    pub cursor: Option<Position>,
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
            let result = card.card.result.as_ref().map(String::len);
            let state = card.state().as_str();
            (3u8, state, result, card.call_id(), &card.progress).hash(&mut h)
        }
        Cell::Notice { text, .. } => (4u8, text.len()).hash(&mut h),
        Cell::Header(header) => (5u8, header).hash(&mut h),
    }
    h.finish()
}

fn wrapped_height(lines: &[Line<'static>], width: u16) -> usize {
    Paragraph::new(lines.to_vec())
        .wrap(Wrap { trim: false })
        .line_count(width)
}

/// Rows of the parts below the conversation, for one frame.
struct Parts {
    popup: u16,
    queue: u16,
    /// The children panel (docs/tui.md, "Children").
    children: u16,
    hint: u16,
    bottom: u16,
}

/// The most rows a box replacing the composer may take on a screen of `rows`.
fn box_limit(rows: u16) -> u16 {
    (rows.saturating_mul(2) / 3).max(5)
}

fn parts(app: &App, width: u16, rows: u16, inline: bool) -> Parts {
    let (composer_rows, _) = app.composer.layout(width.saturating_sub(2));
    let bottom = if let Some(pending) = app.approvals.front() {
        let (fixed, body) = approval_lines(pending);
        let inner = wrapped_height(&fixed, width.saturating_sub(2))
            + wrapped_height(&body, width.saturating_sub(2));
        (u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)).clamp(4, box_limit(rows))
    } else if let Some(q) = app.questions.front() {
        let (lines, _) = question_lines(&q.form);
        let inner = wrapped_height(&lines, width.saturating_sub(2));
        (u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)).clamp(3, box_limit(rows))
    } else if let Some(preset) = app.confirm_permission {
        let inner = wrapped_height(&confirm_lines(app, preset), width.saturating_sub(2));
        u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)
    } else if let Some(note) = &app.confirm_note {
        let inner = wrapped_height(&note_lines(note), width.saturating_sub(2));
        u16::try_from(inner).unwrap_or(u16::MAX).saturating_add(2)
    } else {
        (composer_rows.len() as u16).clamp(1, 8) + 2
    };
    // Popups over the conversation in the full-screen mode; rows of their own inline.
    let menus = app.permission_menu.is_none()
        && app.picker.is_none()
        && app.children.menu.is_none()
        && app.rewind_menu.is_none();
    let popup = if !inline || app.modal() && menus {
        0
    } else if app.permission_menu.is_some() {
        PERMISSION_PRESETS.len() as u16 + 2
    } else if app.children.menu.is_some() {
        (app.children.list.len() as u16 + 2).clamp(3, (rows / 2).max(3))
    } else if let Some(menu) = &app.rewind_menu {
        (menu.lines().1.len() as u16 + 2).clamp(3, (rows / 2).max(3))
    } else if let Some(picker) = &app.picker {
        (picker.sessions.len() as u16 + 2).clamp(3, (rows / 2).max(3))
    } else {
        (app.completions().len() as u16)
            .max(app.finder.popup_rows())
            .min(10)
    };
    Parts {
        popup,
        queue: app.queue.len().min(4) as u16,
        children: app.children.panel_rows(),
        hint: u16::from(
            app.hint.is_some() || app.transcript.running || app.loading || app.review.is_some(),
        ),
        bottom,
    }
}

/// Draws the whole screen (the full-screen mode, `--alt-screen`).
pub fn draw(frame: &mut Frame<'_>, app: &mut App, cache: &mut ViewCache) {
    let rows = frame.area().height;
    draw_screen(frame, app, cache, 0, false, rows);
}

/// Rows the inline mode's live area wants on a screen of `cols` x `rows`: the cells from
/// `first` on (those not yet written as history), popups, queue, hint, the composer or the
/// box in its place, and the status line; at most `rows`.
pub fn live_height(app: &App, cache: &mut ViewCache, cols: u16, rows: u16, first: usize) -> u16 {
    if app.pager.is_some() || app.children.followed().is_some() {
        // `/diff`'s view and a followed child take the whole screen (crate::pager,
        // crate::children).
        return rows.max(1);
    }
    let parts = parts(app, cols.max(4), rows, true);
    let conversation = cells_height(app, cache, cols.max(4), first);
    let fixed = parts.popup + parts.queue + parts.children + parts.hint + parts.bottom + 1;
    let want = u16::try_from(conversation)
        .unwrap_or(u16::MAX)
        .saturating_add(fixed);
    want.clamp(1, rows.max(1))
}

/// Draws the inline mode's live area: the cells from `first` on, then the rest as in
/// [`draw`], with popups on rows of their own. `rows` is the screen's height (boxes are sized
/// for it, as in [`live_height`]).
pub fn draw_live(
    frame: &mut Frame<'_>,
    app: &mut App,
    cache: &mut ViewCache,
    first: usize,
    rows: u16,
) {
    draw_screen(frame, app, cache, first, true, rows);
}

fn draw_screen(
    frame: &mut Frame<'_>,
    app: &mut App,
    cache: &mut ViewCache,
    first: usize,
    inline: bool,
    rows: u16,
) {
    let area = frame.area();
    cache.cursor = None;
    let width = area.width.max(4);
    let (composer_rows, cursor) = app.composer.layout(width.saturating_sub(2));
    let question = app.questions.front().map(|q| question_lines(&q.form));
    let confirm = app
        .confirm_permission
        .map(|preset| (confirm_lines(app, preset), " confirm permission preset "))
        .or_else(|| {
            app.confirm_note
                .as_ref()
                .map(|note| (note_lines(note), " note to the instructions "))
        });
    let parts = parts(app, width, rows, inline);
    let [conversation, popup, queue, children, hint, bottom, status] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length(parts.popup),
        Constraint::Length(parts.queue),
        Constraint::Length(parts.children),
        Constraint::Length(parts.hint),
        Constraint::Length(parts.bottom),
        Constraint::Length(1),
    ])
    .areas(area);
    app.page = usize::from(conversation.height);
    draw_conversation(frame, app, cache, conversation, first);

    frame.render_widget(Paragraph::new(queue_lines(app)), queue);
    frame.render_widget(Paragraph::new(app.children.panel_lines()), children);
    frame.render_widget(Paragraph::new(hint_line(app)), hint);

    if let Some(pending) = app.approvals.front_mut() {
        draw_approval(frame, pending, bottom);
    } else if let (Some(pending), Some((lines, highlight))) = (app.questions.front(), question) {
        draw_question(frame, &pending.form, lines, highlight, bottom);
    } else if let Some((lines, title)) = confirm {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::default().fg(Color::Red))
            .title(title);
        frame.render_widget(
            Paragraph::new(lines)
                .block(block)
                .wrap(Wrap { trim: false }),
            bottom,
        );
    } else {
        let visible = usize::from(bottom.height.saturating_sub(2)).max(1);
        let first_row = usize::from(cursor.0).saturating_sub(visible - 1);
        let rows: Vec<Line<'static>> = if app.composer.is_empty() {
            vec![Line::from(Span::styled(
                "Ask dsh anything · /help for commands",
                Style::default().fg(Color::DarkGray),
            ))]
        } else {
            composer_rows
                .iter()
                .skip(first_row)
                .map(|r| Line::from(r.clone()))
                .collect()
        };
        let block = Block::default()
            .borders(Borders::TOP | Borders::BOTTOM)
            .border_style(Style::default().fg(Color::DarkGray));
        frame.render_widget(Paragraph::new(rows).block(block), bottom);
        if app.picker.is_none() && app.permission_menu.is_none() && app.rewind_menu.is_none() {
            let x = bottom.x + cursor.1.min(bottom.width.saturating_sub(1));
            let y = bottom.y + 1 + cursor.0.saturating_sub(first_row as u16);
            frame.set_cursor_position(Position::new(x, y));
            cache.cursor = Some(Position::new(x, y));
        }
        // Inline: the popup has its own rows. Full screen: over the conversation, never
        // over its first line.
        let room = if inline {
            popup
        } else {
            let free = bottom.y.saturating_sub(conversation.y + 1);
            Rect::new(bottom.x, bottom.y - free, bottom.width, free)
        };
        draw_completions(frame, app, room);
        draw_permission_menu(frame, app, room);
        draw_agents_menu(frame, app, room);
        draw_rewind_menu(frame, app, room);
        crate::finder::draw_finder(frame, app, room);
    }
    frame.render_widget(Paragraph::new(status_line(app)), status);
    if inline {
        draw_picker(frame, app, popup, true);
    } else {
        draw_picker(frame, app, area, false);
    }
    crate::pager::draw_pager(frame, app, area);
}

/// The line above the composer: a hint when there is one, else the working indicator while
/// a turn runs (spinner, elapsed time, streamed tokens, how to interrupt).
pub fn hint_line(app: &App) -> Line<'static> {
    let yellow = Style::default().fg(Color::Yellow);
    if let Some(hint) = &app.hint {
        return Line::from(Span::styled(hint.clone(), yellow));
    }
    if app.loading {
        return Line::from(Span::styled("opening the session…", yellow));
    }
    if let Some(review) = &app.review {
        return crate::review::progress_line(review);
    }
    if !app.transcript.running {
        return Line::default();
    }
    // The time the user takes to answer an approval is not the agent's working time.
    let elapsed = app.transcript.working_time();
    const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
    let frame = SPINNER[(elapsed.as_millis() / 100) as usize % SPINNER.len()];
    let secs = elapsed.as_secs();
    let time = if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    };
    let dim = Style::default().fg(Color::DarkGray);
    Line::from(vec![
        Span::styled(format!("{frame} "), Style::default().fg(Color::Cyan)),
        Span::styled(
            match app.transcript.waiting_since {
                Some(_) => "Waiting for your approval",
                None => "Working",
            },
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            format!(
                " ({time} · ↓ {} tokens · Esc to interrupt)",
                short_tokens(app.transcript.streamed)
            ),
            dim,
        ),
        Span::styled(" · Enter queues a followup · Ctrl-S steers", dim),
    ])
}

/// The approval box's lines: the fixed ones (choices, tool and reason, the rule) and the
/// scrollable body (every argument of the call, each `key: value`, long values wrapped).
pub fn approval_lines(pending: &PendingApproval) -> (Vec<Line<'static>>, Vec<Line<'static>>) {
    let request = &pending.request;
    let mut choices = vec![Span::styled(
        "[y] allow once",
        Style::default().fg(Color::Green),
    )];
    if request.offers(dsh_agent::ApprovalChoice::AllowSession) {
        choices.push(Span::raw("  "));
        choices.push(Span::styled(
            "[s] for this session",
            Style::default().fg(Color::Green),
        ));
    }
    if request.offers(dsh_agent::ApprovalChoice::AllowAlways) {
        choices.push(Span::raw("  "));
        choices.push(Span::styled(
            "[a] always",
            Style::default().fg(Color::Green),
        ));
    }
    choices.push(Span::raw("  "));
    choices.push(Span::styled("[n] deny", Style::default().fg(Color::Red)));
    // The reason names the tool as a rule; else the tool goes first.
    let mut why = Vec::new();
    if !request.reason.starts_with(&request.tool_name) {
        why.push(Span::styled(
            format!("{}: ", request.tool_name),
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    why.push(Span::styled(
        request.reason.clone(),
        Style::default().fg(Color::Gray),
    ));
    let mut fixed = vec![Line::from(choices), Line::from(why)];
    if let Some(rule) = request.rule.as_ref().filter(|_| {
        request.offers(dsh_agent::ApprovalChoice::AllowSession)
            || request.offers(dsh_agent::ApprovalChoice::AllowAlways)
    }) {
        fixed.push(Line::from(Span::styled(
            format!("[s]/[a] would allow {}", rule.describe()),
            Style::default().fg(Color::Gray),
        )));
    }
    let mut body = match &pending.preview {
        Some(preview) => diff_lines(&preview.diff),
        None => Vec::new(),
    };
    let covered: &[&str] = pending.preview.as_ref().map_or(&[], |p| &p.covers);
    body.extend(argument_lines(request, covered));
    (fixed, body)
}

/// A preview's unified diff, coloured by line: added green, removed red, hunk headers cyan.
fn diff_lines(diff: &str) -> Vec<Line<'static>> {
    diff.lines()
        .map(|line| {
            let style = if line.starts_with("+++") || line.starts_with("---") {
                Style::default().add_modifier(Modifier::BOLD)
            } else if line.starts_with('+') {
                Style::default().fg(Color::Green)
            } else if line.starts_with('-') {
                Style::default().fg(Color::Red)
            } else if line.starts_with("@@") {
                Style::default().fg(Color::Cyan)
            } else {
                Style::default()
            };
            Line::from(Span::styled(line.to_string(), style))
        })
        .collect()
}

/// The arguments of an asked call not shown otherwise, each `key: value`: not those the
/// preview shows (`covered`), nor an escalation's preset and justification when the reason
/// quotes them; one-line values first (a path before a file's content), then the
/// others, each in the order of their names.
fn argument_lines(request: &dsh_agent::ApprovalRequest, covered: &[&str]) -> Vec<Line<'static>> {
    let key_style = Style::default().fg(Color::Cyan);
    let loud = Style::default()
        .fg(Color::Yellow)
        .add_modifier(Modifier::BOLD);
    let map = match serde_json::from_str::<serde_json::Value>(&request.arguments) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => {
            return request
                .arguments
                .split('\n')
                .map(|part| Line::from(part.to_string()))
                .collect()
        }
    };
    let mut shown: Vec<(&String, String)> = map
        .iter()
        .filter(|(key, _)| !covered.contains(&key.as_str()))
        .map(|(key, value)| {
            let text = match value {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (key, text)
        })
        // The escalation arguments every tool takes: its reason quotes both.
        .filter(|(key, text)| {
            !matches!(key.as_str(), "sandbox_permissions" | "justification")
                || !request.reason.contains(text.as_str())
        })
        .collect();
    shown.sort_by_key(|(_, text)| text.contains('\n'));
    let mut lines = Vec::new();
    for (key, text) in shown {
        let style = if key == "sandbox_permissions" || key == "justification" {
            loud
        } else {
            Style::default()
        };
        for (i, part) in text.split('\n').enumerate() {
            let label = if i == 0 {
                format!("{key}: ")
            } else {
                " ".repeat(key.chars().count() + 2)
            };
            lines.push(Line::from(vec![
                Span::styled(label, key_style),
                Span::styled(part.to_string(), style),
            ]));
        }
    }
    lines
}

/// The box asking to approve a tool call: the choices the request offers, the tool, the reason
/// and the rule on top; every argument below, scrolled with Up/Down/PgUp/PgDn.
fn draw_approval(frame: &mut Frame<'_>, pending: &mut PendingApproval, bottom: Rect) {
    let (fixed, body) = approval_lines(pending);
    let inner_width = bottom.width.saturating_sub(2);
    let fixed = wrap_lines(&fixed, inner_width);
    let body = wrap_lines(&body, inner_width);
    let inner_height = usize::from(bottom.height.saturating_sub(2));
    let room = inner_height.saturating_sub(fixed.len()).max(1);
    let most = body.len().saturating_sub(room);
    pending.scroll = pending.scroll.min(most);
    let mut block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(Color::Yellow))
        .title(" approval needed ");
    if most > 0 {
        block = block.title_bottom(format!(
            " ↑↓ PgUp PgDn scroll · lines {}-{} of {} ",
            pending.scroll + 1,
            (pending.scroll + room).min(body.len()),
            body.len()
        ));
    }
    let lines: Vec<Line<'static>> = fixed
        .into_iter()
        .chain(body.into_iter().skip(pending.scroll).take(room))
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), bottom);
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

/// The inside of the box asking to confirm a `# note` (docs/tui.md, "Notes to the
/// instructions").
fn note_lines((scope, text): &(dsh_agent::NoteScope, String)) -> Vec<Line<'static>> {
    let file = match scope {
        dsh_agent::NoteScope::Project => "the project's AGENTS.md",
        dsh_agent::NoteScope::User => "your own AGENTS.md in dsh's home",
    };
    vec![
        Line::from(format!("Add this line to {file}?")),
        Line::from(format!("- {}", dsh_tools::printable(text))),
        Line::from(vec![
            Span::styled("[y] add it", Style::default().fg(Color::Green)),
            Span::raw("   "),
            Span::styled("[n] keep it as a draft", Style::default().fg(Color::Yellow)),
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

/// The bottom `height` rows of `room` (a popup right above the composer).
fn above(room: Rect, height: u16) -> Rect {
    let height = height.min(room.height);
    Rect::new(room.x, room.y + room.height - height, room.width, height)
}

/// The `/rewind` list right above the composer (docs/rewind.md): the turns, then what to
/// restore, or the question whether to overwrite files changed outside dsh.
fn draw_rewind_menu(frame: &mut Frame<'_>, app: &App, room: Rect) {
    let Some(menu) = &app.rewind_menu else {
        return;
    };
    let (title, rows, selected) = menu.lines();
    let height = (rows.len() as u16 + 2).min(room.height);
    let area = above(room, height);
    // Keep the highlighted row in view when the list is taller than the room.
    let visible = usize::from(height.saturating_sub(2)).max(1);
    let first = selected.map_or(0, |at| at.saturating_sub(visible - 1));
    let lines: Vec<Line<'static>> = rows
        .into_iter()
        .enumerate()
        .skip(first)
        .map(|(i, row)| {
            let style = if Some(i) == selected {
                Style::default().bg(Color::Blue).fg(Color::White)
            } else {
                Style::default()
            };
            Line::from(Span::styled(row, style))
        })
        .collect();
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// The `/agents` list right above the composer (docs/tui.md, "Children").
fn draw_agents_menu(frame: &mut Frame<'_>, app: &App, room: Rect) {
    let Some(selected) = app.children.menu else {
        return;
    };
    let lines = crate::children::menu_lines(&app.children, selected);
    let height = (lines.len() as u16 + 2).min(room.height);
    let area = above(room, height);
    let rows = usize::from(height.saturating_sub(2)).max(1);
    let first = selected.saturating_sub(rows - 1);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" sub-agents · Enter follows · Esc closes ");
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines.into_iter().skip(first).collect::<Vec<_>>()).block(block),
        area,
    );
}

fn draw_permission_menu(frame: &mut Frame<'_>, app: &App, room: Rect) {
    let Some(menu) = &app.permission_menu else {
        return;
    };
    let area = above(room, PERMISSION_PRESETS.len() as u16 + 2);
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

/// Lays out the cells from `first` on (cached per cell) and returns their total height;
/// stops once `want` rows are laid out, counting from the last cell.
fn layout_cells(
    transcript: &Transcript,
    expand: bool,
    cache: &mut ViewCache,
    width: u16,
    first: usize,
    want: usize,
) -> (usize, usize) {
    let cells = &transcript.cells;
    cache.cells.resize_with(cells.len(), CachedCell::default);
    let first = first.min(cells.len());
    let mut total = 0;
    let mut start = cells.len();
    while start > first && total < want {
        start -= 1;
        let key = cell_key(&cells[start], expand);
        let entry = &mut cache.cells[start];
        if entry.key != key || entry.width != width || entry.lines.is_empty() {
            let mut lines = vec![Line::default()];
            lines.extend(render_cell(&cells[start], expand));
            (entry.lines, entry.links) = wrap_lines_with_links(&lines, width);
            entry.height = entry.lines.len();
            entry.key = key;
            entry.width = width;
        }
        total += entry.height;
    }
    (start, total)
}

/// Rows the cells from `first` on take at `width`.
fn cells_height(app: &App, cache: &mut ViewCache, width: u16, first: usize) -> usize {
    layout_cells(
        &app.transcript,
        app.expand_reasoning,
        cache,
        width,
        first,
        usize::MAX,
    )
    .1
}

fn draw_conversation(
    frame: &mut Frame<'_>,
    app: &mut App,
    cache: &mut ViewCache,
    area: Rect,
    first: usize,
) {
    if app.children.followed().is_some() {
        return draw_followed(frame, app, cache, area);
    }
    cache.links = draw_cells(
        frame,
        &app.transcript,
        app.expand_reasoning,
        cache,
        area,
        first,
        app.scroll,
    );
}

/// Draws the cells of `transcript` from cell `first` on into `area`, `scroll` rows up from the
/// bottom, laid out through `layout`; returns the link labels it shows.
fn draw_cells(
    frame: &mut Frame<'_>,
    transcript: &Transcript,
    expand_reasoning: bool,
    layout: &mut ViewCache,
    area: Rect,
    first: usize,
    scroll: usize,
) -> Vec<LinkArea> {
    let want = usize::from(area.height) + scroll;
    let (start, total) = layout_cells(
        transcript,
        expand_reasoning,
        layout,
        area.width,
        first,
        want,
    );
    let lines: Vec<Line<'static>> = layout.cells[start..]
        .iter()
        .flat_map(|c| c.lines.iter().cloned())
        .collect();
    // When scrolled past the top, clamp to the first line.
    let top = total.saturating_sub(usize::from(area.height) + scroll);
    let links = visible_links(&layout.cells[start..], top, area);
    let top = u16::try_from(top).unwrap_or(u16::MAX);
    frame.render_widget(Paragraph::new(lines).scroll((top, 0)), area);
    links
}

/// The followed child (docs/tui.md, "Children"): a title row, then its transcript, drawn as the
/// parent's is, from its own layout cache.
fn draw_followed(frame: &mut Frame<'_>, app: &mut App, cache: &mut ViewCache, area: Rect) {
    cache.links.clear();
    let mut child_cache = std::mem::take(&mut app.children.cache);
    if let Some(child) = app.children.followed() {
        let title = Line::from(vec![
            Span::styled(
                format!(" following {} ", child.name),
                Style::default().bg(Color::Blue).fg(Color::White),
            ),
            Span::styled(
                format!(
                    " {} · {} · Esc returns · PgUp/PgDn scroll",
                    child.label,
                    child.state.as_str()
                ),
                Style::default().fg(Color::DarkGray),
            ),
        ]);
        frame.render_widget(
            Paragraph::new(title),
            Rect::new(area.x, area.y, area.width, 1),
        );
        let body = Rect::new(
            area.x,
            area.y.saturating_add(1),
            area.width,
            area.height.saturating_sub(1),
        );
        cache.links = draw_cells(
            frame,
            &child.transcript,
            app.expand_reasoning,
            &mut child_cache,
            body,
            0,
            app.scroll,
        );
    }
    app.children.cache = child_cache;
}

/// The link labels of `cells` (laid out from row 0) that rows `top..top + area.height` show,
/// in screen cells.
fn visible_links(cells: &[CachedCell], top: usize, area: Rect) -> Vec<LinkArea> {
    let mut out = Vec::new();
    let mut first_row = 0;
    for cell in cells {
        for spot in &cell.links {
            let row = first_row + spot.row;
            if row < top || row >= top + usize::from(area.height) {
                continue;
            }
            out.push(LinkArea {
                x: area.x + spot.col,
                y: area.y + u16::try_from(row - top).unwrap_or(u16::MAX),
                width: spot.width,
                text: spot.text.clone(),
                url: spot.url.clone(),
            });
        }
        first_row += cell.height;
    }
    out
}

fn draw_completions(frame: &mut Frame<'_>, app: &App, room: Rect) {
    let matches = app.completions();
    if matches.is_empty() || app.permission_menu.is_some() {
        return;
    }
    let area = above(room, matches.len() as u16);
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

/// The `/resume` picker: inline, in the rows given to it; full screen, centred below the
/// conversation's first line.
fn draw_picker(frame: &mut Frame<'_>, app: &App, screen: Rect, inline: bool) {
    let Some(picker) = &app.picker else { return };
    let area = if inline {
        screen
    } else {
        let width = screen.width.saturating_sub(4).min(100);
        let height = screen
            .height
            .saturating_sub(4)
            .min(picker.sessions.len() as u16 + 2)
            .max(3);
        Rect::new(
            screen.x + (screen.width - width) / 2,
            screen.y + 1,
            width,
            height,
        )
    };
    let height = area.height;
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

/// The goal in the status line: `goal active 2/256: <objective>`, the objective cut to 40
/// characters, control characters made spaces.
fn goal_status(goal: &dsh_protocol::GoalView) -> String {
    // The objective is the model's text: control characters are shown, never obeyed, and a
    // newline would break the line.
    let mut objective: String = goal
        .objective
        .chars()
        .map(|c| {
            if c == '\n' || c == '\t' || dsh_tools::is_unsafe_for_terminal(c) {
                ' '
            } else {
                c
            }
        })
        .take(40)
        .collect();
    if goal.objective.chars().count() > 40 {
        objective.push('…');
    }
    format!(
        "goal {} {}/{}: {objective}",
        goal.phase, goal.rounds_started, goal.max_goal_rounds
    )
}

/// The status line: model and effort, permission, the session's goal when it has one, context
/// used versus window, cache-hit ratio of the last request, session cost.
pub fn status_line(app: &App) -> Line<'static> {
    let stats = &app.transcript.stats;
    let (model, effort) = crate::status::model_and_effort(app);
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
    let mut line = vec![
        Span::styled(model, Style::default().fg(Color::Cyan)),
        Span::raw(" "),
        Span::styled(effort, Style::default().fg(Color::Gray)),
        sep.clone(),
        Span::raw(app.status.permission.clone()),
        sep.clone(),
    ];
    if let Some(goal) = &stats.goal {
        let color = match goal.phase.as_str() {
            "active" => Color::Green,
            "blocked" => Color::Red,
            "complete" => Color::Gray,
            _ => Color::Yellow,
        };
        line.push(Span::styled(goal_status(goal), Style::default().fg(color)));
        line.push(sep.clone());
    }
    // `tui.status_command`'s line replaces the figures.
    if let Some(text) = &app.status_text {
        line.push(Span::raw(text.clone()));
        return Line::from(line);
    }
    line.extend([
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
    ]);
    Line::from(line)
}

#[cfg(test)]
mod goal_tests {
    use super::*;

    #[test]
    fn the_goal_in_the_status_line_obeys_no_escape_and_is_cut() {
        let goal = dsh_protocol::GoalView {
            id: "goal-1".into(),
            objective: "\u{1b}]52;c;aGk=\u{7}fix\nthe parser and then everything else too".into(),
            phase: "active".into(),
            rounds_started: 2,
            max_goal_rounds: 256,
            blocked_reason: None,
        };
        let text = goal_status(&goal);
        assert!(text.starts_with("goal active 2/256: "), "{text}");
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        assert!(text.ends_with('…'), "{text}");
    }
}
