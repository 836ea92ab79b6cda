//! The inline mode end to end (docs/tui.md, "Modes"): the real `dsh` in a pseudo-terminal
//! against the fake provider, its output fed to a terminal emulator with scrollback that also
//! answers the cursor-position query as a terminal does. Finished cells go into the terminal's
//! scrollback above the live area and stay there after quitting, exactly once each, with no
//! copy of the live area among them; Esc interrupts a running turn and the "cancelling" hint
//! goes once it has ended; a resize redraws one clean live area. The emulator keeps a screen
//! erased from its top-left corner in the scrollback as tmux does, so a live area erased that
//! way shows (issue 41): a reply taller than the screen lands there once, overlays leave no
//! rows behind.

use std::time::Duration;

use dsh_session::{load_file, Event, TurnEndReason};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, StreamEnd, WireUsage};

use crate::common::session_file;
use crate::tui_harness::Tui;

/// Lines of the long reply: more than the screen, less than two.
const FINDINGS: usize = 32;

fn long_reply() -> String {
    let mut text = String::from("## Findings\n\nSee [the guide](https://example.com/guide).\n\n");
    // Escape sequences in model text must not reach the terminal: a hyperlink of its own, a
    // window title, a screen clear.
    text.push_str("trap \u{1b}]8;;https://evil.example/\u{7}click\u{1b}]8;;\u{7} \u{1b}]0;pwned\u{7}\u{1b}[2Jend\n\n");
    for i in 1..=FINDINGS {
        text.push_str(&format!("- finding number {i}\n"));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_mode_leaves_the_conversation_in_the_scrollback() {
    let provider = FakeProvider::start([
        ScriptedReply::from(
            SseReply::new()
                .text(&long_reply())
                .finish("stop", Some(WireUsage::default())),
        ),
        ScriptedReply::from(
            SseReply::new()
                .text("the second answer")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let (history, screen, raw) = tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.wait_for(">_ dsh");
        tui.type_text("say hello\r");
        tui.wait_for(&format!("finding number {FINDINGS}"));
        tui.type_text("and more\r");
        tui.wait_for("the second answer");
        tui.wait_for("Ask dsh anything");
        tui.quit();
        let (history, screen) = tui.scrollback_and_screen();
        let raw = String::from_utf8_lossy(&tui.raw.lock().unwrap()).into_owned();
        (history, screen, raw)
    })
    .await
    .unwrap();
    let all: Vec<&String> = history.iter().chain(&screen).collect();
    let joined = all
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    // The header, the first prompt and the start of the long reply scrolled into the
    // terminal's own scrollback.
    let scrolled = history.join("\n");
    for expected in [
        ">_ dsh",
        "model:",
        "› say hello",
        "Findings",
        "finding number 1",
    ] {
        assert!(
            scrolled.contains(expected),
            "`{expected}` not in scrollback:\n{scrolled}"
        );
    }
    // After quitting everything is still there, once, in order.
    for i in 1..=FINDINGS {
        let line = format!("• finding number {i}");
        let count = all.iter().filter(|l| l.trim_end() == line).count();
        assert_eq!(count, 1, "`{line}` {count} times:\n{joined}");
    }
    let at = |what: &str| all.iter().position(|l| l.contains(what)).unwrap();
    assert!(at("› say hello") < at("finding number 1"));
    assert!(at(&format!("finding number {FINDINGS}")) < at("› and more"));
    assert!(at("› and more") < at("the second answer"));
    // Headings lose their `#`; the link is a terminal hyperlink.
    assert!(!joined.contains("## Findings"), "{joined}");
    assert!(
        raw.contains("\x1b]8;;https://example.com/guide\x1b\\the guide\x1b]8;;\x1b\\"),
        "no OSC 8 hyperlink"
    );
    // The model's escape sequences arrived as text at most, never as sequences.
    assert!(
        !raw.contains("\x1b]8;;https://evil"),
        "a hyperlink from the model text"
    );
    assert!(
        !raw.contains("\x1b]0;pwned"),
        "a window title from the model text"
    );
    assert!(joined.contains("trap"), "{joined}");
    // No copy of the live area in the history, and it was cleared on the way out.
    assert!(!joined.contains("Ask dsh anything"), "{joined}");
    assert!(!joined.contains("· ctx "), "{joined}");
    // The normal screen all along.
    assert!(
        !raw.contains("\x1b[?1049h"),
        "the alternate screen was entered"
    );
    assert!(
        raw.contains("dsh resume "),
        "the resume hint is printed after the UI"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esc_interrupts_the_turn_and_a_resize_redraws_one_live_area() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new().text("partial answer").end(StreamEnd::Stall),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    let waiter = tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("stall please\r");
        tui.wait_for("partial answer");
        tui.wait_for("Esc to interrupt");
        tui.wait_for("Working (");
        tui.type_text("\x1b");
        tui.wait_for("turn cancelled");
        // The hint of the cancel goes once the turn has ended.
        tui.wait_until("the cancelling hint went away", |s| {
            !s.contains("cancelling the turn") && !s.contains("Esc to interrupt")
        });
        let one_live_area = |s: &str| {
            s.matches("Ask dsh anything").count() == 1 && s.matches("· ctx ").count() == 1
        };
        tui.wait_until("one live area", one_live_area);
        for (rows, cols) in [(20, 70), (40, 120), (24, 90)] {
            tui.resize(rows, cols);
            std::thread::sleep(Duration::from_millis(300));
            tui.wait_until(&format!("one live area at {cols}x{rows}"), one_live_area);
            let screen = tui.contents();
            let last = screen.lines().rfind(|l| !l.trim().is_empty());
            let last = last.unwrap_or_default().to_string();
            assert!(
                last.contains("· ctx "),
                "the status line ends the screen: {screen}"
            );
        }
        tui.quit();
    });
    waiter.await.unwrap();
    let log = load_file(&session_file(home.path())).unwrap();
    let ends: Vec<TurnEndReason> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnEnd(end) => Some(end.reason.clone()),
            _ => None,
        })
        .collect();
    assert!(
        matches!(ends.as_slice(), [TurnEndReason::Aborted { .. }]),
        "{ends:?}"
    );
}

/// Lines of the tall reply of issue 41: more than the pty's rows.
const TALL: usize = 70;
/// The pty's rows for the tall reply.
const TALL_ROWS: u16 = 40;

/// A reply of `TALL` list items streamed one a chunk, slowly enough to be drawn many times.
fn tall_reply() -> ScriptedReply {
    let mut reply = SseReply::new().chunk_delay(Duration::from_millis(15));
    for i in 1..=TALL {
        reply = reply.text(&format!("- tall line {i:02}\n"));
    }
    ScriptedReply::from(reply.finish("stop", Some(WireUsage::default())))
}

/// Every line of the tall reply exactly once and in order in the scrollback and on the
/// screen, and nothing of a live area (spinner, composer, status line) in the scrollback.
fn assert_written_once(when: &str, history: &[String], screen: &[String]) {
    let all: Vec<&String> = history.iter().chain(screen).collect();
    let joined = all
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut last = None;
    for i in 1..=TALL {
        let line = format!("• tall line {i:02}");
        let rows: Vec<usize> = (0..all.len()).filter(|&r| all[r] == &line).collect();
        assert_eq!(
            rows.len(),
            1,
            "{when}: `{line}` {} times:\n{joined}",
            rows.len()
        );
        assert!(
            last < Some(rows[0]),
            "{when}: `{line}` out of order:\n{joined}"
        );
        last = Some(rows[0]);
    }
    let scrolled = history.join("\n");
    for live in [
        "Working (",
        "Esc to interrupt",
        "Ask dsh anything",
        "· ctx ",
    ] {
        assert!(
            !scrolled.contains(live),
            "{when}: `{live}` of a live area in the scrollback:\n{joined}"
        );
    }
}

/// Issue 41: a streamed reply taller than the screen, with or without resizes while it
/// streams (`(line, rows, cols)`: once that line shows), lands in the scrollback once. dsh is
/// told of each resize 100 ms after the emulator took it, so frames drawn for the old size
/// reach the new screen (rows wider than it must not wrap and scroll it: autowrap is off).
fn tall_reply_lands_once(resizes: &[(usize, u16, u16)]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([tall_reply()]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut tui = Tui::start_sized(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &[],
        &[],
        (TALL_ROWS, 100),
    );
    tui.wait_for("Ask dsh anything");
    tui.type_text("a tall reply please\r");
    for &(line, rows, cols) in resizes {
        tui.wait_for(&format!("tall line {line:02}"));
        tui.resize_late(rows, cols, Duration::from_millis(100));
    }
    tui.wait_for(&format!("tall line {TALL}"));
    tui.wait_until("the turn ended", |s| {
        s.contains("Ask dsh anything") && !s.contains("Working (")
    });
    std::thread::sleep(Duration::from_millis(300));
    let (history, screen) = tui.scrollback_and_screen();
    assert_written_once("after the reply", &history, &screen);
    tui.quit();
    let (history, screen) = tui.scrollback_and_screen();
    assert_written_once("after quitting", &history, &screen);
    drop(provider);
}

#[test]
fn a_reply_taller_than_the_screen_lands_in_the_scrollback_once() {
    tall_reply_lands_once(&[]);
}

#[test]
fn a_tall_reply_resized_while_it_streams_lands_in_the_scrollback_once() {
    tall_reply_lands_once(&[(20, 37, 96), (30, 34, 92), (40, 38, 90), (50, 32, 90)]);
}

/// Rows of a box drawn by the live area: the `/diff` view's borders and its empty rows.
fn box_rows(rows: &[String]) -> Vec<String> {
    rows.iter()
        .filter(|r| {
            let r = r.trim();
            let inside = r.trim_start_matches('│').trim_end_matches('│');
            (r.starts_with('│') && r.ends_with('│') && inside.trim().is_empty())
                || r.starts_with('┌')
                || r.starts_with('└')
        })
        .cloned()
        .collect()
}

/// Issue 41: closing `/diff` or `/help` leaves nothing of them in the scrollback or on the
/// screen but what `/help` writes as history, once.
#[test]
fn overlays_leave_no_rows_behind_after_esc() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([ScriptedReply::from(
            SseReply::new()
                .text("the first answer")
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
        (TALL_ROWS, 100),
    );
    tui.wait_for("Ask dsh anything");
    tui.type_text("hello\r");
    tui.wait_for("the first answer");
    tui.wait_until("the turn ended", |s| {
        s.contains("Ask dsh anything") && !s.contains("Working (")
    });
    tui.type_text("/diff\r");
    tui.wait_for("/diff · lines");
    tui.type_text("\x1b");
    tui.wait_until("the /diff view closed", |s| {
        !s.contains("/diff · lines") && s.contains("Ask dsh anything")
    });
    std::thread::sleep(Duration::from_millis(300));
    let (history, screen) = tui.scrollback_and_screen();
    let all: Vec<String> = history.iter().chain(&screen).cloned().collect();
    let joined = all.join("\n");
    assert_eq!(
        box_rows(&all),
        Vec::<String>::new(),
        "after /diff:\n{joined}"
    );
    assert!(!joined.contains("/diff · lines"), "after /diff:\n{joined}");
    assert_eq!(
        all.iter()
            .filter(|r| r.contains("the first answer"))
            .count(),
        1,
        "after /diff:\n{joined}"
    );

    tui.type_text("/help\r");
    tui.wait_for("keys and commands");
    tui.type_text("\x1b");
    std::thread::sleep(Duration::from_millis(300));
    tui.quit();
    let (history, screen) = tui.scrollback_and_screen();
    let all: Vec<String> = history.iter().chain(&screen).cloned().collect();
    let joined = all.join("\n");
    assert_eq!(
        box_rows(&all),
        Vec::<String>::new(),
        "after /help:\n{joined}"
    );
    for once in [
        "the first answer",
        "/help        keys and commands",
        "Commands:",
    ] {
        let count = all.iter().filter(|r| r.contains(once)).count();
        assert_eq!(count, 1, "`{once}` {count} times after /help:\n{joined}");
    }
    for live in ["Ask dsh anything", "· ctx "] {
        assert!(!joined.contains(live), "`{live}` left behind:\n{joined}");
    }
    drop(provider);
}

/// Issue 41: the boxes that replace the composer (an approval, the model's question) and the
/// menus on rows of their own (`/permission`, `/resume`) leave nothing behind once closed:
/// no row of theirs in the scrollback or on the screen, and the history around them once.
#[test]
fn boxes_and_menus_leave_no_rows_behind() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let question = serde_json::json!({"questions": [{
        "id": "db",
        "question": "Which database?",
        "options": [{"label": "sqlite"}, {"label": "postgres", "description": "the big one"}],
    }]});
    let bash = serde_json::json!({
        "command": "printf approved-output",
        "description": "print",
        "sandbox_permissions": "danger-full-access",
        "justification": "the test needs it",
    });
    let text = |text: &str| {
        ScriptedReply::from(
            SseReply::new()
                .text(text)
                .finish("stop", Some(WireUsage::default())),
        )
    };
    let call = |id: &str, tool: &str, args: &serde_json::Value| {
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, id, tool, &args.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        )
    };
    let provider = runtime
        .block_on(FakeProvider::start([
            call("call_bash", "bash", &bash),
            text("the approved answer"),
            call("call_ask", "ask_user_question", &question),
            text("the postgres answer"),
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
        (TALL_ROWS, 100),
    );
    let idle = |tui: &Tui, what: &str| {
        tui.wait_until(what, |s| {
            s.contains("Ask dsh anything") && !s.contains("Working (")
        });
        std::thread::sleep(Duration::from_millis(300));
    };
    // Rows only the closed box or menu has.
    let gone = |tui: &Tui, when: &str, marks: &[&str]| {
        let (history, screen) = tui.scrollback_and_screen();
        let all: Vec<String> = history.iter().chain(&screen).cloned().collect();
        let joined = all.join("\n");
        assert_eq!(box_rows(&all), Vec::<String>::new(), "{when}:\n{joined}");
        for mark in marks {
            assert!(!joined.contains(mark), "{when}: `{mark}` left:\n{joined}");
        }
        for live in ["Ask dsh anything", "· ctx "] {
            assert!(
                !history.join("\n").contains(live),
                "{when}: `{live}` in the scrollback:\n{joined}"
            );
        }
    };
    tui.wait_for("Ask dsh anything");
    tui.type_text("print it\r");
    tui.wait_for("approval needed");
    tui.type_text("y");
    tui.wait_for("the approved answer");
    idle(&tui, "the approved turn ended");
    gone(
        &tui,
        "after the approval",
        &["approval needed", "[y] allow", "[n] "],
    );

    tui.type_text("which db?\r");
    tui.wait_for("question 1/1");
    tui.type_text("2\r");
    tui.wait_for("the postgres answer");
    idle(&tui, "the question's turn ended");
    gone(&tui, "after the question", &["question 1/1", "Other"]);

    tui.type_text("/permission\r");
    tui.wait_for("permission preset · Enter switches");
    tui.type_text("\x1b");
    idle(&tui, "the /permission menu closed");
    gone(
        &tui,
        "after /permission",
        &["permission preset · Enter switches"],
    );

    tui.type_text("/resume\r");
    tui.wait_for("resume a session");
    tui.type_text("\x1b");
    idle(&tui, "the /resume picker closed");
    gone(&tui, "after /resume", &["resume a session (Enter opens"]);

    tui.quit();
    gone(&tui, "after quitting", &["approval needed", "question 1/1"]);
    let (history, screen) = tui.scrollback_and_screen();
    let all: Vec<String> = history.iter().chain(&screen).cloned().collect();
    let joined = all.join("\n");
    for once in [
        "the approved answer",
        "the postgres answer",
        "› print it",
        "› which db?",
    ] {
        let count = all.iter().filter(|r| r.contains(once)).count();
        assert_eq!(count, 1, "`{once}` {count} times:\n{joined}");
    }
    drop(provider);
}
