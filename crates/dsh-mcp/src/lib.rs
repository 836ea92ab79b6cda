//! The MCP client (docs/mcp.md): servers configured under `[mcp.servers.<name>]` (stdio child
//! processes or streamable-HTTP endpoints) offer their tools to the model as
//! `mcp__<server>__<tool>`.
//!
//! - [`McpHub`] owns the connections. It runs them on its own small runtime, so the synchronous
//!   extension points and any front end's runtime can use it. Servers are started, and their
//!   tools listed, the first time the tools are needed ([`McpHub::start`], in parallel, each
//!   bounded by its `startup_timeout_secs`); a server that dies is restarted on its next call,
//!   with exponential backoff after failed restarts.
//! - [`McpTools`] holds the tools the composition root's extension contributes to an agent, and
//!   says which calls to ask the approver about ([`approval_reason`]: by preset, the tool's
//!   `readOnlyHint` and the server's `trust`; docs/mcp.md, "Approvals").
//! - The servers are described by [`McpServerConfig`] and a stdio server's command passes a
//!   [`CommandGate`], both given by the composition root: this crate reads no configuration.
//! - A stdio server's stderr goes to `<log dir>/mcp-<server>.log`.
//! - [`oauth`]: the login of an HTTP server that asks for OAuth (`dsh mcp login`), stored
//!   per server and sent, refreshed when needed, only to the origin it was made for
//!   ([`McpHub::set_oauth_dir`]).
//!
//! MCP servers run outside dsh's sandbox, with the user's rights; none is configured by default.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod hub;
pub mod oauth;
mod server;
mod tool;

pub use hub::{McpHub, McpStartError};
pub use server::{CommandGate, McpServerConfig, McpTransport, McpTrust};
pub use tool::{approval_reason, McpTool, McpTools, MCP_TOOL_PREFIX};
