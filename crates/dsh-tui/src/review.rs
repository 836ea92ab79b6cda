//! `/review` (docs/review.md, "In the TUI"): a separate read-only session reviews a change of
//! the workspace while the conversation waits, and its findings join the conversation.
//!
//! The change, the task, the findings schema and the findings as text are
//! `dsh_runtime::review`'s, as for `dsh review`. The review session is opened through the same
//! [`SessionFactory`] as the conversation's, with the `read-only` preset whatever the
//! conversation's, and with a headless broker: nobody is asked anything, approvals are refused.
//! Its tool calls are reported as progress while it runs; Esc or Ctrl-C cancel it.
//!
//! The findings reach the conversation through its log: a `review/findings` event (what the
//! transcript shows, live and on resume) and a note injected for the model's next step
//! (`AgentHandle::inject`, logged as an inbox splice now and as a `user/message` when the next
//! step takes it), the way `/undo` tells the model what it reverted. The note is the numbered
//! text the user sees, so "fix finding 2" means the same to both.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_agent::AgentHandle;
use dsh_protocol::{Interactions, Op, SessionControl, ViewEvent, ViewProjector};
use dsh_runtime::review::{Change, Target};
use dsh_runtime::{Choices, SessionFactory, SessionSpec};
use dsh_session::{Event, StoreKind, TurnEndReason};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// The event `/review` logs in the conversation's session (ignorable, docs/sessions.md), and
/// the form of the note the model is given.
pub const REVIEW_EVENT: &str = dsh_session::REVIEW_FINDINGS_EVENT;

/// What `/review` was asked to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Which change.
    pub target: Target,
    /// What to look at first, in words.
    pub focus: Option<String>,
}

/// Parses what follows `/review`: at most one of `--uncommitted`, `--base BRANCH` and
/// `--commit SHA` (also `--base=BRANCH`, `--commit=SHA`), anywhere; the other words are the
/// focus. `--` ends the options (the words after it are focus, dashes and all).
pub fn parse_args(text: &str) -> Result<Request, String> {
    let mut words = text.split_whitespace();
    let mut chosen: Option<(&str, Option<String>)> = None;
    let mut focus: Vec<&str> = Vec::new();
    let mut options = true;
    while let Some(word) = words.next() {
        if !options || !word.starts_with("--") {
            focus.push(word);
            continue;
        }
        if word == "--" {
            options = false;
            continue;
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (word, None),
        };
        let value = match name {
            "--uncommitted" if inline.is_none() => None,
            "--base" | "--commit" => match inline.or_else(|| words.next().map(str::to_string)) {
                Some(value) => Some(value),
                None => return Err(format!("{name} needs a value: /review {name} <name>")),
            },
            _ => {
                return Err(format!(
                    "unknown option {word}: /review [--uncommitted | --base BRANCH | --commit SHA] \
                     [focus]"
                ))
            }
        };
        if let Some((earlier, _)) = chosen {
            return Err(format!(
                "{earlier} and {name}: /review takes one of --uncommitted, --base, --commit"
            ));
        }
        chosen = Some((name, value));
    }
    let target = match chosen {
        Some(("--base", value)) => Target::new(value.as_deref(), None),
        Some(("--commit", value)) => Target::new(None, value.as_deref()),
        _ => Ok(Target::Uncommitted),
    }
    .map_err(|err| err.to_string())?;
    let focus = focus.join(" ");
    Ok(Request {
        target,
        focus: (!focus.is_empty()).then_some(focus),
    })
}

/// A review while it runs, as the line above the composer shows it.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The change, in a few words (`uncommitted changes`, `changes since `main``, `commit
    /// `3f2a9c1``).
    pub label: String,
    /// When it started.
    pub started: Instant,
    /// Tool calls the reviewer made so far.
    pub tool_calls: usize,
    /// What it did last (a tool card's title and subject).
    pub activity: Option<String>,
    /// Esc or Ctrl-C asked to cancel it.
    pub cancelling: bool,
}

impl Progress {
    /// A review of `request` that starts now.
    pub fn new(request: &Request) -> Progress {
        let label = match &request.target {
            Target::Uncommitted => "uncommitted changes".to_string(),
            Target::Base(base) => format!("changes since `{base}`"),
            Target::Commit(sha) => format!("commit `{sha}`"),
        };
        Progress {
            label: dsh_tools::printable(&label).into_owned(),
            started: Instant::now(),
            tool_calls: 0,
            activity: None,
            cancelling: false,
        }
    }
}

/// The line above the composer while a review runs: spinner, what is reviewed, time, tool
/// calls, the last one, how to cancel (what is most useful first: a narrow terminal cuts the
/// end).
pub fn progress_line(progress: &Progress) -> Line<'static> {
    const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
    let elapsed = progress.started.elapsed();
    let frame = SPINNER[(elapsed.as_millis() / 100) as usize % SPINNER.len()];
    let dim = Style::default().fg(Color::DarkGray);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    if progress.cancelling {
        return Line::from(Span::styled(
            "cancelling the review…",
            Style::default().fg(Color::Yellow),
        ));
    }
    let calls = match progress.tool_calls {
        1 => "1 tool call".to_string(),
        n => format!("{n} tool calls"),
    };
    let last = progress
        .activity
        .as_deref()
        .map(|a| format!(" · {}", cut(a, 48)))
        .unwrap_or_default();
    Line::from(vec![
        Span::styled(format!("{frame} "), Style::default().fg(Color::Cyan)),
        Span::styled(format!("Reviewing {}", progress.label), bold),
        Span::styled(
            format!(
                " (read-only · {}s · {calls}{last} · Esc to cancel)",
                elapsed.as_secs()
            ),
            dim,
        ),
    ])
}

/// `text` cut to `max` characters, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// What a running review reports.
#[derive(Debug)]
pub enum Update {
    /// The reviewer made a tool call, or one changed state.
    Activity {
        /// Tool calls so far.
        tool_calls: usize,
        /// The latest one, in words.
        activity: String,
    },
    /// The review ended.
    Finished(Outcome),
}

/// How a review ended.
#[derive(Debug)]
pub enum Outcome {
    /// There was no change; the text says so.
    Nothing(String),
    /// It could not run, or failed; the text says why.
    Failed(String),
    /// The user cancelled it.
    Cancelled,
    /// The findings.
    Done(Box<Findings>),
}

/// A finished review.
#[derive(Debug, Clone, PartialEq)]
pub struct Findings {
    /// The review session (`dsh sessions show <id>` has all of it).
    pub session_id: String,
    /// The change, in words.
    pub described: String,
    /// The user's focus.
    pub focus: Option<String>,
    /// The answer, valid under the findings schema (`summary`, `findings`), secrets redacted.
    pub findings: Value,
    /// Requests the review made.
    pub requests: u64,
    /// What they cost (`None`: a model without a price).
    pub cost_usd: Option<f64>,
}

impl Findings {
    /// The `review/findings` event's data.
    pub fn event_data(&self) -> Value {
        json!({
            "reviewSession": self.session_id,
            "target": self.described,
            "focus": self.focus,
            "summary": self.findings["summary"],
            "findings": self.findings["findings"],
            "requests": self.requests,
            "costUsd": self.cost_usd,
        })
    }

    /// The note the model is given at its next step.
    pub fn note(&self) -> String {
        let focus = match &self.focus {
            Some(focus) => format!(", looking especially at: {focus}"),
            None => String::new(),
        };
        format!(
            "The user ran /review: a separate read-only session ({}) reviewed {}{focus}. Nothing \
             was changed. Its findings follow, numbered as the user sees them; the user may \
             refer to them by number (\"fix finding 2\"). Check a finding against the code \
             before acting on it.\n\n{}",
            self.session_id,
            self.described,
            dsh_runtime::review::findings_text(&self.findings, true).trim_end()
        )
    }
}

/// The transcript's text of a logged `review/findings` event: a title line, the numbered
/// findings, the cost and the review session.
pub fn logged_text(data: &Value) -> String {
    let text =
        |key: &str| dsh_tools::printable(data[key].as_str().unwrap_or_default()).into_owned();
    let focus = match data["focus"].as_str() {
        Some(focus) => format!(" (focus: {})", dsh_tools::printable(focus)),
        None => String::new(),
    };
    let count = data["findings"].as_array().map_or(0, Vec::len);
    let found = match count {
        1 => "1 finding".to_string(),
        n => format!("{n} findings"),
    };
    let cost = match data["costUsd"].as_f64() {
        Some(cost) => format!("${cost:.4}"),
        None => "$?".to_string(),
    };
    let requests = data["requests"].as_u64().unwrap_or(0);
    format!(
        "review of {}{focus}: {found}\n\n{}\n\nreview cost {cost} ({requests} request{}) · \
         session {} · the findings are in this conversation: \"fix finding 1\" works",
        text("target"),
        dsh_runtime::review::findings_text(data, true).trim_end(),
        if requests == 1 { "" } else { "s" },
        text("reviewSession"),
    )
}

/// Puts finished findings into the conversation of `handle`: the `review/findings` event,
/// then the note for the model's next step. Both are in the log before this returns.
pub fn deliver(handle: &AgentHandle, findings: &Findings) -> Result<(), String> {
    let event = Event::Opaque {
        event_type: REVIEW_EVENT.to_string(),
        data: findings.event_data(),
    };
    handle
        .log_event(event)
        .and_then(|_| {
            handle.inject(dsh_agent::plugin_message(
                "dsh",
                REVIEW_EVENT,
                findings.note(),
            ))
        })
        .map_err(|err| format!("the review's findings could not be added to the session: {err}"))
}

/// What a review needs from the UI.
pub struct Setup {
    /// Opens the review session, as it opened the conversation's.
    pub factory: Arc<dyn SessionFactory>,
    /// Where sessions are kept.
    pub home: PathBuf,
    /// The session store kind.
    pub store: StoreKind,
    /// The working directory (the repository).
    pub cwd: PathBuf,
    /// The model and effort of the conversation's next request, when the model table lists
    /// the model (the review uses the same); `None`: the configured default.
    pub model: Option<(String, Option<String>)>,
}

/// A review running in the background.
pub struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    updates: mpsc::UnboundedReceiver<Update>,
}

impl Running {
    /// Its next report; `None` once it stopped without one more (it ended, or failed to).
    pub async fn next(&mut self) -> Option<Update> {
        self.updates.recv().await
    }

    /// Cancels the review: its turn ends (logged `aborted` in the review session) and it
    /// reports [`Outcome::Cancelled`].
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Cancels it and waits (at most `limit`) for it to end.
    pub async fn stop(self, limit: Duration) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(limit, self.task).await;
    }
}

/// Starts the review of `request`; [`Running::next`] gives what it does, ending with one
/// [`Update::Finished`].
pub fn start(setup: Setup, request: Request) -> Running {
    let (report, updates) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            let outcome = review(setup, request, &report, &cancel).await;
            let _ = report.send(Update::Finished(outcome));
        }
    });
    Running {
        cancel,
        task,
        updates,
    }
}

/// The whole review: the change, the session, its turns, the checked answer.
async fn review(
    setup: Setup,
    request: Request,
    report: &mpsc::UnboundedSender<Update>,
    cancel: &CancellationToken,
) -> Outcome {
    let (cwd, home) = (setup.cwd.clone(), setup.home.clone());
    let target = request.target.clone();
    let change = tokio::task::spawn_blocking(move || {
        let confine = dsh_runtime::read_only_confiner(&cwd, &home);
        dsh_runtime::review::change_of(&cwd, &confine, &target)
    })
    .await;
    let change = match change {
        Ok(Ok(Some(change))) => change,
        Ok(Ok(None)) => {
            return Outcome::Nothing(format!(
                "nothing to review: no change in {}",
                request.target.describe()
            ))
        }
        Ok(Err(err @ dsh_runtime::review::ReviewError::NotARepository(_))) => {
            return Outcome::Failed(format!(
                "/review: {err}; it reviews git changes (start dsh in a repository)"
            ))
        }
        Ok(Err(err)) => return Outcome::Failed(format!("/review: {}: {err}", err.code())),
        Err(err) => return Outcome::Failed(format!("/review: the diff could not be read: {err}")),
    };
    if cancel.is_cancelled() {
        return Outcome::Cancelled;
    }
    match run_session(setup, &request, change, report, cancel).await {
        Ok(outcome) => outcome,
        Err(message) => Outcome::Failed(format!("/review: {message}")),
    }
}

/// The review session's spec: read-only, the reviewer's instructions and answer format.
fn spec(setup: &Setup, schema: &dsh_runtime::output_schema::OutputSchema) -> SessionSpec {
    let (model, effort) = setup.model.clone().unzip();
    SessionSpec {
        cwd: Some(setup.cwd.clone()),
        choices: Choices {
            permission: Some(dsh_runtime::review::PRESET.to_string()),
            model,
            effort: effort.flatten(),
            ..Choices::default()
        },
        append_system_prompt: Some(dsh_runtime::review::system_prompt(schema)),
        ..SessionSpec::default()
    }
}

/// Opens the read-only session, runs the review turn (and one correction when the answer is
/// not findings) and returns the checked findings.
async fn run_session(
    setup: Setup,
    request: &Request,
    change: Change,
    report: &mpsc::UnboundedSender<Update>,
    cancel: &CancellationToken,
) -> Result<Outcome, String> {
    let schema = dsh_runtime::review::schema()?;
    let spec = spec(&setup, &schema);
    let factory = Arc::clone(&setup.factory);
    let (home, kind) = (setup.home.clone(), setup.store);
    let opened = tokio::task::spawn_blocking(move || {
        let store = dsh_session::open_store(kind, &home).map_err(|e| e.to_string())?;
        let opened = factory
            .open(&spec, store.as_ref())
            .map_err(|err| err.describe())?;
        Ok::<_, String>((opened, factory.secrets(&spec)))
    })
    .await
    .map_err(|e| format!("the review session could not open: {e}"))??;
    let (opened, secrets) = opened;
    let mut agent = opened.agent;
    // Nobody answers a review's questions: approvals are refused, questions unavailable.
    let broker = Interactions::headless();
    agent.set_approver(Arc::new(broker.clone()));
    agent.set_asker(Arc::new(broker.clone()));
    let handle = agent.handle();
    let session_id = handle.session_id();
    let control = SessionControl::new(
        handle.clone(),
        broker,
        agent.call().clone(),
        Arc::new(|_: &str| None),
        setup.cwd.clone(),
    );
    let watcher = tokio::spawn(watch(
        handle.subscribe(),
        ViewProjector::new(
            dsh_agent::Presenter::new(Some(&handle.tools())),
            agent.prices().clone(),
        ),
        report.clone(),
    ));
    let canceller = tokio::spawn({
        let (cancel, control) = (cancel.clone(), control.clone());
        async move {
            cancel.cancelled().await;
            // A cancel before the turn started finds none running: repeated until the review
            // is over (this task is aborted then).
            loop {
                let _ = control.submit(Op::Cancel { keep_queued: false });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let task = dsh_runtime::review::task_text(&change, request.focus.as_deref(), &secrets);
    let answered = answer(&mut agent, &control, &schema, task, cancel).await;
    let _ = agent.stop_background_jobs("the review ended").await;
    canceller.abort();
    watcher.abort();
    let (outcomes, checked) = answered?;
    let mut by_model = std::collections::BTreeMap::new();
    let mut requests = 0;
    for outcome in &outcomes {
        for (model, usage) in &outcome.usage_by_model {
            by_model
                .entry(model.clone())
                .or_insert_with(dsh_llm::UsageTotals::default)
                .merge(usage);
        }
        requests += outcome.usage.requests;
    }
    let cost_usd = agent.prices().cost(&by_model);
    let reason = outcomes.last().map(|o| &o.reason);
    match (reason, checked) {
        (Some(TurnEndReason::Aborted { .. }), _) => Ok(Outcome::Cancelled),
        _ if cancel.is_cancelled() => Ok(Outcome::Cancelled),
        (Some(TurnEndReason::Completed), Some(Ok(mut findings))) => {
            secrets.redact_json(&mut findings);
            Ok(Outcome::Done(Box::new(Findings {
                session_id,
                described: change.described,
                focus: request.focus.clone(),
                findings,
                requests,
                cost_usd,
            })))
        }
        (Some(TurnEndReason::Completed), Some(Err(problem))) => Err(format!(
            "the reviewer's answer is still not findings after it was sent back once: {} \
             (session {session_id})",
            secrets.redact(&problem)
        )),
        (Some(reason), _) => Err(format!(
            "the review turn ended {}: {} (session {session_id})",
            reason.kind(),
            failure_text(reason, &secrets)
        )),
        (None, _) => Err(format!("no review turn ran (session {session_id})")),
    }
}

/// The review turn, and the one correction an answer that is not findings gets: the outcomes
/// of the turns and the verdict on the last answer (`None` when the last turn did not
/// complete).
async fn answer(
    agent: &mut dsh_agent::Agent,
    control: &SessionControl,
    schema: &dsh_runtime::output_schema::OutputSchema,
    task: String,
    cancel: &CancellationToken,
) -> Result<(Vec<dsh_agent::TurnOutcome>, Option<Result<Value, String>>), String> {
    let mut outcomes = turns(agent, control, task, cancel).await?;
    let check = |outcomes: &[dsh_agent::TurnOutcome]| {
        outcomes
            .last()
            .filter(|o| matches!(o.reason, TurnEndReason::Completed))
            .map(|o| schema.check(&o.final_text))
    };
    let checked = match check(&outcomes) {
        Some(Err(problem)) if !cancel.is_cancelled() => {
            let correction = schema.correction(&problem);
            outcomes.extend(turns(agent, control, correction, cancel).await?);
            check(&outcomes)
        }
        checked => checked,
    };
    Ok((outcomes, checked))
}

/// Queues `text` as the user's message and runs the turns it starts.
async fn turns(
    agent: &mut dsh_agent::Agent,
    control: &SessionControl,
    text: String,
    cancel: &CancellationToken,
) -> Result<Vec<dsh_agent::TurnOutcome>, String> {
    control
        .submit(Op::Prompt(dsh_agent::new_user_message(text)))
        .map_err(|err| err.message)?;
    agent
        .run_until_settled_within(cancel, Some(Duration::ZERO))
        .await
        .map_err(|err| err.to_string())
}

/// Why a turn that did not complete ended, in words (secrets redacted).
fn failure_text(reason: &TurnEndReason, secrets: &dsh_tools::SecretRedactor) -> String {
    match reason {
        TurnEndReason::Error { error } => {
            format!(
                "{}: {}",
                error.code.as_str(),
                secrets.redact(&error.message)
            )
        }
        TurnEndReason::Blocked { message } => secrets
            .redact(message.as_deref().unwrap_or("the turn was blocked"))
            .into_owned(),
        TurnEndReason::MaxTokens => "the reply hit the output token limit".to_string(),
        _ => "the turn did not complete".to_string(),
    }
}

/// Reports the reviewer's tool calls as they come: how many, and the latest in words.
async fn watch(
    mut events: broadcast::Receiver<dsh_agent::SessionEvent>,
    mut projector: ViewProjector,
    report: mpsc::UnboundedSender<Update>,
) {
    let mut seen = std::collections::HashSet::new();
    loop {
        let envelope = match events.recv().await {
            Ok(envelope) => envelope,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        for view in projector.project(&envelope) {
            let ViewEvent::ToolCard(card) = view else {
                continue;
            };
            seen.insert(card.call_id.clone());
            let presented = &card.presentation;
            let activity = match &presented.subject {
                Some(subject) => format!("{} {subject}", presented.title),
                None => presented.title.clone(),
            };
            let activity = dsh_tools::printable(&activity).into_owned();
            let update = Update::Activity {
                tool_calls: seen.len(),
                activity,
            };
            if report.send(update).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(target: Target, focus: Option<&str>) -> Request {
        Request {
            target,
            focus: focus.map(str::to_string),
        }
    }

    #[test]
    fn arguments_name_one_target_and_a_focus() {
        assert_eq!(parse_args(""), Ok(request(Target::Uncommitted, None)));
        assert_eq!(
            parse_args("--uncommitted  error handling "),
            Ok(request(Target::Uncommitted, Some("error handling")))
        );
        assert_eq!(
            parse_args("--base main the parser"),
            Ok(request(Target::Base("main".into()), Some("the parser")))
        );
        assert_eq!(
            parse_args("locking --commit=3f2a9c1"),
            Ok(request(Target::Commit("3f2a9c1".into()), Some("locking")))
        );
        assert_eq!(
            parse_args("-- --base is a word here"),
            Ok(request(Target::Uncommitted, Some("--base is a word here")))
        );
        // A single dash is a word (`-x` flags in the focus), not an option.
        assert_eq!(
            parse_args("the -v flag"),
            Ok(request(Target::Uncommitted, Some("the -v flag")))
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (args, expected) in [
            ("--base", "--base needs a value"),
            ("--commit", "--commit needs a value"),
            ("--base main --commit abc", "takes one of"),
            ("--uncommitted --base main", "takes one of"),
            ("--base --upload-pack=x", "is not a branch name"),
            ("--commit=-x", "is not a commit"),
            ("--force", "unknown option --force"),
            ("--uncommitted=yes", "unknown option"),
        ] {
            let error = parse_args(args).unwrap_err();
            assert!(error.contains(expected), "{args}: {error}");
        }
    }

    fn findings() -> Findings {
        Findings {
            session_id: "rev-1".into(),
            described: "commit `abc`".into(),
            focus: Some("errors".into()),
            findings: json!({
                "summary": "Two problems.",
                "findings": [
                    {"file": "a.rs", "line": 3, "priority": "P1", "title": "Off by one",
                     "body": "Reads past the end.", "suggested_fix": "Use `<`."},
                    {"file": "b.rs", "line": 9, "priority": "P2", "title": "Unchecked",
                     "body": "An error is dropped."}
                ]
            }),
            requests: 2,
            cost_usd: Some(0.0123),
        }
    }

    #[test]
    fn the_user_and_the_model_see_the_same_numbered_findings() {
        let findings = findings();
        let shown = logged_text(&findings.event_data());
        let note = findings.note();
        for text in [&shown, &note] {
            assert!(text.contains("1. P1  a.rs:3  Off by one\n"), "{text}");
            assert!(text.contains("2. P2  b.rs:9  Unchecked\n"), "{text}");
            assert!(text.contains("      Use `<`."), "{text}");
        }
        assert!(shown.starts_with("review of commit `abc` (focus: errors): 2 findings"));
        assert!(
            shown.contains("review cost $0.0123 (2 requests) · session rev-1"),
            "{shown}"
        );
        assert!(note.contains("read-only session (rev-1)"), "{note}");
        assert!(note.contains("\"fix finding 2\""), "{note}");
    }

    #[test]
    fn progress_says_what_runs_and_how_to_cancel() {
        let mut progress = Progress::new(&request(Target::Base("main".into()), None));
        progress.tool_calls = 2;
        progress.activity = Some("Read src/lib.rs".into());
        let line: String = progress_line(&progress)
            .spans
            .iter()
            .map(|s| s.content.to_string())
            .collect();
        assert!(
            line.contains("Reviewing changes since `main` (read-only · 0s · "),
            "{line}"
        );
        assert!(
            line.contains("2 tool calls · Read src/lib.rs · Esc to cancel)"),
            "{line}"
        );
        progress.cancelling = true;
        let line: String = progress_line(&progress)
            .spans
            .iter()
            .map(|s| s.content.to_string())
            .collect();
        assert_eq!(line, "cancelling the review…");
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
    }
}
