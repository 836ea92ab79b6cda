//! `dsh web`: the local web UI and API (crate `dsh-server`), with agents opened by the
//! process's [`dsh_runtime::Runtime`] like every front end's, with model-written session titles.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use dsh_runtime::SessionSpec;
use dsh_server::{ServerOptions, WebServer};
use dsh_session::{PriceTable, StoreKind};

use crate::run::UserError;

/// Prints a line on stdout; a closed stdout (`dsh web | head -1`) must not stop the server.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

// Arguments of `dsh web` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct WebArgs {
    /// Address to listen on (loopback only unless --allow-remote).
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 3080)]
    pub(crate) port: u16,
    /// Do not open a browser.
    #[arg(long)]
    pub(crate) no_open: bool,
    /// Allow a non-loopback --host. Anyone who can reach the port and gets the launch code
    /// or the sign-in cookie can run commands as you.
    #[arg(long)]
    pub(crate) allow_remote: bool,
    /// Default workspace for new sessions (default: the current directory).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    // New sessions' provider, model, effort and preset.
    #[command(flatten)]
    pub(crate) session: crate::flags::SessionFlags,
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
pub(crate) fn run(args: WebArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::run::async_runtime()?;
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
    let runtime = crate::run::runtime(args.cwd.as_deref(), args.session.choices())?;
    let home = runtime.home().to_path_buf();
    let cwd = runtime.cwd().to_path_buf();
    // The configuration of the default workspace, resolved once: prices and models for the
    // UI, and the sessions opened there reuse it. Without a key the UI still browses
    // sessions; prompts then fail with the same message.
    let prices = match runtime.configuration(&SessionSpec::default()) {
        Ok(setup) => setup.prices.clone(),
        Err(err) => {
            eprintln!(
                "dsh web: {}; sessions can be browsed, prompts will fail until this is fixed",
                err.describe()
            );
            PriceTable::default_deepseek()
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
    // Both stop signals are caught from before the server starts: a signal that arrived between
    // the printed address (or the launch page) and a later handler would kill the process
    // without its shutdown, leaving a launch page that signs in (docs/web.md).
    let mut stop = StopSignals::new()?;
    let server = dsh_server::WebServer::start(listener, options, Arc::new(runtime))?;
    let url = server.url();
    say!("dsh web: serving {url}");
    say!("dsh web: press Ctrl-C to stop (running turns are cancelled and saved)");
    if !args.no_open {
        open_browser(&home, &server);
    }
    stop.recv().await;
    // Shutdown also deletes the launch page and kills every unused launch code.
    eprintln!("\ndsh web: stopping");
    server.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

/// What stops `dsh web`: Ctrl-C or `SIGTERM` (Unix); Ctrl-C, Ctrl-Break or closing the console
/// window (Windows).
#[cfg(unix)]
struct StopSignals(tokio::signal::unix::Signal, tokio::signal::unix::Signal);

#[cfg(unix)]
impl StopSignals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).context("cannot wait for Ctrl-C")?;
        let terminate = signal(SignalKind::terminate()).context("cannot wait for SIGTERM")?;
        Ok(Self(interrupt, terminate))
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.0.recv() => {}
            _ = self.1.recv() => {}
        }
    }
}

/// What stops `dsh web` (see the Unix form above).
#[cfg(windows)]
struct StopSignals(
    tokio::signal::windows::CtrlC,
    tokio::signal::windows::CtrlBreak,
    tokio::signal::windows::CtrlClose,
);

#[cfg(windows)]
impl StopSignals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close};
        Ok(Self(
            ctrl_c().context("cannot wait for Ctrl-C")?,
            ctrl_break().context("cannot wait for Ctrl-Break")?,
            ctrl_close().context("cannot wait for the console to close")?,
        ))
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.0.recv() => {}
            _ = self.1.recv() => {}
            _ = self.2.recv() => {}
        }
    }
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
