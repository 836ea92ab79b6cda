//! Terminal hyperlinks (OSC 8) in the full-screen mode (`--alt-screen`, docs/tui.md, "Links").
//!
//! ratatui measures every cell's symbol to diff frames, so an escape sequence cannot live in a
//! cell. Instead, after each frame, the cells of the link labels on screen are written a second
//! time, the same text in the same style, bracketed by OSC 8: the screen shows exactly what
//! ratatui thinks it shows, and the terminal attaches the address to those cells. A label the
//! frame no longer shows there (scrolled, covered by a popup, changed) is written again without
//! OSC 8, so no cell keeps an address it no longer shows; after a resize ratatui redraws the
//! whole screen and every label is written again.

use std::io::Write;

use crossterm::cursor::MoveTo;
use crossterm::queue;
use crossterm::style::{Attribute, Print, ResetColor, SetAttribute};
use ratatui::buffer::Buffer;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use unicode_width::UnicodeWidthStr;

/// A link label on screen: its cells `x..x + width` of row `y`, its text and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkArea {
    /// First column.
    pub x: u16,
    /// Row.
    pub y: u16,
    /// Columns.
    pub width: u16,
    /// The label's text in those cells.
    pub text: String,
    /// The address (printable ASCII, checked by `wrap::link_targets`).
    pub url: String,
}

/// The labels written as hyperlinks on the last frame.
#[derive(Debug, Default)]
pub struct LinkOverlay {
    shown: Vec<LinkArea>,
    screen: Rect,
}

impl LinkOverlay {
    /// After a frame was drawn into `buffer`: writes to `out` what brackets the labels of
    /// `candidates` that the buffer really shows with OSC 8 (those not already shown so) and
    /// rewrites plainly those of the last frame that it no longer shows, then puts the cursor
    /// back at `cursor`. Writes nothing when nothing changed.
    pub fn after_frame(
        &mut self,
        buffer: &Buffer,
        candidates: &[LinkArea],
        cursor: Option<Position>,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        let visible: Vec<LinkArea> = candidates
            .iter()
            .filter(|area| shows_label(buffer, area))
            .cloned()
            .collect();
        if buffer.area != self.screen {
            // ratatui cleared and redrew the whole screen: nothing is linked any more.
            self.shown.clear();
            self.screen = buffer.area;
        }
        let stale: Vec<&LinkArea> = self
            .shown
            .iter()
            .filter(|area| !visible.contains(area))
            .collect();
        let fresh: Vec<&LinkArea> = visible
            .iter()
            .filter(|area| !self.shown.contains(area))
            .collect();
        if stale.is_empty() && fresh.is_empty() {
            return Ok(());
        }
        for area in stale {
            write_cells(out, buffer, area, None)?;
        }
        for area in fresh {
            write_cells(out, buffer, area, Some(&area.url))?;
        }
        if let Some(at) = cursor {
            queue!(out, MoveTo(at.x, at.y))?;
        }
        self.shown = visible;
        Ok(())
    }
}

/// True when the buffer shows `area`'s text in its cells, in a link label's style (blue,
/// underlined): not covered by a popup, not cut by the screen's edge.
fn shows_label(buffer: &Buffer, area: &LinkArea) -> bool {
    let end = u32::from(area.x) + u32::from(area.width);
    if area.width == 0
        || area.y >= buffer.area.bottom()
        || area.x < buffer.area.left()
        || end > u32::from(buffer.area.right())
    {
        return false;
    }
    let mut text = String::new();
    let mut x = area.x;
    while x < area.x + area.width {
        let Some(cell) = buffer.cell(Position::new(x, area.y)) else {
            return false;
        };
        let label = cell.fg == Color::Blue && cell.modifier.contains(Modifier::UNDERLINED);
        if !label {
            return false;
        }
        text.push_str(cell.symbol());
        x += u16::try_from(cell.symbol().width().max(1)).unwrap_or(1);
    }
    text == area.text
}

/// Writes the cells of `area` as the buffer has them, each in its style, inside an OSC 8
/// hyperlink to `url` when there is one.
fn write_cells(
    out: &mut impl Write,
    buffer: &Buffer,
    area: &LinkArea,
    url: Option<&str>,
) -> std::io::Result<()> {
    let right = (area.x.saturating_add(area.width)).min(buffer.area.right());
    if area.y >= buffer.area.bottom() || area.x >= right {
        return Ok(());
    }
    queue!(out, MoveTo(area.x, area.y))?;
    if let Some(url) = url {
        // The address is printable ASCII: it cannot end the sequence early.
        queue!(out, Print(format!("\x1b]8;;{url}\x1b\\")))?;
    }
    let mut style: Option<Style> = None;
    let mut x = area.x;
    while x < right {
        let Some(cell) = buffer.cell(Position::new(x, area.y)) else {
            break;
        };
        let symbol = cell.symbol();
        let width = symbol.width();
        if x + u16::try_from(width).unwrap_or(1) > right {
            // A wide character cut by the edge: the rest of the area stays as it is.
            break;
        }
        let cell_style = cell.style();
        if style != Some(cell_style) {
            queue!(out, SetAttribute(Attribute::Reset), ResetColor)?;
            crate::inline::apply(out, cell_style)?;
            style = Some(cell_style);
        }
        // Buffer symbols hold no control characters (`wrap.rs` drops them); a blank stands in
        // should one ever get there.
        if symbol.chars().any(char::is_control) || width == 0 {
            queue!(out, Print(' '))?;
            x += 1;
        } else {
            queue!(out, Print(symbol))?;
            x += u16::try_from(width).unwrap_or(1);
        }
    }
    if url.is_some() {
        queue!(out, Print("\x1b]8;;\x1b\\"))?;
    }
    queue!(out, SetAttribute(Attribute::Reset), ResetColor)
}
