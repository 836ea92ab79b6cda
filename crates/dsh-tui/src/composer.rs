//! The multi-line composer: a text buffer with a cursor, independent of the terminal.
//!
//! The draft lives here until the user sends it; nothing else clears it (turn ends and cancels
//! leave it alone), so typing is never lost.

use unicode_width::UnicodeWidthChar;

/// Editable text with a cursor (a char index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Composer {
    text: Vec<char>,
    cursor: usize,
    /// Sent texts, oldest first, for Up/Down recall.
    history: Vec<String>,
    /// Position while browsing history (`history.len()` when not browsing).
    history_at: usize,
}

impl Composer {
    /// An empty composer.
    pub fn new() -> Self {
        Composer::default()
    }

    /// The draft.
    pub fn text(&self) -> String {
        self.text.iter().collect()
    }

    /// True when the draft is empty.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Replaces the draft and puts the cursor at its end.
    pub fn set_text(&mut self, text: &str) {
        self.text = text.chars().collect();
        self.cursor = self.text.len();
    }

    /// Takes the draft out (to send it), remembering it for recall.
    pub fn take(&mut self) -> String {
        let text = self.text();
        if !text.trim().is_empty() {
            self.history.push(text.clone());
        }
        self.history_at = self.history.len();
        self.text.clear();
        self.cursor = 0;
        text
    }

    /// Inserts text at the cursor (typing and pastes; `\r\n` and `\r` become `\n`).
    pub fn insert_str(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        for c in text.chars() {
            self.insert(c);
        }
    }

    /// Inserts one character at the cursor.
    pub fn insert(&mut self, c: char) {
        if c == '\t' {
            for _ in 0..4 {
                self.insert(' ');
            }
            return;
        }
        if c.is_control() && c != '\n' {
            return;
        }
        self.text.insert(self.cursor, c);
        self.cursor += 1;
    }

    /// The word that ends at the cursor (after the last space or newline before it), if the
    /// cursor is right after it: what an `@` mention being typed looks like.
    pub fn word_before_cursor(&self) -> Option<String> {
        let start = self.text[..self.cursor]
            .iter()
            .rposition(|c| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let at_end = self.text.get(self.cursor).is_none_or(|c| c.is_whitespace());
        (start < self.cursor && at_end).then(|| self.text[start..self.cursor].iter().collect())
    }

    /// Replaces the word before the cursor (see [`Composer::word_before_cursor`]) by `text`.
    pub fn replace_word_before_cursor(&mut self, text: &str) {
        let start = self.text[..self.cursor]
            .iter()
            .rposition(|c| c.is_whitespace())
            .map_or(0, |i| i + 1);
        self.text.drain(start..self.cursor);
        self.cursor = start;
        for c in text.chars() {
            self.text.insert(self.cursor, c);
            self.cursor += 1;
        }
    }

    /// Deletes the character before the cursor.
    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            self.cursor -= 1;
            self.text.remove(self.cursor);
        }
    }

    /// Deletes the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    /// Deletes the word before the cursor.
    pub fn delete_word(&mut self) {
        while self.cursor > 0 && self.text[self.cursor - 1].is_whitespace() {
            self.backspace();
        }
        while self.cursor > 0 && !self.text[self.cursor - 1].is_whitespace() {
            self.backspace();
        }
    }

    /// Deletes from the start of the line to the cursor.
    pub fn delete_to_line_start(&mut self) {
        let start = self.line_start(self.cursor);
        self.text.drain(start..self.cursor);
        self.cursor = start;
    }

    /// Moves left one character.
    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    /// Moves right one character.
    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.text.len());
    }

    /// Moves to the start of the line.
    pub fn home(&mut self) {
        self.cursor = self.line_start(self.cursor);
    }

    /// Moves to the end of the line.
    pub fn end(&mut self) {
        self.cursor = self.line_end(self.cursor);
    }

    fn line_start(&self, at: usize) -> usize {
        self.text[..at]
            .iter()
            .rposition(|c| *c == '\n')
            .map_or(0, |p| p + 1)
    }

    fn line_end(&self, at: usize) -> usize {
        self.text[at..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(self.text.len(), |p| at + p)
    }

    /// Moves up a line; on the first line, recalls the previous sent text when the draft is
    /// empty or itself recalled. Returns false when nothing moved.
    pub fn up(&mut self) -> bool {
        let start = self.line_start(self.cursor);
        if start == 0 {
            let browsing = self.history_at < self.history.len();
            if (self.text.is_empty() || browsing) && self.history_at > 0 {
                self.history_at -= 1;
                let text = self.history[self.history_at].clone();
                self.set_text(&text);
                return true;
            }
            return false;
        }
        let column = self.cursor - start;
        let prev_start = self.line_start(start - 1);
        self.cursor = (prev_start + column).min(start - 1);
        true
    }

    /// Moves down a line; on the last line while recalling, goes forward in history.
    pub fn down(&mut self) -> bool {
        let end = self.line_end(self.cursor);
        if end == self.text.len() {
            if self.history_at < self.history.len() {
                self.history_at += 1;
                let text = self
                    .history
                    .get(self.history_at)
                    .cloned()
                    .unwrap_or_default();
                self.set_text(&text);
                return true;
            }
            return false;
        }
        let column = self.cursor - self.line_start(self.cursor);
        let next_end = self.line_end(end + 1);
        self.cursor = (end + 1 + column).min(next_end);
        true
    }

    /// The draft cut into rows of at most `width` columns, and the cursor's (row, column).
    pub fn layout(&self, width: u16) -> (Vec<String>, (u16, u16)) {
        let width = usize::from(width.max(2));
        let mut rows = vec![String::new()];
        let mut col = 0;
        let mut cursor = (0, 0);
        for (i, c) in self.text.iter().enumerate() {
            if i == self.cursor {
                cursor = (rows.len() - 1, col);
            }
            if *c == '\n' {
                rows.push(String::new());
                col = 0;
                continue;
            }
            let w = c.width().unwrap_or(0);
            if col + w > width - 1 {
                rows.push(String::new());
                col = 0;
                if i == self.cursor {
                    cursor = (rows.len() - 1, 0);
                }
            }
            if let Some(row) = rows.last_mut() {
                row.push(*c);
            }
            col += w;
        }
        if self.cursor >= self.text.len() {
            cursor = (rows.len() - 1, col);
        }
        let to_u16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        (rows, (to_u16(cursor.0), to_u16(cursor.1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_and_lines() {
        let mut c = Composer::new();
        c.insert_str("hello\r\nworld");
        assert_eq!(c.text(), "hello\nworld");
        c.up();
        c.end();
        c.insert('!');
        assert_eq!(c.text(), "hello!\nworld");
        c.down();
        c.delete_word();
        assert_eq!(c.text(), "hello!\n");
        let (rows, cursor) = c.layout(20);
        assert_eq!(rows, ["hello!", ""]);
        assert_eq!(cursor, (1, 0));
    }

    #[test]
    fn history_recall_keeps_order() {
        let mut c = Composer::new();
        c.insert_str("one");
        assert_eq!(c.take(), "one");
        c.insert_str("two");
        c.take();
        assert!(c.up());
        assert_eq!(c.text(), "two");
        assert!(c.up());
        assert_eq!(c.text(), "one");
        assert!(c.down());
        assert_eq!(c.text(), "two");
        assert!(c.down());
        assert_eq!(c.text(), "");
    }

    #[test]
    fn wrapping_puts_the_cursor_on_the_right_row() {
        let mut c = Composer::new();
        c.insert_str("abcdefgh");
        let (rows, cursor) = c.layout(5);
        assert_eq!(rows, ["abcd", "efgh"]);
        assert_eq!(cursor, (1, 4));
    }
}
