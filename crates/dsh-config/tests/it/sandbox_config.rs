//! `[sandbox]`: `network` is on by default; the user's file or a project's may turn it off, only
//! the user's may turn it on (docs/SECURITY.md, "Network"); bad values are named with their key.

use dsh_config::SandboxConfig;

use crate::config_dirs::Dirs;

#[test]
fn the_network_is_on_by_default_and_either_file_turns_it_off() {
    assert_eq!(
        Dirs::new().load().unwrap().sandbox(),
        SandboxConfig::default()
    );
    assert!(Dirs::new().load().unwrap().sandbox().network);
    let user = Dirs::new().user("[sandbox]\nnetwork = \"off\"\n");
    assert!(!user.load().unwrap().sandbox().network);
    let project = Dirs::new().project("[sandbox]\nnetwork = \"off\"\n");
    assert!(!project.load().unwrap().sandbox().network);
    let both = Dirs::new()
        .user("[sandbox]\nnetwork = \"on\"\n")
        .project("[sandbox]\nnetwork = \"off\"\n");
    assert!(!both.load().unwrap().sandbox().network);
}

#[test]
fn a_project_cannot_turn_the_network_on() {
    let loaded = Dirs::new()
        .user("[sandbox]\nnetwork = \"off\"\n")
        .project("[sandbox]\nnetwork = \"on\"\n")
        .load();
    // Refused: a fatal error naming the key, or (an untrusted project) the project's file left
    // out with a warning naming it; either way the network stays off.
    let message = match loaded {
        Err(errors) => format!("{errors:?}"),
        Ok(config) => {
            assert!(!config.sandbox().network, "the project's `on` applied");
            config.trust.invalid_project.clone().unwrap_or_default()
        }
    };
    assert!(
        message.contains("sandbox.network")
            && message.contains("cannot turn the sandbox's network on"),
        "{message}"
    );
}

#[test]
fn bad_sandbox_values_are_named() {
    for (text, key) in [
        ("[sandbox]\nnetwork = true\n", "sandbox.network"),
        ("[sandbox]\nnetwork = \"maybe\"\n", "sandbox.network"),
        ("[sandbox]\nnetwrok = \"off\"\n", "sandbox.netwrok"),
        ("sandbox = 1\n", "sandbox"),
    ] {
        let errors = Dirs::new().user(text).load().unwrap_err();
        let all = format!("{errors:?}");
        assert!(all.contains(key), "{text}: {all}");
    }
}
