//! Markdown to styled lines, for text that may still be streaming.
//!
//! Covers what models write: headings, paragraphs, bullet and numbered lists, block quotes,
//! fenced code blocks (highlighted by [`crate::highlight`]), horizontal rules, and inline
//! `code`, **bold**, *italic* and `[links](url)`. The renderer is total: any input, including a
//! prefix cut in the middle of a construct (an unclosed fence or `**`), renders without panic;
//! an unclosed fence renders as code up to the end, so a block being streamed looks like the
//! finished one.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::highlight::{code_style, highlight_line};

/// Renders `source` as lines (not wrapped: the view wraps them to its width).
pub fn render_markdown(source: &str) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let mut fence: Option<(String, String)> = None; // (marker, language)
    for raw in source.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim_start();
        if let Some((marker, lang)) = &fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                out.push(Line::from(Span::styled(
                    "  └".to_string(),
                    Style::default().fg(Color::DarkGray),
                )));
                fence = None;
            } else {
                let mut spans = vec![Span::styled(
                    "  │ ".to_string(),
                    Style::default().fg(Color::DarkGray),
                )];
                spans.extend(highlight_line(lang, line));
                out.push(Line::from(spans));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            let lang = trimmed[marker.len()..].trim().to_string();
            let label = if lang.is_empty() {
                "  ┌".to_string()
            } else {
                format!("  ┌ {lang}")
            };
            out.push(Line::from(Span::styled(
                label,
                Style::default().fg(Color::DarkGray),
            )));
            fence = Some((marker, lang));
            continue;
        }
        out.push(block_line(line));
    }
    out
}

fn block_line(line: &str) -> Line<'static> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    if let Some(level) = heading_level(trimmed) {
        // `## Title ##`: the closing run of `#` is not part of the title.
        let text = trimmed[level..].trim();
        let text = match text.trim_end_matches('#') {
            rest if rest.is_empty() || rest.ends_with(' ') => rest.trim_end(),
            _ => text,
        };
        let style = match level {
            1 => Style::default()
                .fg(Color::Cyan)
                .add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            2 => Style::default()
                .fg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
            3 => Style::default()
                .fg(Color::LightBlue)
                .add_modifier(Modifier::BOLD),
            _ => Style::default().add_modifier(Modifier::BOLD | Modifier::ITALIC),
        };
        return Line::from(inline(text, style));
    }
    if is_rule(trimmed) {
        return Line::from(Span::styled(
            "─".repeat(40),
            Style::default().fg(Color::DarkGray),
        ));
    }
    if let Some(rest) = trimmed.strip_prefix('>') {
        let mut spans = vec![Span::styled(
            "▎ ".to_string(),
            Style::default().fg(Color::DarkGray),
        )];
        spans.extend(inline(
            rest.trim_start(),
            Style::default().add_modifier(Modifier::ITALIC),
        ));
        return Line::from(spans);
    }
    let pad = " ".repeat(indent);
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(bullet) {
            let (mark, rest) = match rest.strip_prefix("[ ] ") {
                Some(rest) => ("☐ ", rest),
                None => match rest
                    .strip_prefix("[x] ")
                    .or_else(|| rest.strip_prefix("[X] "))
                {
                    Some(rest) => ("☑ ", rest),
                    None => ("• ", rest),
                },
            };
            let mut spans = vec![Span::styled(
                format!("{pad}{mark}"),
                Style::default().fg(Color::Cyan),
            )];
            spans.extend(inline(rest, Style::default()));
            return Line::from(spans);
        }
    }
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits < 4 {
        let after = &trimmed[digits..];
        if let Some(rest) = after
            .strip_prefix(". ")
            .or_else(|| after.strip_prefix(") "))
        {
            let mut spans = vec![Span::styled(
                format!("{pad}{}. ", &trimmed[..digits]),
                Style::default().fg(Color::Cyan),
            )];
            spans.extend(inline(rest, Style::default()));
            return Line::from(spans);
        }
    }
    Line::from(inline(line, Style::default()))
}

fn heading_level(line: &str) -> Option<usize> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let rest = &line[level..];
    if (1..=6).contains(&level) && (rest.starts_with(' ') || rest.trim().is_empty()) {
        Some(level)
    } else {
        None
    }
}

fn is_rule(line: &str) -> bool {
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    compact.len() >= 3
        && (compact.chars().all(|c| c == '-')
            || compact.chars().all(|c| c == '*')
            || compact.chars().all(|c| c == '_'))
}

/// Inline markup over `base`: `code`, **bold**, *italic* / _italic_, `[text](url)`.
/// Markers without a closing partner are shown as typed.
pub fn inline(text: &str, base: Style) -> Vec<Span<'static>> {
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    let mut plain = String::new();
    let mut i = 0;
    let push_plain = |plain: &mut String, spans: &mut Vec<Span<'static>>| {
        if !plain.is_empty() {
            spans.push(Span::styled(std::mem::take(plain), base));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            if let Some(end) = find(&chars, i + 1, &['`']) {
                push_plain(&mut plain, &mut spans);
                spans.push(Span::styled(
                    chars[i + 1..end].iter().collect::<String>(),
                    code_style()
                        .bg(Color::Rgb(40, 40, 40))
                        .fg(Color::LightYellow),
                ));
                i = end + 1;
                continue;
            }
        }
        if (c == '*' || c == '_') && chars.get(i + 1) == Some(&c) {
            if let Some(end) = find(&chars, i + 2, &[c, c]) {
                if end > i + 2 {
                    push_plain(&mut plain, &mut spans);
                    let inner: String = chars[i + 2..end].iter().collect();
                    spans.extend(inline(&inner, base.add_modifier(Modifier::BOLD)));
                    i = end + 2;
                    continue;
                }
            }
        }
        if (c == '*' || c == '_')
            && chars.get(i + 1).is_some_and(|n| !n.is_whitespace())
            && (i == 0 || !chars[i - 1].is_alphanumeric())
        {
            if let Some(end) = find(&chars, i + 1, &[c]) {
                if end > i + 1 && !chars[end - 1].is_whitespace() {
                    push_plain(&mut plain, &mut spans);
                    let inner: String = chars[i + 1..end].iter().collect();
                    spans.extend(inline(&inner, base.add_modifier(Modifier::ITALIC)));
                    i = end + 1;
                    continue;
                }
            }
        }
        if c == '[' {
            if let Some(close) = find(&chars, i + 1, &[']']) {
                if chars.get(close + 1) == Some(&'(') {
                    if let Some(paren) = find(&chars, close + 2, &[')']) {
                        push_plain(&mut plain, &mut spans);
                        let label: String = chars[i + 1..close].iter().collect();
                        let url: String = chars[close + 2..paren].iter().collect();
                        spans.push(Span::styled(
                            label,
                            base.fg(Color::Blue).add_modifier(Modifier::UNDERLINED),
                        ));
                        spans.push(Span::styled(
                            format!(" ({url})"),
                            Style::default().fg(Color::DarkGray),
                        ));
                        i = paren + 1;
                        continue;
                    }
                }
            }
        }
        plain.push(c);
        i += 1;
    }
    push_plain(&mut plain, &mut spans);
    spans
}

/// The index of the first occurrence of `pattern` at or after `from`.
fn find(chars: &[char], from: usize, pattern: &[char]) -> Option<usize> {
    if pattern.is_empty() || from >= chars.len() {
        return None;
    }
    (from..=chars.len().saturating_sub(pattern.len())).find(|&at| chars[at..].starts_with(pattern))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.to_string()).collect())
            .collect()
    }

    #[test]
    fn every_prefix_of_a_document_renders() {
        let doc = "# Title\n\nSome **bold** and *it* and `code` [a](b)\n\n- one\n1. two\n> q\n\n```rust\nfn main() {}\n```\n---\n";
        for (i, _) in doc.char_indices() {
            let _ = render_markdown(&doc[..i]);
        }
        let lines = text(&render_markdown(doc));
        assert_eq!(lines[0], "Title");
        assert_eq!(lines[2], "Some bold and it and code a (b)");
        assert_eq!(lines[4], "• one");
        assert_eq!(lines[5], "1. two");
        assert_eq!(lines[8], "  ┌ rust");
        assert_eq!(lines[9], "  │ fn main() {}");
    }

    #[test]
    fn unclosed_markers_stay_visible() {
        assert_eq!(
            text(&[Line::from(inline("a **b", Style::default()))]),
            ["a **b"]
        );
        assert_eq!(
            text(&[Line::from(inline("x*y*", Style::default()))]),
            ["x*y*"]
        );
        assert_eq!(text(&[Line::from(inline("`", Style::default()))]), ["`"]);
    }
}
