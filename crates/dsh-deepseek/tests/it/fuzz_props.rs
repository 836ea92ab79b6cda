//! Fuzz targets for the chat-completions stream decoder, written as property tests (no nightly
//! toolchain for `cargo fuzz` here).
//!
//! Properties, on arbitrary bytes, on SSE-shaped token soup and on mutated valid streams, each
//! fed in arbitrary slices:
//! - the decoder never panics and emits exactly one `finish`, as the last chunk;
//! - its output is accepted by `BlockAssembler` (nothing after finish);
//! - the chunks do not depend on how the bytes were sliced;
//! - a valid stream rendered from random content decodes back to that content.
//!
//! Case counts are bounded for CI; `DSH_FUZZ_CASES=<n>` runs each property `n` times instead
//! (for example `DSH_FUZZ_CASES=200000 cargo test --release -p dsh-deepseek --test it fuzz_props`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use dsh_deepseek::StreamDecoder;
use dsh_llm::{Chunk, ContentBlock, FailureCode, FinishReason, Usage};
use dsh_test_support::fuzz::{
    check_decoder_contract, config, decode_in_slices, mutate, mutation, soup,
};
use dsh_test_support::render_chunks_as_sse;
use proptest::prelude::*;

/// Decodes `bytes` fed in the slices that `cuts` describe; checks `push`'s result after each
/// cut and that input after the end changes nothing.
fn decode(bytes: &[u8], cuts: &[usize]) -> Vec<Chunk> {
    decode_in_slices(
        StreamDecoder::new(),
        StreamDecoder::push,
        bytes,
        cuts,
        b"data: {\"choices\": []}\n\n",
    )
}

/// SSE-shaped fragments: framing, comments, terminators, and event JSON pieces.
fn token() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"data: ",
        b"data:",
        b"\n",
        b"\r\n",
        b"\r",
        b"\n\n",
        b": keep-alive\n\n",
        b"event: message\n",
        b"id: 7\n",
        b"retry: 10\n",
        b"data: [DONE]\n\n",
        b"[DONE]",
        b"{",
        b"}",
        b"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"a\"}}]}}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":4294967295,\"function\":{\"arguments\":\"x\"}}]}}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}",
        b"{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}",
        b"{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"prompt_cache_hit_tokens\":9}}",
        b"{\"choices\":[{\"delta\":null}]}",
        b"{\"choices\":null}",
        b"{\"error\":{\"message\":\"overloaded\"}}",
        b"\"",
        b"\\u00e9",
        b"\\ud800",
        "é€😀".as_bytes(),
        b"\xff\xfe",
        b"\0",
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(|t| t.to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ]
}

/// Content of one reply, to render and decode back.
#[derive(Debug, Clone)]
struct Reply {
    reasoning: Vec<String>,
    text: Vec<String>,
    tools: Vec<(String, Vec<String>)>,
    usage: Option<Usage>,
    finish: FinishReason,
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{1,6}",
        ".{1,4}",
        Just("\"quoted\"".to_string()),
        Just("\\n\n".to_string()),
        Just("data: [DONE]\n\n".to_string()),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    let finish = prop_oneof![
        Just(FinishReason::Stop),
        Just(FinishReason::ToolCalls),
        Just(FinishReason::MaxTokens),
        Just(FinishReason::Error {
            failure: dsh_llm::Failure::new(FailureCode::Other("CONTENT_FILTER".into()), "filtered")
        }),
    ];
    let usage = prop::option::of(
        (0u64..1_000_000, 0u64..10_000, 0u64..1_000_000, 0u64..100).prop_map(
            |(input, output, cache_read, reasoning)| Usage {
                input_tokens: input,
                output_tokens: output + reasoning,
                cache_read_tokens: cache_read,
                cache_write_tokens: 0,
                reasoning_tokens: reasoning,
            },
        ),
    );
    (
        prop::collection::vec(piece(), 0..5),
        prop::collection::vec(piece(), 0..5),
        prop::collection::vec(
            (
                prop::sample::select(vec!["read", "bash", "grep"]),
                prop::collection::vec(piece(), 1..4),
            ),
            0..3,
        ),
        usage,
        finish,
    )
        .prop_map(|(reasoning, text, tools, usage, finish)| Reply {
            reasoning,
            text,
            tools: tools
                .into_iter()
                .map(|(name, args)| (name.to_string(), args))
                .collect(),
            usage,
            finish,
        })
}

fn render(reply: &Reply) -> Vec<u8> {
    let mut chunks = Vec::new();
    for text in &reply.reasoning {
        chunks.push(Chunk::ReasoningDelta {
            index: 0,
            text: text.clone(),
        });
    }
    for text in &reply.text {
        chunks.push(Chunk::TextDelta {
            index: 1,
            text: text.clone(),
        });
    }
    for (k, (name, args)) in reply.tools.iter().enumerate() {
        let index = 2 + k as u32;
        for (n, arg) in args.iter().enumerate() {
            chunks.push(Chunk::ToolCallDelta {
                index,
                id: if n == 0 {
                    format!("call_{k}")
                } else {
                    String::new()
                },
                name: (n == 0).then(|| name.clone()),
                arguments_delta: arg.clone(),
            });
        }
    }
    if let Some(usage) = reply.usage {
        chunks.push(Chunk::Usage { usage });
    }
    chunks.push(Chunk::Finish {
        reason: reply.finish.clone(),
    });
    render_chunks_as_sse(&chunks)
}

fn joined(blocks: &[ContentBlock], reasoning: bool) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !reasoning => Some(text.as_str()),
            ContentBlock::Reasoning { text, .. } if reasoning => Some(text.as_str()),
            _ => None,
        })
        .collect()
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
    fn sse_soup_is_decoded_the_same_however_it_is_sliced(
        bytes in soup(token()),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = decode(&bytes, &[]);
        check_decoder_contract(&whole);
        let sliced = decode(&bytes, &cuts);
        prop_assert_eq!(whole, sliced);
    }

    #[test]
    fn rendered_replies_decode_back_to_their_content(
        reply in reply(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let bytes = render(&reply);
        let chunks = decode(&bytes, &cuts);
        let assembled = check_decoder_contract(&chunks);
        let nothing = reply.reasoning.is_empty() && reply.text.is_empty() && reply.tools.is_empty();
        let expected_finish = match &reply.finish {
            FinishReason::Stop if nothing => None,
            other => Some(other.clone()),
        };
        match expected_finish {
            Some(FinishReason::Error { failure }) => {
                let same = matches!(&assembled.finish, FinishReason::Error { failure: f } if f.code == failure.code);
                prop_assert!(same, "finish {:?}", assembled.finish);
            }
            Some(expected) => prop_assert_eq!(&assembled.finish, &expected),
            None => {
                let empty = matches!(&assembled.finish, FinishReason::Error { failure } if failure.code == FailureCode::EmptyResponse);
                prop_assert!(empty, "finish {:?}", assembled.finish);
                return Ok(());
            }
        }
        if matches!(assembled.finish, FinishReason::Error { .. }) {
            return Ok(());
        }
        prop_assert_eq!(joined(&assembled.blocks, true), reply.reasoning.concat());
        prop_assert_eq!(joined(&assembled.blocks, false), reply.text.concat());
        let calls: Vec<(String, String, String)> = assembled
            .blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall { id, name, arguments } => {
                    Some((id.clone(), name.clone(), arguments.clone()))
                }
                _ => None,
            })
            .collect();
        let expected: Vec<(String, String, String)> = if assembled.finish == FinishReason::MaxTokens {
            Vec::new()
        } else {
            reply
                .tools
                .iter()
                .enumerate()
                .map(|(k, (name, args))| (format!("call_{k}"), name.clone(), args.concat()))
                .collect()
        };
        prop_assert_eq!(calls, expected);
        if let Some(usage) = reply.usage {
            prop_assert_eq!(assembled.usage, Some(usage));
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
