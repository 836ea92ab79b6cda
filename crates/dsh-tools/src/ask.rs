//! `ask_user_question`: structured questions for the user, answered by the front end.
//!
//! A front end that can ask (TUI, web, ACP) implements [`Asker`] and installs it on the agent
//! (`dsh_agent::Agent::set_asker`, which puts it into the [`ToolContext`]). Without one the
//! [`HeadlessAsker`] answers [`AskOutcome::Unavailable`], which the tool turns into an
//! `UNSUPPORTED` error telling the model to decide on its own.

use std::collections::HashSet;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::parse_args;
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation, ToolView};
use crate::tool::Tool;

/// Most questions in one call.
pub const MAX_QUESTIONS: usize = 8;
/// Most options of one question.
pub const MAX_OPTIONS: usize = 12;
const MAX_TEXT_CHARS: usize = 2_000;

/// One choice offered with a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionOption {
    /// What the user picks (and what the model gets back).
    pub label: String,
    /// What the choice means, if the model explained it.
    pub description: Option<String>,
}

/// One question, validated (non-empty text, unique id, bounded sizes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserQuestion {
    /// Identifies the answer (`q1`, `q2`, ... when the model gave none).
    pub id: String,
    /// The question text.
    pub question: String,
    /// A short label for the question (a tab or chip title), if given.
    pub header: Option<String>,
    /// Choices; empty means a free-text answer. Front ends should still allow free text
    /// ("Other") when options are given.
    pub options: Vec<QuestionOption>,
    /// Several options may be chosen.
    pub multi_select: bool,
}

/// What a front end is asked: every question of one tool call, to show together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionRequest {
    /// The id of the `ask_user_question` call that asks (the `callId` of its `tool/call`
    /// event); empty when the tool runs outside the agent loop (e.g. in unit tests).
    pub call_id: String,
    /// The questions, in the model's order.
    pub questions: Vec<UserQuestion>,
}

/// The user's answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAnswer {
    /// The question's id.
    pub id: String,
    /// Chosen option labels, or the typed text (one entry); empty when skipped.
    pub answers: Vec<String>,
}

/// How asking ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskOutcome {
    /// The user answered (questions not listed count as skipped).
    Answered(Vec<UserAnswer>),
    /// The user dismissed the questions; `message` (possibly empty) is passed to the model.
    Declined {
        /// What the user said, if anything.
        message: String,
    },
    /// Nobody can answer (headless); `reason` is passed to the model.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// Answers questions from the model. Front ends implement it by showing the questions to the
/// user; the future may take as long as the user does (a cancelled turn stops waiting and the
/// call ends `ABORTED`).
pub trait Asker: Send + Sync {
    /// Shows `request` and returns the user's answers.
    fn ask(&self, request: QuestionRequest) -> BoxFuture<'static, AskOutcome>;
}

/// The asker of headless runs: nobody can answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadlessAsker;

impl Asker for HeadlessAsker {
    fn ask(&self, _request: QuestionRequest) -> BoxFuture<'static, AskOutcome> {
        Box::pin(async {
            AskOutcome::Unavailable {
                reason: "this session is headless: no user can answer questions".to_string(),
            }
        })
    }
}

/// The `ask_user_question` tool. See the module docs and `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AskUserQuestionTool;

#[derive(Debug, Deserialize)]
struct Args {
    questions: Vec<RawQuestion>,
}

#[derive(Debug, Deserialize)]
struct RawQuestion {
    #[serde(default)]
    id: Option<String>,
    question: String,
    #[serde(default)]
    header: Option<String>,
    #[serde(default)]
    options: Option<Vec<RawOption>>,
    #[serde(default, alias = "multiSelect")]
    multi_select: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawOption {
    Label(String),
    Full {
        label: String,
        #[serde(default)]
        description: Option<String>,
    },
}

fn bounded(field: &str, text: &str) -> Result<String, ToolError> {
    let text = text.trim();
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(ToolError::invalid_args(format!(
            "{field} is longer than {MAX_TEXT_CHARS} characters"
        )));
    }
    Ok(text.to_string())
}

/// Checks and normalises the model's questions, asked by the call `call_id`.
fn validate(call_id: &str, args: Args) -> Result<QuestionRequest, ToolError> {
    if args.questions.is_empty() || args.questions.len() > MAX_QUESTIONS {
        return Err(ToolError::invalid_args(format!(
            "questions must hold 1 to {MAX_QUESTIONS} questions, got {}",
            args.questions.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut questions = Vec::new();
    for (index, raw) in args.questions.into_iter().enumerate() {
        let at = format!("questions[{index}]");
        let id = match raw.id.as_deref().map(str::trim) {
            Some(id) if !id.is_empty() => bounded(&format!("{at}.id"), id)?,
            _ => format!("q{}", index + 1),
        };
        if !seen.insert(id.clone()) {
            return Err(ToolError::invalid_args(format!(
                "{at}.id `{id}` is used twice; give every question its own id"
            )));
        }
        let question = bounded(&format!("{at}.question"), &raw.question)?;
        if question.is_empty() {
            return Err(ToolError::invalid_args(format!("{at}.question is empty")));
        }
        let header = match raw.header {
            Some(h) if !h.trim().is_empty() => Some(bounded(&format!("{at}.header"), &h)?),
            _ => None,
        };
        let raw_options = raw.options.unwrap_or_default();
        if raw_options.len() > MAX_OPTIONS {
            return Err(ToolError::invalid_args(format!(
                "{at}.options has {} entries; at most {MAX_OPTIONS}",
                raw_options.len()
            )));
        }
        let mut options = Vec::new();
        for (o, option) in raw_options.into_iter().enumerate() {
            let (label, description) = match option {
                RawOption::Label(label) => (label, None),
                RawOption::Full { label, description } => (label, description),
            };
            let label = bounded(&format!("{at}.options[{o}].label"), &label)?;
            if label.is_empty() {
                return Err(ToolError::invalid_args(format!(
                    "{at}.options[{o}].label is empty"
                )));
            }
            let description = match description {
                Some(d) if !d.trim().is_empty() => {
                    Some(bounded(&format!("{at}.options[{o}].description"), &d)?)
                }
                _ => None,
            };
            options.push(QuestionOption { label, description });
        }
        questions.push(UserQuestion {
            id,
            question,
            header,
            options,
            multi_select: raw.multi_select.unwrap_or(false),
        });
    }
    Ok(QuestionRequest {
        call_id: call_id.to_string(),
        questions,
    })
}

fn render_answers(request: &QuestionRequest, answers: &[UserAnswer]) -> (String, Value) {
    let mut text = String::from("The user answered:\n");
    let mut data = serde_json::Map::new();
    for question in &request.questions {
        let given = answers
            .iter()
            .find(|a| a.id == question.id)
            .map(|a| a.answers.clone())
            .unwrap_or_default();
        let shown = if given.is_empty() {
            "(no answer)".to_string()
        } else {
            given.join(", ")
        };
        text.push_str(&format!(
            "- {} ({}): {shown}\n",
            question.question, question.id
        ));
        data.insert(question.id.clone(), json!(given));
    }
    (text.trim_end().to_string(), json!({"answers": data}))
}

impl Tool for AskUserQuestionTool {
    /// The first question's header (or text), and how many more there are.
    fn present(&self, args: &Value) -> ToolPresentation {
        let questions: Vec<&Value> = args
            .get("questions")
            .and_then(Value::as_array)
            .map(|qs| qs.iter().filter(|q| q["question"].is_string()).collect())
            .unwrap_or_default();
        let first = questions.first().map_or("", |q| {
            match q.get("header").and_then(Value::as_str).map(str::trim) {
                Some(header) if !header.is_empty() => header,
                _ => q["question"].as_str().unwrap_or_default().trim(),
            }
        });
        let subject = match questions.len() {
            0 | 1 => first.to_string(),
            n => format!("{first} (+{} more)", n - 1),
        };
        ToolPresentation::new(self.name())
            .subject(subject)
            .view(ToolView::Question)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        if result.error.is_some() {
            return None;
        }
        Some(ResultSummary::new(
            if result.meta_value("answers").is_some() {
                "answered"
            } else {
                "dismissed"
            },
        ))
    }

    fn name(&self) -> &str {
        "ask_user_question"
    }

    fn description(&self) -> &str {
        "Ask the user one or more structured questions and wait for the answers. Use it only when a decision really needs the user (an ambiguous requirement, a choice between approaches with different trade-offs), not for things you can find out yourself. Each question has an `id`, the `question` text, an optional short `header`, optional `options` (each a `label` with an optional `description`; the user may still type another answer) and `multi_select` to allow several options. The result lists each answer as `- <question> (<id>): <answer>`. In a headless session nobody can answer: the call fails with `Error:` and you should proceed with the most reasonable assumption and say which one you made."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "description": "The questions, asked together (1 to 8).",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "Identifier of the question, repeated with its answer."},
                            "question": {"type": "string", "description": "The complete question."},
                            "header": {"type": "string", "description": "A very short label (a few words) shown as the question's title."},
                            "options": {
                                "type": "array",
                                "description": "Choices to offer (at most 12). Omit for a free-text answer.",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "label": {"type": "string", "description": "The choice, short."},
                                        "description": {"type": "string", "description": "What choosing it means."}
                                    },
                                    "required": ["label"]
                                }
                            },
                            "multi_select": {"type": "boolean", "description": "Allow choosing several options."}
                        },
                        "required": ["id", "question"]
                    }
                }
            },
            "required": ["questions"]
        })
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let call_id = ctx.call_id().unwrap_or_default();
            let request = validate(call_id, parse_args("ask_user_question", args)?)?;
            let asked = ctx.asker().ask(request.clone());
            let outcome = tokio::select! {
                outcome = asked => outcome,
                _ = ctx.cancel().cancelled() => {
                    return Err(ToolError::new(ToolErrorCode::Aborted, "the question was cancelled before the user answered"));
                }
            };
            match outcome {
                AskOutcome::Answered(answers) => {
                    let (text, data) = render_answers(&request, &answers);
                    Ok(ToolOutput::text(text)
                        .with_summary(format!(
                            "asked the user {} question(s)",
                            request.questions.len()
                        ))
                        .with_data(data))
                }
                AskOutcome::Declined { message } => {
                    let said = if message.trim().is_empty() {
                        String::new()
                    } else {
                        format!(" They said: {}", message.trim())
                    };
                    Ok(ToolOutput::text(format!(
                        "The user dismissed the questions without answering.{said} Do not ask again right away: continue with the most reasonable assumption and say which one you made."
                    ))
                    .with_summary("the user dismissed the questions"))
                }
                AskOutcome::Unavailable { reason } => Err(ToolError::new(
                    ToolErrorCode::Unsupported,
                    format!(
                        "cannot ask the user: {reason}. Do not ask again: decide yourself with the most reasonable assumption, say which one you made, and continue."
                    ),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_defaults_ids_and_accepts_string_options() {
        let args: Args = serde_json::from_value(json!({"questions": [
            {"question": "Which?", "options": ["a", {"label": "b", "description": "bee"}]},
            {"id": "x", "question": "Free?", "multiSelect": true}
        ]}))
        .unwrap();
        let request = validate("call_1", args).unwrap();
        assert_eq!(request.call_id, "call_1");
        assert_eq!(request.questions[0].id, "q1");
        assert_eq!(
            request.questions[0].options[1].description.as_deref(),
            Some("bee")
        );
        assert!(request.questions[1].multi_select);
    }

    #[test]
    fn validation_refuses_duplicates_and_empties() {
        for bad in [
            json!({"questions": []}),
            json!({"questions": [{"id": "a", "question": "1"}, {"id": "a", "question": "2"}]}),
            json!({"questions": [{"id": "a", "question": "  "}]}),
            json!({"questions": [{"id": "a", "question": "q", "options": [""]}]}),
        ] {
            let args: Args = serde_json::from_value(bad).unwrap();
            assert_eq!(
                validate("", args).unwrap_err().code,
                ToolErrorCode::InvalidArgs
            );
        }
    }
}
