//! grep and glob over a large real tree, against `rg` as the floor when it is installed.
//!
//! Tree: `$DSH_BENCH_TREE`, else the cargo registry source cache (`~/.cargo/registry/src`).
//! Run: `cargo bench -p dsh-tools --bench search`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench harness: failing loudly is fine

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::tree;

use criterion::{criterion_group, criterion_main, Criterion};
use dsh_tools::{GlobTool, GrepTool, PermissionPreset, SpillDir, Tool, ToolContext};
use serde_json::json;

const PATTERN: &str = r"fn\s+new\(";

fn rg_available() -> bool {
    Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_rg(args: &[&str], root: &PathBuf) -> usize {
    let out = Command::new("rg")
        .args(args)
        .arg(root)
        .output()
        .expect("rg runs");
    out.stdout.iter().filter(|&&b| b == b'\n').count()
}

fn bench(c: &mut Criterion) {
    let Some(root) = tree() else {
        eprintln!("no tree to search: set DSH_BENCH_TREE");
        return;
    };
    let spill_root = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(
        &root,
        SpillDir::create(spill_root.path().join("s")).unwrap(),
    )
    .unwrap()
    .with_permission(PermissionPreset::ReadOnly);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let grep_args = json!({"pattern": PATTERN});
    let glob_args = json!({"pattern": "*.rs"});

    // One warm-up pass that also reports the sizes compared.
    let grep_out = runtime
        .block_on(GrepTool::default().execute(grep_args.clone(), &ctx))
        .unwrap();
    let glob_out = runtime
        .block_on(GlobTool::default().execute(glob_args.clone(), &ctx))
        .unwrap();
    eprintln!(
        "tree {}: grep matches {}, glob files {}",
        root.display(),
        grep_out.data.as_ref().unwrap()["total"],
        glob_out.data.as_ref().unwrap()["total"]
    );
    let rg = rg_available();
    if rg {
        eprintln!(
            "rg: grep matches {}, files {}",
            run_rg(
                &[
                    "-n",
                    "--no-heading",
                    "--hidden",
                    "--no-require-git",
                    "-g",
                    "!.git",
                    PATTERN
                ],
                &root
            ),
            run_rg(
                &[
                    "--files",
                    "--hidden",
                    "--no-require-git",
                    "-g",
                    "!.git",
                    "-g",
                    "*.rs"
                ],
                &root
            )
        );
    }

    let mut group = c.benchmark_group("search");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    group.bench_function("grep_tool", |b| {
        b.iter(|| {
            runtime
                .block_on(GrepTool::default().execute(grep_args.clone(), &ctx))
                .unwrap()
        })
    });
    group.bench_function("glob_tool", |b| {
        b.iter(|| {
            runtime
                .block_on(GlobTool::default().execute(glob_args.clone(), &ctx))
                .unwrap()
        })
    });
    if rg {
        group.bench_function("rg_grep", |b| {
            b.iter(|| {
                run_rg(
                    &[
                        "-n",
                        "--no-heading",
                        "--hidden",
                        "--no-require-git",
                        "-g",
                        "!.git",
                        PATTERN,
                    ],
                    &root,
                )
            })
        });
        group.bench_function("rg_files", |b| {
            b.iter(|| {
                run_rg(
                    &[
                        "--files",
                        "--hidden",
                        "--no-require-git",
                        "-g",
                        "!.git",
                        "-g",
                        "*.rs",
                    ],
                    &root,
                )
            })
        });
    } else {
        eprintln!("rg not installed: floor not measured");
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
