//! Setup shared by the delegation tests: subagents.rs (children scripted in process) and
//! subagents_http.rs (children over HTTP); docs/agent.md, "Delegation".

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{AgentOptions, AgentParts, BackgroundJobs, ExtensionSet, Subagents};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_session::{load_file, Event, ToolResult};
use dsh_test_support::process::alive;
use dsh_tools::{JobTable, PermissionPreset, SpillDir, ToolContext, ToolRegistry};

/// An agent's parts as the runtime builds them: the builtin tools and extensions (tool calls
/// time out after `tool_timeout`), delegation through `subagents`, full access in `cwd`, a
/// fresh spill folder below `home`, and, when `jobs`, a job table announced by
/// `BackgroundJobs`.
pub fn parts(
    adapters: AdapterRegistry,
    subagents: Subagents,
    model: CallConfig,
    tool_timeout: Duration,
    jobs: bool,
    home: &Path,
    cwd: &Path,
) -> AgentParts {
    static SPILLS: AtomicUsize = AtomicUsize::new(0);
    let spill = home.join(format!("spill-{}", SPILLS.fetch_add(1, Ordering::SeqCst)));
    let extensions = ExtensionSet::new();
    for guard in
        dsh_agent::register_builtin_extensions(&extensions, RetryPolicy::default(), tool_timeout)
    {
        std::mem::forget(guard);
    }
    extensions.register_for_life(Arc::new(subagents));
    let mut tool_context = ToolContext::new(cwd, SpillDir::create(spill).unwrap())
        .unwrap()
        .with_permission(PermissionPreset::DangerFullAccess);
    if jobs {
        let jobs = JobTable::new();
        extensions.register_for_life(Arc::new(BackgroundJobs::new(&jobs)));
        tool_context = tool_context.with_jobs(jobs);
    }
    AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context,
        options: AgentOptions::new(model, cwd),
    }
}

/// The tool results of the session log at `path`, in log order.
pub fn tool_results(path: &Path) -> Vec<ToolResult> {
    load_file(path)
        .unwrap()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Whether `pid` exits (or becomes a zombie) within ten seconds.
pub async fn wait_gone(pid: i32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
