//! Integration tests of dsh-server over real HTTP on loopback with the fake provider as the
//! model: the API and its event stream, children (subagents) live and stored, tool approvals,
//! session controls, the view events of the stream (docs/protocol.md), the sign-in gate, workspace trust, and the web UI driven by headless Chromium (skipped, passing, when no
//! `chromium` is on PATH; see browser.rs).
//!
//! Every integration test file of this crate is a module of this one binary, so the crate links
//! one test executable instead of one per file (docs/PERFORMANCE.md, "Test binaries"). The
//! shared server harness is `support`.

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod api;
mod approvals;
mod browser;
mod children;
mod controls;
mod images;
mod plan_review;
mod security;
mod trust;
mod view;
mod web_polish;
