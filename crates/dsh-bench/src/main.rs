//! `dsh-bench`: the measuring half of `bench/run`. Each subcommand measures one thing and writes
//! one JSON object (to `--out`, else stdout); `table` turns the JSON files of one run, plus the
//! criterion estimates of the reused benches, into the table of ratios.
//!
//! ```text
//! dsh-bench spawn         --runs N [--env K=V].. -- PROGRAM ARGS..
//! dsh-bench first-request --api chat|responses --runs N [--scheme http|https] [--env K=V].. [--template SRC=DST].. -- PROGRAM ARGS..
//! dsh-bench task          --api chat|responses --steps N [--runs R] --tool NAME --args JSON [--env ..] [--template ..] -- PROGRAM ARGS..
//! dsh-bench step-overhead --steps N --sessions S [--home DIR]
//! dsh-bench session       --events N --runs R
//! dsh-bench sessions-list --sessions N --dirs D --runs R [--home DIR] -- DSH
//! dsh-bench bash-call     --runs N
//! dsh-bench tui           --cells N --tokens-per-s R --tokens T --runs R
//! dsh-bench serve         --api chat|responses --seconds N   (answers "ok" 2,000 times)
//! dsh-bench table         --results DIR --criterion DIR
//! ```
//!
//! In program arguments, environment values and templates, `{base}` becomes the fake provider's
//! base URL and `{work}` the per-run work directory (the program's cwd). With `--scheme https`
//! the fake provider speaks HTTPS with the test certificate, and the program gets
//! `SSL_CERT_FILE` naming the authority that signed it.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod listing;
mod process;
// Bubblewrap and Landlock exist on Linux only (docs/SECURITY.md, "Platforms").
#[cfg(target_os = "linux")]
mod sandbox;
mod session;
mod stats;
mod step;
// The session benches' generator, shared as is: its `pub` items belong to bench code (the file
// itself allows its `expect`s on a bench's own scratch log).
#[path = "../../dsh-session/benches/common.rs"]
#[allow(unreachable_pub)]
mod synthetic_log;
mod table;
mod tui;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use process::{Api, Launch, TaskTool};

/// Parsed command line: options before `--`, the program after it.
struct Args {
    command: String,
    options: Vec<(String, String)>,
    program: Vec<String>,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut raw = std::env::args().skip(1);
        let command = raw
            .next()
            .context("missing subcommand (see the crate docs)")?;
        let mut options = Vec::new();
        let mut program = Vec::new();
        while let Some(arg) = raw.next() {
            if arg == "--" {
                program.extend(raw.by_ref());
                break;
            }
            let Some(name) = arg.strip_prefix("--") else {
                bail!("unexpected argument `{arg}`");
            };
            let value = raw
                .next()
                .with_context(|| format!("--{name} needs a value"))?;
            options.push((name.to_string(), value));
        }
        Ok(Args {
            command,
            options,
            program,
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.options
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, name: &str, default: usize) -> anyhow::Result<usize> {
        match self.get(name) {
            Some(text) => text
                .parse()
                .with_context(|| format!("--{name} must be a number")),
            None => Ok(default),
        }
    }

    fn launch(&self) -> anyhow::Result<Launch> {
        let pair = |text: &str, what: &str| -> anyhow::Result<(String, String)> {
            let (a, b) = text
                .split_once('=')
                .with_context(|| format!("--{what} takes A=B, got `{text}`"))?;
            Ok((a.to_string(), b.to_string()))
        };
        Ok(Launch {
            program: self.program.clone(),
            env: self
                .all("env")
                .map(|e| pair(e, "env"))
                .collect::<anyhow::Result<_>>()?,
            templates: self
                .all("template")
                .map(|t| pair(t, "template").map(|(a, b)| (PathBuf::from(a), PathBuf::from(b))))
                .collect::<anyhow::Result<_>>()?,
        })
    }

    fn api(&self) -> anyhow::Result<Api> {
        Api::parse(self.get("api").unwrap_or("chat"))
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn measure(args: &Args) -> anyhow::Result<Value> {
    match args.command.as_str() {
        "spawn" => process::spawn_time(&args.launch()?, args.number("runs", 20)?),
        "first-request" => {
            let tls = match args.get("scheme").unwrap_or("http") {
                "http" => false,
                "https" => true,
                other => bail!("--scheme takes http or https, got `{other}`"),
            };
            runtime()?.block_on(process::first_request(
                &args.launch()?,
                args.api()?,
                args.number("runs", 10)?,
                tls,
            ))
        }
        "task" => {
            let tool = TaskTool {
                name: args.get("tool").unwrap_or("read").to_string(),
                arguments: args
                    .get("args")
                    .unwrap_or("{\"file_path\": \"f{k}.txt\"}")
                    .to_string(),
            };
            runtime()?.block_on(process::task(
                &args.launch()?,
                args.api()?,
                args.number("steps", 20)?,
                &tool,
                args.number("runs", 1)?,
            ))
        }
        "step-overhead" => {
            let home = args.get("home").map(PathBuf::from);
            runtime()?.block_on(step::step_overhead(
                args.number("steps", 1000)?,
                args.number("sessions", 5)?,
                home.as_deref(),
            ))
        }
        "session" => session::session(args.number("events", 100_000)?, args.number("runs", 1)?),
        "sessions-list" => {
            let dsh = args.program.first().context("the dsh binary after --")?;
            let home = args.get("home").map(PathBuf::from);
            listing::sessions_list(
                std::path::Path::new(dsh),
                args.number("sessions", 10_000)?,
                args.number("dirs", 50)?,
                args.number("runs", 10)?,
                home.as_deref(),
            )
        }
        #[cfg(target_os = "linux")]
        "bash-call" => runtime()?.block_on(sandbox::bash_call(args.number("runs", 40)?)),
        "tui" => tui::tui(
            args.number("cells", 2_000)?,
            args.number("tokens-per-s", 200)? as f64,
            args.number("tokens", 2_000)?,
            args.number("runs", 10)?,
            (
                u16::try_from(args.number("width", 120)?).context("--width")?,
                u16::try_from(args.number("height", 40)?).context("--height")?,
            ),
        ),
        "serve" => {
            runtime()?.block_on(process::serve(
                args.api()?,
                args.number("seconds", 30)? as u64,
            ))?;
            Ok(Value::Null)
        }
        "table" => {
            let results = PathBuf::from(args.get("results").context("--results DIR")?);
            let criterion = PathBuf::from(args.get("criterion").context("--criterion DIR")?);
            print!("{}", table::render(&results, &criterion));
            Ok(Value::Null)
        }
        other => bail!("unknown subcommand `{other}`"),
    }
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("dsh-bench: {err:#}");
            return ExitCode::from(2);
        }
    };
    let (value, code) = match measure(&args) {
        Ok(Value::Null) => return ExitCode::SUCCESS,
        Ok(value) => (value, ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("dsh-bench {}: {err:#}", args.command);
            (json!({"error": format!("{err:#}")}), ExitCode::FAILURE)
        }
    };
    let text = format!("{value}\n");
    match args.get("out") {
        Some(path) => {
            if let Err(err) = std::fs::write(path, text) {
                eprintln!("dsh-bench: writing {path}: {err}");
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    code
}
