//! ACP acceptance runner: for every recorded dsh ACP session under
//! `fixtures/dsh/acp-snapshots/` (in this repository), and those of `fixtures/dsh/more/acp/`
//! that have a settings file here, drives the real `dsh acp` binary over stdio
//! with the recording's `input.json` steps, the recorded model served by the fake provider
//! (`DEEPSEEK_BASE_URL`), a temp `DSH_HOME`, the fixture's `workspace/` copied to a temp cwd and
//! `danger-full-access` (as recorded), then compares stdout with `stdout.expected.jsonl`.
//!
//! Normalisation (also in `docs/acp.md`), applied before comparing:
//! 1. ids and paths: our session id becomes `{{sessionId}}`, the temp cwd `{{cwd}}`, the temp
//!    home `{{home}}` (the recordings carry the same tokens);
//! 2. additions: `session/update`s of kinds the original server never sent (it sent only
//!    `agent_message_chunk`: no thoughts, tool calls, plans or replays) are removed from ours
//!    and checked separately (below);
//! 3. streamed deltas: consecutive `agent_message_chunk`s of a session are merged into one
//!    (in both outputs: ours streams deltas, the original sent whole messages);
//! 4. `initialize`: only `protocolVersion` is compared (`agentInfo` names another program;
//!    our capabilities add `loadSession` and our `authMethods` describe the key variable, both
//!    checked separately); `session/new`: the `modes` we add (the permission presets as
//!    session modes; the original offered none) are removed and checked separately (current
//!    mode `danger-full-access`, as the runner sets, and the four presets), and so are the
//!    `configOptions` and `models` of model and effort selection; `sessionId` is compared; a
//!    prompt's `usage` (the turn's token counts, our addition) is removed;
//! 5. turn errors: the code and the `Internal error: turn failed: ` prefix are compared, the
//!    provider's failure text after it is not (dsh's replay threw a JS error, ours is an HTTP
//!    failure from the fake provider), and `data` is dropped.
//!
//! Our additions are checked against the recording: the `tool_call` ids in order equal the
//! recorded `tool/call` ids, every call ends with a `tool_call_update` whose status
//! (`completed` / `failed`) matches the recorded result, and a `plan` is sent iff the recording
//! has `todo/write`. One `available_commands_update` lists `compact`, `permission`, then the
//! skills (including those of `homeSkills`).
//!
//! Per-fixture settings (optional) in `tests/acp_fixtures/<fixture>.json`:
//! `{"skip": "reason"}`, `"stopReasons": {"<request id>": "<our stop reason>"}` with
//! `"why"` for intentional differences, `"homeSkills": "<dir relative to tests/acp_fixtures>"`
//! copied to `$DSH_HOME/skills`, `"createFiles": {"<path>": "<content>"}` for workspace files
//! the recording's harness made but a fixture folder cannot hold.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::fixture_runner::{self, Outcome};
use dsh_test_support::{copy_dir, snapshot_fixture_dirs, FakeProvider, RecordedSession};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    skip: Option<String>,
    #[serde(default)]
    stop_reasons: BTreeMap<String, String>,
    why: Option<String>,
    home_skills: Option<String>,
    /// Files the recording's harness created in the workspace but the fixture cannot hold
    /// (path relative to the cwd, content).
    #[serde(default)]
    create_files: BTreeMap<String, String>,
    /// Files of the fixture's workspace to copy into `$DSH_HOME` (workspace path -> home path),
    /// e.g. a `hooks.json` the recording kept at the workspace root.
    #[serde(default)]
    home_files: BTreeMap<String, String>,
    /// Scripts of the fixture's workspace that the user's hooks run (`sh posttool-once.sh`):
    /// dsh refuses a user hook whose script the model could write (docs/hooks.md, "Scripts
    /// the model can write"), so each is copied to a folder outside the workspace and the temp
    /// directories and the home files' commands name it there.
    #[serde(default)]
    hook_scripts: Vec<String>,
    /// Expected final status of tool calls whose outcome differs from the recording by design
    /// (call id -> `completed` | `failed`); say why in `why`.
    #[serde(default)]
    tool_statuses: BTreeMap<String, String>,
    /// `dsh acp --model <model>`: the recording's model when it is not the default one (e.g.
    /// dsh's vision model for the image recordings).
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Input {
    steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Step {
    Initialize,
    NewSession,
    Prompt {
        text: String,
    },
    /// A prompt of ACP content blocks as recorded (images among them).
    PromptContent {
        content: Value,
    },
    PromptExpectError {
        text: String,
    },
    PromptAndCancel {
        text: String,
    },
    WaitForTurnEnd,
    WaitForTitleAfterTurnEnd,
}

const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// A client of the `dsh acp` process: writes requests, collects every stdout line.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<Value>,
    next_id: u64,
    session_id: Option<String>,
}

impl Client {
    fn send(&mut self, message: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{message}").map_err(|e| format!("write to dsh acp: {e}"))?;
        stdin.flush().map_err(|e| e.to_string())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<u64, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    /// Reads lines until `done` holds for one (which is kept too). Permission requests are
    /// answered `allow_once` (the recordings ran without approvals, so none is expected).
    fn read_until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("no {what} within {STEP_TIMEOUT:?}"))?;
            let value: Value = serde_json::from_str(&line)
                .map_err(|e| format!("stdout line is not JSON ({e}): {line}"))?;
            if value["method"] == "session/request_permission" {
                let id = value["id"].clone();
                self.send(&json!({"jsonrpc": "2.0", "id": id,
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))?;
            }
            self.seen.push(value.clone());
            if done(&value) {
                return Ok(value);
            }
        }
    }

    fn response(&mut self, id: u64) -> Result<Value, String> {
        self.read_until(&format!("response {id}"), |v| {
            v["id"] == json!(id) && v.get("method").is_none()
        })
    }

    fn prompt_params(&self, text: &str) -> Value {
        json!({"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]})
    }

    /// Closes stdin and collects what is still printed until the process exits.
    fn finish(mut self) -> Result<Vec<Value>, String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen
                .push(serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?);
        }
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("dsh acp exited with {status}"));
        }
        Ok(self.seen)
    }
}

fn start_dsh(
    cwd: &Path,
    home: &Path,
    base_url: &str,
    model: Option<&str>,
) -> Result<Client, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("acp")
        .args(model.map(|m| ["--model", m]).into_iter().flatten())
        .current_dir(cwd)
        .env("DEEPSEEK_BASE_URL", base_url)
        .env("DEEPSEEK_API_KEY", "sk-acp-fixture")
        .env("DSH_HOME", home)
        .env("HOME", home)
        .env("DSH_PERMISSION_MODE", "danger-full-access")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start dsh acp: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Client {
        stdin: child.stdin.take(),
        child,
        lines,
        seen: Vec::new(),
        next_id: 0,
        session_id: None,
    })
}

fn run_steps(client: &mut Client, steps: &[Step], cwd: &Path) -> Result<(), String> {
    let mut last_prompt = None;
    for step in steps {
        match step {
            Step::Initialize => {
                let id = client.request(
                    "initialize",
                    json!({"protocolVersion": 1, "clientCapabilities": {}}),
                )?;
                let answer = client.response(id)?;
                if answer["result"]["agentCapabilities"]["loadSession"] != json!(true) {
                    return Err(format!("initialize does not offer loadSession: {answer}"));
                }
                if answer["result"]["authMethods"][0]["_meta"]["dsh"]["envVar"]
                    != "DEEPSEEK_API_KEY"
                {
                    return Err(format!("initialize does not describe the key: {answer}"));
                }
            }
            Step::NewSession => {
                let id = client.request(
                    "session/new",
                    json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
                )?;
                let answer = client.response(id)?;
                check_modes(&answer)?;
                let session = answer["result"]["sessionId"].as_str();
                client.session_id = Some(
                    session
                        .ok_or(format!("no session id: {answer}"))?
                        .to_string(),
                );
            }
            Step::Prompt { text } | Step::PromptExpectError { text } => {
                let params = client.prompt_params(text);
                let id = client.request("session/prompt", params)?;
                client.response(id)?;
            }
            Step::PromptContent { content } => {
                let params = json!({"sessionId": client.session_id, "prompt": content});
                let id = client.request("session/prompt", params)?;
                client.response(id)?;
            }
            Step::PromptAndCancel { text } => {
                let params = client.prompt_params(text);
                last_prompt = Some(client.request("session/prompt", params)?);
                // Cancel once the reply has started streaming, as a user would.
                client.read_until("streamed text", |v| {
                    v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                })?;
                let session = client.session_id.clone();
                client.send(&json!({"jsonrpc": "2.0", "method": "session/cancel",
                    "params": {"sessionId": session}}))?;
            }
            Step::WaitForTurnEnd => {
                if let Some(id) = last_prompt.take() {
                    client.response(id)?;
                }
            }
            Step::WaitForTitleAfterTurnEnd => {}
        }
    }
    Ok(())
}

/// Our `session/new` addition: the permission presets and plan mode (docs/acp.md, "Plan mode")
/// as ACP session modes.
fn check_modes(answer: &Value) -> Result<(), String> {
    let modes = &answer["result"]["modes"];
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    if modes["currentModeId"] != "danger-full-access"
        || ids
            != [
                "read-only",
                "ask",
                "workspace-write",
                "danger-full-access",
                "plan",
            ]
    {
        return Err(format!("session/new offers unexpected modes: {answer}"));
    }
    Ok(())
}

fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if !from.is_empty() && s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}

/// Steps 2 to 5 of the normalisation (see the module docs), for either output.
fn normalise(lines: &[Value], stop_reasons: &BTreeMap<String, String>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for line in lines {
        let mut line = line.clone();
        if line["method"] == "session/update" {
            if line["params"]["update"]["sessionUpdate"] != "agent_message_chunk" {
                continue;
            }
            if let Some(previous) = out.last_mut() {
                if previous["method"] == "session/update"
                    && previous["params"]["sessionId"] == line["params"]["sessionId"]
                {
                    let text = line["params"]["update"]["content"]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let merged = format!(
                        "{}{text}",
                        previous["params"]["update"]["content"]["text"]
                            .as_str()
                            .unwrap_or_default()
                    );
                    previous["params"]["update"]["content"]["text"] = json!(merged);
                    continue;
                }
            }
        } else if line["method"] == "session/request_permission" {
            continue;
        } else if line["result"]["sessionId"].is_string() {
            if let Some(result) = line["result"].as_object_mut() {
                // Our additions: modes, and model/effort config options (docs/acp.md).
                for added in ["modes", "configOptions", "models"] {
                    result.remove(added);
                }
            }
        } else if line["result"]["protocolVersion"].is_number() {
            // `authMethods` is our addition (the original advertised none), checked in
            // `run_steps`.
            let result = &line["result"];
            line["result"] = json!({"protocolVersion": result["protocolVersion"]});
        } else if let Some(message) = line["error"]["message"].as_str() {
            const PREFIX: &str = "Internal error: turn failed: ";
            if let Some(rest) = message.strip_prefix(PREFIX) {
                if !rest.is_empty() {
                    line["error"]["message"] = json!(format!("{PREFIX}{{{{failure}}}}"));
                }
            }
            if let Some(error) = line["error"].as_object_mut() {
                error.remove("data");
            }
        } else if let Some(reason) = line["result"]["stopReason"].as_str().map(str::to_string) {
            let reason = reason.as_str();
            // The turn's token counts (`usage`) are our addition.
            if let Some(result) = line["result"].as_object_mut() {
                result.remove("usage");
            }
            let id = line["id"].to_string();
            if stop_reasons.get(&id).map(String::as_str) == Some(reason) {
                line["result"]["stopReason"] = json!("{{recorded}}");
            }
        }
        out.push(line);
    }
    out
}

/// Checks our additions (tool calls, statuses, plans) against the recording.
fn check_additions(
    ours: &[Value],
    recording: &[Value],
    tool_statuses: &BTreeMap<String, String>,
) -> Result<(), String> {
    let recorded_calls: Vec<&str> = recording
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .filter_map(|e| e["data"]["callId"].as_str())
        .collect();
    let recorded_failed: Vec<bool> = recording
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            // dsh writes a structured `error` for some failures and only the block's `isError`
            // for others (policy denials, hook blocks).
            e["data"].get("error").is_some_and(|x| !x.is_null())
                || e["data"]["message"]["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["isError"] == true))
        })
        .collect();
    let updates: Vec<&Value> = ours
        .iter()
        .filter(|l| l["method"] == "session/update")
        .map(|l| &l["params"]["update"])
        .collect();
    let our_calls: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        // A background child's own card is not a call of the parent (docs/acp.md, "Subagents").
        .filter(|u| !u["_meta"]["dsh"]["child"].is_object())
        .filter_map(|u| u["toolCallId"].as_str())
        .collect();
    if our_calls != recorded_calls {
        return Err(format!(
            "tool_call ids {our_calls:?}, recorded {recorded_calls:?}"
        ));
    }
    for (k, call) in our_calls.iter().enumerate() {
        let last = updates
            .iter()
            .rev()
            .find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == *call)
            .ok_or(format!("tool call {call} got no tool_call_update"))?;
        let expected = match tool_statuses.get(*call) {
            Some(status) => status.as_str(),
            None if recorded_failed.get(k) == Some(&true) => "failed",
            None => "completed",
        };
        if last["status"] != expected {
            return Err(format!(
                "tool call {call} ended {}, recorded {expected}",
                last["status"]
            ));
        }
    }
    let recorded_plans = recording.iter().any(|e| e["type"] == "todo/write");
    let our_plans = updates.iter().any(|u| u["sessionUpdate"] == "plan");
    if recorded_plans != our_plans {
        return Err(format!(
            "plan sent: {our_plans}, recording has todo/write: {recorded_plans}"
        ));
    }
    Ok(())
}

/// Our `available_commands_update` (sent once after `session/new`): dsh's own commands, then
/// the user-invocable skills, among them those of `homeSkills` (all user-invocable).
fn check_commands(ours: &[Value], settings: &Settings) -> Result<(), String> {
    let lists: Vec<Vec<&str>> = ours
        .iter()
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .map(|l| {
            l["params"]["update"]["availableCommands"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect()
        })
        .collect();
    let mut skills: Vec<String> = Vec::new();
    if let Some(dir) = &settings.home_skills {
        skills = std::fs::read_dir(settings_dir().join(dir))
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
    }
    let ok = lists.len() == 1
        && lists[0].starts_with(&["compact", "permission"])
        && skills.iter().all(|s| lists[0].contains(&s.as_str()));
    if !ok {
        return Err(format!(
            "available_commands_update: {lists:?}, expected one listing compact, permission, then the skills (with {skills:?})"
        ));
    }
    Ok(())
}

fn run_fixture(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    settings: &Settings,
) -> Result<(), String> {
    let input: Input = serde_json::from_str(
        &std::fs::read_to_string(dir.join("input.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("input.json: {e}"))?;
    let session = RecordedSession::load(dir).map_err(|e| format!("{e:?}"))?;
    let provider = runtime
        .block_on(FakeProvider::start(session.replies()))
        .map_err(|e| e.to_string())?;
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cwd_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cwd = std::fs::canonicalize(cwd_dir.path()).map_err(|e| e.to_string())?;
    let home_path = std::fs::canonicalize(home.path()).map_err(|e| e.to_string())?;
    if dir.join("workspace").is_dir() {
        copy_dir(&dir.join("workspace"), &cwd).map_err(|e| e.to_string())?;
    }
    for (path, content) in &settings.create_files {
        let target = cwd.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&target, content).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    // Outside the temp dirs too, where a target dir under /tmp would put it.
    let scripts_dir = dsh_test_support::scratch_parent(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .and_then(tempfile::tempdir_in)
        .map_err(|e| e.to_string())?;
    for script in &settings.hook_scripts {
        let source = dir.join("workspace").join(script);
        std::fs::copy(&source, scripts_dir.path().join(script))
            .map_err(|e| format!("{}: {e}", source.display()))?;
    }
    for (from, to) in &settings.home_files {
        let source = dir.join("workspace").join(from);
        let mut text =
            std::fs::read_to_string(&source).map_err(|e| format!("{}: {e}", source.display()))?;
        for script in &settings.hook_scripts {
            let moved = scripts_dir.path().join(script);
            text = text.replace(&format!("sh {script}"), &format!("sh {}", moved.display()));
        }
        std::fs::write(home_path.join(to), text)
            .map_err(|e| format!("{}: {e}", source.display()))?;
    }
    if let Some(skills) = &settings.home_skills {
        let from = settings_dir().join(skills);
        copy_dir(&from, &home_path.join("skills"))
            .map_err(|e| format!("{}: {e}", from.display()))?;
    }

    let mut client = start_dsh(
        &cwd,
        &home_path,
        &provider.base_url(),
        settings.model.as_deref(),
    )?;
    let steps = run_steps(&mut client, &input.steps, &cwd);
    let session_id = client.session_id.clone().unwrap_or_default();
    let mut ours = client.finish()?;
    steps?;
    for line in &mut ours {
        replace_strings(line, &session_id, "{{sessionId}}");
        replace_strings(line, &cwd.display().to_string(), "{{cwd}}");
        replace_strings(line, &home_path.display().to_string(), "{{home}}");
    }

    let expected: Vec<Value> = std::fs::read_to_string(dir.join("stdout.expected.jsonl"))
        .map_err(|e| e.to_string())?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("stdout.expected.jsonl: {e}")))
        .collect::<Result<_, _>>()?;
    let recording: Vec<Value> = std::fs::read_to_string(dir.join("session.jsonl"))
        .map_err(|e| e.to_string())?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    check_additions(&ours, &recording, &settings.tool_statuses)?;
    check_commands(&ours, settings)?;

    let ours_n = normalise(&ours, &settings.stop_reasons);
    let mut expected_n = normalise(&expected, &BTreeMap::new());
    for line in &mut expected_n {
        if settings.stop_reasons.contains_key(&line["id"].to_string())
            && line["result"]["stopReason"].is_string()
        {
            line["result"]["stopReason"] = json!("{{recorded}}");
        }
    }
    if ours_n != expected_n {
        let show = |v: &[Value]| {
            v.iter()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        return Err(format!(
            "stdout differs after normalisation\nours:\n{}\nexpected:\n{}",
            show(&ours_n),
            show(&expected_n)
        ));
    }
    Ok(())
}

fn settings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/acp_fixtures")
}

/// The recordings of `fixtures/dsh/more/acp/` that have a settings file here (more of dsh's
/// recordings, vendored for later features; each runs once its settings exist).
fn more_fixture_dirs() -> Vec<PathBuf> {
    let root = dsh_test_support::snapshot_fixtures_dir().join("../more/acp");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("session.jsonl").is_file())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                settings_dir()
                    .join(format!("{}.json", n.to_string_lossy()))
                    .is_file()
            })
        })
        .collect();
    dirs.sort();
    dirs
}

/// Names the fixtures to run (a part of the folder name), e.g.
/// `DSH_ACP_FIXTURE=hook cargo test -p dsh-cli --test it acp_fixtures`.
const FILTER_VARIABLE: &str = "DSH_ACP_FIXTURE";

#[test]
fn every_recorded_acp_session_replays_with_the_same_stdout() {
    let mut dirs =
        snapshot_fixture_dirs().unwrap_or_else(|message| panic!("acp fixtures: {message}"));
    dirs.extend(more_fixture_dirs());
    let filter = std::env::var(FILTER_VARIABLE).ok();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = fixture_runner::run_all("acp fixture", dirs, filter.as_deref(), |name, dir| {
        let settings: Settings = fixture_runner::load_settings(&settings_dir(), name)?;
        if let Some(reason) = settings.skip {
            return Ok(Outcome::Skipped(reason));
        }
        run_fixture(&runtime, dir, &settings)?;
        Ok(match settings.why {
            Some(why) => Outcome::PassedWithNote(why),
            None => Outcome::Passed,
        })
    });
    if let Err(message) = report.finish() {
        panic!("{message}");
    }
}
