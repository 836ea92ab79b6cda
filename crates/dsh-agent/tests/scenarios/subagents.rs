//! Subagents in the scenario runner (settings `"subagents": true`): the recording's children
//! (`session.N.jsonl`) are served their recorded replies by the fake provider, each child's
//! requests recognised by its prompt (`RequestMatch::UserIs`), while the parent takes the
//! script; children are built like the parent, one level deeper, and take the recorded
//! children's session ids. After the run, each child log of ours is compared with the recorded
//! child that had the same prompt (a fork's seed by the history it projects to), and dsh's
//! settlement notices must be in our parent's log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{compare_runs, AgentOptions, AgentParts, ExtensionSet, RecordedRun, Subagents};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_test_support::{parse_calls, FakeProvider, RequestMatch, ScriptedReply};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::Value;

/// How children are built (the parts of the parent that matter to them).
#[derive(Clone)]
pub(crate) struct Children {
    pub(crate) base_url: String,
    pub(crate) home: PathBuf,
    pub(crate) cwd: PathBuf,
    pub(crate) preset: PermissionPreset,
    pub(crate) background_jobs: bool,
    pub(crate) max_depth: Option<u64>,
    /// The recorded children's session ids, handed out in creation order (the recorded
    /// parent quotes them, e.g. in `send_message`).
    pub(crate) ids: dsh_agent::ChildIds,
}

impl Children {
    /// The delegation extension of an agent at `depth`.
    pub(crate) fn delegation(&self, depth: u64) -> Subagents {
        let children = self.clone();
        let factory: dsh_agent::ChildFactory = Arc::new(move |d| Ok(children.parts(d)));
        let subagents = Subagents::new(depth, factory).with_child_ids(Arc::clone(&self.ids));
        match self.max_depth {
            Some(max) => subagents.with_max_depth(max),
            None => subagents,
        }
    }

    fn parts(&self, depth: u64) -> AgentParts {
        static SPILLS: AtomicUsize = AtomicUsize::new(0);
        let spill = self.home.join(format!(
            "child-spill-{}",
            SPILLS.fetch_add(1, Ordering::SeqCst)
        ));
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-scenario")),
        ))
        .expect("the DeepSeek adapter builds");
        let mut adapters = AdapterRegistry::new();
        adapters
            .register("deepseek", Arc::new(adapter))
            .expect("one route");
        let extensions = ExtensionSet::new();
        let retry = RetryPolicy {
            base_delay: Duration::from_millis(10),
            ..RetryPolicy::default()
        };
        for guard in
            dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(60))
        {
            std::mem::forget(guard);
        }
        extensions.register_for_life(Arc::new(self.delegation(depth)));
        let mut tool_context = ToolContext::new(
            &self.cwd,
            SpillDir::create(spill).expect("a spill folder in the temp home"),
        )
        .expect("the temp cwd exists")
        .with_permission(self.preset);
        if self.background_jobs {
            let jobs = dsh_tools::JobTable::new();
            extensions.register_for_life(Arc::new(dsh_agent::BackgroundJobs::new(&jobs)));
            tool_context = tool_context.with_jobs(jobs);
        }
        AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context,
            options: AgentOptions::new(CallConfig::new("deepseek", "deepseek-v4-flash"), &self.cwd),
        }
    }
}

/// A recorded child: its prompt (first user message after any inherited seed) and the lines
/// after its seed.
struct RecordedChild {
    file: PathBuf,
    prompt: String,
    own_text: String,
    forked: bool,
}

fn recorded_children(dir: &Path) -> Result<Vec<RecordedChild>, String> {
    let mut out = Vec::new();
    for n in 1.. {
        let file = dir.join(format!("session.{n}.jsonl"));
        if !file.is_file() {
            break;
        }
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        // A fork's log starts with the parent's history, closed by `session/end-seed`.
        let seed_end = lines.iter().position(|l| {
            l.contains("\"type\": \"session/end-seed\"")
                || l.contains("\"type\":\"session/end-seed\"")
        });
        let forked = seed_end
            .is_some_and(|end| lines[1..end].iter().any(|l| l.contains("\"user/message\"")));
        let own: Vec<&str> = lines[seed_end.map_or(1, |e| e + 1)..].to_vec();
        let prompt = own
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|row| row["type"] == "user/message" && row["data"]["source"]["kind"] == "user")
            .and_then(|row| {
                row["data"]["content"].as_array().map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n\n")
                })
            })
            .ok_or_else(|| format!("{}: no prompt after the seed", file.display()))?;
        out.push(RecordedChild {
            file,
            prompt,
            own_text: own.join("\n"),
            forked,
        });
    }
    Ok(out)
}

/// The recorded children's session ids (`session.1.jsonl`, `session.2.jsonl`, ...) as an id
/// source: each new child of ours takes the next one, then fresh UUIDs.
pub(crate) fn recorded_ids(dir: &Path) -> Result<dsh_agent::ChildIds, String> {
    let mut ids = std::collections::VecDeque::new();
    for child in recorded_children(dir)? {
        let header = dsh_session::load_file(&child.file).map_err(|e| e.to_string())?;
        ids.push_back(header.header.id);
    }
    let ids = std::sync::Mutex::new(ids);
    Ok(Arc::new(move || {
        ids.lock().expect("the id queue").pop_front()
    }))
}

/// The replies of one recorded child, turn by turn: its recorded calls, and for a turn that
/// ended `error` without making a request (dsh's harness failed it: `subagent-continuable`'s
/// third child turn hit an injected log-write failure, `snapshot disk full`), a reply that
/// the provider stops with the recorded error code as its `finish_reason`, so that our turn
/// ends `error` with the same code (a provider failure standing in for dsh's local one).
fn child_replies(child: &RecordedChild) -> Result<Vec<ScriptedReply>, String> {
    let mut replies = Vec::new();
    let mut segment = Vec::new();
    for line in child.own_text.lines() {
        segment.push(line);
        let row: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        if row["type"] != "turn/end" {
            continue;
        }
        let calls = parse_calls(&segment.join("\n"), &child.file).map_err(|e| format!("{e:?}"))?;
        let reason = &row["data"]["reason"];
        if calls.is_empty() && reason["kind"] == "error" {
            let code = reason["error"]["code"].as_str().unwrap_or("unknown");
            replies.push(
                dsh_test_support::SseReply::new()
                    .finish(&code.to_ascii_lowercase(), None)
                    .into(),
            );
        }
        replies.extend(calls.into_iter().map(|call| call.reply()));
        segment.clear();
    }
    let rest = parse_calls(&segment.join("\n"), &child.file).map_err(|e| format!("{e:?}"))?;
    replies.extend(rest.into_iter().map(|call| call.reply()));
    Ok(replies)
}

/// Routes each recorded child's replies to the requests that carry its prompt (children with
/// the same prompt share one route, replies in file order), each delayed by `delay` (so a
/// background child answers after its parent's turn went on, as in the recording).
pub(crate) fn route_children(
    dir: &Path,
    provider: &FakeProvider,
    delay: Option<Duration>,
) -> Result<Vec<String>, String> {
    let children = recorded_children(dir)?;
    let mut by_prompt: BTreeMap<String, Vec<ScriptedReply>> = BTreeMap::new();
    for child in &children {
        let recorded = child_replies(child)?;
        let replies = by_prompt.entry(child.prompt.clone()).or_default();
        for reply in recorded {
            replies.push(match (reply, delay) {
                (ScriptedReply::Stream(sse), Some(pause)) => sse.delay(pause).into(),
                (reply, _) => reply,
            });
        }
    }
    let prompts: Vec<String> = by_prompt.keys().cloned().collect();
    for (prompt, replies) in by_prompt {
        provider.route(RequestMatch::UserIs(prompt), replies);
    }
    Ok(prompts)
}

/// The requests of the top-level agent: those no child's prompt is in.
pub(crate) fn parent_requests(
    provider: &FakeProvider,
    child_prompts: &[String],
) -> Vec<dsh_test_support::RecordedRequest> {
    provider
        .requests()
        .into_iter()
        .filter(|request| {
            !child_prompts
                .iter()
                .any(|prompt| RequestMatch::UserIs(prompt.clone()).matches(&request.body))
        })
        .collect()
}

/// What a log's fork seed (the events before `session/end-seed`) projects to: each message's
/// role, source kind and text, and the tool calls and results it carries.
fn seed_history(events: &[dsh_session::Envelope]) -> Result<Vec<String>, String> {
    let end = events
        .iter()
        .position(|e| matches!(e.event, dsh_session::Event::EndSeed(_)))
        .ok_or("the fork's log has no session/end-seed")?;
    let mut projector = dsh_session::Projector::new();
    for envelope in &events[..end] {
        projector.push(envelope).map_err(|e| e.to_string())?;
    }
    Ok(projector
        .history()
        .iter()
        .map(|m| {
            let calls: Vec<String> = m
                .tool_calls()
                .map(|(id, name, _)| format!("{name}#{id}"))
                .collect();
            let results: Vec<String> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    dsh_llm::ContentBlock::ToolResult { tool_call_id, .. } => {
                        Some(tool_call_id.clone())
                    }
                    _ => None,
                })
                .collect();
            let source = match &m.source {
                dsh_llm::MessageSource::User => "user".to_string(),
                dsh_llm::MessageSource::Plugin { plugin, .. } => format!("plugin:{plugin}"),
                dsh_llm::MessageSource::Model { .. } => "model".to_string(),
                dsh_llm::MessageSource::Tool { .. } => "tool".to_string(),
            };
            // Context messages are each build's own wording (runtime context, instructions):
            // their place in the history is compared, not their text.
            let text = if source.starts_with("plugin:") {
                String::new()
            } else {
                m.text()
            };
            let source = if source.starts_with("plugin:") {
                "plugin"
            } else {
                source.as_str()
            };
            format!(
                "{:?} {source} {text:?} calls {calls:?} results {results:?}",
                m.role
            )
        })
        .collect())
}

/// Compares every recorded child with our child log that had the same prompt: the runs after
/// the seed (turn ends, final texts, tool calls and results), and for a fork the history its
/// seed projects to (what the child's first request carries before its own turn).
pub(crate) fn compare_children(dir: &Path, parent_log: &Path) -> Result<(), String> {
    let recorded = recorded_children(dir)?;
    let folder = parent_log.parent().ok_or("the parent log has no folder")?;
    let mut ours: Vec<(String, PathBuf)> = Vec::new();
    collect_logs(folder, &mut ours);
    if ours.len() != recorded.len() {
        return Err(format!(
            "{} child logs recorded, {} of ours",
            recorded.len(),
            ours.len()
        ));
    }
    for child in &recorded {
        let position = ours
            .iter()
            .position(|(prompt, _)| *prompt == child.prompt)
            .ok_or_else(|| format!("no child of ours was asked {:?}", child.prompt))?;
        let (_, log) = ours.remove(position);
        let theirs = dsh_session::load_file(&child.file).map_err(|e| e.to_string())?;
        let mine = dsh_session::load_file(&log).map_err(|e| e.to_string())?;
        if child.forked {
            let (recorded_seed, our_seed) =
                (seed_history(&theirs.events)?, seed_history(&mine.events)?);
            if recorded_seed != our_seed {
                return Err(format!(
                    "fork {:?}: seeded with {our_seed:#?}, recorded {recorded_seed:#?}",
                    child.prompt
                ));
            }
        }
        // A fork's seed is compared above; its own turns come after `session/end-seed` (dsh's
        // seed holds the parent's turns as events, ours the messages they project to).
        let own = |events: &[dsh_session::Envelope]| {
            let start = events
                .iter()
                .position(|e| matches!(e.event, dsh_session::Event::EndSeed(_)))
                .map_or(0, |k| k + 1);
            RecordedRun::from_events(&events[start..])
        };
        let differences = compare_runs(&own(&theirs.events), &own(&mine.events));
        if !differences.is_empty() {
            let list: Vec<String> = differences.iter().map(ToString::to_string).collect();
            return Err(format!("child {:?}: {}", child.prompt, list.join("; ")));
        }
    }
    Ok(())
}

/// Every child log below `folder` (nested children included) with its first user text.
fn collect_logs(folder: &Path, out: &mut Vec<(String, PathBuf)>) {
    for child in dsh_agent::read_children(folder) {
        let prompt = dsh_session::load_file(&child.log)
            .ok()
            .and_then(|loaded| {
                let after_seed = loaded
                    .events
                    .iter()
                    .position(|e| matches!(e.event, dsh_session::Event::EndSeed(_)))
                    .map_or(0, |p| p + 1);
                loaded.events[after_seed..]
                    .iter()
                    .find_map(|e| match &e.event {
                        dsh_session::Event::UserMessage(m)
                            if matches!(m.source, dsh_llm::MessageSource::User) =>
                        {
                            Some(m.text())
                        }
                        _ => None,
                    })
            })
            .unwrap_or_default();
        if let Some(next) = child.log.parent() {
            collect_logs(next, out);
        }
        out.push((prompt, child.log));
    }
}

/// dsh's settlement notices of background children (`user/message` rows whose source kind is
/// `subagent-settled`), each as one text: its blocks joined by newlines.
fn recorded_settlements(dir: &Path) -> Result<Vec<String>, String> {
    let file = dir.join("session.jsonl");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|row| {
            row["type"] == "user/message" && row["data"]["source"]["kind"] == "subagent-settled"
        })
        .map(|row| {
            row["data"]["content"]
                .as_array()
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default()
        })
        .collect())
}

/// Every settlement notice dsh gave the parent must be in a user-role message of our parent's
/// log, word for word (our children take the recorded ids, so the texts match).
pub(crate) fn compare_settlements(
    dir: &Path,
    ours: &[dsh_session::Envelope],
) -> Result<(), String> {
    let texts: Vec<String> = ours
        .iter()
        .filter_map(|e| match &e.event {
            dsh_session::Event::UserMessage(m) => Some(m.text()),
            _ => None,
        })
        .collect();
    for notice in recorded_settlements(dir)? {
        if !texts.iter().any(|t| t.contains(&notice)) {
            return Err(format!(
                "dsh's settlement notice {notice:?} is not in our parent's log: {texts:?}"
            ));
        }
    }
    Ok(())
}
