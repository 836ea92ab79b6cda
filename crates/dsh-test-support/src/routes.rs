//! Replies chosen by request content: [`FakeProvider::route`](crate::FakeProvider::route)
//! serves a route's replies, in order, to the model requests that match it, so concurrent
//! agents (a parent and its subagents) each get their own replies over one provider.

use std::collections::VecDeque;

use serde_json::Value;

use crate::script::ScriptedReply;

/// What a request must contain to take a route's replies. Matching is on text contained, in
/// any of the three wire formats (chat-completions, Messages, Responses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestMatch {
    /// The system prompt contains this text.
    System(String),
    /// The first user message contains this text.
    FirstUser(String),
    /// The last user message (a tool result's text included) contains this text.
    LastUser(String),
    /// Some user-side message's text is exactly this (a subagent's prompt: unlike
    /// `FirstUser`, not matched by a parent whose prompt quotes it).
    UserIs(String),
    /// A tool of this exact name is offered.
    Tool(String),
    /// No tool of this exact name is offered.
    NoTool(String),
    /// Every one of these holds.
    All(Vec<RequestMatch>),
}

impl RequestMatch {
    /// Whether `body` (a model request's JSON) matches.
    pub fn matches(&self, body: &Value) -> bool {
        match self {
            RequestMatch::System(text) => system_text(body).contains(text.as_str()),
            RequestMatch::FirstUser(text) => user_texts(body)
                .first()
                .is_some_and(|t| t.contains(text.as_str())),
            RequestMatch::LastUser(text) => user_texts(body)
                .last()
                .is_some_and(|t| t.contains(text.as_str())),
            RequestMatch::UserIs(text) => user_texts(body).iter().any(|t| t == text),
            RequestMatch::Tool(name) => tool_names(body).iter().any(|n| n == name),
            RequestMatch::NoTool(name) => !tool_names(body).iter().any(|n| n == name),
            RequestMatch::All(all) => all.iter().all(|m| m.matches(body)),
        }
    }
}

/// One route: its matcher and the replies it has left.
pub(crate) struct Route {
    pub(crate) matcher: RequestMatch,
    pub(crate) replies: VecDeque<ScriptedReply>,
}

/// The first route with replies left that matches `body`, which gives up its next reply.
/// Exhausted routes are passed over, so the request falls through to the main script.
pub(crate) fn take_routed(routes: &mut [Route], body: &Value) -> Option<ScriptedReply> {
    routes
        .iter_mut()
        .filter(|route| !route.replies.is_empty())
        .find(|route| route.matcher.matches(body))
        .and_then(|route| route.replies.pop_front())
}

/// The text of a content value: a string, or the text parts of a list of parts/blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|part| {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    text.to_string()
                } else if let Some(inner) = part.get("content") {
                    // Anthropic `tool_result` blocks nest their content.
                    content_text(inner)
                } else {
                    String::new()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn messages(body: &Value) -> Vec<&Value> {
    body.get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
        .map(|list| list.iter().collect())
        .unwrap_or_default()
}

fn system_text(body: &Value) -> String {
    if let Some(system) = body.get("system").or_else(|| body.get("instructions")) {
        return content_text(system);
    }
    messages(body)
        .into_iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Texts of the user-side messages in order (chat-completions `tool` messages count as user
/// side: they are what the model is answering).
fn user_texts(body: &Value) -> Vec<String> {
    messages(body)
        .into_iter()
        .filter(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("user") | Some("tool")
            ) || m.get("type").and_then(Value::as_str) == Some("function_call_output")
        })
        .map(|m| {
            m.get("content")
                .or_else(|| m.get("output"))
                .map(content_text)
                .unwrap_or_default()
        })
        .collect()
}

fn tool_names(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| {
                    tool.pointer("/function/name")
                        .or_else(|| tool.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_chat_completions_and_messages_bodies() {
        let chat = json!({
            "messages": [
                {"role": "system", "content": "You are CHILD"},
                {"role": "user", "content": "first task"},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "content": "tool said hi"}
            ],
            "tools": [{"type": "function", "function": {"name": "bash"}}]
        });
        assert!(RequestMatch::System("CHILD".into()).matches(&chat));
        assert!(RequestMatch::FirstUser("first".into()).matches(&chat));
        assert!(RequestMatch::LastUser("said hi".into()).matches(&chat));
        assert!(RequestMatch::Tool("bash".into()).matches(&chat));
        assert!(!RequestMatch::Tool("read".into()).matches(&chat));
        assert!(RequestMatch::NoTool("read".into()).matches(&chat));
        assert!(!RequestMatch::FirstUser("tool said".into()).matches(&chat));
        assert!(RequestMatch::UserIs("first task".into()).matches(&chat));
        assert!(!RequestMatch::UserIs("first".into()).matches(&chat));
        let messages = json!({
            "system": [{"type": "text", "text": "parent prompt"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "do it"}]},
                {"role": "user", "content": [{"type": "tool_result", "content": [{"type": "text", "text": "done"}]}]}
            ],
            "tools": [{"name": "subagent"}]
        });
        assert!(RequestMatch::System("parent".into()).matches(&messages));
        assert!(RequestMatch::All(vec![
            RequestMatch::FirstUser("do it".into()),
            RequestMatch::LastUser("done".into()),
            RequestMatch::Tool("subagent".into()),
        ])
        .matches(&messages));
        assert!(!RequestMatch::System("child".into()).matches(&messages));
    }

    #[test]
    fn routes_give_replies_in_order_then_fall_through() {
        let mut routes = vec![Route {
            matcher: RequestMatch::FirstUser("child".into()),
            replies: VecDeque::from(vec![
                ScriptedReply::http_error(500, "one"),
                ScriptedReply::http_error(500, "two"),
            ]),
        }];
        let child = json!({"messages": [{"role": "user", "content": "child task"}]});
        let parent = json!({"messages": [{"role": "user", "content": "parent task"}]});
        assert!(take_routed(&mut routes, &parent).is_none());
        let first = take_routed(&mut routes, &child).unwrap();
        assert!(format!("{first:?}").contains("one"));
        let second = take_routed(&mut routes, &child).unwrap();
        assert!(format!("{second:?}").contains("two"));
        assert!(take_routed(&mut routes, &child).is_none(), "exhausted");
    }
}
