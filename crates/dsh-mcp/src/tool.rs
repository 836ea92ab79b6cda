//! MCP tools as dsh tools (`mcp__<server>__<tool>`), and what the agent's extension for them
//! asks (the composition root wraps [`McpTools`] in that extension).

use std::sync::Arc;

use dsh_tools::{
    PermissionPreset, Tool, ToolContext, ToolError, ToolErrorCode, ToolKind, ToolOutput,
    ToolPresentation,
};
use futures::future::BoxFuture;
use rmcp::model::CallToolResult;
use serde_json::Value;

use crate::hub::McpHub;
use crate::server::McpTrust;

/// Prefix of every MCP tool name.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// Longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;

/// Characters providers accept in tool names; others become `_`.
fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One tool of one server, as the model sees it.
pub struct McpTool {
    hub: Arc<McpHub>,
    server: String,
    tool: String,
    name: String,
    description: String,
    parameters: Value,
    /// How its calls are shown (docs/mcp.md, "Tool cards").
    presentation: ToolPresentation,
}

impl McpTool {
    /// The tool `info` of `server`, reached through `hub`.
    pub fn new(hub: Arc<McpHub>, server: &str, info: &rmcp::model::Tool) -> Self {
        let mut name = format!(
            "{MCP_TOOL_PREFIX}{}__{}",
            sanitize(server),
            sanitize(&info.name)
        );
        name.truncate(MAX_TOOL_NAME);
        let summary = info
            .description
            .as_deref()
            .or(info.title.as_deref())
            .unwrap_or("(no description)");
        let description = format!(
            "{summary}\n\n(Tool `{}` of the MCP server `{server}`. It runs outside dsh's sandbox. \
             Failures come back as `Error: ...`.)",
            info.name
        );
        McpTool {
            hub,
            server: server.to_string(),
            tool: info.name.to_string(),
            name,
            description,
            parameters: Value::Object((*info.input_schema).clone()),
            presentation: presentation(server, info),
        }
    }
}

/// How calls of the tool `info` of `server` are shown: `server · tool`, or `server · title`
/// when the server gives the tool a title (its annotations', else its own); kind `read` for a
/// tool that declares itself read-only; its arguments as the subject.
fn presentation(server: &str, info: &rmcp::model::Tool) -> ToolPresentation {
    let annotations = info.annotations.as_ref();
    let title = annotations
        .and_then(|a| a.title.as_deref())
        .or(info.title.as_deref())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(&info.name);
    let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
    ToolPresentation::new(format!("{server} · {title}")).kind(if read_only {
        ToolKind::Read
    } else {
        ToolKind::Other
    })
}

/// The text the model gets for a tool result.
fn result_text(result: &CallToolResult) -> String {
    let mut parts = Vec::new();
    for content in &result.content {
        let value = serde_json::to_value(content).unwrap_or(Value::Null);
        let kind = value["type"].as_str().unwrap_or("unknown");
        match kind {
            "text" => parts.push(value["text"].as_str().unwrap_or_default().to_string()),
            "resource" if value["resource"]["text"].is_string() => parts.push(
                value["resource"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
            "resource_link" => parts.push(format!(
                "[resource link: {}]",
                value["uri"].as_str().unwrap_or_default()
            )),
            other => parts.push(format!(
                "[{other} content ({}) omitted: dsh passes MCP text only]",
                value["mimeType"].as_str().unwrap_or("unknown type")
            )),
        }
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn present(&self, _args: &Value) -> ToolPresentation {
        self.presentation.clone()
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let arguments = match args {
                Value::Object(map) => Some(map),
                Value::Null => None,
                _ => {
                    return Err(ToolError::invalid_args(
                        "the arguments must be a JSON object",
                    ))
                }
            };
            // The server's progress reports go to the call's card (`tool/progress`).
            let reporter = ctx.clone();
            let progress: dsh_tools::ProgressSink =
                Arc::new(move |report| reporter.report_progress(report));
            let result = self
                .hub
                .call(
                    &self.server,
                    &self.tool,
                    arguments,
                    ctx.cancel().clone(),
                    Some(progress),
                )
                .await?;
            let text = result_text(&result);
            if result.is_error == Some(true) {
                return Err(ToolError::new(
                    ToolErrorCode::Io,
                    if text.is_empty() {
                        "the MCP tool reported an error".to_string()
                    } else {
                        text
                    },
                ));
            }
            Ok(ToolOutput::text(text).with_summary(format!("{} ({})", self.tool, self.server)))
        })
    }
}

/// What the approval policy knows about one offered tool.
struct Offered {
    tool: Arc<dyn Tool>,
    server: String,
    remote_name: String,
    read_only_hint: bool,
}

/// Every listed MCP tool, and the approval policy of their calls (docs/mcp.md, "Approvals"):
/// what the agent's MCP extension offers and asks. Listing the tools the first time starts the
/// servers (see [`McpHub::start`]).
pub struct McpTools {
    hub: Arc<McpHub>,
    tools: std::sync::OnceLock<Vec<Offered>>,
}

impl McpTools {
    /// Offers the tools of `hub`'s servers.
    pub fn new(hub: Arc<McpHub>) -> Self {
        McpTools {
            hub,
            tools: std::sync::OnceLock::new(),
        }
    }

    fn offered(&self) -> &[Offered] {
        self.tools.get_or_init(|| {
            let hub = Arc::clone(&self.hub);
            let listed = blocking(move || hub.tools());
            listed
                .iter()
                .map(|(server, info)| Offered {
                    tool: Arc::new(McpTool::new(Arc::clone(&self.hub), server, info)),
                    server: server.clone(),
                    remote_name: info.name.to_string(),
                    read_only_hint: info
                        .annotations
                        .as_ref()
                        .and_then(|a| a.read_only_hint)
                        .unwrap_or(false),
                })
                .collect()
        })
    }
}

/// Why a call of an MCP tool needs the user's approval under `preset`, or `None` when it may
/// run: `danger-full-access` asks nothing; a tool that declares `readOnlyHint` runs unless the
/// server's trust is `none`; under `workspace-write` a server trusted with `all` runs. Under
/// `ask` (every change approved first) only tools declaring `readOnlyHint` run unasked, as
/// under `read-only`: a server's `trust = "all"` does not lift the question there.
pub fn approval_reason(
    preset: PermissionPreset,
    trust: McpTrust,
    read_only_hint: bool,
    server: &str,
    tool: &str,
) -> Option<String> {
    let runs = match preset {
        PermissionPreset::DangerFullAccess => true,
        PermissionPreset::WorkspaceWrite => {
            trust == McpTrust::All || (read_only_hint && trust != McpTrust::None)
        }
        PermissionPreset::ReadOnly | PermissionPreset::Ask => {
            read_only_hint && trust != McpTrust::None
        }
    };
    if runs {
        return None;
    }
    let why = if read_only_hint {
        format!("the server `{server}` is configured with trust = \"none\"")
    } else {
        "it does not declare itself read-only (readOnlyHint)".to_string()
    };
    Some(format!(
        "MCP tool `{tool}` of server `{server}` runs outside dsh's sandbox and {why}; the session is {preset}"
    ))
}

impl McpTools {
    /// The tools to offer (the servers start the first time).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.offered().iter().map(|o| Arc::clone(&o.tool)).collect()
    }

    /// Why a call of the tool named `name` needs the user's approval under `preset`
    /// ([`approval_reason`]); `None` when it may run or is no MCP tool of this set.
    pub fn approval(&self, name: &str, preset: PermissionPreset) -> Option<String> {
        if !name.starts_with(MCP_TOOL_PREFIX) {
            return None;
        }
        let offered = self.offered().iter().find(|o| o.tool.name() == name)?;
        approval_reason(
            preset,
            self.hub.trust(&offered.server),
            offered.read_only_hint,
            &offered.server,
            &offered.remote_name,
        )
    }
}

/// Runs blocking work without stalling the other tasks of a multi-threaded runtime.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(value: Value) -> rmcp::model::Tool {
        serde_json::from_value(value).unwrap_or_else(|err| panic!("not a tool: {err}"))
    }

    #[test]
    fn calls_show_the_server_and_the_tools_title() {
        let schema = serde_json::json!({"type": "object"});
        let plain = info(serde_json::json!({"name": "create_issue", "inputSchema": schema}));
        assert_eq!(
            presentation("github", &plain),
            ToolPresentation::new("github · create_issue")
        );
        let titled = info(serde_json::json!({
            "name": "search_code", "title": "Search", "inputSchema": schema,
            "annotations": {"title": "Search code", "readOnlyHint": true},
        }));
        let shown = presentation("github", &titled);
        assert_eq!(shown.title, "github · Search code");
        assert_eq!(shown.kind, ToolKind::Read);
        let own_title = info(serde_json::json!({
            "name": "x", "title": "Do X", "inputSchema": schema,
        }));
        assert_eq!(presentation("srv", &own_title).title, "srv · Do X");
    }

    #[test]
    fn the_approval_table() {
        use McpTrust::{All, None as Distrusted, ReadOnly};
        use PermissionPreset::{Ask, DangerFullAccess, ReadOnly as Ro, WorkspaceWrite};
        // (preset, trust, readOnlyHint) -> asks?
        let table = [
            (Ro, Distrusted, true, true),
            (Ro, Distrusted, false, true),
            (Ro, ReadOnly, true, false),
            (Ro, ReadOnly, false, true),
            (Ro, All, true, false),
            (Ro, All, false, true),
            (Ask, Distrusted, true, true),
            (Ask, Distrusted, false, true),
            (Ask, ReadOnly, true, false),
            (Ask, ReadOnly, false, true),
            (Ask, All, true, false),
            (Ask, All, false, true),
            (WorkspaceWrite, Distrusted, true, true),
            (WorkspaceWrite, Distrusted, false, true),
            (WorkspaceWrite, ReadOnly, true, false),
            (WorkspaceWrite, ReadOnly, false, true),
            (WorkspaceWrite, All, true, false),
            (WorkspaceWrite, All, false, false),
            (DangerFullAccess, Distrusted, false, false),
            (DangerFullAccess, ReadOnly, false, false),
            (DangerFullAccess, All, false, false),
        ];
        for (preset, trust, hint, asks) in table {
            let reason = approval_reason(preset, trust, hint, "srv", "tool");
            assert_eq!(reason.is_some(), asks, "{preset} {trust:?} hint={hint}");
            if let Some(reason) = reason {
                assert!(reason.contains("`tool` of server `srv`"), "{reason}");
                assert!(reason.contains(preset.as_str()), "{reason}");
            }
        }
    }
}
