//! Integration tests of dsh-tui: key handling of the prompts the runtime opens (keys.rs) and
//! rendering snapshots with ratatui's `TestBackend` (render.rs, snapshots in `snapshots/`).
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries").

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod children;
mod keys;
mod links;
mod mentions;
mod plan_review;
mod polish;
mod render;
mod resume;
mod support;
mod truthful;
mod undo_diff;
