//! The syncs of a new session before its first model call (docs/sessions.md, "Durability and
//! crash repair"): the header is written at creation, the front end's message (enqueued while no
//! turn is open), `turn/start` and `step/start` are written through, and all of it, with the new
//! folder's entry, is synced by the flush before the model call. Counted with `strace` on a child that plays the loop's first turn (`.ci/run` installs
//! strace; without it the test fails and says so).

use std::path::Path;
use std::process::Command;

use dsh_llm::Message;
use dsh_session::*;

const CHILD_ENV: &str = "DSH_SESSION_SYNC_CHILD";

/// Runs the child test `child` (which plays a writer in the folder named by `env`) under
/// `strace -f -e trace=<calls>`, checks it printed `done`, and returns the folder (kept until
/// the returned guard drops) and the trace.
fn trace_child(child: &str, env: &str, calls: &str, done: &str) -> (tempfile::TempDir, String) {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|out| out.status.success()),
        "strace is needed to see the syncs (apt-get install strace; .ci/run installs it)"
    );
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-s", "400", "-e", &format!("trace={calls}"), "-o"])
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(done),
        "the child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    (home, trace)
}

/// True inside any of the child processes these tests start.
fn in_child() -> bool {
    [CHILD_ENV, TOOL_CHILD_ENV, BACKGROUND_CHILD_ENV]
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

fn splice(start: u64, removed: Option<u64>, inserted: Vec<Message>) -> Event {
    Event::InboxSpliced(InboxSplice {
        target: "next-turn".into(),
        start,
        removed_count: removed,
        inserted,
        outcome: None,
    })
}

/// The first turn of `dsh run "say ok"` up to its model call, as the loop appends it: the
/// front end's message (enqueued while idle: written through), the turn and step starts, the
/// claim, the message, then the flush before the model call. Marks each phase on stdout for the parent.
fn first_turn(path: &Path) {
    let mut writer = JsonlWriter::create(path, SessionHeader::new("syncs", "/syncs", 0)).unwrap();
    let message = Message::user_text("u1", "say ok");
    println!("CREATED");
    writer
        .append(splice(0, None, vec![message.clone()]))
        .unwrap();
    writer.write_through().unwrap();
    println!("ENQUEUED");
    writer
        .append(Event::TurnStart(TurnStart { turn: 1 }))
        .unwrap();
    writer.append(splice(0, Some(1), Vec::new())).unwrap();
    writer
        .append(Event::StepStart(StepRef { turn: 1, step: 1 }))
        .unwrap();
    writer.append(Event::UserMessage(message)).unwrap();
    // Everything up to the step start is in the file before any sync of it (a reader, and a
    // crash of this process, keep it); the message is still buffered.
    let loaded = load_file(path).unwrap();
    assert_eq!(loaded.events.len(), 4, "written through before the flush");
    writer.flush().unwrap();
    println!("FLUSHED");
    std::mem::forget(writer);
}

#[test]
fn sync_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    first_turn(&session_path(Path::new(&dir), "/syncs", "syncs"));
}

#[test]
fn a_new_session_syncs_once_with_its_folder_before_the_model_call() {
    if in_child() {
        return;
    }
    let (home, trace) = trace_child(
        "syncs::sync_child",
        CHILD_ENV,
        "fsync,fdatasync,sync_file_range,msync",
        "FLUSHED",
    );
    let syncs: Vec<&str> = trace
        .lines()
        .filter(|line| line.contains("sync") && !line.contains("resumed>"))
        .collect();
    let count = |name: &str| {
        syncs
            .iter()
            .filter(|line| line.contains(&format!(" {name}(")))
            .count()
    };
    // The flush before the model call: the log, then the new folder's entry.
    assert_eq!(count("fdatasync"), 1, "{syncs:#?}");
    assert_eq!(count("fsync"), 1, "the new folder's entry: {syncs:#?}");
    assert_eq!(syncs.len(), 2, "{syncs:#?}");
    // What was synced is all there.
    let log = load_file(&session_path(home.path(), "/syncs", "syncs")).unwrap();
    assert_eq!(log.events.len(), 5);
}

const TOOL_CHILD_ENV: &str = "DSH_SESSION_SYNC_TOOL_CHILD";

/// A tool step as the loop logs it, after the first flush: the call, `tool/started` (a sync
/// point: the sync before the body), the pipeline's own flush right after it, the result and
/// `step/end` (a sync point), the next `step/start` (written through) and the flush before
/// the next model call. The flush right after `tool/started` has nothing to sync, and the one
/// before the next call has only `step/start` (docs/sessions.md, "Durability and crash
/// repair"). Then a message steered into that step and another flush: the message is sent to
/// the model, so it is synced.
fn tool_step(path: &Path) {
    let mut writer = JsonlWriter::create(path, SessionHeader::new("syncs", "/syncs", 0)).unwrap();
    writer
        .append(Event::TurnStart(TurnStart { turn: 1 }))
        .unwrap();
    writer
        .append(Event::StepStart(StepRef { turn: 1, step: 1 }))
        .unwrap();
    writer.flush().unwrap();
    println!("FIRST-FLUSH");
    writer
        .append(Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "read".into(),
            arguments: "{}".into(),
            presentation: None,
        }))
        .unwrap();
    writer
        .append(Event::ToolStarted(ToolStarted {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
        }))
        .unwrap();
    writer.flush().unwrap();
    writer
        .append(Event::StepEnd(StepRef { turn: 1, step: 1 }))
        .unwrap();
    writer.flush().unwrap();
    writer
        .append(Event::StepStart(StepRef { turn: 1, step: 2 }))
        .unwrap();
    writer.flush().unwrap();
    writer
        .append(Event::UserMessage(Message::user_text(
            "u2",
            "also check the tests",
        )))
        .unwrap();
    writer.flush().unwrap();
    println!("STEP-DONE");
    std::mem::forget(writer);
}

#[test]
fn sync_tool_child() {
    let Some(dir) = std::env::var_os(TOOL_CHILD_ENV) else {
        return;
    };
    tool_step(&session_path(Path::new(&dir), "/syncs", "syncs"));
}

#[test]
fn a_flush_with_nothing_written_since_the_last_sync_does_not_sync_again() {
    if in_child() {
        return;
    }
    let (home, trace) = trace_child(
        "syncs::sync_tool_child",
        TOOL_CHILD_ENV,
        "fsync,fdatasync,write",
        "STEP-DONE",
    );
    // The syncs after the first flush, in order, with the log writes between them.
    let after_first: Vec<&str> = trace
        .lines()
        .skip_while(|line| !line.contains("FIRST-FLUSH"))
        .filter(|line| {
            (line.contains(" fdatasync(") || line.contains(" fsync("))
                || (line.contains(" write(") && line.contains("\\\"type\\\""))
        })
        .filter(|line| !line.contains("resumed>"))
        .collect();
    let kinds: Vec<&str> = after_first
        .iter()
        .map(|line| {
            if line.contains(" fdatasync(") {
                "sync"
            } else if line.contains(" fsync(") {
                "fsync"
            } else {
                "write"
            }
        })
        .collect();
    // tool/call + tool/started written and synced (the pipeline's flush adds nothing);
    // step/end written and synced; step/start written, and the flush before the call has
    // nothing else to sync; the steered message written and synced by the next flush.
    assert_eq!(
        kinds,
        ["write", "sync", "write", "sync", "write", "write", "sync"],
        "{after_first:#?}"
    );
    let log = load_file(&session_path(home.path(), "/syncs", "syncs")).unwrap();
    assert_eq!(log.events.len(), 7);
}

const BACKGROUND_CHILD_ENV: &str = "DSH_SESSION_SYNC_BACKGROUND_CHILD";

/// The flush before a model call as the loop makes it (`flush_in_background`), then the
/// reply's first event: the request may leave while the log syncs, the reply waits for it.
fn call_with_background_sync(path: &Path) {
    let mut writer = JsonlWriter::create(path, SessionHeader::new("syncs", "/syncs", 0)).unwrap();
    writer
        .append(Event::TurnStart(TurnStart { turn: 1 }))
        .unwrap();
    writer
        .append(Event::UserMessage(Message::user_text("u1", "say ok")))
        .unwrap();
    writer.flush_in_background().unwrap();
    // Written before the call, whether or not the sync has finished.
    assert_eq!(load_file(path).unwrap().events.len(), 2);
    println!("REQUESTED");
    writer
        .append(Event::UserMessage(Message::user_text("u2", "the reply")))
        .unwrap();
    writer.flush().unwrap();
    println!("REPLIED");
    std::mem::forget(writer);
}

#[test]
fn sync_background_child() {
    let Some(dir) = std::env::var_os(BACKGROUND_CHILD_ENV) else {
        return;
    };
    call_with_background_sync(&session_path(Path::new(&dir), "/syncs", "syncs"));
}

#[test]
fn the_sync_before_a_model_call_runs_beside_it_and_ends_before_the_reply_is_written() {
    if in_child() {
        return;
    }
    let (home, trace) = trace_child(
        "syncs::sync_background_child",
        BACKGROUND_CHILD_ENV,
        "fsync,fdatasync,write",
        "REPLIED",
    );
    let lines: Vec<&str> = trace.lines().collect();
    let tid = |line: &str| line.split_whitespace().next().unwrap_or("").to_string();
    let written = |text: &str| {
        lines
            .iter()
            .position(|line| line.contains(" write(") && line.contains(text))
            .unwrap_or_else(|| panic!("no write of {text}: {trace}"))
    };
    let prompt = written("say ok");
    let reply = written("the reply");
    // The first sync after the prompt's write: the background one.
    let sync = prompt
        + lines[prompt..]
            .iter()
            .position(|line| line.contains(" fdatasync("))
            .unwrap_or_else(|| panic!("no sync after the prompt: {trace}"));
    assert_ne!(
        tid(lines[sync]),
        tid(lines[prompt]),
        "synced on its own thread: {trace}"
    );
    // It ended (or was never interrupted) before the reply was written.
    let ended = if lines[sync].contains("<unfinished ...>") {
        let who = tid(lines[sync]);
        sync + lines[sync..]
            .iter()
            .position(|line| line.starts_with(&who) && line.contains("<... fdatasync resumed>"))
            .unwrap_or_else(|| panic!("the sync never ended: {trace}"))
    } else {
        sync
    };
    assert!(
        ended < reply,
        "the reply was written before the sync ended: {trace}"
    );
    // The folder's entry was synced with it (the log is new), before the reply too.
    let folder = lines
        .iter()
        .position(|line| line.contains(" fsync("))
        .unwrap_or_else(|| panic!("the folder was not synced: {trace}"));
    assert!(folder < reply, "{trace}");
    let log = load_file(&session_path(home.path(), "/syncs", "syncs")).unwrap();
    assert_eq!(log.events.len(), 3);
}
