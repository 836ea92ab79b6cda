//! SSE parse + chunk emission + block assembly over a large recorded-style stream, against the
//! floor of parsing the same `data:` payloads with `serde_json` alone.
//!
//! Run: `cargo bench -p dsh-deepseek --bench sse`. The stream is ~50 MB of small deltas
//! (reasoning, text, tool-call arguments) in DeepSeek's exact wire format, fed to the decoder
//! in 16 KiB slices as a socket would deliver it.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dsh_deepseek::StreamDecoder;
use dsh_llm::{BlockAssembler, Chunk, FinishReason, Usage};
use dsh_test_support::render_chunks_as_sse;
use serde::Deserialize;

const TARGET_BYTES: usize = 50_000_000;
const READ_SIZE: usize = 16 * 1024;

/// One reply: a reasoning block, a text block and two tool calls, in small deltas.
fn reply_chunks(reply: usize) -> Vec<Chunk> {
    let words = [
        "the",
        " file",
        " contains",
        " a",
        " função",
        " that",
        " returns",
        " \"quoted\"",
        " values",
        ",\n",
        " so",
        " I",
        " will",
        " edit",
        " it",
        ".",
    ];
    let mut chunks = Vec::new();
    for k in 0..400 {
        chunks.push(Chunk::ReasoningDelta {
            index: 0,
            text: words[k % words.len()].to_string(),
        });
    }
    for k in 0..300 {
        chunks.push(Chunk::TextDelta {
            index: 1,
            text: words[(k * 7) % words.len()].to_string(),
        });
    }
    for call in 0..2u32 {
        let index = 2 + call;
        chunks.push(Chunk::ToolCallDelta {
            index,
            id: format!("call_{reply}_{call}"),
            name: Some("edit".into()),
            arguments_delta: String::new(),
        });
        for piece in [
            "{\"",
            "file",
            "_path",
            "\":",
            " \"src/",
            "main",
            ".rs\"",
            ", \"old",
            "_string\": \"",
            "fn main() {\\n",
            "}\"}",
        ]
        .iter()
        .cycle()
        .take(150)
        {
            chunks.push(Chunk::ToolCallDelta {
                index,
                id: String::new(),
                name: None,
                arguments_delta: (*piece).to_string(),
            });
        }
    }
    chunks.push(Chunk::Usage {
        usage: Usage {
            input_tokens: 184,
            output_tokens: 1000,
            cache_read_tokens: 2816,
            cache_write_tokens: 0,
            reasoning_tokens: 400,
        },
    });
    chunks.push(Chunk::Finish {
        reason: FinishReason::ToolCalls,
    });
    chunks
}

/// The replies of the stream, each a complete SSE body ending with `[DONE]`.
fn corpus() -> Vec<Vec<u8>> {
    let mut replies = Vec::new();
    let mut total = 0;
    while total < TARGET_BYTES {
        let bytes = render_chunks_as_sse(&reply_chunks(replies.len()));
        total += bytes.len();
        replies.push(bytes);
    }
    replies
}

/// The `data:` payloads of `body`, as the floor parses them.
fn payloads(body: &[u8]) -> Vec<&[u8]> {
    body.split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data: "))
        .filter(|payload| *payload != b"[DONE]")
        .collect()
}

/// Ours: SSE framing, borrowed JSON decoding, chunk emission and block assembly.
fn decode_and_assemble(replies: &[Vec<u8>]) -> usize {
    let mut blocks = 0;
    let mut out = Vec::with_capacity(256);
    for body in replies {
        let mut decoder = StreamDecoder::new();
        let mut assembler = BlockAssembler::new();
        for slice in body.chunks(READ_SIZE) {
            decoder.push(slice, &mut out);
            for chunk in out.drain(..) {
                // The decoder never emits after finish, so the assembler cannot refuse.
                let _ = assembler.push(&chunk);
            }
        }
        blocks += assembler.finish().blocks.len();
    }
    blocks
}

/// A minimal borrowed view of one event, the tightest floor a typed parser could reach.
#[derive(Deserialize)]
#[allow(dead_code)] // fields are read by the deserializer only
struct MinimalEvent<'a> {
    #[serde(borrow)]
    choices: Vec<MinimalChoice<'a>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct MinimalChoice<'a> {
    #[serde(borrow)]
    delta: Option<MinimalDelta<'a>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct MinimalDelta<'a> {
    #[serde(borrow, default)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<serde::de::IgnoredAny>,
}

fn bench_sse(c: &mut Criterion) {
    let replies = corpus();
    let total: usize = replies.iter().map(Vec::len).sum();
    let all_payloads: Vec<&[u8]> = replies.iter().flat_map(|body| payloads(body)).collect();
    eprintln!(
        "corpus: {} replies, {} events, {:.1} MB",
        replies.len(),
        all_payloads.len(),
        total as f64 / 1e6
    );

    let mut group = c.benchmark_group("sse");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::BytesDecimal(total as u64));
    group.bench_function("dsh_decode_and_assemble", |b| {
        b.iter(|| black_box(decode_and_assemble(black_box(&replies))))
    });
    group.bench_function("floor_serde_json_value", |b| {
        b.iter(|| {
            let mut parsed = 0usize;
            for payload in &all_payloads {
                if let Ok(value) = serde_json::from_slice::<serde_json::Value>(payload) {
                    parsed += usize::from(value.is_object());
                }
            }
            black_box(parsed)
        })
    });
    group.bench_function("floor_minimal_struct", |b| {
        b.iter(|| {
            let mut parsed = 0usize;
            for payload in &all_payloads {
                if let Ok(event) = serde_json::from_slice::<MinimalEvent<'_>>(payload) {
                    parsed += event.choices.len();
                }
            }
            black_box(parsed)
        })
    });
    group.finish();
}

criterion_group!(benches, bench_sse);
criterion_main!(benches);
