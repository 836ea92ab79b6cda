//! What `dsh run` shows while it works: streamed text and reasoning, tool activity and retries
//! on stderr (human progress), or one JSON object per session event on stdout (`--json`).

use std::io::Write;

use dsh_llm::Chunk;
use dsh_session::{Envelope, Event};

/// Human progress on stderr.
pub(crate) struct ProgressPrinter {
    pub(crate) show_reasoning: bool,
    /// ANSI colours on (`--color`, `NO_COLOR`; see `headless.rs`).
    color: bool,
    /// The kind of the block being streamed: 0 none, 1 text, 2 reasoning.
    streaming: u8,
}

impl ProgressPrinter {
    /// A printer; reasoning is shown only when asked, colours only when `color`.
    pub(crate) fn new(show_reasoning: bool, color: bool) -> Self {
        ProgressPrinter {
            show_reasoning,
            color,
            streaming: 0,
        }
    }

    /// `text` in the SGR style `style` (e.g. `2` dim, `31` red) when colours are on.
    fn paint(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{style}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn end_stream(&mut self, err: &mut impl Write) {
        if self.streaming != 0 {
            let _ = writeln!(err);
            self.streaming = 0;
        }
    }

    /// Prints one event.
    pub(crate) fn print(&mut self, envelope: &Envelope) {
        let mut err = std::io::stderr().lock();
        match &envelope.event {
            Event::AssistantChunk(chunk) => match &chunk.chunk {
                Chunk::TextDelta { text, .. } => {
                    if self.streaming != 1 {
                        self.end_stream(&mut err);
                        self.streaming = 1;
                    }
                    let _ = write!(err, "{text}");
                }
                Chunk::ReasoningDelta { text, .. } if self.show_reasoning => {
                    if self.streaming != 2 {
                        self.end_stream(&mut err);
                        let _ = write!(err, "{}", self.paint("2", "[reasoning] "));
                        self.streaming = 2;
                    }
                    let _ = write!(err, "{}", self.paint("2", text));
                }
                Chunk::Finish { .. } => self.end_stream(&mut err),
                _ => {}
            },
            Event::ToolCall(call) => {
                self.end_stream(&mut err);
                let name = self.paint("36", &call.name);
                let _ = writeln!(err, "-> {name} {}", one_line(&call.arguments, 160));
            }
            Event::ToolResult(result) => {
                self.end_stream(&mut err);
                match &result.error {
                    Some(error) => {
                        let _ = writeln!(
                            err,
                            "   {} {} {}",
                            self.paint("31", "failed:"),
                            error.code,
                            one_line(error.message.as_deref().unwrap_or(""), 160)
                        );
                    }
                    None => {
                        let text = text_of_result(&result.message);
                        let _ = writeln!(err, "   ok: {}", one_line(&text, 120));
                    }
                }
            }
            Event::LlmRetry(retry) => {
                self.end_stream(&mut err);
                let _ = writeln!(
                    err,
                    "dsh: {} {} in {:.1} s after {}: {}",
                    self.paint("33", "retry"),
                    retry.retry,
                    retry.delay_ms as f64 / 1000.0,
                    retry.failure.code,
                    retry.failure.message
                );
            }
            Event::Opaque { event_type, data } if event_type == "compaction/start" => {
                self.end_stream(&mut err);
                let _ = writeln!(
                    err,
                    "dsh: compacting the conversation ({}; ~{} tokens of a {}-token window)",
                    data["trigger"].as_str().unwrap_or("?"),
                    data["estimatedTokens"],
                    data["contextWindow"]
                );
            }
            Event::Opaque { event_type, data } if event_type == "compaction/end" => {
                self.end_stream(&mut err);
                match data["warning"].as_str() {
                    Some(warning) => {
                        let _ = writeln!(err, "dsh: compaction incomplete: {warning}");
                    }
                    None => {
                        let _ = writeln!(
                            err,
                            "dsh: compacted: {} old messages summarised, {} tool results pruned, ~{} -> ~{} tokens",
                            data["summarizedMessages"],
                            data["pruned"],
                            data["tokensBefore"],
                            data["tokensAfter"]
                        );
                    }
                }
            }
            Event::TurnEnd(_) => self.end_stream(&mut err),
            _ => {}
        }
        let _ = err.flush();
    }
}

fn text_of_result(message: &dsh_llm::Message) -> String {
    let mut out = String::new();
    for block in &message.content {
        if let dsh_llm::ContentBlock::ToolResult { content, .. } = block {
            for inner in content {
                if let dsh_llm::ContentBlock::Text { text } = inner {
                    out.push_str(text);
                }
            }
        }
    }
    out
}

/// The first `max` characters of `text` on one line.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}...")
    } else {
        flat.to_string()
    }
}

/// The envelope as a JSON value (the same shape as a session-log line).
pub(crate) fn envelope_json(envelope: &Envelope) -> serde_json::Value {
    let mut line = Vec::new();
    match envelope.encode_line(&mut line) {
        Ok(()) => serde_json::from_slice(&line).unwrap_or(serde_json::Value::Null),
        Err(_) => serde_json::Value::Null,
    }
}
