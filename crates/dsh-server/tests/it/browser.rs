//! Headless Chromium drives the UI against the fake provider: load the page with the token,
//! create a session, send a prompt and see the streamed Markdown, approve a tool call, answer a
//! model's question, see the `/` command menu, cancel a stalled turn, switch the permission
//! preset, reload and see the same transcript and preset. Skips (passing) when no `chromium` is on
//! PATH. With `DSH_WEB_SCREENSHOTS=<dir>` it writes screenshots of the main views there.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::support::cdp::{find_chromium, Browser};
use crate::support::{text, Web};
use dsh_agent::{Extension, ToolCallInfo, ToolVerdict};
use dsh_test_support::{ScriptedReply, SseReply, StreamEnd, WireUsage};
use serde_json::json;

struct AskForBash;

impl Extension for AskForBash {
    fn name(&self) -> &str {
        "ask-for-bash"
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        if call.name == "bash" {
            ToolVerdict::Ask {
                reason: "the test policy asks before every command".into(),
                escalation: None,
            }
        } else {
            ToolVerdict::Continue
        }
    }
}

fn replies() -> Vec<ScriptedReply> {
    // Realistic counts so the usage panel has something to show: the prompt cache warms up.
    let mut step = 0u64;
    let mut usage = move || {
        step += 1;
        let prompt = 9_000 + 1_500 * step;
        Some(WireUsage {
            prompt_tokens: prompt,
            completion_tokens: 120 + 40 * step,
            prompt_cache_hit_tokens: if step == 1 { 0 } else { prompt - 1_200 },
            reasoning_tokens: 30,
        })
    };
    let args = json!({"command": "echo hello-from-bash", "description": "say hello"}).to_string();
    let question = json!({"questions": [{"id": "lang", "header": "Language",
        "question": "Which language should the tool use?",
        "options": [{"label": "Rust", "description": "the workspace's language"}, "Go"]}]})
    .to_string();
    vec![
        SseReply::new()
            .reasoning("The user wants a greeting.")
            .text("## Greeting\n\nHello, **web**! Here is ")
            .chunk_delay(Duration::from_millis(20))
            .text("some `code`:\n\n```sh\necho hi\n```\n\n- one\n- two\n")
            .finish("stop", usage())
            .into(),
        SseReply::new()
            .tool_call(0, "call-1", "bash", &args)
            .finish("tool_calls", usage())
            .into(),
        SseReply::new()
            .text("The command ran.")
            .finish("stop", usage())
            .into(),
        SseReply::new()
            .tool_call(0, "call-ask", "ask_user_question", &question)
            .finish("tool_calls", usage())
            .into(),
        SseReply::new()
            .text("Noted, Rust it is.")
            .finish("stop", usage())
            .into(),
        SseReply::new()
            .text("Thinking about it")
            .end(StreamEnd::Stall)
            .into(),
    ]
}

const CONVERSATION: &str = "document.getElementById('conversation').innerText";

fn send(browser: &mut Browser, text: &str) {
    browser.eval(&format!(
        "document.getElementById('input').value = {}; document.getElementById('send').click(); true",
        json!(text)
    ));
}

fn count(browser: &mut Browser, selector: &str) -> u64 {
    browser
        .eval(&format!(
            "document.querySelectorAll({}).length",
            json!(selector)
        ))
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_approve_answer_cancel_and_reload_in_chromium() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let mut web =
        Web::start_with(replies(), vec![Arc::new(AskForBash) as Arc<dyn Extension>]).await;
    let profile = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("DSH_WEB_SCREENSHOTS").map(PathBuf::from);
    // A fresh launch code: the harness used the printed one to sign its own client in.
    let url = web.server.as_ref().unwrap().issue_url(None);
    let base = web.base.clone();
    let client = web.client.clone();
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        // The launch code in the address became a cookie and left the address bar.
        assert_eq!(browser.eval("location.href"), json!(format!("{base}/")));
        // The browser used the launch code: it is dead for anyone else.
        let again = tokio::runtime::Handle::current()
            .block_on(async { client.get(&url).send().await.unwrap().status().as_u16() });
        assert_eq!(
            again, 401,
            "a second use of the launch code was not refused"
        );

        // New session in the default workspace, then a prompt: streamed Markdown appears.
        browser.eval("document.getElementById('new-session').click(); document.querySelector('#new-form button[type=submit]').click(); true");
        browser.wait_for("location.hash.startsWith('#/s/')", "the new session", 10);
        send(&mut browser, "greet me");
        browser.wait_for(
            "document.querySelector('#conversation .md strong')?.textContent === 'web'",
            "the streamed Markdown",
            15,
        );
        browser.wait_for(
            "document.querySelector('.turn-end.completed')",
            "the first turn end",
            10,
        );
        assert_eq!(count(&mut browser, "#conversation pre.md-code"), 1);
        assert_eq!(count(&mut browser, "#conversation details.reasoning"), 1);
        assert_eq!(count(&mut browser, "#conversation .md li"), 2);
        browser.wait_for(
            "document.querySelector('.s-title')?.textContent === 'greet me'",
            "the sidebar title",
            10,
        );

        // A tool call that needs approval: the prompt shows, Allow once runs it.
        send(&mut browser, "run a command");
        browser.wait_for(
            "document.querySelector('.approval .primary')",
            "the approval prompt",
            15,
        );
        if let Some(dir) = &shots {
            browser.screenshot(&dir.join("web-approval.png"));
        }
        // While the approval waits, its card says so (the `toolCard` state
        // `awaitingApproval`), not "running".
        assert_eq!(
            browser.eval(
                "(() => { const c = document.querySelector('.tool-card[data-state=awaitingApproval]');
                   return c && [c.classList.contains('awaiting'), c.classList.contains('running'),
                     c.querySelector('.tool-status').textContent].join('|'); })()"
            ),
            json!("true|false|awaiting approval")
        );
        // One button per offered choice (rules are not persisted in this server, so no
        // "Always allow"), and the rule the session button would remember.
        assert_eq!(
            browser.eval(
                "[...document.querySelectorAll('.approval-buttons button')].map((b) => b.textContent).join('|')"
            ),
            json!("Allow once|Allow for this session|Reject")
        );
        assert!(browser
            .eval("document.querySelector('.approval-rule').textContent")
            .as_str()
            .unwrap()
            .contains("commands starting with `echo hello-from-bash`"));
        browser.eval("document.querySelector('.approval .primary').click(); true");
        browser.wait_for(
            "document.querySelector('.tool-card.ok .tool-status')?.textContent === 'exit 0'",
            "the bash card with its exit marker",
            15,
        );
        browser.wait_for(
            &format!("{CONVERSATION}.includes('The command ran.')"),
            "the answer after the tool",
            10,
        );
        assert!(browser
            .eval(CONVERSATION)
            .as_str()
            .unwrap()
            .contains("hello-from-bash"));
        assert!(browser
            .eval("document.querySelector('.approval').innerText")
            .as_str()
            .unwrap()
            .contains("allowed once"));

        // The model asks a question: the card offers the options; the answer reaches the model.
        send(&mut browser, "ask me");
        browser.wait_for(
            "document.querySelector('form.question input[value=\"Rust\"]')",
            "the question card",
            15,
        );
        if let Some(dir) = &shots {
            browser.screenshot(&dir.join("web-question.png"));
        }
        browser.eval(
            "document.querySelector('form.question input[value=\"Rust\"]').click(); \
             document.querySelector('form.question button.primary').click(); true",
        );
        browser.wait_for(
            &format!("{CONVERSATION}.includes('Noted, Rust it is.')"),
            "the answer after the question",
            15,
        );
        assert!(browser
            .eval("document.querySelector('.tool-card .answers').textContent")
            .as_str()
            .unwrap()
            .contains("(lang): Rust"));
        assert_eq!(count(&mut browser, "form.question"), 0);

        // Typing `/` offers the commands.
        browser.eval(
            "{ const i = document.getElementById('input'); i.value = '/comp'; \
             i.dispatchEvent(new Event('input')); } true",
        );
        assert_eq!(
            browser.eval("document.querySelector('#slash-menu .slash-name').textContent"),
            json!("/compact")
        );
        if let Some(dir) = &shots {
            browser.eval(
                "{ const i = document.getElementById('input'); i.value = '/'; \
                 i.dispatchEvent(new Event('input')); } true",
            );
            browser.screenshot(&dir.join("web-commands.png"));
        }
        browser.eval(
            "document.getElementById('input').value = ''; \
             document.getElementById('slash-menu').hidden = true; true",
        );

        // A stalled turn: Cancel ends it, logged as cancelled.
        send(&mut browser, "take forever");
        browser.wait_for(
            &format!("{CONVERSATION}.includes('Thinking about it')"),
            "the partial reply",
            15,
        );
        browser.wait_for(
            "!document.getElementById('cancel').disabled",
            "the cancel button",
            5,
        );
        browser.eval("document.getElementById('cancel').click(); true");
        browser.wait_for(
            "document.querySelector('.turn-end.aborted')",
            "the cancelled turn",
            15,
        );

        if let Some(dir) = &shots {
            browser.eval("document.getElementById('toggle-usage').click(); true");
            browser.eval("document.getElementById('conversation').scrollTop = 0; true");
            browser.screenshot(&dir.join("web-conversation.png"));
        }

        // The permission control switches the preset; it shows the logged one.
        assert_eq!(
            browser.eval("document.getElementById('permission').value"),
            json!("danger-full-access")
        );
        browser.eval(
            "{ const p = document.getElementById('permission'); p.value = 'read-only'; \
             p.dispatchEvent(new Event('change')); } true",
        );
        browser.wait_for(
            "document.getElementById('sandbox').textContent === 'sandbox none' \
             && document.getElementById('permission').value === 'read-only'",
            "the switched preset",
            10,
        );

        // Reload: the same transcript, rebuilt from the session's events.
        std::thread::sleep(Duration::from_millis(300));
        let before = browser.eval(CONVERSATION);
        let turns = count(&mut browser, ".turn-end");
        browser.eval("location.reload(); true");
        std::thread::sleep(Duration::from_millis(300));
        browser.wait_for("document.body.dataset.ready", "the reloaded page", 20);
        browser.wait_for(
            &format!("document.querySelectorAll('.turn-end').length === {turns}"),
            "the reloaded transcript",
            15,
        );
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(browser.eval(CONVERSATION), before);
        assert_eq!(
            browser.eval("document.getElementById('permission').value"),
            json!("read-only")
        );

        // Widening asks first: a "no" keeps the preset, a "yes" switches it.
        let widen = "{ const p = document.getElementById('permission'); \
                     p.value = 'danger-full-access'; p.dispatchEvent(new Event('change')); } true";
        browser.eval("window.confirm = (m) => { window.__asked = m; return false; }; true");
        browser.eval(widen);
        let asked = browser.wait_for("window.__asked", "the confirmation dialog", 5);
        assert!(
            asked.as_str().unwrap().contains("danger-full-access"),
            "{asked}"
        );
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            browser.eval("document.getElementById('permission').value"),
            json!("read-only")
        );
        browser.eval("window.confirm = () => true; true");
        browser.eval(widen);
        browser.wait_for(
            "document.getElementById('permission').value === 'danger-full-access' \
             && document.getElementById('permission').classList.contains('danger')",
            "the confirmed widening",
            10,
        );
    });
    web.stop().await;
}

/// The trust card: planted project hooks in the default workspace show a card with the exact
/// command when the new-session form opens; Review shows the list, Keep ignoring hides it, and
/// Trust (after the confirmation dialog) records trust in the home.
#[tokio::test(flavor = "multi_thread")]
async fn the_trust_card_shows_planted_hooks_and_trusts_after_confirmation() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let mut web = Web::start(Vec::new()).await;
    let ws = std::fs::canonicalize(web.cwd.path()).unwrap();
    std::fs::create_dir_all(ws.join(".dsh")).unwrap();
    std::fs::write(
        ws.join(".dsh/hooks.json"),
        r#"{"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo planted-hook"}]}]}}"#,
    )
    .unwrap();
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    let trust_file = web.home.path().join("trust.toml");
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.eval("document.getElementById('new-session').click(); true");
        browser.wait_for(
            "!document.getElementById('trust-card').hidden",
            "the trust card",
            10,
        );
        assert!(browser
            .eval("document.getElementById('trust-summary').textContent")
            .as_str()
            .unwrap()
            .contains("settings that run commands"));
        browser.eval("document.getElementById('trust-show').click(); true");
        let review = browser.eval(
            "document.getElementById('trust-review').hidden ? '' : document.getElementById('trust-review').textContent",
        );
        assert!(
            review
                .as_str()
                .unwrap()
                .contains("UserPromptSubmit: runs `echo planted-hook`"),
            "{review}"
        );
        browser.eval("document.getElementById('trust-ignore').click(); true");
        assert_eq!(
            browser.eval("document.getElementById('trust-card').hidden"),
            json!(true)
        );
        assert!(!trust_file.exists());
        // Shown again (a new tab would): the dialog is accepted, trust is recorded.
        browser.eval("sessionStorage.clear(); window.confirm = () => true; checkTrust(document.getElementById('new-cwd').value); true");
        browser.wait_for(
            "!document.getElementById('trust-card').hidden",
            "the trust card again",
            10,
        );
        browser.eval("document.getElementById('trust-accept').click(); true");
        browser.wait_for(
            "document.getElementById('trust-card').hidden",
            "the card to close after trusting",
            10,
        );
    });
    let recorded = std::fs::read_to_string(&trust_file).unwrap();
    assert!(
        recorded.contains(ws.to_string_lossy().as_ref()),
        "{recorded}"
    );
    web.stop().await;
}

/// Connection warm-up (docs/web.md): the first text typed into the composer of a live, idle
/// session asks the server to open the provider connection (one `HEAD` at the provider: the
/// test factory's warm-up has no 30 s window); the next keys do not, and once a send has
/// emptied the box the next message warms again.
#[tokio::test(flavor = "multi_thread")]
async fn starting_a_message_warms_the_provider_connection_in_chromium() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let mut web = Web::start(vec![text("one")]).await;
    let (_, created) = web.json(web.post("/api/sessions", json!({}))).await;
    let id = created["id"].as_str().unwrap().to_string();
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    let provider = &web.provider;
    let heads = |want: usize, what: &str| {
        tokio::runtime::Handle::current().block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                provider.wait_until(|events| events.head_requests >= want),
            )
            .await
            .unwrap_or_else(|_| panic!("{what}: {:?}", provider.events()));
        });
        provider.events().head_requests
    };
    // Keys as a browser delivers them: `beforeinput`, the edit, `input`.
    let typed = |text: &str| {
        format!(
            "(() => {{ const i = document.getElementById('input');
               for (const ch of {}) {{
                 i.dispatchEvent(new InputEvent('beforeinput', {{ data: ch, inputType: 'insertText' }}));
                 i.value += ch;
                 i.dispatchEvent(new InputEvent('input', {{ data: ch, inputType: 'insertText' }}));
               }} return true; }})()",
            json!(text)
        )
    };
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.show_session(&id);
        browser.wait_for(
            "document.getElementById('state').textContent === 'idle'",
            "the live session",
            10,
        );
        browser.eval(&typed("h"));
        assert_eq!(heads(1, "the first key warms"), 1);
        browser.eval(&typed("ello"));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(provider.events().head_requests, 1, "later keys do not");
        browser.eval("document.getElementById('send').click(); true");
        browser.wait_for(
            "document.querySelector('.turn-end.completed') && document.getElementById('input').value === ''",
            "the turn's end",
            15,
        );
        browser.wait_for(
            "document.getElementById('state').textContent === 'idle'",
            "the session idle again",
            10,
        );
        browser.eval(&typed("n"));
        assert_eq!(heads(2, "the next message warms again"), 2);
    });
    web.stop().await;
}

/// A tool the page has never heard of, which says how its calls are shown.
struct Lookup;

impl dsh_tools::Tool for Lookup {
    fn name(&self) -> &str {
        "mcp__demo__lookup"
    }

    fn description(&self) -> &str {
        "Looks a key up."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {"key": {"type": "string"}}})
    }

    fn present(&self, args: &serde_json::Value) -> dsh_tools::ToolPresentation {
        dsh_tools::ToolPresentation::new("demo · Lookup")
            .subject(format!("key {}", args["key"].as_str().unwrap_or("?")))
            .detail(Some("Look the key up"))
            .kind(dsh_tools::ToolKind::Search)
    }

    fn summarize(
        &self,
        _args: &serde_json::Value,
        _result: &dsh_tools::ResultFacts<'_>,
    ) -> Option<dsh_tools::ResultSummary> {
        Some(dsh_tools::ResultSummary::new("3 hits").tone(dsh_tools::Tone::Failure))
    }

    fn execute<'a>(
        &'a self,
        _args: serde_json::Value,
        _ctx: &'a dsh_tools::ToolContext,
    ) -> futures::future::BoxFuture<'a, Result<dsh_tools::ToolOutput, dsh_tools::ToolError>> {
        Box::pin(async { Ok(dsh_tools::ToolOutput::text("a\nb\nc")) })
    }
}

struct LookupTools;

impl Extension for LookupTools {
    fn name(&self) -> &str {
        "lookup"
    }

    fn tools(&self) -> Vec<Arc<dyn dsh_tools::Tool>> {
        vec![Arc::new(Lookup)]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_cards_show_what_the_server_says_of_the_tool_in_chromium() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let call = SseReply::new()
        .tool_call(0, "call-look", "mcp__demo__lookup", r#"{"key": "k1"}"#)
        .finish("tool_calls", Some(WireUsage::default()));
    let mut web = Web::start_with(
        vec![call.into(), text("looked up")],
        vec![Arc::new(LookupTools) as Arc<dyn Extension>],
    )
    .await;
    let id = web.create("look k1 up").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.show_session(&id);
        browser.wait_for(
            "document.querySelector('.tool-card .tool-status')?.textContent === '3 hits'",
            "the card's summary",
            15,
        );
        let card = browser.eval(
            "(() => { const c = document.querySelector('.tool-card');
               return [c.querySelector('.tool-name').textContent, c.querySelector('.tool-what').textContent,
                       c.title, c.dataset.kind, c.classList.contains('failed')]; })()",
        );
        assert_eq!(
            card,
            json!(["demo · Lookup", "key k1", "Look the key up", "search", true])
        );
    });
    web.stop().await;
}

/// The usage panel counts every billed call (docs/sessions.md, "Cost"): a reply that failed
/// after its usage arrived (retried) and the session's title call besides the turn's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_panel_counts_every_billed_call_in_chromium() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let usage = |prompt_tokens, completion_tokens| WireUsage {
        prompt_tokens,
        completion_tokens,
        prompt_cache_hit_tokens: 0,
        reasoning_tokens: 0,
    };
    let web = Web::start_titled(vec![
        SseReply::new()
            .text("par")
            .usage(usage(1000, 20))
            .end(StreamEnd::DropConnection)
            .into(),
        SseReply::new()
            .text("Counted.")
            .finish("stop", Some(usage(1200, 30)))
            .into(),
    ])
    .await;
    web.provider.route(
        dsh_test_support::RequestMatch::System("You name coding-assistant sessions".into()),
        [SseReply::new()
            .text("Usage check")
            .finish("stop", Some(usage(40, 5)))
            .into()],
    );
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.eval("document.getElementById('new-session').click(); document.querySelector('#new-form button[type=submit]').click(); true");
        browser.wait_for("location.hash.startsWith('#/s/')", "the new session", 10);
        send(&mut browser, "count me");
        browser.wait_for(
            "document.querySelector('.turn-end.completed')",
            "the turn end",
            20,
        );
        // The title's usage is logged before the title it gave.
        browser.wait_for(
            "document.querySelector('.s-title')?.textContent === 'Usage check'",
            "the model's title",
            15,
        );
        browser.eval("document.getElementById('toggle-usage').click(); true");
        let cells = browser.eval(
            "JSON.stringify([...document.querySelectorAll('#usage .cell')].map((c) => \
             [c.querySelector('.label').textContent, c.querySelector('.value').textContent]))",
        );
        let cells: Vec<(String, String)> = serde_json::from_str(cells.as_str().unwrap()).unwrap();
        let cell = |label: &str| {
            cells
                .iter()
                .find(|(l, _)| l == label)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {label} in {cells:?}"))
        };
        assert_eq!(cell("requests"), "3", "{cells:?}");
        let totals = browser.eval(
            "JSON.stringify((({ total }) => [total.input, total.output])\
             (usageSummary(app.conv.requests, app.info?.prices)))",
        );
        assert_eq!(totals, json!("[2240,55]"));
    });
}

/// The sidebar over more sessions than a page (docs/web.md, "Sidebar"): the first 100 at once,
/// the next page once "Older sessions…" scrolls into view, and a refresh keeps the older
/// sessions loaded, with a session updated since listed once, at the top.
#[tokio::test(flavor = "multi_thread")]
async fn the_sidebar_loads_older_pages_on_demand_and_keeps_them() {
    let Some(binary) = find_chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let mut web = Web::start(Vec::new()).await;
    let store = dsh_session::JsonlStore::new(web.home.path());
    let mut oldest = None;
    for k in 0..150 {
        let writer = dsh_session::SessionStore::create(
            &store,
            &format!("/stored/p{}", k % 3),
            Default::default(),
        )
        .unwrap();
        let id = writer.header().id.clone();
        oldest.get_or_insert_with(|| (id.clone(), store.find(&id).unwrap()));
    }
    let (oldest_id, oldest_log) = oldest.unwrap();
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        const ROWS: &str = "document.querySelectorAll('#session-list a.session').length";
        browser.wait_for(&format!("{ROWS} === 100"), "the first page", 10);
        browser.eval("document.querySelector('.more-sessions').scrollIntoView(); true");
        browser.wait_for(&format!("{ROWS} === 150"), "the second page", 10);
        assert_eq!(count(&mut browser, ".more-sessions"), 0);
        // Updated behind the page's back: the oldest session moves to the top.
        let later = dsh_session::now_ms() + 3_600_000;
        std::fs::write(
            &oldest_log,
            format!(
                "{}{{\"type\":\"session/title\",\"time\":{later},\"data\":{{\"title\":\"moved up\"}}}}\n",
                std::fs::read_to_string(&oldest_log).unwrap()
            ),
        )
        .unwrap();
        browser.eval("window.refreshed = false; loadSessions().then(() => { window.refreshed = true; }); true");
        browser.wait_for("window.refreshed", "the refresh", 10);
        assert_eq!(browser.eval(ROWS), json!(150));
        assert_eq!(
            browser.eval("document.querySelector('#session-list a.session').getAttribute('href')"),
            json!(format!("#/s/{oldest_id}"))
        );
        assert_eq!(
            browser.eval(&format!(
                "document.querySelectorAll('#session-list a.session[href=\"#/s/{oldest_id}\"]').length"
            )),
            json!(1)
        );
    });
    web.stop().await;
}
