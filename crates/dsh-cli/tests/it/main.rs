//! Integration tests of the `dsh` binary, each driving the real executable: the ACP fixture
//! runner, approvals, configuration and models, opt-in tools, cancellation, `dsh run`, safety
//! (secrets and sandbox escapes), sessions, refused starts (table-driven), workspace trust, the
//! TUI in a pseudo-terminal and `dsh web`. `common` holds the helpers they share; `tidy` checks
//! the crate graph and the source tree against docs/ARCHITECTURE.md instead.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries");
//! `cargo test -p dsh-cli --test it <module>::` runs one file's tests.

// All of this crate is test code: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod accounting_cli;
mod acp_fixtures;
mod add_dir_escapes;
mod approvals_cli;
mod atif_cli;
mod budgets;
mod common;
mod config_cli;
mod custom_commands_cli;
mod doctor_cli;
mod dsh_logs;
mod file_gate_escapes;
mod four_views;
mod goals_cli;
mod headless_cli;
mod mcp_cli;
mod mcp_server_cli;
mod oauth_server;
mod opt_in_tools;
mod other_tools_cli;
mod output_schema_cli;
mod plan_cli;
mod plant_escapes;
mod project_command_escapes;
mod readme;
mod review_cli;
mod rewind_cli;
mod run_cancel;
mod run_cli;
mod run_jobs;
mod safety_cli;
mod sandbox_root_escapes;
mod secret_escapes;
mod sessions_cli;
mod shared_prefix;
mod start_errors;
mod stream_input_cli;
mod tidy;
mod trust_cli;
mod tui_children;
mod tui_commands;
mod tui_harness;
mod tui_inline;
mod tui_notify;
mod tui_pty;
mod tui_review;
mod tui_rewind;
mod tui_truthful;
mod version_cli;
mod view_cli;
mod web_cli;
mod worktree_cli;
