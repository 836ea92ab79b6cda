//! Loading, merging, provenance, selection and every invalid case (file, key and fix named).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;

use dsh_config::{Config, ConfigError, Flags, ProviderKind, SelectError, Source};
use dsh_llm::ReasoningEffort;

struct Dirs {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        let dirs = Dirs {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(dirs.project.path().join(".git")).unwrap();
        dirs
    }
    fn user(&self, text: &str) -> &Self {
        std::fs::write(self.home.path().join("config.toml"), text).unwrap();
        self
    }
    fn project(&self, text: &str) -> &Self {
        std::fs::create_dir_all(self.project.path().join(".dsh")).unwrap();
        std::fs::write(self.project.path().join(".dsh/config.toml"), text).unwrap();
        self
    }
    fn load_with(&self, env: &[(&str, &str)], flags: &Flags) -> Result<Config, Vec<ConfigError>> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let cwd = self.project.path().join("sub");
        std::fs::create_dir_all(&cwd).unwrap();
        Config::load(
            self.home.path(),
            &cwd,
            &|name| env.get(name).cloned(),
            flags,
        )
        .map_err(|e| e.0)
    }
    fn load(&self) -> Result<Config, Vec<ConfigError>> {
        self.load_with(&[], &Flags::default())
    }
    fn user_path(&self) -> std::path::PathBuf {
        self.home.path().join("config.toml")
    }
}

/// The single error of a failed load, checked to name file, key and a fix.
fn only_error(result: Result<Config, Vec<ConfigError>>, file: &Path, key: &str) -> ConfigError {
    let errors = result.expect_err("the config must be rejected");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let error = errors.into_iter().next().unwrap();
    let text = error.to_string();
    assert!(
        text.contains(&file.display().to_string()),
        "file missing: {text}"
    );
    assert!(text.contains(&format!("`{key}`")), "key missing: {text}");
    assert!(
        text.contains("fix: ") && !error.fix.is_empty(),
        "fix missing: {text}"
    );
    error
}

#[test]
fn defaults_come_from_the_deepseek_table_and_price_table() {
    let config = Dirs::new().load().unwrap();
    assert_eq!(config.provider, "deepseek");
    let row = &config.models["deepseek-v4-flash"];
    let spec = dsh_llm::providers::DEEPSEEK_MODELS
        .iter()
        .find(|spec| spec.id == "deepseek-v4-flash")
        .unwrap();
    assert_eq!(row.context_window, Some(spec.context_window));
    assert_eq!(row.max_output, Some(spec.max_output_tokens));
    assert_eq!(row.default_effort, Some(ReasoningEffort::High));
    assert_eq!(
        config.price_table(),
        dsh_llm::PriceTable::default_deepseek()
    );
    assert_eq!(config.compaction.threshold, 0.8);
    assert_eq!(config.compaction.keep_tail, 0.16);
    assert_eq!(config.providers["anthropic"].kind, ProviderKind::Anthropic);
    assert_eq!(config.source_of("provider"), Some(&Source::Default));
}

#[test]
fn project_wins_per_key_and_provenance_names_each_layer() {
    let dirs = Dirs::new();
    dirs.user(
        "model = \"deepseek-v4-pro\"\neffort = \"low\"\n[compaction]\nthreshold = 0.7\n\
         [providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://localhost:8000/v1\"\n",
    )
    .project("effort = \"max\"\n[providers.local]\nbase_url = \"http://127.0.0.1:11434/v1\"\n");
    let flags = Flags {
        permission: Some("read-only".into()),
        trust_workspace: true,
        ..Flags::default()
    };
    let config = dirs
        .load_with(&[("DEEPSEEK_BASE_URL", "http://env.example")], &flags)
        .unwrap();
    assert_eq!(config.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!(config.effort, Some(ReasoningEffort::Max));
    assert_eq!(config.compaction.threshold, 0.7);
    assert_eq!(
        config.providers["local"].base_url,
        "http://127.0.0.1:11434/v1"
    );
    assert_eq!(
        config.providers["local"].kind,
        ProviderKind::OpenAiCompatible
    );
    assert_eq!(config.providers["deepseek"].base_url, "http://env.example");
    let project_file = dirs.project.path().join(".dsh/config.toml");
    assert_eq!(
        config.source_of("model"),
        Some(&Source::UserFile(dirs.user_path()))
    );
    assert_eq!(
        config.source_of("effort"),
        Some(&Source::ProjectFile(project_file.clone()))
    );
    assert_eq!(
        config.source_of("providers.local.base_url"),
        Some(&Source::ProjectFile(project_file))
    );
    assert_eq!(
        config.source_of("providers.local.kind"),
        Some(&Source::UserFile(dirs.user_path()))
    );
    assert_eq!(
        config.source_of("providers.deepseek.base_url"),
        Some(&Source::Env("DEEPSEEK_BASE_URL".into()))
    );
    assert_eq!(
        config.source_of("permission"),
        Some(&Source::Flag("permission".into()))
    );
    assert_eq!(
        config.source_of("compaction.keep_tail"),
        Some(&Source::Default)
    );
}

#[test]
fn unknown_key_is_named_with_a_suggestion() {
    let dirs = Dirs::new();
    dirs.user("[providers.deepseek]\nbase_ulr = \"http://x\"\n");
    let error = only_error(
        dirs.load(),
        &dirs.user_path(),
        "providers.deepseek.base_ulr",
    );
    assert!(error.fix.contains("did you mean `base_url`"), "{error}");
    dirs.user("colour = \"blue\"\n");
    let error = only_error(dirs.load(), &dirs.user_path(), "colour");
    assert!(error.problem.contains("unknown key"));
}

#[test]
fn wrong_type_is_named() {
    let dirs = Dirs::new();
    dirs.user("[models.m]\ncontext_window = \"big\"\n");
    let error = only_error(dirs.load(), &dirs.user_path(), "models.m.context_window");
    assert!(error.problem.contains("positive integer"), "{error}");
    dirs.user("[providers.deepseek.quirks]\nsend_thinking = \"no\"\n");
    only_error(
        dirs.load(),
        &dirs.user_path(),
        "providers.deepseek.quirks.send_thinking",
    );
    dirs.user("provider = 3\n");
    only_error(dirs.load(), &dirs.user_path(), "provider");
}

#[test]
fn unknown_provider_kind_is_named() {
    let dirs = Dirs::new();
    dirs.user("[providers.x]\nkind = \"openai\"\nbase_url = \"http://x\"\n");
    let error = only_error(dirs.load(), &dirs.user_path(), "providers.x.kind");
    assert!(error.fix.contains("openai-compatible"), "{error}");
}

#[test]
fn missing_kind_of_a_new_provider_is_named() {
    let dirs = Dirs::new();
    dirs.user("[providers.x]\nbase_url = \"http://x\"\n");
    only_error(dirs.load(), &dirs.user_path(), "providers.x.kind");
}

#[test]
fn model_naming_an_unknown_provider_is_named() {
    let dirs = Dirs::new();
    dirs.project("[models.qwen]\nprovider = \"vllm\"\n");
    let file = dirs.project.path().join(".dsh/config.toml");
    let trusted = Flags {
        trust_workspace: true,
        ..Flags::default()
    };
    let error = only_error(dirs.load_with(&[], &trusted), &file, "models.qwen.provider");
    assert!(error.problem.contains("`vllm`"));
    // Untrusted, the project cannot name providers it would have to define: the field is left
    // out and named.
    let config = dirs.load().unwrap();
    assert_eq!(config.models["qwen"].provider, None);
    assert_eq!(
        config.trust.ignored,
        vec![(
            std::fs::canonicalize(&file).unwrap(),
            vec!["models.qwen.provider".to_string()]
        )]
    );
}

#[test]
fn default_provider_must_exist() {
    let dirs = Dirs::new();
    dirs.user("provider = \"claude\"\n");
    only_error(dirs.load(), &dirs.user_path(), "provider");
}

#[test]
fn a_literal_key_is_refused_without_echoing_it() {
    let dirs = Dirs::new();
    let secret = "sk-3f2a9c0d1e8b7a6f5e4d3c2b1a0f9e8d";
    dirs.user(&format!("[providers.deepseek]\napi_key = \"{secret}\"\n"));
    let error = only_error(dirs.load(), &dirs.user_path(), "providers.deepseek.api_key");
    assert!(!error.to_string().contains(secret));
    assert!(error.fix.contains("api_key_env"));
    dirs.user(&format!(
        "[providers.deepseek]\napi_key_env = \"{secret}\"\n"
    ));
    let error = only_error(
        dirs.load(),
        &dirs.user_path(),
        "providers.deepseek.api_key_env",
    );
    assert!(!error.to_string().contains(secret));
    assert!(error.problem.contains("looks like an API key"));
}

#[test]
fn bad_toml_names_the_line_without_quoting_the_file() {
    let dirs = Dirs::new();
    dirs.user("model = \"ok\"\napi_key = sk-unquoted-secret-value\n");
    let errors = dirs.load().err().unwrap();
    let text = errors[0].to_string();
    assert!(
        text.contains(&dirs.user_path().display().to_string()),
        "{text}"
    );
    assert!(text.contains("line 2"), "{text}");
    assert!(!text.contains("sk-unquoted-secret-value"), "{text}");
}

#[test]
fn bad_values_from_flags_and_env_name_their_source() {
    let dirs = Dirs::new();
    let flags = Flags {
        effort: Some("extreme".into()),
        ..Flags::default()
    };
    let errors = dirs
        .load_with(&[("DSH_PERMISSION_MODE", "yolo")], &flags)
        .err()
        .unwrap();
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("flag --effort") && t.contains("`effort`")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("environment variable DSH_PERMISSION_MODE")),
        "{text:?}"
    );
}

#[test]
fn inconsistent_values_are_named() {
    let dirs = Dirs::new();
    dirs.user("[compaction]\nkeep_tail = 0.85\n");
    only_error(dirs.load(), &dirs.user_path(), "compaction.keep_tail");
    dirs.user("[models.m]\nefforts = [\"off\"]\ndefault_effort = \"high\"\n");
    only_error(dirs.load(), &dirs.user_path(), "models.m.default_effort");
}

#[test]
fn several_problems_are_all_reported() {
    let dirs = Dirs::new();
    dirs.user("colour = 1\n[compaction]\nthreshold = 7\n");
    assert_eq!(dirs.load().err().unwrap().len(), 2);
}

#[test]
fn select_uses_the_provider_default_model_when_the_provider_is_a_flag() {
    let dirs = Dirs::new();
    dirs.user(
        "model = \"deepseek-v4-pro\"\n[providers.anthropic]\ndefault_model = \"claude-sonnet-4-5\"\n",
    );
    let env = [
        ("ANTHROPIC_API_KEY", "sk-ant-x"),
        ("DEEPSEEK_API_KEY", "sk-ds"),
    ];
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let config = dirs.load_with(&env, &Flags::default()).unwrap();
    let selection = config.select(&lookup).unwrap();
    assert_eq!(
        (selection.provider.name.as_str(), selection.model.as_str()),
        ("deepseek", "deepseek-v4-pro")
    );

    let flags = Flags {
        provider: Some("anthropic".into()),
        ..Flags::default()
    };
    let config = dirs.load_with(&env, &flags).unwrap();
    let selection = config.select(&lookup).unwrap();
    assert_eq!(selection.model, "claude-sonnet-4-5");
    assert_eq!(selection.api_key.unwrap().expose_secret(), "sk-ant-x");

    let flags = Flags {
        provider: Some("anthropic".into()),
        model: Some("claude-x".into()),
        ..Flags::default()
    };
    let selection = dirs
        .load_with(&env, &flags)
        .unwrap()
        .select(&lookup)
        .unwrap();
    assert_eq!(selection.model, "claude-x");
}

#[test]
fn missing_key_variable_of_the_used_provider_is_named() {
    let dirs = Dirs::new();
    dirs.user("[providers.vllm]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\napi_key_env = \"VLLM_KEY\"\ndefault_model = \"q\"\n");
    let flags = Flags {
        provider: Some("vllm".into()),
        ..Flags::default()
    };
    let config = dirs.load_with(&[], &flags).unwrap();
    match config.select(&|_| None) {
        Err(SelectError::MissingKey(error)) => {
            let text = error.to_string();
            assert!(
                text.contains(&dirs.user_path().display().to_string()),
                "{text}"
            );
            assert!(
                text.contains("`providers.vllm.api_key_env`") && text.contains("VLLM_KEY"),
                "{text}"
            );
            assert!(text.contains("fix: set VLLM_KEY"), "{text}");
        }
        other => panic!("expected a missing key, got {other:?}"),
    }
    // An unused provider's key is not needed.
    let config = dirs.load().unwrap();
    assert!(config
        .select(&|name| (name == "DEEPSEEK_API_KEY").then(|| "k".into()))
        .is_ok());
}

#[test]
fn keyless_local_server_and_missing_model() {
    let dirs = Dirs::new();
    dirs.user("provider = \"ollama\"\n[providers.ollama]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:11434/v1\"\n");
    let config = dirs.load().unwrap();
    match config.select(&|_| None) {
        Err(SelectError::Invalid(error)) => {
            assert!(error
                .to_string()
                .contains("no model is configured for provider `ollama`"))
        }
        other => panic!("{other:?}"),
    }
    let flags = Flags {
        model: Some("qwen2.5-coder:7b".into()),
        ..Flags::default()
    };
    let selection = dirs
        .load_with(&[], &flags)
        .unwrap()
        .select(&|_| None)
        .unwrap();
    assert!(selection.api_key.unwrap().is_keyless());
}

#[test]
fn mcp_and_hooks_are_kept_as_tables() {
    let dirs = Dirs::new();
    dirs.user("[mcp.servers.fs]\ncommand = \"mcp-fs\"\n[hooks]\npre_tool = []\n");
    let config = dirs.load().unwrap();
    assert!(config.mcp.contains_key("servers"));
    assert!(config.hooks.contains_key("pre_tool"));
    dirs.user("mcp = \"on\"\n");
    only_error(dirs.load(), &dirs.user_path(), "mcp");
}

#[test]
fn the_model_table_falls_back_to_max_output() {
    let dirs = Dirs::new();
    dirs.user(
        "[models.\"claude-x\"]\ncontext_window = 1000000\nmax_output = 64000\ndefault_effort = \"high\"\n",
    );
    let config = dirs.load().unwrap();
    let table = config.model_table();
    assert_eq!(
        table.get("claude-x").and_then(|row| row.default_max_tokens),
        Some(64_000),
        "default_max_tokens falls back to max_output"
    );
    // Building the adapters from the table: dsh-runtime's `adapters.rs`.
}

/// A message quoting a URL shows none of its credentials: user and password, and the values
/// of query parameters named like a key (found in `dsh doctor`'s endpoint lines).
#[test]
fn credentials_in_the_urls_of_a_message_are_redacted() {
    use dsh_config::show::redact_urls_in;
    assert_eq!(
        redact_urls_in(
            "could not reach http://alice:hunter2@127.0.0.1:1/v1/models?api-key=abc&x=1: refused; \
             see https://example.com/a"
        ),
        "could not reach http://<redacted>@127.0.0.1:1/v1/models?api-key=<redacted>&x=1: \
         refused; see https://example.com/a"
    );
    assert_eq!(redact_urls_in("no url here"), "no url here");
    assert_eq!(
        redact_urls_in("http://<redacted>@h:1/v1?token=t unreachable"),
        "http://<redacted>@h:1/v1?token=<redacted> unreachable"
    );
    assert_eq!(
        redact_urls_in("(http://u@h/p) and 'ftp://a:b@c'"),
        "(http://<redacted>@h/p) and 'ftp://<redacted>@c'"
    );
}
