//! Tool approvals answered from the web UI (docs/web.md, "Approvals": allow once / reject, logged).
//!
//! The agent logs `approval/asked {id, toolName, callId, reason, escalation?, choices, rule?}`
//! before it asks; the UI shows the prompt and one button per choice from that event and
//! answers with
//! `POST /api/sessions/:id/approvals/:approval` (see `docs/web.md`); the agent logs
//! `approval/decided`. A question nobody answers waits (a cancelled turn stops the wait);
//! a question whose agent is closed by the server is rejected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh_agent::{Agent, ApprovalDecision, ApprovalRequest, Approver};
use dsh_llm::LockExt;
use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// The approver of one live session: questions wait for an answer through the API.
#[derive(Default)]
pub struct WebApprover {
    waiting: Mutex<HashMap<String, oneshot::Sender<ApprovalDecision>>>,
}

impl WebApprover {
    /// Answers question `id`. Returns false when no such question is waiting.
    pub fn answer(&self, id: &str, decision: ApprovalDecision) -> bool {
        let sender = self.waiting.lock_or_recover().remove(id);
        // A receiver that is gone means the turn was cancelled meanwhile: nothing to answer.
        sender.is_some_and(|sender| sender.send(decision).is_ok())
    }

    /// Ids of the questions waiting for an answer.
    pub fn waiting(&self) -> Vec<String> {
        self.waiting
            .lock_or_recover()
            .iter()
            .filter(|(_, sender)| !sender.is_closed())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl Approver for WebApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        let (sender, receiver) = oneshot::channel();
        let mut waiting = self.waiting.lock_or_recover();
        // Questions of cancelled turns stopped waiting: forget them.
        waiting.retain(|_, sender| !sender.is_closed());
        waiting.insert(request.id.clone(), sender);
        drop(waiting);
        Box::pin(async move {
            receiver.await.unwrap_or(ApprovalDecision::Reject {
                message: "the web UI closed this session before the user answered".to_string(),
            })
        })
    }
}

/// Makes `approver` answer the agent's questions.
pub(crate) fn install(agent: &mut Agent, approver: Arc<WebApprover>) {
    agent.set_approver(approver);
}
