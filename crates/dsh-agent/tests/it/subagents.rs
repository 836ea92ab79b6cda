//! Delegation: foreground and background subagents, concurrency and its cap, background
//! children as jobs, the depth limit, and cancel propagation.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::time::Instant;

use dsh_agent::{Agent, AgentParts, ChildFactory, Subagents};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    MessageSource,
};
use dsh_session::{load_file, open_store, Event, StoreKind, TurnEndReason};
use dsh_test_support::process::alive;

use crate::delegation::{tool_results, wait_gone};

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

/// Several tool calls in one reply.
fn calls(list: &[(&str, &str, &str)]) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = list
        .iter()
        .enumerate()
        .map(|(index, (id, name, args))| Chunk::ToolCallDelta {
            index: index as u32,
            id: (*id).into(),
            name: Some((*name).into()),
            arguments_delta: (*args).into(),
        })
        .collect();
    chunks.push(Chunk::Finish {
        reason: FinishReason::ToolCalls,
    });
    chunks
}

fn parts_at(depth: u64, adapter: Arc<ByPrompt>, home: PathBuf, cwd: PathBuf) -> AgentParts {
    parts_with(depth, adapter, home, cwd, dsh_agent::DEFAULT_MAX_CONCURRENT)
}

/// An agent's parts at `depth` with job tools (its own `JobTable`, announced by
/// `BackgroundJobs` as in the runtime) and at most `max` children at once.
fn parts_with(
    depth: u64,
    adapter: Arc<ByPrompt>,
    home: PathBuf,
    cwd: PathBuf,
    max: usize,
) -> AgentParts {
    let mut adapters = AdapterRegistry::new();
    adapters.register("m", adapter.clone()).unwrap();
    let factory: ChildFactory = {
        let (adapter, home, cwd) = (adapter.clone(), home.clone(), cwd.clone());
        Arc::new(move |d| {
            Ok(parts_with(
                d,
                adapter.clone(),
                home.clone(),
                cwd.clone(),
                max,
            ))
        })
    };
    crate::delegation::parts(
        adapters,
        Subagents::with_max_concurrent(depth, factory, max),
        CallConfig::new("m", "m"),
        Duration::from_secs(30),
        true,
        &home,
        &cwd,
    )
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
            let saw_completion = request.messages.iter().any(|m| m.text().contains(SETTLED));
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
    // dsh's settlement notice, word for word (docs/agent.md, "Delegation").
    let id = &dsh_agent::read_children(Path::new(&handle.location()).parent().unwrap())[0].id;
    let notice = format!(
        "Background subagent {id} finished and will do no further work unless you send it more.\nIts closing message:\nthe answer is 42"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Event::UserMessage(m) if m.text() == notice)),
        "no user message is {notice:?}"
    );
}

/// The opening of dsh's notice for a background child that completed.
const SETTLED: &str = "finished and will do no further work unless you send it more.";

/// Every session log below `dir` (children nest in `subagents/<id>/`).
fn all_logs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all_logs(&path, out);
        } else if path.file_name().is_some_and(|n| n == "session.jsonl") {
            out.push(path);
        }
    }
}

fn tool_errors(path: &Path) -> Vec<(String, String)> {
    tool_results(path)
        .into_iter()
        .filter_map(|r| r.error.map(|e| (e.code, e.message.unwrap_or_default())))
        .collect()
}

#[tokio::test]
async fn depth_four_is_refused_with_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // Every agent delegates once, then answers with what its call returned.
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|_, results, _| {
            if results == 0 {
                call(
                    "d",
                    "subagent",
                    r#"{"description": "x", "prompt": "go deeper"}"#,
                )
            } else {
                say("done")
            }
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
    handle.followup("go deeper").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].reason, TurnEndReason::Completed);
    let mut logs = Vec::new();
    all_logs(Path::new(&handle.location()).parent().unwrap(), &mut logs);
    let mut depths: Vec<u64> = logs
        .iter()
        .map(|p| load_file(p).unwrap().header.delegation_depth.unwrap_or(0))
        .collect();
    depths.sort();
    assert_eq!(
        depths,
        vec![0, 1, 2, 3],
        "a chain of three children and no more"
    );
    let deepest = logs
        .iter()
        .find(|p| load_file(p).unwrap().header.delegation_depth == Some(3))
        .unwrap();
    let errors = tool_errors(deepest);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "LIMIT_REACHED");
    assert!(
        errors[0].1.contains("subagent depth 4 exceeds maxDepth 3"),
        "{}",
        errors[0].1
    );
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A parent that asks for two children in one reply; each child runs `bash` with `command`
/// (`{}` replaced by its letter) and answers `answer <letter>`; child B fails when
/// `b_fails` (its reply hits the output limit).
fn two_children(command: &'static str, b_fails: bool) -> Arc<ByPrompt> {
    Arc::new(ByPrompt {
        rule: Box::new(move |first, results, _| match (first, results) {
            ("two at once", 0) => calls(&[
                (
                    "pa",
                    "subagent",
                    r#"{"description": "a", "prompt": "CHILD A"}"#,
                ),
                (
                    "pb",
                    "subagent",
                    r#"{"description": "b", "prompt": "CHILD B"}"#,
                ),
            ]),
            ("two at once", _) => say("parent done"),
            ("CHILD B", 0) if b_fails => vec![
                Chunk::TextDelta {
                    index: 0,
                    text: "cut".into(),
                },
                Chunk::Finish {
                    reason: FinishReason::MaxTokens,
                },
            ],
            (child, 0) => {
                let letter = &child[6..];
                let args = serde_json::json!({
                    "command": command.replace("{}", letter),
                    "description": "work"
                });
                call(&format!("c{letter}"), "bash", &args.to_string())
            }
            (child, _) => say(&format!("answer {}", &child[6..])),
        }),
        tool_names: Mutex::new(Vec::new()),
    })
}

/// The parent's tool results in log order: (call id, text, error code).
fn parent_results(path: &Path) -> Vec<(String, String, Option<String>)> {
    tool_results(path)
        .into_iter()
        .map(|r| {
            (
                r.message
                    .content
                    .iter()
                    .find_map(|b| match b {
                        dsh_llm::ContentBlock::ToolResult { tool_call_id, .. } => {
                            Some(tool_call_id.clone())
                        }
                        _ => None,
                    })
                    .unwrap_or_default(),
                serde_json::to_string(&r.message).unwrap(),
                r.error.map(|e| e.code),
            )
        })
        .collect()
}

/// Each child marks that it started, sleeps 1 s, then records how many children had started by
/// then: children that run at the same time both see 2, children run one after another do not.
/// Proves the overlap without a wall-time bound that a loaded machine would break.
const OVERLAP_PROBE: &str = "touch started.{}; sleep 1; ls started.* | wc -l > seen.{}";

fn assert_children_overlapped(cwd: &Path) {
    for letter in ["A", "B"] {
        let seen = std::fs::read_to_string(cwd.join(format!("seen.{letter}"))).unwrap();
        assert_eq!(
            seen.trim(),
            "2",
            "child {letter} saw {} started child(ren) after its 1 s sleep: the children ran one \
             after another",
            seen.trim()
        );
    }
}

#[tokio::test]
async fn two_children_in_one_reply_run_at_the_same_time() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(
            0,
            two_children(OVERLAP_PROBE, false),
            home.path().into(),
            cwd.path().into(),
        ),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("two at once").unwrap();
    let started = Instant::now();
    let outcomes = agent.run_until_idle().await.unwrap();
    println!("two children of `sleep 1`: {:?}", started.elapsed());
    assert_eq!(outcomes[0].final_text, "parent done");
    assert_children_overlapped(cwd.path());
    let results = parent_results(Path::new(&handle.location()));
    let ids: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["pa", "pb"], "results in the model's call order");
    assert!(results[0].1.contains("answer A") && results[1].1.contains("answer B"));
    assert_eq!(
        outcomes[0].usage.requests, 5,
        "both children's requests roll up"
    );
}

#[tokio::test]
async fn the_cap_makes_children_wait_for_a_slot() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_with(
            0,
            two_children("sleep 0.6", false),
            home.path().into(),
            cwd.path().into(),
            1,
        ),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("two at once").unwrap();
    let started = Instant::now();
    agent.run_until_idle().await.unwrap();
    let wall = started.elapsed();
    assert!(
        wall >= Duration::from_millis(1200),
        "max_concurrent 1 ran both at once: {wall:?}"
    );
    let results = parent_results(Path::new(&handle.location()));
    assert!(results[0].1.contains("answer A") && results[1].1.contains("answer B"));
}

#[tokio::test]
async fn a_failing_child_is_only_its_own_result() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(
            0,
            two_children("true", true),
            home.path().into(),
            cwd.path().into(),
        ),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("two at once").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    let results = parent_results(Path::new(&handle.location()));
    assert_eq!(results[0].2, None);
    assert!(results[0].1.contains("answer A"));
    assert!(results[1].2.is_some(), "{results:?}");
    assert!(
        results[1].1.contains("max-tokens") || results[1].1.contains("max_tokens"),
        "{}",
        results[1].1
    );
}

#[tokio::test]
async fn cancelling_the_parent_stops_every_concurrent_child() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(
            0,
            two_children("echo $$ > child{}.pid; sleep 30", false),
            home.path().into(),
            cwd.path().into(),
        ),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("two at once").unwrap();
    let pids = [cwd.path().join("childA.pid"), cwd.path().join("childB.pid")];
    let canceller = {
        let handle = handle.clone();
        let pids = pids.clone();
        tokio::spawn(async move {
            while !pids.iter().all(|p| p.exists()) {
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
    for pid_file in &pids {
        let pid = read_pid(pid_file);
        assert!(
            wait_gone(pid).await,
            "child process {pid} survived the cancel"
        );
    }
    let children = child_logs(Path::new(&handle.location()));
    assert_eq!(children.len(), 2);
    for child in &children {
        assert!(
            matches!(last_end(child), TurnEndReason::Aborted { .. }),
            "{child:?}"
        );
    }
}

/// A parent that starts one background child, then runs `then` (a list of calls by step).
fn background_parent(
    child_command: &'static str,
    then: Vec<(&'static str, &'static str)>,
) -> Arc<ByPrompt> {
    Arc::new(ByPrompt {
        rule: Box::new(move |first, results, _| match (first, results) {
            ("start one", 0) => call(
                "p0",
                "subagent",
                r#"{"description": "bg", "prompt": "CHILD: background", "run_in_background": true}"#,
            ),
            ("start one", n) if n <= then.len() => {
                let (name, args) = then[n - 1];
                call(&format!("p{n}"), name, args)
            }
            ("start one", _) => say("parent done"),
            ("CHILD: background", 0) => call(
                "c1",
                "bash",
                &serde_json::json!({"command": child_command, "description": "work"}).to_string(),
            ),
            ("CHILD: background", _) => say("the answer is 42"),
            _ => say("unexpected"),
        }),
        tool_names: Mutex::new(Vec::new()),
    })
}

#[tokio::test]
async fn a_background_child_is_a_job_waited_for_with_job_output() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = background_parent(
        "sleep 0.5",
        vec![
            ("job_list", "{}"),
            (
                "job_output",
                r#"{"job_id": "subagent-1", "wait": true, "timeout_ms": 20000}"#,
            ),
        ],
    );
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter, home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("start one").unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    let results = parent_results(Path::new(&handle.location()));
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].1.contains("subagent-1"), "{}", results[0].1);
    assert!(
        results[1].1.contains("subagent-1  running"),
        "{}",
        results[1].1
    );
    assert!(
        results[2].1.contains("the answer is 42"),
        "{}",
        results[2].1
    );
    assert!(
        results[2].1.contains("[status: completed"),
        "{}",
        results[2].1
    );
    // Read through job_output, so no second notice follows.
    let events = load_file(Path::new(&handle.location())).unwrap().events;
    assert!(!events.iter().any(
        |e| matches!(&e.event, Event::UserMessage(m) if m.text().contains("Background subagent "))
    ));
}

#[tokio::test]
async fn a_background_child_is_killed_with_job_kill() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = background_parent(
        "echo $$ > bg.pid; sleep 30",
        vec![
            (
                "bash",
                r#"{"command": "while [ ! -s bg.pid ]; do sleep 0.05; done", "description": "wait"}"#,
            ),
            ("job_kill", r#"{"job_id": "subagent-1"}"#),
        ],
    );
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        parts_at(0, adapter, home.path().into(), cwd.path().into()),
        store.as_ref(),
    )
    .unwrap();
    let handle = agent.handle();
    handle.followup("start one").unwrap();
    let started = Instant::now();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    assert!(started.elapsed() < Duration::from_secs(15));
    let results = parent_results(Path::new(&handle.location()));
    assert!(
        results[2].1.contains("[status: killed (job_kill)"),
        "{}",
        results[2].1
    );
    let pid = read_pid(&cwd.path().join("bg.pid"));
    assert!(
        wait_gone(pid).await,
        "the background child's process {pid} survived job_kill"
    );
    let children = child_logs(Path::new(&handle.location()));
    assert_eq!(children.len(), 1);
    assert!(matches!(
        last_end(&children[0]),
        TurnEndReason::Aborted { .. }
    ));
}

#[tokio::test]
async fn a_finished_background_child_wakes_the_idle_parent() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = Arc::new(ByPrompt {
        rule: Box::new(|first, results, request| {
            let last = request
                .messages
                .last()
                .map(|m| m.text())
                .unwrap_or_default();
            match (first, results) {
                _ if last.contains(SETTLED) => say("woken with the answer"),
                ("start one", 0) => call(
                    "p0",
                    "subagent",
                    r#"{"description": "bg", "prompt": "CHILD: background", "run_in_background": true}"#,
                ),
                ("start one", _) => say("started it"),
                ("CHILD: background", 0) => call(
                    "c1",
                    "bash",
                    r#"{"command": "sleep 0.3", "description": "w"}"#,
                ),
                ("CHILD: background", _) => say("the answer is 42"),
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
    handle.followup("start one").unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), agent.run_until_settled(&stop))
        .await
        .unwrap()
        .unwrap();
    let texts: Vec<&str> = outcomes.iter().map(|o| o.final_text.as_str()).collect();
    assert_eq!(texts, ["started it", "woken with the answer"]);
    let events = load_file(Path::new(&handle.location())).unwrap().events;
    assert!(events.iter().any(
        |e| matches!(&e.event, Event::UserMessage(m) if m.text().contains("the answer is 42"))
    ));
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
    let pid = read_pid(&pid_file);
    for _ in 0..100 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the child's process survived");
    let children = child_logs(Path::new(&handle.location()));
    assert_eq!(children.len(), 1);
    assert!(matches!(
        last_end(&children[0]),
        TurnEndReason::Aborted { .. }
    ));
}

#[tokio::test]
async fn a_forked_subagent_starts_from_the_parents_completed_turns() {
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
    // dsh's completed-turn prefix: the turn that asks for the fork is not part of the seed
    // (dsh's recording `subagent-fork-in-process`, compared by the scenario runner).
    assert!(!texts.contains(&"now fork".to_string()), "{texts:?}");
    let child = child_logs(Path::new(&handle.location())).remove(0);
    let events = load_file(&child).unwrap().events;
    assert!(events.iter().any(|e| matches!(e.event, Event::EndSeed(_))));
}
