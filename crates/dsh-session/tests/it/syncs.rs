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
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|out| out.status.success()),
        "strace is needed to count the syncs (apt-get install strace; .ci/run installs it)"
    );
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("trace");
    let out = Command::new("strace")
        .args([
            "-f",
            "-e",
            "trace=fsync,fdatasync,sync_file_range,msync",
            "-o",
        ])
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "syncs::sync_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("FLUSHED"),
        "the child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
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
