//! The MCP client through the agent loop: the reference server `server-everything` over stdio
//! and over streamable HTTP (a scripted model calls `mcp__everything__echo`), and a scripted
//! bash MCP server that crashes mid-call, hangs, or never starts.
//!
//! Tests that need `server-everything` skip with a message when `mcp-server-everything` is not
//! on PATH (`npm install -g @modelcontextprotocol/server-everything`).

#![allow(clippy::unwrap_used)]

use dsh_test_support::chunks::{text, tool_call};
use dsh_test_support::process::{alive, poll_until, spawn_helper_test, wait_for_pid};
use dsh_test_support::tool_result_text;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;

use dsh_agent::{
    Agent, AgentOptions, AgentParts, ApprovalChoice, ApprovalDecision, ApprovalRequest,
    ApprovalRules, Approver, Extension, ExtensionSet, ReplayAdapter, ToolCallInfo, ToolVerdict,
};
use dsh_llm::{AdapterRegistry, CallConfig, Chunk};
use dsh_mcp::{CommandGate, McpHub, McpServerConfig, McpTools, McpTransport, McpTrust};
use dsh_session::{load_file, open_store, Event, StoreKind};
use dsh_tools::{PermissionPreset, SpillDir, Tool, ToolContext, ToolRegistry};
use futures::future::BoxFuture;

/// The MCP tools as an agent extension, as dsh-runtime registers them (`mcp.rs` there).
struct McpExtension(McpTools);

impl McpExtension {
    fn new(hub: Arc<McpHub>) -> Arc<McpExtension> {
        Arc::new(McpExtension(McpTools::new(hub)))
    }
}

impl Extension for McpExtension {
    fn name(&self) -> &str {
        "mcp"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.tools()
    }

    fn tool_pre(&self, call: &ToolCallInfo) -> ToolVerdict {
        match self.0.approval(&call.name, call.preset) {
            Some(reason) => ToolVerdict::Ask {
                reason,
                escalation: None,
            },
            None => ToolVerdict::Continue,
        }
    }
}

/// The configuration's script gate as the hub's command gate, as dsh-runtime hands it over.
struct Pinned(dsh_config::scripts::ScriptGate);

impl CommandGate for Pinned {
    fn check_argv(&self, program: &str, args: &[String], cwd: &Path) -> Result<(), String> {
        self.0.check_argv(program, args, cwd)
    }

    fn command_path(&self) -> Option<std::ffi::OsString> {
        self.0.command_path()
    }
}

const EVERYTHING: &str = "mcp-server-everything";

fn everything_installed() -> bool {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(EVERYTHING).is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!(
            "skipped: `{EVERYTHING}` is not on PATH; install it with \
             `npm install -g @modelcontextprotocol/server-everything`"
        );
    }
    found
}

fn server(name: &str, transport: McpTransport) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport,
        tool_timeout: Duration::from_secs(60),
        startup_timeout: Duration::from_secs(30),
        // The scripted calls here test the client, not the approval policy: trusted servers
        // run without asking under the default workspace-write preset.
        trust: McpTrust::All,
        from_project: false,
    }
}

fn stdio(command: &str, args: &[&str]) -> McpTransport {
    McpTransport::Stdio {
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: Vec::new(),
        env_vars: Vec::new(),
        cwd: None,
    }
}

/// The text of every tool result, and the final text, after one prompt.
async fn run_agent(hub: Arc<McpHub>, replies: Vec<Vec<Chunk>>) -> (Vec<String>, String) {
    let home = tempfile::tempdir().unwrap();
    let run = run_agent_with(
        hub,
        replies,
        PermissionPreset::WorkspaceWrite,
        None,
        home.path(),
    )
    .await;
    (run.results, run.final_text)
}

/// Answers every question with one decision and keeps the questions.
struct Scripted {
    decision: ApprovalDecision,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Scripted {
    fn new(decision: ApprovalDecision) -> Arc<Scripted> {
        Arc::new(Scripted {
            decision,
            asked: Mutex::new(Vec::new()),
        })
    }

    fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap().clone()
    }
}

impl Approver for Scripted {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        self.asked.lock().unwrap().push(request);
        let decision = self.decision.clone();
        Box::pin(async move { decision })
    }
}

struct Run {
    results: Vec<String>,
    errors: Vec<Option<String>>,
    final_text: String,
    /// `(type, data)` of every `approval/*` event.
    approvals: Vec<(String, serde_json::Value)>,
    /// The data of every `tool/progress` event.
    progress: Vec<serde_json::Value>,
}

/// One prompt under `preset`, with `approver` (headless when `None`) and the approval rules
/// persisted in `home`.
async fn run_agent_with(
    hub: Arc<McpHub>,
    replies: Vec<Vec<Chunk>>,
    preset: PermissionPreset,
    approver: Option<Arc<dyn Approver>>,
    home: &Path,
) -> Run {
    let cwd = tempfile::tempdir().unwrap();
    let extensions = ExtensionSet::new();
    let _mcp = extensions.register(McpExtension::new(hub));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(replies)))
        .unwrap();
    let mut options = AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path());
    options.approval_rules = Arc::new(ApprovalRules::load(home).unwrap());
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(cwd.path(), SpillDir::create(home.join("s")).unwrap())
            .unwrap()
            .with_permission(preset),
        options,
    };
    let sessions = home.join("sessions");
    let store = open_store(StoreKind::Jsonl, &sessions).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    if let Some(approver) = approver {
        agent.set_approver(approver);
    }
    let handle = agent.handle();
    handle.followup("go").unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(120), agent.run_turn())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let location = handle.location();
    drop(agent);
    let events = load_file(Path::new(&location)).unwrap().events;
    let mut run = Run {
        results: Vec::new(),
        errors: Vec::new(),
        final_text: outcome.final_text,
        approvals: Vec::new(),
        progress: Vec::new(),
    };
    for envelope in &events {
        match &envelope.event {
            Event::ToolResult(r) => {
                run.results.push(tool_result_text(&r.message));
                run.errors.push(r.error.as_ref().map(|e| e.code.clone()));
            }
            Event::Opaque { event_type, data } if event_type.starts_with("approval/") => {
                run.approvals.push((event_type.clone(), data.clone()))
            }
            Event::Opaque { event_type, data }
                if event_type == dsh_session::TOOL_PROGRESS_EVENT =>
            {
                run.progress.push(data.clone())
            }
            _ => {}
        }
    }
    run
}

fn everything(trust: McpTrust, logs: &Path) -> Arc<McpHub> {
    let mut config = server("everything", stdio(EVERYTHING, &["stdio"]));
    config.trust = trust;
    McpHub::new(vec![config], logs, logs)
}

/// `toggle-simulated-logging` declares `readOnlyHint: false`, `echo` declares `true`.
fn toggle_then_echo() -> Vec<Vec<Chunk>> {
    vec![
        tool_call("c1", "mcp__everything__toggle-simulated-logging", "{}"),
        tool_call("c2", "mcp__everything__echo", r#"{"message":"hi"}"#),
        text("done"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_asks_before_a_tool_without_read_only_hint_and_not_before_one_with_it() {
    if !everything_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let approver = Scripted::new(ApprovalDecision::AllowOnce);
    let run = run_agent_with(
        everything(McpTrust::ReadOnly, home.path()),
        toggle_then_echo(),
        PermissionPreset::ReadOnly,
        Some(approver.clone()),
        home.path(),
    )
    .await;
    let asked = approver.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0].tool_name,
        "mcp__everything__toggle-simulated-logging"
    );
    assert!(
        asked[0].reason.contains("readOnlyHint"),
        "{}",
        asked[0].reason
    );
    assert_eq!(
        asked[0].choices,
        vec![
            ApprovalChoice::AllowOnce,
            ApprovalChoice::AllowSession,
            ApprovalChoice::AllowAlways,
            ApprovalChoice::Reject
        ]
    );
    assert_eq!(run.errors, vec![None, None], "{:?}", run.results);
    assert!(
        run.results[0].contains("simulated, random-leveled logging"),
        "{:?}",
        run.results
    );
    assert_eq!(run.results[1], "Echo: hi");
    let types: Vec<&str> = run.approvals.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, vec!["approval/asked", "approval/decided"]);
    assert_eq!(run.approvals[1].1["outcome"], "approved");
}

/// Plan mode (docs/agent.md, "Plan mode"; docs/mcp.md, "Approvals"): the session is
/// read-only, so a tool without `readOnlyHint` is asked before it runs (not refused), and one
/// that declares it runs without a question. Needs `mcp-server-everything` (`.ci/run` installs
/// it): fails when it is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_asks_before_a_tool_without_read_only_hint_and_runs_one_with_it() {
    assert!(
        everything_installed(),
        "this test needs `{EVERYTHING}` on PATH"
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let extensions = ExtensionSet::new();
    let plan = dsh_agent::PlanMode::new();
    let _plan = extensions.register(Arc::new(plan.clone()));
    let _mcp = extensions.register(McpExtension::new(everything(
        McpTrust::ReadOnly,
        home.path(),
    )));
    let mut adapters = AdapterRegistry::new();
    adapters
        .register("scripted", Arc::new(ReplayAdapter::new(toggle_then_echo())))
        .unwrap();
    let mut options = AgentOptions::new(CallConfig::new("scripted", "m"), cwd.path());
    options.approval_rules = Arc::new(ApprovalRules::load(home.path()).unwrap());
    let parts = AgentParts {
        adapters,
        tools: Arc::new(ToolRegistry::with_builtins()),
        extensions,
        tool_context: ToolContext::new(
            cwd.path(),
            SpillDir::create(home.path().join("s")).unwrap(),
        )
        .unwrap()
        .with_permission(PermissionPreset::WorkspaceWrite),
        options,
    };
    let store = open_store(StoreKind::Jsonl, &home.path().join("sessions")).unwrap();
    let mut agent = Agent::create(parts, store.as_ref()).unwrap();
    let approver = Scripted::new(ApprovalDecision::AllowOnce);
    agent.set_approver(approver.clone());
    agent.set_permission_source(Arc::new(|preset| {
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: Arc::new(dsh_tools::NoSandbox),
            sandbox_mode: "none".into(),
            sandbox_detail: "test".into(),
            summary: format!("The tools run under {preset}."),
        })
    }));
    let handle = agent.handle();
    handle.run_user_command("plan", "look around").unwrap();
    assert!(plan.is_active());
    assert_eq!(handle.permission(), PermissionPreset::ReadOnly);
    tokio::time::timeout(Duration::from_secs(120), agent.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    let asked = approver.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0].tool_name,
        "mcp__everything__toggle-simulated-logging"
    );
    assert!(
        asked[0].reason.contains("readOnlyHint") && asked[0].reason.contains("read-only"),
        "{}",
        asked[0].reason
    );
    let location = handle.location();
    drop(agent);
    let events = load_file(Path::new(&location)).unwrap().events;
    let results: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult(r) => Some((
                tool_result_text(&r.message),
                r.error.as_ref().map(|e| e.code.clone()),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results[0].1, None,
        "asked and allowed, so it ran: {results:?}"
    );
    assert_eq!(results[1], ("Echo: hi".to_string(), None));
    assert!(plan.is_active(), "still in plan mode");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_refuses_what_would_ask_and_says_how_to_allow_it() {
    if !everything_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let run = run_agent_with(
        everything(McpTrust::ReadOnly, home.path()),
        toggle_then_echo(),
        PermissionPreset::ReadOnly,
        None,
        home.path(),
    )
    .await;
    assert_eq!(
        run.errors,
        vec![Some("PERMISSION_DENIED".to_string()), None],
        "{:?}",
        run.results
    );
    let refusal = &run.results[0];
    assert!(
        refusal.contains("trust = \"all\"") && refusal.contains("[mcp.servers.everything]"),
        "{refusal}"
    );
    assert!(refusal.contains("always allow"), "{refusal}");
    assert_eq!(run.results[1], "Echo: hi");
    assert_eq!(run.approvals[1].1["outcome"], "rejected");

    // `trust = "all"` lets it run under workspace-write, but read-only still refuses it.
    let trusted = run_agent_with(
        everything(McpTrust::All, home.path()),
        toggle_then_echo(),
        PermissionPreset::WorkspaceWrite,
        None,
        home.path(),
    )
    .await;
    assert_eq!(trusted.errors, vec![None, None], "{:?}", trusted.results);
    assert!(trusted.approvals.is_empty(), "{:?}", trusted.approvals);
    let read_only = run_agent_with(
        everything(McpTrust::All, home.path()),
        toggle_then_echo(),
        PermissionPreset::ReadOnly,
        None,
        home.path(),
    )
    .await;
    assert_eq!(read_only.errors[0].as_deref(), Some("PERMISSION_DENIED"));

    // `trust = "none"` asks even for read-only tools; danger-full-access asks nothing.
    let distrusted = run_agent_with(
        everything(McpTrust::None, home.path()),
        toggle_then_echo(),
        PermissionPreset::WorkspaceWrite,
        None,
        home.path(),
    )
    .await;
    assert_eq!(
        distrusted.errors,
        vec![
            Some("PERMISSION_DENIED".to_string()),
            Some("PERMISSION_DENIED".to_string())
        ]
    );
    let full = run_agent_with(
        everything(McpTrust::None, home.path()),
        toggle_then_echo(),
        PermissionPreset::DangerFullAccess,
        None,
        home.path(),
    )
    .await;
    assert_eq!(full.errors, vec![None, None], "{:?}", full.results);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_is_remembered_for_later_headless_sessions() {
    if !everything_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let approver = Scripted::new(ApprovalDecision::AllowAlways);
    let first = run_agent_with(
        everything(McpTrust::ReadOnly, home.path()),
        toggle_then_echo(),
        PermissionPreset::ReadOnly,
        Some(approver.clone()),
        home.path(),
    )
    .await;
    assert_eq!(first.errors, vec![None, None], "{:?}", first.results);
    assert_eq!(first.approvals[1].1["scope"], "always");
    let rules = dsh_agent::read_rules(&dsh_agent::approvals_path(home.path())).unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].tool, "mcp__everything__toggle-simulated-logging");

    // A new agent in the same home, headless: the rule answers, nobody is asked.
    let second = run_agent_with(
        everything(McpTrust::ReadOnly, home.path()),
        toggle_then_echo(),
        PermissionPreset::ReadOnly,
        None,
        home.path(),
    )
    .await;
    assert_eq!(second.errors, vec![None, None], "{:?}", second.results);
    let types: Vec<&str> = second.approvals.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, vec!["approval/decided"]);
    assert_eq!(second.approvals[0].1["scope"], "rule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_echo_over_stdio() {
    if !everything_installed() {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let hub = McpHub::new(
        vec![server("everything", stdio(EVERYTHING, &["stdio"]))],
        logs.path(),
        logs.path(),
    );
    let names: Vec<String> = hub
        .tools()
        .iter()
        .map(|(_, t)| t.name.to_string())
        .collect();
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    let (results, final_text) = run_agent(
        hub,
        vec![
            tool_call("c1", "mcp__everything__echo", r#"{"message":"hello mcp"}"#),
            text("echoed"),
        ],
    )
    .await;
    assert_eq!(results, vec!["Echo: hello mcp"]);
    assert_eq!(final_text, "echoed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tools_progress_reports_are_logged_on_its_call() {
    if !everything_installed() {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = run_agent_with(
        everything(McpTrust::ReadOnly, logs.path()),
        vec![
            tool_call(
                "c1",
                "mcp__everything__trigger-long-running-operation",
                r#"{"duration":1.2,"steps":4}"#,
            ),
            text("done"),
        ],
        PermissionPreset::WorkspaceWrite,
        None,
        home.path(),
    )
    .await;
    assert_eq!(run.errors, vec![None], "{:?}", run.results);
    assert!(!run.progress.is_empty(), "no progress was logged");
    assert!(
        run.progress.iter().all(|p| p["callId"] == "c1"),
        "{:?}",
        run.progress
    );
    // In order, with the server's total. (The server's last report may race its result: a
    // report that arrives after the call ended has no card to go to and is dropped.)
    let values: Vec<f64> = run
        .progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(run
        .progress
        .iter()
        .all(|p| p["total"].as_f64() == Some(4.0)));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_echo_over_streamable_http() {
    if !everything_installed() {
        return;
    }
    let port = free_port();
    let _server = tokio::process::Command::new(EVERYTHING)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ready = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "server-everything did not listen on {port}");
    let logs = tempfile::tempdir().unwrap();
    let hub = McpHub::new(
        vec![server(
            "everything",
            McpTransport::Http {
                url: format!("http://127.0.0.1:{port}/mcp"),
                headers: vec![("X-Test".into(), "dsh".into())],
                bearer_token_env: None,
            },
        )],
        logs.path(),
        logs.path(),
    );
    let (results, _) = run_agent(
        hub,
        vec![
            tool_call("c1", "mcp__everything__echo", r#"{"message":"over http"}"#),
            text("done"),
        ],
    )
    .await;
    assert_eq!(results, vec!["Echo: over http"]);
}

/// A minimal MCP server in bash: tools `crash` (exits mid-call), `hang` (never answers) and
/// `ping` (answers `pong`).
const FAKE_SERVER: &str = r#"#!/usr/bin/env bash
echo "fake server starting" >&2
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}\n' "$id";;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"crash","inputSchema":{"type":"object"}},{"name":"hang","inputSchema":{"type":"object"}},{"name":"ping","description":"Answers pong.","inputSchema":{"type":"object"}}]}}\n' "$id";;
    *'"name":"crash"'*) echo "crashing now" >&2; exit 3;;
    *'"name":"hang"'*) ;;
    *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"pong"}]}}\n' "$id";;
  esac
done
"#;

fn fake_server(dir: &Path) -> PathBuf {
    let path = dir.join("fake-mcp.sh");
    std::fs::write(&path, FAKE_SERVER).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_an_error_result_and_the_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_server(dir.path());
    let logs = dir.path().join("logs");
    let hub = McpHub::new(
        vec![server("fake", stdio("bash", &[script.to_str().unwrap()]))],
        dir.path(),
        &logs,
    );
    let (results, final_text) = run_agent(
        hub,
        vec![
            tool_call("c1", "mcp__fake__crash", "{}"),
            tool_call("c2", "mcp__fake__ping", "{}"),
            text("kept going"),
        ],
    )
    .await;
    assert!(results[0].starts_with("Error: "), "{results:?}");
    assert!(
        results[0].contains("restarted on the next call"),
        "{results:?}"
    );
    assert_eq!(results[1], "pong");
    assert_eq!(final_text, "kept going");
    let log = std::fs::read_to_string(logs.join("mcp-fake.log")).unwrap();
    assert!(log.contains("crashing now"), "{log}");
    assert_eq!(log.matches("fake server starting").count(), 2, "{log}");
}

/// A preset switch stops the project's stdio servers (`McpHub::stop_project_servers`): the
/// next call starts a project server again (through the session's confinement, which then
/// reads the new preset), while the user's own server keeps running untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_project_servers_restarts_them_on_next_use_and_leaves_the_users_alone() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_server(dir.path());
    let logs = dir.path().join("logs");
    let mut project = server("proj", stdio("bash", &[script.to_str().unwrap()]));
    project.from_project = true;
    let hub = McpHub::new(
        vec![
            server("user", stdio("bash", &[script.to_str().unwrap()])),
            project,
        ],
        dir.path(),
        &logs,
    );
    let confined = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&confined);
    hub.set_confiner(Arc::new(move |plan, _workdir| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(plan)
    }));
    assert!(hub.start().is_empty());
    let ping = |name: &'static str| {
        let hub = Arc::clone(&hub);
        async move {
            hub.call(
                name,
                "ping",
                None,
                tokio_util::sync::CancellationToken::new(),
                None,
            )
            .await
            .unwrap()
        }
    };
    ping("user").await;
    ping("proj").await;
    hub.stop_project_servers();
    ping("user").await;
    ping("proj").await;
    let starts = |name: &str| {
        std::fs::read_to_string(logs.join(format!("mcp-{name}.log")))
            .unwrap()
            .matches("fake server starting")
            .count()
    };
    assert_eq!(starts("user"), 1, "the user's server was restarted");
    assert_eq!(starts("proj"), 2, "the project's server was not restarted");
    assert_eq!(confined.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_with_tool_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = fake_server(dir.path());
    let mut config = server("fake", stdio("bash", &[script.to_str().unwrap()]));
    config.tool_timeout = Duration::from_secs(1);
    let hub = McpHub::new(vec![config], dir.path(), dir.path());
    assert!(hub.start().is_empty());
    let err = hub
        .call(
            "fake",
            "hang",
            None,
            tokio_util::sync::CancellationToken::new(),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, dsh_tools::ToolErrorCode::ToolTimeout);
    // Cancellation ends a call at once.
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let err = hub
        .call("fake", "hang", None, cancel, None)
        .await
        .unwrap_err();
    assert_eq!(err.code, dsh_tools::ToolErrorCode::Aborted);
    // The server still answers afterwards.
    let ok = hub
        .call(
            "fake",
            "ping",
            None,
            tokio_util::sync::CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ok.is_error, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_fail_to_start_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let hub = McpHub::new(
        vec![
            server("missing", stdio("/nonexistent/mcp-server", &[])),
            server(
                "dies",
                stdio("bash", &["-c", "echo 'boom: config not found' >&2; exit 1"]),
            ),
        ],
        dir.path(),
        dir.path(),
    );
    let errors = hub.start();
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let all = text.join("\n");
    assert_eq!(errors.len(), 2, "{all}");
    assert!(
        all.contains("MCP server `missing`: cannot start `/nonexistent/mcp-server`"),
        "{all}"
    );
    assert!(all.contains("MCP server `dies`"), "{all}");
    assert!(all.contains("boom: config not found"), "{all}");
    assert!(all.contains("mcp-dies.log"), "{all}");
    assert!(hub.tools().is_empty());
}

/// A server that never completes the handshake is stopped with everything it started, not
/// only its first process (found by the adversarial review of `dsh doctor`: a child of the
/// server outlived it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_stopped_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let script = format!(
        "sleep 300 & echo $! > {}.tmp && mv {0}.tmp {0}; exec sleep 301",
        pid_file.display()
    );
    let mut mute = server("mute", stdio("sh", &["-c", &script]));
    mute.startup_timeout = Duration::from_secs(1);
    let hub = McpHub::new(vec![mute], dir.path(), dir.path());
    let errors = tokio::task::spawn_blocking(move || hub.start())
        .await
        .unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let pid = dsh_test_support::process::wait_for_pid(&pid_file);
    assert!(
        dsh_test_support::process::poll_until(Duration::from_secs(5), || {
            !dsh_test_support::process::alive(pid)
        }),
        "the server's child {pid} outlived its failed start"
    );
}

/// Env var naming the scratch dir of [`helper_starts_a_server_and_waits`]; unset, it does
/// nothing.
const MCP_HELPER_ENV: &str = "DSH_MCP_DEATH_HELPER_DIR";

/// A stdio MCP server, and a process it started, die when dsh is killed with SIGKILL
/// (docs/mcp.md; the keeper of `dsh_tools::guard_group`). The helper playing dsh is this test
/// binary: it starts the server through `McpHub` and waits.
#[test]
fn a_stdio_server_and_its_children_die_with_dsh() {
    let dir = tempfile::tempdir().unwrap();
    let mut helper = spawn_helper_test(
        "helper_starts_a_server_and_waits",
        MCP_HELPER_ENV,
        dir.path(),
    )
    .unwrap();
    let server = wait_for_pid(&dir.path().join("server.pid"));
    let child = wait_for_pid(&dir.path().join("child.pid"));
    let ready = dir.path().join("ready");
    assert!(
        poll_until(Duration::from_secs(20), || ready.exists()),
        "never ready"
    );
    assert!(alive(server) && alive(child), "the server is not running");
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(
        poll_until(Duration::from_secs(5), || !alive(server) && !alive(child)),
        "the server {server} or its child {child} outlived dsh"
    );
}

/// The dsh stand-in of [`a_stdio_server_and_its_children_die_with_dsh`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of a_stdio_server_and_its_children_die_with_dsh"]
async fn helper_starts_a_server_and_waits() {
    let Some(dir) = std::env::var_os(MCP_HELPER_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let script = dir.join("server.sh");
    let d = dir.display();
    let body = FAKE_SERVER.replacen(
        "echo \"fake server starting\" >&2\n",
        &format!(
            "echo \"fake server starting\" >&2\nsleep 300 & echo $! > '{d}/child.pid'\necho $$ > '{d}/server.pid'\n"
        ),
        1,
    );
    std::fs::write(&script, body).unwrap();
    let hub = McpHub::new(
        vec![server("fake", stdio("bash", &[script.to_str().unwrap()]))],
        &dir,
        &dir.join("logs"),
    );
    let errors = tokio::task::spawn_blocking({
        let hub = hub.clone();
        move || hub.start()
    })
    .await
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    std::fs::write(dir.join("ready"), "").unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// Answers every HTTP request on `listener` with `307` to `location`; returns the request heads.
fn redirect_everything(
    listener: std::net::TcpListener,
    location: String,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::{Read, Write};
    let (sent, heads) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let _ = sent.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let reply = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    heads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_redirecting_to_another_origin_gets_no_headers_there() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let elsewhere_url = format!("http://{}/mcp", elsewhere.local_addr().unwrap());
    let elsewhere_heads = redirect_everything(elsewhere, "http://127.0.0.1:1/".into());
    let server_socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", server_socket.local_addr().unwrap());
    let server_heads = redirect_everything(server_socket, elsewhere_url.clone());
    let dir = tempfile::tempdir().unwrap();
    let hub = McpHub::new(
        vec![server(
            "redirecting",
            McpTransport::Http {
                url,
                headers: vec![("X-Api-Key".into(), "mcp-secret-value".into())],
                bearer_token_env: None,
            },
        )],
        dir.path(),
        dir.path(),
    );
    let errors = hub.start();
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 1, "{all:?}");
    let head = server_heads
        .recv_timeout(Duration::from_secs(5))
        .expect("the configured server is asked");
    assert!(head.contains("mcp-secret-value"), "{head}");
    assert!(
        elsewhere_heads
            .recv_timeout(Duration::from_millis(300))
            .is_err(),
        "the redirect to another origin was followed"
    );
}

/// A stdio server whose script lies where the model can write starts only with the bytes that
/// were pinned: the check runs again at every restart, so a script rewritten while the server
/// ran (by a confined command, say) is refused when the server is started again, with a
/// message saying to trust it again; the rewritten script never runs (docs/mcp.md, "Servers in
/// the workspace are pinned").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_the_script_changed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let script = fake_server(&ws);
    let logs = ws.join("logs");
    let hub = McpHub::new(
        vec![server("fake", stdio("bash", &[script.to_str().unwrap()]))],
        &ws,
        &logs,
    );
    let mut pins = std::collections::BTreeMap::new();
    pins.insert(
        script.clone(),
        dsh_config::scripts::sha256(FAKE_SERVER.as_bytes()),
    );
    hub.set_script_gate(Arc::new(Pinned(dsh_config::scripts::ScriptGate {
        workspace: ws.clone(),
        cwd: ws.clone(),
        home: None,
        pins,
        extra_roots: Vec::new(),
    })));
    assert!(hub.start().is_empty(), "the pinned script starts");
    let marker = ws.join("rewritten-ran");
    std::fs::write(
        &script,
        format!("touch '{}'\n{FAKE_SERVER}", marker.display()),
    )
    .unwrap();
    let (results, _) = run_agent(
        hub,
        vec![
            tool_call("c1", "mcp__fake__crash", "{}"),
            tool_call("c2", "mcp__fake__ping", "{}"),
            text("done"),
        ],
    )
    .await;
    assert!(results[0].starts_with("Error: "), "{results:?}");
    assert!(results[1].starts_with("Error: "), "{results:?}");
    assert!(
        results[1].contains("changed since you trusted"),
        "{results:?}"
    );
    assert!(!marker.exists(), "the rewritten server script ran");
}

/// An HTTP server that cannot be reached, or answers an error, is named with its URL and what
/// failed, without the MCP client's Rust type names (issue 40: the message printed
/// `rmcp::transport::worker::WorkerTransport<...>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_http_server_is_reported_with_its_url_and_no_type_names() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\noops!",
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let refused = "http://127.0.0.1:1/mcp".to_string();
    let failing = format!("http://127.0.0.1:{port}/mcp");
    for (url, says) in [(refused, "error sending request"), (failing, "500")] {
        let hub = McpHub::new(
            vec![server(
                "remote",
                McpTransport::Http {
                    url: url.clone(),
                    headers: vec![],
                    bearer_token_env: None,
                },
            )],
            dir.path(),
            dir.path(),
        );
        let errors: Vec<String> = hub.start().iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        let error = &errors[0];
        assert!(
            error.contains("`remote`") && error.contains(&url),
            "{error}"
        );
        assert!(error.contains(says), "{error}");
        assert!(!error.contains("::"), "{error}");
        assert_eq!(error.matches(&url).count(), 1, "{error}");
    }
}
