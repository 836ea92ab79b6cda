//! Checks shared by the provider adapters' loopback tests (`dsh-deepseek`, `dsh-anthropic`):
//! they hold for any [`Adapter`] whatever its wire format. What differs per format (the
//! replies, the error tables, the key's header) stays in each adapter's tests.

use std::time::{Duration, Instant};

use dsh_llm::{
    Adapter, AssembledReply, BlockAssembler, Chunk, ContentBlock, Failure, FailureCode,
    FinishReason, GenerateRequest,
};
use futures::StreamExt;

use crate::FakeProvider;

/// Upper bound for any single test interaction: a hang fails the test instead of blocking CI.
pub const TEST_DEADLINE: Duration = Duration::from_secs(10);

/// Runs one call to its end and returns its chunks. Asserts that it ends within
/// [`TEST_DEADLINE`] and that the chunks are [well formed](assert_well_formed).
pub async fn collect(adapter: &impl Adapter, request: GenerateRequest) -> Vec<Chunk> {
    let chunks = tokio::time::timeout(TEST_DEADLINE, adapter.stream(request).collect::<Vec<_>>())
        .await
        .expect("the stream must end on its own");
    assert_well_formed(&chunks);
    chunks
}

/// Asserts exactly one `finish`, as the last chunk.
pub fn assert_one_finish_last(chunks: &[Chunk]) {
    let finishes = chunks
        .iter()
        .filter(|c| matches!(c, Chunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "exactly one finish: {chunks:#?}");
    assert!(
        matches!(chunks.last(), Some(Chunk::Finish { .. })),
        "finish is last"
    );
}

/// Asserts exactly one `finish`, last, and at most one `usage`, right before it.
pub fn assert_well_formed(chunks: &[Chunk]) {
    assert_one_finish_last(chunks);
    if let Some(position) = chunks.iter().position(|c| matches!(c, Chunk::Usage { .. })) {
        assert_eq!(position, chunks.len() - 2, "usage right before finish");
    }
}

/// The reason of the last chunk; panics when it is not a `finish`.
pub fn finish(chunks: &[Chunk]) -> &FinishReason {
    match chunks.last() {
        Some(Chunk::Finish { reason }) => reason,
        other => panic!("no finish: {other:?}"),
    }
}

/// The failure of an `error` finish; panics on any other finish.
pub fn error_failure(chunks: &[Chunk]) -> Failure {
    match finish(chunks) {
        FinishReason::Error { failure } => failure.clone(),
        other => panic!("expected an error finish, got {other:?}"),
    }
}

/// Runs one call with [`collect`] and returns the failure of its `error` finish.
pub async fn call_failure(adapter: &impl Adapter, request: GenerateRequest) -> Failure {
    error_failure(&collect(adapter, request).await)
}

/// Assembles `chunks`; asserts that `BlockAssembler` accepts every one (nothing after finish).
pub fn assemble(chunks: &[Chunk]) -> AssembledReply {
    let mut assembler = BlockAssembler::new();
    for chunk in chunks {
        assembler.push(chunk).expect("nothing after finish");
    }
    assembler.finish()
}

/// A `http://` URL of a loopback port that was just bound and released: connecting is refused.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let address = listener.local_addr().expect("bound address");
    drop(listener);
    format!("http://{address}")
}

/// A loopback server that accepts connections and never answers (nor closes them), and its
/// `http://` URL. Abort the task when the test is done.
pub async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let address = listener.local_addr().expect("bound address");
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (format!("http://{address}"), silent)
}

/// For an adapter whose idle timeout is short (200 ms) and a reply that stalls: asserts the
/// call fails with `Timeout` in less than 3 s.
pub async fn assert_stall_times_out(adapter: &impl Adapter, request: GenerateRequest) {
    let started = Instant::now();
    let failure = call_failure(adapter, request).await;
    assert_eq!(failure.code, FailureCode::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// For a reply that sent the text `partial` and then dropped the connection: asserts the call
/// failed with `Transport` and that the partial text still arrived as deltas (for an
/// interrupted-message recovery).
pub fn assert_dropped_after_partial_text(chunks: &[Chunk]) {
    assert_eq!(error_failure(chunks).code, FailureCode::Transport);
    assert!(chunks
        .iter()
        .any(|c| matches!(c, Chunk::TextDelta { text, .. } if text == "partial")));
}

/// For an adapter of a [`FakeProvider`] with an empty script: asserts the call fails with
/// `Server` and a message naming the problem ("no scripted reply left").
pub async fn assert_exhausted_script_answers_500(adapter: &impl Adapter, request: GenerateRequest) {
    let failure = call_failure(adapter, request).await;
    assert_eq!(failure.code, FailureCode::Server);
    assert!(
        failure.message.contains("no scripted reply left"),
        "{}",
        failure.message
    );
}

/// For an adapter without an API key: asserts the call fails with `MissingCredential`, the
/// message names `key_variable`, and `provider` received no request.
pub async fn assert_missing_key_sends_nothing(
    provider: &FakeProvider,
    adapter: &impl Adapter,
    request: GenerateRequest,
    key_variable: &str,
) {
    let failure = call_failure(adapter, request).await;
    assert_eq!(failure.code, FailureCode::MissingCredential);
    assert!(failure.message.contains(key_variable));
    assert!(provider.requests().is_empty());
}

/// For an adapter of `provider`, whose script answers the call with a 3xx pointing at `elsewhere`
/// (e.g. `web_search::redirect_reply(&elsewhere.base_url())`): asserts the call fails with
/// `HTTP_<status>`, the message names the target and says redirects are not followed, and
/// `elsewhere` received nothing (so no key went there).
pub async fn assert_redirect_not_followed(
    elsewhere: &FakeProvider,
    adapter: &impl Adapter,
    request: GenerateRequest,
) {
    let failure = call_failure(adapter, request).await;
    assert!(
        matches!(failure.code, FailureCode::Http(300..=399)),
        "{:?}: {}",
        failure.code,
        failure.message
    );
    assert!(
        failure.message.contains(&elsewhere.base_url())
            && failure.message.contains("does not follow redirects"),
        "{}",
        failure.message
    );
    assert!(elsewhere.requests().is_empty(), "the redirect was followed");
}

/// Cancels `request` before the call starts: asserts an `Aborted` finish and that `provider`
/// received no request.
pub async fn assert_cancelled_request_sends_nothing(
    provider: &FakeProvider,
    adapter: &impl Adapter,
    request: GenerateRequest,
) {
    request.cancel.cancel();
    let chunks = collect(adapter, request).await;
    assert!(matches!(finish(&chunks), FinishReason::Aborted { .. }));
    assert!(provider.requests().is_empty());
}

/// For a reply that streams some reasoning, then text, then stalls: reads until the first text
/// delta and until `provider` reached its stall, then cancels. Asserts the rest of the stream
/// ends within 500 ms with an `Aborted` finish coded `Aborted`, and that `provider` sees the
/// connection closed once the stream is dropped. Returns the interrupted blocks of what arrived
/// before the cancel.
pub async fn cancel_after_first_text(
    provider: &FakeProvider,
    adapter: &impl Adapter,
    request: GenerateRequest,
) -> Vec<ContentBlock> {
    let cancel = request.cancel.clone();
    let mut stream = adapter.stream(request);
    let mut assembler = BlockAssembler::new();

    // Read until the partial text arrived, then wait for the server to reach its stall.
    tokio::time::timeout(TEST_DEADLINE, async {
        while let Some(chunk) = stream.next().await {
            let is_text = matches!(chunk, Chunk::TextDelta { .. });
            assembler.push(&chunk).expect("nothing after finish");
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
    assert!(
        cancelled_at.elapsed() < Duration::from_millis(500),
        "{:?}",
        cancelled_at.elapsed()
    );
    match rest.last() {
        Some(Chunk::Finish {
            reason: FinishReason::Aborted { failure },
        }) => assert_eq!(failure.code, FailureCode::Aborted),
        other => panic!("expected aborted, got {other:?}"),
    }
    drop(stream);
    tokio::time::timeout(TEST_DEADLINE, provider.wait_for_client_disconnects(1))
        .await
        .expect("the server sees the connection closed");
    assembler.interrupted()
}
