//! Model arguments are untrusted: any JSON for the opt-in tools (job tools,
//! `ask_user_question`, `web_fetch`) gives a result or a coded error, never a panic.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;

use common::Scratch;
use dsh_tools::{
    job_tools, AskUserQuestionTool, JobTable, PermissionPreset, WebFetchSettings, WebFetchTool,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const KEYS: [&str; 13] = [
    "job_id",
    "wait",
    "timeout_ms",
    "reason",
    "questions",
    "url",
    "id",
    "question",
    "header",
    "options",
    "multi_select",
    "label",
    "description",
];
const TOOLS: [&str; 5] = [
    "ask_user_question",
    "job_kill",
    "job_list",
    "job_output",
    "web_fetch",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        // No `:` so no string is an absolute URL: nothing is fetched.
        "[a-z.*?{}\\[\\]()\\\\ é-]{0,12}".prop_map(Value::String),
        Just(json!("bash-1")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(&KEYS[..]), inner), 0..4).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

fn args() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(&KEYS[..]), value()), 0..6).prop_map(|kv| {
        let map: Map<String, Value> = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Value::Object(map)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_arguments_give_a_result_or_a_coded_error(tool in prop::sample::select(&TOOLS[..]), args in args()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut s = Scratch::new(PermissionPreset::ReadOnly);
        s.ctx = s.ctx.clone().with_jobs(JobTable::new());
        for tool in job_tools() {
            s.registry.register(tool).unwrap();
        }
        s.registry.register(Arc::new(AskUserQuestionTool)).unwrap();
        s.registry.register(Arc::new(WebFetchTool::new(WebFetchSettings::default()))).unwrap();
        let result = runtime.block_on(s.call(tool, args));
        if let Err(err) = result {
            prop_assert!(!err.message.is_empty());
            prop_assert!(err.result_text().starts_with("Error: "));
        }
    }
}
