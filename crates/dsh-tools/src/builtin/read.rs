//! `read`: a window of a text file, line-numbered as dsh does (`N: text`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::args::{opt_count, parse_args};
use crate::context::ToolContext;
use crate::error::{ToolError, ToolErrorCode};
use crate::gate::GateFile;
use crate::observe::ContentHasher;
use crate::output::ToolOutput;
use crate::presentation::{
    count, string_arg, ResultFacts, ResultSummary, ToolKind, ToolPresentation, ToolView,
};
use crate::tool::Tool;

/// Bytes examined for a NUL byte to decide a file is binary.
const BINARY_PROBE: usize = 8 * 1024;

const DESCRIPTION: &str = "Reads a UTF-8 text file and returns its lines numbered from 1 as `N: text`, inside `<content>` tags after the file's absolute `<path>`. \
`offset` is the 1-based first line (default 1) and `limit` the number of lines (default and maximum 2000). \
Lines longer than 2000 characters are cut and end with `... [line truncated]`; a result stops before it would exceed 50 KB. \
The result ends with `(End of file - total N lines)` when the file's end was reached, otherwise with `(Showing lines A-B of N. Use offset=B+1 to continue.)`: call again with that offset to see more. \
Relative paths are resolved against the session working directory. \
Reading a file is what allows write and edit to change it later in this session. \
Errors start with `Error:`: a missing path, a directory (use glob to list files), a binary file (refused), or an offset past the end of the file.";

/// The `read` tool. See `docs/tools.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadTool;

#[derive(Debug, Deserialize)]
struct ReadArgs {
    file_path: String,
    #[serde(default, deserialize_with = "opt_count")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "opt_count")]
    limit: Option<u64>,
}

impl Tool for ReadTool {
    fn present(&self, args: &Value) -> ToolPresentation {
        let path = string_arg(args, "file_path").unwrap_or("?");
        let offset = args.get("offset").and_then(Value::as_u64);
        let subject = match args.get("limit").and_then(Value::as_u64) {
            Some(limit) => {
                let from = offset.unwrap_or(1).max(1);
                format!("{path} lines {from}-{}", (from + limit).saturating_sub(1))
            }
            None => match offset {
                Some(offset) => format!("{path} from line {}", offset.max(1)),
                None => path.to_string(),
            },
        };
        ToolPresentation::new(self.name())
            .subject(subject)
            .kind(ToolKind::Read)
            .view(ToolView::Contents)
            .location(path)
    }

    /// The lines actually read, from the result (`meta.linesShown`, `offset` and `totalLines`;
    /// else the numbered lines of the text), not from the request's `limit`, which a short file
    /// or the byte cap cuts. The subject becomes the path alone.
    fn summarize(&self, args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        if result.error.is_some() {
            return None;
        }
        let shown = result.meta_u64("linesShown").unwrap_or_else(|| {
            result
                .text
                .lines()
                .filter(|l| {
                    let digits = l.chars().take_while(char::is_ascii_digit).count();
                    digits > 0 && (l[digits..].starts_with(": ") || l[digits..].starts_with('\t'))
                })
                .count() as u64
        });
        let lines = count(shown, "line", "lines");
        let text = match (result.meta_u64("offset"), result.meta_u64("totalLines")) {
            (Some(from), Some(total)) if shown > 0 && shown < total => {
                format!("{lines} read ({from}-{} of {total})", from + shown - 1)
            }
            _ => format!("{lines} read"),
        };
        let mut summary = ResultSummary::new(text);
        summary.subject = Some(string_arg(args, "file_path").unwrap_or("?").to_string());
        Some(summary)
    }

    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "File to read, absolute or relative to the session working directory."},
                "offset": {"type": "number", "description": "1-based line to start from. Default 1."},
                "limit": {"type": "number", "description": "How many lines to return. Default and maximum 2000."}
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
            let args: ReadArgs = parse_args("read", args)?;
            let ctx = ctx.clone();
            tokio::task::spawn_blocking(move || read_window(&args, &ctx))
                .await
                .map_err(|err| ToolError::new(ToolErrorCode::Io, format!("read failed: {err}")))?
        })
    }
}

/// The path prologue of `read` and `read_image`: `file_path` (not empty) resolved against the
/// session's cwd and opened through the file gate (docs/SECURITY.md, "The file gate"): the
/// path as shown and the open regular file.
pub(crate) fn open_through_gate(
    ctx: &ToolContext,
    file_path: &str,
) -> Result<(PathBuf, GateFile), ToolError> {
    if file_path.is_empty() {
        return Err(ToolError::invalid_args("file_path must not be empty"));
    }
    let path = ctx.absolute(file_path);
    let opened = ctx
        .gate()
        .open_read(&path)
        .map_err(|err| err.into_tool_error(&path))?;
    Ok((path, opened))
}

fn read_window(args: &ReadArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let limits = ctx.limits();
    let offset = match args.offset {
        None | Some(0) => 1,
        Some(n) => n,
    };
    let max_lines = limits.read_max_lines as u64;
    let limit = match args.limit {
        None => max_lines,
        Some(0) => return Err(ToolError::invalid_args("limit must be at least 1")),
        Some(n) => n.min(max_lines),
    };
    let (path, opened) = open_through_gate(ctx, &args.file_path)?;
    let GateFile { file, real, meta } = opened;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let probe = reader
        .fill_buf()
        .map_err(|err| ToolError::io("cannot read", &path, &err))?;
    if probe[..probe.len().min(BINARY_PROBE)].contains(&0) {
        return Err(ToolError::new(
            ToolErrorCode::BinaryFile,
            format!(
                "{} looks like a binary file (it contains NUL bytes); read only shows text. Inspect it with bash (e.g. `file`, `xxd | head`) if needed",
                path.display()
            ),
        ));
    }

    let window = scan(
        &mut reader,
        offset,
        limit,
        limits.read_max_line_chars,
        limits.read_max_bytes,
    )
    .map_err(|err| ToolError::io("cannot read", &path, &err))?;
    let observation = window.hasher.finish(window.bytes, Some(&meta));
    ctx.observations().record(&real, observation);

    let total = window.total_lines;
    if offset > total.max(1) {
        return Err(ToolError::invalid_args(format!(
            "offset {offset} is past the end of {} ({total} lines)",
            path.display()
        )));
    }
    let last = offset + window.lines.len() as u64 - 1;
    let mut body = String::new();
    body.push_str(&format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n",
        path.display()
    ));
    for (i, line) in window.lines.iter().enumerate() {
        body.push_str(&format!("{}: {line}\n", offset + i as u64));
    }
    let notice = if window.lines.is_empty() || last >= total {
        format!("(End of file - total {total} lines)")
    } else if window.byte_capped {
        format!(
            "(Output capped at {} KB. Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
            limits.read_max_bytes / 1024,
            last + 1
        )
    } else {
        format!(
            "(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
            last + 1
        )
    };
    body.push('\n');
    body.push_str(&notice);
    body.push_str("\n</content>");
    let shown = window.lines.len();
    Ok(ToolOutput::text(body)
        .with_summary(format!(
            "read {} ({shown} of {total} lines)",
            display_name(&path)
        ))
        .with_data(json!({
            "path": path,
            "offset": offset,
            "linesShown": shown,
            "totalLines": total,
            "truncatedLines": window.truncated_lines,
        })))
}

fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

struct Window {
    lines: Vec<String>,
    total_lines: u64,
    bytes: u64,
    byte_capped: bool,
    truncated_lines: usize,
    hasher: ContentHasher,
}

/// Streams the whole file once: hashes it, counts its lines, and keeps the formatted lines of
/// the window `[offset, offset + limit)` that fit in `max_bytes`.
fn scan<R: Read>(
    reader: &mut BufReader<R>,
    offset: u64,
    limit: u64,
    max_line_chars: usize,
    max_bytes: usize,
) -> std::io::Result<Window> {
    let mut w = Window {
        lines: Vec::new(),
        total_lines: 0,
        bytes: 0,
        byte_capped: false,
        truncated_lines: 0,
        hasher: ContentHasher::new(),
    };
    let mut used = 0usize;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = reader.read_until(b'\n', &mut raw)?;
        if n == 0 {
            break;
        }
        w.hasher.update(&raw);
        w.bytes += n as u64;
        w.total_lines += 1;
        let number = w.total_lines;
        let in_window = number >= offset && number < offset.saturating_add(limit);
        if !in_window || w.byte_capped {
            continue;
        }
        let mut text = raw.as_slice();
        if let Some(stripped) = text.strip_suffix(b"\n") {
            text = stripped;
        }
        if let Some(stripped) = text.strip_suffix(b"\r") {
            text = stripped;
        }
        let mut line = String::from_utf8_lossy(text).into_owned();
        if let Some((cut, _)) = line.char_indices().nth(max_line_chars) {
            line.truncate(cut);
            line.push_str("... [line truncated]");
            w.truncated_lines += 1;
        }
        let cost = line.len() + number.to_string().len() + 3;
        if used + cost > max_bytes && !w.lines.is_empty() {
            w.byte_capped = true;
            continue;
        }
        used += cost;
        w.lines.push(line);
    }
    Ok(w)
}
