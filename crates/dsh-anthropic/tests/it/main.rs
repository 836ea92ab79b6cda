//! Integration tests of dsh-anthropic: cancellation and secrets, conversations, faults, decoder
//! fuzzing, and the web search of dsh's `web_search` tool.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cancel_and_secrets;
mod common;
mod conversation;
mod faults;
mod fuzz_props;
mod images;
mod web_search;
