//! Efforts per model in the web UI (docs/web.md, "Model and effort"): the menu offers only the
//! efforts the selected model takes. `POST /api/sessions/:id/call` switches through
//! `Op::SetModel` and `Op::SetEffort` (docs/protocol.md), which refuse other efforts before any
//! request and carry a valid effort across a model switch.

use serde_json::{json, Map, Value};

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
