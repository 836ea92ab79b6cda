//! Plan mode end to end (docs/agent.md, "Plan mode"): the real composition (sandbox, built-in
//! tools, safety policy, plan mode), the fake provider over loopback, real session files, and
//! a scripted user answering the review through the `Asker` seam every front end implements.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_agent::{AskOutcome, Asker, QuestionRequest, UserAnswer};
use dsh_runtime::{Choices, Resume, Runtime, RuntimeOptions, SessionSpec, WarningSink};
use dsh_session::{Envelope, Event};
use dsh_test_support::{chunks, sse_reply_from_chunks, FakeProvider, ScriptedReply};
use serde_json::json;

fn text_reply(text: &str) -> ScriptedReply {
    sse_reply_from_chunks(&chunks::text(text)).into()
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ScriptedReply {
    sse_reply_from_chunks(&chunks::tool_call(id, name, &args.to_string())).into()
}

fn touch(id: &str, file: &str) -> ScriptedReply {
    call(
        id,
        "bash",
        json!({"command": format!("touch {file}"), "description": "make a file"}),
    )
}

fn write(id: &str, file: &str) -> ScriptedReply {
    call(
        id,
        "write",
        json!({"file_path": file, "content": "changed\n"}),
    )
}

fn present(id: &str, plan: &str) -> ScriptedReply {
    call(id, "exit_plan_mode", json!({ "plan": plan }))
}

const PLAN: &str = "# Add a greeting flag\n\n- parse `--greeting`\n- print it\n";

/// A user who answers reviews from a script and remembers what was shown.
#[derive(Default)]
struct ScriptedUser {
    answers: Mutex<VecDeque<AskOutcome>>,
    shown: Mutex<Vec<QuestionRequest>>,
}

impl ScriptedUser {
    fn new(answers: Vec<AskOutcome>) -> Arc<Self> {
        Arc::new(ScriptedUser {
            answers: Mutex::new(answers.into()),
            shown: Mutex::default(),
        })
    }
}

impl Asker for ScriptedUser {
    fn ask(
        &self,
        request: QuestionRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = AskOutcome> + Send>> {
        self.shown.lock().unwrap().push(request);
        let next = self.answers.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                Some(answer) => answer,
                // No scripted answer: the user never answers (the turn must be cancelled).
                None => std::future::pending().await,
            }
        })
    }
}

fn review(choice: &str, extra: &str) -> AskOutcome {
    AskOutcome::Answered(vec![
        UserAnswer {
            id: dsh_agent::PLAN_REVIEW_QUESTION.into(),
            answers: vec![choice.into()],
        },
        UserAnswer {
            id: dsh_agent::PLAN_EDITS_QUESTION.into(),
            answers: if extra.is_empty() {
                Vec::new()
            } else {
                vec![extra.into()]
            },
        },
    ])
}

struct Setup {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Setup {
    fn new(provider: &FakeProvider) -> Setup {
        let home = tempfile::tempdir().unwrap();
        let env = format!(
            "DEEPSEEK_BASE_URL={}\nDEEPSEEK_API_KEY=sk-plan-test\n",
            provider.base_url()
        );
        std::fs::write(home.path().join(".env"), env).unwrap();
        let cwd = tempfile::tempdir().unwrap();
        std::fs::write(cwd.path().join("main.py"), "print('hi')\n").unwrap();
        Setup { home, cwd }
    }

    fn runtime(&self) -> Runtime {
        let warnings: WarningSink = Arc::new(|_line: &str| {});
        Runtime::new(RuntimeOptions {
            home: self.home.path().to_path_buf(),
            cwd: self.cwd.path().to_path_buf(),
            choices: Choices::default(),
            warnings,
        })
        .unwrap()
    }

    fn listing(&self) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(self.cwd.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let content = std::fs::read(&p).unwrap_or_default();
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    content,
                )
            })
            .collect();
        files.sort();
        files
    }
}

fn events_of(home: &Path, id: &str) -> Vec<Envelope> {
    let store = dsh_session::JsonlStore::new(home);
    dsh_session::SessionStore::load(&store, id).unwrap().events
}

/// `plan/mode` values and preset switches, in log order.
fn mode_trail(events: &[Envelope]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "plan/mode" => {
                Some(format!("plan={}", data["active"]))
            }
            Event::Opaque { event_type, data } if event_type == "permission/preset" => {
                Some(format!("preset={}", data["preset"].as_str().unwrap()))
            }
            _ => None,
        })
        .collect()
}

/// `(name, error code or "ok", text)` of each tool result.
fn results(events: &[Envelope]) -> Vec<(String, String, String)> {
    let mut names = std::collections::HashMap::new();
    let mut out = Vec::new();
    for e in events {
        match &e.event {
            Event::ToolCall(c) => {
                names.insert(c.call_id.clone(), c.name.clone());
            }
            Event::ToolResult(r) => {
                let name = names
                    .get(r.call_id().unwrap_or_default())
                    .cloned()
                    .unwrap_or_default();
                let code = r
                    .error
                    .as_ref()
                    .map(|e| e.code.clone())
                    .unwrap_or_else(|| "ok".into());
                let text = serde_json::to_string(&r.message.content).unwrap();
                out.push((name, code, text));
            }
            _ => {}
        }
    }
    out
}

/// Opens a new session, answers reviews with `user`, runs `/plan <task>` until idle.
async fn plan_session(
    setup: &Setup,
    user: &Arc<ScriptedUser>,
) -> (String, Vec<dsh_agent::TurnOutcome>) {
    let runtime = setup.runtime();
    let store = runtime.store();
    let mut opened = runtime
        .open(&SessionSpec::default(), store.as_ref())
        .unwrap();
    opened.agent.set_asker(user.clone());
    let handle = opened.agent.handle();
    handle
        .run_user_command("plan", "add a greeting flag")
        .unwrap();
    assert_eq!(handle.permission().as_str(), "read-only");
    let outcomes = opened.agent.run_until_idle().await.unwrap();
    (handle.session_id(), outcomes)
}

#[tokio::test]
async fn approve_leaves_plan_mode_and_the_previous_preset_writes() {
    let provider = FakeProvider::start([
        touch("c1", "touched.txt"),
        write("c2", "written.txt"),
        present("c3", PLAN),
        write("c4", "after.txt"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new(&provider);
    let before = setup.listing();
    let user = ScriptedUser::new(vec![review("Approve", "")]);
    let (id, outcomes) = plan_session(&setup, &user).await;
    assert_eq!(outcomes.last().unwrap().final_text, "done");

    let events = events_of(setup.home.path(), &id);
    let results = results(&events);
    // bash ran in the read-only sandbox: the touch failed, nothing was made.
    assert_eq!(results[0].0, "bash");
    assert!(!setup.cwd.path().join("touched.txt").exists());
    assert!(
        results[0].2.contains("Read-only file system") && results[0].2.contains("[sandbox:"),
        "{:?}",
        results[0]
    );
    // write was refused with the plan-mode explanation.
    assert_eq!(results[1].1, "PERMISSION_DENIED", "{:?}", results[1]);
    assert!(results[1].2.contains("plan mode"), "{:?}", results[1]);
    // The review showed the plan; approval is logged in the result.
    let shown = user.shown.lock().unwrap().clone();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].call_id, "c3");
    assert!(shown[0].questions[0]
        .question
        .contains("parse `--greeting`"));
    assert_eq!(results[2].1, "ok");
    assert!(results[2].2.contains("Plan approved"), "{:?}", results[2]);
    let meta = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ToolResult(r) if r.call_id() == Some("c3") => r.meta.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(meta["decision"], "approved");
    // After approval the session is back to workspace-write and the write lands.
    assert_eq!(
        results[3],
        ("write".into(), "ok".into(), results[3].2.clone())
    );
    assert_eq!(
        std::fs::read_to_string(setup.cwd.path().join("after.txt")).unwrap(),
        "changed\n"
    );
    let mut after = setup.listing();
    after.retain(|(name, _)| name != "after.txt");
    assert_eq!(after, before, "plan mode changed a file");
    let trail = mode_trail(&events);
    let on = trail.iter().position(|t| t == "plan=true").unwrap();
    let off = trail.iter().position(|t| t == "plan=false").unwrap();
    assert!(
        trail[..on].contains(&"preset=read-only".to_string()),
        "{trail:?}"
    );
    assert_eq!(
        trail[on + 1..off],
        ["preset=workspace-write".to_string()],
        "{trail:?}"
    );
    // The model was told about plan mode (a logged notice) before its first request.
    let first = provider.requests()[0].body.to_string();
    assert!(
        first.contains("switched this session to plan mode"),
        "{first}"
    );
    assert!(first.contains("exit_plan_mode"));
}

#[tokio::test]
async fn approve_with_edits_gives_the_model_the_users_version() {
    let provider = FakeProvider::start([present("c1", PLAN), text_reply("done")])
        .await
        .unwrap();
    let setup = Setup::new(&provider);
    let edited = "# Add a greeting flag\n\n- parse `--greeting` with default `Hello`\n";
    let user = ScriptedUser::new(vec![review("Approve", edited)]);
    let (id, _) = plan_session(&setup, &user).await;
    let events = events_of(setup.home.path(), &id);
    let results = results(&events);
    assert_eq!(results[0].1, "ok");
    assert!(results[0].2.contains("with the user's edits"));
    assert!(results[0].2.contains("default `Hello`"));
    assert_eq!(
        dsh_agent::last_presented_plan(&events).as_deref(),
        Some(edited.trim())
    );
    assert_eq!(mode_trail(&events).last().unwrap(), "plan=false");
    // The next request carries the edited plan to the model.
    let second = provider.requests()[1].body.to_string();
    assert!(second.contains("default `Hello`"));
}

#[tokio::test]
async fn reject_then_approve_revises_and_stays_read_only_until_approved() {
    let provider = FakeProvider::start([
        present("c1", PLAN),
        call(
            "c2",
            "bash",
            json!({"command": "touch between.txt", "description": "make a file",
                "sandbox_permissions": "workspace-write", "justification": "need it"}),
        ),
        present("c3", "# Add a greeting flag\n\n- with tests\n"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new(&provider);
    let before = setup.listing();
    let user = ScriptedUser::new(vec![
        review("Keep planning", "add tests first"),
        review("Approve", ""),
    ]);
    let (id, _) = plan_session(&setup, &user).await;
    let events = events_of(setup.home.path(), &id);
    let results = results(&events);
    assert_eq!(results[0].1, "PERMISSION_DENIED");
    assert!(results[0].2.contains("keep planning"));
    assert!(results[0].2.contains("add tests first"));
    // Still in plan mode after the rejection: an escalated touch is refused outright.
    assert_eq!(results[1].1, "PERMISSION_DENIED", "{:?}", results[1]);
    assert!(results[1].2.contains("plan mode"), "{:?}", results[1]);
    assert!(!setup.cwd.path().join("between.txt").exists());
    assert_eq!(setup.listing(), before);
    assert_eq!(results[2].1, "ok");
    let trail = mode_trail(&events);
    assert_eq!(trail.iter().filter(|t| *t == "plan=true").count(), 1);
    assert_eq!(trail.last().unwrap(), "plan=false");
    // The model saw the feedback.
    let third = provider.requests()[2].body.to_string();
    assert!(third.contains("add tests first"));
}

#[tokio::test]
async fn dismissed_review_stays_in_plan_mode_and_resume_restores_it() {
    let provider = FakeProvider::start([
        present("c1", PLAN),
        text_reply("waiting"),
        write("c2", "resumed.txt"),
        touch("c3", "resumed-bash.txt"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new(&provider);
    let before = setup.listing();
    let user = ScriptedUser::new(vec![AskOutcome::Declined {
        message: String::new(),
    }]);
    let (id, outcomes) = plan_session(&setup, &user).await;
    assert_eq!(outcomes.last().unwrap().final_text, "waiting");
    let events = events_of(setup.home.path(), &id);
    assert_eq!(results(&events)[0].1, "ABORTED");
    assert!(results(&events)[0].2.contains("dismissed the plan review"));
    assert!(dsh_agent::fold_plan_mode(&events));

    // A new process resumes the session: still plan mode, still read-only.
    let runtime = setup.runtime();
    let store = runtime.store();
    let spec = SessionSpec {
        resume: Resume::Id(id.clone()),
        ..SessionSpec::default()
    };
    let mut opened = runtime.open(&spec, store.as_ref()).unwrap();
    let handle = opened.agent.handle();
    assert_eq!(handle.permission().as_str(), "read-only");
    assert!(handle.plan_mode());
    handle.followup("go on").unwrap();
    let outcomes = opened.agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes.last().unwrap().final_text, "done");
    let events = events_of(setup.home.path(), &id);
    let results = results(&events);
    assert_eq!(results[1].1, "PERMISSION_DENIED");
    assert!(results[1].2.contains("plan mode"));
    assert!(!setup.cwd.path().join("resumed-bash.txt").exists());
    assert_eq!(setup.listing(), before);

    // `/plan off` leaves it and goes back to the configured preset.
    handle.run_user_command("plan", "off").unwrap();
    assert_eq!(handle.permission().as_str(), "workspace-write");
    assert!(!handle.plan_mode());
    let events = events_of(setup.home.path(), &id);
    assert_eq!(mode_trail(&events).last().unwrap(), "plan=false");
}

/// Resume restores plan mode, and approving the plan afterwards goes back to the preset of the
/// process that resumed (its flags or configuration), not to the one logged before plan mode.
#[tokio::test]
async fn after_a_resume_leaving_plan_mode_goes_back_to_the_resuming_process_preset() {
    let provider = FakeProvider::start([
        present("c1", PLAN),
        text_reply("waiting"),
        present("c2", PLAN),
        touch("c3", "after-approval.txt"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new(&provider);
    let with_permission = |permission: Option<&str>| {
        let warnings: WarningSink = Arc::new(|_line: &str| {});
        Runtime::new(RuntimeOptions {
            home: setup.home.path().to_path_buf(),
            cwd: setup.cwd.path().to_path_buf(),
            choices: Choices {
                permission: permission.map(str::to_string),
                ..Choices::default()
            },
            warnings,
        })
        .unwrap()
    };

    // The first process runs with danger-full-access and enters plan mode; the review is
    // dismissed, so the session is left in plan mode.
    let id = {
        let runtime = with_permission(Some("danger-full-access"));
        let store = runtime.store();
        let mut opened = runtime
            .open(&SessionSpec::default(), store.as_ref())
            .unwrap();
        opened
            .agent
            .set_asker(ScriptedUser::new(vec![AskOutcome::Declined {
                message: String::new(),
            }]));
        let handle = opened.agent.handle();
        assert_eq!(handle.permission().as_str(), "danger-full-access");
        handle
            .run_user_command("plan", "add a greeting flag")
            .unwrap();
        opened.agent.run_until_idle().await.unwrap();
        handle.session_id()
    };
    let trail = mode_trail(&events_of(setup.home.path(), &id));
    assert_eq!(trail, ["preset=read-only", "plan=true"], "{trail:?}");

    // A second process with the default preset (workspace-write) resumes it: plan mode and
    // read-only again; the approval returns to workspace-write, not danger-full-access.
    let runtime = with_permission(None);
    let store = runtime.store();
    let spec = SessionSpec {
        resume: Resume::Id(id.clone()),
        ..SessionSpec::default()
    };
    let mut opened = runtime.open(&spec, store.as_ref()).unwrap();
    opened
        .agent
        .set_asker(ScriptedUser::new(vec![review("Approve", "")]));
    let handle = opened.agent.handle();
    assert!(handle.plan_mode());
    assert_eq!(handle.permission().as_str(), "read-only");
    handle.followup("present it again").unwrap();
    let outcomes = opened.agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes.last().unwrap().final_text, "done");
    assert!(!handle.plan_mode());
    assert_eq!(handle.permission().as_str(), "workspace-write");
    let events = events_of(setup.home.path(), &id);
    let trail = mode_trail(&events);
    assert_eq!(
        &trail[trail.len() - 2..],
        ["preset=workspace-write", "plan=false"],
        "{trail:?}"
    );
    // The approved step ran under workspace-write (in the sandbox, inside the workspace).
    let results = results(&events);
    assert_eq!(results.last().unwrap().1, "ok", "{results:?}");
    assert!(setup.cwd.path().join("after-approval.txt").exists());
}

#[tokio::test]
async fn cancelling_the_turn_during_the_review_keeps_plan_mode() {
    let provider = FakeProvider::start([present("c1", PLAN)]).await.unwrap();
    let setup = Setup::new(&provider);
    // Nobody answers: the review waits until the turn is cancelled.
    let user = ScriptedUser::new(Vec::new());
    let runtime = setup.runtime();
    let store = runtime.store();
    let mut opened = runtime
        .open(&SessionSpec::default(), store.as_ref())
        .unwrap();
    opened.agent.set_asker(user.clone());
    let handle = opened.agent.handle();
    handle.run_user_command("plan", "plan it").unwrap();
    let canceller = tokio::spawn({
        let handle = handle.clone();
        let user = Arc::clone(&user);
        async move {
            while user.shown.lock().unwrap().is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(handle.cancel(false));
        }
    });
    let outcomes = opened.agent.run_until_idle().await.unwrap();
    canceller.await.unwrap();
    assert_eq!(outcomes.last().unwrap().reason.kind(), "aborted");
    let events = events_of(setup.home.path(), &handle.session_id());
    assert!(dsh_agent::fold_plan_mode(&events));
    assert_eq!(handle.permission().as_str(), "read-only");
}

/// dsh's own recording of a plan review (`apps/web/tests/snapshots/plan-review/session.jsonl`,
/// vendored; its UI snapshots are in `fixtures/dsh/more/web/plan-review/`): our fold reads its
/// `plan/mode` events, finds its plan, and our approval text is dsh's word for word.
#[test]
fn dshs_recorded_plan_review_reads_as_ours() {
    let root = dsh_test_support::snapshot_fixtures_dir()
        .parent()
        .unwrap()
        .to_path_buf();
    let path = root.join("apps/web/tests/snapshots/plan-review/session.jsonl");
    let events = dsh_session::load_file(&path).unwrap().events;
    let modes: Vec<bool> = events
        .iter()
        .filter_map(|e| dsh_agent::plan_mode_of(&e.event))
        .collect();
    assert_eq!(modes, [true, false]);
    assert!(!dsh_agent::fold_plan_mode(&events));
    let on = events
        .iter()
        .position(|e| dsh_agent::plan_mode_of(&e.event) == Some(true))
        .unwrap();
    assert!(dsh_agent::fold_plan_mode(&events[..=on]));
    let plan = dsh_agent::last_presented_plan(&events).unwrap();
    assert_eq!(
        dsh_agent::plan_title(&plan),
        Some("Add `--greeting` flag to CLI")
    );
    let approved = results(&events)
        .into_iter()
        .find(|r| r.0 == "exit_plan_mode")
        .unwrap();
    assert!(
        approved.2.contains(
            "Plan approved — plan mode exited; carry out the plan starting with your next step."
        ),
        "{approved:?}"
    );
    // Our approval says the same.
    assert!(include_str!("../../dsh-agent/src/plan.rs").contains(
        "\"Plan approved — plan mode exited; carry out the plan starting with your next step.\""
    ));
}
