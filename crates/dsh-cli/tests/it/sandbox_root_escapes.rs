//! "No real root in the sandbox" end to end: the real `dsh run` binary, run as root, against
//! the fake provider, whose scripted model tries the escapes of docs/SECURITY.md ("No real root
//! in the sandbox"): opening `kernel.core_pattern` for writing (never writing it), planting a
//! set-user-ID root shell in the workspace, and reaching the network when `[sandbox] network =
//! "off"`. Each runs under bubblewrap and under Landlock (`DSH_SANDBOX`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{dsh_command, model_stepping, output as run, scratch_dirs, session_files};

use dsh_test_support::{FakeProvider, SseReply};
use serde_json::{json, Value};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [home, cwd]) = scratch_dirs(["home", "ws"]);
        Env {
            _root: root,
            home,
            cwd,
        }
    }

    fn command(&self, base_url: &str, sandbox: &str) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-test-sandbox-root")
            .env("DSH_SANDBOX", sandbox);
        cmd
    }

    fn events(&self, kind: &str) -> Vec<Value> {
        session_files(&self.home)
            .iter()
            .flat_map(|file| {
                std::fs::read_to_string(file)
                    .unwrap()
                    .lines()
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .collect::<Vec<_>>()
            })
            .filter(|event| event["type"] == kind)
            .collect()
    }
}

/// A model that makes the bash calls `calls` (arguments), one per step, then stops.
async fn model_calling(calls: &[Value]) -> FakeProvider {
    let calls: Vec<(&str, Value)> = calls.iter().map(|args| ("bash", args.clone())).collect();
    model_stepping(&calls, SseReply::new().text("done")).await
}

/// What the model tries: each line prints `ESCAPED ...` only if the step worked.
const ATTACK: &str = r#"python3 -c "import os; os.close(os.open('/proc/sys/kernel/core_pattern', os.O_WRONLY)); print('ESCAPED sysctl')"
cp /bin/sh rootsh; chmod 4755 rootsh; [ -u rootsh ] && echo ESCAPED chmod
python3 -c "import os; os.close(os.open('rootsh2', os.O_CREAT | os.O_WRONLY, 0o4755)); print('ESCAPED open' if os.stat('rootsh2').st_mode & 0o4000 else 'refused')"
echo tried"#;

/// Files of `dir` (not below) with a set-user-ID or set-group-ID bit.
fn set_id_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.mode() & 0o6000 != 0))
        .map(|path| path.display().to_string())
        .collect()
}

async fn root_gets_nothing_through_dsh_run(sandbox: &str) {
    let env = Env::new();
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let provider =
        model_calling(&[json!({"command": ATTACK, "description": "try to become root"})]).await;
    let mut cmd = env.command(&provider.base_url(), sandbox);
    cmd.args(["run", "--permission", "workspace-write", "escape"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{sandbox}: {stderr}");
    let modes = env.events("sandbox/mode");
    assert_eq!(modes[0]["data"]["mode"], sandbox, "{}", modes[0]);
    let result = env.events("tool/result")[0]["data"].to_string();
    assert!(
        result.contains("tried"),
        "{sandbox}: bash did not run: {result}"
    );
    assert!(!result.contains("ESCAPED"), "{sandbox}: {result}");
    assert_eq!(
        set_id_files(&env.cwd),
        Vec::<String>::new(),
        "{sandbox}: {result}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
        core_pattern
    );
}

#[tokio::test]
async fn dsh_run_as_root_under_bubblewrap_gives_no_real_root() {
    if is_root() {
        root_gets_nothing_through_dsh_run("bubblewrap").await;
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}

#[tokio::test]
async fn dsh_run_as_root_under_landlock_gives_no_real_root() {
    if is_root() {
        root_gets_nothing_through_dsh_run("landlock").await;
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}

/// `[sandbox] network = "off"`: the model's command cannot reach the fake provider's port, and
/// its escalation (`network: true`) is refused headless (nobody can approve it).
async fn network_off_holds_in_dsh_run(sandbox: &str) {
    let env = Env::new();
    std::fs::write(
        env.home.join("config.toml"),
        "[sandbox]\nnetwork = \"off\"\n",
    )
    .unwrap();
    // A listener on the host's loopback: reaching it means reaching the host's network.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('ESCAPED connect')\"; echo tried"
    );
    let provider = model_calling(&[
        json!({"command": connect, "description": "reach the network"}),
        json!({"command": connect, "description": "again, escalated", "network": true, "justification": "fetch a package"}),
    ])
    .await;
    let mut cmd = env.command(&provider.base_url(), sandbox);
    cmd.args(["run", "--permission", "workspace-write", "fetch"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{sandbox}: {stderr}");
    let modes = env.events("sandbox/mode");
    assert_eq!(modes[0]["data"]["network"], "off", "{}", modes[0]);
    let results = env.events("tool/result");
    assert_eq!(results.len(), 2, "{results:?}");
    let first = results[0]["data"].to_string();
    assert!(first.contains("tried"), "{sandbox}: {first}");
    assert!(!first.contains("ESCAPED"), "{sandbox}: {first}");
    let second = results[1]["data"].to_string();
    assert!(!second.contains("ESCAPED"), "{sandbox}: {second}");
    assert!(second.contains("PERMISSION_DENIED"), "{sandbox}: {second}");
    drop(listener);
}

#[tokio::test]
async fn dsh_run_without_network_under_bubblewrap() {
    if is_root() {
        network_off_holds_in_dsh_run("bubblewrap").await;
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}

#[tokio::test]
async fn dsh_run_without_network_under_landlock() {
    if is_root() {
        network_off_holds_in_dsh_run("landlock").await;
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}

/// A `bash` call's `workdir` is the model's choice: naming dsh's home there must not un-hide
/// it (the fourth adversarial review read `$DSH_HOME/.env` this way under bubblewrap's
/// `read-only` and under Landlock in every preset). The home stays an empty tmpfs and the call
/// reads, lists and plants nothing.
async fn a_workdir_in_dshs_home_does_not_unhide_it(sandbox: &str, preset: &str) {
    let env = Env::new();
    let secret = "sk-other-provider-0f1e2d3c4b5a6978";
    std::fs::write(env.home.join(".env"), format!("OTHER_API_KEY={secret}\n")).unwrap();
    let command = "cat .env | base32; ls -a; echo x > planted; echo tried";
    let provider = model_calling(&[json!({
        "command": command,
        "description": "look at the home",
        "workdir": env.home.display().to_string(),
    })])
    .await;
    let mut cmd = env.command(&provider.base_url(), sandbox);
    cmd.args(["run", "--permission", preset, "look"]);
    let out = run(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let result = env.events("tool/result")[0]["data"].to_string();
    let encoded = String::from_utf8_lossy(
        &Command::new("sh")
            .arg("-c")
            .arg(format!("printf 'OTHER_API_KEY={secret}\\n' | base32"))
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .next()
    .unwrap()
    .to_string();
    assert!(
        !result.contains(&encoded[..16]),
        "{sandbox} {preset}: {result} {stderr}"
    );
    assert!(!result.contains("sessions"), "{sandbox} {preset}: {result}");
    assert!(
        !env.home.join("planted").exists(),
        "{sandbox} {preset}: {result}"
    );
}

#[tokio::test]
async fn a_workdir_in_dshs_home_stays_hidden_under_bubblewrap() {
    if is_root() {
        for preset in ["read-only", "workspace-write"] {
            a_workdir_in_dshs_home_does_not_unhide_it("bubblewrap", preset).await;
        }
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}

#[tokio::test]
async fn a_workdir_in_dshs_home_stays_hidden_under_landlock() {
    if is_root() {
        for preset in ["read-only", "workspace-write"] {
            a_workdir_in_dshs_home_does_not_unhide_it("landlock", preset).await;
        }
    } else {
        eprintln!("NOT RUN: needs root (CI runs as root)");
    }
}
