//! Long run: a scripted 1,000-step session (4 turns of 250 tool steps: `read` and `todo_write`,
//! with `grep` and `glob` every 25 steps) against an in-process model with a 16,000-token
//! window, so that compaction runs many times. Checks that resident memory stays bounded once warmed up
//! (RSS from `/proc/self/status`; the growth per step must be near zero, with a generous
//! bound), that the history sent to the model stays under the window, and that the log loads
//! and resumes into a fifth turn.
//!
//! The session lives on `/dev/shm` when it exists (fsync is then free), so the test measures
//! the harness rather than the disk; it takes a few seconds in a debug build.
//! `DSH_LONG_RUN_STEPS=<n>` changes the number of steps (a multiple of 4 turns).
//!
//! This file is a test binary of its own, not a module of `tests/it/`: resident memory is a
//! property of the whole process, so other tests allocating beside it would make the growth it
//! measures meaningless.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    Purpose, RetryPolicy, Usage,
};
use dsh_session::{load_file, open_store, Event, SessionStore, StoreKind, TurnEndReason};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

const WINDOW: u64 = 16_000;
const TURNS: usize = 4;

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[derive(Default)]
struct Stats {
    calls: usize,
    summaries: usize,
    /// Largest request (message bytes / 4) seen, in estimated tokens.
    largest_request_tokens: u64,
    /// RSS samples: (model calls so far, KiB).
    rss: Vec<(usize, u64)>,
}

/// Calls a tool at every step until `steps_per_turn` steps of the turn have run, then answers.
struct LongModel {
    steps_per_turn: usize,
    stats: Mutex<Stats>,
}

fn reply(chunks: Vec<Chunk>) -> ChunkStream {
    Box::pin(futures::stream::iter(chunks))
}

impl Adapter for LongModel {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let mut stats = self.stats.lock().unwrap();
        let bytes: usize = request
            .messages
            .iter()
            .map(|m| serde_json::to_vec(m).unwrap().len())
            .sum::<usize>()
            + request.system.len();
        stats.largest_request_tokens = stats.largest_request_tokens.max(bytes as u64 / 4);
        let usage = Usage {
            input_tokens: bytes as u64 / 4,
            output_tokens: 20,
            ..Usage::default()
        };
        if request.purpose == Some(Purpose::Compaction) {
            stats.summaries += 1;
            return reply(vec![
                Chunk::TextDelta {
                    index: 0,
                    text: format!(
                        "## Goal\ninspect the files\n## Progress\n{} summaries so far\n## Next step\ncontinue",
                        stats.summaries
                    ),
                },
                Chunk::Usage { usage },
                Chunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]);
        }
        stats.calls += 1;
        let call = stats.calls;
        if call.is_multiple_of(50) {
            stats.rss.push((call, rss_kib()));
        }
        // Steps of the current turn so far: the model answers once per turn after the last one.
        let in_turn = (call - 1) % (self.steps_per_turn + 1);
        if in_turn == self.steps_per_turn {
            return reply(vec![
                Chunk::TextDelta {
                    index: 0,
                    text: format!("turn done after {call} calls"),
                },
                Chunk::Usage { usage },
                Chunk::Finish {
                    reason: FinishReason::Stop,
                },
            ]);
        }
        // Mostly `read` and `todo_write`; `grep` and `glob` (slow in debug builds: a walker
        // pool and a regex per call) now and then.
        let (name, arguments) = if call.is_multiple_of(25) {
            ("grep", r#"{"pattern": "fox \\d+"}"#.to_string())
        } else if call % 25 == 12 {
            ("glob", r#"{"pattern": "**/*.txt"}"#.to_string())
        } else if !call.is_multiple_of(2) {
            ("read", r#"{"file_path": "notes.txt"}"#.to_string())
        } else {
            (
                "todo_write",
                format!(
                    r#"{{"todos": [{{"content": "step {call}", "status": "in_progress"}}, {{"content": "later", "status": "pending"}}]}}"#
                ),
            )
        };
        reply(vec![
            Chunk::ReasoningDelta {
                index: 0,
                text: format!("Step {call}: I will use {name}."),
            },
            Chunk::ToolCallDelta {
                index: 1,
                id: format!("call_{call}"),
                name: Some(name.into()),
                arguments_delta: arguments,
            },
            Chunk::Usage { usage },
            Chunk::Finish {
                reason: FinishReason::ToolCalls,
            },
        ])
    }
}

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

fn parts(
    home: &Path,
    cwd: &Path,
    model: Arc<LongModel>,
) -> (AgentParts, Vec<dsh_agent::ExtensionGuard>) {
    let mut adapters = AdapterRegistry::new();
    adapters.register("scripted", model).unwrap();
    let extensions = ExtensionSet::new();
    let guards = dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        Duration::from_secs(30),
    );
    let mut options = AgentOptions::new(CallConfig::new("scripted", "long"), cwd);
    options.context_window = Some(WINDOW);
    // Longer turns than the default guard allows when DSH_LONG_RUN_STEPS asks for them.
    options.max_steps_per_turn = 100_000;
    (
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context: ToolContext::new(cwd, SpillDir::create(home.join("spill")).unwrap())
                .unwrap()
                .with_permission(PermissionPreset::WorkspaceWrite),
            options,
        },
        guards,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_step_session_stays_bounded_and_resumes() {
    let steps: usize = std::env::var("DSH_LONG_RUN_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let steps_per_turn = steps / TURNS;
    let home = scratch_dir();
    let cwd = scratch_dir();
    let line = "the quick brown fox 42 jumps over the lazy dog\n";
    std::fs::write(cwd.path().join("notes.txt"), line.repeat(40)).unwrap();
    for k in 0..20 {
        std::fs::create_dir_all(cwd.path().join(format!("d{}", k % 5))).unwrap();
        std::fs::write(cwd.path().join(format!("d{}/f{k}.txt", k % 5)), line).unwrap();
    }
    let store: Box<dyn SessionStore> = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let model = Arc::new(LongModel {
        steps_per_turn,
        stats: Mutex::new(Stats::default()),
    });

    let start = Instant::now();
    let location = {
        let (parts, _guards) = parts(home.path(), cwd.path(), Arc::clone(&model));
        let mut agent = Agent::create(parts, store.as_ref()).unwrap();
        let handle = agent.handle();
        for turn in 1..=TURNS {
            handle
                .followup(format!("inspect the files, round {turn}"))
                .unwrap();
            let outcomes = agent.run_until_idle().await.unwrap();
            assert_eq!(outcomes.len(), 1);
            assert_eq!(outcomes[0].reason, TurnEndReason::Completed, "turn {turn}");
        }
        handle.location()
    };
    let elapsed = start.elapsed();

    {
        let stats = model.stats.lock().unwrap();
        assert_eq!(stats.calls, TURNS * (steps_per_turn + 1));
        assert!(
            stats.summaries >= 2,
            "only {} compaction summaries",
            stats.summaries
        );
        assert!(
            stats.largest_request_tokens < WINDOW,
            "a request of ~{} tokens went over the {WINDOW}-token window",
            stats.largest_request_tokens
        );
        // Memory: after warm-up (the first fifth of the run, which includes the first
        // compactions), resident memory must not grow with the number of steps.
        let warm = stats.rss.len() / 5;
        let (warm_call, warm_rss) = stats.rss[warm];
        let peak_rss = stats.rss[warm..].iter().map(|(_, r)| *r).max().unwrap();
        let (last_call, _) = *stats.rss.last().unwrap();
        let growth_per_step =
            (peak_rss.saturating_sub(warm_rss) * 1024) / (last_call - warm_call) as u64;
        eprintln!(
            "long run: {} model calls, {} summaries, {:.1} s, RSS {} KiB after warm-up (call {warm_call}), peak {} KiB, {} B/step growth, largest request ~{} tokens",
            stats.calls,
            stats.summaries,
            elapsed.as_secs_f64(),
            warm_rss,
            peak_rss,
            growth_per_step,
            stats.largest_request_tokens,
        );
        assert!(
            growth_per_step < 8 * 1024,
            "RSS grew {growth_per_step} bytes per step after warm-up ({warm_rss} -> {peak_rss} KiB)"
        );
    }

    // The log loads whole, with every turn closed.
    let log = load_file(Path::new(&location)).unwrap();
    assert!(log.torn_tail.is_none());
    let completed = log
        .events
        .iter()
        .filter(
            |e| matches!(&e.event, Event::TurnEnd(end) if end.reason == TurnEndReason::Completed),
        )
        .count();
    assert_eq!(completed, TURNS);
    let compactions = log
        .events
        .iter()
        .filter(|e| matches!(&e.event, Event::Opaque { event_type, data } if event_type == "compaction/end" && data["ok"] == true))
        .count();
    assert!(compactions >= 2, "{compactions} successful compactions");

    // And resumes into a new turn (of two tool steps).
    let short = Arc::new(LongModel {
        steps_per_turn: 2,
        stats: Mutex::new(Stats::default()),
    });
    let (parts, _guards) = parts(home.path(), cwd.path(), short);
    let mut agent = Agent::resume(parts, store.as_ref(), &location).unwrap();
    agent.handle().followup("one more round").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].turn, TURNS as u64 + 1);
    assert_eq!(outcomes[0].reason, TurnEndReason::Completed);
}
