//! Entering and leaving the terminal's interactive mode, inline (the normal screen, the
//! default) or on the alternate screen (`--alt-screen`, docs/tui.md, "Modes"). The terminal is
//! restored on every way out: normal exit and errors (the guard's `Drop`) and panics (a hook
//! that restores before the default hook prints).

use std::io::{stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, DisableLineWrap, EnableLineWrap, EnterAlternateScreen,
    LeaveAlternateScreen,
};

/// Raw mode, bracketed paste, disambiguated keys, no autowrap and, with `--alt-screen`, the
/// alternate screen while alive.
///
/// Autowrap (DECAWM) is off because every row is placed and wrapped by dsh itself: a frame drawn
/// for the size before a resize can reach the terminal after it shrank (bytes in flight, or
/// drawn before the program saw `SIGWINCH`; over ssh for a whole round trip). With autowrap on,
/// a row wider than the new width wraps, and on the last row that scrolls the screen, which
/// the inline mode's bookkeeping of where its live area is (`crate::inline`) never learns of:
/// rows of the live area (a streaming reply's first line) then landed in the scrollback as if
/// history. With it off, such a row overwrites the last column until the next frame redraws.
pub struct TerminalGuard {
    /// The cursor's row when the UI started (where the inline mode's live area begins), if
    /// the terminal answered the query.
    pub cursor_row: Option<u16>,
}

/// Whether the alternate screen was entered (so that only then it is left: leaving it when
/// it was never entered restores a stale saved cursor on some terminals).
static ON_ALT_SCREEN: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back: leaves the alternate screen if it was entered, pops the keyboard
/// flags, disables bracketed paste and raw mode, shows the cursor. Safe to call more than
/// once; errors are ignored because there is nothing better to do with them on the way out.
pub fn restore_terminal() {
    let mut out = stdout();
    let _ = execute!(
        out,
        PopKeyboardEnhancementFlags,
        DisableBracketedPaste,
        crossterm::event::DisableFocusChange,
        EnableLineWrap
    );
    if ON_ALT_SCREEN.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, LeaveAlternateScreen);
    }
    let _ = execute!(out, crossterm::cursor::Show);
    let _ = disable_raw_mode();
    let _ = out.flush();
}

/// Hands the terminal to another program (`/memory`'s editor): as [`restore_terminal`], and
/// returns whether the alternate screen was on, for [`resume`].
pub fn suspend() -> bool {
    let alt = ON_ALT_SCREEN.load(Ordering::SeqCst);
    restore_terminal();
    alt
}

/// Takes the terminal back after [`suspend`]: raw mode, the alternate screen when `alt`,
/// bracketed paste, focus reports, disambiguated keys and no autowrap, as
/// [`TerminalGuard::enter`] sets them.
pub fn resume(alt: bool) -> std::io::Result<()> {
    enable_raw_mode()?;
    let mut out = stdout();
    if alt {
        ON_ALT_SCREEN.store(true, Ordering::SeqCst);
        execute!(out, EnterAlternateScreen)?;
    }
    execute!(
        out,
        EnableBracketedPaste,
        crossterm::event::EnableFocusChange,
        PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES),
        DisableLineWrap
    )
}

impl TerminalGuard {
    /// Enters interactive mode (on the alternate screen when `alt_screen`) and installs the
    /// panic hook. Keyboard enhancement (so that Shift-Enter is seen) is requested without
    /// querying support: terminals that lack it ignore the request, and a query would block
    /// start-up on a round trip. The inline mode asks for the cursor row instead (one round
    /// trip, given up after crossterm's timeout when a terminal does not answer).
    pub fn enter(alt_screen: bool) -> std::io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        enable_raw_mode()?;
        let mut out = stdout();
        let cursor_row = if alt_screen {
            ON_ALT_SCREEN.store(true, Ordering::SeqCst);
            if let Err(err) = execute!(out, EnterAlternateScreen) {
                restore_terminal();
                return Err(err);
            }
            None
        } else {
            crossterm::cursor::position().ok().map(|(_, row)| row)
        };
        let entered = execute!(
            out,
            EnableBracketedPaste,
            // Focus reports: notifications go out only while the terminal is not focused.
            crossterm::event::EnableFocusChange,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES),
            DisableLineWrap
        );
        if let Err(err) = entered {
            restore_terminal();
            return Err(err);
        }
        Ok(TerminalGuard { cursor_row })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}
