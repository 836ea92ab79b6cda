//! `[profiles.<name>]` with `--profile` / `DSH_PROFILE`, and `-c key=value` overrides: where
//! each layer sits, what each names as its source, and what is refused.

use std::collections::HashMap;

use dsh_config::{Config, ConfigError, Flags, Source};
use toml::Value;

struct Dirs {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Dirs {
    fn new(user: &str) -> Dirs {
        let dirs = Dirs {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(dirs.project.path().join(".git")).unwrap();
        std::fs::write(dirs.home.path().join("config.toml"), user).unwrap();
        dirs
    }

    fn project(self, text: &str) -> Dirs {
        std::fs::create_dir_all(self.project.path().join(".dsh")).unwrap();
        std::fs::write(self.project.path().join(".dsh/config.toml"), text).unwrap();
        self
    }

    fn load(&self, env: &[(&str, &str)], flags: &Flags) -> Result<Config, Vec<ConfigError>> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(
            self.home.path(),
            self.project.path(),
            &|name| env.get(name).cloned(),
            flags,
        )
        .map_err(|e| e.0)
    }

    fn profile(&self, name: &str) -> Source {
        Source::Profile {
            name: name.to_string(),
            file: self.home.path().join("config.toml"),
        }
    }
}

fn profile(name: &str) -> Flags {
    Flags {
        profile: Some(name.to_string()),
        ..Flags::default()
    }
}

fn overrides(list: &[&str]) -> Flags {
    Flags {
        overrides: list.iter().map(|s| s.to_string()).collect(),
        ..Flags::default()
    }
}

const USER: &str = r#"
# the user's own file
model = "deepseek-chat"
permission = "workspace-write"

[profiles.deep]
model = "deepseek-reasoner"
effort = "high"
budget.max_steps = 7

[profiles.safe]
permission = "read-only"
"#;

#[test]
fn a_selected_profile_applies_over_the_files_and_is_named_as_the_source() {
    let dirs = Dirs::new(USER);
    let config = dirs.load(&[], &profile("deep")).unwrap();
    assert_eq!(config.model.as_deref(), Some("deepseek-reasoner"));
    assert_eq!(config.budget.max_steps, Some(7));
    assert_eq!(config.profile.as_deref(), Some("deep"));
    assert_eq!(config.source_of("model"), Some(&dirs.profile("deep")));
    assert_eq!(
        config.source_of("budget.max_steps"),
        Some(&dirs.profile("deep"))
    );
    // Not selected: the user file's values, and no `profiles` key among the values.
    let plain = dirs.load(&[], &Flags::default()).unwrap();
    assert_eq!(plain.model.as_deref(), Some("deepseek-chat"));
    assert_eq!(plain.profile, None);
    assert!(plain
        .values()
        .iter()
        .all(|(key, _, _)| !key.starts_with("profiles")));
}

#[test]
fn dsh_profile_selects_and_the_flag_wins_over_it() {
    let dirs = Dirs::new(USER);
    let by_env = dirs
        .load(&[("DSH_PROFILE", "safe")], &Flags::default())
        .unwrap();
    assert_eq!(by_env.permission.as_deref(), Some("read-only"));
    let both = dirs
        .load(&[("DSH_PROFILE", "safe")], &profile("deep"))
        .unwrap();
    assert_eq!(both.profile.as_deref(), Some("deep"));
    assert_eq!(both.permission.as_deref(), Some("workspace-write"));
}

#[test]
fn an_unknown_profile_is_an_error_listing_the_defined_ones() {
    let dirs = Dirs::new(USER);
    let errors = dirs.load(&[], &profile("fast")).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let text = errors[0].to_string();
    assert!(text.contains("no profile is named `fast`"), "{text}");
    assert!(text.contains("deep, safe"), "{text}");
    assert_eq!(errors[0].source, Source::Flag("profile".into()));
    let by_env = dirs.load(&[("DSH_PROFILE", "fast")], &Flags::default());
    assert_eq!(
        by_env.unwrap_err()[0].source,
        Source::Env("DSH_PROFILE".into())
    );
    let none = Dirs::new("model = \"deepseek-chat\"\n");
    let text = none.load(&[], &profile("deep")).unwrap_err()[0].to_string();
    assert!(text.contains("[profiles.deep]"), "{text}");
}

#[test]
fn every_profile_is_checked_even_when_not_selected() {
    let dirs = Dirs::new("[profiles.broken]\neffort = \"extreme\"\n[profiles.ok]\nmodel = \"m\"\n");
    let errors = dirs.load(&[], &Flags::default()).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].source, dirs.profile("broken"));
    assert_eq!(errors[0].key, "effort");
    let not_table = Dirs::new("profiles = 3\n");
    let errors = not_table.load(&[], &Flags::default()).unwrap_err();
    assert_eq!(errors[0].key, "profiles", "{errors:#?}");
    let nested = Dirs::new("[profiles.a.profiles.b]\nmodel = \"m\"\n");
    let errors = nested.load(&[], &profile("a")).unwrap_err();
    assert!(
        errors[0].to_string().contains("user's config.toml only"),
        "{errors:#?}"
    );
}

/// A project file could otherwise define a profile the user selects by habit (`--profile ci`)
/// and lift its own settings above the project layer's restrictions: profiles are the user's.
#[test]
fn a_project_file_cannot_define_profiles() {
    let project = "[profiles.deep]\npermission = \"danger-full-access\"\n";
    // Untrusted: the project file is left out, with a warning naming the problem.
    let dirs = Dirs::new(USER).project(project);
    let config = dirs.load(&[], &profile("deep")).unwrap();
    assert_eq!(config.permission.as_deref(), Some("workspace-write"));
    let warning = config.trust.warning().unwrap();
    assert!(warning.contains("profiles"), "{warning}");
    // Trusted: the user's to fix, so an error.
    let trusted = Flags {
        trust_workspace: true,
        ..profile("deep")
    };
    let errors = dirs.load(&[], &trusted).unwrap_err();
    assert!(
        matches!(errors[0].source, Source::ProjectFile(_)),
        "{errors:#?}"
    );
    assert!(errors[0].to_string().contains("user's config.toml only"));
}

/// An untrusted project may lower the permission below the user's choice but not raise it:
/// the user's choice includes the selected profile's.
#[test]
fn an_untrusted_project_is_measured_against_the_profile() {
    let dirs = Dirs::new(USER).project("permission = \"workspace-write\"\n");
    let config = dirs.load(&[], &profile("safe")).unwrap();
    assert_eq!(config.permission.as_deref(), Some("read-only"));
    assert!(config.trust.warning().unwrap().contains("permission"));
}

#[test]
fn overrides_are_toml_values_else_strings() {
    let dirs = Dirs::new(USER);
    let config = dirs
        .load(
            &[],
            &overrides(&[
                "model=deepseek-reasoner",
                "budget.max_steps=12",
                "tui.alt_screen = true",
                "tools.web_fetch.allowed_hosts=[\"docs.rs\", \"crates.io\"]",
                "models.\"my.model\".context_window=64000",
                "models.\"my.model\".provider=\"deepseek\"",
            ]),
        )
        .unwrap();
    assert_eq!(config.model.as_deref(), Some("deepseek-reasoner"));
    assert_eq!(config.budget.max_steps, Some(12));
    assert_eq!(
        config.source_of("budget.max_steps"),
        Some(&Source::Override("budget.max_steps".into()))
    );
    let values = config.values();
    let find = |key: &str| values.iter().find(|(k, _, _)| k == key).map(|(_, v, _)| *v);
    assert_eq!(find("tui.alt_screen"), Some(&Value::Boolean(true)));
    assert_eq!(
        find("tools.web_fetch.allowed_hosts")
            .and_then(Value::as_array)
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(config.models["my.model"].context_window, Some(64000));
}

#[test]
fn layers_stack_user_project_profile_env_override_flag() {
    let dirs = Dirs::new(USER).project("model = \"from-project\"\n");
    let trusted = |flags: Flags| Flags {
        trust_workspace: true,
        profile: Some("deep".into()),
        ..flags
    };
    let config = dirs.load(&[], &trusted(Flags::default())).unwrap();
    assert_eq!(
        config.model.as_deref(),
        Some("deepseek-reasoner"),
        "profile over project"
    );
    let config = dirs
        .load(&[], &trusted(overrides(&["model=from-c"])))
        .unwrap();
    assert_eq!(config.model.as_deref(), Some("from-c"), "-c over profile");
    let flag = Flags {
        model: Some("from-flag".into()),
        ..overrides(&["model=from-c"])
    };
    let config = dirs.load(&[], &trusted(flag)).unwrap();
    assert_eq!(
        config.model.as_deref(),
        Some("from-flag"),
        "--model over -c"
    );
    // `-c` over the environment too.
    let config = dirs
        .load(
            &[("DSH_PERMISSION_MODE", "read-only")],
            &overrides(&["permission=ask"]),
        )
        .unwrap();
    assert_eq!(config.permission.as_deref(), Some("ask"));
}

#[test]
fn bad_overrides_name_the_override_and_the_fix() {
    let dirs = Dirs::new(USER);
    let cases: [(&str, &str); 4] = [
        ("model", "key=value"),
        ("=5", "not a key path"),
        ("budget.max_steps=many", "max_steps"),
        ("nosuchkey=1", "unknown key"),
    ];
    for (text, expected) in cases {
        let errors = dirs.load(&[], &overrides(&[text])).unwrap_err();
        let message = errors[0].to_string();
        assert!(message.starts_with("-c "), "{text}: {message}");
        assert!(message.contains(expected), "{text}: {message}");
        assert!(message.contains("fix:"), "{text}: {message}");
    }
    // A literal key is refused from `-c` as from a file.
    let errors = dirs
        .load(&[], &overrides(&["providers.deepseek.api_key=sk-123"]))
        .unwrap_err();
    assert!(
        errors[0].to_string().contains("literal API key"),
        "{errors:#?}"
    );
}

/// What `dsh mcp add` checks before writing the user file: the file's profiles as loading
/// checks them (a file with profiles was refused by the first version of that check).
#[test]
fn the_user_file_check_reads_profiles_as_loading_does() {
    let path = std::path::Path::new("/home/me/.dsh/config.toml");
    assert!(dsh_config::check_user_file(USER, path).is_ok());
    let broken = "[profiles.deep]\neffort = \"extreme\"\n";
    let errors = dsh_config::check_user_file(broken, path).unwrap_err().0;
    assert_eq!(errors[0].key, "effort", "{errors:#?}");
}
