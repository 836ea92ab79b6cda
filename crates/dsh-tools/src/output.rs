//! What a successful tool call hands back.

use dsh_llm::ContentBlock;
use serde_json::Value;

/// The result of a successful call.
///
/// * `content` is what the model sees (usually one text block);
/// * `summary` is a one-line description for people (tool cards, progress lines), never sent
///   to the model;
/// * `data` is optional structured detail for front ends and the log (a diff, the todo list,
///   read window metadata). Its shape per tool is documented in `docs/tools.md`; it mirrors the
///   `meta` field of dsh's `tool/result` events where dsh had one.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Blocks for the model, in order.
    pub content: Vec<ContentBlock>,
    /// Short human summary (one line).
    pub summary: String,
    /// Structured detail for UIs and logging.
    pub data: Option<Value>,
}

impl ToolOutput {
    /// One text block for the model; the summary starts empty and no data is attached.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            summary: String::new(),
            data: None,
        }
    }

    /// Sets the human summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    /// Attaches structured data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The text blocks joined by newlines (non-text blocks are skipped). Convenient for tests
    /// and for front ends that only show text.
    pub fn text_content(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}
