//! Cancellation closes the call promptly; the API key never leaks.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_deepseek::ApiKey;
use dsh_llm::{Adapter, BlockAssembler, Chunk, FailureCode, FinishReason};
use dsh_test_support::{AnthropicReply, FakeProvider, ScriptedReply, StreamEnd};
use futures::StreamExt;

#[tokio::test]
async fn cancel_mid_stream_finishes_aborted_quickly_and_closes_the_connection() {
    let reply = AnthropicReply::new()
        .thinking(&["Let me think"], "sig")
        .open_text("partial answer")
        .end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let adapter = adapter_for(&provider);
    let request = simple_request();
    let cancel = request.cancel.clone();
    let mut stream = adapter.stream(request);
    let mut assembler = BlockAssembler::new();
    tokio::time::timeout(TEST_DEADLINE, async {
        while let Some(chunk) = stream.next().await {
            let is_text = matches!(chunk, Chunk::TextDelta { .. });
            assembler.push(&chunk).unwrap();
            if is_text {
                break;
            }
        }
        provider.wait_for_stalls(1).await;
    })
    .await
    .expect("partial reply and stall");
    let cancelled_at = Instant::now();
    cancel.cancel();
    let rest: Vec<Chunk> = tokio::time::timeout(TEST_DEADLINE, stream.by_ref().collect())
        .await
        .expect("stream ends after cancel");
    assert!(cancelled_at.elapsed() < Duration::from_millis(500));
    match rest.last() {
        Some(Chunk::Finish {
            reason: FinishReason::Aborted { failure },
        }) => {
            assert_eq!(failure.code, FailureCode::Aborted)
        }
        other => panic!("expected aborted, got {other:?}"),
    }
    drop(stream);
    tokio::time::timeout(TEST_DEADLINE, provider.wait_for_client_disconnects(1))
        .await
        .expect("the server sees the connection closed");
    assert_eq!(assembler.interrupted().len(), 2);
}

#[tokio::test]
async fn cancel_before_start_sends_nothing() {
    let provider = FakeProvider::start([]).await.unwrap();
    let request = simple_request();
    request.cancel.cancel();
    let chunks = collect(&adapter_for(&provider), request).await;
    assert!(matches!(finish(&chunks), FinishReason::Aborted { .. }));
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn an_echoed_key_is_scrubbed_and_debug_redacts_it() {
    let reply = ScriptedReply::anthropic_error(
        401,
        "authentication_error",
        &format!("invalid x-api-key: {TEST_KEY}"),
    );
    let provider = FakeProvider::start([reply]).await.unwrap();
    let adapter = adapter_for(&provider);
    let failure = error_failure(&collect(&adapter, simple_request()).await);
    assert!(!failure.message.contains(TEST_KEY), "{}", failure.message);
    assert!(failure.message.contains("<redacted>"));
    let debug = format!("{adapter:?} {:?}", config_for(&provider));
    assert!(!debug.contains(TEST_KEY), "{debug}");
}

#[tokio::test]
async fn invalid_header_values_fail_at_construction_without_echoing_the_key() {
    let config = AnthropicConfig::new("http://127.0.0.1:1", Some(ApiKey::new("bad\nkey-secret")));
    let err = AnthropicAdapter::new(config).unwrap_err();
    assert!(!err.to_string().contains("key-secret"));
    let mut config = AnthropicConfig::new("http://127.0.0.1:1", Some(ApiKey::new(TEST_KEY)));
    config.extra_headers.push(("bad header".into(), "x".into()));
    assert!(AnthropicAdapter::new(config).is_err());
}
