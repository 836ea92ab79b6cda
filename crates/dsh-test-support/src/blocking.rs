//! A tool that blocks until the test releases it or the call is cancelled (feature `tools`).
//!
//! Tests of cancellation, steering and concurrency need a tool call that is known to be
//! running and that ends exactly when the test says so. [`BlockingTool`] is that tool: every
//! call announces itself, then waits for one release from its [`BlockingGate`] or for the
//! call's cancel token (`ToolContext::cancel`), whichever comes first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dsh_tools::{Tool, ToolContext, ToolError, ToolErrorCode, ToolOutput};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};

/// The text a released call returns, before the call's 1-based number.
pub const RELEASED_PREFIX: &str = "released call ";

/// What a tool and its gate share.
struct Shared {
    /// One permit per release not yet taken by a call.
    releases: Semaphore,
    /// How many calls have started.
    started: watch::Sender<usize>,
    /// How many calls ended through their cancel token.
    cancelled: AtomicUsize,
}

/// A tool whose calls block until released or cancelled. Register it (wrapped in an `Arc`) in
/// a `ToolRegistry`, drive the run, and steer it through the [`BlockingGate`] it was made with.
///
/// Arguments are ignored. A released call returns the text `released call <n>`, where `n`
/// counts calls from 1 in the order they started. A cancelled call fails with
/// `ToolErrorCode::Aborted`.
pub struct BlockingTool {
    name: String,
    concurrency_safe: bool,
    shared: Arc<Shared>,
}

/// The test's side of a [`BlockingTool`]: wait until calls started, release them, count the
/// cancelled ones. Cloning gives another handle on the same tool.
#[derive(Clone)]
pub struct BlockingGate {
    shared: Arc<Shared>,
}

impl BlockingTool {
    /// A tool named `name` that runs alone (not concurrency-safe), and its gate.
    pub fn new(name: &str) -> (Self, BlockingGate) {
        let shared = Arc::new(Shared {
            releases: Semaphore::new(0),
            started: watch::Sender::new(0),
            cancelled: AtomicUsize::new(0),
        });
        let tool = Self {
            name: name.to_string(),
            concurrency_safe: false,
            shared: Arc::clone(&shared),
        };
        (tool, BlockingGate { shared })
    }

    /// Declares the tool concurrency-safe, so the pipeline may run several of its calls (and
    /// other concurrency-safe calls) at once.
    pub fn concurrency_safe(mut self) -> Self {
        self.concurrency_safe = true;
        self
    }
}

impl Tool for BlockingTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "Test tool: waits until the test releases it."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    fn concurrency_safe(&self) -> bool {
        self.concurrency_safe
    }

    fn execute<'a>(
        &'a self,
        _args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let mut number = 0;
            self.shared.started.send_modify(|count| {
                *count += 1;
                number = *count;
            });
            tokio::select! {
                permit = self.shared.releases.acquire() => match permit {
                    Ok(permit) => {
                        // The release is used up by this call.
                        permit.forget();
                        Ok(ToolOutput::text(format!("{RELEASED_PREFIX}{number}")))
                    }
                    Err(_) => Err(ToolError::new(
                        ToolErrorCode::Aborted,
                        "the blocking tool's gate was closed",
                    )),
                },
                () = ctx.cancel().cancelled() => {
                    self.shared.cancelled.fetch_add(1, Ordering::SeqCst);
                    Err(ToolError::new(ToolErrorCode::Aborted, "cancelled while blocked"))
                }
            }
        })
    }
}

impl BlockingGate {
    /// Waits until at least `calls` calls have started, up to `within`. An error says how many
    /// started, so a test can fail with it.
    pub async fn started(&self, calls: usize, within: Duration) -> Result<(), String> {
        let mut seen = self.shared.started.subscribe();
        let reached = tokio::time::timeout(within, seen.wait_for(|count| *count >= calls)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            _ => Err(format!(
                "{} of {calls} blocking calls started within {within:?}",
                self.started_count()
            )),
        }
    }

    /// How many calls have started so far.
    pub fn started_count(&self) -> usize {
        *self.shared.started.borrow()
    }

    /// Lets `calls` waiting (or future) calls finish, one each.
    pub fn release(&self, calls: usize) {
        self.shared.releases.add_permits(calls);
    }

    /// How many calls ended because their cancel token fired.
    pub fn cancelled_count(&self) -> usize {
        self.shared.cancelled.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::SpillDir;

    fn context(dir: &std::path::Path) -> ToolContext {
        ToolContext::new(dir, SpillDir::create(dir.join("spill")).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_call_blocks_until_released_and_says_which_call_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (tool, gate) = BlockingTool::new("wait");
        let tool = Arc::new(tool);
        let call = tokio::spawn({
            let tool = Arc::clone(&tool);
            let ctx = ctx.clone();
            async move { tool.execute(json!({}), &ctx).await }
        });
        gate.started(1, Duration::from_secs(5)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!call.is_finished(), "the call ended before its release");
        gate.release(1);
        let output = call.await.unwrap().unwrap();
        assert_eq!(output.text_content(), "released call 1");
        assert_eq!(gate.cancelled_count(), 0);
    }

    #[tokio::test]
    async fn a_blocked_call_ends_aborted_when_its_token_fires() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (tool, gate) = BlockingTool::new("wait");
        let cancel = ctx.cancel().clone();
        let call = tokio::spawn(async move { tool.execute(json!({}), &ctx).await });
        gate.started(1, Duration::from_secs(5)).await.unwrap();
        cancel.cancel();
        let error = call.await.unwrap().unwrap_err();
        assert_eq!(error.code, ToolErrorCode::Aborted);
        assert_eq!(gate.cancelled_count(), 1);
    }

    #[tokio::test]
    async fn started_reports_how_many_calls_it_saw() {
        let (_tool, gate) = BlockingTool::new("wait");
        let error = gate
            .started(1, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(error.starts_with("0 of 1"), "{error}");
    }
}
