//! Stream chunks and finish reasons (docs/model-calls.md, "Stream chunks", "Finish reasons and
//! failures").

use serde::{Deserialize, Serialize};

use crate::block::{BlockType, ContentBlock};
use crate::failure::Failure;
use crate::usage::Usage;

/// One piece of a streamed reply. The set is closed. A well-formed stream has `usage` (if any)
/// before `finish`, and nothing after `finish`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Chunk {
    /// A block begins.
    #[serde(rename_all = "camelCase")]
    BlockStart {
        /// The block's position in the reply.
        index: u32,
        /// Its kind.
        block_type: BlockType,
    },
    /// More visible text for block `index`.
    TextDelta {
        /// The block's position in the reply.
        index: u32,
        /// The text to append.
        text: String,
    },
    /// More reasoning text for block `index`.
    ReasoningDelta {
        /// The block's position in the reply.
        index: u32,
        /// The text to append.
        text: String,
    },
    /// More of a tool call for block `index`.
    #[serde(rename_all = "camelCase")]
    ToolCallDelta {
        /// The block's position in the reply.
        index: u32,
        /// The call's id (empty until the provider sent it).
        #[serde(default)]
        id: String,
        /// The tool's name, when this delta carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Raw argument text to append.
        arguments_delta: String,
    },
    /// Block `index` is complete.
    BlockEnd {
        /// The block's position in the reply.
        index: u32,
        /// The whole block.
        block: ContentBlock,
    },
    /// Token counts of the call.
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The reply ended; always the last chunk.
    Finish {
        /// How it ended.
        reason: FinishReason,
    },
}

/// How a reply ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model stopped to have tools called.
    ToolCalls,
    /// The output limit cut the reply.
    MaxTokens,
    /// The call was cancelled.
    Aborted {
        /// Why, with code `ABORTED`.
        failure: Failure,
    },
    /// The call failed.
    Error {
        /// What went wrong.
        failure: Failure,
    },
}

impl FinishReason {
    /// The failure, for `aborted` and `error`.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            FinishReason::Aborted { failure } | FinishReason::Error { failure } => Some(failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureCode;
    use serde_json::json;

    #[test]
    fn chunks_read_as_dsh_writes_them() {
        let c: Chunk =
            serde_json::from_value(json!({"type":"block-start","index":1,"blockType":"tool-call"}))
                .unwrap();
        assert_eq!(
            c,
            Chunk::BlockStart {
                index: 1,
                block_type: BlockType::ToolCall
            }
        );
        let f: Chunk = serde_json::from_value(json!({"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"AUTH"}},"replayState":{}})).unwrap();
        assert_eq!(
            f,
            Chunk::Finish {
                reason: FinishReason::Error {
                    failure: Failure::new(FailureCode::Auth, "m")
                }
            }
        );
        let d = Chunk::ToolCallDelta {
            index: 0,
            id: "c".into(),
            name: None,
            arguments_delta: "{".into(),
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"{"})
        );
    }
}
