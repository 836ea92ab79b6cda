//! `dsh-acp` end to end in process: a client on one side of a pipe, [`dsh_acp::serve`] on the
//! other, agents built over the fake provider. Covers what the recorded fixtures cannot: streamed
//! tool cards with diffs and plans, permission requests answered by the client, and
//! `session/load` replaying a session from its log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, SafetyPolicy};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_runtime::{OpenedSession, Resume, RuntimeError, SessionFactory, SessionSpec};
use dsh_session::{JsonlStore, SessionStore};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

#[derive(Clone)]
struct TestFactory {
    base_url: String,
    home: PathBuf,
    preset: PermissionPreset,
    /// A folder of skills (`<name>/SKILL.md`) for the session.
    skills: Option<PathBuf>,
    /// Register plan mode (`dsh_agent::PlanMode`), as `dsh-runtime` does.
    plan: bool,
    /// The session's model.
    model: &'static str,
    /// Background jobs (`dsh_tools::JobTable`, `dsh_agent::BackgroundJobs`) for every agent,
    /// so children can run in the background.
    jobs: bool,
}

impl TestFactory {
    fn new(base_url: String, home: &Path, preset: PermissionPreset) -> Self {
        TestFactory {
            base_url,
            home: home.to_path_buf(),
            preset,
            skills: None,
            plan: false,
            model: "deepseek-v4-flash",
            jobs: false,
        }
    }
}

impl TestFactory {
    /// An agent's parts at delegation `depth`, with a real `dsh_agent::Subagents` whose
    /// children are built by this same function one level deeper; and its children's feed.
    fn parts(
        &self,
        cwd: &Path,
        depth: u64,
    ) -> Result<(AgentParts, dsh_agent::ChildFeed), RuntimeError> {
        static SPILLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-acp-test")),
        ))
        .map_err(|e| RuntimeError::InvalidConfig(e.to_string()))?;
        let mut adapters = AdapterRegistry::new();
        adapters.register("deepseek", Arc::new(adapter)).unwrap();
        let spill = match depth {
            0 => self.home.join("spill"),
            _ => {
                let n = SPILLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                self.home.join(format!("spill-child-{n}"))
            }
        };
        let spill = SpillDir::create(spill).unwrap();
        let mut tool_context = ToolContext::new(cwd, spill)
            .unwrap()
            .with_permission(self.preset);
        let extensions = ExtensionSet::new();
        if self.jobs {
            let jobs = dsh_tools::JobTable::new();
            extensions.register_for_life(Arc::new(dsh_agent::BackgroundJobs::new(&jobs)));
            tool_context = tool_context.with_jobs(jobs);
        }
        for guard in dsh_agent::register_builtin_extensions(
            &extensions,
            RetryPolicy::default(),
            Duration::from_secs(60),
        ) {
            // The set lives as long as the agent.
            std::mem::forget(guard);
        }
        extensions.register_for_life(Arc::new(SafetyPolicy::new(self.preset, "none", "")));
        let factory: dsh_agent::ChildFactory = {
            let this = self.clone();
            let cwd = cwd.to_path_buf();
            Arc::new(move |d| {
                this.parts(&cwd, d).map(|(parts, _)| parts).map_err(|e| {
                    dsh_agent::SubagentError::Setup {
                        code: "INVALID_CONFIG".into(),
                        message: e.to_string(),
                    }
                })
            })
        };
        let subagents = dsh_agent::Subagents::new(depth, factory);
        let children = subagents.feed();
        extensions.register_for_life(Arc::new(subagents));
        if depth == 0 {
            if let Some(dir) = &self.skills {
                extensions.register_for_life(Arc::new(dsh_agent::Skills::new(
                    dsh_agent::SkillSet::discover(std::slice::from_ref(dir)),
                )));
            }
            if self.plan {
                extensions.register_for_life(Arc::new(dsh_agent::PlanMode::new()));
            }
        }
        let mut tools = ToolRegistry::with_builtins();
        tools
            .register(Arc::new(dsh_tools::AskUserQuestionTool))
            .unwrap();
        let parts = AgentParts {
            adapters,
            tools: Arc::new(tools),
            extensions,
            tool_context,
            options: AgentOptions::new(CallConfig::new("deepseek", self.model), cwd),
        };
        Ok((parts, children))
    }
}

/// What each preset means in these tests: no sandbox, and `danger-full-access` refused (as a
/// host without it would).
fn permission_source() -> dsh_agent::PermissionSource {
    Arc::new(|preset: PermissionPreset| {
        if preset == PermissionPreset::DangerFullAccess {
            return Err(dsh_agent::PermissionError::SandboxUnavailable(
                "not on this test host".to_string(),
            ));
        }
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: Arc::new(dsh_tools::NoSandbox),
            sandbox_mode: "none".into(),
            sandbox_detail: format!("test for {preset}"),
            summary: format!("{preset} (test)"),
        })
    })
}

impl SessionFactory for TestFactory {
    fn open(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<OpenedSession, RuntimeError> {
        assert!(
            spec.history,
            "ACP replays resumed sessions, so it asks for their history"
        );
        let cwd = spec.cwd.clone().expect("ACP names the session's cwd");
        let (parts, children) = self.parts(&cwd, 0)?;
        let (mut agent, history) = match &spec.resume {
            Resume::Id(key) => {
                let agent = Agent::resume(parts, store, key)?;
                let history = store.load(key)?.events;
                (agent, history)
            }
            Resume::New => (Agent::create(parts, store)?, Vec::new()),
            Resume::Latest => panic!("ACP never asks for the latest session"),
        };
        agent.set_permission_source(permission_source());
        Ok(OpenedSession {
            agent,
            history,
            children,
            preconnect: dsh_runtime::Preconnector::off(),
        })
    }

    fn store(&self) -> Arc<dyn SessionStore + Send + Sync> {
        Arc::new(JsonlStore::new(&self.home))
    }

    fn default_model(&self, _spec: &SessionSpec) -> Option<String> {
        Some(self.model.to_string())
    }

    fn model_info(&self, model: &str) -> Option<dsh_llm::ModelInfo> {
        Some(dsh_deepseek::model_info(model))
    }
}

struct Client {
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    write: WriteHalf<DuplexStream>,
    read: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    seen: Vec<Value>,
    /// For each request of the server the client answered: how many lines it had read then,
    /// and the request's id.
    answered: Vec<(usize, Value)>,
    next_id: u64,
}

impl Client {
    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Reads until the response to `id`; answers permission requests with `option`.
    async fn response(&mut self, id: u64, option: &str) -> Value {
        let option = option.to_string();
        self.response_with(id, move |_| {
            Some(json!({"outcome": {"outcome": "selected", "optionId": option}}))
        })
        .await
    }

    /// Reads until the response to `id`; answers each permission request with what `answer`
    /// gives for it (`None`: a `session/cancel` of the turn, then a `cancelled` outcome, as
    /// ACP asks of a client that cancels while a permission request is open).
    async fn response_with(
        &mut self,
        id: u64,
        mut answer: impl FnMut(&Value) -> Option<Value>,
    ) -> Value {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.read.next_line())
                .await
                .expect("no line within 30 s")
                .unwrap()
                .expect("server closed");
            let value: Value = serde_json::from_str(&line).unwrap();
            self.seen.push(value.clone());
            // Forms (`elicitation/create`, the plan review's edits) are answered the same way.
            if value["method"] == "session/request_permission"
                || value["method"] == "elicitation/create"
            {
                let result = match answer(&value) {
                    Some(result) => result,
                    None => {
                        let session = value["params"]["sessionId"].clone();
                        self.send(json!({"jsonrpc": "2.0", "method": "session/cancel",
                            "params": {"sessionId": session}}))
                            .await;
                        json!({"outcome": {"outcome": "cancelled"}})
                    }
                };
                self.send(json!({"jsonrpc": "2.0", "id": value["id"], "result": result}))
                    .await;
                self.answered.push((self.seen.len(), value["id"].clone()));
            } else if value["id"] == json!(id) {
                return value;
            }
        }
    }

    /// Closes the connection and waits for the server to end, which releases the sessions'
    /// logs.
    async fn close(self) {
        let Client {
            server, mut write, ..
        } = self;
        write.shutdown().await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("server did not stop after EOF")
            .unwrap()
            .unwrap();
    }

    /// `session/load` of `session` in `cwd`: the answer, once the replay was read.
    async fn load(&mut self, session: &str, cwd: &Path) -> Value {
        let id = self
            .request(
                "session/load",
                json!({"sessionId": session, "cwd": cwd.display().to_string(), "mcpServers": []}),
            )
            .await;
        self.response(id, "").await
    }

    fn updates(&self) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|l| l["method"] == "session/update")
            .map(|l| &l["params"]["update"])
            .collect()
    }
}

fn connect(factory: impl SessionFactory) -> Client {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (server_read, server_write) = tokio::io::split(server);
    let server = tokio::spawn(dsh_acp::serve(
        server_read,
        server_write,
        Arc::new(factory),
        "dsh",
        "test",
    ));
    let (read, write) = tokio::io::split(client);
    Client {
        server,
        write,
        read: BufReader::new(read).lines(),
        seen: Vec::new(),
        answered: Vec::new(),
        next_id: 0,
    }
}

async fn new_session(client: &mut Client, cwd: &Path) -> String {
    let id = client
        .request(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        )
        .await;
    let answer = client.response(id, "").await;
    answer["result"]["sessionId"].as_str().unwrap().to_string()
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_cards_diffs_plans_and_load() {
    let write_args = r#"{"file_path":"notes.txt","content":"hello\n"}"#;
    let todo_args = r#"{"todos":[{"content":"write notes","status":"completed"}]}"#;
    let replies: Vec<ScriptedReply> = vec![
        SseReply::new()
            .reasoning("I will write.")
            .tool_call(0, "call_w", "write", write_args)
            .tool_call(1, "call_t", "todo_write", todo_args)
            .finish("tool_calls", None)
            .into(),
        SseReply::new()
            .text("Wr")
            .text("itten.")
            .finish("stop", None)
            .into(),
    ];
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(cwd.path()).unwrap();
    let factory = || {
        TestFactory::new(
            provider.base_url(),
            home.path(),
            PermissionPreset::DangerFullAccess,
        )
    };
    let mut client = connect(factory());
    let session = new_session(&mut client, &cwd).await;
    let id = client
        .request("session/prompt", prompt(&session, "write notes"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(cwd.join("notes.txt")).unwrap(),
        "hello\n"
    );

    let updates = client.updates();
    let kinds: Vec<&str> = updates
        .iter()
        .filter_map(|u| u["sessionUpdate"].as_str())
        .collect();
    assert!(kinds.contains(&"agent_thought_chunk"), "{kinds:?}");
    let texts: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(texts, ["Wr", "itten."], "deltas are streamed one by one");
    let card = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(card["toolCallId"], "call_w");
    assert_eq!(card["kind"], "edit");
    assert_eq!(
        card["locations"][0]["path"],
        cwd.join("notes.txt").display().to_string()
    );
    let done = updates
        .iter()
        .find(|u| u["toolCallId"] == "call_w" && u["status"] == "completed")
        .unwrap();
    let diff = done["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "diff")
        .unwrap();
    assert_eq!(diff["newText"], "hello\n");
    assert_eq!(diff["oldText"], Value::Null);
    let plan = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "plan")
        .unwrap();
    assert_eq!(plan["entries"][0]["status"], "completed");
    // Closing the connection ends the server, which releases the session's log.
    client.close().await;

    // A new connection loads the session: the conversation comes back as updates.
    let mut client = connect(factory());
    let answer = client.load(&session, &cwd).await;
    assert_eq!(
        answer["result"]["modes"]["currentModeId"], "danger-full-access",
        "{answer}"
    );
    let replayed = client.updates();
    let user = replayed
        .iter()
        .find(|u| u["sessionUpdate"] == "user_message_chunk")
        .unwrap();
    assert_eq!(user["content"]["text"], "write notes");
    assert!(
        replayed
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk"
                && u["content"]["text"] == "Written.")
    );
    assert!(replayed
        .iter()
        .any(|u| u["toolCallId"] == "call_w" && u["status"] == "completed"));
    assert!(replayed.iter().any(|u| u["sessionUpdate"] == "plan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_requests_go_to_the_client() {
    let args = r#"{"command":"echo escalated","description":"echo","sandbox_permissions":"danger-full-access","justification":"the test asks"}"#;
    let call = |id: &str| {
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, id, "bash", args)
                .finish("tool_calls", None),
        )
    };
    let replies = vec![
        call("call_allowed"),
        SseReply::new().text("ran").finish("stop", None).into(),
        call("call_rejected"),
        SseReply::new().text("refused").finish("stop", None).into(),
        call("call_session"),
        SseReply::new().text("ran").finish("stop", None).into(),
        call("call_covered"),
        SseReply::new()
            .text("ran without asking")
            .finish("stop", None)
            .into(),
    ];
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::WorkspaceWrite,
    ));
    let session = new_session(&mut client, cwd.path()).await;

    let id = client
        .request("session/prompt", prompt(&session, "run it"))
        .await;
    client.response(id, dsh_acp::ALLOW_ONCE).await;
    let id = client
        .request("session/prompt", prompt(&session, "again"))
        .await;
    client.response(id, dsh_acp::REJECT_ONCE).await;
    // "For this session": the rule (`echo escalated` under danger-full-access) answers the
    // next matching call of this ACP session without a request.
    let id = client
        .request("session/prompt", prompt(&session, "once more"))
        .await;
    client.response(id, dsh_acp::ALLOW_SESSION).await;
    let id = client
        .request("session/prompt", prompt(&session, "and again"))
        .await;
    client.response(id, dsh_acp::REJECT_ONCE).await;

    let asked: Vec<&Value> = client
        .seen
        .iter()
        .filter(|l| l["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    // Ordering (docs/acp.md): each call's `tool_call` card precedes its permission request.
    for question in &asked {
        let call = &question["params"]["toolCall"]["toolCallId"];
        let position = |pred: &dyn Fn(&Value) -> bool| client.seen.iter().position(pred).unwrap();
        let card = position(&|l: &Value| {
            l["params"]["update"]["sessionUpdate"] == "tool_call"
                && l["params"]["update"]["toolCallId"] == *call
        });
        let request = position(&|l: &Value| {
            l["method"] == "session/request_permission"
                && l["params"]["toolCall"]["toolCallId"] == *call
        });
        assert!(
            card < request,
            "{call}: tool_call at {card}, request at {request}"
        );
        // While the client is asked, the call is `pending`: the protocol's awaitingApproval.
        let before = client.seen[..request]
            .iter()
            .rev()
            .map(|l| &l["params"]["update"])
            .find(|u| u["toolCallId"] == *call && u["status"].is_string())
            .unwrap();
        assert_eq!(before["status"], "pending", "{call}: {before}");
        assert_eq!(
            before["_meta"]["dsh"]["state"], "awaitingApproval",
            "{call}: {before}"
        );
        // The call is `in_progress` only once it runs, after the client's answer (issue 39:
        // the update came before the request); a rejected call never is.
        let answered = client
            .answered
            .iter()
            .find(|(_, id)| *id == client.seen[request]["id"])
            .map(|(at, _)| *at)
            .unwrap();
        let running = client.seen.iter().position(|l: &Value| {
            l["params"]["update"]["sessionUpdate"] == "tool_call_update"
                && l["params"]["update"]["toolCallId"] == *call
                && l["params"]["update"]["status"] == "in_progress"
        });
        if let Some(running) = running {
            assert!(
                answered <= running,
                "{call}: answered after line {answered}, in_progress at {running}"
            );
        }
    }
    let rejected_ran = client.seen.iter().any(|l: &Value| {
        l["params"]["update"]["toolCallId"] == "call_rejected"
            && l["params"]["update"]["status"] == "in_progress"
    });
    assert!(!rejected_ran, "a rejected call was shown running");
    acp_runtime::assert_seen_valid(&client);
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_allowed");
    assert_eq!(asked[2]["params"]["toolCall"]["toolCallId"], "call_session");
    let options: Vec<(Value, Value)> = asked[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].clone(), o["kind"].clone()))
        .collect();
    // Rules are not persisted by this factory, so "always" is not offered.
    assert_eq!(
        options,
        vec![
            (json!("allow_once"), json!("allow_once")),
            (json!("allow_session"), json!("allow_always")),
            (json!("reject_once"), json!("reject_once")),
        ]
    );
    let status = |call: &str| {
        client
            .updates()
            .iter()
            .rev()
            .find(|u| u["toolCallId"] == call && u["sessionUpdate"] == "tool_call_update")
            .map(|u| u["status"].clone())
    };
    assert_eq!(status("call_allowed"), Some(json!("completed")));
    assert_eq!(status("call_rejected"), Some(json!("failed")));
    // Denied by the user: `failed` in ACP's words, the protocol's state and answer in `_meta`.
    let denied = client
        .updates()
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == "call_rejected")
        .unwrap();
    assert_eq!(denied["_meta"]["dsh"]["state"], "denied", "{denied}");
    assert_eq!(
        denied["_meta"]["dsh"]["approval"]["outcome"], "rejected",
        "{denied}"
    );
    assert_eq!(status("call_session"), Some(json!("completed")));
    assert_eq!(status("call_covered"), Some(json!("completed")));
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_server_keeps_going() {
    let home = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory::new(
        "http://127.0.0.1:9".into(),
        home.path(),
        PermissionPreset::ReadOnly,
    ));
    client.write.write_all(b"{not json\n[]\n").await.unwrap();
    let id = client
        .request("session/prompt", json!({"sessionId": "nope"}))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["error"]["code"], -32602);
    let id = client
        .request("session/new", json!({"cwd": "relative"}))
        .await;
    assert_eq!(client.response(id, "").await["error"]["code"], -32602);
    // An unknown session is ACP's "resource not found", naming the id, not an internal error.
    let answer = client.load("no-such-session", home.path()).await;
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-session"),
        "{answer}"
    );
    let id = client
        .request("initialize", json!({"protocolVersion": 1}))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["agentCapabilities"]["loadSession"], true);
    let errors: Vec<i64> = client
        .seen
        .iter()
        .filter_map(|l| l["error"]["code"].as_i64())
        .collect();
    assert_eq!(&errors[..2], [-32700, -32600]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_compact_compacts_the_conversation() {
    let provider = FakeProvider::start([
        ScriptedReply::from(SseReply::new().text("first answer").finish("stop", None)),
        ScriptedReply::from(SseReply::new().text("second answer").finish("stop", None)),
        ScriptedReply::from(
            SseReply::new()
                .text("## Goal\ntalk\n## Next step\nwait")
                .finish("stop", None),
        ),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::DangerFullAccess,
    ));
    let session = new_session(&mut client, cwd.path()).await;
    for text in ["one", "two"] {
        let id = client
            .request("session/prompt", prompt(&session, text))
            .await;
        assert_eq!(
            client.response(id, "").await["result"]["stopReason"],
            "end_turn"
        );
    }
    let id = client
        .request("session/prompt", prompt(&session, "/compact"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let said: String = client
        .updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(said.contains("Compacted:"), "{said}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "the third request is the summary");
    assert!(requests[2].body.to_string().contains("handoff"));
}

/// `/undo` reverts the latest turn's file changes through the protocol's `Op::Undo` and says
/// what it did; with nothing left to undo it says why; `/fork` makes a loadable copy through
/// `Op::Fork` (issue 39: undo and fork in every front end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_undo_and_fork_go_through_the_protocol() {
    let provider = FakeProvider::start([
        SseReply::new()
            .tool_call(
                0,
                "call_w",
                "write",
                r#"{"file_path":"notes.txt","content":"hello\n"}"#,
            )
            .finish("tool_calls", None)
            .into(),
        ScriptedReply::from(SseReply::new().text("written").finish("stop", None)),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(cwd.path()).unwrap();
    let mut client = connect(TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::DangerFullAccess,
    ));
    let session = new_session(&mut client, &cwd).await;
    let id = client
        .request("session/prompt", prompt(&session, "write notes"))
        .await;
    assert_eq!(
        client.response(id, "").await["result"]["stopReason"],
        "end_turn"
    );
    assert!(cwd.join("notes.txt").exists());
    let said = |client: &Client| -> String {
        client
            .updates()
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    };
    for expected in ["notes.txt", "Nothing was undone"] {
        let id = client
            .request("session/prompt", prompt(&session, "/undo"))
            .await;
        assert_eq!(
            client.response(id, "").await["result"]["stopReason"],
            "end_turn"
        );
        assert!(said(&client).contains(expected), "{}", said(&client));
    }
    assert!(!cwd.join("notes.txt").exists(), "the undo kept the file");
    assert_eq!(
        provider.requests().len(),
        2,
        "/undo sends nothing to the model"
    );

    // `/fork` (Op::Fork) copies the session into a new one the editor can load.
    for (text, expected) in [
        ("/fork 9", "Not forked: cannot fork"),
        ("/fork two", "no turn number"),
        ("/fork", "after turn 1 into"),
    ] {
        let id = client
            .request("session/prompt", prompt(&session, text))
            .await;
        assert_eq!(
            client.response(id, "").await["result"]["stopReason"],
            "end_turn"
        );
        assert!(
            said(&client).contains(expected),
            "{text}: {}",
            said(&client)
        );
    }
    let said = said(&client);
    let forked = said
        .split("into ")
        .last()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_ne!(forked, session);
    let answer = client.load(&forked, &cwd).await;
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(
        provider.requests().len(),
        2,
        "/fork sends nothing to the model"
    );
}

fn updates_of<'a>(client: &'a Client, kind: &str) -> Vec<&'a Value> {
    client
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The text of the last `tool_call_update` of `call` and its status.
fn tool_result(client: &Client, call: &str) -> (String, Value) {
    let update = client
        .updates()
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == call && u["sessionUpdate"] == "tool_call_update")
        .unwrap_or_else(|| panic!("no update for {call}"));
    let text = update["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["content"]["text"].as_str())
        .collect();
    (text, update["status"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_presets_are_session_modes() {
    let write = |id: &str| {
        ScriptedReply::from(
            SseReply::new()
                .tool_call(0, id, "write", r#"{"file_path":"out.txt","content":"x\n"}"#)
                .finish("tool_calls", None),
        )
    };
    let done = || ScriptedReply::from(SseReply::new().text("ok").finish("stop", None));
    let provider = FakeProvider::start(vec![write("call_ro"), done(), write("call_ww"), done()])
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(cwd.path()).unwrap();
    let mut client = connect(TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::WorkspaceWrite,
    ));
    let id = client
        .request(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        )
        .await;
    let answer = client.response(id, "").await;
    let session = answer["result"]["sessionId"].as_str().unwrap().to_string();
    let modes = &answer["result"]["modes"];
    assert_eq!(modes["currentModeId"], "workspace-write", "{answer}");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["read-only", "ask", "workspace-write", "danger-full-access"]
    );
    assert!(modes["availableModes"][0]["name"].is_string());

    // Switching to read-only: answered `{}`, reported, and the next write is refused.
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "read-only"}),
        )
        .await;
    assert_eq!(client.response(id, "").await["result"], json!({}));
    let switched = updates_of(&client, "current_mode_update");
    assert_eq!(switched.len(), 1);
    assert_eq!(switched[0]["currentModeId"], "read-only");
    let id = client
        .request("session/prompt", prompt(&session, "write it"))
        .await;
    assert_eq!(
        client.response(id, "").await["result"]["stopReason"],
        "end_turn"
    );
    assert_eq!(tool_result(&client, "call_ro").1, "failed");
    assert!(!cwd.join("out.txt").exists());

    // The same mode again changes nothing; unknown and unusable modes are errors.
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "read-only"}),
        )
        .await;
    assert_eq!(client.response(id, "").await["result"], json!({}));
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "yolo"}),
        )
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown mode `yolo`"), "{message}");
    assert!(
        message.contains("or plan)"),
        "every mode is listed: {message}"
    );
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "danger-full-access"}),
        )
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(
        answer["error"]["message"], "cannot switch to danger-full-access: not on this test host",
        "{answer}"
    );
    assert_eq!(updates_of(&client, "current_mode_update").len(), 1);

    // `/permission` typed as a prompt shows and switches the preset too.
    let id = client
        .request("session/prompt", prompt(&session, "/permission"))
        .await;
    assert_eq!(
        client.response(id, "").await["result"]["stopReason"],
        "end_turn"
    );
    let id = client
        .request(
            "session/prompt",
            prompt(&session, "/permission workspace-write"),
        )
        .await;
    assert_eq!(
        client.response(id, "").await["result"]["stopReason"],
        "end_turn"
    );
    let said: Vec<&str> = updates_of(&client, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        said.iter()
            .any(|t| t.starts_with("Permission preset: read-only.")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|t| t.starts_with("Permission preset switched to workspace-write")),
        "{said:?}"
    );
    let switched = updates_of(&client, "current_mode_update");
    assert_eq!(switched.len(), 2);
    assert_eq!(switched[1]["currentModeId"], "workspace-write");
    assert_eq!(
        provider.requests().len(),
        2,
        "/permission does not reach the model"
    );
    let id = client
        .request("session/prompt", prompt(&session, "write it again"))
        .await;
    client.response(id, "").await;
    assert_eq!(tool_result(&client, "call_ww").1, "completed");
    assert_eq!(std::fs::read_to_string(cwd.join("out.txt")).unwrap(), "x\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_asked_as_permission_requests() {
    let ask = |id: &str, questions: Value| {
        ScriptedReply::from(
            SseReply::new()
                .tool_call(
                    0,
                    id,
                    "ask_user_question",
                    &json!({ "questions": questions }).to_string(),
                )
                .finish("tool_calls", None),
        )
    };
    let choice = json!({"id": "db", "question": "Which database?", "header": "Storage",
        "options": [{"label": "SQLite", "description": "one file"}, {"label": "Postgres"}]});
    let free = json!({"id": "name", "question": "What should the service be called?"});
    let done = || ScriptedReply::from(SseReply::new().text("noted").finish("stop", None));
    let provider = FakeProvider::start(vec![
        ask("call_pick", json!([choice, free])),
        done(),
        ask("call_decline", json!([choice])),
        done(),
        ask("call_free", json!([free])),
        done(),
        ask("call_cancel", json!([choice])),
        done(),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory::new(
        provider.base_url(),
        home.path(),
        PermissionPreset::WorkspaceWrite,
    ));
    let session = new_session(&mut client, cwd.path()).await;
    let asked = |client: &Client| -> Vec<Value> {
        client
            .seen
            .iter()
            .filter(|l| l["method"] == "session/request_permission")
            .map(|l| l["params"].clone())
            .collect()
    };

    // A choice: the label of the picked option is the answer; the free-text question of the
    // same call is skipped.
    let id = client
        .request("session/prompt", prompt(&session, "plan it"))
        .await;
    let answer = client
        .response_with(id, |_| {
            Some(json!({"outcome": {"outcome": "selected", "optionId": "answer-1"}}))
        })
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let requests = asked(&client);
    assert_eq!(requests.len(), 1, "only the question with options is asked");
    assert_eq!(requests[0]["toolCall"]["toolCallId"], "call_pick");
    assert_eq!(requests[0]["toolCall"]["title"], "Storage: Which database?");
    let options: Vec<(&str, &str)> = requests[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        options,
        [
            ("SQLite", "allow_once"),
            ("Postgres", "allow_once"),
            ("Don't answer", "reject_once")
        ]
    );
    let (text, status) = tool_result(&client, "call_pick");
    assert_eq!(status, "completed");
    assert!(text.contains("Which database? (db): Postgres"), "{text}");
    assert!(text.contains("(name): (no answer)"), "{text}");

    // "Don't answer" declines.
    let id = client
        .request("session/prompt", prompt(&session, "again"))
        .await;
    client
        .response_with(id, |_| {
            Some(json!({"outcome": {"outcome": "selected", "optionId": "decline"}}))
        })
        .await;
    let (text, status) = tool_result(&client, "call_decline");
    assert_eq!(status, "completed");
    assert!(text.contains("dismissed"), "{text}");

    // Only free text: nothing is asked, the model is told why and decides itself.
    let id = client
        .request("session/prompt", prompt(&session, "name it"))
        .await;
    client.response_with(id, |_| panic!("asked")).await;
    assert_eq!(asked(&client).len(), 2);
    let (text, status) = tool_result(&client, "call_free");
    assert_eq!(status, "failed");
    assert!(text.contains("free-text"), "{text}");

    // The user cancels the turn while the question is open: the client answers `cancelled`
    // and the prompt ends `cancelled`.
    let id = client
        .request("session/prompt", prompt(&session, "choose"))
        .await;
    let answer = client.response_with(id, |_| None).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert_eq!(asked(&client).len(), 3);
    // The cancel and the `cancelled` outcome race inside the call: it ends aborted, or
    // declined when the outcome is seen first.
    let (text, status) = tool_result(&client, "call_cancel");
    assert!(
        status == "failed" || text.contains("dismissed"),
        "{status} {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_invocable_skills_are_slash_commands() {
    let provider = FakeProvider::start([
        ScriptedReply::from(SseReply::new().text("reviewed").finish("stop", None)),
        ScriptedReply::from(SseReply::new().text("plain").finish("stop", None)),
    ])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let skills = tempfile::tempdir().unwrap();
    for (name, extra) in [("review", ""), ("internal", "user-invocable: false\n")] {
        std::fs::create_dir_all(skills.path().join(name)).unwrap();
        std::fs::write(
            skills.path().join(name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: The {name} skill\n{extra}---\nSteps of {name}: look closely.\n"),
        )
        .unwrap();
    }
    let factory = || TestFactory {
        skills: Some(skills.path().to_path_buf()),
        ..TestFactory::new(
            provider.base_url(),
            home.path(),
            PermissionPreset::WorkspaceWrite,
        )
    };
    let mut client = connect(factory());
    let session = new_session(&mut client, cwd.path()).await;
    let advertised = |client: &Client| -> Vec<Value> {
        updates_of(client, "available_commands_update")
            .iter()
            .map(|u| u["availableCommands"].clone())
            .collect()
    };
    // The notification follows the response: read it with the next request's.
    let id = client
        .request("session/prompt", prompt(&session, "/review the parser"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let lists = advertised(&client);
    assert_eq!(lists.len(), 1);
    let names: Vec<&str> = lists[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["compact", "permission", "undo", "fork", "review"]);
    assert_eq!(lists[0][4]["description"], "The review skill");
    assert!(lists[0][4]["input"]["hint"].is_string());

    // `/review ...` ran the skill: its instructions and the request reached the model.
    let requests = provider.requests();
    let sent = requests[0].body["messages"].to_string();
    assert!(sent.contains("Steps of review: look closely."), "{sent}");
    assert!(sent.contains("User request: the parser"), "{sent}");

    // A slash word that is no user command (here a skill that is not user-invocable) is
    // plain text for the model.
    let id = client
        .request("session/prompt", prompt(&session, "/internal please"))
        .await;
    client.response(id, "").await;
    let requests = provider.requests();
    let last = requests[1].body["messages"].as_array().unwrap().clone();
    assert!(
        last.iter()
            .any(|m| m["role"] == "user" && m["content"] == "/internal please"),
        "{last:?}"
    );

    // Loading the session advertises the commands again.
    client.close().await;
    let mut client = connect(factory());
    client.load(&session, cwd.path()).await;
    let id = client
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "workspace-write"}),
        )
        .await;
    client.response(id, "").await;
    assert_eq!(advertised(&client).len(), 1);
}

/// The final state of each tool call the client was shown: title (from its `tool_call`),
/// status and the protocol's state and approval answer (from its last update).
fn final_cards(updates: &[&Value]) -> Vec<(String, Value, Value, Value, Value)> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|card| {
            let call = card["toolCallId"].as_str().unwrap();
            let last = updates
                .iter()
                .rev()
                .find(|u| u["toolCallId"] == call && u["status"].is_string())
                .unwrap();
            (
                call.to_string(),
                card["title"].clone(),
                last["status"].clone(),
                last["_meta"]["dsh"]["state"].clone(),
                last["_meta"]["dsh"]["approval"]["outcome"].clone(),
            )
        })
        .collect()
}

/// `session/load` replays the log through the same projector as the live view: an approved
/// and a denied call end with the same titles, statuses and approval answers either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_session_shows_the_cards_the_live_one_showed() {
    let args = r#"{"command":"echo escalated","description":"echo","sandbox_permissions":"danger-full-access","justification":"the test asks"}"#;
    let replies = vec![
        SseReply::new()
            .tool_call(0, "call_yes", "bash", args)
            .tool_call(1, "call_no", "bash", args)
            .finish("tool_calls", None)
            .into(),
        SseReply::new().text("one ran").finish("stop", None).into(),
    ];
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let factory = || {
        TestFactory::new(
            provider.base_url(),
            home.path(),
            PermissionPreset::WorkspaceWrite,
        )
    };
    let mut client = connect(factory());
    let session = new_session(&mut client, cwd.path()).await;
    let id = client
        .request("session/prompt", prompt(&session, "run both"))
        .await;
    let answer = client
        .response_with(id, |request| {
            let option = match request["params"]["toolCall"]["toolCallId"].as_str() {
                Some("call_yes") => dsh_acp::ALLOW_ONCE,
                _ => dsh_acp::REJECT_ONCE,
            };
            Some(json!({"outcome": {"outcome": "selected", "optionId": option}}))
        })
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let live = final_cards(&client.updates());
    acp_runtime::assert_seen_valid(&client);
    client.close().await;

    let mut client = connect(factory());
    let answer = client.load(&session, cwd.path()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let loaded = final_cards(&client.updates());
    acp_runtime::assert_seen_valid(&client);
    assert_eq!(
        live.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["call_yes", "call_no"],
        "{live:?}"
    );
    let yes = &live[0];
    assert_eq!(
        (&yes.2, &yes.3, &yes.4),
        (&json!("completed"), &json!("done"), &json!("approved")),
        "{live:?}"
    );
    let no = &live[1];
    assert_eq!(
        (&no.2, &no.3, &no.4),
        (&json!("failed"), &json!("denied"), &json!("rejected")),
        "{live:?}"
    );
    assert!(
        yes.1.as_str().unwrap().starts_with("bash"),
        "the tool's own title: {live:?}"
    );
    assert_eq!(loaded, live);
}

/// Sessions built by the real composition root ([`dsh_runtime::Runtime`]): fleets (usage,
/// title, model and effort), the auth error, the editor's MCP servers and workspace trust.
#[path = "acp_runtime/mod.rs"]
mod acp_runtime;

#[path = "acp_plan/mod.rs"]
mod acp_plan;

#[path = "acp_children/mod.rs"]
mod acp_children;

use dsh_test_support::images::{RED_PNG_BASE64, RED_PNG_SHA256 as RED_HEX};

/// `promptCapabilities.image` is on; an image block of `session/prompt` reaches the model as an
/// image in the user message, and the log stores it once as a file beside the session
/// (docs/acp.md, "Images"); bad images are refused with what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_images_reach_the_model_and_the_blob_store() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new().text("DONE").finish("stop", None),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut factory =
        TestFactory::new(provider.base_url(), home.path(), PermissionPreset::ReadOnly);
    factory.model = "deepseek-v4-flash-vision-exp";
    let mut client = connect(factory);
    let id = client
        .request("initialize", json!({"protocolVersion": 1}))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(
        answer["result"]["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    let session = new_session(&mut client, cwd.path()).await;

    // Not an image, and a declared type that is not the bytes': refused, nothing queued.
    for (data, mime, needle) in [
        ("aGVsbG8=", "image/png", "not a PNG, JPEG, GIF or WebP"),
        (RED_PNG_BASE64, "image/gif", "declared image/gif"),
        ("%%%", "image/png", "not standard base64"),
    ] {
        let id = client
            .request(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "image", "data": data, "mimeType": mime}]}),
            )
            .await;
        let answer = client.response(id, "").await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }

    let id = client
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [
                {"type": "text", "text": "Inspect this image, then reply with exactly "},
                {"type": "image", "data": RED_PNG_BASE64, "mimeType": "image/png"},
                {"type": "text", "text": "the single word DONE."}
            ]}),
        )
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let body = &provider.requests()[0].body;
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m["content"].is_array())
        .expect("a user message with parts");
    assert_eq!(
        user["content"][2]["image_url"]["url"],
        format!("data:image/png;base64,{RED_PNG_BASE64}")
    );
    assert_eq!(user["content"][3]["text"], "the single word DONE.");

    // The image file beside the session, and only a reference in the log.
    let store = JsonlStore::new(home.path());
    let blobs = store.blobs(&session).unwrap();
    let stored = std::fs::read(blobs.dir().join(format!("{RED_HEX}.png"))).unwrap();
    assert_eq!(stored.len(), 69);
    let log = std::fs::read_to_string(store.find(&session).unwrap()).unwrap();
    assert!(log.contains(&format!("sha256:{RED_HEX}")));
    assert!(!log.contains(RED_PNG_BASE64), "no base64 in the log");
}

/// A text-only default model (issue 40): `promptCapabilities.image` is off, and an image prompt
/// sent anyway is refused with a clear error before anything is logged, so the session's next
/// text prompt still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_only_model_offers_no_images_and_refuses_them() {
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new().text("DONE").finish("stop", None),
    )])
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let factory = TestFactory::new(provider.base_url(), home.path(), PermissionPreset::ReadOnly);
    let mut client = connect(factory);
    let id = client
        .request("initialize", json!({"protocolVersion": 1}))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(
        answer["result"]["agentCapabilities"]["promptCapabilities"]["image"], false,
        "{answer}"
    );
    let session = new_session(&mut client, cwd.path()).await;
    let id = client
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [
                {"type": "text", "text": "look"},
                {"type": "image", "data": RED_PNG_BASE64, "mimeType": "image/png"}
            ]}),
        )
        .await;
    let answer = client.response(id, "").await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("takes text only"), "{answer}");
    let store = JsonlStore::new(home.path());
    let log = std::fs::read_to_string(store.find(&session).unwrap()).unwrap();
    assert!(!log.contains(&format!("sha256:{RED_HEX}")), "{log}");

    let id = client
        .request("session/prompt", prompt(&session, "hello"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(provider.requests().len(), 1);
}
