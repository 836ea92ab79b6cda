//! The shared endpoint driven over real HTTP on loopback (docs/providers.md, "Shared HTTP
//! layer"), with a minimal wire format of its own: each SSE `data:` payload is a text delta and
//! `[DONE]` ends the reply. What the adapters add on top (request translation, their decoders
//! and status tables) is tested in their own crates; this file checks what both inherit: one
//! finish per call, the error table seam, the key kept out of every failure, cancellation, the
//! idle watchdog, the reply deadline and the model listing.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use dsh_http::{
    AdapterConfigError, ApiKey, BodyDecoder, Endpoint, EndpointConfig, HttpClient, HttpErrorParts,
    RequestBody, SseDecoder, SseEvent,
};
use dsh_llm::{Chunk, Failure, FailureCode, FinishReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd};
use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-endpoint-secret-4711";

/// Every `data:` payload becomes a text delta; `[DONE]` finishes with `stop`.
#[derive(Default)]
struct RawDecoder {
    sse: SseDecoder,
    finished: bool,
}

impl RawDecoder {
    fn take(finished: &mut bool, event: SseEvent<'_>, out: &mut Vec<Chunk>) -> ControlFlow<()> {
        match event {
            SseEvent::Comment => ControlFlow::Continue(()),
            SseEvent::Data(b"[DONE]") => {
                *finished = true;
                out.push(Chunk::Finish {
                    reason: FinishReason::Stop,
                });
                ControlFlow::Break(())
            }
            SseEvent::Data(data) => {
                out.push(Chunk::TextDelta {
                    index: 0,
                    text: String::from_utf8_lossy(data).into_owned(),
                });
                ControlFlow::Continue(())
            }
        }
    }
}

impl BodyDecoder for RawDecoder {
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Chunk>) {
        let finished = &mut self.finished;
        let _ = self
            .sse
            .push(bytes, |event| RawDecoder::take(finished, event, out));
    }

    fn end_of_stream(&mut self, out: &mut Vec<Chunk>) {
        if !self.finished {
            self.fail(
                Failure::new(FailureCode::StreamClosed, "the body ended without [DONE]"),
                out,
            );
        }
    }

    fn fail(&mut self, failure: Failure, out: &mut Vec<Chunk>) {
        self.finished = true;
        out.push(Chunk::Finish {
            reason: FinishReason::Error { failure },
        });
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// The test format's error table: the status and the raw body, so an echoed key would show.
fn error_table(response: &HttpErrorParts<'_>, key_variable: &str) -> Failure {
    Failure::new(
        FailureCode::Http(response.status),
        format!(
            "HTTP {}: {} (key from {key_variable})",
            response.status,
            String::from_utf8_lossy(response.body)
        ),
    )
    .with_status(response.status)
}

fn config<'a>(
    base: &str,
    key: Option<&'a ApiKey>,
    extra_headers: &'a [(String, String)],
    idle: Duration,
    reply: Duration,
) -> EndpointConfig<'a> {
    EndpointConfig {
        url: format!("{base}/chat/completions"),
        models_url: format!("{base}/models"),
        format_headers: vec![(
            HeaderName::from_static("x-format"),
            HeaderValue::from_static("test"),
        )],
        key: key.map(|key| {
            (
                key,
                AUTHORIZATION,
                format!("Bearer {}", key.expose_secret()),
            )
        }),
        key_variable: "TEST_KEY".into(),
        extra_headers,
        connect_timeout: Duration::from_secs(5),
        client: None,
        idle_timeout: idle,
        reply_timeout: reply,
        http_failure: error_table,
    }
}

fn endpoint(
    base: &str,
    key: Option<&ApiKey>,
    idle: Duration,
    reply: Duration,
) -> Result<Endpoint, AdapterConfigError> {
    let extra = [("x-extra".to_string(), "yes".to_string())];
    Endpoint::new(config(base, key, &extra, idle, reply))
}

fn keyed(provider: &FakeProvider) -> Endpoint {
    endpoint(
        &provider.base_url(),
        Some(&ApiKey::new(KEY)),
        Duration::from_secs(10),
        Duration::from_secs(20),
    )
    .unwrap()
}

async fn collect(endpoint: &Endpoint, cancel: CancellationToken) -> Vec<Chunk> {
    endpoint
        .stream(cancel, RawDecoder::default(), || {
            Ok(b"{\"hello\":1}".to_vec())
        })
        .collect()
        .await
}

/// The failure of the one finish, which must come last.
fn failure_of(chunks: &[Chunk]) -> Failure {
    let finishes = chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "exactly one finish: {chunks:?}");
    match chunks.last() {
        Some(Chunk::Finish {
            reason: FinishReason::Error { failure } | FinishReason::Aborted { failure },
        }) => failure.clone(),
        other => panic!("expected a failed finish last, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reply_streams_through_the_decoder_with_the_formats_headers_and_key() {
    let provider = FakeProvider::start([SseReply::new().data("one").data("two").into()])
        .await
        .unwrap();
    let chunks = collect(&keyed(&provider), CancellationToken::new()).await;
    let text = |t: &str| Chunk::TextDelta {
        index: 0,
        text: t.into(),
    };
    let stop = Chunk::Finish {
        reason: FinishReason::Stop,
    };
    assert_eq!(chunks, vec![text("one"), text("two"), stop]);
    let request = &provider.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/chat/completions")
    );
    assert_eq!(request.raw_body, b"{\"hello\":1}");
    let bearer = format!("Bearer {KEY}");
    assert_eq!(request.header("authorization"), Some(bearer.as_str()));
    assert_eq!(request.header("x-format"), Some("test"));
    assert_eq!(request.header("x-extra"), Some("yes"));
    assert_eq!(request.header("accept"), Some("text/event-stream"));
    assert_eq!(request.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn a_body_in_parts_arrives_whole_with_its_length_and_lets_the_shared_bytes_go() {
    let provider = FakeProvider::start([SseReply::new().data("ok").into()])
        .await
        .unwrap();
    // Megabytes kept for the next request, as a history near the context window is.
    let mut history = Vec::with_capacity(3 << 20);
    history.push(b',');
    while history.len() < 3 << 20 {
        history.extend_from_slice(b"{\"role\":\"user\",\"content\":\"0123456789abcdef\"},");
    }
    history.pop();
    let shared = std::sync::Arc::new(history);
    let sent = std::sync::Arc::clone(&shared);
    let len = shared.len();
    let chunks: Vec<Chunk> = keyed(&provider)
        .stream(CancellationToken::new(), RawDecoder::default(), move || {
            let mut body = RequestBody::from(b"{\"messages\":[".to_vec());
            body.push_shared(sent, 1..len);
            body.push(b"]}".to_vec());
            Ok(body)
        })
        .collect()
        .await;
    assert!(matches!(
        chunks.last(),
        Some(Chunk::Finish {
            reason: FinishReason::Stop
        })
    ));
    let request = &provider.requests()[0];
    let mut expected = b"{\"messages\":[".to_vec();
    expected.extend_from_slice(&shared[1..]);
    expected.extend_from_slice(b"]}");
    assert!(
        request.raw_body == expected,
        "the body arrived byte for byte"
    );
    let length = expected.len().to_string();
    assert_eq!(request.header("content-length"), Some(length.as_str()));
    assert_eq!(request.header("transfer-encoding"), None);
    assert!(request.body["messages"].as_array().map_or(0, Vec::len) > 1000);
    assert_eq!(
        std::sync::Arc::strong_count(&shared),
        1,
        "the sent request let the bytes go"
    );
}

#[tokio::test]
async fn a_provider_echoing_the_key_never_gets_it_into_a_failure() {
    let echo = format!("{{\"error\":{{\"message\":\"key {KEY} is revoked\"}}}}");
    let provider = FakeProvider::start([
        ScriptedReply::Http {
            status: 401,
            headers: Vec::new(),
            body: echo,
        },
        ScriptedReply::Http {
            status: 503,
            headers: Vec::new(),
            body: format!("<html><title>{KEY}</title></html>"),
        },
    ])
    .await
    .unwrap();
    let endpoint = keyed(&provider);
    for status in [401, 503] {
        let failure = failure_of(&collect(&endpoint, CancellationToken::new()).await);
        assert_eq!(failure.code, FailureCode::Http(status));
        assert_eq!(failure.status, Some(status));
        assert!(!failure.message.contains(KEY), "{}", failure.message);
        assert!(
            failure.message.contains("<redacted>"),
            "{}",
            failure.message
        );
        assert!(failure.message.contains("TEST_KEY"), "{}", failure.message);
    }
    assert!(!format!("{endpoint:?}").contains(KEY));
    assert!(format!("{endpoint:?}").contains("<redacted>"));
}

/// A provider that echoes the key encoded (base64 at each offset, hex, reversed, split) or a
/// configured header's secret value gets none of them into a failure (docs/SECURITY.md,
/// "Secrets and redaction").
#[tokio::test]
async fn a_provider_echoing_the_key_encoded_or_a_header_secret_never_gets_it_into_a_failure() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let header_secret = "hdr-9f8e7d6c5b4a3210-token";
    let hex: String = KEY.bytes().map(|b| format!("{b:02x}")).collect();
    let reversed: String = KEY.chars().rev().collect();
    // Two pieces of 12 bytes (the shortest piece the matcher replaces).
    let (left, right) = (&KEY[..12], &KEY[KEY.len() - 12..]);
    let bodies = [
        b64.encode(KEY),
        b64.encode(format!("x{KEY}")),
        b64.encode(format!("xy{KEY}")),
        hex.to_uppercase(),
        reversed.clone(),
        format!("{left} / {right}"),
        format!("token {header_secret} refused"),
    ];
    let provider = FakeProvider::start(bodies.iter().map(|body| ScriptedReply::Http {
        status: 400,
        headers: Vec::new(),
        body: format!("{{\"error\":{{\"message\":\"{body}\"}}}}"),
    }))
    .await
    .unwrap();
    let key = ApiKey::new(KEY);
    let extra = [("x-auth".to_string(), header_secret.to_string())];
    let endpoint = Endpoint::new(config(
        &provider.base_url(),
        Some(&key),
        &extra,
        Duration::from_secs(10),
        Duration::from_secs(20),
    ))
    .unwrap();
    for body in &bodies {
        let failure = failure_of(&collect(&endpoint, CancellationToken::new()).await);
        assert!(
            !failure.message.contains(body.as_str()),
            "{}",
            failure.message
        );
        for part in [left, right, header_secret, &hex, &reversed] {
            assert!(!failure.message.contains(part), "{}", failure.message);
        }
        assert!(
            failure.message.contains("<redacted>"),
            "{}",
            failure.message
        );
    }
}

#[tokio::test]
async fn without_a_key_nothing_is_sent() {
    let provider = FakeProvider::start([SseReply::new().data("x").into()])
        .await
        .unwrap();
    for key in [None, Some(ApiKey::new("   "))] {
        let endpoint = endpoint(
            &provider.base_url(),
            key.as_ref(),
            Duration::from_secs(5),
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(!endpoint.has_key());
        let failure = failure_of(&collect(&endpoint, CancellationToken::new()).await);
        assert_eq!(failure.code, FailureCode::MissingCredential);
        assert!(failure.message.contains("TEST_KEY"), "{}", failure.message);
        let listing = endpoint.model_ids().await.unwrap_err();
        assert_eq!(listing.code, FailureCode::MissingCredential);
    }
    assert!(provider.requests().is_empty(), "{:?}", provider.requests());
}

#[test]
fn unsendable_headers_fail_at_construction_without_showing_the_key() {
    let key = ApiKey::new("sk-line\nbreak-secret");
    let err = endpoint(
        "http://127.0.0.1:9",
        Some(&key),
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(err.0.contains("TEST_KEY"), "{err}");
    assert!(!err.0.contains("break-secret"), "{err}");
    for (name, value, named) in [
        ("bad name", "v", "`bad name`"),
        ("x-ok", "line\nbreak", "`x-ok`"),
    ] {
        let extra = [(name.to_string(), value.to_string())];
        let secs = Duration::from_secs(1);
        let err =
            Endpoint::new(config("http://127.0.0.1:9", None, &extra, secs, secs)).unwrap_err();
        assert!(err.0.contains(named), "{err}");
    }
}

#[tokio::test]
async fn cancel_ends_a_streaming_call_with_one_aborted_finish() {
    let provider =
        FakeProvider::start([SseReply::new().data("first").end(StreamEnd::Stall).into()])
            .await
            .unwrap();
    let endpoint = keyed(&provider);
    let cancel = CancellationToken::new();
    let mut stream = endpoint.stream(cancel.clone(), RawDecoder::default(), || Ok(Vec::new()));
    assert!(matches!(stream.next().await, Some(Chunk::TextDelta { .. })));
    let started = Instant::now();
    cancel.cancel();
    let rest: Vec<Chunk> = stream.collect().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cancel was slow"
    );
    assert_eq!(failure_of(&rest).code, FailureCode::Aborted);
    // Cancelled before the first poll: nothing reaches the provider.
    let before = provider.requests().len();
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let failure = failure_of(&collect(&endpoint, cancelled).await);
    assert_eq!(failure.code, FailureCode::Aborted);
    assert_eq!(provider.requests().len(), before);
}

#[tokio::test]
async fn a_stalled_body_trips_the_idle_watchdog_and_keep_alives_the_reply_deadline() {
    let provider = FakeProvider::start([
        SseReply::new().data("a").end(StreamEnd::Stall).into(),
        SseReply::new()
            .end(StreamEnd::KeepAliveForever(Duration::from_millis(50)))
            .into(),
    ])
    .await
    .unwrap();
    let endpoint = endpoint(
        &provider.base_url(),
        Some(&ApiKey::new(KEY)),
        Duration::from_millis(300),
        Duration::from_millis(900),
    )
    .unwrap();
    let idle = failure_of(&collect(&endpoint, CancellationToken::new()).await);
    assert_eq!(idle.code, FailureCode::Timeout);
    assert!(idle.message.contains("no data"), "{}", idle.message);
    let started = Instant::now();
    let deadline = failure_of(&collect(&endpoint, CancellationToken::new()).await);
    assert_eq!(deadline.code, FailureCode::Timeout);
    assert!(
        deadline.message.contains("reply_timeout_secs"),
        "{}",
        deadline.message
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn the_model_listing_reads_ids_and_maps_errors_through_the_format() {
    let provider = FakeProvider::start([]).await.unwrap();
    let endpoint = keyed(&provider);
    let missing = endpoint.model_ids().await.unwrap_err();
    assert_eq!(missing.code, FailureCode::Http(404), "{missing:?}");
    provider.set_models(&["m-1", "m-2"]);
    assert_eq!(endpoint.model_ids().await.unwrap(), vec!["m-1", "m-2"]);
    let listing = provider.requests().pop().unwrap();
    assert_eq!(
        (listing.method.as_str(), listing.path.as_str()),
        ("GET", "/models")
    );
    assert_eq!(listing.header("accept"), Some("application/json"));
    let bearer = format!("Bearer {KEY}");
    assert_eq!(listing.header("authorization"), Some(bearer.as_str()));
}

/// Model calls reuse one connection, as with a real provider that keeps connections alive
/// (docs/PERFORMANCE.md, "Step 1: fixed costs"): no TCP set-up per step.
#[tokio::test]
async fn calls_reuse_the_connection_of_the_previous_reply() {
    let replies = (0..4).map(|k| SseReply::new().data(format!("r{k}")).into());
    let provider = FakeProvider::start(replies).await.unwrap();
    let endpoint = keyed(&provider);
    for k in 0..4 {
        let chunks = collect(&endpoint, CancellationToken::new()).await;
        assert_eq!(
            chunks.first(),
            Some(&Chunk::TextDelta {
                index: 0,
                text: format!("r{k}")
            })
        );
        // The pool gets the connection back once its body is read to the end.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let events = provider.events();
    assert_eq!((events.requests, events.connections), (4, 1), "{events:?}");
}

/// `[DONE]` ends the call at once even when the body's terminator comes later; the rest is
/// read in the background so the connection still serves the next call.
#[tokio::test]
async fn a_terminator_after_done_neither_delays_the_call_nor_loses_the_connection() {
    let late = SseReply::new()
        .data("one")
        .data("[DONE]")
        .delay(Duration::from_millis(400));
    let provider = FakeProvider::start([late.into(), SseReply::new().data("two").into()])
        .await
        .unwrap();
    let endpoint = keyed(&provider);
    let started = Instant::now();
    let chunks = collect(&endpoint, CancellationToken::new()).await;
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "the call waited for the terminator: {:?}",
        started.elapsed()
    );
    assert!(matches!(
        chunks.last(),
        Some(Chunk::Finish {
            reason: FinishReason::Stop
        })
    ));
    // The background read ends with the terminator; the connection is then free again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let chunks = collect(&endpoint, CancellationToken::new()).await;
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert_eq!(provider.events().connections, 1, "{:?}", provider.events());
}

/// An endpoint built on a shared [`HttpClient`].
fn on_client(provider: &FakeProvider, client: &HttpClient) -> Endpoint {
    let key = ApiKey::new(KEY);
    let extra = [("x-extra".to_string(), "yes".to_string())];
    let mut config = config(
        &provider.base_url(),
        Some(&key),
        &extra,
        Duration::from_secs(10),
        Duration::from_secs(20),
    );
    config.client = Some(client.clone());
    Endpoint::new(config).unwrap()
}

/// Two endpoints on one client (a session and its subagent, or two sessions of one process)
/// take each other's idle connections (docs/providers.md, "Shared connections and preconnect").
#[tokio::test]
async fn endpoints_on_one_client_share_its_connections() {
    let replies = (0..2).map(|k| SseReply::new().data(format!("r{k}")).into());
    let provider = FakeProvider::start(replies).await.unwrap();
    let client = HttpClient::new(Duration::from_secs(5)).unwrap();
    for k in 0..2 {
        let chunks = collect(&on_client(&provider, &client), CancellationToken::new()).await;
        assert_eq!(chunks.len(), 2, "call {k}: {chunks:?}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let events = provider.events();
    assert_eq!((events.requests, events.connections), (2, 1), "{events:?}");
    // Endpoints without a shared client each open their own.
    let alone = FakeProvider::start((0..2).map(|_| SseReply::new().data("x").into()))
        .await
        .unwrap();
    for _ in 0..2 {
        collect(&keyed(&alone), CancellationToken::new()).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(alone.events().connections, 2, "{:?}", alone.events());
}

/// A preconnect is a `HEAD /` of the origin that carries neither the key nor the configured
/// headers, and the first call goes over the connection it opened; an origin in use is not
/// preconnected again.
#[tokio::test]
async fn the_first_call_takes_the_connection_a_preconnect_opened() {
    let provider = FakeProvider::start([SseReply::new().data("hi").into()])
        .await
        .unwrap();
    let client = HttpClient::new(Duration::from_secs(5)).unwrap();
    let endpoint = on_client(&provider, &client);
    endpoint
        .preconnect()
        .expect("a keyed endpoint preconnects")
        .await
        .unwrap();
    // The pool gets the connection back once the answer is read.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.connections, events.requests),
        (1, 1, 0),
        "{events:?}"
    );
    let heads = provider.head_requests();
    assert_eq!(heads[0].path, "/");
    for secret in ["authorization", "x-extra", "x-format"] {
        assert_eq!(heads[0].header(secret), None, "{:?}", heads[0].headers);
    }
    let chunks = collect(&endpoint, CancellationToken::new()).await;
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    let events = provider.events();
    assert_eq!((events.connections, events.requests), (1, 1), "{events:?}");
    assert_eq!(provider.requests()[0].method, "POST");
    // An origin used in the last 30 s still has its connection: no second preconnect, on
    // this endpoint or another on the same client.
    assert!(endpoint.preconnect().is_none());
    assert!(on_client(&provider, &client).preconnect().is_none());
}

/// Once an origin has gone unused for the window (30 s; shortened here), a preconnect is sent
/// again, as a front end asks when a call is near (docs/providers.md, "Shared connections and
/// preconnect"): over the idle connection the pool kept, when it is still open.
#[tokio::test]
async fn an_origin_unused_for_the_window_is_preconnected_again() {
    let provider = FakeProvider::start([SseReply::new().data("hi").into()])
        .await
        .unwrap();
    let window = Duration::from_millis(500);
    let client = HttpClient::new(Duration::from_secs(5))
        .unwrap()
        .with_recent_use(window);
    let endpoint = on_client(&provider, &client);
    endpoint.preconnect().unwrap().await.unwrap();
    assert!(endpoint.preconnect().is_none(), "inside the window");
    tokio::time::sleep(window + Duration::from_millis(50)).await;
    endpoint
        .preconnect()
        .expect("the window has passed")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let chunks = collect(&endpoint, CancellationToken::new()).await;
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.requests, events.connections),
        (2, 1, 1),
        "{events:?}"
    );
}

/// Without a key no call will follow, so nothing is opened; a provider that is down costs the
/// preconnect nothing but its own failure, and the call reports its own.
#[tokio::test]
async fn a_preconnect_needs_a_key_and_fails_quietly() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let keyless = endpoint(
        &provider.base_url(),
        None,
        Duration::from_secs(10),
        Duration::from_secs(20),
    )
    .unwrap();
    assert!(keyless.preconnect().is_none());
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(provider.events().connections, 0);

    let dead = format!("http://{}", provider.address());
    drop(provider);
    let endpoint = endpoint(
        &dead,
        Some(&ApiKey::new(KEY)),
        Duration::from_secs(10),
        Duration::from_secs(20),
    )
    .unwrap();
    endpoint.preconnect().unwrap().await.unwrap();
    let failure = failure_of(&collect(&endpoint, CancellationToken::new()).await);
    assert_eq!(failure.code, FailureCode::Transport, "{failure:?}");
}

/// A client trusting the fake provider's test CA, and the file it read it from.
fn tls_client() -> (HttpClient, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), dsh_test_support::TEST_CA_PEM).unwrap();
    let client = HttpClient::with_extra_roots(Duration::from_secs(5), Some(file.path())).unwrap();
    (client, file)
}

/// Over HTTPS the extra roots (`SSL_CERT_FILE`) are what lets a call through to a provider
/// whose certificate no built-in root signed; without them the call fails naming the
/// certificate, and a preconnect's TLS connection serves the first call (docs/providers.md,
/// "Extra root certificates").
#[tokio::test]
async fn https_needs_the_extra_roots_and_the_preconnect_opens_the_tls_connection() {
    let provider = FakeProvider::start_tls([SseReply::new().data("secure").into()])
        .await
        .unwrap();
    assert!(provider.base_url().starts_with("https://127.0.0.1:"));
    let untrusting = keyed(&provider);
    let failure = failure_of(&collect(&untrusting, CancellationToken::new()).await);
    assert_eq!(failure.code, FailureCode::Transport, "{failure:?}");
    assert!(
        failure.message.contains("certificate") && failure.message.contains("SSL_CERT_FILE"),
        "{}",
        failure.message
    );
    assert!(!failure.message.contains(KEY));

    let (client, _roots) = tls_client();
    let endpoint = on_client(&provider, &client);
    let before = provider.events().connections;
    endpoint.preconnect().unwrap().await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let chunks = collect(&endpoint, CancellationToken::new()).await;
    assert_eq!(
        chunks.first(),
        Some(&Chunk::TextDelta {
            index: 0,
            text: "secure".into()
        })
    );
    let events = provider.events();
    assert_eq!(
        (
            events.head_requests,
            events.requests,
            events.connections - before
        ),
        (1, 1, 1),
        "{events:?}"
    );
}

/// A roots file that cannot be read, or holds no certificate, stops the client with a message
/// naming the file and the variable.
#[test]
fn unusable_extra_roots_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("corp-ca.pem");
    let error = HttpClient::with_extra_roots(Duration::from_secs(5), Some(&missing)).unwrap_err();
    assert!(error.0.contains("corp-ca.pem"), "{}", error.0);
    assert!(error.0.contains("SSL_CERT_FILE"), "{}", error.0);
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let error = HttpClient::with_extra_roots(Duration::from_secs(5), Some(&empty)).unwrap_err();
    assert!(error.0.contains("holds no PEM certificate"), "{}", error.0);
}
