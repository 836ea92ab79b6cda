//! The HTTP side: one streaming `POST /chat/completions` per call, with watchdog and cancel.

use std::sync::Arc;
use std::time::SystemTime;

use dsh_http::{AdapterConfigError, Endpoint, EndpointConfig, HttpErrorParts};
use dsh_llm::{Adapter, ChunkStream, Failure, GenerateRequest, ModelInfo, ModelTable};
use futures::future::BoxFuture;
use reqwest::header::AUTHORIZATION;

use crate::config::{DeepSeekConfig, OpenAiQuirks};
use crate::decode::StreamDecoder;
use crate::errors::{failure_from_http, HttpErrorResponse, REQUEST_ID_HEADERS};
use crate::models;
use crate::request::{build_request_body_cached, HistoryBytes};

/// The DeepSeek / OpenAI-compatible chat-completions adapter (docs/providers.md, "Chat
/// completions").
///
/// Each [`stream`](Adapter::stream) call makes exactly one HTTP attempt (it never retries) and
/// yields a stream that always ends with one `finish` chunk: `stop`, `tool-calls`,
/// `max-tokens`, `error {failure}` or, once `request.cancel` fires, `aborted {ABORTED}`.
/// Dropping the stream drops the response and closes its connection. The API key is only put
/// on the wire: it is redacted from `Debug` output and scrubbed from every failure message.
#[derive(Clone, Debug)]
pub struct DeepSeekAdapter {
    endpoint: Endpoint,
    base_url: String,
    quirks: OpenAiQuirks,
    models: ModelTable,
    /// Each session's last request body's messages, shared by every clone of the adapter:
    /// a step writes only its new messages (docs/providers.md, "The history bytes cache").
    history: Arc<HistoryBytes>,
}

impl DeepSeekAdapter {
    /// Builds the adapter. Fails when an extra header or the key cannot be sent as an HTTP
    /// header, or the HTTP client cannot start. A missing key is not an error here: calls then
    /// finish with `MISSING_CREDENTIAL`.
    pub fn new(config: DeepSeekConfig) -> Result<Self, AdapterConfigError> {
        let endpoint = Endpoint::new(EndpointConfig {
            url: config.chat_completions_url(),
            models_url: config.models_url(),
            format_headers: Vec::new(),
            key: config.api_key.as_ref().map(|key| {
                (
                    key,
                    AUTHORIZATION,
                    format!("Bearer {}", key.expose_secret()),
                )
            }),
            key_variable: config.key_variable.clone(),
            extra_headers: &config.extra_headers,
            connect_timeout: config.connect_timeout,
            client: config.client.clone(),
            idle_timeout: config.idle_timeout,
            reply_timeout: config.reply_timeout,
            http_failure,
        })?;
        Ok(DeepSeekAdapter {
            endpoint,
            base_url: config.base_url,
            quirks: config.quirks,
            models: config.models,
            history: Arc::default(),
        })
    }

    /// [`new`](Self::new) with [`DeepSeekConfig::from_env`].
    pub fn from_env() -> Result<Self, AdapterConfigError> {
        Self::new(DeepSeekConfig::from_env())
    }

    /// The endpoint prefix this adapter calls.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Adapter for DeepSeekAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let cancel = request.cancel.clone();
        let quirks = self.quirks;
        let model = request.config.config().model.clone();
        let info = self.model_info(&model);
        let mut image_models: Vec<String> = models::image_models().map(String::from).collect();
        image_models.extend(self.models.image_models());
        image_models.sort();
        image_models.dedup();
        let history = Arc::clone(&self.history);
        self.endpoint.stream(cancel, StreamDecoder::new(), move || {
            // Images go only to a model that takes them (docs/model-calls.md, "Images").
            dsh_llm::check_image_input(&model, info.as_ref(), &request.messages, &image_models)?;
            build_request_body_cached(&request, &quirks, &history)
        })
    }

    /// The configured table's row of `model` (if any) over what [`models`] knows of it.
    fn model_info(&self, model: &str) -> Option<ModelInfo> {
        Some(self.models.describe(models::model_info(model)))
    }

    fn preconnect(&self) {
        self.endpoint.preconnect();
    }

    /// `GET {base}/models`: the ids the endpoint lists, each with the model table's metadata
    /// (or the generic description for an id the table does not know).
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, Failure>> {
        Box::pin(async move {
            let ids = self.endpoint.model_ids().await?;
            Ok(ids
                .iter()
                .map(|id| self.models.describe(models::model_info(id)))
                .collect())
        })
    }
}

/// The failure for a non-2xx response (docs/providers.md, "Chat completions", error table).
fn http_failure(response: &HttpErrorParts<'_>, key_variable: &str) -> Failure {
    let retry_after = response.header("retry-after");
    let retry_after_ms = response.header("retry-after-ms");
    failure_from_http(
        &HttpErrorResponse {
            status: response.status,
            retry_after: retry_after.as_deref(),
            retry_after_ms: retry_after_ms.as_deref(),
            request_id: REQUEST_ID_HEADERS
                .iter()
                .find_map(|name| response.header(name)),
            body: response.body,
            key_variable: Some(key_variable),
        },
        SystemTime::now(),
    )
}
