//! Wrapping styled lines to the view's width, done here rather than by ratatui's `Paragraph`
//! so that a wrapped line of a code block or a tool card keeps its `  │ ` gutter on every row
//! (docs/tui.md, "Screen"), and so that the inline mode can write the very same rows into the
//! terminal's scrollback ([`crate::inline`]).
//!
//! Words wrap at spaces; a word longer than the row is cut. Control characters and
//! zero-width characters are dropped, as ratatui's buffer drops them: text from the model or a
//! tool never reaches the terminal as escape sequences.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Span texts that start a gutter: the rows a long line wraps into start with it again.
const GUTTERS: &[&str] = &["  │ "];

/// One piece of a wrapped row: text, style and a tag (the link target in the inline writer,
/// `()` in the view).
pub type Piece<T> = (String, Style, T);

/// Wraps `lines` to `width` columns; every returned line fits in one row.
pub fn wrap_lines(lines: &[Line<'static>], width: u16) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for line in lines {
        let tagged: Vec<(Span<'static>, ())> = line.spans.iter().map(|s| (s.clone(), ())).collect();
        for row in wrap_tagged(&tagged, width) {
            let spans: Vec<Span<'static>> = row
                .into_iter()
                .map(|(text, style, ())| Span::styled(text, style))
                .collect();
            out.push(Line::from(spans).style(line.style));
        }
    }
    out
}

/// Where a link's label landed in wrapped rows (docs/tui.md, "Links"): the row, its first
/// column and width in columns, the label's text there, and the address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpot {
    /// Index of the wrapped row.
    pub row: usize,
    /// First column of the label on that row.
    pub col: u16,
    /// Columns the label takes on that row.
    pub width: u16,
    /// The label's text on that row.
    pub text: String,
    /// The address (checked by [`link_targets`]).
    pub url: String,
}

/// [`wrap_lines`] that also says where link labels landed: the rows are the same text in the
/// same styles (a label may only be split from a neighbour of the same style, which draws
/// alike), and each label piece of a row is a [`LinkSpot`].
pub fn wrap_lines_with_links(
    lines: &[Line<'static>],
    width: u16,
) -> (Vec<Line<'static>>, Vec<LinkSpot>) {
    let mut out = Vec::new();
    let mut spots = Vec::new();
    for line in lines {
        let tagged = link_targets(line);
        for row in wrap_tagged(&tagged, width) {
            let mut col = 0usize;
            let mut spans = Vec::with_capacity(row.len());
            for (text, style, url) in row {
                let w = span_width(&text);
                if let Some(url) = url {
                    spots.push(LinkSpot {
                        row: out.len(),
                        col: u16::try_from(col).unwrap_or(u16::MAX),
                        width: u16::try_from(w).unwrap_or(u16::MAX),
                        text: text.clone(),
                        url,
                    });
                }
                col += w;
                spans.push(Span::styled(text, style));
            }
            out.push(Line::from(spans).style(line.style));
        }
    }
    (out, spots)
}

/// Wraps one line of tagged spans into rows of at most `width` columns.
pub fn wrap_tagged<T: Clone + PartialEq>(
    spans: &[(Span<'static>, T)],
    width: u16,
) -> Vec<Vec<Piece<T>>> {
    let width = usize::from(width.max(1));
    let gutter = spans
        .first()
        .filter(|(span, _)| GUTTERS.contains(&span.content.as_ref()))
        .filter(|(span, _)| span_width(&span.content) < width / 2);
    let (prefix, rest) = match gutter {
        Some(first) => (Some(first.clone()), &spans[1..]),
        None => (None, spans),
    };
    let prefix_width = prefix.as_ref().map_or(0, |(s, _)| span_width(&s.content));
    let room = width.saturating_sub(prefix_width).max(1);
    // Characters with their width, style and tag.
    let mut chars: Vec<(char, usize, Style, T)> = Vec::new();
    for (span, tag) in rest {
        for c in span.content.chars() {
            let c = if c == '\t' { ' ' } else { c };
            if c.is_control() {
                continue;
            }
            let w = c.width().unwrap_or(0);
            if w == 0 {
                continue;
            }
            chars.push((c, w, span.style, tag.clone()));
        }
    }
    let mut rows: Vec<Vec<(char, usize, Style, T)>> = Vec::new();
    let mut row: Vec<(char, usize, Style, T)> = Vec::new();
    let mut used = 0;
    for item in chars {
        if used + item.1 > room && !row.is_empty() {
            // Break after the last space of the row when there is one past its start.
            let cut = row
                .iter()
                .rposition(|(c, ..)| *c == ' ')
                .filter(|at| *at > 0 && *at + 1 < row.len())
                .map(|at| at + 1);
            let carry = match cut {
                Some(at) => row.split_off(at),
                None => Vec::new(),
            };
            rows.push(std::mem::take(&mut row));
            used = carry.iter().map(|c| c.1).sum();
            row = carry;
        }
        used += item.1;
        row.push(item);
    }
    rows.push(row);
    rows.into_iter()
        .map(|chars| {
            let mut pieces: Vec<Piece<T>> = Vec::new();
            if let Some((span, tag)) = &prefix {
                pieces.push((span.content.to_string(), span.style, tag.clone()));
            }
            let first_own = pieces.len();
            for (c, _, style, tag) in chars {
                let own = pieces.len() > first_own;
                match pieces.last_mut() {
                    Some(last) if own && last.1 == style && last.2 == tag => last.0.push(c),
                    _ => pieces.push((c.to_string(), style, tag)),
                }
            }
            pieces
        })
        .collect()
}

fn span_width(text: &str) -> usize {
    text.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// The link target of each span: a Markdown link renders as its label (blue, underlined)
/// followed by ` (url)` ([`crate::markdown::inline`]); the label gets the url when it is a web
/// or mail address without control characters, so it can become a terminal hyperlink.
pub fn link_targets(line: &Line<'static>) -> Vec<(Span<'static>, Option<String>)> {
    let spans = &line.spans;
    spans
        .iter()
        .enumerate()
        .map(|(i, span)| {
            let is_label = span.style.fg == Some(Color::Blue)
                && span.style.add_modifier.contains(Modifier::UNDERLINED);
            let url = spans
                .get(i + 1)
                .filter(|_| is_label)
                .and_then(|next| next.content.strip_prefix(" ("))
                .and_then(|rest| rest.strip_suffix(')'))
                .filter(|url| safe_url(url))
                .map(str::to_string);
            (span.clone(), url)
        })
        .collect()
}

/// An address a terminal hyperlink may carry: http(s) or mailto, printable ASCII only, so it
/// cannot end the escape sequence early or smuggle another one.
fn safe_url(url: &str) -> bool {
    let scheme = ["https://", "http://", "mailto:"]
        .iter()
        .any(|s| url.starts_with(s));
    scheme && url.len() < 2048 && url.bytes().all(|b| (0x21..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line<'static>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.to_string()).collect())
            .collect()
    }

    #[test]
    fn a_gutter_is_repeated_on_every_wrapped_row() {
        let line = Line::from(vec![
            Span::raw("  │ "),
            Span::raw("let value = compute(first_argument, second_argument);"),
        ]);
        let rows = texts(&wrap_lines(&[line], 24));
        assert!(rows.len() > 2, "{rows:?}");
        for row in &rows {
            assert!(row.starts_with("  │ "), "{rows:?}");
            assert!(span_width(row) <= 24, "{rows:?}");
        }
        let joined: String = rows
            .iter()
            .map(|r| &r[r.find('│').unwrap_or(0) + 4..])
            .collect();
        assert_eq!(
            joined,
            "let value = compute(first_argument, second_argument);"
        );
    }

    #[test]
    fn words_wrap_at_spaces_and_control_characters_are_dropped() {
        let line = Line::from("hello brave\u{1b}[31m new world");
        let rows = texts(&wrap_lines(&[line], 12));
        assert_eq!(rows, ["hello ", "brave[31m ", "new world"]);
        let long = Line::from("abcdefghijkl");
        assert_eq!(texts(&wrap_lines(&[long], 5)), ["abcde", "fghij", "kl"]);
        assert_eq!(texts(&wrap_lines(&[Line::default()], 5)), [""]);
    }

    #[test]
    fn wrapping_with_links_keeps_the_rows_and_finds_the_labels() {
        let label = Style::default()
            .fg(Color::Blue)
            .add_modifier(Modifier::UNDERLINED);
        let line = Line::from(vec![
            Span::raw("read the "),
            Span::styled("long guide", label),
            Span::raw(" (https://example.com/g)"),
            Span::raw(" now"),
        ]);
        let lines = [line, Line::from("plain")];
        let (rows, spots) = wrap_lines_with_links(&lines, 14);
        assert_eq!(texts(&rows), texts(&wrap_lines(&lines, 14)));
        let found: Vec<(usize, u16, u16, &str)> = spots
            .iter()
            .map(|s| (s.row, s.col, s.width, s.text.as_str()))
            .collect();
        // "read the long " / "guide (https:/" ...: the label wraps over two rows.
        assert_eq!(found, [(0, 9, 5, "long "), (1, 0, 5, "guide")], "{rows:?}");
        assert!(spots.iter().all(|s| s.url == "https://example.com/g"));
    }

    #[test]
    fn only_safe_link_targets_are_kept() {
        let label = Style::default()
            .fg(Color::Blue)
            .add_modifier(Modifier::UNDERLINED);
        let line = |url: &str| {
            Line::from(vec![
                Span::styled("docs", label),
                Span::raw(format!(" ({url})")),
            ])
        };
        let ok = link_targets(&line("https://example.com/a?b=1"));
        assert_eq!(ok[0].1.as_deref(), Some("https://example.com/a?b=1"));
        assert_eq!(ok[1].1, None);
        assert_eq!(link_targets(&line("javascript:alert(1)"))[0].1, None);
        assert_eq!(link_targets(&line("https://x\u{7}\u{1b}]8;;"))[0].1, None);
    }
}
