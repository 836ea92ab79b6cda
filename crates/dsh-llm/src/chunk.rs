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
    #[serde(rename_all = "camelCase")]
    BlockStart {
        index: u32,
        block_type: BlockType,
    },
    TextDelta {
        index: u32,
        text: String,
    },
    ReasoningDelta {
        index: u32,
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallDelta {
        index: u32,
        #[serde(default)]
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        arguments_delta: String,
    },
    BlockEnd {
        index: u32,
        block: ContentBlock,
    },
    Usage {
        usage: Usage,
    },
    Finish {
        reason: FinishReason,
    },
}

/// How a reply ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    MaxTokens,
    Aborted { failure: Failure },
    Error { failure: Failure },
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
