//! `bash`: one fresh `bash -c` per call, in its own session and process group.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::{opt_count, parse_args};
use crate::confinement::{CommandPlan, ConfinementRequest};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::jobs::JobSpec;
use crate::os::ExitStatusExt;
use crate::output::ToolOutput;
use crate::presentation::{
    one_line, string_arg, ResultFacts, ResultSummary, Tone, ToolKind, ToolPresentation, ToolView,
};
use crate::process::{
    capture, group_command, spawn_child, Captured, LiveOutput, Pid, ProcessGroup,
};
use crate::tool::Tool;

/// How long a `SIGTERM`ed group gets before `SIGKILL`.
const KILL_GRACE: Duration = Duration::from_millis(1500);
/// How long to keep reading output after the process group is gone. Only a process that left
/// the group (its own `setsid`) can hold the pipes open that long.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// How often a running command's latest output is reported to its card (the pipeline logs a
/// report at most every 250 ms anyway).
const LIVE_INTERVAL: Duration = Duration::from_millis(250);
/// How long a command runs before its output is first reported.
const LIVE_DELAY: Duration = Duration::from_secs(1);

const BASE_DESCRIPTION: &str = "Runs a shell command with `bash -c` and returns its output. \
Every call starts a new shell in the session's working directory: `cd`, variables and functions do not carry over, so pass `workdir` rather than chaining `cd`. \
Stdin is empty (/dev/null) and there is no terminal, so interactive programs fail; pagers and colors are disabled. \
The command gets `timeoutMs` (default 60000, at most 600000); on expiry it and every process it started are killed and the result ends with `[timed out after N ms: ...]`. \
Processes the command leaves running in the background are killed when it exits. \
Output is stdout, then `[stderr]` and stderr when there is any; a non-zero exit adds `[exit code: N]` and death by a signal adds `[killed by signal N]`; success without output shows `(no output)`. \
Each stream keeps only its last 64 KB in the result, with a `[stdout truncated ...]` / `[stderr truncated ...]` line naming a file that holds the whole stream; a result above 50,000 bytes shows its head and tail and names the file with the full text. Read such files with `read` (offset/limit) or `grep`. \
Variables whose names contain KEY, TOKEN, SECRET or PASSWORD are removed from the environment. \
Failures of the call itself start with `Error:` (for example a missing workdir, or no sandbox available for the session's permission preset). \
With `run_in_background: true` the call returns a job id at once and the command keeps running (same sandbox, no timeout, stdout and stderr merged into one log): read new output with `job_output` (`wait: true` blocks until it ends), list jobs with `job_list`, stop one with `job_kill`. At most 10 background jobs run at a time; they are killed when the session ends, and a headless run (`dsh run`) waits only a few minutes (5 by default) after your last turn for jobs still running, then stops them: finish the task without relying on a server or watcher left running. When a job finishes you are told in your next step, so keep working instead of polling. \
Prefer the read, write, edit, glob and grep tools over cat, sed, find and grep in the shell.";

/// The description: the base text and the escalation rules (docs/tools.md).
static DESCRIPTION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{BASE_DESCRIPTION} {}",
        crate::builtin::escalation_text("command")
    )
});

/// The `bash` tool. See the module docs and `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BashTool;

#[derive(Debug, Deserialize)]
struct BashArgs {
    command: String,
    description: String,
    #[serde(rename = "timeoutMs", default, deserialize_with = "opt_count")]
    timeout_ms: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default)]
    run_in_background: Option<bool>,
    /// Network for this call when the session has none: honoured only once the user approved
    /// the call (the safety policy asks; docs/SECURITY.md, "Network").
    #[serde(default)]
    network: Option<bool>,
}

impl Tool for BashTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        let command = string_arg(args, "command").unwrap_or("");
        ToolPresentation::new(self.name())
            .subject(format!("$ {}", one_line(command, 200)))
            // The title of ACP's card: the description, else the command without its prompt.
            .detail(
                string_arg(args, "description")
                    .or(string_arg(args, "command"))
                    .map(|detail| one_line(detail, 200))
                    .as_deref(),
            )
            .kind(ToolKind::Execute)
            .view(ToolView::Terminal)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        if result.error.is_some() {
            return None;
        }
        if let Some(job) = result.meta_value("jobId").and_then(Value::as_str) {
            return Some(ResultSummary::new(format!("background job {job}")));
        }
        let timed_out = result.meta_value("timedOut").and_then(Value::as_bool) == Some(true);
        Some(
            match result.meta_value("exitCode").and_then(Value::as_i64) {
                _ if timed_out => ResultSummary::new("timed out").tone(Tone::Failure),
                Some(0) => ResultSummary::new("exit 0").tone(Tone::Success),
                Some(code) => ResultSummary::new(format!("exit {code}")).tone(Tone::Failure),
                None => ResultSummary::new("killed").tone(Tone::Failure),
            },
        )
    }

    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        DESCRIPTION.as_str()
    }

    fn parameters(&self) -> Value {
        crate::builtin::with_escalation(
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line, run as `bash -c <command>`."},
                    "description": {"type": "string", "description": "What the command does, in 5-10 words, shown to the user (e.g. \"Run the unit tests\")."},
                    "timeoutMs": {"type": "number", "description": "Timeout in milliseconds; default 60000, capped at 600000. The command and its children are killed when it expires."},
                    "workdir": {"type": "string", "description": "Directory to run in; relative paths are resolved against the session working directory. Defaults to it."},
                    "run_in_background": {"type": "boolean", "description": "Run in the background and return a job id immediately (read output with job_output, stop with job_kill). No timeout applies."},
                    "network": {"type": "boolean", "description": "Only when the session runs commands without network and this command failed for lack of it: retry it once with `network: true` and a `justification`; the user is asked to approve it."}
                },
                "required": ["command", "description"]
            }),
            "command",
        )
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(run(args, ctx))
    }
}

async fn run(args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let args: BashArgs = parse_args("bash", args)?;
    if ctx.permission().asks_first() && !ctx.approved() {
        return Err(ToolError::new(
            ToolErrorCode::PermissionDenied,
            "this command needs the user's approval: this session's permission preset is ask, \
             and this call was not approved",
        ));
    }
    let (background, timeout) = check_args(&args, ctx)?;
    let limits = ctx.limits();
    let workdir = resolve_workdir(ctx, args.workdir.as_deref())?;
    let network = ctx.network() || (args.network == Some(true) && ctx.approved());
    let (plan, request) = confined_plan(ctx, &args.command, &workdir, network)?;
    if ctx.cancel().is_cancelled() {
        return Err(aborted());
    }
    if let (true, Some(jobs)) = (background, ctx.jobs()) {
        return jobs.start(
            JobSpec {
                plan,
                workdir,
                command: args.command,
                description: args.description,
            },
            ctx.spill(),
        );
    }

    let started = Instant::now();
    let (mut child, mut group) = spawn_group(&plan, &workdir)?;
    let cap = limits.bash_stream_cap;
    // Both streams' latest lines, reported on the call's card while it runs.
    let live = Arc::new(LiveOutput::default());
    let stdout = child.stdout.take().map(|s| {
        AbortOnDrop(tokio::spawn(capture(
            s,
            cap,
            ctx.spill().clone(),
            "bash-stdout",
            Some(Arc::clone(&live)),
        )))
    });
    let stderr = child.stderr.take().map(|s| {
        AbortOnDrop(tokio::spawn(capture(
            s,
            cap,
            ctx.spill().clone(),
            "bash-stderr",
            Some(Arc::clone(&live)),
        )))
    });

    let ended = wait_reporting(&mut child, &mut group, timeout, ctx, &live).await;
    group.mark_finished();
    let (stdout, stdout_detached) = drain(stdout).await;
    let (stderr, stderr_detached) = drain(stderr).await;
    let elapsed = started.elapsed();
    if ended.cancelled {
        return Err(aborted_with(ctx, &stdout, &stderr, cap));
    }
    let Ended {
        status,
        timed_out,
        leftovers,
        ..
    } = ended;

    let text = render(&RunReport {
        stdout: &stdout,
        stderr: &stderr,
        status,
        timed_out,
        timeout,
        leftovers,
        detached: stdout_detached || stderr_detached,
        cap,
        sandbox: sandbox_note(ctx, &request, status, &stderr),
    });
    let text = ctx.externalize(&text, "bash")?;
    let exit_code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    Ok(ToolOutput::text(text)
        .with_summary(summary(&args.description, timed_out, exit_code))
        .with_data(json!({
            "exitCode": exit_code,
            "signal": signal,
            "timedOut": timed_out,
            "durationMs": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "stdoutBytes": stdout.total,
            "stderrBytes": stderr.total,
            "stdoutFile": stdout.full_path,
            "stderrFile": stderr.full_path,
        })))
}

/// How a foreground command ended.
struct Ended {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    cancelled: bool,
    /// Processes were left in its group when it exited (killed since).
    leftovers: bool,
}

/// Waits for the command to exit, its `timeout` or the call's cancellation (the whole group is
/// stopped in each case), reporting its latest output every [`LIVE_INTERVAL`] once it has run
/// for [`LIVE_DELAY`].
async fn wait_reporting(
    child: &mut tokio::process::Child,
    group: &mut ProcessGroup,
    timeout: Duration,
    ctx: &ToolContext,
    live: &LiveOutput,
) -> Ended {
    let mut ended = Ended {
        status: None,
        timed_out: false,
        cancelled: false,
        leftovers: false,
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    // A quick command reports nothing: its card shows its result at once.
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + LIVE_DELAY, LIVE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            status = child.wait() => {
                ended.status = status.ok();
                ended.leftovers = group.terminate(KILL_GRACE).await;
                return ended;
            }
            _ = &mut deadline => ended.timed_out = true,
            _ = ctx.cancel().cancelled() => ended.cancelled = true,
            _ = tick.tick() => {
                if let Some(report) = live.report() {
                    ctx.report_progress(report);
                }
                continue;
            }
        }
        // Timed out or cancelled: stop the group, then reap the shell.
        group.terminate(KILL_GRACE).await;
        ended.status = tokio::time::timeout(DRAIN_LIMIT, child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        return ended;
    }
}

/// Checks the arguments: a command, background runs only where the session has jobs, a
/// positive timeout (capped at the configured maximum). Returns (background, timeout).
fn check_args(args: &BashArgs, ctx: &ToolContext) -> Result<(bool, Duration), ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::invalid_args("command must not be empty"));
    }
    let background = args.run_in_background == Some(true);
    if background && ctx.jobs().is_none() {
        return Err(ToolError::new(
            ToolErrorCode::Unsupported,
            "run_in_background is not supported in this session (no background jobs); run the command in the foreground with a timeoutMs of up to 600000 instead",
        ));
    }
    let limits = ctx.limits();
    let timeout = match args.timeout_ms {
        None => limits.bash_default_timeout,
        Some(0) => return Err(ToolError::invalid_args("timeoutMs must be at least 1")),
        Some(ms) => Duration::from_millis(ms).min(limits.bash_max_timeout),
    };
    Ok((background, timeout))
}

/// `bash -c <command>` in `workdir`, confined as the session's preset says; also returns the
/// confinement request (its sandbox note needs it).
fn confined_plan(
    ctx: &ToolContext,
    command: &str,
    workdir: &std::path::Path,
    network: bool,
) -> Result<(CommandPlan, ConfinementRequest), ToolError> {
    let plan = CommandPlan::new("bash", vec!["-c".into(), command.into()]);
    let request = ConfinementRequest {
        // `ask` is confined exactly as `workspace-write`.
        preset: ctx.permission().confinement(),
        cwd: ctx.cwd().to_path_buf(),
        workdir: workdir.to_path_buf(),
        writable_roots: ctx.writable_roots(),
        hidden_dirs: crate::confinement::hidden_dirs(),
        network,
    };
    let plan = ctx.confinement().confine(plan, &request)?;
    Ok((plan, request))
}

/// Starts the confined command in its own process group with piped stdout and stderr.
fn spawn_group(
    plan: &CommandPlan,
    workdir: &std::path::Path,
) -> Result<(tokio::process::Child, ProcessGroup), ToolError> {
    crate::process::check_program(plan).map_err(|msg| ToolError::new(ToolErrorCode::Io, msg))?;
    let mut command = group_command(plan, workdir);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = spawn_child(command).map_err(|err| {
        ToolError::new(
            ToolErrorCode::Io,
            format!("cannot start {}: {err}", plan.program.to_string_lossy()),
        )
    })?;
    let pid = child.id().and_then(|p| Pid::try_from(p).ok());
    let Some(pid) = pid else {
        return Err(ToolError::new(
            ToolErrorCode::Io,
            "the shell exited before it could be tracked",
        ));
    };
    Ok((child, ProcessGroup::new(pid)))
}

/// The one-line summary of a run: exit code, killed, or timed out.
fn summary(description: &str, timed_out: bool, exit_code: Option<i32>) -> String {
    if timed_out {
        format!("bash: {description} (timed out)")
    } else {
        match exit_code {
            Some(code) => format!("bash: {description} (exit {code})"),
            None => format!("bash: {description} (killed)"),
        }
    }
}

fn aborted() -> ToolError {
    ToolError::new(
        ToolErrorCode::Aborted,
        "the command was cancelled; it and every process it started were killed",
    )
}

/// [`aborted`], with what the command printed before it was cancelled (kept as a finished
/// run's output is: each stream's tail, a large text saved to a file).
fn aborted_with(ctx: &ToolContext, stdout: &Captured, stderr: &Captured, cap: usize) -> ToolError {
    let mut error = aborted();
    if stdout.total == 0 && stderr.total == 0 {
        return error;
    }
    let mut printed = String::new();
    push_stream(&mut printed, "stdout", stdout, cap);
    if stderr.total > 0 {
        ensure_newline(&mut printed);
        printed.push_str("[stderr]\n");
        push_stream(&mut printed, "stderr", stderr, cap);
    }
    let printed = ctx
        .externalize(printed.trim_end(), "bash")
        .unwrap_or_else(|_| "(the output could not be kept)".to_string());
    error.message = format!("{}; its output until then:\n{printed}", error.message);
    error
}

fn resolve_workdir(
    ctx: &ToolContext,
    workdir: Option<&str>,
) -> Result<std::path::PathBuf, ToolError> {
    let Some(dir) = workdir.filter(|d| !d.is_empty()) else {
        return Ok(ctx.cwd().to_path_buf());
    };
    let path = ctx.absolute(dir);
    let meta = std::fs::metadata(&path).map_err(|err| ToolError::io("workdir", &path, &err))?;
    if !meta.is_dir() {
        return Err(ToolError::new(
            ToolErrorCode::NotAFile,
            format!("workdir {} is not a directory", path.display()),
        ));
    }
    Ok(path)
}

/// Aborts a spawned task when dropped, so an abandoned call stops reading its pipes.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits a bounded time for a capture task; returns what it got and whether it had to stop
/// waiting (the pipe was held open by a process outside the group).
async fn drain(task: Option<AbortOnDrop<Captured>>) -> (Captured, bool) {
    let Some(mut task) = task else {
        return (Captured::default(), false);
    };
    match tokio::time::timeout(DRAIN_LIMIT, &mut task.0).await {
        Ok(Ok(captured)) => (captured, false),
        Ok(Err(_join_error)) => (Captured::default(), false),
        Err(_elapsed) => (Captured::default(), true),
    }
}

struct RunReport<'a> {
    stdout: &'a Captured,
    stderr: &'a Captured,
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    timeout: Duration,
    leftovers: bool,
    detached: bool,
    cap: usize,
    /// Set when a failure looks like the sandbox refusing a write (see [`sandbox_note`]).
    sandbox: Option<String>,
}

/// OS messages of a refused write: `EROFS` (bubblewrap's read-only binds) and `EACCES`/`EPERM`
/// (Landlock).
const DENIAL_MESSAGES: [&str; 3] = [
    "Read-only file system",
    "Permission denied",
    "Operation not permitted",
];

/// A marker telling the model that a failed command was probably stopped by the sandbox, so it
/// does not mistake the preset for a broken file system: only for a confined run that exited
/// non-zero with a denial message on stderr.
fn sandbox_note(
    ctx: &ToolContext,
    request: &ConfinementRequest,
    status: Option<std::process::ExitStatus>,
    stderr: &Captured,
) -> Option<String> {
    if request.preset == crate::context::PermissionPreset::DangerFullAccess
        || status.is_some_and(|s| s.success())
    {
        return None;
    }
    let tail = String::from_utf8_lossy(&stderr.tail);
    if !DENIAL_MESSAGES.iter().any(|m| tail.contains(m)) {
        return None;
    }
    let allowed = match request.preset {
        crate::context::PermissionPreset::ReadOnly => "no file may be written".to_string(),
        _ => format!(
            "files may be written only inside {} and the temp directories, except git \
             directories (.git), dsh and editor settings and .env files, which are read-only \
             (so git add, commit, checkout and stash need an escalation)",
            ctx.own_roots_text()
        ),
    };
    Some(format!(
        "[sandbox: commands run confined ({}) under the {} preset: {allowed}; a write elsewhere fails with the error above. Work inside the allowed directories, or retry this exact command once with `sandbox_permissions` (the narrowest wider preset that suffices) and a `justification`: the user is asked to approve it.]",
        ctx.confinement().name(),
        ctx.permission()
    ))
}

fn render(r: &RunReport<'_>) -> String {
    let mut out = String::new();
    push_stream(&mut out, "stdout", r.stdout, r.cap);
    if r.stderr.total > 0 {
        ensure_newline(&mut out);
        out.push_str("[stderr]\n");
        push_stream(&mut out, "stderr", r.stderr, r.cap);
    }
    let mut markers = Vec::new();
    if r.timed_out {
        markers.push(format!(
            "[timed out after {} ms: the command and its child processes were killed]",
            r.timeout.as_millis()
        ));
    }
    if r.leftovers {
        markers
            .push("[processes the command left running in the background were killed]".to_string());
    }
    if r.detached {
        markers
            .push("[stopped reading output: a detached process kept the output open]".to_string());
    }
    match r.status {
        Some(status) => {
            if let Some(code) = status.code() {
                if code != 0 {
                    markers.push(format!("[exit code: {code}]"));
                }
            } else if let Some(signal) = status.signal() {
                markers.push(format!("[killed by signal {signal}]"));
            }
        }
        None if !r.timed_out => markers.push("[exit status unknown]".to_string()),
        None => {}
    }
    if let Some(note) = &r.sandbox {
        markers.push(note.clone());
    }
    if out.is_empty() && markers.is_empty() {
        return "(no output)".to_string();
    }
    for marker in markers {
        ensure_newline(&mut out);
        out.push_str(&marker);
    }
    out
}

fn push_stream(out: &mut String, name: &str, captured: &Captured, cap: usize) {
    if captured.total > captured.tail.len() as u64 {
        let whereabouts = match (&captured.full_path, &captured.spill_error) {
            (Some(path), _) => format!("full {name} saved to {}", path.display()),
            (None, Some(err)) => format!("full {name} could not be saved: {err}"),
            (None, None) => format!("full {name} not saved"),
        };
        out.push_str(&format!(
            "[{name} truncated: showing the last {cap} of {} bytes; {whereabouts}]\n",
            captured.total
        ));
        let mut tail = captured.tail.as_slice();
        // Skip UTF-8 continuation bytes so the kept tail starts on a character.
        while let Some((&first, rest)) = tail.split_first() {
            if first & 0xC0 == 0x80 {
                tail = rest;
            } else {
                break;
            }
        }
        out.push_str(&String::from_utf8_lossy(tail));
    } else {
        out.push_str(&String::from_utf8_lossy(&captured.tail));
    }
}

fn ensure_newline(out: &mut String) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}
