//! Cells to styled lines: user prompts, Markdown replies, reasoning (collapsed or expanded),
//! tool cards (bash, write/edit with a coloured diff, read, glob/grep, any other tool) and
//! notices. Pure functions of the cell, so each can be snapshot-tested.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use crate::markdown::render_markdown;
use crate::transcript::{Cell, Header, NoticeLevel, ToolCard, ToolStatus};

/// Most diff lines a write/edit card shows.
const MAX_DIFF_LINES: usize = 40;
/// Most output lines a bash card shows (the tail).
const MAX_OUTPUT_LINES: usize = 6;

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
            format!("▸ {state} ({words} words, Ctrl-T expands)"),
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

fn arg_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn truncate(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// The tool's subject as its card's header shows it: the command, the path, the pattern, ...
fn subject(card: &ToolCard, args: &Value) -> String {
    match card.name.as_str() {
        "bash" => format!(
            "$ {}",
            truncate(arg_str(args, "command").unwrap_or(""), 200)
        ),
        "read" => {
            let path = arg_str(args, "file_path").unwrap_or("?");
            let offset = args.get("offset").and_then(Value::as_u64);
            let limit = args.get("limit").and_then(Value::as_u64);
            match (offset, limit) {
                // Done: the body tells the lines actually read.
                _ if matches!(card.status, ToolStatus::Done { .. }) => path.to_string(),
                (None, None) => path.to_string(),
                (offset, limit) => {
                    let from = offset.unwrap_or(1).max(1);
                    match limit {
                        Some(limit) => format!("{path} lines {from}-{}", from + limit - 1),
                        None => format!("{path} from line {from}"),
                    }
                }
            }
        }
        "write" | "edit" => arg_str(args, "file_path").unwrap_or("?").to_string(),
        "glob" | "grep" => {
            let pattern = arg_str(args, "pattern").unwrap_or("?");
            match arg_str(args, "path") {
                Some(path) => format!("{pattern} in {path}"),
                None => pattern.to_string(),
            }
        }
        "web_search" => search_subject(args),
        "subagent" | "subagent_fork" => arg_str(args, "description")
            .map_or_else(|| truncate(&card.arguments, 120), |d| truncate(d, 120)),
        _ => truncate(&card.arguments, 120),
    }
}

/// A one-line title of a tool call (`bash $ cargo test`), as the children panel shows a
/// child's latest activity (docs/tui.md, "Children").
pub fn tool_title(name: &str, arguments: &str) -> String {
    let card = ToolCard {
        call_id: String::new(),
        name: name.to_string(),
        arguments: arguments.to_string(),
        status: ToolStatus::Running,
        progress: None,
    };
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    truncate(&format!("{name} {}", subject(&card, &args)), 80)
}

/// Renders a tool card: a header line (status mark, tool, its subject) and a body.
pub fn render_tool(card: &ToolCard) -> Vec<Line<'static>> {
    let args: Value = serde_json::from_str(&card.arguments).unwrap_or(Value::Null);
    let (mark, mark_style) = match &card.status {
        ToolStatus::Running => ("◌", Style::default().fg(Color::Yellow)),
        ToolStatus::Done { .. } => ("●", Style::default().fg(Color::Green)),
        ToolStatus::Failed { .. } => ("●", Style::default().fg(Color::Red)),
    };
    let subject = subject(card, &args);
    let mut header = vec![
        Span::styled(format!("{mark} "), mark_style),
        Span::styled(
            card.name.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(" "),
        Span::raw(subject),
    ];
    let mut body = Vec::new();
    match &card.status {
        ToolStatus::Running => match &card.progress {
            // A child's latest activity on its `subagent` card (docs/tui.md, "Children").
            Some(progress) => header.push(Span::styled(format!("  {progress}"), dim())),
            None => header.push(Span::styled("  running…", dim())),
        },
        ToolStatus::Failed { code, message } => {
            header.push(Span::styled(
                format!("  {code}"),
                Style::default().fg(Color::Red),
            ));
            body.push(body_line(
                truncate(message, 200),
                Style::default().fg(Color::Red),
            ));
        }
        ToolStatus::Done { output, meta } => {
            let meta = meta.as_ref().unwrap_or(&Value::Null);
            match card.name.as_str() {
                "bash" => bash_body(output, meta, &mut header, &mut body),
                "write" | "edit" => diff_body(meta, &mut header, &mut body),
                "read" => read_body(output, meta, &mut header),
                "glob" | "grep" => {
                    let total = meta.get("total").and_then(Value::as_u64);
                    let shown = meta.get("shown").and_then(Value::as_u64);
                    let noun = if card.name == "glob" {
                        "files"
                    } else {
                        "matches"
                    };
                    let text = match (total, shown) {
                        (Some(t), Some(s)) if s < t => format!("  {t} {noun} ({s} shown)"),
                        (Some(t), _) => format!("  {t} {noun}"),
                        _ => format!("  {} lines", output.lines().count()),
                    };
                    header.push(Span::styled(text, dim()));
                }
                "web_search" => search_body(meta, &mut header, &mut body),
                _ => {
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

/// `web_search`: its queries.
fn search_subject(args: &Value) -> String {
    let queries: Vec<&str> = args
        .get("queries")
        .and_then(Value::as_array)
        .map(|q| q.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    truncate(&queries.join(", "), 200)
}

/// `web_search`: the sources (title and URL) from `meta.sources` (docs/tools.md, "web_search").
fn search_body(meta: &Value, header: &mut Vec<Span<'static>>, body: &mut Vec<Line<'static>>) {
    let sources = meta.get("sources").and_then(Value::as_array);
    let sources = sources.map(Vec::as_slice).unwrap_or_default();
    header.push(Span::styled(format!("  {} sources", sources.len()), dim()));
    for source in sources {
        let url = source.get("url").and_then(Value::as_str).unwrap_or("?");
        let line = match source.get("title").and_then(Value::as_str) {
            Some(title) => format!("{title} — {url}"),
            None => url.to_string(),
        };
        body.push(body_line(truncate(&line, 160), dim()));
    }
}

/// `read`: the lines actually read, from the result (`meta.linesShown`, `offset` and
/// `totalLines`, docs/tools.md, "read"; else the numbered lines of its output), not from the
/// request's `limit`, which a short file or the byte cap cuts.
fn read_body(output: &str, meta: &Value, header: &mut Vec<Span<'static>>) {
    let shown = meta
        .get("linesShown")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| {
            output
                .lines()
                .filter(|l| {
                    let digits = l.chars().take_while(char::is_ascii_digit).count();
                    digits > 0 && (l[digits..].starts_with(": ") || l[digits..].starts_with('\t'))
                })
                .count() as u64
        });
    let offset = meta.get("offset").and_then(Value::as_u64);
    let total = meta.get("totalLines").and_then(Value::as_u64);
    let noun = if shown == 1 { "line" } else { "lines" };
    let text = match (offset, total) {
        (Some(from), Some(total)) if shown > 0 && shown < total => format!(
            "  {shown} {noun} read ({from}-{} of {total})",
            from + shown - 1
        ),
        _ => format!("  {shown} {noun} read"),
    };
    header.push(Span::styled(text, dim()));
}

fn body_line(text: String, style: Style) -> Line<'static> {
    Line::from(vec![Span::styled("  │ ", dim()), Span::styled(text, style)])
}

fn bash_body(
    output: &str,
    meta: &Value,
    header: &mut Vec<Span<'static>>,
    body: &mut Vec<Line<'static>>,
) {
    let exit = meta.get("exitCode").and_then(Value::as_i64);
    let timed_out = meta.get("timedOut").and_then(Value::as_bool) == Some(true);
    let (text, style) = if timed_out {
        ("  ✗ timed out".to_string(), Style::default().fg(Color::Red))
    } else {
        match exit {
            Some(0) => ("  ✓ exit 0".to_string(), Style::default().fg(Color::Green)),
            Some(code) => (format!("  ✗ exit {code}"), Style::default().fg(Color::Red)),
            None => ("  ✗ killed".to_string(), Style::default().fg(Color::Red)),
        }
    };
    header.push(Span::styled(text, style));
    let lines: Vec<&str> = output
        .lines()
        .filter(|l| !l.starts_with("[exit code:"))
        .collect();
    let skip = lines.len().saturating_sub(MAX_OUTPUT_LINES);
    if skip > 0 {
        body.push(body_line(format!("… {skip} more lines"), dim()));
    }
    for line in &lines[skip..] {
        body.push(body_line(truncate(line, 200), dim()));
    }
}

fn diff_body(meta: &Value, header: &mut Vec<Span<'static>>, body: &mut Vec<Line<'static>>) {
    let added = meta.get("added").and_then(Value::as_u64).unwrap_or(0);
    let removed = meta.get("removed").and_then(Value::as_u64).unwrap_or(0);
    let created = meta.get("created").and_then(Value::as_bool) == Some(true);
    header.push(Span::styled(
        format!(
            "  {}+{added} -{removed}",
            if created { "new file " } else { "" }
        ),
        dim(),
    ));
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
