//! The block assembler (docs/model-calls.md, "Block assembler"): the one place where streamed
//! chunks become content blocks. Every adapter, the loop and log replay use it, so they all agree
//! on what a stream means.

use crate::block::{BlockType, ContentBlock};
use crate::chunk::{Chunk, FinishReason};
use crate::failure::{Failure, FailureCode};
use crate::usage::Usage;

/// Accumulates the chunks of one reply.
///
/// Rules: blocks come out in the order their index was first seen; a delta for an unseen index
/// opens the block; deltas after that block's end are ignored; tool-call ids and names take the
/// latest non-empty value and argument fragments are concatenated without parsing; the first
/// `block-end` of an index replaces what its deltas built; the last usage and the last finish win;
/// nothing is accepted after a finish.
#[derive(Debug, Default)]
pub struct BlockAssembler {
    slots: Vec<Slot>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

#[derive(Debug)]
struct Slot {
    index: u32,
    state: SlotState,
}

#[derive(Debug)]
enum SlotState {
    Open(Partial),
    Ended(ContentBlock),
}

#[derive(Debug)]
enum Partial {
    Text(String),
    Reasoning(String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// A block announced by `block-start` whose kind takes no deltas (images, results).
    Opaque,
}

/// A chunk that the assembler refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssemblerError {
    /// A chunk came after `finish`.
    #[error("a chunk arrived after the reply's finish")]
    AfterFinish,
}

/// The outcome of one reply.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembledReply {
    /// The completed blocks, in order.
    pub blocks: Vec<ContentBlock>,
    /// The call's token counts, if the stream carried them.
    pub usage: Option<Usage>,
    /// `stop` when the stream carried no finish at all.
    pub finish: FinishReason,
}

impl Partial {
    fn for_type(block_type: BlockType) -> Partial {
        match block_type {
            BlockType::Text => Partial::Text(String::new()),
            BlockType::Reasoning => Partial::Reasoning(String::new()),
            BlockType::ToolCall => Partial::ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            },
            BlockType::Image | BlockType::ToolResult => Partial::Opaque,
        }
    }

    fn into_block(self, index: u32) -> Option<ContentBlock> {
        match self {
            Partial::Text(text) => Some(ContentBlock::Text { text }),
            Partial::Reasoning(text) => Some(ContentBlock::Reasoning {
                text,
                signature: None,
            }),
            Partial::ToolCall {
                id,
                name,
                arguments,
            } => Some(ContentBlock::ToolCall {
                id: if id.is_empty() {
                    format!("call-{index}")
                } else {
                    id
                },
                name,
                arguments,
            }),
            Partial::Opaque => None,
        }
    }
}

impl BlockAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a finish chunk has been accepted.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    fn slot(&mut self, index: u32, open_as: impl FnOnce() -> SlotState) -> &mut SlotState {
        // Replies hold a handful of blocks and deltas mostly hit the newest one, so a reverse
        // linear scan beats a map here.
        let position = match self.slots.iter().rposition(|s| s.index == index) {
            Some(position) => position,
            None => {
                self.slots.push(Slot {
                    index,
                    state: open_as(),
                });
                self.slots.len() - 1
            }
        };
        &mut self.slots[position].state
    }

    /// Takes one chunk.
    pub fn push(&mut self, chunk: &Chunk) -> Result<(), AssemblerError> {
        if self.finish.is_some() {
            return Err(AssemblerError::AfterFinish);
        }
        match chunk {
            Chunk::BlockStart { index, block_type } => {
                let block_type = *block_type;
                self.slot(*index, || SlotState::Open(Partial::for_type(block_type)));
            }
            Chunk::TextDelta { index, text } => {
                let state = self.slot(*index, || SlotState::Open(Partial::Text(String::new())));
                if let SlotState::Open(Partial::Text(acc)) = state {
                    acc.push_str(text);
                }
            }
            Chunk::ReasoningDelta { index, text } => {
                let state = self.slot(*index, || {
                    SlotState::Open(Partial::Reasoning(String::new()))
                });
                if let SlotState::Open(Partial::Reasoning(acc)) = state {
                    acc.push_str(text);
                }
            }
            Chunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let state = self.slot(*index, || {
                    SlotState::Open(Partial::for_type(BlockType::ToolCall))
                });
                if let SlotState::Open(Partial::ToolCall {
                    id: acc_id,
                    name: acc_name,
                    arguments,
                }) = state
                {
                    if !id.is_empty() {
                        acc_id.clone_from(id);
                    }
                    if let Some(name) = name.as_deref().filter(|n| !n.is_empty()) {
                        acc_name.clear();
                        acc_name.push_str(name);
                    }
                    arguments.push_str(arguments_delta);
                }
            }
            Chunk::BlockEnd { index, block } => {
                let state = self.slot(*index, || SlotState::Open(Partial::Opaque));
                if let SlotState::Open(_) = state {
                    *state = SlotState::Ended(block.clone());
                }
            }
            Chunk::Usage { usage } => self.usage = Some(*usage),
            Chunk::Finish { reason } => self.finish = Some(reason.clone()),
        }
        Ok(())
    }

    /// Ends the reply. On `max-tokens` every tool call is dropped: a truncated call never runs.
    /// A stream that ended without its `finish` chunk is an `error {MISSING_FINISH}`, never a
    /// normal stop: exactly one finish ends a reply.
    pub fn finish(self) -> AssembledReply {
        let finish = self.finish.unwrap_or_else(|| FinishReason::Error {
            failure: Failure::new(
                FailureCode::MissingFinish,
                "the reply stream ended without a finish chunk",
            ),
        });
        let drop_tool_calls = matches!(finish, FinishReason::MaxTokens);
        let blocks = self
            .slots
            .into_iter()
            .filter_map(|slot| match slot.state {
                SlotState::Ended(block) => Some(block),
                SlotState::Open(partial) => partial.into_block(slot.index),
            })
            .filter(|block| !(drop_tool_calls && matches!(block, ContentBlock::ToolCall { .. })))
            .collect();
        AssembledReply {
            blocks,
            usage: self.usage,
            finish,
        }
    }

    /// The usage received so far: a reply cancelled or failed before its finish was billed
    /// for it all the same.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// What survives a cancel: the non-blank text and reasoning received so far, in order.
    pub fn interrupted(self) -> Vec<ContentBlock> {
        self.slots
            .into_iter()
            .filter_map(|slot| match slot.state {
                SlotState::Ended(block) => Some(block),
                SlotState::Open(partial) => partial.into_block(slot.index),
            })
            .filter(|block| {
                matches!(
                    block,
                    ContentBlock::Text { .. } | ContentBlock::Reasoning { .. }
                ) && !block.is_blank()
            })
            .collect()
    }
}

impl AssembledReply {
    /// The reply's text blocks, concatenated.
    pub fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// True when the reply holds no content at all (no block, or only blank text).
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(ContentBlock::is_blank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn assemble(chunks: &[Chunk]) -> AssembledReply {
        let mut a = BlockAssembler::new();
        for c in chunks {
            a.push(c).unwrap();
        }
        a.finish()
    }

    fn text(index: u32, t: &str) -> Chunk {
        Chunk::TextDelta {
            index,
            text: t.into(),
        }
    }

    fn call(index: u32, id: &str, name: Option<&str>, args: &str) -> Chunk {
        Chunk::ToolCallDelta {
            index,
            id: id.into(),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        }
    }

    #[test]
    fn interleaved_indices_keep_first_seen_order() {
        let r = assemble(&[
            Chunk::ReasoningDelta {
                index: 0,
                text: "th".into(),
            },
            text(1, "he"),
            Chunk::ReasoningDelta {
                index: 0,
                text: "ink".into(),
            },
            text(1, "llo"),
        ]);
        assert_eq!(
            r.blocks,
            vec![
                ContentBlock::Reasoning {
                    text: "think".into(),
                    signature: None
                },
                ContentBlock::text("hello"),
            ]
        );
        assert!(
            matches!(&r.finish, FinishReason::Error { failure } if failure.code == FailureCode::MissingFinish),
            "a reply without its finish chunk is MISSING_FINISH, not a stop: {:?}",
            r.finish
        );
    }

    #[test]
    fn tool_calls_take_latest_id_and_name_and_concatenate_arguments() {
        let r = assemble(&[
            call(2, "", Some("ba"), "{\"a\""),
            call(2, "id1", Some("bash"), ":1"),
            call(2, "", None, "}"),
            call(3, "", None, "{}"),
        ]);
        assert_eq!(
            r.blocks,
            vec![
                ContentBlock::ToolCall {
                    id: "id1".into(),
                    name: "bash".into(),
                    arguments: "{\"a\":1}".into()
                },
                ContentBlock::ToolCall {
                    id: "call-3".into(),
                    name: "".into(),
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn first_block_end_wins_and_later_deltas_are_ignored() {
        let r = assemble(&[
            text(0, "draft"),
            Chunk::BlockEnd {
                index: 0,
                block: ContentBlock::text("final"),
            },
            text(0, " more"),
            Chunk::BlockEnd {
                index: 0,
                block: ContentBlock::text("other"),
            },
        ]);
        assert_eq!(r.blocks, vec![ContentBlock::text("final")]);
    }

    #[test]
    fn nothing_is_accepted_after_finish() {
        let mut a = BlockAssembler::new();
        a.push(&Chunk::Finish {
            reason: FinishReason::Stop,
        })
        .unwrap();
        assert_eq!(a.push(&text(0, "x")), Err(AssemblerError::AfterFinish));
    }

    #[test]
    fn interrupted_keeps_only_non_blank_text_and_reasoning() {
        let mut a = BlockAssembler::new();
        for c in [
            text(0, "  "),
            Chunk::ReasoningDelta {
                index: 1,
                text: "why".into(),
            },
            call(2, "c", Some("bash"), "{"),
            text(3, "partial"),
        ] {
            a.push(&c).unwrap();
        }
        assert_eq!(
            a.interrupted(),
            vec![
                ContentBlock::Reasoning {
                    text: "why".into(),
                    signature: None
                },
                ContentBlock::text("partial")
            ]
        );
    }

    #[test]
    fn last_usage_and_finish_win() {
        let failure = Failure::new(FailureCode::Server, "x");
        let r = assemble(&[
            Chunk::Usage {
                usage: Usage {
                    input_tokens: 1,
                    ..Usage::default()
                },
            },
            Chunk::Usage {
                usage: Usage {
                    input_tokens: 2,
                    ..Usage::default()
                },
            },
            Chunk::Finish {
                reason: FinishReason::Error {
                    failure: failure.clone(),
                },
            },
        ]);
        assert_eq!(r.usage.map(|u| u.input_tokens), Some(2));
        assert_eq!(r.finish, FinishReason::Error { failure });
    }

    /// One planned block: its kind and the fragments its deltas carry.
    #[derive(Debug, Clone)]
    enum Plan {
        Text(Vec<String>),
        Reasoning(Vec<String>),
        Call(String, String, Vec<String>),
    }

    fn plan() -> impl Strategy<Value = Plan> {
        let frags = proptest::collection::vec("[a-z{}\":, ]{0,6}", 1..6);
        prop_oneof![
            frags.clone().prop_map(Plan::Text),
            frags.clone().prop_map(Plan::Reasoning),
            ("[a-z0-9]{1,5}", "[a-z_]{1,6}", frags).prop_map(|(i, n, f)| Plan::Call(i, n, f)),
        ]
    }

    fn deltas(index: u32, plan: &Plan) -> Vec<Chunk> {
        match plan {
            Plan::Text(f) => f.iter().map(|t| text(index, t)).collect(),
            Plan::Reasoning(f) => f
                .iter()
                .map(|t| Chunk::ReasoningDelta {
                    index,
                    text: t.clone(),
                })
                .collect(),
            Plan::Call(id, name, f) => f
                .iter()
                .enumerate()
                .map(|(k, a)| {
                    if k == 0 {
                        call(index, id, Some(name), a)
                    } else {
                        call(index, "", None, a)
                    }
                })
                .collect(),
        }
    }

    fn has_tool_call(reply: &AssembledReply) -> bool {
        reply
            .blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall { .. }))
    }

    fn finish_strategy() -> impl Strategy<Value = FinishReason> {
        prop_oneof![
            Just(FinishReason::Stop),
            Just(FinishReason::ToolCalls),
            Just(FinishReason::MaxTokens),
        ]
    }

    proptest! {
        #[test]
        fn any_interleaving_assembles_to_the_same_blocks(
            plans in proptest::collection::vec(plan(), 1..5),
            picks in proptest::collection::vec(any::<u8>(), 0..200),
            finish in finish_strategy(),
        ) {
            let queues: Vec<Vec<Chunk>> = plans
                .iter()
                .enumerate()
                .map(|(i, p)| deltas(i as u32, p))
                .collect();
            let sequential: Vec<Chunk> = queues.iter().flatten().cloned().collect();

            // Interleave: each block's first delta keeps its relative order (so first-seen order
            // is unchanged); after that, picks choose freely which open block speaks next.
            let mut cursors = vec![0usize; queues.len()];
            let mut interleaved = Vec::new();
            let mut opened = 0usize;
            let mut picks = picks.into_iter();
            loop {
                let live: Vec<usize> = (0..opened)
                    .filter(|&i| cursors[i] < queues[i].len())
                    .collect();
                let can_open = opened < queues.len();
                if live.is_empty() && !can_open {
                    break;
                }
                let choice = picks.next().unwrap_or(0) as usize % (live.len() + usize::from(can_open));
                let i = if choice < live.len() { live[choice] } else { opened += 1; opened - 1 };
                interleaved.push(queues[i][cursors[i]].clone());
                cursors[i] += 1;
            }

            let end = Chunk::Finish { reason: finish.clone() };
            let mut a = sequential.clone();
            a.push(end.clone());
            let mut b = interleaved;
            b.push(end);
            let left = assemble(&a);
            let right = assemble(&b);
            prop_assert_eq!(&left, &right);
            if finish == FinishReason::MaxTokens {
                prop_assert!(!has_tool_call(&left), "max-tokens reply kept a tool call");
            } else {
                let calls = plans.iter().filter(|p| matches!(p, Plan::Call(..))).count();
                let got = left.blocks.iter().filter(|b| matches!(b, ContentBlock::ToolCall { .. })).count();
                prop_assert_eq!(calls, got);
            }
        }

        #[test]
        fn max_tokens_never_yields_a_tool_call(
            plans in proptest::collection::vec(plan(), 0..5),
            ended in any::<bool>(),
        ) {
            let mut chunks: Vec<Chunk> = Vec::new();
            for (i, p) in plans.iter().enumerate() {
                chunks.extend(deltas(i as u32, p));
                if ended {
                    if let Plan::Call(id, name, f) = p {
                        chunks.push(Chunk::BlockEnd { index: i as u32, block: ContentBlock::ToolCall {
                            id: id.clone(), name: name.clone(), arguments: f.concat() } });
                    }
                }
            }
            chunks.push(Chunk::Finish { reason: FinishReason::MaxTokens });
            let r = assemble(&chunks);
            prop_assert!(!has_tool_call(&r), "max-tokens reply kept a tool call");
        }

        #[test]
        fn nothing_after_finish_is_accepted(
            plans in proptest::collection::vec(plan(), 1..4),
            finish in finish_strategy(),
        ) {
            let mut a = BlockAssembler::new();
            a.push(&Chunk::Finish { reason: finish }).unwrap();
            for (i, p) in plans.iter().enumerate() {
                for c in deltas(i as u32, p) {
                    prop_assert_eq!(a.push(&c), Err(AssemblerError::AfterFinish));
                }
            }
            prop_assert!(a.finish().blocks.is_empty());
        }
    }
}
