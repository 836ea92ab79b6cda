//! Subagents in the scenario runner (settings `"subagents": true`): the recording's children
//! (`session.N.jsonl`) are served their recorded replies by the fake provider, each child's
//! requests recognised by its prompt (`RequestMatch::UserIs`), while the parent takes the
//! script; children are built like the parent, one level deeper. After the run, each child
//! log of ours is compared with the recorded child that had the same prompt.

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
}

impl Children {
    /// The delegation extension of an agent at `depth`.
    pub(crate) fn delegation(&self, depth: u64) -> Subagents {
        let children = self.clone();
        let factory: dsh_agent::ChildFactory = Arc::new(move |d| Ok(children.parts(d)));
        let subagents = Subagents::new(depth, factory);
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
        let calls = parse_calls(&child.own_text, &child.file).map_err(|e| format!("{e:?}"))?;
        let replies = by_prompt.entry(child.prompt.clone()).or_default();
        for call in calls {
            replies.push(match (call.reply(), delay) {
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

/// Compares every recorded child that started fresh (forks carry the parent's turns and are
/// checked through the parent's result) with our child log that had the same prompt.
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
    for child in recorded.iter().filter(|c| !c.forked) {
        let position = ours
            .iter()
            .position(|(prompt, _)| *prompt == child.prompt)
            .ok_or_else(|| format!("no child of ours was asked {:?}", child.prompt))?;
        let (_, log) = ours.remove(position);
        let theirs = dsh_session::load_file(&child.file).map_err(|e| e.to_string())?;
        let mine = dsh_session::load_file(&log).map_err(|e| e.to_string())?;
        let differences = compare_runs(
            &RecordedRun::from_events(&theirs.events),
            &RecordedRun::from_events(&mine.events),
        );
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
