//! The interactive UI in a pseudo-terminal, shared by the pty tests: the real `dsh` binary, its
//! output fed to a terminal emulator with scrollback that also answers the cursor-position query
//! as a terminal does (the inline mode asks where the cursor is at start, docs/tui.md "Modes").

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};

pub const COLS: u16 = 100;
pub const ROWS: u16 = 30;
/// Where a terminal answers "where is the cursor" (`ESC [ 6 n`).
const CURSOR_QUERY: &[u8] = b"\x1b[6n";

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
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
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
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 5000)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let screen = Arc::clone(&screen);
            let raw = Arc::clone(&raw);
            let writer = Arc::clone(&writer);
            move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut chunk = &buf[..n];
                    raw.lock().unwrap().extend_from_slice(chunk);
                    // Answer cursor queries with the emulator's cursor at that point.
                    while let Some(at) = chunk.windows(4).position(|w| w == CURSOR_QUERY) {
                        let mut parser = screen.lock().unwrap();
                        parser.process(&chunk[..at]);
                        let (row, col) = parser.screen().cursor_position();
                        let answer = format!("\x1b[{};{}R", row + 1, col + 1);
                        let mut w = writer.lock().unwrap();
                        let _ = w.write_all(answer.as_bytes());
                        let _ = w.flush();
                        chunk = &chunk[at + CURSOR_QUERY.len()..];
                    }
                    screen.lock().unwrap().process(chunk);
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
        self.screen.lock().unwrap().set_size(rows, cols);
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
        parser.set_scrollback(usize::MAX);
        let total = parser.screen().scrollback();
        // vt100 0.15 cannot show a scrollback offset past one screen (it overflows).
        assert!(
            total <= usize::from(ROWS),
            "{total} rows of scrollback: make the test shorter"
        );
        let mut history = Vec::new();
        for offset in (1..=total).rev() {
            parser.set_scrollback(offset);
            let top = parser.screen().rows(0, COLS).next().unwrap_or_default();
            history.push(top.trim_end().to_string());
        }
        parser.set_scrollback(0);
        let screen = parser
            .screen()
            .rows(0, COLS)
            .map(|r| r.trim_end().to_string())
            .collect();
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
