//! Reading a JSONL session log: header check, line decoding, packed-row expansion, seq
//! assignment and torn-tail tolerance.
//!
//! The reader streams: it holds one line and at most one expanded packed row at a time, so
//! feeding it into a [`crate::Projector`] keeps memory proportional to the projected history.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::envelope::{Envelope, SessionHeader, SurfaceOp, FORMAT_VERSION};
use crate::error::{io_err, Location, Result, SessionError};
use crate::event::Event;
use crate::packed::{PackKind, PackedRow};

/// A torn last line that the reader dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The 1-based line number.
    pub line: u64,
    /// Byte offset of the line's start in the file (where an appender must truncate).
    pub offset: u64,
    /// Length of the dropped bytes.
    pub len: u64,
}

#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(rename = "surfaceOp", default)]
    surface_op: Option<SurfaceOp>,
    #[serde(rename = "sourceEventSeqs", default)]
    source_event_seqs: Option<Vec<u64>>,
    #[serde(default)]
    ignorable: Option<bool>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    time: Option<u64>,
}

/// What one line decodes to.
enum Decoded {
    One(Box<Envelope>),
    Row(Vec<Envelope>),
}

/// Why a line failed, before the reader decides whether it is a torn tail.
enum LineFailure {
    /// Not JSON, or not an event line: a torn tail if it is the last line.
    Malformed(String),
    /// Well-formed but refused (unknown type, seq mismatch): never a torn tail.
    Fatal(SessionError),
}

/// Decodes one event line given the seq it would get.
fn decode_line(line: &[u8], seq: u64, at: &Location) -> Result<Decoded, LineFailure> {
    let raw: RawLine<'_> =
        serde_json::from_slice(line).map_err(|e| LineFailure::Malformed(e.to_string()))?;
    if let Some(found) = raw.seq {
        if found != seq {
            return Err(LineFailure::Fatal(SessionError::SeqMismatch {
                at: at.clone(),
                expected: seq,
                found,
            }));
        }
    }
    let data = raw.data.map(RawValue::get).unwrap_or("null");
    // A line that parsed as JSON was written whole: a bad payload is damage, not a torn tail.
    let bad_data = |e: serde_json::Error| {
        LineFailure::Fatal(SessionError::Malformed {
            at: at.clone(),
            reason: format!("`{}` event has invalid data: {e}", raw.kind),
        })
    };
    if let Some(kind) = PackKind::from_type(&raw.kind) {
        let row: PackedRow = serde_json::from_str(data).map_err(bad_data)?;
        let envs = row.expand(kind, seq, raw.time).map_err(|reason| {
            LineFailure::Fatal(SessionError::Malformed {
                at: at.clone(),
                reason,
            })
        })?;
        return Ok(Decoded::Row(envs));
    }
    let ignorable = raw.ignorable.unwrap_or(false);
    let event = match Event::decode_at(&raw.kind, data, Some(seq)).map_err(bad_data)? {
        Some(event) => event,
        None if ignorable => Event::Opaque {
            event_type: raw.kind.to_string(),
            data: serde_json::from_str(data).map_err(bad_data)?,
        },
        None => {
            return Err(LineFailure::Fatal(SessionError::UnknownEvent {
                at: at.clone(),
                event_type: raw.kind.to_string(),
            }))
        }
    };
    Ok(Decoded::One(Box::new(Envelope {
        seq,
        time: raw.time,
        event,
        surface_op: raw.surface_op,
        source_event_seqs: raw.source_event_seqs,
        ignorable,
    })))
}

/// Parses a header line, checking its type and version.
pub(crate) fn decode_header(line: &[u8], at: &Location) -> Result<SessionHeader> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "type")]
        kind: Option<String>,
        version: Option<serde_json::Value>,
    }
    let probe: Probe = serde_json::from_slice(line).map_err(|e| SessionError::MissingHeader {
        at: at.clone(),
        reason: format!("not JSON: {e}"),
    })?;
    if probe.kind.as_deref() != Some("session") {
        return Err(SessionError::MissingHeader {
            at: at.clone(),
            reason: format!("found type {:?}", probe.kind.unwrap_or_default()),
        });
    }
    // dsh's hand-written test logs leave `version` out; there is only one version so far, so a
    // header without one reads as version 0 (docs/sessions.md, "File format").
    let version = match &probe.version {
        None => Some(FORMAT_VERSION),
        Some(value) => value.as_u64(),
    };
    match version {
        Some(FORMAT_VERSION) => {}
        Some(version) => {
            return Err(SessionError::UnsupportedVersion {
                at: at.clone(),
                version,
                supported: FORMAT_VERSION,
            })
        }
        None => {
            return Err(SessionError::MissingHeader {
                at: at.clone(),
                reason: format!(
                    "`version` must be a non-negative integer, found {}",
                    probe
                        .version
                        .map_or_else(|| "nothing".to_string(), |v| v.to_string())
                ),
            })
        }
    }
    let mut value: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
        .map_err(|e| SessionError::MissingHeader {
            at: at.clone(),
            reason: e.to_string(),
        })?;
    value.remove("type");
    value
        .entry("version")
        .or_insert(serde_json::Value::from(FORMAT_VERSION));
    serde_json::from_value(serde_json::Value::Object(value)).map_err(|e| {
        SessionError::MissingHeader {
            at: at.clone(),
            reason: format!("invalid header: {e}"),
        }
    })
}

/// A streaming reader of one JSONL session log.
///
/// [`LogReader::next_event`] yields events in order with their seqs; packed rows come out as
/// one `assistant/chunk` per delta. A last line that does not parse is dropped and reported by
/// [`LogReader::torn_tail`]; a bad line anywhere else is an error naming the line.
pub struct LogReader<R> {
    input: R,
    source: String,
    header: SessionHeader,
    line_no: u64,
    offset: u64,
    next_seq: u64,
    pending: VecDeque<Envelope>,
    buf: Vec<u8>,
    torn: Option<TornTail>,
    done: bool,
}

/// True for a zstd-compressed log: a name ending in `.zst` or `.zstd` (dsh writes
/// `session.jsonl.zstd` by default; docs/sessions.md, "Compressed logs").
pub fn is_zstd_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext == "zstd" || ext == "zst")
}

/// The bytes of a session file as the reader sees them: plain, or decompressed from zstd.
///
/// A zstd log is a run of concatenated frames (dsh writes one per flushed batch). A last frame
/// cut short by a crash ends the input like a short read (what was decompressed of it is kept,
/// and a half line in it is a torn tail, as in a plain log); damage anywhere else is an error
/// saying the zstd data is corrupt.
pub enum LogInput {
    /// A plain `.jsonl` file.
    Plain(BufReader<File>),
    /// A `.jsonl.zstd` / `.jsonl.zst` file.
    Zstd(BufReader<ZstdInput>),
}

/// A compressed log expands to at most this many bytes (docs/sessions.md, "Compressed logs").
pub const ZSTD_MAX_EXPANDED: u64 = 1 << 30;

/// ... and to at most this many times its compressed size, once past
/// [`ZSTD_RATIO_FLOOR`] bytes: dsh's own logs compress about 5 to 20 times.
pub const ZSTD_MAX_RATIO: u64 = 100;

/// Bytes any compressed log may expand to whatever its ratio.
pub const ZSTD_RATIO_FLOOR: u64 = 64 << 20;

/// The decompressing half of [`LogInput::Zstd`].
pub struct ZstdInput {
    decoder: zstd::stream::read::Decoder<'static, BufReader<File>>,
    path: String,
    cut_short: bool,
    /// Bytes decompressed so far, and the most allowed (see [`ZSTD_MAX_EXPANDED`]).
    expanded: u64,
    limit: u64,
}

impl ZstdInput {
    fn new(file: File, path: &Path) -> std::io::Result<Self> {
        let compressed = file.metadata()?.len();
        let limit = compressed
            .saturating_mul(ZSTD_MAX_RATIO)
            .clamp(ZSTD_RATIO_FLOOR, ZSTD_MAX_EXPANDED);
        Ok(ZstdInput {
            decoder: zstd::stream::read::Decoder::new(file)?,
            path: path.display().to_string(),
            cut_short: false,
            expanded: 0,
            limit,
        })
    }

    /// The named error of a log that expands past its limit.
    fn too_large(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "ZSTD_LOG_TOO_LARGE: the zstd-compressed log {} expands past {} bytes (at most                  {ZSTD_MAX_RATIO} times its compressed size, never more than {ZSTD_MAX_EXPANDED}                  bytes); dsh does not read it. A log dsh wrote never does this: decompress it                  with `zstd -d` and inspect it",
                self.path, self.limit
            ),
        )
    }
}

impl Read for ZstdInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cut_short {
            return Ok(0);
        }
        if self.expanded >= self.limit {
            return Err(self.too_large());
        }
        let room = usize::try_from(self.limit - self.expanded).unwrap_or(usize::MAX);
        let len = buf.len().min(room);
        match self.decoder.read(&mut buf[..len]) {
            Ok(n) => {
                self.expanded += n as u64;
                Ok(n)
            }
            // The file ends inside a frame: a batch whose write was cut short.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.cut_short = true;
                Ok(0)
            }
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!(
                    "the zstd-compressed log {} is corrupt ({e}); decompress it with `zstd -d` \
                     to see how much is readable",
                    self.path
                ),
            )),
        }
    }
}

impl Read for LogInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            LogInput::Plain(input) => input.read(buf),
            LogInput::Zstd(input) => input.read(buf),
        }
    }
}

impl BufRead for LogInput {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            LogInput::Plain(input) => input.fill_buf(),
            LogInput::Zstd(input) => input.fill_buf(),
        }
    }

    fn consume(&mut self, amt: usize) {
        match self {
            LogInput::Plain(input) => input.consume(amt),
            LogInput::Zstd(input) => input.consume(amt),
        }
    }
}

/// Opens a session file for reading, decompressing it when [`is_zstd_path`].
pub(crate) fn open_input(path: &Path) -> Result<LogInput> {
    let file = File::open(path).map_err(io_err("opening session log", path))?;
    if is_zstd_path(path) {
        let input =
            ZstdInput::new(file, path).map_err(io_err("starting zstd decoder for", path))?;
        Ok(LogInput::Zstd(BufReader::with_capacity(256 * 1024, input)))
    } else {
        Ok(LogInput::Plain(BufReader::with_capacity(256 * 1024, file)))
    }
}

impl LogReader<LogInput> {
    /// Opens a session file (plain, or zstd-compressed when [`is_zstd_path`]) and reads its
    /// header.
    pub fn open(path: &Path) -> Result<Self> {
        LogReader::new(open_input(path)?, path.display().to_string())
    }
}

impl<R: BufRead> LogReader<R> {
    /// Reads the header from `input`. `source` names the input in error messages.
    pub fn new(mut input: R, source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let mut buf = Vec::new();
        let at = Location {
            source: source.clone(),
            line: 1,
        };
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(io_err("reading session log", &source))?;
        if n == 0 {
            return Err(SessionError::MissingHeader {
                at,
                reason: "the file is empty".into(),
            });
        }
        let header = decode_header(trim_line(&buf), &at)?;
        Ok(LogReader {
            input,
            source,
            header,
            line_no: 1,
            offset: n as u64,
            next_seq: 0,
            pending: VecDeque::new(),
            buf,
            torn: None,
            done: false,
        })
    }

    /// The session header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The seq the next event read will have (after the end: the number of events).
    pub fn next_seq(&self) -> u64 {
        self.pending.front().map_or(self.next_seq, |e| e.seq)
    }

    /// The torn last line that was dropped, once the reader has reached the end.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    /// Bytes of complete lines read so far (after the end: the length of the valid prefix).
    pub fn valid_len(&self) -> u64 {
        self.offset
    }

    /// The next event, `Ok(None)` at the end.
    pub fn next_event(&mut self) -> Result<Option<Envelope>> {
        loop {
            if let Some(env) = self.pending.pop_front() {
                return Ok(Some(env));
            }
            if self.done {
                return Ok(None);
            }
            self.buf.clear();
            let n = self
                .input
                .read_until(b'\n', &mut self.buf)
                .map_err(io_err("reading session log", &self.source))?;
            if n == 0 {
                self.done = true;
                continue;
            }
            self.line_no += 1;
            let line_start = self.offset;
            let line = trim_line(&self.buf);
            if line.iter().all(u8::is_ascii_whitespace) {
                if self.buf.ends_with(b"\n") {
                    self.offset += n as u64;
                }
                continue;
            }
            let at = Location {
                source: self.source.clone(),
                line: self.line_no,
            };
            match decode_line(line, self.next_seq, &at) {
                Ok(decoded) => {
                    self.offset += n as u64;
                    match decoded {
                        Decoded::One(env) => {
                            self.next_seq += 1;
                            return Ok(Some(*env));
                        }
                        Decoded::Row(envs) => {
                            self.next_seq += envs.len() as u64;
                            self.pending.extend(envs);
                        }
                    }
                }
                Err(LineFailure::Fatal(err)) => return Err(err),
                Err(LineFailure::Malformed(reason)) => {
                    let at_end = self
                        .input
                        .fill_buf()
                        .map_err(io_err("reading session log", &self.source))?
                        .is_empty();
                    if at_end {
                        self.torn = Some(TornTail {
                            line: self.line_no,
                            offset: line_start,
                            len: n as u64,
                        });
                        self.done = true;
                        continue;
                    }
                    return Err(SessionError::Malformed { at, reason });
                }
            }
        }
    }
}

fn trim_line(buf: &[u8]) -> &[u8] {
    let mut line = buf;
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    line
}

/// A whole log read into memory.
#[derive(Debug, Clone)]
pub struct LoadedLog {
    /// The header.
    pub header: SessionHeader,
    /// All events, in seq order (packed rows expanded).
    pub events: Vec<Envelope>,
    /// The torn last line that was dropped, if any.
    pub torn_tail: Option<TornTail>,
}

/// Reads a whole session file. See [`LogReader`] for the rules.
pub fn load_file(path: &Path) -> Result<LoadedLog> {
    let mut reader = LogReader::open(path)?;
    let mut events = Vec::new();
    while let Some(env) = reader.next_event()? {
        events.push(env);
    }
    Ok(LoadedLog {
        header: reader.header.clone(),
        events,
        torn_tail: reader.torn.clone(),
    })
}

/// Decodes one stored event line (SQLite rows hold the same JSON as a JSONL line).
pub(crate) fn decode_stored(line: &[u8], seq: u64, at: &Location) -> Result<Vec<Envelope>> {
    match decode_line(trim_line(line), seq, at) {
        Ok(Decoded::One(env)) => Ok(vec![*env]),
        Ok(Decoded::Row(envs)) => Ok(envs),
        Err(LineFailure::Fatal(err)) => Err(err),
        Err(LineFailure::Malformed(reason)) => Err(SessionError::Malformed {
            at: at.clone(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Writes a log that expands to `mib` MiB of one byte after `header`.
    fn bomb(path: &Path, header: &[u8], mib: usize) {
        let file = File::create(path).unwrap();
        let mut encoder = zstd::stream::write::Encoder::new(file, 19).unwrap();
        encoder.write_all(header).unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..mib {
            encoder.write_all(&block).unwrap();
        }
        encoder.finish().unwrap();
    }

    #[test]
    fn a_zstd_log_expanding_past_its_limit_fails_with_a_named_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let header = br#"{"type":"session","version":0,"id":"s1","createdAt":0,"cwd":"/w"}"#;
        bomb(&path, &[header.as_slice(), b"\n"].concat(), 256);
        let compressed = std::fs::metadata(&path).unwrap().len();
        let mut input = open_input(&path).unwrap();
        let mut total = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let error = loop {
            match input.read(&mut buf) {
                Ok(0) => panic!("read {total} bytes without hitting the limit"),
                Ok(n) => total += n as u64,
                Err(e) => break e,
            }
        };
        let limit = (compressed * ZSTD_MAX_RATIO).clamp(ZSTD_RATIO_FLOOR, ZSTD_MAX_EXPANDED);
        assert_eq!(total, limit, "stops exactly at the limit");
        assert!(error.to_string().contains("ZSTD_LOG_TOO_LARGE"), "{error}");
        // Loading it as a log fails the same way, without reading it whole.
        match load_file(&path) {
            Ok(_) => panic!("a bomb loaded"),
            Err(e) => assert!(e.to_string().contains("ZSTD_LOG_TOO_LARGE"), "{e}"),
        }
    }

    #[test]
    fn a_zstd_log_within_its_limit_reads_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        bomb(&path, b"", 8);
        let mut input = open_input(&path).unwrap();
        let mut out = Vec::new();
        input.read_to_end(&mut out).unwrap();
        assert_eq!(out.len(), 8 << 20);
    }
}
