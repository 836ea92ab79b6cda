//! Background jobs and `ask_user_question` through the real loop with a scripted model:
//! a background job runs while the agent keeps working and its completion reaches the model at
//! a later step; jobs die with the agent; headless questions fail clearly and the loop goes on;
//! a front end's asker answers, told the id of the asking call.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_agent::{
    Agent, AgentOptions, AgentParts, AskOutcome, Asker, BackgroundJobs, ExtensionSet,
    QuestionRequest, UserAnswer, BACKGROUND_JOBS_PLUGIN,
};
use dsh_llm::{
    Adapter, AdapterRegistry, CallConfig, Chunk, ChunkStream, FinishReason, GenerateRequest,
    Message, MessageSource, RetryPolicy,
};
use dsh_session::{open_store, StoreKind, TurnEndReason};
use dsh_test_support::tool_result_text;
use dsh_tools::{
    group_has_live_members, AskUserQuestionTool, JobTable, PermissionPreset, SpillDir, ToolContext,
    ToolRegistry,
};
use futures::future::BoxFuture;

/// Step k of a turn gets `replies[k]`, computed from the request.
type Reply = Box<dyn Fn(&GenerateRequest) -> Vec<Chunk> + Send + Sync>;

struct Scripted {
    replies: Vec<Reply>,
    requests: Mutex<Vec<(Instant, Vec<Message>)>>,
}

impl Adapter for Scripted {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let mut requests = self.requests.lock().unwrap();
        let k = requests.len();
        requests.push((Instant::now(), request.messages.to_vec()));
        let chunks = match self.replies.get(k) {
            Some(reply) => reply(&request),
            None => say("(script exhausted)"),
        };
        Box::pin(futures::stream::iter(chunks))
    }
}

fn usage() -> Chunk {
    Chunk::Usage {
        usage: dsh_llm::Usage {
            input_tokens: 10,
            output_tokens: 1,
            ..Default::default()
        },
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Vec<Chunk> {
    vec![
        Chunk::ToolCallDelta {
            index: 0,
            id: id.into(),
            name: Some(name.into()),
            arguments_delta: args.to_string(),
        },
        usage(),
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
        usage(),
        Chunk::Finish {
            reason: FinishReason::Stop,
        },
    ]
}

struct Setup {
    _dir: tempfile::TempDir,
    agent: Agent,
    adapter: Arc<Scripted>,
    jobs: JobTable,
}

fn setup(replies: Vec<Reply>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("ws");
    std::fs::create_dir_all(&cwd).unwrap();
    let adapter = Arc::new(Scripted {
        replies,
        requests: Mutex::new(Vec::new()),
    });
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
    let jobs = JobTable::new();
    extensions.register_for_life(Arc::new(BackgroundJobs::new(&jobs)));
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(AskUserQuestionTool)).unwrap();
    let parts = AgentParts {
        adapters,
        tools: Arc::new(tools),
        extensions,
        tool_context: ToolContext::new(&cwd, SpillDir::create(dir.path().join("spill")).unwrap())
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess)
            .with_jobs(jobs.clone()),
        options: AgentOptions::new(CallConfig::new("m", "m"), &cwd),
    };
    let store = open_store(StoreKind::Jsonl, dir.path()).unwrap();
    let agent = Agent::create(parts, store.as_ref()).unwrap();
    Setup {
        _dir: dir,
        agent,
        adapter,
        jobs,
    }
}

fn notice_in(messages: &[Message]) -> Option<String> {
    messages.iter().find_map(|m| match &m.source {
        MessageSource::Plugin { plugin, .. } if plugin == BACKGROUND_JOBS_PLUGIN => Some(m.text()),
        _ => None,
    })
}

fn tool_results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| matches!(m.source, MessageSource::Tool { .. }))
        .map(tool_result_text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_finishes_while_the_agent_works_and_the_model_is_told() {
    let replies: Vec<Reply> = vec![
        Box::new(|_| {
            call(
                "c1",
                "bash",
                serde_json::json!({"command": "sleep 2; echo done", "description": "slow", "run_in_background": true}),
            )
        }),
        // Keep working: this call completes while the job runs and outlasts it.
        Box::new(|_| {
            call(
                "c2",
                "bash",
                serde_json::json!({"command": "sleep 3; echo meanwhile", "description": "work"}),
            )
        }),
        Box::new(|request| match notice_in(&request.messages) {
            Some(text) => say(&format!("saw: {text}")),
            None => say("no notice"),
        }),
    ];
    let mut s = setup(replies);
    let started = Instant::now();
    s.agent.handle().followup("go").unwrap();
    let outcome = s.agent.run_until_idle().await.unwrap().pop().unwrap();
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert!(
        outcome
            .final_text
            .starts_with("saw: Background job bash-1 finished: completed (exit code 0)"),
        "{}",
        outcome.final_text
    );
    assert!(
        outcome.final_text.contains("\ndone\n"),
        "{}",
        outcome.final_text
    );

    let requests = s.adapter.requests.lock().unwrap();
    // The background call returned at once: the second request came well before the job ended.
    assert!(requests[1].0 - started < Duration::from_millis(1500));
    let results = tool_results(&requests[1].1);
    assert!(
        results[0].starts_with("Started background job bash-1."),
        "{results:?}"
    );
    // The notice was not there while the job ran, and came after the other call's result.
    assert!(notice_in(&requests[1].1).is_none());
    let last = &requests[2].1;
    assert_eq!(tool_results(last)[1], "meanwhile\n");
    let notice_at = last
        .iter()
        .position(|m| matches!(&m.source, MessageSource::Plugin { plugin, .. } if plugin == BACKGROUND_JOBS_PLUGIN))
        .unwrap();
    let second_result_at = last
        .iter()
        .rposition(|m| matches!(m.source, MessageSource::Tool { .. }))
        .unwrap();
    assert!(notice_at > second_result_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_die_when_the_agent_is_dropped() {
    let replies: Vec<Reply> = vec![
        Box::new(|_| {
            call(
                "c1",
                "bash",
                serde_json::json!({"command": "sleep 60 & sleep 60", "description": "long", "run_in_background": true}),
            )
        }),
        Box::new(|_| say("started")),
    ];
    let mut s = setup(replies);
    s.agent.handle().followup("go").unwrap();
    let outcome = s.agent.run_until_idle().await.unwrap().pop().unwrap();
    assert_eq!(outcome.final_text, "started");
    let groups = s.jobs.running_groups();
    assert_eq!(groups.len(), 1);
    assert!(group_has_live_members(groups[0]));
    let Setup {
        _dir, agent, jobs, ..
    } = s;
    drop(jobs);
    drop(agent);
    let deadline = Instant::now() + Duration::from_secs(3);
    while group_has_live_members(groups[0]) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !group_has_live_members(groups[0]),
        "the job outlived its agent"
    );
}

fn ask_then_report() -> Vec<Reply> {
    vec![
        Box::new(|_| {
            call(
                "call_ask",
                "ask_user_question",
                serde_json::json!({"questions": [
                    {"id": "db", "question": "Which database?", "header": "Database",
                     "options": [{"label": "Postgres"}, {"label": "SQLite", "description": "embedded"}]}
                ]}),
            )
        }),
        Box::new(|request| say(&tool_results(&request.messages).join("|"))),
    ]
}

#[tokio::test]
async fn headless_questions_fail_clearly_and_the_loop_continues() {
    let mut s = setup(ask_then_report());
    s.agent.handle().followup("go").unwrap();
    let outcome = s.agent.run_until_idle().await.unwrap().pop().unwrap();
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert!(
        outcome
            .final_text
            .starts_with("Error: cannot ask the user: this session is headless"),
        "{}",
        outcome.final_text
    );
    assert!(outcome.final_text.contains("decide yourself"));
}

struct PicksSecond {
    seen: Mutex<Option<QuestionRequest>>,
}

impl Asker for PicksSecond {
    fn ask(&self, request: QuestionRequest) -> BoxFuture<'static, AskOutcome> {
        let answers = request
            .questions
            .iter()
            .map(|q| UserAnswer {
                id: q.id.clone(),
                answers: vec![q.options[1].label.clone()],
            })
            .collect();
        *self.seen.lock().unwrap() = Some(request);
        Box::pin(async move { AskOutcome::Answered(answers) })
    }
}

#[tokio::test]
async fn a_front_end_asker_answers() {
    let mut s = setup(ask_then_report());
    let asker = Arc::new(PicksSecond {
        seen: Mutex::new(None),
    });
    s.agent.set_asker(asker.clone());
    s.agent.handle().followup("go").unwrap();
    let outcome = s.agent.run_until_idle().await.unwrap().pop().unwrap();
    assert_eq!(
        outcome.final_text,
        "The user answered:\n- Which database? (db): SQLite"
    );
    let seen = asker.seen.lock().unwrap().clone().unwrap();
    // The request names the model's call, so a front end can tie it to the `tool/call` event.
    assert_eq!(seen.call_id, "call_ask");
    assert_eq!(seen.questions[0].header.as_deref(), Some("Database"));
    assert_eq!(
        seen.questions[0].options[1].description.as_deref(),
        Some("embedded")
    );
}

/// A job that finishes while the agent is idle wakes it with a new turn (dsh's
/// `completionDelivery: wakeup`), at most `MAX_CONSECUTIVE_WAKES` turns in a row: here every
/// woken turn starts another job, and the fourth completion no longer opens a turn. The user's
/// next message refills the budget. `run_until_settled` (what `dsh run` uses) waits for the
/// wake-ups and returns once nothing can wake the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_wake_the_idle_agent_at_most_three_times_in_a_row() {
    let background = |id: &'static str| -> Reply {
        // Long enough to outlast the rest of its turn even on a loaded machine: a job that ends
        // before its turn's last step is reported in that step instead of waking a new turn
        // (seen once in a full workspace run with 0.3 s).
        Box::new(move |_| {
            call(
                id,
                "bash",
                serde_json::json!({"command": "sleep 1", "description": "short", "run_in_background": true}),
            )
        })
    };
    let idle = |text: &'static str| -> Reply { Box::new(move |_| say(text)) };
    let replies: Vec<Reply> = vec![
        background("c1"),
        idle("turn 1 waits"),
        background("c2"),
        idle("wake 1"),
        background("c3"),
        idle("wake 2"),
        background("c4"),
        idle("wake 3"),
        // After the user speaks again.
        background("c5"),
        idle("turn 5 waits"),
        Box::new(|request| match request.messages.last() {
            Some(m) if notice_in(std::slice::from_ref(m)).is_some() => say(&format!(
                "woken by: {}",
                m.text().lines().next().unwrap_or("")
            )),
            _ => say("no notice"),
        }),
    ];
    assert_eq!(dsh_agent::MAX_CONSECUTIVE_WAKES, 3);
    let mut s = setup(replies);
    let handle = s.agent.handle();
    let stop = tokio_util::sync::CancellationToken::new();
    handle.followup("go").unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), s.agent.run_until_settled(&stop))
        .await
        .unwrap()
        .unwrap();
    let texts: Vec<&str> = outcomes.iter().map(|o| o.final_text.as_str()).collect();
    assert_eq!(texts, ["turn 1 waits", "wake 1", "wake 2", "wake 3"]);
    // The fourth job ends without opening a turn: the budget is spent.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.jobs.any_running() {
        assert!(Instant::now() < deadline, "bash-4 did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.adapter.requests.lock().unwrap().len(), 8);
    let (_, next_turn) = handle.pending();
    assert!(next_turn.is_empty(), "no wake-up was queued: {next_turn:?}");

    // Each woken turn started from the notice of the job before it.
    {
        let requests = s.adapter.requests.lock().unwrap();
        for (k, job) in [(2, "bash-1"), (4, "bash-2"), (6, "bash-3")] {
            let notice = requests[k]
                .1
                .iter()
                .rev()
                .find_map(|m| match &m.source {
                    MessageSource::Plugin { plugin, .. } if plugin == BACKGROUND_JOBS_PLUGIN => {
                        Some(m.text())
                    }
                    _ => None,
                })
                .unwrap();
            assert!(
                notice.starts_with(&format!("Background job {job} finished")),
                "{notice}"
            );
        }
    }

    // The user's message refills the budget: its job wakes the agent again, and the notice of
    // bash-4, left unreported, reaches the model in the user's turn.
    handle.followup("again").unwrap();
    let outcomes = tokio::time::timeout(Duration::from_secs(30), s.agent.run_until_settled(&stop))
        .await
        .unwrap()
        .unwrap();
    let texts: Vec<&str> = outcomes.iter().map(|o| o.final_text.as_str()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "turn 5 waits");
    assert!(
        texts[1].starts_with("woken by: Background job bash-5 finished: completed (exit code 0)"),
        "{texts:?}"
    );

    // The log: each wake-up is queued input for a new turn with the plugin's source.
    let log = dsh_session::load_file(std::path::Path::new(&handle.location())).unwrap();
    let wakes = log
        .events
        .iter()
        .filter(|e| matches!(&e.event, dsh_session::Event::UserMessage(m)
            if matches!(&m.source, MessageSource::Plugin { plugin, .. } if plugin == BACKGROUND_JOBS_PLUGIN)))
        .count();
    // 4 wake-ups, plus bash-4's notice injected into the user's turn 5.
    assert_eq!(wakes, 5);
}
