//! A `dsh web` server in-process over the fake provider, and an HTTP + SSE client for it.

#![allow(clippy::unwrap_used, dead_code)] // test helpers outside #[test] fns may unwrap

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_agent::{Agent, AgentOptions, AgentParts, ExtensionSet};
use dsh_llm::{AdapterRegistry, CallConfig, RetryPolicy};
use dsh_runtime::{OpenedSession, Resume, RuntimeError, SessionFactory, SessionSpec};
use dsh_server::{ServerOptions, WebServer};
use dsh_session::{JsonlStore, SessionStore, StoreKind};
use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use dsh_tools::{
    AskUserQuestionTool, NoSandbox, PermissionPreset, SpillDir, ToolContext, ToolRegistry,
};
use futures::StreamExt;
use serde_json::Value;

pub mod cdp;

/// Builds agents against the fake provider: the built-in tools plus `ask_user_question`, the
/// skills of `<cwd>/.dsh/skills`, a permission source (see [`permission_source`]), and the
/// `extra` extensions.
#[derive(Clone)]
pub struct TestFactory {
    pub base_url: String,
    pub spill: std::path::PathBuf,
    pub extra: Vec<Arc<dyn dsh_agent::Extension>>,
    /// Sessions get a model-written title (one more request alongside the first turn) when
    /// the server asks for them too.
    pub model_titles: bool,
    /// Home of [`SessionFactory::store`].
    pub home: std::path::PathBuf,
}

impl TestFactory {
    /// An agent's parts at delegation `depth`: the DeepSeek adapter on the fake provider, the
    /// built-in tools plus `ask_user_question`, the skills of `<cwd>/.dsh/skills`, delegation
    /// (`subagent` and the team tools, children built by this same method one level deeper),
    /// and for the top-level agent the `extra` extensions. Returns the live feed of the agent's
    /// children too (docs/agent.md, "Watching children").
    fn parts(
        self: &TestFactory,
        cwd: &Path,
        call: CallConfig,
        titles: bool,
        depth: u64,
    ) -> Result<(AgentParts, dsh_agent::ChildFeed), RuntimeError> {
        let adapter = dsh_deepseek::DeepSeekAdapter::new(dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-web-test")),
        ))
        .map_err(|e| RuntimeError::InvalidConfig(e.to_string()))?;
        let mut adapters = AdapterRegistry::new();
        adapters.register("deepseek", Arc::new(adapter)).unwrap();
        let extensions = ExtensionSet::new();
        let retry = RetryPolicy {
            base_delay: Duration::from_millis(5),
            ..RetryPolicy::default()
        };
        for guard in
            dsh_agent::register_builtin_extensions(&extensions, retry, Duration::from_secs(30))
        {
            // The set lives as long as the agent.
            std::mem::forget(guard);
        }
        if depth == 0 {
            for extension in &self.extra {
                extensions.register_for_life(Arc::clone(extension));
            }
        }
        let child_factory: dsh_agent::ChildFactory = {
            let factory = self.clone();
            let cwd = cwd.to_path_buf();
            let call = call.clone();
            Arc::new(move |child_depth| {
                factory
                    .parts(&cwd, call.clone(), false, child_depth)
                    .map(|(parts, _)| parts)
                    .map_err(|e| dsh_agent::SubagentError::setup("INVALID_CONFIG", e.to_string()))
            })
        };
        let subagents = dsh_agent::Subagents::new(depth, child_factory);
        let children = subagents.feed();
        extensions.register_for_life(Arc::new(subagents));
        let skills = dsh_agent::SkillSet::discover(&[cwd.join(".dsh").join("skills")]);
        extensions.register_for_life(Arc::new(dsh_agent::Skills::new(skills)));
        let mut tools = ToolRegistry::with_builtins();
        tools.register(Arc::new(AskUserQuestionTool)).unwrap();
        let spill = SpillDir::create(self.spill.join(uuid_like())).unwrap();
        let tool_context = ToolContext::new(cwd, spill)
            .unwrap()
            .with_permission(PermissionPreset::DangerFullAccess);
        let mut options = AgentOptions::new(call, cwd);
        if titles {
            options.titles = dsh_agent::TitleMode::Model {
                route: None,
                model: None,
            };
        }
        let parts = AgentParts {
            adapters,
            tools: Arc::new(tools),
            extensions,
            tool_context,
            options,
        };
        Ok((parts, children))
    }
}

impl TestFactory {
    /// The session's connection warm-up (docs/web.md, "Connection warm-up"): on an adapter of
    /// its own for the same provider, without the 30 s in which a used origin is left alone,
    /// so that each warm-up the server passes on shows at the fake provider as one `HEAD`.
    fn preconnector(&self) -> dsh_runtime::Preconnector {
        let client = dsh_deepseek::HttpClient::new(dsh_deepseek::DEFAULT_CONNECT_TIMEOUT)
            .unwrap()
            .with_recent_use(Duration::ZERO);
        let mut config = dsh_deepseek::DeepSeekConfig::new(
            self.base_url.clone(),
            Some(dsh_deepseek::ApiKey::new("sk-web-test")),
        );
        config.client = Some(client);
        dsh_runtime::Preconnector::new(Arc::new(
            dsh_deepseek::DeepSeekAdapter::new(config).unwrap(),
        ))
    }
}

impl SessionFactory for TestFactory {
    fn open(
        &self,
        spec: &SessionSpec,
        store: &dyn SessionStore,
    ) -> Result<OpenedSession, RuntimeError> {
        let cwd = spec
            .cwd
            .clone()
            .expect("the web server names the session's cwd");
        let model = spec
            .choices
            .model
            .clone()
            .unwrap_or_else(|| "deepseek-v4-flash".into());
        let mut call = CallConfig::new("deepseek", model);
        // The effort chosen at creation, as the runtime applies it.
        call.reasoning_effort = spec
            .choices
            .effort
            .as_deref()
            .and_then(dsh_llm::ReasoningEffort::parse);
        let titles = self.model_titles && spec.model_titles;
        let (parts, children) = self.parts(&cwd, call, titles, 0)?;
        let mut agent = match &spec.resume {
            Resume::Id(id) => Agent::resume(parts, store, id)?,
            Resume::New => Agent::create(parts, store)?,
            Resume::Latest => panic!("the web server never asks for the latest session"),
        };
        agent.set_permission_source(permission_source());
        Ok(OpenedSession {
            agent,
            history: Vec::new(),
            children,
            preconnect: self.preconnector(),
        })
    }

    fn store(&self) -> Arc<dyn SessionStore + Send + Sync> {
        Arc::new(JsonlStore::new(&self.home))
    }

    /// The model [`SessionFactory::open`] picks.
    fn default_model(&self, spec: &SessionSpec) -> Option<String> {
        Some(
            spec.choices
                .model
                .clone()
                .unwrap_or_else(|| "deepseek-v4-flash".into()),
        )
    }

    fn models(&self) -> Vec<String> {
        vec!["deepseek-v4-flash".into(), "deepseek-v4-pro".into()]
    }

    /// The DeepSeek adapter's own descriptions (efforts off, low, high, max for both models;
    /// none for an unknown model), as the real runtime reads them.
    fn model_info(&self, model: &str) -> Option<dsh_llm::ModelInfo> {
        Some(dsh_deepseek::model_info(model))
    }
}

/// What presets mean in these tests: no sandbox (`bash` runs only under
/// `danger-full-access`), and `workspace-write` is refused as on a host without one.
pub fn permission_source() -> dsh_agent::PermissionSource {
    Arc::new(|preset| {
        if preset == PermissionPreset::WorkspaceWrite {
            return Err(dsh_agent::PermissionError::SandboxUnavailable(
                "the test host has no sandbox for workspace-write".to_string(),
            ));
        }
        Ok(dsh_agent::PermissionSetting {
            preset,
            confinement: Arc::new(NoSandbox),
            sandbox_mode: "none".into(),
            sandbox_detail: "test".into(),
            summary: format!("The tools run under {preset}."),
        })
    })
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("s{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

pub struct Web {
    pub home: tempfile::TempDir,
    pub cwd: tempfile::TempDir,
    pub provider: FakeProvider,
    pub server: Option<WebServer>,
    /// The sign-in secret this client got by redeeming the server's printed launch code.
    pub token: String,
    pub base: String,
    pub client: reqwest::Client,
    /// The store the server keeps sessions in.
    pub store: StoreKind,
}

/// A test policy that asks before every call of `bash` (approvals tests; no front end names
/// tools).
pub struct AskForBash;

impl dsh_agent::Extension for AskForBash {
    fn name(&self) -> &str {
        "ask-for-bash"
    }

    fn tool_pre(&self, call: &dsh_agent::ToolCallInfo) -> dsh_agent::ToolVerdict {
        if call.name == "bash" {
            dsh_agent::ToolVerdict::Ask {
                reason: "test policy: bash needs approval".into(),
                escalation: None,
            }
        } else {
            dsh_agent::ToolVerdict::Continue
        }
    }
}

pub fn text(reply: &str) -> ScriptedReply {
    SseReply::new()
        .text(reply)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

impl Web {
    pub async fn start(replies: Vec<ScriptedReply>) -> Web {
        Self::start_with(replies, Vec::new()).await
    }

    pub async fn start_with(
        replies: Vec<ScriptedReply>,
        extra: Vec<Arc<dyn dsh_agent::Extension>>,
    ) -> Web {
        Self::start_inner(replies, extra, false, StoreKind::Jsonl).await
    }

    /// A server whose sessions get model-written titles.
    pub async fn start_titled(replies: Vec<ScriptedReply>) -> Web {
        Self::start_inner(replies, Vec::new(), true, StoreKind::Jsonl).await
    }

    /// A server over the store of kind `store`.
    pub async fn start_store(replies: Vec<ScriptedReply>, store: StoreKind) -> Web {
        Self::start_inner(replies, Vec::new(), false, store).await
    }

    async fn start_inner(
        replies: Vec<ScriptedReply>,
        extra: Vec<Arc<dyn dsh_agent::Extension>>,
        model_titles: bool,
        store: StoreKind,
    ) -> Web {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let provider = FakeProvider::start(replies).await.unwrap();
        let listener = dsh_server::bind("127.0.0.1:0".parse().unwrap(), false)
            .await
            .unwrap();
        let factory = Arc::new(TestFactory {
            base_url: provider.base_url(),
            spill: home.path().join("spill"),
            extra,
            model_titles,
            home: home.path().to_path_buf(),
        });
        let options = ServerOptions {
            home: home.path().to_path_buf(),
            store,
            prices: dsh_session::PriceTable::default_deepseek(),
            default_cwd: std::fs::canonicalize(cwd.path()).unwrap(),
            allow_remote: false,
        };
        let server = WebServer::start(listener, options, factory).unwrap();
        let base = format!("http://127.0.0.1:{}", server.address().port());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let token = sign_in(&client, &server.url()).await;
        Web {
            home,
            cwd,
            provider,
            server: Some(server),
            token,
            base,
            client,
            store,
        }
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    pub fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
    }

    pub async fn json(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// Creates a session in the test cwd with `prompt`; returns its id.
    pub async fn create(&self, prompt: &str) -> String {
        let (status, body) = self
            .json(self.post("/api/sessions", serde_json::json!({"prompt": prompt})))
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    /// Opens the SSE stream of `id` (after `last` when given).
    pub async fn stream(&self, id: &str, last: Option<u64>) -> SseReader {
        let mut request = self.get(&format!("/api/sessions/{id}/events"));
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        SseReader {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// Stops the server and starts another on the same home and provider (no session is
    /// live in it: they are all stored), signed in afresh.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = dsh_server::bind("127.0.0.1:0".parse().unwrap(), false)
            .await
            .unwrap();
        let factory = Arc::new(TestFactory {
            base_url: self.provider.base_url(),
            spill: self.home.path().join("spill"),
            extra: Vec::new(),
            model_titles: false,
            home: self.home.path().to_path_buf(),
        });
        let options = ServerOptions {
            home: self.home.path().to_path_buf(),
            store: self.store,
            prices: dsh_session::PriceTable::default_deepseek(),
            default_cwd: std::fs::canonicalize(self.cwd.path()).unwrap(),
            allow_remote: false,
        };
        let server = WebServer::start(listener, options, factory).unwrap();
        self.base = format!("http://127.0.0.1:{}", server.address().port());
        self.token = sign_in(&self.client, &server.url()).await;
        self.server = Some(server);
    }

    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await.unwrap();
        }
    }
}

/// Redeems the launch code in `url` as a browser would: the answer must be a redirect to the
/// address without the code that sets the sign-in cookie; returns the cookie's value.
pub async fn sign_in(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 303, "redeeming {url}");
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    let pair = cookie.split(';').next().unwrap();
    pair.split_once('=').unwrap().1.to_string()
}

/// One SSE event: its id (the seq) and its data parsed as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: u64,
    pub data: Value,
}

impl SseEvent {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

pub struct SseReader {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

/// One SSE event of any kind: a session event (with its seq as id), a child's event (named
/// `child`, no id; data `{child, callId, background, event, view}`) or a view event (named
/// `view`, no id; data a `ViewEvent`).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Session(SseEvent),
    Child(Value),
    View(Value),
}

impl SseReader {
    /// The next session event (comments, keep-alives and child events skipped); panics
    /// after 10 s.
    pub async fn next(&mut self) -> SseEvent {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Frame::Session(event) = self.next_frame_inner().await {
                    return event;
                }
            }
        })
        .await
        .expect("no SSE event within 10 s")
    }

    /// The next event of either kind; panics after 10 s.
    pub async fn next_frame(&mut self) -> Frame {
        tokio::time::timeout(Duration::from_secs(10), self.next_frame_inner())
            .await
            .expect("no SSE event within 10 s")
    }

    async fn next_frame_inner(&mut self) -> Frame {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut name = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse::<u64>().unwrap());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        name = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if name.as_deref() == Some("child") {
                    assert!(id.is_none(), "a child event carries no id: {block}");
                    return Frame::Child(serde_json::from_str(&data).unwrap());
                }
                if name.as_deref() == Some("view") {
                    assert!(id.is_none(), "a view event carries no id: {block}");
                    return Frame::View(serde_json::from_str(&data).unwrap());
                }
                if let Some(id) = id {
                    return Frame::Session(SseEvent {
                        id,
                        data: serde_json::from_str(&data).unwrap(),
                    });
                }
                continue;
            }
            let chunk = self.body.next().await.expect("SSE stream ended").unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The view events up to and including the session event of type `kind` (whose views
    /// come before it), and that event.
    pub async fn views_until(&mut self, kind: &str) -> (Vec<Value>, SseEvent) {
        let mut views = Vec::new();
        loop {
            match self.next_frame().await {
                Frame::View(view) => views.push(view),
                Frame::Session(event) if event.kind() == kind => return (views, event),
                _ => {}
            }
        }
    }

    /// Events up to and including the first of type `kind`.
    pub async fn until(&mut self, kind: &str) -> Vec<SseEvent> {
        let mut out = Vec::new();
        loop {
            let event = self.next().await;
            let done = event.kind() == kind;
            out.push(event);
            if done {
                return out;
            }
        }
    }
}

pub fn session_dir_exists(home: &Path) -> bool {
    home.join("sessions").is_dir()
}
