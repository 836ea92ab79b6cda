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
use dsh_runtime::{
    Choices, Configuration, Resume, Runtime, RuntimeError, RuntimeOptions, SessionSpec, WarningSink,
};
use dsh_session::TurnEndReason;

use crate::progress::{envelope_json, ProgressPrinter};

/// Arguments of `dsh run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The task for the agent.
    pub prompt: String,
    /// Provider name from the configuration (default: `provider` in config.toml, else deepseek).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model id (default: the configured model, else the provider's default_model).
    #[arg(long)]
    pub model: Option<String>,
    /// Reasoning effort: off, low, medium, high or max.
    #[arg(long)]
    pub effort: Option<String>,
    /// Stream reasoning to stderr too.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print one JSON object per session event, then a `result` object, on stdout.
    #[arg(long)]
    pub json: bool,
    /// Add the turn to this session (id, id prefix or path).
    #[arg(long, conflicts_with = "continue_last")]
    pub resume: Option<String>,
    /// Add the turn to the latest session of this directory.
    #[arg(long = "continue")]
    pub continue_last: bool,
    /// Working directory of the session (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Permission preset: read-only, workspace-write or danger-full-access
    /// (default: $DSH_PERMISSION_MODE, else workspace-write).
    #[arg(long)]
    pub permission: Option<String>,
    /// Apply the project's own settings (`.dsh/config.toml` hooks, MCP servers, permission,
    /// providers; `.dsh/hooks.json`) for this run without a recorded `dsh trust`.
    #[arg(long)]
    pub trust_workspace: bool,
}

/// A failure worth a `dsh: CODE: message` line and exit status 1.
#[derive(Debug)]
pub struct UserError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for UserError {}

fn user_error(code: &str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UserError {
        code: code.to_string(),
        message: message.into(),
    })
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
    let warnings: WarningSink = Arc::new(|line: &str| eprintln!("dsh: {line}"));
    Runtime::new(RuntimeOptions {
        home,
        cwd,
        choices,
        warnings,
    })
    .map_err(runtime_error)
}

impl RunArgs {
    fn choices(&self) -> Choices {
        Choices {
            provider: self.provider.clone(),
            model: self.model.clone(),
            effort: self.effort.clone(),
            permission: self.permission.clone(),
            trust_workspace: self.trust_workspace,
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

/// Runs `dsh run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = runtime(args.cwd.as_deref(), args.choices())?;
    let spec = SessionSpec {
        resume: args.resume(),
        ..SessionSpec::default()
    };
    let setup = runtime.configuration(&spec).map_err(runtime_error)?;
    let store = runtime.store();
    let mut agent = runtime
        .open(&spec, store.as_ref())
        .map_err(runtime_error)?
        .agent;
    let handle = agent.handle();
    let session_id = handle.session_id();

    let show_progress = !args.json && (args.verbose || std::io::stderr().is_terminal());
    let mut events = handle.subscribe();
    let json = args.json;
    let show_reasoning = args.show_reasoning;
    // Prints events as they are logged; once the run is over (`finished`), prints what is
    // still buffered and stops.
    let finished = tokio_util::sync::CancellationToken::new();
    let printer = tokio::spawn({
        let session_id = session_id.clone();
        let finished = finished.clone();
        async move {
            let mut progress = ProgressPrinter::new(show_reasoning);
            let mut stdout = std::io::stdout();
            let mut print = |envelope: &dsh_session::Envelope| {
                if json {
                    let line = serde_json::json!({
                        "type": "session_event",
                        "sessionId": session_id,
                        "event": envelope_json(envelope),
                    });
                    let _ = writeln!(stdout, "{line}");
                } else if show_progress {
                    progress.print(envelope);
                }
            };
            loop {
                let received = tokio::select! {
                    received = events.recv() => received,
                    () = finished.cancelled() => {
                        while let Ok(envelope) = events.try_recv() {
                            print(&envelope);
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
        }
    });

    handle.followup(args.prompt.clone())?;

    // Ctrl-C cancels the turn (which is then logged as aborted); a second Ctrl-C exits at once.
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signal_task = tokio::spawn({
        let handle = handle.clone();
        let interrupted = Arc::clone(&interrupted);
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("\ndsh: cancelling (press Ctrl-C again to quit at once)");
                handle.cancel(false);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        }
    });

    let outcomes = agent.run_until_idle().await;
    signal_task.abort();
    drop(handle);
    drop(agent);
    // Every event of the run is in the channel by now: the printer drains it and stops.
    finished.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), printer).await;

    let outcomes = outcomes?;
    let outcome = outcomes.last().cloned();
    let was_interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    finish(&args, &setup, &session_id, outcome, was_interrupted)
}

fn finish(
    args: &RunArgs,
    setup: &Configuration,
    session_id: &str,
    outcome: Option<TurnOutcome>,
    interrupted: bool,
) -> anyhow::Result<ExitCode> {
    let Some(outcome) = outcome else {
        return Err(user_error("UNKNOWN", "no turn ran"));
    };
    let prices = &setup.prices;
    let cost = prices
        .models
        .get(&setup.call.model)
        .map(|price| price.cost(&outcome.usage.usage));
    if args.json {
        let line = serde_json::json!({
            "type": "result",
            "sessionId": session_id,
            "output": outcome.final_text,
            "reason": outcome.reason,
            "usage": usage_json(&outcome.usage),
            "costUsd": cost,
            "cache": cache_json(&outcome.cache_reports),
        });
        println!("{line}");
    } else if !outcome.final_text.is_empty() {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", outcome.final_text.trim_end());
    }
    match &outcome.reason {
        TurnEndReason::Completed => Ok(ExitCode::SUCCESS),
        TurnEndReason::Aborted { .. } if interrupted => {
            eprintln!("dsh: ABORTED: the turn was cancelled; the session was saved ({session_id})");
            Ok(ExitCode::from(130))
        }
        TurnEndReason::Aborted { .. } => Err(user_error("ABORTED", "the turn was cancelled")),
        TurnEndReason::MaxTokens => Err(user_error(
            "MAX_TOKENS",
            "the reply hit the output token limit; its tool calls were not run. Continue with \
             `dsh run --continue \"...\"` or raise the limit.",
        )),
        TurnEndReason::Error { error } => Err(user_error(&error.code.as_str(), &error.message)),
        TurnEndReason::Blocked { message } => Err(user_error(
            "BLOCKED",
            message
                .clone()
                .unwrap_or_else(|| "the turn was blocked".into()),
        )),
        TurnEndReason::Interrupted => Err(user_error("INTERRUPTED", "the turn was interrupted")),
    }
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
