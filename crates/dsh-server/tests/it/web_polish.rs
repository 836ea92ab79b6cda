//! Issue 20's web items: efforts per model over the API (offered from the model table, refused
//! before any request, carried over a model switch), and in headless Chromium the start panel
//! (recent sessions of the default directory and a prompt box), the workspace path with its
//! leading `/`, highlighted code blocks with a language label and sideways scroll, an info
//! toast that is not styled as an error, and a stored session's header with the model, effort
//! and preset it last used.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use crate::support::cdp::{find_chromium, Browser};
use crate::support::{text, Web};
use dsh_test_support::{SseReply, WireUsage};
use serde_json::json;

#[tokio::test]
async fn efforts_are_offered_refused_and_carried_per_model() {
    let web = Web::start(vec![]).await;
    let (status, info) = web.json(web.get("/api/info")).await;
    assert_eq!(status, 200);
    assert_eq!(
        info["modelEfforts"]["deepseek-v4-flash"],
        json!({"efforts": ["off", "low", "high", "max"], "default": "high"})
    );

    let (status, created) = web.json(web.post("/api/sessions", json!({}))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let call = format!("/api/sessions/{id}/call");

    // `medium` is not among them: refused, with the list, and nothing changes.
    let (status, body) = web.json(web.post(&call, json!({"effort": "medium"}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "UNSUPPORTED_REASONING_EFFORT");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("off, low, high, max"), "{message}");
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["effort"], json!(null));

    let (status, body) = web.json(web.post(&call, json!({"effort": "max"}))).await;
    assert_eq!((status, &body["effort"]), (200, &json!("max")), "{body}");

    // Switching to a model that takes no effort control: the effort goes back to the model's
    // default, and the answer says why.
    let (status, body) = web
        .json(web.post(&call, json!({"model": "local-model"})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "local-model");
    assert_eq!(body["effort"], json!(null));
    let note = body["note"].as_str().unwrap();
    assert!(note.contains("`max`") && note.contains("default"), "{note}");

    // Back to a thinking model with an effort it takes: kept, no note.
    let (_, body) = web
        .json(web.post(&call, json!({"model": "deepseek-v4-pro", "effort": "low"})))
        .await;
    assert_eq!(
        (&body["effort"], &body["note"]),
        (&json!("low"), &json!(null))
    );
    assert!(
        web.provider.requests().is_empty(),
        "no request was made by switching"
    );
}

fn code_reply() -> dsh_test_support::ScriptedReply {
    let long = "x".repeat(400);
    SseReply::new()
        .text("Here:\n\n```rust\n// add two numbers\nfn add(a: u32, b: u32) -> u32 {\n    let s = \"sum\";\n")
        .text("    let t = \"<img src=x onerror=window.pwned=1>\"; // </code><script>window.pwned=2</script>\n")
        .text(&format!("    a + b + 42 // {long}\n}}\n```\n"))
        .finish("stop", Some(WireUsage::default()))
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_panel_highlighted_code_and_stored_session_header_in_chromium() {
    let Some(binary) = find_chromium() else {
        // Chromium is installed in CI; a machine without it cannot run this test.
        panic!(
            "no chromium on PATH: install it (apt-get install chromium) to run the browser tests"
        );
    };
    let web = Web::start(vec![text("first answer"), code_reply()]).await;

    // A session with effort `max` that ran one turn, then its fork: a stored session (no live
    // agent) whose log holds the model, effort and preset it last used.
    let (_, created) = web.json(web.post("/api/sessions", json!({}))).await;
    let first = created["id"].as_str().unwrap().to_string();
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{first}/call"),
            json!({"effort": "max"}),
        ))
        .await;
    assert_eq!(status, 200);
    let mut events = web.stream(&first, None).await;
    let (status, _) = web
        .json(web.post(
            &format!("/api/sessions/{first}/prompt"),
            json!({"text": "say something"}),
        ))
        .await;
    assert_eq!(status, 202);
    events.until("turn/end").await;
    let (status, forked) = web
        .json(web.post(&format!("/api/sessions/{first}/fork"), json!({})))
        .await;
    assert_eq!(status, 201, "{forked}");
    let stored = forked["id"].as_str().unwrap().to_string();
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{stored}"))).await;
    assert_eq!(detail["live"], false, "{detail}");

    let url = web.server.as_ref().unwrap().issue_url(None);
    let profile = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(web.cwd.path()).unwrap();
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);

        // The start panel: shown, with the prompt box and this directory's recent sessions.
        assert_eq!(
            browser.eval("document.getElementById('start-panel').hidden"),
            json!(false)
        );
        assert_eq!(
            browser.eval("document.getElementById('conversation').hidden"),
            json!(true)
        );
        browser.wait_for(
            "document.querySelectorAll('#start-recent a.start-session').length === 2",
            "the recent sessions of the directory",
            10,
        );
        let shown_cwd = browser.eval("document.getElementById('start-cwd').textContent");
        assert!(
            shown_cwd
                .as_str()
                .unwrap()
                .contains(&*cwd.to_string_lossy()),
            "{shown_cwd}"
        );

        // The sidebar's path keeps its leading `/` on the left: the first glyph on screen is
        // the slash, left of the next character.
        let order = browser.eval(
            "(() => { const span = document.querySelector('.ws-path'); const node = span.firstChild;
               const text = node.textContent; const at = text.indexOf('/');
               const rect = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1); return r.getBoundingClientRect().left; };
               return rect(at) < rect(at + 1) && span.innerText.replace(/\\u200e/g, '').startsWith('/'); })()",
        );
        assert_eq!(order, json!(true), "the path lost its leading slash");

        // A prompt in the box starts a session here and shows its reply.
        browser.eval(
            "document.getElementById('start-input').value = 'show me code';
             document.querySelector('#start-form button[type=submit]').click(); true",
        );
        browser.wait_for("location.hash.startsWith('#/s/')", "the new session", 10);
        browser.wait_for(
            "document.querySelector('#conversation .md-codeblock code[data-highlighted]')",
            "the highlighted code block",
            15,
        );
        assert_eq!(
            browser.eval("document.getElementById('start-panel').hidden"),
            json!(true)
        );
        assert_eq!(
            browser.eval(
                "document.querySelector('#conversation .md-codeblock .code-lang').textContent"
            ),
            json!("rust")
        );
        let kinds = browser.eval(
            "[...document.querySelectorAll('#conversation .md-code span')].map((s) => s.className + ':' + s.textContent).join('|')",
        );
        let kinds = kinds.as_str().unwrap();
        for expected in [
            "tok-kw:fn",
            "tok-kw:let",
            "tok-str:\"sum\"",
            "tok-num:42",
            "tok-com:// add two numbers",
        ] {
            assert!(kinds.contains(expected), "{expected} missing in {kinds}");
        }
        // Model text inside a highlighted block stays text: no element, no script ran.
        assert_eq!(
            browser.eval("[document.querySelectorAll('#conversation img, #conversation script').length, typeof window.pwned]"),
            json!([0, "undefined"])
        );
        let shown = browser.eval("document.querySelector('#conversation .md-code').textContent");
        assert!(
            shown
                .as_str()
                .unwrap()
                .contains("<img src=x onerror=window.pwned=1>"),
            "{shown}"
        );
        // Long lines scroll sideways instead of wrapping.
        let scroll = browser.eval(
            "(() => { const pre = document.querySelector('#conversation .md-codeblock pre');
               return [getComputedStyle(pre).overflowX, getComputedStyle(pre).whiteSpace, pre.scrollWidth > pre.clientWidth]; })()",
        );
        assert_eq!(scroll, json!(["auto", "pre", true]));

        // An info toast (a call change) is not styled as an error.
        browser.eval("document.getElementById('apply-call').click(); true");
        browser.wait_for("!document.getElementById('toast').hidden", "the toast", 10);
        assert_eq!(
            browser.eval("document.getElementById('toast').className"),
            json!("info")
        );
        let error_red = browser.eval(
            "(() => { const probe = document.createElement('div'); probe.style.background = 'var(--bad)';
               document.body.append(probe); const c = getComputedStyle(probe).backgroundColor; probe.remove(); return c; })()",
        );
        let shown =
            browser.eval("getComputedStyle(document.getElementById('toast')).backgroundColor");
        assert_ne!(shown, error_red, "the info toast is in the error colour");

        // The stored session's header: model, effort and preset from its log.
        browser.show_session(&stored);
        // The meta line can hold `max` from the session's detail before its log is replayed,
        // and the badge reads "running" between a replayed `turn/start` and its `turn/end`:
        // wait for both to settle.
        browser.wait_for(
            "document.getElementById('session-meta').textContent.includes('max')
             && document.getElementById('state').textContent.startsWith('stored')",
            "the stored session's model, effort and state",
            10,
        );
        let meta = browser.eval("document.getElementById('session-meta').textContent");
        let state = browser.eval("document.getElementById('state').textContent");
        assert!(state.as_str().unwrap().starts_with("stored"), "{state}");
        let meta = meta.as_str().unwrap();
        assert!(meta.starts_with("deepseek-v4-flash · max"), "{meta}");
        assert!(meta.ends_with("danger-full-access"), "{meta}");
        let effort_menu = browser
            .eval("[...document.getElementById('effort').options].map((o) => o.value).join(',')");
        assert_eq!(effort_menu, json!("default,off,low,high,max"));
    });
}

#[tokio::test]
async fn creating_a_session_with_an_effort_its_model_does_not_take_fails_with_the_list() {
    let web = Web::start(vec![]).await;
    let logs = || {
        let mut found = 0;
        let mut dirs = vec![web.home.path().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.to_string_lossy().ends_with(".jsonl") {
                    found += 1;
                }
            }
        }
        found
    };
    // The default model (deepseek-v4-flash) takes off, low, high and max: `medium` is refused
    // at creation, before any session exists or any request is sent.
    for body in [
        json!({"effort": "medium", "prompt": "hi"}),
        json!({"model": "deepseek-v4-pro", "effort": "medium"}),
    ] {
        let (status, answer) = web.json(web.post("/api/sessions", body.clone())).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], "UNSUPPORTED_REASONING_EFFORT");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("off, low, high, max"), "{message}");
    }
    assert_eq!(logs(), 0, "a refused session left a log behind");
    assert!(web.provider.requests().is_empty());

    // An effort the model takes is accepted and used from the first request.
    let (status, created) = web
        .json(web.post("/api/sessions", json!({"effort": "low"})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let (_, detail) = web.json(web.get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(detail["effort"], "low", "{detail}");
}
