//! `/rewind` in the TUI end to end (docs/rewind.md): the real `dsh` binary in a
//! pseudo-terminal against the fake provider. Two turns change files with `bash`; `/rewind`
//! lists them, puts the files back as at turn 1's start (files only), then, after the user
//! changed a file outside dsh, asks before it overwrites that change, restores the files of
//! turn 2's start and continues the conversation in a fork with turn 2's message in the
//! composer.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_test_support::{FakeProvider, ScriptedReply};

use crate::common::{text_reply, tool_reply};
use crate::tui_harness::Tui;

fn bash_reply(id: &str, command: &str) -> ScriptedReply {
    let args = serde_json::json!({"command": command, "description": "change files"});
    tool_reply(id, "bash", &args)
}

const DOWN: &str = "\x1b[B";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_restores_files_and_forks_with_the_message_to_edit() {
    let provider = FakeProvider::start([
        bash_reply("call_1", "echo changed > notes.txt && echo new > extra.txt"),
        text_reply("turn one done"),
        bash_reply("call_2", "rm notes.txt"),
        text_reply("turn two done"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let ws = cwd.path().to_path_buf();
    std::fs::write(ws.join("notes.txt"), "original\n").unwrap();
    let url = provider.base_url();
    let h = home.path().to_path_buf();
    let read = |ws: &std::path::Path, name: &str| std::fs::read_to_string(ws.join(name)).ok();

    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &ws);
        tui.wait_for("Ask dsh anything");
        tui.type_text("first change\r");
        tui.wait_for("turn one done");
        tui.wait_for("Ask dsh anything");
        tui.type_text("second change\r");
        tui.wait_for("turn two done");
        tui.wait_for("Ask dsh anything");
        assert_eq!(read(&ws, "notes.txt"), None);

        // Files only, to turn 1's start: the list is newest first.
        tui.type_text("/rewind\r");
        tui.wait_for("rewind to the start of a turn");
        tui.wait_for("second change");
        tui.type_text(DOWN);
        tui.type_text("\r");
        tui.wait_for("restore what?");
        tui.type_text(DOWN);
        tui.type_text(DOWN);
        tui.type_text("\r");
        tui.wait_for("files as at the start of turn 1: 1 written, 1 deleted");
        assert_eq!(read(&ws, "notes.txt").as_deref(), Some("original\n"));
        assert_eq!(read(&ws, "extra.txt"), None);

        // A change outside dsh: asked about, then overwritten on `y`. The first list must be
        // gone from the screen before the second is waited for.
        std::fs::write(ws.join("mine.txt"), "the user's\n").unwrap();
        tui.wait_until("the first /rewind list closed", |s| {
            !s.contains("rewind to the start of a turn") && !s.contains("restore what?")
        });
        tui.type_text("/rewind\r");
        tui.wait_for("rewind to the start of a turn");
        tui.type_text("\r");
        tui.wait_for("restore what?");
        tui.type_text("\r");
        tui.wait_for("files changed outside dsh");
        tui.wait_for("mine.txt");
        assert_eq!(read(&ws, "mine.txt").as_deref(), Some("the user's\n"));
        tui.type_text("y");
        tui.wait_for("the conversation as before turn 2");
        tui.wait_for("first change");
        assert_eq!(read(&ws, "notes.txt").as_deref(), Some("changed\n"));
        assert_eq!(read(&ws, "extra.txt").as_deref(), Some("new\n"));
        assert_eq!(read(&ws, "mine.txt"), None);
        // The fork's transcript has turn 1 only; turn 2's message waits in the composer,
        // below the notice (the inline screen keeps the old session's lines above it).
        tui.wait_until("turn 2's message in the composer", |screen| {
            screen
                .rsplit_once("is in the composer")
                .is_some_and(|(_, below)| below.contains("second change"))
        });
        tui
    })
    .await
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let mut tui = tui;
        tui.quit();
    })
    .await
    .unwrap();
    let sessions = crate::common::session_files(home.path());
    assert_eq!(sessions.len(), 2, "the session and its fork: {sessions:?}");
}
