//! Images on the chat-completions wire (docs/providers.md, "Images"), over loopback: the exact
//! body bytes dsh sends to its vision model, and the refusal before any byte for a text-only one.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use dsh_llm::{ContentBlock, Message, MessageSource, Role};
use dsh_test_support::{FakeProvider, SseReply};

use dsh_test_support::images::{red_png as red, RED_PNG_BASE64 as RED_PNG};
const RED_ID: &str = "sha256:b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640";
const VISION: &str = "deepseek-v4-flash-vision-exp";

fn history() -> Vec<Message> {
    vec![
        Message {
            id: "u1".into(),
            role: Role::User,
            content: vec![
                ContentBlock::text("Inspect this image, then reply with exactly "),
                ContentBlock::Image { attachment: red() },
                ContentBlock::text("the single word DONE."),
            ],
            source: MessageSource::User,
        },
        Message {
            id: "a1".into(),
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "read_image".into(),
                arguments: r#"{"file_path":"red.png"}"#.into(),
            }],
            source: MessageSource::Model {
                provider: "deepseek".into(),
                model: VISION.into(),
                extra: Default::default(),
            },
        },
        Message::tool_result(
            "r1",
            "c1",
            vec![
                ContentBlock::text("image/png image, 1x1 px, 69 bytes"),
                ContentBlock::Image { attachment: red() },
            ],
            false,
        ),
    ]
}

#[tokio::test]
async fn the_vision_model_gets_data_urls_in_dshs_order() {
    let provider = FakeProvider::start([SseReply::new().text("ok").finish("stop", None).into()])
        .await
        .unwrap();
    let mut request = request_with(VISION, None, history());
    request.tools = std::sync::Arc::new(Vec::new());
    let chunks = collect(&adapter_for(&provider), request).await;
    assert_well_formed(&chunks);
    let raw = String::from_utf8(provider.requests()[0].raw_body.clone()).unwrap();
    let url = format!("data:image/png;base64,{RED_PNG}");
    let expected_messages = format!(
        concat!(
            r#""messages":[{{"role":"system","content":"You are dsh, a coding agent."}},"#,
            r#"{{"role":"user","content":[{{"type":"text","text":"Inspect this image, then reply with exactly "}},"#,
            r#"{{"type":"text","text":"\nImage {id}; request image 1x1px."}},"#,
            r#"{{"type":"image_url","image_url":{{"url":"{url}"}}}},"#,
            r#"{{"type":"text","text":"the single word DONE."}}]}},"#,
            r#"{{"role":"assistant","content":"","reasoning_content":"","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"read_image","arguments":"{{\"file_path\":\"red.png\"}}"}}}}]}},"#,
            r#"{{"role":"tool","tool_call_id":"c1","content":"image/png image, 1x1 px, 69 bytes"}},"#,
            r#"{{"role":"user","content":[{{"type":"text","text":"Attached image(s) from tool result:"}},"#,
            r#"{{"type":"image_url","image_url":{{"url":"{url}"}}}}]}}],"#
        ),
        id = RED_ID,
        url = url
    );
    assert!(
        raw.contains(&expected_messages),
        "body:\n{raw}\nexpected to contain:\n{expected_messages}"
    );
}

#[tokio::test]
async fn a_text_only_model_refuses_images_before_sending_anything() {
    let provider = FakeProvider::start([]).await.unwrap();
    let failure = call_failure(
        &adapter_for(&provider),
        request_with("deepseek-v4-flash", None, history()),
    )
    .await;
    assert_eq!(failure.code.as_str(), dsh_llm::UNSUPPORTED_CONTENT);
    assert!(
        failure.message.contains("`deepseek-v4-flash`") && failure.message.contains(VISION),
        "{}",
        failure.message
    );
    assert!(
        provider.requests().is_empty(),
        "nothing may reach the provider"
    );
}

#[tokio::test]
async fn an_image_without_its_bytes_is_an_error_not_an_empty_url() {
    let provider = FakeProvider::start([]).await.unwrap();
    let mut image = red();
    image.data = None;
    let history = vec![Message {
        id: "u1".into(),
        role: Role::User,
        content: vec![ContentBlock::Image { attachment: image }],
        source: MessageSource::User,
    }];
    let failure = call_failure(&adapter_for(&provider), request_with(VISION, None, history)).await;
    assert!(failure.message.contains(RED_ID), "{}", failure.message);
    assert!(provider.requests().is_empty());
}
