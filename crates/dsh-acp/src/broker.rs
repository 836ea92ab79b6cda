//! The transport of a session's approval and question broker (`dsh_protocol::Interactions`,
//! docs/protocol.md, "Approvals and questions"). The agent's approver and asker is the broker;
//! this task takes each question as it starts waiting, asks the client
//! ([`crate::approvals`], [`crate::questions`]) and answers the broker through the session's
//! `SessionControl` (`Op::Approve`, `Op::Answer`). What an answer does (rules remembered, the
//! call escalated, the log written) and whether it fits the questions is the broker's business.
//!
//! Before each request the session's task forwards every event already published
//! ([`UpdateBarrier`]), so the call's card (status `pending`) reaches the client before the
//! permission request about it (docs/acp.md, "Ordering"). A question whose turn was cancelled
//! meanwhile is not asked; a late answer is refused by the broker and dropped here.

use std::collections::HashSet;

use dsh_agent::AskOutcome;
use dsh_protocol::{Op, OpError, Reply, SessionControl, Waiting};
use tokio::sync::{broadcast, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::rpc::Outgoing;
use crate::session::UpdateBarrier;

/// What the task needs to ask the client and answer the broker.
#[derive(Clone)]
pub(crate) struct Transport {
    pub(crate) control: SessionControl,
    pub(crate) out: Outgoing,
    pub(crate) session_id: String,
    pub(crate) barrier: UpdateBarrier,
    /// The client renders `elicitation/create` forms (the plan review's edits and feedback).
    pub(crate) forms: bool,
}

/// The running transport of one session's broker.
pub(crate) struct Carrier {
    task: JoinHandle<()>,
    stop: oneshot::Sender<()>,
}

impl Carrier {
    /// Stops carrying: open requests are dropped (the session closed its broker, which refused
    /// what waits), and once this returns nothing of the transport holds the session's agent
    /// any more (its log can be opened again, e.g. by a `session/load`).
    pub(crate) async fn stop(self) {
        // An Err: the task ended already.
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Subscribes to the broker now (before any turn can ask) and starts the task that carries its
/// questions to the client, until [`Carrier::stop`].
pub(crate) fn spawn(transport: Transport) -> Carrier {
    let waiting = transport.control.interactions().subscribe();
    let (stop, stopped) = oneshot::channel();
    Carrier {
        task: tokio::spawn(run(transport, waiting, stopped)),
        stop,
    }
}

/// A key per question: approvals by id, tool questions by call.
fn key(waiting: &Waiting) -> String {
    match waiting {
        Waiting::Approval(request) => format!("approval {}", request.id),
        Waiting::Question(request) => format!("question {}", request.call_id),
    }
}

async fn run(
    transport: Transport,
    mut waiting: broadcast::Receiver<Waiting>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut seen = HashSet::new();
    let mut asking = JoinSet::new();
    loop {
        let received = tokio::select! {
            _ = &mut stopped => {
                // Waits until every request's task is gone, with the agent handle it holds.
                asking.shutdown().await;
                return;
            }
            received = waiting.recv() => received,
            Some(_) = asking.join_next() => continue,
        };
        let questions = match received {
            Ok(question) => vec![question],
            // Missed pushes are still listed by the broker.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                transport.control.interactions().waiting()
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        for question in questions {
            if seen.insert(key(&question)) {
                // Questions of parallel calls are asked side by side, as the loop asks them.
                asking.spawn(carry(transport.clone(), question));
            }
        }
    }
}

/// Asks the client one question and answers the broker.
async fn carry(transport: Transport, question: Waiting) {
    transport.barrier.flushed().await;
    let Transport {
        control,
        out,
        session_id,
        forms,
        ..
    } = transport;
    let interactions = control.interactions();
    let answered = match question {
        Waiting::Approval(request) => {
            if !interactions.approval_waits(&request.id) {
                return;
            }
            // The tool as it presents itself, as on the call's card.
            let tool = control
                .handle()
                .tools()
                .present(&request.tool_name, &request.arguments)
                .title;
            let decision = crate::approvals::ask(&out, &session_id, &tool, &request).await;
            control.submit(Op::Approve {
                id: request.id,
                decision,
            })
        }
        Waiting::Question(request) => {
            if !interactions.question_waits(&request.call_id) {
                return;
            }
            let outcome = crate::questions::ask(&out, &session_id, &request, forms).await;
            answer(&control, &request.call_id, outcome)
        }
    };
    match answered {
        Ok(_) => {}
        // The turn was cancelled (or the session closed) while the client decided.
        Err(error) if error.code == "NOT_WAITING" => {}
        Err(error) => eprintln!("dsh acp: the client's answer was refused: {error}"),
    }
}

/// Gives the broker what the client's answers stand for. An answer the broker refuses as not
/// fitting the questions (an edited plan over its length limit) declines them with the reason,
/// so the call does not wait for an answer that cannot come.
fn answer(
    control: &SessionControl,
    call_id: &str,
    outcome: AskOutcome,
) -> Result<Vec<String>, OpError> {
    let reply = match outcome {
        AskOutcome::Answered(answers) => Reply::Answers(answers),
        AskOutcome::Declined { message } => Reply::Decline(message),
        AskOutcome::Unavailable { reason } => {
            return control
                .interactions()
                .unavailable(call_id, &reason)
                .map(|()| Vec::new())
                .map_err(OpError::from)
        }
    };
    let submitted = control.submit(Op::Answer {
        call_id: call_id.to_string(),
        reply,
    });
    match submitted {
        Err(error) if error.code == "INVALID_ANSWER" => control.submit(Op::Answer {
            call_id: call_id.to_string(),
            reply: Reply::Decline(format!(
                "the editor's answer could not be used: {}",
                error.message
            )),
        }),
        other => other,
    }
}
