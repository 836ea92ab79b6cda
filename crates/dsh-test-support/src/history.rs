//! A session's history as its successive model requests see it, for property tests of what an
//! adapter keeps between calls (docs/providers.md, "The history bytes cache"): steps append,
//! compactions replace a span, an extension may edit a message under its id, a retry changes
//! nothing; and the history lineage moves as the session log moves it (docs/model-calls.md,
//! "History lineage").

use std::sync::Arc;

use dsh_llm::{ContentBlock, HistoryLineage, Message, ToolSchema};
use proptest::prelude::*;

/// What one request of a sequence does to its session's history first.
#[derive(Debug, Clone)]
pub enum HistoryChange {
    /// A step: new messages at the end.
    Append(Vec<Message>),
    /// A compaction: the span from `start` (a fraction of the history) becomes one message.
    Replace(f64, Message),
    /// A message (at a fraction of the history) changes under its id: only the lineage tells.
    Edit(f64, String),
    /// Nothing changes (a retry of the same request).
    Same,
}

/// A change for request number `step`, with new messages from `message` (given a fresh id).
pub fn history_change<S>(
    step: usize,
    message: impl Fn(String) -> S + Clone + 'static,
) -> impl Strategy<Value = HistoryChange>
where
    S: Strategy<Value = Message> + 'static,
{
    let appended = message.clone();
    prop_oneof![
        6 => (1..4usize).prop_flat_map(move |count| {
            let messages: Vec<_> = (0..count)
                .map(|n| appended(format!("s{step}-{n}")))
                .collect();
            messages.prop_map(HistoryChange::Append)
        }),
        1 => (0.0..1.0f64, message(format!("s{step}-summary")))
            .prop_map(|(start, m)| HistoryChange::Replace(start, m)),
        1 => (0.0..1.0f64, "[a-z\"\\\\\n]{1,4}").prop_map(|(at, t)| HistoryChange::Edit(at, t)),
        1 => Just(HistoryChange::Same),
    ]
}

/// One session's history and lineage, as the session log keeps them.
#[derive(Debug, Clone)]
pub struct SessionHistory {
    /// The messages a request carries (the same `Arc` while nothing changes).
    pub messages: Arc<Vec<Message>>,
    /// Their lineage: new whenever the history did more than grow.
    pub lineage: HistoryLineage,
}

impl Default for SessionHistory {
    fn default() -> Self {
        SessionHistory {
            messages: Arc::new(Vec::new()),
            lineage: HistoryLineage::new(),
        }
    }
}

impl SessionHistory {
    /// Applies `change`; a replace or an edit starts a new lineage.
    pub fn apply(&mut self, change: &HistoryChange) {
        let mut messages = match change {
            HistoryChange::Same => return,
            _ => self.messages.as_ref().clone(),
        };
        match change {
            HistoryChange::Append(new) => messages.extend(new.iter().cloned()),
            HistoryChange::Replace(start, summary) => {
                let start = (*start * messages.len() as f64) as usize;
                messages.truncate(start.min(messages.len()));
                messages.push(summary.clone());
                self.lineage = HistoryLineage::new();
            }
            HistoryChange::Edit(at, text) => {
                let at = (*at * messages.len() as f64) as usize;
                if let Some(message) = messages.get_mut(at) {
                    message.content.push(ContentBlock::text(text.clone()));
                }
                self.lineage = HistoryLineage::new();
            }
            HistoryChange::Same => {}
        }
        self.messages = Arc::new(messages);
    }
}

/// `count` tool schemas whose texts hold what JSON must escape.
pub fn tool_list(count: usize) -> Vec<ToolSchema> {
    (0..count)
        .map(|n| ToolSchema {
            name: format!("tool_{n}"),
            description: format!("Tool {n}: \"quoted\", a\ttab, é"),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": format!("p{n}")}},
                "required": ["path"],
            }),
        })
        .collect()
}

/// The tool lists a request can send, by `choice`: 1 and 2 are two kept lists (the same `Arc`
/// whenever chosen, as the agent loop shares its list across steps), 3 the first kept list's
/// contents in a new `Arc`, anything else none. For the adapters' kept `tools` bytes
/// (`dsh_llm::KeptTools`).
pub fn tools_of(choice: usize) -> Arc<Vec<ToolSchema>> {
    static KEPT: std::sync::LazyLock<[Arc<Vec<ToolSchema>>; 2]> =
        std::sync::LazyLock::new(|| [Arc::new(tool_list(2)), Arc::new(tool_list(3))]);
    match choice {
        1 => Arc::clone(&KEPT[0]),
        2 => Arc::clone(&KEPT[1]),
        3 => Arc::new(tool_list(2)),
        _ => Arc::new(Vec::new()),
    }
}
