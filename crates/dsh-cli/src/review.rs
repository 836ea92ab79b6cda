//! `dsh review` (docs/review.md): a read-only session reviews a diff of the workspace and
//! answers findings (file, line, priority, what is wrong, a suggested fix) as text or JSON. The
//! diff, the task, the findings schema and the findings as text are `dsh_runtime::review`'s
//! (the TUI's `/review` shares them); the findings come through `--output-schema`'s check with
//! that schema, so an answer that is not findings is sent back once and never printed as if it
//! were. This file holds the flags, the headless run and the printing.

use std::path::PathBuf;
use std::process::ExitCode;

use dsh_runtime::review::{ReviewError, Target};
use serde_json::{json, Value};

use crate::run::{user_error, HeadlessInput, RunArgs};

// Arguments of `dsh review` (a plain comment: clap would make a doc comment the subcommand's
// help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ReviewArgs {
    /// What to look at first, in words (e.g. "error handling in the parser").
    pub(crate) prompt: Option<String>,
    /// Review the changes not committed yet, staged or not, and new files (the default).
    #[arg(long, conflicts_with_all = ["base", "commit"])]
    pub(crate) uncommitted: bool,
    /// Review what this branch changed since it left BRANCH (the merge base), uncommitted
    /// changes included.
    #[arg(long, value_name = "BRANCH", conflicts_with = "commit")]
    pub(crate) base: Option<String>,
    /// Review one commit.
    #[arg(long, value_name = "SHA")]
    pub(crate) commit: Option<String>,
    /// Print the findings as one JSON object (`sessionId`, `summary`, `findings`, `usage`,
    /// `costUsd`).
    #[arg(long)]
    pub(crate) json: bool,
    /// Working directory (default: the current one).
    #[arg(long, short = 'C', visible_alias = "cd")]
    pub(crate) cwd: Option<PathBuf>,
    // Provider, model and effort; the preset is always read-only.
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
    /// Stop the review once it has spent this many US dollars.
    #[arg(long, value_parser = crate::run::parse_cost)]
    pub(crate) max_cost_usd: Option<f64>,
}

/// The target `args` name.
fn target_of(args: &ReviewArgs) -> anyhow::Result<Target> {
    Target::new(args.base.as_deref(), args.commit.as_deref()).map_err(failed)
}

/// A review error as `dsh review` reports it (its code, then the message).
fn failed(error: ReviewError) -> anyhow::Error {
    let message = match &error {
        ReviewError::NotARepository(_) => format!("{error}: `dsh review` reviews git changes"),
        _ => error.to_string(),
    };
    user_error(error.code(), message)
}

/// Runs `dsh review`.
pub(crate) fn run(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::run::async_runtime()?;
    runtime.block_on(review(args))
}

async fn review(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let target = target_of(&args)?;
    let mut choices = args.session.choices();
    if choices
        .permission
        .as_deref()
        .is_some_and(|preset| preset != dsh_runtime::review::PRESET)
    {
        return Err(user_error(
            "INVALID_ARGS",
            "a review runs read-only: leave --permission out",
        ));
    }
    choices.permission = Some(dsh_runtime::review::PRESET.to_string());
    let runtime = crate::run::runtime(args.cwd.as_deref(), choices)?;
    let cwd = runtime.cwd().to_path_buf();
    let confine = dsh_runtime::read_only_confiner(&cwd, runtime.home());
    let change = tokio::task::spawn_blocking(move || {
        dsh_runtime::review::change_of(&cwd, &confine, &target)
    })
    .await
    .map_err(|e| anyhow::anyhow!("the diff could not be read: {e}"))?
    .map_err(failed)?;
    let Some(change) = change else {
        eprintln!("dsh: nothing to review: no changes");
        print_findings(
            &args,
            None,
            &json!({"summary": "no changes", "findings": []}),
        );
        return Ok(ExitCode::SUCCESS);
    };
    let schema = dsh_runtime::review::schema().map_err(|e| user_error("INTERNAL", e))?;
    let spec = dsh_runtime::SessionSpec {
        append_system_prompt: Some(dsh_runtime::review::system_prompt(&schema)),
        ..dsh_runtime::SessionSpec::default()
    };
    let setup = runtime
        .configuration(&spec)
        .map_err(crate::run::runtime_error)?;
    let task = dsh_runtime::review::task_text(&change, args.prompt.as_deref(), setup.secrets());
    let run_args = RunArgs {
        max_cost_usd: args.max_cost_usd,
        ..RunArgs::driven()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let signal = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ndsh: cancelling the review");
                cancel.cancel();
            }
        }
    });
    let end = crate::run::run_headless(
        &runtime,
        &spec,
        &run_args,
        Some(schema),
        HeadlessInput::Task(task),
        &cancel,
        // Progress on stderr when it is a terminal, as `dsh run` shows it.
        |watch| crate::run::spawn_printer(&run_args, watch),
    )
    .await;
    signal.abort();
    let end = end?;
    let Some(outcome) = &end.outcome else {
        return Err(user_error("UNKNOWN", "no turn ran"));
    };
    if let Some(failure) = crate::run::turn_failure(&end.setup, &outcome.reason) {
        return Err(anyhow::Error::new(failure));
    }
    match &end.structured {
        Some((_, Ok(findings))) => {
            let mut findings = findings.clone();
            end.setup.secrets().redact_json(&mut findings);
            print_findings(&args, Some(&end), &findings);
            Ok(ExitCode::SUCCESS)
        }
        Some((schema, Err(problem))) => Err(crate::output_schema::failure(
            schema,
            problem,
            &end.session_id,
        )),
        None => Err(user_error("UNKNOWN", "the review gave no answer")),
    }
}

/// Prints the findings: one JSON object with `--json`, else a summary and one block per
/// finding (priority, `file:line`, title; then what is wrong and the fix, indented).
fn print_findings(args: &ReviewArgs, end: Option<&crate::run::HeadlessEnd>, findings: &Value) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if args.json {
        let ran = end.and_then(|end| Some((end, end.outcome.as_ref()?)));
        let (usage, cost) = match ran {
            Some((end, outcome)) => {
                let result = crate::run::result_json(end, outcome);
                (result["usage"].clone(), result["costUsd"].clone())
            }
            None => (Value::Null, Value::Null),
        };
        let line = json!({
            "type": "review",
            "sessionId": end.map(|end| end.session_id.clone()),
            "summary": findings["summary"],
            "findings": findings["findings"],
            "usage": usage,
            "costUsd": cost,
        });
        let _ = writeln!(out, "{line}");
        return;
    }
    let _ = write!(
        out,
        "{}",
        dsh_runtime::review::findings_text(findings, false)
    );
    if let Some(end) = end {
        let _ = writeln!(out, "(session {})", end.session_id);
    }
}
