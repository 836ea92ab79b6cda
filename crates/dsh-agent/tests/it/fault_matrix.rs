//! Fault matrix: every fault the fake provider can inject, at every point of a turn (the first
//! step, the step after a tool call, and the summary call of a compaction), over real HTTP with
//! the DeepSeek adapter. For each cell: the turn ends with the reason `docs/agent.md` documents
//! (a retryable fault is retried and the turn completes, a fault that persists past the retry
//! budget or is not retryable ends the turn `error {code}`, a failed summary leaves the turn
//! completed with a warning), the log loads without a torn line and with the turn closed, and
//! `Agent::resume` continues the session with a new turn.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionGuard, ExtensionSet};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, ChunkStream, GenerateRequest, Purpose, RetryPolicy,
};
use dsh_session::{load_file, open_store, Event, SessionStore, StoreKind, TurnEndReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

/// The adapter's idle watchdog in these tests (a stall becomes `TIMEOUT` after this).
const IDLE: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy)]
struct Fault {
    name: &'static str,
    /// The failure code the adapter reports.
    code: &'static str,
    /// Whether the retry policy retries it (docs/agent.md, "Retries").
    retryable: bool,
}

const FAULTS: [Fault; 11] = [
    Fault {
        name: "status 401",
        code: "AUTH",
        retryable: false,
    },
    Fault {
        name: "status 400",
        code: "INVALID_REQUEST",
        retryable: false,
    },
    Fault {
        name: "status 429",
        code: "RATE_LIMIT",
        retryable: true,
    },
    Fault {
        name: "status 503",
        code: "SERVER",
        retryable: true,
    },
    Fault {
        name: "closed before answering",
        code: "TRANSPORT",
        retryable: true,
    },
    Fault {
        name: "dropped mid-stream",
        code: "TRANSPORT",
        retryable: true,
    },
    Fault {
        name: "stall mid-stream",
        code: "TIMEOUT",
        retryable: true,
    },
    Fault {
        name: "no [DONE]",
        code: "STREAM_CLOSED",
        retryable: true,
    },
    Fault {
        name: "malformed bytes",
        code: "MALFORMED_RESPONSE",
        retryable: false,
    },
    Fault {
        name: "unknown finish reason",
        code: "CONTENT_FILTER",
        retryable: false,
    },
    Fault {
        name: "empty reply",
        code: "EMPTY_RESPONSE",
        retryable: true,
    },
];

fn fault_reply(fault: &Fault) -> ScriptedReply {
    let partial = || SseReply::new().reasoning("thinking").text("partial answ");
    match fault.name {
        "status 401" => ScriptedReply::http_error(401, "Authentication Fails (invalid key)"),
        "status 400" => ScriptedReply::http_error(400, "invalid tools schema"),
        "status 429" => ScriptedReply::rate_limited(0),
        "status 503" => ScriptedReply::http_error(503, "Service Unavailable"),
        "closed before answering" => ScriptedReply::CloseConnection,
        "dropped mid-stream" => partial().end(StreamEnd::DropConnection).into(),
        "stall mid-stream" => partial().end(StreamEnd::Stall).into(),
        "no [DONE]" => partial()
            .finish("stop", Some(WireUsage::default()))
            .end(StreamEnd::CloseWithoutDone)
            .into(),
        "malformed bytes" => partial().malformed().into(),
        "unknown finish reason" => partial()
            .finish("content_filter", Some(WireUsage::default()))
            .into(),
        "empty reply" => ScriptedReply::empty_completion(),
        other => unreachable!("no fault named {other}"),
    }
}

fn text(reply: &str) -> ScriptedReply {
    SseReply::new()
        .text(reply)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

fn tool_step() -> ScriptedReply {
    SseReply::new()
        .text("Listing files.")
        .tool_call(0, "call_glob", "glob", "{\"pattern\": \"*.txt\"}")
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

/// Sends summary requests (`purpose: compaction`) to one provider and everything else to
/// another, so a fault can be aimed at the compaction call alone.
struct SplitByPurpose {
    main: dsh_deepseek::DeepSeekAdapter,
    summary: dsh_deepseek::DeepSeekAdapter,
}

impl Adapter for SplitByPurpose {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        if request.purpose == Some(Purpose::Compaction) {
            self.summary.stream(request)
        } else {
            self.main.stream(request)
        }
    }
}

fn adapter(provider: &FakeProvider) -> dsh_deepseek::DeepSeekAdapter {
    dsh_deepseek::DeepSeekAdapter::new(
        dsh_deepseek::DeepSeekConfig::new(
            provider.base_url(),
            Some(dsh_deepseek::ApiKey::new("sk-fault")),
        )
        .with_idle_timeout(IDLE),
    )
    .unwrap()
}

struct Cell {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    store: Box<dyn SessionStore>,
}

impl Cell {
    fn new() -> Cell {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        std::fs::write(cwd.path().join("a.txt"), "alpha\n").unwrap();
        let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
        Cell { home, cwd, store }
    }

    fn parts(
        &self,
        main: &FakeProvider,
        summary: &FakeProvider,
    ) -> (AgentParts, Vec<ExtensionGuard>) {
        let mut adapters = AdapterRegistry::new();
        adapters
            .register(
                "deepseek",
                Arc::new(SplitByPurpose {
                    main: adapter(main),
                    summary: adapter(summary),
                }),
            )
            .unwrap();
        let extensions = ExtensionSet::new();
        // One retry, quickly: a single fault is survived, a repeated one ends the turn.
        let retry = RetryPolicy {
            max_retries: 1,
            base_delay: Duration::from_millis(2),
            ..RetryPolicy::default()
        };
        let guards =
            dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(30));
        let tool_context = ToolContext::new(
            self.cwd.path(),
            SpillDir::create(self.home.path().join("spill")).unwrap(),
        )
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite);
        (
            AgentParts {
                adapters,
                tools: Arc::new(ToolRegistry::with_builtins()),
                extensions,
                tool_context,
                options: AgentOptions::new(
                    CallConfig::new("deepseek", "deepseek-v4-flash"),
                    self.cwd.path(),
                ),
            },
            guards,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    FirstStep,
    AfterToolCall,
    Compaction,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Persistence {
    Once,
    /// The fault comes back on the retry too.
    Twice,
}

/// Runs one cell and checks the outcome, the log and the resume. Returns a description of any
/// mismatch instead of panicking, so that every cell is reported.
async fn run_cell(fault: Fault, point: Point, persistence: Persistence) -> Result<(), String> {
    let cell = Cell::new();
    let faults = match persistence {
        Persistence::Once => vec![fault_reply(&fault)],
        Persistence::Twice => vec![fault_reply(&fault), fault_reply(&fault)],
    };
    let mut main_script = Vec::new();
    let mut summary_script = Vec::new();
    match point {
        Point::FirstStep => main_script.extend(faults),
        Point::AfterToolCall => {
            main_script.push(tool_step());
            main_script.extend(faults);
        }
        Point::Compaction => {
            // Turn 1 builds some history; turn 2 starts with a requested compaction whose
            // summary call meets the fault (a summary is one attempt, never retried).
            main_script.extend([tool_step(), text("first turn done")]);
            summary_script.push(fault_reply(&fault));
        }
    }
    main_script.extend([text("recovered"), text("spare")]);
    let main = FakeProvider::start(main_script).await.unwrap();
    let summary = FakeProvider::start(summary_script).await.unwrap();

    let location;
    let last_turn;
    {
        let (parts, _guards) = cell.parts(&main, &summary);
        let mut agent = Agent::create(parts, cell.store.as_ref()).map_err(|e| e.to_string())?;
        let handle = agent.handle();
        location = handle.location();
        if point == Point::Compaction {
            handle.followup("build history").unwrap();
            let first = agent.run_until_idle().await.map_err(|e| e.to_string())?;
            if first.last().map(|o| &o.reason) != Some(&TurnEndReason::Completed) {
                return Err(format!("setup turn did not complete: {first:?}"));
            }
            handle.request_compaction();
        }
        handle.followup("do the task").unwrap();
        let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_idle())
            .await
            .map_err(|_| "the turn did not end within 30 s".to_string())?
            .map_err(|e| e.to_string())?;
        let outcome = outcomes.last().ok_or("no turn ran")?;
        last_turn = outcome.turn;
        let survives =
            point == Point::Compaction || (fault.retryable && persistence == Persistence::Once);
        match (&outcome.reason, survives) {
            (TurnEndReason::Completed, true) => {
                if outcome.final_text != "recovered" {
                    return Err(format!("final text {:?}", outcome.final_text));
                }
            }
            (TurnEndReason::Error { error }, false) if error.code.as_str() == fault.code => {}
            (other, _) => {
                return Err(format!(
                    "turn ended {other:?}, expected {}",
                    if survives {
                        "completed".to_string()
                    } else {
                        format!("error {}", fault.code)
                    }
                ))
            }
        }
    }

    // The log loads whole, and the turn is closed with the reason it returned.
    let log = load_file(Path::new(&location)).map_err(|e| format!("log does not load: {e}"))?;
    if log.torn_tail.is_some() {
        return Err("torn last line".into());
    }
    let ends: Vec<&TurnEndReason> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnEnd(end) => Some(&end.reason),
            _ => None,
        })
        .collect();
    if ends.len() as u64 != last_turn {
        return Err(format!(
            "{} turn/end events for {last_turn} turns",
            ends.len()
        ));
    }
    let retries = log
        .events
        .iter()
        .filter(|e| e.event.event_type() == "llm/retry")
        .count();
    let expected_retries = match (point, fault.retryable) {
        (Point::Compaction, _) | (_, false) => 0,
        (_, true) => 1,
    };
    if retries != expected_retries {
        return Err(format!(
            "{retries} llm/retry events, expected {expected_retries}"
        ));
    }
    if point == Point::Compaction {
        let end = log
            .events
            .iter()
            .find_map(|e| match &e.event {
                Event::Opaque { event_type, data } if event_type == "compaction/end" => Some(data),
                _ => None,
            })
            .ok_or("no compaction/end")?;
        if end["ok"] != false || !end["warning"].is_string() {
            return Err(format!("compaction/end {end}"));
        }
    }

    // A resume continues with a new turn.
    let resumed_main = FakeProvider::start(vec![text("after resume")])
        .await
        .unwrap();
    let (parts, _guards) = cell.parts(&resumed_main, &summary);
    let mut agent = Agent::resume(parts, cell.store.as_ref(), &location)
        .map_err(|e| format!("resume failed: {e}"))?;
    agent.handle().followup("continue").unwrap();
    let outcomes = agent.run_until_idle().await.map_err(|e| e.to_string())?;
    match outcomes.last() {
        Some(o)
            if o.reason == TurnEndReason::Completed
                && o.turn == last_turn + 1
                && o.final_text == "after resume" =>
        {
            Ok(())
        }
        other => Err(format!("resumed turn: {other:?}")),
    }
}

async fn run_matrix(points: &[Point], persistence: Persistence) {
    let mut failures = Vec::new();
    let mut cells = 0;
    for point in points {
        for fault in FAULTS {
            if persistence == Persistence::Twice && !fault.retryable {
                continue; // the same as `Once` for a fault that is not retried
            }
            cells += 1;
            if let Err(why) = run_cell(fault, *point, persistence).await {
                failures.push(format!(
                    "{point:?} / {} / {persistence:?}: {why}",
                    fault.name
                ));
            }
        }
    }
    assert!(cells > 0);
    assert!(
        failures.is_empty(),
        "{} of {cells} cells failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn faults_at_the_first_step() {
    run_matrix(&[Point::FirstStep], Persistence::Once).await;
}

#[tokio::test]
async fn faults_after_a_tool_call() {
    run_matrix(&[Point::AfterToolCall], Persistence::Once).await;
}

#[tokio::test]
async fn faults_that_outlast_the_retry_budget() {
    run_matrix(
        &[Point::FirstStep, Point::AfterToolCall],
        Persistence::Twice,
    )
    .await;
}

#[tokio::test]
async fn faults_during_compaction() {
    run_matrix(&[Point::Compaction], Persistence::Once).await;
}
