//! The one approval broker and question broker of a session.
//!
//! [`Interactions`] is the agent's [`Approver`] and [`Asker`]. What it does with a question is
//! its [`Policy`]: a headless session refuses (nobody can answer, and the model is told how to
//! stay within its preset); an interactive one keeps the question waiting until a front end
//! answers it ([`Interactions::approve`], [`Interactions::answer`]). Front ends only transport:
//! the TUI shows the waiting question and answers from a key, the web answers from
//! `POST .../approvals/:id`, ACP sends `session/request_permission` and answers with the
//! client's choice. What the user is asked, and what happens with the answer (rules
//! remembered, the call escalated, the log written), is the same everywhere.
//!
//! A front end learns of a question from the view events (`ApprovalRequested`,
//! `QuestionAsked`, derived from the log) or, to push it somewhere at once, from
//! [`Interactions::subscribe`]. A question of a cancelled turn stops waiting (the loop drops
//! its future): it is no longer listed, and a late answer is refused as not waiting.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use dsh_agent::{ApprovalDecision, ApprovalRequest, Approver, HeadlessApprover};
use dsh_llm::LockExt;
use dsh_tools::{AskOutcome, Asker, HeadlessAsker, QuestionRequest, UserAnswer};
use futures::future::BoxFuture;
use tokio::sync::{broadcast, oneshot};

/// Most characters of one typed answer.
pub const MAX_ANSWER_CHARS: usize = 10_000;

/// Who can answer the session's questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Nobody: approvals are refused with a message telling the model to stay within its
    /// preset, questions answered "unavailable" (`dsh run`, a headless child).
    Headless,
    /// A user, through a front end: questions wait for an answer.
    Interactive,
}

/// A question waiting for the user, as pushed to [`Interactions::subscribe`]rs.
#[derive(Debug, Clone)]
// Sent once per question a user answers: boxing would buy nothing anyone can measure.
#[allow(clippy::large_enum_variant)]
pub enum Waiting {
    /// A tool call waits for approval.
    Approval(ApprovalRequest),
    /// A tool waits for answers (questions or a plan review).
    Question(QuestionRequest),
}

/// What the user said to a tool's questions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answers by question id.
    Answers(Vec<UserAnswer>),
    /// The questions were dismissed, with a message for the model (possibly empty).
    Decline(String),
}

/// Why an answer could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// Nothing with that id is waiting (answered already, or its turn was cancelled).
    NotWaiting,
    /// The answer does not fit the questions (unknown id, several answers to a single choice).
    Invalid(String),
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::NotWaiting => f.write_str(
                "nothing with that id waits for an answer (it was answered, or its turn was cancelled)",
            ),
            AnswerError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for AnswerError {}

struct PendingApproval {
    request: ApprovalRequest,
    sender: oneshot::Sender<ApprovalDecision>,
}

struct PendingQuestion {
    request: QuestionRequest,
    sender: oneshot::Sender<AskOutcome>,
}

#[derive(Default)]
struct Pending {
    approvals: Vec<PendingApproval>,
    questions: Vec<PendingQuestion>,
}

impl Pending {
    /// Forgets questions whose asker stopped waiting (a cancelled turn).
    fn prune(&mut self) {
        self.approvals.retain(|p| !p.sender.is_closed());
        self.questions.retain(|p| !p.sender.is_closed());
    }

    /// Where the questions of tool call `call_id` wait (after pruning).
    fn question(&mut self, call_id: &str) -> Result<usize, AnswerError> {
        self.prune();
        self.questions
            .iter()
            .position(|p| p.request.call_id == call_id)
            .ok_or(AnswerError::NotWaiting)
    }
}

/// The session's approval and question broker (see the module docs). Cheap to clone; clones
/// share the waiting questions.
#[derive(Clone)]
pub struct Interactions {
    policy: Policy,
    pending: Arc<Mutex<Pending>>,
    waiting: broadcast::Sender<Waiting>,
}

impl std::fmt::Debug for Interactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interactions")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Interactions {
    /// A broker under `policy`.
    pub fn new(policy: Policy) -> Self {
        Interactions {
            policy,
            pending: Arc::default(),
            waiting: broadcast::channel(64).0,
        }
    }

    /// The broker of a headless session.
    pub fn headless() -> Self {
        Interactions::new(Policy::Headless)
    }

    /// The broker of a session a user answers.
    pub fn interactive() -> Self {
        Interactions::new(Policy::Interactive)
    }

    /// Its policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Every question asked from now on, as it starts waiting (for transports that push:
    /// the TUI, ACP). Lagging receivers miss questions; [`Interactions::waiting`] lists them.
    pub fn subscribe(&self) -> broadcast::Receiver<Waiting> {
        self.waiting.subscribe()
    }

    /// The questions waiting now, approvals first, each in the order asked.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut pending = self.pending.lock_or_recover();
        pending.prune();
        pending
            .approvals
            .iter()
            .map(|p| Waiting::Approval(p.request.clone()))
            .chain(
                pending
                    .questions
                    .iter()
                    .map(|p| Waiting::Question(p.request.clone())),
            )
            .collect()
    }

    /// True when the approval question `id` waits.
    pub fn approval_waits(&self, id: &str) -> bool {
        let mut pending = self.pending.lock_or_recover();
        pending.prune();
        pending.approvals.iter().any(|p| p.request.id == id)
    }

    /// True when the questions of tool call `call_id` wait.
    pub fn question_waits(&self, call_id: &str) -> bool {
        let mut pending = self.pending.lock_or_recover();
        pending.prune();
        pending
            .questions
            .iter()
            .any(|p| p.request.call_id == call_id)
    }

    /// Answers approval question `id`.
    pub fn approve(&self, id: &str, decision: ApprovalDecision) -> Result<(), AnswerError> {
        let mut pending = self.pending.lock_or_recover();
        pending.prune();
        let index = pending
            .approvals
            .iter()
            .position(|p| p.request.id == id)
            .ok_or(AnswerError::NotWaiting)?;
        let entry = pending.approvals.remove(index);
        entry
            .sender
            .send(decision)
            .map_err(|_| AnswerError::NotWaiting)
    }

    /// Answers the questions of tool call `call_id`; answers are checked against the
    /// questions first (known ids, each once, one choice for a single-choice question,
    /// bounded texts) and an invalid answer leaves the questions waiting.
    pub fn answer(&self, call_id: &str, reply: Reply) -> Result<(), AnswerError> {
        let mut pending = self.pending.lock_or_recover();
        let index = pending.question(call_id)?;
        let outcome = match reply {
            Reply::Answers(answers) => {
                AskOutcome::Answered(check_answers(&pending.questions[index].request, answers)?)
            }
            Reply::Decline(message) => AskOutcome::Declined {
                message: message.trim().to_string(),
            },
        };
        let entry = pending.questions.remove(index);
        entry
            .sender
            .send(outcome)
            .map_err(|_| AnswerError::NotWaiting)
    }

    /// Answers the questions of tool call `call_id` "unavailable": the front end cannot show
    /// them (ACP cannot ask a free-text question, or the editor failed to show it), so the
    /// model is told to decide on its own, as when nobody can answer.
    pub fn unavailable(&self, call_id: &str, reason: &str) -> Result<(), AnswerError> {
        let mut pending = self.pending.lock_or_recover();
        let index = pending.question(call_id)?;
        let entry = pending.questions.remove(index);
        entry
            .sender
            .send(AskOutcome::Unavailable {
                reason: reason.to_string(),
            })
            .map_err(|_| AnswerError::NotWaiting)
    }

    /// Refuses everything waiting (a front end that closes: the web's closed session, a TUI
    /// that quits): approvals are rejected with `why`, questions answered "unavailable".
    pub fn close(&self, why: &str) {
        let mut pending = self.pending.lock_or_recover();
        for approval in pending.approvals.drain(..) {
            let _ = approval.sender.send(ApprovalDecision::Reject {
                message: why.to_string(),
            });
        }
        for question in pending.questions.drain(..) {
            let _ = question.sender.send(AskOutcome::Unavailable {
                reason: why.to_string(),
            });
        }
    }
}

impl Approver for Interactions {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        if self.policy == Policy::Headless {
            return HeadlessApprover.decide(request);
        }
        let (sender, receiver) = oneshot::channel();
        {
            let mut pending = self.pending.lock_or_recover();
            pending.prune();
            pending.approvals.push(PendingApproval {
                request: request.clone(),
                sender,
            });
        }
        let _ = self.waiting.send(Waiting::Approval(request));
        Box::pin(async move {
            receiver.await.unwrap_or(ApprovalDecision::Reject {
                message: "the front end went away before the user answered".to_string(),
            })
        })
    }
}

impl Asker for Interactions {
    fn ask(&self, request: QuestionRequest) -> BoxFuture<'static, AskOutcome> {
        if self.policy == Policy::Headless {
            return HeadlessAsker.ask(request);
        }
        let (sender, receiver) = oneshot::channel();
        {
            let mut pending = self.pending.lock_or_recover();
            pending.prune();
            pending.questions.push(PendingQuestion {
                request: request.clone(),
                sender,
            });
        }
        let _ = self.waiting.send(Waiting::Question(request));
        Box::pin(async move {
            receiver.await.unwrap_or(AskOutcome::Unavailable {
                reason: "the front end went away before the user answered".to_string(),
            })
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_agent::ApprovalChoice;
    use dsh_tools::UserQuestion;

    fn approval(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            call_id: format!("call-{id}"),
            tool_name: "bash".into(),
            arguments: r#"{"command":"ls"}"#.into(),
            reason: "outside the preset".into(),
            escalation: None,
            choices: vec![ApprovalChoice::AllowOnce, ApprovalChoice::Reject],
            rule: None,
        }
    }

    fn questions(call_id: &str, multi: bool) -> QuestionRequest {
        QuestionRequest {
            call_id: call_id.into(),
            questions: vec![UserQuestion {
                id: "q1".into(),
                question: "Which?".into(),
                header: None,
                options: vec![],
                multi_select: multi,
            }],
        }
    }

    #[tokio::test]
    async fn an_approval_waits_until_answered_and_is_pushed_to_subscribers() {
        let broker = Interactions::interactive();
        let mut pushed = broker.subscribe();
        let decided = broker.decide(approval("a"));
        assert!(matches!(pushed.recv().await, Ok(Waiting::Approval(r)) if r.id == "a"));
        assert!(broker.approval_waits("a"));
        assert_eq!(
            broker.approve("b", ApprovalDecision::AllowOnce),
            Err(AnswerError::NotWaiting)
        );
        broker.approve("a", ApprovalDecision::AllowOnce).unwrap();
        assert_eq!(decided.await, ApprovalDecision::AllowOnce);
        assert!(broker.waiting().is_empty());
        // Answered once: a second answer finds nothing.
        assert_eq!(
            broker.approve("a", ApprovalDecision::AllowOnce),
            Err(AnswerError::NotWaiting)
        );
    }

    #[tokio::test]
    async fn headless_refuses_without_waiting() {
        let broker = Interactions::headless();
        let decision = broker.decide(approval("a")).await;
        assert!(
            matches!(&decision, ApprovalDecision::Reject { message } if message.contains("headless")),
            "{decision:?}"
        );
        assert!(matches!(
            broker.ask(questions("c", false)).await,
            AskOutcome::Unavailable { .. }
        ));
        assert!(broker.waiting().is_empty());
    }

    #[tokio::test]
    async fn a_dropped_question_stops_waiting_and_refuses_a_late_answer() {
        let broker = Interactions::interactive();
        drop(broker.decide(approval("a")));
        drop(broker.ask(questions("c", false)));
        assert!(broker.waiting().is_empty());
        assert_eq!(
            broker.approve("a", ApprovalDecision::AllowOnce),
            Err(AnswerError::NotWaiting)
        );
        assert_eq!(
            broker.answer("c", Reply::Decline(String::new())),
            Err(AnswerError::NotWaiting)
        );
    }

    #[tokio::test]
    async fn answers_are_checked_and_a_bad_one_keeps_the_question_waiting() {
        let broker = Interactions::interactive();
        let asked = broker.ask(questions("c", false));
        let two = Reply::Answers(vec![UserAnswer {
            id: "q1".into(),
            answers: vec!["x".into(), "y".into()],
        }]);
        assert!(
            matches!(broker.answer("c", two), Err(AnswerError::Invalid(why)) if why.contains("one answer"))
        );
        let unknown = Reply::Answers(vec![UserAnswer {
            id: "q9".into(),
            answers: vec!["x".into()],
        }]);
        assert!(matches!(
            broker.answer("c", unknown),
            Err(AnswerError::Invalid(_))
        ));
        assert!(broker.question_waits("c"));
        let good = Reply::Answers(vec![UserAnswer {
            id: "q1".into(),
            answers: vec!["  x ".into(), String::new()],
        }]);
        broker.answer("c", good).unwrap();
        assert_eq!(
            asked.await,
            AskOutcome::Answered(vec![UserAnswer {
                id: "q1".into(),
                answers: vec!["x".into()],
            }])
        );
    }

    #[tokio::test]
    async fn a_question_the_front_end_cannot_show_is_answered_unavailable() {
        let broker = Interactions::interactive();
        let asked = broker.ask(questions("c", false));
        assert_eq!(
            broker.unavailable("x", "cannot show it"),
            Err(AnswerError::NotWaiting)
        );
        broker.unavailable("c", "cannot show it").unwrap();
        assert!(
            matches!(asked.await, AskOutcome::Unavailable { reason } if reason == "cannot show it")
        );
        assert!(!broker.question_waits("c"));
    }

    #[tokio::test]
    async fn close_refuses_everything_waiting() {
        let broker = Interactions::interactive();
        let decided = broker.decide(approval("a"));
        let asked = broker.ask(questions("c", true));
        broker.close("the session was closed");
        assert_eq!(
            decided.await,
            ApprovalDecision::Reject {
                message: "the session was closed".into()
            }
        );
        assert!(
            matches!(asked.await, AskOutcome::Unavailable { reason } if reason == "the session was closed")
        );
    }
}
