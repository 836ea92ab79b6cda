//! `dsh run "task"`: one headless turn (README.md, "`dsh run`").
//!
//! stdout gets only the final assistant text (or, with `--json`, one JSON line per session
//! event and a final `result` line); progress goes to stderr. Exit status: 0 when the turn
//! completed, 1 otherwise (`dsh: <CODE>: <message>` on stderr), 130 after Ctrl-C.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use dsh_agent::TurnOutcome;
use dsh_llm::UsageTotals;
use dsh_protocol::{Interactions, Op, SessionControl, ViewEvent, ViewProjector};
use dsh_runtime::{
    Choices, Configuration, Resume, Runtime, RuntimeError, RuntimeOptions, SessionSpec, WarningSink,
};
use dsh_session::TurnEndReason;

use serde_json::Value;

use crate::headless::{json_prints, task_text, ColorChoice};
use crate::output_schema::OutputSchema;
use crate::progress::{envelope_json, json_line, ProgressPrinter};

// Arguments of `dsh run` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The task for the agent; `-` (or no argument with input piped in) reads it from standard
    /// input.
    pub(crate) prompt: Option<String>,
    // The session's provider, model, effort and preset.
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
    /// Colours in progress on stderr: auto (when stderr is a terminal and NO_COLOR is unset),
    /// always or never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub(crate) color: ColorChoice,
    /// Stream reasoning to stderr too.
    #[arg(long)]
    pub(crate) show_reasoning: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long, short)]
    pub(crate) verbose: bool,
    /// Print one JSON object per session event, then a `result` object, on stdout (streamed
    /// token deltas left out; the finished message carries the text).
    #[arg(long)]
    pub(crate) json: bool,
    /// With `--json`: print every streamed token delta too.
    #[arg(long, requires = "json")]
    pub(crate) json_deltas: bool,
    /// Add the turn to this session (id, id prefix or path).
    #[arg(long, conflicts_with = "continue_last")]
    pub(crate) resume: Option<String>,
    /// Add the turn to the latest session of this directory.
    #[arg(long = "continue")]
    pub(crate) continue_last: bool,
    /// Working directory of the session (default: the current directory).
    #[arg(long, short = 'C', visible_alias = "cd")]
    pub(crate) cwd: Option<PathBuf>,
    /// Store nothing: the session lives in a private temporary folder removed when the run
    /// ends (it cannot be resumed, listed or searched).
    #[arg(long, conflicts_with_all = ["resume", "continue_last"])]
    pub(crate) ephemeral: bool,
    /// End the turn when it has run this long (e.g. `90s`, `15m`, `2h`; plain numbers are
    /// seconds). Overrides `budget.max_wall_time_secs`.
    #[arg(long, value_parser = parse_wall_time)]
    pub(crate) max_wall_time: Option<Duration>,
    /// End the turn before its step N+1 (one step is one model call). Overrides
    /// `budget.max_steps`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_steps: Option<u64>,
    /// End the turn before the next step once it has spent this many US dollars (its own calls
    /// and its sub-agents', at the configured prices). Overrides `budget.max_cost_usd`.
    #[arg(long, value_parser = parse_cost)]
    pub(crate) max_cost_usd: Option<f64>,
    /// Plan mode (docs/agent.md, "Plan mode"): the agent explores read-only and presents a
    /// plan, which is printed on stdout; no file is changed.
    #[arg(long)]
    pub(crate) plan: bool,
    /// Add this text at the end of the system prompt (after its stable part, so the prompt
    /// cache still holds); `@FILE` reads it from a file. Logged with the system prompt.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub(crate) append_system_prompt: Option<String>,
    /// Offer the model only these tools (names, or patterns with `*` such as `mcp__github__*`;
    /// comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "TOOLS")]
    pub(crate) allowed_tools: Vec<String>,
    /// Never offer these tools (names or patterns, as `--allowed-tools`).
    #[arg(long, value_delimiter = ',', value_name = "TOOLS")]
    pub(crate) disallowed_tools: Vec<String>,
    /// Attach this image (PNG, JPEG, GIF or WebP, at most 20 MB) after the task; repeatable.
    /// `@shot.png` in the task attaches a workspace image too. Needs a model that takes images.
    #[arg(long = "image", short = 'i', value_name = "PATH")]
    pub(crate) images: Vec<PathBuf>,
    /// How long to wait, after the last turn, for background jobs that may still wake the
    /// agent (e.g. `30s`, `10m`; `0` waits not at all). Jobs still running then are stopped,
    /// whole process group, and reported (docs/run-json.md, "Background jobs").
    #[arg(long, value_parser = parse_jobs_wait, default_value = JOBS_WAIT_FLAG_DEFAULT)]
    pub(crate) jobs_wait: Duration,
    /// The final answer must be one JSON value valid under this JSON Schema (a file): the
    /// model is told the schema, an invalid answer is sent back once, and the value is printed
    /// (and is the `--json` result line's `structuredOutput`); still invalid: exit 1,
    /// `OUTPUT_SCHEMA`.
    #[arg(long, value_name = "FILE", conflicts_with = "plan")]
    pub(crate) output_schema: Option<PathBuf>,
    /// `stream-json`: read user messages as JSON lines from stdin, one turn each, in one
    /// session, and answer with `--json` lines and a `result` line per message
    /// (docs/run-json.md, "Streamed input"). Implies `--json`; takes no task argument.
    #[arg(long, value_enum, default_value_t = InputFormat::Text,
          conflicts_with_all = ["prompt", "plan", "images"])]
    pub(crate) input_format: InputFormat,
    /// Run in a new git worktree of this repository, on a new branch `dsh/NAME` (a name is
    /// made when none is given), beside the repository (docs/worktrees.md).
    #[arg(long, value_name = "NAME", num_args = 0..=1, require_equals = true,
          default_missing_value = "", conflicts_with_all = ["resume", "continue_last"])]
    pub(crate) worktree: Option<String>,
}

/// Where `dsh run` takes its user messages from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InputFormat {
    /// The task argument (or stdin's whole text).
    Text,
    /// One JSON user message per stdin line.
    StreamJson,
}

/// `--jobs-wait`'s default, as written.
const JOBS_WAIT_FLAG_DEFAULT: &str = "5m";

/// How long a headless run waits for background jobs by default: `--jobs-wait`'s default
/// (a test holds the two together).
pub(crate) const DEFAULT_JOBS_WAIT: Duration = Duration::from_secs(300);

fn parse_jobs_wait(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    dsh_agent::parse_duration(text)
}

fn parse_wall_time(text: &str) -> Result<Duration, String> {
    dsh_agent::parse_duration(text)
}

/// `--max-cost-usd` (of `dsh run` and `dsh review`): a non-negative amount of US dollars.
pub(crate) fn parse_cost(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd >= 0.0 => Ok(usd),
        _ => Err(format!(
            "`{text}` is not an amount of US dollars: write e.g. 0.50"
        )),
    }
}

/// Version of the `--json` result line's schema (docs/run-json.md). Raised when a field changes
/// meaning or goes away; new fields do not raise it.
pub(crate) const RESULT_SCHEMA_VERSION: u32 = 1;

/// A failure worth a `dsh: CODE: message` line and exit status 1.
#[derive(Debug)]
pub(crate) struct UserError {
    pub(crate) code: String,
    pub(crate) message: String,
}

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for UserError {}

/// A failure the user fixes, reported as `dsh: CODE: message` (exit status 1).
pub(crate) fn user_error(code: &str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UserError {
        code: code.to_string(),
        message: message.into(),
    })
}

/// The async runtime of every command that runs sessions: two workers (dsh's own work is I/O;
/// the machines it runs on in CI have two cores).
pub(crate) fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A runtime error as the CLI reports it: the failures a user fixes as `dsh: CODE: message`,
/// the others with their causes.
pub(crate) fn runtime_error(err: RuntimeError) -> anyhow::Error {
    if err.is_user_error() {
        user_error(err.code(), err.to_string())
    } else {
        anyhow::Error::new(err)
    }
}

/// The process's [`Runtime`] (docs/decisions/0006-composition-root.md): `$DSH_HOME`, the
/// working directory (`cwd`, else the current one) and the flags; warnings go to stderr.
pub(crate) fn runtime(cwd: Option<&Path>, choices: Choices) -> anyhow::Result<Runtime> {
    let home = crate::home::dsh_home()?;
    let cwd = match cwd {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    // Warnings quote configuration and repository text: controls are shown, not obeyed.
    let warnings: WarningSink =
        Arc::new(|line: &str| eprintln!("dsh: {}", dsh_tools::printable(line)));
    Runtime::new(RuntimeOptions {
        home,
        cwd,
        choices,
        warnings,
    })
    .map_err(runtime_error)
}

impl RunArgs {
    /// The arguments of a run another command drives (`dsh mcp-server`, `dsh review`): no task
    /// argument, nothing printed by the run itself, every default of `dsh run`.
    pub(crate) fn driven() -> RunArgs {
        RunArgs {
            prompt: None,
            session: crate::flags::SessionFlags::default(),
            color: crate::headless::ColorChoice::Never,
            show_reasoning: false,
            verbose: false,
            json: false,
            json_deltas: false,
            resume: None,
            continue_last: false,
            cwd: None,
            ephemeral: false,
            max_wall_time: None,
            max_steps: None,
            max_cost_usd: None,
            plan: false,
            append_system_prompt: None,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            images: Vec::new(),
            jobs_wait: DEFAULT_JOBS_WAIT,
            output_schema: None,
            input_format: InputFormat::Text,
            worktree: None,
        }
    }

    fn resume(&self) -> Resume {
        match (&self.resume, self.continue_last) {
            (Some(key), _) => Resume::Id(key.clone()),
            (None, true) => Resume::Latest,
            (None, false) => Resume::New,
        }
    }
}

/// The session store of `--ephemeral`: a private (0700) folder under the system's temporary
/// folder, removed when this is dropped.
struct EphemeralStore {
    dir: PathBuf,
}

impl EphemeralStore {
    fn create() -> anyhow::Result<EphemeralStore> {
        let dir = std::env::temp_dir().join(format!("dsh-ephemeral-{}", uuid::Uuid::new_v4()));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(|err| {
            user_error(
                "EPHEMERAL",
                format!("cannot create a temporary folder for the session: {err}"),
            )
        })?;
        Ok(EphemeralStore { dir })
    }

    fn store(&self) -> Arc<dyn dsh_session::SessionStore + Send + Sync> {
        Arc::new(dsh_session::JsonlStore::new(&self.dir))
    }
}

impl Drop for EphemeralStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Largest `--append-system-prompt @FILE` read.
const MAX_APPENDED_PROMPT: u64 = 256 * 1024;

/// The text of `--append-system-prompt`: as given, or `@FILE`'s content (a regular file of at
/// most 256 KiB); a file that cannot be read fails the run with `APPEND_SYSTEM_PROMPT`.
fn appended_prompt(given: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let Some(path) = given.strip_prefix('@') else {
        return Ok(Some(given.to_string()));
    };
    crate::home::read_small_file(Path::new(path), MAX_APPENDED_PROMPT)
        .map(Some)
        .map_err(|why| user_error("APPEND_SYSTEM_PROMPT", format!("{path}: {why}")))
}

/// The images of the task: each `--image` (read where the file gate lets dsh read), then each
/// `@image` mention of the task (in the working directory), as image blocks; the first that
/// cannot be attached fails the run with `IMAGE`, saying why, and so do images with `--plan`;
/// images for a model the table says takes none fail with `UNSUPPORTED_CONTENT`.
fn task_images(
    args: &RunArgs,
    prompt: &str,
    setup: &dsh_runtime::Configuration,
    runtime: &dsh_runtime::Runtime,
) -> anyhow::Result<Vec<dsh_llm::ContentBlock>> {
    let cwd = setup.cwd.as_path();
    let mentioned = dsh_tui::mentions::mentioned_paths(prompt)
        .into_iter()
        .map(PathBuf::from)
        .filter(|path| dsh_tui::mentions::is_image(path))
        .map(|path| (cwd.join(path), true));
    let given = args.images.iter().map(|path| (cwd.join(path), false));
    let workspace = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let gate = dsh_tools::GatePolicy::new(&workspace);
    let mut images: Vec<dsh_llm::ContentBlock> = Vec::new();
    for (path, mentioned) in given.chain(mentioned) {
        let attachment = dsh_tui::attach::load(&gate, &path, mentioned)
            .map_err(|reason| user_error("IMAGE", format!("cannot attach {reason}")))?;
        if images.len() >= dsh_tui::attach::MAX_IMAGES {
            return Err(user_error(
                "IMAGE",
                format!(
                    "a task takes at most {} images",
                    dsh_tui::attach::MAX_IMAGES
                ),
            ));
        }
        images.push(dsh_llm::ContentBlock::Image { attachment });
    }
    if args.plan && !images.is_empty() {
        return Err(user_error(
            "IMAGE",
            "--plan takes a task in words only: leave the images out, or run without --plan",
        ));
    }
    let model = &setup.call.model;
    let info = dsh_runtime::SessionFactory::model_info(runtime, model);
    if !images.is_empty() && info.is_some_and(|info| !dsh_llm::takes_images(&info)) {
        return Err(user_error(
            "UNSUPPORTED_CONTENT",
            format!(
                "model {model} takes no images; choose one that does with --model (`dsh models` \
                 lists them; e.g. deepseek-v4-flash-vision-exp) or leave the image out"
            ),
        ));
    }
    Ok(images)
}

/// Flags override `[budget]` one limit at a time (docs/run-json.md, "Budgets").
fn apply_budget(agent: &mut dsh_agent::Agent, args: &RunArgs) {
    let mut budget = agent.budget();
    budget.max_steps = args.max_steps.or(budget.max_steps);
    budget.max_wall_time = args.max_wall_time.or(budget.max_wall_time);
    budget.max_cost_usd = args.max_cost_usd.or(budget.max_cost_usd);
    agent.set_budget(budget);
}

/// The session's operations, with the headless broker as its approver and asker: nobody can
/// answer, so approvals are refused (the model is told how to stay within its preset) and
/// questions answered "unavailable" (docs/protocol.md, "Approvals and questions").
fn headless_control(agent: &mut dsh_agent::Agent, setup: &Configuration) -> SessionControl {
    let broker = Interactions::headless();
    agent.set_approver(Arc::new(broker.clone()));
    agent.set_asker(Arc::new(broker.clone()));
    // `dsh run` never switches the model, so it needs no model table.
    SessionControl::new(
        agent.handle(),
        broker,
        agent.call().clone(),
        Arc::new(|_: &str| None),
        setup.cwd.clone(),
    )
}

/// Queues the task: as `/plan <task>` with `--plan` (plan mode is on since the session
/// opened, read-only from the first step; docs/agent.md, "Plan mode"), else as a prompt.
fn queue_task(
    control: &SessionControl,
    plan: bool,
    prompt: String,
    images: Vec<dsh_llm::ContentBlock>,
) -> anyhow::Result<()> {
    let op = if plan {
        Op::Command {
            name: dsh_agent::PLAN_COMMAND.to_string(),
            arguments: prompt,
        }
    } else {
        let mut message = dsh_agent::new_user_message(prompt);
        message.content.extend(images);
        Op::Prompt(message)
    };
    let code = if plan { "PLAN_MODE" } else { "PROMPT" };
    control
        .submit(op)
        .map(drop)
        .map_err(|err| user_error(code, err.message))
}

/// Runs `dsh run`.
pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = async_runtime()?;
    // The run is a task on a worker, not the future `block_on` drives on this thread: the
    // reply's frames then wake the loop on the worker that polls the connection instead of
    // crossing to the main thread for each (docs/PERFORMANCE.md, "Step 1: fixed costs").
    runtime.block_on(async {
        match tokio::spawn(run_async(args)).await {
            Ok(outcome) => outcome,
            Err(joined) if joined.is_panic() => std::panic::resume_unwind(joined.into_panic()),
            Err(joined) => Err(anyhow::anyhow!("the run was stopped: {joined}")),
        }
    })
}

/// The tool filter of `--allowed-tools` / `--disallowed-tools`; `None` when both are empty.
pub(crate) fn tool_filter(
    allowed: &[String],
    disallowed: &[String],
) -> Option<dsh_agent::ToolFilter> {
    (!allowed.is_empty() || !disallowed.is_empty()).then(|| dsh_agent::ToolFilter {
        allowed: trimmed(allowed),
        disallowed: trimmed(disallowed),
    })
}

/// The non-empty words of `list`, trimmed.
fn trimmed(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|word| word.trim().to_string())
        .filter(|word| !word.is_empty())
        .collect()
}

/// The session `args` ask for; `schema`'s instructions follow `--append-system-prompt`'s text.
fn session_spec(args: &RunArgs, schema: Option<&OutputSchema>) -> anyhow::Result<SessionSpec> {
    let appended = appended_prompt(args.append_system_prompt.as_deref())?;
    let appended = match (appended, schema.map(OutputSchema::instructions)) {
        (Some(text), Some(format)) => Some(format!("{}\n\n{format}", text.trim_end())),
        (text, format) => text.or(format),
    };
    Ok(SessionSpec {
        resume: args.resume(),
        // Plan mode is in force before anything of the session starts (its MCP servers).
        plan: args.plan,
        append_system_prompt: appended,
        tool_filter: tool_filter(&args.allowed_tools, &args.disallowed_tools),
        ..SessionSpec::default()
    })
}

/// What watches a headless run as it goes (the progress printer of `dsh run`, the progress
/// notifications of `dsh mcp-server`): the session's events from its opening on, the projector
/// that makes view events of them, and the lines to print after the events logged before them
/// (a streamed run's `result` and `error` lines). Once `finished` is cancelled every event of
/// the run is in `events`: the watcher drains them and stops.
pub(crate) struct Watch {
    /// Every secret dsh loaded, never to be shown.
    pub(crate) secrets: dsh_tools::SecretRedactor,
    /// The session's id.
    pub(crate) session_id: String,
    /// View events of the session's events, continuing a resumed session's totals.
    pub(crate) projector: ViewProjector,
    /// The session's events as they are logged.
    pub(crate) events: tokio::sync::broadcast::Receiver<Arc<dsh_session::Envelope>>,
    /// Lines to print in order with the events.
    pub(crate) lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
    /// Cancelled once the run is over.
    pub(crate) finished: tokio_util::sync::CancellationToken,
}

/// Where a headless run's user messages come from.
pub(crate) enum HeadlessInput {
    /// One task (with `@image` mentions and `--image`s).
    Task(String),
    /// `--input-format stream-json`: JSON lines on stdin, each answered in turn.
    Stream,
}

/// How a headless run ended: what `dsh run` prints and `dsh mcp-server` answers.
pub(crate) struct HeadlessEnd {
    /// The configuration the session ran with (its secrets, its prices).
    pub(crate) setup: Arc<Configuration>,
    /// The session's id.
    pub(crate) session_id: String,
    /// The last message's turns, summed ([`run_outcome`]); `None` when no turn ran.
    pub(crate) outcome: Option<TurnOutcome>,
    /// `--output-schema` and its verdict on the last answer, when it was checked.
    pub(crate) structured: Option<(OutputSchema, Result<Value, String>)>,
    /// Background jobs still running at the end, stopped.
    pub(crate) stopped: Vec<dsh_tools::StoppedJob>,
    /// How many user messages were answered.
    pub(crate) answered: usize,
}

/// One headless run, the one `dsh run` and `dsh mcp-server` share: opens the session `spec`
/// asks for in `runtime` (new or resumed), with the headless broker as approver and asker,
/// answers `input` (with `schema`, an invalid final answer is sent back once), and drives the
/// agent until it settles (background jobs waited for at most `args.jobs_wait`). `watch` is
/// started once the session is open, before anything is queued. Cancelling `cancel` cancels
/// the running turn (`Op::Cancel`), the wait for jobs and the reading of input.
pub(crate) async fn run_headless(
    runtime: &Runtime,
    spec: &SessionSpec,
    args: &RunArgs,
    schema: Option<OutputSchema>,
    input: HeadlessInput,
    cancel: &tokio_util::sync::CancellationToken,
    watch: impl FnOnce(Watch) -> tokio::task::JoinHandle<()>,
) -> anyhow::Result<HeadlessEnd> {
    let setup = runtime.configuration(spec).map_err(runtime_error)?;
    // Before a session opens.
    let task = match input {
        HeadlessInput::Task(prompt) => {
            let images = task_images(args, &prompt, &setup, runtime)?;
            Some((prompt, images))
        }
        HeadlessInput::Stream => None,
    };
    let streamed = task.is_none();
    // `--ephemeral`: a store of its own, removed with this guard whatever way the run ends.
    let ephemeral = args.ephemeral.then(EphemeralStore::create).transpose()?;
    let store = match &ephemeral {
        Some(ephemeral) => ephemeral.store(),
        None => runtime.store(),
    };
    let mut agent = runtime
        .open(spec, store.as_ref())
        .map_err(runtime_error)?
        .agent;
    apply_budget(&mut agent, args);
    let handle = agent.handle();
    let session_id = handle.session_id();
    let control = headless_control(&mut agent, &setup);

    let finished = tokio_util::sync::CancellationToken::new();
    let (lines, printed_lines) = tokio::sync::mpsc::unbounded_channel();
    let watcher = watch(Watch {
        secrets: setup.secrets().clone(),
        session_id: session_id.clone(),
        projector: live_projector(&agent, spec, store.as_ref(), &session_id),
        events: handle.subscribe(),
        lines: printed_lines,
        finished: finished.clone(),
    });
    if let Some((prompt, images)) = task {
        if let Err(err) = queue_task(&control, args.plan, prompt, images) {
            finished.cancel();
            return Err(err);
        }
    }

    // Stops waiting for background jobs' wake-ups (docs/agent.md, "Wake-ups") and for input.
    let settle_stop = tokio_util::sync::CancellationToken::new();
    let canceller = cancel_when(cancel, &control, &settle_stop);
    let mut turns = Turns {
        agent,
        control,
        stop: settle_stop,
        schema,
    };
    // A finished background job wakes the agent (at most 3 turns in a row); a headless run
    // waits for the jobs it started while they can still do so, at most `jobs_wait` after the
    // last turn; what still runs then is stopped and reported, so a run always ends.
    let answered = match streamed {
        false => turns
            .answer(args.jobs_wait)
            .await
            .map(|answer| vec![answer]),
        true => {
            let printed = ResultLines {
                args,
                setup: &setup,
                session_id: &session_id,
                lines: &lines,
            };
            stream_turns(&mut turns, &printed, runtime, &setup).await
        }
    };
    let stopped = turns
        .agent
        .stop_background_jobs("the headless run ended")
        .await
        .unwrap_or_default();
    canceller.abort();
    let schema = turns.schema.take();
    drop(turns);
    drop(handle);
    if streamed && !stopped.is_empty() {
        let line = serde_json::json!({
            "type": "jobs_stopped",
            "sessionId": session_id,
            "jobs": stopped,
        });
        let _ = lines.send(line);
    }
    // Every event of the run is in the channel by now: the watcher drains it and stops.
    finished.cancel();
    // It stops by itself once it printed what is buffered; the limit only guards against a
    // stdout that no longer drains. Under load printing the last lines can take seconds, and
    // a shorter limit cut them (a full test run on a busy machine lost `error` and `result`
    // lines of a streamed run).
    let _ = tokio::time::timeout(WATCHER_DRAIN_LIMIT, watcher).await;

    let mut answers = answered?;
    let count = answers.len();
    let (mut outcome, checked) = match answers.pop() {
        Some(last) => (run_outcome(last.outcomes), last.structured),
        None => (None, None),
    };
    if let (true, Some(outcome)) = (args.plan, &mut outcome) {
        presented_plan(outcome, store.as_ref(), &session_id);
    }
    Ok(HeadlessEnd {
        setup,
        session_id,
        outcome,
        structured: schema.zip(checked),
        stopped,
        answered: count,
    })
}

/// The plan, not the model's closing words, is what `dsh run --plan` answers: the last plan
/// the session's log holds replaces the outcome's text.
fn presented_plan(
    outcome: &mut TurnOutcome,
    store: &(dyn dsh_session::SessionStore + Send + Sync),
    session_id: &str,
) {
    let events = store
        .load(session_id)
        .map(|log| log.events)
        .unwrap_or_default();
    if let Some(plan) = dsh_agent::last_presented_plan(&events) {
        outcome.final_text = plan;
    }
}

/// How long a headless run waits for its watcher to print what is still buffered.
const WATCHER_DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Once `cancel` is cancelled: stops the waits (`stop`) and cancels the turn. A cancel that
/// comes before the turn has started finds none running, so it is repeated until the run is
/// over (the task is aborted): the turn is cancelled as soon as it starts.
fn cancel_when(
    cancel: &tokio_util::sync::CancellationToken,
    control: &SessionControl,
    stop: &tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let control = control.clone();
    let cancel = cancel.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        cancel.cancelled().await;
        stop.cancel();
        loop {
            let _ = control.submit(Op::Cancel { keep_queued: false });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

async fn run_async(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let streamed = args.input_format == InputFormat::StreamJson;
    // A program reads the answers: the output is the `--json` lines.
    args.json |= streamed;
    // The task first: a missing one is refused before any configuration is read.
    let input = match streamed {
        true => HeadlessInput::Stream,
        false => HeadlessInput::Task(
            task_text(args.prompt.as_deref()).map_err(|msg| user_error("NO_TASK", msg))?,
        ),
    };
    let schema = args
        .output_schema
        .as_deref()
        .map(crate::output_schema::load)
        .transpose()?;
    if let Some(name) = &args.worktree {
        let from = match &args.cwd {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let home = crate::home::dsh_home()?;
        let made = crate::worktree::create(&from, Some(name.as_str()), &home)?;
        args.cwd = Some(made.path);
    }
    let runtime = runtime(args.cwd.as_deref(), args.session.choices())?;
    let spec = session_spec(&args, schema.as_ref())?;

    // Ctrl-C cancels the turn (which is then logged as aborted); a second Ctrl-C exits at once.
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cancel = tokio_util::sync::CancellationToken::new();
    let signal_task = tokio::spawn({
        let interrupted = Arc::clone(&interrupted);
        let cancel = cancel.clone();
        async move {
            if ctrl_c_or_terminate().await {
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("\ndsh: cancelling (press Ctrl-C again to quit at once)");
                cancel.cancel();
                if ctrl_c_or_terminate().await {
                    std::process::exit(130);
                }
            }
        }
    });
    let end = run_headless(&runtime, &spec, &args, schema, input, &cancel, |watch| {
        spawn_printer(&args, watch)
    })
    .await;
    signal_task.abort();
    let end = end?;
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    conclude(&args, &end, interrupted)
}

/// Reports the end of the run: stopped jobs on stderr, the answer (unless streamed, which
/// printed each as it came) and the exit status of the last answer.
fn conclude(args: &RunArgs, end: &HeadlessEnd, interrupted: bool) -> anyhow::Result<ExitCode> {
    let when = if interrupted {
        "when the run was cancelled".to_string()
    } else {
        format!(
            "{}s after the last turn; raise --jobs-wait to let jobs finish",
            args.jobs_wait.as_secs()
        )
    };
    report_stopped_jobs(&end.setup, &end.stopped, &when);
    let streamed = args.input_format == InputFormat::StreamJson;
    if streamed && end.answered == 0 {
        return Err(user_error(
            "NO_TASK",
            "stdin held no user message; send lines such as {\"type\": \"user\", \"content\": \"...\"}",
        ));
    }
    let Some(outcome) = &end.outcome else {
        return Err(user_error("UNKNOWN", "no turn ran"));
    };
    if !streamed {
        // A streamed run printed each answer's result line as it came.
        print_result(args, end, outcome, interrupted);
    }
    match &outcome.reason {
        TurnEndReason::Aborted { .. } if interrupted => {
            eprintln!(
                "dsh: ABORTED: the turn was cancelled; the session was saved ({})",
                end.session_id
            );
            Ok(ExitCode::from(130))
        }
        reason => match (turn_failure(&end.setup, reason), &end.structured) {
            (Some(failure), _) => Err(anyhow::Error::new(failure)),
            (None, Some((schema, Err(problem)))) => Err(crate::output_schema::failure(
                schema,
                problem,
                &end.session_id,
            )),
            (None, _) => Ok(ExitCode::SUCCESS),
        },
    }
}

/// The view projector of the run's live events; a resumed session's continue its stored log:
/// totals and the model shown go on from it.
fn live_projector(
    agent: &dsh_agent::Agent,
    spec: &SessionSpec,
    store: &(dyn dsh_session::SessionStore + Send + Sync),
    session_id: &str,
) -> ViewProjector {
    let tools = agent.handle().tools();
    let mut projector = ViewProjector::new(
        dsh_agent::Presenter::new(Some(&tools)),
        agent.prices().clone(),
    );
    if !matches!(spec.resume, Resume::New) {
        if let Ok(log) = store.load(session_id) {
            projector.continue_after(&log.events);
        }
    }
    projector
}

/// The session's agent and what its turns need.
struct Turns {
    agent: dsh_agent::Agent,
    control: SessionControl,
    /// Cancelled by Ctrl-C: stops waiting for wake-ups and for input.
    stop: tokio_util::sync::CancellationToken,
    schema: Option<OutputSchema>,
}

/// What one user message's turns came to: their outcomes and, with `--output-schema`, the
/// verdict on the final answer.
struct Answer {
    outcomes: Vec<TurnOutcome>,
    structured: Option<Result<Value, String>>,
}

impl Turns {
    /// Runs the queued input's turns, and the turns background jobs wake within `wait`; with
    /// `--output-schema`, sends an invalid final answer back once and runs that turn too.
    async fn answer(&mut self, wait: Duration) -> anyhow::Result<Answer> {
        let mut outcomes = self
            .agent
            .run_until_settled_within(&self.stop, Some(wait))
            .await?;
        let Some(schema) = &self.schema else {
            return Ok(Answer {
                outcomes,
                structured: None,
            });
        };
        let structured = match schema_check(schema, &outcomes) {
            Some(Err(problem)) if !self.stop.is_cancelled() => {
                queue_task(
                    &self.control,
                    false,
                    schema.correction(&problem),
                    Vec::new(),
                )?;
                let corrected = self
                    .agent
                    .run_until_settled_within(&self.stop, Some(wait))
                    .await?;
                outcomes.extend(corrected);
                schema_check(schema, &outcomes)
            }
            checked => checked,
        };
        Ok(Answer {
            outcomes,
            structured,
        })
    }
}

/// Where a streamed run prints each answer's `result` line: through the printer, after the
/// event lines before it.
struct ResultLines<'a> {
    args: &'a RunArgs,
    setup: &'a Configuration,
    session_id: &'a str,
    lines: &'a tokio::sync::mpsc::UnboundedSender<Value>,
}

impl ResultLines<'_> {
    fn answered(&self, answer: &Answer) {
        let Some(outcome) = run_outcome(answer.outcomes.clone()) else {
            return;
        };
        let checked = answer.structured.as_ref();
        let line = result_value(self.session_id, self.setup, &outcome, &[], checked);
        let _ = self.lines.send(line);
    }

    /// An input line that could not be used: said on stdout (the program reads it there) and
    /// on stderr; the run goes on with the next line.
    fn refused(&self, number: u64, problem: &str) {
        let problem = shown(self.setup, problem);
        eprintln!("dsh: BAD_INPUT: line {number}: {problem}");
        let _ = self.lines.send(serde_json::json!({
            "type": "error",
            "sessionId": self.session_id,
            "code": "BAD_INPUT",
            "line": number,
            "message": problem,
        }));
    }
}

/// Reads and drops the rest of a line, a buffer at a time (a line over the limit may be of
/// any length).
async fn skip_line(input: &mut (impl tokio::io::AsyncBufRead + Unpin)) {
    use tokio::io::AsyncBufReadExt as _;
    loop {
        let (used, ended) = match input.fill_buf().await {
            Ok([]) | Err(_) => return,
            Ok(buffer) => match buffer.iter().position(|b| *b == b'\n') {
                Some(at) => (at + 1, true),
                None => (buffer.len(), false),
            },
        };
        input.consume(used);
        if ended {
            return;
        }
    }
}

/// `--input-format stream-json`: each stdin line is a user message, answered in order (the
/// next line is read once the previous one's turns ended), each answer followed by its
/// `result` line; at the end of the input, the turns background jobs wake within
/// `--jobs-wait` get one `result` line more. Returns every answer.
async fn stream_turns(
    turns: &mut Turns,
    printed: &ResultLines<'_>,
    runtime: &Runtime,
    setup: &Configuration,
) -> anyhow::Result<Vec<Answer>> {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
    let workspace = std::fs::canonicalize(&setup.cwd).unwrap_or_else(|_| setup.cwd.clone());
    let gate = dsh_tools::GatePolicy::new(&workspace);
    let model = setup.call.model.clone();
    let text_only = dsh_runtime::SessionFactory::model_info(runtime, &model)
        .is_some_and(|info| !dsh_llm::takes_images(&info));
    let context = crate::stream_input::InputContext {
        cwd: &setup.cwd,
        gate: &gate,
        text_only_model: text_only.then_some(model.as_str()),
    };
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    let mut answers = Vec::new();
    let mut number = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut bounded = (&mut input).take(crate::stream_input::MAX_LINE_BYTES as u64 + 1);
        let read = tokio::select! {
            read = bounded.read_until(b'\n', &mut line) => read,
            () = turns.stop.cancelled() => break,
        };
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => return Err(anyhow::Error::new(err).context("cannot read stdin")),
        }
        number += 1;
        if line.len() > crate::stream_input::MAX_LINE_BYTES {
            printed.refused(number, "the line is longer than 32 MiB");
            skip_line(&mut input).await;
            continue;
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            printed.refused(number, "the line is not UTF-8");
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let message = match crate::stream_input::user_message(text.trim(), &context) {
            Ok(message) => message,
            Err(problem) => {
                printed.refused(number, &problem);
                continue;
            }
        };
        if let Err(err) = turns.control.submit(Op::Prompt(message)) {
            printed.refused(number, &err.message);
            continue;
        }
        let answer = turns.answer(Duration::ZERO).await?;
        printed.answered(&answer);
        answers.push(answer);
    }
    let woken = turns
        .agent
        .run_until_settled_within(&turns.stop, Some(printed.args.jobs_wait))
        .await?;
    if !woken.is_empty() {
        let answer = Answer {
            outcomes: woken,
            structured: None,
        };
        printed.answered(&answer);
        answers.push(answer);
    }
    Ok(answers)
}

/// The final answer of the last turn checked against `schema`, when that turn completed
/// (a turn that failed is reported as its failure, not as a wrong answer).
fn schema_check(schema: &OutputSchema, outcomes: &[TurnOutcome]) -> Option<Result<Value, String>> {
    outcomes
        .last()
        .filter(|outcome| matches!(outcome.reason, TurnEndReason::Completed))
        .map(|outcome| schema.check(&outcome.final_text))
}

/// What the run's turns add up to: the last turn's end and answer, with the usage, cost and
/// cache reports of every turn this run started (the task's, a background job's wake-ups, an
/// `--output-schema` correction), so the result line counts every billed call of the run.
fn run_outcome(outcomes: Vec<TurnOutcome>) -> Option<TurnOutcome> {
    let mut outcomes = outcomes.into_iter();
    let mut total = outcomes.next()?;
    for later in outcomes {
        total.usage.merge(&later.usage);
        for (model, usage) in &later.usage_by_model {
            total
                .usage_by_model
                .entry(model.clone())
                .or_default()
                .merge(usage);
        }
        total.cache_reports.extend(later.cache_reports);
        total.turn = later.turn;
        total.reason = later.reason;
        total.final_text = later.final_text;
    }
    Some(total)
}

/// Waits for Ctrl-C, or for `SIGTERM` / `SIGHUP` on Unix: each ends the run the way Ctrl-C
/// does (the turn is cancelled and logged, background jobs are stopped, whole process group),
/// so a supervisor's `kill` leaves nothing running. False when no handler could be installed.
async fn ctrl_c_or_terminate() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return tokio::signal::ctrl_c().await.is_ok();
        };
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.is_ok(),
            _ = term.recv() => true,
            _ = hup.recv() => true,
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

/// One stderr line per background job stopped at the end of the run.
fn report_stopped_jobs(setup: &Configuration, stopped: &[dsh_tools::StoppedJob], when: &str) {
    for job in stopped {
        let what = if job.command.is_empty() {
            job.description.clone()
        } else {
            job.command.clone()
        };
        eprintln!(
            "dsh: stopped background job {} ({}), still running {when}",
            job.id,
            shown(setup, &what),
        );
    }
}

/// Prints the run's events as they are logged: JSON lines on stdout (`--json`) or progress on
/// stderr. Once `finished` is cancelled it prints what is still buffered and stops.
pub(crate) fn spawn_printer(args: &RunArgs, watch: Watch) -> tokio::task::JoinHandle<()> {
    let Watch {
        secrets,
        session_id,
        mut projector,
        mut events,
        mut lines,
        finished,
    } = watch;
    let show_progress = !args.json && (args.verbose || std::io::stderr().is_terminal());
    let json = args.json;
    let show_reasoning = args.show_reasoning;
    let json_deltas = args.json_deltas;
    let color = args.color.for_stderr();
    tokio::spawn(async move {
        let mut progress = ProgressPrinter::new(show_reasoning, color, secrets.clone());
        let mut stdout = std::io::stdout();
        let mut print = |envelope: &dsh_session::Envelope| {
            let view = projector.project(envelope);
            if json {
                if json_prints(envelope, json_deltas) {
                    let value = serde_json::json!({
                        "type": "session_event",
                        "sessionId": session_id,
                        "event": envelope_json(envelope),
                    });
                    let _ = writeln!(stdout, "{}", json_line(value, &secrets));
                }
                for event in view.iter().filter(|e| json_deltas || !is_delta(e)) {
                    let value = serde_json::json!({
                        "type": "view",
                        "sessionId": session_id,
                        "event": event,
                    });
                    let _ = writeln!(stdout, "{}", json_line(value, &secrets));
                }
            } else if show_progress {
                for event in &view {
                    progress.print(event);
                }
            }
        };
        let print_line = |line: Value| {
            let _ = writeln!(std::io::stdout(), "{}", json_line(line, &secrets));
        };
        loop {
            let received = tokio::select! {
                received = events.recv() => received,
                Some(line) = lines.recv() => {
                    // After the events logged before it was sent.
                    while let Ok(envelope) = events.try_recv() {
                        print(&envelope);
                    }
                    print_line(line);
                    continue;
                }
                () = finished.cancelled() => {
                    while let Ok(envelope) = events.try_recv() {
                        print(&envelope);
                    }
                    while let Ok(line) = lines.try_recv() {
                        print_line(line);
                    }
                    break;
                }
            };
            match received {
                Ok(envelope) => print(&envelope),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    if show_progress {
                        eprintln!("dsh: progress display skipped {n} events");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    })
}

/// A streamed piece of text or reasoning (printed in `--json` only with `--json-deltas`).
fn is_delta(event: &ViewEvent) -> bool {
    matches!(
        event,
        ViewEvent::TextDelta { .. } | ViewEvent::ReasoningDelta { .. }
    )
}

/// The `--json` result line of `outcome` (docs/run-json.md, "The result line"), the object
/// `dsh mcp-server` answers with too.
pub(crate) fn result_json(end: &HeadlessEnd, outcome: &TurnOutcome) -> Value {
    let checked = end.structured.as_ref().map(|(_, checked)| checked);
    result_value(&end.session_id, &end.setup, outcome, &end.stopped, checked)
}

/// [`result_json`] of its parts; `checked` is `--output-schema`'s verdict, when there was one.
fn result_value(
    session_id: &str,
    setup: &Configuration,
    outcome: &TurnOutcome,
    stopped_jobs: &[dsh_tools::StoppedJob],
    checked: Option<&Result<Value, String>>,
) -> Value {
    // Every billed call of the turns, each model at its price (docs/sessions.md, "Cost");
    // null when a model with usage has no price.
    let cost = setup.prices.cost(&outcome.usage_by_model);
    let mut line = serde_json::json!({
        "type": "result",
        "schemaVersion": RESULT_SCHEMA_VERSION,
        "sessionId": session_id,
        "output": outcome.final_text,
        "stop": outcome.reason.kind(),
        "budget": dsh_agent::budget_of(&outcome.reason),
        "turn": outcome.turn,
        "reason": outcome.reason,
        "usage": usage_json(&outcome.usage),
        "costUsd": cost,
        "cache": cache_json(&outcome.cache_reports),
        "stoppedJobs": stopped_jobs,
    });
    if let Some(checked) = checked {
        line["structuredOutput"] = checked.as_ref().ok().cloned().unwrap_or(Value::Null);
        if let Err(problem) = checked {
            line["schemaError"] = Value::String(problem.clone());
        }
    }
    line
}

/// Why a turn that did not complete failed, as `CODE` and a message that may be shown
/// (secrets replaced, controls as text); `None` for a completed turn.
pub(crate) fn turn_failure(setup: &Configuration, reason: &TurnEndReason) -> Option<UserError> {
    let (code, message) = match reason {
        TurnEndReason::Completed => return None,
        TurnEndReason::Aborted { .. } => ("ABORTED".to_string(), "the turn was cancelled".into()),
        TurnEndReason::MaxTokens => (
            "MAX_TOKENS".to_string(),
            "the reply hit the output token limit; its tool calls were not run. Continue with \
             `dsh run --continue \"...\"` or raise the limit."
                .to_string(),
        ),
        TurnEndReason::Error { error } => (
            error.code.as_str().to_string(),
            shown(setup, &error.message),
        ),
        TurnEndReason::Blocked { message } => (
            "BLOCKED".to_string(),
            shown(setup, message.as_deref().unwrap_or("the turn was blocked")),
        ),
        TurnEndReason::Interrupted => {
            ("INTERRUPTED".to_string(), "the turn was interrupted".into())
        }
    };
    Some(UserError { code, message })
}

/// Prints the run's answer: the result line with `--json`, else the final text (or the
/// `--output-schema` value) on stdout.
fn print_result(args: &RunArgs, end: &HeadlessEnd, outcome: &TurnOutcome, interrupted: bool) {
    let setup = &end.setup;
    if args.json {
        println!("{}", json_line(result_json(end, outcome), setup.secrets()));
        return;
    }
    // After Ctrl-C stdout stays empty, so a pipeline never consumes half an answer; the
    // partial reply stays in the session log.
    if interrupted {
        return;
    }
    let text = match end.structured.as_ref().map(|(_, checked)| checked) {
        // The value as one line of JSON, whatever layout the model gave it.
        Some(Ok(value)) => value.to_string(),
        // An answer the schema refused is not printed: a program would read it as valid.
        Some(Err(_)) => return,
        None if outcome.final_text.is_empty() => return,
        None => outcome.final_text.trim_end().to_string(),
    };
    // Secrets replaced and the model's escape sequences shown, not obeyed (docs/SECURITY.md,
    // "Terminal output (dsh run, sessions show)").
    let text = setup.secrets().redact(&text);
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", dsh_tools::printable(&text));
}

/// A message from the provider or a hook as it may be printed: secrets replaced, controls
/// shown as text.
fn shown(setup: &Configuration, text: &str) -> String {
    dsh_tools::printable(&setup.secrets().redact(text)).into_owned()
}

/// The turn's prompt-cache reports: a summary and one entry per request.
fn cache_json(reports: &[dsh_agent::CacheReport]) -> serde_json::Value {
    let request_bytes: usize = reports.iter().map(|r| r.request_bytes).sum();
    let reused_bytes: usize = reports.iter().map(|r| r.reused_bytes).sum();
    serde_json::json!({
        "requests": reports.len(),
        "prefixExtensions": reports.iter().filter(|r| r.prefix_extension).count(),
        "requestBytes": request_bytes,
        "reusedBytes": reused_bytes,
        "reports": reports,
    })
}

fn usage_json(usage: &UsageTotals) -> serde_json::Value {
    serde_json::json!({
        "inputTokens": usage.usage.input_tokens,
        "outputTokens": usage.usage.output_tokens,
        "cacheReadTokens": usage.usage.cache_read_tokens,
        "cacheWriteTokens": usage.usage.cache_write_tokens,
        "reasoningTokens": usage.usage.reasoning_tokens,
        "requests": usage.requests,
        "cacheHitRatio": usage.usage.cache_hit_ratio(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_default_jobs_wait_is_the_flags_default() {
        assert_eq!(
            parse_jobs_wait(JOBS_WAIT_FLAG_DEFAULT).unwrap(),
            DEFAULT_JOBS_WAIT
        );
    }
}
