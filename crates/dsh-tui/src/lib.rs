//! The interactive terminal UI of dsh (docs/tui.md): a conversation view that streams Markdown,
//! reasoning and tool cards; a multi-line composer whose draft survives turns and cancels;
//! queued and steering input; approval prompts; answers to `ask_user_question`; slash commands
//! with completion (the built-ins, `/permission` switching, and the extensions' commands such
//! as user-invocable skills); and a status line with model, effort, permission, context, cache
//! hits and cost.
//!
//! The crate is a front end over [`dsh_agent`]: it sends operations through an
//! [`dsh_agent::AgentHandle`] and renders the session events it subscribes to. Rendering is
//! pure ([`cards`], [`markdown`], [`view`]) and tested with ratatui's `TestBackend`; key
//! handling ([`app`]) returns actions instead of acting, and [`runtime`] connects both to the
//! terminal and the agent. The binary supplies a [`dsh_runtime::SessionFactory`] (its
//! `Runtime`) that builds agents the way `dsh run` does.

#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

pub mod app;
pub mod attach;
pub mod cards;
pub mod children;
pub mod commands;
pub mod composer;
pub mod finder;
pub mod highlight;
pub mod inline;
pub mod links;
pub mod markdown;
pub mod mentions;
pub mod notify;
pub mod pager;
pub mod question;
pub mod review;
pub mod rewind;
pub mod runtime;
pub mod status;
pub mod terminal;
pub mod transcript;
pub mod view;
pub mod worktree;
pub mod wrap;

pub use app::{Action, App, StatusInfo};
pub use dsh_protocol::{Card, CardState};
pub use runtime::{run, StartWith, TuiExit, TuiOptions};
pub use transcript::{Cell, Header, NoticeLevel, ToolCard, Transcript};
