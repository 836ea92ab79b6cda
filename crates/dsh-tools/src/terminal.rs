//! Text from the model or a tool made safe to print on a terminal (docs/SECURITY.md,
//! "Terminal output (dsh run, sessions show)"): control characters are shown, not obeyed.
//!
//! A model (or a file it read) can put escape sequences in its text: OSC 52 writes the
//! user's clipboard, OSC 8 makes links, CSI moves the cursor and erases lines, DCS and APC
//! talk to the terminal, a title sequence or `\r`/backspace hides what came before. dsh's
//! printing front ends (`dsh run`, `dsh sessions show`) pass every such text through
//! [`printable`]; the TUI drops control characters while wrapping (dsh-tui `wrap.rs`).

use std::borrow::Cow;

/// True for a character [`printable`] replaces: C0 controls other than newline and tab, DEL,
/// C1 controls (U+0080-U+009F, which some terminals obey as ESC-sequences: U+009B is CSI,
/// U+009D OSC), and the bidirectional overrides and isolates that reorder what is shown
/// (U+202A-U+202E, U+2066-U+2069).
pub fn is_unsafe_for_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` with every character of [`is_unsafe_for_terminal`] shown instead of obeyed: C0
/// controls and DEL in caret notation (ESC as `^[`, BEL as `^G`, backspace as `^H`, a lone
/// carriage return as `^M`; `\r\n` becomes `\n`), the others as `<U+XXXX>`. Newlines and tabs
/// stay. Borrowed when there is nothing to replace.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_for_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if !is_unsafe_for_terminal(c) {
            out.push(c);
        } else if c == '\r' && chars.peek() == Some(&'\n') {
            // A Windows line end: the newline follows.
        } else if (c as u32) < 0x20 || c == '\u{7f}' {
            out.push('^');
            out.push(char::from((c as u8) ^ 0x40));
        } else {
            out.push_str(&format!("<U+{:04X}>", c as u32));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\x1b]52;c;aGk=\x07x\x1b[2J\x1bP1$q\x1b\\"),
            "^[]52;c;aGk=^Gx^[[2J^[P1$q^[\\"
        );
        assert_eq!(printable("a\rb\r\nc\x08\x7f"), "a^Mb\nc^H^?");
        assert_eq!(printable("\u{9b}31m\u{9d}0;t"), "<U+009B>31m<U+009D>0;t");
        assert_eq!(printable("ab\u{202e}cd"), "ab<U+202E>cd");
        let out = printable("\u{1}\u{1f}\u{80}\u{2069}é");
        assert!(!out.chars().any(is_unsafe_for_terminal), "{out}");
        assert!(out.ends_with('é'));
    }
}
