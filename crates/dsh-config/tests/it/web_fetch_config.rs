//! `[tools.web_fetch]`: off by default, turned on and widened only by the user's own file,
//! every bad value named with its key.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_config::WebFetchConfig;

use crate::config_dirs::Dirs;

#[test]
fn off_by_default() {
    let config = Dirs::new().load().unwrap();
    assert_eq!(config.web_fetch(), WebFetchConfig::default());
    assert!(!config.web_fetch().enabled);
}

#[test]
fn the_user_file_turns_it_on_and_the_project_may_narrow_it() {
    let dirs = Dirs::new()
        .user(
            "[tools.web_fetch]\nenabled = true\nallowed_hosts = [\"127.0.0.1\", \"*.corp.example\"]\nmax_bytes = 1000\ntimeout_secs = 5\n",
        )
        .project("[tools.web_fetch]\nmax_bytes = 500\n");
    let settings = dirs.load().unwrap().web_fetch();
    assert!(settings.enabled);
    assert_eq!(settings.allowed_hosts, ["127.0.0.1", "*.corp.example"]);
    assert_eq!(settings.max_bytes, 500);
    assert_eq!(settings.timeout, Duration::from_secs(5));
    let off = Dirs::new()
        .user("[tools.web_fetch]\nenabled = true\n")
        .project("[tools.web_fetch]\nenabled = false\n");
    assert!(!off.load().unwrap().web_fetch().enabled);
}

#[test]
fn a_project_cannot_open_network_access() {
    for (text, key) in [
        (
            "[tools.web_fetch]\nenabled = true\n",
            "tools.web_fetch.enabled",
        ),
        (
            "[tools.web_fetch]\nallowed_hosts = [\"169.254.169.254\"]\n",
            "tools.web_fetch.allowed_hosts",
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
            "[tools.web_fetch]\nenabled = \"yes\"\n",
            "tools.web_fetch.enabled",
        ),
        (
            "[tools.web_fetch]\nallowed_hosts = \"x\"\n",
            "tools.web_fetch.allowed_hosts",
        ),
        (
            "[tools.web_fetch]\nallowed_hosts = [\"http://x/\"]\n",
            "tools.web_fetch.allowed_hosts[0]",
        ),
        (
            "[tools.web_fetch]\nmax_bytes = 0\n",
            "tools.web_fetch.max_bytes",
        ),
        (
            "[tools.web_fetch]\ntimeout_secs = -1\n",
            "tools.web_fetch.timeout_secs",
        ),
        (
            "[tools.web_fetch]\ntimeout = 5\n",
            "tools.web_fetch.timeout",
        ),
        ("[tools.webfetch]\n", "tools.webfetch"),
    ] {
        let errors = Dirs::new().user(text).load().unwrap_err();
        assert_eq!(errors.len(), 1, "{text}: {errors:#?}");
        let message = errors[0].to_string();
        assert!(message.contains(&format!("`{key}`")), "{text}: {message}");
        assert!(!errors[0].fix.is_empty());
    }
}
