//! `--worktree` and `dsh worktree` with the real binary, real git repositories and the scripted
//! provider (issue 43, point 4): the run works in a new worktree on a new branch beside the
//! repository, `sessions list` marks its session, removing is explicit and refused while there
//! are uncommitted changes, and the repository's hooks do not run when dsh makes the worktree.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::common::{dsh_command, git, model_stepping, output, scratch_dirs, text};

use dsh_test_support::SseReply;

struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    repo: PathBuf,
}

impl Env {
    fn new() -> Env {
        let (root, [home, repo]) = scratch_dirs(["home", "app"]);
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README"), "hello\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        Env {
            _root: root,
            home,
            repo,
        }
    }

    fn dsh(&self, args: &[&str]) -> Command {
        let mut cmd = dsh_command(&self.home, &self.repo);
        cmd.args(args);
        cmd
    }
}

#[tokio::test]
async fn a_run_in_a_worktree_and_its_explicit_removal() {
    let env = Env::new();
    let marker = env.repo.parent().unwrap().join("hook-ran");
    let hook = env.repo.join(".git/hooks/post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let worktree = env.repo.parent().unwrap().join("app.worktrees/feat");
    let provider = model_stepping(
        &[(
            "write",
            json!({"file_path": "notes.txt", "content": "made in the worktree\n"}),
        )],
        SseReply::new().text("done"),
    )
    .await;
    let mut cmd = env.dsh(&["run", "--worktree=feat", "write a note"]);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-worktree-test");
    let out = output(cmd).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("branch dsh/feat"), "{stderr}");
    assert!(!marker.exists(), "the repository's post-checkout hook ran");
    assert_eq!(
        std::fs::read_to_string(worktree.join("notes.txt")).unwrap(),
        "made in the worktree\n"
    );
    assert!(
        !env.repo.join("notes.txt").exists(),
        "written in the repository"
    );
    assert!(git(&env.repo, &["branch", "--list", "dsh/feat"]).contains("dsh/feat"));
    let context = provider.requests()[0].body["messages"].to_string();
    assert!(context.contains("app.worktrees/feat"), "{context}");

    let listed = text(&output(env.dsh(&["sessions", "list", "--all"])).await).0;
    assert!(listed.contains("[worktree feat]"), "{listed}");
    let list = text(&output(env.dsh(&["worktree", "list"])).await).0;
    assert!(
        list.contains("feat  dsh/feat") && list.contains("1 uncommitted changes"),
        "{list}"
    );

    // The same name again is refused; removing with changes is refused, then forced.
    let again = output(env.dsh(&["run", "--worktree=feat", "x"])).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again).1.contains("exists already"),
        "{}",
        text(&again).1
    );
    let refused = output(env.dsh(&["worktree", "remove", "feat"])).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused).1.contains("UNCOMMITTED_CHANGES"),
        "{}",
        text(&refused).1
    );
    assert!(worktree.join("notes.txt").exists());
    let forced = output(env.dsh(&["worktree", "remove", "feat", "--force"])).await;
    assert!(forced.status.success(), "{}", text(&forced).1);
    assert!(!worktree.exists());
    assert!(
        git(&env.repo, &["branch", "--list", "dsh/feat"]).contains("dsh/feat"),
        "the branch is kept"
    );
    let list = text(&output(env.dsh(&["worktree", "list"])).await).0;
    assert!(list.starts_with("no worktrees"), "{list}");
}

#[tokio::test]
async fn a_clean_worktree_is_removed_and_bad_names_are_refused() {
    let env = Env::new();
    let provider = model_stepping(&[], SseReply::new().text("done")).await;
    let mut cmd = env.dsh(&["run", "--worktree", "just look"]);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-worktree-test");
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let list = text(&output(env.dsh(&["worktree", "list"])).await).0;
    let name = list.split_whitespace().next().unwrap().to_string();
    assert!(
        name.starts_with("dsh-") && list.contains("(clean)"),
        "{list}"
    );
    let out = output(env.dsh(&["worktree", "remove", &name])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    for bad in ["--worktree=-x", "--worktree=a/b", "--worktree=..x"] {
        let out = output(env.dsh(&["run", bad, "x"])).await;
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            text(&out).1.contains("not a worktree name"),
            "{bad}: {}",
            text(&out).1
        );
    }
    let plain = tempfile::tempdir().unwrap();
    let mut cmd = dsh_command(&env.home, plain.path());
    cmd.args(["run", "--worktree", "x"]);
    let out = output(cmd).await;
    assert!(
        text(&out).1.contains("NOT_A_REPOSITORY"),
        "{}",
        text(&out).1
    );
}

/// A repository's configuration names programs git would run while dsh makes or removes a
/// worktree: filter drivers for the files `.gitattributes` names (one named `x=y`, which a
/// `-c filter.x=y.smudge=` override misses; one defined only for dsh's branches through
/// `includeIf "onbranch:dsh/**"`). None runs, neither when the worktree is made (smudge) nor
/// when it is removed (git's own `git status` runs the clean filter of a touched file), and
/// the files are checked out as stored. Adversarial review of issue 43: before, `git worktree
/// add` ran the smudge filter and `git worktree remove` the clean filter, unconfined, as root.
#[tokio::test]
async fn a_planted_filter_driver_never_runs_making_or_removing_a_worktree() {
    let env = Env::new();
    let scratch = env.repo.parent().unwrap().to_path_buf();
    let marker = |what: &str| scratch.join(format!("{what}-ran"));
    let program = |what: &str| format!("sh -c 'touch {}; cat'", marker(what).display());
    std::fs::write(
        env.repo.join(".gitattributes"),
        "a.txt filter=evil\nb.txt filter=x=y\nc.txt filter=branch\n",
    )
    .unwrap();
    for file in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(env.repo.join(file), format!("{file}\n")).unwrap();
    }
    git(&env.repo, &["add", "."]);
    git(&env.repo, &["commit", "-q", "-m", "filtered files"]);
    let included = scratch.join("branch.cfg");
    std::fs::write(
        &included,
        format!("[filter \"branch\"]\n\tsmudge = {}\n", program("branch")),
    )
    .unwrap();
    for (key, value) in [
        ("filter.evil.smudge", program("smudge")),
        ("filter.evil.clean", program("clean")),
        ("filter.evil.required", "true".to_string()),
        ("filter.x=y.smudge", program("equals")),
        ("filter.x=y.clean", program("equals")),
        (
            "includeIf.onbranch:dsh/**.path",
            included.display().to_string(),
        ),
    ] {
        git(&env.repo, &["config", key, &value]);
    }
    let provider = model_stepping(&[], SseReply::new().text("done")).await;
    let mut cmd = env.dsh(&["run", "--worktree=filtered", "look"]);
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-worktree-test");
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let worktree = scratch.join("app.worktrees/filtered");
    for file in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(
            std::fs::read_to_string(worktree.join(file)).unwrap(),
            format!("{file}\n"),
            "{file} is not as stored"
        );
    }
    for what in ["smudge", "clean", "equals", "branch"] {
        assert!(
            !marker(what).exists(),
            "making the worktree ran the repository's {what} filter"
        );
    }
    // Files newer than git's record make `git worktree remove` compare their content, through
    // the clean filter.
    for file in ["a.txt", "b.txt"] {
        let f = std::fs::File::options()
            .write(true)
            .open(worktree.join(file))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
            .unwrap();
    }
    let out = output(env.dsh(&["worktree", "remove", "filtered"])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!worktree.exists());
    for what in ["smudge", "clean", "equals", "branch"] {
        assert!(
            !marker(what).exists(),
            "removing the worktree ran the repository's {what} filter"
        );
    }
}

/// A repository under `/tmp`, which the read-only sandbox replaces with its own: the state of
/// its worktree is still read (the sandbox's root is the folder holding the worktree and the
/// repository), so `list` counts a change and `remove` refuses, then removes with `--force`.
/// Before, the worktree's git could not see the repository's `.git` there: `list` said "state
/// unknown" and `remove` failed even with `--force`.
#[tokio::test]
async fn a_worktree_of_a_repository_under_tmp_is_listed_and_removed() {
    let scratch = tempfile::tempdir_in("/tmp").unwrap();
    let scratch = std::fs::canonicalize(scratch.path()).unwrap();
    let (home, repo) = (scratch.join("home"), scratch.join("app"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let provider = model_stepping(&[], SseReply::new().text("done")).await;
    let mut cmd = dsh_command(&home, &repo);
    cmd.args(["run", "--worktree=tmp", "look"])
        .env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-worktree-test");
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out).1);
    std::fs::write(scratch.join("app.worktrees/tmp/README"), "changed\n").unwrap();
    let dsh = |args: &[&str]| {
        let mut cmd = dsh_command(&home, &repo);
        cmd.args(args);
        cmd
    };
    let list = text(&output(dsh(&["worktree", "list"])).await).0;
    assert!(list.contains("(1 uncommitted changes)"), "{list}");
    let refused = output(dsh(&["worktree", "remove", "tmp"])).await;
    assert!(
        text(&refused).1.contains("UNCOMMITTED_CHANGES"),
        "{}",
        text(&refused).1
    );
    let forced = output(dsh(&["worktree", "remove", "tmp", "--force"])).await;
    assert!(forced.status.success(), "{}", text(&forced).1);
    assert!(!scratch.join("app.worktrees/tmp").exists());
}
