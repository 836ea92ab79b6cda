//! Background jobs with real processes: `bash` `run_in_background`, `job_output`, `job_list`,
//! `job_kill`, the running-job limit, notices, and jobs dying with their table.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::time::{Duration, Instant};

use common::Scratch;
use dsh_tools::{
    group_has_live_members, job_tools, JobTable, PermissionPreset, ToolErrorCode, MAX_RUNNING_JOBS,
};
use serde_json::json;

fn with_jobs() -> (Scratch, JobTable) {
    let mut s = Scratch::new(PermissionPreset::DangerFullAccess);
    let jobs = JobTable::new();
    s.ctx = s.ctx.clone().with_jobs(jobs.clone());
    for tool in job_tools() {
        s.registry.register(tool).unwrap();
    }
    (s, jobs)
}

async fn start(s: &Scratch, command: &str) -> String {
    let out = s
        .call(
            "bash",
            json!({"command": command, "description": "bg", "run_in_background": true}),
        )
        .await
        .unwrap();
    out.data.unwrap()["jobId"].as_str().unwrap().to_string()
}

async fn gone_within(pgid: libc::pid_t, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !group_has_live_members(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !group_has_live_members(pgid)
}

#[tokio::test]
async fn a_background_job_returns_at_once_and_reports_its_output() {
    let (s, jobs) = with_jobs();
    let started = Instant::now();
    let id = start(&s, "echo first; sleep 2; echo done >&2").await;
    assert!(started.elapsed() < Duration::from_secs(1), "bash waited");
    assert_eq!(id, "bash-1");

    // Meanwhile another call completes.
    let other = s
        .ok(
            "bash",
            json!({"command": "echo meanwhile", "description": "x"}),
        )
        .await;
    assert_eq!(other, "meanwhile\n");
    let list = s.ok("job_list", json!({})).await;
    assert!(list.starts_with("bash-1  running"), "{list}");
    assert!(jobs.take_finished().is_empty());

    let out = s
        .ok(
            "job_output",
            json!({"job_id": "bash-1", "wait": true, "timeout_ms": 100}),
        )
        .await;
    assert!(out.contains("first\n"), "{out}");
    assert!(out.ends_with("[status: running]"), "{out}");

    let out = s
        .ok("job_output", json!({"job_id": "bash-1", "wait": true}))
        .await;
    assert!(!out.contains("first"), "only new output: {out}");
    assert!(out.contains("done\n"), "{out}");
    assert!(
        out.contains("[status: completed (exit code 0) after"),
        "{out}"
    );
    // job_output told the model the end: no separate notice.
    assert!(jobs.take_finished().is_empty());

    let again = s.ok("job_output", json!({"job_id": "bash-1"})).await;
    assert!(again.starts_with("(no new output)"), "{again}");
    let list = s.ok("job_list", json!({})).await;
    assert!(
        list.starts_with("bash-1  completed (exit code 0)"),
        "{list}"
    );
}

#[tokio::test]
async fn a_finished_job_gives_one_notice_with_its_unread_output() {
    let (s, jobs) = with_jobs();
    start(&s, "echo done; exit 3").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let notices = loop {
        let notices = jobs.take_finished();
        if !notices.is_empty() || Instant::now() > deadline {
            break notices;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].job_id, "bash-1");
    assert!(
        notices[0].text.contains("failed (exit code 3)"),
        "{}",
        notices[0].text
    );
    assert!(notices[0].text.contains("\ndone\n"), "{}", notices[0].text);
    assert!(jobs.take_finished().is_empty(), "each notice once");
    // The notice did not consume the output.
    let out = s.ok("job_output", json!({"job_id": "bash-1"})).await;
    assert!(out.starts_with("done\n"), "{out}");
}

#[tokio::test]
async fn job_kill_leaves_no_process_behind() {
    let (s, jobs) = with_jobs();
    // A child that ignores SIGTERM and a grandchild in the same group.
    start(&s, "trap '' TERM; (sleep 60 &) ; sleep 60").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let groups = jobs.running_groups();
    assert_eq!(groups.len(), 1);
    let pgid = groups[0];
    assert!(group_has_live_members(pgid));
    let out = s
        .ok("job_kill", json!({"job_id": "bash-1", "reason": "test"}))
        .await;
    assert!(out.starts_with("Killed background job bash-1."), "{out}");
    assert!(out.contains("[status: killed (job_kill)"), "{out}");
    assert!(
        !group_has_live_members(pgid),
        "a process of the job survived"
    );
    assert!(jobs.running_groups().is_empty());
    let again = s.ok("job_kill", json!({"job_id": "bash-1"})).await;
    assert!(again.contains("had already finished"), "{again}");
    s.err(
        "job_kill",
        json!({"job_id": "bash-9"}),
        ToolErrorCode::NotFound,
    )
    .await;
}

#[tokio::test]
async fn the_running_job_limit_holds_and_jobs_die_with_the_table() {
    let (s, jobs) = with_jobs();
    for _ in 0..MAX_RUNNING_JOBS {
        start(&s, "sleep 60").await;
    }
    let msg = s
        .err(
            "bash",
            json!({"command": "sleep 1", "description": "bg", "run_in_background": true}),
            ToolErrorCode::LimitReached,
        )
        .await;
    assert!(msg.contains("limit is 10"), "{msg}");
    let groups = jobs.running_groups();
    assert_eq!(groups.len(), MAX_RUNNING_JOBS);
    // A killed job frees a slot.
    s.ok("job_kill", json!({"job_id": "bash-3"})).await;
    start(&s, "sleep 60").await;

    let groups = jobs.running_groups();
    drop(jobs);
    drop(s); // the last clone of the table (in the context) goes: every group is killed
    for pgid in groups {
        assert!(
            gone_within(pgid, Duration::from_secs(2)).await,
            "group {pgid} survived the table"
        );
    }
}

#[tokio::test]
async fn large_output_shows_its_tail_and_names_the_log() {
    let (s, _jobs) = with_jobs();
    start(
        &s,
        "head -c 300000 /dev/zero | tr '\\0' 'x'; echo; echo END",
    )
    .await;
    let out = s
        .ok("job_output", json!({"job_id": "bash-1", "wait": true}))
        .await;
    assert!(
        out.contains("earlier bytes of new output not shown"),
        "{}",
        &out[..200]
    );
    assert!(out.contains("END"));
    assert!(out.len() < 60_000, "{}", out.len());
}

#[tokio::test]
async fn bad_job_arguments_are_invalid() {
    let (s, _jobs) = with_jobs();
    s.err("job_output", json!({}), ToolErrorCode::InvalidArgs)
        .await;
    s.err(
        "job_output",
        json!({"job_id": 5}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "job_output",
        json!({"job_id": "bash-1", "timeout_ms": -1}),
        ToolErrorCode::InvalidArgs,
    )
    .await;
    s.err(
        "job_output",
        json!({"job_id": "nope"}),
        ToolErrorCode::NotFound,
    )
    .await;
    assert_eq!(
        s.ok("job_list", json!({})).await,
        "No background jobs in this session."
    );
}

/// The job tools declare what dsh's recorded schemas declare (same required fields and types).
#[test]
fn job_schemas_match_the_recorded_dsh_tools() {
    let fixture =
        dsh_test_support::snapshot_fixtures_dir().join("text-turn/tool-schemas.expected.json");
    let text = std::fs::read_to_string(&fixture)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", fixture.display()));
    let recorded: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut compared = 0;
    for tool in job_tools() {
        let dsh = recorded["initial"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool.name())
            .unwrap();
        let ours = tool.parameters();
        assert_eq!(
            ours["required"],
            dsh["parameters"]["required"],
            "{}",
            tool.name()
        );
        for (prop, spec) in dsh["parameters"]["properties"].as_object().unwrap() {
            assert_eq!(
                ours["properties"][prop]["type"],
                spec["type"],
                "{}.{prop}",
                tool.name()
            );
        }
        compared += 1;
    }
    assert_eq!(compared, 3);
}

/// `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, not the process. A
/// job started from a thread that then ends (a plain thread entering the runtime, a retired
/// blocking-pool thread such as `spawn_blocking` and `block_in_place` leave behind) must keep
/// running: children are forked on dsh's long-lived spawner thread (docs/SECURITY.md,
/// "Process sandbox"). That they still die with dsh itself is `children_die_with_dsh` in
/// crates/dsh-sandbox/tests/it/root_escapes.rs.
#[test]
fn a_job_outlives_the_thread_that_started_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    let (s, jobs) = with_jobs();
    let s = std::sync::Arc::new(s);
    let tick = |name: &str| format!("while true; do echo x >> {name}; sleep 0.05; done");
    // A plain thread that enters the runtime, starts the job, and ends.
    let handle = runtime.handle().clone();
    let shared = s.clone();
    let command = tick("tick-thread");
    let ended = std::thread::spawn(move || handle.block_on(start(&shared, &command)));
    let first = ended.join().unwrap();
    // A blocking-pool thread, retired 50 ms after its task.
    let shared = s.clone();
    let command = tick("tick-blocking");
    let second = runtime.block_on(async move {
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Handle::current().block_on(start(&shared, &command))
        })
        .await
        .unwrap()
    });
    assert_ne!(first, second);
    // Both threads are gone well before this; the jobs must still be running and writing.
    std::thread::sleep(Duration::from_millis(1000));
    let size = |name: &str| {
        std::fs::metadata(s.path(name))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let before = (size("tick-thread"), size("tick-blocking"));
    std::thread::sleep(Duration::from_millis(300));
    let after = (size("tick-thread"), size("tick-blocking"));
    assert!(
        after.0 > before.0 && before.0 > 0,
        "the job started from an ended thread died: {before:?} -> {after:?}"
    );
    assert!(
        after.1 > before.1 && before.1 > 0,
        "the job started from a retired blocking thread died: {before:?} -> {after:?}"
    );
    let groups = jobs.running_groups();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert!(groups.iter().all(|g| group_has_live_members(*g)));
    // Dropping the table ends them (jobs die with their table).
    drop(jobs);
    drop(s);
    for pgid in groups {
        let deadline = Instant::now() + Duration::from_secs(5);
        while group_has_live_members(pgid) {
            assert!(
                Instant::now() < deadline,
                "job group {pgid} outlived its table"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
