//! `dsh models [--provider NAME]`: the provider's model list merged with the model table.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use dsh_config::ProviderConfig;
use dsh_llm::{Failure, FailureCode, ModelInfo};

use crate::credentials::Settings;

// Arguments of `dsh models` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ModelsArgs {
    /// Provider name from the configuration (default: the configured default provider).
    #[arg(long)]
    pub(crate) provider: Option<String>,
}

use crate::run::user_error;

/// Runs `dsh models`: asks the provider's `/models` endpoint when a key is available (a
/// failure there is a warning, not an error) and prints one line per model with the table's
/// facts; `SOURCE` says whether the provider listed it, the table has it, or both.
pub(crate) fn run(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let settings = Settings::load(&cwd, &home);
    let (config, provider) = load_config(&home, &cwd, &settings, args.provider)?;
    if let Some(warning) = config.trust.warning() {
        eprintln!("dsh: {}", dsh_tools::printable(&warning));
    }
    settings.allow_credentials(config.own_key_variables());
    let key = provider_key(&config, &provider, &settings);
    settings.print_warnings();
    let listed = match key {
        None => {
            eprintln!(
                "dsh: warning: {} is not set; showing the model table only",
                provider.api_key_env.as_deref().unwrap_or("the key")
            );
            Vec::new()
        }
        Some(key) => match provider_models(&config, &provider, key, None)? {
            Ok(models) => models,
            Err(failure) => {
                eprintln!(
                    "dsh: warning: could not list the models of provider `{}`: {}; showing the model table only",
                    provider.name, failure
                );
                Vec::new()
            }
        },
    };
    print_table(&config, &merge_rows(&config, &provider, listed));
    Ok(ExitCode::SUCCESS)
}

/// The configuration with `--provider` applied, and the provider it selects.
fn load_config(
    home: &Path,
    cwd: &Path,
    settings: &Settings,
    provider: Option<String>,
) -> anyhow::Result<(dsh_config::Config, ProviderConfig)> {
    let lookup = |name: &str| settings.get(name);
    let flags = dsh_config::Flags {
        provider,
        ..crate::flags::config_flags()
    };
    let config = dsh_config::Config::load(home, cwd, &lookup, &flags)
        .map_err(|errors| user_error("INVALID_CONFIG", errors.to_string()))?;
    let provider = config
        .provider_named(
            &config.provider,
            config
                .source_of("provider")
                .unwrap_or(&dsh_config::Source::Default),
            "provider",
        )
        .map_err(|e| user_error("INVALID_CONFIG", e.to_string()))?
        .clone();
    Ok((config, provider))
}

/// The key to list the provider's models with, if any. A provider whose endpoint the project
/// set never gets the user's key (docs/configuration.md).
fn provider_key(
    config: &dsh_config::Config,
    provider: &ProviderConfig,
    settings: &Settings,
) -> Option<dsh_deepseek::ApiKey> {
    match &provider.api_key_env {
        Some(variable) if config.redirected_by_project(provider) => settings
            .project_value(variable)
            .map(dsh_deepseek::ApiKey::new),
        Some(variable) => match settings.get(variable) {
            Some(key) => Some(dsh_deepseek::ApiKey::new(key)),
            None if provider.keyless_when_unset() => Some(dsh_deepseek::ApiKey::keyless()),
            None => None,
        },
        None => Some(dsh_deepseek::ApiKey::keyless()),
    }
}

/// The provider's own model list (`GET /models` through the provider's adapter), each model
/// described by the adapter where it knows it, or the failure of that request; a bad provider
/// configuration is an error. `deadline` bounds the whole request (`dsh doctor`'s reachability
/// check); without one, the provider's own timeouts apply.
pub(crate) fn provider_models(
    config: &dsh_config::Config,
    provider: &ProviderConfig,
    key: dsh_deepseek::ApiKey,
    deadline: Option<Duration>,
) -> anyhow::Result<Result<Vec<ModelInfo>, Failure>> {
    let adapter = dsh_runtime::build_adapter(config, provider, Some(key), None)
        .map_err(|e| user_error("INVALID_CONFIG", e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let listed = runtime.block_on(async {
        match deadline {
            None => adapter.list_models().await,
            Some(deadline) => tokio::time::timeout(deadline, adapter.list_models())
                .await
                .unwrap_or_else(|_| {
                    Err(Failure::new(
                        FailureCode::Timeout,
                        format!(
                            "no answer to GET /models within {} s",
                            deadline.as_secs_f64()
                        ),
                    ))
                }),
        }
    });
    Ok(listed.map(|models| {
        models
            .into_iter()
            .map(|m| adapter.model_info(&m.id).unwrap_or(m))
            .collect()
    }))
}

/// One row per model id: what the provider listed (if it did) and whether the table of this
/// provider has it.
type Rows = BTreeMap<String, (Option<ModelInfo>, bool)>;

fn merge_rows(
    config: &dsh_config::Config,
    provider: &ProviderConfig,
    listed: Vec<ModelInfo>,
) -> Rows {
    let mut rows = Rows::new();
    for info in listed {
        rows.insert(info.id.clone(), (Some(info), false));
    }
    for entry in config.models.values() {
        if entry
            .provider
            .as_deref()
            .is_some_and(|p| p != provider.name)
        {
            continue;
        }
        rows.entry(entry.id.clone()).or_insert((None, false)).1 = true;
    }
    rows
}

/// Prints the table; the configured model table's facts win over the provider's.
fn print_table(config: &dsh_config::Config, rows: &Rows) {
    println!(
        "{:<28} {:>9} {:>9}  {:<20} {:<30} SOURCE",
        "MODEL", "CONTEXT", "MAX OUT", "EFFORTS", "USD/MTOK in/read/write/out"
    );
    for (id, (info, in_table)) in rows {
        let entry = config.models.get(id);
        let context = entry
            .and_then(|e| e.context_window)
            .or(info.as_ref().map(|i| i.context_window));
        let max_output = entry
            .and_then(|e| e.max_output)
            .or(info.as_ref().map(|i| i.default_max_tokens));
        let efforts = entry
            .and_then(|e| e.efforts.clone())
            .or(info.as_ref().map(|i| i.efforts.clone()))
            .unwrap_or_default()
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let price = entry
            .and_then(|e| e.price)
            .map(|p| {
                format!(
                    "{}/{}/{}/{}",
                    p.input_per_mtok,
                    p.cache_read_per_mtok,
                    p.cache_write_per_mtok,
                    p.output_per_mtok
                )
            })
            .unwrap_or_else(|| "-".into());
        let source = match (info.is_some(), in_table) {
            (true, true) => "listed+table",
            (true, false) => "listed",
            _ => "table",
        };
        let number = |n: Option<u64>| n.map_or("-".to_string(), |n| n.to_string());
        println!(
            "{id:<28} {:>9} {:>9}  {:<20} {price:<30} {source}",
            number(context),
            number(max_output),
            if efforts.is_empty() { "-" } else { &efforts },
        );
    }
}
