//! `read_image`: an image file for the model to look at (docs/tools.md, "read_image").
//!
//! Path rules are `read`'s: relative paths resolve against the session's cwd, only regular
//! files are read. The bytes must be PNG, JPEG, GIF or WebP (recognised from their first bytes,
//! not the name) and at most 20 MB; the result is dsh's text line (`image/png image, WxH px, N
//! bytes`) followed by the image block, whose bytes the session log stores once beside the
//! session (docs/sessions.md, "Images").

use std::io::Read as _;

use dsh_llm::{ContentBlock, ImageAttachment, ImageError, MAX_IMAGE_BYTES};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::parse_args;
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::presentation::{string_arg, ToolKind, ToolPresentation};
use crate::tool::Tool;

const DESCRIPTION: &str = "Read a PNG/JPEG/WebP/GIF file and return the image itself, with its pixel size and byte count. \
Use this tool directly to look at an image instead of installing image libraries or converting it. \
Relative paths are resolved against the session working directory. Images over 20 MB are refused. \
Independent files may be read concurrently in small batches. Requires the current model to accept image input.";

/// The `read_image` tool. See `docs/tools.md`. Registered only for a model that takes images.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadImageTool;

#[derive(Debug, Deserialize)]
struct ReadImageArgs {
    file_path: String,
}

impl Tool for ReadImageTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        let path = string_arg(args, "file_path").unwrap_or("?");
        ToolPresentation::new(self.name())
            .subject(path)
            .kind(ToolKind::Read)
            .location(path)
    }

    fn name(&self) -> &str {
        "read_image"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path to the image file, absolute or relative to the session working directory."}
            },
            "required": ["file_path"]
        })
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: ReadImageArgs = parse_args("read_image", args)?;
            let ctx = ctx.clone();
            tokio::task::spawn_blocking(move || read_image(&args.file_path, &ctx))
                .await
                .map_err(|err| {
                    ToolError::new(ToolErrorCode::Io, format!("read_image failed: {err}"))
                })?
        })
    }
}

fn read_image(file_path: &str, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let (path, opened) = super::read::open_through_gate(ctx, file_path)?;
    let meta = &opened.meta;
    let too_large = |bytes: u64| {
        ToolError::new(
            ToolErrorCode::LimitReached,
            format!(
                "{} is {bytes} bytes, over the 20 MB ({MAX_IMAGE_BYTES} bytes) image limit; make a smaller copy (e.g. scale it down) and read that",
                path.display()
            ),
        )
    };
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(too_large(meta.len()));
    }
    // Read at most one byte past the limit: a file that grew since the stat is still refused.
    let file = opened.file;
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_IMAGE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|err| ToolError::io("cannot read", &path, &err))?;
    let name = path.file_name().and_then(|n| n.to_str());
    let image = ImageAttachment::from_bytes(data, name).map_err(|err| match err {
        ImageError::TooLarge { bytes, .. } => too_large(bytes),
        // Never the file's bytes in the message (it would show the start of any file,
        // a secret included): the format error says only that it is not an image.
        ImageError::NotAnImage { .. } => ToolError::new(
            ToolErrorCode::Unsupported,
            format!(
                "{} is not a PNG, JPEG, GIF or WebP image (its first bytes match none of them); read_image only shows images",
                path.display()
            ),
        ),
        other => ToolError::new(
            ToolErrorCode::Unsupported,
            format!("{}: {other}", path.display()),
        ),
    })?;
    let size = match image.dimensions() {
        Some(dims) => format!("{dims} px"),
        None => "size unknown".to_string(),
    };
    let line = format!("{} image, {size}, {} bytes", image.media_type, image.bytes);
    let text = format!(
        "<path>{}</path>\n<type>image</type>\n<content>\n{line}\n</content>",
        path.display()
    );
    let data = json!({
        "path": path.display().to_string(),
        "mediaType": image.media_type,
        "bytes": image.bytes,
        "width": image.width,
        "height": image.height,
    });
    Ok(ToolOutput {
        content: vec![
            ContentBlock::text(text),
            ContentBlock::Image { attachment: image },
        ],
        summary: line,
        data: Some(data),
    })
}
