//! Shared helpers of the adapter's loopback tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_anthropic::{model_info, AnthropicAdapter, AnthropicConfig};
use dsh_deepseek::ApiKey;
use dsh_llm::{
    Adapter, AssembledReply, BlockAssembler, CallConfig, Chunk, Failure, FinishReason,
    GenerateRequest, Message, ReasoningEffort, ToolSchema,
};
use dsh_test_support::FakeProvider;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A key that must never show up anywhere but the `x-api-key` header.
pub const TEST_KEY: &str = "sk-ant-test-7c1e55d0a9b3";

/// Upper bound for any single test interaction.
pub const TEST_DEADLINE: Duration = Duration::from_secs(10);

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
    }
}

pub fn simple_request() -> GenerateRequest {
    request_with(None, vec![Message::user_text("u1", "Say hi.")])
}

pub async fn collect(adapter: &AnthropicAdapter, request: GenerateRequest) -> Vec<Chunk> {
    let chunks = tokio::time::timeout(TEST_DEADLINE, adapter.stream(request).collect::<Vec<_>>())
        .await
        .expect("the stream must end on its own");
    assert_well_formed(&chunks);
    chunks
}

/// Exactly one finish, last; at most one usage, right before it.
pub fn assert_well_formed(chunks: &[Chunk]) {
    let finishes = chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "exactly one finish: {chunks:#?}");
    assert!(matches!(chunks.last(), Some(Chunk::Finish { .. })));
    if let Some(position) = chunks.iter().position(|c| matches!(c, Chunk::Usage { .. })) {
        assert_eq!(position, chunks.len() - 2, "usage right before finish");
    }
}

pub fn finish(chunks: &[Chunk]) -> &FinishReason {
    match chunks.last() {
        Some(Chunk::Finish { reason }) => reason,
        other => panic!("no finish: {other:?}"),
    }
}

pub fn error_failure(chunks: &[Chunk]) -> Failure {
    match finish(chunks) {
        FinishReason::Error { failure } => failure.clone(),
        other => panic!("expected an error finish, got {other:?}"),
    }
}

pub fn assemble(chunks: &[Chunk]) -> AssembledReply {
    let mut assembler = BlockAssembler::new();
    for chunk in chunks {
        assembler.push(chunk).expect("nothing after finish");
    }
    assembler.finish()
}
