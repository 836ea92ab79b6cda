//! Shared helpers of the adapter's loopback tests.
// Each test binary uses only some of them.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_anthropic::{model_info, AnthropicAdapter, AnthropicConfig};
use dsh_http::ApiKey;
use dsh_llm::{CallConfig, GenerateRequest, Message, ReasoningEffort, ToolSchema};
pub use dsh_test_support::provider_checks::{
    assemble, assert_well_formed, call_failure, collect, error_failure, finish, TEST_DEADLINE,
};
use dsh_test_support::FakeProvider;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A key that must never show up anywhere but the `x-api-key` header.
pub const TEST_KEY: &str = "sk-ant-test-7c1e55d0a9b3";

pub const MODEL: &str = "claude-sonnet-4-5";

pub fn config_for(provider: &FakeProvider) -> AnthropicConfig {
    AnthropicConfig::new(provider.base_url(), Some(ApiKey::new(TEST_KEY)))
        .with_idle_timeout(Duration::from_secs(5))
}

pub fn adapter_for(provider: &FakeProvider) -> AnthropicAdapter {
    AnthropicAdapter::new(config_for(provider)).expect("adapter config is valid")
}

pub fn tools() -> Vec<ToolSchema> {
    vec![
        ToolSchema {
            name: "bash".into(),
            description: "Run a command.".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        },
        ToolSchema {
            name: "read".into(),
            description: "Read a file.".into(),
            parameters: json!({"type": "object", "properties": {"file_path": {"type": "string"}}}),
        },
    ]
}

pub fn request_with(effort: Option<ReasoningEffort>, messages: Vec<Message>) -> GenerateRequest {
    let mut config = CallConfig::new("anthropic", MODEL);
    config.reasoning_effort = effort;
    GenerateRequest {
        config: config
            .prepare(&model_info(MODEL))
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
    request_with(None, vec![Message::user_text("u1", "Say hi.")])
}
