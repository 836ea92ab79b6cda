//! Measurements of whole processes: start-up time, time from spawn to the first request byte
//! at the fake provider, and peak RSS / CPU of a scripted tool-using task.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dsh_test_support::{FakeProvider, ResponsesReply, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

use crate::stats::median;

/// Which wire format the fake provider speaks to the program under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// DeepSeek chat completions (dsh).
    Chat,
    /// OpenAI Responses (Codex CLI).
    Responses,
}

impl Api {
    pub(crate) fn parse(text: &str) -> anyhow::Result<Api> {
        match text {
            "chat" => Ok(Api::Chat),
            "responses" => Ok(Api::Responses),
            other => bail!("unknown --api `{other}` (chat or responses)"),
        }
    }
}

/// How to launch the program under test. `{base}` in arguments, environment values and
/// templates is replaced by the fake provider's base URL, `{work}` by the work directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Launch {
    pub program: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `(template file, destination)`: written with substitutions before every run.
    pub templates: Vec<(PathBuf, PathBuf)>,
}

impl Launch {
    fn substitute(text: &str, base: &str, work: &Path) -> String {
        text.replace("{base}", base)
            .replace("{work}", &work.display().to_string())
    }

    fn command(&self, base: &str, work: &Path) -> anyhow::Result<Command> {
        for (template, destination) in &self.templates {
            let text = std::fs::read_to_string(template)
                .with_context(|| format!("reading template {}", template.display()))?;
            let destination = PathBuf::from(Self::substitute(
                &destination.display().to_string(),
                base,
                work,
            ));
            if let Some(parent) = destination.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&destination, Self::substitute(&text, base, work))?;
        }
        let Some((program, args)) = self.program.split_first() else {
            bail!("no program to run (pass it after --)");
        };
        let mut command = Command::new(program);
        command
            .args(args.iter().map(|a| Self::substitute(a, base, work)))
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in &self.env {
            command.env(name, Self::substitute(value, base, work));
        }
        Ok(command)
    }
}

/// The end of one child process: status, peak RSS and CPU time from `wait4`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub peak_rss_kib: u64,
    pub cpu: Duration,
    pub wall: Duration,
    pub timed_out: bool,
}

/// Spawns `command` and reaps it with `wait4` (killing it after `limit`), returning its
/// resource usage. The child's stderr is returned for error messages.
fn run_measured(mut command: Command, limit: Duration) -> anyhow::Result<(Exit, String)> {
    let start = Instant::now();
    let mut child = command.spawn().context("spawning the program under test")?;
    let pid = child.id() as libc::pid_t;
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            use std::io::Read;
            // A read error only loses diagnostics.
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child's pid with valid pointers.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        // The receiver only goes away when the measuring thread already gave up.
        let _ = sender.send((reaped, status, usage, Instant::now()));
    });
    let mut timed_out = false;
    let (reaped, status, usage, end) = match receiver.recv_timeout(limit) {
        Ok(result) => result,
        Err(_) => {
            timed_out = true;
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            receiver.recv().context("reaping the killed child")?
        }
    };
    // The child was reaped with wait4 above; std's handle must not wait again.
    std::mem::forget(child);
    let stderr = reader.join().unwrap_or_default();
    if reaped != pid {
        bail!("wait4 failed for pid {pid}");
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok((
        Exit {
            code,
            peak_rss_kib: usage.ru_maxrss as u64,
            cpu: time(usage.ru_utime) + time(usage.ru_stime),
            wall: end - start,
            timed_out,
        },
        stderr,
    ))
}

/// Median wall time of `runs` runs of `launch` (no provider), after one warm-up run.
pub(crate) fn spawn_time(launch: &Launch, runs: usize) -> anyhow::Result<Value> {
    let work = tempfile::tempdir()?;
    let mut times = Vec::new();
    for k in 0..=runs {
        let (exit, stderr) =
            run_measured(launch.command("", work.path())?, Duration::from_secs(30))?;
        if exit.code != Some(0) {
            bail!("{:?} exited with {:?}: {stderr}", launch.program, exit.code);
        }
        if k > 0 {
            times.push(exit.wall.as_secs_f64() * 1000.0);
        }
    }
    Ok(
        json!({"median_ms": median(&mut times), "min_ms": times.iter().cloned().fold(f64::INFINITY, f64::min), "runs": runs}),
    )
}

fn is_model_path(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or("");
    path.ends_with("/chat/completions") || path.ends_with("/responses")
}

fn text_reply(api: Api, text: &str) -> ScriptedReply {
    match api {
        Api::Chat => SseReply::new()
            .text(text)
            .finish("stop", Some(WireUsage::default()))
            .into(),
        Api::Responses => ResponsesReply::new().text(&[text]).finish(10, 0, 1).into(),
    }
}

/// Time from spawning `launch` to the first byte of its first model request at the fake
/// provider, median of `runs` runs (after one warm-up run). Each run is answered with a short
/// text reply so the program can finish. With `tls` the provider speaks HTTPS and the program
/// trusts its authority through `SSL_CERT_FILE`; the time then includes the TLS handshake
/// (the first byte is read after it).
pub(crate) async fn first_request(
    launch: &Launch,
    api: Api,
    runs: usize,
    tls: bool,
) -> anyhow::Result<Value> {
    let provider = if tls {
        FakeProvider::start_tls(Vec::new()).await?
    } else {
        FakeProvider::start(Vec::new()).await?
    };
    // The test authority, for the program's `SSL_CERT_FILE` (HTTPS only).
    let authority = if tls {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("ca.pem"), dsh_test_support::TEST_CA_PEM)?;
        Some(dir)
    } else {
        None
    };
    let base = provider.base_url();
    let mut times = Vec::new();
    let mut failures = Vec::new();
    // The first model request's body of each run; every run has its own work directory.
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for k in 0..=runs {
        for _ in 0..4 {
            provider.push_reply(text_reply(api, "ok"));
        }
        let work = tempfile::tempdir()?;
        let seen = provider.requests().len();
        let mut command = launch.command(&base, work.path())?;
        if let Some(dir) = &authority {
            command.env("SSL_CERT_FILE", dir.path().join("ca.pem"));
        }
        let start = Instant::now();
        let measured =
            tokio::task::spawn_blocking(move || run_measured(command, Duration::from_secs(60)))
                .await??;
        let (exit, stderr) = measured;
        let requests = provider.requests();
        let timings = provider.timings();
        let first_model = requests
            .iter()
            .zip(&timings)
            .skip(seen)
            .find(|(r, _)| is_model_path(&r.path));
        if let Some((request, _)) = first_model {
            bodies.push(request.raw_body.clone());
        }
        let first = first_model.map(|(_, t)| t.first_byte);
        match first {
            Some(at) if k > 0 => times.push((at - start).as_secs_f64() * 1000.0),
            Some(_) => {}
            None => failures.push(format!(
                "run {k}: no model request (exit {:?}, timed out {}): {}",
                exit.code,
                exit.timed_out,
                stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )),
        }
        drop(work);
    }
    if times.is_empty() {
        bail!("no run reached the provider: {}", failures.join("; "));
    }
    // Bytes the first requests of two sessions in different directories share from the start:
    // what a provider's prefix cache can reuse across sessions (docs/harbor.md, "Prompt cache
    // across sessions").
    let common = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let shared = match bodies.as_slice() {
        [a, b, ..] => Some(common(&model_order(a), &model_order(b))),
        _ => None,
    };
    let shared_raw = match bodies.as_slice() {
        [a, b, ..] => Some(common(a, b)),
        _ => None,
    };
    Ok(json!({
        "median_ms": median(&mut times),
        "runs": times.len(),
        "failures": failures,
        "shared_prefix_bytes": shared,
        "shared_body_prefix_bytes": shared_raw,
        "first_request_bytes": bodies.first().map(Vec::len),
    }))
}

/// A chat-completions body in the order the model reads it: the system message, the tool
/// schemas, then the other messages (the JSON body puts `tools` after `messages`, but providers
/// render tools into the prompt before the conversation). Other bodies as they are.
fn model_order(body: &[u8]) -> Vec<u8> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    match (value["messages"].as_array(), value.get("tools")) {
        (Some(messages), Some(tools)) if !messages.is_empty() => {
            serde_json::to_vec(&json!([messages[0], tools, messages[1..]]))
                .unwrap_or_else(|_| body.to_vec())
        }
        _ => body.to_vec(),
    }
}

/// The tool call of step `k` (1-based) in each wire format.
#[derive(Debug, Clone)]
pub(crate) struct TaskTool {
    pub name: String,
    /// Argument JSON with `{k}` replaced by the step number.
    pub arguments: String,
}

fn tool_reply(api: Api, tool: &TaskTool, k: usize) -> ScriptedReply {
    let arguments = tool.arguments.replace("{k}", &k.to_string());
    let id = format!("call_{k}");
    match api {
        Api::Chat => SseReply::new()
            .reasoning("I should look at the next file.")
            .text(&format!("Reading file {k}."))
            .tool_call(0, &id, &tool.name, &arguments)
            .finish(
                "tool_calls",
                Some(WireUsage {
                    prompt_tokens: 1000 * k as u64,
                    completion_tokens: 30,
                    prompt_cache_hit_tokens: 900 * k as u64,
                    reasoning_tokens: 10,
                }),
            )
            .into(),
        Api::Responses => ResponsesReply::new()
            .text(&[&format!("Reading file {k}.")])
            .function_call(&id, &tool.name, &[&arguments])
            .finish(1000 * k as u64, 900 * k as u64, 30)
            .into(),
    }
}

/// Runs a scripted task of `steps` tool calls and a final answer; reports peak RSS, CPU and
/// wall time of the process, and whether every step reached the provider.
pub(crate) async fn task(
    launch: &Launch,
    api: Api,
    steps: usize,
    tool: &TaskTool,
    runs: usize,
) -> anyhow::Result<Value> {
    let mut results = Vec::new();
    for _ in 0..runs.max(1) {
        results.push(task_once(launch, api, steps, tool).await?);
    }
    // One run: its numbers. More: the median of each number, and the first failure if any.
    if let Some(failed) = results
        .iter()
        .find(|r| r["model_requests"] != r["expected_requests"])
    {
        return Ok(failed.clone());
    }
    let median_of = |key: &str| {
        let mut values: Vec<f64> = results.iter().filter_map(|r| r[key].as_f64()).collect();
        crate::stats::median(&mut values)
    };
    let mut summary = results[0].clone();
    for key in ["peak_rss_kib", "cpu_ms", "wall_ms"] {
        summary[key] = json!(median_of(key));
    }
    summary["runs"] = json!(results.len());
    Ok(summary)
}

async fn task_once(
    launch: &Launch,
    api: Api,
    steps: usize,
    tool: &TaskTool,
) -> anyhow::Result<Value> {
    let mut replies: Vec<ScriptedReply> = (1..=steps).map(|k| tool_reply(api, tool, k)).collect();
    replies.push(text_reply(api, "All files read."));
    let provider = FakeProvider::start(replies).await?;
    let work = tempfile::tempdir()?;
    for k in 1..=steps {
        let line = format!("line of file {k}: the quick brown fox jumps over the lazy dog\n");
        std::fs::write(work.path().join(format!("f{k}.txt")), line.repeat(40))?;
    }
    let command = launch.command(&provider.base_url(), work.path())?;
    let (exit, stderr) =
        tokio::task::spawn_blocking(move || run_measured(command, Duration::from_secs(120)))
            .await??;
    let model_requests = provider
        .requests()
        .iter()
        .filter(|r| is_model_path(&r.path))
        .count();
    let tool_results = provider
        .requests()
        .last()
        .map(|r| count_tool_results(&r.body))
        .unwrap_or(0);
    Ok(json!({
        "peak_rss_kib": exit.peak_rss_kib,
        "cpu_ms": exit.cpu.as_secs_f64() * 1000.0,
        "wall_ms": exit.wall.as_secs_f64() * 1000.0,
        "exit_code": exit.code,
        "timed_out": exit.timed_out,
        "model_requests": model_requests,
        "expected_requests": steps + 1,
        "tool_results_in_last_request": tool_results,
        "first_tool_result": provider
            .requests()
            .last()
            .map(|r| first_tool_result(&r.body))
            .unwrap_or_default(),
        "stderr_tail": stderr.lines().rev().take(5).collect::<Vec<_>>(),
    }))
}

/// The start of the first tool result in a request body of either format (to check that the
/// tool really ran, e.g. not refused by a missing sandbox).
fn first_tool_result(body: &Value) -> String {
    let chat = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].to_string());
    let responses = body["input"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["type"] == "function_call_output"))
        .map(|i| i["output"].to_string());
    chat.or(responses)
        .unwrap_or_default()
        .chars()
        .take(160)
        .collect()
}

/// Tool results in a request body of either format.
fn count_tool_results(body: &Value) -> usize {
    let in_messages = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let in_input = body["input"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .count()
    });
    in_messages + in_input
}

/// How many requests `serve` answers: enough for profiling runs of a whole client (`perf stat
/// -r`, repeated `perf record`), whose figures would otherwise become those of the client's
/// error path once the replies run out.
const SERVED_REPLIES: usize = 2_000;

/// Serves text replies ([`SERVED_REPLIES`] of them) and prints every request's path and tool
/// names (for probing and profiling a client).
pub(crate) async fn serve(api: Api, seconds: u64) -> anyhow::Result<()> {
    let provider = FakeProvider::start(Vec::new()).await?;
    for _ in 0..SERVED_REPLIES {
        provider.push_reply(text_reply(api, "ok"));
    }
    println!("{}", provider.base_url());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for request in provider.requests() {
        let tools: Vec<String> = request.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| {
                        t["name"]
                            .as_str()
                            .or(t["function"]["name"].as_str())
                            .or(t["type"].as_str())
                            .unwrap_or("?")
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default();
        println!("{} {} tools={tools:?}", request.method, request.path);
    }
    Ok(())
}
