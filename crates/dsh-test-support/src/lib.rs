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
//! - [`SseReply`] builds streamed replies inline; [`render_chunks_as_sse`] renders any dsh
//!   chunk list as DeepSeek SSE bytes.
//! - [`RecordedSession`] loads a recorded dsh `session.jsonl` (and its optional
//!   `replay.override.json`) into calls, each a `Vec<dsh_llm::Chunk>`, and renders call k as
//!   reply k.
//! - [`provider_checks`]: checks every provider adapter's loopback tests share (collecting a
//!   call with a deadline, the well-formed chunk contract, failure codes of common faults,
//!   cancellation); [`fuzz`]: case counts and the stream-decoder driver of the fuzz targets.
//! - [`chunks`]: replies as dsh chunks (text, one tool call) for scripted adapters.
//! - [`copy_dir`] copies a fixture folder.

mod anthropic;
pub mod chunks;
pub mod fuzz;
pub mod provider_checks;
mod recording;
mod render;
mod responses;
mod script;
mod server;

use std::path::{Path, PathBuf};

pub use anthropic::{AnthropicReply, AnthropicUsage, FAKE_ANTHROPIC_MODEL};
pub use recording::{
    load_recorded_calls, parse_calls, parse_overrides, RecordedCall, RecordedSession,
    RecordingError, ReplayOverride,
};
pub use render::{render_chunks_as_sse, reply_for_call, sse_reply_from_chunks};
pub use responses::{ResponsesReply, FAKE_RESPONSES_MODEL};
pub use script::{
    chunk_event, ScriptedReply, SseReply, SseStep, StreamEnd, WireUsage, DONE_EVENT, FAKE_MODEL,
};
pub use server::{FakeProvider, ProviderEvents, RecordedRequest, RequestTiming};

/// Path of the recorded dsh sessions (`shared/fixtures/dsh-acp-snapshots`), found by walking up
/// from `manifest_dir` (pass `env!("CARGO_MANIFEST_DIR")`) to the first ancestor that has it:
/// the `shared/` folder that sits beside the workspace root. `None` when there is none.
pub fn snapshot_fixtures_dir(manifest_dir: impl AsRef<Path>) -> Option<PathBuf> {
    manifest_dir
        .as_ref()
        .ancestors()
        .map(|dir| {
            dir.join("shared")
                .join("fixtures")
                .join("dsh-acp-snapshots")
        })
        .find(|dir| dir.is_dir())
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
