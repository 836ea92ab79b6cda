//! A small code highlighter for fenced blocks: keywords, strings, comments and numbers.
//!
//! It is deliberately lexical and line-local (a block comment or a multi-line string is not
//! tracked across lines), so a streaming block can be coloured line by line without state and
//! start-up pays for no grammar loading. Unknown languages get strings, numbers and comments of
//! the common syntaxes.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;

const RUST: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while",
];
const PYTHON: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif",
    "else", "except", "False", "finally", "for", "from", "global", "if", "import", "in", "is",
    "lambda", "None", "nonlocal", "not", "or", "pass", "raise", "return", "True", "try", "while",
    "with", "yield",
];
const JS: &[&str] = &[
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "else",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "from",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "return",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "type",
    "typeof",
    "undefined",
    "var",
    "void",
    "while",
    "yield",
];
const GO: &[&str] = &[
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "false",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "nil",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "true",
    "type",
    "var",
];
const C: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "false",
    "float",
    "for",
    "if",
    "include",
    "int",
    "long",
    "namespace",
    "new",
    "nullptr",
    "private",
    "public",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "true",
    "typedef",
    "union",
    "unsigned",
    "void",
    "while",
];
const SHELL: &[&str] = &[
    "case", "do", "done", "elif", "else", "esac", "export", "fi", "for", "function", "if", "in",
    "local", "return", "then", "until", "while",
];

/// Comment syntax and keywords of a language tag (the word after the opening fence).
struct Language {
    keywords: &'static [&'static str],
    line_comment: &'static [&'static str],
}

fn language(tag: &str) -> Language {
    let tag = tag.trim().to_ascii_lowercase();
    let (keywords, line_comment): (&'static [&'static str], &'static [&'static str]) =
        match tag.as_str() {
            "rust" | "rs" => (RUST, &["//"]),
            "python" | "py" => (PYTHON, &["#"]),
            "js" | "javascript" | "ts" | "typescript" | "tsx" | "jsx" => (JS, &["//"]),
            "go" => (GO, &["//"]),
            "c" | "cpp" | "c++" | "h" | "hpp" | "java" | "cs" => (C, &["//"]),
            "sh" | "bash" | "shell" | "zsh" | "console" => (SHELL, &["#"]),
            "toml" | "yaml" | "yml" | "ini" => (&[], &["#"]),
            _ => (&[], &["//", "#"]),
        };
    Language {
        keywords,
        line_comment,
    }
}

/// Style of code text that is not a token of interest.
pub fn code_style() -> Style {
    Style::default().fg(Color::Gray)
}

/// Colours one line of code written in `tag` (may be empty).
pub fn highlight_line(tag: &str, line: &str) -> Vec<Span<'static>> {
    let lang = language(tag);
    let keyword = Style::default()
        .fg(Color::Magenta)
        .add_modifier(Modifier::BOLD);
    let string = Style::default().fg(Color::Green);
    let comment = Style::default()
        .fg(Color::DarkGray)
        .add_modifier(Modifier::ITALIC);
    let number = Style::default().fg(Color::Yellow);
    let plain = code_style();

    let mut spans = Vec::new();
    let mut pending = String::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let flush = |pending: &mut String, spans: &mut Vec<Span<'static>>| {
        if !pending.is_empty() {
            spans.push(Span::styled(std::mem::take(pending), plain));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..].iter().collect();
        if lang
            .line_comment
            .iter()
            .any(|marker| rest.starts_with(marker))
            && (i == 0 || !chars[i - 1].is_alphanumeric())
        {
            flush(&mut pending, &mut spans);
            spans.push(Span::styled(rest, comment));
            return spans;
        }
        if c == '"' || c == '\'' || c == '`' {
            // A lone quote in Rust is usually a lifetime; only colour it when it closes.
            if let Some(len) = chars[i + 1..].iter().position(|&d| d == c) {
                flush(&mut pending, &mut spans);
                let text: String = chars[i..i + len + 2].iter().collect();
                spans.push(Span::styled(text, string));
                i += len + 2;
                continue;
            }
        }
        if c.is_ascii_digit() && (i == 0 || !is_word(chars[i - 1])) {
            flush(&mut pending, &mut spans);
            let len = chars[i..]
                .iter()
                .take_while(|d| d.is_ascii_alphanumeric() || **d == '.' || **d == '_')
                .count();
            spans.push(Span::styled(
                chars[i..i + len].iter().collect::<String>(),
                number,
            ));
            i += len;
            continue;
        }
        if is_word(c) && (i == 0 || !is_word(chars[i - 1])) {
            let len = chars[i..].iter().take_while(|d| is_word(**d)).count();
            let word: String = chars[i..i + len].iter().collect();
            if lang.keywords.contains(&word.as_str()) {
                flush(&mut pending, &mut spans);
                spans.push(Span::styled(word, keyword));
            } else {
                pending.push_str(&word);
            }
            i += len;
            continue;
        }
        pending.push(c);
        i += 1;
    }
    flush(&mut pending, &mut spans);
    spans
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(tag: &str, line: &str) -> Vec<(String, Option<Color>)> {
        highlight_line(tag, line)
            .into_iter()
            .map(|s| (s.content.to_string(), s.style.fg))
            .collect()
    }

    #[test]
    fn keywords_strings_comments_numbers() {
        let spans = kinds("rust", r#"let x = "hi"; // note 3"#);
        assert_eq!(spans[0], ("let".into(), Some(Color::Magenta)));
        assert!(spans.contains(&("\"hi\"".into(), Some(Color::Green))));
        assert_eq!(
            spans.last(),
            Some(&("// note 3".into(), Some(Color::DarkGray)))
        );
        let spans = kinds("py", "x = 42");
        assert!(spans.contains(&("42".into(), Some(Color::Yellow))));
    }

    #[test]
    fn lone_quote_and_odd_input_do_not_panic() {
        for line in ["fn f<'a>(x: &'a str)", "\"", "'", "é'ü\"", "#", "1.2.3x"] {
            let text: String = highlight_line("rust", line)
                .iter()
                .map(|s| s.content.to_string())
                .collect();
            assert_eq!(text, line);
        }
    }
}
