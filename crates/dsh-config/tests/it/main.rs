//! Integration tests of dsh-config: configuration files, MCP server entries, reply timeout, trust,
//! web_fetch settings.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

mod config;
mod mcp_config;
mod reply_timeout;
mod trust;
mod web_fetch_config;
