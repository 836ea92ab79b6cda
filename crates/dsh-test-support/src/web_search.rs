//! Non-streaming Anthropic Messages replies for `web_search` (DeepSeek's server tool
//! `web_search_20250305`): a successful search with `server_tool_use`,
//! `web_search_tool_result` and cited text blocks, and the failures the tool must name.
//! Route a reply to one query with [`FakeProvider::answer_search`](crate::FakeProvider::answer_search)
//! (queries of one call run at the same time, so a FIFO script could not pair them).

use serde_json::{json, Value};

use crate::script::{ScriptedReply, SseReply, StreamEnd};

/// One search result the fake search returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    /// `web_search_result.url`.
    pub url: String,
    /// `web_search_result.title`.
    pub title: String,
    /// `web_search_result.page_age`, when set.
    pub page_age: Option<String>,
    /// A citation of the text block (`cited_text`) for this URL, when set.
    pub cited_text: Option<String>,
}

impl SearchHit {
    /// A hit with a title, an excerpt and a page date.
    pub fn new(url: &str, title: &str, cited_text: &str, page_age: &str) -> Self {
        SearchHit {
            url: url.to_string(),
            title: title.to_string(),
            page_age: Some(page_age.to_string()),
            cited_text: Some(cited_text.to_string()),
        }
    }
}

/// Usage written into every fake search reply: 40 input tokens, 12 output tokens.
pub const SEARCH_REPLY_USAGE: (u64, u64) = (40, 12);

fn usage() -> Value {
    json!({
        "input_tokens": SEARCH_REPLY_USAGE.0,
        "output_tokens": SEARCH_REPLY_USAGE.1,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "server_tool_use": {"web_search_requests": 1},
    })
}

/// HTTP 200 with `body` as a Messages reply.
pub fn messages_reply(body: Value) -> ScriptedReply {
    ScriptedReply::Http {
        status: 200,
        headers: Vec::new(),
        body: body.to_string(),
    }
}

/// A successful search for `query`: the model's `server_tool_use`, the
/// `web_search_tool_result` block listing `hits`, and a text block citing each hit that has
/// `cited_text` (as DeepSeek answers).
pub fn search_reply(query: &str, hits: &[SearchHit]) -> ScriptedReply {
    let results: Vec<Value> = hits
        .iter()
        .map(|hit| {
            let mut item = json!({
                "type": "web_search_result",
                "url": hit.url,
                "title": hit.title,
                "encrypted_content": "opaque",
            });
            if let Some(age) = &hit.page_age {
                item["page_age"] = json!(age);
            }
            item
        })
        .collect();
    let citations: Vec<Value> = hits
        .iter()
        .filter_map(|hit| {
            hit.cited_text.as_ref().map(|text| {
                json!({
                    "type": "web_search_result_location",
                    "url": hit.url,
                    "title": hit.title,
                    "cited_text": text,
                    "encrypted_index": "opaque",
                })
            })
        })
        .collect();
    messages_reply(json!({
        "id": "msg_fake_search",
        "type": "message",
        "role": "assistant",
        "model": "deepseek-v4-flash",
        "content": [
            {"type": "text", "text": "I'll search for that."},
            {"type": "server_tool_use", "id": "srvtoolu_fake", "name": "web_search",
             "input": {"query": query}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_fake", "content": results},
            {"type": "text", "text": format!("Found {} sources.", hits.len()), "citations": citations},
        ],
        "stop_reason": "end_turn",
        "usage": usage(),
    }))
}

/// A 200 reply whose model answered in prose (URLs included) without running the search:
/// no `web_search_tool_result` block.
pub fn search_reply_without_results() -> ScriptedReply {
    messages_reply(json!({
        "id": "msg_fake_prose",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text",
                     "text": "You could look at https://prose.example.test/not-a-source for that."}],
        "stop_reason": "end_turn",
        "usage": usage(),
    }))
}

/// HTTP 200 whose body is not JSON.
pub fn malformed_search_reply() -> ScriptedReply {
    ScriptedReply::Http {
        status: 200,
        headers: Vec::new(),
        body: "{\"content\": [ {\"type\": \"web_search_tool_result\"".to_string(),
    }
}

/// HTTP 307 to `location` (the tool must not follow it).
pub fn redirect_reply(location: &str) -> ScriptedReply {
    ScriptedReply::Http {
        status: 307,
        headers: vec![("location".to_string(), location.to_string())],
        body: String::new(),
    }
}

/// HTTP 200 whose body never comes: the connection stays open until the client closes it.
pub fn slow_search_reply() -> ScriptedReply {
    ScriptedReply::Stream(SseReply {
        end: StreamEnd::Stall,
        ..SseReply::default()
    })
}
