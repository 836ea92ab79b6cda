//! Goals (docs/goals.md) with the real binary and the scripted provider: the model creates a
//! goal, a turn that ends without marking it runs a continuation round, marking it complete
//! ends the run; the round cap and a budget stop the rounds; a resumed session has its goal;
//! ACP and the web UI show it; dsh's goal recordings load and replay.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{dsh_command, output as run, session_file};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

fn tool(id: &str, name: &str, args: &str) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .tool_call(0, id, name, args)
            .finish("tool_calls", Some(WireUsage::default())),
    )
}

fn said(text: &str) -> ScriptedReply {
    ScriptedReply::from(
        SseReply::new()
            .text(text)
            .finish("stop", Some(WireUsage::default())),
    )
}

fn create(max: u64) -> ScriptedReply {
    tool(
        "call_create",
        "create_goal",
        &format!("{{\"objective\":\"Make the tests pass\",\"max_goal_rounds\":{max}}}"),
    )
}

struct Env {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            cwd: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, provider: &FakeProvider, args: &[&str]) -> Command {
        let mut cmd = dsh_command(self.home.path(), self.cwd.path());
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-goals")
            .stdin(Stdio::null())
            .args(["run", "--json", "--permission", "danger-full-access"])
            .args(args);
        cmd
    }

    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(session_file(self.home.path()))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn result_line(stdout: &[u8]) -> Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line in {}", String::from_utf8_lossy(stdout)))
}

fn goal_changes(log: &[Value]) -> Vec<(String, String)> {
    log.iter()
        .filter(|e| e["type"] == "goal/change")
        .map(|e| {
            (
                e["data"]["operation"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["data"]["goal"]["phase"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
            )
        })
        .collect()
}

fn round_messages(log: &[Value]) -> Vec<u64> {
    log.iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["plugin"] == "goal")
        .filter_map(|e| e["data"]["source"]["round"].as_u64())
        .collect()
}

/// Waits for the request whose body holds the goal's id (a tool result), and returns the id.
async fn goal_id_seen(provider: &FakeProvider) -> String {
    for _ in 0..1000 {
        for request in provider.requests() {
            let body = request.body.to_string();
            if let Some(at) = body.find("goal-") {
                let id: String = body[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                return id;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no request carried the goal's id");
}

#[tokio::test]
async fn an_unfinished_goal_runs_a_round_and_marking_it_complete_ends_the_run() {
    // Turn 1 creates the goal and ends; round 1 works (a one-second command, time for the test
    // to read the goal's id) and ends without marking it; round 2 marks it complete and, told
    // to wrap up, writes the closing message.
    let provider = FakeProvider::start([
        create(5),
        said("Goal set."),
        tool(
            "call_sleep",
            "bash",
            r#"{"command":"sleep 1","description":"Work"}"#,
        ),
        said("Some progress."),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let cmd = env.run(&provider, &["Make the tests pass, keep going until done"]);
    let (out, ()) = tokio::join!(run(cmd), async {
        let id = goal_id_seen(&provider).await;
        provider.push_reply(tool(
            "call_done",
            "update_goal",
            &format!(r#"{{"goal_id":"{id}","revision":1,"action":"complete"}}"#),
        ));
        provider.push_reply(said("All tests pass; the goal is complete."));
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let result = result_line(&out.stdout);
    assert_eq!(result["stop"], "completed", "{result}");
    // `--json` prints the goal's view events.
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains(r#""kind":"goal""#), "{printed}");
    assert_eq!(
        result["output"].as_str(),
        Some("All tests pass; the goal is complete."),
        "{result}"
    );
    let log = env.log();
    assert_eq!(round_messages(&log), vec![1, 2]);
    assert_eq!(
        goal_changes(&log),
        vec![
            ("create".to_string(), "active".to_string()),
            ("complete".to_string(), "complete".to_string())
        ]
    );
    assert_eq!(provider.requests().len(), 6);
    // The round told the model the objective and its number; the wrap-up came after the
    // completing call.
    let requests = provider.requests();
    let round = requests[2].body["messages"].to_string();
    assert!(
        round.contains("Round: 1/5") && round.contains("Make the tests pass"),
        "{round}"
    );
    let last = requests[5].body["messages"].to_string();
    assert!(last.contains("goal_complete"), "{last}");
}

#[tokio::test]
async fn rounds_stop_at_the_cap_and_a_resumed_session_has_the_goal() {
    let provider = FakeProvider::start([
        create(2),
        said("Goal set."),
        said("Round one, not done."),
        said("Round two, not done."),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let out = run(env.run(&provider, &["Make the tests pass"])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(result_line(&out.stdout)["stop"], "completed");
    assert_eq!(provider.requests().len(), 4, "a third round ran");
    let log = env.log();
    assert_eq!(round_messages(&log), vec![1, 2]);
    let last = log
        .iter()
        .rev()
        .find(|e| e["type"] == "goal/change")
        .unwrap();
    assert_eq!(last["data"]["operation"], "block");
    assert_eq!(last["data"]["goal"]["blockedReason"]["code"], "round-limit");
    assert_eq!(last["data"]["roundsStarted"], 2);

    // Resumed: the goal is there (blocked), and the session does not start rounds by itself.
    let session = log[0]["id"].as_str().unwrap().to_string();
    provider.push_reply(tool("call_get", "get_goal", "{}"));
    provider.push_reply(said("The goal is blocked."));
    let out = run(env.run(&provider, &["--resume", &session, "Where is the goal?"])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 6);
    let seen = requests[5].body["messages"].to_string();
    assert!(
        seen.contains(r#"\"phase\":\"blocked\""#) && seen.contains("round-limit"),
        "{seen}"
    );
}

#[tokio::test]
async fn a_budget_stops_the_rounds() {
    let provider = FakeProvider::start([
        create(5),
        said("Goal set."),
        tool(
            "call_1",
            "bash",
            r#"{"command":"true","description":"Work"}"#,
        ),
        tool(
            "call_2",
            "bash",
            r#"{"command":"true","description":"Work"}"#,
        ),
        tool(
            "call_3",
            "bash",
            r#"{"command":"true","description":"Work"}"#,
        ),
    ])
    .await
    .unwrap();
    let env = Env::new();
    let out = run(env.run(&provider, &["--max-steps", "2", "Make the tests pass"])).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = result_line(&out.stdout);
    assert_eq!(result["budget"], "steps", "{result}");
    // Round 1 ran its two steps, then the budget ended it and no round followed.
    assert_eq!(provider.requests().len(), 4);
    let log = env.log();
    assert_eq!(round_messages(&log), vec![1]);
    // The goal stays active (only disarmed): the user can resume it.
    assert_eq!(
        goal_changes(&log),
        vec![("create".to_string(), "active".to_string())]
    );
}

#[tokio::test]
async fn goals_can_be_turned_off() {
    let provider = FakeProvider::start([said("ok")]).await.unwrap();
    let env = Env::new();
    let out = run(env.run(&provider, &["-c", "goals.enabled=false", "hi"])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools = provider.requests()[0].body["tools"].to_string();
    assert!(!tools.contains("create_goal"), "{tools}");
    let provider = FakeProvider::start([said("ok")]).await.unwrap();
    let out = run(env.run(&provider, &["hi"])).await;
    assert!(out.status.success());
    let tools = provider.requests()[0].body["tools"].to_string();
    assert!(
        tools.contains("create_goal") && tools.contains("update_goal"),
        "{tools}"
    );
}

/// dsh's recordings with `goal/change` (fixtures/dsh/README.md): the headless one is dsh's
/// `stream-json` output, whose session events make its log.
fn dshs_goal_recordings(scratch: &std::path::Path) -> Vec<std::path::PathBuf> {
    let root = dsh_test_support::dsh_fixtures_dir();
    let mut logs: Vec<_> = [
        "examples/acp-agent/tests/goal-snapshots/goal-round-driver/session.expected.jsonl",
        "examples/acp-agent/tests/goal-snapshots/goal-wrapup/session.expected.jsonl",
        "apps/web/tests/snapshots/goal-multi-turn-actions/session.jsonl",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let stream = std::fs::read_to_string(
        root.join("examples/headless-agent/tests/snapshots/goal-tools/stream-json.expected.jsonl"),
    )
    .unwrap();
    let mut log = String::from(
        "{\"type\":\"session\",\"version\":0,\"id\":\"goal-tools\",\"createdAt\":0,\"cwd\":\"/w\"}\n",
    );
    for line in stream.lines() {
        let mut value: Value = serde_json::from_str(line).unwrap();
        if value["type"] == "session_event" {
            let event = value["event"].as_object_mut().unwrap();
            event.remove("seq");
            event.remove("time");
            log.push_str(&serde_json::to_string(event).unwrap());
            log.push('\n');
        }
    }
    let headless = scratch.join("goal-tools.jsonl");
    std::fs::write(&headless, log).unwrap();
    logs.push(headless);
    logs
}

#[tokio::test]
async fn dshs_goal_recordings_load_show_their_goal_and_replay_without_differences() {
    let env = Env::new();
    let scratch = tempfile::tempdir().unwrap();
    for log in dshs_goal_recordings(scratch.path()) {
        let name = log.display().to_string();
        // Loaded, the goal folded as ours.
        let loaded = dsh_session::load_file(&log).unwrap();
        let book = dsh_agent::GoalBook::fold(&loaded.events);
        assert!(
            loaded
                .events
                .iter()
                .any(|e| matches!(e.event, dsh_session::Event::GoalChange(_))),
            "{name}"
        );
        if name.contains("goal-round-driver") {
            let state = book.current.clone().unwrap();
            assert_eq!(state.goal.phase, dsh_session::GoalPhase::Paused, "{name}");
            assert_eq!(state.rounds_started, 2, "{name}");
        }
        // `sessions show` says what each change did.
        let mut show = dsh_command(env.home.path(), env.cwd.path());
        show.args(["sessions", "show"]).arg(&log);
        let out = run(show).await;
        assert!(out.status.success(), "{name}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("_(goal create: "),
            "{name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Every one is a single session: replayed with the recorded replies, our rounds and
        // tools do what dsh's did.
        let mut replay = dsh_command(env.home.path(), env.cwd.path());
        replay.arg("replay").arg(&log);
        let out = run(replay).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("no differences"),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The replayed round driver ends as dsh's did: its cancelled second round paused the goal.
    let replayed = crate::common::session_files(&env.home.path().join("replays"));
    assert_eq!(replayed.len(), 4);
    let paused = replayed.iter().any(|path| {
        let log = dsh_session::load_file(path).unwrap();
        let book = dsh_agent::GoalBook::fold(&log.events);
        book.current.is_some_and(|s| {
            s.goal.phase == dsh_session::GoalPhase::Paused && s.rounds_started == 2
        })
    });
    let states: Vec<String> = replayed
        .iter()
        .map(|path| {
            let log = dsh_session::load_file(path).unwrap();
            let book = dsh_agent::GoalBook::fold(&log.events);
            format!(
                "{}: {:?}",
                path.display(),
                book.current.map(|s| (s.goal.phase, s.rounds_started))
            )
        })
        .collect();
    assert!(
        paused,
        "no replay paused its goal after the cancelled round: {states:#?}"
    );
}

/// ACP: `/goal <objective>` as a prompt sets the goal and runs its round before the prompt is
/// answered; the goal reaches the editor in `session_info_update`'s `_meta.dsh.goal`, and
/// `/goal` answers with the goal as an agent message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_shows_the_goal_and_runs_its_rounds_within_the_prompt() {
    use crate::custom_commands_cli::{prompt, Acp};
    let provider = FakeProvider::start([said("worked on it"), said("t"), said("t")])
        .await
        .unwrap();
    let env = Env::new();
    std::fs::write(
        env.home.path().join("config.toml"),
        "[goals]\nmax_rounds = 1\n",
    )
    .unwrap();
    let (home, cwd, url) = (
        env.home.path().to_path_buf(),
        env.cwd.path().to_path_buf(),
        provider.base_url(),
    );
    let updates = tokio::task::spawn_blocking(move || {
        let mut acp = Acp::start(&home, &cwd, &url);
        let session = acp.call(
            "session/new",
            serde_json::json!({"cwd": cwd, "mcpServers": []}),
        );
        let id = session["sessionId"].as_str().unwrap().to_string();
        let answer = acp.call("session/prompt", prompt(&id, "/goal Ship the parser"));
        assert_eq!(answer["stopReason"], "end_turn", "{answer}");
        acp.call("session/prompt", prompt(&id, "/goal"));
        std::mem::take(&mut acp.updates)
    })
    .await
    .unwrap();
    let goals: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "session_info_update")
        .filter_map(|u| u["_meta"]["dsh"].get("goal"))
        .collect();
    let phases: Vec<&str> = goals.iter().filter_map(|g| g["phase"].as_str()).collect();
    assert_eq!(phases.first(), Some(&"active"), "{goals:?}");
    assert_eq!(phases.last(), Some(&"blocked"), "{goals:?}");
    assert!(goals.iter().all(|g| g["objective"] == "Ship the parser"));
    let said: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(said.contains("worked on it"), "{said}");
    assert!(said.contains("round-limit"), "{said}");
    let log = env.log();
    assert_eq!(round_messages(&log), vec![1]);
}

/// The web UI: `/goal <objective>` through the commands API answers with the goal as a note,
/// and the session's event stream carries the `goal` view events the goal bar draws; the page
/// has the bar.
#[tokio::test]
async fn the_web_ui_gets_the_goal_and_its_bar() {
    use futures::StreamExt;
    let provider = FakeProvider::start([said("worked on it"), said("t"), said("t")])
        .await
        .unwrap();
    let env = Env::new();
    std::fs::write(
        env.home.path().join("config.toml"),
        "[goals]\nmax_rounds = 1\n",
    )
    .unwrap();
    let mut web =
        crate::web_cli::launch(env.home.path(), env.cwd.path(), &provider.base_url()).await;
    let client = reqwest::Client::new();
    let created: Value = client
        .post(format!("{}/api/sessions", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let answer: Value = client
        .post(format!("{}/api/sessions/{id}/commands", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"name": "goal", "arguments": "Ship the parser"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let notes = answer["notes"].to_string();
    assert!(
        notes.contains("Ship the parser") && notes.contains("active"),
        "{answer}"
    );
    let response = client
        .get(format!("{}/api/sessions/{id}/events", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !text.contains("\"phase\":\"blocked\"") {
        assert!(
            std::time::Instant::now() < deadline,
            "no blocked goal: {text}"
        );
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"kind\":\"goal\""), "{text}");
    assert!(text.contains("worked on it"), "{text}");
    let page = client
        .get(format!("{}/", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"goal-bar\""), "{page}");
    web.child.start_kill().unwrap();
    web.child.wait().await.unwrap();
}

/// `dsh run --resume` of dsh's own log acts on its `goal/change` events: the goal dsh paused
/// after its cancelled second round is the session's goal, and resuming it (`update_goal`,
/// the user asked) is refused: its two rounds are used.
#[tokio::test]
async fn resuming_dshs_log_restores_its_goal() {
    let root = dsh_test_support::dsh_fixtures_dir();
    let source = root
        .join("examples/acp-agent/tests/goal-snapshots/goal-round-driver/session.expected.jsonl");
    let env = Env::new();
    let dir = env.home.path().join("sessions/--copied--/s1");
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("session.jsonl");
    std::fs::copy(&source, &target).unwrap();
    let id = dsh_session::load_file(&source)
        .unwrap()
        .events
        .iter()
        .find_map(|e| match &e.event {
            dsh_session::Event::GoalChange(c) => c.goal.as_ref().map(|g| g.id.clone()),
            _ => None,
        })
        .unwrap();
    let provider = FakeProvider::start([
        tool("call_get", "get_goal", "{}"),
        tool(
            "call_resume",
            "update_goal",
            &format!(r#"{{"goal_id":"{id}","revision":2,"action":"resume"}}"#),
        ),
        said("The goal has no round left."),
    ])
    .await
    .unwrap();
    let mut cmd = env.run(&provider, &["--resume"]);
    cmd.arg(&target).arg("Continue the goal");
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let got = requests[1].body["messages"].to_string();
    assert!(
        got.contains(r#"\"phase\":\"paused\""#) && got.contains(r#"\"roundsStarted\":2"#),
        "{got}"
    );
    let refused = requests[2].body["messages"].to_string();
    assert!(refused.contains("used all 2 of its rounds"), "{refused}");
}
