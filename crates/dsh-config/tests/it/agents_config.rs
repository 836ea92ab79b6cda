//! `[agents]`: how many subagents of one agent run at once (default 4, as in dsh), bad values
//! named with their key.

use dsh_config::{AgentsSettings, Config, ConfigError, Flags};

fn load(user: &str) -> Result<Config, Vec<ConfigError>> {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(home.path().join("config.toml"), user).unwrap();
    Config::load(home.path(), project.path(), &|_| None, &Flags::default()).map_err(|e| e.0)
}

#[test]
fn max_concurrent_defaults_to_four_and_is_read() {
    assert_eq!(
        load("").unwrap().agents,
        AgentsSettings { max_concurrent: 4 }
    );
    assert_eq!(
        load("[agents]\nmax_concurrent = 2\n")
            .unwrap()
            .agents
            .max_concurrent,
        2
    );
}

#[test]
fn bad_agents_values_are_named() {
    for text in [
        "[agents]\nmax_concurrent = 0\n",
        "[agents]\nmax_concurrent = \"4\"\n",
        "[agents]\nmax_concurrent = 1000\n",
        "[agents]\nmax_children = 4\n",
    ] {
        let errors = load(text).unwrap_err();
        let all = format!("{errors:?}");
        assert!(all.contains("agents."), "{text}: {all}");
    }
}
