//! Request translation and decoding over loopback: thinking signatures and tool_use ids
//! round-trip byte for byte, cache breakpoints, usage, thinking budgets, role merging.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use dsh_llm::{
    Adapter, ContentBlock, FinishReason, Message, MessageSource, Purpose, ReasoningEffort, Role,
    Usage,
};
use dsh_test_support::{AnthropicReply, AnthropicUsage, FakeProvider};
use serde_json::{json, Value};

/// A signature with every character class a base64 blob can hold.
const SIGNATURE: &str = "EqQBCkgIARABGAIiQL+/9x=Zk3/ab+c0D==";
const TOOL_ID: &str = "toolu_01A09q90qw90lq917835lq9";
/// Argument JSON with odd spacing and key order that a re-serialisation would change.
const ARGS_PIECES: [&str; 3] = ["{\"command\":  ", "\"ls -la\", \"a\"", ": 1 }"];

fn assistant(blocks: Vec<ContentBlock>) -> Message {
    Message {
        id: "a1".into(),
        role: Role::Assistant,
        content: blocks,
        source: MessageSource::Model {
            provider: "anthropic".into(),
            model: MODEL.into(),
            extra: Default::default(),
        },
    }
}

fn cache_breakpoints(body: &Value) -> Vec<String> {
    fn walk(value: &Value, path: String, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if map.contains_key("cache_control") {
                    out.push(path.clone());
                }
                for (k, v) in map {
                    walk(v, format!("{path}.{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    out
}

#[tokio::test]
async fn signatures_and_tool_ids_round_trip_byte_for_byte_across_two_steps() {
    let step1 = AnthropicReply::new()
        .thinking(&["Let me ", "look."], SIGNATURE)
        .text(&["Listing files."])
        .tool_use(TOOL_ID, "bash", &ARGS_PIECES)
        .finish("tool_use", None);
    let step2 = AnthropicReply::new()
        .text(&["Done."])
        .finish("end_turn", None);
    let provider = FakeProvider::start([step1.into(), step2.into()])
        .await
        .unwrap();
    let adapter = adapter_for(&provider);

    let user = Message::user_text("u1", "List files.");
    let chunks = collect(
        &adapter,
        request_with(Some(ReasoningEffort::High), vec![user.clone()]),
    )
    .await;
    assert_eq!(finish(&chunks), &FinishReason::ToolCalls);
    let reply = assemble(&chunks);
    let arguments = ARGS_PIECES.concat();
    assert_eq!(
        reply.blocks,
        vec![
            ContentBlock::Reasoning {
                text: "Let me look.".into(),
                signature: Some(SIGNATURE.into())
            },
            ContentBlock::text("Listing files."),
            ContentBlock::ToolCall {
                id: TOOL_ID.into(),
                name: "bash".into(),
                arguments: arguments.clone()
            },
        ]
    );

    let history = vec![
        user,
        assistant(reply.blocks),
        Message::tool_result("t1", TOOL_ID, vec![ContentBlock::text("a.txt")], false),
    ];
    let chunks = collect(&adapter, request_with(Some(ReasoningEffort::High), history)).await;
    assert_eq!(finish(&chunks), &FinishReason::Stop);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let raw = String::from_utf8(requests[1].raw_body.clone()).unwrap();
    assert!(
        raw.contains(&format!("\"signature\":\"{SIGNATURE}\"")),
        "{raw}"
    );
    assert!(
        raw.contains(&format!("\"input\":{arguments}")),
        "raw arguments: {raw}"
    );
    let body = &requests[1].body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "thinking", "thinking": "Let me look.", "signature": SIGNATURE})
    );
    assert_eq!(messages[1]["content"][2]["type"], "tool_use");
    assert_eq!(messages[1]["content"][2]["id"], TOOL_ID);
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], TOOL_ID);
    assert_eq!(messages[2]["content"][0]["content"], "a.txt");
}

#[tokio::test]
async fn path_headers_and_body_basics() {
    let provider = FakeProvider::start([AnthropicReply::new()
        .text(&["hi"])
        .finish("end_turn", None)
        .into()])
    .await
    .unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_eq!(assemble(&chunks).blocks, vec![ContentBlock::text("hi")]);
    let request = &provider.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(TEST_KEY));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = &request.body;
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 32_000);
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert!(body.get("thinking").is_none(), "no effort, no thinking");
}

#[tokio::test]
async fn cache_breakpoints_end_the_system_tools_prefix_and_the_last_message() {
    let provider = FakeProvider::start([
        AnthropicReply::new()
            .text(&["a"])
            .finish("end_turn", None)
            .into(),
        AnthropicReply::new()
            .text(&["b"])
            .finish("end_turn", None)
            .into(),
    ])
    .await
    .unwrap();
    let adapter = adapter_for(&provider);
    let history = vec![
        Message::user_text("u1", "first"),
        assistant(vec![ContentBlock::text("reply")]),
        Message::user_text("u2", "second"),
    ];
    collect(&adapter, request_with(None, history.clone())).await;
    let mut no_system = request_with(None, history);
    no_system.system.clear();
    collect(&adapter, no_system).await;

    let requests = provider.requests();
    assert_eq!(
        cache_breakpoints(&requests[0].body),
        vec![
            ".messages[2].content[0]".to_string(),
            ".system[0]".to_string()
        ]
    );
    assert_eq!(
        requests[0].body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        cache_breakpoints(&requests[1].body),
        vec![
            ".messages[2].content[0]".to_string(),
            ".tools[1]".to_string()
        ]
    );
}

#[tokio::test]
async fn usage_is_disjoint_with_cache_reads_and_writes() {
    let start = AnthropicUsage {
        input_tokens: 120,
        output_tokens: 1,
        cache_read_input_tokens: 2_000,
        cache_creation_input_tokens: 300,
    };
    let end = AnthropicUsage {
        output_tokens: 57,
        ..start
    };
    let reply = AnthropicReply::with_start_usage(start)
        .text(&["x"])
        .finish("end_turn", Some(end));
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    assert_eq!(
        assemble(&chunks).usage,
        Some(Usage {
            input_tokens: 120,
            output_tokens: 57,
            cache_read_tokens: 2_000,
            cache_write_tokens: 300,
            reasoning_tokens: 0,
        })
    );
}

#[tokio::test]
async fn efforts_map_to_thinking_budgets_and_drop_temperature() {
    let replies = (0..4).map(|_| {
        AnthropicReply::new()
            .text(&["x"])
            .finish("end_turn", None)
            .into()
    });
    let provider = FakeProvider::start(replies).await.unwrap();
    let adapter = adapter_for(&provider);
    let user = || vec![Message::user_text("u", "q")];

    let mut high = request_with(Some(ReasoningEffort::High), user());
    let mut config = high.config.caller_config();
    config.temperature = Some(0.3);
    high.config = config.prepare(&dsh_anthropic::model_info(MODEL)).unwrap();
    collect(&adapter, high).await;

    let mut off = request_with(Some(ReasoningEffort::Off), user());
    let mut config = off.config.caller_config();
    config.temperature = Some(0.3);
    off.config = config.prepare(&dsh_anthropic::model_info(MODEL)).unwrap();
    collect(&adapter, off).await;

    let mut small = request_with(Some(ReasoningEffort::Max), user());
    let mut config = small.config.caller_config();
    config.max_tokens = Some(4_000);
    small.config = config.prepare(&dsh_anthropic::model_info(MODEL)).unwrap();
    collect(&adapter, small).await;

    let mut title = request_with(Some(ReasoningEffort::High), user());
    title.purpose = Some(Purpose::SessionTitle);
    collect(&adapter, title).await;

    let bodies: Vec<Value> = provider.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 16_384})
    );
    assert!(bodies[0].get("temperature").is_none());
    assert!(bodies[1].get("thinking").is_none());
    assert_eq!(bodies[1]["temperature"], 0.3);
    assert_eq!(
        bodies[2]["thinking"]["budget_tokens"], 3_999,
        "capped below max_tokens"
    );
    assert!(
        bodies[3].get("thinking").is_none(),
        "titles run without thinking"
    );
}

#[tokio::test]
async fn tool_results_merge_into_one_user_turn_and_unsigned_reasoning_is_dropped() {
    let provider = FakeProvider::start([AnthropicReply::new()
        .text(&["ok"])
        .finish("end_turn", None)
        .into()])
    .await
    .unwrap();
    let history = vec![
        Message::user_text("u1", "do two things"),
        assistant(vec![
            ContentBlock::Reasoning {
                text: "from another provider".into(),
                signature: None,
            },
            ContentBlock::Unknown(json!({"type": "redacted_thinking", "data": "opaque=="})),
            ContentBlock::ToolCall {
                id: "t_a".into(),
                name: "bash".into(),
                arguments: String::new(),
            },
            ContentBlock::ToolCall {
                id: "t_b".into(),
                name: "read".into(),
                arguments: "not json".into(),
            },
        ]),
        Message::tool_result("r1", "t_a", vec![], false),
        Message::user_text("steer", "also check README"),
        Message::tool_result("r2", "t_b", vec![ContentBlock::text("no such file")], true),
    ];
    collect(&adapter_for(&provider), request_with(None, history)).await;
    let body = &provider.requests()[0].body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "tool_use", "id": "t_a", "name": "bash", "input": {}},
            {"type": "tool_use", "id": "t_b", "name": "read", "input": {}},
        ])
    );
    let user = &messages[2]["content"];
    assert_eq!(user[0]["tool_use_id"], "t_a");
    assert_eq!(user[0]["content"], "(no output)");
    assert_eq!(user[1]["tool_use_id"], "t_b");
    assert_eq!(user[1]["is_error"], true);
    assert_eq!(user[2]["text"], "also check README");
    assert!(user[2].get("cache_control").is_some());
}

#[tokio::test]
async fn redacted_thinking_is_kept_as_an_unknown_block() {
    let reply = AnthropicReply::new()
        .redacted_thinking("EmwKAhgB==")
        .text(&["answer"])
        .finish("end_turn", None);
    let provider = FakeProvider::start([reply.into()]).await.unwrap();
    let chunks = collect(&adapter_for(&provider), simple_request()).await;
    let blocks = assemble(&chunks).blocks;
    assert_eq!(
        blocks[0],
        ContentBlock::Unknown(json!({"type": "redacted_thinking", "data": "EmwKAhgB=="}))
    );
    assert_eq!(blocks[1], ContentBlock::text("answer"));
}

#[tokio::test]
async fn list_models_reads_the_models_endpoint() {
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["claude-opus-4-1", "claude-sonnet-4-5"]);
    let adapter = adapter_for(&provider);
    let models = adapter.list_models().await.unwrap();
    let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["claude-opus-4-1", "claude-sonnet-4-5"]);
    let request = &provider.requests()[0];
    assert_eq!(request.path, "/v1/models");
    assert_eq!(request.header("x-api-key"), Some(TEST_KEY));
}

#[tokio::test]
async fn the_configured_model_table_is_read_over_the_generic_description() {
    use dsh_llm::{ModelRow, ModelTable, ReasoningEffort};
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["claude-opus-4-1", "claude-sonnet-4-5"]);
    let table: ModelTable = [(
        "claude-opus-4-1",
        ModelRow {
            context_window: Some(1_000_000),
            efforts: Some(vec![ReasoningEffort::Off, ReasoningEffort::High]),
            ..ModelRow::default()
        },
    )]
    .into_iter()
    .collect();
    let adapter =
        dsh_anthropic::AnthropicAdapter::new(config_for(&provider).with_models(table)).unwrap();
    let generic = dsh_anthropic::model_info("claude-opus-4-1");
    let opus = adapter.model_info("claude-opus-4-1").unwrap();
    assert_eq!(opus.context_window, 1_000_000);
    assert_eq!(
        opus.efforts,
        vec![ReasoningEffort::Off, ReasoningEffort::High]
    );
    // What the row leaves out stays the adapter's own.
    assert_eq!(opus.default_max_tokens, generic.default_max_tokens);
    assert_eq!(opus.default_effort, generic.default_effort);
    assert_eq!(
        adapter.model_info("claude-sonnet-4-5").unwrap(),
        dsh_anthropic::model_info("claude-sonnet-4-5")
    );
    let listed = adapter.list_models().await.unwrap();
    assert_eq!(listed[0], opus);
    assert_eq!(listed[1], dsh_anthropic::model_info("claude-sonnet-4-5"));
}

/// A session's steps through the adapter (and a clone of it, which shares the history bytes
/// cache) send bodies byte for byte equal to the plain translation of the same request, while
/// the history grows, merges into the last user turn and moves the last breakpoint.
#[tokio::test]
async fn a_sessions_cached_steps_send_the_plain_translation_byte_for_byte() {
    let replies = (0..4).map(|_| {
        AnthropicReply::new()
            .text(&["ok"])
            .finish("end_turn", None)
            .into()
    });
    let provider = FakeProvider::start(replies).await.unwrap();
    let adapter = adapter_for(&provider);
    let lineage = dsh_llm::HistoryLineage::new();
    let call = ContentBlock::ToolCall {
        id: TOOL_ID.into(),
        name: "bash".into(),
        arguments: ARGS_PIECES.concat(),
    };
    let mut history = vec![Message::user_text("u1", "List files.")];
    let mut sent = Vec::new();
    for step in 0..4 {
        match step {
            1 => {
                history.push(assistant(vec![
                    ContentBlock::text("Listing."),
                    call.clone(),
                ]));
                history.push(Message::tool_result(
                    "t1",
                    TOOL_ID,
                    vec![ContentBlock::text("a.txt")],
                    false,
                ));
            }
            // Same role as the last message: merges into its wire message.
            2 => history.push(Message::user_text("u2", "And the \"hidden\" ones?")),
            3 => history.push(assistant(vec![ContentBlock::text("Done.")])),
            _ => {}
        }
        let mut request = request_with(Some(ReasoningEffort::High), history.clone());
        request.session_id = Some("session-1".into());
        request.history_lineage = Some(lineage);
        let expected = dsh_anthropic::build_request_body(&request, &Default::default()).unwrap();
        let chunks = collect(&adapter.clone(), request).await;
        assert_eq!(finish(&chunks), &FinishReason::Stop);
        sent.push(expected);
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), sent.len());
    for (step, (request, expected)) in requests.iter().zip(&sent).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(&request.raw_body),
            String::from_utf8_lossy(expected),
            "step {step}"
        );
    }
    // The last breakpoint sits on the last message only.
    let mut breakpoints = cache_breakpoints(&requests[3].body);
    breakpoints.sort();
    assert_eq!(breakpoints, [".messages[3].content[0]", ".system[0]"]);
}
