//! `dsh web`: a local HTTP API, a server-sent-event stream of session events, and an embedded
//! web UI over live agents and stored sessions (SPEC S7 server rules, S8).
//!
//! - [`WebServer::start`] serves on a bound listener; [`check_bind_address`] refuses
//!   non-loopback addresses unless remote access is asked for.
//! - Every request passes [`security::gate`]: `Host`/`Origin` checks, the per-launch
//!   [`AccessToken`], JSON-only mutating requests.
//! - [`Sessions`] keeps one [`dsh_agent::Agent`] per open session running `serve()` in a task,
//!   and serves the others from their logs; the front end supplies an [`AgentFactory`]. Each
//!   live agent gets a [`WebApprover`] (tool approvals) and a [`WebAsker`]
//!   (`ask_user_question`), answered through the API.
//! - Everything the UI shows is rendered from session events (`GET
//!   /api/sessions/:id/events`), so a reload or a second tab shows the same state.
//!
//! The API reference and the security model are in `docs/web.md`.

mod approvals;
mod assets;
mod error;
mod feed;
mod questions;
mod routes;
pub mod security;
mod sessions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use dsh_session::{PriceTable, StoreKind};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use approvals::WebApprover;
/// HTTP status codes, for [`ApiError`]s built by front ends.
pub use axum::http::StatusCode;
pub use error::ApiError;
pub use feed::Feed;
pub use questions::WebAsker;
pub use security::{check_bind_address, AccessToken, GatePolicy};
pub use sessions::{AgentFactory, LiveSession, OpenRequest, OpenedAgent, Sessions};

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
    /// The launch token.
    pub token: AccessToken,
}

/// Binds `address`, refusing a non-loopback one unless `allow_remote`.
pub async fn bind(address: SocketAddr, allow_remote: bool) -> std::io::Result<TcpListener> {
    check_bind_address(&address, allow_remote)
        .map_err(|msg| std::io::Error::new(std::io::ErrorKind::PermissionDenied, msg))?;
    TcpListener::bind(address).await
}

/// A running server.
pub struct WebServer {
    address: SocketAddr,
    token: AccessToken,
    sessions: Arc<Sessions>,
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl WebServer {
    /// Serves on `listener` until [`WebServer::shutdown`].
    pub fn start(
        listener: TcpListener,
        options: ServerOptions,
        factory: Arc<dyn AgentFactory>,
    ) -> std::io::Result<WebServer> {
        let address = listener.local_addr()?;
        let sessions = Sessions::new(options.home, options.store, factory, options.prices);
        let policy = Arc::new(GatePolicy {
            token: options.token.clone(),
            port: address.port(),
            allow_remote: options.allow_remote,
        });
        let state = Arc::new(routes::AppState {
            sessions: Arc::clone(&sessions),
            default_cwd: options.default_cwd,
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
            token: options.token,
            sessions,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The address to open: loopback host, the port, and the token as a query parameter.
    pub fn url(&self) -> String {
        let host = match self.address.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        };
        format!(
            "http://{host}:{}/?token={}",
            self.address.port(),
            self.token.as_str()
        )
    }

    /// The session registry (for tests and embedding).
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Cancels running turns, stops every agent (their logs are closed cleanly), ends the
    /// event streams and stops serving.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.sessions.shutdown().await;
        self.stop.cancel();
        match self.task.await {
            Ok(result) => result,
            Err(err) => Err(std::io::Error::other(format!("server task failed: {err}"))),
        }
    }
}

fn router(state: Arc<routes::AppState>, policy: Arc<GatePolicy>) -> Router {
    let api = Router::new()
        .route("/api/info", get(routes::info))
        .route("/api/sessions", get(routes::list).post(routes::create))
        .route("/api/sessions/{id}", get(routes::detail))
        .route("/api/sessions/{id}/events", get(routes::events))
        .route("/api/sessions/{id}/prompt", post(routes::prompt))
        .route("/api/sessions/{id}/cancel", post(routes::cancel))
        .route("/api/sessions/{id}/compact", post(routes::compact))
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
