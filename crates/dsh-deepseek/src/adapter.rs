//! The HTTP side: one streaming `POST /chat/completions` per call, with watchdog and cancel.

use std::fmt;
use std::time::{Duration, SystemTime};

use dsh_llm::{Adapter, ChunkStream, Failure, FailureCode, GenerateRequest, ModelInfo};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};

use crate::config::{DeepSeekConfig, OpenAiQuirks};
use crate::decode::StreamDecoder;
use crate::errors::{failure_from_http, HttpErrorResponse, REQUEST_ID_HEADERS};
use crate::http_stream::{get_model_ids, HttpCall, HttpErrorParts};
use crate::models;
use crate::request::build_request_body_with;

/// The DeepSeek / OpenAI-compatible chat-completions adapter (SPEC S2.1).
///
/// Each [`stream`](Adapter::stream) call makes exactly one HTTP attempt (it never retries) and
/// yields a stream that always ends with one `finish` chunk: `stop`, `tool-calls`,
/// `max-tokens`, `error {failure}` or, once `request.cancel` fires, `aborted {ABORTED}`.
/// Dropping the stream drops the response and closes its connection. The API key is only put
/// on the wire: it is redacted from `Debug` output and scrubbed from every failure message.
#[derive(Clone)]
pub struct DeepSeekAdapter {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    secret: Option<String>,
    idle_timeout: Duration,
    base_url: String,
    models_url: String,
    quirks: OpenAiQuirks,
    key_variable: String,
}

impl fmt::Debug for DeepSeekAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeepSeekAdapter")
            .field("url", &self.url)
            .field("api_key", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

/// Why an adapter could not be built. Misconfiguration fails here, at start, not per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterConfigError(pub String);

impl fmt::Display for AdapterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AdapterConfigError {}

impl DeepSeekAdapter {
    /// Builds the adapter. Fails when an extra header or the key cannot be sent as an HTTP
    /// header, or the HTTP client cannot start. A missing key is not an error here: calls then
    /// finish with `MISSING_CREDENTIAL`.
    pub fn new(config: DeepSeekConfig) -> Result<Self, AdapterConfigError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let secret = config
            .api_key
            .as_ref()
            .filter(|key| !key.is_empty())
            .map(|key| key.expose_secret().to_string());
        if let Some(secret) = &secret {
            let mut value = HeaderValue::from_str(&format!("Bearer {secret}")).map_err(|_| {
                AdapterConfigError(format!(
                    "the API key ({}) holds characters that cannot be sent in an HTTP header",
                    config.key_variable
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
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
        Ok(DeepSeekAdapter {
            client,
            url: config.chat_completions_url(),
            headers,
            secret,
            idle_timeout: config.idle_timeout,
            models_url: config.models_url(),
            base_url: config.base_url,
            quirks: config.quirks,
            key_variable: config.key_variable,
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
        let prepare = {
            let adapter = self.clone();
            Box::new(move || {
                if adapter.secret.is_none() {
                    return Err(adapter.missing_credential());
                }
                let body = build_request_body_with(&request, &adapter.quirks)?;
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
            decoder: StreamDecoder::new(),
            http_failure: Box::new(move |response| http_failure(response, &key_variable)),
            scrub: Box::new(move |failure| scrubber.scrub(failure)),
        }
        .into_stream()
    }

    fn model_info(&self, model: &str) -> Option<ModelInfo> {
        Some(models::model_info(model))
    }

    /// `GET {base}/models`: the ids the endpoint lists, each with the model table's metadata
    /// (or the generic description for an id the table does not know).
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, Failure>> {
        Box::pin(async move { self.fetch_models().await.map_err(|f| self.scrub(f)) })
    }
}

impl DeepSeekAdapter {
    /// Removes the key from a failure message, whatever put it there (e.g. a provider echoing
    /// the rejected key).
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
                "no API key: set {} or configure an API key for this provider",
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

/// The failure for a non-2xx response (SPEC S2.1 error table).
fn http_failure(response: &HttpErrorParts<'_>, key_variable: &str) -> Failure {
    let header = |name: &str| {
        response
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let retry_after = header("retry-after");
    let retry_after_ms = header("retry-after-ms");
    failure_from_http(
        &HttpErrorResponse {
            status: response.status,
            retry_after: retry_after.as_deref(),
            retry_after_ms: retry_after_ms.as_deref(),
            request_id: REQUEST_ID_HEADERS.iter().find_map(|name| header(name)),
            body: response.body,
            key_variable: Some(key_variable),
        },
        SystemTime::now(),
    )
}
