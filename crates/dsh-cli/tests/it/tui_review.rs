//! `/review` in the TUI (docs/review.md, "In the TUI"; issue 43, point 2): the real `dsh` in a
//! pseudo-terminal, a real git repository and the scripted provider. The review runs in its own
//! read-only session even when the conversation may write anything, shows its progress, and
//! its findings are shown, logged in the conversation's session (shown again on resume) and
//! sent with the next message; Esc cancels a review; a folder that is no repository, a clean
//! one and bad arguments are said in words.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_session::{load_file, Event};
use dsh_test_support::{FakeProvider, SseReply, WireUsage};
use serde_json::json;

use crate::common::{git, scratch_dirs, session_files, text_reply, tool_reply};
use crate::tui_harness::Tui;

fn findings() -> String {
    json!({
        "summary": "The loop change reads one item too many.",
        "findings": [
            {"file": "src/lib.rs", "line": 2, "priority": "P1",
             "title": "Off-by-one in the loop bound",
             "body": "`0..=n` runs n + 1 times.", "suggested_fix": "Use `0..n`."},
            {"file": "src/new.rs", "line": 1, "priority": "P3",
             "title": "Unused helper", "body": "`g` is never called."}
        ]
    })
    .to_string()
}

/// A repository with one commit, then an uncommitted change and a new file.
fn repo() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (root, [home, dir]) = scratch_dirs(["home", "repo"]);
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "fn f(n: u32) {\n    for _ in 0..n {}\n}\n",
    )
    .unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-q", "-m", "first"]);
    (root, home, dir)
}

/// Runs `steps` against a TUI started in `cwd` off the async runtime, then quits it.
async fn with_tui(
    provider: &FakeProvider,
    home: &Path,
    cwd: &Path,
    args: &[&str],
    steps: impl FnOnce(&Tui) + Send + 'static,
) {
    let url = provider.base_url();
    let (h, c) = (home.to_path_buf(), cwd.to_path_buf());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut tui = Tui::start_with(&url, &h, &c, &args);
        // Commands need the session: it is open once its opening hint is gone.
        tui.wait_until("the session open", |screen| {
            screen.contains("Ask dsh anything") && !screen.contains("opening the session")
        });
        steps(&tui);
        tui.quit();
    })
    .await
    .unwrap();
}

fn messages_text(body: &serde_json::Value) -> String {
    body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_runs_read_only_and_its_findings_join_the_conversation() {
    let (_root, home, dir) = repo();
    std::fs::write(
        dir.join("src/lib.rs"),
        "fn f(n: u32) {\n    for _ in 0..=n {}\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/new.rs"), "pub fn g() {}\n").unwrap();
    let write = json!({"file_path": "pwned.txt", "content": "written by the review"});
    let provider = FakeProvider::start([
        // The review session tries to write, then answers (slowly: the progress shows).
        tool_reply("call_w", "write", &write),
        SseReply::new()
            .delay(Duration::from_millis(2500))
            .text(&findings())
            .finish("stop", Some(WireUsage::default()))
            .into(),
        // The conversation's next message.
        text_reply("fixing the unused helper"),
    ])
    .await
    .unwrap();
    // The conversation may write anything; the review still may not.
    with_tui(
        &provider,
        &home,
        &dir,
        &["--permission", "danger-full-access"],
        |tui| {
            tui.wait_for("danger-full-access");
            tui.type_text("/rev");
            tui.wait_for("read-only review of the changes");
            tui.type_text("\x7f\x7f\x7f\x7f/review --uncommitted the loop bounds\r");
            tui.wait_for("Reviewing uncommitted changes (read-only");
            tui.wait_for("1 tool call");
            // A message waits for the findings.
            tui.type_text("too early\r");
            tui.wait_for("a review is running: send once it is done");
            tui.type_text(&"\x7f".repeat("too early".len()));
            tui.wait_for("1. P1  src/lib.rs:2  Off-by-one in the loop bound");
            tui.wait_for("2. P3  src/new.rs:1  Unused helper");
            tui.wait_for("review cost $");
            tui.type_text("fix finding 2\r");
            tui.wait_for("fixing the unused helper");
        },
    )
    .await;

    assert!(
        !dir.join("pwned.txt").exists(),
        "the review session wrote a file"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "two review calls, one conversation call");
    let review = &requests[0].body;
    let system = review["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("# Code review") && system.contains("\"priority\""));
    let task = messages_text(review);
    assert!(
        task.contains("0..=n") && task.contains("src/new.rs"),
        "{task}"
    );
    assert!(task.contains("the loop bounds"), "{task}");
    assert!(task.contains("permissions: read-only"), "{task}");
    // The write was refused, and the model was told.
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .expect("the write's result");
    assert!(
        result.contains("not allowed") && result.contains("read-only"),
        "{result}"
    );

    // The conversation's request has the message and, after it, the numbered findings.
    let sent = messages_text(&requests[2].body);
    let asked = sent.find("fix finding 2").expect("the message");
    let note = sent
        .find("2. P3  src/new.rs:1  Unused helper")
        .expect("the findings");
    assert!(asked < note, "{sent}");
    assert!(sent.contains("The user ran /review"), "{sent}");

    // The conversation's log holds both: the event the transcript shows, and the note the
    // model read; the review's own session is another log.
    let logs: Vec<_> = session_files(&home)
        .iter()
        .map(|file| load_file(file).unwrap())
        .collect();
    assert_eq!(logs.len(), 2, "the conversation and the review");
    let conversation = logs
        .iter()
        .find(|log| {
            log.events.iter().any(|e| {
                matches!(&e.event, Event::Opaque { event_type, .. } if event_type == "review/findings")
            })
        })
        .expect("a review/findings event");
    let injected = conversation.events.iter().any(|e| {
        matches!(&e.event, Event::UserMessage(m)
            if matches!(m.source, dsh_llm::MessageSource::Plugin { .. })
                && m.text().contains("1. P1  src/lib.rs:2"))
    });
    assert!(injected, "the note the model read is not logged");

    // A resumed conversation shows the findings again, from its log.
    with_tui(&provider, &home, &dir, &["resume", "--last"], |tui| {
        tui.wait_for("› fix finding 2");
        tui.wait_for("2. P3  src/new.rs:1  Unused helper");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esc_cancels_a_review_and_the_conversation_goes_on() {
    let (_root, home, dir) = repo();
    std::fs::write(dir.join("src/lib.rs"), "fn f(n: u32) {}\n").unwrap();
    let provider = FakeProvider::start([
        SseReply::new()
            .delay(Duration::from_secs(60))
            .text(&findings())
            .finish("stop", Some(WireUsage::default()))
            .into(),
        text_reply("still here"),
    ])
    .await
    .unwrap();
    with_tui(&provider, &home, &dir, &[], |tui| {
        tui.type_text("/review --commit HEAD\r");
        tui.wait_for("Reviewing commit `HEAD`");
        // The request is under way before the cancel.
        std::thread::sleep(Duration::from_millis(800));
        tui.type_text("\x1b");
        tui.wait_for("review cancelled");
        tui.type_text("hello\r");
        tui.wait_for("still here");
    })
    .await;
    let sent = messages_text(&provider.requests().last().unwrap().body);
    assert!(!sent.contains("The user ran /review"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_repository_no_change_and_bad_arguments_are_said() {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let (_root, home, dir) = repo();
    with_tui(&provider, &home, &dir, &[], |tui| {
        tui.type_text("/review\r");
        tui.wait_for("nothing to review: no change in the uncommitted changes");
        tui.type_text("/review --base\r");
        tui.wait_for("--base needs a value");
        tui.type_text("/review --base nosuch\r");
        tui.wait_for("no branch or commit `nosuch`");
    })
    .await;
    let plain = tempfile::tempdir().unwrap();
    with_tui(&provider, &home, plain.path(), &[], |tui| {
        tui.type_text("/review\r");
        tui.wait_for("is not in a git work tree");
    })
    .await;
    assert!(provider.requests().is_empty());
}
