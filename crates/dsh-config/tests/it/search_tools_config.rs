//! `[tools.glob]` and `[tools.grep]`: result caps and over-cap glob sampling, defaults as dsh's
//! (100 paths sampled across top-level entries, 250 matches), bad values named with their key.
#![allow(clippy::unwrap_used)]

use dsh_config::{Config, ConfigError, Flags, SearchToolsConfig};

fn load(user: &str) -> Result<Config, Vec<ConfigError>> {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(home.path().join("config.toml"), user).unwrap();
    Config::load(home.path(), project.path(), &|_| None, &Flags::default()).map_err(|e| e.0)
}

#[test]
fn defaults_are_dsh_values() {
    let settings = load("").unwrap().search_tools();
    assert_eq!(settings, SearchToolsConfig::default());
    assert_eq!(
        (
            settings.glob_max_results,
            settings.glob_sample_over_cap,
            settings.grep_max_results
        ),
        (100, true, 250)
    );
}

#[test]
fn settings_are_read() {
    let settings = load(
        "[tools.glob]\nmax_results = 4\nsample_over_cap = false\n[tools.grep]\nmax_results = 7\n",
    )
    .unwrap()
    .search_tools();
    assert_eq!(
        settings,
        SearchToolsConfig {
            glob_max_results: 4,
            glob_sample_over_cap: false,
            grep_max_results: 7,
        }
    );
}

#[test]
fn bad_values_are_named() {
    for (text, key) in [
        ("[tools.glob]\nmax_results = 0\n", "tools.glob.max_results"),
        (
            "[tools.glob]\nmax_results = \"9\"\n",
            "tools.glob.max_results",
        ),
        (
            "[tools.glob]\nsample_over_cap = \"yes\"\n",
            "tools.glob.sample_over_cap",
        ),
        ("[tools.grep]\nmax_results = -3\n", "tools.grep.max_results"),
        (
            "[tools.grep]\nsample_over_cap = true\n",
            "tools.grep.sample_over_cap",
        ),
        ("[tools.glob]\nmax = 3\n", "tools.glob.max"),
    ] {
        let errors = load(text).unwrap_err();
        assert_eq!(errors.len(), 1, "{text}: {errors:#?}");
        let message = errors[0].to_string();
        assert!(message.contains(key), "{text}: {message}");
    }
}
