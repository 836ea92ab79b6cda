//! Integration tests of dsh-agent (all but the scenario runner, scenarios.rs, and long_run.rs, see
//! there): approvals, billing, compaction, context, extensions, faults, hooks (both dialects), jobs and questions,
//! the loop, prefix stability, protected paths, safety, subagents (scripted in-process in
//! subagents.rs, over HTTP in subagents_http.rs, their shared setup in delegation.rs), user commands, steering and
//! cancelling while a tool call blocks (blocking_tools.rs).
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod accounting;
#[path = "loop.rs"]
mod agent_loop;
mod approval_rules;
mod billed_input;
mod blocking_tools;
mod compaction;
mod context;
mod delegation;
mod extensions;
mod fault_matrix;
mod hooks;
mod hooks_dialects;
mod jobs_and_questions;
mod prefix_stability;
mod protected_paths;
mod safety;
mod subagents;
mod subagents_http;
mod user_commands;
