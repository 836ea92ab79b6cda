//! `dsh-acp` end to end in process: a client on one side of a pipe, [`dsh_acp::serve`] on the
//! other, agents built over the fake provider. Covers what the recorded fixtures cannot: streamed
//! tool cards with diffs and plans, permission requests answered by the client, and
//! `session/load` replaying a session from its log.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_acp::{AgentFactory, OpenRequest, OpenedAgent};
use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet, SafetyPolicy};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_session::{open_store, StoreKind};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply};
use dsh_tools::{PermissionPreset, SpillDir, ToolContext, ToolRegistry};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

struct TestFactory {
    base_url: String,
    home: PathBuf,
    preset: PermissionPreset,
}

impl AgentFactory for TestFactory {
    fn open(&self, request: &OpenRequest) -> Result<OpenedAgent, String> {
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-acp-test")),
        ))
        .map_err(|e| e.to_string())?;
        let mut adapters = AdapterRegistry::new();
        adapters.register("deepseek", Arc::new(adapter)).unwrap();
        let spill = SpillDir::create(self.home.join("spill")).unwrap();
        let tool_context = ToolContext::new(&request.cwd, spill)
            .unwrap()
            .with_permission(self.preset);
        let extensions = ExtensionSet::new();
        let guards = dsh_agent::register_builtin_extensions(
            &extensions,
            RetryPolicy::default(),
            Duration::from_secs(60),
        );
        extensions.register_for_life(Arc::new(SafetyPolicy::new(self.preset, "none", "")));
        let parts = AgentParts {
            adapters,
            tools: Arc::new(ToolRegistry::with_builtins()),
            extensions,
            tool_context,
            options: AgentOptions::new(
                CallConfig::new("deepseek", "deepseek-v4-flash"),
                &request.cwd,
            ),
        };
        let store = open_store(StoreKind::Jsonl, &self.home).unwrap();
        let (agent, history) = match &request.resume {
            Some(key) => {
                let agent = Agent::resume(parts, store.as_ref(), key).map_err(|e| e.to_string())?;
                let history = store.load(key).map_err(|e| e.to_string())?.events;
                (agent, history)
            }
            None => (
                Agent::create(parts, store.as_ref()).map_err(|e| e.to_string())?,
                Vec::new(),
            ),
        };
        Ok(OpenedAgent {
            agent,
            keep_alive: Box::new(guards),
            history,
        })
    }
}

struct Client {
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    write: WriteHalf<DuplexStream>,
    read: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    seen: Vec<Value>,
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
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.read.next_line())
                .await
                .expect("no line within 30 s")
                .unwrap()
                .expect("server closed");
            let value: Value = serde_json::from_str(&line).unwrap();
            self.seen.push(value.clone());
            if value["method"] == "session/request_permission" {
                let answer = json!({"jsonrpc": "2.0", "id": value["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option}}});
                self.send(answer).await;
            } else if value["id"] == json!(id) {
                return value;
            }
        }
    }

    fn updates(&self) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|l| l["method"] == "session/update")
            .map(|l| &l["params"]["update"])
            .collect()
    }
}

fn connect(factory: TestFactory) -> Client {
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
    let factory = || TestFactory {
        base_url: provider.base_url(),
        home: home.path().to_path_buf(),
        preset: PermissionPreset::DangerFullAccess,
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
    let Client {
        server, mut write, ..
    } = client;
    write.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("server did not stop after EOF")
        .unwrap()
        .unwrap();

    // A new connection loads the session: the conversation comes back as updates.
    let mut client = connect(factory());
    let id = client
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": cwd.display().to_string(), "mcpServers": []}),
        )
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"], json!({}), "{answer}");
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
    ];
    let provider = FakeProvider::start(replies).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory {
        base_url: provider.base_url(),
        home: home.path().to_path_buf(),
        preset: PermissionPreset::WorkspaceWrite,
    });
    let session = new_session(&mut client, cwd.path()).await;

    let id = client
        .request("session/prompt", prompt(&session, "run it"))
        .await;
    client.response(id, dsh_acp::ALLOW_ONCE).await;
    let id = client
        .request("session/prompt", prompt(&session, "again"))
        .await;
    client.response(id, dsh_acp::REJECT_ONCE).await;

    let asked: Vec<&Value> = client
        .seen
        .iter()
        .filter(|l| l["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_allowed");
    assert_eq!(asked[0]["params"]["options"][0]["optionId"], "allow_once");
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
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_server_keeps_going() {
    let home = tempfile::tempdir().unwrap();
    let mut client = connect(TestFactory {
        base_url: "http://127.0.0.1:9".into(),
        home: home.path().to_path_buf(),
        preset: PermissionPreset::ReadOnly,
    });
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
    let mut client = connect(TestFactory {
        base_url: provider.base_url(),
        home: home.path().to_path_buf(),
        preset: PermissionPreset::DangerFullAccess,
    });
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
