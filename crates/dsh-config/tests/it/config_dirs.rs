//! A user home and a project (a git root) in temp dirs, with a config file written into
//! either, loaded as dsh loads them: the fixture of the tool-settings tests.

use dsh_config::{Config, ConfigError, Flags};

pub(crate) struct Dirs {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Dirs {
    pub(crate) fn new() -> Dirs {
        let dirs = Dirs {
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(dirs.project.path().join(".git")).unwrap();
        dirs
    }
    pub(crate) fn user(self, text: &str) -> Self {
        std::fs::write(self.home.path().join("config.toml"), text).unwrap();
        self
    }
    pub(crate) fn project(self, text: &str) -> Self {
        std::fs::create_dir_all(self.project.path().join(".dsh")).unwrap();
        std::fs::write(self.project.path().join(".dsh/config.toml"), text).unwrap();
        self
    }
    pub(crate) fn load(&self) -> Result<Config, Vec<ConfigError>> {
        Config::load(
            self.home.path(),
            self.project.path(),
            &|_| None,
            &Flags::default(),
        )
        .map_err(|e| e.0)
    }
}
