//! Every session log vendored from dsh (`fixtures/dsh/`, README there) through the real `dsh`
//! binary: `dsh sessions show` renders each one, one in ten is resumed with `dsh run --resume`
//! against the fake provider, and a few are compressed as dsh compresses them
//! (`session.jsonl.zstd`) and shown and resumed from there (docs/sessions.md, "Reading dsh's
//! logs", "Compressed logs").

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

use std::path::{Path, PathBuf};

use crate::common::{dsh_command, output};

use dsh_session::{load_file, project, Event, LoadedLog, DSH_ONLY_TYPES};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

/// Every vendored dsh session log, sorted.
fn vendored_logs() -> Vec<PathBuf> {
    dsh_test_support::vendored_dsh_logs().unwrap_or_else(|error| panic!("{error}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Compresses a plain log as dsh writes `session.jsonl.zstd`: the header line in its own frame,
/// then frames of a few lines each (one per flushed batch).
fn dsh_style_zstd(plain: &[u8]) -> Vec<u8> {
    let mut lines = plain.split_inclusive(|&b| b == b'\n');
    let mut out = zstd::encode_all(lines.next().unwrap(), 3).unwrap();
    let rest: Vec<&[u8]> = lines.collect();
    for batch in rest.chunks(5) {
        out.extend(zstd::encode_all(batch.concat().as_slice(), 3).unwrap());
    }
    out
}

#[tokio::test]
async fn dsh_sessions_show_renders_every_vendored_dsh_log() {
    let home = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut notes = 0;
    for path in vendored_logs() {
        let mut cmd = dsh_command(home.path(), home.path());
        cmd.args(["sessions", "show"]).arg(&path);
        let out = output(cmd).await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if let Some(refusal) = dsh_test_support::expected_refusal(&path) {
            if out.status.success() || !stderr.contains(refusal) {
                failures.push(format!(
                    "{}: expected the clear refusal, got {stderr}",
                    path.display()
                ));
            }
            continue;
        }
        if !out.status.success() || !stdout.starts_with("# ") {
            failures.push(format!("{}: {stderr}", path.display()));
            continue;
        }
        // Each event of a type we have no feature for gets its one-line note; the two this
        // build writes itself say what they are.
        let log = load_file(&path).unwrap();
        for env in &log.events {
            if let Event::DshOnly(event) = &env.event {
                let note = match event.event_type() {
                    "subagent/descriptor" => "_(sub-agent `".to_string(),
                    "web/deepseek-search-llm-request" => "_(web_search sent a request".to_string(),
                    other => format!("_(dsh event `{other}`:"),
                };
                if !stdout.contains(&note) {
                    failures.push(format!("{}: no note `{note}`", path.display()));
                }
                notes += 1;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        notes >= 50,
        "only {notes} dsh-only events in the vendored logs"
    );
}

/// One resumed run: `log` copied into a fresh home, resumed by path with `dsh run --resume`
/// against a fake provider that answers once. Returns the log after the run.
async fn resume_once(source_log: &Path, copy_as: &str, compress: bool) -> (LoadedLog, LoadedLog) {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let dir = home.path().join("sessions/--copied--/s1");
    std::fs::create_dir_all(&dir).unwrap();
    let plain = std::fs::read(source_log).unwrap();
    let target = dir.join(copy_as);
    if compress {
        std::fs::write(&target, dsh_style_zstd(&plain)).unwrap();
    } else {
        std::fs::write(&target, &plain).unwrap();
    }
    let before = load_file(&target).unwrap();
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("RESUMED-OK")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let mut cmd = dsh_command(home.path(), cwd.path());
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-test-resume")
        .args(["run", "--resume"])
        .arg(&target)
        .arg("go on");
    let out = output(cmd).await;
    let name = source_log.display();
    assert!(
        out.status.success(),
        "{name}: dsh run --resume failed: {}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "RESUMED-OK\n", "{name}");
    // The model saw the projected history of dsh's log, then the new message.
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "{name}");
    let sent = requests[0].body["messages"].as_array().unwrap().len();
    let history = project(&before.events).unwrap().len();
    assert!(
        sent > history,
        "{name}: {sent} messages sent, history {history}"
    );
    let written = dir.join("session.jsonl");
    if compress {
        assert_eq!(
            std::fs::read(&target).unwrap(),
            dsh_style_zstd(&plain),
            "{name}: the compressed log changed"
        );
    }
    let after = load_file(&written).unwrap();
    (before, after)
}

fn check_continued(name: &str, before: &LoadedLog, after: &LoadedLog) {
    let n = before.events.len();
    assert!(after.events.len() > n, "{name}");
    assert!(
        after.events[..n] == before.events[..],
        "{name}: history rewritten"
    );
    assert!(
        after.events[n..]
            .iter()
            .any(|e| matches!(&e.event, Event::TurnEnd(_))),
        "{name}: no turn/end appended"
    );
    // dsh-only events are still there, byte for byte.
    for (old, new) in before.events.iter().zip(&after.events) {
        if let (Event::DshOnly(a), Event::DshOnly(b)) = (&old.event, &new.event) {
            assert_eq!(a.raw_data(), b.raw_data(), "{name}");
        }
    }
}

#[tokio::test]
async fn one_in_ten_vendored_dsh_logs_resumes_with_dsh_run() {
    let sample: Vec<PathBuf> = vendored_logs()
        .into_iter()
        .filter(|p| dsh_test_support::expected_refusal(p).is_none())
        .step_by(10)
        .collect();
    assert!(sample.len() >= 16, "{sample:?}");
    for path in &sample {
        let (before, after) = resume_once(path, "session.jsonl", false).await;
        check_continued(&path.display().to_string(), &before, &after);
    }
}

#[tokio::test]
async fn zstd_compressed_dsh_logs_show_and_resume_into_a_plain_continuation() {
    let root = dsh_test_support::dsh_fixtures_dir();
    let picks = [
        "apps/web/tests/snapshots/goal-multi-turn-actions/session.jsonl",
        "examples/acp-agent/tests/snapshots/advanced-toolchain/session.jsonl",
        "examples/headless-agent/tests/snapshots/compaction-recovery/session.jsonl",
    ];
    for (n, pick) in picks.iter().enumerate() {
        let path = root.join(pick);
        assert!(
            std::fs::read(&path)
                .map(|b| DSH_ONLY_TYPES
                    .iter()
                    .any(|t| text(&b).contains(&format!("\"type\":\"{t}\"")))
                    || n == 2)
                .unwrap(),
            "{pick}"
        );
        // `sessions show` of the compressed copy prints what it prints for the plain log.
        let home = tempfile::tempdir().unwrap();
        let zpath = home.path().join("session.jsonl.zstd");
        std::fs::write(&zpath, dsh_style_zstd(&std::fs::read(&path).unwrap())).unwrap();
        let mut plain_cmd = dsh_command(home.path(), home.path());
        plain_cmd.args(["sessions", "show"]).arg(&path);
        let mut zstd_cmd = dsh_command(home.path(), home.path());
        zstd_cmd.args(["sessions", "show"]).arg(&zpath);
        let (plain_out, zstd_out) = (output(plain_cmd).await, output(zstd_cmd).await);
        assert!(
            zstd_out.status.success(),
            "{pick}: {}",
            text(&zstd_out.stderr)
        );
        assert_eq!(text(&zstd_out.stdout), text(&plain_out.stdout), "{pick}");
        // Its folder is found too, and `sessions list --all` lists it.
        let mut by_folder = dsh_command(home.path(), home.path());
        by_folder.args(["sessions", "show"]).arg(home.path());
        assert_eq!(
            text(&output(by_folder).await.stdout),
            text(&plain_out.stdout)
        );
        // Resumed: a plain session.jsonl continues it, the compressed file stays as it was.
        let ext = if n % 2 == 0 {
            "session.jsonl.zstd"
        } else {
            "session.jsonl.zst"
        };
        let (before, after) = resume_once(&path, ext, true).await;
        check_continued(pick, &before, &after);
    }
}

#[tokio::test]
async fn sessions_list_shows_a_zstd_session() {
    let home = tempfile::tempdir().unwrap();
    let path = dsh_test_support::dsh_fixtures_dir().join("acp-snapshots/multi-turn/session.jsonl");
    let dir = home.path().join("sessions/--w--/dsh-zstd-session");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("session.jsonl.zstd"),
        dsh_style_zstd(&std::fs::read(&path).unwrap()),
    )
    .unwrap();
    let id = load_file(&path).unwrap().header.id;
    let mut cmd = dsh_command(home.path(), home.path());
    cmd.args(["sessions", "list", "--all"]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&id[..8]),
        "{}",
        text(&out.stdout)
    );
}
