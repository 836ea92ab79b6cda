//! The `ask` preset end to end (docs/SECURITY.md, "Presets and switching"): the real
//! composition (sandbox, built-in tools, safety policy, subagents), the fake provider over
//! loopback, real session files and a scripted user answering approvals through the `Approver`
//! seam every front end implements. Every call that may change something is asked first;
//! reading is not; approved commands stay confined to the workspace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::{ApprovalDecision, ApprovalRequest, Approver};
use dsh_runtime::{Choices, Runtime, RuntimeOptions, SessionSpec, WarningSink};
use dsh_session::{Envelope, Event};
use dsh_test_support::{chunks, sse_reply_from_chunks, FakeProvider, ScriptedReply};
use serde_json::json;

fn text_reply(text: &str) -> ScriptedReply {
    sse_reply_from_chunks(&chunks::text(text)).into()
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ScriptedReply {
    sse_reply_from_chunks(&chunks::tool_call(id, name, &args.to_string())).into()
}

fn bash(id: &str, command: &str) -> ScriptedReply {
    call(
        id,
        "bash",
        json!({"command": command, "description": "test command"}),
    )
}

fn write(id: &str, file: &str) -> ScriptedReply {
    call(id, "write", json!({"file_path": file, "content": "new\n"}))
}

/// A user who answers approvals from a script, in order, and keeps every question. A question
/// beyond the script is rejected (and kept, so the test sees it).
struct ScriptedUser {
    answers: Mutex<VecDeque<ApprovalDecision>>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl ScriptedUser {
    fn new(answers: Vec<ApprovalDecision>) -> Arc<Self> {
        Arc::new(ScriptedUser {
            answers: Mutex::new(answers.into()),
            asked: Mutex::default(),
        })
    }

    /// `(call id, tool)` of every question, in order.
    fn asked(&self) -> Vec<(String, String)> {
        let asked = self.asked.lock().unwrap();
        asked
            .iter()
            .map(|r| (r.call_id.clone(), r.tool_name.clone()))
            .collect()
    }
}

impl Approver for ScriptedUser {
    fn decide(
        &self,
        request: ApprovalRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ApprovalDecision> + Send>> {
        self.asked.lock().unwrap().push(request);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(ApprovalDecision::Reject {
                message: "not in the script".into(),
            });
        Box::pin(async move { answer })
    }
}

fn reject() -> ApprovalDecision {
    ApprovalDecision::Reject {
        message: "the user said no".into(),
    }
}

/// Home, workspace and a folder outside every writable root (not under a temp dir), all
/// under one scratch folder removed at the end.
struct Setup {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    outside: PathBuf,
}

impl Setup {
    /// The folders; [`Setup::connect`] points the home at the provider.
    fn new() -> Setup {
        let parent =
            dsh_test_support::scratch_parent(Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap();
        let root = tempfile::tempdir_in(parent).unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let [home, cwd, outside] = ["home", "ws", "outside"].map(|name| real.join(name));
        for dir in [&home, &cwd, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(cwd.join("main.py"), "print('hi')\n").unwrap();
        Setup {
            _root: root,
            home,
            cwd,
            outside,
        }
    }

    fn connect(self, provider: &FakeProvider) -> Setup {
        let env = format!(
            "DEEPSEEK_BASE_URL={}\nDEEPSEEK_API_KEY=sk-ask-test\n",
            provider.base_url()
        );
        std::fs::write(self.home.join(".env"), env).unwrap();
        self
    }

    fn runtime(&self) -> Runtime {
        let warnings: WarningSink = Arc::new(|_line: &str| {});
        Runtime::new(RuntimeOptions {
            home: self.home.clone(),
            cwd: self.cwd.clone(),
            choices: Choices {
                permission: Some("ask".into()),
                ..Choices::default()
            },
            warnings,
        })
        .unwrap()
    }

    /// Runs one task in a new `ask` session, answered by `user` (headless when `None`), and
    /// returns the session's events.
    async fn run(&self, user: Option<Arc<ScriptedUser>>) -> Vec<Envelope> {
        let runtime = self.runtime();
        let store = runtime.store();
        let mut opened = runtime
            .open(&SessionSpec::default(), store.as_ref())
            .unwrap();
        if let Some(user) = user {
            opened.agent.set_approver(user);
        }
        let handle = opened.agent.handle();
        assert_eq!(handle.permission().as_str(), "ask");
        handle.followup("do the task").unwrap();
        opened.agent.run_until_idle().await.unwrap();
        let id = handle.session_id();
        drop(opened);
        let store = dsh_session::JsonlStore::new(&self.home);
        dsh_session::SessionStore::load(&store, &id).unwrap().events
    }
}

/// `call id -> (error code or "ok", text)` of each tool result.
fn results(events: &[Envelope]) -> std::collections::HashMap<String, (String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => {
                let code = r
                    .error
                    .as_ref()
                    .map(|e| e.code.clone())
                    .unwrap_or_else(|| "ok".into());
                let text = serde_json::to_string(&r.message.content).unwrap();
                Some((r.call_id().unwrap_or_default().to_string(), (code, text)))
            }
            _ => None,
        })
        .collect()
}

fn asked_ids(user: &ScriptedUser) -> Vec<String> {
    user.asked().into_iter().map(|(id, _)| id).collect()
}

#[tokio::test]
async fn writes_and_commands_are_asked_and_reads_are_not() {
    let provider = FakeProvider::start([
        call("read", "read", json!({"file_path": "main.py"})),
        call("glob", "glob", json!({"pattern": "*.py"})),
        call(
            "todo",
            "todo_write",
            json!({"todos": [{"content": "look", "status": "in_progress", "activeForm": "Looking"}]}),
        ),
        write("w-rejected", "rejected.txt"),
        write("w-allowed", "allowed.txt"),
        call(
            "edit",
            "edit",
            json!({"file_path": "main.py", "old_string": "hi", "new_string": "hello"}),
        ),
        bash("b-rejected", "touch by-bash-rejected.txt"),
        bash("b-allowed", "touch by-bash.txt"),
        call(
            "b-background",
            "bash",
            json!({"command": "touch by-background.txt", "description": "background",
                   "run_in_background": true}),
        ),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new().connect(&provider);
    let user = ScriptedUser::new(vec![
        reject(),                    // w-rejected
        ApprovalDecision::AllowOnce, // w-allowed
        reject(),                    // edit
        reject(),                    // b-rejected
        ApprovalDecision::AllowOnce, // b-allowed
        reject(),                    // b-background
    ]);
    let events = setup.run(Some(Arc::clone(&user))).await;
    let results = results(&events);

    // Reading, listing and the todo list ran without a question.
    assert_eq!(
        asked_ids(&user),
        [
            "w-rejected",
            "w-allowed",
            "edit",
            "b-rejected",
            "b-allowed",
            "b-background"
        ]
    );
    for id in ["read", "glob", "todo"] {
        assert_eq!(results[id].0, "ok", "{id}: {:?}", results[id]);
    }
    assert!(results["read"].1.contains("print('hi')"));
    // The question says why.
    let first = user.asked.lock().unwrap()[0].clone();
    assert!(
        first.reason.contains("preset is ask") && first.reason.contains("rejected.txt"),
        "{}",
        first.reason
    );

    // Rejected: refused, nothing changed.
    for id in ["w-rejected", "edit", "b-rejected", "b-background"] {
        assert_eq!(
            results[id].0, "PERMISSION_DENIED",
            "{id}: {:?}",
            results[id]
        );
    }
    assert!(!setup.cwd.join("rejected.txt").exists());
    assert_eq!(
        std::fs::read_to_string(setup.cwd.join("main.py")).unwrap(),
        "print('hi')\n"
    );
    assert!(!setup.cwd.join("by-bash-rejected.txt").exists());
    // Allowed: done.
    assert_eq!(results["w-allowed"].0, "ok", "{:?}", results["w-allowed"]);
    assert_eq!(
        std::fs::read_to_string(setup.cwd.join("allowed.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(results["b-allowed"].0, "ok", "{:?}", results["b-allowed"]);
    assert!(setup.cwd.join("by-bash.txt").exists());
    // A background job never started: give a started one time to make its file.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!setup.cwd.join("by-background.txt").exists());

    // The session logged the preset, and the model read what it means.
    let preset = events.iter().find_map(|e| match &e.event {
        Event::Opaque { event_type, data } if event_type == "permission/preset" => {
            data["preset"].as_str().map(str::to_string)
        }
        _ => None,
    });
    assert_eq!(preset.as_deref(), Some("ask"));
    let request = provider.requests()[0].body.to_string();
    assert!(
        request.contains("waits for the user's approval"),
        "{request}"
    );
}

#[tokio::test]
async fn allow_for_the_session_covers_the_same_call_again_and_nothing_else() {
    let provider = FakeProvider::start([
        write("w1", "notes.txt"),
        write("w2", "notes.txt"),
        write("w3", "other.txt"),
        bash("b1", "touch made.txt"),
        bash("b2", "touch made.txt"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new().connect(&provider);
    let user = ScriptedUser::new(vec![
        ApprovalDecision::AllowSession, // w1
        reject(),                       // w3
        ApprovalDecision::AllowSession, // b1
    ]);
    let events = setup.run(Some(Arc::clone(&user))).await;
    let results = results(&events);
    assert_eq!(asked_ids(&user), ["w1", "w3", "b1"]);
    let offered = &user.asked.lock().unwrap()[0];
    assert!(
        offered.offers(dsh_agent::ApprovalChoice::AllowSession),
        "{offered:?}"
    );
    for id in ["w1", "w2", "b1", "b2"] {
        assert_eq!(results[id].0, "ok", "{id}: {:?}", results[id]);
    }
    assert_eq!(results["w3"].0, "PERMISSION_DENIED");
    assert!(!setup.cwd.join("other.txt").exists());
    // The repeated calls were answered by the session's rules, and the log says so.
    let by_rule = events
        .iter()
        .filter(|e| {
            matches!(&e.event, Event::Opaque { event_type, data }
                if event_type == "approval/decided" && data["scope"] == "rule")
        })
        .count();
    assert_eq!(by_rule, 2);
}

#[tokio::test]
async fn headless_ask_refuses_every_change_and_still_reads() {
    let provider = FakeProvider::start([
        call("read", "read", json!({"file_path": "main.py"})),
        write("w", "headless.txt"),
        bash("b", "touch headless-bash.txt"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new().connect(&provider);
    let events = setup.run(None).await;
    let results = results(&events);
    assert_eq!(results["read"].0, "ok");
    for id in ["w", "b"] {
        assert_eq!(results[id].0, "PERMISSION_DENIED", "{:?}", results[id]);
        assert!(
            results[id].1.contains("nobody can approve"),
            "{:?}",
            results[id]
        );
    }
    assert!(!setup.cwd.join("headless.txt").exists());
    assert!(!setup.cwd.join("headless-bash.txt").exists());
}

#[tokio::test]
async fn an_approved_command_stays_confined_to_the_workspace() {
    let setup = Setup::new();
    let outside = setup.outside.display().to_string();
    let provider = FakeProvider::start([
        bash("inside", "touch inside.txt"),
        // The model asks for nothing wider: the approval does not lift the sandbox.
        bash("outside", &format!("touch {outside}/escaped.txt")),
        write("w-outside", &format!("{outside}/escaped-by-write.txt")),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = setup.connect(&provider);
    let user = ScriptedUser::new(vec![ApprovalDecision::AllowOnce; 3]);
    let events = setup.run(Some(Arc::clone(&user))).await;
    let results = results(&events);
    assert_eq!(asked_ids(&user), ["inside", "outside", "w-outside"]);
    assert_eq!(results["inside"].0, "ok", "{:?}", results["inside"]);
    assert!(setup.cwd.join("inside.txt").exists());
    assert!(!setup.outside.join("escaped.txt").exists());
    assert!(!setup.outside.join("escaped-by-write.txt").exists());
    assert_eq!(
        results["w-outside"].0, "PERMISSION_DENIED",
        "{:?}",
        results["w-outside"]
    );
    let sandbox = events.iter().find_map(|e| match &e.event {
        Event::Opaque { event_type, data } if event_type == "sandbox/mode" => {
            data["mode"].as_str().map(str::to_string)
        }
        _ => None,
    });
    let (code, text) = &results["outside"];
    match sandbox.as_deref() {
        // The kernel refused the write; the note names the session's preset.
        Some("bubblewrap" | "landlock" | "seatbelt") => assert!(
            text.contains("[sandbox:") && text.contains("under the ask preset"),
            "{code} {text}"
        ),
        // No sandbox on this host: the command is refused, never run unconfined.
        Some("unavailable") => assert_eq!(code, "SANDBOX_UNAVAILABLE", "{text}"),
        other => panic!("unexpected sandbox mode {other:?}: {code} {text}"),
    }
}

#[tokio::test]
async fn a_subagent_of_an_ask_session_runs_no_unasked_write_or_command() {
    let provider = FakeProvider::start([
        // The parent delegates; the child (next requests) tries to change the workspace.
        call(
            "spawn",
            "subagent",
            json!({"description": "helper", "prompt": "make the files"}),
        ),
        write("child-w", "by-child.txt"),
        bash("child-b", "touch by-child-bash.txt"),
        text_reply("child done"),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let setup = Setup::new().connect(&provider);
    let user = ScriptedUser::new(Vec::new());
    let events = setup.run(Some(Arc::clone(&user))).await;
    let results = results(&events);
    // Spawning is no change by itself; the child ran under `ask` and nobody approved its
    // calls, so neither ran.
    assert_eq!(results["spawn"].0, "ok", "{:?}", results["spawn"]);
    assert!(
        results["spawn"].1.contains("child done"),
        "{:?}",
        results["spawn"]
    );
    assert!(!setup.cwd.join("by-child.txt").exists());
    assert!(!setup.cwd.join("by-child-bash.txt").exists());
    // The child's requests said it runs under `ask`, and its tool results were refusals.
    let requests = provider.requests();
    let child_last = requests[3].body.to_string();
    assert!(
        child_last.contains("waits for the user's approval"),
        "{child_last}"
    );
    assert!(
        child_last.contains("PERMISSION_DENIED") || child_last.contains("nobody can approve"),
        "{child_last}"
    );
}
