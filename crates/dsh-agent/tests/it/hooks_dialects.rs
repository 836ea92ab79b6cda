//! The Codex hook dialect (configuration forms, matchers, payloads, blocking and its fallback
//! texts) and Claude Code's `SubagentStart`/`SubagentStop` in child sessions, with real bash
//! hooks that save their stdin (docs/hooks.md).

use dsh_test_support::chunks::{text, tool_call};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ChildFactory, CommandHooks, ExtensionSet, HookDialect,
    HookEvent, HooksConfig, ReplayAdapter, Subagents, DEFAULT_CODEX_HOOK_TIMEOUT,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk, ContentBlock, MessageSource};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind, TurnEndReason};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::{json, Value};

const ECHO_HELLO: &str = r#"{"command":"echo HELLO","description":"say hello"}"#;

fn codex(value: Value) -> HooksConfig {
    HooksConfig::parse_codex("codex-hooks.json", &value).unwrap()
}

fn one(event: &str, matcher: Option<&str>, command: &str) -> Value {
    let mut group = json!({"hooks": [{"command": command}]});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({"hooks": { event: [group] }})
}

#[test]
fn codex_config_wrapped_and_bare_forms_aliases_and_skips() {
    let body = json!({
        "PreToolUse": [{"matcher": "as", "hooks": [
            {"type": "command", "command": "a", "timeoutSec": 5},
            {"command": "b", "timeout": 7, "timeoutSec": 9},
            {"command": "c"},
            {"type": "command", "command": "d", "async": true},
            {"type": "prompt", "prompt": "is this fine?"}
        ]}],
        "Notification": [{"hooks": [{"command": "n"}]}],
        "description": "not an event"
    });
    for value in [json!({ "hooks": body.clone() }), body.clone()] {
        let config = codex(value);
        assert_eq!(config.dialect(), HookDialect::Codex);
        let groups: Vec<_> = config.groups(HookEvent::PreToolUse).collect();
        assert_eq!(groups.len(), 1);
        let timeouts: Vec<Duration> = groups[0].commands.iter().map(|c| c.timeout).collect();
        assert_eq!(
            timeouts,
            [
                Duration::from_secs(5),
                Duration::from_secs(7),
                DEFAULT_CODEX_HOOK_TIMEOUT
            ]
        );
        assert_eq!(DEFAULT_CODEX_HOOK_TIMEOUT, Duration::from_secs(600));
        // Unanchored: "as" is found inside "bash"; Codex's "Bash" names dsh's `bash`.
        assert!(groups[0].matches("bash"));
        assert!(!groups[0].matches("read"));
        let warnings = config.warnings.join("\n");
        assert!(warnings.contains("async"), "{warnings}");
        assert!(warnings.contains("\"prompt\""), "{warnings}");
        assert!(warnings.contains("Notification"), "{warnings}");
        assert_eq!(config.warnings.len(), 3, "{warnings}");
    }
    let bash = codex(one("PostToolUse", Some("^Bash$"), "x"));
    assert!(bash
        .groups(HookEvent::PostToolUse)
        .all(|g| g.matches("bash")));
    // Claude Code's subagent events are not Codex events.
    let other = codex(one("SubagentStop", None, "x"));
    assert!(other.is_empty());
    assert!(other.warnings[0].contains("SubagentStop"));
}

#[test]
fn codex_matchers_are_checked_where_they_are_used_and_ignored_elsewhere() {
    // dsh's promptsubmit recording carries the matcher "[": never read for UserPromptSubmit.
    let prompt = codex(one("UserPromptSubmit", Some("["), "x"));
    assert_eq!(prompt.groups(HookEvent::UserPromptSubmit).count(), 1);
    assert!(prompt
        .groups(HookEvent::UserPromptSubmit)
        .all(|g| g.matcher.is_none()));
    let stop = codex(one("Stop", Some("("), "x"));
    assert_eq!(stop.groups(HookEvent::Stop).count(), 1);

    let errors =
        HooksConfig::parse_codex("/p/codex-hooks.json", &one("PreToolUse", Some("["), "x"))
            .unwrap_err();
    let text = errors[0].to_string();
    assert!(
        text.starts_with("/p/codex-hooks.json: `hooks.PreToolUse[0].matcher`: `[` is not a valid regular expression"),
        "{text}"
    );
    assert!(text.contains("fix:"), "{text}");

    let bad_timeout = json!({"Stop": [{"hooks": [{"command": "x", "timeoutSec": -1}]}]});
    let text = HooksConfig::parse_codex("f", &bad_timeout).unwrap_err()[0].to_string();
    assert!(text.contains("`Stop[0].hooks[0].timeoutSec`"), "{text}");
    let text = HooksConfig::parse_codex_text("f", "{oops").unwrap_err()[0].to_string();
    assert!(text.contains("not valid JSON"), "{text}");
    let missing = HooksConfig::load_codex_file(Path::new("/nonexistent/codex-hooks.json")).unwrap();
    assert!(missing.is_empty());
}

struct Run {
    events: Vec<Envelope>,
    reason: TurnEndReason,
    cwd: tempfile::TempDir,
    _home: tempfile::TempDir,
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
                Event::ToolResult(r) => Some(
                    r.message
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::ToolResult { content, .. } => Some(
                                content
                                    .iter()
                                    .filter_map(|c| match c {
                                        ContentBlock::Text { text } => Some(text.clone()),
                                        _ => None,
                                    })
                                    .collect::<String>(),
                            ),
                            _ => None,
                        })
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    fn plugin_messages(&self, plugin: &str) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Event::UserMessage(m) => match &m.source {
                    MessageSource::Plugin { plugin: p, .. } if p == plugin => Some(m.text()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn payload(&self, file: &str) -> Value {
        let text = std::fs::read_to_string(self.cwd.path().join(file)).unwrap();
        assert!(!text.ends_with('\n'), "Codex stdin has no trailing newline");
        serde_json::from_str(&text).unwrap()
    }
}

/// One prompt through a real loop with the Codex `config`, scripted `replies`, headless.
async fn run_codex(config: HooksConfig, replies: Vec<Vec<Chunk>>) -> Run {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let extensions = ExtensionSet::new();
    let _hooks = extensions.register(Arc::new(
        CommandHooks::new(config).with_model("deepseek-v4-flash"),
    ));
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
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    let location = handle.location();
    drop(agent);
    Run {
        events: load_file(Path::new(&location)).unwrap().events,
        reason: outcome.reason,
        cwd,
        _home: home,
    }
}

#[tokio::test]
async fn codex_payloads_handler_ids_and_dialect_in_the_log() {
    let save = |name: &str| json!([{"hooks": [{"command": format!("cat > {name}.json")}]}]);
    let config = codex(json!({"hooks": {
        "SessionStart": save("start"),
        "UserPromptSubmit": save("prompt"),
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "cat > pre.json"}]}],
        "PostToolUse": save("post"),
        "Stop": save("stop"),
    }}));
    let run = run_codex(
        config,
        vec![tool_call("c1", "bash", ECHO_HELLO), text("done")],
    )
    .await;
    assert_eq!(run.reason, TurnEndReason::Completed);
    let start = run.payload("start.json");
    assert_eq!(start["hook_event_name"], "SessionStart");
    assert_eq!(start["source"], "startup");
    assert_eq!(start["model"], "deepseek-v4-flash");
    assert_eq!(start["permission_mode"], "default");
    assert!(start.get("turn_id").is_none(), "{start}");
    assert_eq!(run.payload("prompt.json")["prompt"], "go");
    assert_eq!(run.payload("prompt.json")["turn_id"], "1");
    let pre = run.payload("pre.json");
    assert_eq!(pre["tool_name"], "bash");
    // Codex's shell payload: `{command}` only, not the call's other arguments.
    assert_eq!(pre["tool_input"], json!({"command": "echo HELLO"}));
    assert_eq!(pre["tool_use_id"], "c1");
    assert_eq!(pre["turn_id"], "1");
    // The model of the logged request header (the scripted call's), not the start-up one.
    assert_eq!(pre["model"], "m");
    let post = run.payload("post.json");
    assert_eq!(post["tool_response"], "HELLO\n");
    assert_eq!(post["tool_input"], json!({"command": "echo HELLO"}));
    let stop = run.payload("stop.json");
    assert_eq!(stop["stop_hook_active"], false);
    assert_eq!(stop["last_assistant_message"], "done");
    for payload in [&start, &pre, &post, &stop] {
        assert!(payload["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()));
        assert!(payload["transcript_path"]
            .as_str()
            .is_some_and(|s| s.ends_with(".jsonl")));
    }
    // One counter across all points, as dsh's Codex bridge numbers them.
    let ids: Vec<Value> = run
        .opaque("hook/invoked")
        .iter()
        .map(|i| i["handlerId"].clone())
        .collect();
    assert_eq!(
        ids,
        [
            "codex:SessionStart:1",
            "codex:UserPromptSubmit:2",
            "codex:PreToolUse:3",
            "codex:PostToolUse:4",
            "codex:Stop:5"
        ]
    );
    assert!(run
        .opaque("hook/invoked")
        .iter()
        .all(|i| i["dialect"] == "codex"));
    assert!(run
        .opaque("hook/result")
        .iter()
        .all(|r| r["dialect"] == "codex"));
    assert_eq!(run.opaque("hook/invoked")[2]["matcher"], "Bash");
}

#[tokio::test]
async fn codex_blocks_with_dshs_fallback_texts_and_honours_nothing_else() {
    // exit 2 with an empty stderr: dsh's fallback texts.
    let config = codex(json!({
        "PreToolUse": [{"matcher": "bash", "hooks": [{"command": "exit 2"}]}],
        "PostToolUse": [{"matcher": "glob", "hooks": [{"command": "exit 2"}]}],
        "Stop": [{"hooks": [{"command": "[ -f once ] && exit 0; touch once; exit 2"}]}]
    }));
    let glob = r#"{"pattern":"*"}"#;
    let run = run_codex(
        config,
        vec![
            tool_call("c1", "bash", ECHO_HELLO),
            tool_call("c2", "glob", glob),
            text("first"),
            text("second"),
        ],
    )
    .await;
    let results = run.tool_results();
    assert_eq!(results[0], "Error: blocked by PreToolUse hook");
    assert!(
        results[1].contains("blocked by PostToolUse hook"),
        "{results:?}"
    );
    assert_eq!(
        run.plugin_messages("hooks-codex"),
        ["continue: blocked by Stop hook"]
    );
    let decisions: Vec<Value> = run
        .opaque("hook/result")
        .iter()
        .map(|r| r["decision"].clone())
        .collect();
    assert_eq!(decisions, ["block", "block", "block", "pass"]);

    // `ask` and `allow` are Claude Code answers: a Codex hook's are logged but not acted on
    // (headless, an honoured `ask` would refuse the call); context for another event is
    // dropped; context for this event reaches the model from `hooks-codex`.
    let ask = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask"}}'"#;
    let wrong = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"misplaced"}}'"#;
    let right = r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"audited"}}'"#;
    let config = codex(json!({
        "PreToolUse": [{"hooks": [{"command": ask}]}],
        "PostToolUse": [{"hooks": [{"command": wrong}, {"command": right}]}]
    }));
    let run = run_codex(
        config,
        vec![tool_call("c1", "bash", ECHO_HELLO), text("ok")],
    )
    .await;
    assert_eq!(run.tool_results(), ["HELLO\n"]);
    assert_eq!(run.opaque("hook/result")[0]["decision"], "ask");
    assert_eq!(run.plugin_messages("hooks-codex"), ["audited"]);

    // A blocked prompt never reaches the model.
    let config = codex(one(
        "UserPromptSubmit",
        Some("["),
        "echo 'not this' >&2; exit 2",
    ));
    let run = run_codex(config, vec![text("never")]).await;
    assert_eq!(
        run.reason,
        TurnEndReason::Blocked {
            message: Some("not this".into())
        }
    );
}

fn child_parts(
    depth: u64,
    hooks: HooksConfig,
    adapter: Arc<ReplayAdapter>,
    home: PathBuf,
    cwd: PathBuf,
) -> AgentParts {
    let mut adapters = AdapterRegistry::new();
    adapters.register("m", adapter.clone()).unwrap();
    let extensions = ExtensionSet::new();
    extensions.register_for_life(Arc::new(CommandHooks::new(hooks.clone())));
    let factory: ChildFactory = {
        let (home, cwd) = (home.clone(), cwd.clone());
        Arc::new(move |d| {
            Ok(child_parts(
                d,
                hooks.clone(),
                adapter.clone(),
                home.clone(),
                cwd.clone(),
            ))
        })
    };
    extensions.register_for_life(Arc::new(Subagents::new(depth, factory)));
    AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(&cwd, SpillDir::create(home.join("spill")).unwrap())
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess),
        options: AgentOptions::new(CallConfig::new("m", "m"), &cwd),
    }
}

#[tokio::test]
async fn subagent_start_and_stop_run_claude_code_hooks_in_the_child() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let hooks = HooksConfig::parse(
        "test",
        "hooks",
        &json!({
            "SessionStart": [{"hooks": [{"type": "command", "command": "cat >> session-start.jsonl; echo >> session-start.jsonl"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "cat >> stop.jsonl; echo >> stop.jsonl"}]}],
            "SubagentStart": [{"matcher": "general-purpose", "hooks": [{"type": "command",
                "command": "cat > subagent-start.json; echo 'child context from the hook'"}]}],
            "SubagentStop": [{"matcher": "general-.*", "hooks": [{"type": "command",
                "command": "cat >> subagent-stop.jsonl; echo >> subagent-stop.jsonl; [ -f again ] && exit 0; touch again; echo 'check once more' >&2; exit 2"}]}]
        }),
    )
    .unwrap();
    // Replies in order: the parent delegates; the child answers twice (the SubagentStop hook
    // keeps it going once); the parent ends.
    let adapter = Arc::new(ReplayAdapter::new(vec![
        tool_call(
            "c1",
            "subagent",
            r#"{"description":"look","prompt":"find it"}"#,
        ),
        text("child first"),
        text("child second"),
        text("parent done"),
    ]));
    let parts = child_parts(
        0,
        hooks,
        adapter,
        home.path().to_path_buf(),
        cwd.path().to_path_buf(),
    );
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("delegate").unwrap();
    let outcome = agent.run_turn().await.unwrap().unwrap();
    assert_eq!(outcome.final_text, "parent done");
    let parent_id = handle.session_id();

    let read = |name: &str| std::fs::read_to_string(cwd.path().join(name)).unwrap();
    let lines = |name: &str| -> Vec<Value> {
        read(name)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // SessionStart and Stop ran for the parent only.
    let starts = lines("session-start.jsonl");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["session_id"], parent_id.as_str());
    let stops = lines("stop.jsonl");
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0]["last_assistant_message"], "parent done");

    let start: Value = serde_json::from_str(&read("subagent-start.json")).unwrap();
    assert_eq!(start["hook_event_name"], "SubagentStart");
    assert_eq!(start["agent_type"], "general-purpose");
    let child_id = start["agent_id"].as_str().unwrap().to_string();
    assert!(!child_id.is_empty() && child_id != parent_id);
    // As in Claude Code, a subagent's hooks name the main session; the child is `agent_id`.
    assert_eq!(start["session_id"], parent_id.as_str());
    assert_eq!(start["transcript_path"], handle.location().as_str());
    let child_stops = lines("subagent-stop.jsonl");
    assert_eq!(child_stops.len(), 2);
    assert_eq!(child_stops[0]["hook_event_name"], "SubagentStop");
    assert_eq!(child_stops[0]["agent_id"], child_id.as_str());
    assert_eq!(child_stops[0]["session_id"], parent_id.as_str());
    assert_eq!(
        child_stops[0]["transcript_path"],
        handle.location().as_str()
    );
    assert_eq!(child_stops[0]["stop_hook_active"], false);
    assert_eq!(child_stops[0]["last_assistant_message"], "child first");
    assert_eq!(child_stops[1]["stop_hook_active"], true);
    assert_eq!(child_stops[1]["last_assistant_message"], "child second");
    let transcript = child_stops[0]["agent_transcript_path"].as_str().unwrap();
    assert!(transcript.contains(&child_id), "{transcript}");

    // The child's log: its hook runs, the start context and the stop hook's reason.
    let child = load_file(Path::new(transcript)).unwrap();
    let points: Vec<String> = child
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "hook/invoked" => {
                Some(data["handlerId"].as_str().unwrap().to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        points,
        [
            "claude-code:SubagentStart:1",
            "claude-code:SubagentStop:1",
            "claude-code:SubagentStop:2"
        ]
    );
    let hook_texts: Vec<String> = child
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::UserMessage(m)
                if matches!(&m.source, MessageSource::Plugin { plugin, .. } if plugin == "hooks-claude-code") =>
            {
                Some(m.text())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        hook_texts,
        ["child context from the hook", "check once more"]
    );
}
