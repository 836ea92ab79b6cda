//! The loop against the fake provider over loopback: tool argument failures, steering,
//! injection, resume, header logging, and the event order of docs/agent.md, "Turns and steps".

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionGuard, ExtensionSet};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_session::{load_file, open_store, Envelope, Event, HeaderReason, StoreKind, TurnEndReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};

struct Harness {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    provider: FakeProvider,
}

impl Harness {
    async fn new(replies: Vec<ScriptedReply>) -> Harness {
        Harness {
            home: tempfile::tempdir().unwrap(),
            cwd: tempfile::tempdir().unwrap(),
            provider: FakeProvider::start(replies).await.unwrap(),
        }
    }

    fn parts(&self, model: &str) -> (AgentParts, Vec<ExtensionGuard>) {
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.provider.base_url(),
            Some(dsh_deepseek::ApiKey::new("sk-loop")),
        ))
        .unwrap();
        let mut adapters = AdapterRegistry::new();
        adapters.register("deepseek", Arc::new(adapter)).unwrap();
        let extensions = ExtensionSet::new();
        let retry = RetryPolicy {
            base_delay: Duration::from_millis(5),
            ..RetryPolicy::default()
        };
        let guards =
            dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(30));
        let spill = SpillDir::create(self.home.path().join("spill")).unwrap();
        let tool_context = ToolContext::new(self.cwd.path(), spill)
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess);
        (
            AgentParts {
                adapters,
                tools: Arc::new(ToolRegistry::with_builtins()),
                extensions,
                tool_context,
                options: AgentOptions::new(CallConfig::new("deepseek", model), self.cwd.path()),
            },
            guards,
        )
    }

    fn events(&self, location: &str) -> Vec<Envelope> {
        load_file(Path::new(location)).unwrap().events
    }
}

fn text(reply: &str) -> ScriptedReply {
    SseReply::new()
        .text(reply)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

fn types(events: &[Envelope]) -> Vec<String> {
    events
        .iter()
        .filter(|e| !matches!(e.event, Event::AssistantChunk(_)))
        .map(|e| e.event.event_type().to_string())
        .collect()
}

#[tokio::test]
async fn bad_tool_arguments_become_error_results_and_the_loop_continues() {
    let calls = SseReply::new()
        .reasoning("let me try")
        .tool_call(0, "c_json", "read", "{\"file_path\": ")
        .tool_call(1, "c_type", "read", "{\"file_path\": 5}")
        .tool_call(2, "c_missing", "edit", "{\"file_path\": \"a.txt\"}")
        .tool_call(
            3,
            "c_nofile",
            "read",
            "{\"file_path\": \"does-not-exist.txt\"}",
        )
        .tool_call(4, "c_unknown", "teleport", "{}")
        .finish("tool_calls", Some(WireUsage::default()));
    let h = Harness::new(vec![calls.into(), text("recovered")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("break things").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].reason, TurnEndReason::Completed);
    assert_eq!(outcomes[0].final_text, "recovered");

    let events = h.events(&handle.location());
    let codes: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => r.error.as_ref().map(|e| e.code.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        codes,
        [
            "INVALID_ARGS",
            "INVALID_ARGS",
            "INVALID_ARGS",
            "NOT_FOUND",
            "UNKNOWN_TOOL"
        ]
    );
    for e in &events {
        if let Event::ToolResult(r) = &e.event {
            let text = r.message.content.iter().any(|b| {
                matches!(b, dsh_llm::ContentBlock::ToolResult { content, is_error: Some(true), .. }
                    if content.iter().any(|c| matches!(c, dsh_llm::ContentBlock::Text { text } if text.starts_with("Error: "))))
            });
            assert!(text, "error results start with `Error: `");
        }
    }

    // The second request carries the raw argument strings, the reasoning, and one tool message
    // per call.
    let requests = h.provider.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["reasoning_content"], "let me try");
    let args: Vec<&str> = assistant["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(args[0], "{\"file_path\": ");
    assert_eq!(args[1], "{\"file_path\": 5}");
    assert_eq!(messages.iter().filter(|m| m["role"] == "tool").count(), 5);
}

#[tokio::test]
async fn events_follow_the_turn_order_of_the_spec() {
    let call = SseReply::new()
        .tool_call(
            0,
            "c1",
            "write",
            "{\"file_path\": \"x.txt\", \"content\": \"hi\"}",
        )
        .finish("tool_calls", Some(WireUsage::default()));
    let h = Harness::new(vec![call.into(), text("done")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("write x").unwrap();
    agent.run_until_idle().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(h.cwd.path().join("x.txt")).unwrap(),
        "hi"
    );
    let events = h.events(&handle.location());
    assert_eq!(
        types(&events),
        [
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "session/title",
            "request/header",
            "request/context",
            "assistant/message",
            "request/cache",
            "tool/call",
            "tool/started",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/message",
            "request/cache",
            "step/end",
            "turn/end",
        ]
    );
}

#[tokio::test]
async fn steering_reaches_the_next_step_and_inject_waits_without_waking() {
    // Step 1 is slow so that steering arrives while it streams.
    let slow = SseReply::new()
        .tool_call(0, "c1", "glob", "{\"pattern\": \"*.none\"}")
        .chunk_delay(Duration::from_millis(150))
        .finish("tool_calls", Some(WireUsage::default()));
    let h = Harness::new(vec![slow.into(), text("steered")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle
        .inject(dsh_agent::plugin_message(
            "test",
            "notice",
            "injected context",
        ))
        .unwrap();
    // An inject alone queues for the next step; it joins the first step of the next turn.
    handle.followup("start").unwrap();
    let steerer = {
        let handle = handle.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            handle.steer("also check README").unwrap();
        })
    };
    let outcomes = agent.run_until_idle().await.unwrap();
    steerer.await.unwrap();
    assert_eq!(outcomes.len(), 1, "steering does not start a new turn");
    assert_eq!(outcomes[0].final_text, "steered");
    let requests = h.provider.requests();
    let first: Vec<String> = requests[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str().map(String::from))
        .collect();
    assert!(first.iter().any(|c| c == "injected context"));
    let second = requests[1].body["messages"].to_string();
    assert!(second.contains("also check README"), "{second}");
    assert!(!first.iter().any(|c| c.contains("also check README")));
}

#[tokio::test]
async fn resume_continues_numbering_and_logs_a_resume_header() {
    let h = Harness::new(vec![text("one"), text("two")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let location;
    {
        let (parts, _guards) = h.parts("deepseek-v4-flash");
        let mut agent = Agent::create(parts, store.as_ref()).unwrap();
        let handle = agent.handle();
        location = handle.location();
        handle.followup("first").unwrap();
        agent.run_until_idle().await.unwrap();
    }
    let (parts, _guards) = h.parts("deepseek-v4-pro");
    let mut agent = Agent::resume(parts, store.as_ref(), &location).unwrap();
    let handle = agent.handle();
    handle.followup("second").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes[0].turn, 2);
    assert_eq!(outcomes[0].final_text, "two");
    let events = h.events(&location);
    let reasons: Vec<HeaderReason> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::RequestHeader(h) => Some(h.reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [HeaderReason::Initial, HeaderReason::Resume]);
    // The second request resends the first turn from the log.
    let second = h.provider.requests()[1].body.clone();
    assert_eq!(second["model"], "deepseek-v4-pro");
    let contents: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"first") && contents.contains(&"one") && contents.contains(&"second")
    );
}

#[tokio::test]
async fn consecutive_requests_of_a_turn_extend_each_other_byte_for_byte() {
    let call = SseReply::new()
        .reasoning("plan")
        .tool_call(0, "c1", "glob", "{\"pattern\": \"*\"}")
        .finish("tool_calls", Some(WireUsage::default()));
    let h = Harness::new(vec![call.into(), text("done")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    agent.handle().followup("list").unwrap();
    agent.run_until_idle().await.unwrap();
    let requests = h.provider.requests();
    let a = &requests[0].body;
    let b = &requests[1].body;
    assert_eq!(a["tools"], b["tools"]);
    let a_messages = a["messages"].as_array().unwrap();
    let b_messages = b["messages"].as_array().unwrap();
    assert_eq!(&b_messages[..a_messages.len()], &a_messages[..]);
    let names: Vec<&str> = a["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools are sent sorted by name");
}

#[tokio::test]
async fn switching_the_model_mid_session_logs_a_header_change() {
    let h = Harness::new(vec![text("one"), text("two")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("first").unwrap();
    agent.run_until_idle().await.unwrap();
    let mut pro = CallConfig::new("deepseek", "deepseek-v4-pro");
    pro.reasoning_effort = Some(dsh_llm::ReasoningEffort::Max);
    handle.set_call(pro);
    handle.followup("second").unwrap();
    agent.run_until_idle().await.unwrap();
    let reasons: Vec<HeaderReason> = h
        .events(&handle.location())
        .iter()
        .filter_map(|e| match &e.event {
            Event::RequestHeader(h) => Some(h.reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [HeaderReason::Initial, HeaderReason::Change]);
    let second = &h.provider.requests()[1].body;
    assert_eq!(second["model"], "deepseek-v4-pro");
    assert_eq!(second["reasoning_effort"], "max");
}

/// A tool an extension contributes for a while (see the test below).
struct Echo;

impl dsh_tools::Tool for Echo {
    fn name(&self) -> &str {
        "echo_back"
    }
    fn description(&self) -> &str {
        "Returns `text`."
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    fn execute<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> futures::future::BoxFuture<'a, Result<dsh_tools::ToolOutput, dsh_tools::ToolError>> {
        Box::pin(async move {
            Ok(dsh_tools::ToolOutput::text(
                args["text"].as_str().unwrap_or_default(),
            ))
        })
    }
}

struct EchoPlugin;

impl dsh_agent::Extension for EchoPlugin {
    fn name(&self) -> &str {
        "echo-plugin"
    }
    fn tools(&self) -> Vec<Arc<dyn dsh_tools::Tool>> {
        vec![Arc::new(Echo)]
    }
}

/// The loop shares unchanged tool schemas between steps (docs/PERFORMANCE.md, "Step 1: fixed
/// costs"); a tool list that changes must still reach the request and the log: added by an
/// extension, kept, then removed with it.
#[tokio::test]
async fn a_tool_list_that_changes_between_requests_is_sent_and_logged() {
    let h = Harness::new(vec![text("one"), text("two"), text("three"), text("four")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let extensions = parts.extensions.clone();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    handle.followup("first").unwrap();
    agent.run_until_idle().await.unwrap();
    let guard = extensions.register(Arc::new(EchoPlugin));
    for prompt in ["second", "third"] {
        handle.followup(prompt).unwrap();
        agent.run_until_idle().await.unwrap();
    }
    drop(guard);
    handle.followup("fourth").unwrap();
    agent.run_until_idle().await.unwrap();
    let requests = h.provider.requests();
    let has_echo: Vec<bool> = requests
        .iter()
        .map(|r| {
            r.body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["function"]["name"] == "echo_back")
        })
        .collect();
    assert_eq!(has_echo, [false, true, true, false]);
    assert_eq!(requests[0].body["tools"], requests[3].body["tools"]);
    let headers: Vec<(HeaderReason, bool)> = h
        .events(&handle.location())
        .iter()
        .filter_map(|e| match &e.event {
            Event::RequestHeader(h) => Some((
                h.reason,
                serde_json::to_string(&h.header.tools)
                    .unwrap()
                    .contains("echo_back"),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        headers,
        [
            (HeaderReason::Initial, false),
            (HeaderReason::Change, true),
            (HeaderReason::Change, false)
        ]
    );
}

#[tokio::test]
async fn calls_are_logged_with_their_presentation_and_results_with_their_summary() {
    let calls = SseReply::new()
        .tool_call(
            0,
            "c1",
            "write",
            "{\"file_path\": \"x.txt\", \"content\": \"hi\\n\"}",
        )
        .tool_call(1, "c2", "teleport", "{}")
        .finish("tool_calls", Some(WireUsage::default()));
    let h = Harness::new(vec![calls.into(), text("done")]).await;
    let store = open_store(StoreKind::Jsonl, h.home.path()).unwrap();
    let (parts, _guards) = h.parts("deepseek-v4-flash");
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let handle = agent.handle();
    assert!(handle.tools().names().any(|name| name == "write"));
    handle.followup("write x").unwrap();
    agent.run_until_idle().await.unwrap();
    let events = h.events(&handle.location());
    let presentations: Vec<serde_json::Value> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCall(call) => call.presentation.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        presentations,
        [
            serde_json::json!({"title": "write", "subject": "x.txt", "kind": "edit",
                "view": "diff", "locations": ["x.txt"]}),
            // A tool nobody registered is shown by its name.
            serde_json::json!({"title": "teleport", "kind": "other", "view": "text"}),
        ]
    );
    let summaries: Vec<Option<serde_json::Value>> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(result) => Some(result.summary.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        summaries,
        [Some(serde_json::json!({"text": "new file +1 -0"})), None]
    );
}
