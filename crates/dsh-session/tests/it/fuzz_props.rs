//! Fuzz targets for the session log reader, written as property tests (no nightly toolchain
//! for `cargo fuzz` here).
//!
//! Inputs: arbitrary bytes, JSONL-shaped token soup, and the recorded dsh sessions of
//! `fixtures/dsh/acp-snapshots` mutated (bytes flipped, inserted, deleted, lines
//! duplicated, swapped or dropped, fields replaced). Properties:
//! - `LogReader` never panics: it yields events or a clear error, and stops;
//! - whatever it yields goes through `Projector`, `SessionTracker`, repair and the Markdown
//!   export without panicking;
//! - a real log cut at any byte loads a prefix of the full log's events (the torn line is
//!   dropped and reported), never an error, never an invented event;
//! - a zstd-compressed log (every vendored dsh log, compressed as dsh does, see
//!   `dsh_logs::dsh_style_zstd`) damaged anywhere, or arbitrary bytes under a `.jsonl.zstd`
//!   name, give events or a clear error, never a panic.
//!
//! Case counts are bounded for CI; `DSH_FUZZ_CASES=<n>` runs each property `n` times instead
//! (for example `DSH_FUZZ_CASES=100000 cargo test --release -p dsh-session --test it fuzz_props`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::OnceLock;

use dsh_session::{
    export_markdown, repair, Envelope, LoadedLog, LogReader, Projector, SessionTracker,
};
use dsh_test_support::fuzz::config;
use proptest::prelude::*;

/// The recorded sessions, read once.
fn fixtures() -> &'static [(String, Vec<u8>)] {
    static FIXTURES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let dir = dsh_test_support_dir();
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("fixtures folder") {
            let path = entry.expect("entry").path().join("session.jsonl");
            if path.is_file() {
                out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
        out.sort();
        assert!(
            out.len() >= 20,
            "expected the recorded sessions in {}",
            dir.display()
        );
        out
    })
}

fn dsh_test_support_dir() -> PathBuf {
    dsh_test_support::snapshot_fixtures_dir()
}

/// What reading `bytes` gave: the events before the end or the first error, and the error.
struct Read {
    events: Vec<Envelope>,
    error: Option<String>,
    torn: bool,
    header: Option<dsh_session::SessionHeader>,
}

fn read(bytes: &[u8]) -> Read {
    let mut reader = match LogReader::new(Cursor::new(bytes), "fuzz") {
        Ok(reader) => reader,
        Err(err) => {
            let message = err.to_string();
            assert!(!message.is_empty());
            return Read {
                events: Vec::new(),
                error: Some(message),
                torn: false,
                header: None,
            };
        }
    };
    let mut events = Vec::new();
    let mut error = None;
    // Every call consumes a line or ends, so this terminates; the bound guards against a loop.
    for _ in 0..=bytes.len() * 64 + 16 {
        match reader.next_event() {
            Ok(Some(env)) => events.push(env),
            Ok(None) => break,
            Err(err) => {
                let message = err.to_string();
                assert!(!message.is_empty());
                error = Some(message);
                break;
            }
        }
    }
    let torn = reader.torn_tail().is_some();
    Read {
        events,
        error,
        torn,
        header: Some(reader.header().clone()),
    }
}

/// Everything downstream of the reader must take what it yields without panicking.
fn consume(read: &Read) {
    let mut projector = Projector::new();
    let mut tracker = SessionTracker::new();
    for env in &read.events {
        // A projection error (a replace citing an unknown span) is a reported error, not a panic.
        let _ = projector.push(env);
        tracker.push(env);
    }
    let _ = projector.history();
    if let Some(header) = &read.header {
        let _ = repair::closers(header, &tracker);
        let log = LoadedLog {
            header: header.clone(),
            events: read.events.clone(),
            torn_tail: None,
        };
        let _ = export_markdown(&log);
    }
}

fn token() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"cwd\":\"/w\"}\n",
        b"{\"type\":\"session\",\"version\":99,\"id\":\"s\",\"createdAt\":1,\"cwd\":\"/w\"}\n",
        b"{\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n",
        b"{\"type\":\"step/start\",\"data\":{\"turn\":1,\"step\":1}}\n",
        b"{\"type\":\"text-chunks\",\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"texts\":[\"a\",\"b\"],\"dt\":[0]}}\n",
        b"{\"type\":\"tool-call-chunks\",\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"id\":\"c\",\"name\":\"bash\",\"args\":[],\"dt\":[1,2,3]}}\n",
        b"{\"type\":\"reasoning-chunks\",\"data\":{\"turn\":1,\"step\":1,\"index\":4294967295,\"texts\":[\"x\"]}}\n",
        b"{\"type\":\"user/message\",\"surfaceOp\":{\"op\":\"replace\",\"start\":9,\"end\":2},\"data\":{\"message\":{\"id\":\"u\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}],\"source\":{\"kind\":\"user\"}}}}\n",
        b"{\"type\":\"user/message\",\"surfaceOp\":\"append\",\"data\":{\"message\":{\"id\":\"u\",\"role\":\"user\",\"content\":[{\"type\":\"tool-result\",\"toolCallId\":\"c\",\"content\":[]}],\"source\":{\"kind\":\"tool\",\"callId\":\"c\"}}}}\n",
        b"{\"type\":\"tool/call\",\"data\":{\"turn\":1,\"step\":1,\"callId\":\"c\",\"name\":\"bash\",\"arguments\":\"{\"}}\n",
        b"{\"type\":\"future/thing\",\"ignorable\":true,\"data\":{}}\n",
        b"{\"type\":\"future/thing\",\"data\":{}}\n",
        b"{\"type\":\"step/end\",\"data\":{\"turn\":1,\"step\":1}}\n",
        b"{\"type\":\"turn/end\",\"data\":{\"turn\":1,\"reason\":{\"type\":\"completed\"}}}\n",
        b"{\"seq\":18446744073709551615}\n",
        b"\n",
        b"\r\n",
        b"{",
        b"}",
        b"\"",
        b"null",
        "é😀".as_bytes(),
        b"\xff\0",
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(|t| t.to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..12),
    ]
}

/// A mutation of a JSONL file.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    DuplicateLine(usize),
    DropLine(usize),
    SwapLines(usize, usize),
    /// Replaces the text after the `n`th `":` with `value` up to the next `,` or `}`.
    ReplaceValue(usize, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let values = vec![
        "null",
        "0",
        "-1",
        "18446744073709551615",
        "1e999",
        "\"\"",
        "\"x\"",
        "[]",
        "{}",
        "true",
        "[\"a\",1]",
        "{\"type\":\"replace\",\"start\":0,\"end\":999999}",
        "{\"type\":\"unknown-kind\"}",
    ];
    prop_oneof![
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        1 => (any::<usize>(), token()).prop_map(|(at, t)| Mutation::Insert(at, t)),
        1 => (any::<usize>(), 1usize..200).prop_map(|(at, n)| Mutation::Delete(at, n)),
        1 => any::<usize>().prop_map(Mutation::DuplicateLine),
        1 => any::<usize>().prop_map(Mutation::DropLine),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        3 => (any::<usize>(), prop::sample::select(values)).prop_map(|(n, v)| Mutation::ReplaceValue(n, v)),
    ]
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip(at, b) if len > 0 => bytes[at % len] ^= b | 1,
            Mutation::Flip(..) => {}
            Mutation::Insert(at, t) => {
                let at = at % (len + 1);
                bytes.splice(at..at, t.iter().copied());
            }
            Mutation::Delete(at, n) => {
                let at = at % (len + 1);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::DuplicateLine(k) | Mutation::DropLine(k) => {
                let mut ls = lines(&bytes);
                if !ls.is_empty() {
                    let k = k % ls.len();
                    if matches!(m, Mutation::DropLine(_)) {
                        ls.remove(k);
                    } else {
                        let line = ls[k].clone();
                        ls.insert(k, line);
                    }
                }
                bytes = ls.concat();
            }
            Mutation::SwapLines(a, b) => {
                let mut ls = lines(&bytes);
                if !ls.is_empty() {
                    let n = ls.len();
                    ls.swap(a % n, b % n);
                }
                bytes = ls.concat();
            }
            Mutation::ReplaceValue(n, value) => {
                let colons: Vec<usize> = bytes
                    .windows(2)
                    .enumerate()
                    .filter(|(_, w)| w == b"\":")
                    .map(|(i, _)| i + 2)
                    .collect();
                if colons.is_empty() {
                    continue;
                }
                let start = colons[n % colons.len()];
                let end = bytes[start..]
                    .iter()
                    .position(|&b| b == b',' || b == b'}' || b == b'\n')
                    .map_or(len, |p| start + p);
                bytes.splice(start..end, value.bytes());
            }
        }
    }
    bytes
}

/// Every vendored dsh log that loads (fixtures/dsh), compressed as dsh writes it, read once.
fn zstd_corpus() -> &'static [(String, Vec<u8>)] {
    static CORPUS: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        crate::dsh_logs::vendored_dsh_logs()
            .into_iter()
            .filter(|p| {
                let name = p.display().to_string();
                !crate::dsh_logs::EXPECTED_REFUSALS
                    .iter()
                    .any(|(suffix, _)| name.ends_with(suffix))
            })
            .map(|p| {
                let plain = std::fs::read(&p).unwrap();
                (
                    p.display().to_string(),
                    crate::dsh_logs::dsh_style_zstd(&plain),
                )
            })
            .collect()
    })
}

/// Reads `bytes` as a `session.jsonl.zstd` file through [`LogReader::open`].
fn read_zstd_file(bytes: &[u8]) -> Read {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl.zstd");
    std::fs::write(&path, bytes).unwrap();
    let mut reader = match LogReader::open(&path) {
        Ok(reader) => reader,
        Err(err) => {
            assert!(!err.to_string().is_empty());
            return Read {
                events: Vec::new(),
                error: Some(err.to_string()),
                torn: false,
                header: None,
            };
        }
    };
    let mut events = Vec::new();
    let mut error = None;
    // Decompression can grow the input a lot: bound by events, not bytes.
    for _ in 0..1_000_000 {
        match reader.next_event() {
            Ok(Some(env)) => events.push(env),
            Ok(None) => break,
            Err(err) => {
                assert!(!err.to_string().is_empty());
                error = Some(err.to_string());
                break;
            }
        }
    }
    Read {
        torn: reader.torn_tail().is_some(),
        header: Some(reader.header().clone()),
        events,
        error,
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn damaged_zstd_logs_never_panic(
        which in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let (_, compressed) = which.get(zstd_corpus());
        consume(&read_zstd_file(&mutate(compressed.clone(), &mutations)));
    }

    #[test]
    fn arbitrary_bytes_as_zstd_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..800)) {
        consume(&read_zstd_file(&bytes));
    }

    #[test]
    fn a_zstd_log_cut_anywhere_loads_a_prefix_or_says_why(
        which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (name, compressed) = which.get(zstd_corpus());
        let full = read_zstd_file(compressed);
        prop_assert!(full.error.is_none(), "{}: {:?}", name, full.error);
        let at = cut.index(compressed.len() + 1);
        let partial = read_zstd_file(&compressed[..at]);
        // Cut inside the header frame: nothing to read, refused with a clear error. Elsewhere:
        // the complete frames (and what the cut frame gave) load as a prefix.
        if partial.header.is_some() {
            prop_assert!(partial.error.is_none(), "{} cut at {}: {:?}", name, at, partial.error);
            prop_assert!(partial.events[..] == full.events[..partial.events.len()], "{} cut at {}", name, at);
        } else {
            prop_assert!(partial.error.is_some());
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..800)) {
        consume(&read(&bytes));
    }

    #[test]
    fn jsonl_soup_never_panics(tokens in prop::collection::vec(token(), 0..30)) {
        consume(&read(&tokens.concat()));
    }

    #[test]
    fn mutated_recorded_sessions_never_panic(
        which in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let (_, original) = which.get(fixtures());
        let bytes = mutate(original.clone(), &mutations);
        consume(&read(&bytes));
    }

    #[test]
    fn a_recorded_session_cut_anywhere_loads_a_prefix(
        which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (name, original) = which.get(fixtures());
        let full = read(original);
        prop_assert!(full.error.is_none(), "{}: {:?}", name, full.error);
        let at = cut.index(original.len() + 1);
        let header_end = original.iter().position(|&b| b == b'\n').unwrap() + 1;
        let partial = read(&original[..at]);
        if at < header_end {
            // Without a complete header line the log is refused with a clear error (the
            // header line parses only when just its newline is missing).
            prop_assert!(partial.error.is_some() || at + 1 >= header_end);
            return Ok(());
        }
        prop_assert!(partial.error.is_none(), "{} cut at {}: {:?}", name, at, partial.error);
        prop_assert!(partial.events.len() <= full.events.len());
        prop_assert!(partial.events[..] == full.events[..partial.events.len()], "{} cut at {}: not a prefix", name, at);
        let on_line_boundary = at == original.len() || original[at - 1] == b'\n';
        if on_line_boundary {
            prop_assert!(!partial.torn);
        }
        consume(&partial);
    }
}
