//! The inline mode (the default, docs/tui.md, "Modes"): finished cells are written into the
//! terminal's normal screen above a live area (the streaming reply, the working indicator,
//! the composer, popups, the status line), and scroll into the terminal's own scrollback like
//! any program output; after quitting, the conversation stays in the terminal.
//!
//! The live area is a ratatui viewport fixed at rows `top..top + height`: `top` is the row
//! right below the last history line. Writing history scrolls the whole screen with line
//! feeds on its last row when the rows run out (the scroll region is never narrowed, so every
//! terminal moves the lines scrolled off the top into its scrollback), writes the rows where
//! the live area was, and moves the live area below them.
//!
//! Nothing here erases the display (`ESC [ J`, `ESC [ 2 J`): rows are erased one line at a time
//! (`ESC [ K`). Terminals may keep an erased screen: tmux (`scroll-on-clear`, on by default)
//! moves the screen into its scrollback when everything below its top-left corner is erased,
//! which is what erasing from a live area at row 0 is, so frames of the live area (a tall
//! reply's rows, the spinner, the composer, `/diff`'s box) landed in the scrollback and the
//! reply's rows came twice once written as history (issue 41). [`LiveBackend`] gives ratatui the
//! same line-by-line erasing.

use std::io::Write;

use crossterm::cursor::MoveTo;
use crossterm::queue;
use crossterm::style::{
    Attribute, Print, ResetColor, SetAttribute, SetBackgroundColor, SetForegroundColor,
};
use crossterm::terminal::{Clear, ClearType};
use ratatui::backend::{Backend, ClearType as RegionClear, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Rect, Size};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;

use crate::wrap::{link_targets, wrap_tagged, Piece};

/// Where the live area is and what has been written above it.
#[derive(Debug, Clone)]
pub struct InlineScreen {
    /// Screen columns.
    pub cols: u16,
    /// Screen rows.
    pub rows: u16,
    /// First row of the live area (right below the history written so far).
    pub top: u16,
    /// Cells of the transcript already written as history.
    pub emitted: usize,
    /// Links become OSC 8 hyperlinks.
    pub hyperlinks: bool,
}

/// True unless `NO_COLOR` is set or the terminal is `dumb`: then links stay plain text with
/// their address after them (docs/tui.md, "Links").
pub fn hyperlinks_supported(no_color: Option<&str>, term: Option<&str>) -> bool {
    no_color.is_none_or(str::is_empty) && term.is_some_and(|t| !t.is_empty() && t != "dumb")
}

impl InlineScreen {
    /// A screen of `cols` x `rows` whose live area starts at `top` (the cursor row at start).
    pub fn new(cols: u16, rows: u16, top: u16, hyperlinks: bool) -> Self {
        InlineScreen {
            cols: cols.max(1),
            rows: rows.max(1),
            top: top.min(rows.saturating_sub(1)),
            emitted: 0,
            hyperlinks,
        }
    }

    /// The live area for a wanted `height`: as much of it as the screen holds, starting at
    /// `top`. Call [`InlineScreen::make_room`] first so that it fits below `top`.
    pub fn area(&self, height: u16) -> Rect {
        let height = height.clamp(1, self.rows);
        Rect::new(0, self.top, self.cols, height.min(self.rows - self.top))
    }

    /// Scrolls the screen up so that `height` rows fit from `top` to the bottom.
    pub fn make_room(&mut self, out: &mut impl Write, height: u16) -> std::io::Result<()> {
        let height = height.clamp(1, self.rows);
        let overflow = (self.top + height).saturating_sub(self.rows);
        self.scroll(out, overflow)
    }

    fn scroll(&mut self, out: &mut impl Write, lines: u16) -> std::io::Result<()> {
        if lines == 0 {
            return Ok(());
        }
        queue!(out, MoveTo(0, self.rows - 1))?;
        for _ in 0..lines {
            // A line feed on the last row scrolls the screen; the top row goes to scrollback.
            out.write_all(b"\n")?;
        }
        self.top = self.top.saturating_sub(lines);
        Ok(())
    }

    /// Adopts a new screen size; the caller redraws the live area (which clears it).
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.cols = cols.max(1);
        self.rows = rows.max(1);
        self.top = self.top.min(self.rows - 1);
    }

    /// Writes `lines` (not yet wrapped) as history at `top` and moves `top` below them.
    pub fn write_history(
        &mut self,
        out: &mut impl Write,
        lines: &[Line<'static>],
    ) -> std::io::Result<()> {
        let rows: Vec<Vec<Piece<Option<String>>>> = lines
            .iter()
            .flat_map(|line| {
                let tagged = link_targets(line);
                wrap_tagged(&tagged, self.cols)
            })
            .collect();
        for row in rows {
            if self.top >= self.rows {
                let over = self.top - self.rows + 1;
                self.scroll(out, over)?;
            }
            queue!(out, MoveTo(0, self.top), Clear(ClearType::UntilNewLine))?;
            write_row(out, &row, self.hyperlinks)?;
            self.top += 1;
        }
        Ok(())
    }

    /// On the way out: clears the live area and leaves the cursor at its first row, below the
    /// history, where the shell continues.
    pub fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.top >= self.rows {
            self.scroll(out, self.top - self.rows + 1)?;
        }
        erase_rows(out, self.top, self.rows)?;
        queue!(out, MoveTo(0, self.top), crossterm::cursor::Show)?;
        out.flush()
    }
}

/// Erases rows `from..rows` line by line, never with an erase of the display (see the module
/// documentation: terminals may move an erased screen into their scrollback).
pub(crate) fn erase_rows(out: &mut impl Write, from: u16, rows: u16) -> std::io::Result<()> {
    for y in from..rows {
        queue!(out, MoveTo(0, y), Clear(ClearType::CurrentLine))?;
    }
    Ok(())
}

/// ratatui's crossterm backend; in the inline mode clearing erases line by line (ratatui
/// clears a fixed viewport that moved or changed size with "erase below the cursor" from its
/// first row, an erase of the whole screen when that row is the top one). On the alternate
/// screen (no scrollback to spoil) it is crossterm's backend as it is.
pub struct LiveBackend<W: Write> {
    inner: CrosstermBackend<W>,
    /// The inline mode's screen rows (erasing below the cursor goes down to the last one);
    /// `None` on the alternate screen.
    pub rows: Option<u16>,
    /// Where ratatui last put the cursor: what "below the cursor" is measured from.
    cursor: Position,
    /// Rows from this one down are blank since the last erase (ratatui clears a fixed viewport
    /// by erasing below each of its rows in turn: one pass is enough).
    erased: Option<u16>,
}

impl<W: Write> LiveBackend<W> {
    /// A backend writing to `out`; `rows`: the inline mode's screen rows, `None` on the
    /// alternate screen.
    pub fn new(out: W, rows: Option<u16>) -> Self {
        LiveBackend {
            inner: CrosstermBackend::new(out),
            rows,
            cursor: Position::ORIGIN,
            erased: None,
        }
    }
}

impl<W: Write> Write for LiveBackend<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.erased = None;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Write::flush(&mut self.inner)
    }
}

impl<W: Write> Backend for LiveBackend<W> {
    fn draw<'a, I>(&mut self, content: I) -> std::io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.erased = None;
        self.inner.draw(content)
    }

    fn append_lines(&mut self, n: u16) -> std::io::Result<()> {
        self.erased = None;
        self.inner.append_lines(n)
    }

    fn hide_cursor(&mut self) -> std::io::Result<()> {
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> std::io::Result<()> {
        self.inner.show_cursor()
    }

    fn get_cursor_position(&mut self) -> std::io::Result<Position> {
        self.inner.get_cursor_position()
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> std::io::Result<()> {
        self.cursor = position.into();
        self.inner.set_cursor_position(self.cursor)
    }

    fn clear(&mut self) -> std::io::Result<()> {
        self.clear_region(RegionClear::All)
    }

    fn clear_region(&mut self, clear_type: RegionClear) -> std::io::Result<()> {
        let Some(rows) = self.rows else {
            return self.inner.clear_region(clear_type);
        };
        let Position { x, y } = self.cursor;
        let erased = self.erased.take();
        match clear_type {
            RegionClear::All => erase_rows(&mut self.inner, 0, rows)?,
            RegionClear::AfterCursor if x == 0 && erased.is_some_and(|from| from <= y) => {}
            RegionClear::AfterCursor => {
                queue!(self.inner, Clear(ClearType::UntilNewLine))?;
                erase_rows(&mut self.inner, y.saturating_add(1), rows)?;
            }
            RegionClear::BeforeCursor => {
                erase_rows(&mut self.inner, 0, y)?;
                // Erase in line, from its start to the cursor.
                queue!(self.inner, MoveTo(x, y), Print("\x1b[1K"))?;
            }
            RegionClear::CurrentLine => queue!(self.inner, Clear(ClearType::CurrentLine))?,
            RegionClear::UntilNewLine => queue!(self.inner, Clear(ClearType::UntilNewLine))?,
        }
        self.erased = match clear_type {
            RegionClear::All => Some(0),
            RegionClear::AfterCursor if x == 0 => Some(erased.map_or(y, |from| from.min(y))),
            _ => None,
        };
        queue!(self.inner, MoveTo(x, y))?;
        Write::flush(&mut self.inner)
    }

    fn size(&self) -> std::io::Result<Size> {
        self.inner.size()
    }

    fn window_size(&mut self) -> std::io::Result<WindowSize> {
        self.inner.window_size()
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Backend::flush(&mut self.inner)
    }
}

/// One row of styled text, each piece in its own style (reset before and after), links
/// wrapped in OSC 8 when `hyperlinks` is on.
fn write_row(
    out: &mut impl Write,
    row: &[Piece<Option<String>>],
    hyperlinks: bool,
) -> std::io::Result<()> {
    for (text, style, url) in row {
        apply(out, *style)?;
        match url.as_deref().filter(|_| hyperlinks) {
            // The url was checked to be printable ASCII (`wrap::link_targets`).
            Some(url) => queue!(
                out,
                Print(format!("\x1b]8;;{url}\x1b\\")),
                Print(text),
                Print("\x1b]8;;\x1b\\")
            )?,
            None => queue!(out, Print(text))?,
        }
        queue!(out, SetAttribute(Attribute::Reset), ResetColor)?;
    }
    Ok(())
}

/// Sets `style` on the terminal (colours and attributes; reset first by the caller).
pub(crate) fn apply(out: &mut impl Write, style: Style) -> std::io::Result<()> {
    if let Some(fg) = style.fg.filter(|c| *c != Color::Reset) {
        queue!(out, SetForegroundColor(fg.into()))?;
    }
    if let Some(bg) = style.bg.filter(|c| *c != Color::Reset) {
        queue!(out, SetBackgroundColor(bg.into()))?;
    }
    let modifiers = style.add_modifier - style.sub_modifier;
    for (modifier, attribute) in [
        (Modifier::BOLD, Attribute::Bold),
        (Modifier::DIM, Attribute::Dim),
        (Modifier::ITALIC, Attribute::Italic),
        (Modifier::UNDERLINED, Attribute::Underlined),
        (Modifier::REVERSED, Attribute::Reverse),
        (Modifier::CROSSED_OUT, Attribute::CrossedOut),
    ] {
        if modifiers.contains(modifier) {
            queue!(out, SetAttribute(attribute))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::text::Span;

    #[test]
    fn history_scrolls_the_screen_and_moves_the_live_area_down() {
        let mut screen = InlineScreen::new(20, 5, 1, true);
        let mut out = Vec::new();
        let lines: Vec<Line<'static>> = (0..3).map(|i| Line::from(format!("line {i}"))).collect();
        screen.write_history(&mut out, &lines).unwrap();
        assert_eq!(screen.top, 4);
        screen.make_room(&mut out, 3).unwrap();
        assert_eq!(
            screen.top, 2,
            "two line feeds made room for a 3-row live area"
        );
        assert_eq!(screen.area(3), Rect::new(0, 2, 20, 3));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("line 2"), "{text}");
        assert_eq!(text.matches('\n').count(), 2, "{text:?}");
    }

    /// Erase-in-display sequences: below the cursor, above it, all of it.
    fn erases_display(bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        ["\x1b[J", "\x1b[0J", "\x1b[1J", "\x1b[2J", "\x1b[3J"]
            .iter()
            .any(|seq| text.contains(seq))
    }

    /// A writer whose bytes the test reads while the backend owns it.
    #[derive(Clone, Default)]
    struct Shared(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_live_area_is_erased_line_by_line_never_as_a_screen() {
        // A live area at the top row taking the whole screen, then shrunk: ratatui clears it
        // from its first row down, which must not be an erase of the display (tmux keeps an
        // erased screen in its scrollback, issue 41).
        let written = Shared::default();
        let mut terminal = ratatui::Terminal::with_options(
            LiveBackend::new(written.clone(), Some(6)),
            ratatui::TerminalOptions {
                viewport: ratatui::Viewport::Fixed(Rect::new(0, 0, 10, 6)),
            },
        )
        .unwrap();
        terminal.resize(Rect::new(0, 0, 10, 2)).unwrap();
        let bytes = written.0.take();
        assert!(
            !erases_display(&bytes),
            "{:?}",
            String::from_utf8_lossy(&bytes)
        );
        let text = String::from_utf8_lossy(&bytes);
        // Each row once: the first from the cursor (at its start), the others whole.
        assert!(text.starts_with("\x1b[1;1H\x1b[K"), "{text:?}");
        for row in 2..=6 {
            let erase = format!("\x1b[{row};1H\x1b[2K");
            assert_eq!(text.matches(&erase).count(), 1, "row {row}: {text:?}");
        }
        // Leaving the screen erases the same way.
        let mut out = Vec::new();
        let mut screen = InlineScreen::new(10, 6, 0, false);
        screen.finish(&mut out).unwrap();
        assert!(!erases_display(&out), "{:?}", String::from_utf8_lossy(&out));
        assert!(String::from_utf8_lossy(&out).contains("\x1b[6;1H\x1b[2K"));
        // On the alternate screen the backend is crossterm's as it is.
        let alt = Shared::default();
        LiveBackend::new(alt.clone(), None)
            .clear_region(RegionClear::All)
            .unwrap();
        assert!(erases_display(&alt.0.borrow()));
    }

    #[test]
    fn links_become_hyperlinks_only_where_supported() {
        let link = Line::from(vec![
            Span::styled(
                "the docs",
                Style::default()
                    .fg(Color::Blue)
                    .add_modifier(Modifier::UNDERLINED),
            ),
            Span::raw(" (https://example.com/docs)"),
        ]);
        let mut on = Vec::new();
        InlineScreen::new(80, 10, 0, true)
            .write_history(&mut on, std::slice::from_ref(&link))
            .unwrap();
        let on = String::from_utf8_lossy(&on);
        assert!(
            on.contains("\x1b]8;;https://example.com/docs\x1b\\the docs\x1b]8;;\x1b\\"),
            "{on:?}"
        );
        let mut off = Vec::new();
        InlineScreen::new(80, 10, 0, false)
            .write_history(&mut off, &[link])
            .unwrap();
        let off = String::from_utf8_lossy(&off);
        assert!(!off.contains("\x1b]8;;"), "{off:?}");
        assert!(off.contains("(https://example.com/docs)"), "{off:?}");
        assert!(!hyperlinks_supported(Some("1"), Some("xterm")));
        assert!(!hyperlinks_supported(None, Some("dumb")));
        assert!(hyperlinks_supported(None, Some("xterm-256color")));
        assert!(hyperlinks_supported(Some(""), Some("xterm-256color")));
    }
}
