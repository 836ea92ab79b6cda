//! Typed errors of the agent's public seams: what an [`crate::Extension`] refuses, what a
//! [`crate::PermissionSource`] cannot provide, and why a [`crate::ChildFactory`] or a child
//! agent failed. Each has a stable upper-case code (docs/agent.md, "Extensions").

use dsh_llm::Failure;
use dsh_tools::ToolErrorCode;

use crate::AgentError;

/// Why an extension refused: a `pre_step` that blocks the step, or a user command that cannot
/// run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionError {
    /// A handler (a hook, a policy) blocked the step; the turn ends `blocked` with this reason.
    #[error("{0}")]
    Blocked(String),
    /// `/name` is not a command any extension offers.
    #[error("unknown command /{0}")]
    UnknownCommand(String),
    /// The command exists but refused to run (not user-invocable, bad arguments, ...); the
    /// message is for the user.
    #[error("{0}")]
    CommandRefused(String),
}

impl ExtensionError {
    /// The stable code, e.g. `"BLOCKED"`.
    pub fn code(&self) -> &'static str {
        match self {
            ExtensionError::Blocked(_) => "BLOCKED",
            ExtensionError::UnknownCommand(_) => "UNKNOWN_COMMAND",
            ExtensionError::CommandRefused(_) => "COMMAND_REFUSED",
        }
    }
}

/// Why a permission preset cannot be used on this host (returned by a
/// [`crate::PermissionSource`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionError {
    /// No confinement mechanism can enforce the preset here (or its setting is invalid).
    #[error("{0}")]
    SandboxUnavailable(String),
    /// The front end does not offer the preset (any other reason).
    #[error("{0}")]
    Unavailable(String),
}

impl PermissionError {
    /// The stable code, e.g. `"SANDBOX_UNAVAILABLE"`.
    pub fn code(&self) -> &'static str {
        match self {
            PermissionError::SandboxUnavailable(_) => "SANDBOX_UNAVAILABLE",
            PermissionError::Unavailable(_) => "PRESET_UNAVAILABLE",
        }
    }
}

impl From<String> for PermissionError {
    fn from(reason: String) -> Self {
        PermissionError::Unavailable(reason)
    }
}

/// Why a child agent could not be built or did not finish its task. The `subagent` tools
/// report it with [`SubagentError::tool_code`] and a message that keeps the child's own code.
#[derive(Debug, thiserror::Error)]
pub enum SubagentError {
    /// The front end could not build the child's parts. `code` is the front end's own code
    /// (e.g. `INVALID_CONFIG`); `message` is shown as it is.
    #[error("{message}")]
    Setup {
        /// Upper-case code of the failure.
        code: String,
        /// What went wrong and what to do.
        message: String,
    },
    /// The child's session log or loop failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The child was cancelled (with the parent's call).
    #[error("the subagent was cancelled")]
    Cancelled,
    /// A hook or policy blocked the child's turn.
    #[error("the subagent was blocked{}", detail(.0.as_deref().unwrap_or("")))]
    Blocked(Option<String>),
    /// The child's model call failed and its retries gave up.
    #[error("the subagent's model call failed: {}: {}", .0.code.as_str(), .0.message)]
    ModelFailed(Failure),
    /// The child's turn ended another way (`max_tokens`, `interrupted`, ...).
    #[error("the subagent ended `{kind}`{}", detail(.final_text))]
    Ended {
        /// The turn-end kind.
        kind: &'static str,
        /// The child's last text, possibly empty.
        final_text: String,
    },
    /// The child ran no turn at all.
    #[error("the subagent ran no turn")]
    NoTurn,
}

fn detail(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl SubagentError {
    /// A setup failure with the front end's `code`.
    pub fn setup(code: impl Into<String>, message: impl Into<String>) -> Self {
        SubagentError::Setup {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The stable code of the failure itself: the front end's setup code, the child's model
    /// failure code, or one of `SESSION`, `CONFIG`, `ABORTED`, `BLOCKED`, `ENDED`, `NO_TURN`.
    pub fn code(&self) -> String {
        match self {
            SubagentError::Setup { code, .. } => code.clone(),
            SubagentError::Agent(AgentError::Session(_)) => "SESSION".to_string(),
            SubagentError::Agent(AgentError::Config(failure)) => failure.code.as_str().into(),
            SubagentError::Cancelled => "ABORTED".to_string(),
            SubagentError::Blocked(_) => "BLOCKED".to_string(),
            SubagentError::ModelFailed(failure) => failure.code.as_str().into(),
            SubagentError::Ended { .. } => "ENDED".to_string(),
            SubagentError::NoTurn => "NO_TURN".to_string(),
        }
    }

    /// The tool error code the parent's `subagent` call fails with: `ABORTED` for a
    /// cancellation (also a cancelled model call), `PERMISSION_DENIED` for a blocked turn,
    /// `SANDBOX_UNAVAILABLE` when the child's preset cannot be confined, `TOOL_TIMEOUT` for a
    /// model call that timed out, `IO` for the rest.
    pub fn tool_code(&self) -> ToolErrorCode {
        match self.code().as_str() {
            "ABORTED" => ToolErrorCode::Aborted,
            "BLOCKED" | "PERMISSION_DENIED" => ToolErrorCode::PermissionDenied,
            "SANDBOX_UNAVAILABLE" => ToolErrorCode::SandboxUnavailable,
            "TIMEOUT" => ToolErrorCode::ToolTimeout,
            _ => ToolErrorCode::Io,
        }
    }
}

impl From<String> for SubagentError {
    fn from(message: String) -> Self {
        SubagentError::setup("SUBAGENT_SETUP", message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::FailureCode;

    #[test]
    fn subagent_failures_keep_their_code() {
        let cases = [
            (
                SubagentError::setup("INVALID_CONFIG", "no key"),
                "INVALID_CONFIG",
                ToolErrorCode::Io,
            ),
            (
                SubagentError::ModelFailed(Failure::new(FailureCode::RateLimit, "slow down")),
                "RATE_LIMIT",
                ToolErrorCode::Io,
            ),
            (
                SubagentError::ModelFailed(Failure::new(FailureCode::Timeout, "idle")),
                "TIMEOUT",
                ToolErrorCode::ToolTimeout,
            ),
            (
                SubagentError::setup("SANDBOX_UNAVAILABLE", "no bwrap"),
                "SANDBOX_UNAVAILABLE",
                ToolErrorCode::SandboxUnavailable,
            ),
            (SubagentError::Cancelled, "ABORTED", ToolErrorCode::Aborted),
            (
                SubagentError::Blocked(Some("hook said no".into())),
                "BLOCKED",
                ToolErrorCode::PermissionDenied,
            ),
            (SubagentError::NoTurn, "NO_TURN", ToolErrorCode::Io),
        ];
        for (error, code, tool_code) in cases {
            assert_eq!(error.code(), code, "{error}");
            assert_eq!(error.tool_code(), tool_code, "{error}");
        }
        let failed = SubagentError::ModelFailed(Failure::new(FailureCode::Auth, "bad key"));
        assert_eq!(
            failed.to_string(),
            "the subagent's model call failed: AUTH: bad key"
        );
        let ended = SubagentError::Ended {
            kind: "max_tokens",
            final_text: "half".into(),
        };
        assert_eq!(ended.to_string(), "the subagent ended `max_tokens`: half");
    }

    #[test]
    fn extension_and_permission_errors_have_codes() {
        assert_eq!(ExtensionError::Blocked("x".into()).code(), "BLOCKED");
        assert_eq!(
            ExtensionError::UnknownCommand("nope".into()).to_string(),
            "unknown command /nope"
        );
        assert_eq!(
            PermissionError::from("not here".to_string()).code(),
            "PRESET_UNAVAILABLE"
        );
        assert_eq!(
            PermissionError::SandboxUnavailable("no bwrap".into()).code(),
            "SANDBOX_UNAVAILABLE"
        );
    }
}
