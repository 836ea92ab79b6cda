//! The TUI's commands end to end (docs/tui.md, "File mentions", "Undo and diff", "Commands"):
//! the real `dsh` binary in a pseudo-terminal against the fake provider. An `@` mention picked
//! in the finder attaches the file's content to the request; `/diff` shows a `write` call's
//! changed line; `/undo` puts the old content back on disk and logs `files/undo`; `/status`
//! shows the session id and the model the requests used; a custom command file is completed
//! and listed by `/help`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use dsh_session::{load_file, Event};
use dsh_test_support::FakeProvider;

use crate::common::{session_file, text_reply, tool_reply};
use crate::tui_harness::Tui;

/// Waits (polling) for the child to exit after Ctrl-D, as `Tui::quit` does, off the runtime.
async fn quit(tui: Tui) -> Tui {
    tokio::task::spawn_blocking(move || {
        let mut tui = tui;
        tui.quit();
        tui
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_found_after_the_last_key_still_open_the_finder() {
    // A workspace big enough that its walk outlasts typing the query: the match is mostly
    // listed after the last key, and the walk's end must redraw the popup by itself.
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for dir in 0..20 {
        let folder = cwd.path().join(format!("pkg{dir:02}"));
        std::fs::create_dir_all(&folder).unwrap();
        for file in 0..1000 {
            std::fs::write(folder.join(format!("m{file:04}.rs")), "").unwrap();
        }
    }
    std::fs::write(cwd.path().join("pkg13/walk_end_marker.rs"), "").unwrap();

    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("explain @walk_end_mark");
        let typed = std::time::Instant::now();
        tui.wait_for("@pkg13/walk_end_marker.rs");
        // Without a redraw at the walk's end the popup waits for an unrelated wake-up (over
        // 10 s here); with it, for the walk (well under a second on an idle machine).
        let waited = typed.elapsed();
        assert!(
            waited < std::time::Duration::from_secs(8),
            "the popup opened {waited:?} after the last key"
        );
        tui.wait_for("Tab/Enter insert");
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_mention_from_the_finder_attaches_the_file() {
    let provider = FakeProvider::start([text_reply("the parser looks fine")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cwd.path().join("src")).unwrap();
    let content = "fn parse_mention_marker() -> u32 { 4711 }\n";
    std::fs::write(cwd.path().join("src/parser_module.rs"), content).unwrap();
    std::fs::write(cwd.path().join("README.md"), "unrelated\n").unwrap();

    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("explain @parser_mo");
        // The composer holds `@parser_mo`; the full path can only come from the finder.
        tui.wait_for("@src/parser_module.rs");
        tui.wait_for("Tab/Enter insert");
        let screen = tui.contents();
        assert!(!screen.contains("README.md"), "{screen}");
        // Enter inserts the highlighted path (and a space), it does not send.
        tui.type_text("\r");
        tui.wait_until("finder closed", |s| !s.contains("Tab/Enter insert"));
        tui.wait_for("explain @src/parser_module.rs");
        tui.type_text("please\r");
        tui.wait_for("the parser looks fine");
        tui.wait_for("(1 mention attached)");
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;

    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "one model call");
    let body = requests[0].body.to_string();
    assert!(
        body.contains("explain @src/parser_module.rs please"),
        "the typed text was not sent: {body}"
    );
    assert!(
        body.contains("parse_mention_marker() -> u32 { 4711 }"),
        "the mentioned file's content was not attached: {body}"
    );
    assert!(body.contains("<attached path="), "{body}");

    let log = load_file(&session_file(home.path())).unwrap();
    let user = log
        .events
        .iter()
        .find_map(|e| match &e.event {
            Event::UserMessage(m) => Some(serde_json::to_string(m).unwrap()),
            _ => None,
        })
        .expect("a logged user message");
    assert!(user.contains("parse_mention_marker"), "{user}");
    assert!(user.contains("Files the user mentioned with @"), "{user}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_then_diff_shows_the_change_and_undo_restores_it() {
    let provider = FakeProvider::start([
        tool_reply(
            "call_read",
            "read",
            &serde_json::json!({"file_path": "notes.txt"}),
        ),
        tool_reply(
            "call_write",
            "write",
            &serde_json::json!({
                "file_path": "notes.txt",
                "content": "alpha\nbeta rewritten by the model\ngamma\n",
            }),
        ),
        text_reply("rewrote the notes"),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let original = "alpha\nbeta as the user wrote it\ngamma\n";
    let notes = cwd.path().join("notes.txt");
    std::fs::write(&notes, original).unwrap();

    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let notes_path = notes.clone();
    let resume_with = (url.clone(), h.clone(), c.clone());
    let (tui, diff_screen) = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        // workspace-write (the default preset) lets `read` and `write` in the cwd run unasked.
        tui.type_text("rewrite the notes\r");
        tui.wait_for("rewrote the notes");
        tui.wait_for("Ask dsh anything");
        assert_eq!(
            std::fs::read_to_string(&notes_path).unwrap(),
            "alpha\nbeta rewritten by the model\ngamma\n"
        );

        tui.type_text("/diff\r");
        tui.wait_for("Changes made by write/edit in this session");
        tui.wait_for("notes.txt  +1 -1");
        let diff_screen = tui.contents();
        tui.type_text("q");
        tui.wait_until("pager closed", |s| {
            !s.contains("Changes made by write/edit in this session")
        });

        tui.type_text("/undo\r");
        tui.wait_for("undid turn");
        (tui, diff_screen)
    })
    .await
    .unwrap();
    // The pager draws a box: take the rows without its border.
    let rows: Vec<&str> = diff_screen
        .lines()
        .map(|row| row.trim_matches(|c: char| c == '│' || c.is_whitespace()))
        .collect();
    assert!(
        rows.contains(&"-beta as the user wrote it"),
        "/diff lacks the removed line:\n{diff_screen}"
    );
    assert!(
        rows.contains(&"+beta rewritten by the model"),
        "/diff lacks the added line:\n{diff_screen}"
    );
    let screen = tui.contents();
    assert!(screen.contains("notes.txt (restored)"), "{screen}");
    assert!(
        screen.contains("undo: the file changes of turn 1 were reverted"),
        "{screen}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), original);
    let _tui = quit(tui).await;

    // Resumed, the session shows the undo the live view showed (from its `files/undo`).
    let resumed = tokio::task::spawn_blocking(move || {
        let (url, h, c) = resume_with;
        let resumed = Tui::start_with(&url, &h, &c, &["resume", "--last", "--alt-screen"]);
        resumed.wait_for("rewrote the notes");
        resumed.wait_for("undo: the file changes of turn 1 were reverted");
        resumed
    })
    .await
    .unwrap();
    let _resumed = quit(resumed).await;

    let log = load_file(&session_file(home.path())).unwrap();
    let undo = log
        .events
        .iter()
        .find_map(|e| match &e.event {
            Event::Opaque { event_type, data } if event_type == "files/undo" => Some(data.clone()),
            _ => None,
        })
        .expect("a files/undo event in the log");
    assert_eq!(undo["complete"], true, "{undo}");
    let files = undo["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{undo}");
    assert_eq!(files[0]["action"], "restored", "{undo}");
    assert!(
        files[0]["path"].as_str().unwrap().ends_with("notes.txt"),
        "{undo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_session_id_and_the_model() {
    let provider = FakeProvider::start([text_reply("hello there")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("hi\r");
        tui.wait_for("hello there");
        tui.wait_for("Ask dsh anything");
        tui.type_text("/status\r");
        tui.wait_for("session   ");
        tui.wait_for("model     ");
        tui
    })
    .await
    .unwrap();

    let log = load_file(&session_file(home.path())).unwrap();
    let model = provider.requests()[0].body["model"]
        .as_str()
        .expect("the request names a model")
        .to_string();
    let screen = tui.contents();
    assert!(
        screen.contains(&format!("session   {}", log.header.id)),
        "/status lacks the session id {}:\n{screen}",
        log.header.id
    );
    assert!(
        screen.contains(&format!("model     {model} · effort")),
        "/status lacks the model {model}:\n{screen}"
    );
    let _tui = quit(tui).await;
}

/// A custom command file (docs/commands.md) is in the completion menu with its description
/// and in `/help`, next to dsh's own commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_commands_are_completed_and_listed_by_help() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let folder = home.path().join("commands/git");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("pr.md"),
        "---\ndescription: Open a pull request\nargument-hint: <title>\n---\nOpen a PR: $ARGUMENTS\n",
    )
    .unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("/gi");
        tui.wait_until("the completion menu", |screen| {
            screen
                .lines()
                .any(|l| l.contains("/git:pr") && l.contains("Open a pull request"))
        });
        tui.type_text("\x7f\x7f\x7f");
        tui.type_text("/help\r");
        tui.wait_until("/help", |screen| {
            screen.contains("/compact")
                && screen
                    .lines()
                    .any(|l| l.contains("/git:pr") && l.contains("Open a pull request"))
        });
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;
}

/// Notes to the instructions (issue 43, point 7): `# note` asks, then appends a line to the
/// project's AGENTS.md, and the model is told at its next step; `## note` would go to the
/// user's file, and `n` keeps the text as a draft without writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_notes_go_to_the_instructions_after_a_yes() {
    let provider = FakeProvider::start([text_reply("noted answer")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".git")).unwrap();
    std::fs::write(cwd.path().join("AGENTS.md"), "# Guide\n\n- run the tests").unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("## keep answers short\r");
        tui.wait_for("your own AGENTS.md in dsh's home");
        tui.type_text("n");
        tui.wait_for("not noted");
        tui.wait_for("## keep answers short");
        // The draft is back: clear it, then the project note.
        tui.type_text(&"\x7f".repeat("## keep answers short".len()));
        tui.type_text("# use pnpm, not npm\r");
        tui.wait_for("the project's AGENTS.md?");
        tui.wait_for("- use pnpm, not npm");
        tui.type_text("y");
        tui.wait_for("noted in");
        tui.type_text("hello\r");
        tui.wait_for("noted answer");
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;
    let agents = std::fs::read_to_string(cwd.path().join("AGENTS.md")).unwrap();
    assert_eq!(agents, "# Guide\n\n- run the tests\n- use pnpm, not npm\n");
    assert!(
        !home.path().join("AGENTS.md").exists(),
        "the refused user note was written"
    );
    let sent = provider.requests()[0].body["messages"].to_string();
    assert!(
        sent.contains("use pnpm, not npm"),
        "the model was not told: {sent}"
    );
}

/// A planted `AGENTS.md` that is a link out of the project is not written through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_never_writes_through_a_planted_link() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".git")).unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    std::os::unix::fs::symlink(&victim, cwd.path().join("AGENTS.md")).unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("# planted\r");
        tui.wait_for("the project's AGENTS.md?");
        tui.type_text("y");
        tui.wait_for("Too many levels of symbolic links");
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
}

/// `/memory` (issue 43, point 7) hands the terminal to `$EDITOR` on the project's AGENTS.md,
/// takes it back, and the model is told of the change at its next step; keys typed after it
/// reach the UI again. `/memory user` edits `$DSH_HOME/AGENTS.md`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_opens_the_instructions_in_the_editor() {
    let provider = FakeProvider::start([text_reply("first"), text_reply("second")])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".git")).unwrap();
    std::fs::write(cwd.path().join("AGENTS.md"), "- old rule\n").unwrap();
    let editor = tools.path().join("fake-editor");
    std::fs::write(
        &editor,
        "#!/bin/sh\necho '- edited in the editor' >> \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let editor_text = editor.display().to_string();
    let tui = tokio::task::spawn_blocking(move || {
        let tui = Tui::start_env(&url, &h, &c, &[], &[("EDITOR", editor_text.as_str())]);
        tui.wait_for("Ask dsh anything");
        tui.type_text("hello\r");
        tui.wait_for("first");
        tui.type_text("/memory\r");
        tui.wait_for("the agent reads it at its next step");
        tui.type_text("again\r");
        tui.wait_for("second");
        tui.type_text("/memory user\r");
        tui.wait_until("the user file edited", |screen| {
            screen
                .matches("the agent reads it at its next step")
                .count()
                >= 2
        });
        tui
    })
    .await
    .unwrap();
    let _tui = quit(tui).await;
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("AGENTS.md")).unwrap(),
        "- old rule\n- edited in the editor\n"
    );
    assert!(std::fs::read_to_string(home.path().join("AGENTS.md"))
        .unwrap()
        .contains("edited in the editor"));
    let second = provider.requests()[1].body["messages"].to_string();
    assert!(
        second.contains("Updated instructions from: AGENTS.md")
            && second.contains("edited in the editor"),
        "{second}"
    );
}
