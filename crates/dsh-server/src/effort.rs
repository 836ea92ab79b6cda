//! Efforts per model in the web UI (docs/web.md, "Model and effort"): the menu offers only the
//! efforts the selected model takes, `POST /api/sessions/:id/call` refuses others before any
//! request, and a model switch carries a valid effort and says so.

use dsh_llm::{CallConfig, ReasoningEffort};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::sessions::Sessions;

/// `{model: {efforts: [...], default}}` for every model the factory offers and describes.
pub(crate) fn model_efforts(sessions: &Sessions) -> Value {
    let mut out = Map::new();
    for model in sessions.models() {
        if let Some(info) = sessions.model_info(&model) {
            let efforts: Vec<&str> = info.offered_efforts().iter().map(|e| e.as_str()).collect();
            out.insert(
                model,
                json!({"efforts": efforts, "default": info.default_effort.map(|e| e.as_str())}),
            );
        }
    }
    Value::Object(out)
}

/// Applies `effort` (`Some(None)`: back to the model's default) to `call`, whose model may
/// just have been `switched`. An effort the model does not take is refused with the supported
/// list; after a switch an effort the new model does not take is replaced by its default, and
/// the returned note says so.
pub(crate) fn settle(
    sessions: &Sessions,
    call: &mut CallConfig,
    effort: Option<Option<ReasoningEffort>>,
    switched: bool,
) -> Result<Option<String>, ApiError> {
    let info = sessions.model_info(&call.model);
    match effort {
        Some(Some(wanted)) => {
            if let Some(info) = &info {
                info.check_effort(wanted).map_err(|message| {
                    ApiError::new(
                        axum::http::StatusCode::BAD_REQUEST,
                        "UNSUPPORTED_REASONING_EFFORT",
                        message,
                    )
                })?;
            }
            call.reasoning_effort = Some(wanted);
            Ok(None)
        }
        Some(None) => {
            call.reasoning_effort = None;
            Ok(None)
        }
        None if switched => {
            let Some(info) = info else { return Ok(None) };
            let carried = info.carry_effort(call.reasoning_effort);
            call.reasoning_effort = carried.effort;
            Ok(carried.note)
        }
        None => Ok(None),
    }
}
