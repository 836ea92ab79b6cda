//! Messages (docs/model-calls.md, "Messages").

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::block::ContentBlock;

/// Who speaks a message. Tool results are `user`: tools speak in the user's voice, so their
/// output is untrusted input and never gets system authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions with system authority.
    System,
    /// The user, and tool results.
    User,
    /// The model.
    Assistant,
}

/// Where a message came from.
///
/// Fields this build does not know (dsh writes e.g. `sections` on plugin sources and
/// `replayState` on model sources) are kept in `extra` and written back unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MessageSource {
    /// Typed by the user.
    User,
    /// Injected by an extension (runtime context, project instructions, reminders).
    Plugin {
        /// The extension's name.
        plugin: String,
        /// Which of the extension's kinds of message this is, if it says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        form: Option<String>,
        /// Fields this build does not know, kept as read.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// Produced by a model.
    Model {
        /// The adapter route that produced it.
        provider: String,
        /// The model that produced it.
        model: String,
        /// Fields this build does not know, kept as read.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    /// The result of a tool call.
    Tool {
        /// The id of the call.
        #[serde(rename = "callId")]
        call_id: String,
    },
}

/// One message of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique within the session.
    pub id: String,
    /// Who speaks it.
    pub role: Role,
    /// Its content blocks, in order.
    pub content: Vec<ContentBlock>,
    /// Where it came from.
    pub source: MessageSource,
}

impl Message {
    /// A user-typed text message.
    pub fn user_text(id: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            id: id.into(),
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            source: MessageSource::User,
        }
    }

    /// A tool result: a user-role message holding one `tool-result` block.
    pub fn tool_result(
        id: impl Into<String>,
        call_id: impl Into<String>,
        content: Vec<ContentBlock>,
        is_error: bool,
    ) -> Self {
        let call_id = call_id.into();
        Message {
            id: id.into(),
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_call_id: call_id.clone(),
                content,
                is_error: Some(is_error),
            }],
            source: MessageSource::Tool { call_id },
        }
    }

    /// The concatenation of the message's text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The text a tool-result message carries: the text blocks inside its `tool-result` blocks,
    /// concatenated in order. Other blocks (and non-text content) add nothing, so a message
    /// that is not a tool result gives `""`. The one reading of a result's text for front ends
    /// and logs.
    pub fn tool_result_text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::ToolResult { content, .. } = block {
                for part in content {
                    if let ContentBlock::Text { text } = part {
                        out.push_str(text);
                    }
                }
            }
        }
        out
    }

    /// The concatenation of the message's reasoning blocks, if it has any.
    pub fn reasoning(&self) -> Option<String> {
        let mut out: Option<String> = None;
        for block in &self.content {
            if let ContentBlock::Reasoning { text, .. } = block {
                out.get_or_insert_with(String::new).push_str(text);
            }
        }
        out
    }

    /// The tool calls of the message, in order: `(id, name, raw arguments)`.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            _ => None,
        })
    }

    /// True when no block holds anything (used to skip empty assistant replies).
    pub fn is_empty(&self) -> bool {
        self.content.iter().all(ContentBlock::is_blank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_dsh_plugin_source_and_keeps_extra_fields() {
        let raw = json!({"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[{"name":"a","text":"b"}]});
        let source: MessageSource = serde_json::from_value(raw.clone()).unwrap();
        assert!(matches!(&source, MessageSource::Plugin { form: Some(f), .. } if f == "snapshot"));
        assert_eq!(serde_json::to_value(&source).unwrap(), raw);
    }

    #[test]
    fn tool_result_is_user_role() {
        let m = Message::tool_result("m1", "c1", vec![ContentBlock::text("x")], false);
        assert_eq!(m.role, Role::User);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["source"], json!({"kind":"tool","callId":"c1"}));
    }

    #[test]
    fn tool_result_text_is_the_text_inside_the_result() {
        let m = Message::tool_result(
            "m1",
            "c1",
            vec![
                ContentBlock::text("line one\n"),
                ContentBlock::Unknown(json!({"type": "image"})),
                ContentBlock::text("line two"),
            ],
            false,
        );
        assert_eq!(m.tool_result_text(), "line one\nline two");
        assert_eq!(
            Message::user_text("u1", "not a result").tool_result_text(),
            ""
        );
    }
}
