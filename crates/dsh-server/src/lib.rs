//! `dsh web`: a local HTTP API, a server-sent-event stream of session events, and an embedded
//! web UI over live agents and stored sessions (docs/web.md).
//!
//! - [`WebServer::start`] serves on a bound listener; [`check_bind_address`] refuses
//!   non-loopback addresses unless remote access is asked for.
//! - Every request passes [`security::gate`]: `Host`/`Origin` checks, sign-in (a one-time
//!   launch code exchanged for an `HttpOnly` cookie, see [`security::Access`]), JSON-only
//!   mutating requests.
//! - [`Sessions`] keeps one [`dsh_agent::Agent`] per open session running `serve()` in a task,
//!   and serves the others from their logs; the binary supplies a
//!   [`dsh_runtime::SessionFactory`]. Each live agent gets one
//!   [`dsh_protocol::SessionControl`]: the API's requests become its operations, and its
//!   [`dsh_protocol::Interactions`] (the agent's approver and asker) keeps approvals and
//!   questions waiting until the API answers them (docs/protocol.md).
//! - The children (subagents) of a live session stream on its event stream as `child` events;
//!   stored children are read through a path-confined API (`children.rs`).
//! - Everything the UI shows is rendered from session events (`GET
//!   /api/sessions/:id/events`): the log's envelopes and the view events a
//!   [`dsh_protocol::ViewProjector`] makes of them (tool cards, approvals, questions, turn
//!   ends), so a reload, a second tab or a stored session shows the same state.
//!
//! The API reference and the security model are in `docs/web.md`.

#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod assets;
mod children;
mod effort;
mod error;
mod feed;
mod routes;
pub mod security;
mod sessions;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use dsh_session::{PriceTable, StoreKind};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// HTTP status codes, for [`ApiError`]s built by front ends.
pub use axum::http::StatusCode;
pub use error::ApiError;
pub use feed::Feed;
pub use security::{check_bind_address, Access, AccessToken, GatePolicy};
pub use sessions::{LiveSession, OpenRequest, Sessions};

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The dsh home (`$DSH_HOME`), where sessions are stored.
    pub home: PathBuf,
    /// Which session store to use.
    pub store: StoreKind,
    /// Prices for the costs shown.
    pub prices: PriceTable,
    /// Where new sessions go unless the request names a directory.
    pub default_cwd: PathBuf,
    /// Accept non-loopback IP literals in `Host` (the listener must have been allowed too).
    pub allow_remote: bool,
}

/// How long the code of a launch page stays valid while unused; the page is deleted then.
pub const LAUNCH_PAGE_TTL: Duration = Duration::from_secs(120);

/// Binds `address`, refusing a non-loopback one unless `allow_remote`.
pub async fn bind(address: SocketAddr, allow_remote: bool) -> std::io::Result<TcpListener> {
    check_bind_address(&address, allow_remote)
        .map_err(|msg| std::io::Error::new(std::io::ErrorKind::PermissionDenied, msg))?;
    TcpListener::bind(address).await
}

/// A running server.
pub struct WebServer {
    address: SocketAddr,
    access: Arc<Access>,
    /// The launch code of the printed address: valid until its first use.
    code: AccessToken,
    sessions: Arc<Sessions>,
    stop: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Drop for WebServer {
    fn drop(&mut self) {
        // However the server ends, no launch page outlives it.
        self.access.close();
    }
}

impl WebServer {
    /// Serves on `listener` until [`WebServer::shutdown`].
    pub fn start(
        listener: TcpListener,
        options: ServerOptions,
        factory: Arc<dyn dsh_runtime::SessionFactory>,
    ) -> std::io::Result<WebServer> {
        let address = listener.local_addr()?;
        let sessions = Sessions::new(options.home, options.store, factory, options.prices);
        let access = Arc::new(Access::default());
        let code = access.issue_code(None, None);
        let policy = Arc::new(GatePolicy {
            access: Arc::clone(&access),
            port: address.port(),
            allow_remote: options.allow_remote,
        });
        let state = Arc::new(routes::AppState {
            sessions: Arc::clone(&sessions),
            default_cwd: options.default_cwd,
            access: Arc::clone(&access),
        });
        let app = router(state, policy);
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await
        });
        Ok(WebServer {
            address,
            access,
            code,
            sessions,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The address `dsh web` prints: loopback host, the port, and the server's first launch
    /// code, which works once (the redirect it answers sets the sign-in cookie).
    pub fn url(&self) -> String {
        self.url_with(&self.code)
    }

    fn url_with(&self, code: &AccessToken) -> String {
        let host = match self.address.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        };
        format!(
            "http://{host}:{}/?code={}",
            self.address.port(),
            code.as_str()
        )
    }

    /// An address with a new one-time launch code (valid until used, or `ttl`).
    pub fn issue_url(&self, ttl: Option<Duration>) -> String {
        let code = self.access.issue_code(None, ttl);
        self.url_with(&code)
    }

    /// Writes a launch page for a browser opener into `dir` (created mode 0700; the page is
    /// mode 0600): a redirect to an address with its own launch code, so no code appears on a
    /// command line. The page is deleted as soon as its code is used, after
    /// [`LAUNCH_PAGE_TTL`] when it is not, and when the server stops.
    pub fn write_launch_page(&self, dir: &Path) -> std::io::Result<PathBuf> {
        use std::io::Write;
        #[cfg(unix)]
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        // Windows: no modes; the folder and page get the ACL inherited from the parent.
        #[cfg(unix)]
        builder.mode(0o700);
        builder.create(dir)?;
        #[cfg(unix)]
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let page = dir.join(format!("open-{}.html", self.address.port()));
        // An earlier page of this server at the same path: its code dies with it. A page left
        // by an earlier launch holds a dead code; it is replaced.
        self.access.revoke_page(&page);
        let _ = std::fs::remove_file(&page);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options.mode(0o600);
        let mut file = options.open(&page)?;
        let code = self.access.issue_code(None, Some(LAUNCH_PAGE_TTL));
        let url = self.url_with(&code);
        let written = writeln!(
            file,
            "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url={url}\">\
             <title>dsh web</title><p><a href=\"{url}\">Open dsh web</a></p>"
        );
        drop(file);
        // Attached even when the write failed, so the page goes with the code either way.
        self.access.attach_page(&code, page.clone());
        if let Err(err) = written {
            self.access.revoke(&code);
            return Err(err);
        }
        let access = Arc::clone(&self.access);
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(LAUNCH_PAGE_TTL) => access.revoke(&code),
                _ = stop.cancelled() => {}
            }
        });
        Ok(page)
    }

    /// The session registry (for tests and embedding).
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Cancels running turns, stops every agent (their logs are closed cleanly), ends the
    /// event streams and stops serving.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.access.close();
        self.sessions.shutdown().await;
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(result) => result,
            Err(err) => Err(std::io::Error::other(format!("server task failed: {err}"))),
        }
    }
}

fn router(state: Arc<routes::AppState>, policy: Arc<GatePolicy>) -> Router {
    let api = Router::new()
        .route("/api/info", get(routes::info))
        .route("/api/launch", post(routes::launch))
        .route("/api/trust", get(routes::trust_review).post(routes::trust))
        .route("/api/sessions", get(routes::list).post(routes::create))
        .route("/api/sessions/{id}", get(routes::detail))
        .route("/api/sessions/{id}/images/{file}", get(routes::image))
        .route("/api/sessions/{id}/events", get(routes::events))
        .route("/api/sessions/{id}/children", get(children::list_route))
        .route(
            "/api/sessions/{id}/children/{child}",
            get(children::events_route),
        )
        .route(
            "/api/sessions/{id}/prompt",
            // Prompts may carry images (docs/web.md, "Images"): base64 makes 4 bytes of 3.
            post(routes::prompt).layer(axum::extract::DefaultBodyLimit::max(
                routes::MAX_PROMPT_BODY_BYTES,
            )),
        )
        .route("/api/sessions/{id}/cancel", post(routes::cancel))
        .route("/api/sessions/{id}/compact", post(routes::compact))
        .route("/api/sessions/{id}/warm", post(routes::warm))
        .route("/api/sessions/{id}/call", post(routes::set_call))
        .route(
            "/api/sessions/{id}/permission",
            post(routes::set_permission),
        )
        .route(
            "/api/sessions/{id}/approvals/{approval}",
            post(routes::approve),
        )
        .route(
            "/api/sessions/{id}/questions/{call}",
            post(routes::answer_question),
        )
        .route(
            "/api/sessions/{id}/commands",
            get(routes::commands).post(routes::run_command),
        )
        .route("/api/sessions/{id}/undo", post(routes::undo))
        .route("/api/sessions/{id}/plan", post(routes::plan_mode))
        .route("/api/sessions/{id}/fork", post(routes::fork))
        .route("/api/sessions/{id}/export", get(routes::export))
        .route("/api/sessions/{id}/title", post(routes::rename))
        .fallback(routes::not_found)
        .with_state(state);
    Router::new()
        .route("/", get(assets::index))
        .route("/ui/{file}", get(assets::asset))
        .merge(api)
        .layer(axum::middleware::from_fn_with_state(policy, security::gate))
}
