//! Images in the web UI (docs/web.md, "Images"), in headless Chromium against the fake provider:
//! an image attached by paste, by drag and drop and by the file picker shows as a thumbnail in
//! the composer, goes with the prompt (the provider gets it as an `image_url` data URL), and shows
//! as a thumbnail in the transcript, served from the session's image folder; a file over 20 MB
//! is refused in the page with a clear message; the API refuses bad images naming them.
//! Needs `chromium` (CI installs it, `.ci/run`); without it the test fails, it does not skip.

#![allow(clippy::unwrap_used)]

use crate::support::cdp::{find_chromium, Browser};
use crate::support::{text, Web};
use serde_json::json;

use dsh_test_support::images::RED_PNG_BASE64;

/// JavaScript making a `DataTransfer` holding red.png as `name`.
fn transfer(name: &str) -> String {
    format!(
        "(() => {{ const b = Uint8Array.from(atob({data}), (c) => c.charCodeAt(0)); \
         const dt = new DataTransfer(); dt.items.add(new File([b], {name}, {{type: 'image/png'}})); return dt; }})()",
        data = json!(RED_PNG_BASE64),
        name = json!(name)
    )
}

fn send_and_wait(browser: &mut Browser, text: &str, turns: u64) {
    browser.eval(&format!(
        "document.getElementById('input').value = {}; document.getElementById('send').click(); true",
        json!(text)
    ));
    browser.wait_for(
        &format!("document.querySelectorAll('.turn-end.completed').length >= {turns}"),
        "the turn end",
        15,
    );
    browser.wait_for(
        "document.getElementById('attachments').hidden",
        "the composer's thumbnails cleared",
        5,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_attach_by_paste_drop_and_picker_in_chromium() {
    let binary = find_chromium().expect("chromium is required (apt-get install chromium)");
    let mut web = Web::start(vec![text("pasted"), text("dropped"), text("picked")]).await;
    let profile = tempfile::tempdir().unwrap();
    let url = web.server.as_ref().unwrap().issue_url(None);
    tokio::task::block_in_place(|| {
        let mut browser = Browser::signed_in(&binary, profile.path(), &url);
        browser.eval("document.getElementById('new-session').click(); document.querySelector('#new-form button[type=submit]').click(); true");
        browser.wait_for("location.hash.startsWith('#/s/')", "the new session", 10);
        // The vision model, from the next request on (the model bar's Apply).
        browser.wait_for(
            "document.getElementById('composer').hidden === false",
            "the composer",
            10,
        );
        // The text-only default model: no image button (issue 40).
        browser.wait_for(
            "document.getElementById('attach').hidden === true",
            "the image button hidden for a text-only model",
            10,
        );
        browser.eval("document.getElementById('model').value = 'deepseek-v4-flash-vision-exp'; document.getElementById('apply-call').click(); true");
        browser.wait_for(
            "document.getElementById('toast').innerText.includes('deepseek-v4-flash-vision-exp')",
            "the model switch",
            10,
        );
        browser.wait_for(
            "document.getElementById('attach').hidden === false",
            "the image button for a vision model",
            5,
        );

        // Paste.
        browser.eval(&format!(
            "document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {{clipboardData: {}, bubbles: true, cancelable: true}})); true",
            transfer("pasted.png")
        ));
        browser.wait_for(
            "document.querySelector('#attachments img')?.alt === 'pasted.png'",
            "the pasted thumbnail",
            5,
        );
        // The preview is a `blob:` URL the page's CSP lets load (`img-src ... blob:`).
        browser.wait_for(
            "(() => { const i = document.querySelector('#attachments img'); return i.src.startsWith('blob:') && i.complete && i.naturalWidth === 1; })()",
            "the composer's preview loaded from its blob: URL",
            5,
        );
        send_and_wait(&mut browser, "what is pasted", 1);

        // Drag and drop onto the composer.
        browser.eval(&format!(
            "document.getElementById('composer').dispatchEvent(new DragEvent('drop', {{dataTransfer: {}, bubbles: true, cancelable: true}})); true",
            transfer("dropped.png")
        ));
        browser.wait_for(
            "document.querySelector('#attachments img')?.alt === 'dropped.png'",
            "the dropped thumbnail",
            5,
        );
        send_and_wait(&mut browser, "what is dropped", 2);

        // The file picker.
        browser.eval(&format!(
            "const p = document.getElementById('image-picker'); p.files = {}.files; p.dispatchEvent(new Event('change')); true",
            transfer("picked.png")
        ));
        browser.wait_for(
            "document.querySelector('#attachments img')?.alt === 'picked.png'",
            "the picked thumbnail",
            5,
        );
        send_and_wait(&mut browser, "what is picked", 3);

        // Transcript thumbnails, loaded from the session's image folder.
        browser.wait_for(
            "[...document.querySelectorAll('#conversation .user .images img')].filter((i) => i.complete && i.naturalWidth === 1).length === 3",
            "three loaded transcript thumbnails",
            10,
        );

        // Over 20 MB: refused in the page, nothing attached.
        browser.eval(
            "const dt = new DataTransfer(); dt.items.add(new File([new Uint8Array(20 * 1024 * 1024 + 1)], 'big.png', {type: 'image/png'})); \
             document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})); true",
        );
        browser.wait_for(
            "document.getElementById('toast').innerText.includes('over the 20 MB image limit')",
            "the size refusal",
            5,
        );
        assert!(browser
            .eval("document.getElementById('attachments').hidden")
            .as_bool()
            .unwrap());
    });

    // Each prompt reached the provider with its image as a data URL.
    let url = format!("data:image/png;base64,{RED_PNG_BASE64}");
    let requests = web.provider.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        let body = request.body.to_string();
        assert!(body.contains(&url), "no image in {body}");
    }
    web.stop().await;
}

#[tokio::test]
async fn the_prompt_api_refuses_bad_images_naming_them() {
    let mut web = Web::start(vec![]).await;
    let id = web.create("hello").await;
    for (image, needle) in [
        (
            json!({"mediaType": "image/png", "data": "aGVsbG8=", "name": "notes.png"}),
            "notes.png: the file is not a PNG",
        ),
        (
            json!({"mediaType": "image/gif", "data": RED_PNG_BASE64}),
            "image 1: the image was declared image/gif",
        ),
        (
            json!({"mediaType": "image/png", "data": "%%%"}),
            "not standard base64",
        ),
    ] {
        let (status, body) = web
            .json(web.post(
                &format!("/api/sessions/{id}/prompt"),
                json!({"text": "look", "images": [image]}),
            ))
            .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains(needle), "{body}");
    }
    // The image route serves only `<hex>.<ext>` names from the session's image folder.
    for file in [
        "..%2F..%2Fsession.jsonl",
        "session.jsonl",
        "b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640.txt",
    ] {
        let status = web
            .get(&format!("/api/sessions/{id}/images/{file}"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 400, "{file}");
    }
    let missing = web
        .get(&format!("/api/sessions/{id}/images/{}.png", "0".repeat(64)))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(missing, 404);
    web.stop().await;
}

/// A text-only model (issue 40): the session says it takes no images, a prompt with an image is
/// refused before anything is logged, and an image already in the history (sent while a vision
/// model was in use) reaches the text-only model as a placeholder, so later turns still complete.
#[tokio::test]
async fn a_text_only_model_refuses_images_and_survives_logged_ones() {
    let mut web = Web::start(vec![text("hi"), text("red"), text("still here")]).await;
    let id = web.create("hello").await;
    let mut stream = web.stream(&id, None).await;
    stream.until("turn/end").await;
    let path = format!("/api/sessions/{id}");
    let before = web.json(web.get(&path)).await.1;
    assert_eq!(before["images"], false, "{before}");
    let prompt = format!("/api/sessions/{id}/prompt");
    let image = json!({"mediaType": "image/png", "data": RED_PNG_BASE64, "name": "red.png"});
    let (status, body) = web
        .json(web.post(&prompt, json!({"text": "look", "images": [image]})))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("UNSUPPORTED_CONTENT"), "{body}");
    assert!(body.to_string().contains("takes text only"), "{body}");
    // Nothing was logged.
    assert_eq!(web.json(web.get(&path)).await.1["events"], before["events"]);

    // The vision model takes it.
    let call = format!("/api/sessions/{id}/call");
    let (status, body) = web
        .json(web.post(&call, json!({"model": "deepseek-v4-flash-vision-exp"})))
        .await;
    assert_eq!((status, &body["images"]), (200, &json!(true)), "{body}");
    let (status, body) = web
        .json(web.post(&prompt, json!({"text": "look", "images": [image]})))
        .await;
    assert_eq!(status, 202, "{body}");
    stream.until("turn/end").await;

    // Back to the text-only model: the next text turn completes; its request has a placeholder
    // where the image was.
    let (status, body) = web
        .json(web.post(&call, json!({"model": "deepseek-v4-flash"})))
        .await;
    assert_eq!((status, &body["images"]), (200, &json!(false)), "{body}");
    let (status, body) = web
        .json(web.post(&prompt, json!({"text": "and now?"})))
        .await;
    assert_eq!(status, 202, "{body}");
    let end = stream.until("turn/end").await;
    let end = &end.last().unwrap().data;
    assert_eq!(end["data"]["reason"]["kind"], "completed", "{end}");
    let requests = web.provider.requests();
    let last = requests.last().unwrap().body.to_string();
    assert!(
        last.contains("[image omitted: deepseek-v4-flash takes no images]"),
        "{last}"
    );
    assert!(!last.contains("image_url"), "{last}");
    assert!(!last.contains(RED_PNG_BASE64), "{last}");
    web.stop().await;
}
