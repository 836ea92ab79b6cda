//! Planted code and data, end to end with the real `dsh` binary (issue 38): hook and MCP scripts
//! the model can write run only with the bytes the user trusted; an untrusted project config
//! that does not parse is ignored with a warning; a crafted compressed session can neither write
//! through a symlinked temp name nor expand without limit (docs/SECURITY.md, "Planted
//! configuration and workspace trust").

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

use crate::common::{
    dsh_command, model_stepping, output, output_with_input, scratch_dirs, session_files, text,
};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply};
use serde_json::{json, Value};

const API_KEY: &str = "sk-plant-0123456789abcdef";

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    markers: PathBuf,
}

impl Env {
    /// Home, workspace and a marker folder under the cargo target dir (outside the temp dirs,
    /// so that only the workspace is where the model can write).
    fn new() -> Env {
        let (root, [home, cwd, markers]) = scratch_dirs(["home", "ws", "markers"]);
        for dir in [cwd.join(".git"), cwd.join("scripts")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Env {
            _root: root,
            home,
            cwd,
            markers,
        }
    }

    fn command(&self, provider: &FakeProvider) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", API_KEY);
        cmd
    }

    fn marker(&self, name: &str) -> PathBuf {
        self.markers.join(name)
    }

    /// A shell script that appends a line to the marker `name`.
    fn script_touching(&self, name: &str) -> String {
        format!("echo ran >> '{}'\n", self.marker(name).display())
    }

    fn session_log(&self) -> String {
        session_files(&self.home)
            .iter()
            .map(|file| std::fs::read_to_string(file).unwrap())
            .collect()
    }
}

/// Replies that call `calls` tools (name, JSON arguments) one per step, then end with text.
async fn scripted(calls: &[(&str, Value)]) -> FakeProvider {
    model_stepping(calls, SseReply::new().text("done")).await
}

fn hook_results(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "hook/result")
        .map(|event| event["data"].clone())
        .collect()
}

/// Finding 7, second case: a trusted project hook `sh scripts/pre.sh`. The trust pins the
/// script's bytes with the hooks file; when the model rewrites the script, the next
/// `PreToolUse` refuses to run it and denies the call, and the next run no longer trusts the
/// workspace and says how to trust it again.
#[tokio::test]
async fn a_trusted_hook_script_changed_by_the_model_never_runs() {
    let env = Env::new();
    std::fs::create_dir_all(env.cwd.join(".dsh")).unwrap();
    std::fs::write(
        env.cwd.join(".dsh/hooks.json"),
        r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "sh scripts/pre.sh"}]}]}}"#,
    )
    .unwrap();
    // A project hook runs confined: the trusted script leaves its mark in the workspace.
    std::fs::write(env.cwd.join("scripts/pre.sh"), "echo ran >> good.txt\n").unwrap();
    let mut trust = dsh_command(&env.home, &env.cwd);
    trust.arg("trust");
    let out = output_with_input(trust, "y\n").await;
    assert!(out.status.success(), "{:?}", text(&out));
    // The review names the script whose bytes the trust pins.
    let (review, _) = text(&out);
    assert!(review.contains("scripts/pre.sh"), "{review}");
    assert!(review.contains("pins these bytes"), "{review}");

    // Step 1 rewrites the script with a confined command (the hook runs the trusted one
    // first); step 2 is a harmless command whose PreToolUse would run the rewritten script.
    let rewrite = format!(
        "echo \"touch '{}'\" > scripts/pre.sh",
        env.marker("evil").display()
    );
    let provider = scripted(&[
        (
            "bash",
            json!({"command": rewrite, "description": "rewrite the hook script"}),
        ),
        ("bash", json!({"command": "true", "description": "noop"})),
    ])
    .await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "--json", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(
        env.cwd.join("good.txt").exists(),
        "the trusted script ran: {stderr}"
    );
    assert!(
        !env.marker("evil").exists(),
        "the rewritten hook script ran unconfined"
    );
    let results = hook_results(&env.session_log());
    let refused = results
        .iter()
        .find(|r| r["decision"] == "deny")
        .unwrap_or_else(|| panic!("no denied hook result: {results:#?}"));
    let error = refused["error"].as_str().unwrap();
    assert!(
        std::fs::read_to_string(env.cwd.join("scripts/pre.sh"))
            .unwrap()
            .contains("touch"),
        "the model's rewrite did not land"
    );
    assert!(error.contains("changed since you trusted"), "{error}");
    assert!(error.contains("dsh trust"), "{error}");

    // The next run: the pin no longer matches; the hook is left out with the usual warning.
    let provider2 = scripted(&[("bash", json!({"command": "true", "description": "noop"}))]).await;
    let mut cmd = env.command(&provider2);
    cmd.args(["run", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(stderr.contains("dsh trust"), "{stderr}");
    assert!(!env.marker("evil").exists(), "the rewritten script ran");
}

/// Finding 7, first case: the user's own hook names a script inside the workspace (the old
/// documented `./.dsh/check-command.sh`, here `scripts/check-command.sh`), and the repository
/// (or an earlier session) put one there. dsh refuses to run it (the user's config never pins
/// workspace files) and denies the call the hook was to judge, saying where to move it.
#[tokio::test]
async fn a_user_hook_pointing_into_the_workspace_is_refused() {
    let env = Env::new();
    std::fs::write(
        env.home.join("config.toml"),
        "[[hooks.PreToolUse]]\nhooks = [{ type = \"command\", command = \"sh scripts/check-command.sh\" }]\n",
    )
    .unwrap();
    std::fs::write(
        env.cwd.join("scripts/check-command.sh"),
        env.script_touching("planted"),
    )
    .unwrap();
    let provider = scripted(&[(
        "bash",
        json!({"command": "echo hi > out.txt", "description": "write"}),
    )])
    .await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "--json", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(
        !env.marker("planted").exists(),
        "a script the model could write ran as the user's hook: {stderr}"
    );
    assert!(!env.cwd.join("out.txt").exists(), "the call was not denied");
    let results = hook_results(&env.session_log());
    assert!(
        results.iter().any(|r| r["decision"] == "deny"
            && r["error"].as_str().unwrap_or("").contains("~/.dsh/hooks")),
        "{results:#?}"
    );
    // The user hears it when the session opens, not only from the log.
    assert!(
        stderr.contains("warning: hook command `sh scripts/check-command.sh`"),
        "{stderr}"
    );
}

/// The same class for MCP servers: the user's server `sh scripts/mcp.sh` with a script the
/// repository planted never starts; the warning says why.
#[tokio::test]
async fn a_user_mcp_server_running_a_workspace_script_is_refused() {
    let env = Env::new();
    std::fs::write(env.cwd.join("scripts/mcp.sh"), env.script_touching("mcp")).unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        "[mcp.servers.local]\ncommand = \"sh\"\nargs = [\"scripts/mcp.sh\"]\nstartup_timeout_secs = 5\n",
    )
    .unwrap();
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(!env.marker("mcp").exists(), "the planted MCP script ran");
    assert!(stderr.contains("scripts/mcp.sh"), "{stderr}");
    assert!(stderr.contains("model can write"), "{stderr}");
}

/// Finding 12: a planted `.dsh/config.toml` that does not parse stops no run; a warning names
/// it. Trusted for the run, the same file is a clear error.
#[tokio::test]
async fn a_planted_invalid_project_config_is_ignored_with_a_warning() {
    let env = Env::new();
    std::fs::create_dir_all(env.cwd.join(".dsh")).unwrap();
    std::fs::write(env.cwd.join(".dsh/config.toml"), "this is = not [toml\n").unwrap();
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "go"]);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("done"), "{stdout}");
    assert!(
        stderr.contains("ignoring the untrusted project config file"),
        "{stderr}"
    );
    assert!(stderr.contains(".dsh/config.toml"), "{stderr}");

    let mut cmd = env.command(&provider);
    cmd.args(["run", "--trust-workspace", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("not valid TOML"), "{stderr}");
}

/// A real session log of one finished turn, as dsh wrote it, for crafting compressed copies.
async fn a_session_log(env: &Env) -> Vec<u8> {
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "hello"]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let files = session_files(&env.home);
    std::fs::read(files.last().unwrap()).unwrap()
}

/// The last process id the kernel handed out.
fn last_pid() -> u32 {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap();
    loadavg.split_whitespace().last().unwrap().parse().unwrap()
}

/// Finding 10: resuming a crafted compressed session decompressed it into
/// `.session.jsonl.from-zstd-<pid>`, opened with create+truncate: a symlink planted there for
/// the coming process ids made dsh overwrite any file it can write. The temporary file is now
/// created new (`O_EXCL|O_NOFOLLOW`) under an unpredictable name, and the victim is untouched.
#[tokio::test]
async fn resuming_a_crafted_zstd_session_writes_through_no_symlink() {
    let env = Env::new();
    let plain = a_session_log(&env).await;
    let crafted = env.cwd.join("crafted");
    std::fs::create_dir_all(&crafted).unwrap();
    let zstd_log = crafted.join("session.jsonl.zstd");
    std::fs::write(&zstd_log, zstd::encode_all(plain.as_slice(), 3).unwrap()).unwrap();
    let victim = env.markers.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    // Symlinks at the names the next few thousand processes would use.
    let next = last_pid();
    for pid in next + 1..next + 4000 {
        let name = crafted.join(format!(".session.jsonl.from-zstd-{pid}"));
        std::os::unix::fs::symlink(&victim, name).unwrap();
    }
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "--resume"]).arg(&zstd_log).arg("go on");
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    let now = std::fs::read(&victim).unwrap();
    assert!(
        now == b"precious\n",
        "dsh wrote {} bytes through a planted symlink",
        now.len()
    );
    assert!(out.status.success(), "{stderr}");
    let continued = std::fs::read(crafted.join("session.jsonl")).unwrap();
    assert!(
        continued.starts_with(&plain),
        "the continuation lost the log"
    );
    let mode = std::os::unix::fs::MetadataExt::mode(
        &std::fs::metadata(crafted.join("session.jsonl")).unwrap(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// Finding 12: a small compressed log that expands without end (a 512 MiB line of one byte,
/// a few hundred KB compressed) is refused with a named error once it passes its limit, instead
/// of being read into memory.
#[tokio::test]
async fn a_zstd_bomb_session_is_refused_with_a_named_error() {
    let env = Env::new();
    let plain = a_session_log(&env).await;
    let header = plain.split_inclusive(|&b| b == b'\n').next().unwrap();
    let bomb_dir = env.cwd.join("bomb");
    std::fs::create_dir_all(&bomb_dir).unwrap();
    let bomb = bomb_dir.join("session.jsonl.zstd");
    {
        use std::io::Write;
        let file = std::fs::File::create(&bomb).unwrap();
        let mut encoder = zstd::stream::write::Encoder::new(file, 19).unwrap();
        encoder.write_all(header).unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..512 {
            encoder.write_all(&block).unwrap();
        }
        encoder.finish().unwrap();
    }
    let compressed = std::fs::metadata(&bomb).unwrap().len();
    assert!(compressed < 1 << 20, "{compressed} bytes");
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "--resume"]).arg(&bomb).arg("go on");
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("ZSTD_LOG_TOO_LARGE"), "{stderr}");
    assert!(provider.requests().is_empty());
    assert!(!bomb_dir.join("session.jsonl").exists());
}

/// Finding 12: one SSE line without a newline grew without limit (to ~1.9 GB RSS). Past 16 MiB
/// the stream now fails at once with a named error, reported as the reply's error, even while
/// the provider keeps the connection open.
#[tokio::test]
async fn an_endless_sse_line_fails_the_reply_with_a_named_error() {
    let env = Env::new();
    let mut line = b"data: ".to_vec();
    line.extend(std::iter::repeat_n(b'x', 40 << 20));
    let provider = FakeProvider::start([ScriptedReply::from(
        SseReply::new()
            .raw(line)
            .end(dsh_test_support::StreamEnd::Stall),
    )])
    .await
    .unwrap();
    let mut cmd = env.command(&provider);
    cmd.args(["run", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("SSE_EVENT_TOO_LARGE"), "{stderr}");
}

/// Attacks on the script check with the real binary: a hook named by a bare word that the
/// user's `PATH` finds in a workspace folder, and a hook script in the user's own folder that
/// is a symlink into the workspace. Neither planted script runs.
#[tokio::test]
async fn path_lookups_and_symlinks_into_the_workspace_do_not_run_planted_scripts() {
    let env = Env::new();
    std::fs::create_dir_all(env.cwd.join("bin")).unwrap();
    let planted = env.cwd.join("bin/check-command");
    std::fs::write(
        &planted,
        format!("#!/bin/sh\n{}", env.script_touching("path")),
    )
    .unwrap();
    let mut mode = std::fs::metadata(&planted).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(&planted, mode).unwrap();
    std::fs::write(env.cwd.join("linked.sh"), env.script_touching("link")).unwrap();
    std::fs::create_dir_all(env.home.join("hooks")).unwrap();
    std::os::unix::fs::symlink(env.cwd.join("linked.sh"), env.home.join("hooks/linked.sh"))
        .unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        format!(
            "[[hooks.UserPromptSubmit]]\nhooks = [{{ type = \"command\", command = \"check-command\" }}, \
             {{ type = \"command\", command = \"sh {}\" }}]\n",
            env.home.join("hooks/linked.sh").display()
        ),
    )
    .unwrap();
    let provider = scripted(&[]).await;
    let mut cmd = env.command(&provider);
    let path = format!(
        "{}:{}",
        env.cwd.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    cmd.env("PATH", path).args(["run", "--json", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !env.marker("path").exists(),
        "a program the PATH found in the workspace ran as a hook"
    );
    assert!(
        !env.marker("link").exists(),
        "a symlink into the workspace ran as the user's hook script"
    );
    let results = hook_results(&env.session_log());
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap_or("")
            .contains("linked.sh"),
        "{results:#?}"
    );
}

/// The scripts a trusted workspace's hooks run are protected for `write`/`edit` too: changing
/// one needs the user's approval, which a headless run cannot give.
#[tokio::test]
async fn the_write_tool_cannot_rewrite_a_pinned_hook_script_unasked() {
    let env = Env::new();
    std::fs::create_dir_all(env.cwd.join(".dsh")).unwrap();
    std::fs::write(
        env.cwd.join(".dsh/hooks.json"),
        r#"{"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "sh scripts/pre.sh"}]}]}}"#,
    )
    .unwrap();
    // Confined, the trusted hook leaves its mark in the workspace.
    let original = "echo ran >> good.txt\n";
    std::fs::write(env.cwd.join("scripts/pre.sh"), original).unwrap();
    let mut trust = dsh_command(&env.home, &env.cwd);
    trust.arg("trust");
    let out = output_with_input(trust, "y\n").await;
    assert!(out.status.success(), "{:?}", text(&out));
    // Read first, as `write` requires for an existing file.
    let provider = scripted(&[
        ("read", json!({"file_path": "scripts/pre.sh"})),
        (
            "write",
            json!({"file_path": "scripts/pre.sh", "content": env.script_touching("evil")}),
        ),
    ])
    .await;
    let mut cmd = env.command(&provider);
    cmd.args(["run", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(
        env.cwd.join("good.txt").exists(),
        "the trusted hook ran: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(env.cwd.join("scripts/pre.sh")).unwrap(),
        original,
        "write changed a pinned hook script without approval"
    );
}

/// The user's own hook runs unconfined in the workspace, so no variable dsh passes may make
/// its interpreter load code from there: an empty `PYTHONPATH` entry (a Docker image's
/// `ENV PYTHONPATH=$PYTHONPATH:/app` gives `:/app`) made a hook's `import json` load the
/// `json.py` the model wrote (fifth adversarial review). Empty and relative entries of the
/// code-loading variables are dropped from every child's environment.
#[tokio::test]
async fn a_users_hook_loads_no_module_the_model_wrote() {
    let env = Env::new();
    let hook = env.markers.join("check.py");
    std::fs::write(&hook, "import json\nprint(json.dumps({}))\n").unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        format!(
            "[[hooks.PreToolUse]]\nhooks = [{{ type = \"command\", command = \"python3 {}\" }}]\n",
            hook.display()
        ),
    )
    .unwrap();
    let planted = format!(
        "open('{}', 'w').write('loaded')\n",
        env.marker("planted-module").display()
    );
    let provider = scripted(&[
        ("write", json!({"file_path": "json.py", "content": planted})),
        ("bash", json!({"command": "true", "description": "noop"})),
    ])
    .await;
    let mut cmd = env.command(&provider);
    cmd.env("PYTHONPATH", ":/opt/app").args(["run", "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        env.cwd.join("json.py").exists(),
        "the model's write did not land"
    );
    assert!(
        !env.marker("planted-module").exists(),
        "the user's hook loaded a module the model wrote"
    );
}
