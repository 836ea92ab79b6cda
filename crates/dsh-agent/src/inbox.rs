//! The inbox (docs/agent.md, "Inbox"): two queues of user-role messages waiting for the loop.
//!
//! `followup` queues for the next turn and wakes the loop; `steer` queues for the next step and
//! wakes it; `inject` queues model-facing context for the next step without waking. At a boundary
//! the loop claims every next-step item and at most one next-turn item. Every change is logged as
//! an `agent/inbox/spliced` event by the caller, so the inbox survives a crash.

use std::collections::VecDeque;

use dsh_llm::Message;

/// Which queue an item waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxTarget {
    /// Delivered when the next turn starts.
    NextTurn,
    /// Delivered at the next step of the running turn (steering).
    NextStep,
}

impl InboxTarget {
    /// The spelling used in `agent/inbox/spliced` events.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxTarget::NextTurn => "next-turn",
            InboxTarget::NextStep => "next-step",
        }
    }
}

/// The two queues.
#[derive(Debug, Default, Clone)]
pub struct Inbox {
    next_turn: VecDeque<Message>,
    next_step: VecDeque<Message>,
}

/// One change to a queue, as logged: at `start`, `removed` items were taken out and `inserted`
/// put in.
#[derive(Debug, Clone, PartialEq)]
pub struct Splice {
    /// The queue that changed.
    pub target: InboxTarget,
    /// Index of the first item changed.
    pub start: usize,
    /// How many items were taken out.
    pub removed: usize,
    /// The items put in at `start`.
    pub inserted: Vec<Message>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    fn queue(&mut self, target: InboxTarget) -> &mut VecDeque<Message> {
        match target {
            InboxTarget::NextTurn => &mut self.next_turn,
            InboxTarget::NextStep => &mut self.next_step,
        }
    }

    /// Appends `message` to `target`, returning the splice to log.
    pub fn push(&mut self, target: InboxTarget, message: Message) -> Splice {
        let queue = self.queue(target);
        let start = queue.len();
        queue.push_back(message.clone());
        Splice {
            target,
            start,
            removed: 0,
            inserted: vec![message],
        }
    }

    /// Re-applies a logged splice (used when a session is resumed). Out-of-range splices are
    /// clamped: a log written by another program must not crash the reader.
    pub fn apply(&mut self, splice: &Splice) {
        let queue = self.queue(splice.target);
        let start = splice.start.min(queue.len());
        let end = (start + splice.removed).min(queue.len());
        queue.drain(start..end);
        for (offset, message) in splice.inserted.iter().enumerate() {
            queue.insert(start + offset, message.clone());
        }
    }

    /// Takes every next-step item and at most one next-turn item (next-turn first), with the
    /// splices to log.
    pub fn claim(&mut self, include_next_turn: bool) -> (Vec<Message>, Vec<Splice>) {
        let mut claimed = Vec::new();
        let mut splices = Vec::new();
        if include_next_turn {
            if let Some(message) = self.next_turn.pop_front() {
                claimed.push(message);
                splices.push(Splice {
                    target: InboxTarget::NextTurn,
                    start: 0,
                    removed: 1,
                    inserted: Vec::new(),
                });
            }
        }
        if !self.next_step.is_empty() {
            let removed = self.next_step.len();
            claimed.extend(self.next_step.drain(..));
            splices.push(Splice {
                target: InboxTarget::NextStep,
                start: 0,
                removed,
                inserted: Vec::new(),
            });
        }
        (claimed, splices)
    }

    /// Empties both queues (cancel without keeping input), with the splices to log.
    pub fn clear(&mut self) -> Vec<Splice> {
        let mut splices = Vec::new();
        for target in [InboxTarget::NextTurn, InboxTarget::NextStep] {
            let queue = self.queue(target);
            if !queue.is_empty() {
                let removed = queue.len();
                queue.clear();
                splices.push(Splice {
                    target,
                    start: 0,
                    removed,
                    inserted: Vec::new(),
                });
            }
        }
        splices
    }

    /// Items waiting for the next step.
    pub fn has_next_step(&self) -> bool {
        !self.next_step.is_empty()
    }

    /// Items waiting for a next turn.
    pub fn has_next_turn(&self) -> bool {
        !self.next_turn.is_empty()
    }

    /// The queued messages, for display: `(next-turn, next-step)`.
    pub fn pending(&self) -> (Vec<Message>, Vec<Message>) {
        (
            self.next_turn.iter().cloned().collect(),
            self.next_step.iter().cloned().collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> Message {
        Message::user_text(text, text)
    }

    #[test]
    fn claim_takes_all_next_step_and_one_next_turn() {
        let mut inbox = Inbox::new();
        inbox.push(InboxTarget::NextTurn, m("a"));
        inbox.push(InboxTarget::NextTurn, m("b"));
        inbox.push(InboxTarget::NextStep, m("s1"));
        inbox.push(InboxTarget::NextStep, m("s2"));
        let (claimed, splices) = inbox.claim(true);
        let ids: Vec<&str> = claimed.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "s1", "s2"]);
        assert_eq!(splices.len(), 2);
        assert!(inbox.has_next_turn());
        assert!(!inbox.has_next_step());
    }

    #[test]
    fn replaying_splices_rebuilds_the_inbox() {
        let mut live = Inbox::new();
        let mut log = vec![
            live.push(InboxTarget::NextTurn, m("a")),
            live.push(InboxTarget::NextTurn, m("b")),
            live.push(InboxTarget::NextStep, m("s")),
        ];
        log.extend(live.claim(true).1);
        let mut replayed = Inbox::new();
        for s in &log {
            replayed.apply(s);
        }
        assert_eq!(replayed.pending(), live.pending());
        let bogus = Splice {
            target: InboxTarget::NextStep,
            start: 99,
            removed: 5,
            inserted: vec![],
        };
        replayed.apply(&bogus);
    }
}
