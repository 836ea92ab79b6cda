//! Why a session could not be opened: [`RuntimeError`], one variant per cause, each with the
//! stable code front ends show (`dsh: CODE: message`, the web API's `code`, ACP error text).

/// A failure of [`crate::Runtime`]: resolving the configuration or composing an agent.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A configuration file, flag or variable is invalid (the message names file, key and fix).
    #[error("{0}")]
    InvalidConfig(String),
    /// The selected provider needs a key that no variable or `.env` file provides.
    #[error("{0}")]
    MissingCredential(String),
    /// The working directory cannot be used.
    #[error("{what}: {reason}")]
    Workspace {
        /// What went wrong, naming the directory.
        what: String,
        /// The operating system's reason.
        reason: std::io::Error,
    },
    /// A file or folder the session needs could not be created or read.
    #[error("{what}: {reason}")]
    Io {
        /// What could not be done, naming the path.
        what: String,
        /// The operating system's reason.
        reason: std::io::Error,
    },
    /// `Resume::Latest` found no session in the working directory.
    #[error("{0}")]
    NotFound(String),
    /// The newest session of the working directory cannot be read.
    #[error("{0}")]
    SessionDamaged(String),
    /// The session store refused an operation.
    #[error(transparent)]
    Session(#[from] dsh_session::SessionError),
    /// The agent could not be created or resumed.
    #[error(transparent)]
    Agent(#[from] dsh_agent::AgentError),
}

impl RuntimeError {
    /// The stable code of this failure (`INVALID_CONFIG`, `MISSING_CREDENTIAL`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::InvalidConfig(_) => "INVALID_CONFIG",
            RuntimeError::MissingCredential(_) => "MISSING_CREDENTIAL",
            RuntimeError::Workspace { .. } => "INVALID_CWD",
            RuntimeError::Io { .. } => "IO",
            RuntimeError::NotFound(_) => "NOT_FOUND",
            RuntimeError::SessionDamaged(_) => "SESSION_DAMAGED",
            RuntimeError::Session(_) => "SESSION",
            RuntimeError::Agent(_) => "AGENT",
        }
    }

    /// One line for people: `CODE: message` for the failures a user fixes, else the message
    /// (what the CLI prints after `dsh: `, and what ACP and subagents report).
    pub fn describe(&self) -> String {
        if self.is_user_error() {
            format!("{}: {self}", self.code())
        } else {
            self.to_string()
        }
    }

    /// Whether the user can fix this by changing a setting, a flag or their choice of
    /// session (front ends show these as `CODE: message` rather than as internal errors).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            RuntimeError::InvalidConfig(_)
                | RuntimeError::MissingCredential(_)
                | RuntimeError::NotFound(_)
                | RuntimeError::SessionDamaged(_)
        )
    }
}
