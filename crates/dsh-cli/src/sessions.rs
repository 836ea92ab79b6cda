//! `dsh sessions list|show|export|fork|rewind|rm|search`: wiring of `dsh-session` to the terminal.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use dsh_session::{
    encode_jsonl, export_markdown, export_zip, fork, load_file, open_store, ListFilter, LoadedLog,
    PriceTable, SessionStore, StoreKind,
};

// Arguments of `dsh sessions` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct SessionsArgs {
    /// Session store: `jsonl` (default) or `sqlite`.
    #[arg(
        long,
        global = true,
        env = "DSH_SESSION_STORE",
        default_value = "jsonl"
    )]
    store: String,
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SessionsCommand {
    /// List sessions of the current directory (all directories with --all), newest first.
    List {
        /// List the sessions of every directory.
        #[arg(long)]
        all: bool,
    },
    /// Print a readable transcript of a session (id, id prefix, or path to a session.jsonl).
    Show {
        /// Session id, unique id prefix, or path.
        session: String,
        /// Instead of the transcript, show the prompt-cache report of every request: size,
        /// prefix reuse, the provider's cache-hit share, and what broke the prefix.
        #[arg(long)]
        cache: bool,
        /// Instead of the transcript, list the session's subagents: name, state, model,
        /// usage and cost (docs/sessions.md, "Children").
        #[arg(long, conflicts_with = "cache")]
        children: bool,
        /// Show the transcript of this subagent (its name `agent-N`, id or id prefix).
        #[arg(long, value_name = "NAME", conflicts_with_all = ["cache", "children"])]
        child: Option<String>,
        /// Print control characters and escape sequences as they were logged instead of
        /// showing them as text (`^[`); a terminal will obey them. Secrets stay replaced.
        #[arg(long)]
        raw: bool,
    },
    /// Export a session as JSON lines, a Markdown transcript, or a zip with sub-agent logs.
    Export {
        /// Session id, unique id prefix, or path.
        session: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExportFormat,
        /// Output file (default: standard output; for zip, `<id>.zip` when standard output is
        /// a terminal).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Start a new session from a session's log up to the end of a closed turn.
    Fork {
        /// Session id or unique id prefix.
        session: String,
        /// Fork after this turn (default: the last closed turn).
        #[arg(long)]
        at_turn: Option<u64>,
    },
    /// Go back to the start of an earlier turn: the files as they were then (from dsh's
    /// checkpoints), the conversation as it was (a new session), or both (the default);
    /// without --to-turn, list the turns (docs/rewind.md).
    Rewind(crate::rewind::RewindArgs),
    /// Delete a session (asks for confirmation unless --yes).
    Rm {
        /// Session id or unique id prefix.
        session: String,
        /// Do not ask.
        #[arg(long, short)]
        yes: bool,
    },
    /// Search message text of all sessions.
    Search {
        /// Text to look for (case-insensitive).
        text: String,
        /// Most hits to print.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Build the search index of the session catalog now (a search that finds it far behind
    /// the logs answers by reading them and starts this in the background).
    Reindex {
        /// Print nothing (the background run's form).
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Jsonl,
    Md,
    Zip,
    /// ATIF trajectory JSON (docs/harbor.md, "Trajectories"), sub-agents embedded.
    Atif,
    /// The session's view events as JSON lines (docs/protocol.md, "View events"): what every
    /// front end shows of it, the lines `dsh run --json` printed as `view`.
    View,
}

/// Runs `dsh sessions`.
pub(crate) fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let kind = StoreKind::parse(&args.store).with_context(|| {
        format!(
            "unknown session store `{}`: use jsonl or sqlite",
            args.store
        )
    })?;
    let home = crate::home::dsh_home()?;
    let store = open_store(kind, &home)?;
    let mut out = std::io::stdout().lock();
    match args.command {
        SessionsCommand::List { all } => list(store.as_ref(), all, &mut out)?,
        SessionsCommand::Show {
            session,
            cache,
            children,
            child,
            raw,
        } => {
            if children || child.is_some() {
                let folder = session_folder(store.as_ref(), kind, &session)?;
                return show_children(&folder, child.as_deref(), raw, &mut out)
                    .map(|()| ExitCode::SUCCESS);
            }
            let log = load_any(store.as_ref(), &session)?;
            if cache {
                cache_table(&log, &mut out)?;
            } else {
                let text = with_cost(&log, human_dates(&log, export_markdown(&log)));
                out.write_all(shown(&log, &text, raw).as_bytes())?;
            }
        }
        SessionsCommand::Export {
            session,
            format,
            output,
        } => export(store.as_ref(), &session, format, output, &mut out)?,
        SessionsCommand::Fork { session, at_turn } => {
            let header = fork(store.as_ref(), &session, at_turn)?;
            writeln!(
                out,
                "{}\nforked from {} after {} events",
                header.id,
                header.parent_session.unwrap_or_default(),
                header.seed_length.unwrap_or(0)
            )?;
        }
        SessionsCommand::Rewind(rewind) => {
            return crate::rewind::run(store.as_ref(), &home, rewind, &mut out);
        }
        SessionsCommand::Rm { session, yes } => {
            let id = store.resolve(&session)?;
            if !yes && !confirm(&id)? {
                writeln!(out, "kept {id}")?;
                return Ok(ExitCode::from(1));
            }
            store.remove(&id)?;
            writeln!(out, "removed {id}")?;
        }
        SessionsCommand::Reindex { quiet } => {
            let root = home.join("sessions");
            let built = dsh_session::build_index(&home, &root)?;
            if !quiet {
                match built {
                    true => writeln!(out, "indexed the sessions of {}", root.display())?,
                    false => writeln!(out, "another dsh is indexing the sessions already")?,
                }
            }
        }
        SessionsCommand::Search { text, limit } => {
            let hits = store.search(&text, limit)?;
            if store.index_behind() {
                index_in_background();
            }
            if hits.is_empty() {
                // As `list` says when it has nothing: silence reads as a search that failed.
                writeln!(
                    out,
                    "no session message contains `{}`",
                    dsh_tools::printable(&text)
                )?;
            }
            for hit in hits {
                writeln!(
                    out,
                    "{}  #{}  {}  {}",
                    hit.session_id,
                    hit.seq,
                    hit.event_type,
                    dsh_tools::printable(&hit.snippet)
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts `dsh sessions reindex --quiet` detached (its own session, lowest CPU priority,
/// no terminal), as git detaches its automatic `gc`: the search that found the index far
/// behind answered by reading the logs, and the next one finds the index built
/// (docs/decisions/0010-cold-search-scans.md). Nothing is reported when it cannot start: the
/// next search reads the logs again.
fn index_in_background() {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut command = std::process::Command::new(exe);
    command
        .args(["sessions", "reindex", "--quiet"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe calls are made (setsid, nice).
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                libc::nice(19);
                Ok(())
            });
        }
    }
    // Not waited for: it outlives this process (reparented when this one exits).
    let _ = command.spawn();
}

/// A session by path (any `session.jsonl` or `session.jsonl.zstd`, or its folder) or from the
/// store by id.
fn load_any(store: &dyn SessionStore, key: &str) -> anyhow::Result<LoadedLog> {
    let path = Path::new(key);
    if path.is_file() {
        return Ok(load_file(path)?);
    }
    if let Some(file) = dsh_session::session_file_in(path) {
        return Ok(load_file(&file)?);
    }
    Ok(store.load(key)?)
}

/// The folder of a session's log (its children live in `subagents/` there): a path, an id of
/// the JSONL store, or for the SQLite store its children's folder beside the database
/// (docs/sessions.md, "Where sessions live").
fn session_folder(store: &dyn SessionStore, kind: StoreKind, key: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(key);
    let file = if path.is_file() {
        path.to_path_buf()
    } else if let Some(file) = dsh_session::session_file_in(path) {
        file
    } else {
        let folder = store.session_folder(key);
        return match kind {
            StoreKind::Jsonl => folder.with_context(|| {
                format!("cannot find session `{key}` in the jsonl store (subagent logs are read from session folders; pass the path of the session.jsonl)")
            }),
            StoreKind::Sqlite => Ok(folder?),
        };
    };
    Ok(file
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf))
}

/// `show --children`: one line per subagent of the session in `folder`; `show --child NAME`:
/// that subagent's transcript.
fn show_children(
    folder: &Path,
    child: Option<&str>,
    raw: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let children = dsh_agent::read_children(folder);
    if let Some(key) = child {
        let found = children
            .iter()
            .find(|c| c.name.as_deref() == Some(key) || c.id == key)
            .or_else(|| {
                let mut matches = children.iter().filter(|c| key.len() >= 4 && c.id.starts_with(key));
                match (matches.next(), matches.next()) {
                    (Some(one), None) => Some(one),
                    _ => None,
                }
            })
            .with_context(|| {
                format!("the session has no subagent `{key}`; `dsh sessions show <session> --children` lists them")
            })?;
        let log = load_file(&found.log)?;
        let text = with_cost(&log, human_dates(&log, export_markdown(&log)));
        out.write_all(shown(&log, &text, raw).as_bytes())?;
        return Ok(());
    }
    if children.is_empty() {
        writeln!(out, "This session started no subagents.")?;
        return Ok(());
    }
    let prices = configured_prices(Path::new(&children[0].cwd));
    let mut text = String::from("NAME      STATE        MODEL                 REQUESTS  INPUT     CACHED    OUTPUT    COST       ID                                    LABEL\n");
    for c in &children {
        // Six decimals: a short child costs a few millionths of a dollar.
        let cost = prices
            .cost(&c.usage_by_model)
            .map_or_else(|| "-".to_string(), |cost| format!("${cost:.6}"));
        text.push_str(&format!(
            "{:<9} {:<12} {:<21} {:<9} {:<9} {:<9} {:<9} {:<10} {:<37} {}\n",
            c.name.as_deref().unwrap_or("-"),
            c.state(),
            if c.model.is_empty() { "-" } else { &c.model },
            c.usage.requests,
            c.usage.usage.input_tokens,
            c.usage.usage.cache_read_tokens,
            c.usage.usage.output_tokens,
            cost,
            c.id,
            c.label
        ));
    }
    out.write_all(text.as_bytes())?;
    Ok(())
}

fn list(store: &dyn SessionStore, all: bool, stdout: &mut impl Write) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let cwd = if all {
        None
    } else {
        let dir = std::env::current_dir().context("reading the current directory")?;
        Some(dir.to_string_lossy().into_owned())
    };
    // Compact rows over one text rather than a summary per session (docs/PERFORMANCE.md,
    // "Session listing", fourth pass).
    let listing = store.list_all(&ListFilter { cwd: cwd.clone() })?;
    for problem in &listing.problems {
        eprintln!("dsh: warning: {problem}");
    }
    if listing.is_empty() {
        match cwd {
            Some(cwd) => writeln!(
                stdout,
                "no sessions in {cwd} (use --all to list every directory)"
            )?,
            None => writeln!(stdout, "no sessions")?,
        }
        return Ok(());
    }
    let prices = PriceTable::default_deepseek();
    // Sessions in a worktree dsh made are marked with its name (docs/worktrees.md).
    let worktrees = crate::home::dsh_home()
        .map(|home| crate::worktree::registered(&home))
        .unwrap_or_default();
    // The whole listing is laid out in one buffer by hand (the padding of `format!` wrote
    // one character at a time) and written at once: a listing can be 10,000 lines
    // (docs/PERFORMANCE.md, "Session listing"). The columns are those of the header.
    let mut out: Vec<u8> = Vec::with_capacity(64 + listing.len() * if all { 160 } else { 120 });
    out.extend_from_slice(
        format!(
            "{:<36}  {:<16}  {:>5}  {:>10}  {:>9}  TITLE\n",
            "ID", "UPDATED (UTC)", "TURNS", "TOKENS", "COST"
        )
        .as_bytes(),
    );
    let mut cost = String::with_capacity(16);
    let mut digits = [0u8; 20];
    for s in listing.iter() {
        let (totals, price) = s.usage_and_cost(&prices);
        let usage = totals.usage;
        let tokens = usage.billed_input() + usage.output_tokens;
        pad_after(&mut out, s.id(), 36);
        out.extend_from_slice(b"  ");
        let when = out.len();
        push_utc(&mut out, s.updated_at());
        let written = out.len() - when;
        out.resize(out.len() + 16usize.saturating_sub(written), b' ');
        out.extend_from_slice(b"  ");
        pad_before(&mut out, decimal(&mut digits, s.turns()), 5);
        out.extend_from_slice(b"  ");
        pad_before(&mut out, decimal(&mut digits, tokens), 10);
        out.extend_from_slice(b"  ");
        cost.clear();
        match price {
            Some(c) => write!(cost, "${c:.4}")?,
            None => cost.push('?'),
        }
        pad_before(&mut out, cost.as_bytes(), 9);
        out.extend_from_slice(b"  ");
        // Titles come from the prompt or the model: controls are shown, not obeyed.
        out.extend_from_slice(dsh_tools::printable(s.title().unwrap_or("(untitled)")).as_bytes());
        if s.open() {
            out.extend_from_slice(b" [open]");
        }
        if let Some(name) = crate::worktree::holding(&worktrees, s.cwd()) {
            out.extend_from_slice(b" [worktree ");
            out.extend_from_slice(name.as_bytes());
            out.push(b']');
        }
        if all {
            out.extend_from_slice(b"  (");
            out.extend_from_slice(dsh_tools::printable(s.cwd()).as_bytes());
            out.push(b')');
        }
        out.push(b'\n');
    }
    stdout.write_all(&out)?;
    stdout.flush()?;
    // The process ends right after this command: the kernel takes the memory back at once.
    std::mem::forget(listing);
    std::mem::forget(out);
    Ok(())
}

/// `text` then spaces up to `width` characters, as `{:<width}` pads it.
fn pad_after(out: &mut Vec<u8>, text: &str, width: usize) {
    let chars = if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    };
    out.extend_from_slice(text.as_bytes());
    out.resize(out.len() + width.saturating_sub(chars), b' ');
}

/// Spaces then `ascii` up to `width` characters, as `{:>width}` pads it.
fn pad_before(out: &mut Vec<u8>, ascii: &[u8], width: usize) {
    out.resize(out.len() + width.saturating_sub(ascii.len()), b' ');
    out.extend_from_slice(ascii);
}

/// `value` in decimal, in the end of `buf`.
fn decimal(buf: &mut [u8; 20], mut value: u64) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buf[at..];
        }
    }
}

/// [`write_utc`] into bytes, without the formatting machinery: `YYYY-MM-DD HH:MM`.
fn push_utc(out: &mut Vec<u8>, ms: u64) {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let (year, month, day) = dsh_llm::calendar::civil_from_days(days);
    let two = |out: &mut Vec<u8>, v: u64| {
        out.extend_from_slice(&[b'0' + (v / 10 % 10) as u8, b'0' + (v % 10) as u8])
    };
    if (0..10_000).contains(&year) {
        let y = year as u64;
        two(out, y / 100);
        two(out, y % 100);
    } else {
        out.extend_from_slice(format!("{year:04}").as_bytes());
    }
    out.push(b'-');
    two(out, u64::from(month));
    out.push(b'-');
    two(out, u64::from(day));
    out.push(b' ');
    two(out, hour);
    out.push(b':');
    two(out, minute);
}

fn export(
    store: &dyn SessionStore,
    key: &str,
    format: ExportFormat,
    output: Option<PathBuf>,
    stdout: &mut impl Write,
) -> anyhow::Result<()> {
    let log = load_any(store, key)?;
    // The raw file when there is one (byte for byte what was written), else re-encoded.
    let raw_path = Path::new(key);
    let raw = if raw_path.is_file() {
        Some(std::fs::read(raw_path).with_context(|| format!("reading {key}"))?)
    } else {
        None
    };
    let jsonl = || -> anyhow::Result<Vec<u8>> {
        Ok(match &raw {
            Some(bytes) => bytes.clone(),
            None => encode_jsonl(&log.header, &log.events, true)?,
        })
    };
    match format {
        ExportFormat::Jsonl | ExportFormat::Md | ExportFormat::Atif | ExportFormat::View => {
            let bytes = match format {
                ExportFormat::Jsonl => jsonl()?,
                ExportFormat::Atif => atif_bytes(store, key, &log)?,
                ExportFormat::View => view_lines(&log),
                _ => export_markdown(&log).into_bytes(),
            };
            match output {
                Some(path) => std::fs::write(&path, bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => stdout.write_all(&bytes)?,
            }
        }
        ExportFormat::Zip => {
            let mut subs = if raw.is_some() {
                Vec::new()
            } else {
                store.sub_agent_logs(&log.header.id)?
            };
            // The session's image files ride along (docs/sessions.md, "Images").
            let blobs = if raw.is_some() {
                dsh_session::blobs_beside(raw_path)
            } else {
                store.blobs(&log.header.id)?
            };
            subs.extend(dsh_session::zip_image_entries(
                &blobs,
                log.events.iter().map(|env| &env.event),
            ));
            // Into a pipe or file when stdout is one (`... > s.zip`); a terminal gets no
            // binary, the zip goes to `<id>.zip` then.
            let path = match output {
                Some(path) => path,
                None if !std::io::stdout().is_terminal() => {
                    let mut bytes = std::io::Cursor::new(Vec::new());
                    export_zip(&mut bytes, &jsonl()?, &subs)?;
                    stdout.write_all(bytes.get_ref())?;
                    stdout.flush()?;
                    return Ok(());
                }
                None => PathBuf::from(format!("{}.zip", log.header.id)),
            };
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            export_zip(file, &jsonl()?, &subs)?;
            eprintln!("dsh: wrote {}", path.display());
        }
    }
    Ok(())
}

/// The session as an ATIF trajectory (docs/harbor.md, "Trajectories"): its sub-agents are the
/// other logs below the session file's folder (given a path) or the store's sub-agent logs.
/// The view events of `log`, one JSON object per line, secrets and terminal controls as
/// `dsh run --json` prints them.
fn view_lines(log: &LoadedLog) -> Vec<u8> {
    let prices = configured_prices(Path::new(&log.header.cwd));
    let mut projector = dsh_protocol::ViewProjector::new(dsh_agent::Presenter::default(), prices);
    let secrets = dsh_tools::SecretRedactor::default();
    let mut out = String::new();
    for event in projector.project_all(&log.events) {
        let value = serde_json::to_value(&event).unwrap_or(serde_json::Value::Null);
        out.push_str(&crate::progress::json_line(value, &secrets));
        out.push('\n');
    }
    out.into_bytes()
}

fn atif_bytes(store: &dyn SessionStore, key: &str, log: &LoadedLog) -> anyhow::Result<Vec<u8>> {
    let path = Path::new(key);
    let subs = if path.exists() {
        let main = if path.is_file() {
            path.to_path_buf()
        } else {
            dsh_session::session_file_in(path).unwrap_or_else(|| path.join("session.jsonl"))
        };
        let dir = main.parent().unwrap_or(Path::new("."));
        let (logs, problems) = dsh_session::load_sub_agent_logs(dir, &main);
        for problem in problems {
            eprintln!("dsh: warning: not a sub-agent log: {problem}");
        }
        logs
    } else {
        let mut logs = Vec::new();
        for (name, bytes) in store.sub_agent_logs(&log.header.id)? {
            match dsh_session::load_log_bytes(&bytes, &name) {
                Ok(sub) => logs.push(sub),
                Err(err) => eprintln!("dsh: warning: sub-agent log {name} left out: {err}"),
            }
        }
        logs
    };
    let options = dsh_session::AtifOptions {
        agent_name: "dsh".into(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        prices: configured_prices(Path::new(&log.header.cwd)),
    };
    let trajectory = dsh_session::export_atif(log, &subs, &options);
    let mut bytes = serde_json::to_vec_pretty(&trajectory)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The prices of the configured model table (docs/configuration.md, "Models"): the built-in
/// rows with the `[models.*]` of the user's config (and of the project's, once trusted) over
/// them, as read in the session's directory (the current one when that is gone). A
/// configuration that does not load gives the built-in prices, with a warning.
fn configured_prices(session_cwd: &Path) -> PriceTable {
    let cwd = if session_cwd.is_dir() {
        session_cwd.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    };
    let lookup = |name: &str| std::env::var(name).ok();
    let loaded = crate::home::dsh_home()
        .map_err(|err| err.to_string())
        .and_then(|home| {
            dsh_config::Config::load(&home, &cwd, &lookup, &crate::flags::config_flags())
                .map_err(|errors| errors.to_string())
        });
    match loaded {
        Ok(config) => config.price_table(),
        Err(err) => {
            eprintln!("dsh: warning: built-in prices used: the configuration does not load: {err}");
            PriceTable::default_deepseek()
        }
    }
}

/// A transcript as `sessions show` prints it (docs/SECURITY.md, "Terminal output (dsh run,
/// sessions show)"): every secret known in the session's directory replaced (the log's tool
/// results already are; the model's own text may not be), and unless `raw`, control
/// characters and escape sequences shown as text (`^[]52;...`), never obeyed.
fn shown(log: &LoadedLog, text: &str, raw: bool) -> String {
    let secrets = known_secrets(Path::new(&log.header.cwd));
    let text = secrets.redact(text);
    if raw {
        text.into_owned()
    } else {
        dsh_tools::printable(&text).into_owned()
    }
}

/// The secrets dsh would load for a session in `session_cwd` (the current directory when it
/// is gone): its environment, `$DSH_HOME/.env`, the directory's `.env`, configured keys and
/// tokens. A configuration that does not load gives those of the environment and the `.env`
/// files.
fn known_secrets(session_cwd: &Path) -> dsh_tools::SecretRedactor {
    let cwd = if session_cwd.is_dir() {
        session_cwd.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    };
    let Ok(home) = crate::home::dsh_home() else {
        return dsh_tools::SecretRedactor::from_env();
    };
    let settings = dsh_runtime::credentials::Settings::load(&cwd, &home);
    let lookup = |name: &str| settings.get(name);
    match dsh_config::Config::load(&home, &cwd, &lookup, &crate::flags::config_flags()) {
        Ok(config) => dsh_runtime::credentials::secrets(&settings, &config),
        Err(_) => {
            let mut secrets = dsh_tools::SecretRedactor::from_env();
            for (name, value) in settings.env_file_secrets() {
                secrets.add(&name, &value);
            }
            secrets
        }
    }
}

/// Asks on the terminal; refuses when standard input is not a terminal.
fn confirm(id: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("refusing to delete session {id} without --yes: standard input is not a terminal");
    }
    eprint!("delete session {id} and its sub-agent logs? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// The transcript with a `- cost:` line after its `- usage:` line: every billed call of the log
/// (docs/sessions.md, "Cost") at the configured prices, six decimals as `--children` shows
/// them, or `unknown` when a model with usage has no price.
fn with_cost(log: &LoadedLog, markdown: String) -> String {
    let mut ledger = dsh_session::UsageLedger::new();
    for envelope in &log.events {
        ledger.push(&envelope.event);
    }
    let cost = ledger
        .cost(&configured_prices(Path::new(&log.header.cwd)))
        .map_or_else(
            || "unknown (a model has no price)".to_string(),
            |usd| format!("${usd:.6}"),
        );
    let Some(start) = markdown.find("\n- usage: ") else {
        return markdown;
    };
    let end = markdown[start + 1..]
        .find('\n')
        .map_or(markdown.len(), |at| start + 1 + at + 1);
    format!("{}- cost: {cost}\n{}", &markdown[..end], &markdown[end..])
}

/// The transcript of `dsh sessions show` with dates a person reads: the header's creation time
/// (ms since the epoch in the log) as a UTC date, and the time of the last event.
fn human_dates(log: &LoadedLog, markdown: String) -> String {
    let created = log.header.created_at;
    let mut dates = format!("- created: {} UTC\n", format_utc_seconds(created));
    if let Some(last) = log.events.iter().rev().find_map(|e| e.time) {
        dates.push_str(&format!("- updated: {} UTC\n", format_utc_seconds(last)));
    }
    let markdown = markdown.replacen(&format!("- created: {created}\n"), &dates, 1);
    turn_dates(log, markdown)
}

/// Each `## Turn N` heading of the transcript with the time its turn started, in the same form
/// as the header's dates (`## Turn 2 · 2026-12-01 18:31:19 UTC`). Headings are matched in log
/// order, so turn numbers that repeat (a resumed log) each get their own date.
fn turn_dates(log: &LoadedLog, markdown: String) -> String {
    let mut out = String::with_capacity(markdown.len() + 32 * log.events.len().min(64));
    let mut rest = markdown.as_str();
    for envelope in &log.events {
        let dsh_session::Event::TurnStart(turn) = &envelope.event else {
            continue;
        };
        let heading = format!("## Turn {}\n", turn.turn);
        let Some(at) = rest.find(&heading) else {
            continue;
        };
        let end = at + heading.len() - 1;
        out.push_str(&rest[..end]);
        if let Some(ms) = envelope.time {
            out.push_str(&format!(" · {} UTC", format_utc_seconds(ms)));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `YYYY-MM-DD HH:MM:SS` in UTC for ms since the epoch.
fn format_utc_seconds(ms: u64) -> String {
    format!("{}:{:02}", format_utc(ms), (ms / 1000) % 60)
}

/// `YYYY-MM-DD HH:MM` in UTC for ms since the epoch.
fn format_utc(ms: u64) -> String {
    let mut text = String::with_capacity(16);
    // Writing into a String cannot fail.
    let _ = write_utc(&mut text, ms);
    text
}

/// [`format_utc`] into `out`.
fn write_utc(out: &mut String, ms: u64) -> std::fmt::Result {
    use std::fmt::Write as _;
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let (year, month, day) = dsh_llm::calendar::civil_from_days(days);
    write!(out, "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
}

/// Prints one line per `request/cache` event of the log.
fn cache_table(log: &dsh_session::LoadedLog, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "{:>9}  {:>10}  {:>7}  {:>7}  {:>6}  {:>9}  BROKEN AT",
        "TURN.STEP", "BYTES", "REUSED", "PREFIX", "HIT", "COST USD"
    )?;
    let mut rows = 0;
    for envelope in &log.events {
        let dsh_session::Event::Opaque { event_type, data } = &envelope.event else {
            continue;
        };
        if event_type != "request/cache" {
            continue;
        }
        rows += 1;
        let bytes = data["requestBytes"].as_u64().unwrap_or(0);
        let reused = data["reusedBytes"].as_u64().unwrap_or(0);
        let share = if bytes == 0 {
            0.0
        } else {
            reused as f64 * 100.0 / bytes as f64
        };
        let hit = data["cacheHitRatio"]
            .as_f64()
            .map(|r| format!("{:.0}%", r * 100.0))
            .unwrap_or_else(|| "-".into());
        let broken = match data.get("brokenAt") {
            Some(at) => match at["index"].as_u64() {
                Some(index) => format!("{} {index}", at["part"].as_str().unwrap_or("?")),
                None => at["part"].as_str().unwrap_or("?").to_string(),
            },
            None if data["prefixExtension"] == true => String::new(),
            None => "(first request)".into(),
        };
        writeln!(
            out,
            "{:>9}  {:>10}  {:>6.1}%  {:>7}  {:>6}  {}",
            format!("{}.{}", data["turn"], data["step"]),
            bytes,
            share,
            if data["prefixExtension"] == true {
                "yes"
            } else {
                "no"
            },
            hit,
            broken
        )?;
    }
    if rows == 0 {
        writeln!(
            out,
            "(no cache reports: the log was written by another program or has no requests)"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a test failure

    use super::*;

    /// The hand layout of `dsh sessions list` lines writes what `format!` wrote before it.
    #[test]
    fn hand_layout_equals_format() {
        for ms in [
            0,
            1,
            59_999,
            86_399_999,
            951_782_400_000, // 2000-02-29
            1_780_000_000_000,
            253_402_300_799_999, // 9999-12-31 23:59
            253_402_300_800_000, // 10000-01-01
            u64::MAX,
        ] {
            let mut bytes = Vec::new();
            push_utc(&mut bytes, ms);
            assert_eq!(String::from_utf8(bytes).unwrap(), format_utc(ms), "{ms}");
        }
        let mut digits = [0u8; 20];
        for v in [0, 7, 10, 99_999, 123_456, u64::MAX] {
            assert_eq!(decimal(&mut digits, v), v.to_string().as_bytes());
            let mut out = Vec::new();
            pad_before(&mut out, decimal(&mut digits, v), 10);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{v:>10}"));
        }
        for text in [
            "",
            "abc",
            "0123456789-0123456789-0123456789-012345",
            "é🎉ü",
            "x\u{301}",
        ] {
            let mut out = Vec::new();
            pad_after(&mut out, text, 36);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{text:<36}"));
        }
    }
}
