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
        .map(|m| {
            m.content
                .iter()
                .map(|b| match b {
                    dsh_llm::ContentBlock::ToolResult { content, .. } => content
                        .iter()
                        .map(|c| match c {
                            dsh_llm::ContentBlock::Text { text } => text.clone(),
                            _ => String::new(),
                        })
                        .collect::<String>(),
                    _ => String::new(),
                })
                .collect()
        })
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
            .starts_with("saw: Background job job-1 finished: completed (exit code 0)"),
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
        results[0].starts_with("Started background job job-1."),
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
