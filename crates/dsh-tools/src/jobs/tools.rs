//! `job_output`, `job_list` and `job_kill` (dsh's names and parameters).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::{opt_count, parse_args};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::tool::Tool;

use super::JobTable;

/// Default wait of `job_output` with `wait: true`.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// Longest wait `job_output` accepts.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// The three job tools, for registration next to a `bash` whose context has a [`JobTable`].
pub fn job_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(JobOutputTool),
        Arc::new(JobListTool),
        Arc::new(JobKillTool),
    ]
}

fn table(ctx: &ToolContext) -> Result<&JobTable, ToolError> {
    ctx.jobs().ok_or_else(|| {
        ToolError::new(
            ToolErrorCode::Unsupported,
            "background jobs are not enabled in this session",
        )
    })
}

fn job_id_schema() -> Value {
    json!({"type": "string", "description": "Job id returned by the tool that started the background work."})
}

/// `job_output {job_id, wait?, timeout_ms?}`: new output of a job and its status.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobOutputTool;

#[derive(Debug, Deserialize)]
struct OutputArgs {
    job_id: String,
    #[serde(default)]
    wait: Option<bool>,
    #[serde(default, deserialize_with = "opt_count")]
    timeout_ms: Option<u64>,
}

impl Tool for JobOutputTool {
    fn present(&self, args: &Value) -> crate::ToolPresentation {
        crate::ToolPresentation::new(self.name())
            .subject(crate::string_arg(args, "job_id").unwrap_or("?"))
    }

    fn name(&self) -> &str {
        "job_output"
    }

    fn description(&self) -> &str {
        "Read a background job (started with `bash` or `subagent` `run_in_background: true`): returns the output (stdout and stderr merged) written since your previous read, then a last line `[status: ...]` (`running`, `completed (exit code 0)`, `failed (exit code N)`, `killed (...)`; a subagent job has no output until it ends, then its answer). Without `wait` it returns at once. With `wait: true` it blocks until the job ends or `timeout_ms` passes (default 30000, at most 600000); a timed-out wait returns `[status: running]` and leaves the job alive. More than 64 KB of new output shows only its last 64 KB with a line naming the log file that holds everything."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "job_id": job_id_schema(),
                "wait": {"type": "boolean", "description": "Block until the job reaches a terminal status or the timeout expires. A timed-out wait returns [status: running] and leaves the job alive."},
                "timeout_ms": {"type": "number", "description": "Max wait in milliseconds (only meaningful with wait: true). Default 30000, at most 600000."}
            },
            "required": ["job_id"]
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: OutputArgs = parse_args("job_output", args)?;
            let job = table(ctx)?.get(&args.job_id)?;
            if args.wait == Some(true) && job.is_running() {
                let limit = match args.timeout_ms {
                    None => DEFAULT_WAIT,
                    Some(ms) => Duration::from_millis(ms).min(MAX_WAIT),
                };
                job.wait(limit, ctx.cancel()).await;
                if ctx.cancel().is_cancelled() {
                    return Err(ToolError::new(
                        ToolErrorCode::Aborted,
                        "the wait was cancelled; the job keeps running",
                    ));
                }
            }
            // Status first: output read afterwards is complete for a finished job.
            let status = job.status();
            let cap = ctx.limits().bash_stream_cap;
            let (new_output, skipped) = job
                .read_new(cap)
                .map_err(|err| ToolError::io("cannot read the job log", &job.log, &err))?;
            let mut text = String::new();
            if skipped > 0 {
                text.push_str(&format!(
                    "[{skipped} earlier bytes of new output not shown; the whole log is {}]\n",
                    job.log.display()
                ));
            }
            if new_output.is_empty() && skipped == 0 {
                text.push_str("(no new output)\n");
            } else {
                text.push_str(&new_output);
                if !text.ends_with('\n') {
                    text.push('\n');
                }
            }
            text.push_str(&status.marker());
            if !matches!(status, super::JobStatus::Running) {
                job.mark_reported();
            }
            let text = ctx.externalize(&text, "job-output")?;
            Ok(ToolOutput::text(text)
                .with_summary(format!("job_output {}: {}", job.id, status.word()))
                .with_data(job.data()))
        })
    }
}

/// `job_list {}`: every job of the session with its status.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobListTool;

impl Tool for JobListTool {
    fn name(&self) -> &str {
        "job_list"
    }

    fn description(&self) -> &str {
        "List your background jobs (running and finished): one line each with the job id, status (running, completed, failed, killed), run time, description and command."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn execute<'a>(
        &'a self,
        _args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let jobs = table(ctx)?.all();
            if jobs.is_empty() {
                return Ok(ToolOutput::text("No background jobs in this session.")
                    .with_summary("job_list: none"));
            }
            let lines: Vec<String> = jobs.iter().map(|j| j.list_line()).collect();
            let running = jobs.iter().filter(|j| j.is_running()).count();
            Ok(ToolOutput::text(lines.join("\n"))
                .with_summary(format!("job_list: {} jobs, {running} running", jobs.len()))
                .with_data(json!({"jobs": jobs.iter().map(|j| j.data()).collect::<Vec<_>>()})))
        })
    }
}

/// `job_kill {job_id, reason?}`: stops a job and every process it started.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobKillTool;

#[derive(Debug, Deserialize)]
struct KillArgs {
    job_id: String,
    #[serde(default)]
    reason: Option<String>,
}

impl Tool for JobKillTool {
    fn present(&self, args: &Value) -> crate::ToolPresentation {
        crate::ToolPresentation::new(self.name())
            .subject(crate::string_arg(args, "job_id").unwrap_or("?"))
    }

    fn name(&self) -> &str {
        "job_kill"
    }

    fn description(&self) -> &str {
        "Stop a running background job by job id: a shell job's whole process group gets SIGTERM, then SIGKILL after 1.5 s; a subagent job is cancelled with every process it started. Returns once every process of the job is gone, with the job's final `[status: ...]`. Killing a finished job just reports its status."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "job_id": job_id_schema(),
                "reason": {"type": "string", "description": "Optional short reason, recorded with the result."}
            },
            "required": ["job_id"]
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: KillArgs = parse_args("job_kill", args)?;
            let job = table(ctx)?.get(&args.job_id)?;
            let was_running = job.is_running();
            if was_running {
                job.kill.cancel();
                // SIGTERM, 1.5 s grace, SIGKILL, up to 2 s for the kernel: bounded.
                job.wait(
                    Duration::from_secs(10),
                    &tokio_util::sync::CancellationToken::new(),
                )
                .await;
            }
            let status = job.status();
            job.mark_reported();
            let head = if was_running {
                format!("Killed background job {}.", job.id)
            } else {
                format!("Background job {} had already finished.", job.id)
            };
            let mut data = job.data();
            if let Some(reason) = args.reason.filter(|r| !r.trim().is_empty()) {
                data["reason"] = json!(reason);
            }
            Ok(ToolOutput::text(format!("{head}\n{}", status.marker()))
                .with_summary(format!("job_kill {}", job.id))
                .with_data(data))
        })
    }
}
