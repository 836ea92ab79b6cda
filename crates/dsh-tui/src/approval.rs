//! The TUI's [`Approver`]: each question goes to the UI, which shows it in place of the
//! composer and answers with one of the offered choices (allow once, for this session, always,
//! reject).

use dsh_agent::{ApprovalDecision, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

/// A question and where its answer goes.
pub type ApprovalQuestion = (ApprovalRequest, oneshot::Sender<ApprovalDecision>);

/// Sends questions to the UI loop and waits for the user's answer.
#[derive(Clone)]
pub struct TuiApprover {
    questions: mpsc::UnboundedSender<ApprovalQuestion>,
}

impl TuiApprover {
    /// An approver that asks through `questions`.
    pub fn new(questions: mpsc::UnboundedSender<ApprovalQuestion>) -> Self {
        TuiApprover { questions }
    }
}

impl Approver for TuiApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        let (respond, answer) = oneshot::channel();
        let sent = self.questions.send((request, respond));
        Box::pin(async move {
            let closed = ApprovalDecision::Reject {
                message: "the terminal UI closed before the user answered".to_string(),
            };
            if sent.is_err() {
                return closed;
            }
            answer.await.unwrap_or(closed)
        })
    }
}
