//! Cancellation closes the call promptly; the API key never leaks.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::time::Duration;

use common::*;
use dsh_deepseek::{ApiKey, DeepSeekAdapter, DeepSeekConfig};
use dsh_llm::{Adapter, FailureCode, FinishReason};
use dsh_test_support::provider_checks::{
    assert_cancelled_request_sends_nothing, cancel_after_first_text, refused_url, silent_server,
};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd};
use futures::StreamExt;

#[tokio::test]
async fn cancel_mid_stream_finishes_aborted_quickly_and_closes_the_connection() {
    let reply = SseReply::new()
        .reasoning("Let me think")
        .text("partial answer")
        .end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let recovered =
        cancel_after_first_text(&provider, &adapter_for(&provider), simple_request()).await;
    // The partial reply is recoverable as an interrupted message.
    assert_eq!(recovered.len(), 2);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let reply = SseReply::new().text("x").end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let adapter = adapter_for(&provider);
    let mut stream = adapter.stream(simple_request());
    let first = tokio::time::timeout(TEST_DEADLINE, stream.next())
        .await
        .unwrap();
    assert!(first.is_some());
    provider.wait_for_stalls(1).await;
    drop(stream);
    tokio::time::timeout(TEST_DEADLINE, provider.wait_for_client_disconnects(1))
        .await
        .expect("dropping the stream closes the connection");
}

#[tokio::test]
async fn cancel_while_waiting_for_headers_is_aborted() {
    let (url, silent) = silent_server().await;
    let config = DeepSeekConfig::new(url, Some(ApiKey::new(TEST_KEY)));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let request = simple_request();
    let cancel = request.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let chunks = collect(&adapter, request).await;
    assert!(matches!(finish(&chunks), FinishReason::Aborted { .. }));
    silent.abort();
}

#[tokio::test]
async fn already_cancelled_request_sends_nothing() {
    let provider = FakeProvider::start([]).await.unwrap();
    assert_cancelled_request_sends_nothing(&provider, &adapter_for(&provider), simple_request())
        .await;
}

#[tokio::test]
async fn the_key_never_appears_in_failures_or_debug_output() {
    let echoing = ScriptedReply::http_error(
        401,
        &format!("Incorrect API key provided: {TEST_KEY}. You can find your key in the console."),
    );
    let in_stream = SseReply::new()
        .text("a")
        .data(format!(r#"{{"error":{{"message":"bad key {TEST_KEY}"}}}}"#));
    let provider = FakeProvider::start([echoing, in_stream.into()])
        .await
        .unwrap();
    let adapter = adapter_for(&provider);
    for _ in 0..2 {
        let chunks = collect(&adapter, simple_request()).await;
        let failure = error_failure(&chunks);
        let shown = format!(
            "{failure} {failure:?} {}",
            serde_json::to_string(&chunks).unwrap()
        );
        assert!(!shown.contains(TEST_KEY), "{shown}");
        assert!(
            failure.message.contains("<redacted>"),
            "{}",
            failure.message
        );
    }
    let debug = format!(
        "{adapter:?} {:?} {:?}",
        config_for(&provider),
        ApiKey::new(TEST_KEY)
    );
    assert!(!debug.contains(TEST_KEY), "{debug}");
    // The key did reach the server, in the Authorization header only.
    for request in provider.requests() {
        let bearer = format!("Bearer {TEST_KEY}");
        assert_eq!(request.header("authorization"), Some(bearer.as_str()));
        assert!(!String::from_utf8_lossy(&request.raw_body).contains(TEST_KEY));
    }
}

#[tokio::test]
async fn transport_failures_do_not_show_the_key() {
    let config = DeepSeekConfig::new(refused_url(), Some(ApiKey::new(TEST_KEY)));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Transport);
    assert!(!format!("{failure:?}").contains(TEST_KEY));
}

#[test]
fn invalid_extra_header_fails_at_construction() {
    let mut config = DeepSeekConfig::new("http://127.0.0.1:1", Some(ApiKey::new(TEST_KEY)));
    config.extra_headers.push(("bad header".into(), "v".into()));
    let err = DeepSeekAdapter::new(config).unwrap_err();
    assert!(err.to_string().contains("bad header"));
    let bad_key = DeepSeekConfig::new("http://127.0.0.1:1", Some(ApiKey::new("sk-\nsecret")));
    let err = DeepSeekAdapter::new(bad_key).unwrap_err();
    assert!(!err.to_string().contains("secret"));
}

#[tokio::test]
async fn a_redirect_is_refused_and_the_key_goes_nowhere_else() {
    let elsewhere = FakeProvider::start([]).await.unwrap();
    let redirect = dsh_test_support::web_search::redirect_reply(&elsewhere.base_url());
    let provider = FakeProvider::start([redirect]).await.unwrap();
    dsh_test_support::provider_checks::assert_redirect_not_followed(
        &elsewhere,
        &adapter_for(&provider),
        simple_request(),
    )
    .await;
}
