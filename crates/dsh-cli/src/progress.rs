//! What `dsh run` shows while it works: the session's view events (docs/protocol.md) as human
//! progress on stderr (streamed text and reasoning, tool cards, retries, compaction), or one
//! JSON object per session event and per view event on stdout (`--json`).
//!
//! Everything shown is first cleared of known secrets (plain or encoded; streamed text is
//! held back where a secret could be cut in two) and then of terminal controls: the model's
//! escape sequences are shown as text (`^[`), never obeyed (docs/SECURITY.md, "Terminal
//! output (dsh run, sessions show)").

use std::io::Write;

use std::collections::HashSet;

use dsh_protocol::{Card, CardState, ViewEvent};
use dsh_session::Envelope;
use dsh_tools::{printable, SecretRedactor, StreamRedactor};

/// Human progress on stderr.
pub(crate) struct ProgressPrinter {
    pub(crate) show_reasoning: bool,
    /// ANSI colours on (`--color`, `NO_COLOR`; see `headless.rs`).
    color: bool,
    /// The kind of the block being streamed: 0 none, 1 text, 2 reasoning.
    streaming: u8,
    /// Every secret dsh loaded.
    secrets: SecretRedactor,
    /// The block being streamed, redacted as it arrives.
    stream: Option<StreamRedactor>,
    /// Cards announced and not ended yet.
    cards_shown: HashSet<String>,
    /// The first model was seen (later ones are switches worth a line).
    model_shown: bool,
}

impl ProgressPrinter {
    /// A printer; reasoning is shown only when asked, colours only when `color`; `secrets`
    /// never shown.
    pub(crate) fn new(show_reasoning: bool, color: bool, secrets: SecretRedactor) -> Self {
        ProgressPrinter {
            show_reasoning,
            color,
            streaming: 0,
            secrets,
            stream: None,
            cards_shown: HashSet::new(),
            model_shown: false,
        }
    }

    /// `text` as it may be shown: secrets replaced, controls made visible.
    fn shown(&self, text: &str) -> String {
        printable(&self.secrets.redact(text)).into_owned()
    }

    /// The next piece of the streamed block, as it may be shown now.
    fn streamed(&mut self, text: &str) -> String {
        let secrets = &self.secrets;
        let ready = self
            .stream
            .get_or_insert_with(|| secrets.stream())
            .push(text);
        printable(&ready).into_owned()
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
        if let Some(mut stream) = self.stream.take() {
            let rest = printable(&stream.finish()).into_owned();
            let _ = if self.streaming == 2 {
                write!(err, "{}", self.paint("2", &rest))
            } else {
                write!(err, "{rest}")
            };
        }
        if self.streaming != 0 {
            let _ = writeln!(err);
            self.streaming = 0;
        }
    }

    /// Prints one view event (docs/protocol.md, "View events").
    pub(crate) fn print(&mut self, event: &ViewEvent) {
        let mut err = std::io::stderr().lock();
        match event {
            ViewEvent::TextDelta { text } => {
                if self.streaming != 1 {
                    self.end_stream(&mut err);
                    self.streaming = 1;
                }
                let text = self.streamed(text);
                let _ = write!(err, "{text}");
            }
            ViewEvent::ReasoningDelta { text } if self.show_reasoning => {
                if self.streaming != 2 {
                    self.end_stream(&mut err);
                    let _ = write!(err, "{}", self.paint("2", "[reasoning] "));
                    self.streaming = 2;
                }
                let text = self.streamed(text);
                let _ = write!(err, "{}", self.paint("2", &text));
            }
            ViewEvent::AssistantMessage { .. } | ViewEvent::TurnEnded { .. } => {
                self.end_stream(&mut err)
            }
            ViewEvent::ToolCard(card) => {
                self.end_stream(&mut err);
                self.card(card, &mut err);
            }
            ViewEvent::Retry {
                retry,
                delay_ms,
                message,
                code,
            } => {
                self.end_stream(&mut err);
                let _ = writeln!(
                    err,
                    "dsh: {} {retry} in {:.1} s: {code}: {}",
                    self.paint("33", "retry"),
                    *delay_ms as f64 / 1000.0,
                    self.shown(message)
                );
            }
            ViewEvent::ModelChanged { model, .. } if self.model_shown => {
                self.end_stream(&mut err);
                let _ = writeln!(err, "dsh: model now {}", self.shown(model));
            }
            ViewEvent::ModelChanged { .. } => self.model_shown = true,
            ViewEvent::Compaction { phase, data } => {
                self.end_stream(&mut err);
                self.compaction(phase, data, &mut err);
            }
            _ => {}
        }
        let _ = err.flush();
    }

    /// A card's first appearance and its end; states between are not worth a line headless.
    fn card(&mut self, card: &Card, err: &mut impl Write) {
        let shown = &card.presentation;
        match card.state {
            CardState::Pending if self.cards_shown.insert(card.call_id.clone()) => {
                let title = self.paint("36", &self.shown(&shown.title));
                let subject = shown
                    .subject
                    .clone()
                    .unwrap_or_else(|| card.arguments.clone());
                let _ = writeln!(err, "-> {title} {}", one_line(&self.shown(&subject), 160));
            }
            CardState::Running => {
                if let Some(report) = &card.progress {
                    let line = self.shown(&one_line(&report.describe(), 160));
                    let _ = writeln!(err, "   {}", self.paint("2", &line));
                }
            }
            state if state.is_final() => {
                self.cards_shown.remove(&card.call_id);
                // A call that ran but whose own check failed (a command exiting non-zero)
                // reads as failed, as the TUI marks it.
                let failed_check = card
                    .summary
                    .as_ref()
                    .is_some_and(|summary| summary.tone == dsh_tools::Tone::Failure);
                let word = if state == CardState::Done && failed_check {
                    "failed"
                } else {
                    state.as_str()
                };
                let label = match (&card.summary, &card.error_code) {
                    (Some(summary), _) => format!("{word} ({})", summary.text),
                    (None, Some(code)) => format!("{word} ({code})"),
                    (None, None) => word.to_string(),
                };
                let label = self.shown(&label);
                let label = if state == CardState::Done && !failed_check {
                    label
                } else {
                    self.paint("31", &label)
                };
                // The tool's summary says what came of the call; the result text (markup the
                // model reads, such as `read`'s `<content>`) is shown only without one, for a
                // command's output, or for a failure, whose first line says why.
                let result = card.result.as_deref().unwrap_or_default();
                let output = card.presentation.view == dsh_tools::ToolView::Terminal;
                if card.summary.is_some() && state == CardState::Done && !failed_check && !output {
                    let _ = writeln!(err, "   {label}");
                } else {
                    let _ = writeln!(err, "   {label}: {}", one_line(&self.shown(result), 160));
                }
            }
            _ => {}
        }
    }

    fn compaction(&self, phase: &str, data: &serde_json::Value, err: &mut impl Write) {
        if phase == "started" {
            let _ = writeln!(
                err,
                "dsh: compacting the conversation ({}; ~{} tokens of a {}-token window)",
                data["trigger"].as_str().unwrap_or("?"),
                data["estimatedTokens"],
                data["contextWindow"]
            );
            return;
        }
        let _ = match data["warning"].as_str() {
            Some(warning) => writeln!(err, "dsh: compaction incomplete: {}", self.shown(warning)),
            None => writeln!(
                err,
                "dsh: compacted: {} old messages summarised, {} tool results pruned, ~{} -> ~{} tokens",
                data["summarizedMessages"], data["pruned"], data["tokensBefore"], data["tokensAfter"]
            ),
        };
    }
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

/// `value` as one JSON line that is safe on a terminal and holds no known secret: strings
/// redacted, and the characters serde_json leaves raw that a terminal may obey (DEL, C1
/// controls such as U+009B CSI, bidirectional overrides) written as `\uXXXX` escapes (C0
/// controls, ESC included, are escaped by serde_json already).
pub(crate) fn json_line(mut value: serde_json::Value, secrets: &SecretRedactor) -> String {
    secrets.redact_json(&mut value);
    let line = value.to_string();
    if !line.chars().any(dsh_tools::is_unsafe_for_terminal) {
        return line;
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if dsh_tools::is_unsafe_for_terminal(c) {
            // Outside strings JSON has no such characters; inside, the escape is the same text.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}
