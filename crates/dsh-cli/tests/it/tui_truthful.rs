//! Issue 41's "truthful UI" items on the running terminal: the real `dsh` binary in a
//! pseudo-terminal against the fake provider (crate::tui_harness). What the UI offers works where
//! it is offered: Ctrl-T shows reasoning the inline mode already wrote to the scrollback, and
//! `/help` offers PgUp/PgDn only on the full screen, where they scroll the conversation; the
//! header and status line show the effort the requests use; `/fork` names what it copied;
//! `/export` writes into the session's folder, not into the working directory, and says where.

use std::time::Duration;

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

use crate::common::{session_file, session_files, text_reply};
use crate::tui_harness::Tui;

const ROWS: u16 = 40;

/// Ctrl-T in the inline mode opens the conversation with its reasoning in full, though the
/// reasoning is in the terminal's scrollback already; Ctrl-T closes the view again and leaves
/// nothing of it behind (docs/tui.md, "Modes").
#[test]
fn ctrl_t_shows_reasoning_already_in_the_scrollback() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([ScriptedReply::from(
            SseReply::new()
                .reasoning("First the failing test.\nThen the lexer's spans.\nLast the fix.")
                .text("the parser skips the last token")
                .finish("stop", Some(WireUsage::default())),
        )]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut tui = Tui::start_sized(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &[],
        &[],
        (ROWS, 100),
    );
    tui.wait_for("Ask dsh anything");
    tui.type_text("why does the parser fail\r");
    tui.wait_for("the parser skips the last token");
    tui.wait_until("the turn ended", |s| {
        s.contains("Ask dsh anything") && !s.contains("Working (")
    });
    let screen = tui.contents();
    assert!(screen.contains("Ctrl-T shows it"), "{screen}");
    assert!(!screen.contains("Then the lexer's spans."), "{screen}");

    tui.type_text("\x14");
    tui.wait_for("reasoning in full");
    tui.wait_for("Then the lexer's spans.");
    let view = tui.contents();
    assert!(view.contains("First the failing test."), "{view}");
    assert!(view.contains("Last the fix."), "{view}");

    tui.type_text("\x14");
    tui.wait_until("the view closed", |s| {
        !s.contains("reasoning in full") && s.contains("Ask dsh anything")
    });
    std::thread::sleep(Duration::from_millis(300));
    tui.quit();
    let (history, screen) = tui.scrollback_and_screen();
    let joined = history
        .iter()
        .chain(&screen)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    // The view was live: none of it reached the scrollback, whose reasoning stays collapsed.
    assert!(!joined.contains("reasoning in full"), "{joined}");
    assert!(!joined.contains("Then the lexer's spans."), "{joined}");
    assert_eq!(
        joined.matches("the parser skips the last token").count(),
        1,
        "{joined}"
    );
    drop(provider);
}

/// `/help` lists the keys of the mode it runs in: PgUp/PgDn scroll the full screen's
/// conversation; inline, the terminal's scrollback holds it and they are not offered.
#[test]
fn help_offers_pgup_pgdn_only_on_the_full_screen() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (args, offered) in [(&[][..], false), (&["--alt-screen"][..], true)] {
        let mut tui = Tui::start_sized(
            "http://127.0.0.1:9",
            home.path(),
            cwd.path(),
            args,
            &[],
            (ROWS, 160),
        );
        tui.wait_for("Ask dsh anything");
        tui.type_text("/help\r");
        tui.wait_for("keys and commands");
        tui.wait_for("Ctrl-D quit");
        let screen = tui.contents();
        assert_eq!(
            screen.contains("PgUp/PgDn scroll"),
            offered,
            "{args:?}:\n{screen}"
        );
        if !offered {
            assert!(!screen.contains("PgUp"), "{screen}");
            assert!(
                screen.contains("the terminal scrolls the conversation"),
                "{screen}"
            );
        }
        tui.quit();
    }
}

/// The header and the status line show the effort the requests will use before the first one:
/// the model's default when none was asked (deepseek-v4-flash: `high`), else the one asked.
#[test]
fn header_and_status_line_show_the_effective_effort_before_the_first_turn() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (args, effort) in [(&[][..], "high"), (&["--effort", "max"][..], "max")] {
        let mut tui = Tui::start_sized(
            "http://127.0.0.1:9",
            home.path(),
            cwd.path(),
            args,
            &[],
            (ROWS, 100),
        );
        tui.wait_for("Ask dsh anything");
        // Both on one screen (an inline redraw may be caught half done: waited for, not read
        // once; the full run under load caught such a frame).
        let header = format!("deepseek-v4-flash · effort {effort}");
        let status = format!("deepseek-v4-flash {effort} · workspace-write");
        tui.wait_until(&format!("{args:?}: header and status line"), |screen| {
            screen.contains(&header) && screen.contains(&status)
        });
        tui.quit();
    }
}

/// `/fork` says what it forked from, the parent's id and its last closed turn, and which session
/// the UI continues in; the notice is shown in the copy, after the history it copied.
#[test]
fn fork_names_the_parent_session_and_turn() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([
            text_reply("the first answer"),
            text_reply("the second answer"),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut tui = Tui::start_sized(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &[],
        &[],
        (ROWS, 160),
    );
    tui.wait_for("Ask dsh anything");
    for (prompt, answer) in [("one", "the first answer"), ("two", "the second answer")] {
        tui.type_text(&format!("{prompt}\r"));
        tui.wait_for(answer);
        tui.wait_until("the turn ended", |s| {
            s.contains("Ask dsh anything") && !s.contains("Working (")
        });
    }
    let parent = dsh_session::load_file(&session_file(home.path()))
        .unwrap()
        .header
        .id;
    tui.type_text("/fork\r");
    tui.wait_for("forked session");
    tui.wait_for("this is the copy");
    tui.quit();
    let logs: Vec<_> = session_files(home.path())
        .iter()
        .map(|path| dsh_session::load_file(path).unwrap())
        .collect();
    assert_eq!(logs.len(), 2, "the parent and its copy");
    let copy = logs
        .iter()
        .find(|log| log.header.parent_session.as_deref() == Some(parent.as_str()))
        .expect("a fork of the parent");
    let (history, screen) = tui.scrollback_and_screen();
    let joined = history
        .iter()
        .chain(&screen)
        .map(|row| row.trim())
        .collect::<Vec<_>>()
        .join(" ");
    let said = format!(
        "forked session {parent} after turn 2 into {}; this is the copy",
        copy.header.id
    );
    assert!(joined.contains(&said), "`{said}` not in:\n{joined}");
    drop(provider);
}

/// `/export` writes the transcript into the session's folder, not into the working directory
/// (a repository, usually), and says where; a path given is taken from the working directory.
#[test]
fn export_writes_into_the_session_folder_and_says_where() {
    use std::os::unix::fs::PermissionsExt;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([text_reply("the exported answer")]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut tui = Tui::start_sized(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &[],
        &[],
        (ROWS, 200),
    );
    tui.wait_for("Ask dsh anything");
    tui.type_text("export me\r");
    tui.wait_for("the exported answer");
    tui.wait_until("the turn ended", |s| {
        s.contains("Ask dsh anything") && !s.contains("Working (")
    });
    tui.type_text("/export\r");
    tui.wait_for("transcript written to");
    let log = session_file(home.path());
    let id = dsh_session::load_file(&log).unwrap().header.id;
    let written = log.parent().unwrap().join(format!("dsh-{}.md", &id[..8]));
    let shown = format!(
        "transcript written to ~/{}",
        written.strip_prefix(home.path()).unwrap().display()
    );
    let screen = tui.contents();
    assert!(screen.contains(&shown), "`{shown}` not in:\n{screen}");
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.contains("the exported answer"), "{text}");
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let in_cwd: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().flatten().collect();
    assert!(in_cwd.is_empty(), "the working directory got {in_cwd:?}");

    // Asked for a path: there, from the working directory.
    tui.type_text("/export chat.md\r");
    let asked = cwd.path().join("chat.md");
    tui.wait_for(&format!("transcript written to {}", asked.display()));
    tui.quit();
    let text = std::fs::read_to_string(&asked).unwrap();
    assert!(text.contains("the exported answer"), "{text}");
    drop(provider);
}
