//! Every recorded dsh session replays through the fake provider and the adapter to the same
//! blocks, usage and finish as the recording.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::path::PathBuf;

use common::*;
use dsh_llm::{Adapter, Chunk, ContentBlock, FinishReason};
use dsh_test_support::{
    snapshot_fixtures_dir, FakeProvider, RecordedSession, ReplayOverride, ScriptedReply, StreamEnd,
};
use futures::StreamExt;

fn fixtures() -> PathBuf {
    snapshot_fixtures_dir()
}

fn sessions() -> Vec<(String, RecordedSession)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("session.jsonl").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "found only {} fixtures", dirs.len());
    dirs.into_iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let session = RecordedSession::load(&dir).unwrap_or_else(|err| panic!("{name}: {err}"));
            (name, session)
        })
        .collect()
}

#[test]
fn every_fixture_loads_into_calls() {
    for (name, session) in sessions() {
        let text = std::fs::read_to_string(fixtures().join(&name).join("session.jsonl")).unwrap();
        let recorded_finishes = text.matches("\"type\":\"finish\"").count();
        let finished = session
            .calls
            .iter()
            .filter(|c| c.finish().is_some())
            .count();
        assert_eq!(finished, recorded_finishes, "{name}");
        for call in &session.calls {
            assert!(!call.chunks.is_empty(), "{name}");
        }
    }
}

#[test]
fn packed_rows_expand_into_deltas() {
    let session = RecordedSession::load(&fixtures().join("packed-chunks")).unwrap();
    let deltas = session.calls[0]
        .chunks
        .iter()
        .filter(|c| {
            matches!(
                c,
                Chunk::ToolCallDelta { .. } | Chunk::ReasoningDelta { .. }
            )
        })
        .count();
    assert!(deltas > 10, "{deltas}");
}

#[test]
fn overrides_are_parsed() {
    let cancel = RecordedSession::load(&fixtures().join("cancel")).unwrap();
    assert_eq!(
        cancel.overrides,
        vec![ReplayOverride::Hang {
            ready_file: Some(".dsh-snapshot-stream-ready".into())
        }]
    );
    assert!(
        matches!(cancel.replies()[0], ScriptedReply::Stream(ref r) if r.end == StreamEnd::Stall)
    );
    let error = RecordedSession::load(&fixtures().join("error-finish")).unwrap();
    assert!(matches!(error.overrides[0], ReplayOverride::Throw { .. }));
    assert!(matches!(
        error.replies()[0],
        ScriptedReply::Http { status: 401, .. }
    ));
}

#[tokio::test]
async fn text_turn_replays_to_pong() {
    let session = RecordedSession::load(&fixtures().join("text-turn")).unwrap();
    let provider = FakeProvider::start(session.replies()).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    let reply = assemble(&chunks);
    assert_eq!(reply.finish, FinishReason::Stop);
    let text: String = reply
        .blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "PONG");
    let recorded = assemble(&session.calls[0].chunks);
    assert_eq!(reply.usage, recorded.usage);
    assert_eq!(reply.blocks, recorded.blocks);
}

#[tokio::test]
async fn every_recorded_call_replays_to_the_recorded_outcome() {
    for (name, session) in sessions() {
        let replies = session.replies();
        let provider = FakeProvider::start(replies.clone()).await.unwrap();
        let adapter = adapter_for(&provider);
        for (k, reply) in replies.iter().enumerate() {
            let recorded = session
                .calls
                .get(k)
                .map(|c| c.chunks.clone())
                .unwrap_or_default();
            let request = simple_request();
            if matches!(reply, ScriptedReply::Stream(r) if r.end == StreamEnd::Stall) {
                // A hang: wait for the stall, cancel, and recover the partial reply.
                // Cancel once every recorded delta arrived (or at the stall, when there are none):
                // cancellation wins over buffered data, so cancelling earlier would lose deltas.
                let is_delta = |c: &Chunk| {
                    matches!(
                        c,
                        Chunk::TextDelta { .. }
                            | Chunk::ReasoningDelta { .. }
                            | Chunk::ToolCallDelta { .. }
                    )
                };
                let expected_deltas = recorded.iter().filter(|c| is_delta(c)).count();
                let cancel = request.cancel.clone();
                let mut stream = adapter.stream(request);
                let mut got = Vec::new();
                let stalls = provider.events().stalls;
                let run = async {
                    if expected_deltas == 0 {
                        provider.wait_for_stalls(stalls + 1).await;
                        cancel.cancel();
                    }
                    while let Some(chunk) = stream.next().await {
                        got.push(chunk);
                        if got.iter().filter(|c| is_delta(c)).count() == expected_deltas {
                            cancel.cancel();
                        }
                    }
                };
                tokio::time::timeout(TEST_DEADLINE, run)
                    .await
                    .unwrap_or_else(|_| panic!("{name} call {k} hung"));
                assert!(
                    matches!(finish(&got), FinishReason::Aborted { .. }),
                    "{name}"
                );
                let mut assembler = dsh_llm::BlockAssembler::new();
                got.iter().for_each(|c| assembler.push(c).unwrap());
                let mut expected = dsh_llm::BlockAssembler::new();
                recorded
                    .iter()
                    .filter(|c| !matches!(c, Chunk::Finish { .. }))
                    .for_each(|c| expected.push(c).unwrap());
                assert_eq!(
                    assembler.interrupted(),
                    expected.interrupted(),
                    "{name} call {k}"
                );
                continue;
            }
            let got = assemble(&collect(&adapter, request).await);
            let expected = match reply {
                // `throw` overrides replace the recorded call.
                _ if !matches!(
                    session.overrides.get(k),
                    None | Some(ReplayOverride::Chunks { .. })
                ) =>
                {
                    assert!(
                        got.finish.failure().is_some(),
                        "{name} call {k}: {:?}",
                        got.finish
                    );
                    continue;
                }
                _ => assemble(&recorded),
            };
            match (&got.finish, &expected.finish) {
                (FinishReason::Error { failure: a }, FinishReason::Error { failure: b }) => {
                    assert_eq!(a.code, b.code, "{name} call {k}");
                }
                (a, b) => {
                    assert_eq!(a, b, "{name} call {k}");
                    assert_eq!(got.blocks, expected.blocks, "{name} call {k}");
                    assert_eq!(got.usage, expected.usage, "{name} call {k}");
                }
            }
        }
    }
}
