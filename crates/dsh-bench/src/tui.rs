//! TUI responsiveness on a long session (issue 20, acceptance): a session log of `cells`
//! transcript cells (user prompts, reasoning, Markdown replies with code, `edit` cards with a
//! diff, `bash` cards) is written with the real JSONL store, then:
//!
//! * **resume first frame**: the log read from disk (`SessionStore::load`), every event folded
//!   into a fresh [`Transcript`](dsh_tui::Transcript) and the first frame drawn, as `dsh
//!   resume` does once the session is open; median of `runs`;
//! * **streaming**: on top of that transcript a reply streams at `tokens_per_s` (one delta per
//!   token, Markdown with lists and code fences) while keys are typed into the composer every
//!   ~40 ms. An event loop shaped like dsh-tui's (`runtime.rs`: wait for an event, fold in
//!   everything else that is ready, draw once) runs in real time; each frame is timed from the
//!   wake-up to the end of the draw (events applied, layout, diff, escape codes written), and
//!   each key from its arrival to the end of the first frame that shows it.
//!
//! Frames are drawn through ratatui's crossterm backend into memory (a real terminal's bytes,
//! diffed against the previous frame, without a terminal's own latency), at `width` x `height`.
//! The renderer is dsh-tui's public one (`view::draw` with its `ViewCache`), so what is measured
//! is exactly what the TUI draws.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role, Usage};
use dsh_session::{
    open_store, AssistantChunk, AssistantMessage, CreateOptions, Envelope, Event, PriceTable,
    StoreKind, ToolCall, ToolResult, TurnEnd, TurnEndReason, TurnStart,
};
use dsh_tui::view::{draw, ViewCache};
use dsh_tui::{App, StatusInfo};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use serde_json::{json, Value};

use crate::stats::median;

/// One frame of a 60 Hz display: a key shown later than this waited more than one frame.
const DISPLAY_FRAME: Duration = Duration::from_micros(16_667);

/// A writer that keeps only the byte count (the terminal's side of the frame), shared with
/// the measurer.
#[derive(Default, Clone)]
struct Counted(Arc<AtomicU64>);

impl Counted {
    fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

type Screen = Terminal<CrosstermBackend<Counted>>;

/// A `width` x `height` terminal and the count of the bytes written to it.
fn screen(width: u16, height: u16) -> anyhow::Result<(Screen, Counted)> {
    let counted = Counted::default();
    let terminal = Terminal::with_options(
        CrosstermBackend::new(counted.clone()),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, width, height)),
        },
    )?;
    Ok((terminal, counted))
}

fn status() -> StatusInfo {
    StatusInfo {
        model: "deepseek-v4-flash".into(),
        effort: Some("high".into()),
        permission: "workspace-write".into(),
        context_window: 1_000_000,
        prices: PriceTable::default_deepseek(),
    }
}

fn model_message(id: String, content: Vec<ContentBlock>) -> Message {
    Message {
        id,
        role: Role::Assistant,
        content,
        source: MessageSource::Model {
            provider: "deepseek".into(),
            model: "deepseek-v4-flash".into(),
            extra: Default::default(),
        },
    }
}

/// A Markdown reply of `n`: a heading, prose with inline code, a list and a Rust block.
fn markdown_reply(n: usize) -> String {
    format!(
        "## Step {n}: what changed\n\nThe parser in `src/lib{n}.rs` now keeps **every** span; \
the old code dropped the last one when the input ended without a newline, which is why \
test `parse_{n}` failed.\n\n- kept the public API as it was\n- added a regression test\n\
- ran `cargo test` (all green)\n\n```rust\nfn parse_{n}(input: &str) -> Vec<Span> {{\n    \
let mut spans = Vec::new();\n    for (i, line) in input.lines().enumerate() {{\n        \
spans.push(Span::new(i, line.len()));\n    }}\n    spans\n}}\n```\n\nNext I will run the \
whole suite once more.\n"
    )
}

/// The events of one round (5 cells: prompt, reasoning, reply, `edit` card, `bash` card).
fn round(turn: u64) -> Vec<Event> {
    let old: String = (0..12).map(|i| format!("    let v{i} = {i};\n")).collect();
    let new = old
        .replace("let v5 = 5;", "let v5 = five();")
        .replace("v9 = 9", "v9 = nine()");
    let edit_call = format!("call_e{turn}");
    let bash_call = format!("call_b{turn}");
    let text_result = |id: String, call: &str, text: String| {
        Message::tool_result(id, call, vec![ContentBlock::text(text)], false)
    };
    vec![
        Event::TurnStart(TurnStart { turn }),
        Event::UserMessage(Message::user_text(
            format!("u{turn}"),
            format!("Please fix the failing test number {turn} and explain the change."),
        )),
        Event::AssistantMessage(AssistantMessage {
            turn,
            step: 1,
            message: model_message(
                format!("a{turn}"),
                vec![
                    ContentBlock::Reasoning {
                        text: "The test fails on input without a trailing newline; look at \
                               the loop that collects spans."
                            .into(),
                        signature: None,
                    },
                    ContentBlock::text(markdown_reply(turn as usize)),
                ],
            ),
            usage: Some(Usage {
                input_tokens: 2_000,
                output_tokens: 300,
                cache_read_tokens: 20_000,
                cache_write_tokens: 0,
                reasoning_tokens: 40,
            }),
            interrupted: false,
        }),
        Event::ToolCall(ToolCall {
            turn,
            step: 1,
            call_id: edit_call.clone(),
            name: "edit".into(),
            arguments: json!({"file_path": format!("src/lib{turn}.rs"), "old_string": "v5", "new_string": "five()"}).to_string(),
            presentation: None,
        }),
        Event::ToolResult(ToolResult {
            turn,
            step: 1,
            message: text_result(format!("r{turn}e"), &edit_call, "Edited 1 file.".into()),
            error: None,
            meta: Some(json!({
                "diffs": [{"path": format!("src/lib{turn}.rs"), "oldText": old, "newText": new}],
                "added": 2, "removed": 2, "created": false
            })),
            summary: None,
        }),
        Event::ToolCall(ToolCall {
            turn,
            step: 2,
            call_id: bash_call.clone(),
            name: "bash".into(),
            arguments: json!({"command": "cargo test -q", "description": "Run the tests"})
                .to_string(),
            presentation: None,
        }),
        Event::ToolResult(ToolResult {
            turn,
            step: 2,
            message: text_result(
                format!("r{turn}b"),
                &bash_call,
                "running 42 tests\n..........................................\ntest result: ok. 42 passed; 0 failed\n".into(),
            ),
            error: None,
            meta: Some(json!({"exitCode": 0, "timedOut": false})),
            summary: None,
        }),
        Event::TurnEnd(TurnEnd {
            turn,
            reason: TurnEndReason::Completed,
        }),
    ]
}

/// Writes a session of `rounds` rounds into a JSONL store under `home`; returns its id.
fn write_session(home: &std::path::Path, rounds: u64) -> anyhow::Result<String> {
    let store = open_store(StoreKind::Jsonl, home)?;
    let mut writer = store.create("/bench/tui", CreateOptions::default())?;
    for turn in 1..=rounds {
        for event in round(turn) {
            writer.append(event)?;
        }
    }
    writer.flush()?;
    Ok(writer.header().id.clone())
}

/// Percentile `p` (0-100) of `values` (sorted in place), nearest rank.
fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// A resumed session: the app after its first frame, its view cache, the log's last seq.
struct Resumed {
    app: App,
    cache: ViewCache,
    last_seq: u64,
}

/// Loads the session and draws its first frame; returns the milliseconds it took.
fn resume(
    home: &std::path::Path,
    id: &str,
    terminal: &mut Screen,
) -> anyhow::Result<(f64, Resumed)> {
    let started = Instant::now();
    let store = open_store(StoreKind::Jsonl, home)?;
    let log = store.load(id)?;
    let mut app = App::new(status());
    app.loading = false;
    for envelope in &log.events {
        app.transcript.apply(envelope);
    }
    let mut cache = ViewCache::default();
    terminal.draw(|f| draw(f, &mut app, &mut cache))?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let last_seq = log.events.last().map_or(0, |e| e.seq);
    Ok((
        ms,
        Resumed {
            app,
            cache,
            last_seq,
        },
    ))
}

/// What arrives during the streamed reply, in time order.
enum Input {
    Token(String),
    Key(char),
}

/// The streamed reply cut into ~4-byte tokens, one every `1 / tokens_per_s`, and a key every
/// ~40 ms (offset so keys fall at varying points of the frame cycle).
fn schedule(tokens: usize, tokens_per_s: f64) -> Vec<(Duration, Input)> {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < tokens * 4 {
        n += 1;
        text.push_str(&markdown_reply(10_000 + n));
    }
    let mut events = Vec::new();
    let mut start = 0;
    for k in 0..tokens {
        let mut end = (start + 4).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        events.push((
            Duration::from_secs_f64(k as f64 / tokens_per_s),
            Input::Token(text[start..end].to_string()),
        ));
        start = end;
    }
    let span = tokens as f64 / tokens_per_s;
    let typed = "fix the flaky test too ";
    let mut t = 0.013;
    let mut i = 0;
    while t < span {
        let c = typed.chars().nth(i % typed.len()).unwrap_or('x');
        events.push((Duration::from_secs_f64(t), Input::Key(c)));
        t += 0.040 + 0.0017 * (i % 7) as f64;
        i += 1;
    }
    events.sort_by_key(|(at, _)| *at);
    events
}

/// CPU time of the calling thread, in milliseconds (what a frame cost, without the time the
/// scheduler gave to other processes of a busy machine).
fn thread_cpu_ms() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as f64 * 1000.0 + now.tv_nsec as f64 / 1e6
}

struct StreamResult {
    frames: Vec<f64>,
    frames_cpu: Vec<f64>,
    keys: Vec<f64>,
    keys_late: usize,
    bytes: u64,
}

/// Streams the reply into `app` in real time, drawing as dsh-tui's loop does.
fn stream(
    app: &mut App,
    cache: &mut ViewCache,
    (terminal, counted): (&mut Screen, &Counted),
    events: Vec<(Duration, Input)>,
    first_seq: u64,
) -> anyhow::Result<StreamResult> {
    let mut seq = first_seq;
    let mut envelope = |event: Event| {
        seq += 1;
        let mut e = Envelope::new(event);
        e.seq = seq;
        e
    };
    let turn = 1_000_000;
    app.transcript
        .apply(&envelope(Event::TurnStart(TurnStart { turn })));
    app.transcript
        .apply(&envelope(Event::UserMessage(Message::user_text(
            "u-stream",
            "Now explain every change once more, with code.",
        ))));
    terminal.draw(|f| draw(f, app, cache))?;
    let bytes_before = counted.total();
    let mut result = StreamResult {
        frames: Vec::new(),
        frames_cpu: Vec::new(),
        keys: Vec::new(),
        keys_late: 0,
        bytes: 0,
    };
    let start = Instant::now();
    let mut events = events.into_iter().peekable();
    while let Some((due, _)) = events.peek() {
        let now = start.elapsed();
        if *due > now {
            std::thread::sleep(*due - now);
        }
        let woke = Instant::now();
        let cpu = thread_cpu_ms();
        let now = start.elapsed();
        let mut typed: Vec<Duration> = Vec::new();
        while let Some((due, input)) = events.next_if(|(due, _)| *due <= now) {
            match input {
                Input::Token(text) => {
                    app.transcript
                        .apply(&envelope(Event::AssistantChunk(AssistantChunk {
                            turn,
                            step: 1,
                            chunk: Chunk::TextDelta { index: 0, text },
                        })))
                }
                Input::Key(c) => {
                    let _ = app.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
                    typed.push(due);
                }
            }
        }
        terminal.draw(|f| draw(f, app, cache))?;
        let drawn = start.elapsed();
        result.frames.push(woke.elapsed().as_secs_f64() * 1000.0);
        result.frames_cpu.push(thread_cpu_ms() - cpu);
        for due in typed {
            let waited = drawn.saturating_sub(due);
            result.keys.push(waited.as_secs_f64() * 1000.0);
            if waited > DISPLAY_FRAME {
                result.keys_late += 1;
            }
        }
    }
    result.bytes = counted.total() - bytes_before;
    Ok(result)
}

/// The `tui` subcommand (see the module docs).
pub(crate) fn tui(
    cells: usize,
    tokens_per_s: f64,
    tokens: usize,
    runs: usize,
    (width, height): (u16, u16),
) -> anyhow::Result<Value> {
    let home = tempfile::tempdir()?;
    let rounds = cells.div_ceil(5) as u64;
    let id = write_session(home.path(), rounds)?;
    let mut resumes = Vec::new();
    let mut loads = Vec::new();
    let mut last = None;
    for _ in 0..runs.max(1) {
        // The floor: reading the same log, nothing shown.
        let started = Instant::now();
        let log = open_store(StoreKind::Jsonl, home.path())?.load(&id)?;
        loads.push(started.elapsed().as_secs_f64() * 1000.0);
        drop(log);
        let (mut terminal, counted) = screen(width, height)?;
        let (ms, resumed) = resume(home.path(), &id, &mut terminal)?;
        resumes.push(ms);
        last = Some((resumed, terminal, counted));
    }
    let (resumed, mut terminal, counted) = last.context("no resume ran")?;
    let Resumed {
        mut app,
        mut cache,
        last_seq,
    } = resumed;
    let shown_cells = app.transcript.cells.len();
    let result = stream(
        &mut app,
        &mut cache,
        (&mut terminal, &counted),
        schedule(tokens, tokens_per_s),
        last_seq,
    )?;
    let StreamResult {
        mut frames,
        mut frames_cpu,
        mut keys,
        keys_late,
        bytes,
    } = result;
    let frame_count = frames.len();
    let key_count = keys.len();
    let frame_mean = frames.iter().sum::<f64>() / frame_count.max(1) as f64;
    Ok(json!({
        "cells": shown_cells,
        "size": format!("{width}x{height}"),
        "tokens_per_s": tokens_per_s,
        "tokens": tokens,
        "resume_runs": resumes.len(),
        "resume_first_frame_ms": median(&mut resumes.clone()),
        "resume_first_frame_max_ms": resumes.iter().copied().fold(0.0, f64::max),
        "log_load_ms": median(&mut loads),
        "frames": frame_count,
        "frame_mean_ms": frame_mean,
        "frame_p50_ms": percentile(&mut frames, 50.0),
        "frame_p99_ms": percentile(&mut frames, 99.0),
        "frame_max_ms": percentile(&mut frames, 100.0),
        "frame_cpu_p50_ms": percentile(&mut frames_cpu, 50.0),
        "frame_cpu_p99_ms": percentile(&mut frames_cpu, 99.0),
        "terminal_bytes": bytes,
        "keys": key_count,
        "key_p50_ms": percentile(&mut keys, 50.0),
        "key_p99_ms": percentile(&mut keys, 99.0),
        "key_max_ms": percentile(&mut keys, 100.0),
        "keys_over_one_60hz_frame": keys_late,
    }))
}
