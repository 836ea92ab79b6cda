//! API errors: every failure answers `{"error": {"code", "message"}}` with a fitting status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dsh_session::SessionError;

/// A failed API request: HTTP status, a stable upper-case code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code (`NOT_FOUND`, `UNAUTHORIZED`, `SESSION_LOCKED`, ...).
    pub code: String,
    /// What went wrong, said for the user.
    pub message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// 400 `INVALID_REQUEST`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 409 with `code`.
    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 500 `INTERNAL`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<SessionError> for ApiError {
    fn from(err: SessionError) -> Self {
        let message = err.to_string();
        match err {
            SessionError::NotFound(_) => Self::not_found(message),
            SessionError::Ambiguous { .. } => Self::bad_request(message),
            SessionError::Locked { .. } => Self::conflict("SESSION_LOCKED", message),
            SessionError::ForkPoint { .. } => Self::bad_request(message),
            SessionError::BadCursor(_) => Self::bad_request(message),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "SESSION_LOG", message),
        }
    }
}

impl From<dsh_agent::AgentError> for ApiError {
    fn from(err: dsh_agent::AgentError) -> Self {
        match err {
            dsh_agent::AgentError::Session(err) => err.into(),
            dsh_agent::AgentError::Config(failure) => Self::new(
                StatusCode::BAD_REQUEST,
                &failure.code.as_str(),
                failure.message,
            ),
        }
    }
}

impl From<dsh_runtime::RuntimeError> for ApiError {
    fn from(err: dsh_runtime::RuntimeError) -> Self {
        match err {
            dsh_runtime::RuntimeError::Agent(agent) => agent.into(),
            dsh_runtime::RuntimeError::Session(session) => session.into(),
            err if err.is_user_error() => {
                Self::new(StatusCode::BAD_REQUEST, err.code(), err.to_string())
            }
            err => Self::internal(err.to_string()),
        }
    }
}

/// An operation's refusal (docs/protocol.md, "Operations") as the API has always answered it:
/// nothing waiting is `404`, a bad answer or effort `400`, a refused undo `409`; the agent's own
/// refusals (an image for a text-only model: `UNSUPPORTED_CONTENT`) keep the status and code
/// the agent's error had, `400` with the agent's code, and a log that refused is `500`.
impl From<dsh_protocol::OpError> for ApiError {
    fn from(err: dsh_protocol::OpError) -> Self {
        match err.code {
            "NOT_WAITING" => Self::not_found(err.message),
            "INVALID_ANSWER" => Self::bad_request(err.message),
            "UNSUPPORTED_REASONING_EFFORT" => {
                Self::new(StatusCode::BAD_REQUEST, err.code, err.message)
            }
            "UNAVAILABLE" => Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", err.message),
            "UNDO_REFUSED" => Self::conflict(err.code, err.message),
            "REFUSED" => {
                let code = err.specific_code().to_string();
                Self::new(StatusCode::BAD_REQUEST, &code, err.message)
            }
            "SESSION_LOG" => Self::new(StatusCode::INTERNAL_SERVER_ERROR, err.code, err.message),
            code => Self::internal(format!("{code}: {}", err.message)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"code": self.code, "message": self.message},
        });
        (self.status, axum::Json(body)).into_response()
    }
}
