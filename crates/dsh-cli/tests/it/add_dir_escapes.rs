//! `--add-dir DIR` (issue 42, point 3) as an attacker sees it: the real `dsh run`, as root
//! where CI runs it, with a scripted model that writes into the added directory (allowed, by
//! the file tools and by sandboxed commands, under bubblewrap and Landlock) and tries to get
//! past it: a sibling directory, a protected entry inside it (`.git/hooks`), a symlink in it
//! that leads out, and a program of the user's MCP server planted there. The added directory
//! is one list for the file gate, both sandboxes and the script gate
//! (`dsh_runtime::Configuration::extra_roots`).

use std::path::PathBuf;
use std::process::Command;

use crate::common::{dsh_command, model_stepping, output, scratch_dirs, session_files, text};

use dsh_test_support::SseReply;
use serde_json::{json, Value};

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    extra: PathBuf,
    other: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [home, cwd, extra, other]) = scratch_dirs(["home", "ws", "extra", "other"]);
        std::fs::create_dir_all(extra.join(".git/hooks")).unwrap();
        // The workspace is its own project (the scratch folder lies in this repository).
        std::fs::create_dir_all(cwd.join(".git")).unwrap();
        Env {
            _root: root,
            home,
            cwd,
            extra,
            other,
        }
    }

    /// `dsh run` under `workspace-write` unless `extra` names another preset.
    fn run(&self, base_url: &str, sandbox: &str, extra: &[&str]) -> Command {
        let mut cmd = dsh_command(&self.home, &self.cwd);
        cmd.env("DEEPSEEK_BASE_URL", base_url)
            .env("DEEPSEEK_API_KEY", "sk-test-add-dir")
            .env("DSH_SANDBOX", sandbox)
            .arg("run");
        if !extra.contains(&"--permission") {
            cmd.args(["--permission", "workspace-write"]);
        }
        cmd.args(extra);
        cmd
    }

    fn results(&self) -> Vec<String> {
        session_files(&self.home)
            .iter()
            .flat_map(|file| {
                std::fs::read_to_string(file)
                    .unwrap()
                    .lines()
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .collect::<Vec<_>>()
            })
            .filter(|event| event["type"] == "tool/result")
            .map(|event| event["data"].to_string())
            .collect()
    }
}

fn write(path: &std::path::Path, content: &str) -> (&'static str, Value) {
    ("write", json!({"file_path": path, "content": content}))
}

fn bash(command: &str) -> (&'static str, Value) {
    ("bash", json!({"command": command, "description": "try it"}))
}

async fn the_added_directory_and_nothing_more(sandbox: &str) {
    let env = Env::new();
    std::os::unix::fs::symlink(&env.other, env.extra.join("leads-out")).unwrap();
    let extra = env.extra.display().to_string();
    let other = env.other.display().to_string();
    let calls = [
        write(&env.extra.join("by-write.txt"), "written"),
        bash(&format!("echo ran > {extra}/by-bash.txt && echo BASH-OK")),
        write(&env.other.join("sibling.txt"), "escaped"),
        bash(&format!("echo escaped > {other}/sibling-bash.txt")),
        write(
            &env.extra.join(".git/hooks/pre-commit"),
            "#!/bin/sh\necho pwned\n",
        ),
        bash(&format!("echo pwned > {extra}/.git/hooks/post-checkout")),
        write(&env.extra.join("leads-out/via-link.txt"), "escaped"),
        bash(&format!(
            "echo escaped > {extra}/leads-out/via-link-bash.txt"
        )),
    ];
    let provider = model_stepping(&calls, SseReply::new().text("done")).await;
    let cmd = env.run(&provider.base_url(), sandbox, &["--add-dir", &extra, "go"]);
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{sandbox}: {stderr}");
    let results = env.results();
    assert_eq!(results.len(), calls.len(), "{sandbox}: {results:#?}");
    // Allowed: the added directory, by both.
    assert_eq!(
        std::fs::read_to_string(env.extra.join("by-write.txt")).unwrap(),
        "written"
    );
    assert!(results[1].contains("BASH-OK"), "{sandbox}: {}", results[1]);
    assert_eq!(
        std::fs::read_to_string(env.extra.join("by-bash.txt")).unwrap(),
        "ran\n"
    );
    // Refused: everything else.
    for (i, path) in [
        env.other.join("sibling.txt"),
        env.other.join("sibling-bash.txt"),
        env.extra.join(".git/hooks/pre-commit"),
        env.extra.join(".git/hooks/post-checkout"),
        env.other.join("via-link.txt"),
        env.other.join("via-link-bash.txt"),
    ]
    .iter()
    .enumerate()
    {
        assert!(
            !path.exists(),
            "{sandbox}: {} was written: {}",
            path.display(),
            results[i + 2]
        );
    }
    assert!(results[2].contains("PERMISSION_DENIED"), "{}", results[2]);
    assert!(
        results[2].contains(&extra),
        "the refusal names the roots: {}",
        results[2]
    );
    // The model was told the directory is writable.
    let first = provider.requests()[0].body["messages"].to_string();
    assert!(
        first.contains("also made these directories writable"),
        "{first}"
    );
    assert!(first.contains(&extra), "{first}");
}

#[tokio::test]
async fn under_bubblewrap_the_added_directory_is_writable_and_nothing_more() {
    the_added_directory_and_nothing_more("bubblewrap").await;
}

#[tokio::test]
async fn under_landlock_the_added_directory_is_writable_and_nothing_more() {
    the_added_directory_and_nothing_more("landlock").await;
}

/// Without `--add-dir` the same directory is not writable, and under `read-only` the added one
/// is not either.
#[tokio::test]
async fn the_directory_is_writable_only_when_added_and_under_a_writing_preset() {
    let env = Env::new();
    let target = env.extra.join("file.txt");
    let calls = [write(&target, "x")];
    let provider = model_stepping(&calls, SseReply::new().text("done")).await;
    let out = output(env.run(&provider.base_url(), "bubblewrap", &["go"])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!target.exists(), "written without --add-dir");
    let provider = model_stepping(&calls, SseReply::new().text("done")).await;
    let extra = env.extra.display().to_string();
    let args = ["--add-dir", &extra, "--permission", "read-only", "go"];
    let out = output(env.run(&provider.base_url(), "bubblewrap", &args)).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!target.exists(), "written under read-only");
}

/// What may not be added is refused before anything is sent: `/`, dsh's home, a directory
/// holding dsh's home, a file, a missing path, a protected entry (`.git`, `.dsh`, a bare
/// repository).
#[tokio::test]
async fn dangerous_or_missing_directories_are_refused_up_front() {
    let env = Env::new();
    let provider = model_stepping(&[], SseReply::new().text("done")).await;
    std::fs::write(env.extra.join("a-file"), "x").unwrap();
    std::fs::create_dir_all(env.extra.join(".dsh")).unwrap();
    std::fs::create_dir_all(env.extra.join("bare.git/objects")).unwrap();
    std::fs::write(env.extra.join("bare.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let parent = env.home.parent().unwrap().display().to_string();
    let cases = [
        ("/".to_string(), "root directory"),
        (env.home.display().to_string(), "dsh's home"),
        (
            env.home.join("sessions").display().to_string(),
            "dsh's home",
        ),
        (parent, "dsh's home"),
        (
            env.extra.join("a-file").display().to_string(),
            "not a directory",
        ),
        // Protected entries: as a root of their own every file in them was writable
        // (`--add-dir .git` let `bash` plant `.git/hooks/pre-commit`).
        (
            env.extra.join(".git").display().to_string(),
            "protected entry",
        ),
        (
            env.extra.join(".git/hooks").display().to_string(),
            "protected entry",
        ),
        (
            env.extra.join(".dsh").display().to_string(),
            "protected entry",
        ),
        (
            env.extra.join("bare.git").display().to_string(),
            "protected entry",
        ),
        (
            env.extra.join("missing").display().to_string(),
            "existing directory",
        ),
    ];
    for (dir, expected) in cases {
        let _ = std::fs::create_dir_all(env.home.join("sessions"));
        let out = output(env.run(
            &provider.base_url(),
            "bubblewrap",
            &["--add-dir", &dir, "go"],
        ))
        .await;
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{dir} was accepted");
        assert!(
            stderr.contains("added directory") && stderr.contains(expected),
            "{dir}: {stderr}"
        );
    }
    assert!(provider.requests().is_empty());
}

/// A program of the user's own MCP server that lies in an added directory is where the model
/// can now write: the script gate refuses it (it was not pinned), so a model that rewrote it
/// cannot run code outside the sandbox. Without `--add-dir` the same server is started.
#[tokio::test]
async fn a_server_program_in_an_added_directory_is_refused() {
    let env = Env::new();
    let script = env.extra.join("server.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        format!("[mcp.servers.tool]\ncommand = \"{}\"\n", script.display()),
    )
    .unwrap();
    let extra = env.extra.display().to_string();
    for (added, refused) in [(false, false), (true, true)] {
        let provider = model_stepping(&[], SseReply::new().text("done")).await;
        let mut args = vec!["go"];
        if added {
            args = vec!["--add-dir", &extra, "go"];
        }
        let out = output(env.run(&provider.base_url(), "bubblewrap", &args)).await;
        let (_, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(
            stderr.contains("lies where the model can write"),
            refused,
            "added={added}: {stderr}"
        );
    }
}

/// A writable root nested in another (an added directory in the workspace, a workspace in a
/// folder of the temp directory) lies on a path a confined command may change: before the fix
/// the model moved the folder above it aside, put a symbolic link on the root's path, and the
/// next command's sandbox, which resolves paths when it sets up, made the link's target
/// writable (`/etc` as root; adversarial review of issue 42). Now every folder on that path is
/// a mount point (the move fails) and a root that no longer is its own real path refuses the
/// command.
async fn a_nested_root_cannot_be_swapped_for_a_link(sandbox: &str) {
    let env = Env::new();
    let data = env.cwd.join("sub/data");
    std::fs::create_dir_all(&data).unwrap();
    let temp = tempfile::tempdir().unwrap();
    let temp = std::fs::canonicalize(temp.path()).unwrap();
    let temp_ws = temp.join("ws");
    std::fs::create_dir_all(&temp_ws).unwrap();
    // `link` -> `target` as a relative link, which bubblewrap also follows when it sets up (an
    // absolute one it would look up outside its new root and fail on).
    let link = |target: &std::path::Path, link: &std::path::Path| {
        let depth = link.parent().unwrap().components().count() - 1;
        format!(
            "ln -s {}{} {}",
            "../".repeat(depth),
            target.strip_prefix("/").unwrap().display(),
            link.display()
        )
    };
    let other = &env.other;
    let sub = env.cwd.join("sub");
    let calls = [
        bash(&format!(
            "mv {sub} {sub}-moved; mkdir -p {sub}; {}; echo SWAPPED",
            link(other, &data),
            sub = sub.display()
        )),
        bash(&format!("echo escaped > {}/by-bash.txt", data.display())),
        write(&data.join("by-write.txt"), "escaped"),
    ];
    let provider = model_stepping(&calls, SseReply::new().text("done")).await;
    let added = data.display().to_string();
    let out = output(env.run(&provider.base_url(), sandbox, &["--add-dir", &added, "go"])).await;
    assert!(out.status.success(), "{sandbox}: {}", text(&out).1);
    let names = || -> Vec<String> {
        std::fs::read_dir(other)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert!(
        names().is_empty(),
        "{sandbox}: written outside: {:?}",
        names()
    );
    // The workspace itself, in a folder of the temp directory.
    let calls = [
        bash(&format!(
            "cd / && mv {temp} {temp}-moved; mkdir -p {temp}; {}; echo SWAPPED",
            link(other, &temp_ws),
            temp = temp.display()
        )),
        bash("echo escaped > by-bash-in-ws.txt"),
    ];
    let provider = model_stepping(&calls, SseReply::new().text("done")).await;
    let mut cmd = env.run(&provider.base_url(), sandbox, &["go"]);
    cmd.current_dir(&temp_ws);
    let out = output(cmd).await;
    assert!(out.status.success(), "{sandbox}: {}", text(&out).1);
    assert!(
        names().is_empty(),
        "{sandbox}: written outside: {:?}",
        names()
    );
    let _ = std::fs::remove_dir_all(format!("{}-moved", temp.display()));
    let _ = std::fs::remove_file(&temp_ws);
}

#[tokio::test]
async fn under_bubblewrap_a_nested_root_cannot_be_swapped_for_a_link() {
    a_nested_root_cannot_be_swapped_for_a_link("bubblewrap").await;
}

#[tokio::test]
async fn under_landlock_a_nested_root_cannot_be_swapped_for_a_link() {
    a_nested_root_cannot_be_swapped_for_a_link("landlock").await;
}
