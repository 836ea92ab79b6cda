//! Per-step harness overhead: the time from the last byte of a reply at the fake provider to
//! the first byte of the next request, minus the tool's own run time, at step 1 of a fresh
//! session and at step ~1,000 of a session whose history is near the context window; against
//! the floor of serialising the same request body with `serde_json` and writing it to a
//! loopback socket (a new connection per run, as the floor was first defined; the same on an
//! open connection is reported beside it). Step 1 is also measured with the loop on a runtime
//! worker instead of the `block_on` thread (docs/PERFORMANCE.md, "Step 1: fixed costs").

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dsh_agent::{
    Agent, AgentOptions, AgentParts, Extension, ExtensionSet, ToolCallInfo, ToolFuture,
};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    LockExt, RetryPolicy,
};
use dsh_session::{open_store, StoreKind, TurnEndReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::{json, Value};

use crate::stats::median;

/// Context window of the measured session (DeepSeek V4's).
const WINDOW: u64 = 1_000_000;

/// Runs of each floor, whose median is the floor. At step 1 the floor is a tenth of a
/// millisecond and moved by a third from one median of 9 to the next, which moved the ratio
/// as much as any change of dsh's (docs/PERFORMANCE.md, "Step 1, point by point").
const FLOOR_RUNS: usize = 31;

/// Records how long each tool body ran, per step.
#[derive(Default)]
struct ToolClock {
    spent: Mutex<Vec<(u64, Duration)>>,
}

struct ToolClockExtension(Arc<ToolClock>);

impl Extension for ToolClockExtension {
    fn name(&self) -> &str {
        "bench-tool-clock"
    }

    fn tool_execute(&self, call: &ToolCallInfo, next: ToolFuture) -> ToolFuture {
        let clock = Arc::clone(&self.0);
        let step = call.step;
        Box::pin(async move {
            let start = Instant::now();
            let outcome = next.await;
            let spent = start.elapsed();
            clock.spent.lock_or_recover().push((step, spent));
            outcome
        })
    }
}

impl ToolClock {
    fn take(&self) -> Vec<(u64, Duration)> {
        std::mem::take(&mut *self.spent.lock_or_recover())
    }
}

/// An in-process model that asks for `read` of the big file at every step, `steps` times,
/// then answers with text. Used only to build the long history quickly.
struct ReadLoop {
    steps: usize,
    calls: Mutex<usize>,
}

impl Adapter for ReadLoop {
    fn stream(&self, _request: GenerateRequest) -> ChunkStream {
        let mut calls = self.calls.lock_or_recover();
        *calls += 1;
        let chunks = if *calls <= self.steps {
            vec![
                Chunk::TextDelta {
                    index: 0,
                    text: format!("Step {calls}: reading again."),
                },
                Chunk::ToolCallDelta {
                    index: 1,
                    id: format!("call_b{calls}"),
                    name: Some("read".into()),
                    arguments_delta: "{\"file_path\": \"big.txt\"}".into(),
                },
                Chunk::Finish {
                    reason: FinishReason::ToolCalls,
                },
            ]
        } else {
            vec![
                Chunk::TextDelta {
                    index: 0,
                    text: "done".into(),
                },
                Chunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]
        };
        Box::pin(futures::stream::iter(chunks))
    }
}

struct Bench {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    clock: Arc<ToolClock>,
}

/// A temp dir under `root` (the system temp dir when `None`).
fn temp_in(root: Option<&Path>) -> anyhow::Result<tempfile::TempDir> {
    Ok(match root {
        Some(root) => tempfile::tempdir_in(root)?,
        None => tempfile::tempdir()?,
    })
}

/// Copies the tree at `from` into `to` (files and directories only).
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

impl Bench {
    fn new(home_root: Option<&Path>) -> anyhow::Result<Bench> {
        let cwd = tempfile::tempdir()?;
        // ~3.6 KB per step (read output and call): 1,000 steps put the history at ~90% of a
        // 1M-token window at 4 bytes per token.
        let line = "the quick brown fox jumps over the lazy dog, again and again and again\n";
        std::fs::write(cwd.path().join("big.txt"), line.repeat(43))?;
        std::fs::write(cwd.path().join("small.txt"), "hello\n")?;
        Ok(Bench {
            home: temp_in(home_root)?,
            cwd,
            clock: Arc::new(ToolClock::default()),
        })
    }

    fn parts(&self, adapters: AdapterRegistry, route: &str) -> anyhow::Result<AgentParts> {
        let extensions = ExtensionSet::new();
        let guards = dsh_agent::register_builtin_extensions(
            &extensions,
            RetryPolicy::default(),
            Duration::from_secs(60),
        );
        // The extensions must outlive the agent; this process ends after the measurement.
        std::mem::forget(guards);
        std::mem::forget(
            extensions.register(Arc::new(ToolClockExtension(Arc::clone(&self.clock)))),
        );
        let mut options =
            AgentOptions::new(CallConfig::new(route, "deepseek-v4-flash"), self.cwd.path());
        options.context_window = Some(WINDOW);
        // The point is a history near the window: compaction would shrink it.
        options.compaction.enabled = false;
        options.max_steps_per_turn = 5_000;
        Ok(AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context: ToolContext::new(
                self.cwd.path(),
                SpillDir::create(self.home.path().join("spill"))?,
            )?
            .with_permission(PermissionPreset::WorkspaceWrite),
            options,
        })
    }
}

/// The fake provider on a runtime of its own (one worker thread): the measured loop does not
/// share its threads with the provider's tasks, as it does not with a real provider, and as the
/// floor's listener has a thread of its own.
struct OwnProvider {
    provider: FakeProvider,
    runtime: Option<tokio::runtime::Runtime>,
}

impl OwnProvider {
    async fn start(replies: Vec<ScriptedReply>) -> anyhow::Result<OwnProvider> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-provider")
            .enable_all()
            .build()?;
        let provider = runtime
            .spawn(FakeProvider::start(replies))
            .await
            .context("provider start")??;
        Ok(OwnProvider {
            provider,
            runtime: Some(runtime),
        })
    }
}

impl std::ops::Deref for OwnProvider {
    type Target = FakeProvider;
    fn deref(&self) -> &FakeProvider {
        &self.provider
    }
}

impl Drop for OwnProvider {
    fn drop(&mut self) {
        // Dropping a runtime blocks; this one may be dropped on the bench's runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn http_adapters(provider: &FakeProvider) -> anyhow::Result<AdapterRegistry> {
    let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
        provider.base_url(),
        Some(dsh_deepseek::ApiKey::new("sk-bench")),
    ))?;
    let mut adapters = AdapterRegistry::new();
    adapters.register("deepseek", Arc::new(adapter))?;
    Ok(adapters)
}

fn read_reply(k: usize, file: &str) -> ScriptedReply {
    SseReply::new()
        .text(&format!("Reading {file} ({k})."))
        .tool_call(
            0,
            &format!("call_h{k}"),
            "read",
            &format!("{{\"file_path\": \"{file}\"}}"),
        )
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

fn final_reply() -> ScriptedReply {
    SseReply::new()
        .text("finished")
        .finish("stop", Some(WireUsage::default()))
        .into()
}

/// One gap: reply `i` ended, request `i + 1` began; the tool time of that step is removed.
struct Gap {
    overhead: Duration,
    to_first_byte: Duration,
    next_body: Vec<u8>,
}

fn gaps(provider: &FakeProvider, tool_times: &[(u64, Duration)]) -> anyhow::Result<Vec<Gap>> {
    let timings = provider.timings();
    let requests = provider.requests();
    let mut out = Vec::new();
    for i in 0..timings.len().saturating_sub(1) {
        let Some(done) = timings[i].reply_done else {
            bail!("reply {i} did not complete");
        };
        let tools = tool_times.get(i).map_or(Duration::ZERO, |(_, d)| *d);
        // To the last byte of the next request: the floor is timed to the same point (a
        // request's first byte leaves before its body is written).
        let gap = timings[i + 1].request_read.saturating_duration_since(done);
        let to_first_byte = timings[i + 1].first_byte.saturating_duration_since(done);
        out.push(Gap {
            overhead: gap.saturating_sub(tools),
            to_first_byte: to_first_byte.saturating_sub(tools),
            next_body: requests[i + 1].raw_body.clone(),
        });
    }
    Ok(out)
}

/// Reads one HTTP request from `socket` (head and `content-length` body) and returns when
/// its last byte arrived.
fn read_one_request(socket: &mut TcpStream) -> Option<Instant> {
    let mut buffer = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let mut wanted = None;
    loop {
        let n = socket.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if wanted.is_none() {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                wanted = Some(end + 4 + length);
            }
        }
        if wanted.is_some_and(|w| buffer.len() >= w) {
            return Some(Instant::now());
        }
    }
}

/// The floor: `serde_json` serialisation of the request body (from a parsed `Value`) plus
/// writing an HTTP head and the body to a loopback listener, until the listener has read the
/// last byte. Median of `runs`.
fn floor(body: &[u8], runs: usize) -> anyhow::Result<f64> {
    floor_on(body, runs, false)
}

/// The same floor on a connection that is already open (one connection for all `runs`, as a
/// client that keeps its connection alive sends its next request): serialisation and writing
/// only, no TCP set-up. Median of `runs`.
fn floor_open(body: &[u8], runs: usize) -> anyhow::Result<f64> {
    floor_on(body, runs, true)
}

/// [`floor`] with a new connection per run, or [`floor_open`] with one for all (`keep_open`).
fn floor_on(body: &[u8], runs: usize, keep_open: bool) -> anyhow::Result<f64> {
    let value: Value = serde_json::from_slice(body).context("request body is JSON")?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let (sender, receiver) = std::sync::mpsc::channel();
    let drain = std::thread::spawn(move || {
        let mut open = None;
        for _ in 0..runs {
            if open.is_none() || !keep_open {
                let Ok((socket, _)) = listener.accept() else {
                    return;
                };
                open = Some(socket);
            }
            let Some(socket) = open.as_mut() else { return };
            if sender.send(read_one_request(socket)).is_err() {
                return;
            }
        }
    });
    let connect = || -> anyhow::Result<TcpStream> {
        let socket = TcpStream::connect(address)?;
        socket.set_nodelay(true)?;
        Ok(socket)
    };
    let mut kept = if keep_open { Some(connect()?) } else { None };
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let bytes = serde_json::to_vec(&value)?;
        let mut fresh = None;
        let socket = match kept.as_mut() {
            Some(socket) => socket,
            None => fresh.insert(connect()?),
        };
        let head = format!(
            "POST /chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            bytes.len()
        );
        socket.write_all(head.as_bytes())?;
        socket.write_all(&bytes)?;
        let done = receiver
            .recv()
            .context("floor listener")?
            .context("floor listener read")?;
        times.push((done - start).as_secs_f64() * 1000.0);
        drop(fresh);
    }
    drop(kept);
    // The drain thread ends after `runs` requests.
    let _ = drain.join();
    Ok(median(&mut times))
}

fn summarise(label: &str, gaps: &[Gap], first_step: u64) -> anyhow::Result<Value> {
    let mut overheads: Vec<f64> = gaps
        .iter()
        .map(|g| g.overhead.as_secs_f64() * 1000.0)
        .collect();
    let body = &gaps.first().context("no gap measured")?.next_body;
    let floor_ms = floor(body, FLOOR_RUNS)?;
    let floor_open_ms = floor_open(body, FLOOR_RUNS)?;
    let overhead_ms = median(&mut overheads);
    let mut first_bytes: Vec<f64> = gaps
        .iter()
        .map(|g| g.to_first_byte.as_secs_f64() * 1000.0)
        .collect();
    Ok(json!({
        "label": label,
        "from_step": first_step,
        "samples": gaps.len(),
        "overhead_ms": overhead_ms,
        "to_first_byte_ms": median(&mut first_bytes),
        "floor_ms": floor_ms,
        "request_bytes": body.len(),
        "ratio": overhead_ms / floor_ms,
        "floor_open_ms": floor_open_ms,
        "ratio_to_open_floor": overhead_ms / floor_open_ms,
    }))
}

/// Waits (up to 2 s) until the provider has recorded the end of every reply. The client may
/// act on a reply as soon as its `[DONE]` arrived, before the provider's task has written the
/// body's terminator and noted the time; under load that task can lag behind the next request.
async fn replies_recorded(provider: &FakeProvider) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && provider.timings().iter().any(|t| t.reply_done.is_none()) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One fresh session of two tool steps: the gap after step 1 and the connections it opened.
async fn first_step_session(home_root: Option<&Path>) -> anyhow::Result<(Vec<Gap>, f64)> {
    let bench = Bench::new(home_root)?;
    let provider = OwnProvider::start(vec![
        read_reply(1, "small.txt"),
        read_reply(2, "small.txt"),
        final_reply(),
    ])
    .await?;
    let mut agent = {
        let store = open_store(StoreKind::Jsonl, bench.home.path())?;
        Agent::create(
            bench.parts(http_adapters(&provider)?, "deepseek")?,
            store.as_ref(),
        )?
    };
    agent.handle().followup("read small.txt twice")?;
    let outcomes = agent.run_until_idle().await?;
    check_completed(&outcomes)?;
    replies_recorded(&provider).await;
    let mut g = gaps(&provider, &bench.clock.take())?;
    g.truncate(1);
    Ok((g, provider.events().connections as f64))
}

/// Step 1 of fresh sessions (median over `sessions` sessions of the gap after step 1), and
/// steps `history_steps`.. of a session whose history holds `history_steps` steps of ~3.7 KB.
///
/// Session logs live under `home_root` (the system temp dir when `None`): on a disk, the fsyncs
/// of the flush policy are part of the overhead; on a tmpfs they cost nothing and what remains
/// is the harness's own work. The long history is built on `/dev/shm` when it exists (for
/// speed) and copied to `home_root` before the measured resume.
pub(crate) async fn step_overhead(
    history_steps: usize,
    sessions: usize,
    home_root: Option<&Path>,
) -> anyhow::Result<Value> {
    // Step 1: fresh sessions, two tool steps each; the gap after step 1 is measured.
    let mut first: Vec<Gap> = Vec::new();
    // TCP connections each session opened for its three requests (1 when the client keeps
    // its connection alive, as with a real provider; docs/PERFORMANCE.md, "Step 1: fixed
    // costs").
    let mut connections: Vec<f64> = Vec::new();
    // The same sessions with the loop on a runtime worker instead of the `block_on` thread
    // (where `dsh run` drives it): the loop and hyper's connection task then wake each other
    // without crossing threads (docs/PERFORMANCE.md, "Step 1: fixed costs").
    let mut first_on_worker: Vec<Gap> = Vec::new();
    for _ in 0..sessions {
        let (g, c) = first_step_session(home_root).await?;
        first.extend(g);
        connections.push(c);
        let root = home_root.map(Path::to_path_buf);
        let (g, _) = tokio::spawn(async move { first_step_session(root.as_deref()).await })
            .await
            .context("session task")??;
        first_on_worker.extend(g);
    }

    // Step ~1,000: build the history in process, then resume over HTTP.
    let shm = Path::new("/dev/shm");
    let build_root = if shm.is_dir() { Some(shm) } else { home_root };
    let builder = Bench::new(build_root)?;
    let bench = Bench::new(home_root)?;
    let build_start = Instant::now();
    let built = {
        let mut adapters = AdapterRegistry::new();
        adapters.register(
            "scripted",
            Arc::new(ReadLoop {
                steps: history_steps - 1,
                calls: Mutex::new(0),
            }),
        )?;
        let store = open_store(StoreKind::Jsonl, builder.home.path())?;
        let mut agent = Agent::create(builder.parts(adapters, "scripted")?, store.as_ref())?;
        let handle = agent.handle();
        handle.followup("read big.txt many times")?;
        check_completed(&agent.run_until_idle().await?)?;
        handle.location()
    };
    // Same cwd for the resumed session: the builder's files are the ones the log mentions.
    copy_tree(builder.home.path(), bench.home.path())?;
    let location = built.replace(
        &builder.home.path().display().to_string(),
        &bench.home.path().display().to_string(),
    );
    let build_time = build_start.elapsed();
    builder.clock.take();
    let measured_steps = 6;
    let mut replies: Vec<ScriptedReply> = (1..=measured_steps)
        .map(|k| read_reply(k, "big.txt"))
        .collect();
    replies.push(final_reply());
    let provider = OwnProvider::start(replies).await?;
    let store = open_store(StoreKind::Jsonl, bench.home.path())?;
    let mut agent = Agent::resume(
        bench.parts(http_adapters(&provider)?, "deepseek")?,
        store.as_ref(),
        &location,
    )?;
    agent.handle().followup("once more")?;
    check_completed(&agent.run_until_idle().await?)?;
    replies_recorded(&provider).await;
    // The resumed agent's tools ran under `bench`'s clock (the builder's is empty by now).
    let late = gaps(&provider, &bench.clock.take())?;
    let history_bytes = late.first().map_or(0, |g| g.next_body.len());

    let mut step_1 = summarise("step 1", &first, 1)?;
    step_1["connections_per_session_max"] = json!(connections.iter().cloned().fold(0.0, f64::max));
    step_1["connections_per_session_mean"] =
        json!(connections.iter().sum::<f64>() / connections.len().max(1) as f64);
    let step_n = summarise("near window", &late, history_steps as u64)?;
    let step_1_on_worker = summarise("step 1, loop on a runtime worker", &first_on_worker, 1)?;
    Ok(json!({
        "step_1": step_1,
        "step_n": step_n,
        "step_1_on_worker": step_1_on_worker,
        "history_steps": history_steps,
        "history_request_bytes": history_bytes,
        "estimated_tokens": history_bytes / 4,
        "window_tokens": WINDOW,
        "history_build_s": build_time.as_secs_f64(),
    }))
}

fn check_completed(outcomes: &[dsh_agent::TurnOutcome]) -> anyhow::Result<()> {
    match outcomes.last() {
        Some(outcome) if outcome.reason == TurnEndReason::Completed => Ok(()),
        other => bail!(
            "the scripted turn did not complete: {:?}",
            other.map(|o| &o.reason)
        ),
    }
}
