//! Notifications (issue 42, docs/tui.md, "Notifications"): the real `dsh` in a pseudo-terminal.
//! While the terminal reports it lost focus, a finished turn is announced with the sequence the
//! terminal takes (OSC 9 under WezTerm); focused, nothing is written; the user's
//! `[notify] command` runs each time with a JSON payload, without the provider key in its
//! environment; `tui.status_command`'s line replaces the status line's figures.

use std::time::{Duration, Instant};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

use crate::tui_harness::Tui;

const OSC9: &str = "\x1b]9;dsh: the turn is done\x07";

#[test]
fn an_unfocused_terminal_is_told_and_the_notify_command_runs() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let reply = |text: &str| {
        ScriptedReply::from(
            SseReply::new()
                .text(text)
                .finish("stop", Some(WireUsage::default())),
        )
    };
    let provider = runtime
        .block_on(FakeProvider::start([
            reply("first answer"),
            reply("second answer"),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let log = home.path().join("notify.log");
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[notify]\ncommand = [\"sh\", \"-c\", \"printf '%s %s\\\\n' \\\"${{DEEPSEEK_API_KEY:-no-key}}\\\" \\\"$1\\\" >> \\\"$0\\\"\", \"{}\"]\n",
            log.display()
        ),
    )
    .unwrap();
    let mut tui = Tui::start_env(
        &provider.base_url(),
        home.path(),
        cwd.path(),
        &[],
        &[("TERM_PROGRAM", "WezTerm")],
    );
    tui.wait_for("Ask dsh anything");
    // Focus lost (CSI O), then a turn: the terminal is told.
    tui.type_text("\x1b[O");
    tui.type_text("one\r");
    tui.wait_for("first answer");
    let told = |tui: &Tui| {
        String::from_utf8_lossy(&tui.raw.lock().unwrap())
            .matches(OSC9)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while told(&tui) == 0 {
        assert!(
            Instant::now() < deadline,
            "no OSC 9 after an unfocused turn"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Focus back (CSI I): the next turn writes nothing.
    tui.type_text("\x1b[I");
    tui.type_text("two\r");
    tui.wait_for("second answer");
    let lines = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.lines().count() >= n || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let text = lines(2);
    tui.quit();
    assert_eq!(told(&tui), 1, "a focused terminal was notified");
    let entries: Vec<&str> = text.lines().collect();
    assert_eq!(entries.len(), 2, "{text}");
    for (entry, focused) in entries.iter().zip([false, true]) {
        let (key, payload) = entry.split_once(' ').unwrap();
        assert_eq!(key, "no-key", "the notify command got the provider key");
        let payload: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(payload["type"], "turn-ended", "{payload}");
        assert_eq!(payload["message"], "the turn is done");
        assert_eq!(payload["focused"], focused);
        assert!(payload["sessionId"]
            .as_str()
            .is_some_and(|id| !id.is_empty()));
    }
}

/// `tui.status_command` gets the session's state as JSON on its input and its first line
/// replaces the status line's figures (issue 42 point 9); without the provider key in its
/// environment.
#[test]
fn the_status_command_replaces_the_figures_of_the_status_line() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime
        .block_on(FakeProvider::start([ScriptedReply::from(
            SseReply::new()
                .text("fine")
                .finish("stop", Some(WireUsage::default())),
        )]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let state = home.path().join("state.json");
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[tui]\nstatus_command = [\"sh\", \"-c\", \"cat > \\\"$0\\\"; echo \\\"CUSTOM ${{DEEPSEEK_API_KEY:-no-key}}\\\"\", \"{}\"]\n",
            state.display()
        ),
    )
    .unwrap();
    let mut tui = Tui::start(&provider.base_url(), home.path(), cwd.path());
    tui.wait_for("Ask dsh anything");
    tui.wait_for("CUSTOM no-key");
    let screen = tui.contents();
    assert!(!screen.contains("cache -"), "the figures stayed: {screen}");
    tui.type_text("hello\r");
    tui.wait_for("fine");
    tui.quit();
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(state["model"], "deepseek-v4-flash", "{state}");
    assert_eq!(state["permission"], "workspace-write", "{state}");
    assert!(state["contextWindow"].is_u64(), "{state}");
}
