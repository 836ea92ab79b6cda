//! `dsh web`: the local web UI and API (crate `dsh-server`), wired to the same agent building
//! as `dsh run` ([`crate::run::resolve`], [`crate::run::agent_parts`]), with model-written
//! session titles.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use dsh_server::{
    AgentFactory, ApiError, OpenRequest, OpenedAgent, ServerOptions, StatusCode, WebServer,
};
use dsh_session::{PriceTable, SessionStore, StoreKind};

use crate::run::{RunArgs, UserError};

/// Prints a line on stdout; a closed stdout (`dsh web | head -1`) must not stop the server.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Arguments of `dsh web`.
#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// Address to listen on (loopback only unless --allow-remote).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 3080)]
    pub port: u16,
    /// Do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Allow a non-loopback --host. Anyone who can reach the port and gets the launch code
    /// or the sign-in cookie can run commands as you.
    #[arg(long)]
    pub allow_remote: bool,
    /// Provider for new sessions (default: the configured one).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model for new sessions (default: the configured one).
    #[arg(long)]
    pub model: Option<String>,
    /// Reasoning effort for new sessions: off, low, medium, high or max.
    #[arg(long)]
    pub effort: Option<String>,
    /// Permission preset of the sessions' tools (default: $DSH_PERMISSION_MODE, else
    /// workspace-write).
    #[arg(long)]
    pub permission: Option<String>,
    /// Default workspace for new sessions (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Apply the workspaces' own project settings without a recorded `dsh trust`.
    #[arg(long)]
    pub trust_workspace: bool,
}

/// `dsh run`'s arguments parsed from a command line, so new `run` flags keep their defaults.
#[derive(Debug, Parser)]
struct RunCommandLine {
    #[command(flatten)]
    args: RunArgs,
}

/// Builds agents exactly as `dsh run` does, with the flags `dsh web` was given.
struct RunFactory {
    flags: Vec<String>,
    models: Vec<String>,
}

fn api_error(err: anyhow::Error) -> ApiError {
    if let Some(user) = err.downcast_ref::<UserError>() {
        return ApiError::new(StatusCode::BAD_REQUEST, &user.code, user.message.clone());
    }
    match err.downcast::<dsh_agent::AgentError>() {
        Ok(agent) => agent.into(),
        Err(err) => match err.downcast::<dsh_session::SessionError>() {
            Ok(session) => session.into(),
            Err(err) => ApiError::internal(format!("{err:#}")),
        },
    }
}

impl AgentFactory for RunFactory {
    fn open(
        &self,
        request: &OpenRequest,
        store: &dyn SessionStore,
    ) -> Result<OpenedAgent, ApiError> {
        let mut argv = vec!["dsh-web".to_string(), String::new()];
        argv.extend(self.flags.iter().cloned());
        argv.push(format!("--cwd={}", request.cwd.display()));
        if let Some(id) = &request.resume {
            argv.push(format!("--resume={id}"));
        }
        if let Some(model) = &request.model {
            argv.push(format!("--model={model}"));
        }
        if let Some(effort) = &request.effort {
            argv.push(format!("--effort={effort}"));
        }
        let args = RunCommandLine::try_parse_from(argv)
            .map_err(|err| ApiError::bad_request(err.to_string()))?
            .args;
        let setup = Arc::new(crate::run::resolve(&args).map_err(api_error)?);
        let mut session =
            crate::run::agent_parts(&setup, 0, setup.permission).map_err(api_error)?;
        // An interactive session is worth a model-written title (one small call, thinking off,
        // alongside the first turn; the fallback stays if it fails).
        session.parts.options.titles = dsh_agent::TitleMode::Model {
            route: None,
            model: None,
        };
        // `into_agent` installs the permission source, so the UI can switch presets
        // (`POST /api/sessions/:id/permission`); the server installs its approver and asker.
        let agent = session.into_agent(store, request.resume.as_deref())?;
        Ok(OpenedAgent {
            agent,
            guards: Vec::new(),
        })
    }

    fn models(&self) -> Vec<String> {
        self.models.clone()
    }
}

fn listen_address(args: &WebArgs) -> anyhow::Result<SocketAddr> {
    let ip = if args.host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        args.host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .with_context(|| format!("--host {}: not an IP address", args.host))?
    };
    Ok(SocketAddr::new(ip, args.port))
}

/// Runs `dsh web` until Ctrl-C.
pub fn run(args: WebArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: WebArgs) -> anyhow::Result<ExitCode> {
    let address = listen_address(&args)?;
    if let Err(message) = dsh_server::check_bind_address(&address, args.allow_remote) {
        return Err(anyhow::Error::new(UserError {
            code: "REFUSED".into(),
            message,
        }));
    }
    if !address.ip().is_loopback() {
        eprintln!(
            "dsh web: WARNING: listening on {} with --allow-remote: anyone who can reach this \
             port and gets the launch code or the sign-in cookie can read your sessions and run \
             commands as you. The traffic is not encrypted.",
            address.ip()
        );
    }
    let home = crate::home::dsh_home()?;
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .with_context(|| format!("working directory {} does not exist", cwd.display()))?;
    let mut flags = Vec::new();
    for (name, value) in [
        ("provider", &args.provider),
        ("model", &args.model),
        ("effort", &args.effort),
        ("permission", &args.permission),
    ] {
        if let Some(value) = value {
            flags.push(format!("--{name}={value}"));
        }
    }
    if args.trust_workspace {
        flags.push("--trust-workspace".to_string());
    }
    // The configuration as `dsh run` resolves it here: prices and models for the UI. Without a
    // key the UI still browses sessions; prompts then fail with the same message.
    let probe = RunCommandLine::try_parse_from(
        [
            "dsh-web".to_string(),
            String::new(),
            format!("--cwd={}", cwd.display()),
        ]
        .into_iter()
        .chain(flags.iter().cloned()),
    )
    .map_err(|err| anyhow::anyhow!("{err}"))?;
    let (prices, models) = match crate::run::resolve(&probe.args) {
        Ok(setup) => (
            setup.prices.clone(),
            setup.config.models.keys().cloned().collect(),
        ),
        Err(err) => {
            eprintln!(
                "dsh web: {err:#}; sessions can be browsed, prompts will fail until this is fixed"
            );
            (PriceTable::default_deepseek(), Vec::new())
        }
    };

    let listener = dsh_server::bind(address, args.allow_remote)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let options = ServerOptions {
        home: home.clone(),
        store: StoreKind::Jsonl,
        prices,
        default_cwd: cwd,
        allow_remote: args.allow_remote,
    };
    let factory = Arc::new(RunFactory { flags, models });
    let server = dsh_server::WebServer::start(listener, options, factory)?;
    let url = server.url();
    say!("dsh web: serving {url}");
    say!("dsh web: press Ctrl-C to stop (running turns are cancelled and saved)");
    if !args.no_open {
        open_browser(&home, &server);
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot wait for SIGTERM")?;
    tokio::select! {
        signal = tokio::signal::ctrl_c() => signal.context("cannot wait for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    // Shutdown also deletes the launch page and kills every unused launch code.
    eprintln!("\ndsh web: stopping");
    server.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the UI in a browser unless this is an SSH session or no opener exists. No launch code
/// appears on a command line (other local users can read those): the opener gets a private
/// page (mode 0600 in a 0700 folder) holding its own one-time code; the server deletes it as
/// soon as the browser used the code, after two minutes otherwise, and at exit (docs/web.md).
fn open_browser(home: &std::path::Path, server: &WebServer) {
    if std::env::var_os("SSH_CONNECTION").is_some() || std::env::var_os("SSH_TTY").is_some() {
        say!("dsh web: SSH session, not opening a browser; forward the port and open the address above");
        return;
    }
    let Some(opener) = find_opener() else {
        say!("dsh web: no xdg-open found; open the address above in a browser");
        return;
    };
    let page = match server.write_launch_page(&home.join("web")) {
        Ok(page) => page,
        Err(err) => {
            say!("dsh web: cannot write the launch page ({err}); open the address above");
            return;
        }
    };
    let spawned = std::process::Command::new(&opener)
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    // The opener runs on its own; its exit status says nothing about the page.
    if let Err(err) = spawned {
        say!(
            "dsh web: {} failed ({err}); open the address above",
            opener.display()
        );
    }
}

fn find_opener() -> Option<PathBuf> {
    let name = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}
