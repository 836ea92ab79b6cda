//! Crash test: a child process (this test binary re-executed in child mode) appends a scripted
//! session with the real flush policy and reports every completed flush on stdout; the parent
//! SIGKILLs it at a random point. Every resulting file must load, keep every flushed event,
//! match the script, and be closed correctly by repair.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_llm::{Chunk, ContentBlock, Message, MessageSource, Role};
use dsh_session::*;
use rand::Rng;

const CHILD_ENV: &str = "DSH_SESSION_CRASH_CHILD";
const TRIALS: usize = 200;

/// The deterministic script: turn after turn, each with a tool step (two calls) and a text
/// step. Returns the events of turn `turn`.
fn turn_script(turn: u64) -> Vec<Event> {
    let mut out = vec![
        Event::TurnStart(TurnStart { turn }),
        Event::StepStart(StepRef { turn, step: 1 }),
        Event::UserMessage(Message::user_text(
            format!("u{turn}"),
            format!("task {turn}"),
        )),
        Event::RequestContext(RequestContext {
            provider: "p".into(),
            model: "m".into(),
        }),
    ];
    let delta = |step: u64, i: u64| {
        Event::AssistantChunk(AssistantChunk {
            turn,
            step,
            chunk: Chunk::TextDelta {
                index: 0,
                text: format!("w{i} "),
            },
        })
    };
    for i in 0..20 {
        out.push(delta(1, i));
    }
    let calls = [format!("c{turn}a"), format!("c{turn}b")];
    let mut content = vec![ContentBlock::text("running")];
    for id in &calls {
        content.push(ContentBlock::ToolCall {
            id: id.clone(),
            name: "bash".into(),
            arguments: "{\"command\":\"true\"}".into(),
        });
    }
    out.push(Event::AssistantMessage(AssistantMessage {
        turn,
        step: 1,
        message: Message {
            id: format!("a{turn}"),
            role: Role::Assistant,
            content,
            source: MessageSource::Model {
                provider: "p".into(),
                model: "m".into(),
                extra: Default::default(),
            },
        },
        usage: None,
        interrupted: false,
    }));
    for id in &calls {
        out.push(Event::ToolCall(ToolCall {
            turn,
            step: 1,
            call_id: id.clone(),
            name: "bash".into(),
            arguments: "{\"command\":\"true\"}".into(),
            presentation: None,
        }));
        out.push(Event::ToolStarted(ToolStarted {
            turn,
            step: 1,
            call_id: id.clone(),
        }));
        out.push(Event::ToolResult(ToolResult {
            turn,
            step: 1,
            message: Message::tool_result(
                format!("r{id}"),
                id,
                vec![ContentBlock::text("ok")],
                false,
            ),
            error: None,
            meta: None,
            summary: None,
        }));
    }
    out.push(Event::StepEnd(StepRef { turn, step: 1 }));
    out.push(Event::StepStart(StepRef { turn, step: 2 }));
    for i in 0..10 {
        out.push(delta(2, i));
    }
    out.push(Event::StepEnd(StepRef { turn, step: 2 }));
    out.push(Event::TurnEnd(TurnEnd {
        turn,
        reason: TurnEndReason::Completed,
    }));
    out
}

fn script(len: usize) -> Vec<Event> {
    let mut out = Vec::new();
    let mut turn = 1;
    while out.len() < len {
        out.extend(turn_script(turn));
        turn += 1;
    }
    out.truncate(len);
    out
}

/// Child mode: append the script forever (until killed), reporting flushes.
#[test]
fn crash_child() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = JsonlStore::new(Path::new(&home));
    let mut w = store
        .create(
            "/crash",
            CreateOptions {
                id: Some("crash".into()),
                delegation_depth: 0,
            },
        )
        .expect("create");
    println!("F 0");
    for event in script(200_000) {
        let before_model_call = matches!(event, Event::RequestContext(_));
        let flush_point = is_flush_point(&event);
        let seq = w.append(event).expect("append");
        if before_model_call {
            w.flush().expect("flush");
        }
        if before_model_call || flush_point {
            println!("F {}", seq + 1);
        }
    }
}

fn strip_time(mut env: Envelope) -> Envelope {
    env.time = None;
    env
}

#[test]
fn sigkill_at_random_points_loses_no_flushed_event_and_repairs() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let started = Instant::now();
    let exe = std::env::current_exe().expect("test binary");
    let expected = script(20_000);
    let mut rng = rand::thread_rng();
    let mut torn_seen = 0;
    let mut repaired_seen = 0;
    for trial in 0..TRIALS {
        // SIGKILL keeps the page cache, so fsync speed does not change what survives: use a
        // memory file system when there is one to keep the 200 trials fast.
        let home = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm")
        } else {
            tempfile::tempdir()
        }
        .expect("tempdir");
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let wait_for = rng.gen_range(1..20);
        let mut flushed = None;
        let mut seen = 0;
        while seen < wait_for {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(n) = line.strip_prefix("F ") {
                flushed = Some(n.parse::<u64>().expect("count"));
                seen += 1;
            }
        }
        if rng.gen_bool(0.5) {
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..3000)));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let flushed = flushed.expect("child created the session");

        let path = session_path(home.path(), "/crash", "crash");
        let log =
            load_file(&path).unwrap_or_else(|e| panic!("trial {trial}: file does not load: {e}"));
        torn_seen += usize::from(log.torn_tail.is_some());
        assert!(
            log.events.len() as u64 >= flushed,
            "trial {trial}: {} events on disk but {flushed} were flushed",
            log.events.len()
        );
        for (env, want) in log.events.iter().zip(&expected) {
            assert_eq!(&env.event, want, "trial {trial}: seq {}", env.seq);
        }
        let started_calls: Vec<String> = log
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ToolStarted(s) => Some(s.call_id.clone()),
                _ => None,
            })
            .collect();
        let before = log.events.len();

        let resumed = store_resume(home.path());
        repaired_seen += usize::from(!resumed.is_empty());
        let after = load_file(&path).expect("repaired file loads");
        assert!(after.torn_tail.is_none());
        let prefix: Vec<Envelope> = after.events[..before]
            .iter()
            .cloned()
            .map(strip_time)
            .collect();
        let original: Vec<Envelope> = log.events.into_iter().map(strip_time).collect();
        assert_eq!(prefix, original, "trial {trial}: repair changed history");
        let mut tracker = SessionTracker::new();
        for env in &after.events {
            tracker.push(env);
        }
        assert!(
            tracker.is_closed(),
            "trial {trial}: still open after repair"
        );
        for env in &after.events[before..] {
            match &env.event {
                Event::ToolResult(r) => {
                    let id = r.call_id().expect("call id");
                    let code = r.error.as_ref().expect("error").code.as_str();
                    let want = if started_calls.iter().any(|c| c == id) {
                        TOOL_OUTCOME_UNKNOWN
                    } else {
                        TOOL_NOT_STARTED
                    };
                    assert_eq!(code, want, "trial {trial}: call {id}");
                }
                Event::StepEnd(_) => {}
                Event::TurnEnd(end) => assert_eq!(end.reason, TurnEndReason::Interrupted),
                other => panic!("trial {trial}: repair appended {other:?}"),
            }
        }
        project(&after.events).expect("projects");
    }
    eprintln!(
        "{TRIALS} trials in {:?}: {torn_seen} torn tails, {repaired_seen} repairs",
        started.elapsed()
    );
    assert!(repaired_seen > 0, "kills should land inside open turns");
    assert!(started.elapsed() < Duration::from_secs(60));
}

fn store_resume(home: &Path) -> Vec<u64> {
    let store = JsonlStore::new(home);
    let resumed = store.resume("crash").expect("resume");
    resumed.repaired
}
