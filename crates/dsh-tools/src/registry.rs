//! Tools by name, and one call from raw arguments to result.

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_llm::{ContentBlock, ToolSchema};
use serde_json::Value;

use crate::args::parse_raw_arguments;
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation};
use crate::tool::Tool;

/// How long [`ToolRegistry::invoke`] waits, after cancellation, for a tool to stop by itself.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// A registration that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRegistryError {
    /// A tool with that name is already registered.
    #[error("a tool named `{0}` is already registered")]
    DuplicateName(String),
    /// The name is not something a model can call (empty, or not `[A-Za-z0-9_-]`, max 64).
    #[error("`{0}` is not a valid tool name (1-64 characters of A-Z, a-z, 0-9, _ and -)")]
    InvalidName(String),
}

/// Tools by name. Iteration and [`ToolRegistry::schemas`] are sorted by name, so the tool
/// list sent to the model is byte-stable (docs/agent.md, "Context discipline").
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the built-in tools (see [`crate::builtin_tools`]).
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        for tool in crate::builtin::builtin_tools() {
            // Built-in names are distinct valid literals; a clash would be a bug caught by the
            // `builtins_register` test, so the error cannot occur here.
            let _registered = registry.register(tool);
        }
        registry
    }

    /// Every tool of this crate with default settings: the built-ins, `read_image`,
    /// `ask_user_question`, `web_fetch`, `web_search` and the job tools. For presenting logged
    /// calls ([`ToolRegistry::present`]) where a session's own tools are not at hand (a stored
    /// session, a log written before calls carried their presentation); never for running them.
    pub fn standard() -> Self {
        let mut registry = Self::with_builtins();
        let extra: Vec<Arc<dyn Tool>> = vec![
            Arc::new(crate::ReadImageTool),
            Arc::new(crate::AskUserQuestionTool),
            Arc::new(crate::WebFetchTool::new(crate::WebFetchSettings::default())),
            Arc::new(crate::WebSearchTool::for_presentation()),
        ];
        for tool in extra.into_iter().chain(crate::job_tools()) {
            // Distinct names, like the built-ins'.
            let _registered = registry.register(tool);
        }
        registry
    }

    /// Adds `tool` under its name. A name can be registered once; names must be 1-64
    /// characters of `[A-Za-z0-9_-]` (what providers accept).
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        let name = tool.name().to_string();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ToolRegistryError::InvalidName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(ToolRegistryError::DuplicateName(name));
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// Removes the tool called `name`, returning it.
    pub fn unregister(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.remove(name)
    }

    /// The tool called `name`, or `UNKNOWN_TOOL` naming the available tools.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Tool>, ToolError> {
        self.tools.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.names().collect();
            ToolError::new(
                ToolErrorCode::UnknownTool,
                format!(
                    "unknown tool `{name}`; available tools: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Number of registered tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The schemas of all tools, sorted by name.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools.values().map(|tool| tool.schema()).collect()
    }

    /// How a call of `name` with the raw `arguments` is shown ([`Tool::present`]); a tool not
    /// registered here gets the generic presentation (its name, the arguments as subject).
    pub fn present(&self, name: &str, arguments: &str) -> ToolPresentation {
        match self.tools.get(name) {
            Some(tool) => tool.present(&parse_raw_arguments(arguments).unwrap_or(Value::Null)),
            None => ToolPresentation::new(name),
        }
    }

    /// What a call of `name` with the raw `arguments` would change ([`Tool::preview`]); `None`
    /// for a tool not registered here or one that gives no preview.
    pub fn preview(&self, name: &str, arguments: &str) -> Option<crate::ChangePreview> {
        let tool = self.tools.get(name)?;
        tool.preview(&parse_raw_arguments(arguments).ok()?)
    }

    /// The summary of a result of that call ([`Tool::summarize`]); `None` for a tool not
    /// registered here.
    pub fn summarize(
        &self,
        name: &str,
        arguments: &str,
        result: &ResultFacts<'_>,
    ) -> Option<ResultSummary> {
        let tool = self.tools.get(name)?;
        tool.summarize(
            &parse_raw_arguments(arguments).unwrap_or(Value::Null),
            result,
        )
    }

    /// Runs one call from its raw argument string: looks the tool up (`UNKNOWN_TOOL`), parses
    /// the arguments (blank means `{}`, bad JSON is `INVALID_ARGS`), then executes it under the
    /// tool's declared timeout (`TOOL_TIMEOUT`; the call's future is dropped, which stops its
    /// work) and `ctx`'s cancel token: once it fires the tool gets 3 s to return by itself
    /// (normally `ABORTED`), after which its future is dropped and the answer is `ABORTED`.
    ///
    /// Policy (approval), logging, parallelism and post-processing belong to the caller's
    /// pipeline; this is the innermost step of it.
    pub async fn invoke(
        &self,
        name: &str,
        raw_arguments: &str,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let tool = self.get(name)?;
        let args = parse_raw_arguments(raw_arguments)?;
        let run = tool.execute(args, ctx);
        let timed = async {
            match tool.timeout() {
                Some(limit) => tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
                    Err(ToolError::new(
                        ToolErrorCode::ToolTimeout,
                        format!(
                            "{name} did not finish within its {} ms timeout and was stopped",
                            limit.as_millis()
                        ),
                    ))
                }),
                None => run.await,
            }
        };
        let mut timed = std::pin::pin!(timed);
        tokio::select! {
            result = &mut timed => result,
            _ = ctx.cancel().cancelled() => {
                // Give the tool the chance to stop its own work cleanly (it sees the same
                // token); past the grace its future is dropped, which stops it hard.
                match tokio::time::timeout(CANCEL_GRACE, &mut timed).await {
                    Ok(result) => result,
                    Err(_) => Err(ToolError::new(
                        ToolErrorCode::Aborted,
                        format!("{name} was cancelled"),
                    )),
                }
            }
        }
    }
}

/// The `tool-result` block answering call `call_id` with `result`: the output's content, or
/// one text block `Error: <message>` with `isError: true`.
pub fn tool_result_block(call_id: &str, result: &Result<ToolOutput, ToolError>) -> ContentBlock {
    match result {
        Ok(output) => ContentBlock::ToolResult {
            tool_call_id: call_id.to_string(),
            content: output.content.clone(),
            is_error: Some(false),
        },
        Err(err) => ContentBlock::ToolResult {
            tool_call_id: call_id.to_string(),
            content: vec![ContentBlock::text(err.result_text())],
            is_error: Some(true),
        },
    }
}
