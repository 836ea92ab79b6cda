//! dsh as an Agent Client Protocol (ACP) agent: editors such as Zed start `dsh acp` and talk
//! JSON-RPC 2.0 over its stdin and stdout (one JSON object per line).
//!
//! Supported: `initialize` (protocol version 1, `loadSession`), `session/new`, `session/load`
//! (resume from our log, conversation replayed as `session/update`), `session/prompt` with
//! streamed `session/update` notifications (message and thought chunks as deltas arrive,
//! `tool_call` / `tool_call_update` with status and content, diffs for file changes, `plan`
//! from `todo_write`), `session/cancel`, `session/request_permission` for the approval
//! questions of the safety policy and for `ask_user_question` choices (the session's
//! `dsh_protocol::Interactions`, carried to the client), the permission presets as session modes (`modes`, `session/set_mode`,
//! `current_mode_update`), and slash commands (`available_commands_update`; `/compact`,
//! `/permission`, and the session's user-invocable skills typed as `/name arguments`), and the
//! live progress of subagents as `tool_call_update`s on the card of the call that waits for
//! them (docs/acp.md, "Subagents").
//!
//! Building agents is not this crate's business: [`serve`] gets a
//! [`dsh_runtime::SessionFactory`], so the `dsh` binary builds them exactly as `dsh run` does
//! and tests can build them as they need.
//!
//! This crate renders and transports the session protocol (docs/protocol.md): tool calls are
//! the protocol's cards, requests become `dsh_protocol::Op`s for the session's
//! `SessionControl`.
//!
//! The wire protocol is implemented here directly rather than with the `agent-client-protocol`
//! crate; `docs/decisions/0002-acp-wire-protocol.md` says why.

#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod approvals;
mod broker;
mod children;
mod commands;
mod modes;
mod plan;
mod questions;
mod rpc;
mod server;
mod session;
mod setup;
mod updates;

pub use approvals::{ALLOW_ALWAYS, ALLOW_ONCE, ALLOW_SESSION, REJECT_ONCE};
pub use commands::{COMPACT, PERMISSION};
pub use modes::MODES;
pub use questions::{ANSWER_PREFIX, DECLINE_QUESTION, FREE_TEXT_UNAVAILABLE};
pub use rpc::{
    parse_line, Incoming, Outgoing, RpcError, AUTH_REQUIRED, INTERNAL_ERROR, INVALID_PARAMS,
    INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};
pub use server::serve;
pub use setup::{TRUST_NOT_NOW, TRUST_WORKSPACE};
pub use updates::UpdateMapper;

/// The ACP protocol version this server speaks (and answers `initialize` with, whatever the
/// client asked for; a client that cannot speak it disconnects).
pub const PROTOCOL_VERSION: u64 = 1;
