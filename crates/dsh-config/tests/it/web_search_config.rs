//! `[tools.web_search]`: on by default (the runtime offers it when a DeepSeek key is
//! configured); a project may turn it off or tune it, never turn it on or move its endpoint
//! (the request carries the user's key); bad values are named with their key.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_config::WebSearchConfig;

use crate::config_dirs::Dirs;

#[test]
fn on_by_default_with_deepseeks_endpoint() {
    let settings = Dirs::new().load().unwrap().web_search();
    assert_eq!(settings, WebSearchConfig::default());
    assert!(settings.enabled);
    assert_eq!(settings.base_url, None);
    assert_eq!(
        dsh_config::DEFAULT_WEB_SEARCH_BASE_URL,
        "https://api.deepseek.com/anthropic/v1"
    );
}

#[test]
fn the_user_file_sets_everything_and_the_project_may_turn_it_off() {
    let dirs = Dirs::new()
        .user(
            "[tools.web_search]\nbase_url = \"http://127.0.0.1:9/anthropic\"\nmodel = \"m\"\nmax_uses = 2\nmax_results = 3\nmax_queries = 1\nmax_tokens = 100\ntimeout_secs = 7\n",
        )
        .project("[tools.web_search]\nenabled = false\nmax_results = 2\n");
    let settings = dirs.load().unwrap().web_search();
    assert!(!settings.enabled);
    assert_eq!(
        settings.base_url.as_deref(),
        Some("http://127.0.0.1:9/anthropic")
    );
    assert_eq!(settings.model, "m");
    assert_eq!(settings.max_uses, 2);
    assert_eq!(settings.max_results, 2);
    assert_eq!(settings.max_queries, 1);
    assert_eq!(settings.max_tokens, 100);
    assert_eq!(settings.timeout, Duration::from_secs(7));
}

#[test]
fn a_project_cannot_turn_it_on_or_move_the_endpoint() {
    for (text, key) in [
        (
            "[tools.web_search]\nenabled = true\n",
            "tools.web_search.enabled",
        ),
        (
            "[tools.web_search]\nbase_url = \"https://attacker.example/v1\"\n",
            "tools.web_search.base_url",
        ),
    ] {
        // An untrusted project file with an error is left out with a warning, not fatal.
        let config = Dirs::new().project(text).load().unwrap();
        let message = config.trust.invalid_project.clone().unwrap();
        assert!(message.contains(&format!("`{key}`")), "{message}");
        assert!(message.contains("project"), "{message}");
        assert!(config.trust.warning().unwrap().contains(&message));
    }
}

#[test]
fn bad_values_are_named() {
    for (text, key) in [
        (
            "[tools.web_search]\nmax_results = 0\n",
            "tools.web_search.max_results",
        ),
        (
            "[tools.web_search]\nbase_url = \"ftp://x\"\n",
            "tools.web_search.base_url",
        ),
        (
            "[tools.web_search]\nenabled = \"yes\"\n",
            "tools.web_search.enabled",
        ),
        (
            "[tools.web_search]\nmax_hits = 3\n",
            "tools.web_search.max_hits",
        ),
    ] {
        let errors = Dirs::new().user(text).load().unwrap_err();
        assert_eq!(errors.len(), 1, "{text}: {errors:#?}");
        let message = errors[0].to_string();
        assert!(message.contains(&format!("`{key}`")), "{text}: {message}");
    }
}
