//! The request dispatcher: reads the client's lines, answers `initialize`, opens sessions, and
//! routes prompts, cancels and permission answers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;

use crate::rpc::{parse_line, write_lines, Incoming, Outgoing, RpcError, METHOD_NOT_FOUND};
use crate::session::{AcpSession, Setting, EFFORT_OPTION, MODEL_OPTION};
use crate::setup;
use crate::updates::UpdateMapper;
use crate::PROTOCOL_VERSION;
use dsh_llm::{ContentBlock, ImageAttachment};
use dsh_runtime::{OpenedSession, Resume, SessionFactory, SessionSpec, TrustQuestion};

/// Work that finishes on the connection's loop after an answer from the client.
enum Deferred {
    /// The editor answered the trust question of a new session.
    Trust {
        session_id: String,
        cwd: PathBuf,
        question: TrustQuestion,
        extras: setup::SessionExtras,
        trusted: bool,
    },
}

/// A request that waits for the trust question of its session.
struct Held {
    id: Value,
    method: String,
    params: Value,
}

/// The connection's state: open sessions by id.
struct Server {
    out: Outgoing,
    factory: Arc<dyn SessionFactory>,
    agent_name: String,
    agent_version: String,
    sessions: HashMap<String, AcpSession>,
    /// Sessions whose trust question is open, with the requests that wait for its answer.
    awaiting_trust: HashMap<String, Vec<Held>>,
    /// The trust question of the session just opened, asked once its `session/new` answer
    /// is out (a request about a session the client does not know yet would be lost).
    to_ask: Option<(String, PathBuf, TrustQuestion, setup::SessionExtras)>,
    deferred: mpsc::UnboundedSender<Deferred>,
    /// The client said at `initialize` that it renders `elicitation/create` forms (the plan
    /// review's "Approve with edits", docs/acp.md, "Plan mode").
    elicits_forms: bool,
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("`{key}` (a string) is required")))
}

fn cwd_param(params: &Value) -> Result<PathBuf, RpcError> {
    let cwd = PathBuf::from(str_param(params, "cwd")?);
    if !cwd.is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "`cwd` must be an absolute path, got {}",
            cwd.display()
        )));
    }
    Ok(cwd)
}

/// A `session/prompt`'s content: its text (what commands are read from) and, when it has an
/// image, the whole prompt as content blocks in order (docs/acp.md, "Images").
struct PromptInput {
    text: String,
    content: Option<Vec<ContentBlock>>,
}

/// The prompt's content blocks as one user message. Text is taken as is; resource links and
/// embedded text resources are referenced or inlined; images (`data` base64 with `mimeType`,
/// PNG/JPEG/GIF/WebP up to 20 MB) become image blocks in place; audio is refused.
fn prompt_input(params: &Value) -> Result<PromptInput, RpcError> {
    let blocks = params
        .get("prompt")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            RpcError::invalid_params("`prompt` (an array of content blocks) is required")
        })?;
    let mut parts: Vec<String> = Vec::new();
    let mut content: Vec<ContentBlock> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for block in blocks {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let part = match kind {
            "text" => str_param(block, "text")?.to_string(),
            "resource_link" => {
                let uri = str_param(block, "uri")?;
                let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
                format!("[{name}]({uri})")
            }
            "resource" => {
                let resource = block.get("resource").unwrap_or(&Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => format!("<resource uri=\"{uri}\">\n{text}\n</resource>"),
                    None => format!("[{uri}]({uri})"),
                }
            }
            "image" => {
                if !pending.is_empty() {
                    content.push(ContentBlock::text(pending.join("\n")));
                    pending.clear();
                }
                content.push(ContentBlock::Image {
                    attachment: prompt_image(block)?,
                });
                continue;
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "prompt content of type `{other}` is not supported (text, image, resource_link and resource are)"
                )))
            }
        };
        pending.push(part.clone());
        parts.push(part);
    }
    let has_image = !content.is_empty();
    if !has_image && parts.iter().all(|p| p.trim().is_empty()) {
        return Err(RpcError::invalid_params("the prompt is empty"));
    }
    if has_image && !pending.is_empty() {
        content.push(ContentBlock::text(pending.join("\n")));
    }
    Ok(PromptInput {
        text: parts.join("\n"),
        content: has_image.then_some(content),
    })
}

/// An ACP image block (`{type: image, data, mimeType}`) as an image attachment.
fn prompt_image(block: &Value) -> Result<ImageAttachment, RpcError> {
    use base64::Engine as _;
    let data = str_param(block, "data")?;
    let mime = str_param(block, "mimeType")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| {
            RpcError::invalid_params(format!(
                "the image's `data` is not standard base64 ({e}); send the file's bytes base64-encoded"
            ))
        })?;
    ImageAttachment::from_declared(bytes, mime, None)
        .map_err(|e| RpcError::invalid_params(format!("prompt image refused: {e}")))
}

impl Server {
    fn initialize(&self) -> Value {
        // Capabilities come before any session: images are offered when the default model
        // takes them. A session on a text-only model refuses an image prompt with a clear
        // error before anything is logged (docs/acp.md, "Images").
        let images = self
            .factory
            .default_model(&SessionSpec::default())
            .and_then(|model| self.factory.model_info(&model))
            .is_some_and(|info| dsh_llm::takes_images(&info));
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": images, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
            },
            "authMethods": setup::auth_methods(),
            "agentInfo": {"name": self.agent_name, "version": self.agent_version},
        })
    }

    /// Asks the composition root for a session in `cwd`; a resumed one comes with its
    /// history (replayed to the client). Errors reach the client as `CODE: message`.
    fn open(
        &self,
        cwd: &std::path::Path,
        resume: Resume,
        extras: setup::SessionExtras,
    ) -> Result<OpenedSession, RpcError> {
        let spec = SessionSpec {
            cwd: Some(cwd.to_path_buf()),
            resume,
            history: true,
            mcp_servers: extras.mcp_servers,
            choices: dsh_runtime::Choices {
                add_dirs: extras.add_dirs,
                ..dsh_runtime::Choices::default()
            },
            ..SessionSpec::default()
        };
        let store = self.factory.store();
        self.factory
            .open(&spec, store.as_ref())
            .map_err(|err| setup::open_error(&err))
    }

    fn start(&self, opened: OpenedSession, cwd: PathBuf) -> AcpSession {
        let factory = Arc::clone(&self.factory);
        let setting = Setting {
            cwd,
            out: self.out.clone(),
            models: self.factory.models(),
            lookup: Arc::new(move |model: &str| factory.model_info(model)),
            forms: self.elicits_forms,
        };
        AcpSession::start(opened.agent, &opened.children, setting)
    }

    /// `session/new`: the result and the new session's id. When the workspace has project
    /// settings that are not trusted yet, the session starts without them and the editor is
    /// asked (see [`Server::ask_trust`]).
    fn new_session(&mut self, params: &Value) -> Result<(Value, String), RpcError> {
        let cwd = cwd_param(params)?;
        let extras = setup::session_extras(params)?;
        let opened = self.open(&cwd, Resume::New, extras.clone())?;
        let session = self.start(opened, cwd.clone());
        let id = session.id();
        let result = json!({
            "sessionId": id,
            "modes": session.modes(),
            "configOptions": session.config_options(),
            "models": session.model_state(),
        });
        self.sessions.insert(id.clone(), session);
        if let Some(question) = self.factory.trust_question(&cwd) {
            // Requests for the session wait from now on; the question follows the answer.
            self.awaiting_trust.insert(id.clone(), Vec::new());
            self.to_ask = Some((id.clone(), cwd, question, extras));
        }
        Ok((result, id))
    }

    /// Asks the editor whether to trust the workspace's own settings (docs/acp.md, "Workspace
    /// trust"). Until it answers, the session's prompts wait; the answer comes back to the
    /// connection's loop as [`Deferred::Trust`].
    fn ask_trust(&mut self) {
        let Some((session_id, cwd, question, extras)) = self.to_ask.take() else {
            return;
        };
        let out = self.out.clone();
        let deferred = self.deferred.clone();
        tokio::spawn(async move {
            let params = setup::trust_request(&session_id, &question);
            let answer = out.request("session/request_permission", params).await;
            let trusted = setup::trusts(&answer);
            // The loop is gone only when the connection closed: nothing left to apply.
            let _ = deferred.send(Deferred::Trust {
                session_id,
                cwd,
                question,
                extras,
                trusted,
            });
        });
    }

    /// Applies the editor's trust answer: when trusted, records the trust at the pin shown
    /// (as `dsh trust` does) and rebuilds the session's agent with the project settings (the
    /// session has run nothing yet); then runs the requests that waited.
    async fn trust_answered(&mut self, answer: Deferred) {
        let Deferred::Trust {
            session_id,
            cwd,
            question,
            extras,
            trusted,
        } = answer;
        let held = self.awaiting_trust.remove(&session_id).unwrap_or_default();
        if trusted {
            match self.factory.record_trust(&cwd, &question.pin) {
                Ok(workspace) => {
                    eprintln!(
                        "dsh acp: trusted the project settings of {}",
                        workspace.display()
                    );
                    if let Some(old) = self.sessions.remove(&session_id) {
                        old.stop().await;
                    }
                    match self.open(&cwd, Resume::Id(session_id.clone()), extras) {
                        Ok(opened) => {
                            let session = self.start(opened, cwd);
                            self.sessions.insert(session_id.clone(), session);
                        }
                        Err(error) => {
                            eprintln!(
                                "dsh acp: the session could not be reopened with the trusted \
                                 settings: {}",
                                error.message
                            );
                            // Its waiting requests get the reason instead of "unknown session".
                            for held in held {
                                self.out.respond_error(held.id, &error);
                            }
                            return;
                        }
                    }
                }
                Err(message) => eprintln!("dsh acp: workspace not trusted: {message}"),
            }
        }
        for Held { id, method, params } in held {
            self.request(id, &method, params).await;
        }
    }

    /// `session/set_config_option`: sets the model or the effort; answers the new options.
    fn set_config_option(&self, params: &Value) -> Result<Value, RpcError> {
        let session = self.session(params)?;
        let option = str_param(params, "configId")?;
        let value = str_param(params, "value")?;
        match option {
            MODEL_OPTION => session.set_model(value)?,
            EFFORT_OPTION => session.set_effort(value)?,
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown config option `{other}` (this session has `{MODEL_OPTION}` and `{EFFORT_OPTION}`)"
                )))
            }
        }
        Ok(json!({"configOptions": session.config_options()}))
    }

    /// `session/load`: opens the session from its log (unless this connection has it open
    /// already), then replays its conversation as `session/update` notifications before
    /// answering. Gives the result and the session's id.
    async fn load_session(&mut self, params: &Value) -> Result<(Value, String), RpcError> {
        let key = str_param(params, "sessionId")?.to_string();
        let cwd = cwd_param(params)?;
        if let Some(open) = self.sessions.remove(&key) {
            open.stop().await;
        }
        let extras = setup::session_extras(params)?;
        let opened = self.open(&cwd, Resume::Id(key.clone()), extras)?;
        let id = opened.agent.handle().session_id();
        let mut mapper = UpdateMapper::new(&cwd).with_tools(&opened.agent.handle().tools());
        for update in mapper.replay(&opened.history) {
            self.out
                .notify("session/update", json!({"sessionId": id, "update": update}));
        }
        let session = self.start(opened, cwd);
        let result = json!({
            "modes": session.modes(),
            "configOptions": session.config_options(),
            "models": session.model_state(),
        });
        self.sessions.insert(id.clone(), session);
        Ok((result, id))
    }

    /// Answers a `session/new` or `session/load`, then advertises the session's slash
    /// commands (ACP sends them after the session exists).
    fn opened(&mut self, id: Value, opened: Result<(Value, String), RpcError>) {
        match opened {
            Ok((result, session_id)) => {
                self.out.respond(id, result);
                if let Some(session) = self.sessions.get(&session_id) {
                    session.advertise_commands();
                }
                self.ask_trust();
            }
            Err(error) => self.out.respond_error(id, &error),
        }
    }

    fn session(&self, params: &Value) -> Result<&AcpSession, RpcError> {
        let id = str_param(params, "sessionId")?;
        self.sessions
            .get(id)
            .ok_or_else(|| RpcError::invalid_params(format!("unknown session {id}")))
    }

    async fn request(&mut self, id: Value, method: &str, params: Value) {
        let waiting = params
            .get("sessionId")
            .and_then(Value::as_str)
            .and_then(|s| self.awaiting_trust.get_mut(s));
        if let Some(held) = waiting {
            // The session may be rebuilt with the project settings: wait for the answer.
            held.push(Held {
                id,
                method: method.to_string(),
                params,
            });
            return;
        }
        let answer = match method {
            "initialize" => {
                self.elicits_forms = crate::questions::elicits_forms(&params);
                Ok(self.initialize())
            }
            "authenticate" => Ok(json!({})),
            "session/new" => {
                let opened = self.new_session(&params);
                return self.opened(id, opened);
            }
            "session/load" => {
                let opened = self.load_session(&params).await;
                return self.opened(id, opened);
            }
            "session/set_mode" => str_param(&params, "modeId").and_then(|mode| {
                self.session(&params)?.set_mode(mode)?;
                Ok(json!({}))
            }),
            "session/set_config_option" => self.set_config_option(&params),
            // The earlier (unstable) form of model selection, still sent by some clients.
            "session/set_model" => str_param(&params, "modelId").and_then(|model| {
                self.session(&params)?.set_model(model)?;
                Ok(json!({}))
            }),
            "session/prompt" => {
                // Answered by the session's task when the turn ends.
                let queued = prompt_input(&params)
                    .and_then(|input| self.session(&params).map(|s| (s, input)))
                    .and_then(|(session, input)| {
                        session.prompt(id.clone(), input.text, input.content)
                    });
                match queued {
                    Ok(()) => return,
                    Err(error) => Err(error),
                }
            }
            _ => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            )),
        };
        match answer {
            Ok(result) => self.out.respond(id, result),
            Err(error) => self.out.respond_error(id, &error),
        }
    }

    fn notification(&mut self, method: &str, params: &Value) {
        if method == "session/cancel" {
            let waiting = params
                .get("sessionId")
                .and_then(Value::as_str)
                .and_then(|s| self.awaiting_trust.get_mut(s));
            if let Some(held) = waiting {
                // Prompts held for the trust answer are answered `cancelled` without running.
                for request in held.iter_mut().filter(|h| h.method == "session/prompt") {
                    self.out
                        .respond(request.id.clone(), json!({"stopReason": "cancelled"}));
                    request.method.clear();
                }
                held.retain(|h| !h.method.is_empty());
                return;
            }
            match self.session(params) {
                Ok(session) => session.cancel(),
                Err(error) => eprintln!("dsh acp: session/cancel: {}", error.message),
            }
        }
        // Other notifications (and unknown ones) need no action: JSON-RPC forbids answering.
    }

    async fn line(&mut self, line: &str) {
        match parse_line(line) {
            Ok(Incoming::Request { id, method, params }) => self.request(id, &method, params).await,
            Ok(Incoming::Notification { method, params }) => self.notification(&method, &params),
            Ok(Incoming::Response { id, result }) => self.out.deliver(&id, result),
            Err((id, error)) => self.out.respond_error(id, &error),
        }
    }
}

/// Serves ACP on `input`/`output` (stdin/stdout for `dsh acp`) until `input` ends: then running
/// turns are cancelled, their logs closed, and everything queued is written.
///
/// `agent_name` and `agent_version` are what `initialize` reports as `agentInfo`. Nothing but
/// protocol lines is written to `output`; diagnostics go to stderr.
pub async fn serve<R, W>(
    input: R,
    output: W,
    factory: Arc<dyn SessionFactory>,
    agent_name: &str,
    agent_version: &str,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines, queued) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(queued, output));
    let (deferred, mut answers) = mpsc::unbounded_channel();
    let mut server = Server {
        out: Outgoing::new(lines),
        factory,
        agent_name: agent_name.to_string(),
        agent_version: agent_version.to_string(),
        sessions: HashMap::new(),
        awaiting_trust: HashMap::new(),
        to_ask: None,
        deferred,
        elicits_forms: false,
    };
    let mut input = BufReader::new(input);
    let mut buffer = Vec::new();
    loop {
        // `read_until` keeps what it read in `buffer` when the other branch wins, so no
        // input is lost; the buffer is cleared only after a whole line was handled.
        tokio::select! {
            read = input.read_until(b'\n', &mut buffer) => {
                if read? == 0 {
                    break;
                }
                let line = String::from_utf8_lossy(&buffer).into_owned();
                buffer.clear();
                if line.trim().is_empty() {
                    continue;
                }
                server.line(line.trim()).await;
            }
            Some(answer) = answers.recv() => server.trust_answered(answer).await,
        }
    }
    let sessions: Vec<AcpSession> = server.sessions.drain().map(|(_, s)| s).collect();
    for session in sessions {
        session.stop().await;
    }
    drop(server);
    match writer.await {
        Ok(result) => result,
        Err(err) => Err(std::io::Error::other(format!(
            "output writer failed: {err}"
        ))),
    }
}
