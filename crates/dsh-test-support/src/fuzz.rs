//! Helpers of the fuzz targets written as property tests (`tests/it/fuzz_props.rs` of several
//! crates): case counts, and for the stream decoders of the provider adapters, the sliced-feed
//! driver, the output contract and byte mutations.

use dsh_http::BodyDecoder;
use dsh_llm::{AssembledReply, Chunk};
use proptest::prelude::*;

use crate::provider_checks::{assemble, assert_one_finish_last};

/// Cases per property: `DSH_FUZZ_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("DSH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Proptest configuration with [`cases`]`(default)` cases and no failure persistence.
pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Decodes `bytes` fed to `decoder` in the slices that `cuts` (positions, any order, clamped)
/// describe, then ends the stream, and returns every chunk.
///
/// `push` is the decoder's own `push`, which returns whether the decoder finished: after each
/// cut that value is asserted equal to `is_finished()`. Asserts as well that input after the
/// end (`after_end`, pushed then ended again) adds no chunk.
pub fn decode_in_slices<D: BodyDecoder>(
    mut decoder: D,
    push: fn(&mut D, &[u8], &mut Vec<Chunk>) -> bool,
    bytes: &[u8],
    cuts: &[usize],
    after_end: &[u8],
) -> Vec<Chunk> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts {
        let finished = push(&mut decoder, &bytes[start..cut], &mut out);
        assert_eq!(finished, decoder.is_finished());
        start = cut;
    }
    push(&mut decoder, &bytes[start..], &mut out);
    decoder.end_of_stream(&mut out);
    // Input after the end changes nothing.
    let before = out.len();
    push(&mut decoder, after_end, &mut out);
    decoder.end_of_stream(&mut out);
    assert_eq!(out.len(), before, "chunks after the end of the stream");
    out
}

/// The decoder contract: asserts exactly one `finish`, as the last chunk, and that
/// `BlockAssembler` accepts every chunk; returns the assembled reply.
pub fn check_decoder_contract(chunks: &[Chunk]) -> AssembledReply {
    assert_one_finish_last(chunks);
    assemble(chunks)
}

/// Up to 40 `token`s, concatenated.
pub fn soup(token: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
}

/// One edit of a byte string; positions are taken modulo its length.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// XORs the byte at the position with the value (with its low bit set, so it changes).
    Flip(usize, u8),
    /// Inserts the bytes at the position.
    Insert(usize, Vec<u8>),
    /// Deletes up to that many bytes from the position.
    Delete(usize, usize),
    /// Cuts the bytes at the position.
    Truncate(usize),
}

/// Any [`Mutation`]; insertions insert a `token`.
pub fn mutation(
    token: impl Strategy<Value = Vec<u8>> + 'static,
) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        (any::<usize>(), token).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), 1usize..64).prop_map(|(at, n)| Mutation::Delete(at, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// Applies `mutations` to `bytes`, in order.
pub fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
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
                let end = (at + n).min(len);
                bytes.drain(at..end);
            }
            Mutation::Truncate(at) => bytes.truncate(at % (len + 1)),
        }
    }
    bytes
}
