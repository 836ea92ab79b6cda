//! Configuration errors: every one names where the value came from, the key, what is wrong and
//! how to fix it.

use std::fmt;
use std::path::PathBuf;

/// Where an effective value came from, in increasing precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Built into dsh.
    Default,
    /// `$DSH_HOME/config.toml`.
    UserFile(PathBuf),
    /// `.dsh/config.toml` of the project.
    ProjectFile(PathBuf),
    /// `[profiles.<name>]` of the user file, selected with `--profile` or `DSH_PROFILE`.
    Profile {
        /// The profile's name.
        name: String,
        /// The user file that defines it.
        file: PathBuf,
    },
    /// An environment variable (or a `.env` file entry) of this name.
    Env(String),
    /// A `-c key=value` override of the command line, by its dotted key.
    Override(String),
    /// A command-line flag of this name (without dashes).
    Flag(String),
}

impl Source {
    /// Precedence of the layer kind: default 0, user file 1, project file 2, profile 3,
    /// env 4, `-c` override 5, flag 6.
    pub fn precedence(&self) -> u8 {
        match self {
            Source::Default => 0,
            Source::UserFile(_) => 1,
            Source::ProjectFile(_) => 2,
            Source::Profile { .. } => 3,
            Source::Env(_) => 4,
            Source::Override(_) => 5,
            Source::Flag(_) => 6,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("built-in default"),
            Source::UserFile(path) => write!(f, "{}", path.display()),
            Source::ProjectFile(path) => write!(f, "{}", path.display()),
            Source::Profile { name, file } => {
                write!(f, "profile {name} ({})", file.display())
            }
            Source::Env(name) => write!(f, "environment variable {name}"),
            Source::Override(key) => write!(f, "-c {key}"),
            Source::Flag(name) => write!(f, "flag --{name}"),
        }
    }
}

/// One problem in the configuration. `Display` gives
/// ``<where>: `<key>`: <problem>`` and, on the next line, `  fix: <fix>`. No message ever holds a
/// credential: values that may be secrets are never quoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the offending value came from (file, variable, flag).
    pub source: Source,
    /// The dotted key path (`providers.local.kind`); empty for the whole file.
    pub key: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(
        source: &Source,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        ConfigError {
            source: source.clone(),
            key: key.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}\n  fix: {}", self.source, self.problem, self.fix)
        } else {
            write!(
                f,
                "{}: `{}`: {}\n  fix: {}",
                self.source, self.key, self.problem, self.fix
            )
        }
    }
}

/// All problems found while loading; loading fails if there is at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.0.len();
        if count > 1 {
            writeln!(f, "{count} problems in the configuration:")?;
        }
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        ConfigErrors(vec![error])
    }
}
