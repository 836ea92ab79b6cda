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

use dsh_llm::{GenerateRequest, Message, ToolSchema, Usage};
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
        let tools = match &self.last_tools {
            Some((tools, part)) if Arc::ptr_eq(tools, &request.tools) => part.clone(),
            _ => {
                let part = part_of(&*request.tools);
                self.last_tools = Some((Arc::clone(&request.tools), part.clone()));
                part
            }
        };
        let system = match &self.last_system {
            Some((system, part)) if *system == request.system => part.clone(),
            _ => {
                let part = part_of(&request.system);
                self.last_system = Some((request.system.clone(), part.clone()));
                part
            }
        };
        let shape = RequestShape {
            config: Some(part_of(request.config.config())),
            system: Some(system),
            tools: Some(tools),
            messages: request
                .messages
                .iter()
                .enumerate()
                .map(|(index, m): (usize, &Message)| {
                    // A message with the same id at the same position is the same message:
                    // logged events are immutable, so only new messages need serializing.
                    let known = previous
                        .messages
                        .get(index)
                        .filter(|(id, _)| *id == m.id)
                        .map(|(_, part)| part.clone());
                    (m.id.clone(), known.unwrap_or_else(|| part_of(m)))
                })
                .collect(),
        };
        let report = compare(turn, step, &previous, &shape);
        self.previous = Some(shape);
        report
    }

    /// Forgets the previous request (after a logged header change or a compaction the prefix is
    /// expected to break; the next report then starts fresh).
    pub fn reset(&mut self) {
        self.previous = None;
    }
}

fn compare(turn: u64, step: u64, previous: &RequestShape, current: &RequestShape) -> CacheReport {
    let size = |p: &Option<Part>| p.as_ref().map_or(0, |p| p.bytes);
    let request_bytes = size(&current.config)
        + size(&current.system)
        + size(&current.tools)
        + current.messages.iter().map(|(_, p)| p.bytes).sum::<usize>();
    let mut report = CacheReport {
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
    };
    if previous.config.is_none() {
        return report;
    }
    let header = [
        ("config", &previous.config, &current.config),
        ("system", &previous.system, &current.system),
        ("tools", &previous.tools, &current.tools),
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
    for (index, (id, part)) in previous.messages.iter().enumerate() {
        match current.messages.get(index) {
            Some((now_id, now_part)) if now_id == id && now_part == part => {
                report.reused_bytes += part.bytes;
            }
            _ => {
                report.broken_at = Some(PrefixBreak {
                    part: "message".to_string(),
                    index: Some(index),
                });
                return report;
            }
        }
    }
    report.prefix_extension = true;
    report
}
