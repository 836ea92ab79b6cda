//! Reading model-visible messages back in assertions.

use dsh_llm::Message;

/// The text a tool-result message carries ([`Message::tool_result_text`]): the text blocks
/// inside its `ToolResult` blocks, concatenated in order; `""` for a message that is not a
/// tool result.
pub fn tool_result_text(message: &Message) -> String {
    message.tool_result_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::ContentBlock;

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
