//! Connections to MCP servers: start, list tools, call with timeout and cancellation, restart
//! with backoff after a crash.

use dsh_llm::LockExt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::server::{CommandGate, McpServerConfig, McpTransport, McpTrust};
use dsh_tools::{ProgressSink, ToolError, ToolErrorCode, ToolProgress};
use rmcp::model::{
    CallToolRequestParam, CallToolResult, CancelledNotificationParam, ClientRequest, JsonObject,
    ProgressNotificationParam, ProgressToken, Request, ServerResult, Tool as McpToolInfo,
};
use rmcp::service::{PeerRequestOptions, RunningService, ServiceError};
use rmcp::{RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

/// First wait after a failed restart; doubled after each further failure.
const BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest wait between restart attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Lines of a server's stderr quoted in a start error.
const STDERR_TAIL_LINES: usize = 8;

/// A server that could not be started (or listed), with a message that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpStartError {
    /// The server's name.
    pub server: String,
    /// What went wrong, with the log file to read for stdio servers.
    pub message: String,
}

impl std::fmt::Display for McpStartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MCP server `{}`: {}", self.server, self.message)
    }
}

/// Where each running call's progress reports go, by the progress token its request carries.
type ProgressRoutes = Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>;

/// The client side of a connection: it answers nothing of its own, and passes each
/// `notifications/progress` to the call whose request carried the token.
#[derive(Clone, Default)]
struct Client {
    progress: ProgressRoutes,
}

impl rmcp::ClientHandler for Client {
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let sink = self
            .progress
            .lock_or_recover()
            .get(&params.progress_token)
            .cloned();
        if let Some(sink) = sink {
            sink(ToolProgress::new(
                params.progress,
                params.total,
                params.message,
            ));
        }
        std::future::ready(())
    }
}

/// A live connection. Dropping it closes the session and kills a stdio server's process group.
struct Live {
    service: RunningService<RoleClient, Client>,
    /// The progress routes of `service`'s client.
    progress: ProgressRoutes,
    pgid: Option<u32>,
    _child: Option<tokio::process::Child>,
    /// The confined plan of a project's server, kept while it runs (a prepared sandbox lives
    /// as long as a plan holding it, `dsh_tools::CommandPlan`).
    _plan: Option<dsh_tools::CommandPlan>,
    /// The server's epoch when this connection started ([`McpHub::stop_project_servers`]).
    epoch: u64,
}

/// A stdio server's process group while it connects: killed when this is dropped with the
/// group still in it (a failed start), as [`Live::kill`] does for a running one.
struct StartedGroup(Option<i32>);

impl Drop for StartedGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            dsh_tools::kill_group_now(pgid);
        }
    }
}

impl Live {
    /// Kills a stdio server's process group at once (a call still holding the connection then
    /// fails as a lost connection).
    fn kill(&self) {
        // The process group this module created; a group already gone is the wanted state.
        if let Some(pgid) = self.pgid.and_then(|p| i32::try_from(p).ok()) {
            dsh_tools::kill_group_now(pgid);
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Conn {
    NotStarted,
    Up(Arc<Live>),
    Down {
        failures: u32,
        retry_at: Instant,
        error: String,
    },
}

struct Server {
    config: McpServerConfig,
    log_path: PathBuf,
    conn: tokio::sync::Mutex<Conn>,
    tools: Mutex<Option<Vec<McpToolInfo>>>,
    /// Checked before each start and restart of a stdio server: a server whose program or
    /// script lies where the model can write runs only with the bytes the user trusted.
    gate: Mutex<Option<Arc<dyn CommandGate>>>,
    /// The session's confinement, for a server the project configured
    /// (`McpServerConfig::from_project`); such a server does not start without it.
    confiner: Mutex<Option<dsh_tools::CommandConfiner>>,
    /// Bumped when the server is stopped to run again under another confinement
    /// ([`McpHub::stop_project_servers`]): a connection of an older epoch is never used.
    epoch: AtomicU64,
    /// The running connection, so a stop can kill it while a call still holds it.
    running: Mutex<Option<Weak<Live>>>,
    /// Where OAuth logins are stored (`$DSH_HOME/mcp-auth`), for an HTTP server.
    oauth_dir: Mutex<Option<PathBuf>>,
    /// Every OAuth token of this server's login this process held (the stored ones and each
    /// refresh's): hidden from its tool results ([`Server::hide_tokens`]).
    tokens: Mutex<Vec<String>>,
}

/// The MCP servers of a session (shared by its subagents). See the crate docs.
pub struct McpHub {
    servers: BTreeMap<String, Arc<Server>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: Option<tokio::runtime::Handle>,
    cwd: PathBuf,
    started: Mutex<Option<Vec<McpStartError>>>,
}

impl Drop for McpHub {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.lock_or_recover().take() {
            // Dropping a runtime inside another runtime's task would panic; this does not wait.
            runtime.shutdown_background();
        }
    }
}

impl McpHub {
    /// A hub for `servers`; nothing starts yet. Stdio servers run in `cwd` (unless they set
    /// their own) and write their stderr to `log_dir/mcp-<server>.log`.
    pub fn new(servers: Vec<McpServerConfig>, cwd: &Path, log_dir: &Path) -> Arc<McpHub> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dsh-mcp")
            .enable_all()
            .build()
            .ok();
        let handle = runtime.as_ref().map(|r| r.handle().clone());
        let servers = servers
            .into_iter()
            .map(|config| {
                let log_path = log_dir.join(format!("mcp-{}.log", config.name));
                (
                    config.name.clone(),
                    Arc::new(Server {
                        config,
                        log_path,
                        conn: tokio::sync::Mutex::new(Conn::NotStarted),
                        tools: Mutex::new(None),
                        gate: Mutex::new(None),
                        confiner: Mutex::new(None),
                        epoch: AtomicU64::new(0),
                        running: Mutex::new(None),
                        oauth_dir: Mutex::new(None),
                        tokens: Mutex::default(),
                    }),
                )
            })
            .collect();
        Arc::new(McpHub {
            servers,
            runtime: Mutex::new(runtime),
            handle,
            cwd: cwd.to_path_buf(),
            started: Mutex::new(None),
        })
    }

    /// Starts (and restarts) a stdio server only when `gate` lets its command run
    /// (docs/mcp.md, "Servers in the workspace are pinned"): a server refused there fails to
    /// start with the gate's reason, which says how to trust it again.
    pub fn set_script_gate(&self, gate: Arc<dyn CommandGate>) {
        for server in self.servers.values() {
            *server.gate.lock_or_recover() = Some(Arc::clone(&gate));
        }
    }

    /// Sends an HTTP server without `bearer_token_env` the access token of its OAuth login
    /// stored in `dir` (`dsh mcp login`, [`crate::oauth`]), when the login was made for the
    /// server's origin; an expired token, or one the server refuses, is refreshed once.
    pub fn set_oauth_dir(&self, dir: &Path) {
        for server in self.servers.values() {
            *server.oauth_dir.lock_or_recover() = Some(dir.to_path_buf());
        }
    }

    /// Starts (and restarts) the stdio servers the project configured through `confiner`, the
    /// session's confinement, as `bash` runs (docs/mcp.md, "Project servers run confined");
    /// without one they do not start. The user's own servers run unconfined.
    pub fn set_confiner(&self, confiner: dsh_tools::CommandConfiner) {
        for server in self.servers.values() {
            *server.confiner.lock_or_recover() = Some(Arc::clone(&confiner));
        }
    }

    /// Stops the running stdio servers the project configured (their process groups are killed
    /// at once; a server still starting is stopped as soon as it is up), so each starts again on
    /// its next call under the confinement in force then: the session's preset changed, and a
    /// project server runs under the one in force (docs/mcp.md, "Project servers run
    /// confined"). Their tools stay offered. The user's own servers and HTTP servers are not
    /// touched.
    pub fn stop_project_servers(&self) {
        for server in self.servers.values() {
            let stdio = matches!(server.config.transport, McpTransport::Stdio { .. });
            if !(server.config.from_project && stdio) {
                continue;
            }
            server.epoch.fetch_add(1, Ordering::SeqCst);
            let running = server.running.lock_or_recover().take();
            if let Some(live) = running.and_then(|weak| weak.upgrade()) {
                live.kill();
            }
        }
    }

    /// True when no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server not yet started and lists its tools, in parallel; blocks until all
    /// are up or have failed (each within its startup timeout). Runs once; later calls return
    /// the first call's errors. Safe to call from inside an async task.
    pub fn start(&self) -> Vec<McpStartError> {
        let mut started = self.started.lock_or_recover();
        if let Some(errors) = &*started {
            return errors.clone();
        }
        let errors = match &self.handle {
            None => self
                .servers
                .keys()
                .map(|name| McpStartError {
                    server: name.clone(),
                    message: "the MCP client's runtime could not be created".into(),
                })
                .collect(),
            Some(handle) => {
                let servers: Vec<Arc<Server>> = self.servers.values().cloned().collect();
                let cwd = self.cwd.clone();
                let (tx, rx) = std::sync::mpsc::channel();
                handle.spawn(async move {
                    let tasks = servers.into_iter().map(|server| {
                        let cwd = cwd.clone();
                        async move {
                            let result = server.connect_and_list(&cwd).await;
                            result.err().map(|message| McpStartError {
                                server: server.config.name.clone(),
                                message,
                            })
                        }
                    });
                    let errors: Vec<McpStartError> = futures::future::join_all(tasks)
                        .await
                        .into_iter()
                        .flatten()
                        .collect();
                    // The receiver waits below for exactly this message.
                    let _ = tx.send(errors);
                });
                rx.recv().unwrap_or_default()
            }
        };
        *started = Some(errors.clone());
        errors
    }

    /// The user's trust in `server` (`trust` of its configuration; the default for an
    /// unknown name).
    pub fn trust(&self, server: &str) -> McpTrust {
        self.servers
            .get(server)
            .map(|s| s.config.trust)
            .unwrap_or_default()
    }

    /// Every listed tool: `(server, tool)`, servers by name, tools in the server's order.
    pub fn tools(&self) -> Vec<(String, McpToolInfo)> {
        self.start();
        let mut out = Vec::new();
        for (name, server) in &self.servers {
            let tools = server.tools.lock_or_recover();
            for tool in tools.iter().flatten() {
                out.push((name.clone(), tool.clone()));
            }
        }
        out
    }

    /// Calls `tool` of `server`, restarting the server first if it died. Fails with
    /// `TOOL_TIMEOUT` after the server's tool timeout and `ABORTED` when `cancel` fires (both
    /// also send the server a cancellation notice), `IO` when the server is unreachable or
    /// crashed during the call.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResult, ToolError> {
        let Some(server) = self.servers.get(server).cloned() else {
            return Err(ToolError::new(
                ToolErrorCode::UnknownTool,
                format!("no MCP server `{server}` is configured"),
            ));
        };
        let Some(handle) = &self.handle else {
            return Err(ToolError::new(
                ToolErrorCode::Io,
                "the MCP client's runtime could not be created",
            ));
        };
        let cwd = self.cwd.clone();
        let tool = tool.to_string();
        let task = handle
            .spawn(async move { server.call(&cwd, &tool, arguments, cancel, progress).await });
        task.await.unwrap_or_else(|err| {
            Err(ToolError::new(
                ToolErrorCode::Io,
                format!("the MCP call task failed: {err}"),
            ))
        })
    }
}

fn io_error(message: impl Into<String>) -> ToolError {
    ToolError::new(ToolErrorCode::Io, message)
}

impl Server {
    /// First start: connect and remember the tool list.
    async fn connect_and_list(&self, cwd: &Path) -> Result<(), String> {
        let live = self.connect(cwd).await?;
        let timeout = self.config.startup_timeout;
        let tools = match tokio::time::timeout(timeout, live.service.peer().list_all_tools()).await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(err)) => return Err(self.with_log(format!("listing its tools failed: {err}"))),
            Err(_) => {
                return Err(self.with_log(format!(
                    "did not list its tools within {} s (startup_timeout_secs)",
                    timeout.as_secs()
                )))
            }
        };
        *self.tools.lock_or_recover() = Some(tools);
        // Stopped while it started: the tools are known, the server starts again on its
        // next call.
        if let Some(live) = self.keep(live) {
            *self.conn.lock().await = Conn::Up(live);
        }
        Ok(())
    }

    /// `live` as the running connection, unless the server was stopped since it started
    /// ([`McpHub::stop_project_servers`]): then it is dropped, which kills it. Registered
    /// before the check, so a stop either sees it or is seen by it.
    fn keep(&self, live: Live) -> Option<Arc<Live>> {
        let live = Arc::new(live);
        *self.running.lock_or_recover() = Some(Arc::downgrade(&live));
        (live.epoch == self.epoch.load(Ordering::SeqCst)).then_some(live)
    }

    /// The error text plus, for stdio servers, the tail of its stderr and where the log is.
    fn with_log(&self, message: String) -> String {
        if !matches!(self.config.transport, McpTransport::Stdio { .. }) {
            return message;
        }
        let tail: Vec<String> = std::fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .rev()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("=== dsh"))
            .take(STDERR_TAIL_LINES)
            .map(str::to_string)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let mut text = message;
        if !tail.is_empty() {
            text.push_str(&format!("; its stderr ends with:\n  {}", tail.join("\n  ")));
        }
        text.push_str(&format!("\n  (full log: {})", self.log_path.display()));
        text
    }

    async fn connect(&self, cwd: &Path) -> Result<Live, String> {
        let timeout = self.config.startup_timeout;
        // Read before the confinement is: a stop after this makes the connection stale.
        let epoch = self.epoch.load(Ordering::SeqCst);
        match &self.config.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                env_vars,
                cwd: own_cwd,
            } => {
                let run_in = own_cwd.as_deref().unwrap_or(cwd);
                let gate = self.gate.lock_or_recover().clone();
                if let Some(gate) = &gate {
                    gate.check_argv(command, args, run_in)?;
                }
                if let Some(dir) = self.log_path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        format!("cannot create the log folder {}: {e}", dir.display())
                    })?;
                }
                let mut log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log_path)
                    .map_err(|e| {
                        format!("cannot open its log file {}: {e}", self.log_path.display())
                    })?;
                {
                    use std::io::Write;
                    // A header between runs; a failed write only loses the separator.
                    let _ = writeln!(
                        log,
                        "=== dsh starts `{command}` (unix time {})",
                        unix_time()
                    );
                }
                let mut child_env = dsh_tools::scrubbed_env();
                for name in env_vars {
                    if let Some(value) = std::env::var_os(name) {
                        child_env.push((name.into(), value));
                    }
                }
                if let Some(path) = gate.as_ref().and_then(|g| g.command_path()) {
                    // No `PATH` entry the model can write (docs/mcp.md, "Servers in the
                    // workspace are pinned"); a server's own `env` may still set one.
                    child_env.retain(|(name, _)| name != "PATH");
                    child_env.push(("PATH".into(), path));
                }
                child_env.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
                let (mut process, plan) = self.stdio_process(command, args, run_in, child_env)?;
                process
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::from(log))
                    .kill_on_drop(true);
                let mut child = dsh_tools::spawn_child(process)
                    .map_err(|e| format!("cannot start `{command}`: {e} (check `command` in [mcp.servers.{}] and PATH)", self.config.name))?;
                let pgid = child.id();
                // Until the connection holds it, a failure kills the whole group: dropping
                // the child kills only its leader (the keeper), not what it started.
                let mut started = StartedGroup(pgid.and_then(|p| i32::try_from(p).ok()));
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err("the server's pipes could not be opened".into());
                };
                let client = Client::default();
                let service = match connecting(timeout, client.clone().serve((stdout, stdin))).await
                {
                    Ok(service) => service,
                    Err(error) => {
                        // A server that already died says more than the broken pipe does.
                        let exited =
                            tokio::time::timeout(Duration::from_millis(300), child.wait()).await;
                        let error = match exited {
                            Ok(Ok(status)) => format!(
                                "the server exited ({status}) before completing the MCP handshake"
                            ),
                            _ => error,
                        };
                        return Err(self.with_log(error));
                    }
                };
                started.0 = None;
                let live = Live {
                    service,
                    progress: client.progress,
                    pgid,
                    _child: Some(child),
                    _plan: plan,
                    epoch,
                };
                Ok(live)
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                let bearer = bearer_token_env.as_deref();
                self.connect_http(url, headers, bearer, timeout, epoch)
                    .await
            }
        }
    }

    /// An HTTP server's connection with its OAuth login when it has one (docs/mcp.md,
    /// "OAuth"): refreshed first when expired, and once more when the server answers 401. A
    /// 401 without a login says how to log in.
    async fn connect_http(
        &self,
        url: &str,
        headers: &[(String, String)],
        bearer: Option<&str>,
        timeout: Duration,
        epoch: u64,
    ) -> Result<Live, String> {
        let name = &self.config.name;
        let dir = self.oauth_dir.lock_or_recover().clone();
        let (login, dir) = match (bearer, dir) {
            (None, Some(dir)) => (crate::oauth::read_login(&dir, name)?, Some(dir)),
            _ => (None, None),
        };
        // A login made for another origin is never sent (a project may re-point the name).
        let other_origin = login.as_ref().is_some_and(|l| !l.fits(url));
        let mut login = login.filter(|l| l.fits(url));
        let mut refreshed = false;
        if let (Some(current), Some(dir)) = (&login, &dir) {
            if current.expired() && current.refresh_token.is_some() {
                let fresh = self.refresh(current, dir).await?;
                login = Some(fresh);
                refreshed = true;
            }
        }
        if let Some(login) = &login {
            self.hold_tokens(login);
        }
        let token = login.as_ref().map(|l| l.access_token.clone());
        let first = connect_http(url, headers, bearer, token, timeout, epoch).await;
        let error = match first {
            Err(error) if unauthorized(&error) => error,
            other => return other,
        };
        let relogin = format!("run `dsh mcp login {name}`");
        match (login, dir) {
            (Some(current), Some(dir)) if !refreshed && current.refresh_token.is_some() => {
                let fresh = self.refresh(&current, &dir).await?;
                connect_http(
                    url,
                    headers,
                    bearer,
                    Some(fresh.access_token),
                    timeout,
                    epoch,
                )
                .await
                .map_err(|error| match unauthorized(&error) {
                    true => format!(
                        "the server refused its stored login even after a refresh (HTTP 401, \
                             url {url}); {relogin} again"
                    ),
                    false => error,
                })
            }
            (Some(_), Some(_)) => Err(format!(
                "the server refused its stored login (HTTP 401, url {url}); {relogin} again"
            )),
            _ if bearer.is_some() => Err(error),
            _ if other_origin => Err(format!(
                "needs login ({relogin}): the stored login was made for another address and is \
                 not sent to {url}"
            )),
            _ => Err(format!(
                "needs login ({relogin}): the server answered HTTP 401 (url {url})"
            )),
        }
    }

    /// `login` refreshed and stored again.
    async fn refresh(
        &self,
        login: &crate::oauth::StoredLogin,
        dir: &Path,
    ) -> Result<crate::oauth::StoredLogin, String> {
        let name = &self.config.name;
        let fresh = crate::oauth::refresh(login).await.map_err(|error| {
            format!("its OAuth token could not be refreshed ({error}); run `dsh mcp login {name}` again")
        })?;
        crate::oauth::write_login(dir, name, &fresh)?;
        self.hold_tokens(&fresh);
        Ok(fresh)
    }

    /// Remembers `login`'s tokens, to hide them from tool results.
    fn hold_tokens(&self, login: &crate::oauth::StoredLogin) {
        let mut held = self.tokens.lock_or_recover();
        let tokens = [Some(&login.access_token), login.refresh_token.as_ref()];
        for token in tokens.into_iter().flatten() {
            // As the session's redaction: shorter values would garble ordinary text.
            if token.len() >= 12 && !held.contains(token) {
                held.push(token.clone());
            }
        }
    }

    /// `result` with every OAuth token this process sent the server replaced by
    /// `[REDACTED:mcp-login:<server>]`: a server that echoes the token it was called with
    /// must not show it to the model. The session's redaction set holds the tokens stored
    /// when it started; a token refreshed since is known only here (docs/SECURITY.md).
    fn hide_tokens(&self, result: CallToolResult) -> CallToolResult {
        let tokens = self.tokens.lock_or_recover().clone();
        if tokens.is_empty() {
            return result;
        }
        let Ok(mut value) = serde_json::to_value(&result) else {
            return result;
        };
        let placeholder = format!("[REDACTED:mcp-login:{}]", self.config.name);
        if !replace_in_strings(&mut value, &tokens, &placeholder) {
            return result;
        }
        serde_json::from_value(value).unwrap_or(result)
    }

    /// The process of a stdio server: a project's runs confined like `bash`; the user's own
    /// under a keeper in its own process group. Either way it and what it starts in its group
    /// die with dsh, also on SIGKILL (docs/mcp.md, docs/SECURITY.md "Process sandbox"). The
    /// confined plan is returned to be kept while the server runs.
    fn stdio_process(
        &self,
        command: &str,
        args: &[String],
        run_in: &Path,
        child_env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    ) -> Result<(tokio::process::Command, Option<dsh_tools::CommandPlan>), String> {
        if !self.config.from_project {
            let mut process = tokio::process::Command::new(command);
            process
                .args(args)
                .current_dir(run_in)
                .env_clear()
                .envs(child_env);
            dsh_tools::guard_group(&mut process);
            return Ok((process, None));
        }
        let confiner = self.confiner.lock_or_recover().clone();
        let Some(confine) = confiner else {
            return Err(
                "the project configured this server, and project servers run only \
                        confined; this session has no confinement for them (move it to your \
                        own config.toml to run it unconfined)"
                    .to_string(),
            );
        };
        let plan = dsh_tools::CommandPlan::new(command, args.iter().map(Into::into).collect());
        let plan = confine(plan, run_in).map_err(|e| {
            format!(
                "a project server runs only confined, and cannot be: {}",
                e.message
            )
        })?;
        let process = dsh_tools::plan_command(&plan, run_in, child_env);
        Ok((tokio::process::Command::from(process), Some(plan)))
    }

    /// The live connection, (re)starting the server when needed and allowed by the backoff.
    async fn live(&self, cwd: &Path) -> Result<Arc<Live>, ToolError> {
        let mut conn = self.conn.lock().await;
        if let Conn::Up(live) = &*conn {
            let stale = live.epoch != self.epoch.load(Ordering::SeqCst);
            if !stale && !live.service.is_transport_closed() {
                return Ok(Arc::clone(live));
            }
            *conn = Conn::Down {
                failures: 0,
                retry_at: Instant::now(),
                error: if stale {
                    "stopped to run under the session's new permission preset".into()
                } else {
                    "the server exited".into()
                },
            };
        }
        let failures = match &*conn {
            Conn::Down {
                failures,
                retry_at,
                error,
            } => {
                let now = Instant::now();
                if now < *retry_at {
                    return Err(io_error(format!(
                        "MCP server `{}` is unavailable ({error}); the next restart is tried in {} s",
                        self.config.name,
                        retry_at.duration_since(now).as_secs().max(1)
                    )));
                }
                *failures
            }
            _ => 0,
        };
        let connected = match self.connect(cwd).await {
            // Stopped while it started (the preset changed again): start it once more.
            Ok(live) => match self.keep(live) {
                Some(live) => Ok(live),
                None => self.connect(cwd).await.map(Arc::new),
            },
            Err(error) => Err(error),
        };
        match connected {
            Ok(live) => {
                *self.running.lock_or_recover() = Some(Arc::downgrade(&live));
                *conn = Conn::Up(Arc::clone(&live));
                Ok(live)
            }
            Err(error) => {
                let failures = failures + 1;
                let wait = BACKOFF_START
                    .saturating_mul(1u32 << (failures - 1).min(5))
                    .min(BACKOFF_MAX);
                *conn = Conn::Down {
                    failures,
                    retry_at: Instant::now() + wait,
                    error: error.clone(),
                };
                Err(io_error(format!(
                    "MCP server `{}` could not be restarted: {error}",
                    self.config.name
                )))
            }
        }
    }

    async fn call(
        &self,
        cwd: &Path,
        tool: &str,
        arguments: Option<JsonObject>,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResult, ToolError> {
        let live = self.live(cwd).await?;
        let routes = Arc::clone(&live.progress);
        let peer = live.service.peer().clone();
        let request = ClientRequest::CallToolRequest(Request::new(CallToolRequestParam {
            name: tool.to_string().into(),
            arguments,
        }));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.lost(e))?;
        let id = handle.id.clone();
        // The server reports progress under the token the request carried; the route goes
        // when the call ends, however it ends.
        let _route =
            progress.map(|sink| ProgressRoute::open(&routes, handle.progress_token.clone(), sink));
        let timeout = self.config.tool_timeout;
        let outcome = tokio::select! {
            response = handle.rx => response,
            _ = tokio::time::sleep(timeout) => {
                notify_cancel(&peer, id, "timeout").await;
                return Err(ToolError::new(ToolErrorCode::ToolTimeout, format!(
                    "MCP tool `{tool}` of server `{}` did not answer within {} s (tool_timeout_secs)",
                    self.config.name, timeout.as_secs()
                )));
            }
            _ = cancel.cancelled() => {
                notify_cancel(&peer, id, "cancelled by the user").await;
                return Err(ToolError::new(ToolErrorCode::Aborted, "the call was cancelled"));
            }
        };
        match outcome {
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(self.hide_tokens(result)),
            Ok(Ok(_)) => Err(io_error(format!(
                "MCP server `{}` answered the call with something other than a tool result",
                self.config.name
            ))),
            Ok(Err(ServiceError::McpError(error))) => {
                let code = if error.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                    ToolErrorCode::InvalidArgs
                } else {
                    ToolErrorCode::Io
                };
                Err(ToolError::new(
                    code,
                    format!("MCP server `{}`: {}", self.config.name, error.message),
                ))
            }
            Ok(Err(other)) => Err(self.lost(other)),
            Err(_) => Err(self.lost(ServiceError::TransportClosed)),
        }
    }

    /// The connection broke during a call: say so; the next call restarts the server.
    fn lost(&self, error: ServiceError) -> ToolError {
        io_error(self.with_log(format!(
            "MCP server `{}` failed during the call ({error}); it is restarted on the next call",
            self.config.name
        )))
    }
}

/// Replaces every occurrence of each of `secrets` in the strings of `value` (keys and values)
/// by `placeholder`; true when something was replaced.
fn replace_in_strings(
    value: &mut serde_json::Value,
    secrets: &[String],
    placeholder: &str,
) -> bool {
    use serde_json::Value;
    let replace = |text: &mut String| {
        let mut changed = false;
        for secret in secrets {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), placeholder);
                changed = true;
            }
        }
        changed
    };
    match value {
        Value::String(text) => replace(text),
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
            replace_in_strings(item, secrets, placeholder) | changed
        }),
        Value::Object(map) => {
            let mut changed = false;
            let entries = std::mem::take(map);
            for (mut key, mut item) in entries {
                changed |= replace(&mut key);
                changed |= replace_in_strings(&mut item, secrets, placeholder);
                map.insert(key, item);
            }
            changed
        }
        _ => false,
    }
}

/// A call's entry in its connection's progress routes, removed when dropped.
struct ProgressRoute {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl ProgressRoute {
    fn open(routes: &ProgressRoutes, token: ProgressToken, sink: ProgressSink) -> ProgressRoute {
        routes.lock_or_recover().insert(token.clone(), sink);
        ProgressRoute {
            routes: Arc::clone(routes),
            token,
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock_or_recover().remove(&self.token);
    }
}

async fn connecting<F, E>(
    timeout: Duration,
    connect: F,
) -> Result<RunningService<RoleClient, Client>, String>
where
    F: std::future::Future<Output = Result<RunningService<RoleClient, Client>, E>>,
    E: std::fmt::Display,
{
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(err)) => Err(format!("the MCP handshake failed: {}", what_failed(&err))),
        Err(_) => Err(format!(
            "did not complete the MCP handshake within {} s (startup_timeout_secs)",
            timeout.as_secs()
        )),
    }
}

/// What an MCP client error says went wrong, for people: without the transport's Rust type
/// names (`Transport [rmcp::transport::worker::WorkerTransport<...>]`) and the client's own
/// wrapping (`Send message error`, `Client error:`, `when send initialize request`), which
/// tell a user nothing (issue 40: an HTTP server that failed printed them).
fn what_failed(err: &dyn std::fmt::Display) -> String {
    let text = err.to_string();
    let mut plain = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // Drop each `[...]` group that names a Rust path (brackets may nest inside generics).
    while let Some(open) = rest.find('[') {
        let mut depth = 0usize;
        let close = rest[open..].char_indices().find_map(|(at, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + at)
        });
        let Some(close) = close else { break };
        plain.push_str(&rest[..open]);
        if !rest[open..=close].contains("::") {
            plain.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    plain.push_str(rest);
    let plain = match plain.rfind("Client error: ") {
        Some(at) => &plain[at + "Client error: ".len()..],
        None => plain.as_str(),
    };
    let plain = plain
        .trim_end_matches(", when send initialize request")
        .trim_end_matches(", when send initialized notification");
    plain.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn notify_cancel(
    peer: &rmcp::Peer<RoleClient>,
    request_id: rmcp::model::RequestId,
    reason: &str,
) {
    // Best effort: a server that is gone cannot be told, and the call is over either way.
    let _ = peer
        .notify_cancelled(CancelledNotificationParam {
            request_id,
            reason: Some(reason.to_string()),
        })
        .await;
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Connects to a streamable-HTTP server: configured headers, the bearer token from its
/// variable, and the MCP handshake within `timeout`.
async fn connect_http(
    url: &str,
    headers: &[(String, String)],
    bearer_token_env: Option<&str>,
    oauth_token: Option<String>,
    timeout: Duration,
    epoch: u64,
) -> Result<Live, String> {
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
    };
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header name `{name}`: {e}"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| format!("header `{name}` has an invalid value: {e}"))?;
        map.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(variable) = bearer_token_env {
        let token = std::env::var(variable)
            .map_err(|_| format!("the variable {variable} (bearer_token_env) is not set"))?;
        config = config.auth_header(token);
    } else if let Some(token) = oauth_token {
        config = config.auth_header(token);
    }
    // Configured headers may hold a secret that reqwest would carry across hosts (it drops only
    // `Authorization` and cookies): redirects are followed within the server's origin only
    // (docs/mcp.md, "HTTP servers").
    let builder = reqwest::Client::builder()
        .default_headers(map)
        .redirect(same_origin_redirects());
    // The same extra authorities as the providers' calls (docs/providers.md, "Extra root
    // certificates").
    let client = dsh_http::trust_extra_roots(builder)
        .map_err(|e| e.0)?
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let client = Client::default();
    let service = connecting(timeout, client.clone().serve(transport))
        .await
        .map_err(|e| match e.contains(url) {
            true => e,
            false => format!("{e} (url {url})"),
        })?;
    Ok(Live {
        service,
        progress: client.progress,
        pgid: None,
        _child: None,
        _plan: None,
        epoch,
    })
}

/// Whether a connection failed because the server answered 401 (with or without
/// `WWW-Authenticate`).
fn unauthorized(error: &str) -> bool {
    error.contains("AuthRequired")
        || error.contains("Auth required")
        || error.contains("401 Unauthorized")
}

/// Up to five redirects, each to the origin (scheme, host, port) of the request that was
/// redirected; a hop to another origin is an error naming it.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .last()
            .is_some_and(|from| from.origin() == attempt.url().origin());
        if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else if same_origin {
            attempt.follow()
        } else {
            let target = attempt.url().to_string();
            attempt.error(format!(
                "the server redirected to another origin ({target}); dsh does not follow it, \
                 so configured headers never reach another address: set `url` to that address"
            ))
        }
    })
}
