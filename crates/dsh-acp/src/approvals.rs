//! Approval questions of the session's broker (`dsh_protocol::Interactions`) sent to the ACP
//! client as `session/request_permission`; the client's choice is the answer
//! ([`crate::broker`] submits it as `Op::Approve`).

use dsh_agent::{ApprovalChoice, ApprovalDecision, ApprovalRequest};
use serde_json::{json, Value};

use crate::rpc::Outgoing;

/// Option id of "allow this call once" (kind `allow_once`).
pub const ALLOW_ONCE: &str = "allow_once";
/// Option id of "allow this and the calls the rule covers for this ACP session" (kind
/// `allow_always`: ACP has no session kind; the option's name says it is for the session).
pub const ALLOW_SESSION: &str = "allow_session";
/// Option id of "always allow": the rule is remembered in `$DSH_HOME/approvals.json` (kind
/// `allow_always`).
pub const ALLOW_ALWAYS: &str = "allow_always";
/// Option id of "reject this call".
pub const REJECT_ONCE: &str = "reject_once";

/// The request's params; `tool` is the tool's title (its presentation, e.g. `server · tool`
/// for an MCP tool).
fn params(session_id: &str, tool: &str, request: &ApprovalRequest) -> Value {
    let raw_input: Value = serde_json::from_str(&request.arguments)
        .unwrap_or_else(|_| Value::String(request.arguments.clone()));
    json!({
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": request.call_id,
            "title": format!("{tool}: {}", request.reason),
            "status": "pending",
            "rawInput": raw_input,
        },
        "options": options(request),
    })
}

/// One permission option per choice the request offers.
fn options(request: &ApprovalRequest) -> Vec<Value> {
    let rule = request
        .rule
        .as_ref()
        .map(|r| r.describe())
        .unwrap_or_default();
    request
        .choices
        .iter()
        .map(|choice| match choice {
            ApprovalChoice::AllowOnce => {
                json!({"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"})
            }
            ApprovalChoice::AllowSession => json!({
                "optionId": ALLOW_SESSION,
                "name": format!("Allow for this session: {rule}"),
                "kind": "allow_always",
            }),
            ApprovalChoice::AllowAlways => json!({
                "optionId": ALLOW_ALWAYS,
                "name": format!("Always allow: {rule}"),
                "kind": "allow_always",
            }),
            ApprovalChoice::Reject => {
                json!({"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"})
            }
        })
        .collect()
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
        // The loop honours these only when it offered them (else: allow once).
        Some(ALLOW_SESSION) => ApprovalDecision::AllowSession,
        Some(ALLOW_ALWAYS) => ApprovalDecision::AllowAlways,
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

/// Asks the client about `request`, a call of the tool titled `tool` (one option per offered
/// choice: allow once, for this session, always, reject), and gives the decision its answer
/// stands for. A client that answers `cancelled`, answers with an error or an unknown option
/// rejects the call.
pub(crate) async fn ask(
    out: &Outgoing,
    session_id: &str,
    tool: &str,
    request: &ApprovalRequest,
) -> ApprovalDecision {
    let answer = out
        .request(
            "session/request_permission",
            params(session_id, tool, request),
        )
        .await;
    decision(&request.tool_name, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_offered_choices() {
        let arguments = r#"{"command":"cargo test"}"#;
        let mut request = ApprovalRequest {
            id: "a".into(),
            call_id: "c".into(),
            tool_name: "bash".into(),
            arguments: arguments.into(),
            reason: "r".into(),
            escalation: None,
            choices: vec![
                ApprovalChoice::AllowOnce,
                ApprovalChoice::AllowSession,
                ApprovalChoice::AllowAlways,
                ApprovalChoice::Reject,
            ],
            rule: dsh_agent::proposed_rule("bash", arguments, std::path::Path::new("/"), None),
        };
        let ids: Vec<Value> = options(&request)
            .iter()
            .map(|o| o["optionId"].clone())
            .collect();
        assert_eq!(
            ids,
            vec![
                json!(ALLOW_ONCE),
                json!(ALLOW_SESSION),
                json!(ALLOW_ALWAYS),
                json!(REJECT_ONCE)
            ]
        );
        assert_eq!(
            options(&request)[2]["name"],
            "Always allow: `bash` commands starting with `cargo test`"
        );
        request.choices = vec![ApprovalChoice::AllowOnce, ApprovalChoice::Reject];
        assert_eq!(options(&request).len(), 2);
    }

    #[test]
    fn answers_map_to_decisions() {
        let selected = |id: &str| Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}));
        assert_eq!(
            decision("bash", selected(ALLOW_ONCE)),
            ApprovalDecision::AllowOnce
        );
        assert_eq!(
            decision("bash", selected(ALLOW_SESSION)),
            ApprovalDecision::AllowSession
        );
        assert_eq!(
            decision("bash", selected(ALLOW_ALWAYS)),
            ApprovalDecision::AllowAlways
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
