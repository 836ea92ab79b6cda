//! OpenAI-compatible quirk switches: an endpoint that rejects a field with 400 works once the
//! switch for that field is off; model listing through `GET /models`.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use dsh_deepseek::{DeepSeekAdapter, MaxTokensField, OpenAiQuirks};
use dsh_llm::{Adapter, ContentBlock, FailureCode, FinishReason, Message, MessageSource, Role};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply};

fn ok_reply() -> ScriptedReply {
    SseReply::new().text("fine").finish("stop", None).into()
}

/// A history whose assistant turn has reasoning, so `reasoning_content` is sent.
fn history_with_reasoning() -> Vec<Message> {
    vec![
        Message::user_text("u1", "hi"),
        Message {
            id: "a1".into(),
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning {
                    text: "think".into(),
                    signature: None,
                },
                ContentBlock::text("hello"),
            ],
            source: MessageSource::Model {
                provider: "deepseek".into(),
                model: "deepseek-v4-flash".into(),
                extra: Default::default(),
            },
        },
        Message::user_text("u2", "again"),
    ]
}

/// Runs one call against an endpoint rejecting `field`, first with default quirks (expect a
/// 400 naming the field) and then with `quirks` (expect success and no such field).
async fn rejected_then_accepted(field: &str, quirks: OpenAiQuirks) -> serde_json::Value {
    let provider = FakeProvider::start([ok_reply()]).await.unwrap();
    provider.reject_field(field);
    let request = || request_with("deepseek-v4-flash", None, history_with_reasoning());

    let strict = adapter_for(&provider);
    let failure = error_failure(&collect(&strict, request()).await);
    assert_eq!(failure.code, FailureCode::InvalidRequest, "{field}");
    assert!(failure.message.contains(field), "{}", failure.message);

    let tolerant = DeepSeekAdapter::new(config_for(&provider).with_quirks(quirks)).unwrap();
    let chunks = collect(&tolerant, request()).await;
    assert_eq!(finish(&chunks), &FinishReason::Stop, "{field}");
    let body = provider.requests().last().unwrap().body.clone();
    assert!(
        !body.to_string().contains(&format!("\"{field}\"")),
        "{body}"
    );
    body
}

#[tokio::test]
async fn send_stream_options_off_drops_stream_options() {
    let quirks = OpenAiQuirks {
        send_stream_options: false,
        ..OpenAiQuirks::default()
    };
    let body = rejected_then_accepted("stream_options", quirks).await;
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn send_reasoning_content_off_drops_reasoning_from_history() {
    let quirks = OpenAiQuirks {
        send_reasoning_content: false,
        ..OpenAiQuirks::default()
    };
    let body = rejected_then_accepted("reasoning_content", quirks).await;
    assert_eq!(body["messages"][2]["content"], "hello");
}

#[tokio::test]
async fn send_thinking_off_drops_thinking() {
    let quirks = OpenAiQuirks {
        send_thinking: false,
        ..OpenAiQuirks::default()
    };
    let body = rejected_then_accepted("thinking", quirks).await;
    assert_eq!(body["reasoning_effort"], "high", "the effort is still sent");
}

#[tokio::test]
async fn send_reasoning_effort_off_drops_the_effort() {
    let provider = FakeProvider::start([ok_reply(), ok_reply()]).await.unwrap();
    provider.reject_field("reasoning_effort");
    let request = || {
        request_with(
            "deepseek-v4-flash",
            Some(dsh_llm::ReasoningEffort::High),
            vec![Message::user_text("u", "q")],
        )
    };
    let failure = error_failure(&collect(&adapter_for(&provider), request()).await);
    assert_eq!(failure.code, FailureCode::InvalidRequest);
    let quirks = OpenAiQuirks {
        send_reasoning_effort: false,
        ..OpenAiQuirks::default()
    };
    let adapter = DeepSeekAdapter::new(config_for(&provider).with_quirks(quirks)).unwrap();
    assert_eq!(
        finish(&collect(&adapter, request()).await),
        &FinishReason::Stop
    );
    assert_eq!(
        provider.requests().last().unwrap().body["thinking"]["type"],
        "enabled"
    );
}

#[tokio::test]
async fn max_tokens_field_can_be_renamed_or_omitted() {
    let quirks = OpenAiQuirks {
        max_tokens_field: MaxTokensField::MaxCompletionTokens,
        ..OpenAiQuirks::default()
    };
    let body = rejected_then_accepted("max_tokens", quirks).await;
    assert_eq!(body["max_completion_tokens"], 256_000);

    let provider = FakeProvider::start([ok_reply()]).await.unwrap();
    let quirks = OpenAiQuirks {
        max_tokens_field: MaxTokensField::Omit,
        ..OpenAiQuirks::default()
    };
    let adapter = DeepSeekAdapter::new(config_for(&provider).with_quirks(quirks)).unwrap();
    collect(&adapter, simple_request()).await;
    let body = &provider.requests()[0].body;
    assert!(body.get("max_tokens").is_none() && body.get("max_completion_tokens").is_none());
}

#[tokio::test]
async fn defaults_send_every_field() {
    let provider = FakeProvider::start([ok_reply()]).await.unwrap();
    collect(
        &adapter_for(&provider),
        request_with("deepseek-v4-flash", None, history_with_reasoning()),
    )
    .await;
    let body = &provider.requests()[0].body;
    for field in ["stream_options", "thinking", "max_tokens"] {
        assert!(body.get(field).is_some(), "{field}: {body}");
    }
    assert_eq!(body["messages"][2]["reasoning_content"], "think");
}

#[tokio::test]
async fn list_models_reads_get_models_and_merges_the_table() {
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["deepseek-v4-pro", "qwen2.5-coder:7b"]);
    let models = adapter_for(&provider).list_models().await.unwrap();
    assert_eq!(models[0].id, "deepseek-v4-pro");
    assert_eq!(models[0].context_window, 1_000_000);
    assert_eq!(models[1].id, "qwen2.5-coder:7b");
    let request = &provider.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("GET", "/models")
    );
    assert_eq!(
        request.header("authorization"),
        Some(&*format!("Bearer {TEST_KEY}"))
    );

    let failing = FakeProvider::start([]).await.unwrap();
    let failure = adapter_for(&failing).list_models().await.unwrap_err();
    assert_eq!(failure.code, FailureCode::Http(404));
}

#[tokio::test]
async fn the_configured_model_table_is_read_over_the_adapters_models() {
    use dsh_llm::{ModelRow, ModelTable, ReasoningEffort};
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["deepseek-v4-pro", "qwen2.5-coder:7b", "other"]);
    let table: ModelTable = [
        (
            "qwen2.5-coder:7b",
            ModelRow {
                context_window: Some(32_768),
                efforts: Some(vec![ReasoningEffort::Off]),
                ..ModelRow::default()
            },
        ),
        (
            "deepseek-v4-pro",
            ModelRow {
                default_max_tokens: Some(100_000),
                ..ModelRow::default()
            },
        ),
    ]
    .into_iter()
    .collect();
    let adapter = DeepSeekAdapter::new(config_for(&provider).with_models(table)).unwrap();
    let qwen = adapter.model_info("qwen2.5-coder:7b").unwrap();
    assert_eq!(
        (qwen.context_window, qwen.default_max_tokens),
        (32_768, dsh_deepseek::models::GENERIC_DEFAULT_MAX_TOKENS)
    );
    assert_eq!(qwen.efforts, vec![ReasoningEffort::Off]);
    let pro = adapter.model_info("deepseek-v4-pro").unwrap();
    assert_eq!(
        (pro.context_window, pro.default_max_tokens),
        (1_000_000, 100_000)
    );
    assert_eq!(pro.default_effort, Some(ReasoningEffort::High));
    assert_eq!(
        adapter.model_info("other").unwrap(),
        dsh_deepseek::model_info("other")
    );
    let listed = adapter.list_models().await.unwrap();
    assert_eq!(listed, vec![pro, qwen, dsh_deepseek::model_info("other")]);
    // Without a table the adapter's own descriptions stand.
    let plain = adapter_for(&provider)
        .model_info("deepseek-v4-pro")
        .unwrap();
    assert_eq!(plain, dsh_deepseek::model_info("deepseek-v4-pro"));
}

#[tokio::test]
async fn auth_failures_name_the_configured_key_variable() {
    let provider = FakeProvider::start([ScriptedReply::http_error(401, "bad key")])
        .await
        .unwrap();
    let mut config = config_for(&provider);
    config.key_variable = "VLLM_API_KEY".into();
    let failure =
        error_failure(&collect(&DeepSeekAdapter::new(config).unwrap(), simple_request()).await);
    assert_eq!(failure.code, FailureCode::Auth);
    assert!(
        failure.message.contains("VLLM_API_KEY"),
        "{}",
        failure.message
    );
}
