//! `dsh run --input-format stream-json` (docs/run-json.md, "Streamed input"): user messages
//! as JSON lines on stdin, each answered by the `--json` lines of its turns and one `result`
//! line, all in one session, so a program drives several turns without starting dsh again.
//! This file reads one input line into a user message; `run.rs` drives the turns.

use std::path::Path;

use dsh_llm::{ContentBlock, ImageAttachment, Message};
use dsh_tools::GatePolicy;
use serde_json::Value;

/// Version of the input lines' schema. Raised when a field changes meaning or goes away.
pub(crate) const INPUT_SCHEMA_VERSION: u64 = 1;

/// Longest input line read (a base64 image of 20 MB is about 27 MB).
pub(crate) const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// What reading a line needs: where `path` images are read from and whether the model takes
/// images at all.
pub(crate) struct InputContext<'a> {
    pub(crate) cwd: &'a Path,
    pub(crate) gate: &'a GatePolicy,
    /// The model's id, for the message refusing images, when it takes none.
    pub(crate) text_only_model: Option<&'a str>,
}

/// The user message of one input line, or what is wrong with the line (said so that the
/// program's author can fix it). Accepted (docs/run-json.md):
/// `{"type": "user", "content": "text"}`, `content` as a list of `{"type": "text", "text"}`
/// and `{"type": "image", "path"}` / `{"type": "image", "mediaType", "data"}` blocks, and the
/// same under `"message": {"role": "user", "content": ...}` (Claude Code's shape, with its
/// `{"type": "image", "source": {"type": "base64", "media_type", "data"}}` blocks).
pub(crate) fn user_message(line: &str, context: &InputContext<'_>) -> Result<Message, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("the line is not JSON ({e})"))?;
    let Some(object) = value.as_object() else {
        return Err("a line is one JSON object: {\"type\": \"user\", \"content\": \"...\"}".into());
    };
    match object.get("schemaVersion") {
        None => {}
        Some(v) if v.as_u64() == Some(INPUT_SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "schemaVersion {v} is not known; this dsh reads version {INPUT_SCHEMA_VERSION}"
            ))
        }
    }
    match object.get("type").and_then(Value::as_str) {
        Some("user") => {}
        Some(other) => {
            return Err(format!(
                "unknown line type `{other}`; send {{\"type\": \"user\", \"content\": ...}}"
            ))
        }
        None => return Err("the line has no \"type\"; send {\"type\": \"user\", ...}".into()),
    }
    let content = match (object.get("content"), object.get("message")) {
        (Some(content), _) => content,
        (None, Some(message)) => {
            if let Some(role) = message.get("role").and_then(Value::as_str) {
                if role != "user" {
                    return Err(format!(
                        "message.role is `{role}`; only user messages are read"
                    ));
                }
            }
            message.get("content").unwrap_or(&Value::Null)
        }
        (None, None) => return Err("the line has no \"content\"".into()),
    };
    let (texts, images) = blocks(content, context)?;
    let text = texts.join("\n");
    if text.trim().is_empty() && images.is_empty() {
        return Err("the message is empty".into());
    }
    if let (Some(model), false) = (context.text_only_model, images.is_empty()) {
        return Err(format!(
            "model {model} takes no images; run with a model that does (--model) or send text"
        ));
    }
    let mut message = dsh_agent::new_user_message(text);
    message.content.extend(
        images
            .into_iter()
            .map(|attachment| ContentBlock::Image { attachment }),
    );
    Ok(message)
}

/// The texts and images of `content`: a string, or a list of blocks.
fn blocks(
    content: &Value,
    context: &InputContext<'_>,
) -> Result<(Vec<String>, Vec<ImageAttachment>), String> {
    let list = match content {
        Value::String(text) => return Ok((vec![text.clone()], Vec::new())),
        Value::Array(list) => list,
        _ => return Err("\"content\" is a string or a list of blocks".into()),
    };
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for (index, block) in list.iter().enumerate() {
        let at = |why: String| format!("content[{index}]: {why}");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text").and_then(Value::as_str) {
                Some(text) => texts.push(text.to_string()),
                None => return Err(at("a text block needs \"text\"".into())),
            },
            Some("image") => {
                if images.len() >= dsh_tui::attach::MAX_IMAGES {
                    let most = dsh_tui::attach::MAX_IMAGES;
                    return Err(at(format!("a message takes at most {most} images")));
                }
                images.push(image(block, context).map_err(at)?);
            }
            Some(other) => return Err(at(format!("unknown block type `{other}` (text, image)"))),
            None => return Err(at("a block needs a \"type\" (text, image)".into())),
        }
    }
    Ok((texts, images))
}

/// One image block: a file (`path`, read where the file gate lets dsh read, relative to the
/// working directory) or base64 `data` with its media type.
fn image(block: &Value, context: &InputContext<'_>) -> Result<ImageAttachment, String> {
    use base64::Engine as _;
    if let Some(path) = block.get("path").and_then(Value::as_str) {
        return dsh_tui::attach::load(context.gate, &context.cwd.join(path), false);
    }
    let source = block.get("source").unwrap_or(block);
    let data = source.get("data").and_then(Value::as_str);
    let media = ["mediaType", "media_type"]
        .iter()
        .find_map(|key| source.get(*key).and_then(Value::as_str));
    let (Some(data), Some(media)) = (data, media) else {
        return Err(
            "an image block needs \"path\", or \"data\" (base64) with \"mediaType\"".into(),
        );
    };
    if data.len() > MAX_LINE_BYTES {
        return Err("the image is over the 20 MB limit".into());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("\"data\" is not standard base64 ({e})"))?;
    ImageAttachment::from_declared(bytes, media, None).map_err(|e| format!("image refused: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    fn read(line: &str, text_only: bool) -> Result<Message, String> {
        let dir = tempfile::tempdir().unwrap();
        let gate = GatePolicy::new(dir.path());
        let context = InputContext {
            cwd: dir.path(),
            gate: &gate,
            text_only_model: text_only.then_some("text-model"),
        };
        user_message(line, &context)
    }

    fn images(message: &Message) -> usize {
        message
            .content
            .iter()
            .filter(|b| matches!(b, ContentBlock::Image { .. }))
            .count()
    }

    #[test]
    fn both_shapes_and_both_image_forms_are_read() {
        let plain = read(r#"{"type":"user","content":"hello"}"#, false).unwrap();
        assert_eq!(plain.text(), "hello");
        let ours = format!(
            r#"{{"type":"user","schemaVersion":1,"content":[{{"type":"text","text":"see"}},
            {{"type":"image","mediaType":"image/png","data":"{PNG_1X1}"}}]}}"#
        )
        .replace('\n', "");
        assert_eq!(images(&read(&ours, false).unwrap()), 1);
        let claude = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"image",
            "source":{{"type":"base64","media_type":"image/png","data":"{PNG_1X1}"}}}},
            {{"type":"text","text":"what is it"}}]}}}}"#
        )
        .replace('\n', "");
        let message = read(&claude, false).unwrap();
        assert_eq!(images(&message), 1);
        assert_eq!(message.text(), "what is it");
    }

    #[test]
    fn bad_lines_say_what_to_send() {
        let cases = [
            ("not json", "not JSON"),
            ("[1]", "one JSON object"),
            (r#"{"type":"assistant","content":"x"}"#, "unknown line type"),
            (r#"{"content":"x"}"#, "no \"type\""),
            (r#"{"type":"user"}"#, "no \"content\""),
            (r#"{"type":"user","content":"  "}"#, "empty"),
            (
                r#"{"type":"user","schemaVersion":2,"content":"x"}"#,
                "schemaVersion 2",
            ),
            (
                r#"{"type":"user","content":[{"type":"audio"}]}"#,
                "content[0]: unknown block",
            ),
            (
                r#"{"type":"user","content":[{"type":"image","mediaType":"image/png","data":"@@"}]}"#,
                "base64",
            ),
            (
                r#"{"type":"user","content":[{"type":"image","path":"missing.png"}]}"#,
                "missing.png",
            ),
            (
                r#"{"type":"user","message":{"role":"system","content":"x"}}"#,
                "only user",
            ),
        ];
        for (line, expected) in cases {
            let error = read(line, false).unwrap_err();
            assert!(error.contains(expected), "{line}: {error}");
        }
        let image = format!(
            r#"{{"type":"user","content":[{{"type":"image","mediaType":"image/png","data":"{PNG_1X1}"}}]}}"#
        );
        assert!(read(&image, true).unwrap_err().contains("takes no images"));
    }
}
