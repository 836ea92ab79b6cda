//! The built-in layer: what dsh uses when no file says otherwise. The providers and DeepSeek's
//! model numbers come from `dsh_llm::providers`, which the adapters read too, and the prices from
//! `dsh_llm::PriceTable`, so each fact has one source and no adapter is needed here.

use dsh_llm::providers::{BuiltinProvider, BUILTIN_PROVIDERS, DEEPSEEK_DEFAULT_EFFORT};
use dsh_llm::providers::{DEEPSEEK_EFFORTS, DEEPSEEK_MODELS};
use dsh_llm::{PriceTable, ReasoningEffort};
use toml::{Table, Value};

/// Default compaction trigger: share of the context window (docs/agent.md, "Context discipline").
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.8;

/// Default share of the context window kept verbatim when compacting (docs/agent.md, "Context
/// discipline").
pub const DEFAULT_KEEP_TAIL: f64 = 0.16;

/// Name of the built-in DeepSeek provider.
pub const DEEPSEEK_PROVIDER: &str = dsh_llm::providers::DEEPSEEK.name;

/// Name of the built-in Anthropic provider.
pub const ANTHROPIC_PROVIDER: &str = dsh_llm::providers::ANTHROPIC.name;

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
    let providers = BUILTIN_PROVIDERS
        .iter()
        .map(|provider| (provider.name.to_string(), provider_table(provider)))
        .collect();
    root.insert("providers".into(), Value::Table(providers));

    let prices = PriceTable::default_deepseek();
    let mut models = Table::new();
    for spec in DEEPSEEK_MODELS {
        let mut row = Table::new();
        row.insert("provider".into(), string(DEEPSEEK_PROVIDER));
        row.insert("context_window".into(), int(spec.context_window));
        row.insert("max_output".into(), int(spec.max_output_tokens));
        row.insert("default_max_tokens".into(), int(spec.default_max_tokens));
        row.insert(
            "efforts".into(),
            Value::Array(
                DEEPSEEK_EFFORTS
                    .iter()
                    .map(|e| string(e.as_str()))
                    .collect(),
            ),
        );
        row.insert(
            "default_effort".into(),
            string(effort_name(DEEPSEEK_DEFAULT_EFFORT)),
        );
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

/// A built-in provider's section.
fn provider_table(provider: &BuiltinProvider) -> Value {
    let mut entries = vec![
        ("kind", string(provider.kind)),
        ("base_url", string(provider.base_url)),
        ("api_key_env", string(provider.api_key_env)),
    ];
    if let Some(model) = provider.default_model {
        entries.push(("default_model", string(model)));
    }
    table(entries)
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    effort.as_str()
}
