//! Delegation: foreground and background subagents, the depth limit, and cancel propagation.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ChildFactory, ExtensionSet, Subagents};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    MessageSource, RetryPolicy,
};
use dsh_session::{load_file, open_store, Event, StoreKind, TurnEndReason};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

/// Answers by looking at the conversation: a rule maps the first user text and the number of
/// tool results so far to a reply.
type Rule = Box<dyn Fn(&str, usize, &GenerateRequest) -> Vec<Chunk> + Send + Sync>;

struct ByPrompt {
    rule: Rule,
    tool_names: Mutex<Vec<Vec<String>>>,
}

impl Adapter for ByPrompt {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.tool_names
            .lock()
            .unwrap()
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        let first_user = request
            .messages
            .iter()
            .find(|m| matches!(m.source, MessageSource::User))
            .map(|m| m.text())
            .unwrap_or_default();
        let results = request
            .messages
            .iter()
            .filter(|m| matches!(m.source, MessageSource::Tool { .. }))
            .count();
        Box::pin(futures::stream::iter((self.rule)(
            &first_user,
            results,
            &request,
        )))
    }
}

fn call(id: &str, name: &str, args: &str) -> Vec<Chunk> {
    vec![
        Chunk::ToolCallDelta {
            index: 0,
            id: id.into(),
            name: Some(name.into()),
            arguments_delta: args.into(),
        },
        Chunk::Usage {
            usage: dsh_llm::Usage {
                input_tokens: 10,
                output_tokens: 1,
                ..Default::default()
            },
        },
        Chunk::Finish {
            reason: FinishReason::ToolCalls,
        },
    ]
}

fn say(text: &str) -> Vec<Chunk> {
    vec![
        Chunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        Chunk::Usage {
            usage: dsh_llm::Usage {
                input_tokens: 10,
                output_tokens: 1,
                ..Default::default()
            },
        },
        Chunk::Finish {
            reason: FinishReason::Stop,
        },
    ]
}

fn parts_at(depth: u64, adapter: Arc<ByPrompt>, home: PathBuf, cwd: PathBuf) -> AgentParts {
    let mut adapters = AdapterRegistry::new();
    adapters.register("m", adapter.clone()).unwrap();
    let extensions = ExtensionSet::new();
    for guard in dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        Duration::from_secs(30),
    ) {
        std::mem::forget(guard);
    }
    let factory: ChildFactory = {
        let (adapter, home, cwd) = (adapter.clone(), home.clone(), cwd.clone());
        Arc::new(move |d| Ok(parts_at(d, adapter.clone(), home.clone(), cwd.clone())))
    };
    extensions.register_for_life(Arc::new(Subagents::new(depth, factory)));
    AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(&cwd, SpillDir::create(home.join("spill")).unwrap())
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess),
        options: AgentOptions::new(CallConfig::new("m", "m"), &cwd),
    }
}

fn child_logs(parent: &Path) -> Vec<PathBuf> {
    let dir = parent.parent().unwrap().join("subagents");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("session.jsonl"))
                .collect()
        })
        .unwrap_or_default()
}

fn last_end(path: &Path) -> TurnEndReason {
    load_file(path)
        .unwrap()
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::TurnEnd(t) => Some(t.reason.clone()),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn a_foreground_subagent_uses_a_tool_and_answers() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("a.txt"), "alpha").unwrap();
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|first, results, _| match (first, results) {
            ("count the files", 0) => call(
                "p1",
                "subagent",
                r#"{"description": "count", "prompt": "CHILD: list the files"}"#,
            ),
            ("count the files", _) => say("parent done"),
            ("CHILD: list the files", 0) => call("c1", "glob", r#"{"pattern": "*.txt"}"#),
            ("CHILD: list the files", _) => say("child answer: one file, a.txt"),
            _ => say("unexpected"),
        }),
        tool_names: Mutex::new(Vec::new()),
    });
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter.clone(), home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("count the files").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    assert_eq!(outcomes[0].usage.requests, 4, "child requests roll up");

    let parent_log = PathBuf::from(handle.location());
    let events = load_file(&parent_log).unwrap().events;
    let result = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ToolResult(r) => Some(r.message.clone()),
            _ => None,
        })
        .unwrap();
    assert!(serde_json::to_string(&result)
        .unwrap()
        .contains("child answer: one file, a.txt"));
    let children = child_logs(&parent_log);
    assert_eq!(children.len(), 1);
    let child = load_file(&children[0]).unwrap();
    assert_eq!(
        child.header.parent_session.as_deref(),
        Some(handle.session_id().as_str())
    );
    assert_eq!(child.header.delegation_depth, Some(1));
    assert_eq!(last_end(&children[0]), TurnEndReason::Completed);
}

#[tokio::test]
async fn a_background_subagent_reports_in_a_later_step() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|first, results, request| {
            let saw_completion = request
                .messages
                .iter()
                .any(|m| m.text().contains("Background subagent"));
            match (first, results) {
                ("research", 0) => call(
                    "p1",
                    "subagent",
                    r#"{"description": "bg", "prompt": "CHILD: research", "run_in_background": true}"#,
                ),
                ("research", _) if !saw_completion => call(
                    &format!("wait{results}"),
                    "bash",
                    r#"{"command": "sleep 0.3", "description": "wait"}"#,
                ),
                ("research", _) => say("got the background answer"),
                ("CHILD: research", _) => say("the answer is 42"),
                _ => say("unexpected"),
            }
        }),
        tool_names: Mutex::new(Vec::new()),
    });
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter, home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("research").unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        outcomes.len(),
        1,
        "the completion arrived within the running turn"
    );
    assert_eq!(outcomes[0].final_text, "got the background answer");
    let events = load_file(Path::new(&handle.location())).unwrap().events;
    let completion = events.iter().any(
        |e| matches!(&e.event, Event::UserMessage(m) if m.text().contains("the answer is 42")),
    );
    assert!(completion);
}

#[tokio::test]
async fn delegation_stops_at_the_depth_limit() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|_, results, _| {
            if results == 0 {
                call(
                    "p1",
                    "subagent",
                    r#"{"description": "x", "prompt": "deeper"}"#,
                )
            } else {
                say("stopped")
            }
        }),
        tool_names: Mutex::new(Vec::new()),
    });
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(3, adapter.clone(), home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("go deep").unwrap();
    agent.run_until_idle().await.unwrap();
    let tools = adapter.tool_names.lock().unwrap()[0].clone();
    assert!(
        !tools.iter().any(|t| t.starts_with("subagent")),
        "{tools:?}"
    );
    let events = load_file(Path::new(&handle.location())).unwrap().events;
    let code = events.iter().find_map(|e| match &e.event {
        Event::ToolResult(r) => r.error.as_ref().map(|e| e.code.clone()),
        _ => None,
    });
    assert_eq!(code.as_deref(), Some("UNKNOWN_TOOL"));
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|first, results, _| match (first, results) {
            ("delegate", 0) => call(
                "p1",
                "subagent",
                r#"{"description": "slow", "prompt": "CHILD: wait"}"#,
            ),
            ("CHILD: wait", 0) => call(
                "c1",
                "bash",
                r#"{"command": "echo $$ > child.pid; sleep 30", "description": "wait"}"#,
            ),
            _ => say("done"),
        }),
        tool_names: Mutex::new(Vec::new()),
    });
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter, home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("delegate").unwrap();
    let pid_file = cwd.path().join("child.pid");
    let canceller = {
        let handle = handle.clone();
        let pid_file = pid_file.clone();
        tokio::spawn(async move {
            while !pid_file.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            handle.cancel(false);
        })
    };
    let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    canceller.await.unwrap();
    assert!(matches!(outcomes[0].reason, TurnEndReason::Aborted { .. }));
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    };
    for _ in 0..100 {
        if gone(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone(pid), "the child's process survived");
    let children = child_logs(Path::new(&handle.location()));
    assert_eq!(children.len(), 1);
    assert!(matches!(
        last_end(&children[0]),
        TurnEndReason::Aborted { .. }
    ));
}

#[tokio::test]
async fn a_forked_subagent_starts_from_the_parents_history() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let adapter = Arc::new(ByPrompt {
        rule: Box::new({
            let seen = seen.clone();
            move |first, results, request| {
                let last = request
                    .messages
                    .last()
                    .map(|m| m.text())
                    .unwrap_or_default();
                if last == "CHILD: summarise what we did" {
                    seen.lock().unwrap().push(
                        request
                            .messages
                            .iter()
                            .map(|m| m.text())
                            .collect::<Vec<_>>(),
                    );
                    return say("we said hello");
                }
                let _ = (first, results);
                let last_is_result = request
                    .messages
                    .last()
                    .is_some_and(|m| matches!(m.source, MessageSource::Tool { .. }));
                match (last.as_str(), last_is_result) {
                    ("hello", false) => say("hi there"),
                    (_, false) => call(
                        "p1",
                        "subagent_fork",
                        r#"{"description": "recap", "prompt": "CHILD: summarise what we did"}"#,
                    ),
                    _ => say("parent done"),
                }
            }
        }),
        tool_names: Mutex::new(Vec::new()),
    });
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter, home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("hello").unwrap();
    agent.run_until_idle().await.unwrap();
    handle.followup("now fork").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let texts = &seen[0];
    assert!(
        texts.contains(&"hello".to_string()) && texts.contains(&"hi there".to_string()),
        "{texts:?}"
    );
    assert!(texts.contains(&"now fork".to_string()));
    let child = child_logs(Path::new(&handle.location())).remove(0);
    let events = load_file(&child).unwrap().events;
    assert!(events.iter().any(|e| matches!(e.event, Event::EndSeed(_))));
}
