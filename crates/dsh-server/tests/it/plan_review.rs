//! The plan review card of `exit_plan_mode` in headless Chromium (docs/web.md, "Plan mode"):
//! the plan is rendered as Markdown with Approve, Approve with edits and Reject with feedback;
//! rejecting sends the feedback to the model and keeps plan mode, approving with edits makes
//! the edited plan the one logged and sent to the model, a plain approval leaves plan mode.
//! Fails when no `chromium` is on PATH (`.ci/run` installs it).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::sync::Arc;

use crate::support::cdp::{find_chromium, Browser};
use crate::support::{text, Web};
use dsh_agent::Extension;
use dsh_test_support::{ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

const FIRST_PLAN: &str = "# Add `--greeting` flag to CLI\n\n\
1. **Locate the CLI entry point** and its argument parser.\n\
2. **Register** an optional `--greeting` argument with a default of `\"Hello\"`.\n";
const SECOND_PLAN: &str = "# Add `--greeting` flag to CLI\n\n\
1. **Register** an optional `--greeting` argument.\n\
2. **Update the help text** so `--help` shows it.\n";
const EDITED_PLAN: &str =
    "# Add --greeting flag (edited)\n\n- only the parser change, no help text";
const THIRD_PLAN: &str = "# Tidy the README\n\n- fix the typo in the title";

fn plan_call(id: &str, plan: &str) -> ScriptedReply {
    SseReply::new()
        .tool_call(
            0,
            id,
            "exit_plan_mode",
            &json!({ "plan": plan }).to_string(),
        )
        .finish("tool_calls", Some(WireUsage::default()))
        .into()
}

fn send(browser: &mut Browser, text: &str) {
    browser.eval(&format!(
        "document.getElementById('input').value = {}; document.getElementById('send').click(); true",
        json!(text)
    ));
}

/// The text of the tool result with `call_id` in the last request the provider got.
fn tool_result_sent(web: &Web, call_id: &str) -> String {
    let requests = web.provider.requests();
    let body = &requests.last().unwrap().body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| panic!("no tool result of {call_id} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_review_card_rejects_approves_with_edits_and_approves_in_chromium() {
    let binary = find_chromium()
        .expect("the plan review browser test needs chromium on PATH (.ci/run installs it)");
    let replies = vec![
        plan_call("plan-1", FIRST_PLAN),
        plan_call("plan-2", SECOND_PLAN),
        text("DONE"),
        plan_call("plan-3", THIRD_PLAN),
        text("DONE again"),
    ];
    let mut web = Web::start_with(
        replies,
        vec![Arc::new(dsh_agent::PlanMode::new()) as Arc<dyn Extension>],
    )
    .await;
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    let shots = std::env::var_os("DSH_WEB_SCREENSHOTS").map(std::path::PathBuf::from);
    let session = tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.eval("document.getElementById('new-session').click(); document.querySelector('#new-form button[type=submit]').click(); true");
        browser.wait_for("location.hash.startsWith('#/s/')", "the new session", 10);
        let session = browser
            .eval("location.hash.slice('#/s/'.length)")
            .as_str()
            .unwrap()
            .to_string();
        send(&mut browser, "/plan add a --greeting flag");

        // The card: a region named like dsh's, the plan rendered as Markdown, three buttons.
        let card = "document.querySelector('.tool-card.asking section.plan-review[aria-label=\"Approve this plan and leave plan mode?\"]')";
        browser.wait_for(card, "the plan review card", 15);
        if let Some(dir) = &shots {
            browser.screenshot(&dir.join("web-plan-review.png"));
        }
        assert_eq!(
            browser.eval(&format!("{card}.querySelector('h1').textContent")),
            json!("Add --greeting flag to CLI")
        );
        assert_eq!(
            browser.eval(&format!("{card}.querySelectorAll('li strong').length")),
            json!(2)
        );
        assert_eq!(
            browser.eval(&format!(
                "[...{card}.querySelectorAll('.plan-buttons button')].filter((b) => !b.hidden).map((b) => b.textContent).join('|')"
            )),
            json!("Approve|Approve with edits|Reject with feedback")
        );

        // Reject with feedback: an empty feedback is not sent; the written one reaches the model.
        browser.eval(&format!(
            "{card}.querySelector('.plan-reject').click(); true"
        ));
        browser.eval(&format!(
            "{card}.querySelector('.plan-confirm').click(); true"
        ));
        assert_eq!(
            browser.eval(&format!("{card}.querySelector('.plan-status').textContent")),
            json!("Say what should change.")
        );
        browser.eval(&format!(
            "{card}.querySelector('.plan-feedback').value = 'also update the help text'; \
             {card}.querySelector('.plan-confirm').click(); true"
        ));
        browser.wait_for(
            "document.querySelector('.tool-card.asking section.plan-review')?.closest('.tool-card').querySelector('.tool-what').textContent === 'Add `--greeting` flag to CLI' && document.querySelectorAll('section.plan-review.decided').length === 1",
            "the second plan after the feedback",
            15,
        );
        assert_eq!(
            browser.eval("document.querySelector('section.plan-review.decided').closest('.tool-card').querySelector('.tool-status').textContent"),
            json!("kept planning")
        );

        // Approve with edits: the editor is prefilled with the plan; the edit is sent.
        browser.eval(&format!("{card}.querySelector('.plan-edit').click(); true"));
        assert_eq!(
            browser.eval(&format!("{card}.querySelector('.plan-editor').value")),
            json!(SECOND_PLAN.trim())
        );
        browser.eval(&format!(
            "{card}.querySelector('.plan-editor').value = {}; \
             {card}.querySelector('.plan-confirm').click(); true",
            json!(EDITED_PLAN)
        ));
        browser.wait_for(
            "document.getElementById('conversation').innerText.includes('DONE')",
            "the reply after the approval",
            15,
        );
        browser.wait_for(
            "document.querySelectorAll('section.plan-review.decided').length === 2",
            "the approved card",
            10,
        );
        assert_eq!(
            browser.eval("[...document.querySelectorAll('.tool-card .tool-status')].map((s) => s.textContent).join('|')"),
            json!("kept planning|approved with edits")
        );
        assert_eq!(
            browser.eval("document.querySelectorAll('section.plan-review.decided')[1].querySelector('h1').textContent"),
            json!("Add --greeting flag (edited)")
        );

        // A plain approval in a second round.
        send(&mut browser, "/plan tidy the readme");
        browser.wait_for(card, "the third plan's card", 15);
        browser.eval(&format!(
            "{card}.querySelector('.plan-approve').click(); true"
        ));
        browser.wait_for(
            "document.getElementById('conversation').innerText.includes('DONE again')",
            "the reply after the plain approval",
            15,
        );
        browser.wait_for(
            "document.querySelectorAll('section.plan-review.decided').length === 3",
            "the third decided card",
            10,
        );
        assert_eq!(
            browser.eval("[...document.querySelectorAll('.tool-card .tool-status')].map((s) => s.textContent).join('|')"),
            json!("kept planning|approved with edits|approved")
        );
        session
    });

    // What the model saw: the feedback, then the user's edited plan (not the presented one).
    let requests = web.provider.requests();
    assert_eq!(requests.len(), 5, "one request per scripted reply");
    let feedback = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "plan-1")
        .unwrap()["content"]
        .to_string();
    assert!(
        feedback.contains("keep planning") && feedback.contains("also update the help text"),
        "{feedback}"
    );
    let edited = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "plan-2")
        .unwrap()["content"]
        .to_string();
    assert!(
        edited.contains("(edited)") && edited.contains("only the parser change"),
        "{edited}"
    );
    assert!(!edited.contains("Update the help text"), "{edited}");
    assert!(tool_result_sent(&web, "plan-3").contains("Plan approved"));

    // What was logged: the edited plan as the approved one, and plan mode off at the end with
    // the preset back to the one the session had.
    let response = web
        .get(&format!("/api/sessions/{session}/export?format=jsonl"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let logged = response.text().await.unwrap();
    assert!(logged.contains("approved-with-edits"), "{logged}");
    assert!(logged.contains("only the parser change"), "{logged}");
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{session}"))).await;
    assert_eq!(detail["permission"], "danger-full-access", "{detail}");
    web.stop().await;
}
