//! Workspace checkpoints (docs/rewind.md) over a large real tree, against git doing the same
//! job (`git add -A` + `git write-tree` into a git directory of its own, the shadow-repository
//! way) as the baseline.
//!
//! Tree: `$DSH_BENCH_TREE`, else the cargo registry source cache (`~/.cargo/registry/src`).
//! Run: `cargo bench -p dsh-tools --bench checkpoint`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench harness: failing loudly is fine

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::tree;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use dsh_tools::{CheckpointLimits, CheckpointStore, GatePolicy};

fn store(home: &Path, root: &Path) -> CheckpointStore {
    let gate = GatePolicy::new(root).with_dsh_home(home);
    CheckpointStore::new(home, root, gate, CheckpointLimits::default())
}

/// `git add -A && git write-tree` of `root` into the git directory `git_dir`.
fn git_snapshot(git_dir: &Path, root: &Path) {
    for args in [&["add", "-A", "."][..], &["write-tree"][..]] {
        let status = Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .arg("--work-tree")
            .arg(root)
            .args(["-c", "core.autocrlf=false"])
            .args(args)
            .current_dir(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }
}

fn git_init(git_dir: &Path) {
    let status = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(git_dir)
        .status()
        .unwrap();
    assert!(status.success());
}

fn bench(c: &mut Criterion) {
    let Some(root) = tree() else {
        eprintln!("no tree to checkpoint: set DSH_BENCH_TREE");
        return;
    };
    let git = Command::new("git").arg("--version").output().is_ok();
    let warm_home = tempfile::tempdir().unwrap();
    let warm = store(warm_home.path(), &root);
    let first = warm.take().unwrap();
    eprintln!(
        "tree {}: {} files ({} over the size limit), {} MB stored",
        root.display(),
        first.files,
        first.large,
        first.new_bytes / 1_000_000
    );
    let warm_git = tempfile::tempdir().unwrap();
    if git {
        git_init(warm_git.path());
        git_snapshot(warm_git.path(), &root);
    }

    let mut group = c.benchmark_group("checkpoint");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20));
    group.bench_function("first", |b| {
        b.iter_batched(
            || tempfile::tempdir().unwrap(),
            |home| store(home.path(), &root).take().unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("unchanged", |b| b.iter(|| warm.take().unwrap()));
    if git {
        group.bench_function("git_first", |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    git_init(dir.path());
                    dir
                },
                |dir| git_snapshot(dir.path(), &root),
                BatchSize::PerIteration,
            )
        });
        group.bench_function("git_unchanged", |b| {
            b.iter(|| git_snapshot(warm_git.path(), &root))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
