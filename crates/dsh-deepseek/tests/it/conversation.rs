//! Request translation and reply decoding across a real two-step conversation.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use common::*;
use dsh_deepseek::EMPTY_TOOL_OUTPUT_PLACEHOLDER;
use dsh_llm::{
    BlockType, Chunk, ContentBlock, FinishReason, Message, MessageSource, Purpose, ReasoningEffort,
    Role, Usage,
};
use dsh_test_support::{FakeProvider, RecordedRequest, SseReply, WireUsage};
use serde_json::{json, Value};

const REASONING_1: &str = "The user wants the files listed.";
const REASONING_2: &str = " I will run \"ls\" and read a.txt — ünïcode.";
const ARGS_A: [&str; 3] = [
    "{\"command\":",
    "\"ls -la \\\"dir\\\"\"",
    ",\"description\":\"List é\"}",
];
const ARGS_B: &str = "{\"file_path\":\"a.txt\"}";

fn assistant(blocks: Vec<ContentBlock>) -> Message {
    Message {
        id: "a1".into(),
        role: Role::Assistant,
        content: blocks,
        source: MessageSource::Model {
            provider: "deepseek".into(),
            model: "deepseek-v4-flash".into(),
            extra: Default::default(),
        },
    }
}

fn assert_no_nulls(value: &Value, path: &str) {
    match value {
        Value::Null => panic!("null at {path}"),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_no_nulls(item, &format!("{path}[{i}]"));
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                assert_no_nulls(item, &format!("{path}.{key}"));
            }
        }
        _ => {}
    }
}

async fn body_of(request: dsh_llm::GenerateRequest) -> RecordedRequest {
    let provider = FakeProvider::start([SseReply::new().text("ok").finish("stop", None).into()])
        .await
        .unwrap();
    collect(&adapter_for(&provider), request).await;
    let mut requests = provider.requests();
    assert_eq!(requests.len(), 1);
    requests.remove(0)
}

#[tokio::test]
async fn two_step_conversation_round_trips_reasoning_and_tool_calls_byte_for_byte() {
    let step1 = SseReply::new()
        .reasoning(REASONING_1)
        .reasoning(REASONING_2)
        .tool_call(0, "call_a", "bash", ARGS_A[0])
        .tool_args(0, ARGS_A[1])
        .tool_args(0, ARGS_A[2])
        .tool_call(1, "call_b", "read", ARGS_B)
        .finish(
            "tool_calls",
            Some(WireUsage {
                prompt_tokens: 1200,
                completion_tokens: 80,
                prompt_cache_hit_tokens: 1000,
                reasoning_tokens: 30,
            }),
        );
    let step2 = SseReply::new().text("Done.").finish("stop", None);
    let provider = FakeProvider::start([step1.into(), step2.into()])
        .await
        .unwrap();
    let adapter = adapter_for(&provider);
    let user = Message::user_text("u1", "List the files, then read a.txt.");

    let chunks = collect(
        &adapter,
        request_with(
            "deepseek-v4-flash",
            Some(ReasoningEffort::High),
            vec![user.clone()],
        ),
    )
    .await;
    // Blocks numbered in order of appearance: reasoning 0, call_a 1, call_b 2.
    let starts: Vec<(u32, BlockType)> = chunks
        .iter()
        .filter_map(|c| match c {
            Chunk::BlockStart { index, block_type } => Some((*index, *block_type)),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (0, BlockType::Reasoning),
            (1, BlockType::ToolCall),
            (2, BlockType::ToolCall)
        ]
    );
    let reply = assemble(&chunks);
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    let expected_args_a = ARGS_A.concat();
    assert_eq!(
        reply.blocks,
        vec![
            ContentBlock::Reasoning {
                text: format!("{REASONING_1}{REASONING_2}"),
                signature: None
            },
            ContentBlock::ToolCall {
                id: "call_a".into(),
                name: "bash".into(),
                arguments: expected_args_a.clone()
            },
            ContentBlock::ToolCall {
                id: "call_b".into(),
                name: "read".into(),
                arguments: ARGS_B.into()
            },
        ]
    );

    let results = Message {
        id: "r1".into(),
        role: Role::User,
        content: vec![
            ContentBlock::ToolResult {
                tool_call_id: "call_a".into(),
                content: vec![ContentBlock::text("a.txt\nb.txt")],
                is_error: Some(false),
            },
            ContentBlock::ToolResult {
                tool_call_id: "call_b".into(),
                content: vec![],
                is_error: Some(false),
            },
        ],
        source: MessageSource::User,
    };
    let history = vec![user, assistant(reply.blocks.clone()), results];
    let chunks = collect(
        &adapter,
        request_with("deepseek-v4-flash", Some(ReasoningEffort::High), history),
    )
    .await;
    assert_eq!(assemble(&chunks).blocks, vec![ContentBlock::text("Done.")]);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 5, "{messages:#?}");
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "List the files, then read a.txt."})
    );
    assert_eq!(
        messages[2],
        json!({
            "role": "assistant",
            "content": "",
            "reasoning_content": format!("{REASONING_1}{REASONING_2}"),
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": expected_args_a}},
                {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": ARGS_B}},
            ]
        })
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "a.txt\nb.txt"})
    );
    assert_eq!(
        messages[4],
        json!({"role": "tool", "tool_call_id": "call_b", "content": EMPTY_TOOL_OUTPUT_PLACEHOLDER})
    );
    // Byte for byte: the raw argument string appears JSON-escaped exactly once in the body.
    let escaped = serde_json::to_string(&expected_args_a).unwrap();
    let raw = String::from_utf8(requests[1].raw_body.clone()).unwrap();
    assert_eq!(raw.matches(&escaped).count(), 1);
}

#[tokio::test]
async fn usage_is_mapped_to_disjoint_counts_and_sent_before_finish() {
    let reply = SseReply::new().text("hi").finish(
        "stop",
        Some(WireUsage {
            prompt_tokens: 3000,
            completion_tokens: 50,
            prompt_cache_hit_tokens: 2816,
            reasoning_tokens: 20,
        }),
    );
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    let n = chunks.len();
    assert!(matches!(chunks[n - 3], Chunk::BlockEnd { .. }));
    assert_eq!(
        chunks[n - 2],
        Chunk::Usage {
            usage: Usage {
                input_tokens: 184,
                output_tokens: 50,
                cache_read_tokens: 2816,
                cache_write_tokens: 0,
                reasoning_tokens: 20
            }
        }
    );
}

#[tokio::test]
async fn usage_falls_back_to_openai_cached_tokens_in_a_separate_event() {
    let reply = SseReply::new()
        .text("hi")
        .finish("stop", None)
        .data(r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":60}}}"#);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let usage = assemble(&collect(&adapter_for(&provider), simple_request()).await).usage;
    assert_eq!(
        usage.map(|u| (u.input_tokens, u.cache_read_tokens, u.output_tokens)),
        Some((40, 60, 5))
    );
}

#[tokio::test]
async fn request_body_has_the_s2_1_shape_and_omits_absent_fields() {
    let recorded = body_of(request_with(
        "deepseek-v4-pro",
        Some(ReasoningEffort::Max),
        vec![Message::user_text("u", "hi")],
    ))
    .await;
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/chat/completions");
    assert_eq!(
        recorded.header("authorization"),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    let body = &recorded.body;
    assert_no_nulls(body, "body");
    assert_eq!(
        body,
        &json!({
            "model": "deepseek-v4-pro",
            "messages": [
                {"role": "system", "content": "You are dsh, a coding agent."},
                {"role": "user", "content": "hi"}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "thinking": {"type": "enabled"},
            "reasoning_effort": "max",
            "tools": [{"type": "function", "function": {
                "name": "bash", "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
            }}],
            "max_tokens": 256000
        })
    );
}

#[tokio::test]
async fn effort_off_disables_thinking_and_sends_no_effort() {
    let mut request = request_with(
        "deepseek-v4-flash",
        Some(ReasoningEffort::Off),
        vec![
            Message::user_text("u", "hi"),
            assistant(vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            }]),
        ],
    );
    let mut config = request.config.caller_config();
    config.temperature = Some(0.25);
    config.stop = Some(vec!["END".into()]);
    request.config = config
        .prepare(&dsh_deepseek::model_info("deepseek-v4-flash"))
        .unwrap();
    let body = body_of(request).await.body;
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert!(body.get("reasoning_effort").is_none());
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["stop"], json!(["END"]));
    // No reasoning and thinking off: no reasoning_content at all.
    assert!(body["messages"][2].get("reasoning_content").is_none());
}

#[tokio::test]
async fn thinking_mode_tool_call_turn_without_reasoning_sends_empty_reasoning_content() {
    let body = body_of(request_with(
        "deepseek-v4-flash",
        Some(ReasoningEffort::High),
        vec![
            Message::user_text("u", "hi"),
            assistant(vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            }]),
            Message::tool_result("t", "c1", vec![ContentBlock::text("ok")], false),
        ],
    ))
    .await
    .body;
    assert_eq!(body["messages"][2]["reasoning_content"], json!(""));
    assert_eq!(body["messages"][2]["content"], json!(""));
}

#[tokio::test]
async fn session_title_purpose_runs_with_thinking_disabled() {
    let mut request = request_with(
        "deepseek-v4-flash",
        Some(ReasoningEffort::High),
        vec![Message::user_text("u", "hi")],
    );
    request.purpose = Some(Purpose::SessionTitle);
    let body = body_of(request).await.body;
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert!(body.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn unknown_models_get_no_thinking_field_and_v1_paths_work() {
    let provider = FakeProvider::start([SseReply::new().text("ok").finish("stop", None).into()])
        .await
        .unwrap();
    let mut config = config_for(&provider);
    config.base_url = format!("{}/v1/", provider.base_url());
    let adapter = dsh_deepseek::DeepSeekAdapter::new(config).unwrap();
    collect(
        &adapter,
        request_with(
            "qwen2.5-coder:7b",
            None,
            vec![Message::user_text("u", "hi")],
        ),
    )
    .await;
    let recorded = &provider.requests()[0];
    assert_eq!(recorded.path, "/v1/chat/completions");
    assert!(recorded.body.get("thinking").is_none());
    assert_eq!(recorded.body["max_tokens"], json!(8192));
}

#[tokio::test]
async fn user_message_with_tool_results_and_text_sends_tools_first_and_skips_unknown_blocks() {
    let mixed = Message {
        id: "m".into(),
        role: Role::User,
        content: vec![
            ContentBlock::text("Also note this."),
            ContentBlock::Unknown(json!({"type": "hologram"})),
            ContentBlock::ToolResult {
                tool_call_id: "c1".into(),
                content: vec![ContentBlock::text("one")],
                is_error: Some(true),
            },
            ContentBlock::ToolResult {
                tool_call_id: "c2".into(),
                content: vec![ContentBlock::text("two")],
                is_error: None,
            },
        ],
        source: MessageSource::User,
    };
    let body = body_of(request_with("deepseek-v4-flash", None, vec![mixed]))
        .await
        .body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are dsh, a coding agent."},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
            {"role": "user", "content": "Also note this."}
        ])
    );
}

#[tokio::test]
async fn text_after_reasoning_closes_the_reasoning_block_first() {
    let reply = SseReply::new()
        .reasoning("hm")
        .text("A")
        .text("B")
        .finish("stop", None);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    let kinds: Vec<String> = chunks
        .iter()
        .map(|c| {
            serde_json::to_value(c).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "block-start",
            "reasoning-delta",
            "block-end",
            "block-start",
            "text-delta",
            "text-delta",
            "block-end",
            "finish"
        ]
    );
    assert_eq!(
        chunks[6],
        Chunk::BlockEnd {
            index: 1,
            block: ContentBlock::text("AB")
        }
    );
}
