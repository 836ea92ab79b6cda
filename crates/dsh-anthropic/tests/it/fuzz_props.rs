//! Fuzz targets for the Messages stream decoder, written as property tests (no nightly
//! toolchain for `cargo fuzz` here).
//!
//! Properties, on arbitrary bytes, on event-shaped token soup and on mutated valid streams, each
//! fed in arbitrary slices:
//! - the decoder never panics and emits exactly one `finish`, as the last chunk;
//! - its output is accepted by `BlockAssembler` (nothing after finish);
//! - the chunks do not depend on how the bytes were sliced;
//! - a valid stream built from random blocks decodes back to those blocks.
//!
//! Case counts are bounded for CI; `DSH_FUZZ_CASES=<n>` runs each property `n` times instead
//! (for example `DSH_FUZZ_CASES=200000 cargo test --release -p dsh-anthropic --test it fuzz_props`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use dsh_anthropic::MessagesDecoder;
use dsh_llm::{Chunk, ContentBlock, FailureCode, FinishReason, Usage};
use dsh_test_support::fuzz::{
    check_decoder_contract, config, decode_in_slices, mutate, mutation, soup,
};
use dsh_test_support::{AnthropicReply, AnthropicUsage};
use proptest::prelude::*;

/// Decodes `bytes` fed in the slices that `cuts` describe; checks `push`'s result after each
/// cut and that input after the end changes nothing.
fn decode(bytes: &[u8], cuts: &[usize]) -> Vec<Chunk> {
    decode_in_slices(
        MessagesDecoder::new(),
        MessagesDecoder::push,
        bytes,
        cuts,
        b"data: {\"type\": \"message_stop\"}\n\n",
    )
}

fn token() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"event: message_start\n",
        b"event: content_block_delta\n",
        b"data: ",
        b"\n",
        b"\r\n",
        b"\n\n",
        b": ping\n\n",
        b"{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":7}}}",
        b"{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
        b"{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"read\",\"input\":{}}}",
        b"{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}",
        b"{\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\"}}",
        b"{\"type\":\"content_block_start\",\"index\":4294967295,\"content_block\":{\"type\":\"text\"}}",
        b"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}",
        b"{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}",
        b"{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}",
        b"{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig\"}}",
        b"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"citations_delta\"}}",
        b"{\"type\":\"content_block_stop\",\"index\":0}",
        b"{\"type\":\"content_block_stop\",\"index\":1}",
        b"{\"type\":\"content_block_stop\",\"index\":9}",
        b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}",
        b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}",
        b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}",
        b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"}}",
        b"{\"type\":\"message_stop\"}",
        b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}",
        b"{\"type\":\"ping\"}",
        b"{\"type\":null}",
        b"{}",
        b"{",
        b"\"",
        "é😀".as_bytes(),
        b"\xff",
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(|t| t.to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

#[derive(Debug, Clone)]
enum Block {
    Text(Vec<String>),
    Thinking(Vec<String>, String),
    Tool(String, Vec<String>),
}

#[derive(Debug, Clone)]
struct Reply {
    blocks: Vec<Block>,
    stop_reason: &'static str,
    usage: Option<AnthropicUsage>,
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{1,6}",
        ".{1,4}",
        Just("\"q\"\\".to_string()),
        Just("\n\ndata: x\n\n".to_string()),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    let block = prop_oneof![
        prop::collection::vec(piece(), 1..4).prop_map(Block::Text),
        (prop::collection::vec(piece(), 1..4), "[a-zA-Z0-9]{0,8}")
            .prop_map(|(p, s)| Block::Thinking(p, s)),
        (
            prop::sample::select(vec!["read", "bash"]),
            prop::collection::vec(piece(), 0..4)
        )
            .prop_map(|(n, p)| Block::Tool(n.to_string(), p)),
    ];
    let usage = prop::option::of(
        (0u64..100_000, 0u64..5_000, 0u64..100_000, 0u64..1_000).prop_map(
            |(input, output, read, write)| AnthropicUsage {
                input_tokens: input,
                output_tokens: output,
                cache_read_input_tokens: read,
                cache_creation_input_tokens: write,
            },
        ),
    );
    (
        prop::collection::vec(block, 0..4),
        prop::sample::select(vec!["end_turn", "tool_use", "max_tokens", "refusal"]),
        usage,
    )
        .prop_map(|(blocks, stop_reason, usage)| Reply {
            blocks,
            stop_reason,
            usage,
        })
}

fn refs(pieces: &[String]) -> Vec<&str> {
    pieces.iter().map(String::as_str).collect()
}

fn render(reply: &Reply) -> Vec<u8> {
    let mut builder = AnthropicReply::new();
    for (k, block) in reply.blocks.iter().enumerate() {
        builder = match block {
            Block::Text(pieces) => builder.text(&refs(pieces)),
            Block::Thinking(pieces, signature) => builder.thinking(&refs(pieces), signature),
            Block::Tool(name, pieces) => {
                builder.tool_use(&format!("toolu_{k}"), name, &refs(pieces))
            }
        };
    }
    builder
        .finish(reply.stop_reason, reply.usage)
        .into_sse()
        .body_bytes()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_end_in_exactly_one_finish(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        check_decoder_contract(&decode(&bytes, &cuts));
    }

    #[test]
    fn event_soup_is_decoded_the_same_however_it_is_sliced(
        bytes in soup(token()),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = decode(&bytes, &[]);
        check_decoder_contract(&whole);
        prop_assert_eq!(whole, decode(&bytes, &cuts));
    }

    #[test]
    fn built_replies_decode_back_to_their_blocks(
        reply in reply(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let chunks = decode(&render(&reply), &cuts);
        let assembled = check_decoder_contract(&chunks);
        match (reply.stop_reason, reply.blocks.is_empty()) {
            ("end_turn", true) => {
                let empty = matches!(&assembled.finish, FinishReason::Error { failure } if failure.code == FailureCode::EmptyResponse);
                prop_assert!(empty, "finish {:?}", assembled.finish);
                return Ok(());
            }
            ("end_turn", false) => prop_assert_eq!(&assembled.finish, &FinishReason::Stop),
            ("tool_use", _) => prop_assert_eq!(&assembled.finish, &FinishReason::ToolCalls),
            ("max_tokens", _) => prop_assert_eq!(&assembled.finish, &FinishReason::MaxTokens),
            (other, _) => {
                let code = FailureCode::Other(other.to_ascii_uppercase());
                let coded = matches!(&assembled.finish, FinishReason::Error { failure } if failure.code == code);
                prop_assert!(coded, "finish {:?}", assembled.finish);
                return Ok(());
            }
        }
        let max_tokens = assembled.finish == FinishReason::MaxTokens;
        let expected: Vec<Block> = reply
            .blocks
            .iter()
            .filter(|b| !(max_tokens && matches!(b, Block::Tool(..))))
            .cloned()
            .collect();
        prop_assert_eq!(assembled.blocks.len(), expected.len(), "{:?}", assembled.blocks);
        for (k, (got, want)) in assembled.blocks.iter().zip(&expected).enumerate() {
            match (got, want) {
                (ContentBlock::Text { text }, Block::Text(pieces)) => {
                    prop_assert_eq!(text, &pieces.concat());
                }
                (ContentBlock::Reasoning { text, .. }, Block::Thinking(pieces, _)) => {
                    prop_assert_eq!(text, &pieces.concat());
                }
                (ContentBlock::ToolCall { name, arguments, .. }, Block::Tool(n, pieces)) => {
                    prop_assert_eq!(name, n);
                    let joined = pieces.concat();
                    // No `input_json_delta` at all means the start's `input` (`{}`).
                    if !joined.is_empty() {
                        prop_assert_eq!(arguments, &joined);
                    }
                }
                other => prop_assert!(false, "block {}: {:?}", k, other),
            }
        }
        if let Some(usage) = reply.usage {
            prop_assert_eq!(
                assembled.usage,
                Some(Usage {
                    input_tokens: usage.input_tokens,
                    output_tokens: usage.output_tokens,
                    cache_read_tokens: usage.cache_read_input_tokens,
                    cache_write_tokens: usage.cache_creation_input_tokens,
                    reasoning_tokens: 0,
                })
            );
        }
    }

    #[test]
    fn mutated_replies_never_break_the_contract(
        reply in reply(),
        mutations in prop::collection::vec(mutation(token()), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let bytes = mutate(render(&reply), &mutations);
        let whole = decode(&bytes, &[]);
        check_decoder_contract(&whole);
        prop_assert_eq!(whole, decode(&bytes, &cuts));
    }
}
