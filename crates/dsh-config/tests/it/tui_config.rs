//! `[tui]`: `alt_screen` picks the full-screen mode over the inline one (docs/tui.md,
//! "Modes"); a wrong type or an unknown key is named with its key path.

use dsh_config::{Config, ConfigError, Flags, TuiConfig};

fn load(user: &str) -> Result<Config, Vec<ConfigError>> {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(home.path().join("config.toml"), user).unwrap();
    Config::load(home.path(), project.path(), &|_| None, &Flags::default()).map_err(|e| e.0)
}

#[test]
fn alt_screen_defaults_to_off_and_is_read() {
    assert_eq!(load("").unwrap().tui(), TuiConfig { alt_screen: false });
    assert!(load("[tui]\nalt_screen = true\n").unwrap().tui().alt_screen);
    assert!(
        !load("[tui]\nalt_screen = false\n")
            .unwrap()
            .tui()
            .alt_screen
    );
}

#[test]
fn bad_tui_values_are_named() {
    for (text, key) in [
        ("[tui]\nalt_screen = \"yes\"\n", "tui.alt_screen"),
        ("[tui]\nalt_screem = true\n", "tui.alt_screem"),
        ("tui = 1\n", "tui"),
    ] {
        let errors = load(text).unwrap_err();
        let all = format!("{errors:?}");
        assert!(all.contains(key), "{text}: {all}");
    }
}
