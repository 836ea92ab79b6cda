//! Integration tests of dsh-session: crash safety, recorded fixtures, fuzzing of the loader,
//! projection, the store, the syncs before the first model call.
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod atif;
mod catalog;
mod catalog_watch;
mod crash;
mod dsh_logs;
mod fixtures;
mod fuzz_props;
mod images;
mod projection;
mod store;
mod syncs;
mod usage;
