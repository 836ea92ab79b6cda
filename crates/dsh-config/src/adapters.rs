//! From configuration to adapters: each provider kind gets its adapter, wrapped so that the
//! configured model table answers `model_info` before the adapter's own defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_deepseek::{AdapterConfigError, ApiKey, DeepSeekAdapter, DeepSeekConfig};
use dsh_llm::{Adapter, ChunkStream, Failure, GenerateRequest, ModelInfo};
use futures::future::BoxFuture;

use crate::config::{Config, ProviderConfig, ProviderKind};

/// An adapter whose model metadata comes from the configured model table first.
///
/// `stream` and `list_models` are the inner adapter's; `model_info(id)` merges the table row of
/// `id` (if any) over the inner adapter's answer (or its generic description).
pub struct ModelTableAdapter {
    inner: Arc<dyn Adapter>,
    table: BTreeMap<String, crate::config::ModelEntry>,
}

impl ModelTableAdapter {
    /// Wraps `inner` with the rows of `config`'s model table.
    pub fn new(inner: Arc<dyn Adapter>, config: &Config) -> Self {
        ModelTableAdapter {
            inner,
            table: config.models.clone(),
        }
    }
}

impl Adapter for ModelTableAdapter {
    fn stream(&self, request: GenerateRequest) -> ChunkStream {
        self.inner.stream(request)
    }

    fn model_info(&self, model: &str) -> Option<ModelInfo> {
        let own = self.inner.model_info(model);
        match self.table.get(model) {
            Some(row) => {
                let fallback = own.unwrap_or_else(|| dsh_anthropic::model_info(model));
                Some(row.model_info(fallback))
            }
            None => own,
        }
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, Failure>> {
        self.inner.list_models()
    }
}

/// Builds the adapter of `provider` with `api_key`, its model metadata from `config`'s table.
/// Fails when a header (key or extra header) cannot be sent over HTTP or the client cannot
/// start; the message never holds the key.
pub fn build_adapter(
    config: &Config,
    provider: &ProviderConfig,
    api_key: Option<ApiKey>,
) -> Result<Arc<dyn Adapter>, AdapterConfigError> {
    let key_variable = provider
        .api_key_env
        .clone()
        .unwrap_or_else(|| format!("the key of provider `{}`", provider.name));
    let inner: Arc<dyn Adapter> = match provider.kind {
        ProviderKind::DeepSeek | ProviderKind::OpenAiCompatible => {
            let mut c = DeepSeekConfig::new(provider.base_url.clone(), api_key);
            c.extra_headers = provider.headers.clone();
            c.quirks = provider.quirks;
            c.key_variable = key_variable;
            if let Some(timeout) = provider.idle_timeout {
                c.idle_timeout = timeout;
            }
            if let Some(deadline) = provider.reply_timeout {
                c.reply_timeout = deadline;
            }
            Arc::new(DeepSeekAdapter::new(c)?)
        }
        ProviderKind::Anthropic => {
            let mut c = AnthropicConfig::new(provider.base_url.clone(), api_key);
            c.extra_headers = provider.headers.clone();
            c.key_variable = key_variable;
            if let Some(timeout) = provider.idle_timeout {
                c.idle_timeout = timeout;
            }
            if let Some(deadline) = provider.reply_timeout {
                c.reply_timeout = deadline;
            }
            Arc::new(AnthropicAdapter::new(c)?)
        }
    };
    Ok(Arc::new(ModelTableAdapter::new(inner, config)))
}
