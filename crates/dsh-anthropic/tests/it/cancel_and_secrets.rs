//! Cancellation closes the call promptly; the API key never leaks.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_http::ApiKey;
use dsh_test_support::provider_checks::{
    assert_cancelled_request_sends_nothing, cancel_after_first_text,
};
use dsh_test_support::{AnthropicReply, FakeProvider, ScriptedReply, StreamEnd};

#[tokio::test]
async fn cancel_mid_stream_finishes_aborted_quickly_and_closes_the_connection() {
    let reply = AnthropicReply::new()
        .thinking(&["Let me think"], "sig")
        .open_text("partial answer")
        .end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let recovered =
        cancel_after_first_text(&provider, &adapter_for(&provider), simple_request()).await;
    assert_eq!(recovered.len(), 2);
}

#[tokio::test]
async fn cancel_before_start_sends_nothing() {
    let provider = FakeProvider::start([]).await.unwrap();
    assert_cancelled_request_sends_nothing(&provider, &adapter_for(&provider), simple_request())
        .await;
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
    let failure = call_failure(&adapter, simple_request()).await;
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
