//! `/status` (docs/tui.md, "Commands"): the session's facts in one notice.

use std::collections::BTreeMap;
use std::path::Path;

use dsh_session::{Envelope, Event, HeaderTools};

use crate::app::App;
use crate::view::short_tokens;

/// What `/status` reads outside the [`App`]: the agent's answers and the log.
pub struct StatusFacts<'a> {
    /// The session id.
    pub session_id: String,
    /// Where the log is stored.
    pub location: String,
    /// The preset in force.
    pub preset: String,
    /// The working directory.
    pub cwd: &'a Path,
    /// The session's events (for the MCP servers of the last request).
    pub events: &'a [Envelope],
}

/// MCP servers and their tool counts, from the tools of the last request header
/// (`mcp__<server>__<tool>`); `None` before the first request.
pub fn mcp_servers(events: &[Envelope]) -> Option<BTreeMap<String, usize>> {
    let header = events.iter().rev().find_map(|e| match &e.event {
        Event::RequestHeader(header) => Some(header),
        _ => None,
    })?;
    let names: Vec<String> = match &header.header.tools {
        HeaderTools::Schemas(schemas) => schemas.iter().map(|s| s.name.clone()).collect(),
        HeaderTools::Names(names) => names.clone(),
        HeaderTools::Placeholder(_) | HeaderTools::Absent => Vec::new(),
    };
    let mut servers = BTreeMap::new();
    for name in names {
        if let Some(rest) = name.strip_prefix("mcp__") {
            if let Some((server, _)) = rest.split_once("__") {
                *servers.entry(server.to_string()).or_insert(0) += 1;
            }
        }
    }
    Some(servers)
}

/// The effort the requests of a call asking for `asked` use (docs/tui.md, "Status line"): the
/// one asked, else the model's default, which the adapter fills in (`dsh_llm::CallConfig`);
/// `default` for a model that takes efforts but names no default, `None` for one that takes
/// none. `model` is what the provider says about the call's model, when it is known.
pub fn effective_effort(
    asked: Option<dsh_llm::ReasoningEffort>,
    model: Option<&dsh_llm::ModelInfo>,
) -> Option<String> {
    if let Some(effort) = asked.or(model.and_then(|m| m.default_effort)) {
        return Some(effort.as_str().to_string());
    }
    match model {
        Some(model) if model.efforts.is_empty() => None,
        _ => Some("default".to_string()),
    }
}

/// The model and effort the session uses now: the last request's, else the configured ones.
pub fn model_and_effort(app: &App) -> (String, String) {
    let stats = &app.transcript.stats;
    let model = stats
        .model
        .clone()
        .unwrap_or_else(|| app.status.model.clone());
    let effort = stats
        .effort
        .clone()
        .or_else(|| app.status.effort.clone())
        .unwrap_or_else(|| "default".to_string());
    (model, effort)
}

/// The session's cost so far, in dollars, or why it is unknown.
pub fn cost_text(app: &App) -> String {
    app.transcript
        .stats
        .cost(&app.status.prices)
        .map_or("unknown (a model has no price)".to_string(), |c| {
            format!("${c:.4}")
        })
}

/// The `/status` text.
pub fn status_text(app: &App, facts: &StatusFacts<'_>) -> String {
    let stats = &app.transcript.stats;
    let (model, effort) = model_and_effort(app);
    let sandbox = stats
        .sandbox
        .clone()
        .unwrap_or_else(|| "not reported yet".to_string());
    let total = stats.total();
    let cost = cost_text(app);
    let window = app.status.context_window.max(1);
    let percent = stats.context_tokens as f64 * 100.0 / window as f64;
    let last_hit = stats
        .last_cache_hit
        .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    let mcp = match mcp_servers(facts.events) {
        None => "known after the first request".to_string(),
        Some(servers) if servers.is_empty() => "none".to_string(),
        Some(servers) => servers
            .iter()
            .map(|(name, tools)| format!("{name} ({tools} tools)"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    [
        format!("session   {}", facts.session_id),
        format!("log       {}", facts.location),
        format!("model     {model} · effort {effort}"),
        format!("preset    {} · sandbox {sandbox}", facts.preset),
        format!("cwd       {}", facts.cwd.display()),
        format!("tokens    {} · cost {cost}", usage_text(&total)),
        format!(
            "context   {}/{} ({percent:.0}%)",
            short_tokens(stats.context_tokens),
            short_tokens(window)
        ),
        format!(
            "cache     {:.0}% of input read from cache this session · last request {last_hit}",
            total.usage.cache_hit_ratio() * 100.0
        ),
        format!("mcp       {mcp}"),
    ]
    .join("\n")
}

/// The usage of every billed request, in words: `N requests · input A uncached + B cache read
/// + C cache write · output D (reasoning E)` (`/cost` and `/status`).
pub(crate) fn usage_text(total: &dsh_llm::UsageTotals) -> String {
    let u = &total.usage;
    format!(
        "{} requests · input {} uncached + {} cache read + {} cache write · output {} (reasoning {})",
        total.requests,
        short_tokens(u.input_tokens),
        short_tokens(u.cache_read_tokens),
        short_tokens(u.cache_write_tokens),
        short_tokens(u.output_tokens),
        short_tokens(u.reasoning_tokens),
    )
}

/// Runs `tui.status_command` (docs/tui.md, "Status line") with `state` (the session's state as
/// JSON) on its standard input, in a process group that dies with dsh and without key variables
/// in its environment; its first output line, control characters left out and cut to 200
/// characters, or `None` when it failed, printed nothing or gave no line within 2 s (its group
/// is then killed). The input is written and the line read on threads of their own, so a
/// command that reads nothing, or whose descendant keeps the output open, cannot hold this past
/// the 2 s. Blocks: run it off the UI thread.
pub fn run_status_command(command: &[String], state: &serde_json::Value) -> Option<String> {
    use std::io::{BufRead, Read, Write};
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
    let mut process = crate::notify::user_program(command)?;
    process
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = dsh_tools::spawn_std_child(process).ok()?;
    let started = std::time::Instant::now();
    if let Some(mut stdin) = child.stdin.take() {
        let input = state.to_string();
        // A program that does not read its input is no error.
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
    }
    let (send, line) = std::sync::mpsc::channel();
    let stdout = child.stdout.take()?;
    std::thread::spawn(move || {
        let mut first = String::new();
        let read = std::io::BufReader::new(stdout.take(4096)).read_line(&mut first);
        let _ = send.send(read.map(|_| first));
    });
    let line = line
        .recv_timeout(LIMIT.saturating_sub(started.elapsed()))
        .ok()
        .and_then(Result::ok);
    // The line is in (or the time is up): the command has nothing more to say.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if line.is_some() && started.elapsed() < LIMIT => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => break None,
        }
    };
    crate::notify::stop_group(&mut child);
    let line: String = line?
        .chars()
        .filter(|c| !dsh_tools::is_unsafe_for_terminal(*c) && *c != '\t' && *c != '\n')
        .take(200)
        .collect();
    let ok = status.is_none_or(|status| status.success());
    (ok && !line.trim().is_empty()).then(|| line.trim().to_string())
}

/// The session's state given to `tui.status_command`.
pub fn status_state(app: &App, cwd: &std::path::Path) -> serde_json::Value {
    let stats = &app.transcript.stats;
    let (model, effort) = model_and_effort(app);
    serde_json::json!({
        "sessionId": app.session_id,
        "cwd": cwd,
        "model": model,
        "effort": effort,
        "permission": app.status.permission,
        "contextTokens": stats.context_tokens,
        "contextWindow": app.status.context_window,
        "costUsd": stats.cost(&app.status.prices),
        "running": app.transcript.running,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::run_status_command;
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// The 2 s cover the whole run: a descendant that left the group and keeps the output
    /// open, a command that never ends, one that fails (second adversarial review: a setsid
    /// child held the read forever and froze the status line).
    #[test]
    fn a_status_command_answers_within_its_time_whatever_it_leaves_behind() {
        let state = serde_json::json!({"model": "m"});
        let started = Instant::now();
        let line = run_status_command(&sh("setsid sleep 30 & echo 'S \u{1b}[2Jok'"), &state);
        assert_eq!(line.as_deref(), Some("S [2Jok"));
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{:?}",
            started.elapsed()
        );

        let started = Instant::now();
        assert_eq!(run_status_command(&sh("sleep 10"), &state), None);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );

        assert_eq!(run_status_command(&sh("echo no; exit 3"), &state), None);
        let read = run_status_command(&sh("head -c 13"), &state);
        assert_eq!(read.as_deref(), Some("{\"model\":\"m\"}"));
    }
}
