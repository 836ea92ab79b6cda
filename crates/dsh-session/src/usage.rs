//! What a session was billed: the one rule every usage total reads (docs/sessions.md,
//! "Cost"). A billed call's usage is in the log exactly once, attributed to its purpose:
//!
//! - a model reply: the `usage` of its `assistant/message` (a partial reply saved on cancel
//!   carries the usage too, when it had arrived);
//! - a call whose usage no assistant message carries: `usage/call {purpose, model, usage,
//!   turn?, step?}`, an event of ours written by the code that made the call as soon as the
//!   usage is known ([`UsageCall`]: compaction summaries, session titles, replies that failed
//!   or were cancelled after their usage arrived);
//! - model calls a tool made on the session's behalf (`web_search`): the tool result's
//!   `meta.auxiliaryUsage {model, usage}`;
//! - a child's runs: the `usage` of a tool result that names the child (`meta.childId`, a
//!   foreground `subagent` or `send_message`), or a `subagent/usage` record (a failed
//!   foreground run, every background run, usage recovered on resume). Each run is in one of
//!   the two, never both (`dsh_agent`'s `subagents` module). Per model when the entry has
//!   `usageByModel`, else under its `model`, else under the session's model at that point.
//!
//! [`billed`] reads what one event adds; [`UsageLedger`] sums a log. Logs without `usage/call`
//! (older ones, dsh's) sum as before.

use std::collections::BTreeMap;

use dsh_llm::{MessageSource, PriceTable, Usage, UsageTotals};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::Event;

/// The event type of a billed call whose usage no assistant message carries ([`UsageCall`]).
pub const USAGE_CALL_EVENT: &str = "usage/call";

/// The event type of a child's usage added to its parent that no tool result carries
/// (docs/sessions.md, "Children").
pub const SUBAGENT_USAGE_EVENT: &str = "subagent/usage";

/// `purpose` of the summary call of a compaction.
pub const PURPOSE_COMPACTION: &str = "compaction";
/// `purpose` of the model-title call of a new session.
pub const PURPOSE_TITLE: &str = "title";
/// `purpose` of a turn's model call that failed (retried or not) after its usage arrived.
pub const PURPOSE_FAILED_REPLY: &str = "failed-reply";
/// `purpose` of a turn's model call cancelled after its usage arrived, when no partial reply
/// was saved to carry it.
pub const PURPOSE_CANCELLED_REPLY: &str = "cancelled-reply";

/// `usage/call {purpose, model, usage, turn?, step?}`: one billed model call whose usage no
/// `assistant/message` carries. Ours (not in dsh's catalog), always written `"ignorable":
/// true`, loaded as [`Event::Opaque`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageCall {
    /// Why the call was made: one of the `PURPOSE_*` constants (others are read too).
    pub purpose: String,
    /// The model that was called.
    pub model: String,
    /// The call's usage, as the provider reported it.
    pub usage: Usage,
    /// The turn the call belongs to, when it belongs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The step the call belongs to, when it belongs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
}

impl UsageCall {
    /// The event to log.
    pub fn to_event(&self) -> Event {
        Event::Opaque {
            event_type: USAGE_CALL_EVENT.to_string(),
            data: serde_json::to_value(self).unwrap_or(Value::Null),
        }
    }

    /// The call an event records, when it is a readable `usage/call`.
    pub fn from_event(event: &Event) -> Option<UsageCall> {
        match event {
            Event::Opaque { event_type, data } if event_type == USAGE_CALL_EVENT => {
                serde_json::from_value(data.clone()).ok()
            }
            _ => None,
        }
    }
}

/// Where billed usage was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BilledKind {
    /// An `assistant/message`'s usage: one model reply.
    Reply,
    /// A `usage/call` with this purpose.
    Call(String),
    /// A tool's own model calls (`meta.auxiliaryUsage`).
    Auxiliary,
    /// A child's runs (a tool result naming the child, or `subagent/usage`).
    Child(String),
}

/// What one event adds to its session's billed usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Billed {
    /// Where it was recorded.
    pub kind: BilledKind,
    /// The usage, per model.
    pub by_model: Vec<(String, UsageTotals)>,
}

impl Billed {
    /// The usage over all models.
    pub fn total(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for (_, usage) in &self.by_model {
            total.merge(usage);
        }
        total
    }
}

/// The usage `event` adds to its session's totals; `model` is the session's model at that
/// point (a child's usage recorded without a model is counted under it).
pub fn billed(event: &Event, model: &str) -> Option<Billed> {
    match event {
        Event::AssistantMessage(reply) => {
            let usage = reply.usage.as_ref()?;
            let model = match &reply.message.source {
                MessageSource::Model { model, .. } => model.clone(),
                _ => String::new(),
            };
            Some(Billed {
                kind: BilledKind::Reply,
                by_model: vec![(model, one_call(usage))],
            })
        }
        Event::ToolResult(result) => {
            let meta = result.meta.as_ref()?;
            let mut by_model = Vec::new();
            let mut kind = None;
            if let Some((aux_model, usage)) = auxiliary_usage(meta) {
                by_model.push((aux_model, usage));
                kind = Some(BilledKind::Auxiliary);
            }
            if let Some((child, usage)) = child_usage(meta, model) {
                by_model.extend(usage);
                kind = Some(BilledKind::Child(child));
            }
            Some(Billed {
                kind: kind?,
                by_model,
            })
        }
        Event::Opaque { event_type, data } if event_type == SUBAGENT_USAGE_EVENT => {
            let (child, by_model) = child_usage(data, model)?;
            Some(Billed {
                kind: BilledKind::Child(child),
                by_model,
            })
        }
        Event::Opaque { event_type, .. } if event_type == USAGE_CALL_EVENT => {
            let call = UsageCall::from_event(event)?;
            Some(Billed {
                kind: BilledKind::Call(call.purpose),
                by_model: vec![(call.model, one_call(&call.usage))],
            })
        }
        _ => None,
    }
}

fn one_call(usage: &Usage) -> UsageTotals {
    let mut totals = UsageTotals::default();
    totals.add(usage);
    totals
}

/// The `{model, usage}` of a tool result's `meta.auxiliaryUsage`, when present and readable.
fn auxiliary_usage(meta: &Value) -> Option<(String, UsageTotals)> {
    let record = meta.get("auxiliaryUsage")?;
    let model = record.get("model")?.as_str()?.to_string();
    let usage = serde_json::from_value(record.get("usage")?.clone()).ok()?;
    Some((model, usage))
}

/// A child's usage in a tool result's meta or a `subagent/usage` record: its `childId` and
/// the usage per model (`usageByModel`, else `usage` under `model`, else under `fallback`).
fn child_usage(record: &Value, fallback: &str) -> Option<(String, Vec<(String, UsageTotals)>)> {
    let child = record.get("childId")?.as_str()?.to_string();
    if let Some(map) = record.get("usageByModel") {
        if let Ok(map) = serde_json::from_value::<BTreeMap<String, UsageTotals>>(map.clone()) {
            return Some((child, map.into_iter().collect()));
        }
    }
    let usage: UsageTotals = serde_json::from_value(record.get("usage")?.clone()).ok()?;
    let model = record
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback);
    Some((child, vec![(model.to_string(), usage)]))
}

/// A session's billed usage summed per model, fed one event at a time in log order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageLedger {
    by_model: BTreeMap<String, UsageTotals>,
    /// The model of the latest `request/context` (else `request/header`).
    model: String,
}

impl UsageLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        UsageLedger::default()
    }

    /// Applies one event; returns what it added, if anything.
    pub fn push(&mut self, event: &Event) -> Option<Billed> {
        match event {
            Event::RequestContext(context) => {
                self.model.clone_from(&context.model);
                return None;
            }
            Event::RequestHeader(header) => {
                self.model.clone_from(&header.header.config.config().model);
                return None;
            }
            _ => {}
        }
        let billed = billed(event, &self.model)?;
        for (model, usage) in &billed.by_model {
            merge_into(&mut self.by_model, model, usage);
        }
        Some(billed)
    }

    /// The usage per model.
    pub fn by_model(&self) -> &BTreeMap<String, UsageTotals> {
        &self.by_model
    }

    /// The usage over all models.
    pub fn total(&self) -> UsageTotals {
        sum(&self.by_model)
    }

    /// The cost in USD (`None` when a model with usage has no price).
    pub fn cost(&self, prices: &PriceTable) -> Option<f64> {
        prices.cost(&self.by_model)
    }
}

fn merge_into(map: &mut BTreeMap<String, UsageTotals>, model: &str, usage: &UsageTotals) {
    match map.get_mut(model) {
        Some(totals) => totals.merge(usage),
        None => {
            map.insert(model.to_string(), *usage);
        }
    }
}

/// Per-model usage summed over all models.
pub fn sum(by_model: &BTreeMap<String, UsageTotals>) -> UsageTotals {
    let mut total = UsageTotals::default();
    for usage in by_model.values() {
        total.merge(usage);
    }
    total
}

/// What `now` holds beyond `then`, model by model (counts never below zero; models with
/// nothing left are left out): a turn's usage is the session's at its end since its start.
pub fn usage_since(
    now: &BTreeMap<String, UsageTotals>,
    then: &BTreeMap<String, UsageTotals>,
) -> BTreeMap<String, UsageTotals> {
    let mut out = BTreeMap::new();
    for (model, usage) in now {
        let left = match then.get(model) {
            Some(before) => minus(usage, before),
            None => *usage,
        };
        if left != UsageTotals::default() {
            out.insert(model.clone(), left);
        }
    }
    out
}

/// `a - b`, count by count (never below zero).
pub fn minus(a: &UsageTotals, b: &UsageTotals) -> UsageTotals {
    let (x, y) = (&a.usage, &b.usage);
    UsageTotals {
        usage: Usage {
            input_tokens: x.input_tokens.saturating_sub(y.input_tokens),
            output_tokens: x.output_tokens.saturating_sub(y.output_tokens),
            cache_read_tokens: x.cache_read_tokens.saturating_sub(y.cache_read_tokens),
            cache_write_tokens: x.cache_write_tokens.saturating_sub(y.cache_write_tokens),
            reasoning_tokens: x.reasoning_tokens.saturating_sub(y.reasoning_tokens),
        },
        requests: a.requests.saturating_sub(b.requests),
    }
}
