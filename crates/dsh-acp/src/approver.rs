//! Permission questions of the agent loop sent to the ACP client as
//! `session/request_permission`.

use dsh_agent::{ApprovalDecision, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::rpc::Outgoing;

/// Option id of "allow this call once".
pub const ALLOW_ONCE: &str = "allow_once";
/// Option id of "reject this call".
pub const REJECT_ONCE: &str = "reject_once";

/// Answers the loop's [`ApprovalRequest`]s by asking the client (allow once / reject) and
/// waiting for its choice. A client that answers `cancelled`, answers with an error or an
/// unknown option, or goes away, rejects the call; a cancelled turn stops waiting (the loop
/// drops the future) and the question's late answer is discarded.
pub struct AcpApprover {
    session_id: String,
    out: Outgoing,
}

impl AcpApprover {
    /// An approver for the ACP session `session_id` that asks through `out`.
    pub fn new(session_id: impl Into<String>, out: Outgoing) -> Self {
        AcpApprover {
            session_id: session_id.into(),
            out,
        }
    }
}

fn params(session_id: &str, request: &ApprovalRequest) -> Value {
    let raw_input: Value = serde_json::from_str(&request.arguments)
        .unwrap_or_else(|_| Value::String(request.arguments.clone()));
    json!({
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": request.call_id,
            "title": format!("{}: {}", request.tool_name, request.reason),
            "status": "pending",
            "rawInput": raw_input,
        },
        "options": [
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
        ],
    })
}

/// The decision a client's answer stands for.
fn decision(tool: &str, answer: Result<Value, Value>) -> ApprovalDecision {
    let outcome = answer
        .as_ref()
        .ok()
        .and_then(|result| result.get("outcome"));
    let selected = outcome
        .filter(|o| o.get("outcome").and_then(Value::as_str) == Some("selected"))
        .and_then(|o| o.get("optionId"))
        .and_then(Value::as_str);
    match selected {
        Some(ALLOW_ONCE) => ApprovalDecision::AllowOnce,
        Some(_) => ApprovalDecision::Reject {
            message: format!("the user rejected this `{tool}` call"),
        },
        None => ApprovalDecision::Reject {
            message: format!(
                "the `{tool}` call needed the user's approval and none was given (the request was cancelled or failed)"
            ),
        },
    }
}

impl Approver for AcpApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        let out = self.out.clone();
        let params = params(&self.session_id, &request);
        Box::pin(async move {
            let answer = out.request("session/request_permission", params).await;
            decision(&request.tool_name, answer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allow_once_allows() {
        let selected = |id: &str| Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}));
        assert_eq!(
            decision("bash", selected(ALLOW_ONCE)),
            ApprovalDecision::AllowOnce
        );
        assert!(matches!(
            decision("bash", selected(REJECT_ONCE)),
            ApprovalDecision::Reject { .. }
        ));
        assert!(matches!(
            decision("bash", Ok(json!({"outcome": {"outcome": "cancelled"}}))),
            ApprovalDecision::Reject { .. }
        ));
        assert!(matches!(
            decision("bash", Err(json!({"code": -1}))),
            ApprovalDecision::Reject { .. }
        ));
    }
}
