//! `edit`: replace literal text in an existing file.

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

const BASE_DESCRIPTION: &str = "Edits an existing UTF-8 text file by replacing the literal text `old_string` with `new_string` (no regular expressions; whitespace and indentation must match exactly). \
Without `replace_all`, `old_string` must occur exactly once: if it is missing the call fails with NO_MATCH, if it occurs several times with AMBIGUOUS_MATCH and the count (add surrounding lines to make it unique, or set `replace_all: true` to change every occurrence). \
The file must have been read with the read tool in this session (or written by you since) and not changed since: otherwise FS_NOT_OBSERVED or FS_STALE_VERSION. \
The session's permission preset may refuse the path (PERMISSION_DENIED); under workspace-write, files that configure code run later (.git/hooks, .git/config, .dsh/, .agents/, .claude/, .mcp.json, .env*) need the user's approval. \
The write is atomic and keeps the file's permissions. The result states the number of replacements and shows added/removed line counts with a short unified diff. \
Errors start with `Error:`.";

/// The description: the base text and the escalation rules (docs/tools.md).
static DESCRIPTION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{BASE_DESCRIPTION} {}",
        crate::builtin::escalation_text("file edit")
    )
});

/// The `edit` tool. See `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditTool;

#[derive(Debug, Deserialize)]
struct EditArgs {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: Option<bool>,
}

impl Tool for EditTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        crate::builtin::file_change::present(self.name(), args)
    }

    fn preview(&self, args: &Value) -> Option<crate::ChangePreview> {
        crate::builtin::file_change::preview_edit(args)
    }

    fn summarize(&self, _args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        crate::builtin::file_change::summarize(result)
    }

    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        DESCRIPTION.as_str()
    }

    fn parameters(&self) -> Value {
        crate::builtin::with_escalation(
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "File to edit, absolute or relative to the session working directory."},
                    "old_string": {"type": "string", "description": "Exact text to replace; must occur exactly once unless replace_all is true."},
                    "new_string": {"type": "string", "description": "Replacement text; an empty string deletes old_string."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring a unique one. Default false."}
                },
                "required": ["file_path", "old_string", "new_string"]
            }),
            "file edit",
        )
    }

    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: EditArgs = parse_args("edit", args)?;
            let ctx = ctx.clone();
            tokio::task::spawn_blocking(move || edit_file(&args, &ctx))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("edit failed: {err}")))?
        })
    }
}

fn edit_file(args: &EditArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::invalid_args(
            "old_string must not be empty; to create or overwrite a whole file use write",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::invalid_args(
            "old_string and new_string are identical; nothing would change",
        ));
    }
    let target = prepare(ctx, &args.file_path)?;
    let Some((bytes, _)) = &target.existing else {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!(
                "{} does not exist; use write to create a new file",
                target.shown.display()
            ),
        ));
    };
    let old = std::str::from_utf8(bytes).map_err(|_| {
        ToolError::new(
            ToolErrorCode::BinaryFile,
            format!(
                "{} is not valid UTF-8 text; edit only changes text files",
                target.shown.display()
            ),
        )
    })?;
    let count = old.matches(args.old_string.as_str()).count();
    let replace_all = args.replace_all.unwrap_or(false);
    if count == 0 {
        return Err(ToolError::new(
            ToolErrorCode::NoMatch,
            format!(
                "old_string was not found in {}; read the file again and copy the text exactly, including whitespace",
                target.shown.display()
            ),
        ));
    }
    if count > 1 && !replace_all {
        return Err(ToolError::new(
            ToolErrorCode::AmbiguousMatch,
            format!(
                "old_string occurs {count} times in {}; include more surrounding text to make it unique, or set replace_all to true",
                target.shown.display()
            ),
        ));
    }
    let new = if replace_all {
        old.replace(args.old_string.as_str(), &args.new_string)
    } else {
        old.replacen(args.old_string.as_str(), &args.new_string, 1)
    };
    let snapshot = commit(ctx, &target, new.as_bytes())?;
    let label = display_relative(ctx.cwd(), &target.shown);
    let d = diff(old, &new, &label);
    let plural = if count == 1 { "" } else { "s" };
    let text = format!(
        "The file {} has been updated successfully ({count} replacement{plural}, +{} -{} lines).\n{}",
        target.shown.display(),
        d.added,
        d.removed,
        d.unified
    );
    Ok(ToolOutput::text(text.trim_end().to_string())
        .with_summary(format!("edited {label} (+{} -{})", d.added, d.removed))
        .with_data(change_data(&label, Some(old), &new, &d, &snapshot)))
}
