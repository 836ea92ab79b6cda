//! A tool call that is known to be running (`dsh_test_support::BlockingTool`) while the test
//! steers or cancels the turn: steering waits for the call and reaches the next step; a cancel
//! reaches the running tool through its token and the call is logged aborted
//! (docs/agent.md: steering and cancellation).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, ReplayAdapter};
use dsh_llm::{AdapterRegistry, CallConfig};
use dsh_session::{load_file, open_store, Envelope, Event, StoreKind, TurnEndReason};
use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::{tool_result_text, BlockingGate, BlockingTool};
use dsh_tools::{SpillDir, ToolContext, ToolRegistry};

const STARTED_WITHIN: Duration = Duration::from_secs(10);

/// An agent whose model calls the blocking tool `wait` once, then answers `done`.
struct Blocked {
    _home: tempfile::TempDir,
    _cwd: tempfile::TempDir,
    agent: Agent,
    gate: BlockingGate,
}

fn blocked() -> Blocked {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let model = Arc::new(ReplayAdapter::new(vec![
        tool_call("c1", "wait", "{}"),
        text("done"),
    ]));
    let mut adapters = AdapterRegistry::new();
    adapters.register("scripted", model).unwrap();
    let (tool, gate) = BlockingTool::new("wait");
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(tool)).unwrap();
    let parts = AgentParts {
        adapters,
        tools: Arc::new(tools),
        extensions: ExtensionSet::new(),
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("spill")).unwrap(),
        )
        .unwrap(),
        options: AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path()),
    };
    let store = open_store(StoreKind::Jsonl, home.path()).unwrap();
    let agent = Agent::create(parts, store.as_ref()).unwrap();
    Blocked {
        _home: home,
        _cwd: cwd,
        agent,
        gate,
    }
}

fn events(agent: &Agent) -> Vec<Envelope> {
    load_file(Path::new(&agent.handle().location()))
        .unwrap()
        .events
}

#[tokio::test]
async fn steering_while_a_tool_runs_reaches_the_step_after_its_result() {
    // Bound, not `..`: the folders must outlive the run.
    let Blocked {
        _home,
        _cwd,
        mut agent,
        gate,
    } = blocked();
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let test_side = async {
        gate.started(1, STARTED_WITHIN).await.unwrap();
        handle.steer("also check README").unwrap();
        // The call is still running: steering neither ends nor interrupts it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(gate.cancelled_count(), 0);
        gate.release(1);
    };
    let (outcome, ()) = tokio::join!(agent.run_turn(), test_side);
    let outcome = outcome.unwrap().unwrap();
    assert_eq!(outcome.final_text, "done");
    assert!(
        matches!(outcome.reason, TurnEndReason::Completed),
        "{:?}",
        outcome.reason
    );

    let events = events(&agent);
    let result = events
        .iter()
        .position(|e| matches!(&e.event, Event::ToolResult(r) if tool_result_text(&r.message) == "released call 1"))
        .expect("the released call's result is logged");
    let steered = events
        .iter()
        .position(|e| matches!(&e.event, Event::UserMessage(m) if m.text() == "also check README"))
        .expect("the steering message is logged");
    assert!(
        result < steered,
        "the steering message was logged before the running call's result"
    );
}

#[tokio::test]
async fn cancelling_while_a_tool_runs_reaches_the_tool_and_logs_the_call_aborted() {
    // Bound, not `..`: the folders must outlive the run.
    let Blocked {
        _home,
        _cwd,
        mut agent,
        gate,
    } = blocked();
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let test_side = async {
        gate.started(1, STARTED_WITHIN).await.unwrap();
        assert!(handle.cancel(false), "no turn was running");
    };
    let (outcome, ()) = tokio::join!(agent.run_turn(), test_side);
    let outcome = outcome.unwrap().unwrap();
    assert!(
        matches!(outcome.reason, TurnEndReason::Aborted { .. }),
        "{:?}",
        outcome.reason
    );
    // The tool saw its own token fire (it was not just dropped after the grace period).
    assert_eq!(gate.cancelled_count(), 1);

    let results: Vec<(String, Option<String>)> = events(&agent)
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => Some((
                tool_result_text(&r.message),
                r.error.as_ref().map(|e| e.code.clone()),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].0.contains("cancelled while blocked"),
        "{results:?}"
    );
    assert_eq!(results[0].1.as_deref(), Some("ABORTED"));
}
