//! The interactive UI in a pseudo-terminal, shared by the pty tests: the real `dsh` binary, its
//! output fed to a terminal emulator with scrollback that also answers the cursor-position query
//! as a terminal does (the inline mode asks where the cursor is at start, docs/tui.md "Modes")
//! and honours autowrap off (DECAWM), which dsh sets and the emulator (vt100 0.15) ignores.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};

pub const COLS: u16 = 100;
pub const ROWS: u16 = 30;
/// Where a terminal answers "where is the cursor" (`ESC [ 6 n`).
const CURSOR_QUERY: &[u8] = b"\x1b[6n";
/// Erase in display: below the cursor (`ESC [ J`, `ESC [ 0 J`) and all of it (`ESC [ 2 J`).
const ERASE_BELOW: [&[u8]; 2] = [b"\x1b[J", b"\x1b[0J"];
const ERASE_ALL: &[u8] = b"\x1b[2J";

/// Feeds `chunk` to the emulator as a terminal takes it: cursor queries are answered with the
/// emulator's cursor at that point, and an erase of the whole screen (everything below the
/// top-left corner, or all of it) first moves the screen's used rows into the scrollback, as
/// tmux does (`scroll-on-clear`, on by default) and VTE for `ESC [ 2 J`: what the program
/// erases that way is in the scrollback (issue 41). A sequence split across two reads is taken
/// as plain text by this scan (vt100 still runs it), so the emulation can miss, never invent.
fn feed(
    parser: &mut vt100::Parser,
    margin: &mut Margin,
    mut chunk: &[u8],
    writer: &Mutex<Box<dyn Write + Send>>,
) {
    loop {
        let found = [CURSOR_QUERY, ERASE_BELOW[0], ERASE_BELOW[1], ERASE_ALL]
            .into_iter()
            .filter_map(|seq| {
                let at = chunk.windows(seq.len()).position(|w| w == seq)?;
                Some((at, seq))
            })
            .min_by_key(|(at, _)| *at);
        let Some((at, seq)) = found else {
            margin.process(parser, chunk);
            return;
        };
        margin.process(parser, &chunk[..at]);
        if seq == CURSOR_QUERY {
            let (row, col) = parser.screen().cursor_position();
            let answer = format!("\x1b[{};{}R", row + 1, col + 1);
            let mut w = writer.lock().unwrap();
            let _ = w.write_all(answer.as_bytes());
            let _ = w.flush();
        } else {
            let cursor = parser.screen().cursor_position();
            if seq == ERASE_ALL || cursor == (0, 0) {
                scroll_into_history(parser, cursor);
            }
            margin.process(parser, seq);
        }
        chunk = &chunk[at + seq.len()..];
    }
}

/// Moves the screen's rows down to its last used one into the scrollback (line feeds on the
/// last row), then puts the cursor back at `(row, col)`.
fn scroll_into_history(parser: &mut vt100::Parser, (row, col): (u16, u16)) {
    let (rows, cols) = parser.screen().size();
    let used = parser
        .screen()
        .rows(0, cols)
        .enumerate()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(i, _)| i + 1)
        .last()
        .unwrap_or(0);
    if used == 0 {
        return;
    }
    let mut bytes = format!("\x1b[0m\x1b[{rows};1H").into_bytes();
    bytes.extend(std::iter::repeat_n(b'\n', used));
    bytes.extend(format!("\x1b[{};{}H", row + 1, col + 1).into_bytes());
    parser.process(&bytes);
}

/// Autowrap (DECAWM) as a terminal does it, which vt100 0.15 lacks: `ESC [ ? 7 l` turns it off,
/// then a character that does not fit before the right margin overwrites the last column
/// instead of wrapping to the next row (and scrolling the screen on the last one); `ESC [ ? 7 h`
/// turns it on again. The bytes go through a scan of escape sequences and UTF-8 characters that
/// holds each printed character until it is whole, to move the cursor back to the last column
/// before vt100 sees a character that would wrap.
#[derive(Default)]
struct Margin {
    /// Autowrap is off.
    off: bool,
    scan: Scan,
    /// The character or control sequence being read.
    pending: Vec<u8>,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum Scan {
    #[default]
    Ground,
    /// After `ESC`.
    Escape,
    /// After `ESC [`.
    Csi,
    /// A string (OSC, DCS, ...) up to BEL or `ESC \`; `true` right after its `ESC`.
    Text(bool),
    /// A UTF-8 character of this many bytes.
    Char(usize),
}

impl Margin {
    fn process(&mut self, parser: &mut vt100::Parser, bytes: &[u8]) {
        for &byte in bytes {
            if let Scan::Char(len) = self.scan {
                if (0x80..0xc0).contains(&byte) {
                    self.pending.push(byte);
                    if self.pending.len() == len {
                        self.print(parser);
                    }
                    continue;
                }
                // Not a continuation: vt100 drops the broken character, so does the scan.
                parser.process(&std::mem::take(&mut self.pending));
                self.scan = Scan::Ground;
            }
            match self.scan {
                Scan::Ground => match byte {
                    0x1b => self.scan = Scan::Escape,
                    0x20..=0x7e => {
                        self.pending.push(byte);
                        self.print(parser);
                        continue;
                    }
                    0xc2..=0xf4 => {
                        self.pending.push(byte);
                        self.scan = Scan::Char(match byte {
                            0xc2..=0xdf => 2,
                            0xe0..=0xef => 3,
                            _ => 4,
                        });
                        continue;
                    }
                    _ => {}
                },
                Scan::Escape => {
                    self.scan = match byte {
                        b'[' => Scan::Csi,
                        b']' | b'P' | b'X' | b'^' | b'_' => Scan::Text(false),
                        0x20..=0x2f => Scan::Escape,
                        _ => Scan::Ground,
                    };
                    self.pending.clear();
                }
                Scan::Csi => match byte {
                    0x40..=0x7e => {
                        let params = String::from_utf8_lossy(&self.pending);
                        if let Some(modes) = params.strip_prefix('?') {
                            if modes.split(';').any(|m| m == "7") && matches!(byte, b'h' | b'l') {
                                self.off = byte == b'l';
                            }
                        }
                        self.pending.clear();
                        self.scan = Scan::Ground;
                    }
                    0x1b => self.scan = Scan::Escape,
                    _ => self.pending.push(byte),
                },
                Scan::Text(escaped) => {
                    self.scan = match byte {
                        0x07 => Scan::Ground,
                        0x1b => Scan::Text(true),
                        b'\\' if escaped => Scan::Ground,
                        _ => Scan::Text(false),
                    };
                }
                Scan::Char(_) => unreachable!("handled above"),
            }
            parser.process(&[byte]);
        }
    }

    /// Hands vt100 the whole character in `pending`, first moving the cursor back so that it
    /// ends in the last column when autowrap is off and it would not fit.
    fn print(&mut self, parser: &mut vt100::Parser) {
        let bytes = std::mem::take(&mut self.pending);
        self.scan = Scan::Ground;
        if self.off {
            let width = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.chars().next())
                .and_then(unicode_width::UnicodeWidthChar::width)
                .map_or(0, |w| w as u16);
            let (row, col) = parser.screen().cursor_position();
            let cols = parser.screen().size().1;
            if width > 0 && width <= cols && col + width > cols {
                parser.process(format!("\x1b[{};{}H", row + 1, cols - width + 1).as_bytes());
            }
        }
        parser.process(&bytes);
    }
}

pub struct Tui {
    pub screen: Arc<Mutex<vt100::Parser>>,
    pub raw: Arc<Mutex<Vec<u8>>>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    master: Box<dyn MasterPty + Send>,
    pub child: Box<dyn portable_pty::Child + Send + Sync>,
    started: Instant,
}

impl Tui {
    /// `dsh` with no arguments in `cwd`, `home` as its `HOME` and `DSH_HOME`.
    pub fn start(base_url: &str, home: &Path, cwd: &Path) -> Tui {
        Tui::start_with(base_url, home, cwd, &[])
    }

    /// `dsh <args>`, as [`Tui::start`].
    pub fn start_with(base_url: &str, home: &Path, cwd: &Path, args: &[&str]) -> Tui {
        Tui::start_env(base_url, home, cwd, args, &[])
    }

    /// `dsh <args>` with `env` set over the usual environment (`TERM` included).
    pub fn start_env(
        base_url: &str,
        home: &Path,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Tui {
        Tui::start_sized(base_url, home, cwd, args, env, (ROWS, COLS))
    }

    /// `dsh <args>` as [`Tui::start_env`], in a pty of `(rows, cols)`.
    pub fn start_sized(
        base_url: &str,
        home: &Path,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        (rows, cols): (u16, u16),
    ) -> Tui {
        let pty = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_dsh"));
        cmd.args(args);
        cmd.env_clear();
        cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd.env("HOME", home);
        cmd.env("DSH_HOME", home);
        cmd.env("TERM", "xterm-256color");
        cmd.env("DEEPSEEK_BASE_URL", base_url);
        cmd.env("DEEPSEEK_API_KEY", "sk-tui-test");
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.cwd(cwd);
        let started = Instant::now();
        let child = pty.slave.spawn_command(cmd).unwrap();
        drop(pty.slave);
        let mut reader = pty.master.try_clone_reader().unwrap();
        let writer: Arc<Mutex<Box<dyn Write + Send>>> =
            Arc::new(Mutex::new(pty.master.take_writer().unwrap()));
        let screen = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 5000)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let screen = Arc::clone(&screen);
            let raw = Arc::clone(&raw);
            let writer = Arc::clone(&writer);
            move || {
                let mut margin = Margin::default();
                let mut buf = [0u8; 8192];
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    raw.lock().unwrap().extend_from_slice(chunk);
                    feed(&mut screen.lock().unwrap(), &mut margin, chunk, &writer);
                }
            }
        });
        Tui {
            screen,
            raw,
            writer,
            master: pty.master,
            child,
            started,
        }
    }

    pub fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Waits until `what` is on the screen; returns the time since start.
    pub fn wait_for(&self, what: &str) -> Duration {
        self.wait_until(what, |screen| screen.contains(what));
        self.started.elapsed()
    }

    pub fn wait_until(&self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if ok(&self.contents()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: never true; screen:\n{}",
                self.contents()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn type_text(&self, text: &str) {
        let mut w = self.writer.lock().unwrap();
        w.write_all(text.as_bytes()).unwrap();
        w.flush().unwrap();
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        self.resize_late(rows, cols, Duration::ZERO);
    }

    /// The emulator takes the new size at once and the program is told `lag` later, as over
    /// ssh: frames drawn for the old size meanwhile land on the new screen.
    pub fn resize_late(&self, rows: u16, cols: u16, lag: Duration) {
        self.screen.lock().unwrap().set_size(rows, cols);
        std::thread::sleep(lag);
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
    }

    /// The rows scrolled off the top of the screen, oldest first, then the screen's rows.
    pub fn scrollback_and_screen(&self) -> (Vec<String>, Vec<String>) {
        let mut parser = self.screen.lock().unwrap();
        let (rows, cols) = parser.screen().size();
        parser.set_scrollback(usize::MAX);
        let total = parser.screen().scrollback();
        parser.set_scrollback(0);
        // vt100 0.15 cannot show a scrollback offset past one screen (it overflows): grow the
        // screen by empty rows at its bottom for the read, so that the whole scrollback is one
        // view above the screen's rows, then shrink it back (which drops those rows again).
        let tall = u16::try_from(usize::from(rows) + total).expect("scrollback fits a u16");
        parser.set_size(tall, cols);
        parser.set_scrollback(total);
        let view: Vec<String> = parser
            .screen()
            .rows(0, cols)
            .map(|r| r.trim_end().to_string())
            .collect();
        parser.set_scrollback(0);
        parser.set_size(rows, cols);
        let history = view[..total].to_vec();
        let screen = view[total..total + usize::from(rows)].to_vec();
        (history, screen)
    }

    pub fn quit(&mut self) {
        self.type_text("\x04");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "dsh did not exit after Ctrl-D");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "{status:?}");
        // Let the reader thread take the last bytes.
        std::thread::sleep(Duration::from_millis(300));
    }
}
