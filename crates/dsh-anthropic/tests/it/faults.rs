//! The error table of docs/providers.md ("Anthropic Messages") and stream faults in the Anthropic
//! format, over real HTTP on loopback.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::*;
use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_http::ApiKey;
use dsh_llm::{ContentBlock, FailureCode, FinishReason};
use dsh_test_support::provider_checks::{
    assert_dropped_after_partial_text, assert_exhausted_script_answers_500,
    assert_missing_key_sends_nothing, assert_stall_times_out, refused_url, silent_server,
};
use dsh_test_support::{AnthropicReply, AnthropicUsage, FakeProvider, ScriptedReply, StreamEnd};

async fn failure_for(reply: ScriptedReply) -> dsh_llm::Failure {
    let provider = FakeProvider::start([reply]).await.unwrap();
    call_failure(&adapter_for(&provider), simple_request()).await
}

async fn status_failure(status: u16, kind: &str, message: &str) -> dsh_llm::Failure {
    let failure = failure_for(ScriptedReply::anthropic_error(status, kind, message)).await;
    assert_eq!(failure.status, Some(status));
    failure
}

#[tokio::test]
async fn http_401_and_403_are_auth_naming_the_variable() {
    let failure = status_failure(401, "authentication_error", "invalid x-api-key").await;
    assert_eq!(failure.code, FailureCode::Auth);
    assert!(
        failure.message.contains("invalid x-api-key"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("ANTHROPIC_API_KEY"));
    let failure = status_failure(403, "permission_error", "not allowed").await;
    assert_eq!(failure.code, FailureCode::Auth);
}

#[tokio::test]
async fn http_429_is_rate_limit_with_retry_after_and_request_id() {
    let reply = ScriptedReply::anthropic_error(429, "rate_limit_error", "slow down")
        .with_header("retry-after", "7")
        .with_header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy");
    let failure = failure_for(reply).await;
    assert_eq!(failure.code, FailureCode::RateLimit);
    assert_eq!(failure.retry_after_ms, Some(7000));
    assert_eq!(
        failure.request_id.as_deref(),
        Some("req_011CSHoEeqs5C35K2UUqR7Fy")
    );
}

#[tokio::test]
async fn http_529_overloaded_and_5xx_are_server() {
    let failure = status_failure(529, "overloaded_error", "Overloaded").await;
    assert_eq!(failure.code, FailureCode::Server);
    assert!(failure.message.contains("overloaded_error"));
    assert_eq!(
        status_failure(500, "api_error", "boom").await.code,
        FailureCode::Server
    );
    assert_eq!(
        status_failure(503, "api_error", "busy").await.code,
        FailureCode::Server
    );
}

#[tokio::test]
async fn http_400_with_context_wording_is_context_window_exceeded() {
    let failure = status_failure(
        400,
        "invalid_request_error",
        "prompt is too long: 212345 tokens > 200000 maximum",
    )
    .await;
    assert_eq!(failure.code, FailureCode::ContextWindowExceeded);
}

#[tokio::test]
async fn other_400_and_413_are_invalid_request() {
    let failure = status_failure(400, "invalid_request_error", "messages.3.content: bad").await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(failure.message.contains("messages.3.content"));
    assert_eq!(
        status_failure(413, "request_too_large", "too big")
            .await
            .code,
        FailureCode::InvalidRequest
    );
}

#[tokio::test]
async fn other_statuses_are_http_n_and_long_messages_truncated() {
    assert_eq!(
        status_failure(418, "x", "teapot").await.code,
        FailureCode::Http(418)
    );
    let failure = status_failure(400, "invalid_request_error", &"x".repeat(10_000)).await;
    assert!(failure.message.len() < 1_000);
}

#[tokio::test]
async fn connection_refused_closed_and_dropped_are_transport() {
    let config = AnthropicConfig::new(refused_url(), Some(ApiKey::new(TEST_KEY)));
    let adapter = AnthropicAdapter::new(config).unwrap();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Transport);

    assert_eq!(
        failure_for(ScriptedReply::CloseConnection).await.code,
        FailureCode::Transport
    );

    let reply = AnthropicReply::new()
        .open_text("partial")
        .end(StreamEnd::DropConnection);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_dropped_after_partial_text(&chunks);
}

/// A reply that fails after `message_start` reported its input was billed: the usage comes
/// before the error finish, so the loop can count it (docs/sessions.md, "Cost").
#[tokio::test]
async fn a_failed_reply_keeps_the_usage_reported_before_the_failure() {
    let usage = AnthropicUsage {
        input_tokens: 400,
        cache_read_input_tokens: 600,
        output_tokens: 20,
        ..AnthropicUsage::default()
    };
    let reply = AnthropicReply::with_start_usage(usage)
        .open_text("partial")
        .end(StreamEnd::DropConnection);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_dropped_after_partial_text(&chunks);
    let usage = chunks.iter().find_map(|c| match c {
        dsh_llm::Chunk::Usage { usage } => Some(*usage),
        _ => None,
    });
    let usage = usage.expect("the usage reported before the drop");
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.output_tokens
        ),
        (400, 600, 20)
    );
    assert!(matches!(chunks.last(), Some(dsh_llm::Chunk::Finish { .. })));
    // Zero usage (nothing billed was reported) is not sent.
    let reply = AnthropicReply::new()
        .open_text("partial")
        .end(StreamEnd::DropConnection);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert!(!chunks
        .iter()
        .any(|c| matches!(c, dsh_llm::Chunk::Usage { .. })));
}

#[tokio::test]
async fn missing_message_stop_is_stream_closed() {
    let reply = AnthropicReply::new().text(&["hello"]);
    assert_eq!(
        failure_for(reply.into()).await.code,
        FailureCode::StreamClosed
    );
}

/// `message_stop` without any `stop_reason`: an incomplete reply, never a stop (nor a guessed
/// `tool_use` when the reply carried calls).
#[tokio::test]
async fn message_stop_without_a_stop_reason_is_missing_finish() {
    let stop = serde_json::json!({"type": "message_stop"});
    let text_only = AnthropicReply::new().text(&["hello"]).event(&stop);
    assert_eq!(
        failure_for(text_only.into()).await.code,
        FailureCode::MissingFinish
    );
    let with_call = AnthropicReply::new()
        .tool_use("toolu_1", "bash", &[r#"{"command":"ls"}"#])
        .event(&stop);
    let failure = failure_for(with_call.into()).await;
    assert_eq!(failure.code, FailureCode::MissingFinish);
    assert!(
        failure.message.contains("stop_reason"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn malformed_json_is_malformed_response() {
    let reply = AnthropicReply::new().open_text("a").malformed();
    assert_eq!(
        failure_for(reply.into()).await.code,
        FailureCode::MalformedResponse
    );
}

#[tokio::test]
async fn error_event_mid_stream_is_an_error_finish_by_type() {
    let reply = AnthropicReply::new()
        .open_text("a")
        .error("overloaded_error", "Overloaded");
    let failure = failure_for(reply.into()).await;
    assert_eq!(failure.code, FailureCode::Server);
    let reply = AnthropicReply::new().error("rate_limit_error", "slow");
    assert_eq!(failure_for(reply.into()).await.code, FailureCode::RateLimit);
}

#[tokio::test]
async fn stall_times_out_with_the_configured_watchdog() {
    let reply = AnthropicReply::new()
        .open_text("thinking...")
        .end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider).with_idle_timeout(Duration::from_millis(200));
    let adapter = AnthropicAdapter::new(config).unwrap();
    assert_stall_times_out(&adapter, simple_request()).await;
}

#[tokio::test]
async fn silent_server_times_out_waiting_for_headers() {
    let (url, silent) = silent_server().await;
    let config = AnthropicConfig::new(url, Some(ApiKey::new(TEST_KEY)))
        .with_idle_timeout(Duration::from_millis(200));
    let adapter = AnthropicAdapter::new(config).unwrap();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Timeout);
    silent.abort();
}

#[tokio::test]
async fn pings_and_comments_reset_the_idle_timer() {
    let mut reply = AnthropicReply::new().text(&["slow"]);
    for i in 0..6 {
        reply = reply.delay(Duration::from_millis(120));
        reply = if i % 2 == 0 {
            reply.ping()
        } else {
            reply.comment("keep-alive")
        };
    }
    let reply = reply.text(&["done"]).finish("end_turn", None);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider).with_idle_timeout(Duration::from_millis(400));
    let adapter = AnthropicAdapter::new(config).unwrap();
    let chunks = collect(&adapter, simple_request()).await;
    assert_eq!(finish(&chunks), &FinishReason::Stop);
    assert_eq!(assemble(&chunks).blocks.len(), 2);
}

#[tokio::test]
async fn stop_reasons_map_and_unknown_ones_are_upper_cased_errors() {
    for (wire, expected) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::MaxTokens),
    ] {
        let reply = AnthropicReply::new().text(&["x"]).finish(wire, None);
        let provider = FakeProvider::start([reply.into()]).await.unwrap();
        let chunks = collect(&adapter_for(&provider), simple_request()).await;
        assert_eq!(finish(&chunks), &expected, "{wire}");
    }
    for (wire, code) in [("refusal", "REFUSAL"), ("pause_turn", "PAUSE_TURN")] {
        let reply = AnthropicReply::new().text(&["x"]).finish(wire, None);
        assert_eq!(
            failure_for(reply.into()).await.code,
            FailureCode::Other(code.into())
        );
    }
}

#[tokio::test]
async fn empty_reply_is_empty_response() {
    let reply = AnthropicReply::new().finish("end_turn", Some(AnthropicUsage::default()));
    assert_eq!(
        failure_for(reply.into()).await.code,
        FailureCode::EmptyResponse
    );
}

#[tokio::test]
async fn max_tokens_drops_the_truncated_tool_call() {
    let reply = AnthropicReply::new()
        .text(&["Writing now."])
        .tool_use("toolu_cut", "bash", &["{\"command\":\"echo"])
        .finish("max_tokens", None);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_eq!(finish(&chunks), &FinishReason::MaxTokens);
    assert_eq!(
        assemble(&chunks).blocks,
        vec![ContentBlock::text("Writing now.")]
    );
}

#[tokio::test]
async fn missing_key_is_missing_credential_and_sends_nothing() {
    let provider = FakeProvider::start([AnthropicReply::new()
        .text(&["x"])
        .finish("end_turn", None)
        .into()])
    .await
    .unwrap();
    let adapter = AnthropicAdapter::new(AnthropicConfig::new(provider.base_url(), None)).unwrap();
    assert_missing_key_sends_nothing(&provider, &adapter, simple_request(), "ANTHROPIC_API_KEY")
        .await;
}

#[tokio::test]
async fn exhausted_script_answers_500() {
    let provider = FakeProvider::start([]).await.unwrap();
    assert_exhausted_script_answers_500(&adapter_for(&provider), simple_request()).await;
}

/// A provider that sends keep-alive comments forever is cut by the overall reply deadline.
#[tokio::test]
async fn keep_alives_forever_are_cut_by_the_reply_deadline() {
    let reply = AnthropicReply::new()
        .open_text("thinking...")
        .end(StreamEnd::KeepAliveForever(Duration::from_millis(50)));
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider)
        .with_idle_timeout(Duration::from_millis(300))
        .with_reply_timeout(Duration::from_millis(900));
    let adapter = AnthropicAdapter::new(config).unwrap();
    let started = std::time::Instant::now();
    let failure = call_failure(&adapter, simple_request()).await;
    let took = started.elapsed();
    assert_eq!(failure.code, FailureCode::Timeout, "{}", failure.message);
    assert!(
        failure.message.contains("overall deadline of 0.9 s")
            && failure.message.contains("reply_timeout_secs"),
        "{}",
        failure.message
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(matches!(
        dsh_llm::RetryPolicy::default().decide(&failure, 0, 0.0),
        dsh_llm::RetryDecision::Retry { .. }
    ));
}

/// A 413 sent before the (large) body was read: the failure carries the JSON error message.
#[tokio::test]
async fn http_413_sent_before_the_body_was_read_carries_the_json_message() {
    let provider = FakeProvider::start([ScriptedReply::anthropic_error(
        413,
        "request_too_large",
        "Request exceeds the maximum allowed number of bytes",
    )])
    .await
    .unwrap();
    provider.reply_early_above(64 * 1024);
    let big = "x".repeat(4 * 1024 * 1024);
    let request = request_with(None, vec![dsh_llm::Message::user_text("u1", &big)]);
    let failure = call_failure(&adapter_for(&provider), request).await;
    assert_eq!(
        failure.code,
        FailureCode::InvalidRequest,
        "{}",
        failure.message
    );
    assert_eq!(failure.status, Some(413));
    assert!(
        failure
            .message
            .contains("request_too_large): Request exceeds the maximum allowed number of bytes"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn http_413_carries_the_json_message_or_the_title_of_a_proxy_page() {
    let failure = status_failure(413, "request_too_large", "Request exceeds 32 MB").await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(
        failure
            .message
            .contains("HTTP 413 (request_too_large): Request exceeds 32 MB"),
        "{}",
        failure.message
    );
    let failure = failure_for(ScriptedReply::Http {
        status: 413,
        headers: Vec::new(),
        body: "<html><head><title>413 Request Entity Too Large</title></head>\
               <body><h1>413</h1></body></html>"
            .to_string(),
    })
    .await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(
        failure
            .message
            .contains("HTTP 413: 413 Request Entity Too Large (an HTML page"),
        "{}",
        failure.message
    );
}
