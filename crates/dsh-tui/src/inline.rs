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

use std::io::Write;

use crossterm::cursor::MoveTo;
use crossterm::queue;
use crossterm::style::{
    Attribute, Print, ResetColor, SetAttribute, SetBackgroundColor, SetForegroundColor,
};
use crossterm::terminal::{Clear, ClearType};
use ratatui::layout::Rect;
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
        queue!(
            out,
            MoveTo(0, self.top),
            Clear(ClearType::FromCursorDown),
            crossterm::cursor::Show
        )?;
        out.flush()
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
