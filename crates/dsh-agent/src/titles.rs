//! Session titles: a fallback from the first prompt's words at once, then (when enabled) a
//! short model-written title from one small call made alongside the first turn, with thinking
//! off. A failed title call keeps the fallback; it never affects the turn.

use std::sync::Arc;

use dsh_llm::{
    Adapter, BlockAssembler, CallConfig, FinishReason, GenerateRequest, Message, ModelInfo,
    Purpose, ReasoningEffort, Usage,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// How titles are made.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum TitleMode {
    /// Only the fallback from the prompt's first words (no model call).
    #[default]
    Fallback,
    /// A model call; `route`/`model` default to the session's own.
    Model {
        /// The adapter route to call, if not the session's.
        route: Option<String>,
        /// The model to ask, if not the session's.
        model: Option<String>,
    },
}

/// The instructions of the title call.
const TITLE_SYSTEM: &str = "You name coding-assistant sessions. Given the user's first \
message, answer with a title of at most six words that says what the session is about. \
Answer with the title alone: plain words on one line, no quotes, no punctuation at the end, \
no Markdown.";

/// What the title call gave: the title (`None` when the call failed or returned nothing
/// usable) and the call's usage, when it arrived (billed either way).
pub(crate) struct TitleReply {
    pub(crate) title: Option<String>,
    pub(crate) usage: Option<Usage>,
}

/// Makes the title call.
pub(crate) async fn model_title(
    adapter: Arc<dyn Adapter>,
    config: CallConfig,
    info: &ModelInfo,
    prompt: &str,
    cancel: CancellationToken,
) -> TitleReply {
    let mut config = config;
    config.reasoning_effort = if info.efforts.contains(&ReasoningEffort::Off) {
        Some(ReasoningEffort::Off)
    } else {
        None
    };
    config.max_tokens = Some(64);
    config.temperature = None;
    let Ok(config) = config.prepare(info) else {
        return TitleReply {
            title: None,
            usage: None,
        };
    };
    let mut excerpt: String = prompt.chars().take(2_000).collect();
    if excerpt.len() < prompt.len() {
        excerpt.push_str(" ...");
    }
    let request = GenerateRequest {
        config,
        system: TITLE_SYSTEM.to_string(),
        messages: Arc::new(vec![Message::user_text("title-request", excerpt)]),
        tools: Arc::new(Vec::new()),
        cancel,
        session_id: None,
        purpose: Some(Purpose::SessionTitle),
        history_lineage: None,
    };
    let mut stream = adapter.stream(request);
    let mut assembler = BlockAssembler::new();
    while let Some(chunk) = stream.next().await {
        if assembler.push(&chunk).is_err() {
            break;
        }
    }
    let reply = assembler.finish();
    let title = matches!(reply.finish, FinishReason::Stop)
        .then(|| clean_title(&reply.text()))
        .flatten();
    TitleReply {
        title,
        usage: reply.usage,
    }
}

/// One line, no wrapping quotes or trailing period, at most 80 characters.
pub(crate) fn clean_title(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .trim_start_matches(['#', '*', ' '])
        .trim_matches(['"', '\'', '`', '*'])
        .trim_end_matches(['.', ' '])
        .trim();
    if line.is_empty() {
        return None;
    }
    // A title is shown in lists and terminals: no control characters (a model's escape
    // sequence would otherwise reach `dsh sessions list`).
    Some(line.chars().filter(|c| !c.is_control()).take(80).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_cleaned() {
        assert_eq!(
            clean_title("\n\"Fix the parser.\"\nmore").as_deref(),
            Some("Fix the parser")
        );
        assert_eq!(
            clean_title("## **Refactor tools**").as_deref(),
            Some("Refactor tools")
        );
        assert_eq!(clean_title("   \n  "), None);
    }
}
