//! Listing a large session history (docs/PERFORMANCE.md, "Session listing"): the bench makes a
//! dsh home of `sessions` sessions spread over `dirs` working directories, then measures
//! - `find` walking the same session folders (the floor: what any listing must at least do),
//! - `dsh sessions list --all` warm (the session catalog is up to date) and cold (no catalog:
//!   the first listing reads every log and builds it),
//! - the first page of `GET /api/sessions?limit=50` of a running `dsh web`, over loopback with a
//!   signed-in cookie, on a fresh connection per request, and the server's resident set before
//!   its first listing and after those pages and one `GET /api/sessions` without `limit`,
//! - `dsh sessions show <id>` of one session (what resuming by id does first: find its log), in
//!   this home and in a home holding only that session (docs/sessions.md, "Finding a session"),
//! - cold history (docs/PERFORMANCE.md, "History at scale, cold"): the first `dsh sessions
//!   search WORD` and the first `sessions list --all` after `catalog.db` is removed, against
//!   `grep -rl WORD` over the same logs and against reading every log (`cat` to /dev/null).
//!
//! The logs are written directly (header, turns with usage, a title) without the catalog, as
//! logs of an older dsh or of another machine would arrive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dsh_llm::{ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::{
    session_path, AssistantMessage, Envelope, Event, SessionHeader, SessionTitle, StepRef, TurnEnd,
    TurnEndReason, TurnStart,
};
use serde_json::{json, Value};

use crate::stats::median;

/// The JSONL text of one session with `turns` turns, times from `t0`.
fn session_text(id: &str, cwd: &str, t0: u64, turns: u64) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(4096);
    SessionHeader::new(id, cwd, t0).encode_line(&mut out)?;
    let mut seq = 0;
    let mut push = |event: Event, out: &mut Vec<u8>| -> anyhow::Result<()> {
        let mut env = Envelope::new(event);
        env.seq = seq;
        env.time = Some(t0 + seq * 10);
        seq += 1;
        env.encode_line(out)?;
        Ok(())
    };
    for turn in 1..=turns {
        push(Event::TurnStart(TurnStart { turn }), &mut out)?;
        push(Event::StepStart(StepRef { turn, step: 1 }), &mut out)?;
        push(
            Event::UserMessage(Message::user_text(
                format!("u{turn}"),
                format!("please look at module {turn} of {cwd} and tell me what it does"),
            )),
            &mut out,
        )?;
        let message = Message {
            id: format!("a{turn}"),
            role: Role::Assistant,
            content: vec![ContentBlock::text(
                "The module parses the configuration, checks each key and reports the file and \
                 line of every mistake it finds, then hands the result to the runtime.",
            )],
            source: MessageSource::Model {
                provider: "deepseek".into(),
                model: "deepseek-v4-flash".into(),
                extra: Default::default(),
            },
        };
        let usage = Usage {
            input_tokens: 1200 * turn,
            output_tokens: 150,
            cache_read_tokens: 800,
            ..Usage::default()
        };
        push(
            Event::AssistantMessage(AssistantMessage {
                turn,
                step: 1,
                message,
                usage: Some(usage),
                interrupted: false,
            }),
            &mut out,
        )?;
        if turn == 1 {
            push(
                Event::SessionTitle(SessionTitle {
                    title: format!("Explain module {turn} ({id})"),
                    message_seqs: Vec::new(),
                    source: None,
                }),
                &mut out,
            )?;
        }
        push(Event::StepEnd(StepRef { turn, step: 1 }), &mut out)?;
        push(
            Event::TurnEnd(TurnEnd {
                turn,
                reason: TurnEndReason::Completed,
            }),
            &mut out,
        )?;
    }
    Ok(out)
}

/// Writes the sessions; returns the bytes written.
fn make_home(home: &Path, sessions: usize, dirs: usize) -> anyhow::Result<u64> {
    let mut bytes = 0;
    let t0 = 1_780_000_000_000u64;
    for k in 0..sessions {
        let cwd = format!("/home/bench/project-{:02}", k % dirs.max(1));
        let id = format!("{:08x}-bench-{k:06}", k.wrapping_mul(2_654_435_761) as u32);
        let text = session_text(&id, &cwd, t0 + k as u64 * 1000, 1 + (k as u64 % 4))?;
        let path = session_path(home, &cwd, &id);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, &text)?;
        bytes += text.len() as u64;
    }
    Ok(bytes)
}

fn run_quiet(command: &mut Command) -> anyhow::Result<f64> {
    let start = Instant::now();
    let output = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(ms)
}

fn timed_runs(runs: usize, mut once: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<Value> {
    once()?; // warm-up
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        times.push(once()?);
    }
    let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(json!({"median_ms": median(&mut times), "min_ms": min, "runs": runs}))
}

/// `dsh-bench sessions-list`: see the module docs.
pub(crate) fn sessions_list(
    dsh: &Path,
    sessions: usize,
    dirs: usize,
    runs: usize,
    home: Option<&Path>,
) -> anyhow::Result<Value> {
    // The program runs in another directory: a relative path must not change meaning.
    let dsh = &std::fs::canonicalize(dsh).with_context(|| format!("{}", dsh.display()))?;
    let scratch = tempfile::tempdir()?;
    let home: PathBuf = home.map_or_else(|| scratch.path().join("dsh-home"), Path::to_path_buf);
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work)?;
    let made = Instant::now();
    let bytes = make_home(&home, sessions, dirs)?;
    let made_ms = made.elapsed().as_secs_f64() * 1000.0;
    let root = home.join("sessions");
    let dsh_list = || {
        let mut command = Command::new(dsh);
        command
            .args(["sessions", "list", "--all"])
            .current_dir(&work)
            .env("DSH_HOME", &home)
            .env("HOME", &work);
        command
    };
    let catalog = home.join(dsh_session::CATALOG_FILE);
    let cold_ms = run_quiet(&mut dsh_list())?;
    let find = timed_runs(runs, || {
        run_quiet(
            Command::new("find")
                .arg(&root)
                .args(["-name", "session.jsonl*"]),
        )
    })?;
    let warm = timed_runs(runs, || run_quiet(&mut dsh_list()))?;
    let mut colds = Vec::new();
    for _ in 0..runs.clamp(1, 3) {
        for suffix in ["", "-wal", "-shm"] {
            let mut name = catalog.as_os_str().to_owned();
            name.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(name));
        }
        colds.push(run_quiet(&mut dsh_list())?);
    }
    let cold = cold_history(dsh, &home, &work, runs)?;
    let web = web_first_page(dsh, &home, &work, runs)
        .unwrap_or_else(|err| json!({"error": format!("{err:#}")}));
    let (show, show_alone) = show_by_id(dsh, &home, &scratch.path().join("alone"), &work, runs)?;
    Ok(json!({
        "sessions": sessions,
        "dirs": dirs,
        "log_bytes": bytes,
        "make_ms": made_ms,
        "first_list_ms": cold_ms,
        "find": find,
        "list_warm": warm,
        "list_cold": {"median_ms": median(&mut colds), "runs": colds.len()},
        "web_first_page": web,
        "show_by_id": show,
        "show_by_id_alone": show_alone,
        "cold": cold,
    }))
}

/// A word of one working directory in fifty: most logs do not hold it, so `grep -rl` reads
/// them whole.
const COLD_WORD: &str = "project-07";

/// Removes the catalog and its journal files.
fn remove_catalog(home: &Path) {
    let catalog = home.join(dsh_session::CATALOG_FILE);
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = catalog.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

/// The first search and the first list after the catalog is removed, each against its floor
/// measured in the same run (the page cache warm for all of them).
fn cold_history(dsh: &Path, home: &Path, work: &Path, runs: usize) -> anyhow::Result<Value> {
    let root = home.join("sessions");
    let dsh_cmd = |args: &[&str]| {
        let mut command = Command::new(dsh);
        command
            .args(args)
            .current_dir(work)
            .env("DSH_HOME", home)
            .env("HOME", work);
        command
    };
    let grep = timed_runs(runs, || {
        // Exit status 1 means no match: the word must match.
        run_quiet(Command::new("grep").args(["-rl", COLD_WORD]).arg(&root))
    })?;
    let read = timed_runs(runs, || {
        run_quiet(Command::new("find").arg(&root).args([
            "-name",
            "session.jsonl*",
            "-exec",
            "cat",
            "{}",
            "+",
        ]))
    })?;
    let cold = |args: &[&str]| -> anyhow::Result<Value> {
        let mut times = Vec::new();
        for _ in 0..runs.clamp(1, 3) {
            remove_catalog(home);
            times.push(run_quiet(&mut dsh_cmd(args))?);
        }
        let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
        Ok(json!({"median_ms": median(&mut times), "min_ms": min, "runs": times.len()}))
    };
    let search = cold(&["sessions", "search", COLD_WORD])?;
    let list = cold(&["sessions", "list", "--all"])?;
    Ok(json!({
        "word": COLD_WORD,
        "grep_rl": grep,
        "read_logs": read,
        "first_search": search,
        "first_list": list,
    }))
}

/// `dsh sessions show <id>` of the last session made, timed in `home` and in `alone`, a home
/// that holds a copy of only that session.
fn show_by_id(
    dsh: &Path,
    home: &Path,
    alone: &Path,
    work: &Path,
    runs: usize,
) -> anyhow::Result<(Value, Value)> {
    let root = home.join("sessions");
    // The session folder met last in the walk's order: a walk of every folder would read all
    // of the others first.
    let mut last = None;
    for folder in std::fs::read_dir(&root)?.flatten() {
        for session in std::fs::read_dir(folder.path())?.flatten() {
            last = Some((folder.file_name(), session.file_name()));
        }
    }
    let (folder, id) = last.context("no session was made")?;
    let copy = alone.join("sessions").join(&folder).join(&id);
    std::fs::create_dir_all(&copy)?;
    std::fs::copy(
        root.join(&folder).join(&id).join("session.jsonl"),
        copy.join("session.jsonl"),
    )?;
    let show = |home: &Path| {
        let mut command = Command::new(dsh);
        command
            .args(["sessions", "show"])
            .arg(&id)
            .current_dir(work)
            .env("DSH_HOME", home)
            .env("HOME", work);
        command
    };
    let in_home = timed_runs(runs, || run_quiet(&mut show(home)))?;
    let in_alone = timed_runs(runs, || run_quiet(&mut show(alone)))?;
    Ok((in_home, in_alone))
}

/// Kills the web server when the measurement ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection; returns the whole response as text.
fn http(port: u16, path: &str, cookie: Option<&str>) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let cookie = cookie.map_or_else(String::new, |c| format!("Cookie: {c}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{cookie}Connection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text)
}

fn web_first_page(dsh: &Path, home: &Path, work: &Path, runs: usize) -> anyhow::Result<Value> {
    let mut server = Server(
        Command::new(dsh)
            .args(["web", "--port", "0", "--no-open"])
            .current_dir(work)
            .env("DSH_HOME", home)
            .env("HOME", work)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let stdout = server.0.stdout.take().context("no stdout")?;
    let mut url = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(rest) = line.split("serving ").nth(1) {
            url = Some(rest.trim().to_string());
            break;
        }
    }
    let url = url.context("dsh web printed no address")?;
    let after_scheme = url.trim_start_matches("http://");
    let (authority, path) = after_scheme
        .split_once('/')
        .context("address without a path")?;
    let port: u16 = authority
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .context("address without a port")?;
    let signed_in = http(port, &format!("/{path}"), None)?;
    let cookie = signed_in
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("set-cookie")
                .then(|| value.trim().split(';').next().unwrap_or("").to_string())
        })
        .context("the launch code gave no sign-in cookie")?;
    let pid = server.0.id();
    let rss_start = rss_kib(pid);
    let mut sessions_seen = 0;
    let result = timed_runs(runs.max(5), || {
        let start = Instant::now();
        let reply = http(port, "/api/sessions?limit=50", Some(&cookie))?;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        if !reply.starts_with("HTTP/1.1 200") {
            bail!("GET /api/sessions: {}", reply.lines().next().unwrap_or(""));
        }
        sessions_seen = reply.matches("\"turns\":").count();
        Ok(ms)
    })?;
    // The listing without `limit` (once the whole history, now its first page), then what the
    // server keeps resident.
    let all = http(port, "/api/sessions", Some(&cookie))?;
    let rss = rss_kib(pid);
    drop(server);
    let mut result = result;
    result["sessions_in_page"] = json!(sessions_seen);
    result["sessions_without_limit"] = json!(all.matches("\"turns\":").count());
    result["rss_start"] = json!(rss_start);
    result["rss_after"] = json!(rss);
    Ok(result)
}

/// The resident set of process `pid` (`VmRSS`) and its anonymous part (`RssAnon`: the heap,
/// not mapped files), in KiB; nulls where `/proc` does not tell.
fn rss_kib(pid: u32) -> Value {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
    };
    json!({"rss_kib": field("VmRSS:"), "anon_kib": field("RssAnon:")})
}
