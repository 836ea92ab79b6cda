//! Workspace trust through the web API (docs/web.md, "Workspace trust"), over a real
//! `dsh_runtime::Runtime` (the factory `dsh web` uses), a real temp home and workspace with a
//! planted `.dsh/config.toml` and `.dsh/hooks.json`, and the fake provider on loopback.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{sign_in, text};
use dsh_runtime::{Choices, Runtime, RuntimeOptions, WarningSink};
use dsh_server::{ServerOptions, WebServer};
use dsh_session::StoreKind;
use dsh_test_support::FakeProvider;
use serde_json::{json, Value};

struct Planted {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    marker: PathBuf,
}

/// A home whose `.env` points the built-in provider at `base_url`, and a git workspace whose
/// project files ask for `danger-full-access` and run a hook on every prompt.
fn plant(base_url: &str) -> Planted {
    let root = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(root.path()).unwrap();
    let (home, ws) = (real.join("home"), real.join("ws"));
    for dir in [&home, &ws.join(".git"), &ws.join(".dsh")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(
        home.join(".env"),
        format!("DEEPSEEK_BASE_URL={base_url}\nDEEPSEEK_API_KEY=sk-trust-test\n"),
    )
    .unwrap();
    let marker = real.join("hook-ran");
    std::fs::write(
        ws.join(".dsh/config.toml"),
        "permission = \"danger-full-access\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join(".dsh/hooks.json"),
        format!(
            r#"{{"hooks": {{"UserPromptSubmit": [{{"hooks": [{{"type": "command", "command": "touch {}"}}]}}]}}}}"#,
            marker.display()
        ),
    )
    .unwrap();
    std::fs::write(ws.join(".env"), "SOME_TOKEN=x\n").unwrap();
    Planted {
        _root: root,
        home,
        ws,
        marker,
    }
}

fn encode(path: &Path) -> String {
    path.to_string_lossy()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

async fn json(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.json::<Value>().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn the_web_ui_reviews_and_trusts_planted_settings_only_at_the_pin_shown() {
    let provider = FakeProvider::start(vec![text("done")]).await.unwrap();
    let env = plant(&provider.base_url());
    let warnings: WarningSink = Arc::new(|_: &str| {});
    let runtime = Arc::new(
        Runtime::new(RuntimeOptions {
            home: env.home.clone(),
            cwd: env.ws.clone(),
            choices: Choices::default(),
            warnings,
        })
        .unwrap(),
    );
    let listener = dsh_server::bind("127.0.0.1:0".parse().unwrap(), false)
        .await
        .unwrap();
    let server = WebServer::start(
        listener,
        ServerOptions {
            home: env.home.clone(),
            store: StoreKind::Jsonl,
            prices: dsh_session::PriceTable::default_deepseek(),
            default_cwd: env.ws.clone(),
            allow_remote: false,
        },
        runtime,
    )
    .unwrap();
    let base = format!("http://127.0.0.1:{}", server.address().port());
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let token = sign_in(&client, &server.url()).await;
    let trust_url = format!("{base}/api/trust?cwd={}", encode(&env.ws));

    // Without the sign-in: 401 for both, and nothing recorded.
    let (status, _) = json(client.get(&trust_url)).await;
    assert_eq!(status, 401);
    let (status, _) = json(
        client
            .post(format!("{base}/api/trust"))
            .json(&json!({"cwd": env.ws, "pin": "sha256:00", "confirm": true})),
    )
    .await;
    assert_eq!(status, 401);

    // The configuration of the workspace is resolved (and cached) untrusted first.
    let (status, _) = json(client.get(format!("{base}/api/info")).bearer_auth(&token)).await;
    assert_eq!(status, 200);

    // A session opened untrusted runs under the default preset, not the planted one.
    let (status, body) = json(
        client
            .post(format!("{base}/api/sessions"))
            .bearer_auth(&token)
            .json(&json!({"cwd": env.ws})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let before = body["id"].as_str().unwrap().to_string();
    let detail_of = |id: &str| {
        client
            .get(format!("{base}/api/sessions/{id}"))
            .bearer_auth(&token)
    };
    let (_, detail) = json(detail_of(&before)).await;
    assert_eq!(detail["permission"], "workspace-write", "{detail}");

    // Untrusted: the review names the permission and the hook command exactly.
    let (status, review) = json(client.get(&trust_url).bearer_auth(&token)).await;
    assert_eq!(status, 200, "{review}");
    assert_eq!(review["needsTrust"], true, "{review}");
    assert_eq!(review["trusted"], false);
    assert_eq!(review["workspace"], env.ws.to_string_lossy().as_ref());
    let files = review["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{review}");
    assert_eq!(files[0]["kind"], "config");
    assert_eq!(
        files[0]["lines"],
        json!(["permission = \"danger-full-access\""])
    );
    assert_eq!(files[1]["kind"], "hooks");
    assert_eq!(
        files[1]["lines"],
        json!([format!(
            "UserPromptSubmit: runs `touch {}`",
            env.marker.display()
        )])
    );
    assert_eq!(review["env"]["names"], json!(["SOME_TOKEN"]));
    let pin = review["pin"].as_str().unwrap().to_string();
    assert!(pin.starts_with("sha256:"), "{pin}");
    assert!(review["text"]
        .as_str()
        .unwrap()
        .contains("(hooks: commands run confined, as bash does)"));

    // The hooks file changes after the review: the shown pin is stale, 409, nothing recorded.
    let hooks = env.ws.join(".dsh/hooks.json");
    let original = std::fs::read_to_string(&hooks).unwrap();
    std::fs::write(&hooks, original.replace("touch", "touch  ")).unwrap();
    let post = |body: Value| {
        client
            .post(format!("{base}/api/trust"))
            .bearer_auth(&token)
            .json(&body)
    };
    let (status, body) = json(post(json!({"cwd": env.ws, "pin": pin, "confirm": true}))).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "CHANGED");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed since shown"),
        "{body}"
    );
    assert!(!env.home.join("trust.toml").exists());
    std::fs::write(&hooks, &original).unwrap();

    // Without `confirm: true`: refused, nothing recorded.
    let (status, _) = json(post(json!({"cwd": env.ws, "pin": pin}))).await;
    assert_eq!(status, 400);
    assert!(!env.home.join("trust.toml").exists());

    // The pin shown, confirmed: trusted, and the open session is reopened with the settings.
    let (status, body) = json(post(
        json!({"cwd": env.ws, "pin": pin, "confirm": true, "session": before}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["trusted"], true);
    assert_eq!(body["reopened"], before.as_str());
    let (_, detail) = json(detail_of(&before)).await;
    assert_eq!(detail["live"], true, "{detail}");
    assert_eq!(detail["permission"], "danger-full-access", "{detail}");
    assert!(env.home.join("trust.toml").is_file());
    let (_, review) = json(client.get(&trust_url).bearer_auth(&token)).await;
    assert_eq!(review["needsTrust"], false, "{review}");
    assert_eq!(review["trusted"], true);

    // A new session applies the project's settings: its preset and its hook.
    let (status, body) = json(
        client
            .post(format!("{base}/api/sessions"))
            .bearer_auth(&token)
            .json(&json!({"cwd": env.ws, "prompt": "hello"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let (_, detail) = json(
        client
            .get(format!("{base}/api/sessions/{id}"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(detail["permission"], "danger-full-access", "{detail}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !env.marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the trusted project hook never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await.unwrap();
}
