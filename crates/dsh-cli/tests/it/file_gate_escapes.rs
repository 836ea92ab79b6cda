//! The file gate end to end (docs/SECURITY.md, "The file gate"): the real `dsh run` binary
//! against the scripted fake provider, a model that calls `read`, `grep`, `write` and `bash`
//! to get at secrets and to plant code that runs later. Each test names the finding of issue 38
//! it proves closed.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{output as run, scratch_dirs, session_files};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};
use serde_json::{json, Value};

const API_KEY: &str = "sk-live-gate-0123456789";
/// Another provider's key kept in `$DSH_HOME/.env` (dsh's process does not hold it).
const OTHER_KEY: &str = "sk-ant-other-9f8e7d6c5b4a";
/// The web UI's launch code, in a page under `$DSH_HOME/web`.
const LAUNCH: &str = "launchcode-b1c2d3e4f5";

/// A user home, a dsh home and a workspace, outside every temp directory.
struct Env {
    _root: tempfile::TempDir,
    user_home: PathBuf,
    dsh_home: PathBuf,
    cwd: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [user_home, cwd]) = scratch_dirs(["home", "ws"]);
        let dsh_home = user_home.join(".dsh");
        Env::with(root, user_home, dsh_home, cwd)
    }

    fn with(root: tempfile::TempDir, user_home: PathBuf, dsh_home: PathBuf, cwd: PathBuf) -> Env {
        for dir in [&user_home, &dsh_home, &cwd] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::create_dir_all(dsh_home.join("web")).unwrap();
        std::fs::write(
            dsh_home.join(".env"),
            format!("ANTHROPIC_API_KEY={OTHER_KEY}\n"),
        )
        .unwrap();
        std::fs::write(
            dsh_home.join("web/open-4711.html"),
            format!("<a href=\"/?code={LAUNCH}\">open</a>\n"),
        )
        .unwrap();
        Env {
            _root: root,
            user_home,
            dsh_home,
            cwd,
        }
    }

    fn command(&self, base_url: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.user_home)
            .env("DSH_HOME", &self.dsh_home)
            .env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", API_KEY)
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null());
        cmd
    }

    fn session_text(&self) -> String {
        session_files(&self.dsh_home)
            .iter()
            .map(|file| std::fs::read_to_string(file).unwrap())
            .collect()
    }
}

/// One reply calling every `(tool, args)` at once, then a final text.
async fn provider_calling(calls: &[(&str, Value)]) -> FakeProvider {
    let mut first = SseReply::new();
    for (i, (tool, args)) in calls.iter().enumerate() {
        first = first.tool_call(i as u32, &format!("call_{i}"), tool, &args.to_string());
    }
    FakeProvider::start([
        ScriptedReply::from(first.finish("tool_calls", Some(WireUsage::default()))),
        ScriptedReply::from(
            SseReply::new()
                .text("done")
                .finish("stop", Some(WireUsage::default())),
        ),
    ])
    .await
    .unwrap()
}

/// Runs `dsh run --json` for the calls; returns (every request body, the session log, stdout).
async fn run_calls(env: &Env, calls: &[(&str, Value)], extra: &[&str]) -> (String, String, String) {
    let provider = provider_calling(calls).await;
    let mut cmd = env.command(&provider.base_url());
    cmd.args(["run", "--json"]).args(extra).arg("go");
    let out = run(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "stderr: {stderr}");
    let sent: String = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    (sent, env.session_text(), stdout + &stderr)
}

/// The results of the session's tool calls, in order.
fn tool_results(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "tool/result")
        .map(|event| event["data"].to_string())
        .collect()
}

fn assert_absent(needle: &str, what: &str, haystacks: &[(&str, &str)]) {
    for (name, text) in haystacks {
        assert!(!text.contains(needle), "{what} reached {name}");
    }
}

/// Finding 3: an instruction file that is a link to dsh's `.env` or to `/etc/shadow` is not
/// loaded, so neither reaches the request, the log or `--json` stdout.
#[tokio::test]
async fn symlinked_instruction_files_are_not_loaded() {
    let env = Env::new();
    std::fs::create_dir_all(env.cwd.join("sub")).unwrap();
    std::fs::write(env.cwd.join("sub/x.txt"), "hello\n").unwrap();
    symlink(env.dsh_home.join(".env"), env.cwd.join("sub/CLAUDE.md")).unwrap();
    symlink("/etc/shadow", env.cwd.join("AGENTS.md")).unwrap();
    // A legitimate instruction file beside them still loads.
    std::fs::write(env.cwd.join("sub/AGENTS.md"), "Use tabs in sub.\n").unwrap();
    let shadow_line = std::fs::read_to_string("/etc/shadow")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_string));
    let calls = [("read", json!({"file_path": "sub/x.txt"}))];
    let (sent, log, stdout) = run_calls(&env, &calls, &[]).await;
    let places = [
        ("the requests", sent.as_str()),
        ("the log", &log),
        ("stdout", &stdout),
    ];
    assert_absent(OTHER_KEY, "the key in $DSH_HOME/.env", &places);
    if let Some(line) = shadow_line.filter(|l| !l.is_empty()) {
        assert_absent(&line, "a line of /etc/shadow", &places);
    }
    assert!(
        sent.contains("Use tabs in sub."),
        "the real instruction file loads"
    );
}

/// Issue 38, adversarial review: a project skill whose `SKILL.md` is a link to a file outside
/// the workspace was loaded into the prompt. The project's skills pass the file gate: that one
/// is skipped with a warning, and neither its catalog line nor its body reaches the request,
/// the log or stdout, also when the model asks for it by name; a real project skill still loads.
#[tokio::test]
async fn a_project_skill_linked_out_of_the_workspace_never_reaches_the_model() {
    let env = Env::new();
    // The workspace is its own project (the scratch folders lie inside dsh's repository).
    std::fs::create_dir_all(env.cwd.join(".git")).unwrap();
    let (_other, [secret_dir]) = scratch_dirs(["secret"]);
    std::fs::write(
        secret_dir.join("SKILL.md"),
        "---\nname: leak\ndescription: LEAKED-SKILL-DESCRIPTION\n---\nLEAKED-SKILL-BODY\n",
    )
    .unwrap();
    std::fs::create_dir_all(env.cwd.join(".dsh/skills/leak")).unwrap();
    symlink(
        secret_dir.join("SKILL.md"),
        env.cwd.join(".dsh/skills/leak/SKILL.md"),
    )
    .unwrap();
    std::fs::create_dir_all(env.cwd.join(".dsh/skills/real")).unwrap();
    std::fs::write(
        env.cwd.join(".dsh/skills/real/SKILL.md"),
        "---\nname: real\ndescription: a-real-project-skill\n---\nReal steps.\n",
    )
    .unwrap();
    let calls = [("skill", json!({"name": "leak"}))];
    let (sent, log, stdout) = run_calls(&env, &calls, &[]).await;
    let places = [
        ("the requests", sent.as_str()),
        ("the log", &log),
        ("stdout", &stdout),
    ];
    assert_absent(
        "LEAKED-SKILL-DESCRIPTION",
        "the linked skill's catalog line",
        &places,
    );
    assert_absent("LEAKED-SKILL-BODY", "the linked skill's body", &places);
    assert!(
        sent.contains("a-real-project-skill"),
        "a real project skill loads"
    );
    assert!(
        stdout.contains("warning: skipped skill") && stdout.contains("symlink-out"),
        "{stdout}"
    );
}

/// Finding 4: `read` and `grep` of `$DSH_HOME/.env` and of the web UI's launch page are refused
/// (no content, no hit/miss oracle), naming the rule.
#[tokio::test]
async fn dsh_home_is_out_of_reach_of_read_and_grep() {
    let env = Env::new();
    let dot_env = env.dsh_home.join(".env").display().to_string();
    let page = env
        .dsh_home
        .join("web/open-4711.html")
        .display()
        .to_string();
    symlink(env.dsh_home.join(".env"), env.cwd.join("notes.md")).unwrap();
    std::fs::hard_link(env.dsh_home.join(".env"), env.cwd.join("copy.txt")).unwrap();
    let calls = [
        ("read", json!({"file_path": dot_env})),
        (
            "grep",
            json!({"pattern": "ANTHROPIC_API_KEY=sk-ant", "path": dot_env}),
        ),
        ("read", json!({"file_path": page})),
        (
            "grep",
            json!({"pattern": "code=launch", "path": env.dsh_home.display().to_string()}),
        ),
        ("read", json!({"file_path": "notes.md"})),
        ("read", json!({"file_path": "copy.txt"})),
        ("grep", json!({"pattern": "ANTHROPIC_API_KEY=sk-ant"})),
    ];
    let (sent, log, stdout) = run_calls(&env, &calls, &[]).await;
    let results = tool_results(&log);
    assert_eq!(results.len(), calls.len(), "{results:#?}");
    for (i, result) in results[..6].iter().enumerate() {
        assert!(
            result.contains("PERMISSION_DENIED") && result.contains("file gate"),
            "call {i} was not refused by the gate: {result}"
        );
    }
    assert!(results[6].contains("No matches"), "{}", results[6]);
    let places = [
        ("the requests", sent.as_str()),
        ("the log", &log),
        ("stdout", &stdout),
    ];
    assert_absent(OTHER_KEY, "the key in $DSH_HOME/.env", &places);
    assert_absent(LAUNCH, "the web launch code", &places);
}

/// `read` of each existing path (write needs it), then `write` of each path.
fn reads_then_writes(base: &Path, paths: &[&str], content: &str) -> Vec<(&'static str, Value)> {
    let mut calls: Vec<(&'static str, Value)> = paths
        .iter()
        .filter(|p| base.join(p).is_file())
        .map(|p| ("read", json!({"file_path": p})))
        .collect();
    calls.extend(
        paths
            .iter()
            .map(|p| ("write", json!({"file_path": p, "content": content}))),
    );
    calls
}

/// Asserts the last `paths.len()` results (the writes) were refused as protected or denied.
fn assert_writes_refused(results: &[String], paths: &[&str]) {
    let writes = &results[results.len() - paths.len()..];
    for (path, result) in paths.iter().zip(writes) {
        assert!(
            result.contains("PERMISSION_DENIED"),
            "write {path} was not refused: {result}"
        );
    }
}

/// A workspace whose `.git` has a submodule's and a worktree's git directory, with a nested
/// repository beside it.
fn git_workspace() -> Env {
    let env = Env::new();
    let ws = &env.cwd;
    for dir in [
        ".git/hooks",
        ".git/modules/sub/hooks",
        ".git/worktrees/wt",
        "nested/.git/hooks",
    ] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
    }
    for file in GIT_FILES {
        std::fs::write(ws.join(file), "[core]\n").unwrap();
    }
    env
}

const GIT_FILES: [&str; 4] = [
    ".git/config",
    ".git/modules/sub/config",
    ".git/worktrees/wt/commondir",
    "nested/.git/config",
];

/// Nothing was planted in the git directories of [`git_workspace`].
fn assert_git_unchanged(ws: &Path) {
    for path in [
        ".git/modules/sub/hooks/post-checkout",
        ".git/worktrees/wt/config.worktree",
        "nested/.git/hooks/pre-commit",
    ] {
        assert!(!ws.join(path).exists(), "{path} was planted");
    }
    for path in GIT_FILES {
        assert_eq!(
            std::fs::read_to_string(ws.join(path)).unwrap(),
            "[core]\n",
            "{path}"
        );
    }
}

/// Finding 6, `write`: the git directories beside the top `.git` (a submodule's, a worktree's,
/// a nested repository's) are protected; headless, the writes are refused.
#[tokio::test]
async fn write_cannot_plant_in_git_directories_of_submodules_worktrees_and_nested_repos() {
    let env = git_workspace();
    let planted = [
        ".git/modules/sub/hooks/post-checkout",
        ".git/modules/sub/config",
        ".git/worktrees/wt/config.worktree",
        ".git/worktrees/wt/commondir",
        "nested/.git/hooks/pre-commit",
        "nested/.git/config",
    ];
    let calls = reads_then_writes(&env.cwd, &planted, "#!/bin/sh\ntouch /tmp/pwned\n");
    let (_, log, _) = run_calls(&env, &calls, &["--permission", "workspace-write"]).await;
    assert_writes_refused(&tool_results(&log), &planted);
    assert_git_unchanged(&env.cwd);
}

/// Finding 6, `bash`: the sandbox binds those git directories' hooks and configuration
/// read-only too.
#[tokio::test]
async fn bash_cannot_plant_in_git_directories_of_submodules_and_nested_repos() {
    let env = git_workspace();
    let script = "echo evil > .git/modules/sub/hooks/post-checkout; \
                  printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/modules/sub/config; \
                  echo evil > nested/.git/hooks/pre-commit; \
                  printf 'x' >> nested/.git/config; \
                  printf 'x' >> .git/worktrees/wt/commondir; echo finished";
    let calls = [("bash", json!({"command": script, "description": "plant"}))];
    let (_, log, _) = run_calls(&env, &calls, &["--permission", "workspace-write"]).await;
    let results = tool_results(&log);
    assert!(results[0].contains("finished"), "bash ran: {}", results[0]);
    assert_git_unchanged(&env.cwd);
}

/// A session whose working directory is the user's home, with the usual dotfiles.
fn home_session() -> (Env, PathBuf) {
    let (root, [home, dsh_home]) = scratch_dirs(["home", "dsh"]);
    let env = Env::with(root, home.clone(), dsh_home, home.clone());
    for dir in [".ssh", ".codex", ".claude", ".config"] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    for file in HOME_FILES {
        std::fs::write(home.join(file), "original\n").unwrap();
    }
    (env, home)
}

const HOME_FILES: [&str; 5] = [
    ".bashrc",
    ".profile",
    ".gitconfig",
    ".ssh/authorized_keys",
    ".codex/config.toml",
];

fn assert_home_unchanged(home: &Path) {
    for file in HOME_FILES {
        assert_eq!(
            std::fs::read_to_string(home.join(file)).unwrap(),
            "original\n",
            "{file}"
        );
    }
    assert!(!home.join(".claude/settings.json").exists());
}

/// Finding 8, `write`: a session started in `$HOME` cannot change the home's start-up files and
/// other tools' settings.
#[tokio::test]
async fn write_cannot_change_dotfiles_of_a_session_in_home() {
    let (env, home) = home_session();
    let mut targets: Vec<&str> = HOME_FILES.to_vec();
    targets.push(".claude/settings.json");
    let calls = reads_then_writes(&home, &targets, "evil\n");
    let (_, log, _) = run_calls(&env, &calls, &["--permission", "workspace-write"]).await;
    assert_writes_refused(&tool_results(&log), &targets);
    assert_home_unchanged(&home);
}

/// Finding 8, `bash`: the sandbox binds the home's existing dot entries read-only.
#[tokio::test]
async fn bash_cannot_change_dotfiles_of_a_session_in_home() {
    let (env, home) = home_session();
    let script = "for f in .bashrc .profile .gitconfig .ssh/authorized_keys .codex/config.toml; do echo evil >> $f; done; \
                  echo evil > .claude/settings.json; echo finished";
    let calls = [("bash", json!({"command": script, "description": "plant"}))];
    let (_, log, _) = run_calls(&env, &calls, &["--permission", "workspace-write"]).await;
    let results = tool_results(&log);
    assert!(results[0].contains("finished"), "bash ran: {}", results[0]);
    assert_home_unchanged(&home);
}

/// Finding 9: with `$DSH_HOME` inside a writable root (`/var/tmp`), `write` cannot plant dsh's
/// own configuration there.
#[tokio::test]
async fn write_cannot_plant_dsh_configuration_in_a_home_under_var_tmp() {
    let (root, [home, cwd]) = scratch_dirs(["home", "ws"]);
    let dsh_home = tempfile::tempdir_in("/var/tmp").unwrap();
    let dsh_home_path = std::fs::canonicalize(dsh_home.path()).unwrap();
    let env = Env::with(root, home, dsh_home_path.clone(), cwd);
    let names = [
        "hooks.json",
        "codex-hooks.json",
        "trust.toml",
        "config.toml",
        "approvals.json",
        "skills/evil/SKILL.md",
        "AGENTS.md",
    ];
    let calls: Vec<(&str, Value)> = names
        .iter()
        .map(|name| {
            let path = dsh_home_path.join(name).display().to_string();
            ("write", json!({"file_path": path, "content": "planted\n"}))
        })
        .collect();
    let (_, log, _) = run_calls(&env, &calls, &["--permission", "workspace-write"]).await;
    let results = tool_results(&log);
    for (i, name) in names.iter().enumerate() {
        assert!(
            results[i].contains("PERMISSION_DENIED") && results[i].contains("dsh-home"),
            "write {name}: {}",
            results[i]
        );
        assert!(!dsh_home_path.join(name).exists(), "{name} was planted");
    }
}
