//! `dsh acp` over sessions of the real composition root ([`Runtime`]) and the fake provider on
//! loopback: what fleets need (usage, title, model and effort, auth methods, the auth error),
//! the editor's MCP servers (stdio and streamable HTTP, the reference `server-everything`), and
//! the workspace-trust question at `session/new` (docs/acp.md).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_runtime::{Choices, Runtime, RuntimeOptions};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

use super::{connect, prompt, Client};

pub(crate) mod schema;
use schema::assert_valid;

const USER_KEY: &str = "sk-acp-runtime-user-key-0123456789";

/// A dsh home with the user's configuration and key, and a workspace (with `.git`, so the
/// workspace is the directory itself).
struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    markers: PathBuf,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl Env {
    fn new(config: &str) -> Env {
        let root = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(root.path()).unwrap();
        let (home, cwd, markers) = (real.join("home"), real.join("ws"), real.join("markers"));
        for dir in [&home, &cwd, &markers, &cwd.join(".git"), &cwd.join(".dsh")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(home.join("config.toml"), config).unwrap();
        std::fs::write(home.join(".env"), format!("DEEPSEEK_API_KEY={USER_KEY}\n")).unwrap();
        Env {
            _root: root,
            home,
            cwd,
            markers,
            warnings: Arc::default(),
        }
    }

    fn runtime(&self, permission: &str) -> Runtime {
        let warnings = Arc::clone(&self.warnings);
        Runtime::new(RuntimeOptions {
            home: self.home.clone(),
            cwd: self.cwd.clone(),
            choices: Choices {
                permission: Some(permission.to_string()),
                ..Choices::default()
            },
            warnings: Arc::new(move |line: &str| warnings.lock().unwrap().push(line.to_string())),
        })
        .unwrap()
    }

    fn cwd_text(&self) -> String {
        self.cwd.display().to_string()
    }

    /// A project hooks file whose `UserPromptSubmit` hook creates the marker `name`.
    fn plant_hook(&self, name: &str) -> PathBuf {
        let marker = self.markers.join(name);
        std::fs::write(
            self.cwd.join(".dsh/hooks.json"),
            format!(
                r#"{{"hooks": {{"UserPromptSubmit": [{{"hooks": [{{"type": "command", "command": "touch {}"}}]}}]}}}}"#,
                marker.display()
            ),
        )
        .unwrap();
        marker
    }
}

fn user_config(provider: &FakeProvider) -> String {
    format!(
        "model = \"deepseek-v4-flash\"\n[providers.deepseek]\nbase_url = \"{}\"\n",
        provider.base_url()
    )
}

async fn call(client: &mut Client, method: &str, params: Value) -> Value {
    let id = client.request(method, params).await;
    client.response(id, "").await
}

/// Every notification and request the client received, checked against the ACP schema.
pub(crate) fn assert_seen_valid(client: &Client) {
    for line in &client.seen {
        match line["method"].as_str() {
            Some("session/update") => assert_valid("SessionNotification", &line["params"]),
            Some("session/request_permission") => {
                assert_valid("RequestPermissionRequest", &line["params"])
            }
            _ => {}
        }
        if let Some(error) = line.get("error") {
            assert_valid("Error", error);
        }
    }
}

fn updates<'a>(client: &'a Client, kind: &str) -> Vec<&'a Value> {
    client
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The `usage_update` that closes the last prompt: the last update before its answer, and
/// the session's sums with nothing added (docs/acp.md, "Usage and title").
fn closing_usage(client: &Client) -> Value {
    let answer = client
        .seen
        .iter()
        .rposition(|l| l.get("id").is_some() && l.get("method").is_none())
        .expect("a prompt was answered");
    let update = client.seen[..answer]
        .iter()
        .rev()
        .find(|l| l["method"] == "session/update")
        .map(|l| l["params"]["update"].clone())
        .expect("an update before the answer");
    assert_eq!(update["sessionUpdate"], "usage_update", "{update}");
    assert_eq!(update["_meta"]["dsh"]["purpose"], "prompt-end", "{update}");
    assert_eq!(
        update["_meta"]["dsh"]["lastCall"]["totalTokens"], 0,
        "{update}"
    );
    assert_valid(
        "SessionNotification",
        &json!({"sessionId": "s", "update": update}),
    );
    update
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleets_get_usage_title_auth_methods_and_pick_model_and_effort() {
    let usage = WireUsage {
        prompt_tokens: 1200,
        completion_tokens: 30,
        prompt_cache_hit_tokens: 1000,
        reasoning_tokens: 0,
    };
    let provider = FakeProvider::start(vec![SseReply::new()
        .text("done")
        .finish("stop", Some(usage))
        .into()])
    .await
    .unwrap();
    let env = Env::new(&user_config(&provider));
    let mut client = connect(env.runtime("danger-full-access"));

    let init = call(
        &mut client,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    assert_valid("InitializeResponse", &init["result"]);
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["mcpCapabilities"]["http"], true, "{init}");
    assert_eq!(caps["mcpCapabilities"]["sse"], false, "{init}");
    let method = &init["result"]["authMethods"][0];
    assert_eq!(
        method["_meta"]["dsh"]["envVar"], "DEEPSEEK_API_KEY",
        "{init}"
    );
    assert!(method["description"]
        .as_str()
        .unwrap()
        .contains("DEEPSEEK_API_KEY"));

    // Extra roots are absolute paths of existing directories; others are refused with a
    // message, not silently ignored (the writes themselves: dsh-cli's add_dir_escapes.rs).
    let refused = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": [], "additionalDirectories": ["srv"]}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("additionalDirectories"));
    let missing = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": [],
               "additionalDirectories": ["/nonexistent-dsh-extra-root"]}),
    )
    .await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("added directory /nonexistent-dsh-extra-root"),
        "{missing}"
    );

    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    assert_valid("NewSessionResponse", &opened["result"]);
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let options = &opened["result"]["configOptions"];
    assert_eq!(options[0]["id"], "model", "{opened}");
    assert_eq!(options[0]["category"], "model");
    assert_eq!(options[0]["type"], "select");
    assert_eq!(options[0]["currentValue"], "deepseek-v4-flash");
    assert!(
        options[0]["options"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["value"] == "deepseek-v4-pro"),
        "{opened}"
    );
    assert_eq!(options[1]["id"], "effort");
    assert_eq!(options[1]["category"], "thought_level");
    assert_eq!(
        opened["result"]["models"]["currentModelId"],
        "deepseek-v4-flash"
    );

    // The model through `session/set_model`, the effort through a config option.
    let switched = call(
        &mut client,
        "session/set_model",
        json!({"sessionId": session, "modelId": "deepseek-v4-pro"}),
    )
    .await;
    assert_eq!(switched["result"], json!({}), "{switched}");
    let set = call(
        &mut client,
        "session/set_config_option",
        json!({"sessionId": session, "configId": "effort", "value": "high"}),
    )
    .await;
    assert_valid("SetSessionConfigOptionResponse", &set["result"]);
    let now = &set["result"]["configOptions"];
    assert_eq!(now[0]["currentValue"], "deepseek-v4-pro", "{set}");
    assert_eq!(now[1]["currentValue"], "high", "{set}");
    for (method, params) in [
        (
            "session/set_model",
            json!({"sessionId": session, "modelId": "no-such-model"}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": session, "configId": "effort", "value": "extreme"}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": session, "configId": "colour", "value": "red"}),
        ),
    ] {
        let answer = call(&mut client, method, params).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }

    let id = client
        .request(
            "session/prompt",
            prompt(&session, "summarise the repository"),
        )
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_valid("PromptResponse", &answer["result"]);
    let turn = &answer["result"]["usage"];
    assert_eq!(turn["inputTokens"], 1200, "{answer}");
    assert_eq!(turn["outputTokens"], 30);
    assert_eq!(turn["cachedReadTokens"], 1000);
    assert_eq!(turn["totalTokens"], 1230);

    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "deepseek-v4-pro");
    assert_eq!(requests[0].body["reasoning_effort"], "high");

    let all = updates(&client, "usage_update");
    let usage: Vec<_> = all
        .iter()
        .filter(|u| u["_meta"]["dsh"]["purpose"] != "prompt-end")
        .collect();
    assert_eq!(
        usage.len(),
        1,
        "one model call, one usage_update: {usage:?}"
    );
    let usage = *usage[0];
    // The prompt's closing update repeats the sums.
    let closing = closing_usage(&client);
    assert_eq!(closing["used"], 1230, "{closing}");
    assert_eq!(closing["cost"], usage["cost"], "{closing}");
    assert_eq!(closing["_meta"]["dsh"]["requests"], 1, "{closing}");
    assert_eq!(usage["used"], 1230, "{usage}");
    assert!(usage["size"].as_u64().unwrap() > 1230, "{usage}");
    assert_eq!(usage["cost"]["currency"], "USD");
    assert!(usage["cost"]["amount"].as_f64().unwrap() > 0.0, "{usage}");
    let meta = &usage["_meta"]["dsh"];
    assert_eq!(meta["inputTokens"], 1200);
    assert_eq!(meta["cachedReadTokens"], 1000);
    assert_eq!(meta["outputTokens"], 30);
    assert_eq!(meta["model"], "deepseek-v4-pro");
    assert_seen_valid(&client);
    let titles = updates(&client, "session_info_update");
    assert!(
        titles
            .iter()
            .any(|t| t["title"].as_str().is_some_and(|t| t.contains("summarise"))),
        "{titles:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_answers_session_new_with_the_auth_error() {
    let provider = FakeProvider::start(Vec::<ScriptedReply>::new())
        .await
        .unwrap();
    let env = Env::new(&format!(
        "provider = \"keyless\"\n[providers.keyless]\nkind = \"deepseek\"\nbase_url = \"{}\"\n\
         api_key_env = \"DSH_ACP_TEST_VARIABLE_NEVER_SET\"\ndefault_model = \"deepseek-v4-flash\"\n",
        provider.base_url()
    ));
    let mut client = connect(env.runtime("danger-full-access"));
    let answer = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let error = &answer["error"];
    assert_valid("Error", error);
    assert_eq!(error["code"], -32000, "{answer}");
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("Authentication required"), "{message}");
    assert!(
        message.contains("DSH_ACP_TEST_VARIABLE_NEVER_SET"),
        "{message}"
    );
    assert_eq!(
        error["data"]["authMethods"][0]["_meta"]["dsh"]["envVar"],
        "DEEPSEEK_API_KEY"
    );
    assert!(provider.requests().is_empty());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editors_mcp_servers_join_the_session() {
    // The reference server is required: this test fails rather than skips without it.
    let installed = std::process::Command::new("sh")
        .args(["-c", "command -v mcp-server-everything"])
        .output()
        .unwrap();
    assert!(
        installed.status.success(),
        "mcp-server-everything is not on PATH: npm install -g @modelcontextprotocol/server-everything"
    );
    let port = free_port();
    let mut http_server = tokio::process::Command::new("mcp-server-everything")
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "server-everything did not listen on {port}");

    let replies: Vec<ScriptedReply> = vec![
        SseReply::new()
            .tool_call(
                0,
                "c_stdio",
                "mcp__local__echo",
                r#"{"message":"over stdio"}"#,
            )
            .tool_call(
                1,
                "c_http",
                "mcp__remote__echo",
                r#"{"message":"over http"}"#,
            )
            .finish("tool_calls", None)
            .into(),
        SseReply::new().text("echoed").finish("stop", None).into(),
    ];
    let provider = FakeProvider::start(replies).await.unwrap();
    let env = Env::new(&user_config(&provider));
    let mut client = connect(env.runtime("danger-full-access"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": [
            {"name": "local", "command": "mcp-server-everything", "args": ["stdio"], "env": []},
            {"type": "http", "name": "remote", "url": format!("http://127.0.0.1:{port}/mcp"), "headers": []},
        ]}),
    )
    .await;
    let session = opened["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_string();
    let id = client
        .request("session/prompt", prompt(&session, "echo twice"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let tools: Vec<String> = provider.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    assert!(tools.contains(&"mcp__local__echo".to_string()), "{tools:?}");
    assert!(
        tools.contains(&"mcp__remote__echo".to_string()),
        "{tools:?}"
    );
    for (call_id, text) in [
        ("c_stdio", "Echo: over stdio"),
        ("c_http", "Echo: over http"),
    ] {
        let done = client
            .updates()
            .into_iter()
            .find(|u| u["toolCallId"] == call_id && u["status"] == "completed")
            .unwrap_or_else(|| panic!("{call_id} did not complete: {:?}", client.updates()));
        assert!(done["content"].to_string().contains(text), "{done}");
    }
    http_server.kill().await.unwrap();
}

/// Writes the project settings an attacker who could write into the workspace leaves: its
/// own endpoint for the DeepSeek provider and a hook.
fn plant(env: &Env, planted: &FakeProvider) -> PathBuf {
    std::fs::write(
        env.cwd.join(".dsh/config.toml"),
        format!(
            "[providers.deepseek]\nbase_url = \"{}\"\n",
            planted.base_url()
        ),
    )
    .unwrap();
    env.plant_hook("hook-ran")
}

fn answer_trust(option: &'static str) -> impl FnMut(&Value) -> Option<Value> {
    move |_| Some(json!({"outcome": {"outcome": "selected", "optionId": option}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_project_settings_are_asked_and_stay_out_when_refused() {
    let user = FakeProvider::start(vec![SseReply::new().text("hi").finish("stop", None).into()])
        .await
        .unwrap();
    let planted = FakeProvider::start(vec![SseReply::new()
        .text("planted")
        .finish("stop", None)
        .into()])
    .await
    .unwrap();
    let env = Env::new(&user_config(&user));
    let marker = plant(&env, &planted);
    let mut client = connect(env.runtime("workspace-write"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    // The prompt waits for the trust answer, then runs without the project's settings.
    let id = client
        .request("session/prompt", prompt(&session, "hello"))
        .await;
    let answer = client
        .response_with(id, answer_trust(dsh_acp::TRUST_NOT_NOW))
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let asked: Vec<&Value> = client
        .seen
        .iter()
        .filter(|l| l["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let question = &asked[0]["params"];
    assert_eq!(question["sessionId"], session.as_str());
    let review = question["toolCall"]["content"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(review.contains(&planted.base_url()), "{review}");
    assert!(
        review.contains("touch"),
        "the hook's command is shown: {review}"
    );
    let ids: Vec<&Value> = question["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["optionId"])
        .collect();
    assert_eq!(ids, [dsh_acp::TRUST_WORKSPACE, dsh_acp::TRUST_NOT_NOW]);
    assert_seen_valid(&client);

    assert_eq!(
        planted.requests().len(),
        0,
        "refused: the planted host gets nothing"
    );
    assert_eq!(user.requests().len(), 1);
    assert!(!marker.exists(), "refused: the planted hook never runs");
    assert!(!env.home.join("trust.toml").exists(), "nothing was trusted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_at_session_new_records_the_pin_and_applies_the_settings() {
    let user = FakeProvider::start(vec![
        SseReply::new().text("one").finish("stop", None).into(),
        SseReply::new().text("two").finish("stop", None).into(),
    ])
    .await
    .unwrap();
    let env = Env::new(&user_config(&user));
    let marker = env.plant_hook("hook-ran");
    let mut client = connect(env.runtime("workspace-write"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let id = client
        .request("session/prompt", prompt(&session, "hello"))
        .await;
    let answer = client
        .response_with(id, answer_trust(dsh_acp::TRUST_WORKSPACE))
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        marker.exists(),
        "trusted: the project hook ran for the prompt"
    );
    let store = std::fs::read_to_string(env.home.join("trust.toml")).unwrap();
    assert!(store.contains(&env.cwd_text()), "{store}");
    assert!(store.contains("sha256:"), "{store}");

    // Trusted at this pin: the next session is not asked again.
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let second = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let id = client
        .request("session/prompt", prompt(&second, "again"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let asked = client
        .seen
        .iter()
        .filter(|l| l["method"] == "session/request_permission")
        .count();
    assert_eq!(asked, 1, "asked once, for the first session only");
}

/// The real composition root hands the session's `ChildFeed` to ACP: a child's progress reaches
/// the editor on the parent's `subagent` card before its result (docs/acp.md, "Subagents").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_progress_reaches_the_editor_through_the_real_runtime() {
    let reply = |id: &str, name: &str, args: Value| -> ScriptedReply {
        SseReply::new()
            .tool_call(0, id, name, &args.to_string())
            .finish("tool_calls", None)
            .into()
    };
    let provider = FakeProvider::start(vec![
        reply(
            "p1",
            "subagent",
            json!({"description": "count files", "prompt": "CHILD: count the files"}),
        ),
        SseReply::new()
            .text("parent done")
            .finish("stop", None)
            .into(),
    ])
    .await
    .unwrap();
    provider.route(
        dsh_test_support::RequestMatch::FirstUser("CHILD: count".into()),
        [
            reply(
                "c1",
                "bash",
                json!({"command": "sleep 0.3; echo counted", "description": "count them"}),
            ),
            SseReply::new()
                .text("there are 3 files")
                .finish("stop", None)
                .into(),
        ],
    );
    let env = Env::new(&user_config(&provider));
    let mut client = connect(env.runtime("danger-full-access"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let id = client
        .request("session/prompt", prompt(&session, "delegate the count"))
        .await;
    let answer = client.response(id, "").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_seen_valid(&client);

    let card: Vec<&Value> = client
        .updates()
        .into_iter()
        .filter(|u| u["toolCallId"] == "p1")
        .collect();
    let progress: Vec<usize> = (0..card.len())
        .filter(|&i| card[i]["_meta"]["dsh"]["child"]["name"] == "agent-1")
        .collect();
    assert!(!progress.is_empty(), "{card:#?}");
    let last = &card[*progress.last().unwrap()];
    let text = last["content"][0]["content"]["text"].as_str().unwrap();
    assert!(text.starts_with("agent-1: finished"), "{text}");
    assert!(text.contains("- bash: count them (done)"), "{text}");
    // Progress comes after the card opened and before the result completes it.
    assert_eq!(card[0]["sessionUpdate"], "tool_call");
    assert_eq!(*progress.last().unwrap(), card.len() - 2, "{card:#?}");
    assert_eq!(card.last().unwrap()["status"], "completed", "{card:#?}");
}

/// A budget that ends the turn answers `max_turn_requests` and says which budget in
/// `_meta.dsh` (issue 40, point 6): the stop reason alone does not tell a step limit from a
/// cost limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_names_the_budget_in_meta() {
    let provider = FakeProvider::start(vec![
        SseReply::new()
            .tool_call(0, "call_1", "todo_write", r#"{"todos": []}"#)
            .finish("tool_calls", None)
            .into(),
        SseReply::new()
            .text("never sent")
            .finish("stop", None)
            .into(),
    ])
    .await
    .unwrap();
    let env = Env::new(&format!(
        "{}[budget]\nmax_steps = 1\n",
        user_config(&provider)
    ));
    let mut client = connect(env.runtime("danger-full-access"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let answer = call(&mut client, "session/prompt", prompt(&session, "go")).await;
    assert_eq!(
        answer["result"]["stopReason"], "max_turn_requests",
        "{answer}"
    );
    assert_eq!(
        answer["result"]["_meta"]["dsh"]["budget"], "steps",
        "{answer}"
    );
    assert!(answer["result"]["_meta"]["dsh"]["message"]
        .as_str()
        .unwrap()
        .contains("step budget"));
    assert_valid("PromptResponse", &answer["result"]);
    assert_eq!(provider.requests().len(), 1);
    closing_usage(&client);
}

/// A reply with a tool call and usage: the first step of a turn a budget stops after it.
fn first_step() -> ScriptedReply {
    let usage = WireUsage {
        prompt_tokens: 2000,
        completion_tokens: 40,
        prompt_cache_hit_tokens: 0,
        reasoning_tokens: 0,
    };
    SseReply::new()
        .tool_call(0, "call_1", "todo_write", r#"{"todos": []}"#)
        .finish("tool_calls", Some(usage))
        .into()
}

/// Runs one prompt under `budget` (a `[budget]` table's lines) against `replies`; returns the
/// answer and the client.
async fn budget_prompt(budget: &str, replies: Vec<ScriptedReply>) -> (Value, Client, FakeProvider) {
    let provider = FakeProvider::start(replies).await.unwrap();
    let env = Env::new(&format!("{}[budget]\n{budget}\n", user_config(&provider)));
    let mut client = connect(env.runtime("danger-full-access"));
    let opened = call(
        &mut client,
        "session/new",
        json!({"cwd": env.cwd_text(), "mcpServers": []}),
    )
    .await;
    let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
    let answer = call(&mut client, "session/prompt", prompt(&session, "go")).await;
    assert_eq!(
        answer["result"]["stopReason"], "max_turn_requests",
        "{answer}"
    );
    assert_valid("PromptResponse", &answer["result"]);
    (answer, client, provider)
}

/// A cost budget that the first step used up: the answer names `cost` and says what was spent
/// against the limit, and the closing `usage_update` carries the cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_stop_names_the_budget_and_closes_with_the_usage() {
    let never = SseReply::new()
        .text("never sent")
        .finish("stop", None)
        .into();
    let (answer, client, provider) =
        budget_prompt("max_cost_usd = 0.0000001", vec![first_step(), never]).await;
    let meta = &answer["result"]["_meta"]["dsh"];
    assert_eq!(meta["budget"], "cost", "{answer}");
    let message = meta["message"].as_str().unwrap();
    assert!(message.contains("cost budget ($0.0000001)"), "{message}");
    assert!(!message.contains("$0.00 "), "{message}");
    assert_eq!(provider.requests().len(), 1);
    let closing = closing_usage(&client);
    assert!(
        closing["cost"]["amount"].as_f64().unwrap() > 0.0,
        "{closing}"
    );
    assert_eq!(closing["_meta"]["dsh"]["requests"], 1, "{closing}");
    assert_eq!(closing["used"], 2040, "{closing}");
    assert_seen_valid(&client);
}

/// A wall-time stop cancels the running step: the answer names `wall_time`, and the closing
/// `usage_update` still reports the step that finished before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_time_stop_names_the_budget_and_closes_with_the_usage() {
    let stalled = SseReply::new()
        .delay(Duration::from_secs(20))
        .text("too late")
        .finish("stop", None)
        .into();
    let (answer, client, provider) =
        budget_prompt("max_wall_time_secs = 1.5", vec![first_step(), stalled]).await;
    let meta = &answer["result"]["_meta"]["dsh"];
    assert_eq!(meta["budget"], "wall_time", "{answer}");
    assert!(
        meta["message"]
            .as_str()
            .unwrap()
            .contains("wall-time budget"),
        "{answer}"
    );
    assert_eq!(provider.requests().len(), 2);
    let closing = closing_usage(&client);
    assert_eq!(closing["_meta"]["dsh"]["requests"], 1, "{closing}");
    assert_eq!(closing["_meta"]["dsh"]["inputTokens"], 2000, "{closing}");
    assert!(
        closing["cost"]["amount"].as_f64().unwrap() > 0.0,
        "{closing}"
    );
    assert_seen_valid(&client);
}
