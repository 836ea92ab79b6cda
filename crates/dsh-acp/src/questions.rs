//! `ask_user_question` and the plan review over ACP: the questions the session's broker
//! (`dsh_protocol::Interactions`) holds, shown to the client; [`crate::broker`] answers the
//! broker with what the client chose (`Op::Answer`). The protocol has no question method, so
//! each question that offers options is shown with `session/request_permission`: one
//! permission option per choice plus "Don't answer", attached to the `ask_user_question` tool
//! card. Free-text questions (no options) cannot be shown that way and are not asked.

use dsh_agent::{
    AskOutcome, QuestionRequest, UserAnswer, UserQuestion, APPROVE_LABEL, KEEP_PLANNING_LABEL,
};
use serde_json::{json, Value};

use crate::rpc::Outgoing;

/// Option id of "Don't answer" (the questions are declined).
pub const DECLINE_QUESTION: &str = "decline";

/// Prefix of the option id of a question's choice: `answer-<index>`.
pub const ANSWER_PREFIX: &str = "answer-";

/// What the model is told when no question of a call can be shown.
pub const FREE_TEXT_UNAVAILABLE: &str = "the editor is connected over ACP, which can only offer the user a choice between options; questions without `options` (free-text answers) cannot be shown";

fn params(session_id: &str, call_id: &str, question: &UserQuestion) -> Value {
    let title = match &question.header {
        Some(header) => format!("{header}: {}", question.question),
        None => question.question.clone(),
    };
    let mut lines: Vec<String> = question
        .options
        .iter()
        .filter_map(|o| {
            o.description
                .as_ref()
                .map(|d| format!("- {}: {d}", o.label))
        })
        .collect();
    if question.multi_select {
        lines.push("(Several choices were allowed; pick the one that matters most.)".into());
    }
    let mut tool_call = json!({"toolCallId": call_id, "title": title});
    if !lines.is_empty() {
        tool_call["content"] = json!([{"type": "content",
            "content": {"type": "text", "text": lines.join("\n")}}]);
    }
    let mut options: Vec<Value> = question
        .options
        .iter()
        .enumerate()
        .map(|(i, o)| json!({"optionId": format!("{ANSWER_PREFIX}{i}"), "name": o.label, "kind": "allow_once"}))
        .collect();
    options
        .push(json!({"optionId": DECLINE_QUESTION, "name": "Don't answer", "kind": "reject_once"}));
    json!({"sessionId": session_id, "toolCall": tool_call, "options": options})
}

/// What the client's answer to one question means.
#[derive(Debug, PartialEq)]
enum Choice {
    Picked(String),
    Declined,
    Failed(String),
}

fn choice(question: &UserQuestion, answer: Result<Value, Value>) -> Choice {
    let result = match answer {
        Ok(result) => result,
        Err(error) => {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Choice::Failed(format!(
                "the editor could not show the question ({message})"
            ));
        }
    };
    let outcome = result.get("outcome").unwrap_or(&Value::Null);
    match outcome.get("outcome").and_then(Value::as_str) {
        Some("cancelled") => Choice::Declined,
        Some("selected") => {
            let id = outcome
                .get("optionId")
                .and_then(Value::as_str)
                .unwrap_or("");
            if id == DECLINE_QUESTION {
                return Choice::Declined;
            }
            let picked = id
                .strip_prefix(ANSWER_PREFIX)
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| question.options.get(i));
            match picked {
                Some(option) => Choice::Picked(option.label.clone()),
                None => {
                    Choice::Failed(format!("the editor answered with an unknown option `{id}`"))
                }
            }
        }
        _ => Choice::Failed(format!("the editor's answer has no outcome: {result}")),
    }
}

/// Whether the `initialize` params say the client renders `elicitation/create` forms.
pub(crate) fn elicits_forms(params: &Value) -> bool {
    params
        .pointer("/clientCapabilities/elicitation/form")
        .is_some_and(Value::is_object)
}

/// Option id of the plan review's "Approve with edits" (offered with forms only).
pub(crate) const PLAN_EDIT_OPTION: &str = "plan-edit";

/// The review of `exit_plan_mode` (docs/acp.md, "Plan mode"): one permission request with
/// Approve, Approve with edits (when the client renders forms), Keep planning and Don't
/// answer; the edits and the feedback are asked with an `elicitation/create` form whose text
/// field is prefilled with the plan.
async fn plan_review(
    out: &Outgoing,
    session_id: &str,
    call_id: &str,
    review: &UserQuestion,
    forms: bool,
) -> AskOutcome {
    let mut request = params(session_id, call_id, review);
    if forms {
        if let Some(options) = request["options"].as_array_mut() {
            options.insert(
                1,
                json!({"optionId": PLAN_EDIT_OPTION, "name": "Approve with edits",
                    "kind": "allow_once"}),
            );
        }
    }
    let answer = out.request("session/request_permission", request).await;
    let selected = answer
        .as_ref()
        .ok()
        .and_then(|r| r.pointer("/outcome/optionId"))
        .and_then(Value::as_str);
    let edit = selected == Some(PLAN_EDIT_OPTION)
        && answer
            .as_ref()
            .ok()
            .and_then(|r| r.pointer("/outcome/outcome"))
            == Some(&json!("selected"));
    let label = if edit {
        APPROVE_LABEL.to_string()
    } else {
        match choice(review, answer) {
            Choice::Picked(label) => label,
            Choice::Declined => {
                return AskOutcome::Declined {
                    message: String::new(),
                }
            }
            Choice::Failed(reason) => return AskOutcome::Unavailable { reason },
        }
    };
    let verdict = |extra: Option<String>| review_answers(&review.id, &label, extra);
    if edit {
        return approve_with_edits(out, session_id, call_id, review).await;
    }
    if label == KEEP_PLANNING_LABEL && forms {
        let form = elicit(
            out,
            session_id,
            call_id,
            "What should change in the plan? (optional)",
            json!({"feedback": {"type": "string", "title": "Feedback",
                "description": "Goes to the agent, which revises the plan"}}),
            &[],
        )
        .await;
        let feedback = form.ok().flatten().and_then(|content| {
            content
                .get("feedback")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        return verdict(feedback);
    }
    verdict(None)
}

/// The answers to the review questions: `label` for the review, `extra` (edited plan or
/// feedback) for the free-text question when there is one.
fn review_answers(review_id: &str, label: &str, extra: Option<String>) -> AskOutcome {
    let mut answers = vec![UserAnswer {
        id: review_id.to_string(),
        answers: vec![label.to_string()],
    }];
    if let Some(text) = extra.filter(|t| !t.trim().is_empty()) {
        answers.push(UserAnswer {
            id: dsh_agent::PLAN_EDITS_QUESTION.to_string(),
            answers: vec![text],
        });
    }
    AskOutcome::Answered(answers)
}

/// "Approve with edits": the plan editor as a form prefilled with the plan; the accepted text
/// is the approved plan.
async fn approve_with_edits(
    out: &Outgoing,
    session_id: &str,
    call_id: &str,
    review: &UserQuestion,
) -> AskOutcome {
    let plan = review
        .question
        .split_once("\n\n")
        .map(|(_, plan)| plan)
        .unwrap_or_default();
    let form = elicit(
        out,
        session_id,
        call_id,
        "Edit the plan. Your version replaces the one shown and is what the agent carries out.",
        json!({"plan": {"type": "string", "title": "Plan",
            "description": "The plan as Markdown, starting with a # heading",
            "default": plan}}),
        &["plan"],
    )
    .await;
    match form {
        Ok(Some(content)) => {
            let edited = content
                .get("plan")
                .and_then(Value::as_str)
                .map(str::trim)
                .unwrap_or_default()
                .to_string();
            // An unchanged (or emptied) plan is a plain approval.
            review_answers(
                &review.id,
                APPROVE_LABEL,
                (edited != plan.trim()).then_some(edited),
            )
        }
        // Backing out of the editor dismisses the review: the session stays in plan mode.
        Ok(None) => AskOutcome::Declined {
            message: String::new(),
        },
        Err(reason) => AskOutcome::Declined {
            message: format!("the editor could not show the plan editor: {reason}"),
        },
    }
}

/// Asks the client for a form (`elicitation/create`, mode `form`, tied to the call): the
/// accepted content, `None` when the user declined or cancelled, or why it failed.
async fn elicit(
    out: &Outgoing,
    session_id: &str,
    call_id: &str,
    message: &str,
    properties: Value,
    required: &[&str],
) -> Result<Option<serde_json::Map<String, Value>>, String> {
    let params = json!({
        "sessionId": session_id,
        "toolCallId": call_id,
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    });
    let answer = out
        .request("elicitation/create", params)
        .await
        .map_err(|error| {
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_string()
        })?;
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Ok(Some(
            answer
                .get("content")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        )),
        Some("decline" | "cancel") => Ok(None),
        _ => Err(format!("the editor's answer has no known action: {answer}")),
    }
}

/// Asks the client the questions of `request`, one `session/request_permission` per question
/// with options (a plan review as described at [`plan_review`]), and gives what the answers
/// stand for:
///
/// - the chosen option's label is the answer (one per question: ACP picks a single option,
///   so a `multi_select` question gets one choice);
/// - "Don't answer", or a `cancelled` outcome (the client cancelled the request), declines
///   the whole call: the model is told the user dismissed the questions;
/// - an error answer or an unknown option makes the call `Unavailable` with the reason;
/// - free-text questions are skipped (no answer) when the call also has questions with
///   options, and the call is `Unavailable` when it has only free-text questions.
///
/// The permission request names the `ask_user_question` call (its `toolCallId`), so clients
/// show the choice on that call's card. `forms`: the client renders `elicitation/create`
/// forms (its `clientCapabilities.elicitation.form` at `initialize`); with them the plan
/// review offers "Approve with edits" and asks for feedback (docs/acp.md, "Plan mode").
pub(crate) async fn ask(
    out: &Outgoing,
    session_id: &str,
    request: &QuestionRequest,
    forms: bool,
) -> AskOutcome {
    let call_id = request.call_id.as_str();
    if let Some(review) = request
        .questions
        .first()
        .filter(|q| q.id == dsh_agent::PLAN_REVIEW_QUESTION)
    {
        return plan_review(out, session_id, call_id, review, forms).await;
    }
    if request.questions.iter().all(|q| q.options.is_empty()) {
        return AskOutcome::Unavailable {
            reason: FREE_TEXT_UNAVAILABLE.to_string(),
        };
    }
    let mut answers = Vec::new();
    for question in request.questions.iter().filter(|q| !q.options.is_empty()) {
        let answer = out
            .request(
                "session/request_permission",
                params(session_id, call_id, question),
            )
            .await;
        match choice(question, answer) {
            Choice::Picked(label) => answers.push(UserAnswer {
                id: question.id.clone(),
                answers: vec![label],
            }),
            Choice::Declined => {
                return AskOutcome::Declined {
                    message: String::new(),
                }
            }
            Choice::Failed(reason) => return AskOutcome::Unavailable { reason },
        }
    }
    AskOutcome::Answered(answers)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dsh_agent::QuestionOption;

    fn question() -> UserQuestion {
        UserQuestion {
            id: "db".into(),
            question: "Which database?".into(),
            header: Some("Storage".into()),
            options: vec![
                QuestionOption {
                    label: "SQLite".into(),
                    description: Some("a file".into()),
                },
                QuestionOption {
                    label: "Postgres".into(),
                    description: None,
                },
            ],
            multi_select: false,
        }
    }

    #[test]
    fn options_become_permission_options() {
        let params = params("s1", "call_1", &question());
        assert_eq!(params["toolCall"]["toolCallId"], "call_1");
        assert_eq!(params["toolCall"]["title"], "Storage: Which database?");
        let ids: Vec<&str> = params["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["answer-0", "answer-1", "decline"]);
        assert_eq!(params["options"][1]["name"], "Postgres");
        assert_eq!(params["options"][1]["kind"], "allow_once");
        assert_eq!(params["options"][2]["kind"], "reject_once");
        let text = params["toolCall"]["content"][0]["content"]["text"]
            .as_str()
            .unwrap();
        assert!(text.contains("SQLite: a file"), "{text}");
    }

    #[test]
    fn answers_map_to_labels_declines_and_failures() {
        let q = question();
        let selected = |id: &str| Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}));
        assert_eq!(
            choice(&q, selected("answer-1")),
            Choice::Picked("Postgres".into())
        );
        assert_eq!(choice(&q, selected(DECLINE_QUESTION)), Choice::Declined);
        assert_eq!(
            choice(&q, Ok(json!({"outcome": {"outcome": "cancelled"}}))),
            Choice::Declined
        );
        assert!(matches!(
            choice(&q, selected("answer-7")),
            Choice::Failed(_)
        ));
        assert!(matches!(
            choice(&q, Err(json!({"code": -32601, "message": "nope"}))),
            Choice::Failed(m) if m.contains("nope")
        ));
    }
}
