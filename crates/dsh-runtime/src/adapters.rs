//! From configuration to adapters: each provider kind gets its adapter, built with the
//! configured model table, which the adapter reads over its own description of a model. Here in
//! the composition root, so the configuration knows no adapter (docs/ARCHITECTURE.md,
//! "dsh-config").

use std::sync::Arc;

use dsh_anthropic::{AnthropicAdapter, AnthropicConfig};
use dsh_config::{Config, MaxTokensField, ProviderConfig, ProviderKind, Quirks};
use dsh_deepseek::{DeepSeekAdapter, DeepSeekConfig, OpenAiQuirks};
use dsh_http::{AdapterConfigError, ApiKey, HttpClient};
use dsh_llm::Adapter;

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
            c.quirks = openai_quirks(provider.quirks);
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

/// The configured quirk switches as the chat-completions adapter takes them.
fn openai_quirks(quirks: Quirks) -> OpenAiQuirks {
    OpenAiQuirks {
        send_reasoning_content: quirks.send_reasoning_content,
        send_stream_options: quirks.send_stream_options,
        send_thinking: quirks.send_thinking,
        send_reasoning_effort: quirks.send_reasoning_effort,
        max_tokens_field: match quirks.max_tokens_field {
            MaxTokensField::MaxTokens => dsh_deepseek::MaxTokensField::MaxTokens,
            MaxTokensField::MaxCompletionTokens => {
                dsh_deepseek::MaxTokensField::MaxCompletionTokens
            }
            MaxTokensField::Omit => dsh_deepseek::MaxTokensField::Omit,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dsh_config::Flags;
    use dsh_llm::ReasoningEffort;

    use super::*;

    /// The configuration of an empty project with `user` as `$DSH_HOME/config.toml`.
    fn load(user: &str) -> Config {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), user).unwrap();
        Config::load(home.path(), cwd.path(), &|_| None, &Flags::default()).unwrap()
    }

    #[test]
    fn model_table_feeds_model_info_through_the_adapter() {
        let config = load(
            "[models.\"qwen3:32b\"]\ncontext_window = 40960\nmax_output = 8192\nefforts = [\"off\"]\n",
        );
        let provider = &config.providers["deepseek"];
        let adapter = build_adapter(&config, provider, None, None).unwrap();
        let info = adapter.model_info("qwen3:32b").unwrap();
        assert_eq!(
            (info.context_window, info.default_max_tokens),
            (40_960, 8_192)
        );
        assert_eq!(info.efforts, vec![ReasoningEffort::Off]);
        let flash = adapter.model_info("deepseek-v4-flash").unwrap();
        assert_eq!(flash.default_max_tokens, 256_000);
    }

    #[test]
    fn the_model_table_reaches_the_anthropic_adapter_too() {
        let config = load(
            "[models.\"claude-x\"]\ncontext_window = 1000000\nmax_output = 64000\ndefault_effort = \"high\"\n",
        );
        let adapter = build_adapter(&config, &config.providers["anthropic"], None, None).unwrap();
        let info = adapter.model_info("claude-x").unwrap();
        assert_eq!(
            (info.context_window, info.default_max_tokens),
            (1_000_000, 64_000)
        );
        assert_eq!(info.default_effort, Some(ReasoningEffort::High));
        // The rest is the adapter's generic description.
        assert_eq!(info.efforts, dsh_anthropic::model_info("claude-x").efforts);
    }

    #[test]
    fn timeouts_and_quirks_reach_the_adapter_config() {
        let config = load(
            "[providers.deepseek]\nreply_timeout_secs = 45\n\
             [providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9\"\n\
             [providers.local.quirks]\nsend_thinking = false\nmax_tokens_field = \"none\"\n",
        );
        assert_eq!(
            config.providers["deepseek"].reply_timeout,
            Some(Duration::from_secs(45))
        );
        assert!(build_adapter(&config, &config.providers["deepseek"], None, None).is_ok());
        let quirks = openai_quirks(config.providers["local"].quirks);
        assert!(!quirks.send_thinking && quirks.send_stream_options);
        assert_eq!(quirks.max_tokens_field, dsh_deepseek::MaxTokensField::Omit);
        assert_eq!(
            openai_quirks(Quirks::default()),
            OpenAiQuirks::default(),
            "the configuration's defaults are the adapter's"
        );
    }
}
