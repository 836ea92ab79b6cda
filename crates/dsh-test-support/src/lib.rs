//! Test support for dsh: a scripted fake provider and replay of recorded sessions.
//!
//! - [`FakeProvider`] serves DeepSeek's chat-completions and Anthropic's Messages wire formats
//!   on `127.0.0.1` (random port) from a script of [`ScriptedReply`]s, records every request,
//!   and injects faults: error statuses with headers, dropped connections, missing terminators
//!   (`[DONE]` / `message_stop`), malformed lines, stalls, keep-alive comments, odd finish
//!   reasons, empty completions, and 400s for request fields an endpoint does not accept.
//! - [`AnthropicReply`] builds Messages streams (`message_start` ... `message_stop`).
//! - [`ResponsesReply`] builds OpenAI Responses API streams (`response.created` ...
//!   `response.completed`), served on `/v1/responses`; only the Codex CLI comparison of
//!   `bench/run` uses it. [`FakeProvider::timings`] says when each request's first byte
//!   arrived and when its reply ended.
//! - [`FakeProvider::route`] serves replies by request content ([`RequestMatch`]: system
//!   prompt, first or last user message, tool set), so concurrent subagents get their own.
//! - [`SseReply`] builds streamed replies inline; [`render_chunks_as_sse`] renders any dsh
//!   chunk list as DeepSeek SSE bytes.
//! - [`RecordedSession`] loads a recorded dsh `session.jsonl` (and its optional
//!   `replay.override.json`) into calls, each a `Vec<dsh_llm::Chunk>`, and renders call k as
//!   reply k.
//! - [`provider_checks`]: checks every provider adapter's loopback tests share (collecting a
//!   call with a deadline, the well-formed chunk contract, failure codes of common faults,
//!   cancellation); [`fuzz`]: case counts and the stream-decoder driver of the fuzz targets.
//! - [`chunks`]: replies as dsh chunks (text, one tool call) for scripted adapters.
//! - [`fixture_runner`]: the loop of data-driven runners (every case runs, every failure is
//!   reported by name, one failure at the end), used by the scenario and ACP fixture runners.
//! - [`copy_dir`] copies a fixture folder; [`scratch_parent`] says where escape tests may put
//!   files that no sandbox leaves writable.
//! - [`process`]: pid files, liveness and polling for the "dies with dsh" tests, and starting
//!   an ignored test of the running binary as a helper process.
//! - [`tool_result_text`]: the text of a tool-result message, for assertions on logs.
//! - [`vendored_dsh_logs`]: every session log vendored from dsh under `fixtures/dsh/`, and the
//!   ones dsh refuses ([`EXPECTED_REFUSALS`]).
//! - `BlockingTool` / `BlockingGate` (feature `tools`): a tool whose calls block until the test
//!   releases them or they are cancelled, for cancel, steering and concurrency tests.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod anthropic;
#[cfg(feature = "tools")]
mod blocking;
pub mod chunks;
pub mod fixture_runner;
pub mod fuzz;
pub mod history;
// The shared test image; a failed `expect` there is a failed test.
#[allow(clippy::expect_used)]
pub mod images;
mod messages;
pub mod process;
// Assertions that run only inside adapter tests: a failed `expect` there is a failed test.
#[allow(clippy::expect_used)]
pub mod provider_checks;
mod recording;
mod render;
mod responses;
mod routes;
mod scratch;
mod script;
mod server;
mod vendored;
pub mod web_search;

use std::path::{Path, PathBuf};

pub use anthropic::{AnthropicReply, AnthropicUsage, FAKE_ANTHROPIC_MODEL};
#[cfg(feature = "tools")]
pub use blocking::{BlockingGate, BlockingTool, RELEASED_PREFIX};
pub use messages::tool_result_text;
pub use recording::{
    load_recorded_calls, parse_calls, parse_overrides, RecordedCall, RecordedSession,
    RecordingError, ReplayOverride,
};
pub use render::{render_chunks_as_sse, reply_for_call, sse_reply_from_chunks};
pub use responses::{ResponsesReply, FAKE_RESPONSES_MODEL};
pub use routes::RequestMatch;
pub use scratch::scratch_parent;
pub use script::{
    chunk_event, ScriptedReply, SseReply, SseStep, StreamEnd, WireUsage, DONE_EVENT, FAKE_MODEL,
};
pub use server::{FakeProvider, ProviderEvents, RecordedRequest, RequestTiming, TEST_CA_PEM};
pub use vendored::{
    dsh_fixtures_dir, expected_refusal, vendored_dsh_logs, EXPECTED_REFUSALS, NOT_LOGS,
    VENDORED_DSH_LOG_COUNT,
};

/// The recorded dsh sessions kept in this repository, one folder per scenario:
/// `fixtures/dsh/acp-snapshots/` at the workspace root (origin and licence in
/// `fixtures/dsh/README.md`). Tests read them in place; a test that runs in a recorded
/// `workspace/` copies it first (see [`copy_dir`]).
pub fn snapshot_fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/dsh/acp-snapshots")
}

/// The scenario folders of [`snapshot_fixtures_dir`], sorted by name. An error names the folder
/// when it cannot be read or holds no scenario, so a runner fails instead of passing over nothing.
pub fn snapshot_fixture_dirs() -> Result<Vec<PathBuf>, String> {
    let root = snapshot_fixtures_dir();
    let entries = std::fs::read_dir(&root).map_err(|error| {
        format!(
            "cannot read the recorded sessions in {}: {error} (they are part of the repository)",
            root.display()
        )
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("session.jsonl").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(format!(
            "no recorded session (*/session.jsonl) in {}",
            root.display()
        ));
    }
    Ok(dirs)
}

/// Copies the folder `from` into `to` (created if missing), recursively.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
