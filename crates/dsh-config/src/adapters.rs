//! From configuration to adapters: each provider kind gets its adapter, built with the
//! configured model table, which the adapter reads over its own description of a model.

use std::sync::Arc;

use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_deepseek::{AdapterConfigError, ApiKey, DeepSeekAdapter, DeepSeekConfig, HttpClient};
use dsh_llm::Adapter;

use crate::config::{Config, ProviderConfig, ProviderKind};

/// Builds the adapter of `provider` with `api_key`, its model metadata from `config`'s table
/// ([`Config::model_table`]), its connections from `client`'s pool when given (else a pool of
/// its own). Fails when a header (key or extra header) cannot be sent over HTTP or the client
/// cannot start; the message never holds the key.
pub fn build_adapter(
    config: &Config,
    provider: &ProviderConfig,
    api_key: Option<ApiKey>,
    client: Option<&HttpClient>,
) -> Result<Arc<dyn Adapter>, AdapterConfigError> {
    let key_variable = provider
        .api_key_env
        .clone()
        .unwrap_or_else(|| format!("the key of provider `{}`", provider.name));
    let adapter: Arc<dyn Adapter> = match provider.kind {
        ProviderKind::DeepSeek | ProviderKind::OpenAiCompatible => {
            let mut c = DeepSeekConfig::new(provider.base_url.clone(), api_key);
            c.extra_headers = provider.headers.clone();
            c.quirks = provider.quirks;
            c.client = client.cloned();
            c.key_variable = key_variable;
            c.models = config.model_table();
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
            c.client = client.cloned();
            c.key_variable = key_variable;
            c.models = config.model_table();
            if let Some(timeout) = provider.idle_timeout {
                c.idle_timeout = timeout;
            }
            if let Some(deadline) = provider.reply_timeout {
                c.reply_timeout = deadline;
            }
            Arc::new(AnthropicAdapter::new(c)?)
        }
    };
    Ok(adapter)
}
