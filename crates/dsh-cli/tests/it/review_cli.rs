//! `dsh review` with the real binary, real git repositories and the scripted provider (issue
//! 43, point 2): the diff of the uncommitted changes, of a branch against its base and of one
//! commit reaches a read-only session, the findings come back as text and as JSON, and a
//! repository's configuration cannot make the diff run anything.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{dsh_command, git, output, scratch_dirs, text};

use dsh_test_support::{FakeProvider, ScriptedReply, SseReply, WireUsage};

fn reply(text: &str) -> ScriptedReply {
    SseReply::new()
        .text(text)
        .finish("stop", Some(WireUsage::default()))
        .into()
}

fn findings() -> String {
    json!({
        "summary": "The change adds a parser with one off-by-one.",
        "findings": [{
            "file": "src/lib.rs", "line": 3, "priority": "P1",
            "title": "Off-by-one in the loop bound",
            "body": "The loop reads one item past the end.",
            "suggested_fix": "Use `<` instead of `<=`."
        }]
    })
    .to_string()
}

struct Repo {
    _root: tempfile::TempDir,
    home: PathBuf,
    dir: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let (root, [home, dir]) = scratch_dirs(["home", "repo"]);
        git(&dir, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "fn f() {\n    let n = 1;\n}\n").unwrap();
        git(&dir, &["add", "."]);
        git(&dir, &["commit", "-q", "-m", "first"]);
        Repo {
            _root: root,
            home,
            dir,
        }
    }

    fn review(&self, provider: &FakeProvider, args: &[&str]) -> Command {
        let mut cmd = dsh_command(&self.home, &self.dir);
        cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
            .env("DEEPSEEK_API_KEY", "sk-review-test")
            .arg("review")
            .args(args);
        cmd
    }
}

fn user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn uncommitted_changes_are_reviewed_read_only_and_printed() {
    let repo = Repo::new();
    std::fs::write(
        repo.dir.join("src/lib.rs"),
        "fn f() {\n    for i in 0..=n {}\n}\n",
    )
    .unwrap();
    std::fs::write(repo.dir.join("src/new.rs"), "pub fn g() {}\n").unwrap();
    let provider = FakeProvider::start([reply(&findings()), reply(&findings())])
        .await
        .unwrap();
    let out = output(repo.review(&provider, &["the loop bounds"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("The change adds a parser"), "{stdout}");
    assert!(
        stdout.contains("P1  src/lib.rs:3  Off-by-one in the loop bound"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    fix:\n      Use `<` instead of `<=`."),
        "{stdout}"
    );
    let body = &provider.requests()[0].body;
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("# Code review") && system.contains("\"priority\""),
        "{system}"
    );
    let task = user_text(body);
    assert!(
        task.contains("0..=n") && task.contains("src/new.rs"),
        "{task}"
    );
    assert!(task.contains("the loop bounds"), "{task}");
    assert!(task.contains("permissions: read-only"), "{task}");

    let out = output(repo.review(&provider, &["--json"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(line["type"], "review");
    assert_eq!(line["findings"][0]["line"], 3);
    assert!(
        line["sessionId"].is_string() && line["usage"]["requests"] == 1,
        "{line}"
    );
}

#[tokio::test]
async fn a_branch_and_a_commit_are_reviewed_by_their_own_diff() {
    let repo = Repo::new();
    git(&repo.dir, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(repo.dir.join("src/lib.rs"), "fn f() {\n    let n = 2;\n}\n").unwrap();
    git(&repo.dir, &["commit", "-q", "-am", "two"]);
    let sha = git(&repo.dir, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(repo.dir.join("src/lib.rs"), "fn f() {\n    let n = 3;\n}\n").unwrap();
    git(&repo.dir, &["commit", "-q", "-am", "three"]);
    let provider = FakeProvider::start([reply(&findings()), reply(&findings())])
        .await
        .unwrap();
    let out = output(repo.review(&provider, &["--base", "main"])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let out = output(repo.review(&provider, &["--commit", &sha[..10]])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let requests = provider.requests();
    let base = user_text(&requests[0].body);
    assert!(
        base.contains("-    let n = 1;") && base.contains("+    let n = 3;"),
        "{base}"
    );
    let commit = user_text(&requests[1].body);
    assert!(
        commit.contains("-    let n = 1;") && commit.contains("+    let n = 2;"),
        "{commit}"
    );
    assert!(!commit.contains("let n = 3"), "{commit}");
}

#[tokio::test]
async fn refusals_and_nothing_to_review() {
    let repo = Repo::new();
    let provider = FakeProvider::start([]).await.unwrap();
    let out = output(repo.review(&provider, &[])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nothing to review") && stdout.contains("no findings"),
        "{stdout}"
    );
    for (args, expected) in [
        (&["--base=--upload-pack=x"][..], "INVALID_ARGS"),
        (&["--base", "nosuch"][..], "no branch or commit `nosuch`"),
        (&["--permission", "workspace-write"][..], "runs read-only"),
    ] {
        let out = output(repo.review(&provider, args)).await;
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let plain = tempfile::tempdir().unwrap();
    let mut cmd = dsh_command(&repo.home, plain.path());
    cmd.env("DEEPSEEK_BASE_URL", provider.base_url())
        .env("DEEPSEEK_API_KEY", "sk-review-test")
        .arg("review");
    let out = output(cmd).await;
    assert!(
        text(&out).1.contains("NOT_A_REPOSITORY"),
        "{}",
        text(&out).1
    );
    assert!(provider.requests().is_empty());
}

/// A repository planted to run a program when its diff is taken (a clean filter on every file,
/// an fsmonitor hook, an external diff driver): the review's git runs none of them, and the
/// marker they would write stays absent.
#[tokio::test]
async fn a_planted_repository_runs_nothing_when_reviewed() {
    let repo = Repo::new();
    let (_outside, [marks]) = scratch_dirs(["marks"]);
    let marker = marks.join("ran");
    let script = format!("touch {}", marker.display());
    git(
        &repo.dir,
        &[
            "config",
            "filter.evil.clean",
            &format!("sh -c '{script}; cat'"),
        ],
    );
    git(&repo.dir, &["config", "filter.evil.required", "true"]);
    git(
        &repo.dir,
        &["config", "core.fsmonitor", &format!("sh -c '{script}'")],
    );
    git(
        &repo.dir,
        &["config", "diff.external", &format!("sh -c '{script}'")],
    );
    std::fs::write(repo.dir.join(".gitattributes"), "* filter=evil\n").unwrap();
    std::fs::write(repo.dir.join("src/lib.rs"), "fn f() {}\n").unwrap();
    let provider = FakeProvider::start([reply(&findings())]).await.unwrap();
    let out = output(repo.review(&provider, &[])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!marker.exists(), "the planted repository ran a program");
    assert!(user_text(&provider.requests()[0].body).contains("-    let n = 1;"));
}

/// A filter driver whose name holds `=` (`filter "x=y"`, named by `.gitattributes` as
/// `filter=x=y`): git splits a `-c` override at its first `=`, so `-c filter.x=y.clean=` left
/// it in place and the review's `git diff` ran it (in the read-only sandbox, where what it
/// could do was print: its output became the diff the model read). Adversarial review of issue
/// 43: dsh's overrides now travel in `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`, and no
/// filter of the repository runs, whatever its name.
#[tokio::test]
async fn a_filter_named_with_an_equals_sign_is_emptied_too() {
    let repo = Repo::new();
    git(
        &repo.dir,
        &["config", "filter.x=y.clean", "sh -c 'echo FILTER-RAN'"],
    );
    git(&repo.dir, &["config", "filter.x=y.required", "true"]);
    std::fs::write(repo.dir.join(".gitattributes"), "src/lib.rs filter=x=y\n").unwrap();
    std::fs::write(repo.dir.join("src/lib.rs"), "fn f() {}\n").unwrap();
    let provider = FakeProvider::start([reply(&findings())]).await.unwrap();
    let out = output(repo.review(&provider, &[])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let task = user_text(&provider.requests()[0].body);
    assert!(!task.contains("FILTER-RAN"), "a filter ran: {task}");
    assert!(task.contains("-    let n = 1;"), "{task}");
}

/// The diff is dsh reading files for the model, so it hides what `read` hides (adversarial
/// review of issue 43): a tracked `.env` whose change holds dsh's own key (from the
/// environment) and a key dsh loaded from `./.env` reaches neither the request, the session
/// log nor stdout. Before, the review's task carried the diff as it was.
#[tokio::test]
async fn the_diff_given_to_the_model_hides_dshs_secrets() {
    let repo = Repo::new();
    std::fs::write(repo.dir.join(".env"), "OTHER=1\n").unwrap();
    git(&repo.dir, &["add", ".env"]);
    git(&repo.dir, &["commit", "-q", "-m", "env"]);
    std::fs::write(
        repo.dir.join(".env"),
        "OTHER=1\nDEEPSEEK_API_KEY=sk-review-test\nANTHROPIC_API_KEY=sk-ant-from-dotenv-4242\n",
    )
    .unwrap();
    let provider = FakeProvider::start([reply(&findings())]).await.unwrap();
    let out = output(repo.review(&provider, &[])).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let task = user_text(&provider.requests()[0].body);
    assert!(task.contains("OTHER=1"), "{task}");
    for secret in ["sk-review-test", "sk-ant-from-dotenv-4242"] {
        assert!(!task.contains(secret), "{secret} sent: {task}");
        for file in crate::common::session_files(&repo.home) {
            let log = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(
                !log.contains(secret),
                "{secret} logged in {}",
                file.display()
            );
        }
        assert!(!text(&out).0.contains(secret));
    }
}
