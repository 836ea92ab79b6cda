//! Background jobs: `bash` with `run_in_background: true`, read with `job_output`, listed by
//! `job_list`, stopped by `job_kill`.
//!
//! A [`JobTable`] belongs to one agent (it travels in the agent's
//! [`ToolContext`](crate::ToolContext), see [`ToolContext::with_jobs`](crate::ToolContext::with_jobs)).
//! Each job is a confined `bash -c` in its own session and process group, exactly like a
//! foreground call, with stdout and stderr appended to one private log file in the spill
//! directory (so output is never held in memory and is kept in full). At most
//! [`MAX_RUNNING_JOBS`] run at once. When the last clone of the table is dropped (the agent and
//! its contexts are gone), every running job's process group gets `SIGKILL`: jobs die with the
//! session. Finished jobs that the model has not yet heard about are returned by
//! [`JobTable::take_finished`], which an agent extension turns into a message for the next step.
//!
//! Work that is not a process can be a job too ([`JobTable::start_task`]): a background
//! subagent is one (docs/agent.md, "Delegation"). Its id is named after its kind
//! (`subagent-1`), its log stays empty while it runs and receives the final output when it
//! settles, and `job_kill` fires the cancel token its body was given.

mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use dsh_llm::LockExt;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use tools::{job_tools, JobKillTool, JobListTool, JobOutputTool};

use crate::confinement::CommandPlan;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::process::{group_command, spawn_child, Pid, ProcessGroup};
use crate::spill::SpillDir;

/// Most background jobs of one agent that may run at the same time.
pub const MAX_RUNNING_JOBS: usize = 10;

/// How long a job's group gets between `SIGTERM` and `SIGKILL` on `job_kill`.
const KILL_GRACE: Duration = Duration::from_millis(1500);

/// How long a task job's body may take to stop after `job_kill` before it is dropped.
pub const TASK_KILL_GRACE: Duration = Duration::from_secs(6);

/// What a task job's body settles with: the text for the model and data for front ends
/// (merged into the job's data).
#[derive(Debug, Clone, Default)]
pub struct TaskDone {
    /// The final output (an answer, or what went wrong).
    pub text: String,
    /// Fields added to the job's data (`Value::Null` for none).
    pub data: Value,
    /// The whole message that announces the job's end to the model, in place of the generic
    /// `Background job <id> finished: ...` notice (a background subagent's settlement,
    /// docs/agent.md, "Delegation").
    pub notice: Option<String>,
}

/// A task job's body: `Ok` ends the job `completed`, `Err` ends it `failed`.
pub type TaskBody = BoxFuture<'static, Result<TaskDone, TaskDone>>;

/// How a task job is shown: a one-line `command` (`job_list`), a `description`, and data
/// for front ends (an object, or `Value::Null`).
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// What runs, in one line (e.g. `subagent: <prompt>`).
    pub command: String,
    /// A short label.
    pub description: String,
    /// Fields added to the job's data.
    pub data: Value,
}

/// What `bash` hands over to start a job: the confined plan and where to run it.
pub(crate) struct JobSpec {
    pub plan: CommandPlan,
    pub workdir: PathBuf,
    pub command: String,
    pub description: String,
}

/// A job [`JobTable::stop_running`] stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoppedJob {
    /// The job's id (`bash-1`).
    pub id: String,
    /// The command it ran (empty for a task job).
    pub command: String,
    /// What the model said it does.
    pub description: String,
    /// How long it had run, in milliseconds.
    pub elapsed_ms: u64,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// The shell exited with this code.
    Exited(i32),
    /// The shell died from this signal.
    Signaled(i32),
    /// `job_kill` stopped it.
    Killed,
    /// The shell could not be waited for (its status is unknown).
    Unknown(String),
    /// A task job's body finished with a result (its output is in the log).
    Completed,
    /// A task job's body failed (what went wrong is in the log).
    Failed,
}

/// A job's state, as reported to the model and to front ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    /// Still running.
    Running,
    /// Finished, after `elapsed`.
    Finished {
        /// How it ended.
        end: JobEnd,
        /// Run time.
        elapsed: Duration,
        /// Processes it left behind in its group were killed when the shell exited.
        leftovers: bool,
    },
}

impl JobStatus {
    /// The marker ending every `job_output` result: `[status: running]`,
    /// `[status: completed (exit code 0)]`, `[status: failed (exit code N)]`,
    /// `[status: killed (signal N)]`, `[status: killed (job_kill)]` or
    /// `[status: unknown (...)]`, each finished one with its run time.
    pub fn marker(&self) -> String {
        match self {
            JobStatus::Running => "[status: running]".to_string(),
            JobStatus::Finished {
                end,
                elapsed,
                leftovers,
            } => {
                let what = match end {
                    JobEnd::Exited(0) => "completed (exit code 0)".to_string(),
                    JobEnd::Exited(code) => format!("failed (exit code {code})"),
                    JobEnd::Signaled(signal) => format!("killed (signal {signal})"),
                    JobEnd::Killed => "killed (job_kill)".to_string(),
                    JobEnd::Unknown(why) => format!("unknown ({why})"),
                    JobEnd::Completed => "completed".to_string(),
                    JobEnd::Failed => "failed".to_string(),
                };
                let extra = if *leftovers {
                    "; processes it left running were killed"
                } else {
                    ""
                };
                format!(
                    "[status: {what} after {:.1} s{extra}]",
                    elapsed.as_secs_f64()
                )
            }
        }
    }

    fn word(&self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Finished { end, .. } => match end {
                JobEnd::Exited(0) | JobEnd::Completed => "completed",
                JobEnd::Exited(_) | JobEnd::Failed => "failed",
                JobEnd::Signaled(_) | JobEnd::Killed => "killed",
                JobEnd::Unknown(_) => "unknown",
            },
        }
    }
}

/// One background job.
pub(crate) struct Job {
    pub id: String,
    pub command: String,
    pub description: String,
    pub log: PathBuf,
    started: Instant,
    /// The process group of a shell job; `None` for a task job.
    pgid: Option<Pid>,
    /// What the job's starter adds to [`Job::data`] (a task job's child log, usage, ...).
    extra: Mutex<Value>,
    status: Mutex<JobStatus>,
    /// Bytes of the log already returned by `job_output`.
    read_offset: Mutex<u64>,
    /// The final status was told to the model (by `job_output`, `job_kill` or a notice).
    reported: AtomicBool,
    /// Fired by `job_kill`.
    kill: CancellationToken,
    done: watch::Receiver<bool>,
    /// A task job's own end notice ([`TaskDone::notice`]).
    notice: Mutex<Option<String>>,
}

impl Job {
    pub(crate) fn status(&self) -> JobStatus {
        self.status.lock_or_recover().clone()
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(*self.status.lock_or_recover(), JobStatus::Running)
    }

    pub(crate) fn mark_reported(&self) {
        self.reported.store(true, Ordering::SeqCst);
    }

    /// Waits until the job has finished, or `limit` passed (false), or `cancel` fired (false).
    pub(crate) async fn wait(&self, limit: Duration, cancel: &CancellationToken) -> bool {
        let mut done = self.done.clone();
        tokio::select! {
            result = tokio::time::timeout(limit, done.wait_for(|d| *d)) => {
                // A closed channel means the waiting task is gone; the status says the rest.
                matches!(result, Ok(Ok(_))) || !self.is_running()
            }
            _ = cancel.cancelled() => false,
        }
    }

    /// Output appended since the last read (at most `cap` bytes, the newest), advancing the
    /// read position to the end. Returns the text and how many earlier unread bytes were
    /// skipped.
    pub(crate) fn read_new(&self, cap: usize) -> std::io::Result<(String, u64)> {
        use std::io::{Read, Seek, SeekFrom};
        let mut offset = self.read_offset.lock_or_recover();
        let mut file = std::fs::File::open(&self.log)?;
        let len = file.metadata()?.len();
        if len <= *offset {
            return Ok((String::new(), 0));
        }
        let unread = len - *offset;
        let cap = cap as u64;
        let (start, skipped) = if unread > cap {
            (len - cap, unread - cap)
        } else {
            (*offset, 0)
        };
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.take(len - start).read_to_end(&mut bytes)?;
        *offset = start + bytes.len() as u64;
        let mut slice = bytes.as_slice();
        if skipped > 0 {
            // Start on a character when the cut fell inside one.
            while let Some((&first, rest)) = slice.split_first() {
                if first & 0xC0 == 0x80 {
                    slice = rest;
                } else {
                    break;
                }
            }
        }
        Ok((String::from_utf8_lossy(slice).into_owned(), skipped))
    }

    /// One line for `job_list`.
    pub(crate) fn list_line(&self) -> String {
        let status = self.status();
        let time = match &status {
            JobStatus::Running => format!("{:.0} s so far", self.started.elapsed().as_secs_f64()),
            JobStatus::Finished { elapsed, .. } => format!("{:.1} s", elapsed.as_secs_f64()),
        };
        let detail = match &status {
            JobStatus::Finished {
                end: JobEnd::Exited(code),
                ..
            } => format!(" (exit code {code})"),
            JobStatus::Finished {
                end: JobEnd::Signaled(signal),
                ..
            } => format!(" (signal {signal})"),
            _ => String::new(),
        };
        format!(
            "{}  {}{detail}  {time}  {}: {}",
            self.id,
            status.word(),
            self.description,
            one_line(&self.command, 120)
        )
    }

    /// Structured view for front ends.
    pub(crate) fn data(&self) -> Value {
        let mut data = json!({
            "jobId": self.id,
            "command": self.command,
            "description": self.description,
            "status": self.status().word(),
            "log": self.log,
        });
        if let (Some(data), Value::Object(extra)) =
            (data.as_object_mut(), &*self.extra.lock_or_recover())
        {
            for (key, value) in extra {
                data.insert(key.clone(), value.clone());
            }
        }
        data
    }
}

fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max_chars {
        flat
    } else {
        let cut: String = flat.chars().take(max_chars).collect();
        format!("{cut}...")
    }
}

struct Inner {
    jobs: Mutex<Vec<Arc<Job>>>,
    /// Per-kind counters: ids are `<kind>-<n>` (`bash-1`, `subagent-1`), as in dsh.
    counters: Mutex<BTreeMap<String, u64>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Called after each job ends (see [`JobTable::on_finish`]).
    on_finish: Mutex<Option<FinishCallback>>,
}

/// What [`JobTable::on_finish`] calls when a job ends.
pub type FinishCallback = Arc<dyn Fn() + Send + Sync>;

impl Drop for Inner {
    fn drop(&mut self) {
        // Jobs die with the session: kill every running group now (synchronously, so nothing
        // survives even if the runtime is shutting down), then stop the waiting tasks.
        for job in self.jobs.lock_or_recover().iter() {
            let Some(pgid) = job.pgid else {
                // Task jobs stop when their task is aborted below (dropping the body).
                continue;
            };
            if job.is_running() && pgid > 1 {
                // The job's group, which its waiting task still owns (not reaped while running).
                crate::process::kill_group_now(pgid);
            }
        }
        for task in self.tasks.lock_or_recover().drain(..) {
            task.abort();
        }
    }
}

/// The background jobs of one agent. Cheap to clone (shared); see the module docs.
#[derive(Clone)]
pub struct JobTable {
    inner: Arc<Inner>,
}

/// A reference to a [`JobTable`] that does not keep its jobs alive (for extensions that must
/// not extend the session's lifetime).
#[derive(Clone)]
pub struct WeakJobTable {
    inner: Weak<Inner>,
}

impl WeakJobTable {
    /// The table, while some strong clone still exists.
    pub fn upgrade(&self) -> Option<JobTable> {
        self.inner.upgrade().map(|inner| JobTable { inner })
    }
}

/// A finished job the model has not been told about, as [`JobTable::take_finished`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobNotice {
    /// The job id (`bash-1`, `subagent-1`, ...).
    pub job_id: String,
    /// The message for the model: which job, how it ended, and the last lines of unread output.
    pub text: String,
}

impl Default for JobTable {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTable")
            .field("jobs", &self.inner.jobs.lock_or_recover().len())
            .finish()
    }
}

impl JobTable {
    /// An empty table.
    pub fn new() -> Self {
        JobTable {
            inner: Arc::new(Inner {
                jobs: Mutex::new(Vec::new()),
                counters: Mutex::new(BTreeMap::new()),
                tasks: Mutex::new(Vec::new()),
                on_finish: Mutex::new(None),
            }),
        }
    }

    /// Calls `callback` (on the job's task) each time a job ends, after its status is final:
    /// how an idle agent learns that a completion is waiting (docs/tools.md, "Background
    /// jobs"). Replaces an earlier callback. The callback must not hold the table strongly.
    pub fn on_finish(&self, callback: FinishCallback) {
        *self.inner.on_finish.lock_or_recover() = Some(callback);
    }

    /// Whether any job is still running.
    pub fn any_running(&self) -> bool {
        self.inner
            .jobs
            .lock_or_recover()
            .iter()
            .any(|j| j.is_running())
    }

    /// Whether a finished job's end has not been reported yet (see
    /// [`JobTable::take_finished`]).
    pub fn has_unreported(&self) -> bool {
        self.all()
            .iter()
            .any(|j| !j.is_running() && !j.reported.load(Ordering::SeqCst))
    }

    /// A reference that does not keep the jobs alive.
    pub fn downgrade(&self) -> WeakJobTable {
        WeakJobTable {
            inner: Arc::downgrade(&self.inner),
        }
    }

    pub(crate) fn get(&self, id: &str) -> Result<Arc<Job>, ToolError> {
        let jobs = self.inner.jobs.lock_or_recover();
        jobs.iter()
            .find(|job| job.id == id.trim())
            .cloned()
            .ok_or_else(|| {
                let known: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
                ToolError::new(
                    ToolErrorCode::NotFound,
                    if known.is_empty() {
                        format!("no background job `{id}`: no job was started in this session")
                    } else {
                        format!(
                            "no background job `{id}`; this session's jobs: {}",
                            known.join(", ")
                        )
                    },
                )
            })
    }

    pub(crate) fn all(&self) -> Vec<Arc<Job>> {
        self.inner.jobs.lock_or_recover().clone()
    }

    /// Process group ids of the running jobs (for tests and diagnostics).
    pub fn running_groups(&self) -> Vec<i32> {
        self.inner
            .jobs
            .lock_or_recover()
            .iter()
            .filter(|j| j.is_running())
            .filter_map(|j| j.pgid)
            .collect()
    }

    /// Stops every job still running, as `job_kill` does (SIGTERM to the shell's whole process
    /// group, SIGKILL after the grace; a task job is cancelled), waiting at most 10 s for each,
    /// and returns what was stopped. Used when a headless run ends with jobs left (docs/agent.md,
    /// "Wake-ups"). Their end is marked as told: nothing wakes the agent for them.
    pub async fn stop_running(&self) -> Vec<StoppedJob> {
        let running: Vec<Arc<Job>> = self.all().into_iter().filter(|j| j.is_running()).collect();
        for job in &running {
            job.kill.cancel();
        }
        let mut stopped = Vec::new();
        for job in running {
            job.wait(Duration::from_secs(10), &CancellationToken::new())
                .await;
            job.mark_reported();
            stopped.push(StoppedJob {
                id: job.id.clone(),
                command: job.command.clone(),
                description: job.description.clone(),
                elapsed_ms: u64::try_from(job.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        stopped
    }

    /// Finished jobs whose end the model has not been told about yet, each returned once.
    /// A notice carries up to the last 2,000 bytes (20 lines) of output not yet read with
    /// `job_output`, without consuming it.
    pub fn take_finished(&self) -> Vec<JobNotice> {
        let jobs = self.all();
        let mut notices = Vec::new();
        for job in jobs {
            if job.is_running() || job.reported.swap(true, Ordering::SeqCst) {
                continue;
            }
            if let Some(text) = job.notice.lock_or_recover().clone() {
                notices.push(JobNotice {
                    job_id: job.id.clone(),
                    text,
                });
                continue;
            }
            let status = job.status();
            let preview = unread_tail(&job, 2_000, 20);
            let mut text = format!(
                "Background job {} finished: {}\nCommand ({}): {}\n",
                job.id,
                status
                    .marker()
                    .trim_start_matches("[status: ")
                    .trim_end_matches(']'),
                job.description,
                one_line(&job.command, 200)
            );
            match preview {
                Some((tail, unread)) if unread > 0 => {
                    text.push_str(&format!(
                        "Unread output: {unread} bytes; the last lines:\n{tail}\n(Read it with job_output {{\"job_id\": \"{}\"}}.)",
                        job.id
                    ));
                }
                _ => text.push_str("No unread output."),
            }
            notices.push(JobNotice {
                job_id: job.id.clone(),
                text,
            });
        }
        notices
    }

    /// Refuses a new job while [`MAX_RUNNING_JOBS`] run.
    fn check_capacity(&self) -> Result<(), ToolError> {
        let running = self
            .inner
            .jobs
            .lock_or_recover()
            .iter()
            .filter(|j| j.is_running())
            .count();
        if running >= MAX_RUNNING_JOBS {
            return Err(ToolError::new(
                ToolErrorCode::LimitReached,
                format!(
                    "{running} background jobs are already running (the limit is {MAX_RUNNING_JOBS}); wait for one with job_output (wait: true) or stop one with job_kill, then try again"
                ),
            ));
        }
        Ok(())
    }

    /// The next id of `kind`: dsh names jobs after the kind that started them with one
    /// counter per kind (`bash-1`, `bash-2`, `subagent-1`); recorded sessions call
    /// `job_kill bash-1` (docs/tools.md, "Background jobs").
    fn next_id(&self, kind: &str) -> String {
        let mut counters = self.inner.counters.lock_or_recover();
        let counter = counters.entry(kind.to_string()).or_insert(0);
        *counter += 1;
        format!("{kind}-{counter}")
    }

    /// Calls the finish callback, if the table still exists.
    fn notify_finish(table: &WeakJobTable) {
        let callback = table
            .inner
            .upgrade()
            .and_then(|inner| inner.on_finish.lock_or_recover().clone());
        if let Some(callback) = callback {
            callback();
        }
    }

    /// Starts work that is not a process as a job of `kind` (its id is `<kind>-<n>`).
    /// `body` gets the job's kill token (fired by `job_kill`) and is polled on its own task;
    /// when it settles, its text is written to the job's log (read by `job_output`, previewed
    /// in the finish notice) and the job ends `completed` (`Ok`) or `failed` (`Err`). After a
    /// kill the body has [`TASK_KILL_GRACE`] to stop before it is dropped. Dropping the table
    /// drops every running body. Returns the job id and its data for front ends.
    pub fn start_task(
        &self,
        kind: &str,
        task: TaskSpec,
        spill: &SpillDir,
        body: impl FnOnce(CancellationToken) -> TaskBody,
    ) -> Result<(String, Value), ToolError> {
        self.check_capacity()?;
        let id = self.next_id(kind);
        let (_file, log) = spill
            .create_file(&format!("{id}-output"))
            .map_err(|err| ToolError::io("cannot create the job log in", spill.path(), &err))?;
        let (done_tx, done_rx) = watch::channel(false);
        let job = Arc::new(Job {
            id: id.clone(),
            command: task.command,
            description: task.description,
            log,
            started: Instant::now(),
            pgid: None,
            extra: Mutex::new(task.data),
            status: Mutex::new(JobStatus::Running),
            read_offset: Mutex::new(0),
            reported: AtomicBool::new(false),
            kill: CancellationToken::new(),
            done: done_rx,
            notice: Mutex::new(None),
        });
        let mut body = body(job.kill.clone());
        let task_job = Arc::clone(&job);
        let table = self.downgrade();
        let handle = tokio::spawn(async move {
            let job = task_job;
            let (end, outcome) = tokio::select! {
                outcome = &mut body => {
                    let end = if outcome.is_ok() { JobEnd::Completed } else { JobEnd::Failed };
                    (end, Some(outcome))
                }
                _ = job.kill.cancelled() => {
                    let outcome = tokio::time::timeout(TASK_KILL_GRACE, &mut body).await.ok();
                    (JobEnd::Killed, outcome)
                }
            };
            let (text, data) = match outcome {
                Some(Ok(done)) | Some(Err(done)) => {
                    *job.notice.lock_or_recover() = done.notice;
                    (done.text, done.data)
                }
                None => (String::new(), Value::Null),
            };
            if let Value::Object(data) = data {
                if let Value::Object(extra) = &mut *job.extra.lock_or_recover() {
                    extra.extend(data);
                }
            }
            if !text.is_empty() {
                // A log that cannot be written leaves the job without output; its status
                // still says how it ended.
                let _ = std::fs::write(&job.log, text);
            }
            *job.status.lock_or_recover() = JobStatus::Finished {
                end,
                elapsed: job.started.elapsed(),
                leftovers: false,
            };
            let _ = done_tx.send(true);
            Self::notify_finish(&table);
        });
        {
            let mut tasks = self.inner.tasks.lock_or_recover();
            tasks.retain(|t| !t.is_finished());
            tasks.push(handle);
        }
        let data = job.data();
        self.inner.jobs.lock_or_recover().push(job);
        Ok((id, data))
    }

    /// Starts `spec` in the background and returns the tool output naming the job.
    pub(crate) fn start(&self, spec: JobSpec, spill: &SpillDir) -> Result<ToolOutput, ToolError> {
        self.check_capacity()?;
        // Before the id and the log: a job that cannot start takes neither.
        crate::process::check_program(&spec.plan)
            .map_err(|msg| ToolError::new(ToolErrorCode::Io, msg))?;
        let id = self.next_id("bash");
        let (file, log) = spill
            .create_file(&format!("{id}-output"))
            .map_err(|err| ToolError::io("cannot create the job log in", spill.path(), &err))?;
        let stderr = file
            .try_clone()
            .map_err(|err| ToolError::io("cannot share the job log", &log, &err))?;
        let mut command = group_command(&spec.plan, &spec.workdir);
        command.stdout(file).stderr(stderr);
        let mut child = spawn_child(command).map_err(|err| {
            ToolError::new(
                ToolErrorCode::Io,
                format!(
                    "cannot start {}: {err}",
                    spec.plan.program.to_string_lossy()
                ),
            )
        })?;
        let Some(pgid) = child.id().and_then(|p| Pid::try_from(p).ok()) else {
            return Err(ToolError::new(
                ToolErrorCode::Io,
                "the shell exited before it could be tracked",
            ));
        };
        let (done_tx, done_rx) = watch::channel(false);
        let job = Arc::new(Job {
            id: id.clone(),
            command: spec.command,
            description: spec.description,
            log: log.clone(),
            started: Instant::now(),
            pgid: Some(pgid),
            extra: Mutex::new(Value::Null),
            status: Mutex::new(JobStatus::Running),
            read_offset: Mutex::new(0),
            reported: AtomicBool::new(false),
            kill: CancellationToken::new(),
            done: done_rx,
            notice: Mutex::new(None),
        });
        // The task owns the group (killed on drop if the task is aborted) and holds only the
        // job, never the table, so the table can drop and kill everything.
        let task_job = Arc::clone(&job);
        let table = self.downgrade();
        // The plan lives as long as the job: a confinement may tie what the command runs in
        // to it (a prepared sandbox, docs/SECURITY.md "A prepared bubblewrap sandbox per
        // layout"; `CommandPlan`).
        let plan = spec.plan;
        let task = tokio::spawn(async move {
            let _plan = plan;
            let job = task_job;
            let mut group = ProcessGroup::new(pgid);
            let (end, leftovers) = tokio::select! {
                status = child.wait() => {
                    let leftovers = group.terminate(KILL_GRACE).await;
                    (job_end(status), leftovers)
                }
                _ = job.kill.cancelled() => {
                    group.terminate(KILL_GRACE).await;
                    let _reaped = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                    (JobEnd::Killed, false)
                }
            };
            group.mark_finished();
            *job.status.lock_or_recover() = JobStatus::Finished {
                end,
                elapsed: job.started.elapsed(),
                leftovers,
            };
            // Receivers may all be gone; the status above is what counts.
            let _ = done_tx.send(true);
            Self::notify_finish(&table);
        });
        {
            let mut tasks = self.inner.tasks.lock_or_recover();
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
        let data = job.data();
        self.inner.jobs.lock_or_recover().push(job);
        Ok(ToolOutput::text(format!(
            "Started background job {id}. Its output goes to {}. Read new output with job_output {{\"job_id\": \"{id}\"}} (add \"wait\": true to block until it ends), stop it with job_kill. You will be told when it finishes; keep working meanwhile.",
            log.display()
        ))
        .with_summary(format!("bash (background {id})"))
        .with_data(data))
    }
}

/// How a job's shell ended, from its wait status.
fn job_end(status: std::io::Result<std::process::ExitStatus>) -> JobEnd {
    match status {
        Ok(status) => {
            use crate::os::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => JobEnd::Exited(code),
                (None, Some(signal)) => JobEnd::Signaled(signal),
                (None, None) => JobEnd::Unknown("no exit code or signal".into()),
            }
        }
        Err(err) => JobEnd::Unknown(err.to_string()),
    }
}

/// The last `max_bytes` (and at most `max_lines` lines) of the output not yet read, and how
/// many unread bytes there are; `None` when the log cannot be read.
fn unread_tail(job: &Job, max_bytes: usize, max_lines: usize) -> Option<(String, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let offset = *job.read_offset.lock_or_recover();
    let mut file = std::fs::File::open(&job.log).ok()?;
    let len = file.metadata().ok()?.len();
    let unread = len.saturating_sub(offset);
    let start = len.saturating_sub(max_bytes as u64).max(offset);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(len - start).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end_matches('\n').lines().collect();
    let keep = lines.len().saturating_sub(max_lines);
    Some((lines[keep..].join("\n"), unread))
}
