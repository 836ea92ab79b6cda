//! Session log benchmarks: append throughput with the real flush policy, and load + project of
//! a 100,000-event log. Peak memory is measured by `examples/load_peak_rss.rs`.

// Test code: a failed unwrap or expect is a failed test (docs/ARCHITECTURE.md, "Lints and
// formatting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dsh_session::*;

#[path = "common.rs"]
mod common;

fn append(c: &mut Criterion) {
    let events = common::synthetic_events(2_000);
    let mut group = c.benchmark_group("append");
    group.sample_size(10);
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("jsonl_2000_events_real_flush_policy", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |home| {
                let path = session_path(home.path(), "/b", "b");
                let mut w =
                    JsonlWriter::create(&path, SessionHeader::new("b", "/b", 0)).expect("create");
                for event in events.iter().cloned() {
                    let before_call = matches!(event, Event::StepStart(_));
                    w.append(event).expect("append");
                    if before_call {
                        w.flush().expect("flush");
                    }
                }
                w.flush().expect("flush");
                home
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("sqlite_2000_events_real_flush_policy", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |home| {
                let store = SqliteStore::open(&home.path().join("s.db")).expect("db");
                let mut w = store
                    .create("/b", CreateOptions::default())
                    .expect("create");
                for event in events.iter().cloned() {
                    let before_call = matches!(event, Event::StepStart(_));
                    w.append(event).expect("append");
                    if before_call {
                        w.flush().expect("flush");
                    }
                }
                w.flush().expect("flush");
                drop(w);
                home
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn load(c: &mut Criterion) {
    let home = tempfile::tempdir().expect("tempdir");
    let packed = common::write_log(&home.path().join("packed"), 100_000, true);
    let unpacked = common::write_log(&home.path().join("unpacked"), 100_000, false);
    let mut group = c.benchmark_group("load_and_project_100k");
    group.sample_size(10);
    group.throughput(Throughput::Elements(100_000));
    for (name, path) in [("packed", &packed), ("unpacked", &unpacked)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut reader = LogReader::open(path).expect("open");
                let mut projector = Projector::new();
                while let Some(env) = reader.next_event().expect("event") {
                    projector.push_owned(env).expect("project");
                }
                projector.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, append, load);
criterion_main!(benches);
