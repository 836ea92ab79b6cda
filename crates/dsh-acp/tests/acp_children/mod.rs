//! Subagents over ACP (docs/acp.md, "Subagents"): a child's live progress as
//! `tool_call_update`s on the parent's `subagent` card, in order and before the result that
//! completes it; throttled for a chatty child with its last state delivered; a background
//! child on a card of its own. The sessions have a real `dsh_agent::Subagents` (see
//! `TestFactory::parts`); parent and child talk to one fake provider, each served its own
//! replies by request content.

use super::*;
use dsh_test_support::RequestMatch;

fn call(id: &str, name: &str, args: Value) -> ScriptedReply {
    SseReply::new()
        .tool_call(0, id, name, &args.to_string())
        .finish("tool_calls", None)
        .into()
}

fn say(text: &str) -> ScriptedReply {
    SseReply::new().text(text).finish("stop", None).into()
}

/// The parent's routes: its first reply starts a child with `args`, its second says "parent
/// done". Requests are told apart by their first user message.
fn parent_delegates(provider: &FakeProvider, marker: &str, args: Value) {
    provider.route(
        RequestMatch::FirstUser(marker.to_string()),
        [call("p1", "subagent", args), say("parent done")],
    );
}

struct Setup {
    provider: FakeProvider,
    _home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    client: Client,
    session: String,
}

async fn setup(jobs: bool) -> Setup {
    let provider = FakeProvider::start(Vec::new()).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let factory = TestFactory {
        jobs,
        ..TestFactory::new(
            provider.base_url(),
            home.path(),
            PermissionPreset::DangerFullAccess,
        )
    };
    let mut client = connect(factory);
    let session = new_session(&mut client, cwd.path()).await;
    Setup {
        provider,
        _home: home,
        cwd,
        client,
        session,
    }
}

/// Sends `text` as a prompt and reads until its answer.
async fn run_prompt(s: &mut Setup, text: &str) -> Value {
    let id = s
        .client
        .request("session/prompt", prompt(&s.session, text))
        .await;
    s.client.response(id, dsh_acp::ALLOW_ONCE).await
}

/// The updates about tool card `card`, in the order the client got them.
fn card<'a>(client: &'a Client, card: &str) -> Vec<&'a Value> {
    client
        .updates()
        .into_iter()
        .filter(|u| u["toolCallId"] == card)
        .collect()
}

/// Progress updates: those that carry a child (`_meta.dsh.child`).
fn is_progress(update: &Value) -> bool {
    update["_meta"]["dsh"]["child"].is_object()
}

fn text(update: &Value) -> String {
    update["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["content"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_progress_is_shown_on_its_subagent_card_before_the_result() {
    let mut s = setup(false).await;
    parent_delegates(
        &s.provider,
        "delegate the count",
        json!({"description": "count files", "prompt": "CHILD: count the files"}),
    );
    s.provider.route(
        RequestMatch::FirstUser("CHILD: count".into()),
        [
            call(
                "c1",
                "bash",
                json!({"command": "sleep 0.4; echo counted", "description": "count them"}),
            ),
            say("there are 3 files"),
        ],
    );
    let answer = run_prompt(&mut s, "delegate the count").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    crate::acp_runtime::assert_seen_valid(&s.client);

    let updates = card(&s.client, "p1");
    let kinds: Vec<String> = updates
        .iter()
        .map(|u| {
            let status = u["status"].as_str().unwrap_or("-");
            let kind = if is_progress(u) { "progress" } else { status };
            kind.to_string()
        })
        .collect();
    // The card opens, runs, shows the child's progress, and only then completes.
    assert_eq!(updates[0]["sessionUpdate"], "tool_call", "{kinds:?}");
    assert_eq!(kinds[1], "in_progress", "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("completed"),
        "{kinds:?}"
    );
    let progress: Vec<&&Value> = updates.iter().filter(|u| is_progress(u)).collect();
    assert!(progress.len() >= 2, "{kinds:?}");
    let first_progress = kinds.iter().position(|k| k == "progress").unwrap();
    let last_progress = kinds.iter().rposition(|k| k == "progress").unwrap();
    assert!(
        first_progress > 1 && last_progress == kinds.len() - 2,
        "{kinds:?}"
    );
    for update in &progress {
        let child = &update["_meta"]["dsh"]["child"];
        assert_eq!(child["name"], "agent-1");
        assert_eq!(child["label"], "count files");
        assert_eq!(child["depth"], 1);
        assert!(
            update.get("status").is_none(),
            "the parent's result completes the card"
        );
    }
    // While its bash call ran, the child was shown running it; its last state is its end.
    let texts: Vec<String> = progress.iter().map(|u| text(u)).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("agent-1: running `bash: count them`")),
        "{texts:#?}"
    );
    let last = texts.last().unwrap();
    assert!(last.starts_with("agent-1: finished"), "{last}");
    assert!(last.contains("- bash: count them (done)"), "{last}");
    assert!(last.ends_with("there are 3 files"), "{last}");
    // The order of what the child did is kept: nothing shown goes back in time.
    let step = |t: &str| {
        if t.contains("finished") {
            3
        } else if t.contains("(done)") {
            2
        } else if t.contains("bash") {
            1
        } else {
            0
        }
    };
    let steps: Vec<i32> = texts.iter().map(|t| step(t)).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{texts:#?}");
    assert_eq!(text(updates.last().unwrap()), "there are 3 files");
    // The child's card is the parent's: no other card was opened for it.
    let cards: Vec<&Value> = updates_of(&s.client, "tool_call");
    assert_eq!(cards.len(), 1, "{cards:?}");
    let _ = s.cwd.path();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatty_child_is_throttled_and_its_last_state_is_delivered() {
    let mut s = setup(false).await;
    parent_delegates(
        &s.provider,
        "delegate the chatter",
        json!({"description": "chatter", "prompt": "CHILD: chatter away"}),
    );
    // 300 deltas over about 1.5 s.
    let mut chatter = SseReply::new().chunk_delay(Duration::from_millis(5));
    for i in 0..300 {
        chatter = chatter.text(&format!("w{i} "));
    }
    s.provider.route(
        RequestMatch::FirstUser("CHILD: chatter".into()),
        [chatter.finish("stop", None).into()],
    );
    let started = std::time::Instant::now();
    let answer = run_prompt(&mut s, "delegate the chatter").await;
    let elapsed = started.elapsed();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    crate::acp_runtime::assert_seen_valid(&s.client);

    let updates = card(&s.client, "p1");
    let progress: Vec<&&Value> = updates.iter().filter(|u| is_progress(u)).collect();
    eprintln!(
        "300 child deltas in {elapsed:?}: {} progress updates",
        progress.len()
    );
    // At most ten a second (one more for the start and one for the end), never one per delta.
    let bound = (elapsed.as_millis() / 100) as usize + 3;
    assert!(
        progress.len() <= bound && progress.len() >= 3,
        "{} progress updates in {elapsed:?}",
        progress.len()
    );
    let last = text(progress.last().unwrap());
    assert!(last.starts_with("agent-1: finished"), "{last}");
    assert!(last.ends_with("w298 w299"), "{last}");
    assert!(
        last.len() < 600,
        "the snapshot shows the text's end only: {last}"
    );
    assert_eq!(updates.last().unwrap()["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_child_is_shown_on_a_card_of_its_own_that_its_end_completes() {
    let mut s = setup(true).await;
    s.provider.route(
        RequestMatch::FirstUser("delegate in the background".into()),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "slow count", "prompt": "CHILD: count slowly",
                    "run_in_background": true}),
            ),
            call(
                "p2",
                "job_output",
                json!({"job_id": "subagent-1", "wait": true, "timeout_ms": 20000}),
            ),
            say("parent done"),
        ],
    );
    s.provider.route(
        RequestMatch::FirstUser("CHILD: count slowly".into()),
        [
            call(
                "c1",
                "bash",
                json!({"command": "sleep 0.3; echo counted", "description": "count"}),
            ),
            say("counted 3"),
        ],
    );
    let answer = run_prompt(&mut s, "delegate in the background").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    crate::acp_runtime::assert_seen_valid(&s.client);

    // The parent's call completed with the job id; the child's progress is not on it.
    let parent = card(&s.client, "p1");
    assert!(!parent.iter().any(|u| is_progress(u)), "{parent:?}");
    assert_eq!(parent.last().unwrap()["status"], "completed");
    let own = card(&s.client, "p1/agent-1");
    assert!(own.len() >= 2, "{own:?}");
    assert_eq!(own[0]["sessionUpdate"], "tool_call");
    assert_eq!(own[0]["title"], "agent-1 (background): slow count");
    let last = own.last().unwrap();
    assert_eq!(last["status"], "completed", "{own:?}");
    assert!(text(last).starts_with("agent-1: finished"), "{last}");
    assert!(text(last).ends_with("counted 3"), "{last}");
    // The card opened after the parent's call that started it.
    let all = s.client.updates();
    let started = all.iter().position(|u| u["toolCallId"] == "p1").unwrap();
    let opened = all
        .iter()
        .position(|u| u["toolCallId"] == "p1/agent-1")
        .unwrap();
    assert!(started < opened);
}

/// A child's turn cut at the output limit did not do its work: its card ends `failed`, as the
/// session protocol classifies the end (`EndState`) for every front end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_child_cut_at_the_output_limit_ends_its_card_failed() {
    let mut s = setup(true).await;
    s.provider.route(
        RequestMatch::FirstUser("delegate a long answer".into()),
        [
            call(
                "p1",
                "subagent",
                json!({"description": "long answer", "prompt": "CHILD: write at length",
                    "run_in_background": true}),
            ),
            call(
                "p2",
                "job_output",
                json!({"job_id": "subagent-1", "wait": true, "timeout_ms": 20000}),
            ),
            say("parent done"),
        ],
    );
    s.provider.route(
        RequestMatch::FirstUser("CHILD: write at length".into()),
        [SseReply::new()
            .text("the first half of")
            .finish("length", None)
            .into()],
    );
    let answer = run_prompt(&mut s, "delegate a long answer").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    crate::acp_runtime::assert_seen_valid(&s.client);
    let own = card(&s.client, "p1/agent-1");
    let last = own.last().unwrap();
    assert_eq!(last["status"], "failed", "{own:?}");
    assert!(
        text(last).starts_with("agent-1: stopped (max-tokens)"),
        "{last}"
    );
}
