//! Shared helpers of the adapter's loopback tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_deepseek::{model_info, ApiKey, DeepSeekAdapter, DeepSeekConfig};
use dsh_llm::{
    Adapter, AssembledReply, BlockAssembler, CallConfig, Chunk, Failure, FinishReason,
    GenerateRequest, Message, ReasoningEffort, ToolSchema,
};
use dsh_test_support::FakeProvider;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A key that must never show up anywhere but the Authorization header.
pub const TEST_KEY: &str = "sk-test-4f9d2c7e1b8a6053";

/// Upper bound for any single test interaction: a hang fails the test instead of blocking CI.
pub const TEST_DEADLINE: Duration = Duration::from_secs(10);

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
    }
}

pub fn simple_request() -> GenerateRequest {
    request_with(
        "deepseek-v4-flash",
        None,
        vec![Message::user_text("u1", "Say hi.")],
    )
}

/// Runs one call to its end, failing the test if it takes longer than [`TEST_DEADLINE`].
pub async fn collect(adapter: &DeepSeekAdapter, request: GenerateRequest) -> Vec<Chunk> {
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
    assert!(
        matches!(chunks.last(), Some(Chunk::Finish { .. })),
        "finish is last"
    );
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

/// The failure of an `error` finish.
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
