//! Cells to styled lines: user prompts, Markdown replies, reasoning (collapsed or expanded),
//! tool cards (as each tool presents its calls: a command's output, a coloured diff, sources,
//! a summary line), in the state the protocol gives them (docs/protocol.md, "Tool cards"), and
//! notices. Pure functions of the cell, so each can be snapshot-tested.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use dsh_protocol::{Card, CardState};
use dsh_tools::{ResultSummary, Tone, ToolView};

use crate::markdown::render_markdown;
use crate::transcript::{Cell, Header, NoticeLevel, ToolCard};

/// Most diff lines a write/edit card shows.
const MAX_DIFF_LINES: usize = 40;
/// Most output lines a bash card shows (the tail).
const MAX_OUTPUT_LINES: usize = 6;
/// Characters of an output line a bash card shows (a longer one is cut, ending in `…`).
const MAX_LINE_CHARS: usize = 200;

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// Renders one cell. `expand_reasoning` shows reasoning in full instead of one summary line.
pub fn render_cell(cell: &Cell, expand_reasoning: bool) -> Vec<Line<'static>> {
    match cell {
        Cell::User { text } => {
            let mut lines = Vec::new();
            for (i, line) in text.split('\n').enumerate() {
                let prefix = if i == 0 { "› " } else { "  " };
                lines.push(Line::from(vec![
                    Span::styled(
                        prefix,
                        Style::default()
                            .fg(Color::Cyan)
                            .add_modifier(Modifier::BOLD),
                    ),
                    Span::styled(
                        line.to_string(),
                        Style::default().add_modifier(Modifier::BOLD),
                    ),
                ]));
            }
            lines
        }
        Cell::Assistant {
            text,
            streaming,
            interrupted,
        } => {
            let mut lines = render_markdown(text.trim_end_matches('\n'));
            if *streaming {
                match lines.last_mut() {
                    Some(last) => last.spans.push(Span::styled("▌", dim())),
                    None => lines.push(Line::from(Span::styled("▌", dim()))),
                }
            }
            if *interrupted {
                lines.push(Line::from(Span::styled(
                    "(interrupted)",
                    dim().add_modifier(Modifier::ITALIC),
                )));
            }
            lines
        }
        Cell::Reasoning { text, streaming } => render_reasoning(text, *streaming, expand_reasoning),
        Cell::Tool(card) => render_tool(card),
        Cell::Header(header) => render_header(header),
        Cell::Notice { level, text } => {
            let (mark, style) = match level {
                NoticeLevel::Info => ("ℹ ", Style::default().fg(Color::Blue)),
                NoticeLevel::Warn => ("⚠ ", Style::default().fg(Color::Yellow)),
                NoticeLevel::Error => ("✗ ", Style::default().fg(Color::Red)),
            };
            text.split('\n')
                .enumerate()
                .map(|(i, line)| {
                    Line::from(vec![
                        Span::styled(if i == 0 { mark } else { "  " }, style),
                        Span::styled(line.to_string(), style),
                    ])
                })
                .collect()
        }
    }
}

/// `path` with the home directory shortened to `~`.
pub fn short_path(path: &std::path::Path, home: Option<&std::path::Path>) -> String {
    match home.and_then(|home| path.strip_prefix(home).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "~".to_string(),
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// Three tips under the welcome header.
pub const TIPS: [&str; 3] = [
    "/ opens the commands (/help lists them and the keys)",
    "Esc or Ctrl-C interrupts a running turn; Enter while it runs queues a followup",
    "Ctrl-T shows the model's reasoning; `dsh resume` continues a session later",
];

/// The welcome header: a box with the version, model and effort, preset and directory, then
/// the tips.
pub fn render_header(header: &Header) -> Vec<Line<'static>> {
    let border = Style::default().fg(Color::DarkGray);
    let label = dim();
    let effort = header
        .effort
        .as_deref()
        .map_or(String::new(), |e| format!(" · effort {e}"));
    let mut rows: Vec<Vec<Span<'static>>> = vec![
        vec![
            Span::styled(
                ">_ dsh ",
                Style::default()
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("v{}", header.version), label),
        ],
        vec![
            Span::styled("model:     ", label),
            Span::styled(header.model.clone(), Style::default().fg(Color::Cyan)),
            Span::raw(effort),
        ],
        vec![
            Span::styled("preset:    ", label),
            Span::raw(header.preset.clone()),
        ],
        vec![
            Span::styled("directory: ", label),
            Span::raw(header.cwd.clone()),
        ],
    ];
    if let Some(id) = &header.resumed {
        rows.push(vec![
            Span::styled("resumed:   ", label),
            Span::raw(id.clone()),
        ]);
    }
    let width = rows
        .iter()
        .map(|r| r.iter().map(|s| s.width()).sum::<usize>())
        .max()
        .unwrap_or(0);
    let mut lines = vec![Line::from(Span::styled(
        format!("╭{}╮", "─".repeat(width + 2)),
        border,
    ))];
    for row in rows {
        let used: usize = row.iter().map(|s| s.width()).sum();
        let mut spans = vec![Span::styled("│ ", border)];
        spans.extend(row);
        spans.push(Span::raw(" ".repeat(width - used)));
        spans.push(Span::styled(" │", border));
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(Span::styled(
        format!("╰{}╯", "─".repeat(width + 2)),
        border,
    )));
    for tip in TIPS {
        lines.push(Line::from(vec![
            Span::styled("  tip: ", label),
            Span::raw(tip),
        ]));
    }
    lines
}

fn render_reasoning(text: &str, streaming: bool, expand: bool) -> Vec<Line<'static>> {
    let style = dim().add_modifier(Modifier::ITALIC);
    let words = text.split_whitespace().count();
    let state = if streaming { "Thinking…" } else { "Thought" };
    if !expand {
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        let mut spans = vec![Span::styled(
            format!("▸ {state} ({words} words, Ctrl-T shows it)"),
            style,
        )];
        if streaming && !last.is_empty() {
            spans.push(Span::styled(format!(" {}", truncate(last, 60)), style));
        }
        return vec![Line::from(spans)];
    }
    let mut lines = vec![Line::from(Span::styled(
        format!("▾ {state} ({words} words)"),
        style,
    ))];
    for line in text.trim_end().split('\n') {
        lines.push(Line::from(Span::styled(format!("  {line}"), style)));
    }
    lines
}

fn truncate(text: &str, max: usize) -> String {
    dsh_tools::one_line(text, max)
}

/// The call's subject as its card's header shows it: the command, the path, the pattern...
/// (the tool's, docs/tools.md, "Presentation"), else its arguments.
fn subject(card: &Card) -> String {
    card.summary
        .as_ref()
        .and_then(|s| s.subject.as_deref())
        .or(card.presentation.subject.as_deref())
        .map_or_else(|| truncate(&card.arguments, 120), str::to_string)
}

/// A one-line title of a logged tool call (`bash $ cargo test`), as the children panel shows a
/// child's latest activity (docs/tui.md, "Children").
pub fn tool_title(call: &dsh_session::ToolCall) -> String {
    let shown = dsh_agent::Presenter::shown(call);
    let subject = shown
        .subject
        .clone()
        .unwrap_or_else(|| truncate(&call.arguments, 120));
    truncate(&format!("{} {subject}", shown.title), 80)
}

/// The summary in a card's header: `✓`/`✗` and green/red when the tool says the result is
/// good or bad news, dim otherwise.
fn summary_span(summary: &ResultSummary) -> Span<'static> {
    match summary.tone {
        Tone::Success => Span::styled(
            format!("  ✓ {}", summary.text),
            Style::default().fg(Color::Green),
        ),
        Tone::Failure => Span::styled(
            format!("  ✗ {}", summary.text),
            Style::default().fg(Color::Red),
        ),
        Tone::Neutral => Span::styled(format!("  {}", summary.text), dim()),
    }
}

/// The mark before a card's title, in the colour of its state (docs/protocol.md, "Tool
/// cards"): open calls `◌`, ended ones `●`, refused ones `⊘`.
fn state_mark(state: CardState) -> (&'static str, Style) {
    match state {
        CardState::Pending => ("◌", dim()),
        CardState::AwaitingApproval => ("◌", Style::default().fg(Color::Magenta)),
        CardState::Running => ("◌", Style::default().fg(Color::Yellow)),
        CardState::Done => ("●", Style::default().fg(Color::Green)),
        CardState::Failed => ("●", Style::default().fg(Color::Red)),
        CardState::Denied => ("⊘", Style::default().fg(Color::Red)),
        CardState::Cancelled => ("●", dim()),
    }
}

/// Renders a tool card: a header line (state mark, the tool's title and subject, the state or
/// the result's summary) and a body laid out as the tool's view says.
pub fn render_tool(tool: &ToolCard) -> Vec<Line<'static>> {
    let card = &tool.card;
    let (mark, mark_style) = state_mark(card.state);
    let mut header = vec![
        Span::styled(format!("{mark} "), mark_style),
        Span::styled(
            card.presentation.title.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(" "),
        Span::raw(subject(card)),
    ];
    let mut body = Vec::new();
    let output = card.result.as_deref().unwrap_or("");
    match card.state {
        CardState::AwaitingApproval => header.push(Span::styled(
            "  awaiting approval",
            Style::default().fg(Color::Magenta),
        )),
        CardState::Pending | CardState::Running => {
            let word = if card.state == CardState::Pending {
                "pending…"
            } else {
                "running…"
            };
            // A child's latest activity on its `subagent` card (docs/tui.md, "Children"), else
            // the call's own progress reports (an MCP server's), else the state.
            // A running command's last lines of output (a `bash` call's live tail) go below.
            let tail = card.progress.as_ref().filter(|p| !p.output.is_empty());
            let shown = tool
                .progress
                .clone()
                .or_else(|| {
                    card.progress
                        .as_ref()
                        .filter(|_| tail.is_none())
                        .map(|p| p.describe())
                })
                .unwrap_or_else(|| word.to_string());
            header.push(Span::styled(format!("  {shown}"), dim()));
            for line in tail.map_or(&[][..], |report| &report.output[..]) {
                body.push(body_line(truncate(line, 200), dim()));
            }
        }
        CardState::Failed | CardState::Denied | CardState::Cancelled => {
            let word = match card.state {
                CardState::Denied => "denied",
                CardState::Cancelled => "cancelled",
                _ => card.error_code.as_deref().unwrap_or("failed"),
            };
            header.push(match &card.summary {
                Some(summary) if card.state == CardState::Failed => summary_span(summary),
                _ => Span::styled(format!("  {word}"), mark_style),
            });
            let why = output.lines().find(|l| !l.trim().is_empty());
            if let Some(why) = why {
                body.push(body_line(truncate(why, 200), mark_style));
            }
        }
        CardState::Done => {
            if let Some(summary) = &card.summary {
                header.push(summary_span(summary));
            }
            let meta = card.meta.as_ref().unwrap_or(&Value::Null);
            match card.presentation.view {
                ToolView::Terminal => terminal_body(output, meta, &mut body),
                ToolView::Diff => diff_body(meta, &mut body),
                // Shown by the summary alone.
                ToolView::Contents | ToolView::Results => {}
                ToolView::Sources => sources_body(meta, &mut body),
                ToolView::Text | ToolView::Todos | ToolView::Question | ToolView::PlanReview => {
                    for line in output.lines().take(3) {
                        body.push(body_line(truncate(line, 160), dim()));
                    }
                }
            }
        }
    }
    let mut lines = vec![Line::from(header)];
    lines.extend(body);
    lines
}

/// Web sources (title and URL) from `meta.sources` (docs/tools.md, "web_search").
fn sources_body(meta: &Value, body: &mut Vec<Line<'static>>) {
    let sources = meta.get("sources").and_then(Value::as_array);
    for source in sources.map(Vec::as_slice).unwrap_or_default() {
        let url = source.get("url").and_then(Value::as_str).unwrap_or("?");
        let line = match source.get("title").and_then(Value::as_str) {
            Some(title) => format!("{title} — {url}"),
            None => url.to_string(),
        };
        body.push(body_line(truncate(&line, 160), dim()));
    }
}

fn body_line(text: String, style: Style) -> Line<'static> {
    Line::from(vec![Span::styled("  │ ", dim()), Span::styled(text, style)])
}

/// A command's output: its last lines, under a line that says what the card leaves out: the
/// lines above them and, when the lines are long or the output was cut before it reached the
/// result, how many bytes of the output are not shown (docs/tui.md, "Screen").
fn terminal_body(output: &str, meta: &Value, body: &mut Vec<Line<'static>>) {
    let lines: Vec<&str> = output
        .lines()
        .filter(|l| !l.starts_with("[exit code:"))
        .collect();
    let skip = lines.len().saturating_sub(MAX_OUTPUT_LINES);
    let shown = &lines[skip..];
    if let Some(hidden) = hidden_output(&lines, skip, meta) {
        body.push(body_line(hidden, dim()));
    }
    for line in shown {
        body.push(body_line(truncate(line, MAX_LINE_CHARS), dim()));
    }
}

/// What a command card does not show of its output, in words (`None`: nothing). `lines` are the
/// result's lines, of which the card shows those from `skip` on, each cut at
/// [`MAX_LINE_CHARS`]; `meta` may say how much the command wrote (`bash`: `stdoutBytes` and
/// `stderrBytes`), which is more than the result holds when the output was cut before it.
fn hidden_output(lines: &[&str], skip: usize, meta: &Value) -> Option<String> {
    let above: u64 = lines[..skip].iter().map(|l| l.len() as u64 + 1).sum();
    let shown: u64 = lines[skip..].iter().map(|l| kept_bytes(l) as u64).sum();
    let cut = lines[skip..].iter().any(|l| kept_bytes(l) < l.len());
    let text: u64 = lines.iter().map(|l| l.len() as u64 + 1).sum();
    let written: u64 = ["stdoutBytes", "stderrBytes"]
        .iter()
        .filter_map(|key| meta.get(key).and_then(Value::as_u64))
        .sum();
    let dropped = written > text;
    let total = written.max(text);
    let hidden = total.saturating_sub(shown);
    // Lines longer than a row shows, on average: their count alone would belittle them.
    let long = above > skip as u64 * MAX_LINE_CHARS as u64;
    // A result that holds only part of the output has fewer lines than the output: its count
    // would mislead, its size does not.
    let lines = (skip > 0 && !dropped).then(|| {
        let noun = if skip == 1 { "line" } else { "lines" };
        format!("{skip} more {noun}")
    });
    let bytes = (cut || dropped || long).then(|| {
        format!(
            "{} of {} not shown{}",
            byte_size(hidden),
            byte_size(total),
            if cut { " (long lines cut)" } else { "" }
        )
    });
    match (lines, bytes) {
        (Some(lines), Some(bytes)) => Some(format!("… {lines} · {bytes}")),
        (Some(text), None) | (None, Some(text)) => Some(format!("… {text}")),
        (None, None) => None,
    }
}

/// The bytes of `line` a card shows: all of it, or what [`truncate`] keeps of a longer one.
fn kept_bytes(line: &str) -> usize {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some(_) => line
            .char_indices()
            .nth(MAX_LINE_CHARS - 1)
            .map_or(line.len(), |(at, _)| at),
        None => line.len(),
    }
}

/// `bytes` for people: `512 bytes`, `12.5 KiB`, `3.0 MiB`.
fn byte_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / (KIB * KIB)),
    }
}

/// File changes: the first file's diff from `meta.diffs` (or `meta.unifiedDiff`).
fn diff_body(meta: &Value, body: &mut Vec<Line<'static>>) {
    let plus = Style::default().fg(Color::Green);
    let minus = Style::default().fg(Color::Red);
    let mut out: Vec<(String, Style)> = Vec::new();
    let first = meta.get("diffs").and_then(|d| d.get(0));
    let new_text = first.and_then(|d| d.get("newText")).and_then(Value::as_str);
    if let Some(new_text) = new_text {
        let old_text = first
            .and_then(|d| d.get("oldText"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let diff = TextDiff::from_lines(old_text, new_text);
        for (i, group) in diff.grouped_ops(2).iter().enumerate() {
            if i > 0 {
                out.push(("⋯".to_string(), dim()));
            }
            for op in group {
                for change in diff.iter_changes(op) {
                    let line = change.value().trim_end_matches('\n');
                    let (sign, style) = match change.tag() {
                        ChangeTag::Insert => ('+', plus),
                        ChangeTag::Delete => ('-', minus),
                        ChangeTag::Equal => (' ', dim()),
                    };
                    let number = change
                        .new_index()
                        .or(change.old_index())
                        .map_or(0, |n| n + 1);
                    out.push((format!("{number:>4} {sign} {line}"), style));
                }
            }
        }
    } else if let Some(unified) = meta.get("unifiedDiff").and_then(Value::as_str) {
        for line in unified.lines() {
            let style = if line.starts_with("+++") || line.starts_with("---") {
                dim()
            } else if line.starts_with('+') {
                plus
            } else if line.starts_with('-') {
                minus
            } else {
                dim()
            };
            out.push((line.to_string(), style));
        }
    }
    let extra = out.len().saturating_sub(MAX_DIFF_LINES);
    for (text, style) in out.into_iter().take(MAX_DIFF_LINES) {
        body.push(body_line(text, style));
    }
    if extra > 0 {
        body.push(body_line(format!("… {extra} more diff lines"), dim()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::ToolCard;

    #[test]
    fn a_running_card_shows_its_calls_progress() {
        let mut card = Card {
            call_id: "c1".into(),
            tool: "mcp__s__long".into(),
            presentation: dsh_tools::ToolPresentation::new("s · long"),
            arguments: "{}".into(),
            state: CardState::Running,
            summary: None,
            error_code: None,
            result: None,
            meta: None,
            progress: None,
        };
        let text = |card: &Card| {
            let cell = Cell::Tool(ToolCard {
                card: card.clone(),
                progress: None,
            });
            render_cell(&cell, false)
                .iter()
                .flat_map(|line| line.spans.iter().map(|s| s.content.to_string()))
                .collect::<String>()
        };
        assert!(text(&card).contains("running…"), "{}", text(&card));
        card.progress = Some(dsh_tools::ToolProgress::new(
            2.0,
            Some(4.0),
            Some("half".into()),
        ));
        assert!(text(&card).contains("2/4 (50%) half"), "{}", text(&card));
        // A command's output tail: its lines under the card, the last one in the header.
        card.progress = Some(dsh_tools::ToolProgress {
            output: vec!["Compiling a".into(), "Compiling b".into()],
            ..dsh_tools::ToolProgress::new(2.0, None, None)
        });
        let shown = text(&card);
        assert!(shown.contains("running…"), "{shown}");
        let (a, b) = (shown.find("Compiling a"), shown.find("Compiling b"));
        assert!(a.is_some() && a < b, "{shown}");
    }
}
