//! The error table of docs/providers.md ("Chat completions") and stream faults, over real HTTP on
//! loopback.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::time::Duration;

use common::*;
use dsh_deepseek::{ApiKey, DeepSeekAdapter, DeepSeekConfig};
use dsh_llm::{FailureCode, FinishReason};
use dsh_test_support::provider_checks::{
    assert_dropped_after_partial_text, assert_exhausted_script_answers_500,
    assert_missing_key_sends_nothing, assert_stall_times_out, refused_url, silent_server,
};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};

async fn failure_for(reply: ScriptedReply) -> dsh_llm::Failure {
    let provider = FakeProvider::start([reply]).await.unwrap();
    call_failure(&adapter_for(&provider), simple_request()).await
}

async fn status_failure(status: u16, message: &str) -> dsh_llm::Failure {
    let failure = failure_for(ScriptedReply::http_error(status, message)).await;
    assert_eq!(failure.status, Some(status));
    failure
}

#[tokio::test]
async fn http_401_is_auth() {
    let failure = status_failure(401, "Authentication Fails, Your api key is invalid").await;
    assert_eq!(failure.code, FailureCode::Auth);
    assert!(
        failure.message.contains("Authentication Fails"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("DEEPSEEK_API_KEY"));
}

#[tokio::test]
async fn http_403_is_auth() {
    assert_eq!(
        status_failure(403, "forbidden").await.code,
        FailureCode::Auth
    );
}

#[tokio::test]
async fn http_402_is_quota() {
    let failure = status_failure(402, "Insufficient Balance").await;
    assert_eq!(failure.code, FailureCode::Quota);
}

#[tokio::test]
async fn quota_wording_is_quota_even_on_429() {
    let failure = status_failure(429, "You exceeded your current quota").await;
    assert_eq!(failure.code, FailureCode::Quota);
}

#[tokio::test]
async fn http_429_is_rate_limit_with_retry_after_and_request_id() {
    let reply = ScriptedReply::rate_limited(7).with_header("x-request-id", "req-429-abc");
    let failure = failure_for(reply).await;
    assert_eq!(failure.code, FailureCode::RateLimit);
    assert_eq!(failure.status, Some(429));
    assert_eq!(failure.retry_after_ms, Some(7000));
    assert_eq!(failure.request_id.as_deref(), Some("req-429-abc"));
}

#[tokio::test]
async fn retry_after_as_http_date_is_converted_to_ms() {
    let past = ScriptedReply::http_error(429, "slow down")
        .with_header("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(failure_for(past).await.retry_after_ms, Some(0));
    let future = ScriptedReply::http_error(503, "busy")
        .with_header("retry-after", "Fri, 01 Jan 2100 00:00:00 GMT");
    let failure = failure_for(future).await;
    assert_eq!(failure.code, FailureCode::Server);
    assert!(failure.retry_after_ms.unwrap_or(0) > 1_000_000_000);
}

#[tokio::test]
async fn http_400_with_context_wording_is_context_window_exceeded() {
    let failure = failure_for(ScriptedReply::context_length_exceeded()).await;
    assert_eq!(failure.code, FailureCode::ContextWindowExceeded);
    assert_eq!(failure.status, Some(400));
}

#[tokio::test]
async fn other_http_400_is_invalid_request_with_provider_message() {
    let failure = status_failure(400, "Invalid format: messages[2].role").await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(
        failure.message.contains("messages[2].role"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn http_413_is_invalid_request() {
    assert_eq!(
        status_failure(413, "request entity too large").await.code,
        FailureCode::InvalidRequest
    );
}

#[tokio::test]
async fn http_422_is_invalid_request() {
    assert_eq!(
        status_failure(422, "Invalid Parameters").await.code,
        FailureCode::InvalidRequest
    );
}

#[tokio::test]
async fn http_500_is_server() {
    assert_eq!(
        status_failure(500, "Server Error").await.code,
        FailureCode::Server
    );
}

#[tokio::test]
async fn http_503_is_server_and_keeps_request_id() {
    let reply =
        ScriptedReply::http_error(503, "Server Overloaded").with_header("x-request-id", "r-503");
    let failure = failure_for(reply).await;
    assert_eq!(failure.code, FailureCode::Server);
    assert_eq!(failure.request_id.as_deref(), Some("r-503"));
}

#[tokio::test]
async fn other_statuses_are_http_n() {
    assert_eq!(
        status_failure(418, "teapot").await.code,
        FailureCode::Http(418)
    );
}

#[tokio::test]
async fn long_provider_messages_are_truncated() {
    let failure = status_failure(400, &"x".repeat(10_000)).await;
    assert!(failure.message.len() < 1_000, "{}", failure.message.len());
}

#[tokio::test]
async fn exhausted_script_answers_500_naming_the_problem() {
    let provider = FakeProvider::start([]).await.unwrap();
    assert_exhausted_script_answers_500(&adapter_for(&provider), simple_request()).await;
}

#[tokio::test]
async fn connection_refused_is_transport() {
    let config = DeepSeekConfig::new(refused_url(), Some(ApiKey::new(TEST_KEY)));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Transport);
    assert_eq!(failure.status, None);
}

#[tokio::test]
async fn connection_closed_without_answer_is_transport() {
    let failure = failure_for(ScriptedReply::CloseConnection).await;
    assert_eq!(failure.code, FailureCode::Transport);
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_transport() {
    let reply = SseReply::new()
        .text("partial")
        .end(StreamEnd::DropConnection);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_dropped_after_partial_text(&chunks);
}

/// A reply that fails after its usage arrived was billed: the usage comes before the error
/// finish, so the loop can count it (docs/sessions.md, "Cost").
#[tokio::test]
async fn a_failed_reply_keeps_the_usage_that_arrived_before_the_failure() {
    let wire = WireUsage {
        prompt_tokens: 1000,
        prompt_cache_hit_tokens: 600,
        completion_tokens: 20,
        reasoning_tokens: 0,
    };
    let dropped = SseReply::new()
        .text("partial")
        .usage(wire)
        .end(StreamEnd::DropConnection);
    let unterminated = SseReply::new()
        .text("hello")
        .finish("stop", Some(wire))
        .end(StreamEnd::CloseWithoutDone);
    for reply in [dropped, unterminated] {
        let provider = FakeProvider::start([reply.into()]).await.unwrap();
        let chunks = collect(&adapter_for(&provider), simple_request()).await;
        let usage = chunks.iter().find_map(|c| match c {
            dsh_llm::Chunk::Usage { usage } => Some(*usage),
            _ => None,
        });
        let usage = usage.expect("the usage that arrived");
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens
            ),
            (400, 600, 20)
        );
        assert!(matches!(
            chunks.last(),
            Some(dsh_llm::Chunk::Finish {
                reason: FinishReason::Error { .. }
            })
        ));
    }
}

#[tokio::test]
async fn missing_done_is_stream_closed() {
    let reply = SseReply::new()
        .text("hello")
        .finish("stop", None)
        .end(StreamEnd::CloseWithoutDone);
    assert_eq!(
        failure_for(reply.into()).await.code,
        FailureCode::StreamClosed
    );
}

/// `[DONE]` after content but no `finish_reason` anywhere: an incomplete reply, never a stop
/// (nor a guessed `tool_calls` when the reply carried calls).
#[tokio::test]
async fn done_without_a_finish_reason_is_missing_finish() {
    let text_only = SseReply::new().text("hello");
    assert_eq!(
        failure_for(text_only.into()).await.code,
        FailureCode::MissingFinish
    );
    let with_call = SseReply::new().tool_call(0, "call_1", "bash", r#"{"command":"ls"}"#);
    let failure = failure_for(with_call.into()).await;
    assert_eq!(failure.code, FailureCode::MissingFinish);
    assert!(
        failure.message.contains("finish_reason"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn malformed_json_is_malformed_response() {
    let reply = SseReply::new().text("a").malformed().text("b");
    assert_eq!(
        failure_for(reply.into()).await.code,
        FailureCode::MalformedResponse
    );
}

#[tokio::test]
async fn error_object_mid_stream_is_an_error_finish() {
    let reply = SseReply::new()
        .text("a")
        .data(r#"{"error":{"message":"internal failure","type":"server_error"}}"#);
    assert_eq!(failure_for(reply.into()).await.code, FailureCode::Server);
}

#[tokio::test]
async fn stall_after_some_bytes_times_out_with_the_configured_watchdog() {
    let reply = SseReply::new()
        .reasoning("thinking...")
        .end(StreamEnd::Stall);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider).with_idle_timeout(Duration::from_millis(200));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    assert_stall_times_out(&adapter, simple_request()).await;
}

#[tokio::test]
async fn silent_server_times_out_waiting_for_headers() {
    let (url, silent) = silent_server().await;
    let config = DeepSeekConfig::new(url, Some(ApiKey::new(TEST_KEY)))
        .with_idle_timeout(Duration::from_millis(200));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Timeout);
    silent.abort();
}

#[tokio::test]
async fn comment_keep_alives_reset_the_idle_timer() {
    let mut reply = SseReply::new().reasoning("slow");
    for _ in 0..6 {
        reply = reply
            .delay(Duration::from_millis(120))
            .comment("keep-alive");
    }
    let reply = reply.text("done").finish("stop", None);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider).with_idle_timeout(Duration::from_millis(400));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let chunks = collect(&adapter, simple_request()).await;
    assert_eq!(finish(&chunks), &FinishReason::Stop);
    assert_eq!(assemble(&chunks).blocks.len(), 2);
}

#[tokio::test]
async fn unknown_finish_reasons_are_errors_with_upper_cased_codes() {
    for (wire, code) in [
        ("content_filter", "CONTENT_FILTER"),
        (
            "insufficient_system_resource",
            "INSUFFICIENT_SYSTEM_RESOURCE",
        ),
    ] {
        let reply = SseReply::new().text("partial").finish(wire, None);
        let failure = failure_for(reply.into()).await;
        assert_eq!(failure.code, FailureCode::Other(code.into()));
    }
}

#[tokio::test]
async fn empty_completion_is_empty_response() {
    assert_eq!(
        failure_for(ScriptedReply::empty_completion()).await.code,
        FailureCode::EmptyResponse
    );
}

#[tokio::test]
async fn length_is_max_tokens_and_the_truncated_call_is_dropped() {
    let reply = SseReply::new()
        .text("Writing now.")
        .tool_call(0, "call-cut", "bash", "{\"command\":\"echo")
        .finish("length", Some(WireUsage::default()));
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_eq!(finish(&chunks), &FinishReason::MaxTokens);
    let assembled = assemble(&chunks);
    assert_eq!(
        assembled.blocks,
        vec![dsh_llm::ContentBlock::text("Writing now.")]
    );
}

#[tokio::test]
async fn missing_key_is_missing_credential_and_sends_nothing() {
    let provider = FakeProvider::start([SseReply::new().text("x").finish("stop", None).into()])
        .await
        .unwrap();
    let adapter = DeepSeekAdapter::new(DeepSeekConfig::new(provider.base_url(), None)).unwrap();
    assert_missing_key_sends_nothing(&provider, &adapter, simple_request(), "DEEPSEEK_API_KEY")
        .await;
}

/// A provider that sends keep-alive comments forever (never silent long enough for the idle
/// watchdog) is cut by the overall reply deadline: `TIMEOUT`, retryable, naming the setting.
#[tokio::test]
async fn keep_alives_forever_are_cut_by_the_reply_deadline() {
    let reply = SseReply::new()
        .reasoning("thinking...")
        .end(StreamEnd::KeepAliveForever(Duration::from_millis(50)));
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let config = config_for(&provider)
        .with_idle_timeout(Duration::from_millis(300))
        .with_reply_timeout(Duration::from_millis(900));
    let adapter = DeepSeekAdapter::new(config).unwrap();
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
    // The connection was closed: the fake provider's comment loop ended on a write error.
    tokio::time::timeout(
        Duration::from_secs(5),
        provider.wait_for_client_disconnects(1),
    )
    .await
    .expect("the stream was not closed after the deadline");
}

#[tokio::test]
async fn the_reply_deadline_also_bounds_the_wait_for_headers() {
    let (url, silent) = silent_server().await;
    let config = DeepSeekConfig::new(url, Some(ApiKey::new(TEST_KEY)))
        .with_idle_timeout(Duration::from_secs(30))
        .with_reply_timeout(Duration::from_millis(300));
    let adapter = DeepSeekAdapter::new(config).unwrap();
    let started = std::time::Instant::now();
    let failure = call_failure(&adapter, simple_request()).await;
    assert_eq!(failure.code, FailureCode::Timeout);
    assert!(
        failure.message.contains("overall deadline"),
        "{}",
        failure.message
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    silent.abort();
}

/// A 413 from a proxy or provider that answers before reading the (large) body: the failure
/// carries the provider's JSON error message, not a transport error.
#[tokio::test]
async fn http_413_sent_before_the_body_was_read_carries_the_json_message() {
    let provider = FakeProvider::start([ScriptedReply::http_error(
        413,
        "Request body too large: the limit is 64 KiB",
    )])
    .await
    .unwrap();
    provider.reply_early_above(64 * 1024);
    let big = "x".repeat(4 * 1024 * 1024);
    let request = request_with(
        "deepseek-v4-flash",
        None,
        vec![dsh_llm::Message::user_text("u1", &big)],
    );
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
            .contains("Request body too large: the limit is 64 KiB"),
        "{}",
        failure.message
    );
    assert!(
        !failure.message.contains("\"error\""),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn http_413_carries_the_json_message() {
    let failure = status_failure(413, "request entity too large: 9 MB > 8 MB").await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(
        failure
            .message
            .contains("request entity too large: 9 MB > 8 MB"),
        "{}",
        failure.message
    );
}

/// A proxy's HTML 413 page is reduced to its title instead of being quoted as markup.
#[tokio::test]
async fn http_413_html_page_from_a_proxy_is_reduced_to_its_title() {
    let failure = failure_for(ScriptedReply::Http {
        status: 413,
        headers: Vec::new(),
        body: NGINX_413.to_string(),
    })
    .await;
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    assert!(
        failure
            .message
            .contains("HTTP 413 (request too large): 413 Request Entity Too Large (an HTML page"),
        "{}",
        failure.message
    );
    assert!(!failure.message.contains('<'), "{}", failure.message);
}

const NGINX_413: &str = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n\
    <body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n\
    </body>\r\n</html>\r\n";
