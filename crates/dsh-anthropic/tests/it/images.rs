//! Images on the Messages wire (docs/providers.md, "Images"), over loopback: base64 image
//! blocks in user turns and inside tool results, and the refusal before any byte for a model the
//! model table does not mark as taking images.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use dsh_llm::{ContentBlock, Message, MessageSource, ModelRow, ModelTable, Role};
use dsh_test_support::{AnthropicReply, FakeProvider};

use dsh_test_support::images::{red_png as red, RED_PNG_BASE64 as RED_PNG};

fn history() -> Vec<Message> {
    vec![
        Message {
            id: "u1".into(),
            role: Role::User,
            content: vec![
                ContentBlock::text("What is this?"),
                ContentBlock::Image { attachment: red() },
            ],
            source: MessageSource::User,
        },
        Message {
            id: "a1".into(),
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall {
                id: "t1".into(),
                name: "read_image".into(),
                arguments: r#"{"file_path":"red.png"}"#.into(),
            }],
            source: MessageSource::Model {
                provider: "anthropic".into(),
                model: MODEL.into(),
                extra: Default::default(),
            },
        },
        Message::tool_result(
            "r1",
            "t1",
            vec![
                ContentBlock::text("image/png image, 1x1 px, 69 bytes"),
                ContentBlock::Image { attachment: red() },
            ],
            false,
        ),
    ]
}

fn vision_adapter(provider: &FakeProvider) -> dsh_anthropic::AnthropicAdapter {
    let table: ModelTable = [(
        MODEL,
        ModelRow {
            input: Some(vec!["text".into(), "image".into()]),
            ..ModelRow::default()
        },
    )]
    .into_iter()
    .collect();
    dsh_anthropic::AnthropicAdapter::new(config_for(provider).with_models(table)).unwrap()
}

#[tokio::test]
async fn images_become_base64_image_blocks_in_user_turns_and_tool_results() {
    let provider = FakeProvider::start([AnthropicReply::new()
        .text(&["ok"])
        .finish("end_turn", None)
        .into()])
    .await
    .unwrap();
    let chunks = collect(&vision_adapter(&provider), request_with(None, history())).await;
    assert_well_formed(&chunks);
    let raw = String::from_utf8(provider.requests()[0].raw_body.clone()).unwrap();
    let image = format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{RED_PNG}"}}}}"#
    );
    let expected = format!(
        concat!(
            r#""messages":[{{"role":"user","content":[{{"type":"text","text":"What is this?"}},{image}]}},"#,
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"read_image","input":{{"file_path":"red.png"}}}}]}},"#,
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":["#,
            r#"{{"type":"text","text":"image/png image, 1x1 px, 69 bytes"}},{image}],"#,
            r#""cache_control":{{"type":"ephemeral"}}}}]}}]"#
        ),
        image = image
    );
    assert!(
        raw.contains(&expected),
        "body:\n{raw}\nexpected to contain:\n{expected}"
    );
}

#[tokio::test]
async fn a_model_without_image_input_refuses_before_sending_anything() {
    let provider = FakeProvider::start([]).await.unwrap();
    let failure = call_failure(&adapter_for(&provider), request_with(None, history())).await;
    assert_eq!(failure.code.as_str(), dsh_llm::UNSUPPORTED_CONTENT);
    assert!(
        failure.message.contains(MODEL)
            && failure.message.contains("input = [\"text\", \"image\"]"),
        "{}",
        failure.message
    );
    assert!(
        provider.requests().is_empty(),
        "nothing may reach the provider"
    );
}
