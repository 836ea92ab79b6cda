//! Delegation over real HTTP (docs/agent.md, "Delegation"): a parent and its children talk to
//! one `FakeProvider` through the DeepSeek adapter, each served its own replies by request
//! content (`FakeProvider::route`). Concurrency, background children as jobs, continuation
//! with `send_message` (the child's next request extends its previous one byte for byte),
//! `list_agents`, `interrupt_agent`, `report`, per-child model and effort, usage of failed
//! children, the depth limit, cancel, and resume.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_agent::{
    Agent, AgentParts, ChildActivity, ChildFactory, ChildFeed, Subagents, TurnOutcome,
};
use dsh_llm::{AdapterRegistry, CallConfig};
use dsh_session::{load_file, open_store, Event, StoreKind, TurnEndReason};
use dsh_test_support::process::{poll_until, wait_for_pid};
use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

use crate::delegation::{tool_results, wait_gone};

const MODEL: &str = "deepseek-v4-flash";

fn usage(input: u64, output: u64) -> Option<WireUsage> {
    Some(WireUsage {
        prompt_tokens: input,
        completion_tokens: output,
        ..Default::default()
    })
}

fn say(text: &str) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish("stop", usage(10, 1))
        .into()
}

fn call(id: &str, name: &str, args: Value) -> ScriptedReply {
    calls(&[(id, name, args)])
}

fn calls(list: &[(&str, &str, Value)]) -> ScriptedReply {
    let mut reply = SseReply::new();
    for (index, (id, name, args)) in list.iter().enumerate() {
        reply = reply.tool_call(index as u32, id, name, &args.to_string());
    }
    reply.finish("tool_calls", usage(10, 1)).into()
}

/// A parent's reply: start a foreground child with `description` and `prompt`.
fn subagent(id: &str, description: &str, prompt: &str) -> ScriptedReply {
    call(
        id,
        "subagent",
        json!({"description": description, "prompt": prompt}),
    )
}

fn bash(id: &str, command: &str) -> ScriptedReply {
    call(
        id,
        "bash",
        json!({"command": command, "description": "work"}),
    )
}

/// A child's reply: a bash call that writes its shell's pid to `<file>.pid` (whole, through a
/// rename) and then becomes `sleep 30`.
fn write_pid_and_sleep(id: &str, file: &str) -> ScriptedReply {
    bash(
        id,
        &format!("echo $$ > {file}.tmp && mv {file}.tmp {file}.pid && exec sleep 30"),
    )
}

/// A shell loop that waits up to 20 s for `<file>.pid` to be written.
fn until_pid_file(file: &str) -> String {
    format!("for i in $(seq 400); do test -s {file}.pid && break; sleep 0.05; done")
}

/// A parent's reply: wait for background job `job` with `job_output`.
fn wait_for_job(id: &str, job: &str) -> ScriptedReply {
    call(
        id,
        "job_output",
        json!({"job_id": job, "wait": true, "timeout_ms": 20000}),
    )
}

fn first_user(text: &str) -> RequestMatch {
    RequestMatch::FirstUser(text.to_string())
}

/// How a test's agents are built.
#[derive(Clone)]
struct Setup {
    base_url: String,
    home: PathBuf,
    cwd: PathBuf,
    /// Whether agents get a job table (background children, continuation as jobs).
    jobs: bool,
    /// The `[models]` allow-list handed to `Subagents::with_models`.
    models: Option<Vec<(String, Option<String>)>>,
    /// The live feed of the top-level agent's children, once its parts are built.
    feed: Arc<std::sync::Mutex<Option<ChildFeed>>>,
}

impl Setup {
    fn new(provider: &FakeProvider, home: &Path, cwd: &Path) -> Setup {
        Setup {
            base_url: provider.base_url(),
            home: home.to_path_buf(),
            cwd: cwd.to_path_buf(),
            jobs: true,
            models: None,
            feed: Arc::default(),
        }
    }

    /// An agent's parts at `depth`, talking to the fake provider through the DeepSeek
    /// adapter, with delegation (and job tools when `jobs`).
    fn parts(&self, depth: u64) -> AgentParts {
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-subagents")),
        ))
        .unwrap();
        let mut adapters = AdapterRegistry::new();
        adapters.register("deepseek", Arc::new(adapter)).unwrap();
        let factory: ChildFactory = {
            let setup = self.clone();
            Arc::new(move |d| Ok(setup.parts(d)))
        };
        let mut subagents = Subagents::new(depth, factory);
        if let Some(models) = &self.models {
            subagents = subagents.with_models(models.clone());
        }
        if depth == 0 {
            *self.feed.lock().unwrap() = Some(subagents.feed());
        }
        crate::delegation::parts(
            adapters,
            subagents,
            CallConfig::new("deepseek", MODEL),
            Duration::from_secs(60),
            self.jobs,
            &self.home,
            &self.cwd,
        )
    }

    fn agent(&self) -> Agent {
        let store = open_store(StoreKind::Jsonl, &self.home).unwrap();
        Agent::create(self.parts(0), store.as_ref()).unwrap()
    }
}

struct Dirs {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

fn dirs() -> Dirs {
    Dirs {
        home: tempfile::tempdir().unwrap(),
        cwd: tempfile::tempdir().unwrap(),
    }
}

/// The requests whose first user message contains `marker`, as JSON bodies.
fn requests_of(provider: &FakeProvider, marker: &str) -> Vec<Value> {
    let matcher = first_user(marker);
    provider
        .requests()
        .into_iter()
        .map(|r| serde_json::from_slice::<Value>(&r.raw_body).unwrap())
        .filter(|body| matcher.matches(body))
        .collect()
}

/// The parent's tool results in log order: (text, error code).
fn results(path: &Path) -> Vec<(String, Option<String>)> {
    tool_results(path)
        .into_iter()
        .map(|r| {
            (
                dsh_test_support::tool_result_text(&r.message),
                r.error.map(|e| e.code),
            )
        })
        .collect()
}

fn child_logs(parent: &Path) -> Vec<PathBuf> {
    dsh_agent::read_children(parent.parent().unwrap())
        .into_iter()
        .map(|c| c.log)
        .collect()
}

/// Gives `agent` the user message `prompt` and runs it until idle (at most a minute): the
/// outcomes and the parent's tool results.
async fn run_parent(
    mut agent: Agent,
    prompt: &str,
) -> (Vec<TurnOutcome>, Vec<(String, Option<String>)>) {
    let handle = agent.handle();
    handle.followup(prompt).unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(60), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    (outcomes, results(Path::new(&handle.location())))
}

/// Gives `agent` `prompt` and drops its run (as a process that dies would) once a child wrote
/// `<cwd>/<pid_name>.pid` and the parent touched `<cwd>/parent.waiting` in its last call (so no
/// reply of the parent's route is left over); asserts the child's process ends with the parent.
/// Returns the parent's log location.
async fn cut_parent_mid_child(
    mut agent: Agent,
    prompt: &str,
    cwd: &Path,
    pid_name: &str,
) -> String {
    let handle = agent.handle();
    let location = handle.location();
    handle.followup(prompt).unwrap();
    let run = tokio::spawn(async move { agent.run_until_idle().await });
    let pid_file = cwd.join(format!("{pid_name}.pid"));
    let waiting = cwd.join("parent.waiting");
    let (pid, reached) = tokio::task::spawn_blocking(move || {
        let pid = wait_for_pid(&pid_file);
        (
            pid,
            poll_until(Duration::from_secs(20), || waiting.exists()),
        )
    })
    .await
    .unwrap();
    assert!(reached, "the parent never reached its last call");
    run.abort();
    let _ = run.await;
    drop(handle);
    assert!(
        wait_gone(pid).await,
        "the background child outlived its parent"
    );
    location
}

#[tokio::test]
async fn two_children_that_each_sleep_one_second_run_at_the_same_time() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("two at once"),
        [
            calls(&[
                (
                    "pa",
                    "subagent",
                    json!({"description": "a", "prompt": "CHILD A: sleep"}),
                ),
                (
                    "pb",
                    "subagent",
                    json!({"description": "b", "prompt": "CHILD B: sleep"}),
                ),
            ]),
            say("parent done"),
        ],
    );
    for letter in ["A", "B"] {
        provider.route(
            first_user(&format!("CHILD {letter}")),
            [
                bash(
                    &format!("c{letter}"),
                    &format!(
                        "touch started.{letter}; sleep 1; ls started.* | wc -l > seen.{letter}"
                    ),
                ),
                say(&format!("answer {letter}")),
            ],
        );
    }
    let d = dirs();
    let mut agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let handle = agent.handle();
    handle.followup("two at once").unwrap();
    let started = Instant::now();
    let outcomes = agent.run_until_idle().await.unwrap();
    let elapsed = started.elapsed();
    println!("two children of `sleep 1` over HTTP: {elapsed:?}");
    assert_eq!(outcomes[0].final_text, "parent done");
    // Each child counted the children that had started once its 1 s sleep was over: both see 2
    // only if they ran at the same time. (A wall-time bound would fail on a loaded machine.)
    for letter in ["A", "B"] {
        let seen = std::fs::read_to_string(d.cwd.path().join(format!("seen.{letter}"))).unwrap();
        assert_eq!(
            seen.trim(),
            "2",
            "the children ran one after another ({elapsed:?})"
        );
    }
    let results = results(Path::new(&handle.location()));
    assert_eq!(results.len(), 2);
    assert!(results[0].0.contains("answer A"), "{results:?}");
    assert!(results[1].0.contains("answer B"), "{results:?}");
    // 2 parent requests + 2 per child, all counted in the parent's turn.
    assert_eq!(outcomes[0].usage.requests, 6);
}

#[tokio::test]
async fn send_message_continues_a_finished_child_whose_next_request_extends_the_previous() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("delegate and continue"),
        [
            subagent("p1", "remember", "CHILD: remember the number 7"),
            call(
                "p2",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "Which number was it?"}),
            ),
            say("parent done"),
        ],
    );
    provider.route(
        first_user("CHILD: remember"),
        [say("noted"), say("it was 7")],
    );
    let d = dirs();
    let mut setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    // Without a job table the continued turn runs in the foreground: its answer is the result.
    setup.jobs = false;
    let mut agent = setup.agent();
    let handle = agent.handle();
    handle.followup("delegate and continue").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    let results = results(Path::new(&handle.location()));
    assert_eq!(results[0].0, "noted");
    assert_eq!(results[1].0, "it was 7", "{results:?}");

    let child = requests_of(&provider, "CHILD: remember");
    assert_eq!(child.len(), 2, "one request per child turn");
    for field in [
        "model",
        "tools",
        "thinking",
        "reasoning_effort",
        "max_tokens",
    ] {
        assert_eq!(
            child[0].get(field),
            child[1].get(field),
            "`{field}` changed"
        );
    }
    let before = child[0]["messages"].as_array().unwrap();
    let after = child[1]["messages"].as_array().unwrap();
    for (i, message) in before.iter().enumerate() {
        assert_eq!(
            message.to_string(),
            after[i].to_string(),
            "message {i} of the continued child's request differs"
        );
    }
    let added: Vec<String> = after[before.len()..]
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(added.len(), 2, "{added:?}");
    assert!(added[0].contains("noted") && added[0].contains("assistant"));
    assert!(added[1].contains("Which number was it?"));
    // One child log with both turns.
    let logs = child_logs(Path::new(&handle.location()));
    assert_eq!(logs.len(), 1);
}

#[tokio::test]
async fn the_child_feed_carries_each_run_of_a_child_tagged_with_the_call_it_answers() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("watch the child"),
        [
            subagent("p1", "remember", "CHILD: remember the number 7"),
            call(
                "p2",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "Which number was it?"}),
            ),
            say("parent done"),
        ],
    );
    provider.route(
        first_user("CHILD: remember"),
        [bash("c1", "echo seven"), say("noted"), say("it was 7")],
    );
    let d = dirs();
    let mut setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    setup.jobs = false;
    let agent = setup.agent();
    let feed = setup.feed.lock().unwrap().clone().unwrap();
    let mut watcher = feed.subscribe();
    let location = agent.handle().location();
    let (outcomes, _) = run_parent(agent, "watch the child").await;
    assert_eq!(outcomes[0].final_text, "parent done");

    let mut seen: Vec<ChildActivity> = Vec::new();
    while let Ok(activity) = watcher.try_recv() {
        seen.push(activity);
    }
    let logs = child_logs(Path::new(&location));
    assert_eq!(logs.len(), 1);
    assert!(seen.iter().all(|a| a.child.name == "agent-1"
        && a.child.log == logs[0]
        && a.child.label == "remember"
        && a.child.depth == 1
        && !a.background));
    // Both runs, in order, each tagged with the parent's call that waits for it.
    let by_call = |id: &str| -> Vec<String> {
        seen.iter()
            .filter(|a| a.call_id.as_deref() == Some(id))
            .map(|a| a.event.event.event_type().to_string())
            .collect()
    };
    let first = by_call("p1");
    let second = by_call("p2");
    assert_eq!(first.len() + second.len(), seen.len(), "{seen:?}");
    for run in [&first, &second] {
        assert!(run.iter().any(|k| k == "turn/start"), "{run:?}");
        assert_eq!(run.last().map(String::as_str), Some("turn/end"), "{run:?}");
    }
    // The first run shows the child's tool work as it happens.
    for kind in ["tool/call", "tool/result", "assistant/chunk"] {
        assert!(first.iter().any(|k| k == kind), "no {kind} in {first:?}");
    }
    // What the feed carried is what the child's log holds, event for event.
    let logged: Vec<u64> = load_file(&logs[0])
        .unwrap()
        .events
        .iter()
        .filter(|e| e.event.event_type() == "turn/start")
        .map(|e| e.seq)
        .collect();
    let fed: Vec<u64> = seen
        .iter()
        .filter(|a| a.event.event.event_type() == "turn/start")
        .map(|a| a.event.seq)
        .collect();
    assert_eq!(logged, fed);
}

#[tokio::test]
async fn a_background_child_is_waited_for_with_job_output_and_another_killed_with_job_kill() {
    let d = dirs();
    let pid_file = d.cwd.path().join("k.pid");
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("background work"),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "w", "prompt": "CHILD W", "run_in_background": true}),
            ),
            wait_for_job("p2", "subagent-1"),
            call(
                "p3",
                "subagent",
                json!({"description": "k", "prompt": "CHILD K", "run_in_background": true}),
            ),
            bash("p4", &until_pid_file("k")),
            call("p5", "job_kill", json!({"job_id": "subagent-2"})),
            say("parent done"),
            say("noted the end"),
            say("noted the end"),
        ],
    );
    provider.route(first_user("CHILD W"), [say("W says 42")]);
    provider.route(first_user("CHILD K"), [write_pid_and_sleep("k1", "k")]);
    let agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let (outcomes, results) = run_parent(agent, "background work").await;
    assert_eq!(outcomes[0].final_text, "parent done");
    assert!(results[0].0.contains("agent-1"), "{results:?}");
    assert!(results[1].0.contains("W says 42"), "{results:?}");
    assert!(results[4].0.to_lowercase().contains("kill"), "{results:?}");
    let pid = wait_for_pid(&pid_file);
    assert!(
        wait_gone(pid).await,
        "the killed child's sleep {pid} still runs"
    );
}

#[tokio::test]
async fn depth_four_is_refused_with_a_clear_error_over_http() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("go deeper"),
        [subagent("p1", "deep", "CHILD deeper"), say("did it myself")],
    );
    let d = dirs();
    let setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    let store = open_store(StoreKind::Jsonl, d.home.path()).unwrap();
    let mut agent = Agent::create(setup.parts(3), store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("go deeper").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "did it myself");
    let results = results(Path::new(&handle.location()));
    assert_eq!(results[0].1.as_deref(), Some("LIMIT_REACHED"));
    assert!(
        results[0].0.contains("subagent depth 4 exceeds maxDepth 3"),
        "{results:?}"
    );
    assert!(requests_of(&provider, "CHILD deeper").is_empty());
}

#[tokio::test]
async fn cancelling_the_parent_leaves_no_child_process_running() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("start and cancel"),
        [calls(&[
            (
                "p1",
                "subagent",
                json!({"description": "fg", "prompt": "CHILD FG"}),
            ),
            (
                "p2",
                "subagent",
                json!({"description": "bg", "prompt": "CHILD BG", "run_in_background": true}),
            ),
        ])],
    );
    for (marker, file) in [("CHILD FG", "fg"), ("CHILD BG", "bg")] {
        provider.route(first_user(marker), [write_pid_and_sleep("c1", file)]);
    }
    let mut agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let handle = agent.handle();
    handle.followup("start and cancel").unwrap();
    let run = tokio::spawn(async move {
        let outcomes = agent.run_until_idle().await;
        (outcomes, agent)
    });
    let (fg_file, bg_file) = (d.cwd.path().join("fg.pid"), d.cwd.path().join("bg.pid"));
    let (fg, bg) =
        tokio::task::spawn_blocking(move || (wait_for_pid(&fg_file), wait_for_pid(&bg_file)))
            .await
            .unwrap();
    assert!(handle.cancel(false));
    let (outcomes, agent) = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        outcomes.unwrap()[0].reason,
        TurnEndReason::Aborted { .. }
    ));
    assert!(
        wait_gone(fg).await,
        "the foreground child's sleep {fg} survived the cancel"
    );
    // A background child is a job: it ends with the parent's session, as bash jobs do.
    drop(agent);
    assert!(
        wait_gone(bg).await,
        "the background child's sleep {bg} survived the parent"
    );
}

#[tokio::test]
async fn list_agents_and_interrupt_agent_steer_a_running_background_child() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("start and steer"),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "long job", "prompt": "CHILD L", "run_in_background": true}),
            ),
            bash("p2", &until_pid_file("l")),
            call("p3", "list_agents", json!({})),
            call("p4", "interrupt_agent", json!({"agent_id": "agent-1"})),
            wait_for_job("p5", "subagent-1"),
            call("p6", "list_agents", json!({})),
            call("p7", "interrupt_agent", json!({"agent_id": "agent-9"})),
            say("parent done"),
        ],
    );
    provider.route(first_user("CHILD L"), [write_pid_and_sleep("l1", "l")]);
    let agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let (outcomes, results) = run_parent(agent, "start and steer").await;
    assert_eq!(outcomes[0].final_text, "parent done");
    let listed = &results[2].0;
    assert!(
        listed.contains("agent-1") && listed.contains("running") && listed.contains("long job"),
        "{listed}"
    );
    assert!(results[3].0.contains("interrupt requested"), "{results:?}");
    assert!(results[4].0.contains("cancelled"), "{results:?}");
    let relisted = &results[5].0;
    assert!(
        relisted.contains("agent-1") && relisted.contains("cancelled"),
        "{relisted}"
    );
    assert!(relisted.contains("1 requests"), "{relisted}");
    assert_eq!(results[6].1.as_deref(), Some("NOT_FOUND"));
    assert!(
        results[6].0.contains("\"agent-9\" is unavailable"),
        "{results:?}"
    );
    let pid = wait_for_pid(&d.cwd.path().join("l.pid"));
    assert!(
        wait_gone(pid).await,
        "the interrupted child's sleep {pid} still runs"
    );
}

/// dsh's `interrupt_agent` stops only the current turn (`keepInbox`): a message queued for the
/// child stays parked and runs when the parent next sends it a message, before that message.
#[tokio::test]
async fn interrupt_agent_parks_queued_messages_until_the_next_send_message() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("park and resume"),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "parker", "prompt": "CHILD P", "run_in_background": true}),
            ),
            bash("p2", &until_pid_file("p")),
            call(
                "p3",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "QUEUED ONE"}),
            ),
            call("p4", "interrupt_agent", json!({"agent_id": "agent-1"})),
            wait_for_job("p5", "subagent-1"),
            call(
                "p6",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "AFTER"}),
            ),
            wait_for_job("p7", "subagent-2"),
            say("parent done"),
        ],
    );
    provider.route(
        first_user("CHILD P"),
        [
            write_pid_and_sleep("c1", "p"),
            say("parked ran"),
            say("after ran"),
        ],
    );
    let agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let (outcomes, results) = run_parent(agent, "park and resume").await;
    assert_eq!(outcomes[0].final_text, "parent done");
    assert!(
        results[2].0.contains("message queued as the next turn"),
        "{results:?}"
    );
    assert!(
        results[3]
            .0
            .starts_with("interrupt requested for agent agent-1"),
        "{results:?}"
    );
    // The interrupted run ended with the interrupted turn: the queued message did not run then.
    assert!(
        results[4].0.contains("cancelled") && !results[4].0.contains("parked ran"),
        "{results:?}"
    );
    // The next send_message ran the parked message first, then its own.
    assert!(results[6].0.starts_with("after ran"), "{results:?}");
    let child = requests_of(&provider, "CHILD P");
    assert_eq!(child.len(), 3, "{child:?}");
    let second = child[1]["messages"].to_string();
    assert!(
        second.contains("QUEUED ONE") && !second.contains("AFTER"),
        "{second}"
    );
    let third = child[2]["messages"].to_string();
    assert!(
        third.contains("parked ran") && third.contains("AFTER"),
        "{third}"
    );
    let pid = wait_for_pid(&d.cwd.path().join("p.pid"));
    assert!(
        wait_gone(pid).await,
        "the interrupted child's sleep {pid} still runs"
    );
}

#[tokio::test]
async fn a_childs_report_reaches_the_parent_before_the_child_ends() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("get a report"),
        [subagent("p1", "reporter", "CHILD R"), say("parent done")],
    );
    provider.route(
        first_user("CHILD R"),
        [
            call("r1", "report", json!({"output": "FOUND_THE_BUG in a.rs"})),
            say("Reported."),
        ],
    );
    let d = dirs();
    let mut agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let handle = agent.handle();
    handle.followup("get a report").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    // The child's tool result says where the report went.
    let logs = child_logs(Path::new(&handle.location()));
    let child_results = results(&logs[0]);
    assert!(
        child_results[0]
            .0
            .starts_with("report accepted by the agent that started you as message "),
        "{child_results:?}"
    );
    // The child's own tools include `report`; the parent's do not.
    let child = requests_of(&provider, "CHILD R");
    assert!(RequestMatch::Tool("report".into()).matches(&child[0]));
    let parent = requests_of(&provider, "get a report");
    assert!(RequestMatch::NoTool("report".into()).matches(&parent[0]));
    // The parent's next request carries the report, after the subagent's result.
    let last = parent[1]["messages"].to_string();
    assert!(last.contains("Subagent agent-1 reported:"), "{last}");
    assert!(last.contains("FOUND_THE_BUG in a.rs"), "{last}");
}

#[tokio::test]
async fn a_child_runs_the_model_and_effort_it_was_given_and_unknown_ones_are_refused() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("pick models"),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "pro", "prompt": "CHILD PRO", "model": "deepseek-v4-pro", "effort": "low"}),
            ),
            call(
                "p2",
                "subagent",
                json!({"description": "bad", "prompt": "CHILD BAD", "model": "gpt-imaginary"}),
            ),
            call(
                "p3",
                "subagent",
                json!({"description": "bad effort", "prompt": "CHILD BAD", "effort": "medium"}),
            ),
            say("parent done"),
        ],
    );
    provider.route(first_user("CHILD PRO"), [say("pro answer")]);
    let d = dirs();
    let mut setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    setup.models = Some(vec![
        ("deepseek-v4-flash".into(), None),
        ("deepseek-v4-pro".into(), Some("deepseek".into())),
    ]);
    let mut agent = setup.agent();
    let handle = agent.handle();
    handle.followup("pick models").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "parent done");
    let results = results(Path::new(&handle.location()));
    assert_eq!(results[0].0, "pro answer");
    let child = requests_of(&provider, "CHILD PRO");
    assert_eq!(child[0]["model"], "deepseek-v4-pro");
    assert_eq!(child[0]["reasoning_effort"], "low", "{}", child[0]);
    assert_eq!(results[1].1.as_deref(), Some("INVALID_ARGS"));
    assert!(
        results[1]
            .0
            .contains("`gpt-imaginary` is not a configured model")
            && results[1].0.contains("deepseek-v4-pro"),
        "{results:?}"
    );
    assert_eq!(results[2].1.as_deref(), Some("INVALID_ARGS"));
    assert!(
        results[2].0.contains("does not support effort `medium`"),
        "{results:?}"
    );
    assert!(
        requests_of(&provider, "CHILD BAD").is_empty(),
        "refused before starting"
    );
    // The descriptor of the child's log names its model.
    let stored = dsh_agent::read_children(Path::new(&handle.location()).parent().unwrap());
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].model, "deepseek-v4-pro");
    assert_eq!(stored[0].effort.as_deref(), Some("low"));
    assert_eq!(stored[0].name.as_deref(), Some("agent-1"));
}

#[tokio::test]
async fn a_failed_childs_usage_is_rolled_into_the_parent() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("fail a child"),
        [subagent("p1", "fails", "CHILD F"), say("parent done")],
    );
    provider.route(
        first_user("CHILD F"),
        [
            SseReply::new()
                .tool_call(
                    0,
                    "f1",
                    "bash",
                    r#"{"command": "true", "description": "x"}"#,
                )
                .finish("tool_calls", usage(1000, 7))
                .into(),
            ScriptedReply::http_error(400, "bad request for the child"),
        ],
    );
    let d = dirs();
    let agent = Setup::new(&provider, d.home.path(), d.cwd.path()).agent();
    let (outcomes, results) = run_parent(agent, "fail a child").await;
    assert_eq!(outcomes[0].final_text, "parent done");
    assert!(results[0].1.is_some(), "{results:?}");
    // Parent: 2 requests of 10 input tokens; the failed child: 1 request of 1000.
    assert_eq!(outcomes[0].usage.requests, 3, "{:?}", outcomes[0].usage);
    assert_eq!(outcomes[0].usage.usage.input_tokens, 1020);
}

#[tokio::test]
async fn a_resumed_parent_knows_its_children_and_continues_one() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("first session"),
        [
            calls(&[
                (
                    "p1",
                    "subagent",
                    json!({"description": "done one", "prompt": "CHILD DONE"}),
                ),
                (
                    "p2",
                    "subagent",
                    json!({"description": "cut one", "prompt": "CHILD CUT", "run_in_background": true}),
                ),
            ]),
            // Marks that the parent got this far (so no reply of this route is left for the
            // resumed session), then waits with the child.
            bash(
                "p3",
                &format!("touch parent.waiting; {}; sleep 30", until_pid_file("cut")),
            ),
        ],
    );
    provider.route(
        first_user("CHILD DONE"),
        [say("first answer"), say("second answer")],
    );
    provider.route(first_user("CHILD CUT"), [write_pid_and_sleep("c1", "cut")]);
    let mut setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    setup.jobs = false;
    let with_jobs = Setup {
        jobs: true,
        ..setup.clone()
    };
    // The process "dies" while the background child runs: the run is dropped mid-turn.
    let location =
        cut_parent_mid_child(with_jobs.agent(), "first session", d.cwd.path(), "cut").await;

    provider.route(
        first_user("first session"),
        [
            call("q1", "list_agents", json!({})),
            call(
                "q2",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "And again?"}),
            ),
            say("resumed parent done"),
        ],
    );
    let store = open_store(StoreKind::Jsonl, d.home.path()).unwrap();
    let mut resumed = Agent::resume(setup.parts(0), store.as_ref(), &location).unwrap();
    resumed
        .handle()
        .followup("what are my children doing?")
        .unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), resumed.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcomes.last().unwrap().final_text, "resumed parent done");
    let results = results(Path::new(&location));
    let listed = &results[results.len() - 2].0;
    assert!(
        listed.contains("agent-1") && listed.contains("idle") && listed.contains("done one"),
        "{listed}"
    );
    assert!(
        listed.contains("agent-2") && listed.contains("interrupted") && listed.contains("cut one"),
        "{listed}"
    );
    assert_eq!(results.last().unwrap().0, "second answer");
    // The continued child's request carries its first turn.
    let child = requests_of(&provider, "CHILD DONE");
    assert_eq!(child.len(), 2);
    let text = child[1]["messages"].to_string();
    assert!(
        text.contains("first answer") && text.contains("And again?"),
        "{text}"
    );
    // Partial logs are kept: the interrupted child's log still has its started tool call.
    let stored = dsh_agent::read_children(Path::new(&location).parent().unwrap());
    let cut = stored.iter().find(|c| c.label == "cut one").unwrap();
    assert_eq!(cut.state(), "interrupted");
    assert!(load_file(&cut.log)
        .unwrap()
        .events
        .iter()
        .any(|e| matches!(&e.event, Event::ToolCall(c) if c.name == "bash")));
}

/// A SQLite-store parent keeps its children's logs beside the database
/// (`<db>.subagents/<parent id>/subagents/<child id>/session.jsonl`, docs/sessions.md,
/// "Children"); resumed from the database, it knows the child and continues it with
/// `send_message`, the child's request extending its first one.
#[tokio::test]
async fn a_sqlite_parent_keeps_children_beside_the_database_and_continues_one_after_resume() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("sqlite first"),
        [
            subagent("p1", "keeper", "CHILD Q: remember 9"),
            say("first done"),
        ],
    );
    provider.route(first_user("CHILD Q"), [say("remembered"), say("it was 9")]);
    let mut setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    // Without a job table, the continued turn runs in the foreground and answers the call.
    setup.jobs = false;
    let store = open_store(StoreKind::Sqlite, d.home.path()).unwrap();
    let mut agent = Agent::create(setup.parts(0), store.as_ref()).unwrap();
    let handle = agent.handle();
    let location = handle.location();
    let session_id = handle.session_id().to_string();
    assert!(location.starts_with("sqlite:"), "{location}");
    handle.followup("sqlite first").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].final_text, "first done");
    drop(agent);
    drop(handle);

    let folder = dsh_session::sub_agent_anchor(&location)
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        folder.starts_with(d.home.path()) && folder.to_string_lossy().contains(".subagents"),
        "{}",
        folder.display()
    );
    let children = dsh_agent::read_children(&folder);
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].state(), "idle");
    assert_eq!(children[0].last_text, "remembered");
    assert!(children[0].log.is_file());

    provider.route(
        first_user("sqlite first"),
        [
            call(
                "q1",
                "send_message",
                json!({"subagent_id": "agent-1", "message": "Which number?"}),
            ),
            say("resumed done"),
        ],
    );
    let store = open_store(StoreKind::Sqlite, d.home.path()).unwrap();
    let mut resumed = Agent::resume(setup.parts(0), store.as_ref(), &session_id).unwrap();
    resumed.handle().followup("continue it").unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), resumed.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcomes.last().unwrap().final_text, "resumed done");
    // The continued child answered the call, and its request extends its first one.
    let sent = provider.requests();
    let child: Vec<&dsh_test_support::RecordedRequest> = sent
        .iter()
        .filter(|r| first_user("CHILD Q").matches(&r.body))
        .collect();
    assert_eq!(child.len(), 2);
    let (first, second) = (&child[0].raw_body, &child[1].raw_body);
    let messages = |raw: &[u8]| -> Vec<Value> {
        serde_json::from_slice::<Value>(raw).unwrap()["messages"]
            .as_array()
            .unwrap()
            .clone()
    };
    let (before, after) = (messages(first), messages(second));
    assert_eq!(
        after[..before.len()],
        before[..],
        "the child's history was not kept"
    );
    assert!(after
        .iter()
        .any(|m| m.to_string().contains("Which number?")));
    // The same child, still the only one, now idle with both turns in its log.
    let children = dsh_agent::read_children(&folder);
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].last_text, "it was 9");
    assert_eq!(children[0].usage.requests, 2);
    // The resumed parent's tool result is the child's answer.
    let texts: Vec<String> = load_file_sqlite(d.home.path(), &session_id);
    assert!(texts.iter().any(|t| t == "it was 9"), "{texts:?}");
}

/// The tool result texts of the SQLite session `id`.
fn load_file_sqlite(home: &Path, id: &str) -> Vec<String> {
    let store = open_store(StoreKind::Sqlite, home).unwrap();
    let loaded = store.load(id).unwrap();
    loaded
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => Some(dsh_test_support::tool_result_text(&r.message)),
            _ => None,
        })
        .collect()
}

/// A background child's usage is not lost when its parent's process ends first: the resumed
/// parent finds what the child's log spent beyond what the parent's log accounts for, adds it
/// to its next step and records it (`subagent/usage`, `recovered`) in its log, once.
#[tokio::test]
async fn a_background_childs_usage_reaches_the_parent_resumed_after_its_process_ended() {
    let d = dirs();
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    provider.route(
        first_user("usage session"),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "spender", "prompt": "CHILD U", "run_in_background": true}),
            ),
            bash(
                "p2",
                &format!("touch parent.waiting; {}; sleep 30", until_pid_file("u")),
            ),
        ],
    );
    provider.route(
        first_user("CHILD U"),
        [SseReply::new()
            .tool_call(
                0,
                "u1",
                "bash",
                &json!({"command": "echo $$ > u.tmp && mv u.tmp u.pid && exec sleep 30", "description": "spend"}).to_string(),
            )
            .finish("tool_calls", usage(1000, 7))
            .into()],
    );
    let setup = Setup::new(&provider, d.home.path(), d.cwd.path());
    // The parent's process "ends" while the child runs: its usage never reached a parent step.
    let location = cut_parent_mid_child(setup.agent(), "usage session", d.cwd.path(), "u").await;
    let records = |path: &str| -> Vec<Value> {
        load_file(Path::new(path))
            .unwrap()
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Opaque { event_type, data }
                    if event_type == dsh_agent::SUBAGENT_USAGE_EVENT =>
                {
                    Some(data.clone())
                }
                _ => None,
            })
            .collect()
    };
    assert!(records(&location).is_empty());

    let store = open_store(StoreKind::Jsonl, d.home.path()).unwrap();
    for (round, expected_requests, expected_input) in [(1, 2, 1010), (2, 1, 10)] {
        provider.route(first_user("usage session"), [say("resumed")]);
        let mut resumed = Agent::resume(setup.parts(0), store.as_ref(), &location).unwrap();
        resumed.handle().followup("how much?").unwrap();
        let outcomes = tokio::time::timeout(Duration::from_secs(30), resumed.run_until_idle())
            .await
            .unwrap()
            .unwrap();
        // Round 1: the parent's request and the child's recovered one; round 2: only the
        // parent's (the child's usage was recorded once).
        let usage = outcomes[0].usage;
        assert_eq!(
            usage.requests, expected_requests,
            "round {round}: {usage:?}"
        );
        assert_eq!(
            usage.usage.input_tokens, expected_input,
            "round {round}: {usage:?}"
        );
    }
    let logged = records(&location);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["agent"], "agent-1");
    assert_eq!(logged[0]["recovered"], true);
    assert_eq!(logged[0]["usage"]["inputTokens"], 1000);
    assert_eq!(logged[0]["usage"]["requests"], 1);
    let children = dsh_agent::read_children(Path::new(&location).parent().unwrap());
    assert_eq!(logged[0]["childId"], children[0].id.as_str());
}
