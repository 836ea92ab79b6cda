//! Shared helpers of the adapter's loopback tests.
// Each test binary uses only some of them.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_deepseek::{model_info, ApiKey, DeepSeekAdapter, DeepSeekConfig};
use dsh_llm::{CallConfig, GenerateRequest, Message, ReasoningEffort, ToolSchema};
pub use dsh_test_support::provider_checks::{
    assemble, assert_well_formed, call_failure, collect, error_failure, finish, TEST_DEADLINE,
};
use dsh_test_support::FakeProvider;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A key that must never show up anywhere but the Authorization header.
pub const TEST_KEY: &str = "sk-test-4f9d2c7e1b8a6053";

pub fn config_for(provider: &FakeProvider) -> DeepSeekConfig {
    DeepSeekConfig::new(provider.base_url(), Some(ApiKey::new(TEST_KEY)))
        .with_idle_timeout(Duration::from_secs(5))
}

pub fn adapter_for(provider: &FakeProvider) -> DeepSeekAdapter {
    DeepSeekAdapter::new(config_for(provider)).expect("adapter config is valid")
}

pub fn tools() -> Vec<ToolSchema> {
    vec![ToolSchema {
        name: "bash".into(),
        description: "Run a command.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    }]
}

pub fn request_with(
    model: &str,
    effort: Option<ReasoningEffort>,
    messages: Vec<Message>,
) -> GenerateRequest {
    let mut config = CallConfig::new("deepseek", model);
    config.reasoning_effort = effort;
    GenerateRequest {
        config: config
            .prepare(&model_info(model))
            .expect("effort supported"),
        system: "You are dsh, a coding agent.".into(),
        messages: Arc::new(messages),
        tools: Arc::new(tools()),
        cancel: CancellationToken::new(),
        session_id: None,
        purpose: None,
        history_lineage: None,
    }
}

pub fn simple_request() -> GenerateRequest {
    request_with(
        "deepseek-v4-flash",
        None,
        vec![Message::user_text("u1", "Say hi.")],
    )
}
