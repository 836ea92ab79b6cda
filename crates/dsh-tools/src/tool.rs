//! The tool abstraction.

use std::time::Duration;

use dsh_llm::ToolSchema;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::presentation::{ResultFacts, ResultSummary, ToolPresentation};

/// A capability the model can call.
///
/// Contract for implementations:
/// * `name` is stable and unique within a registry; it is what the model writes.
/// * `parameters` is a JSON Schema object and is deterministic (same bytes every call), so the
///   tool list stays byte-stable for prompt caching (docs/agent.md, "Context discipline").
/// * `execute` never panics on any `args` (they come from the model and are untrusted); bad
///   arguments give [`ToolErrorCode::InvalidArgs`](crate::ToolErrorCode::InvalidArgs).
/// * `execute` honours `ctx.cancel`: once it fires, the call stops its work (killing any
///   processes it started) and returns promptly, normally with `ABORTED`.
/// * Dropping the returned future before completion kills every process the call started
///   (no orphans), so a caller may enforce timeouts by dropping. Bounded file-system work
///   already handed to a blocking thread (a `read`, a `grep` walk) may finish in the
///   background; its result is discarded.
pub trait Tool: Send + Sync {
    /// The model-facing name (`bash`, `read`, ...).
    fn name(&self) -> &str;

    /// Description written for the model: what the tool does, its limits and failure markers.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;

    /// True when calls may run in parallel with other concurrency-safe calls (no writes, no
    /// processes). The pipeline runs every other call alone.
    fn concurrency_safe(&self) -> bool {
        false
    }

    /// A wall-clock limit the pipeline should enforce around `execute` (failing with
    /// `TOOL_TIMEOUT`), or `None` when the tool bounds its own run time.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// The schema the model sees, built from `name`, `description` and `parameters`.
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
        }
    }

    /// How front ends show a call with these arguments (docs/tools.md, "Presentation"): title,
    /// subject, kind and view. `args` is whatever the model sent (`Null` when it was not JSON),
    /// so this never fails. Default: the tool's name, no subject (front ends show the
    /// arguments), kind `other`, view `text`.
    fn present(&self, args: &Value) -> ToolPresentation {
        let _ = args;
        ToolPresentation::new(self.name())
    }

    /// A short summary of a finished call (`exit 1`, `42 lines read`), from what the log keeps
    /// of its result; `None` when the tool has nothing to say (front ends then show the error
    /// code of a failed call).
    fn summarize(&self, args: &Value, result: &ResultFacts<'_>) -> Option<ResultSummary> {
        let _ = (args, result);
        None
    }

    /// What a call with these arguments would change, for the user deciding whether to allow
    /// it (a diff for `write` and `edit`); from the arguments alone, never failing. Default:
    /// `None` (front ends list the arguments).
    fn preview(&self, args: &Value) -> Option<crate::ChangePreview> {
        let _ = args;
        None
    }

    /// Runs one call with already parsed arguments (see [`crate::parse_raw_arguments`]).
    fn execute<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}
