//! Integration tests of dsh-agent (all but the scenario runner, scenarios.rs, and long_run.rs, see
//! there): approvals, billing, compaction, context, extensions, faults, hooks, jobs and questions,
//! the loop, prefix stability, protected paths, safety, subagents, user commands.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

#[path = "loop.rs"]
mod agent_loop;
mod approval_rules;
mod billed_input;
mod compaction;
mod context;
mod extensions;
mod fault_matrix;
mod hooks;
mod jobs_and_questions;
mod prefix_stability;
mod protected_paths;
mod safety;
mod subagents;
mod user_commands;
