//! `ask_user_question` answered from the web UI.
//!
//! The agent logs the `tool/call` of `ask_user_question` (and `tool/started`) before the tool
//! runs; the tool then calls this session's [`WebAsker`], which keeps the questions waiting,
//! under the call's id, until `POST /api/sessions/:id/questions/:callId` answers or declines
//! them (see `docs/web.md`). The UI shows the questions from that `tool/call` event for as long
//! as it has no `tool/result`, so a reload or a second tab shows the same pending question.
//! A cancelled turn drops the tool's future and with it the waiting question.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use dsh_agent::{AskOutcome, Asker, QuestionRequest, UserAnswer};
use dsh_llm::{LockExt, MessageSource};
use dsh_session::{Envelope, Event};
use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// The tool whose calls this module answers.
pub(crate) const ASK_TOOL: &str = "ask_user_question";

/// Most characters of one typed answer.
pub(crate) const MAX_ANSWER_CHARS: usize = 10_000;

/// A request the user has not answered yet, and where its answer goes.
struct Waiting {
    request: QuestionRequest,
    sender: oneshot::Sender<AskOutcome>,
}

/// The asker of one live session: questions wait for an answer through the API.
#[derive(Default)]
pub struct WebAsker {
    waiting: Mutex<Vec<Waiting>>,
}

/// Why an answer could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// No question of that call is waiting.
    NotWaiting,
    /// The answer does not fit the questions (unknown id, several answers to a single choice).
    Invalid(String),
}

/// What the user said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answers by question id.
    Answers(Vec<UserAnswer>),
    /// The questions were dismissed, with a message for the model (possibly empty).
    Decline(String),
}

impl WebAsker {
    /// Answers the waiting request of the `ask_user_question` call `call_id`.
    pub fn answer(&self, call_id: &str, reply: Reply) -> Result<(), AnswerError> {
        let mut waiting = self.waiting.lock_or_recover();
        waiting.retain(|w| !w.sender.is_closed());
        let index = waiting
            .iter()
            .position(|w| w.request.call_id == call_id)
            .ok_or(AnswerError::NotWaiting)?;
        let outcome = match reply {
            Reply::Answers(answers) => {
                AskOutcome::Answered(check_answers(&waiting[index].request, answers)?)
            }
            Reply::Decline(message) => AskOutcome::Declined {
                message: message.trim().to_string(),
            },
        };
        let entry = waiting.remove(index);
        // A receiver that is gone means the turn was cancelled meanwhile: nothing to answer.
        entry
            .sender
            .send(outcome)
            .map_err(|_| AnswerError::NotWaiting)
    }

    /// True when the request of the `ask_user_question` call `call_id` is waiting.
    pub fn is_waiting(&self, call_id: &str) -> bool {
        self.waiting
            .lock_or_recover()
            .iter()
            .any(|w| w.request.call_id == call_id && !w.sender.is_closed())
    }
}

impl Asker for WebAsker {
    fn ask(&self, request: QuestionRequest) -> BoxFuture<'static, AskOutcome> {
        let (sender, receiver) = oneshot::channel();
        let mut waiting = self.waiting.lock_or_recover();
        // Questions of cancelled turns stopped waiting: forget them.
        waiting.retain(|w| !w.sender.is_closed());
        waiting.push(Waiting { request, sender });
        drop(waiting);
        Box::pin(async move {
            receiver.await.unwrap_or(AskOutcome::Unavailable {
                reason: "the web UI stopped waiting before the user answered".to_string(),
            })
        })
    }
}

/// Makes `asker` answer the agent's `ask_user_question` calls.
pub(crate) fn install(agent: &mut dsh_agent::Agent, asker: Arc<WebAsker>) {
    agent.set_asker(asker);
}

/// Checks `answers` against `request`: known ids, each once; at most one choice for a
/// single-choice question; bounded, trimmed texts (empty entries dropped).
fn check_answers(
    request: &QuestionRequest,
    answers: Vec<UserAnswer>,
) -> Result<Vec<UserAnswer>, AnswerError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        let Some(question) = request.questions.iter().find(|q| q.id == answer.id) else {
            let ids: Vec<&str> = request.questions.iter().map(|q| q.id.as_str()).collect();
            return Err(AnswerError::Invalid(format!(
                "no question `{}` was asked (the questions are {})",
                answer.id,
                ids.join(", ")
            )));
        };
        if !seen.insert(answer.id.clone()) {
            return Err(AnswerError::Invalid(format!(
                "question `{}` is answered twice",
                answer.id
            )));
        }
        let given: Vec<String> = answer
            .answers
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        if given.iter().any(|a| a.chars().count() > MAX_ANSWER_CHARS) {
            return Err(AnswerError::Invalid(format!(
                "an answer to `{}` is longer than {MAX_ANSWER_CHARS} characters",
                answer.id
            )));
        }
        if given.len() > 1 && !question.multi_select {
            return Err(AnswerError::Invalid(format!(
                "question `{}` takes one answer, got {}",
                answer.id,
                given.len()
            )));
        }
        out.push(UserAnswer {
            id: answer.id,
            answers: given,
        });
    }
    Ok(out)
}

/// The ids of the `ask_user_question` and `exit_plan_mode` calls of `events` that have no result
/// yet, in log order.
pub(crate) fn open_calls(events: &[Arc<Envelope>]) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    for envelope in events {
        match &envelope.event {
            Event::ToolCall(call) => {
                // Call ids may repeat across turns: a new call replaces an older one.
                open.retain(|id| *id != call.call_id);
                // The plan review of `exit_plan_mode` is asked the same way (docs/web.md,
                // "Plan mode").
                if call.name == ASK_TOOL || call.name == dsh_agent::EXIT_PLAN_MODE {
                    open.push(call.call_id.clone());
                }
            }
            Event::ToolResult(result) => {
                if let MessageSource::Tool { call_id } = &result.message.source {
                    open.retain(|id| id != call_id);
                }
            }
            _ => {}
        }
    }
    open
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use dsh_agent::{QuestionOption, UserQuestion};

    /// The questions of the call `call_id`.
    fn request(call_id: &str) -> QuestionRequest {
        QuestionRequest {
            call_id: call_id.into(),
            questions: vec![
                UserQuestion {
                    id: "q1".into(),
                    question: "Which?".into(),
                    header: None,
                    options: vec![
                        QuestionOption {
                            label: "A".into(),
                            description: None,
                        },
                        QuestionOption {
                            label: "B".into(),
                            description: None,
                        },
                    ],
                    multi_select: false,
                },
                UserQuestion {
                    id: "q2".into(),
                    question: "Also?".into(),
                    header: None,
                    options: Vec::new(),
                    multi_select: true,
                },
            ],
        }
    }

    const CALL: &str = "call_1";

    fn answer(id: &str, answers: &[&str]) -> UserAnswer {
        UserAnswer {
            id: id.into(),
            answers: answers.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_matching_question() {
        let asker = WebAsker::default();
        let asked = asker.ask(request(CALL));
        assert!(asker.is_waiting(CALL));
        assert!(!asker.is_waiting("call_2"));
        assert_eq!(
            asker.answer("call_2", Reply::Decline(String::new())),
            Err(AnswerError::NotWaiting)
        );
        assert!(matches!(
            asker.answer(CALL, Reply::Answers(vec![answer("q9", &["A"])])),
            Err(AnswerError::Invalid(_))
        ));
        assert!(matches!(
            asker.answer(CALL, Reply::Answers(vec![answer("q1", &["A", "B"])])),
            Err(AnswerError::Invalid(_))
        ));
        asker
            .answer(
                CALL,
                Reply::Answers(vec![answer("q1", &[" B "]), answer("q2", &["x", "", "y"])]),
            )
            .unwrap();
        assert_eq!(
            asked.await,
            AskOutcome::Answered(vec![answer("q1", &["B"]), answer("q2", &["x", "y"])])
        );
        assert!(!asker.is_waiting(CALL));
    }

    #[tokio::test]
    async fn a_dropped_question_stops_waiting() {
        let asker = WebAsker::default();
        let asked = asker.ask(request(CALL));
        drop(asked);
        assert!(!asker.is_waiting(CALL));
        assert_eq!(
            asker.answer(CALL, Reply::Decline("no".into())),
            Err(AnswerError::NotWaiting)
        );
        let asked = asker.ask(request(CALL));
        asker
            .answer(CALL, Reply::Decline(" later ".into()))
            .unwrap();
        assert_eq!(
            asked.await,
            AskOutcome::Declined {
                message: "later".into()
            }
        );
    }

    #[tokio::test]
    async fn the_same_questions_of_two_calls_are_answered_apart() {
        let asker = WebAsker::default();
        let first = asker.ask(request("call_1"));
        let second = asker.ask(request("call_2"));
        asker
            .answer("call_2", Reply::Decline("second".into()))
            .unwrap();
        assert!(asker.is_waiting("call_1"));
        assert!(!asker.is_waiting("call_2"));
        asker
            .answer("call_1", Reply::Decline("first".into()))
            .unwrap();
        assert_eq!(
            first.await,
            AskOutcome::Declined {
                message: "first".into()
            }
        );
        assert_eq!(
            second.await,
            AskOutcome::Declined {
                message: "second".into()
            }
        );
    }
}
