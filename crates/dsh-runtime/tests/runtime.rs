//! The composition root end to end: real configuration files in a temp home, the fake provider
//! over loopback, real session files. Credentials and the provider address come from
//! `$DSH_HOME/.env`, so the tests change no process environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    // DeepSeek's own endpoint needs the key (another one would be called without).
    let setup = Setup::new("https://api.deepseek.com", None);
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

/// `web_search` end to end (docs/tools.md, "web_search"): on because a DeepSeek key is set;
/// `DEEPSEEK_SEARCH_BASE_URL` (not `DEEPSEEK_BASE_URL`) routes the search; the auxiliary
/// request is logged without the key before the tool result, and its usage counts in the
/// session's usage (and so its cost).
#[tokio::test]
async fn web_search_is_logged_without_the_key_and_counted_in_the_session_usage() {
    use dsh_test_support::web_search::{search_reply, SearchHit, SEARCH_REPLY_USAGE};
    const KEY: &str = "sk-runtime-search-key";
    const QUERY: &str = "DeepSeek Harness snapshot search";
    let chat = FakeProvider::start([
        sse_reply_from_chunks(&chunks::tool_call(
            "call_web_search",
            "web_search",
            &format!("{{\"queries\":[\"{QUERY}\"]}}"),
        ))
        .into(),
        text_reply("done"),
    ])
    .await
    .unwrap();
    let search = FakeProvider::start(Vec::<ScriptedReply>::new())
        .await
        .unwrap();
    search.answer_search(
        QUERY,
        search_reply(
            QUERY,
            &[SearchHit::new(
                "https://docs.example.test/search/1/1",
                "Snapshot Search 1 Result 1",
                "An excerpt.",
                "2026-07-01",
            )],
        ),
    );
    let setup = Setup::new(&chat.base_url(), Some(KEY));
    let mut env = std::fs::read_to_string(setup.home.path().join(".env")).unwrap();
    env.push_str(&format!("DEEPSEEK_SEARCH_BASE_URL={}\n", search.base_url()));
    std::fs::write(setup.home.path().join(".env"), env).unwrap();
    let runtime = setup.runtime(full_access());
    let id = one_turn(&runtime, &SessionSpec::default(), "search it").await;

    // The chat model was offered the tool and read the sources.
    let chat_requests = chat.requests();
    assert_eq!(chat_requests.len(), 2);
    assert!(chat_requests[0].body["tools"]
        .to_string()
        .contains("\"web_search\""));
    let second = chat_requests[1].body.to_string();
    assert!(
        second.contains("[Snapshot Search 1 Result 1](https://docs.example.test/search/1/1)"),
        "{second}"
    );
    // The search went to the search base, with the key in its headers only.
    let searches = search.requests();
    assert_eq!(searches.len(), 1);
    assert_eq!(searches[0].path, "/messages");
    assert_eq!(searches[0].header("x-api-key"), Some(KEY));

    let store = runtime.store();
    let loaded = store.load(&id).unwrap();
    let position = |wanted: &dyn Fn(&Event) -> bool| {
        loaded.events.iter().position(|e| wanted(&e.event)).unwrap()
    };
    let logged = position(&|e| e.event_type() == dsh_tools::SEARCH_REQUEST_EVENT);
    let result = position(&|e| matches!(e, Event::ToolResult(_)));
    assert!(logged < result, "the request is logged before the result");
    let Event::Opaque { data, .. } = &loaded.events[logged].event else {
        panic!("not opaque")
    };
    assert_eq!(data["body"], searches[0].body);
    assert_eq!(
        data["endpoint"],
        serde_json::json!(format!("{}/messages", search.base_url()))
    );
    assert!(!data.to_string().contains(KEY));
    // No file under the home but `.env` holds the key (session logs, spill files).
    let mut dirs = vec![setup.home.path().to_path_buf()];
    let mut files = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n != ".env") {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(KEY),
                    "the key reached {}",
                    path.display()
                );
            }
        }
    }
    assert!(files > 0, "no session file was written");

    // Usage: the chat replies plus the search request, under the search model.
    let summary = store
        .list(&dsh_session::ListFilter::default())
        .unwrap()
        .sessions
        .into_iter()
        .find(|s| s.id == id)
        .unwrap();
    let search_usage = summary.usage_by_model.get("deepseek-v4-flash").unwrap();
    // The scripted chat replies carry no usage: this is the search request's alone.
    assert_eq!(search_usage.requests, 1, "{search_usage:?}");
    assert_eq!(search_usage.usage.input_tokens, SEARCH_REPLY_USAGE.0);
    assert_eq!(search_usage.usage.output_tokens, SEARCH_REPLY_USAGE.1);
    assert!(summary
        .cost(&dsh_session::PriceTable::default_deepseek())
        .is_some());
}

/// `[tools.glob]` and `[tools.grep]` of the user's file reach the tools the model is offered:
/// their caps are in the descriptions sent with the request.
#[tokio::test]
async fn search_tool_settings_reach_the_tool_descriptions() {
    let provider = FakeProvider::start([text_reply("done")]).await.unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    std::fs::write(
        setup.home.path().join("config.toml"),
        "[tools.glob]\nmax_results = 7\nsample_over_cap = false\n[tools.grep]\nmax_results = 9\n",
    )
    .unwrap();
    let runtime = setup.runtime(full_access());
    one_turn(&runtime, &SessionSpec::default(), "say done").await;
    let requests = provider.requests();
    let tools = requests[0].body["tools"].as_array().unwrap();
    let description = |name: &str| {
        tools
            .iter()
            .find(|t| t["function"]["name"] == name)
            .map(|t| t["function"]["description"].as_str().unwrap().to_string())
            .unwrap()
    };
    let glob = description("glob");
    assert!(glob.contains("the 7 newest are shown"), "{glob}");
    assert!(!glob.contains("top-level entry"), "{glob}");
    assert!(description("grep").contains("At most 9 matches"));
    // The escalation parameters are offered on bash.
    let bash = tools
        .iter()
        .find(|t| t["function"]["name"] == "bash")
        .unwrap();
    assert!(bash["function"]["parameters"]["properties"]["sandbox_permissions"].is_object());
}

/// Opening a session opens its provider connection while the session is built, and the
/// sessions of one runtime share their connections (docs/providers.md, "Shared connections
/// and preconnect"): two sessions, one after the other, cost one connection and one preconnect.
#[tokio::test]
async fn sessions_of_a_runtime_preconnect_once_and_share_the_connection() {
    let provider = FakeProvider::start([text_reply("done"), text_reply("done")])
        .await
        .unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    let runtime = setup.runtime(full_access());
    let store = runtime.store();
    let opened = runtime
        .open(&SessionSpec::default(), store.as_ref())
        .unwrap();
    provider
        .wait_until(|events| events.head_requests == 1)
        .await;
    // The pool gets the connection back once the answer is read.
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    drop(opened);
    one_turn(&runtime, &SessionSpec::default(), "say done").await;
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    one_turn(&runtime, &SessionSpec::default(), "say done").await;
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.requests, events.connections),
        (1, 2, 1),
        "{events:?}"
    );
}

/// An opened session's [`dsh_runtime::Preconnector`] opens the connection again for a front
/// end that expects a call soon (the TUI when the user starts typing), through the runtime's
/// pool; the window in which a used origin is left alone (30 s) is shortened here.
#[tokio::test]
async fn an_opened_session_warms_its_connection_again() {
    let provider = FakeProvider::start([text_reply("done")]).await.unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    let window = std::time::Duration::from_secs(1);
    let client = dsh_http::HttpClient::new(dsh_http::DEFAULT_CONNECT_TIMEOUT)
        .unwrap()
        .with_recent_use(window);
    let runtime = setup.runtime(full_access()).with_http_client(client);
    let store = runtime.store();
    let opened = runtime
        .open(&SessionSpec::default(), store.as_ref())
        .unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        provider.wait_until(|events| events.head_requests == 1),
    )
    .await
    .expect("opening the session preconnects");
    opened.preconnect.warm();
    tokio::time::sleep(window + std::time::Duration::from_millis(50)).await;
    opened.preconnect.warm();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        provider.wait_until(|events| events.head_requests == 2),
    )
    .await
    .expect("a warm-up after the window sends a second preconnect");
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.connections),
        (2, 1),
        "{events:?}"
    );
    // A session of a provider with `preconnect = false` has nothing to warm.
    std::fs::write(
        setup.home.path().join("config.toml"),
        "[providers.deepseek]\npreconnect = false\n",
    )
    .unwrap();
    let quiet = setup.runtime(full_access()).with_http_client(
        dsh_http::HttpClient::new(dsh_http::DEFAULT_CONNECT_TIMEOUT)
            .unwrap()
            .with_recent_use(std::time::Duration::ZERO),
    );
    let opened = quiet.open(&SessionSpec::default(), store.as_ref()).unwrap();
    opened.preconnect.warm();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        provider.events().head_requests,
        2,
        "{:?}",
        provider.events()
    );
}

/// `preconnect = false` in a provider's table turns it off.
#[tokio::test]
async fn a_provider_can_turn_the_preconnect_off() {
    let provider = FakeProvider::start([text_reply("done")]).await.unwrap();
    let setup = Setup::new(&provider.base_url(), Some("sk-runtime-test-key"));
    std::fs::write(
        setup.home.path().join("config.toml"),
        "[providers.deepseek]\npreconnect = false\n",
    )
    .unwrap();
    let runtime = setup.runtime(full_access());
    one_turn(&runtime, &SessionSpec::default(), "say done").await;
    let events = provider.events();
    assert_eq!(
        (events.head_requests, events.requests),
        (0, 1),
        "{events:?}"
    );
}
