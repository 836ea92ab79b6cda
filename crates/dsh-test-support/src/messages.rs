//! Reading model-visible messages back in assertions.

use dsh_llm::{ContentBlock, Message};

/// The text a tool-result message carries: the text blocks inside its `ToolResult` blocks,
/// concatenated in order. Other blocks (and non-text content) add nothing, so a message that
/// is not a tool result gives `""`.
pub fn tool_result_text(message: &Message) -> String {
    let mut out = String::new();
    for block in &message.content {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_text_inside_tool_results_counts() {
        let result = Message::tool_result(
            "m1",
            "call-1",
            vec![
                ContentBlock::text("line one\n"),
                ContentBlock::Unknown(serde_json::json!({"type": "image"})),
                ContentBlock::text("line two"),
            ],
            false,
        );
        assert_eq!(tool_result_text(&result), "line one\nline two");
        assert_eq!(
            tool_result_text(&Message::user_text("u1", "not a result")),
            ""
        );
    }
}
