//! dsh as an Agent Client Protocol (ACP) agent: editors such as Zed start `dsh acp` and talk
//! JSON-RPC 2.0 over its stdin and stdout (one JSON object per line).
//!
//! Supported: `initialize` (protocol version 1, `loadSession`), `session/new`, `session/load`
//! (resume from our log, conversation replayed as `session/update`), `session/prompt` with
//! streamed `session/update` notifications (message and thought chunks as deltas arrive,
//! `tool_call` / `tool_call_update` with status and content, diffs for file changes, `plan`
//! from `todo_write`), `session/cancel`, `session/request_permission` for the approval
//! questions of the safety policy ([`AcpApprover`]) and for `ask_user_question` choices
//! ([`AcpAsker`]), the permission presets as session modes (`modes`, `session/set_mode`,
//! `current_mode_update`), and slash commands (`available_commands_update`; `/compact`,
//! `/permission`, and the session's user-invocable skills typed as `/name arguments`).
//!
//! Building agents is the front end's business: [`serve`] gets an [`AgentFactory`], so the
//! `dsh` binary builds them exactly as `dsh run` does and tests can build them as they need.
//!
//! The wire protocol is implemented here directly rather than with the `agent-client-protocol`
//! crate; `docs/decisions/0002-acp-wire-protocol.md` says why.

mod approver;
mod asker;
mod commands;
mod modes;
mod rpc;
mod server;
mod session;
mod updates;

use std::path::PathBuf;

pub use approver::{AcpApprover, ALLOW_ALWAYS, ALLOW_ONCE, ALLOW_SESSION, REJECT_ONCE};
pub use asker::{AcpAsker, ANSWER_PREFIX, DECLINE_QUESTION, FREE_TEXT_UNAVAILABLE};
pub use commands::{COMPACT, PERMISSION};
pub use modes::MODES;
pub use rpc::{
    parse_line, Incoming, Outgoing, RpcError, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, PARSE_ERROR,
};
pub use server::serve;
pub use updates::UpdateMapper;

/// The ACP protocol version this server speaks (and answers `initialize` with, whatever the
/// client asked for; a client that cannot speak it disconnects).
pub const PROTOCOL_VERSION: u64 = 1;

/// What a client asked to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// The session's working directory (absolute, as ACP requires).
    pub cwd: PathBuf,
    /// The session to resume (`session/load`), or `None` for a new one.
    pub resume: Option<String>,
}

/// An agent ready to serve one ACP session.
pub struct OpenedAgent {
    /// The agent; the server sets its approver.
    pub agent: dsh_agent::Agent,
    /// Dropped when the session ends (extension guards and the like).
    pub keep_alive: Box<dyn std::any::Any + Send>,
    /// For a resumed session, its log as it was when opened (replayed to the client); empty
    /// for a new one.
    pub history: Vec<dsh_session::Envelope>,
}

/// Builds the agents of ACP sessions. An error is reported to the client as a JSON-RPC
/// internal error carrying the message, so it should say what to fix.
pub trait AgentFactory: Send + Sync {
    /// Opens a new or resumed session for `request`.
    fn open(&self, request: &OpenRequest) -> Result<OpenedAgent, String>;
}
