//! The built-in layer: what dsh uses when no file says otherwise. The DeepSeek model numbers
//! come from `dsh_deepseek::models` and the prices from `dsh_session::PriceTable`, so each fact
//! has one source.

use dsh_llm::ReasoningEffort;
use dsh_session::PriceTable;
use toml::{Table, Value};

/// Default compaction trigger: share of the context window (docs/agent.md, "Context discipline").
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.8;

/// Default share of the context window kept verbatim when compacting (docs/agent.md, "Context
/// discipline").
pub const DEFAULT_KEEP_TAIL: f64 = 0.16;

/// Name of the built-in DeepSeek provider.
pub const DEEPSEEK_PROVIDER: &str = "deepseek";

/// Name of the built-in Anthropic provider.
pub const ANTHROPIC_PROVIDER: &str = "anthropic";

fn table(entries: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Table(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn string(text: &str) -> Value {
    Value::String(text.to_string())
}

fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The built-in layer as a table in the file format.
pub fn builtin_layer() -> Table {
    let mut root = Table::new();
    root.insert("provider".into(), string(DEEPSEEK_PROVIDER));
    root.insert(
        "compaction".into(),
        table([
            ("threshold", Value::Float(DEFAULT_COMPACTION_THRESHOLD)),
            ("keep_tail", Value::Float(DEFAULT_KEEP_TAIL)),
        ]),
    );
    let mut providers = Table::new();
    providers.insert(
        DEEPSEEK_PROVIDER.into(),
        table([
            ("kind", string("deepseek")),
            ("base_url", string(dsh_deepseek::DEFAULT_BASE_URL)),
            ("api_key_env", string(dsh_deepseek::API_KEY_ENV)),
            ("default_model", string(dsh_deepseek::DEFAULT_MODEL)),
        ]),
    );
    providers.insert(
        ANTHROPIC_PROVIDER.into(),
        table([
            ("kind", string("anthropic")),
            ("base_url", string(dsh_anthropic::DEFAULT_BASE_URL)),
            ("api_key_env", string(dsh_anthropic::API_KEY_ENV)),
        ]),
    );
    root.insert("providers".into(), Value::Table(providers));

    let prices = PriceTable::default_deepseek();
    let mut models = Table::new();
    for spec in dsh_deepseek::models::MODELS {
        let info = dsh_deepseek::model_info(spec.id);
        let mut row = Table::new();
        row.insert("provider".into(), string(DEEPSEEK_PROVIDER));
        row.insert("context_window".into(), int(spec.context_window));
        row.insert("max_output".into(), int(spec.max_output_tokens));
        row.insert("default_max_tokens".into(), int(spec.default_max_tokens));
        row.insert(
            "efforts".into(),
            Value::Array(info.efforts.iter().map(|e| string(e.as_str())).collect()),
        );
        if let Some(effort) = info.default_effort {
            row.insert("default_effort".into(), string(effort_name(effort)));
        }
        row.insert(
            "input".into(),
            Value::Array(spec.input.iter().map(|i| string(i)).collect()),
        );
        if let Some(price) = prices.models.get(spec.id) {
            row.insert(
                "price".into(),
                table([
                    ("input", Value::Float(price.input_per_mtok)),
                    ("cache_read", Value::Float(price.cache_read_per_mtok)),
                    ("cache_write", Value::Float(price.cache_write_per_mtok)),
                    ("output", Value::Float(price.output_per_mtok)),
                ]),
            );
        }
        models.insert(spec.id.to_string(), Value::Table(row));
    }
    root.insert("models".into(), Value::Table(models));
    root
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    effort.as_str()
}
