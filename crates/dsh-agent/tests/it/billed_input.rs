//! Billed input over a scripted 100-turn session (docs/agent.md, "Context discipline"): what
//! caching discipline and compaction save against naive resending.
//!
//! The model is simulated in process and bills like a prefix-caching provider: each request's
//! prompt (system, tools, messages rendered as JSON) costs one token per 4 bytes; the part that
//! repeats the previous request's prompt from its first byte is a cache read, the rest is
//! uncached input. Naive resending bills every prompt in full (the quadratic sum). The figures
//! are computed from the usage the loop logged. Run with `--nocapture` to see the table that
//! `docs/PERFORMANCE.md` records.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::sync::{Arc, Mutex};

use dsh_agent::{Agent, AgentOptions, AgentParts, CompactionSettings, ExtensionSet};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    Purpose, RetryPolicy, Usage,
};
use dsh_session::{load_file, open_store, Event, StoreKind};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

const TURNS: usize = 100;

/// A prefix-caching model: every ordinary request first asks for one `read` of a file, then
/// answers; summaries are short.
struct CachingModel {
    previous_prompt: Mutex<String>,
    step: Mutex<usize>,
}

fn render(request: &GenerateRequest) -> String {
    let mut prompt = request.system.clone();
    prompt.push_str(&serde_json::to_string(&*request.tools).unwrap_or_default());
    for message in request.messages.iter() {
        prompt.push_str(&serde_json::to_string(message).unwrap_or_default());
    }
    prompt
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

impl Adapter for CachingModel {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let prompt = render(&request);
        let mut previous = self.previous_prompt.lock().unwrap();
        let cached = common_prefix(&previous, &prompt);
        *previous = prompt.clone();
        let usage = Usage {
            input_tokens: ((prompt.len() - cached) / 4) as u64,
            cache_read_tokens: (cached / 4) as u64,
            output_tokens: 40,
            ..Usage::default()
        };
        let mut chunks = Vec::new();
        if request.purpose == Some(Purpose::Compaction) {
            chunks.push(Chunk::TextDelta {
                index: 0,
                text: "## Goal\nAnswer questions about the files.\n## Next step\nKeep going."
                    .into(),
            });
            chunks.push(Chunk::Usage { usage });
            chunks.push(Chunk::Finish {
                reason: FinishReason::Stop,
            });
            return Box::pin(futures::stream::iter(chunks));
        }
        let mut step = self.step.lock().unwrap();
        *step += 1;
        if *step % 2 == 1 {
            chunks.push(Chunk::ToolCallDelta {
                index: 0,
                id: format!("call_{step}"),
                name: Some("read".into()),
                arguments_delta: format!(r#"{{"file_path": "notes{}.txt"}}"#, (*step / 2) % 5),
            });
            chunks.push(Chunk::Usage { usage });
            chunks.push(Chunk::Finish {
                reason: FinishReason::ToolCalls,
            });
        } else {
            chunks.push(Chunk::TextDelta {
                index: 0,
                text: format!("Answer {}: the notes say what they say.", *step / 2),
            });
            chunks.push(Chunk::Usage { usage });
            chunks.push(Chunk::Finish {
                reason: FinishReason::Stop,
            });
        }
        Box::pin(futures::stream::iter(chunks))
    }
}

struct Totals {
    requests: usize,
    uncached: u64,
    cache_read: u64,
}

async fn run(compaction: bool) -> Totals {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for k in 0..5 {
        let body: String = (0..120)
            .map(|line| format!("note {k}.{line}: some project fact worth reading\n"))
            .collect();
        std::fs::write(cwd.path().join(format!("notes{k}.txt")), body).unwrap();
    }
    let mut adapters = AdapterRegistry::new();
    adapters
        .register(
            "sim",
            Arc::new(CachingModel {
                previous_prompt: Mutex::new(String::new()),
                step: Mutex::new(0),
            }),
        )
        .unwrap();
    let extensions = ExtensionSet::new();
    let _guards = dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        std::time::Duration::from_secs(30),
    );
    let mut options = AgentOptions::new(CallConfig::new("sim", "sim"), cwd.path());
    options.context_window = Some(64_000);
    options.compaction = CompactionSettings {
        enabled: compaction,
        ..CompactionSettings::default()
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context: ToolContext::new(
                cwd.path(),
                SpillDir::create(home.path().join("spill")).unwrap(),
            )
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess),
            options,
        },
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    for turn in 0..TURNS {
        handle
            .followup(format!("Question {turn}: what do the notes say?"))
            .unwrap();
        agent.run_until_idle().await.unwrap();
    }
    let events = load_file(std::path::Path::new(&handle.location()))
        .unwrap()
        .events;
    let mut totals = Totals {
        requests: 0,
        uncached: 0,
        cache_read: 0,
    };
    for event in &events {
        let usage = match &event.event {
            Event::AssistantMessage(m) => m.usage,
            Event::Opaque { event_type, data } if event_type == "compaction/summary" => {
                serde_json::from_value::<Usage>(data["usage"].clone()).ok()
            }
            _ => None,
        };
        if let Some(usage) = usage {
            totals.requests += 1;
            totals.uncached += usage.input_tokens;
            totals.cache_read += usage.cache_read_tokens;
        }
    }
    totals
}

#[tokio::test]
async fn caching_and_compaction_beat_naive_resending() {
    let without = run(false).await;
    let with = run(true).await;
    // Naive: every prompt billed in full as uncached input, no compaction.
    let naive = without.uncached + without.cache_read;
    // DeepSeek V4 flash prices (USD per million tokens), as in the default price table.
    let price =
        |uncached: u64, cached: u64| (uncached as f64 * 0.14 + cached as f64 * 0.0028) / 1e6;
    println!(
        "| strategy | requests | uncached input | cache read | billed input | input cost (USD) |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| naive resending (no cache, no compaction) | {} | {naive} | 0 | {naive} | {:.4} |",
        without.requests,
        price(naive, 0)
    );
    println!(
        "| byte-stable prefix, no compaction | {} | {} | {} | {} | {:.4} |",
        without.requests,
        without.uncached,
        without.cache_read,
        without.uncached + without.cache_read,
        price(without.uncached, without.cache_read)
    );
    println!(
        "| byte-stable prefix + compaction (64K window) | {} | {} | {} | {} | {:.4} |",
        with.requests,
        with.uncached,
        with.cache_read,
        with.uncached + with.cache_read,
        price(with.uncached, with.cache_read)
    );
    assert!(
        without.uncached * 10 < naive,
        "caching should make most input cache reads"
    );
    assert!(
        with.uncached + with.cache_read < naive,
        "compaction should cut billed input"
    );
}
