//! JSON-RPC 2.0 as ACP uses it: one JSON object per line in each direction, requests and
//! notifications both ways, responses matched to requests by id.
//!
//! Everything written goes through one [`Outgoing`] queue drained by [`write_lines`], so lines
//! never interleave and messages sent from one task keep their order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dsh_llm::LockExt;
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP's "Authentication required": `session/new` without a provider key.
pub const AUTH_REQUIRED: i64 = -32000;
/// ACP's "Resource not found": `session/load` of a session that does not exist.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error object (`{code, message, data?}`).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The error code (one of the constants of this module).
    pub code: i64,
    /// A human-readable message.
    pub message: String,
    /// Structured details, when there are any.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message` and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32602 Invalid params: <what>`.
    pub fn invalid_params(what: impl std::fmt::Display) -> Self {
        RpcError::new(INVALID_PARAMS, format!("Invalid params: {what}"))
    }

    /// `-32603 Internal error: <what>`.
    pub fn internal(what: impl std::fmt::Display) -> Self {
        RpcError::new(INTERNAL_ERROR, format!("Internal error: {what}"))
    }

    /// Adds structured details.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One message read from the peer.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: it must get exactly one response with the same id.
    Request {
        /// The request id (number or string), echoed in the response.
        id: Value,
        /// The method name.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification: no response.
    Notification {
        /// The method name.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A response to one of our requests.
    Response {
        /// The id of our request.
        id: Value,
        /// The result, or the error object.
        result: Result<Value, Value>,
    },
}

/// Parses one line. A malformed line gives the id to answer (`null` when none can be read)
/// and the error to answer with; it never panics.
pub fn parse_line(line: &str) -> Result<Incoming, (Value, RpcError)> {
    let value: Value = serde_json::from_str(line).map_err(|err| {
        (
            Value::Null,
            RpcError::new(PARSE_ERROR, format!("Parse error: {err}")),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, "Invalid Request: expected one JSON object"),
        ));
    };
    let id = object.remove("id");
    let id_ok = matches!(id, None | Some(Value::Number(_)) | Some(Value::String(_)));
    let reply_id = match &id {
        Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
        _ => Value::Null,
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !id_ok {
        return Err((
            reply_id,
            RpcError::new(
                INVALID_REQUEST,
                "Invalid Request: needs \"jsonrpc\": \"2.0\" and a number or string id",
            ),
        ));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(_), _) => Err((
            reply_id,
            RpcError::new(INVALID_REQUEST, "Invalid Request: method must be a string"),
        )),
        (None, Some(id)) => {
            if let Some(error) = object.remove("error") {
                Ok(Incoming::Response {
                    id,
                    result: Err(error),
                })
            } else if let Some(result) = object.remove("result") {
                Ok(Incoming::Response {
                    id,
                    result: Ok(result),
                })
            } else {
                Err((
                    id,
                    RpcError::new(
                        INVALID_REQUEST,
                        "Invalid Request: no method, result or error",
                    ),
                ))
            }
        }
        (None, None) => Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, "Invalid Request: no method"),
        )),
    }
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>>;

/// The sending side of the connection: responses, notifications, and our own requests (whose
/// answers [`Outgoing::deliver`] routes back). Cheap to clone.
#[derive(Clone)]
pub struct Outgoing {
    lines: mpsc::UnboundedSender<Value>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
}

/// Removes an unanswered request from the pending table when its waiter goes away (for
/// example a cancelled turn that stopped waiting for a permission answer).
struct PendingGuard {
    pending: Pending,
    key: String,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.pending.lock_or_recover().remove(&self.key);
    }
}

impl Outgoing {
    /// A sender whose lines go to `lines` (drained by `write_lines`).
    pub fn new(lines: mpsc::UnboundedSender<Value>) -> Self {
        Outgoing {
            lines,
            pending: Arc::default(),
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    fn send(&self, message: Value) {
        // The writer is gone only when the peer closed stdout; nobody is left to read this.
        let _ = self.lines.send(message);
    }

    /// Answers request `id` with `result`.
    pub fn respond(&self, id: Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Answers request `id` (`null` when it could not be read) with `error`.
    pub fn respond_error(&self, id: Value, error: &RpcError) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}));
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and waits for its response: `Ok(result)` or `Err(error object)`. When
    /// the connection closes first the error is a local `-32603`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let id = Value::String(format!("dsh-{id}"));
        let key = id.to_string();
        let (answer, wait) = oneshot::channel();
        self.pending.lock_or_recover().insert(key.clone(), answer);
        let _guard = PendingGuard {
            pending: Arc::clone(&self.pending),
            key,
        };
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        match wait.await {
            Ok(result) => result,
            Err(_) => Err(RpcError::internal("connection closed").to_json()),
        }
    }

    /// Routes a response from the peer to the request waiting for it. A response to an
    /// unknown or abandoned request is dropped: nobody waits for it any more.
    pub fn deliver(&self, id: &Value, result: Result<Value, Value>) {
        let waiter = self.pending.lock_or_recover().remove(&id.to_string());
        if let Some(waiter) = waiter {
            // The waiter may have given up in the meantime; then the answer has no reader.
            let _ = waiter.send(result);
        }
    }
}

/// Writes every queued message as one line and flushes after each, until every [`Outgoing`]
/// is dropped or the output fails (the peer went away).
pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::UnboundedReceiver<Value>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(message) = lines.recv().await {
        let mut text = message.to_string();
        text.push('\n');
        output.write_all(text.as_bytes()).await?;
        output.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn malformed_lines_get_errors_not_panics() {
        for (line, code) in [
            ("{", PARSE_ERROR),
            ("[1,2]", INVALID_REQUEST),
            ("42", INVALID_REQUEST),
            (r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0"}"#, INVALID_REQUEST),
        ] {
            let (_, error) = parse_line(line).unwrap_err();
            assert_eq!(error.code, code, "{line}");
        }
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        assert!(matches!(
            parse_line(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
            Ok(Incoming::Request { .. })
        ));
        assert!(matches!(
            parse_line(r#"{"jsonrpc":"2.0","method":"session/cancel"}"#),
            Ok(Incoming::Notification { .. })
        ));
        assert!(matches!(
            parse_line(r#"{"jsonrpc":"2.0","id":"dsh-0","result":null}"#),
            Ok(Incoming::Response {
                result: Ok(Value::Null),
                ..
            })
        ));
    }

    #[tokio::test]
    async fn responses_reach_the_waiting_request() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let out = Outgoing::new(tx);
        let asker = {
            let out = out.clone();
            tokio::spawn(async move { out.request("x/y", json!({})).await })
        };
        let sent = rx.recv().await.unwrap();
        out.deliver(&sent["id"], Ok(json!({"ok": true})));
        assert_eq!(asker.await.unwrap(), Ok(json!({"ok": true})));
    }
}
