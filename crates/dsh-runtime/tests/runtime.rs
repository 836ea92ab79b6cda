//! The composition root end to end: real configuration files in a temp home, the fake provider
//! over loopback, real session files. Credentials and the provider address come from
//! `$DSH_HOME/.env`, so the tests change no process environment.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_runtime::{
    Choices, Resume, Runtime, RuntimeError, RuntimeOptions, SessionSpec, WarningSink,
};
use dsh_session::Event;
use dsh_test_support::{chunks, sse_reply_from_chunks, FakeProvider, ScriptedReply};

struct Setup {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl Setup {
    /// A home whose `.env` points the built-in `deepseek` provider at `base_url` (with a key
    /// unless `key` is `None`).
    fn new(base_url: &str, key: Option<&str>) -> Setup {
        let home = tempfile::tempdir().unwrap();
        let mut env = format!("DEEPSEEK_BASE_URL={base_url}\n");
        if let Some(key) = key {
            env.push_str(&format!("DEEPSEEK_API_KEY={key}\n"));
        }
        std::fs::write(home.path().join(".env"), env).unwrap();
        Setup {
            home,
            cwd: tempfile::tempdir().unwrap(),
            warnings: Arc::default(),
        }
    }

    fn runtime(&self, choices: Choices) -> Runtime {
        let said = Arc::clone(&self.warnings);
        let warnings: WarningSink = Arc::new(move |line: &str| {
            said.lock().unwrap().push(line.to_string());
        });
        Runtime::new(RuntimeOptions {
            home: self.home.path().to_path_buf(),
            cwd: self.cwd.path().to_path_buf(),
            choices,
            warnings,
        })
        .unwrap()
    }
}

fn full_access() -> Choices {
    Choices {
        permission: Some("danger-full-access".into()),
        ..Choices::default()
    }
}

fn text_reply(text: &str) -> ScriptedReply {
    sse_reply_from_chunks(&chunks::text(text)).into()
}

/// Runs one turn with `prompt` on a freshly opened session and returns its id.
async fn one_turn(runtime: &Runtime, spec: &SessionSpec, prompt: &str) -> String {
    let store = runtime.store();
    let mut opened = runtime.open(spec, store.as_ref()).unwrap();
    let handle = opened.agent.handle();
    handle.followup(prompt).unwrap();
    let outcomes = opened.agent.run_until_idle().await.unwrap();
    assert_eq!(outcomes.last().unwrap().final_text, "done");
    handle.session_id()
}

fn logged_presets(home: &Path, id: &str) -> Vec<String> {
    let store = dsh_session::JsonlStore::new(home);
    let loaded = dsh_session::SessionStore::load(&store, id).unwrap();
    loaded
        .events
        .iter()
        .filter_map(|envelope| match &envelope.event {
            Event::Opaque { event_type, data }
                if event_type == dsh_agent::PERMISSION_PRESET_EVENT =>
            {
                data["preset"].as_str().map(ToString::to_string)
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn new_session_reaches_the_provider_with_the_specs_model_and_preset() {
    let provider = FakeProvider::start([text_reply("done")]).await.unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    let runtime = setup.runtime(Choices {
        model: Some("deepseek-v4-flash".into()),
        ..full_access()
    });
    // The session's own choices win over the process's flags.
    let spec = SessionSpec {
        choices: Choices {
            model: Some("deepseek-v4-pro".into()),
            permission: Some("read-only".into()),
            ..Choices::default()
        },
        ..SessionSpec::default()
    };
    let id = one_turn(&runtime, &spec, "say done").await;

    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "one model call, no title call");
    let body = &requests[0].body;
    assert_eq!(body["model"], "deepseek-v4-pro");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-runtime-test-key")
    );
    // The model reads the permission summary the runtime wrote for the preset.
    let request_text = body.to_string();
    assert!(
        request_text.contains("read-only: files cannot be modified"),
        "{request_text}"
    );
    assert_eq!(logged_presets(setup.home.path(), &id), ["read-only"]);
    // The session lives in the runtime's working directory.
    let store = runtime.store();
    let loaded = store.load(&id).unwrap();
    let cwd = std::fs::canonicalize(setup.cwd.path()).unwrap();
    assert_eq!(loaded.header.cwd, cwd.to_string_lossy());
}

#[tokio::test]
async fn resume_by_id_and_latest_continue_the_same_session_with_history() {
    let provider = FakeProvider::start([text_reply("done"), text_reply("done")])
        .await
        .unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    let runtime = setup.runtime(full_access());
    let first = one_turn(&runtime, &SessionSpec::default(), "first prompt").await;

    // By id, asking for the history (ACP's `session/load`).
    let store = runtime.store();
    let by_id = runtime
        .open(
            &SessionSpec {
                resume: Resume::Id(first.clone()),
                history: true,
                ..SessionSpec::default()
            },
            store.as_ref(),
        )
        .unwrap();
    assert_eq!(by_id.agent.handle().session_id(), first);
    assert!(
        by_id
            .history
            .iter()
            .any(|e| matches!(&e.event, Event::UserMessage(_))),
        "history carries the first turn"
    );
    drop(by_id);

    // The latest session of the directory, without history; its next turn sends the first.
    let spec = SessionSpec {
        resume: Resume::Latest,
        ..SessionSpec::default()
    };
    let latest = one_turn(&runtime, &spec, "second prompt").await;
    assert_eq!(latest, first);
    let second_request = provider.requests()[1].body.to_string();
    assert!(second_request.contains("first prompt"), "{second_request}");
    assert!(second_request.contains("second prompt"), "{second_request}");
}

#[tokio::test]
async fn model_titles_make_one_more_call_when_the_spec_asks() {
    // The title call runs alongside the turn, so either may take either reply.
    let provider = FakeProvider::start([text_reply("done"), text_reply("done")])
        .await
        .unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    let runtime = setup.runtime(full_access());
    let spec = SessionSpec {
        model_titles: true,
        ..SessionSpec::default()
    };
    one_turn(&runtime, &spec, "write the title please").await;
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        provider.wait_until(|events| events.requests >= 2),
    )
    .await
    .expect("the title call reaches the provider");
    let titled = provider
        .requests()
        .iter()
        .filter(|r| {
            r.body
                .to_string()
                .contains("You name coding-assistant sessions")
        })
        .count();
    assert_eq!(titled, 1, "exactly one request is the title call");
}

#[test]
fn configuration_is_resolved_once_per_workspace_and_choices() {
    let setup = Setup::new("http://127.0.0.1:9", Some("sk-runtime-test-key"));
    let runtime = setup.runtime(full_access());
    let first = runtime.configuration(&SessionSpec::default()).unwrap();
    let again = runtime
        .configuration(&SessionSpec {
            cwd: Some(setup.cwd.path().to_path_buf()),
            ..SessionSpec::default()
        })
        .unwrap();
    assert!(Arc::ptr_eq(&first, &again), "same workspace, same choices");
    let other_model = runtime
        .configuration(&SessionSpec {
            choices: Choices {
                model: Some("deepseek-v4-pro".into()),
                ..Choices::default()
            },
            ..SessionSpec::default()
        })
        .unwrap();
    assert!(!Arc::ptr_eq(&first, &other_model));
    assert_eq!(other_model.call.model, "deepseek-v4-pro");
    assert_eq!(first.permission.to_string(), "danger-full-access");
}

#[test]
fn failures_carry_their_codes() {
    let setup = Setup::new("http://127.0.0.1:9", None);
    let runtime = setup.runtime(full_access());
    let store = runtime.store();
    let missing = runtime
        .open(&SessionSpec::default(), store.as_ref())
        .err()
        .unwrap();
    assert!(matches!(missing, RuntimeError::MissingCredential(_)));
    assert_eq!(missing.code(), "MISSING_CREDENTIAL");
    assert!(missing.describe().starts_with("MISSING_CREDENTIAL: "));

    let bad_effort = runtime
        .configuration(&SessionSpec {
            choices: Choices {
                effort: Some("enormous".into()),
                ..Choices::default()
            },
            ..SessionSpec::default()
        })
        .err()
        .unwrap();
    assert_eq!(bad_effort.code(), "INVALID_CONFIG", "{bad_effort}");

    let gone = runtime
        .configuration(&SessionSpec {
            cwd: Some(setup.cwd.path().join("no-such-dir")),
            ..SessionSpec::default()
        })
        .err()
        .unwrap();
    assert_eq!(gone.code(), "INVALID_CWD");
    assert!(gone.to_string().contains("does not exist"), "{gone}");

    let keyed = Setup::new("http://127.0.0.1:9", Some("sk-runtime-test-key"));
    let runtime = keyed.runtime(full_access());
    let store = runtime.store();
    let nothing = runtime
        .open(
            &SessionSpec {
                resume: Resume::Latest,
                ..SessionSpec::default()
            },
            store.as_ref(),
        )
        .err()
        .unwrap();
    assert_eq!(nothing.code(), "NOT_FOUND", "{nothing}");
}

#[test]
fn untrusted_project_settings_are_reported_once_per_process() {
    let setup = Setup::new("http://127.0.0.1:9", Some("sk-runtime-test-key"));
    std::fs::create_dir(setup.cwd.path().join(".dsh")).unwrap();
    std::fs::write(
        setup.cwd.path().join(".dsh/config.toml"),
        "permission = \"danger-full-access\"\n",
    )
    .unwrap();
    let runtime = setup.runtime(Choices::default());
    let first = runtime.configuration(&SessionSpec::default()).unwrap();
    // Left out: the project cannot widen the preset without trust.
    assert_eq!(first.permission.to_string(), "workspace-write");
    runtime
        .configuration(&SessionSpec {
            choices: Choices {
                model: Some("deepseek-v4-pro".into()),
                ..Choices::default()
            },
            ..SessionSpec::default()
        })
        .unwrap();
    let warnings = setup.warnings.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("config.toml"), "{warnings:?}");

    // `--trust-workspace` applies them.
    let trusted = setup.runtime(Choices {
        trust_workspace: true,
        ..Choices::default()
    });
    let applied = trusted.configuration(&SessionSpec::default()).unwrap();
    assert_eq!(applied.permission.to_string(), "danger-full-access");
}
