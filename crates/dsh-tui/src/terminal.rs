//! Entering and leaving the terminal's interactive mode. The terminal is restored on every
//! way out: normal exit and errors (the guard's `Drop`) and panics (a hook that restores
//! before the default hook prints).

use std::io::{stdout, Write};

use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};

/// Raw mode, alternate screen, bracketed paste and disambiguated keys while alive.
pub struct TerminalGuard {
    _private: (),
}

/// Puts the terminal back: leaves the alternate screen, pops the keyboard flags, disables
/// bracketed paste and raw mode, shows the cursor. Safe to call more than once; errors are
/// ignored because there is nothing better to do with them on the way out.
pub fn restore_terminal() {
    let mut out = stdout();
    let _ = execute!(
        out,
        PopKeyboardEnhancementFlags,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

impl TerminalGuard {
    /// Enters interactive mode and installs the panic hook. Keyboard enhancement (so that
    /// Shift-Enter is seen) is requested without querying support: terminals that lack it
    /// ignore the request, and a query would block start-up on a round trip.
    pub fn enter() -> std::io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        enable_raw_mode()?;
        let mut out = stdout();
        let entered = execute!(
            out,
            EnterAlternateScreen,
            EnableBracketedPaste,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        );
        if let Err(err) = entered {
            restore_terminal();
            return Err(err);
        }
        Ok(TerminalGuard { _private: () })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}
