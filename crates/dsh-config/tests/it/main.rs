//! Integration tests of dsh-config: configuration files, MCP server entries, reply timeout, trust,
//! web_fetch and search tool settings.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents_config;
mod config;
mod config_dirs;
mod mcp_config;
mod profiles;
mod reply_timeout;
mod sandbox_config;
mod search_tools_config;
mod trust;
mod tui_config;
mod web_fetch_config;
mod web_search_config;
