//! Byte-stable prompt prefix (docs/agent.md, "Context discipline"): a 60-step scripted session
//! whose tools return varied output. Every request keeps model, sampling, system prompt and tool
//! list identical to the previous one, and the previous request's messages are an exact prefix of
//! its messages, each compared as serialized JSON (from the fake provider's request log).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_session::{open_store, StoreKind};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::Value;

const STEPS: usize = 60;

fn step_reply(k: usize) -> ScriptedReply {
    let (name, args) = match k % 6 {
        0 => (
            "bash",
            format!(
                r#"{{"command": "seq 1 {}", "description": "count"}}"#,
                k * 7
            ),
        ),
        1 => (
            "write",
            format!(r#"{{"file_path": "f{k}.txt", "content": "line {k}\nmore {k}\n"}}"#),
        ),
        2 => ("read", format!(r#"{{"file_path": "f{}.txt"}}"#, k - 1)),
        3 => ("glob", r#"{"pattern": "*.txt"}"#.to_string()),
        4 => (
            "grep",
            format!(r#"{{"pattern": "more {}", "path": "."}}"#, k - 3),
        ),
        _ => (
            "bash",
            format!(r#"{{"command": "printf 'x%.0s' $(seq 1 {k}); echo", "description": "xs"}}"#),
        ),
    };
    SseReply::new()
        .reasoning(&format!("step {k}: use {name}"))
        .text(if k.is_multiple_of(5) {
            "Working on it."
        } else {
            ""
        })
        .tool_call(0, &format!("call_{k}"), name, &args)
        .finish(
            "tool_calls",
            Some(WireUsage {
                prompt_tokens: 1000 + k as u64 * 100,
                prompt_cache_hit_tokens: if k == 0 {
                    0
                } else {
                    1000 + (k as u64 - 1) * 100
                },
                completion_tokens: 20,
                reasoning_tokens: 5,
            }),
        )
        .into()
}

#[tokio::test]
async fn sixty_steps_keep_every_request_a_prefix_extension_of_the_previous() {
    let mut replies: Vec<ScriptedReply> = (0..STEPS - 1).map(step_reply).collect();
    replies.push(
        SseReply::new()
            .text("All done.")
            .finish("stop", Some(WireUsage::default()))
            .into(),
    );
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
        provider.base_url(),
        Some(dsh_deepseek::ApiKey::new("sk-prefix")),
    ))
    .unwrap();
    let mut adapters = AdapterRegistry::new();
    adapters.register("deepseek", Arc::new(adapter)).unwrap();
    let extensions = ExtensionSet::new();
    let _guards = dsh_agent::register_builtin_extensions(
        &extensions,
        RetryPolicy::default(),
        Duration::from_secs(30),
    );
    let _context = extensions.register(Arc::new(dsh_agent::ContextMessages::new(
        cwd.path(),
        None,
        Box::new(dsh_agent::SystemContext {
            permission: "danger-full-access".into(),
        }),
    )));
    let spill = SpillDir::create(home.path().join("spill")).unwrap();
    let tool_context = ToolContext::new(cwd.path(), spill)
        .unwrap()
        .with_permission(PermissionPreset::DangerFullAccess);
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let mut agent = Agent::create(
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context,
            options: AgentOptions::new(
                CallConfig::new("deepseek", "deepseek-v4-flash"),
                cwd.path(),
            ),
        },
        store.as_ref(),
    )
    .unwrap();
    agent.handle().followup("do sixty things").unwrap();
    let outcomes = agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].final_text, "All done.");

    let requests = provider.requests();
    assert_eq!(requests.len(), STEPS);
    let mut resent = 0usize;
    let mut reused = 0usize;
    for k in 1..requests.len() {
        let before: Value = serde_json::from_slice(&requests[k - 1].raw_body).unwrap();
        let now: Value = serde_json::from_slice(&requests[k].raw_body).unwrap();
        for field in [
            "model",
            "temperature",
            "max_tokens",
            "stop",
            "thinking",
            "reasoning_effort",
            "tools",
        ] {
            assert_eq!(
                before.get(field).map(Value::to_string),
                now.get(field).map(Value::to_string),
                "request {k} changed `{field}`"
            );
        }
        let old = before["messages"].as_array().unwrap();
        let new = now["messages"].as_array().unwrap();
        assert!(new.len() > old.len(), "request {k} did not grow");
        for (i, message) in old.iter().enumerate() {
            assert_eq!(
                message.to_string(),
                new[i].to_string(),
                "request {k}: message {i} differs from the previous request"
            );
        }
        let size = |v: &Value| v.to_string().len();
        // Bytes of the previous request that this one resends, and how many of them sit
        // unchanged at the start of it (all, when the prefix holds).
        resent += old.iter().map(size).sum::<usize>() + size(&before["tools"]);
        reused += old.iter().map(size).sum::<usize>() + size(&before["tools"]);
    }
    // The agent's own reports agree: every request after the first is a prefix extension.
    let reports = &outcomes[0].cache_reports;
    assert_eq!(reports.len(), STEPS);
    assert!(
        reports[1..].iter().all(|r| r.prefix_extension),
        "{reports:?}"
    );
    let share = reused as f64 / resent as f64;
    println!(
        "prefix reuse over {STEPS} requests: {:.1}% of resent message+tool bytes ({} of {})",
        share * 100.0,
        reused,
        resent
    );
    assert_eq!(reused, resent);
}
