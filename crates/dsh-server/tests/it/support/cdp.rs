//! A minimal Chrome DevTools Protocol client over `--remote-debugging-pipe` (fd 3: commands
//! in, fd 4: replies out, each message JSON ended by a NUL byte): enough to load a page,
//! evaluate expressions, wait for conditions and take screenshots in headless Chromium.

#![allow(clippy::unwrap_used, dead_code)] // test helpers outside #[test] fns may unwrap

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// `chromium` (or another Chrome) on PATH.
pub fn find_chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

pub struct Browser {
    child: std::process::Child,
    commands: std::io::PipeWriter,
    replies: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium (see [`Browser::start`]), opens the sign-in address `url` (a launch code
    /// the server issued) and waits until the page is ready.
    pub fn signed_in(binary: &Path, profile: &Path, url: &str) -> Browser {
        let mut browser = Browser::start(binary, profile);
        browser.open(url);
        browser.wait_for("document.body.dataset.ready", "the page", 20);
        browser
    }

    /// Shows session `id` (the page's `#/s/<id>` route).
    pub fn show_session(&mut self, id: &str) {
        self.eval(&format!("location.hash = '#/s/{id}'; true"));
    }

    /// Starts headless Chromium with a private profile in `profile`.
    pub fn start(binary: &Path, profile: &Path) -> Browser {
        let (command_read, commands) = std::io::pipe().unwrap();
        let (replies_read, reply_write) = std::io::pipe().unwrap();
        let (cr, rw) = (command_read.as_raw_fd(), reply_write.as_raw_fd());
        let mut command = std::process::Command::new(binary);
        command
            .args([
                "--headless=new",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1280,860",
                "--disable-dev-shm-usage",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: only async-signal-safe fcntl and dup2 calls between fork and exec.
        // The pipe ends are first copied above fd 10: when a pipe end already is fd 3 or 4 (other
        // tests of this binary open and close fds in parallel), `dup2(fd, fd)` would keep its
        // close-on-exec flag, or the second `dup2` would overwrite the first end, and Chromium
        // would start without its pipe.
        unsafe {
            command.pre_exec(move || {
                let high_cr = libc::fcntl(cr, libc::F_DUPFD_CLOEXEC, 10);
                let high_rw = libc::fcntl(rw, libc::F_DUPFD_CLOEXEC, 10);
                if high_cr < 0
                    || high_rw < 0
                    || libc::dup2(high_cr, 3) < 0
                    || libc::dup2(high_rw, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        drop(command_read);
        drop(reply_write);
        let (sender, replies) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(replies_read);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        message.pop();
                        if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                            if sender.send(value).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        });
        Browser {
            child,
            commands,
            replies,
            next_id: 0,
            session: None,
        }
    }

    /// Sends a command (to the attached page when there is one) and waits for its reply.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let reply = self
                .replies
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no reply to {method}"));
            if std::env::var_os("DSH_CDP_DEBUG").is_some() {
                eprintln!(
                    "cdp <- {}",
                    reply.to_string().chars().take(300).collect::<String>()
                );
            }
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page and attaches to it.
    pub fn open(&mut self, url: &str) {
        self.session = None;
        let target = self.call("Target.createTarget", json!({"url": url}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is truthy; panics with `what` after `seconds`.
    pub fn wait_for(&mut self, expression: &str, what: &str, seconds: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let value = self.eval(&format!(
                "(() => {{ try {{ return {expression}; }} catch {{ return null; }} }})()"
            ));
            let truthy = !matches!(value, Value::Null | Value::Bool(false))
                && value != json!("")
                && value != json!(0);
            if truthy {
                return value;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body.innerText");
                panic!("timed out waiting for {what}; page text:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes a PNG of the page to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        std::fs::write(path, decode_base64(shot["data"].as_str().unwrap())).unwrap();
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            _ => 63,
        }
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        for (k, c) in group.iter().enumerate() {
            n |= value(*c) << (18 - 6 * k);
        }
        out.push((n >> 16) as u8);
        if group.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if group.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}
