//! Scenario runner: replays every recorded dsh session under
//! `fixtures/dsh/acp-snapshots/` (in this repository) through our loop, with the recorded model
//! replies served over real HTTP by the fake provider and our tools running for real in a temp copy
//! of the fixture's workspace.
//!
//! Adding a case is adding data: a fixture folder (recorded by dsh) and, here, an optional
//! `tests/scenarios/<fixture>.json` with our settings for it:
//! `{"skip": "reason"}`, `"spillThreshold": N`, `"expectFiles": {"path": "content"}`,
//! `"hooks": "<file in the workspace>"` (Claude Code hooks to run; `"hooksDialect": "codex"` for
//! a Codex hooks file), `"expectHooksError": "text"`
//! (loading the hooks must fail with a message containing it; nothing is replayed) and
//! `"expectBlocked": "message"` (dsh refused the prompt before logging anything; ours logs a turn
//! that ends `blocked` with this message, checked and then left out of the comparison).
//! A fixture without a settings file runs with the defaults.
//!
//! More recordings of dsh, vendored for later features, live in `fixtures/dsh/more/acp/`; one
//! of them runs here when it has a settings file. Their settings may also give
//! `"preset"` (the session's permission preset; the answers to approval questions come from
//! the recording's `permissionAnswers`, and as many questions must be asked as dsh asked),
//! `"backgroundJobs": true` (the job tools, ids `bash-N`), `"globMaxResults": N` (sampling
//! over the cap on), `"links": {"path": "target"}` (symbolic links the fixture folder holds as
//! plain files), `"expectResults": ["text"]` (each must occur in some tool result) and
//! `"expectContext": [{"step": N, "contains": "text"}]` (a context message logged at step N of
//! the first turn must contain the text).
//! `"subagents": true` offers delegation: the recording's child logs (`session.N.jsonl`) are
//! served to our children by prompt and compared with our child logs (`scenarios/subagents.rs`);
//! `"maxDepth": N` is dsh's depth cap of the recording, `"childDelayMs": N` delays each child
//! reply (a background child answers after its parent's turn went on, as recorded). Our
//! children take the recorded children's session ids, and each of dsh's settlement notices
//! (`Background subagent <id> finished ...`) must be in our parent's log word for word.
//!
//! For each run it checks: turn end reasons, final assistant texts, the executed tool calls and
//! their order, which tool results were errors, the hook results (point and decision) when hooks
//! run (all against the recording), the expected files,
//! and that every request sent back `reasoning_content`, the tool-call ids, and exactly one tool
//! message per call.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "scenarios/subagents.rs"]
#[allow(clippy::expect_used)] // test code: a failed expect is a failed scenario
mod subagent_replay;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{
    compare_runs, Agent, AgentOptions, AgentParts, ClaudeCodeHooks, ExtensionSet, HooksConfig,
    RecordedRun, ReplayAdapter, SkillSet, Skills, TitleMode,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk, RetryPolicy};
use dsh_session::TurnEndReason;
use dsh_session::{open_store, Event, StoreKind};
use dsh_test_support::fixture_runner::{self, Outcome};
use dsh_test_support::{
    copy_dir, snapshot_fixture_dirs, FakeProvider, RecordedSession, ReplayOverride,
};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolLimits, ToolRegistry};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    skip: Option<String>,
    spill_threshold: Option<usize>,
    #[serde(default)]
    expect_files: BTreeMap<String, String>,
    /// Files the recording's harness created in the workspace that a fixture folder cannot
    /// hold (path relative to the cwd, content).
    #[serde(default)]
    create_files: BTreeMap<String, String>,
    /// Extra skill folders (relative to `tests/scenarios/`), searched after the workspace's.
    #[serde(default)]
    skill_dirs: Vec<String>,
    /// Serve titles from the recording's `chunks` override (dsh's separate title model) and
    /// expect this final session title.
    expect_title: Option<String>,
    /// Claude Code hooks file (relative to the fixture's workspace) to run with.
    hooks: Option<String>,
    /// `"codex"`: `hooks` is a Codex-dialect hooks file.
    hooks_dialect: Option<String>,
    /// Loading `hooks` must fail with an error containing this text.
    expect_hooks_error: Option<String>,
    /// A turn must end `blocked` with this message; it is not compared with the recording.
    expect_blocked: Option<String>,
    /// The session's permission preset (default danger-full-access).
    preset: Option<String>,
    /// Offer the background job tools.
    #[serde(default)]
    background_jobs: bool,
    /// `glob`'s result cap (sampling across top-level entries over it).
    glob_max_results: Option<usize>,
    /// Symbolic links to create in the workspace (path relative to the cwd, target).
    #[serde(default)]
    links: BTreeMap<String, String>,
    /// Texts that must each occur in some tool result of ours.
    #[serde(default)]
    expect_results: Vec<String>,
    /// Context messages that must be logged at a step of the first turn.
    #[serde(default)]
    expect_context: Vec<ExpectContext>,
    /// Offer delegation; serve and compare the recording's children.
    #[serde(default)]
    subagents: bool,
    /// dsh's delegation depth cap in the recording.
    max_depth: Option<u64>,
    /// Delay of each child reply, in milliseconds.
    child_delay_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExpectContext {
    step: u64,
    contains: String,
}

/// An answer the recording's user gave to an approval question (`permissionAnswers`).
#[derive(Debug, Clone, Deserialize)]
struct PermissionAnswer {
    kind: String,
}

/// Answers approval questions in order with the recording's answers.
struct RecordedAnswers(std::sync::Mutex<std::collections::VecDeque<PermissionAnswer>>);

impl dsh_agent::Approver for RecordedAnswers {
    fn decide(
        &self,
        _request: dsh_agent::ApprovalRequest,
    ) -> futures::future::BoxFuture<'static, dsh_agent::ApprovalDecision> {
        let answer = self.0.lock().unwrap().pop_front();
        let decision = match answer.as_ref().map(|a| a.kind.as_str()) {
            Some("allow_once") => dsh_agent::ApprovalDecision::AllowOnce,
            Some("allow_always") => dsh_agent::ApprovalDecision::AllowSession,
            Some(other) => dsh_agent::ApprovalDecision::Reject {
                message: format!("the user answered {other}"),
            },
            None => dsh_agent::ApprovalDecision::Reject {
                message: "the recording has no answer for this question".into(),
            },
        };
        Box::pin(async move { decision })
    }
}

/// The recorded sessions of `fixtures/dsh/more/acp/` that have a settings file.
fn more_fixture_dirs(settings_dir: &Path) -> Vec<PathBuf> {
    let root = dsh_test_support::snapshot_fixtures_dir().join("../more/acp");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("session.jsonl").is_file())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                settings_dir
                    .join(format!("{}.json", n.to_string_lossy()))
                    .is_file()
            })
        })
        .collect();
    dirs.sort();
    dirs
}

/// The plugin-sourced user messages of `events` with the step they were logged in (first turn).
fn context_by_step(events: &[dsh_session::Envelope]) -> Vec<(u64, String)> {
    let mut step = 0;
    let mut turn = 0;
    let mut out = Vec::new();
    for envelope in events {
        match &envelope.event {
            Event::TurnStart(start) => turn = start.turn,
            Event::StepStart(start) => step = start.step,
            Event::UserMessage(message)
                if turn == 1 && matches!(message.source, dsh_llm::MessageSource::Plugin { .. }) =>
            {
                out.push((step, message.text()));
            }
            _ => {}
        }
    }
    out
}

/// Every tool result text of `events`.
fn result_texts(events: &[dsh_session::Envelope]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(result) => Some(dsh_test_support::tool_result_text(&result.message)),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    steps: Vec<Step>,
    #[serde(default)]
    permission_answers: Vec<PermissionAnswer>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Step {
    Initialize,
    NewSession,
    Prompt {
        text: String,
    },
    PromptExpectError {
        text: String,
    },
    PromptAndCancel {
        text: String,
    },
    WaitForTurnEnd,
    WaitForTitleAfterTurnEnd,
    /// A prompt whose reply the client waited for (the run waits until settled anyway).
    PromptAndWaitForAgentMessage {
        text: String,
    },
    /// dsh's client waited for a child or a later turn: our run waits until settled.
    WaitForSubagentTurnEnd,
    WaitForTurnStart,
    WaitForFile,
}

/// Checks the wire contract of every request: an assistant turn that had reasoning sends it
/// back, tool calls keep their ids, and each call gets exactly one tool message.
fn check_requests(provider: &FakeProvider) -> Result<(), String> {
    for (k, request) in provider.requests().iter().enumerate() {
        let Some(messages) = request.body["messages"].as_array() else {
            return Err(format!("request {k} has no messages array"));
        };
        let mut open_calls: Vec<String> = Vec::new();
        for message in messages {
            match message["role"].as_str() {
                Some("assistant") => {
                    if let Some(missing) = open_calls.first() {
                        return Err(format!("request {k}: call {missing} has no tool message"));
                    }
                    if let Some(calls) = message["tool_calls"].as_array() {
                        for call in calls {
                            let id = call["id"].as_str().unwrap_or_default();
                            if id.is_empty() {
                                return Err(format!("request {k}: tool call without id"));
                            }
                            open_calls.push(id.to_string());
                        }
                    }
                }
                Some("tool") => {
                    let id = message["tool_call_id"].as_str().unwrap_or_default();
                    match open_calls.iter().position(|c| c == id) {
                        Some(p) => {
                            open_calls.remove(p);
                        }
                        None => {
                            return Err(format!(
                                "request {k}: tool message for unknown or answered call {id}"
                            ))
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(missing) = open_calls.first() {
            return Err(format!("request {k}: call {missing} has no tool message"));
        }
    }
    Ok(())
}

/// Reasoning the recording produced must come back in later requests verbatim.
/// `requests`: the top-level agent's (a child's requests carry its own history).
fn check_reasoning_round_trip(
    requests: Vec<dsh_test_support::RecordedRequest>,
    recorded: &RecordedRun,
) -> Result<(), String> {
    let mut sent_back = String::new();
    for request in requests.iter().skip(1) {
        sent_back.push_str(&request.body.to_string());
    }
    for (k, call) in recorded.calls.iter().enumerate() {
        if k + 1 >= requests.len() {
            break;
        }
        let reasoning: String = call
            .iter()
            .filter_map(|c| match c {
                Chunk::ReasoningDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if reasoning.is_empty() {
            continue;
        }
        let needle = Value::String(reasoning.clone()).to_string();
        if !sent_back.contains(&needle) {
            return Err(format!(
                "reasoning of call {k} was not sent back as reasoning_content: {reasoning:?}"
            ));
        }
    }
    Ok(())
}

/// `(point, decision)` of every `hook/result`, in order.
fn hook_decisions(events: &[dsh_session::Envelope]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "hook/result" => Some((
                data["point"].as_str().unwrap_or_default().to_string(),
                data["decision"].as_str().unwrap_or_default().to_string(),
            )),
            _ => None,
        })
        .collect()
}

async fn run_fixture(dir: &Path, settings: &Settings) -> Result<(), String> {
    let input: Input = serde_json::from_str(
        &std::fs::read_to_string(dir.join("input.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("input.json: {e}"))?;
    let recording_log =
        dsh_session::load_file(&dir.join("session.jsonl")).map_err(|e| e.to_string())?;
    let recorded = RecordedRun::from_events(&recording_log.events);
    let session = RecordedSession::load(dir).map_err(|e| format!("{e:?}"))?;
    let provider = FakeProvider::start(session.replies())
        .await
        .map_err(|e| e.to_string())?;
    let child_prompts = if settings.subagents {
        subagent_replay::route_children(
            dir,
            &provider,
            settings.child_delay_ms.map(Duration::from_millis),
        )?
    } else {
        Vec::new()
    };

    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cwd = tempfile::tempdir().map_err(|e| e.to_string())?;
    if dir.join("workspace").is_dir() {
        copy_dir(&dir.join("workspace"), cwd.path()).map_err(|e| e.to_string())?;
    }
    for (path, content) in &settings.create_files {
        let target = cwd.path().join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&target, content).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    for (path, target) in &settings.links {
        let link = cwd.path().join(path);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).map_err(|e| format!("{path}: {e}"))?;
    }
    let preset: PermissionPreset = match &settings.preset {
        Some(name) => name.parse()?,
        None => PermissionPreset::DangerFullAccess,
    };
    let hooks = match &settings.hooks {
        Some(file) => match match settings.hooks_dialect.as_deref() {
            Some("codex") => HooksConfig::load_codex_file(&cwd.path().join(file)),
            _ => HooksConfig::load_file(&cwd.path().join(file)),
        } {
            Ok(config) if settings.expect_hooks_error.is_none() => Some(config),
            Ok(_) => return Err(format!("{file} loaded, but an error was expected")),
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let text = text.join("\n");
                return match &settings.expect_hooks_error {
                    Some(needle) if text.contains(needle.as_str()) => Ok(()),
                    _ => Err(text),
                };
            }
        },
        None => None,
    };
    let mut limits = ToolLimits::default();
    if let Some(threshold) = settings.spill_threshold {
        limits.spill_threshold = threshold;
        limits.bash_stream_cap = threshold;
    }
    let spill = SpillDir::create(home.path().join("spill")).map_err(|e| e.to_string())?;
    let tool_context = ToolContext::new(cwd.path(), spill)
        .map_err(|e| e.to_string())?
        .with_permission(preset)
        .with_limits(limits);
    let jobs = dsh_tools::JobTable::new();
    let tool_context = if settings.background_jobs {
        tool_context.with_jobs(jobs.clone())
    } else {
        tool_context
    };
    let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
        provider.base_url(),
        Some(dsh_deepseek::ApiKey::new("sk-scenario")),
    ))
    .map_err(|e| e.to_string())?;
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("deepseek", Arc::new(adapter))
        .map_err(|e| e.to_string())?;
    let extensions = ExtensionSet::new();
    let retry = RetryPolicy {
        base_delay: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    let _guards =
        dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(60));
    let settings_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let extra: Vec<PathBuf> = settings
        .skill_dirs
        .iter()
        .map(|d| settings_dir.join(d))
        .collect();
    let skills = SkillSet::discover(&SkillSet::standard_dirs(cwd.path(), None, &extra));
    let _context = extensions.register(Arc::new(dsh_agent::ContextMessages::new(
        cwd.path(),
        None,
        Box::new(dsh_agent::SystemContext {
            permission: "danger-full-access".into(),
        }),
    )));
    let _skills = extensions.register(Arc::new(Skills::new(skills)));
    let _jobs = settings
        .background_jobs
        .then(|| extensions.register(Arc::new(dsh_agent::BackgroundJobs::new(&jobs))));
    let _safety = settings.preset.as_ref().map(|_| {
        extensions.register(Arc::new(dsh_agent::SafetyPolicy::new(
            preset, "none", "scenario",
        )))
    });
    let mut tools = ToolRegistry::with_builtins();
    if let Some(max) = settings.glob_max_results {
        tools.unregister("glob");
        tools
            .register(Arc::new(dsh_tools::GlobTool::new(max, true)))
            .map_err(|e| e.to_string())?;
    }
    let _hooks = hooks.map(|config| extensions.register(Arc::new(ClaudeCodeHooks::new(config))));
    let child_ids = subagent_replay::recorded_ids(dir)?;
    let _subagents = settings.subagents.then(|| {
        let children = subagent_replay::Children {
            base_url: provider.base_url(),
            home: home.path().to_path_buf(),
            cwd: cwd.path().to_path_buf(),
            preset,
            background_jobs: settings.background_jobs,
            max_depth: settings.max_depth,
            ids: Arc::clone(&child_ids),
        };
        extensions.register(Arc::new(children.delegation(0)))
    });
    let mut options =
        AgentOptions::new(CallConfig::new("deepseek", "deepseek-v4-flash"), cwd.path());
    if settings.expect_title.is_some() {
        let title_chunks: Vec<Vec<Chunk>> = session
            .overrides
            .iter()
            .filter_map(|o| match o {
                ReplayOverride::Chunks { chunks } => Some(chunks.clone()),
                _ => None,
            })
            .collect();
        adapters
            .register("title-replay", Arc::new(ReplayAdapter::new(title_chunks)))
            .map_err(|e| e.to_string())?;
        options.titles = TitleMode::Model {
            route: Some("title-replay".into()),
            model: Some("title-model".into()),
        };
    }
    let store = open_store(StoreKind::Jsonl, home.path()).map_err(|e| e.to_string())?;
    let mut agent = Agent::create(
        AgentParts {
            adapters,
            tools: Arc::new(tools),
            extensions,
            tool_context,
            options,
        },
        store.as_ref(),
    )
    .map_err(|e| e.to_string())?;
    if !input.permission_answers.is_empty() {
        agent.set_approver(Arc::new(RecordedAnswers(std::sync::Mutex::new(
            input.permission_answers.iter().cloned().collect(),
        ))));
    }
    let handle = agent.handle();
    let location = handle.location();

    for step in input.steps {
        match step {
            Step::Initialize
            | Step::NewSession
            | Step::WaitForTurnEnd
            | Step::WaitForTitleAfterTurnEnd
            | Step::WaitForSubagentTurnEnd
            | Step::WaitForTurnStart
            | Step::WaitForFile => {}
            Step::Prompt { text }
            | Step::PromptExpectError { text }
            | Step::PromptAndWaitForAgentMessage { text } => {
                handle.followup(text).map_err(|e| e.to_string())?;
                // Background children wake the agent again (docs/agent.md, "Wake-ups"), and
                // the recording waited for that; other scenarios stop when idle.
                let stop = tokio_util::sync::CancellationToken::new();
                let run = async {
                    if settings.subagents {
                        agent.run_until_settled(&stop).await
                    } else {
                        agent.run_until_idle().await
                    }
                };
                tokio::time::timeout(Duration::from_secs(60), run)
                    .await
                    .map_err(|_| "turn did not finish within 60 s".to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Step::PromptAndCancel { text } => {
                handle.followup(text).map_err(|e| e.to_string())?;
                let mut events = handle.subscribe();
                let canceller = handle.clone();
                let watcher = tokio::spawn(async move {
                    // Cancel once the partial reply has reached the log, as a user would
                    // after seeing it stream.
                    while let Ok(envelope) = events.recv().await {
                        if let Event::AssistantChunk(chunk) = &envelope.event {
                            if matches!(chunk.chunk, Chunk::TextDelta { .. }) {
                                canceller.cancel(false);
                                break;
                            }
                        }
                    }
                });
                tokio::time::timeout(Duration::from_secs(60), agent.run_until_idle())
                    .await
                    .map_err(|_| "cancelled turn did not finish within 60 s".to_string())?
                    .map_err(|e| e.to_string())?;
                watcher.abort();
            }
        }
    }
    drop(agent);

    let ours = dsh_session::load_file(Path::new(&location)).map_err(|e| e.to_string())?;
    let mut replayed = RecordedRun::from_events(&ours.events);
    if let Some(expected) = &settings.expect_blocked {
        let blocked = TurnEndReason::Blocked {
            message: Some(expected.clone()),
        };
        let before = replayed.turns.len();
        replayed.turns.retain(|t| t.end.as_ref() != Some(&blocked));
        if replayed.turns.len() == before {
            return Err(format!("no turn ended blocked with {expected:?}"));
        }
    }
    let differences = compare_runs(&recorded, &replayed);
    if !differences.is_empty() {
        let list: Vec<String> = differences.iter().map(ToString::to_string).collect();
        return Err(list.join("; "));
    }
    if settings.hooks.is_some() && settings.expect_blocked.is_none() {
        let recorded_hooks = hook_decisions(&recording_log.events);
        let our_hooks = hook_decisions(&ours.events);
        if recorded_hooks != our_hooks {
            return Err(format!(
                "hook results differ: recorded {recorded_hooks:?}, ours {our_hooks:?}"
            ));
        }
    }
    if settings.subagents {
        subagent_replay::compare_children(dir, Path::new(&location))?;
        subagent_replay::compare_settlements(dir, &ours.events)?;
    }
    check_requests(&provider)?;
    check_reasoning_round_trip(
        subagent_replay::parent_requests(&provider, &child_prompts),
        &recorded,
    )?;
    let asked = |events: &[dsh_session::Envelope]| {
        events
            .iter()
            .filter(|e| matches!(&e.event, Event::Opaque { event_type, .. } if event_type == "approval/asked"))
            .count()
    };
    if settings.preset.is_some() && asked(&recording_log.events) != asked(&ours.events) {
        return Err(format!(
            "approval questions: recorded {}, ours {}",
            asked(&recording_log.events),
            asked(&ours.events)
        ));
    }
    let results = result_texts(&ours.events);
    for needle in &settings.expect_results {
        if !results.iter().any(|r| r.contains(needle.as_str())) {
            return Err(format!("no tool result contains {needle:?}: {results:?}"));
        }
    }
    let context = context_by_step(&ours.events);
    for expected in &settings.expect_context {
        let found = context
            .iter()
            .any(|(step, text)| *step == expected.step && text.contains(&expected.contains));
        if !found {
            return Err(format!(
                "no context message at step {} contains {:?}: {context:?}",
                expected.step, expected.contains
            ));
        }
    }
    if let Some(expected) = &settings.expect_title {
        let title = ours.events.iter().rev().find_map(|e| match &e.event {
            Event::SessionTitle(t) => Some(t.title.clone()),
            _ => None,
        });
        if title.as_deref() != Some(expected.as_str()) {
            return Err(format!("session title {title:?}, expected {expected:?}"));
        }
    }
    for (path, expected) in &settings.expect_files {
        let actual = std::fs::read_to_string(cwd.path().join(path))
            .map_err(|e| format!("expected file {path}: {e}"))?;
        if &actual != expected {
            return Err(format!("{path} holds {actual:?}, expected {expected:?}"));
        }
    }
    Ok(())
}

fn main() {
    let mut dirs = match snapshot_fixture_dirs() {
        Ok(dirs) => dirs,
        Err(message) => {
            eprintln!("scenarios: {message}");
            std::process::exit(1);
        }
    };
    let settings_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    dirs.extend(more_fixture_dirs(&settings_dir));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("scenarios: cannot start a runtime: {err}");
            std::process::exit(1);
        }
    };
    let filter = fixture_runner::filter_from_args();
    let report = fixture_runner::run_all("scenario", dirs, filter.as_deref(), |name, dir| {
        let settings: Settings = fixture_runner::load_settings(&settings_dir, name)?;
        if let Some(reason) = settings.skip {
            return Ok(Outcome::Skipped(reason));
        }
        runtime.block_on(run_fixture(dir, &settings))?;
        Ok(Outcome::Passed)
    });
    if let Err(message) = report.finish() {
        eprintln!("{message}");
        std::process::exit(1);
    }
}
