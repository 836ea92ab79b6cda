//! Per-request prompt-cache report (docs/agent.md, "Context discipline"): how much of the previous
//! request was resent unchanged at the start of this one, and when the new request is not a prefix
//! extension of the previous one, which part broke it.
//!
//! Parts are compared in the order providers render them: call config, system prompt, tool
//! list, then messages in order. Each part is fingerprinted by its serialized JSON, so the report
//! costs one serialization of each *new* message per step (earlier ones are remembered by id).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use dsh_llm::{GenerateRequest, ToolSchema, Usage};
use dsh_session::ModelPrice;
use serde::Serialize;
use serde_json::Value;

/// Name of the logged event (ignorable: readers that do not know it skip it).
pub const CACHE_REPORT_EVENT: &str = "request/cache";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    hash: u64,
    bytes: usize,
}

fn part_of(value: &impl Serialize) -> Part {
    let text = serde_json::to_vec(value).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    Part {
        hash: hasher.finish(),
        bytes: text.len(),
    }
}

/// What a request looked like, part by part.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestShape {
    config: Option<Part>,
    system: Option<Part>,
    tools: Option<Part>,
    messages: Vec<(String, Part)>,
}

/// Where a request stopped being a prefix extension of the previous one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefixBreak {
    /// `config`, `system`, `tools` or `message`.
    pub part: String,
    /// For `message`: the index of the first message that differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

/// The report of one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheReport {
    /// The turn of the request.
    pub turn: u64,
    /// The step of the request within its turn.
    pub step: u64,
    /// Serialized size of config, system, tools and messages.
    pub request_bytes: usize,
    /// Bytes at the start of this request that equal the start of the previous one.
    pub reused_bytes: usize,
    /// True when the previous request is an exact prefix of this one.
    pub prefix_extension: bool,
    /// Set when it is not (and there was a previous request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<PrefixBreak>,
    /// The provider's cache-read share of billed input, once the reply's usage is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_hit_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Prompt tokens the provider read from its cache, once known.
    pub cache_read_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// All prompt tokens billed, cached or not, once known.
    pub billed_input_tokens: Option<u64>,
    /// What the request cost in USD, when the model has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl CacheReport {
    /// The report of a request of `request_bytes` that reuses nothing (yet).
    fn unmatched(turn: u64, step: u64, request_bytes: usize) -> Self {
        CacheReport {
            turn,
            step,
            request_bytes,
            reused_bytes: 0,
            prefix_extension: false,
            broken_at: None,
            cache_hit_ratio: None,
            cache_read_tokens: None,
            billed_input_tokens: None,
            cost_usd: None,
        }
    }

    /// Adds the provider's usage of the reply.
    pub fn with_usage(mut self, usage: Option<&Usage>, price: Option<&ModelPrice>) -> Self {
        if let Some(usage) = usage {
            self.cache_hit_ratio = Some(usage.cache_hit_ratio());
            self.cache_read_tokens = Some(usage.cache_read_tokens);
            self.billed_input_tokens = Some(usage.billed_input());
            self.cost_usd = price.map(|p| p.cost(usage));
        }
        self
    }

    /// The report as event data.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Remembers the previous request of a loop instance.
#[derive(Debug, Default)]
pub struct CacheTracker {
    previous: Option<RequestShape>,
    /// The tool list last fingerprinted: the loop shares one list across the steps where it
    /// does not change, so the same list is not serialized again (docs/PERFORMANCE.md, "Step
    /// 1: fixed costs").
    last_tools: Option<(Arc<Vec<ToolSchema>>, Part)>,
    /// The system prompt last fingerprinted.
    last_system: Option<(String, Part)>,
}

impl CacheTracker {
    /// A tracker with no previous request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fingerprints `request`, compares it with the previous one, and remembers it.
    pub fn observe(&mut self, turn: u64, step: u64, request: &GenerateRequest) -> CacheReport {
        let previous = self.previous.take().unwrap_or_default();
        let tools = self.tools_part(&request.tools);
        let system = match &self.last_system {
            Some((system, part)) if *system == request.system => part.clone(),
            _ => {
                let part = part_of(&request.system);
                self.last_system = Some((request.system.clone(), part.clone()));
                part
            }
        };
        // A message with the same id at the same position is the same message: logged events
        // are immutable, so only new messages need serializing. The previous shape's list is
        // kept up to the first new id and extended, so a step costs its new messages only.
        let RequestShape {
            config: previous_config,
            system: previous_system,
            tools: previous_tools,
            messages: mut message_parts,
        } = previous;
        let previous_count = message_parts.len();
        let same = message_parts
            .iter()
            .zip(request.messages.iter())
            .take_while(|((id, _), message)| *id == message.id)
            .count();
        let same_bytes: usize = message_parts[..same].iter().map(|(_, p)| p.bytes).sum();
        message_parts.truncate(same);
        message_parts.extend(
            request.messages[same..]
                .iter()
                .map(|m| (m.id.clone(), part_of(m))),
        );
        let shape = RequestShape {
            config: Some(part_of(request.config.config())),
            system: Some(system),
            tools: Some(tools),
            messages: message_parts,
        };
        let previous_header = [previous_config, previous_system, previous_tools];
        let report = compare(
            (turn, step),
            &previous_header,
            (previous_count, same, same_bytes),
            &shape,
        );
        self.previous = Some(shape);
        report
    }

    /// The serialised size of `tools`. The list is fingerprinted now and kept, so that the
    /// request that sends it is not serialised again by [`CacheTracker::observe`].
    pub fn tools_bytes(&mut self, tools: &Arc<Vec<ToolSchema>>) -> usize {
        self.tools_part(tools).bytes
    }

    fn tools_part(&mut self, tools: &Arc<Vec<ToolSchema>>) -> Part {
        match &self.last_tools {
            Some((kept, part)) if Arc::ptr_eq(kept, tools) => part.clone(),
            _ => {
                let part = part_of(&**tools);
                self.last_tools = Some((Arc::clone(tools), part.clone()));
                part
            }
        }
    }

    /// Forgets the previous request (after a logged header change or a compaction the prefix is
    /// expected to break; the next report then starts fresh).
    pub fn reset(&mut self) {
        self.previous = None;
    }
}

/// The report of `current` against the previous request: its header parts, and of its
/// `previous_count` messages how many (`same`, with `same_bytes` bytes) `current` starts with.
fn compare(
    (turn, step): (u64, u64),
    previous_header: &[Option<Part>; 3],
    (previous_count, same, same_bytes): (usize, usize, usize),
    current: &RequestShape,
) -> CacheReport {
    let size = |p: &Option<Part>| p.as_ref().map_or(0, |p| p.bytes);
    let request_bytes = size(&current.config)
        + size(&current.system)
        + size(&current.tools)
        + current.messages.iter().map(|(_, p)| p.bytes).sum::<usize>();
    let mut report = CacheReport::unmatched(turn, step, request_bytes);
    let [previous_config, previous_system, previous_tools] = previous_header;
    if previous_config.is_none() {
        return report;
    }
    let header = [
        ("config", previous_config, &current.config),
        ("system", previous_system, &current.system),
        ("tools", previous_tools, &current.tools),
    ];
    for (name, before, now) in header {
        if before != now {
            report.broken_at = Some(PrefixBreak {
                part: name.to_string(),
                index: None,
            });
            return report;
        }
        report.reused_bytes += size(now);
    }
    report.reused_bytes += same_bytes;
    if same < previous_count {
        report.broken_at = Some(PrefixBreak {
            part: "message".to_string(),
            index: Some(same),
        });
        return report;
    }
    report.prefix_extension = true;
    report
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dsh_llm::{CallConfig, Message};

    fn request(system: &str, tools: &Arc<Vec<ToolSchema>>, ids: &[&str]) -> GenerateRequest {
        let model = "deepseek-v4-flash";
        GenerateRequest {
            config: CallConfig::new("deepseek", model)
                .prepare(&dsh_deepseek::model_info(model))
                .unwrap(),
            system: system.into(),
            messages: Arc::new(
                ids.iter()
                    .map(|id| Message::user_text(*id, format!("text of {id}")))
                    .collect(),
            ),
            tools: Arc::clone(tools),
            cancel: Default::default(),
            session_id: None,
            purpose: None,
            history_lineage: None,
        }
    }

    /// The report by its definition: every part of both requests serialized in full.
    fn expected(
        turn: u64,
        step: u64,
        previous: Option<&GenerateRequest>,
        now: &GenerateRequest,
    ) -> CacheReport {
        let parts = |r: &GenerateRequest| -> (Vec<Part>, Vec<(String, Part)>) {
            let header = vec![
                part_of(r.config.config()),
                part_of(&r.system),
                part_of(&*r.tools),
            ];
            let messages = r
                .messages
                .iter()
                .map(|m| (m.id.clone(), part_of(m)))
                .collect();
            (header, messages)
        };
        let (header, messages) = parts(now);
        let request_bytes = header
            .iter()
            .chain(messages.iter().map(|(_, p)| p))
            .map(|p| p.bytes)
            .sum();
        let mut report = CacheReport::unmatched(turn, step, request_bytes);
        let Some(previous) = previous else {
            return report;
        };
        let (before_header, before_messages) = parts(previous);
        for (name, (before, now)) in ["config", "system", "tools"]
            .iter()
            .zip(before_header.iter().zip(&header))
        {
            if before != now {
                report.broken_at = Some(PrefixBreak {
                    part: name.to_string(),
                    index: None,
                });
                return report;
            }
            report.reused_bytes += now.bytes;
        }
        for (index, before) in before_messages.iter().enumerate() {
            if messages.get(index) != Some(before) {
                report.broken_at = Some(PrefixBreak {
                    part: "message".into(),
                    index: Some(index),
                });
                return report;
            }
            report.reused_bytes += before.1.bytes;
        }
        report.prefix_extension = true;
        report
    }

    #[test]
    fn reports_equal_full_comparisons_of_every_part() {
        let tools = Arc::new(vec![ToolSchema {
            name: "read".into(),
            description: "Reads.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }]);
        let other_tools = Arc::new(Vec::new());
        let sequence = [
            request("sys", &tools, &["m0"]),
            request("sys", &tools, &["m0", "m1", "m2"]),
            request("sys", &tools, &["m0", "m1", "m2"]),
            request("other", &tools, &["m0", "m1", "m2", "m3"]),
            request("other", &tools, &["m0", "x1", "m2", "m3"]),
            request("other", &tools, &["m0"]),
            request("other", &tools, &[]),
            request("other", &tools, &["m0", "m1"]),
            request("other", &other_tools, &["m0", "m1"]),
            request("other", &other_tools, &["m0", "m1", "m4"]),
        ];
        let mut tracker = CacheTracker::new();
        let mut previous = None;
        for (step, now) in sequence.iter().enumerate() {
            let step = step as u64;
            assert_eq!(
                tracker.observe(1, step, now),
                expected(1, step, previous, now),
                "request {step}"
            );
            previous = Some(now);
        }
        // After a reset the next request starts fresh.
        tracker.reset();
        let now = &sequence[1];
        assert_eq!(tracker.observe(2, 1, now), expected(2, 1, None, now));
    }
}
