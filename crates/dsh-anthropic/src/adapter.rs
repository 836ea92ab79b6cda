//! The HTTP side: one streaming `POST /v1/messages` per call, with watchdog and cancel.

use std::sync::Arc;
use std::time::SystemTime;

use dsh_http::{AdapterConfigError, Endpoint, EndpointConfig, HttpErrorParts};
use dsh_llm::{Adapter, ChunkStream, Failure, GenerateRequest, ModelInfo, ModelTable};
use futures::future::BoxFuture;
use reqwest::header::{HeaderName, HeaderValue};

use crate::config::{AnthropicConfig, ThinkingBudgets};
use crate::decode::MessagesDecoder;
use crate::errors::{failure_from_http, HttpErrorResponse, REQUEST_ID_HEADERS};
use crate::models;
use crate::request::{build_request_body_cached, HistoryBytes};

/// The Anthropic Messages adapter (docs/providers.md, "Anthropic Messages").
///
/// Each [`stream`](Adapter::stream) call makes exactly one HTTP attempt (it never retries) and
/// yields a stream that always ends with one `finish`: `stop`, `tool-calls`, `max-tokens`,
/// `error {failure}` or, once `request.cancel` fires, `aborted {ABORTED}`. Dropping the stream
/// closes the connection. The key only goes into the `x-api-key` header: `Debug` redacts it and
/// every failure message is scrubbed of it.
#[derive(Clone, Debug)]
pub struct AnthropicAdapter {
    endpoint: Endpoint,
    budgets: ThinkingBudgets,
    models: ModelTable,
    /// Each session's last request body's history messages, shared by every clone of the
    /// adapter: a step writes only its new messages (docs/providers.md, "Anthropic Messages").
    history: Arc<HistoryBytes>,
}

impl AnthropicAdapter {
    /// Builds the adapter. Fails when the key, the API version or an extra header cannot be
    /// sent as an HTTP header, or the HTTP client cannot start. A missing key is not an error
    /// here: calls then finish with `MISSING_CREDENTIAL`.
    pub fn new(config: AnthropicConfig) -> Result<Self, AdapterConfigError> {
        let version = HeaderValue::from_str(&config.api_version).map_err(|_| {
            AdapterConfigError(format!(
                "anthropic-version `{}` cannot be sent in an HTTP header",
                config.api_version
            ))
        })?;
        let endpoint = Endpoint::new(EndpointConfig {
            url: config.messages_url(),
            models_url: config.models_url(),
            format_headers: vec![(HeaderName::from_static("anthropic-version"), version)],
            key: config.api_key.as_ref().map(|key| {
                (
                    key,
                    HeaderName::from_static("x-api-key"),
                    key.expose_secret().to_string(),
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
        Ok(AnthropicAdapter {
            endpoint,
            budgets: config.thinking_budgets,
            models: config.models,
            history: Arc::default(),
        })
    }

    /// The messages endpoint this adapter calls.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }
}

impl Adapter for AnthropicAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let cancel = request.cancel.clone();
        let budgets = self.budgets;
        let model = request.config.config().model.clone();
        let info = self.model_info(&model);
        let image_models = self.models.image_models();
        let history = Arc::clone(&self.history);
        self.endpoint
            .stream(cancel, MessagesDecoder::new(), move || {
                // Images go only to a model that takes them (docs/model-calls.md, "Images").
                dsh_llm::check_image_input(
                    &model,
                    info.as_ref(),
                    &request.messages,
                    &image_models,
                )?;
                build_request_body_cached(&request, &budgets, &history)
            })
    }

    /// The configured table's row of `model` (if any) over the generic description.
    fn model_info(&self, model: &str) -> Option<ModelInfo> {
        Some(self.models.describe(models::model_info(model)))
    }

    fn preconnect(&self) {
        self.endpoint.preconnect();
    }

    /// `GET {base}/v1/models`: the ids the provider lists, each with the model table's metadata
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

/// The failure for a non-2xx response (the Messages API's error table).
fn http_failure(response: &HttpErrorParts<'_>, key_variable: &str) -> Failure {
    let retry_after = response.header("retry-after");
    failure_from_http(
        &HttpErrorResponse {
            status: response.status,
            retry_after: retry_after.as_deref(),
            request_id: REQUEST_ID_HEADERS
                .iter()
                .find_map(|name| response.header(name)),
            body: response.body,
            key_variable,
        },
        SystemTime::now(),
    )
}
