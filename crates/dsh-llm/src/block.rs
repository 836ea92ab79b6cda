//! Content blocks (docs/model-calls.md, "Content blocks"): an open set, so unknown kinds are
//! carried through untouched.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::image::ImageAttachment;

/// One piece of a message's content.
///
/// The set of kinds is open: a block whose `type` this build does not know is kept verbatim as
/// [`ContentBlock::Unknown`] and serialised back unchanged, never dropped and never a panic.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning ("thinking"). `signature` is the provider's opaque proof, round-tripped
    /// verbatim where a wire format has one (Anthropic).
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's signature over it, if the wire format has one.
        signature: Option<String>,
    },
    /// An image, by reference to its stored bytes (docs/model-calls.md, "Images"). An `image`
    /// block whose attachment is not a reference this build reads is kept as
    /// [`ContentBlock::Unknown`].
    Image {
        /// The reference (and, when loaded, the bytes).
        attachment: ImageAttachment,
    },
    /// A tool call. `arguments` is the raw JSON string the model produced, kept byte for byte.
    ToolCall {
        /// The provider's id of the call, echoed by its result.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments as the model wrote them (normally a JSON object).
        arguments: String,
    },
    /// The answer to a tool call, carried by a user-role message.
    ToolResult {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result's content (text blocks, normally).
        content: Vec<ContentBlock>,
        /// `Some(true)` when the tool failed.
        is_error: Option<bool>,
    },
    /// A block of a kind this build does not know, kept as it was read.
    Unknown(Value),
}

/// The kind of a block, as announced by `block-start` (docs/model-calls.md, "Stream chunks").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockType {
    /// [`ContentBlock::Text`].
    Text,
    /// [`ContentBlock::Reasoning`].
    Reasoning,
    /// [`ContentBlock::Image`].
    Image,
    /// [`ContentBlock::ToolCall`].
    ToolCall,
    /// [`ContentBlock::ToolResult`].
    ToolResult,
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// The block's kind, or `None` for an unknown block.
    pub fn block_type(&self) -> Option<BlockType> {
        match self {
            ContentBlock::Text { .. } => Some(BlockType::Text),
            ContentBlock::Reasoning { .. } => Some(BlockType::Reasoning),
            ContentBlock::Image { .. } => Some(BlockType::Image),
            ContentBlock::ToolCall { .. } => Some(BlockType::ToolCall),
            ContentBlock::ToolResult { .. } => Some(BlockType::ToolResult),
            ContentBlock::Unknown(_) => None,
        }
    }

    /// True for text or reasoning that holds nothing but white space.
    pub fn is_blank(&self) -> bool {
        match self {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => {
                text.trim().is_empty()
            }
            _ => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum KnownBlock {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
        #[serde(default)]
        signature: Option<String>,
    },
    Image {
        attachment: ImageAttachment,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        content: Vec<ContentBlock>,
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    },
}

const KNOWN_TYPES: [&str; 5] = ["text", "reasoning", "image", "tool-call", "tool-result"];

/// Borrowed twin of [`KnownBlock`] so that writing a block never clones it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum KnownBlockRef<'a> {
    Text {
        text: &'a str,
    },
    Reasoning {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: &'a Option<String>,
    },
    Image {
        attachment: &'a ImageAttachment,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    ToolResult {
        #[serde(rename = "toolCallId")]
        tool_call_id: &'a str,
        content: &'a [ContentBlock],
        #[serde(rename = "isError", skip_serializing_if = "Option::is_none")]
        is_error: &'a Option<bool>,
    },
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let known = match self {
            ContentBlock::Text { text } => KnownBlockRef::Text { text },
            ContentBlock::Reasoning { text, signature } => {
                KnownBlockRef::Reasoning { text, signature }
            }
            ContentBlock::Image { attachment } => KnownBlockRef::Image { attachment },
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => KnownBlockRef::ToolCall {
                id,
                name,
                arguments,
            },
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => KnownBlockRef::ToolResult {
                tool_call_id,
                content,
                is_error,
            },
            ContentBlock::Unknown(value) => return value.serialize(serializer),
        };
        known.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let kind = value.get("type").and_then(Value::as_str);
        match kind {
            Some("image") => Ok(match serde_json::from_value::<KnownBlock>(value.clone()) {
                Ok(KnownBlock::Image { attachment }) => ContentBlock::Image { attachment },
                _ => ContentBlock::Unknown(value),
            }),
            Some(kind) if KNOWN_TYPES.contains(&kind) => {
                let known: KnownBlock =
                    serde_json::from_value(value).map_err(serde::de::Error::custom)?;
                Ok(match known {
                    KnownBlock::Text { text } => ContentBlock::Text { text },
                    KnownBlock::Reasoning { text, signature } => {
                        ContentBlock::Reasoning { text, signature }
                    }
                    KnownBlock::Image { attachment } => ContentBlock::Image { attachment },
                    KnownBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    },
                    KnownBlock::ToolResult {
                        tool_call_id,
                        content,
                        is_error,
                    } => ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        is_error,
                    },
                })
            }
            Some(_) => Ok(ContentBlock::Unknown(value)),
            None => Err(serde::de::Error::custom(
                "content block has no string `type` field",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_blocks_use_dsh_field_names() {
        let block = ContentBlock::ToolResult {
            tool_call_id: "c1".into(),
            content: vec![ContentBlock::text("ok")],
            is_error: Some(false),
        };
        let value = serde_json::to_value(&block).unwrap();
        assert_eq!(
            value,
            json!({"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"ok"}],"isError":false})
        );
        assert_eq!(
            serde_json::from_value::<ContentBlock>(value).unwrap(),
            block
        );
    }

    #[test]
    fn unknown_block_round_trips_verbatim() {
        let raw = json!({"type":"hologram","frames":[1,2,3]});
        let block: ContentBlock = serde_json::from_value(raw.clone()).unwrap();
        assert!(matches!(block, ContentBlock::Unknown(_)));
        assert_eq!(serde_json::to_value(&block).unwrap(), raw);
    }

    #[test]
    fn image_reference_round_trips_and_a_foreign_image_stays_verbatim() {
        let raw = json!({"type":"image","attachment":{"attachmentId":"sha256:00","mediaType":"image/png","bytes":69,"width":1,"height":1,"originalDimensions":{"width":9,"height":9}}});
        let block: ContentBlock = serde_json::from_value(raw.clone()).unwrap();
        assert!(matches!(block, ContentBlock::Image { .. }));
        assert_eq!(serde_json::to_value(&block).unwrap(), raw);
        let foreign = json!({"type":"image","attachment":{"url":"https://example.com/x.png"}});
        let block: ContentBlock = serde_json::from_value(foreign.clone()).unwrap();
        assert!(matches!(block, ContentBlock::Unknown(_)));
        assert_eq!(serde_json::to_value(&block).unwrap(), foreign);
    }

    #[test]
    fn malformed_known_block_is_an_error_not_unknown() {
        let raw = json!({"type":"tool-call","id":"x"});
        assert!(serde_json::from_value::<ContentBlock>(raw).is_err());
    }
}
