//! `providers.<name>.reply_timeout_secs`: read per provider beside `idle_timeout_secs`, and
//! refused with file, key and fix when it is not a positive integer.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use dsh_config::{Config, Flags};

fn load(user: &str) -> Result<Config, Vec<dsh_config::ConfigError>> {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), user).unwrap();
    Config::load(home.path(), cwd.path(), &|_| None, &Flags::default()).map_err(|e| e.0)
}

#[test]
fn reply_timeout_is_read_per_provider() {
    let config = load(
        "[providers.deepseek]\nreply_timeout_secs = 45\n\
         [providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9\"\n",
    )
    .unwrap();
    assert_eq!(
        config.providers["deepseek"].reply_timeout,
        Some(Duration::from_secs(45))
    );
    assert_eq!(config.providers["local"].reply_timeout, None);
}

#[test]
fn a_bad_reply_timeout_is_named() {
    for value in ["0", "-3", "\"ten\"", "1.5"] {
        let errors = load(&format!(
            "[providers.deepseek]\nreply_timeout_secs = {value}\n"
        ))
        .expect_err(value);
        let text = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("`providers.deepseek.reply_timeout_secs`") && text.contains("fix: "),
            "{value}: {text}"
        );
    }
}
