//! Tool presentations in the session log (docs/tools.md, "Presentation").
//!
//! The agent logs each call with the presentation its tool gave ([`dsh_tools::Tool::present`])
//! and each result with the tool's summary ([`dsh_tools::Tool::summarize`]), so a log shows
//! its calls as they were shown live, whoever reads it later. Front ends read them back
//! through a [`Presenter`], which asks tools for what a log written before dsh logged
//! presentations lacks: the session's own tools when the front end has them, else the ones
//! every session has.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use dsh_session::{Envelope, Event, ToolCall, ToolResult};
use dsh_tools::{ResultFacts, ResultSummary, ToolPresentation, ToolRegistry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A presentation or summary as the log holds it.
pub(crate) fn logged<T: Serialize>(value: &T) -> Option<Value> {
    serde_json::to_value(value).ok()
}

/// The presentation of the calls of one stream of session events (a session's, or one
/// child's), for a front end: the logged one, else what the tools say.
#[derive(Debug, Clone)]
pub struct Presenter {
    tools: Arc<ToolRegistry>,
    /// Calls logged without a presentation (an older log): their results are summarised by
    /// the tools too. Calls that carry one need nothing kept.
    unlogged: HashMap<String, (String, String)>,
}

impl Default for Presenter {
    fn default() -> Self {
        Presenter::new(None)
    }
}

impl Presenter {
    /// A presenter asking `tools` (a session's, e.g. [`crate::AgentHandle::tools`]) about
    /// unlogged calls, and for tools it does not hold, the tools every session has
    /// ([`ToolRegistry::standard`]); with `None`, only those.
    pub fn new(tools: Option<&ToolRegistry>) -> Self {
        Presenter {
            tools: Arc::new(Self::merged(tools)),
            unlogged: HashMap::new(),
        }
    }

    /// Asks `tools` from now on (see [`Presenter::new`]).
    pub fn set_tools(&mut self, tools: &ToolRegistry) {
        self.tools = Arc::new(Self::merged(Some(tools)));
    }

    /// The tools every session has ([`ToolRegistry::standard`]), built once.
    pub fn standard_tools() -> &'static ToolRegistry {
        static TOOLS: OnceLock<ToolRegistry> = OnceLock::new();
        TOOLS.get_or_init(ToolRegistry::standard)
    }

    /// How to show `call` where no session's tools are at hand (a child's call, as its parent
    /// sees it): as logged, else as the tools every session has say.
    pub fn shown(call: &ToolCall) -> ToolPresentation {
        Self::logged(call)
            .unwrap_or_else(|| Self::standard_tools().present(&call.name, &call.arguments))
    }

    fn merged(tools: Option<&ToolRegistry>) -> ToolRegistry {
        let mut merged = Self::standard_tools().clone();
        for (name, tool) in tools.into_iter().flat_map(|t| {
            t.names()
                .filter_map(|name| Some((name.to_string(), t.get(name).ok()?)))
                .collect::<Vec<_>>()
        }) {
            merged.unregister(&name);
            // Same name as the one just removed: cannot clash.
            let _registered = merged.register(tool);
        }
        merged
    }

    /// The presentation `call` was logged with, if any.
    pub fn logged(call: &ToolCall) -> Option<ToolPresentation> {
        ToolPresentation::deserialize(call.presentation.as_ref()?).ok()
    }

    /// How to show `call`.
    pub fn call(&mut self, call: &ToolCall) -> ToolPresentation {
        if let Some(logged) = Self::logged(call) {
            return logged;
        }
        self.unlogged.insert(
            call.call_id.clone(),
            (call.name.clone(), call.arguments.clone()),
        );
        self.tools.present(&call.name, &call.arguments)
    }

    /// The summary of `result`, when its tool gave one (or, for a call logged without a
    /// presentation, gives one now).
    pub fn summary(&mut self, result: &ToolResult) -> Option<ResultSummary> {
        if let Some(logged) = &result.summary {
            return ResultSummary::deserialize(logged).ok();
        }
        let (name, arguments) = self.unlogged.remove(result.call_id()?)?;
        let text = result.message.tool_result_text();
        self.tools.summarize(
            &name,
            &arguments,
            &ResultFacts {
                text: &text,
                meta: result.meta.as_ref(),
                error: result.error.as_ref().map(|e| e.code.as_str()),
            },
        )
    }

    /// `envelope` with what its log lacks filled in (a `tool/call`'s presentation, a
    /// `tool/result`'s summary), for front ends that pass events on as they are logged (the
    /// web UI's stream); `None` when nothing is missing.
    pub fn fill(&mut self, envelope: &Envelope) -> Option<Envelope> {
        let mut filled = match &envelope.event {
            Event::ToolCall(call) if call.presentation.is_none() => envelope.clone(),
            Event::ToolResult(result)
                if result.summary.is_none()
                    && result
                        .call_id()
                        .is_some_and(|id| self.unlogged.contains_key(id)) =>
            {
                envelope.clone()
            }
            _ => return None,
        };
        match &mut filled.event {
            Event::ToolCall(call) => call.presentation = logged(&self.call(call)),
            Event::ToolResult(result) => {
                result.summary = self.summary(result).and_then(|s| logged(&s));
            }
            _ => {}
        }
        Some(filled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::{ContentBlock, Message};
    use serde_json::json;

    fn call(id: &str, name: &str, arguments: Value, presentation: Option<Value>) -> ToolCall {
        ToolCall {
            turn: 1,
            step: 1,
            call_id: id.into(),
            name: name.into(),
            arguments: arguments.to_string(),
            presentation,
        }
    }

    fn result(id: &str, meta: Value, summary: Option<Value>) -> ToolResult {
        ToolResult {
            turn: 1,
            step: 1,
            message: Message::tool_result("m", id, vec![ContentBlock::text("out")], false),
            error: None,
            meta: Some(meta),
            summary,
        }
    }

    #[test]
    fn logged_presentations_win_and_older_logs_ask_the_tools() {
        let mut presenter = Presenter::default();
        // As logged: taken as it is, whatever the tools would say now.
        let mcp = ToolPresentation::new("github · create_issue").subject("bug");
        let shown = presenter.call(&call("c1", "bash", json!({}), logged(&mcp)));
        assert_eq!(shown, mcp);
        let summary = presenter.summary(&result(
            "c1",
            json!({"exitCode": 3}),
            Some(json!({"text": "custom"})),
        ));
        assert_eq!(summary.map(|s| s.text).as_deref(), Some("custom"));
        // A result of a logged call without a summary: the tool had none to give.
        assert_eq!(
            presenter.summary(&result("c1", json!({"exitCode": 3}), None)),
            None
        );

        // An older log: the tools present the call and summarise its result.
        let old = call("c2", "bash", json!({"command": "ls"}), None);
        assert_eq!(presenter.call(&old).subject.as_deref(), Some("$ ls"));
        let summary = presenter.summary(&result("c2", json!({"exitCode": 0}), None));
        assert_eq!(summary.map(|s| s.text).as_deref(), Some("exit 0"));
        // An unknown tool is shown by its name.
        let odd = call("c3", "mystery", json!({"x": 1}), None);
        assert_eq!(presenter.call(&odd), ToolPresentation::new("mystery"));
    }

    #[test]
    fn the_sessions_tools_come_first() {
        let mut tools = ToolRegistry::new();
        let _ = tools.register(Arc::new(dsh_tools::GrepTool::default()));
        let mut presenter = Presenter::new(Some(&tools));
        // Its own, and the standard ones besides.
        let grep = presenter.call(&call("c1", "grep", json!({"pattern": "x"}), None));
        assert_eq!(grep.subject.as_deref(), Some("x"));
        let read = presenter.call(&call("c2", "read", json!({"file_path": "a"}), None));
        assert_eq!(read.subject.as_deref(), Some("a"));
    }

    #[test]
    fn fill_adds_only_what_the_log_lacks() {
        let mut presenter = Presenter::default();
        let old = Envelope::new(Event::ToolCall(call(
            "c1",
            "read",
            json!({"file_path": "a"}),
            None,
        )));
        let filled = presenter.fill(&old).map(|e| e.event);
        let Some(Event::ToolCall(filled)) = filled else {
            panic!("not filled: {filled:?}");
        };
        assert_eq!(
            filled.presentation.as_ref().and_then(|p| p.get("subject")),
            Some(&json!("a"))
        );
        let done = Envelope::new(Event::ToolResult(result(
            "c1",
            json!({"linesShown": 2}),
            None,
        )));
        let Some(Event::ToolResult(done)) = presenter.fill(&done).map(|e| e.event) else {
            panic!("no summary filled");
        };
        assert_eq!(
            done.summary,
            Some(json!({"text": "2 lines read", "subject": "a"}))
        );
        // Nothing missing: nothing to fill.
        let new = Envelope::new(Event::ToolCall(call(
            "c2",
            "read",
            json!({}),
            Some(json!({"title": "read"})),
        )));
        assert!(presenter.fill(&new).is_none());
        let new_result = Envelope::new(Event::ToolResult(result("c2", json!({}), None)));
        assert!(presenter.fill(&new_result).is_none());
    }
}
