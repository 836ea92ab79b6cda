//! Export as an ATIF trajectory (Agent Trajectory Interchange Format, the format Harbor's
//! `trajectory_validator` checks; docs/harbor.md, "Trajectories"). One trajectory per session
//! log: user messages become `user` steps, injected context and compaction checkpoints
//! `system` steps, each model reply an `agent` step (text, reasoning, tool calls, per-call
//! metrics) whose tool results are its `observation`. Sub-agent logs are embedded in
//! `subagent_trajectories` and referenced from the result of the call that ran them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dsh_llm::{ContentBlock, Message, MessageSource, Usage, UsageTotals};
use serde_json::{json, Map, Value};

use crate::envelope::{Envelope, SurfaceOp};
use crate::event::{Event, HeaderTools, ToolResult};
use crate::reader::{is_zstd_path, load_file, LoadedLog};
use crate::usage::BilledKind;
use dsh_llm::PriceTable;

/// The ATIF version written.
pub const ATIF_SCHEMA_VERSION: &str = "ATIF-v1.7";

/// What the exporter needs besides the logs.
#[derive(Debug, Clone)]
pub struct AtifOptions {
    /// `agent.name`.
    pub agent_name: String,
    /// `agent.version`.
    pub agent_version: String,
    /// Prices for `cost_usd` (a model without a price gets no cost).
    pub prices: PriceTable,
}

/// The trajectory of `log` as JSON. `sub_agents` are the logs of its sub-agents (any depth, any
/// order: each is placed under the log named by its `parentSession`); a sub-agent is linked to
/// the `subagent` call whose result names its log, else whose `prompt` is its first message,
/// else to the next unlinked call in order.
pub fn export_atif(log: &LoadedLog, sub_agents: &[LoadedLog], options: &AtifOptions) -> Value {
    let mut used = BTreeSet::new();
    Builder::new(log, sub_agents, options, &mut used).build()
}

/// Every other session log (`session*.jsonl`) below `dir` (recursively: dsh's `session.<n>.jsonl` beside the main
/// log, our `subagents/<id>/session.jsonl`), for [`export_atif`]. Files that are not session
/// logs are skipped with a note in the second list.
pub fn load_sub_agent_logs(dir: &Path, main: &Path) -> (Vec<LoadedLog>, Vec<String>) {
    let mut logs = Vec::new();
    let mut problems = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            problems.push(format!("cannot list {}", folder.display()));
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if path.is_dir() {
                pending.push(path);
            } else if path != main && is_session_file(&path) {
                match load_file(&path) {
                    Ok(log) if log.header.parent_session.is_some() => logs.push(log),
                    Ok(_) => {}
                    Err(err) => problems.push(format!("{}: {err}", path.display())),
                }
            }
        }
    }
    (logs, problems)
}

/// `session*.jsonl` (or compressed): the names dsh and we give session logs.
fn is_session_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.starts_with("session") && (name.ends_with(".jsonl") || is_zstd_path(path))
}

/// A session log from bytes (a plain JSONL log, e.g. from [`crate::SessionStore::sub_agent_logs`]);
/// `name` names it in errors.
pub fn load_log_bytes(bytes: &[u8], name: &str) -> crate::Result<LoadedLog> {
    let mut reader = crate::LogReader::new(bytes, name)?;
    let mut events = Vec::new();
    while let Some(env) = reader.next_event()? {
        events.push(env);
    }
    Ok(LoadedLog {
        header: reader.header().clone(),
        events,
        torn_tail: reader.torn_tail().cloned(),
    })
}

/// Totals of one trajectory (its own billed calls: agent steps and the calls without a step;
/// cost also counts sub-agents).
#[derive(Default)]
struct Totals {
    prompt: u64,
    completion: u64,
    cached: u64,
    cost: Option<f64>,
    cost_known: bool,
}

struct Builder<'a> {
    log: &'a LoadedLog,
    sub_agents: &'a [LoadedLog],
    options: &'a AtifOptions,
    used: &'a mut BTreeSet<String>,
    steps: Vec<Map<String, Value>>,
    /// Call id to the index of the agent step that made it, and the call's name and arguments.
    calls: BTreeMap<String, (usize, String, String)>,
    embedded: Vec<Value>,
    sub_cost: f64,
    sub_cost_known: bool,
    totals: Totals,
    model: Option<String>,
    effort: Option<Value>,
    tools: Option<Vec<Value>>,
    provider: Option<String>,
    turn_ends: Vec<Value>,
    /// Billed calls of this log that are no agent step (`usage/call`, a tool's own calls):
    /// counted in the totals and listed in `final_metrics.extra`.
    other_calls: Vec<Value>,
}

impl<'a> Builder<'a> {
    fn new(
        log: &'a LoadedLog,
        sub_agents: &'a [LoadedLog],
        options: &'a AtifOptions,
        used: &'a mut BTreeSet<String>,
    ) -> Self {
        used.insert(log.header.id.clone());
        Builder {
            log,
            sub_agents,
            options,
            used,
            steps: Vec::new(),
            calls: BTreeMap::new(),
            embedded: Vec::new(),
            sub_cost: 0.0,
            sub_cost_known: true,
            totals: Totals {
                cost_known: true,
                ..Totals::default()
            },
            model: None,
            effort: None,
            tools: None,
            provider: None,
            turn_ends: Vec::new(),
            other_calls: Vec::new(),
        }
    }

    fn build(mut self) -> Value {
        for env in &self.log.events {
            self.event(env);
        }
        // Sub-agents of this log that no call result named are still part of the run.
        let children: Vec<&LoadedLog> = self.children().collect();
        for child in children {
            if !self.used.contains(&child.header.id) {
                self.embed(child);
            }
        }
        if self.steps.is_empty() {
            // ATIF needs one step; an empty log says so.
            self.push_step("system", json!("(the session has no messages)"), None);
        }
        self.finish()
    }

    fn children(&self) -> impl Iterator<Item = &'a LoadedLog> + 'a {
        let id = self.log.header.id.clone();
        self.sub_agents
            .iter()
            .filter(move |child| child.header.parent_session.as_deref() == Some(id.as_str()))
    }

    fn event(&mut self, env: &Envelope) {
        let model = self.model.as_deref().unwrap_or("");
        if let Some(billed) = crate::usage::billed(&env.event, model) {
            let purpose = match &billed.kind {
                BilledKind::Call(purpose) => Some(purpose.clone()),
                BilledKind::Auxiliary => Some("tool".to_string()),
                // Replies are agent steps; children are their own trajectories.
                BilledKind::Reply | BilledKind::Child(_) => None,
            };
            if let Some(purpose) = purpose {
                for (model, usage) in &billed.by_model {
                    self.other_call(&purpose, model, usage);
                }
            }
        }
        match &env.event {
            Event::RequestHeader(header) => {
                let config = header.header.config.config();
                self.model.get_or_insert_with(|| config.model.clone());
                self.provider.get_or_insert_with(|| config.provider.clone());
                self.effort = config
                    .reasoning_effort
                    .as_ref()
                    .and_then(|e| serde_json::to_value(e).ok());
                if self.tools.is_none() {
                    if let HeaderTools::Schemas(schemas) = &header.header.tools {
                        self.tools = Some(
                            schemas
                                .iter()
                                .map(|s| {
                                    json!({"type": "function", "function": {
                                        "name": s.name,
                                        "description": s.description,
                                        "parameters": s.parameters,
                                    }})
                                })
                                .collect(),
                        );
                    }
                }
            }
            Event::UserMessage(message) => self.user_message(env, message),
            Event::AssistantMessage(reply) => {
                self.agent_step(env, &reply.message, reply.usage.as_ref(), reply.interrupted)
            }
            Event::ToolResult(result) => self.tool_result(env, result),
            Event::TurnEnd(end) => {
                self.turn_ends
                    .push(json!({"turn": end.turn, "reason": end.reason}));
            }
            Event::Opaque { event_type, data } if event_type == "compaction/summary" => {
                let text = blocks_text(data.get("summary"));
                let mut extra = Map::new();
                extra.insert("dsh_event".into(), json!(event_type));
                for key in [
                    "compactionId",
                    "shadowedSeqs",
                    "shadowedTokenCount",
                    "usage",
                ] {
                    if let Some(value) = data.get(key) {
                        extra.insert(key.into(), value.clone());
                    }
                }
                let at = self.push_step(
                    "system",
                    json!(format!("Compaction summary:\n{text}")),
                    env.time,
                );
                self.steps[at].insert("extra".into(), Value::Object(extra));
            }
            _ => {}
        }
    }

    fn user_message(&mut self, env: &Envelope, message: &Message) {
        let text = message_text(&message.content);
        let replaces = matches!(env.surface_op, Some(SurfaceOp::Replace { .. }));
        let (source, extra) = match &message.source {
            MessageSource::User if !replaces => ("user", None),
            MessageSource::Plugin { plugin, form, .. } => (
                "system",
                Some(json!({"plugin": plugin, "form": form, "compaction": replaces})),
            ),
            _ => ("system", Some(json!({"compaction": replaces}))),
        };
        let at = self.push_step(source, json!(text), env.time);
        if let Some(extra) = extra {
            self.steps[at].insert("extra".into(), extra);
        }
    }

    fn agent_step(
        &mut self,
        env: &Envelope,
        message: &Message,
        usage: Option<&Usage>,
        interrupted: bool,
    ) {
        let mut text = Vec::new();
        let mut reasoning = Vec::new();
        let mut tool_calls = Vec::new();
        let at = self.steps.len();
        for block in &message.content {
            match block {
                ContentBlock::Text { text: t } => text.push(t.as_str()),
                ContentBlock::Reasoning { text: t, .. } if !t.is_empty() => {
                    reasoning.push(t.as_str())
                }
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let mut call = json!({"tool_call_id": id, "function_name": name});
                    match serde_json::from_str::<Value>(arguments) {
                        Ok(Value::Object(args)) => call["arguments"] = Value::Object(args),
                        _ => {
                            call["arguments"] = json!({});
                            call["extra"] = json!({"raw_arguments": arguments});
                        }
                    }
                    self.calls
                        .insert(id.clone(), (at, name.clone(), arguments.clone()));
                    tool_calls.push(call);
                }
                _ => {}
            }
        }
        let model = match &message.source {
            MessageSource::Model { model, .. } => Some(model.clone()),
            _ => self.model.clone(),
        };
        self.push_step("agent", json!(text.join("")), env.time);
        let step = &mut self.steps[at];
        if let Some(model) = &model {
            step.insert("model_name".into(), json!(model));
        }
        if let Some(effort) = &self.effort {
            step.insert("reasoning_effort".into(), effort.clone());
        }
        if !reasoning.is_empty() {
            step.insert("reasoning_content".into(), json!(reasoning.join("")));
        }
        if !tool_calls.is_empty() {
            step.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        step.insert("llm_call_count".into(), json!(1));
        if interrupted {
            step.insert("extra".into(), json!({"interrupted": true}));
        }
        if let Some(usage) = usage {
            let price = model
                .as_ref()
                .and_then(|m| self.options.prices.models.get(m));
            let cost = price.map(|p| p.cost(usage));
            let mut metrics = json!({
                "prompt_tokens": usage.billed_input(),
                "completion_tokens": usage.output_tokens,
                "cached_tokens": usage.cache_read_tokens,
                "extra": {
                    "uncached_input_tokens": usage.input_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                    "reasoning_tokens": usage.reasoning_tokens,
                },
            });
            if let Some(cost) = cost {
                metrics["cost_usd"] = json!(cost);
            }
            step.insert("metrics".into(), metrics);
            self.add_to_totals(usage, cost);
        }
    }

    /// A billed call that is no agent step: into the totals and the list of such calls.
    fn other_call(&mut self, purpose: &str, model: &str, totals: &UsageTotals) {
        let usage = &totals.usage;
        let cost = self.options.prices.models.get(model).map(|p| p.cost(usage));
        let mut entry = json!({
            "purpose": purpose,
            "model_name": model,
            "llm_call_count": totals.requests,
            "prompt_tokens": usage.billed_input(),
            "completion_tokens": usage.output_tokens,
            "cached_tokens": usage.cache_read_tokens,
        });
        if let Some(cost) = cost {
            entry["cost_usd"] = json!(cost);
        }
        self.other_calls.push(entry);
        self.add_to_totals(usage, cost);
    }

    fn add_to_totals(&mut self, usage: &Usage, cost: Option<f64>) {
        let t = &mut self.totals;
        t.prompt = t.prompt.saturating_add(usage.billed_input());
        t.completion = t.completion.saturating_add(usage.output_tokens);
        t.cached = t.cached.saturating_add(usage.cache_read_tokens);
        match cost {
            Some(c) => t.cost = Some(t.cost.unwrap_or(0.0) + c),
            None => t.cost_known = false,
        }
    }

    fn tool_result(&mut self, env: &Envelope, result: &ToolResult) {
        let content = result
            .message
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult { content, .. } => message_text(content),
                other => message_text(std::slice::from_ref(other)),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let call_id = result.call_id().map(str::to_string);
        let mut entry = json!({"content": content});
        let mut extra = Map::new();
        if let Some(error) = &result.error {
            extra.insert(
                "error".into(),
                json!({"code": error.code, "message": error.message}),
            );
        }
        let owner = call_id.as_ref().and_then(|id| self.calls.get(id).cloned());
        if let Some((_, name, arguments)) = &owner {
            if name.starts_with("subagent") {
                if let Some(child) = self.link_child(result, arguments) {
                    let id = child.header.id.clone();
                    self.embed(child);
                    entry["subagent_trajectory_ref"] =
                        json!([{"trajectory_id": id, "session_id": id}]);
                }
            }
        }
        if !extra.is_empty() {
            entry["extra"] = Value::Object(extra);
        }
        let at = match (&owner, &call_id) {
            (Some((at, ..)), Some(id)) => {
                entry["source_call_id"] = json!(id);
                *at
            }
            // A result without its call in this log (e.g. a seed cut): a system observation.
            _ => self.push_step("system", json!("(tool result)"), env.time),
        };
        let step = &mut self.steps[at];
        let observation = step
            .entry("observation")
            .or_insert_with(|| json!({"results": []}));
        if let Some(results) = observation["results"].as_array_mut() {
            results.push(entry);
        }
    }

    /// The sub-agent log that answered a `subagent` call.
    fn link_child(&self, result: &ToolResult, arguments: &str) -> Option<&'a LoadedLog> {
        let free: Vec<&'a LoadedLog> = self
            .children()
            .filter(|c| !self.used.contains(&c.header.id))
            .collect();
        let named = result
            .meta
            .as_ref()
            .and_then(|m| {
                m.get("log")
                    .or_else(|| m.get("data").and_then(|d| d.get("log")))
            })
            .and_then(Value::as_str);
        if let Some(path) = named {
            if let Some(child) = free.iter().find(|c| path.contains(&c.header.id)) {
                return Some(child);
            }
        }
        let prompt = serde_json::from_str::<Value>(arguments)
            .ok()
            .and_then(|v| v.get("prompt").and_then(Value::as_str).map(str::to_string));
        if let Some(prompt) = prompt {
            let first_text = |c: &LoadedLog| {
                c.events.iter().find_map(|e| match &e.event {
                    Event::UserMessage(m) if matches!(m.source, MessageSource::User) => {
                        Some(message_text(&m.content))
                    }
                    _ => None,
                })
            };
            if let Some(child) = free
                .iter()
                .find(|c| first_text(c).is_some_and(|t| t.trim() == prompt.trim()))
            {
                return Some(child);
            }
        }
        free.into_iter().min_by_key(|c| c.header.created_at)
    }

    fn embed(&mut self, child: &'a LoadedLog) {
        let trajectory = Builder::new(child, self.sub_agents, self.options, self.used).build();
        match trajectory["final_metrics"]["total_cost_usd"].as_f64() {
            Some(cost) => self.sub_cost += cost,
            None => self.sub_cost_known = false,
        }
        self.embedded.push(trajectory);
    }

    fn push_step(&mut self, source: &str, message: Value, time: Option<u64>) -> usize {
        let mut step = Map::new();
        step.insert("step_id".into(), json!(self.steps.len() + 1));
        if let Some(ms) = time {
            step.insert("timestamp".into(), json!(iso8601(ms)));
        }
        step.insert("source".into(), json!(source));
        step.insert("message".into(), message);
        self.steps.push(step);
        self.steps.len() - 1
    }

    fn finish(self) -> Value {
        let header = &self.log.header;
        let mut agent = json!({
            "name": self.options.agent_name,
            "version": self.options.agent_version,
        });
        if let Some(model) = &self.model {
            agent["model_name"] = json!(model);
        }
        if let Some(tools) = self.tools {
            agent["tool_definitions"] = Value::Array(tools);
        }
        if let Some(provider) = &self.provider {
            agent["extra"] = json!({"provider": provider});
        }
        let total_steps = self.steps.len();
        let mut final_metrics = json!({
            "total_prompt_tokens": self.totals.prompt,
            "total_completion_tokens": self.totals.completion,
            "total_cached_tokens": self.totals.cached,
            "total_steps": total_steps,
        });
        if self.totals.cost_known && self.sub_cost_known {
            final_metrics["total_cost_usd"] =
                json!(self.totals.cost.unwrap_or(0.0) + self.sub_cost);
        }
        if !self.embedded.is_empty() {
            final_metrics["extra"]["subagent_cost_usd"] = json!(self.sub_cost);
        }
        if !self.other_calls.is_empty() {
            final_metrics["extra"]["calls_without_step"] = Value::Array(self.other_calls);
        }
        let mut extra = json!({"cwd": header.cwd, "created_at_ms": header.created_at, "turn_ends": self.turn_ends});
        if let Some(parent) = &header.parent_session {
            extra["parent_session"] = json!(parent);
        }
        let mut out = json!({
            "schema_version": ATIF_SCHEMA_VERSION,
            "session_id": header.id,
            "trajectory_id": header.id,
            "agent": agent,
            "steps": self.steps.into_iter().map(Value::Object).collect::<Vec<_>>(),
            "final_metrics": final_metrics,
            "extra": extra,
        });
        if !self.embedded.is_empty() {
            out["subagent_trajectories"] = Value::Array(self.embedded);
        }
        out
    }
}

/// The text of content blocks; non-text blocks as a short bracketed note.
fn message_text(blocks: &[ContentBlock]) -> String {
    let mut out = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text { text } => out.push(text.clone()),
            ContentBlock::ToolResult { content, .. } => out.push(message_text(content)),
            ContentBlock::Image { .. } => out.push("[image]".into()),
            ContentBlock::Reasoning { .. } | ContentBlock::ToolCall { .. } => {}
            ContentBlock::Unknown(value) => {
                let kind = value.get("type").and_then(Value::as_str).unwrap_or("?");
                out.push(format!("[{kind} block]"));
            }
        }
    }
    out.join("\n")
}

/// The text of a JSON array of content blocks (`compaction/summary`'s `summary`).
fn blocks_text(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for ms since the epoch.
fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = dsh_llm::calendar::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_783_352_126_247), "2026-07-06T15:35:26.247Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
