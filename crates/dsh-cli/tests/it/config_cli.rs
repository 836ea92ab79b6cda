//! `dsh config show|path`, `dsh models` and `dsh run --provider anthropic` with the real binary,
//! a temporary DSH_HOME and the fake provider on loopback.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use crate::common::{dsh_command, output, text};

use dsh_test_support::{AnthropicReply, AnthropicUsage, FakeProvider, SseReply};

const DEEPSEEK_SECRET: &str = "sk-deepseek-secret-5be2d19a77";
const ANTHROPIC_SECRET: &str = "sk-ant-secret-0c4e8f1b9d";
const HEADER_SECRET: &str = "Bearer header-secret-88f1";

struct Env {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            cwd: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(env.cwd.path().join(".git")).unwrap();
        env
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = dsh_command(self.home.path(), self.cwd.path());
        cmd.args(args);
        cmd
    }

    fn write_user(&self, text: &str) {
        std::fs::write(self.home.path().join("config.toml"), text).unwrap();
    }

    fn write_project(&self, text: &str) {
        std::fs::create_dir_all(self.cwd.path().join(".dsh")).unwrap();
        std::fs::write(self.cwd.path().join(".dsh/config.toml"), text).unwrap();
    }
}

#[tokio::test]
async fn config_show_prints_sources_and_never_a_secret() {
    let env = Env::new();
    env.write_user(&format!(
        "model = \"deepseek-v4-pro\"\n\
         [providers.proxy]\nkind = \"openai-compatible\"\n\
         base_url = \"https://user:pa55word@proxy.example/v1\"\napi_key_env = \"PROXY_KEY\"\n\
         [providers.proxy.headers]\nAuthorization = \"{HEADER_SECRET}\"\nX-Team = \"blue\"\n\
         [mcp.servers.github]\ncommand = \"github-mcp-server\"\nenabled = false\n\
         [mcp.servers.github.env]\nGITHUB_TOKEN = \"ghp-mcp-secret-1\"\n"
    ));
    env.write_project("effort = \"max\"\n");
    std::fs::write(
        env.cwd.path().join(".env"),
        format!("ANTHROPIC_API_KEY={ANTHROPIC_SECRET}\n"),
    )
    .unwrap();
    let mut cmd = env.command(&["config", "show"]);
    cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET)
        .env("DEEPSEEK_BASE_URL", "http://127.0.0.1:9");
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for secret in [
        DEEPSEEK_SECRET,
        ANTHROPIC_SECRET,
        HEADER_SECRET,
        "header-secret-88f1",
        "pa55word",
        "ghp-mcp-secret-1",
    ] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} leaked:\n{stdout}"
        );
    }
    let user = env.home.path().join("config.toml").display().to_string();
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"))
            .to_string()
    };
    assert!(line("model").contains(&user), "{}", line("model"));
    assert!(line("effort").contains(".dsh/config.toml"));
    assert!(line("provider").contains("built-in default"));
    assert!(line("providers.deepseek.base_url").contains("environment variable DEEPSEEK_BASE_URL"));
    assert!(line("providers.proxy.headers.Authorization").contains("<redacted>"));
    assert!(line("providers.proxy.headers.X-Team").contains("blue"));
    assert!(line("providers.proxy.base_url").contains("<redacted>@proxy.example"));
    assert!(stdout.contains("DEEPSEEK_API_KEY is set"), "{stdout}");
    assert!(stdout.contains("ANTHROPIC_API_KEY is set"), "{stdout}");
    assert!(stdout.contains("PROXY_KEY is not set"), "{stdout}");
    // Redaction goes by key list and value shape: token counts are shown.
    assert!(
        line("models.deepseek-v4-flash.default_max_tokens").contains("= 256000"),
        "{}",
        line("models.deepseek-v4-flash.default_max_tokens")
    );
    assert!(!line("models.deepseek-v4-pro.default_max_tokens").contains("redacted"));
    assert!(stdout.contains("# workspace "), "{stdout}");
}

#[tokio::test]
async fn config_show_and_models_leave_untrusted_project_settings_out() {
    let planted = FakeProvider::start([]).await.unwrap();
    planted.set_models(&["planted-model"]);
    let env = Env::new();
    env.write_project(&format!(
        "permission = \"danger-full-access\"\n[providers.deepseek]\nbase_url = \"{}\"\n",
        planted.base_url()
    ));
    let mut cmd = env.command(&["config", "show"]);
    cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("danger-full-access"), "{stdout}");
    assert!(stdout.contains("providers.deepseek.base_url = \"https://api.deepseek.com\""));
    assert!(
        stdout.contains("not trusted") && stdout.contains("permission, providers.deepseek"),
        "{stdout}"
    );
    assert!(
        stderr.contains("ignoring untrusted project settings"),
        "{stderr}"
    );

    // Trusted by the user's own prefix: the endpoint applies, but `dsh models` sends it no key.
    env.write_user(&format!(
        "[trust]\nworkspaces = [\"{}\"]\n",
        std::fs::canonicalize(env.cwd.path()).unwrap().display()
    ));
    let mut cmd = env.command(&["models"]);
    cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("planted-model"), "{stdout}");
    assert!(planted.requests().is_empty(), "the planted host was asked");
    assert!(!stderr.contains(DEEPSEEK_SECRET));
}

#[tokio::test]
async fn config_path_names_both_files() {
    let env = Env::new();
    env.write_project("");
    let out = output(env.command(&["config", "path"])).await;
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.contains(&format!(
            "user: {} (not present)",
            env.home.path().join("config.toml").display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(".dsh/config.toml")
            && stdout.lines().nth(1).unwrap().starts_with("project: "),
        "{stdout}"
    );
}

#[tokio::test]
async fn run_with_provider_anthropic_end_to_end() {
    let start = AnthropicUsage {
        input_tokens: 40,
        cache_read_input_tokens: 1_000,
        cache_creation_input_tokens: 200,
        output_tokens: 1,
    };
    // `message_delta` usage is cumulative: it repeats the input counts.
    let end = AnthropicUsage {
        output_tokens: 9,
        ..start
    };
    let provider = FakeProvider::start([AnthropicReply::with_start_usage(start)
        .thinking(&["Greeting."], "sig-abc==")
        .text(&["Hello ", "from Claude."])
        .finish("end_turn", Some(end))
        .into()])
    .await
    .unwrap();
    let env = Env::new();
    env.write_user(&format!(
        "[providers.anthropic]\nbase_url = \"{}\"\ndefault_model = \"claude-sonnet-4-5\"\n\
         [models.claude-sonnet-4-5]\nprovider = \"anthropic\"\ncontext_window = 200000\nmax_output = 64000\n\
         default_max_tokens = 8000\nefforts = [\"off\", \"low\", \"high\"]\n\
         [models.claude-sonnet-4-5.price]\ninput = 3.0\ncache_read = 0.3\ncache_write = 3.75\noutput = 15.0\n",
        provider.base_url()
    ));
    let mut cmd = env.command(&["run", "--provider", "anthropic", "--json", "hi"]);
    cmd.env("ANTHROPIC_API_KEY", ANTHROPIC_SECRET);
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains(ANTHROPIC_SECRET) && !stderr.contains(ANTHROPIC_SECRET));
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["output"], "Hello from Claude.");
    assert_eq!(result["usage"]["inputTokens"], 40);
    assert_eq!(result["usage"]["cacheReadTokens"], 1_000);
    assert_eq!(result["usage"]["cacheWriteTokens"], 200);
    let expected = (40.0 * 3.0 + 1_000.0 * 0.3 + 200.0 * 3.75 + 9.0 * 15.0) / 1e6;
    assert!(
        (result["costUsd"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{result}"
    );

    let request = &provider.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(ANTHROPIC_SECRET));
    assert_eq!(request.body["model"], "claude-sonnet-4-5");
    assert_eq!(request.body["max_tokens"], 8000, "from the model table");
    assert!(
        stdout.contains("\"provider\":\"anthropic\""),
        "the route is the provider's name"
    );
    // The log holds the signature for the next request but never the key.
    let sessions = env.home.path().join("sessions");
    let mut logs = String::new();
    for entry in walk(&sessions) {
        logs.push_str(&std::fs::read_to_string(entry).unwrap());
    }
    assert!(logs.contains("sig-abc=="));
    assert!(!logs.contains(ANTHROPIC_SECRET));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn models_merges_the_listing_with_the_table() {
    let provider = FakeProvider::start([]).await.unwrap();
    provider.set_models(&["deepseek-v4-flash", "deepseek-v5-preview"]);
    let env = Env::new();
    let mut cmd = env.command(&["models"]);
    cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET)
        .env("DEEPSEEK_BASE_URL", provider.base_url());
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let row = |id: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id}:\n{stdout}"))
            .to_string()
    };
    assert!(
        row("deepseek-v4-flash ").contains("1000000")
            && row("deepseek-v4-flash ").ends_with("listed+table")
    );
    assert!(row("deepseek-v4-pro").ends_with("table"));
    assert!(row("deepseek-v5-preview").ends_with("listed"));
    assert_eq!(provider.requests()[0].path, "/models");

    let out = output(env.command(&["models", "--provider", "anthropic"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ANTHROPIC_API_KEY is not set"), "{stderr}");
    assert!(stdout.starts_with("MODEL"));
}

/// `models.<id>.temperature` and `.stop` reach the request of that model and of no other
/// (issue 40, point 10: both existed in the call config with nothing to set them).
#[tokio::test]
async fn a_models_temperature_and_stop_reach_its_requests() {
    let provider = FakeProvider::start([
        SseReply::new().text("one").finish("stop", None).into(),
        SseReply::new().text("two").finish("stop", None).into(),
    ])
    .await
    .unwrap();
    let env = Env::new();
    env.write_user(&format!(
        "[providers.deepseek]\nbase_url = \"{}\"\n\
         [models.deepseek-v4-flash]\ntemperature = 0.2\nstop = [\"</done>\", \"\\nEND\"]\n",
        provider.base_url()
    ));
    for model in ["deepseek-v4-flash", "deepseek-v4-pro"] {
        let mut cmd = env.command(&["run", "--model", model, "hi"]);
        cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET);
        let out = output(cmd).await;
        assert!(out.status.success(), "{}", text(&out).1);
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let flash = &requests[0].body;
    assert_eq!(flash["model"], "deepseek-v4-flash");
    assert_eq!(flash["temperature"], 0.2, "{flash}");
    assert_eq!(
        flash["stop"],
        serde_json::json!(["</done>", "\nEND"]),
        "{flash}"
    );
    let pro = &requests[1].body;
    assert_eq!(pro["model"], "deepseek-v4-pro");
    assert!(
        pro.get("temperature").is_none() && pro.get("stop").is_none(),
        "{pro}"
    );

    // Out of range or an empty stop sequence: refused with the key and the fix.
    env.write_user("[models.deepseek-v4-flash]\ntemperature = 3\nstop = [\"\"]\n");
    let out = output(env.command(&["config", "show"])).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("models.deepseek-v4-flash.temperature"),
        "{stderr}"
    );
    assert!(
        stderr.contains("models.deepseek-v4-flash.stop[0]"),
        "{stderr}"
    );
}

/// Issue 42, point 4: `--profile` and `-c` on the real binary, before and after the
/// subcommand: the run's request carries the profile's and the override's values, `config
/// show` names the profile and the override as the sources, `doctor` lists both layers, and
/// a bad override stops the run before any request.
#[tokio::test]
async fn profiles_and_overrides_reach_the_request_and_are_attributed() {
    let provider = FakeProvider::start([
        SseReply::new().text("one").finish("stop", None).into(),
        SseReply::new().text("two").finish("stop", None).into(),
    ])
    .await
    .unwrap();
    let env = Env::new();
    env.write_user(&format!(
        "# kept as written\n\
         [providers.deepseek]\nbase_url = \"{}\"\n\
         [profiles.pro]\nmodel = \"deepseek-v4-pro\"\neffort = \"max\"\n",
        provider.base_url()
    ));
    let runs: [&[&str]; 2] = [
        &[
            "run",
            "--profile",
            "pro",
            "-c",
            "models.deepseek-v4-pro.temperature=0.4",
            "hi",
        ],
        &["--profile", "pro", "-c", "effort=low", "run", "hi"],
    ];
    for args in runs {
        let mut cmd = env.command(args);
        cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET);
        let out = output(cmd).await;
        assert!(out.status.success(), "{args:?}: {}", text(&out).1);
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    assert_eq!(first["model"], "deepseek-v4-pro", "{first}");
    assert_eq!(first["temperature"], 0.4, "{first}");
    assert_eq!(first["reasoning_effort"], "max", "{first}");
    let second = &requests[1].body;
    assert_eq!(second["model"], "deepseek-v4-pro", "{second}");
    assert_eq!(second["reasoning_effort"], "low", "{second}");

    let mut cmd = env.command(&["config", "show", "-c", "budget.max_steps=9"]);
    cmd.env("DSH_PROFILE", "pro");
    let out = output(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("# profile pro applies\n"), "{stdout}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    assert!(line("model").contains("# profile pro ("), "{stdout}");
    assert!(
        line("budget.max_steps").ends_with("# -c budget.max_steps"),
        "{stdout}"
    );

    let mut cmd = env.command(&["doctor", "--profile", "pro", "-c", "budget.max_steps=9"]);
    cmd.env("DEEPSEEK_API_KEY", DEEPSEEK_SECRET);
    let out = output(cmd).await;
    let stdout = text(&out).0;
    let config_line = stdout.lines().next().unwrap_or_default().to_string();
    assert!(
        config_line.contains("profile pro") && config_line.contains("-c (budget.max_steps)"),
        "{stdout}"
    );

    // Doctor asked the endpoint for its models.
    let asked = provider.requests().len();
    let out = output(env.command(&["run", "-c", "budget.max_steps=lots", "hi"])).await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("-c budget.max_steps"), "{stderr}");
    assert_eq!(
        provider.requests().len(),
        asked,
        "a bad override sent a request"
    );
}
