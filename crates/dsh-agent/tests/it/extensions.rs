//! Extension points: tools and adapters contributed by extensions, policy denial, turn-stopping
//! steering, and unregistering by dropping the guard.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::tool_result_text;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{
    Agent, AgentOptions, AgentParts, Extension, ExtensionSet, ReplayAdapter, ToolCallInfo,
    ToolVerdict, TurnStoppingContext,
};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    Message,
};
use dsh_session::{load_file, open_store, Event, StoreKind, TurnEndReason};
use dsh_tools::{SpillDir, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use futures::future::BoxFuture;
use serde_json::{json, Value};

struct Shout;

impl Tool for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn description(&self) -> &str {
        "Upper-cases `text`."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn execute<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let text = args["text"].as_str().unwrap_or_default().to_uppercase();
            Ok(ToolOutput::text(text))
        })
    }
}

/// Contributes the `shout` tool and a scripted model under the route `scripted`.
struct Plugin {
    adapter: Arc<ReplayAdapter>,
}

impl Extension for Plugin {
    fn name(&self) -> &str {
        "plugin"
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Shout)]
    }
    fn adapters(&self) -> Vec<(String, Arc<dyn Adapter>)> {
        vec![(
            "scripted".to_string(),
            self.adapter.clone() as Arc<dyn Adapter>,
        )]
    }
}

/// Records the tool names of every request it sees, and wraps the adapter.
struct Spy {
    inner: Arc<ReplayAdapter>,
    seen_tools: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Adapter for Spy {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.seen_tools
            .lock()
            .unwrap()
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        self.inner.stream(request)
    }
}

struct DenyBash;

impl Extension for DenyBash {
    fn name(&self) -> &str {
        "deny-bash"
    }
    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        if call.name == "shout" && call.arguments.contains("forbidden") {
            ToolVerdict::Deny {
                reason: "shouting that word is not allowed here".into(),
            }
        } else {
            ToolVerdict::Continue
        }
    }
}

struct KeepGoingOnce {
    fired: Mutex<bool>,
}

impl Extension for KeepGoingOnce {
    fn name(&self) -> &str {
        "keep-going"
    }
    fn turn_stopping(&self, _ctx: &TurnStoppingContext<'_>) -> Option<Message> {
        let mut fired = self.fired.lock().unwrap();
        if *fired {
            return None;
        }
        *fired = true;
        Some(dsh_agent::plugin_message(
            "keep-going",
            "notice",
            "Please double-check.",
        ))
    }
}

fn parts(
    home: &std::path::Path,
    cwd: &std::path::Path,
    extensions: ExtensionSet,
    adapters: AdapterRegistry,
    route: &str,
) -> AgentParts {
    AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::new()),
        extensions,
        tool_context: ToolContext::new(cwd, SpillDir::create(home.join("spill")).unwrap()).unwrap(),
        options: AgentOptions::new(CallConfig::new(route, "m"), cwd),
    }
}

/// An agent over a new session in `home`, built from [`parts`].
fn create_agent(
    home: &std::path::Path,
    cwd: &std::path::Path,
    extensions: ExtensionSet,
    adapters: AdapterRegistry,
    route: &str,
) -> Agent {
    let store = open_store(StoreKind::Jsonl, home).unwrap();
    Agent::create(
        parts(home, cwd, extensions, adapters, route),
        store.as_ref(),
    )
    .unwrap()
}

#[tokio::test]
async fn extension_tools_and_adapters_come_and_go_with_their_guard() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "shout", r#"{"text":"hi"}"#),
        tool_call("c2", "shout", r#"{"text":"forbidden"}"#),
        text("first done"),
        text("second"),
    ]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spy = Arc::new(Spy {
        inner: replies.clone(),
        seen_tools: seen.clone(),
    });
    let extensions = ExtensionSet::new();
    let plugin = extensions.register(Arc::new(Plugin {
        adapter: replies.clone(),
    }));
    let _deny = extensions.register(Arc::new(DenyBash));
    let mut adapters = AdapterRegistry::new();
    adapters.register("spy", spy).unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "spy");
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert_eq!(outcome.final_text, "first done");

    drop(plugin);
    handle.followup("again").unwrap();
    agent.run_turn().await.unwrap().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], ["shout"]);
    assert!(
        seen[3].is_empty(),
        "the tool left with its extension: {seen:?}"
    );

    let events = load_file(std::path::Path::new(&handle.location()))
        .unwrap()
        .events;
    let results: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => Some((
                tool_result_text(&r.message),
                r.error.as_ref().map(|e| e.code.clone()),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("HI".to_string(), None));
    assert_eq!(results[1].1.as_deref(), Some("PERMISSION_DENIED"));
    assert!(results[1].0.contains("not allowed"));
}

#[tokio::test]
async fn turn_stopping_can_steer_into_another_step() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![text("done?"), text("checked")]));
    let extensions = ExtensionSet::new();
    let _keep = extensions.register(Arc::new(KeepGoingOnce {
        fired: Mutex::new(false),
    }));
    let mut adapters = AdapterRegistry::new();
    adapters.register("r", replies).unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "r");
    agent.handle().followup("go").unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), agent.run_turn())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(outcome.final_text, "checked");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
}

#[test]
fn unknown_route_fails_at_start_with_no_adapter() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let err = Agent::create(
        parts(
            home.path(),
            cwd.path(),
            ExtensionSet::new(),
            AdapterRegistry::new(),
            "nowhere",
        ),
        store.as_ref(),
    )
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("NO_ADAPTER") || err.to_string().contains("no adapter"),
        "{err}"
    );
}

fn last_title(location: &str) -> (String, String) {
    load_file(std::path::Path::new(location))
        .unwrap()
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::SessionTitle(t) => Some((
                t.title.clone(),
                t.source
                    .as_ref()
                    .and_then(|s| s["kind"].as_str())
                    .unwrap_or_default()
                    .to_string(),
            )),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn model_titles_replace_the_fallback_and_failures_keep_it() {
    for (title_reply, expected) in [
        (
            text("\"Fix the flaky parser test.\""),
            ("Fix the flaky parser test", "model"),
        ),
        (
            vec![Chunk::Finish {
                reason: FinishReason::Error {
                    failure: dsh_llm::Failure::new(dsh_llm::FailureCode::Server, "down"),
                },
            }],
            ("please fix the flaky parser", "fallback"),
        ),
    ] {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let mut adapters = AdapterRegistry::new();
        adapters
            .register("main", Arc::new(ReplayAdapter::new(vec![text("ok")])))
            .unwrap();
        adapters
            .register("titles", Arc::new(ReplayAdapter::new(vec![title_reply])))
            .unwrap();
        let mut parts = parts(
            home.path(),
            cwd.path(),
            ExtensionSet::new(),
            adapters,
            "main",
        );
        parts.options.titles = dsh_agent::TitleMode::Model {
            route: Some("titles".into()),
            model: None,
        };
        let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
        let mut agent = Agent::create(parts, store.as_ref()).unwrap();
        let handle = agent.handle();
        handle
            .followup("please fix the flaky parser test in src/parse.rs")
            .unwrap();
        agent.run_until_idle().await.unwrap();
        let (title, kind) = last_title(&handle.location());
        assert_eq!((title.as_str(), kind.as_str()), expected);
    }
}

/// Keeps what `attach` gave it, as real extensions (hooks, subagents) do.
#[derive(Default)]
struct KeepsAttached {
    attached: Mutex<Option<dsh_agent::AttachedAgent>>,
}

impl Extension for KeepsAttached {
    fn name(&self) -> &str {
        "keeps-attached"
    }
    fn attach(&self, agent: &dsh_agent::AttachedAgent) {
        *self.attached.lock().unwrap() = Some(agent.clone());
    }
}

#[tokio::test]
async fn an_extension_keeping_its_agent_does_not_keep_the_session_alive() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![text("hi")]));
    let keeper = Arc::new(KeepsAttached::default());
    let extensions = ExtensionSet::new();
    extensions.register_for_life(keeper.clone());
    let mut adapters = AdapterRegistry::new();
    adapters.register("r", replies).unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "r");
    let handle = agent.handle();
    let mut events = handle.subscribe();
    handle.followup("go").unwrap();
    agent.run_until_idle().await.unwrap();
    let attached = keeper.attached.lock().unwrap().clone().unwrap();
    assert!(
        attached.handle.upgrade().is_some(),
        "reachable while the agent lives"
    );
    drop(handle);
    drop(agent);
    // Every event was delivered, then the channel closes: front ends waiting on it finish.
    let mut seen = 0;
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Ok(_) => seen += 1,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return true,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(closed, "the session's event channel never closed");
    assert!(seen > 0);
    assert!(attached.handle.upgrade().is_none());
}

/// Adds a reminder to the messages of every second request it sees.
struct RemindsEveryOther {
    seen: Mutex<usize>,
}

impl Extension for RemindsEveryOther {
    fn name(&self) -> &str {
        "reminds"
    }
    fn request(&self, request: &mut GenerateRequest) {
        let mut seen = self.seen.lock().unwrap();
        *seen += 1;
        if seen.is_multiple_of(2) {
            Arc::make_mut(&mut request.messages).push(Message::user_text("reminder", "Be brief."));
        }
    }
}

/// The history lineage and message count of one request.
type SeenLineage = (Option<dsh_llm::HistoryLineage>, usize);

/// Records the history lineage and message count of every request, and wraps the adapter.
struct LineageSpy {
    inner: Arc<ReplayAdapter>,
    seen: Arc<Mutex<Vec<SeenLineage>>>,
}

impl Adapter for LineageSpy {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.seen
            .lock()
            .unwrap()
            .push((request.history_lineage, request.messages.len()));
        self.inner.stream(request)
    }
}

/// An extension that changes a request's messages makes them its own: the request then
/// carries no history lineage, so no adapter reuses what it made of the log's history for them
/// (docs/model-calls.md, "History lineage").
#[tokio::test]
async fn messages_an_extension_changed_carry_no_lineage() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "shout", r#"{"text":"a"}"#),
        tool_call("c2", "shout", r#"{"text":"b"}"#),
        tool_call("c3", "shout", r#"{"text":"c"}"#),
        text("done"),
    ]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let extensions = ExtensionSet::new();
    let _plugin = extensions.register(Arc::new(Plugin {
        adapter: replies.clone(),
    }));
    let _reminds = extensions.register(Arc::new(RemindsEveryOther {
        seen: Mutex::new(0),
    }));
    let mut adapters = AdapterRegistry::new();
    let spy = Arc::new(LineageSpy {
        inner: replies,
        seen: seen.clone(),
    });
    adapters.register("spy", spy).unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "spy");
    agent.handle().followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let untouched = seen[0].0.expect("the log's own history has its lineage");
    for (k, (lineage, _)) in seen.iter().enumerate() {
        if k % 2 == 1 {
            assert_eq!(*lineage, None, "request {k} was changed by the extension");
        } else {
            assert_eq!(*lineage, Some(untouched), "request {k}");
        }
    }
}

/// Appends a line to the system prompt of every request it sees.
struct SignsTheSystemPrompt;

impl Extension for SignsTheSystemPrompt {
    fn name(&self) -> &str {
        "signs"
    }
    fn request(&self, request: &mut GenerateRequest) {
        request.system.push_str("\nSigned by a request hook.");
    }
}

/// A `request` hook that changes the system prompt makes a model-visible change: the header
/// the provider received is the last one logged before each call (model-visible means logged).
#[tokio::test]
async fn a_header_changed_by_a_request_hook_is_logged() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "shout", r#"{"text":"a"}"#),
        text("done"),
    ]));
    let extensions = ExtensionSet::new();
    let _plugin = extensions.register(Arc::new(Plugin {
        adapter: replies.clone(),
    }));
    let _signs = extensions.register(Arc::new(SignsTheSystemPrompt));
    let mut adapters = AdapterRegistry::new();
    adapters.register("replay", replies).unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "replay");
    let handle = agent.handle();
    handle.followup("go").unwrap();
    agent.run_turn().await.unwrap().unwrap();
    let events = load_file(std::path::Path::new(&handle.location()))
        .unwrap()
        .events;
    let mut last_system = None;
    let mut calls = 0;
    for event in &events {
        match &event.event {
            Event::RequestHeader(header) => last_system = Some(header.header.system.clone()),
            Event::AssistantChunk(chunk) if matches!(chunk.chunk, Chunk::Finish { .. }) => {
                calls += 1;
                let system = last_system.as_deref().expect("a header before the call");
                assert!(
                    system.ends_with("Signed by a request hook."),
                    "call {calls} went out with a header that was not logged: {system:?}"
                );
            }
            _ => {}
        }
    }
    assert_eq!(calls, 2);
}

/// Records what happened in order: the boundary work, requests and tool runs.
type Timeline = Arc<Mutex<Vec<String>>>;

/// Turn-boundary work that takes a while and says when it starts and ends.
struct SlowBoundary {
    timeline: Timeline,
}

impl Extension for SlowBoundary {
    fn name(&self) -> &str {
        "slow-boundary"
    }
    fn turn_boundary(
        &self,
        boundary: dsh_agent::TurnBoundary,
    ) -> Option<BoxFuture<'static, Vec<Event>>> {
        let timeline = self.timeline.clone();
        let name = match boundary {
            dsh_agent::TurnBoundary::Start(_) => "start",
            dsh_agent::TurnBoundary::End(_) => "end",
        };
        Some(Box::pin(async move {
            timeline.lock().unwrap().push(format!("{name} work begins"));
            tokio::time::sleep(Duration::from_millis(300)).await;
            timeline.lock().unwrap().push(format!("{name} work ends"));
            vec![Event::Opaque {
                event_type: dsh_session::WORKSPACE_CHECKPOINT_EVENT.into(),
                data: json!({"at": name}),
            }]
        }))
    }
    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        self.timeline
            .lock()
            .unwrap()
            .push(format!("tool {}", call.name));
        ToolVerdict::Continue
    }
}

/// Notes each request on the timeline.
struct TimedAdapter {
    inner: Arc<ReplayAdapter>,
    timeline: Timeline,
}

impl Adapter for TimedAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.timeline.lock().unwrap().push("request".into());
        self.inner.stream(request)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_start_work_runs_beside_the_first_request_and_before_any_tool() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let timeline: Timeline = Arc::new(Mutex::new(Vec::new()));
    let replies = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "shout", r#"{"text":"hi"}"#),
        text("done"),
    ]));
    let extensions = ExtensionSet::new();
    let _plugin = extensions.register(Arc::new(Plugin {
        adapter: replies.clone(),
    }));
    let _slow = extensions.register(Arc::new(SlowBoundary {
        timeline: timeline.clone(),
    }));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register(
            "timed",
            Arc::new(TimedAdapter {
                inner: replies,
                timeline: timeline.clone(),
            }),
        )
        .unwrap();
    let mut agent = create_agent(home.path(), cwd.path(), extensions, adapters, "timed");
    let handle = agent.handle();
    handle.followup("go").unwrap();
    agent.run_turn().await.unwrap().unwrap();
    let timeline = timeline.lock().unwrap().clone();
    let at = |what: &str| timeline.iter().position(|t| t == what).unwrap();
    // The first request does not wait for the start work; the tool does.
    assert!(at("request") < at("start work ends"), "{timeline:?}");
    assert!(at("start work ends") < at("tool shout"), "{timeline:?}");
    assert!(at("tool shout") < at("end work begins"), "{timeline:?}");
    // Both boundaries' events are logged, the start's before the turn's end.
    let events = load_file(std::path::Path::new(&handle.location()))
        .unwrap()
        .events;
    let position = |pred: &dyn Fn(&Event) -> bool| events.iter().position(|e| pred(&e.event));
    let start = position(&|e| matches!(e, Event::Opaque { data, .. } if data["at"] == "start"));
    let end = position(&|e| matches!(e, Event::Opaque { data, .. } if data["at"] == "end"));
    let turn_end = position(&|e| matches!(e, Event::TurnEnd(_)));
    assert!(start.unwrap() < turn_end.unwrap());
    assert!(turn_end.unwrap() < end.unwrap());
}
