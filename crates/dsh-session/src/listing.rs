//! Session summaries for listing (their cost by `dsh_llm::PriceTable`), and message matching for
//! search.

use std::collections::BTreeMap;
use std::path::Path;

use dsh_llm::{ContentBlock, Message, PriceTable, UsageTotals};

use crate::envelope::{Envelope, SessionHeader};
use crate::error::Result;
use crate::reader::LogReader;
use crate::state::SessionTracker;
use crate::store::SearchHit;

/// What a listing shows about one session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session id.
    pub id: String,
    /// The latest `session/title`, if any.
    pub title: Option<String>,
    /// The working directory.
    pub cwd: String,
    /// Number of turns started.
    pub turns: u64,
    /// Usage summed per model.
    pub usage_by_model: BTreeMap<String, UsageTotals>,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// Last update, ms since the epoch (last event time, else the file's modification time,
    /// else the creation time).
    pub updated_at: u64,
    /// The session this one was forked from.
    pub parent_session: Option<String>,
    /// Where it lives (file path or store locator).
    pub location: String,
    /// True when a turn or tool call is still open (a live writer, or a crash to repair).
    pub open: bool,
}

impl SessionSummary {
    /// Builds a summary from a header and the tracker of its events.
    pub fn from_state(
        header: &SessionHeader,
        tracker: &SessionTracker,
        updated_fallback: u64,
        location: String,
    ) -> SessionSummary {
        SessionSummary {
            id: header.id.clone(),
            title: tracker.title().map(str::to_string),
            cwd: header.cwd.clone(),
            turns: tracker.turn_count(),
            usage_by_model: tracker.usage_by_model().clone(),
            created_at: header.created_at,
            updated_at: tracker.last_time().unwrap_or(updated_fallback),
            parent_session: header.parent_session.clone(),
            location,
            open: !tracker.is_closed(),
        }
    }

    /// Summarises a JSONL session file by streaming it (no events are kept).
    pub fn of_file(path: &Path) -> Result<SessionSummary> {
        SessionSummary::of_file_visiting(path, |_, _| {})
    }

    /// [`SessionSummary::of_file`], handing every event read to `visit` as well (with the
    /// log's header): one read of the log for its summary and whatever else the caller keeps.
    /// Events before a damaged line are visited even though the summary is then an error.
    pub fn of_file_visiting(
        path: &Path,
        mut visit: impl FnMut(&SessionHeader, &Envelope),
    ) -> Result<SessionSummary> {
        let mut reader = LogReader::open(path)?;
        let mut tracker = SessionTracker::new();
        while let Some(env) = reader.next_event()? {
            visit(reader.header(), &env);
            tracker.push(&env);
        }
        // Only a log without event times needs the file's: one `stat` fewer per log read.
        let mtime = match tracker.last_time() {
            Some(time) => time,
            None => std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(reader.header().created_at, |d| d.as_millis() as u64),
        };
        Ok(SessionSummary::from_state(
            reader.header(),
            &tracker,
            mtime,
            path.display().to_string(),
        ))
    }

    /// Usage summed over models.
    pub fn usage(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for t in self.usage_by_model.values() {
            total.merge(t);
        }
        total
    }

    /// Cost in USD under `prices` (`None` when a used model has no price).
    pub fn cost(&self, prices: &PriceTable) -> Option<f64> {
        prices.cost(&self.usage_by_model)
    }
}

/// All searchable text of a message: text blocks, reasoning, tool-call arguments and
/// tool-result text, separated by newlines.
pub fn message_text(message: &Message) -> String {
    fn push_block(block: &ContentBlock, out: &mut String) {
        match block {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => {
                out.push_str(text);
                out.push('\n');
            }
            ContentBlock::ToolCall {
                name, arguments, ..
            } => {
                out.push_str(name);
                out.push(' ');
                out.push_str(arguments);
                out.push('\n');
            }
            ContentBlock::ToolResult { content, .. } => {
                for inner in content {
                    push_block(inner, out);
                }
            }
            ContentBlock::Image { .. } | ContentBlock::Unknown(_) => {}
        }
    }
    let mut out = String::new();
    for block in &message.content {
        push_block(block, &mut out);
    }
    out
}

/// A search hit if `env` is a message event whose text contains `needle_lower` (already
/// lower-cased).
pub(crate) fn match_event(
    session_id: &str,
    env: &Envelope,
    needle_lower: &str,
) -> Option<SearchHit> {
    let message = env.event.message()?;
    let text = message_text(message);
    let lower = text.to_lowercase();
    let at = lower.find(needle_lower)?;
    Some(SearchHit {
        session_id: session_id.to_string(),
        seq: env.seq,
        event_type: env.event.event_type().to_string(),
        snippet: snippet(&lower, &text, at, needle_lower.len()),
    })
}

/// About 60 characters of context on each side of a match, on one line.
fn snippet(lower: &str, text: &str, at: usize, len: usize) -> String {
    // Lower-casing can change byte lengths; fall back to the lower-cased text then.
    let source = if lower.len() == text.len() {
        text
    } else {
        lower
    };
    let mut start = at.saturating_sub(60);
    while !source.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len + 60).min(source.len());
    while !source.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&source[start..end].replace(['\n', '\r'], " "));
    if end < source.len() {
        out.push('…');
    }
    out
}
