//! The interactive UI end to end: the real `dsh` binary in a pseudo-terminal against the fake
//! provider. Type a prompt and see the streamed reply; approve an escalated `bash` call (its card
//! `awaiting approval` meanwhile, the working time standing still); start a stalling reply, type a draft,
//! press Ctrl-C: the turn is logged `aborted` with the partial reply, and the draft survives
//! on screen and is printed when the UI closes (Ctrl-D). A resumed session renders its history,
//! switches its permission preset with `/permission` (danger-full-access asks first), runs a
//! user-invocable skill as `/name args`, and answers `ask_user_question` in the question form.
//! "Always allow" (`a`) remembers a rule in `$DSH_HOME/approvals.json` and the next covered call
//! is not asked.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::time::{Duration, Instant};

use dsh_session::{load_file, Event, TurnEndReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};

use crate::common::session_file;
use crate::tui_harness::Tui;

/// The seconds the working indicator shows while it waits for an approval.
fn waiting_time(screen: &str) -> String {
    let line = screen
        .lines()
        .find(|l| l.contains("Waiting for your approval ("))
        .unwrap_or_else(|| panic!("no waiting indicator:\n{screen}"));
    let after = line.split("Waiting for your approval (").nth(1).unwrap();
    after.split(' ').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_stream_cancel_keep_draft() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("Hello from the ")
                .text("**fake** provider")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .tool_call(
                    0,
                    "call_esc",
                    "bash",
                    &serde_json::json!({
                        "command": "echo approved-run > marker.txt",
                        "description": "write a marker",
                        "sandbox_permissions": "danger-full-access",
                        "justification": "the test needs it",
                    })
                    .to_string(),
                )
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("marker written")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .reasoning("thinking about it")
                .text("partial answer")
                .end(StreamEnd::Stall),
        ),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // The full-screen mode (the inline one, the default, is tested in tui_inline.rs).
    let mut tui = Tui::start_with(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &["--alt-screen"],
    );

    let first_frame = tui.wait_for("workspace-write");
    eprintln!("time to first frame (spawn to status line): {first_frame:?}");
    tui.wait_for("Ask dsh anything");

    tui.type_text("say hello\r");
    tui.wait_for("Hello from the fake provider");
    tui.wait_for("› say hello");

    // The safety policy asks before an escalation; the UI shows the question, `y` allows once.
    tui.type_text("write the marker\r");
    tui.wait_for("approval needed");
    tui.wait_for("[y] allow once");
    // While the question waits, the card says so (not `running…`) and the working time stands
    // still (docs/protocol.md, "Tool cards").
    tui.wait_until("the card awaits approval", |s| {
        s.lines()
            .any(|l| l.contains("bash") && l.contains("awaiting approval"))
    });
    let waited = waiting_time(&tui.contents());
    std::thread::sleep(Duration::from_millis(2200));
    let screen = tui.contents();
    assert_eq!(waiting_time(&screen), waited, "{screen}");
    assert!(!screen.contains("running…"), "{screen}");
    tui.type_text("y");
    tui.wait_for("marker written");
    tui.wait_for("✓ exit 0");
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("marker.txt")).unwrap(),
        "approved-run\n"
    );

    tui.type_text("stall please\r");
    tokio::time::timeout(
        Duration::from_secs(30),
        provider.wait_until(|e| e.stalls >= 1),
    )
    .await
    .unwrap();
    tui.wait_for("partial answer");
    tui.type_text("my unsent draft");
    tui.wait_for("my unsent draft");
    tui.type_text("\x03");
    tui.wait_for("turn cancelled");
    // The cancel left the draft alone.
    let screen = tui.contents();
    assert!(screen.contains("my unsent draft"), "{screen}");
    tokio::time::timeout(
        Duration::from_secs(10),
        provider.wait_until(|e| e.client_disconnects >= 1),
    )
    .await
    .expect("the stalled connection was closed");

    // Ctrl-D quits; the draft is printed after the terminal is restored.
    tui.type_text("\x04");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = tui.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "dsh did not exit after Ctrl-D");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    std::thread::sleep(Duration::from_millis(200));
    let raw = String::from_utf8_lossy(&tui.raw.lock().unwrap()).into_owned();
    assert!(raw.contains("your unsent draft:"), "{raw}");
    assert!(raw.contains("dsh resume "), "{raw}");
    // Raw mode and the alternate screen were left.
    assert!(raw.contains("\x1b[?1049l"), "alternate screen not left");

    let log = load_file(&session_file(home.path())).unwrap();
    let ends: Vec<TurnEndReason> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnEnd(end) => Some(end.reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert_eq!(ends[0], TurnEndReason::Completed);
    assert_eq!(ends[1], TurnEndReason::Completed);
    assert!(matches!(ends[2], TurnEndReason::Aborted { .. }), "{ends:?}");
    assert!(log.events.iter().any(|e| matches!(&e.event,
        Event::Opaque { event_type, data } if event_type == "approval/decided" && data["outcome"] == "approved")));
    let partial = log.events.iter().find_map(|e| match &e.event {
        Event::AssistantMessage(m) if m.interrupted => Some(m.message.text()),
        _ => None,
    });
    assert_eq!(partial.as_deref(), Some("partial answer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_renders_the_history_then_permission_skill_and_question() {
    let question = serde_json::json!({"questions": [{
        "id": "db",
        "question": "Which database?",
        "options": [{"label": "sqlite"}, {"label": "postgres", "description": "the big one"}],
    }]});
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("The answer is 42.")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("reviewed it")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_ask", "ask_user_question", &question.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("postgres it is")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "call_ask2", "ask_user_question", &question.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let skill = cwd.path().join(".dsh/skills/audit");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: audit\ndescription: Audit the changes.\n---\nAudit step by step.\n",
    )
    .unwrap();
    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Ask dsh anything");
    tui.type_text("what is the answer\r");
    tui.wait_for("The answer is 42.");
    tui.type_text("\x04");
    let deadline = Instant::now() + Duration::from_secs(20);
    while tui.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dsh did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut resumed = Tui::start_with(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &["resume", "--last"],
    );
    resumed.wait_for("› what is the answer");
    resumed.wait_for("The answer is 42.");

    resumed.type_text("/permission read-only\r");
    resumed.wait_for("permission preset: read-only (was workspace-write)");
    resumed.wait_for("· read-only ·");
    resumed.type_text("/permission danger-full-access\r");
    resumed.wait_for("confirm permission preset");
    resumed.type_text("n");
    resumed.wait_for("kept read-only");

    resumed.type_text("/audit the parser\r");
    resumed.wait_for("reviewed it");

    resumed.type_text("which db?\r");
    resumed.wait_for("question 1/1");
    resumed.wait_for("2. postgres  the big one");
    resumed.type_text("2\r");
    resumed.wait_for("postgres it is");

    // Ctrl-C while a question waits cancels the turn and closes the form.
    resumed.type_text("ask again\r");
    resumed.wait_for("question 1/1");
    resumed.type_text("\x03");
    resumed.wait_for("turn cancelled");
    resumed.wait_for("Ask dsh anything");
    let screen = resumed.contents();
    assert!(!screen.contains("question 1/1"), "{screen}");
    resumed.type_text("\x04");
    let deadline = Instant::now() + Duration::from_secs(20);
    while resumed.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dsh resume did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }

    let log = load_file(&session_file(home.path())).unwrap();
    let presets: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "permission/preset" => {
                data["preset"].as_str().map(str::to_string)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        presets.last().map(String::as_str),
        Some("read-only"),
        "{presets:?}"
    );
    assert!(!presets.iter().any(|p| p == "danger-full-access"));
    let skill_text = log.events.iter().any(|e| matches!(&e.event,
        Event::UserMessage(m) if m.text().contains("Audit step by step.") && m.text().contains("the parser")));
    assert!(skill_text, "the skill was not sent as a user message");
    let results: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) if r.call_id() == Some("call_ask") => Some(format!("{r:?}")),
            _ => None,
        })
        .collect();
    let answered = results
        .iter()
        .any(|r| r.contains("Which database? (db): postgres"));
    assert!(answered, "{results:?}");
    let ends: Vec<TurnEndReason> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnEnd(end) => Some(end.reason.clone()),
            _ => None,
        })
        .collect();
    assert!(
        matches!(ends.last(), Some(TurnEndReason::Aborted { .. })),
        "{ends:?}"
    );
}

/// A workspace with planted settings: the TUI shows what would run and asks before the UI
/// starts; `n` starts with them ignored, `y` records trust and applies them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_project_settings_are_shown_and_asked_before_the_ui() {
    let provider = FakeProvider::start([]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".dsh")).unwrap();
    std::fs::write(
        cwd.path().join(".dsh/config.toml"),
        "permission = \"danger-full-access\"\n",
    )
    .unwrap();
    std::fs::write(
        cwd.path().join(".dsh/hooks.json"),
        r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo planted-hook"}]}]}}"#,
    )
    .unwrap();

    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Trust this workspace");
    let review = tui.contents();
    assert!(
        review.contains("permission = \"danger-full-access\""),
        "{review}"
    );
    assert!(
        review.contains("Stop: runs `echo planted-hook`"),
        "{review}"
    );
    tui.type_text("n\r");
    tui.wait_for("Ask dsh anything");
    tui.wait_for("· workspace-write ·");
    assert!(!home.path().join("trust.toml").exists());
    tui.type_text("\x04");
    let _ = tui.child.wait();

    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Trust this workspace");
    tui.type_text("y\r");
    tui.wait_for("Ask dsh anything");
    tui.wait_for("· danger-full-access ·");
    assert!(home.path().join("trust.toml").is_file());
    tui.type_text("\x04");
    let _ = tui.child.wait();

    // Trusted now: no question.
    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Ask dsh anything");
    assert!(!tui.contents().contains("Trust this workspace"));
    tui.type_text("\x04");
    let _ = tui.child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_remembers_the_rule_and_the_next_call_is_not_asked() {
    let escalated = |id: &str, command: &str| {
        ScriptedReply::from(
            SseReply::new()
                .tool_call(
                    0,
                    id,
                    "bash",
                    &serde_json::json!({
                        "command": command,
                        "description": "print",
                        "sandbox_permissions": "danger-full-access",
                        "justification": "the test needs it",
                    })
                    .to_string(),
                )
                .finish("tool_calls", Some(WireUsage::default())),
        )
    };
    let done = |text: &str| {
        ScriptedReply::from(
            SseReply::new()
                .text(text)
                .finish("stop", Some(WireUsage::default())),
        )
    };
    let provider = FakeProvider::start([
        escalated("call_1", "printf rule-first"),
        done("first done"),
        escalated("call_2", "printf rule-first again"),
        done("second done"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Ask dsh anything");

    tui.type_text("print it\r");
    tui.wait_for("approval needed");
    tui.wait_for("[a] always");
    tui.wait_for("starting with `printf rule-first`");
    tui.type_text("a");
    tui.wait_for("first done");
    tui.wait_for("remembered for later sessions");

    // The same prefix again: no box, the rule answers.
    tui.type_text("again\r");
    tui.wait_for("second done");
    tui.wait_for("allowed by a remembered approval");
    let rules = std::fs::read_to_string(home.path().join("approvals.json")).unwrap();
    assert!(
        rules.contains("\"command_prefix\": \"printf rule-first\""),
        "{rules}"
    );
    assert!(rules.contains("danger-full-access"), "{rules}");

    tui.type_text("\x04");
    let deadline = Instant::now() + Duration::from_secs(20);
    while tui.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dsh did not exit after Ctrl-D");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = load_file(&session_file(home.path())).unwrap();
    let scopes: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "approval/decided" => {
                data["scope"].as_str().map(str::to_string)
            }
            _ => None,
        })
        .collect();
    assert_eq!(scopes, vec!["always", "rule"]);
}

/// `/effort` refuses an effort the model does not take (before any request, with the list),
/// and `/model` carries a valid effort to the new model and says so (issue 20, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effort_is_checked_against_the_model_and_carried_by_a_model_switch() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text("session open")
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("switched fine")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let resume_with = (url.clone(), h.clone(), c.clone());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        // The session opens with the first prompt.
        tui.type_text("open it\r");
        tui.wait_for("session open");
        tui.type_text("/effort\r");
        tui.wait_for("deepseek-v4-flash takes: off, low, high, max");
        tui.type_text("/effort medium\r");
        tui.wait_for("does not support reasoning effort `medium`");
        tui.type_text("/effort max\r");
        tui.wait_for("effort set to max from the next request");
        // A model the table does not list is refused unless forced (issue 41).
        tui.type_text("/model local-model\r");
        tui.wait_for("local-model` is not in the model table");
        tui.type_text("/model --force local-model\r");
        tui.wait_for("model set to local-model");
        tui.wait_for("effort `max` is not sent");
        tui.type_text("hello\r");
        tui.wait_for("switched fine");
        // The request that used the new model shows the switch (logged: a resume shows it too).
        tui.wait_for("model: local-model");
        tui.type_text("\x04");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tui.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "dsh did not exit after Ctrl-D");
            std::thread::sleep(Duration::from_millis(50));
        }
        let (url, h, c) = resume_with;
        let mut resumed = Tui::start_with(&url, &h, &c, &["resume", "--last", "--alt-screen"]);
        resumed.wait_for("switched fine");
        resumed.wait_for("model: local-model");
        resumed.type_text("\x04");
        let deadline = Instant::now() + Duration::from_secs(20);
        while resumed.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "dsh resume did not exit after Ctrl-D"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    // Two turns, two requests (nothing was sent for the refused effort); the second went to
    // the new model, without the effort it does not take.
    let requests = provider.requests();
    let bodies: Vec<_> = requests
        .iter()
        .filter(|r| r.body["stream"] == true && r.body["tools"].is_array())
        .collect();
    assert_eq!(bodies.len(), 2, "{requests:?}");
    assert_eq!(bodies[0].body["model"], "deepseek-v4-flash");
    assert_eq!(bodies[1].body["model"], "local-model");
    assert!(
        bodies[1].body.get("reasoning_effort").is_none(),
        "{}",
        bodies[1].body
    );
}

/// The interactive UI takes the session flags and a first message, as `codex` and `claude`
/// do (issue 41): `dsh --model M --effort E --permission P -C DIR "task"` opens a session in
/// DIR with that model, effort and preset, and sends the task at once.
#[tokio::test]
async fn the_interactive_ui_takes_session_flags_and_a_first_message() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("on it")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let other_dir = std::fs::canonicalize(other.path()).unwrap();
    let url = provider.base_url();
    let (h, c, o) = (
        home.path().to_path_buf(),
        cwd.path().to_path_buf(),
        other_dir.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let dir = o.display().to_string();
        let mut tui = Tui::start_with(
            &url,
            &h,
            &c,
            &[
                "--model",
                "deepseek-v4-pro",
                "--effort",
                "high",
                "--permission",
                "read-only",
                "-C",
                &dir,
                "fix the failing test",
            ],
        );
        tui.wait_for("on it");
        tui.wait_for("read-only");
        tui.type_text("\x04");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tui.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "dsh did not exit after Ctrl-D");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    let requests = provider.requests();
    let bodies: Vec<_> = requests
        .iter()
        .filter(|r| r.body["stream"] == true && r.body["tools"].is_array())
        .collect();
    assert_eq!(bodies.len(), 1, "{requests:?}");
    let body = &bodies[0].body;
    assert_eq!(body["model"], "deepseek-v4-pro");
    assert_eq!(body["reasoning_effort"], "high", "{body}");
    assert!(body.to_string().contains("fix the failing test"), "{body}");
    let logs = crate::common::session_files(home.path());
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(log.contains(&other_dir.display().to_string()), "{log}");
}

/// `/goal <objective>` at idle sets the goal and starts its round; the status line shows the
/// goal as it goes (docs/goals.md, "Where it shows"): here one round allowed, so it ends
/// blocked by the round limit.
#[tokio::test]
async fn the_status_line_shows_the_goal() {
    let reply = || {
        ScriptedReply::from(
            SseReply::new()
                .text("worked on it")
                .finish("stop", Some(WireUsage::default())),
        )
    };
    let provider = FakeProvider::start([reply(), reply(), reply()])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start_with(&url, &h, &c, &["-c", "goals.max_rounds=1"]);
        tui.wait_for("Ask dsh anything");
        // The session's commands are known once it opened: the completion menu offers /goal.
        tui.type_text("/go");
        tui.wait_until("/goal in the completion menu", |screen| {
            screen
                .lines()
                .any(|l| l.contains("/goal") && l.contains("goal:"))
        });
        tui.type_text("\x7f\x7f\x7f");
        tui.type_text("/goal Ship the parser\r");
        tui.wait_for("worked on it");
        tui.wait_for("goal blocked 1/1: Ship the parser");
        tui.type_text("/goal\r");
        tui.wait_for("round-limit");
        tui.quit();
    })
    .await
    .unwrap();
    let log = std::fs::read_to_string(session_file(home.path())).unwrap();
    assert!(log.contains("\"operation\":\"create\""), "{log}");
    assert!(log.contains("\"code\":\"round-limit\""), "{log}");
}
