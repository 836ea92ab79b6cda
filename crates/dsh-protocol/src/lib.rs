//! The session protocol (docs/protocol.md): what every front end (`dsh run`, the TUI, the web
//! UI, ACP) speaks to a session, so that each shows and does the same.
//!
//! - In: [`Op`]s, carried out by the session's [`SessionControl`].
//! - Out: [`ViewEvent`]s, made by a [`ViewProjector`] from the session log (live from the
//!   agent's subscription, or from a stored log after resume: the same events either way).
//! - Between: [`Interactions`], the session's one approval and question broker, whose
//!   [`Policy`] says whether anybody can answer. Front ends transport its questions and answers.
//!
//! Front ends render view events and transport operations; none of them decides what a tool
//! card's state is, how a turn's end is classified, or what an approval answer does.

#![warn(clippy::too_many_lines, missing_docs, unreachable_pub)]

mod interactions;
mod ops;
pub mod undo;
mod view;

pub use interactions::{AnswerError, Interactions, Policy, Reply, Waiting, MAX_ANSWER_CHARS};
pub use ops::{ModelLookup, Op, OpError, SessionControl};
pub use view::{Card, CardState, EndState, GoalView, ViewEvent, ViewProjector};
