//! The MCP client (docs/mcp.md): servers configured under `[mcp.servers.<name>]` (stdio child
//! processes or streamable-HTTP endpoints) offer their tools to the model as
//! `mcp__<server>__<tool>`.
//!
//! - [`McpHub`] owns the connections. It runs them on its own small runtime, so the synchronous
//!   extension points and any front end's runtime can use it. Servers are started, and their
//!   tools listed, the first time the tools are needed ([`McpHub::start`], in parallel, each
//!   bounded by its `startup_timeout_secs`); a server that dies is restarted on its next call,
//!   with exponential backoff after failed restarts.
//! - [`McpTools`] is the extension that contributes the tools to an agent, and asks the
//!   approver before calls that may change something ([`approval_reason`]: by preset, the
//!   tool's `readOnlyHint` and the server's `trust`; docs/mcp.md, "Approvals").
//! - A stdio server's stderr goes to `<log dir>/mcp-<server>.log`.
//!
//! MCP servers run outside dsh's sandbox, with the user's rights; none is configured by default.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod hub;
mod tool;

pub use hub::{McpHub, McpStartError};
pub use tool::{approval_reason, McpTool, McpTools, MCP_TOOL_PREFIX};
