//! The adapter seam (docs/model-calls.md, "Generate requests", "Adapter seam"): one streaming call
//! per attempt, registered under a route.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::chunk::Chunk;
use crate::config::{PreparedCallConfig, ReasoningEffort};
use crate::failure::{Failure, FailureCode};
use crate::message::Message;

/// A streamed reply. It always ends with exactly one [`Chunk::Finish`]; failures arrive as
/// `finish {error}` or `finish {aborted}`, never as a panic or a silently ended stream.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Chunk> + Send>>;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The name the model calls it by.
    pub name: String,
    /// What it does and when to use it, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Why a call is made, when it is not an ordinary agent step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// Summarising the history for compaction.
    Compaction,
    /// Naming the session.
    SessionTitle,
}

/// Everything one model call needs (docs/model-calls.md, "Generate requests").
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// Route, model and sampling, already prepared.
    pub config: PreparedCallConfig,
    /// The system prompt.
    pub system: String,
    /// The history, shared so that building a request does not copy it.
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call, sorted by name.
    pub tools: Arc<Vec<ToolSchema>>,
    /// Live cancellation: cancelling it aborts the call, which then finishes `aborted`.
    pub cancel: CancellationToken,
    /// The session the call belongs to, where a provider uses it (cache routing).
    pub session_id: Option<String>,
    /// Why the call is made, when it is not an ordinary step.
    pub purpose: Option<Purpose>,
    /// Where `messages` comes from, when its producer promises that it only grows: any two
    /// requests with the same lineage agree on every message both hold (the first `n` messages
    /// of the shorter are the first `n` of the longer). An adapter may then reuse what it made
    /// of the earlier request's messages (docs/model-calls.md, "History lineage"). `None`
    /// promises nothing.
    pub history_lineage: Option<HistoryLineage>,
}

/// A [`GenerateRequest::history_lineage`]: unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HistoryLineage(u64);

impl HistoryLineage {
    /// A lineage no request has had before.
    pub fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        HistoryLineage(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// How many leading `messages` (of a request of lineage `now`) are the messages an adapter
    /// made something of before, whose ids were `earlier_ids` (under lineage `earlier`): those
    /// whose ids agree, when both are the same lineage; none otherwise, or without a lineage.
    pub fn unchanged_prefix(
        earlier: Option<Self>,
        earlier_ids: &[String],
        now: Option<Self>,
        messages: &[Message],
    ) -> usize {
        if now.is_none() || now != earlier {
            return 0;
        }
        earlier_ids
            .iter()
            .zip(messages)
            .take_while(|(id, message)| **id == message.id)
            .count()
    }
}

impl Default for HistoryLineage {
    fn default() -> Self {
        Self::new()
    }
}

/// What an adapter knows about a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The model id.
    pub id: String,
    /// Context window in tokens.
    pub context_window: u64,
    /// Output limit used when a call asks for none.
    pub default_max_tokens: u64,
    /// Reasoning efforts the model accepts (`Off` included when thinking can be disabled).
    pub efforts: Vec<ReasoningEffort>,
    /// Effort used when a call asks for none.
    pub default_effort: Option<ReasoningEffort>,
    /// Input kinds the model accepts (`text`, `image`).
    pub modalities: Vec<String>,
    /// Sampling temperature sent when a call sets none (a configured row's `temperature`);
    /// `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Stop sequences sent when a call sets none (a configured row's `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

/// One wire format. An implementation makes exactly one attempt per call (it never retries),
/// honours `request.cancel`, and fails with `TIMEOUT` after its idle watchdog expires.
pub trait Adapter: Send + Sync {
    /// Starts one streaming call.
    fn stream(&self, request: GenerateRequest) -> ChunkStream;

    /// Metadata for `model`, if the adapter knows it.
    fn model_info(&self, _model: &str) -> Option<ModelInfo> {
        None
    }

    /// Opens a connection to the provider in the background, so that the first call does
    /// not wait for one (docs/providers.md, "Shared connections and preconnect"). Returns at
    /// once; an adapter that cannot, or has nothing to call, does nothing.
    fn preconnect(&self) {}

    /// The models the provider offers, where it can list them.
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, Failure>> {
        Box::pin(async {
            Err(Failure::new(
                FailureCode::InvalidRequest,
                "this provider cannot list its models",
            ))
        })
    }
}

/// Adapters by route name.
#[derive(Default, Clone)]
pub struct AdapterRegistry {
    routes: BTreeMap<String, Arc<dyn Adapter>>,
}

/// A registration that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The route (named) already has an adapter.
    #[error("an adapter is already registered for route `{0}`")]
    DuplicateRoute(String),
}

impl AdapterRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `adapter` under `route`; a route can be registered once.
    pub fn register(
        &mut self,
        route: impl Into<String>,
        adapter: Arc<dyn Adapter>,
    ) -> Result<(), RegistryError> {
        let route = route.into();
        if self.routes.contains_key(&route) {
            return Err(RegistryError::DuplicateRoute(route));
        }
        self.routes.insert(route, adapter);
        Ok(())
    }

    /// Removes the adapter of `route`, returning it.
    pub fn unregister(&mut self, route: &str) -> Option<Arc<dyn Adapter>> {
        self.routes.remove(route)
    }

    /// The adapter of `route`, or a `NO_ADAPTER` failure naming the known routes.
    pub fn get(&self, route: &str) -> Result<Arc<dyn Adapter>, Failure> {
        self.routes.get(route).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.routes.keys().map(String::as_str).collect();
            Failure::new(
                FailureCode::NoAdapter,
                format!(
                    "no adapter for provider route `{route}` (known routes: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// Registered route names, sorted.
    pub fn routes(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::FinishReason;

    struct Silent;
    impl Adapter for Silent {
        fn stream(&self, _request: GenerateRequest) -> ChunkStream {
            Box::pin(futures::stream::iter([Chunk::Finish {
                reason: FinishReason::Stop,
            }]))
        }
    }

    #[test]
    fn duplicate_route_is_an_error_and_unknown_is_no_adapter() {
        let mut r = AdapterRegistry::new();
        r.register("a", Arc::new(Silent)).unwrap();
        assert_eq!(
            r.register("a", Arc::new(Silent)).unwrap_err(),
            RegistryError::DuplicateRoute("a".into())
        );
        let err = r.get("b").err().unwrap();
        assert_eq!(err.code, FailureCode::NoAdapter);
        assert!(err.message.contains("known routes: a"));
        assert!(r.get("a").is_ok());
        assert!(r.unregister("a").is_some());
        assert!(r.get("a").is_err());
    }
}
