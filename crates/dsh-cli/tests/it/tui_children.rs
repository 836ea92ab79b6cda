//! Sub-agents in the TUI (docs/tui.md, "Children" and "Links"), end to end: the real `dsh` in a
//! pseudo-terminal against the fake provider.
//!
//! A parent reply calls `subagent`; the child's request (routed by its prompt) streams text
//! and then stalls, so the child stays running: the children panel shows it with its label,
//! state and activity, the parent's `subagent` card shows the child's activity, `/agents`
//! lists it and Enter follows it (its streamed text on screen), Esc returns to the parent.
//!
//! In the full-screen mode (`--alt-screen`) a Markdown link in a reply reaches the terminal
//! as an OSC 8 hyperlink around its label, and not at all with `NO_COLOR` or `TERM=dumb`.

use dsh_test_support::{FakeProvider, RequestMatch, ScriptedReply, SseReply, StreamEnd, WireUsage};

use crate::tui_harness::Tui;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_children_panel_shows_a_running_child_and_agents_follows_it() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let args = serde_json::json!({
        "description": "scan the repo",
        "prompt": "CHILD SCAN: look around",
    });
    provider.route(
        RequestMatch::FirstUser("delegate please".into()),
        [ScriptedReply::from(
            SseReply::new()
                .tool_call(0, "p1", "subagent", &args.to_string())
                .finish("tool_calls", Some(WireUsage::default())),
        )],
    );
    provider.route(
        RequestMatch::FirstUser("CHILD SCAN".into()),
        [ScriptedReply::from(
            SseReply::new()
                .text("the child streams its findings")
                .end(StreamEnd::Stall),
        )],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("delegate please\r");
        // The panel: name, label, state, activity.
        tui.wait_until("the panel shows the running child", |s| {
            s.lines().any(|l| {
                l.contains("agent-1")
                    && l.contains("scan the repo")
                    && l.contains("running")
                    && l.contains("writing")
            })
        });
        assert!(tui.contents().contains("/agents to follow one"));
        // The parent's card shows the child's activity.
        tui.wait_until("the subagent card shows the child's progress", |s| {
            s.lines()
                .any(|l| l.contains("subagent scan the repo") && l.contains("agent-1 · writing"))
        });
        // `/agents` lists it; Enter follows it.
        tui.type_text("/agents\r");
        tui.wait_for("Enter follows");
        tui.type_text("\r");
        tui.wait_for("following agent-1");
        tui.wait_for("the child streams its findings");
        // Esc returns to the parent.
        tui.type_text("\x1b");
        tui.wait_until("back to the parent", |s| {
            !s.contains("following agent-1") && s.contains("subagent scan the repo")
        });
        tui.quit();
    })
    .await
    .unwrap();
}

/// The raw output of `dsh --alt-screen` answering with a link, with `env` set.
async fn link_run(env: &'static [(&'static str, &'static str)]) -> String {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .text("See [the guide](https://example.com/guide) for more.")
            .finish("stop", Some(WireUsage::default())),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start_env(&url, &h, &c, &["--alt-screen"], env);
        tui.wait_for("Ask dsh anything");
        tui.type_text("where are the docs\r");
        tui.wait_for("(https://example.com/guide) for more.");
        tui.wait_for("Ask dsh anything");
        // The frame is intact around the link: the composer still takes text.
        tui.type_text("typed after");
        tui.wait_for("typed after");
        let screen = tui.contents();
        tui.quit();
        let raw = String::from_utf8_lossy(&tui.raw.lock().unwrap()).into_owned();
        assert!(
            screen.contains("See the guide (https://example.com/guide) for more."),
            "{screen}"
        );
        raw
    })
    .await
    .unwrap()
}

/// The text between each OSC 8 open to `url` and its close, escape sequences removed.
fn hyperlinked_texts(raw: &str, url: &str) -> Vec<String> {
    let open = format!("\x1b]8;;{url}\x1b\\");
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = after
            .find("\x1b]8;;\x1b\\")
            .expect("an open hyperlink is closed");
        let mut text = String::new();
        let mut chars = after[..end].chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                // CSI: parameters up to the final byte.
                assert_eq!(chars.next(), Some('['), "only CSI inside a link");
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            } else {
                text.push(c);
            }
        }
        out.push(text);
        rest = &after[end..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_screen_links_are_hyperlinks_where_supported() {
    let raw = link_run(&[]).await;
    let texts = hyperlinked_texts(&raw, "https://example.com/guide");
    assert!(!texts.is_empty(), "no OSC 8 hyperlink on the wire");
    assert!(texts.iter().all(|t| t == "the guide"), "{texts:?}");
    // The alternate screen was used.
    assert!(raw.contains("\x1b[?1049h"));
    for env in [&[("NO_COLOR", "1")][..], &[("TERM", "dumb")][..]] {
        let raw = link_run(env).await;
        assert!(!raw.contains("\x1b]8;"), "a hyperlink with {env:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_opens_a_finished_childs_log_with_agents() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let args = serde_json::json!({
        "description": "count the files",
        "prompt": "CHILD COUNT: count them",
    });
    provider.route(
        RequestMatch::FirstUser("delegate please".into()),
        [
            ScriptedReply::from(
                SseReply::new()
                    .tool_call(0, "p1", "subagent", &args.to_string())
                    .finish("tool_calls", Some(WireUsage::default())),
            ),
            ScriptedReply::from(
                SseReply::new()
                    .text("the parent is done")
                    .finish("stop", Some(WireUsage::default())),
            ),
        ],
    );
    provider.route(
        RequestMatch::FirstUser("CHILD COUNT".into()),
        [ScriptedReply::from(
            SseReply::new()
                .text("child report: 42 files")
                .finish("stop", Some(WireUsage::default())),
        )],
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let url = provider.base_url();
    let (h, c) = (home.path().to_path_buf(), cwd.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut tui = Tui::start(&url, &h, &c);
        tui.wait_for("Ask dsh anything");
        tui.type_text("delegate please\r");
        tui.wait_for("the parent is done");
        // No child runs any more: the panel is gone.
        tui.wait_until("the panel closed", |s| !s.contains("/agents to follow one"));
        tui.quit();

        let mut resumed = Tui::start_with(&url, &h, &c, &["resume", "--last"]);
        resumed.wait_for("the parent is done");
        resumed.type_text("/agents\r");
        resumed.wait_until("the stored child is listed", |s| {
            s.lines().any(|l| {
                l.contains("agent-1") && l.contains("count the files") && l.contains("done")
            })
        });
        resumed.type_text("\r");
        resumed.wait_for("following agent-1");
        resumed.wait_for("child report: 42 files");
        resumed.type_text("\x1b");
        resumed.wait_until("back to the parent", |s| !s.contains("following agent-1"));
        resumed.quit();
    })
    .await
    .unwrap();
}
