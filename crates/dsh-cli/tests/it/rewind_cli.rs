//! Rewind with the real binary and the scripted provider (issue 43, point 3; docs/rewind.md):
//! each turn's checkpoints are logged, `dsh sessions rewind` lists the turns, restores the files
//! as they were at a turn's start (changes made by `bash` included), forks the conversation
//! before that turn, and refuses when files changed outside dsh unless forced.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::common::{dsh_command, model_stepping, output, scratch_dirs, session_file, text};

use dsh_test_support::SseReply;

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [home, ws]) = scratch_dirs(["home", "ws"]);
        Env {
            _root: root,
            home,
            ws,
        }
    }

    fn dsh(&self, args: &[&str]) -> Command {
        let mut cmd = dsh_command(&self.home, &self.ws);
        cmd.args(args);
        cmd
    }

    /// `dsh run [extra] TASK` against a model that makes `calls`, then answers "done".
    async fn turn(&self, extra: &[&str], task: &str, calls: &[(&str, serde_json::Value)]) {
        let provider = model_stepping(calls, SseReply::new().text("done")).await;
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.push(task);
        let mut cmd = self.dsh(&args);
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-rewind-test");
        let out = output(cmd).await;
        assert!(out.status.success(), "{}", text(&out).1);
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.ws.join(rel)).ok()
    }
}

fn session_id(log: &Path) -> String {
    let first = std::fs::read_to_string(log).unwrap();
    let header: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    header["id"].as_str().unwrap().to_string()
}

fn bash(command: &str) -> (&'static str, serde_json::Value) {
    (
        "bash",
        json!({"command": command, "description": "change files"}),
    )
}

#[tokio::test]
async fn rewind_restores_files_and_forks_the_conversation() {
    let env = Env::new();
    std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
    env.turn(
        &[],
        "first task",
        &[
            (
                "write",
                json!({"file_path": "w.txt", "content": "written\n"}),
            ),
            bash("echo two > a.txt && echo made > b.txt && mkdir -p d && echo deep > d/e.txt"),
        ],
    )
    .await;
    let log = session_file(&env.home);
    let id = session_id(&log);
    env.turn(
        &["--resume", &id],
        "second task",
        &[bash("rm a.txt && rm -r d && echo new > c.txt")],
    )
    .await;
    assert_eq!(env.read("a.txt"), None);
    // Two checkpoints a turn, logged as our ignorable event.
    let logged = std::fs::read_to_string(&log).unwrap();
    let checkpoints: Vec<serde_json::Value> = logged
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["type"] == "workspace/checkpoint")
        .collect();
    assert_eq!(checkpoints.len(), 4, "{logged}");
    assert!(checkpoints.iter().all(|c| c["ignorable"] == true));
    assert!(checkpoints.iter().all(|c| c["data"]["tree"].is_string()));

    let listed = text(&output(env.dsh(&["sessions", "rewind", &id])).await).0;
    assert!(listed.contains("first task"), "{listed}");
    assert!(listed.contains("second task"), "{listed}");

    // The files as at the start of turn 2, `bash`'s changes of turn 1 included.
    let out = output(env.dsh(&["sessions", "rewind", &id, "--to-turn", "2", "--files"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(env.read("a.txt").as_deref(), Some("two\n"));
    assert_eq!(env.read("b.txt").as_deref(), Some("made\n"));
    assert_eq!(env.read("d/e.txt").as_deref(), Some("deep\n"));
    assert_eq!(env.read("w.txt").as_deref(), Some("written\n"));
    assert_eq!(env.read("c.txt"), None);

    // A change outside dsh since: refused, named, nothing touched.
    std::fs::write(env.ws.join("mine.txt"), "the user's\n").unwrap();
    let out = output(env.dsh(&["sessions", "rewind", &id, "--to-turn", "1"])).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("changed outside dsh"), "{stderr}");
    assert!(stderr.contains("mine.txt"), "{stderr}");
    assert_eq!(env.read("a.txt").as_deref(), Some("two\n"));
    assert_eq!(env.read("mine.txt").as_deref(), Some("the user's\n"));

    // Forced: the files of turn 1's start, and the conversation before it in a new session.
    let out = output(env.dsh(&["sessions", "rewind", &id, "--to-turn", "2", "--force"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(env.read("mine.txt"), None);
    assert_eq!(env.read("a.txt").as_deref(), Some("two\n"));
    assert!(
        stdout.contains("turn 2 began with: second task"),
        "{stdout}"
    );
    let fork_id = stdout.lines().find(|l| l.len() == 36).unwrap().to_string();
    let shown = text(&output(env.dsh(&["sessions", "show", &fork_id])).await).0;
    assert!(shown.contains("first task"), "{shown}");
    assert!(!shown.contains("second task"), "{shown}");

    // The fork goes on from the restored files: its next turn sees no outside change, and
    // rewinding it to its own turn 1 works without --force.
    env.turn(
        &["--resume", &fork_id],
        "third task",
        &[bash("echo 3 > c.txt")],
    )
    .await;
    let out = output(env.dsh(&["sessions", "rewind", &fork_id, "--to-turn", "1", "--files"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(env.read("a.txt").as_deref(), Some("one\n"));
    assert_eq!(env.read("b.txt"), None);
    assert_eq!(env.read("w.txt"), None);
    assert_eq!(env.read("c.txt"), None);
    assert!(!env.ws.join("d").exists());
}

#[tokio::test]
async fn rewind_explains_what_it_cannot_do() {
    let env = Env::new();
    std::fs::write(env.home.join("config.toml"), "[rewind]\nenabled = false\n").unwrap();
    env.turn(&[], "only task", &[]).await;
    let id = session_id(&session_file(&env.home));
    let listed = text(&output(env.dsh(&["sessions", "rewind", &id])).await).0;
    assert!(listed.contains("conversation only"), "{listed}");
    let out = output(env.dsh(&["sessions", "rewind", &id, "--to-turn", "1", "--files"])).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no checkpoint"), "{stderr}");
    let out = output(env.dsh(&["sessions", "rewind", &id, "--to-turn", "7"])).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no turn 7"), "{stderr}");
    // The conversation alone still rewinds.
    let out = output(env.dsh(&[
        "sessions",
        "rewind",
        &id,
        "--to-turn",
        "1",
        "--conversation",
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out).1);
}
