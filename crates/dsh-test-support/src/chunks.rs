//! Replies as dsh chunks, for scripted adapters (`dsh_agent::ReplayAdapter`) in tests that do
//! not need the wire format.

use dsh_llm::{BlockType, Chunk, FinishReason};

/// A reply that is `text`, finished `stop`.
pub fn text(text: &str) -> Vec<Chunk> {
    vec![
        Chunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        Chunk::Finish {
            reason: FinishReason::Stop,
        },
    ]
}

/// A reply that calls tool `name` (call id `id`) with the raw argument string `arguments`,
/// finished `tool-calls`.
pub fn tool_call(id: &str, name: &str, arguments: &str) -> Vec<Chunk> {
    vec![
        Chunk::BlockStart {
            index: 0,
            block_type: BlockType::ToolCall,
        },
        Chunk::ToolCallDelta {
            index: 0,
            id: id.into(),
            name: Some(name.into()),
            arguments_delta: arguments.into(),
        },
        Chunk::Finish {
            reason: FinishReason::ToolCalls,
        },
    ]
}
