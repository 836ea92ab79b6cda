//! `write`: create a file or replace its whole content.

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::parse_args;
use crate::builtin::file_change::{change_data, commit, diff, prepare};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::output::ToolOutput;
use crate::paths::display_relative;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation};
use crate::tool::Tool;

const BASE_DESCRIPTION: &str = "Creates a UTF-8 text file, or replaces the entire content of an existing one, with `content`. \
Relative paths are resolved against the session working directory; missing parent directories are created. \
An existing file must have been read with the read tool in this session and not changed since: otherwise the call fails with `Error:` and code FS_NOT_OBSERVED (read it first) or FS_STALE_VERSION (read it again). New files need no read. \
The write is atomic (a temporary file renamed over the target) and keeps the file's permissions. \
The session's permission preset may refuse the path (PERMISSION_DENIED): read-only allows no writes, workspace-write only inside the working directory and temp directories, after following symlinks and `..`. \
Under workspace-write, files that configure code run later (.git/hooks, .git/config, .dsh/, .agents/, .claude/, .mcp.json, .env*) need the user's approval and are refused when nobody can approve. \
The result reports whether the file was created or replaced, with added/removed line counts and a short unified diff. \
For a small change to an existing file prefer edit.";

/// The description: the base text and the escalation rules (docs/tools.md).
static DESCRIPTION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{BASE_DESCRIPTION} {}",
        crate::builtin::escalation_text("file write")
    )
});

/// The `write` tool. See `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTool;

#[derive(Debug, Deserialize)]
struct WriteArgs {
    file_path: String,
    content: String,
}

impl Tool for WriteTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        crate::builtin::file_change::present(self.name(), args)
    }

    fn preview(&self, args: &Value) -> Option<crate::ChangePreview> {
        crate::builtin::file_change::preview_write(args)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        crate::builtin::file_change::summarize(result)
    }

    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        DESCRIPTION.as_str()
    }

    fn parameters(&self) -> Value {
        crate::builtin::with_escalation(
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "File to create or replace, absolute or relative to the session working directory."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["file_path", "content"]
            }),
            "file write",
        )
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: WriteArgs = parse_args("write", args)?;
            let ctx = ctx.clone();
            tokio::task::spawn_blocking(move || write_file(&args, &ctx))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("write failed: {err}")))?
        })
    }
}

fn write_file(args: &WriteArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let target = prepare(ctx, &args.file_path)?;
    let label = display_relative(ctx.cwd(), &target.shown);
    let old = target
        .existing
        .as_ref()
        .map(|(bytes, _)| String::from_utf8_lossy(bytes).into_owned());
    let snapshot = commit(ctx, &target, args.content.as_bytes())?;
    let d = diff(old.as_deref().unwrap_or(""), &args.content, &label);
    let lines = args.content.lines().count();
    let (status, summary) = match &old {
        None => (
            format!("Created file ({lines} lines, {} bytes)", args.content.len()),
            format!("created {label} (+{})", d.added),
        ),
        Some(_) => (
            format!(
                "Replaced file (+{} -{} lines, now {lines} lines)",
                d.added, d.removed
            ),
            format!("replaced {label} (+{} -{})", d.added, d.removed),
        ),
    };
    let mut text = format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n{status}\n</content>",
        target.shown.display()
    );
    if old.is_some() && !d.unified.is_empty() {
        text.push('\n');
        text.push_str(&d.unified);
    }
    Ok(ToolOutput::text(text)
        .with_summary(summary)
        .with_data(change_data(
            &label,
            old.as_deref(),
            &args.content,
            &d,
            &snapshot,
        )))
}
