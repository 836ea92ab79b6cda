//! The HTTP side: one streaming `POST /v1/messages` per call, with watchdog and cancel.

use std::fmt;
use std::time::{Duration, SystemTime};

use dsh_deepseek::http_stream::{get_model_ids, HttpCall, HttpErrorParts};
use dsh_deepseek::AdapterConfigError;
use dsh_llm::{Adapter, ChunkStream, Failure, FailureCode, GenerateRequest, ModelInfo};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};

use crate::config::{AnthropicConfig, ThinkingBudgets};
use crate::decode::MessagesDecoder;
use crate::errors::{failure_from_http, HttpErrorResponse, REQUEST_ID_HEADERS};
use crate::models;
use crate::request::build_request_body;

/// The Anthropic Messages adapter (SPEC S2.2).
///
/// Each [`stream`](Adapter::stream) call makes exactly one HTTP attempt (it never retries) and
/// yields a stream that always ends with one `finish`: `stop`, `tool-calls`, `max-tokens`,
/// `error {failure}` or, once `request.cancel` fires, `aborted {ABORTED}`. Dropping the stream
/// closes the connection. The key only goes into the `x-api-key` header: `Debug` redacts it and
/// every failure message is scrubbed of it.
#[derive(Clone)]
pub struct AnthropicAdapter {
    client: reqwest::Client,
    url: String,
    models_url: String,
    headers: HeaderMap,
    secret: Option<String>,
    key_variable: String,
    idle_timeout: Duration,
    budgets: ThinkingBudgets,
}

impl fmt::Debug for AnthropicAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicAdapter")
            .field("url", &self.url)
            .field("api_key", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl AnthropicAdapter {
    /// Builds the adapter. Fails when the key, the API version or an extra header cannot be
    /// sent as an HTTP header, or the HTTP client cannot start. A missing key is not an error
    /// here: calls then finish with `MISSING_CREDENTIAL`.
    pub fn new(config: AnthropicConfig) -> Result<Self, AdapterConfigError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let version = HeaderValue::from_str(&config.api_version).map_err(|_| {
            AdapterConfigError(format!(
                "anthropic-version `{}` cannot be sent in an HTTP header",
                config.api_version
            ))
        })?;
        headers.insert(HeaderName::from_static("anthropic-version"), version);
        let secret = config
            .api_key
            .as_ref()
            .filter(|key| !key.is_empty())
            .map(|key| key.expose_secret().to_string());
        if let Some(secret) = &secret {
            let mut value = HeaderValue::from_str(secret).map_err(|_| {
                AdapterConfigError(format!(
                    "the API key ({}) holds characters that cannot be sent in an HTTP header",
                    config.key_variable
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        for (name, value) in &config.extra_headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                AdapterConfigError(format!(
                    "extra header name `{name}` is not a valid HTTP header name"
                ))
            })?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                AdapterConfigError(format!(
                    "extra header `{name}` has a value that cannot be sent in HTTP"
                ))
            })?;
            headers.insert(header_name, header_value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|err| AdapterConfigError(format!("could not start the HTTP client: {err}")))?;
        Ok(AnthropicAdapter {
            client,
            url: config.messages_url(),
            models_url: config.models_url(),
            headers,
            secret,
            key_variable: config.key_variable,
            idle_timeout: config.idle_timeout,
            budgets: config.thinking_budgets,
        })
    }

    /// The messages endpoint this adapter calls.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn scrub(&self, mut failure: Failure) -> Failure {
        if let Some(secret) = self.secret.as_deref().filter(|s| !s.is_empty()) {
            if failure.message.contains(secret) {
                failure.message = failure.message.replace(secret, "<redacted>");
            }
        }
        failure
    }

    fn missing_credential(&self) -> Failure {
        Failure::new(
            FailureCode::MissingCredential,
            format!(
                "no API key: set {} or configure the key variable of this provider",
                self.key_variable
            ),
        )
    }

    async fn fetch_models(&self) -> Result<Vec<ModelInfo>, Failure> {
        if self.secret.is_none() {
            return Err(self.missing_credential());
        }
        let mut headers = self.headers.clone();
        headers.remove(CONTENT_TYPE);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let request = self.client.get(&self.models_url).headers(headers);
        let key_variable = self.key_variable.clone();
        let ids = get_model_ids(
            request,
            &self.models_url,
            self.idle_timeout,
            &move |response| http_failure(response, &key_variable),
        )
        .await?;
        Ok(ids.iter().map(|id| models::model_info(id)).collect())
    }
}

impl Adapter for AnthropicAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        let cancel = request.cancel.clone();
        let prepare = {
            let adapter = self.clone();
            Box::new(move || {
                if adapter.secret.is_none() {
                    return Err(adapter.missing_credential());
                }
                let body = build_request_body(&request, &adapter.budgets)?;
                Ok(adapter
                    .client
                    .post(&adapter.url)
                    .headers(adapter.headers.clone())
                    .body(body))
            })
        };
        let key_variable = self.key_variable.clone();
        let scrubber = self.clone();
        HttpCall {
            prepare,
            url: self.url.clone(),
            idle_timeout: self.idle_timeout,
            cancel,
            decoder: MessagesDecoder::new(),
            http_failure: Box::new(move |response| http_failure(response, &key_variable)),
            scrub: Box::new(move |failure| scrubber.scrub(failure)),
        }
        .into_stream()
    }

    fn model_info(&self, model: &str) -> Option<ModelInfo> {
        Some(models::model_info(model))
    }

    /// `GET {base}/v1/models`: the ids the provider lists, each with generic metadata.
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, Failure>> {
        Box::pin(async move { self.fetch_models().await.map_err(|f| self.scrub(f)) })
    }
}

/// The failure for a non-2xx response (the Messages API's error table).
fn http_failure(response: &HttpErrorParts<'_>, key_variable: &str) -> Failure {
    let header = |name: &str| {
        response
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let retry_after = header("retry-after");
    failure_from_http(
        &HttpErrorResponse {
            status: response.status,
            retry_after: retry_after.as_deref(),
            request_id: REQUEST_ID_HEADERS.iter().find_map(|name| header(name)),
            body: response.body,
            key_variable,
        },
        SystemTime::now(),
    )
}
