//! A byte-level Server-Sent Events decoder: lines in, events out, no I/O.
//!
//! It accepts `\n` and `\r\n` line ends, lines split across network reads at any byte, events
//! of several `data:` lines (joined with `\n`, as the SSE standard says) and comment lines
//! (starting with `:`), which are reported so the caller can reset its idle watchdog. `event:`,
//! `id:` and `retry:` fields are ignored: neither wire format needs them (an Anthropic
//! event names its type again inside its JSON data).

use std::ops::ControlFlow;

/// One decoded SSE item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseEvent<'a> {
    /// The data of one event (its `data:` lines joined with `\n`), borrowed until the callback
    /// returns.
    Data(&'a [u8]),
    /// A comment line (a keep-alive); it carries nothing but proves the peer is alive.
    Comment,
}

/// The longest line, and the most data of one event, the decoder keeps (16 MiB): a line
/// without a newline, or an event, past it ends the stream with [`SSE_TOO_LARGE`].
pub const MAX_SSE_EVENT_BYTES: usize = 16 << 20;

/// The data of the last event a decoder reports once a line or an event passed
/// [`MAX_SSE_EVENT_BYTES`]: not JSON, so each adapter's parser turns it into a
/// `finish {error}` (`MALFORMED_RESPONSE`) whose message starts with this text.
pub const SSE_TOO_LARGE: &[u8] = b"SSE_EVENT_TOO_LARGE: the provider sent a stream line or \
event longer than 16 MiB; dsh stopped reading the reply";

/// Incremental SSE decoder. Feed it byte slices as they arrive with [`push`](Self::push) and
/// call [`finish`](Self::finish) at end of stream. Any byte sequence decodes to some events
/// (malformed payloads are for the caller's JSON parser to reject), except that a line or an
/// event longer than [`MAX_SSE_EVENT_BYTES`] ends decoding with one last [`SseEvent::Data`]
/// holding [`SSE_TOO_LARGE`], so that memory stays bounded.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The unterminated tail of the last slice.
    partial_line: Vec<u8>,
    /// The data lines of the event being built.
    data: Vec<u8>,
    has_data: bool,
    /// A line or event passed the cap: everything after is dropped.
    overflowed: bool,
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

impl SseDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `bytes`, calling `on_event` for each complete event or comment. Decoding stops
    /// early when `on_event` returns `Break`; the rest of `bytes` is then dropped, and the
    /// decoder should not be fed again.
    pub fn push(
        &mut self,
        bytes: &[u8],
        mut on_event: impl FnMut(SseEvent<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.overflowed {
            return ControlFlow::Break(());
        }
        let mut rest = bytes;
        while let Some(newline) = find_newline(rest) {
            let piece = &rest[..newline];
            rest = &rest[newline + 1..];
            if self.partial_line.len() + piece.len() > MAX_SSE_EVENT_BYTES {
                return self.overflow(&mut on_event);
            }
            if self.partial_line.is_empty() {
                self.line(piece, &mut on_event)?;
            } else {
                let mut line = std::mem::take(&mut self.partial_line);
                line.extend_from_slice(piece);
                let flow = self.line(&line, &mut on_event);
                line.clear();
                self.partial_line = line;
                flow?;
            }
        }
        if self.partial_line.len() + rest.len() > MAX_SSE_EVENT_BYTES {
            return self.overflow(&mut on_event);
        }
        self.partial_line.extend_from_slice(rest);
        ControlFlow::Continue(())
    }

    /// Ends decoding after a line or event passed the cap: the buffers are freed and one last
    /// event carries [`SSE_TOO_LARGE`].
    fn overflow(
        &mut self,
        on_event: &mut impl FnMut(SseEvent<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.overflowed = true;
        self.partial_line = Vec::new();
        self.data = Vec::new();
        self.has_data = false;
        // Nothing follows, whatever the caller answers.
        let _ = on_event(SseEvent::Data(SSE_TOO_LARGE));
        ControlFlow::Break(())
    }

    /// Ends the stream: an unterminated last line is decoded, and a pending event is dispatched
    /// as if a blank line had followed it.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>) -> ControlFlow<()>) {
        if self.overflowed {
            return;
        }
        if !self.partial_line.is_empty() {
            let line = std::mem::take(&mut self.partial_line);
            if self.line(&line, &mut on_event).is_break() {
                return;
            }
        }
        // The result is irrelevant: nothing follows the end of the stream.
        let _ = self.line(b"", &mut on_event);
    }

    fn line(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(SseEvent<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                let flow = on_event(SseEvent::Data(&self.data));
                self.data.clear();
                return flow;
            }
            return ControlFlow::Continue(());
        }
        if line[0] == b':' {
            return on_event(SseEvent::Comment);
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.data.len() + value.len() + 1 > MAX_SSE_EVENT_BYTES {
                return self.overflow(on_event);
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut record = |event: SseEvent<'_>| {
            events.push(match event {
                SseEvent::Data(data) => String::from_utf8_lossy(data).into_owned(),
                SseEvent::Comment => "#comment".to_string(),
            });
            ControlFlow::Continue(())
        };
        for chunk in input.chunks(piece.max(1)) {
            let _ = decoder.push(chunk, &mut record);
        }
        decoder.finish(&mut record);
        events
    }

    #[test]
    fn any_split_decodes_the_same_events() {
        let input = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\nid: 3\ndata: [DONE]\n\n";
        let expected = vec!["#comment", "{\"a\":1}", "two\nlines", "[DONE]"];
        for piece in 1..input.len() {
            assert_eq!(decode_in_pieces(input, piece), expected, "piece {piece}");
        }
    }

    /// Feeds `pieces` of `piece` bytes each; returns the events and the peak of the decoder's
    /// buffers.
    fn feed_many(first: &[u8], piece: &[u8], pieces: usize) -> (Vec<String>, usize) {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut peak = 0;
        let mut record = |event: SseEvent<'_>| {
            if let SseEvent::Data(data) = event {
                events.push(String::from_utf8_lossy(data).into_owned());
            }
            ControlFlow::Continue(())
        };
        let _ = decoder.push(first, &mut record);
        for _ in 0..pieces {
            if decoder.push(piece, &mut record).is_break() {
                break;
            }
            peak = peak.max(decoder.partial_line.capacity() + decoder.data.capacity());
        }
        decoder.finish(&mut record);
        (events, peak)
    }

    #[test]
    fn a_line_without_newline_past_the_cap_ends_the_stream_with_a_named_error() {
        // 64 MiB of one line: the decoder stops at 16 MiB and says why.
        let (events, peak) = feed_many(b"data: ", &[b'a'; 1 << 20], 64);
        assert_eq!(
            events.len(),
            1,
            "{:?}",
            events.iter().map(String::len).collect::<Vec<_>>()
        );
        assert!(
            events[0].starts_with("SSE_EVENT_TOO_LARGE"),
            "{}",
            events[0]
        );
        assert!(peak <= 2 * MAX_SSE_EVENT_BYTES, "peak {peak}");
    }

    #[test]
    fn an_event_of_many_lines_past_the_cap_ends_the_stream_too() {
        let mut line = b"data: ".to_vec();
        line.extend_from_slice(&[b'b'; 1 << 20]);
        line.push(b'\n');
        let (events, _) = feed_many(b"", &line, 40);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].as_bytes(), SSE_TOO_LARGE);
        // Just under the cap still decodes.
        let mut ok = b"data: ".to_vec();
        ok.extend_from_slice(&vec![b'c'; MAX_SSE_EVENT_BYTES - 16]);
        ok.extend_from_slice(b"\n\n");
        assert_eq!(
            decode_in_pieces(&ok, 1 << 20)[0].len(),
            MAX_SSE_EVENT_BYTES - 16
        );
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_finish() {
        assert_eq!(decode_in_pieces(b"data: tail", 3), vec!["tail"]);
        assert!(decode_in_pieces(b"\n\n\r\n", 1).is_empty());
    }

    #[test]
    fn break_stops_decoding() {
        let mut decoder = SseDecoder::new();
        let mut seen = 0;
        let flow = decoder.push(b"data: 1\n\ndata: 2\n\n", |_| {
            seen += 1;
            ControlFlow::Break(())
        });
        assert!(flow.is_break());
        assert_eq!(seen, 1);
    }
}
