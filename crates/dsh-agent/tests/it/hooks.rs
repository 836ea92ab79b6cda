//! Claude Code command hooks with real bash scripts: every decision kind, a hook that hangs
//! (killed with its process group at the timeout), one that prints invalid JSON (reported, the
//! session continues), and configuration errors that name file, key and fix.

#![allow(clippy::unwrap_used)]

use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::process::{alive, alive_with, poll_until, spawn_helper_test, wait_for_pid};
use dsh_test_support::tool_result_text;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ApprovalDecision, ApprovalRequest, Approver, ClaudeCodeHooks,
    ExtensionSet, HooksConfig, ReplayAdapter, HOOKS_PLUGIN,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk, MessageSource};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind, TurnEndReason};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use futures::future::BoxFuture;
use serde_json::{json, Value};

const ECHO_HELLO: &str = r#"{"command":"echo HELLO","description":"say hello"}"#;

struct Run {
    events: Vec<Envelope>,
    reason: TurnEndReason,
    final_text: String,
    _home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Run {
    fn opaque(&self, kind: &str) -> Vec<Value> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Opaque { event_type, data } if event_type == kind => Some(data.clone()),
                _ => None,
            })
            .collect()
    }

    fn tool_results(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ToolResult(r) => Some(tool_result_text(&r.message)),
                _ => None,
            })
            .collect()
    }

    fn hook_messages(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Event::UserMessage(m) => match &m.source {
                    MessageSource::Plugin { plugin, .. } if plugin == HOOKS_PLUGIN => {
                        Some(m.text())
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }
}

struct AllowAll;

impl Approver for AllowAll {
    fn decide(&self, _request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::AllowOnce })
    }
}

/// Runs one prompt with `hooks` (the event map), scripts written into the cwd, and `replies`.
async fn run(hooks: Value, scripts: &[(&str, &str)], replies: Vec<Vec<Chunk>>, allow: bool) -> Run {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (name, body) in scripts {
        std::fs::write(cwd.path().join(name), body).unwrap();
    }
    let config = HooksConfig::parse("test", "hooks", &hooks).unwrap();
    let extensions = ExtensionSet::new();
    let _hooks = extensions.register(Arc::new(ClaudeCodeHooks::new(config)));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(replies)))
        .unwrap();
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap()
        .with_permission(PermissionPreset::DangerFullAccess),
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    if allow {
        agent.set_approver(Arc::new(AllowAll));
    }
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    let location = handle.location();
    drop(agent);
    Run {
        events: load_file(Path::new(&location)).unwrap().events,
        reason: outcome.reason,
        final_text: outcome.final_text,
        _home: home,
        cwd,
    }
}

fn on(event: &str, matcher: Option<&str>, command: &str) -> Value {
    let mut group = json!({"hooks": [{"type": "command", "command": command}]});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({ event: [group] })
}

#[tokio::test]
async fn pre_tool_use_exit_2_denies_with_stderr_and_payload_reaches_stdin() {
    let hooks = on(
        "PreToolUse",
        Some("Bash"),
        "cat > payload.json; echo 'no shell today' >&2; exit 2",
    );
    let run = run(
        hooks,
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert_eq!(run.tool_results(), vec!["Error: no shell today"]);
    assert_eq!(run.reason, TurnEndReason::Completed);
    let payload: Value = serde_json::from_str(
        &std::fs::read_to_string(run.cwd.path().join("payload.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(payload["hook_event_name"], "PreToolUse");
    assert_eq!(payload["tool_name"], "bash");
    assert_eq!(payload["tool_input"]["command"], "echo HELLO");
    assert_eq!(payload["tool_use_id"], "c1");
    assert!(payload["session_id"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    let result = &run.opaque("hook/result")[0];
    assert_eq!(result["decision"], "block");
    assert_eq!(result["exitCode"], 2);
    assert_eq!(result["stderrSummary"], "no shell today");
    assert_eq!(
        run.opaque("hook/invoked")[0]["handlerId"],
        "claude-code:PreToolUse:1"
    );
}

#[tokio::test]
async fn pre_tool_use_json_deny_allow_and_ask() {
    let deny = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not here"}}'"#;
    let run1 = run(
        on("PreToolUse", Some("bash"), deny),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert_eq!(run1.tool_results(), vec!["Error: not here"]);

    let allow = r#"echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'"#;
    let run2 = run(
        on("PreToolUse", Some("*"), allow),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(
        run2.tool_results()[0].contains("HELLO"),
        "{:?}",
        run2.tool_results()
    );
    assert_eq!(run2.opaque("hook/result")[0]["decision"], "allow");

    let ask = r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"manual approval"}}'"#;
    // Headless: the question is rejected.
    let run3 = run(
        on("PreToolUse", Some("bash"), ask),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(run3.tool_results()[0].starts_with("Error: "));
    assert_eq!(
        run3.opaque("approval/asked")[0]["reason"],
        "manual approval"
    );
    assert_eq!(run3.opaque("approval/decided")[0]["outcome"], "rejected");
    // With an approver that allows: the call runs.
    let run4 = run(
        on("PreToolUse", Some("bash"), ask),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        true,
    )
    .await;
    assert!(run4.tool_results()[0].contains("HELLO"));
}

#[tokio::test]
async fn matcher_filters_tools() {
    let run = run(
        on("PreToolUse", Some("Edit|Write"), "exit 2"),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(run.tool_results()[0].contains("HELLO"));
    assert!(run.opaque("hook/invoked").is_empty());
}

#[tokio::test]
async fn post_tool_use_block_context_and_decision_block() {
    let script = "#!/bin/sh\nif test -e .seen; then exit 0; fi\n: > .seen\necho 'rejected once' >&2\nexit 2\n";
    let run1 = run(
        on("PostToolUse", Some("bash"), "sh once.sh"),
        &[("once.sh", script)],
        vec![
            tool_call("c1", "bash", ECHO_HELLO),
            tool_call("c2", "bash", ECHO_HELLO),
            text("done"),
        ],
        false,
    )
    .await;
    let results = run1.tool_results();
    assert_eq!(results[0], "Error: rejected once");
    assert!(results[1].contains("HELLO"));
    assert_eq!(run1.final_text, "done");

    let context = r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"verified"}}'"#;
    let run2 = run(
        on("PostToolUse", Some("bash"), context),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("done")],
        false,
    )
    .await;
    assert_eq!(run2.hook_messages(), vec!["verified"]);

    let block = r#"echo '{"decision":"block","reason":"output looks wrong"}'"#;
    let run3 = run(
        on("PostToolUse", None, block),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("done")],
        false,
    )
    .await;
    assert_eq!(run3.tool_results(), vec!["Error: output looks wrong"]);
}

#[tokio::test]
async fn user_prompt_submit_context_block_and_plain_stdout() {
    let context = r#"echo '{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"favorite color: teal"}}'"#;
    let run1 = run(
        on("UserPromptSubmit", None, context),
        &[],
        vec![text("teal")],
        false,
    )
    .await;
    assert_eq!(run1.hook_messages(), vec!["favorite color: teal"]);
    assert_eq!(run1.reason, TurnEndReason::Completed);

    let run2 = run(
        on(
            "UserPromptSubmit",
            None,
            "cat > prompt.json; echo 'blocked by policy' >&2; exit 2",
        ),
        &[],
        vec![text("never")],
        false,
    )
    .await;
    assert_eq!(
        run2.reason,
        TurnEndReason::Blocked {
            message: Some("blocked by policy".into())
        }
    );
    let payload: Value = serde_json::from_str(
        &std::fs::read_to_string(run2.cwd.path().join("prompt.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(payload["prompt"], "go");

    let run3 = run(
        on("UserPromptSubmit", None, "echo 'plain context'"),
        &[],
        vec![text("ok")],
        false,
    )
    .await;
    assert_eq!(run3.hook_messages(), vec!["plain context"]);
}

#[tokio::test]
async fn session_start_adds_context_once() {
    let run = run(
        on(
            "SessionStart",
            Some("startup"),
            "cat > start.json; echo 'repo uses tabs'",
        ),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert_eq!(run.hook_messages(), vec!["repo uses tabs"]);
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(run.cwd.path().join("start.json")).unwrap())
            .unwrap();
    assert_eq!(payload["source"], "startup");
}

#[tokio::test]
async fn stop_hook_continues_the_turn_once() {
    let command =
        "if [ -f .fired ]; then exit 0; else touch .fired; echo 'Also say SECOND.' >&2; exit 2; fi";
    let run = run(
        on("Stop", None, command),
        &[],
        vec![text("FIRST"), text("SECOND")],
        false,
    )
    .await;
    assert_eq!(run.final_text, "SECOND");
    assert_eq!(run.hook_messages(), vec!["Also say SECOND."]);
    let decisions: Vec<Value> = run
        .opaque("hook/result")
        .iter()
        .map(|r| r["decision"].clone())
        .collect();
    assert_eq!(decisions, vec![json!("block"), json!("pass")]);
}

#[tokio::test]
async fn continue_false_stops_the_turn_at_the_next_step() {
    let stop = r#"echo '{"continue":false,"stopReason":"enough for today"}'"#;
    let run = run(
        on("PostToolUse", None, stop),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("never")],
        false,
    )
    .await;
    assert_eq!(
        run.reason,
        TurnEndReason::Blocked {
            message: Some("enough for today".into())
        }
    );
}

#[tokio::test]
async fn a_hanging_hook_is_killed_at_its_timeout_with_its_process_group() {
    let hooks = json!({"PreToolUse": [{"hooks": [{"type": "command", "command": "sleep 30 & echo $! > child.pid; sleep 30", "timeout": 1}]}]});
    let started = std::time::Instant::now();
    let run = run(
        hooks,
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // A timeout is a non-blocking error: the call runs.
    assert!(run.tool_results()[0].contains("HELLO"));
    let result = &run.opaque("hook/result")[0];
    assert_eq!(result["decision"], "error");
    assert!(
        result["error"].as_str().unwrap().contains("killed"),
        "{result}"
    );
    let pid: i32 = std::fs::read_to_string(run.cwd.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background child of the hook is gone too (killed with the group, then reaped by
    // init); give the kernel a moment.
    assert!(
        poll_until(Duration::from_secs(1), || !alive(pid)),
        "the hook's child {pid} survived the timeout"
    );
}

#[tokio::test]
async fn invalid_json_is_reported_and_the_session_continues() {
    let run = run(
        on("PreToolUse", None, "echo '{\"decision\": '"),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("still here")],
        false,
    )
    .await;
    assert!(run.tool_results()[0].contains("HELLO"));
    assert_eq!(run.final_text, "still here");
    let result = &run.opaque("hook/result")[0];
    assert_eq!(result["decision"], "error");
    assert!(
        result["error"].as_str().unwrap().contains("invalid JSON"),
        "{result}"
    );
}

#[tokio::test]
async fn other_exit_codes_are_non_blocking_errors() {
    let run = run(
        on("PreToolUse", None, "echo 'oops' >&2; exit 1"),
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(run.tool_results()[0].contains("HELLO"));
    let result = &run.opaque("hook/result")[0];
    assert_eq!(result["decision"], "error");
    assert_eq!(result["exitCode"], 1);
}

#[test]
fn invalid_matchers_and_shapes_fail_with_file_key_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hooks.json");
    std::fs::write(
        &path,
        r#"{"hooks": {"PreToolUse": [{"matcher": "[", "hooks": [{"type": "command", "command": "true"}]}],
                      "Bogus": [], "Notification": [],
                      "Stop": [{"hooks": [{"type": "prompt"}]}],
                      "PostToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}"#,
    )
    .unwrap();
    let errors = HooksConfig::load_file(&path).unwrap_err();
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let all = text.join("\n");
    assert_eq!(errors.len(), 4, "{all}");
    assert!(
        all.contains(&format!(
            "{}: `hooks.PreToolUse[0].matcher`: `[` is not a valid regular expression",
            path.display()
        )),
        "{all}"
    );
    assert!(all.contains("fix: "), "{all}");
    assert!(all.contains("`hooks.Bogus`: unknown hook event"), "{all}");
    assert!(all.contains("`hooks.Stop[0].hooks[0].type`"), "{all}");
    assert!(
        all.contains("`hooks.PostToolUse[0].hooks[0].timeout`"),
        "{all}"
    );

    // A matcher on an event that has none is ignored, as in Claude Code.
    let ok = HooksConfig::parse(
        "x",
        "hooks",
        &json!({"UserPromptSubmit": [{"matcher": "[", "hooks": [{"type": "command", "command": "true"}]}], "Notification": []}),
    )
    .unwrap();
    assert_eq!(ok.warnings.len(), 1);
    assert!(HooksConfig::load_file(&dir.path().join("missing.json"))
        .unwrap()
        .is_empty());
}

/// Env var naming the scratch dir of [`helper_runs_a_hanging_hook`]; unset, it does nothing.
const HOOK_HELPER_ENV: &str = "DSH_HOOK_DEATH_HELPER_DIR";

/// A hook still running when dsh is killed with SIGKILL dies with it, and so does what the
/// hook started in its group (`sleep &`): the keeper of `dsh_tools::guard_group_std`
/// (docs/hooks.md, "How a hook runs"). The helper playing dsh is this test binary.
#[test]
fn a_running_hook_and_its_children_die_with_dsh() {
    let dir = tempfile::tempdir().unwrap();
    let mut helper = spawn_helper_test(
        "hooks::helper_runs_a_hanging_hook",
        HOOK_HELPER_ENV,
        dir.path(),
    )
    .unwrap();
    let hook = wait_for_pid(&dir.path().join("hook.pid"));
    let child = wait_for_pid(&dir.path().join("child.pid"));
    assert!(alive_with(child, "300"), "the hook's child is not running");
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(
        poll_until(Duration::from_secs(5), || !alive(hook)
            && !alive_with(child, "300")),
        "hook {hook} or its child {child} outlived dsh"
    );
}

/// The dsh stand-in of [`a_running_hook_and_its_children_die_with_dsh`]: a session whose
/// `PreToolUse` hook starts a background `sleep` and then sleeps itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of a_running_hook_and_its_children_die_with_dsh"]
async fn helper_runs_a_hanging_hook() {
    let Some(dir) = std::env::var_os(HOOK_HELPER_ENV) else {
        return;
    };
    let dir = Path::new(&dir).display().to_string();
    let command = format!(
        "echo $$ > '{dir}/hook.tmp'; sleep 300 & echo $! > '{dir}/child.tmp'; mv '{dir}/child.tmp' '{dir}/child.pid'; mv '{dir}/hook.tmp' '{dir}/hook.pid'; sleep 299; true"
    );
    let hooks = json!({"PreToolUse": [{"hooks": [{"type": "command", "command": command, "timeout": 600}]}]});
    run(
        hooks,
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
}

/// A hook that exits leaves nothing running in its process group: a background child that
/// does not hold the output pipes is ended with the hook.
#[tokio::test]
async fn what_a_finished_hook_left_in_its_group_is_ended() {
    let hooks = json!({"PreToolUse": [{"hooks": [{"type": "command", "command": "sleep 300 >/dev/null 2>&1 & echo $! > child.pid; exit 0"}]}]});
    let run = run(
        hooks,
        &[],
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
        false,
    )
    .await;
    assert!(run.tool_results()[0].contains("HELLO"));
    let child = wait_for_pid(&run.cwd.path().join("child.pid"));
    assert!(
        poll_until(Duration::from_secs(5), || !alive_with(child, "300")),
        "the hook's background child {child} outlived the hook"
    );
}
