//! The shape of a configuration layer, checked key by key so that every problem names its key
//! path and a fix. A layer that passes here has only known keys with values of the right type.

use toml::{Table, Value};

use crate::error::{ConfigError, Source};
use crate::load::key_path as join;

/// Provider kinds (`providers.<name>.kind`).
pub const PROVIDER_KINDS: &[&str] = &["deepseek", "openai-compatible", "anthropic"];

/// Permission presets (`permission`).
pub const PERMISSION_PRESETS: &[&str] =
    &["read-only", "ask", "workspace-write", "danger-full-access"];

/// Reasoning efforts (`effort`, `models.<id>.efforts`, `models.<id>.default_effort`).
pub const EFFORTS: &[&str] = &["off", "low", "medium", "high", "max"];

/// Values of `providers.<name>.quirks.max_tokens_field`.
pub const MAX_TOKENS_FIELDS: &[&str] = &["max_tokens", "max_completion_tokens", "none"];

const ROOT_KEYS: &[&str] = &[
    "provider",
    "model",
    "effort",
    "permission",
    "compaction",
    "budget",
    "goals",
    "rewind",
    "agents",
    "providers",
    "models",
    "mcp",
    "hooks",
    "tools",
    "trust",
    "tui",
    "notify",
    "sandbox",
];
const TRUST_KEYS: &[&str] = &["workspaces"];
const TUI_KEYS: &[&str] = &["alt_screen", "notifications", "status_command"];
/// Values of `tui.notifications`.
pub(crate) const TUI_NOTIFICATIONS: &[&str] = &["auto", "osc9", "osc777", "bel", "off"];
const NOTIFY_KEYS: &[&str] = &["command"];
const SANDBOX_KEYS: &[&str] = &["network"];
/// Values of `sandbox.network`.
pub(crate) const SANDBOX_NETWORK: &[&str] = &["on", "off"];
const COMPACTION_KEYS: &[&str] = &["threshold", "keep_tail"];
const BUDGET_KEYS: &[&str] = &["max_steps", "max_wall_time_secs", "max_cost_usd"];
const GOALS_KEYS: &[&str] = &["enabled", "max_rounds"];
const REWIND_KEYS: &[&str] = &["enabled", "max_file_bytes", "max_files"];
const AGENTS_KEYS: &[&str] = &["max_concurrent"];
const TOOLS_KEYS: &[&str] = &["web_fetch", "web_search", "glob", "grep"];
const GLOB_KEYS: &[&str] = &["max_results", "sample_over_cap"];
const GREP_KEYS: &[&str] = &["max_results"];
const WEB_SEARCH_KEYS: &[&str] = &[
    "enabled",
    "base_url",
    "model",
    "max_uses",
    "max_results",
    "max_queries",
    "max_tokens",
    "timeout_secs",
];
const WEB_FETCH_KEYS: &[&str] = &["enabled", "allowed_hosts", "max_bytes", "timeout_secs"];
const PROVIDER_KEYS: &[&str] = &[
    "kind",
    "base_url",
    "api_key_env",
    "default_model",
    "headers",
    "idle_timeout_secs",
    "reply_timeout_secs",
    "preconnect",
    "quirks",
];
const QUIRK_KEYS: &[&str] = &[
    "send_reasoning_content",
    "send_stream_options",
    "send_thinking",
    "send_reasoning_effort",
    "max_tokens_field",
];
const MODEL_KEYS: &[&str] = &[
    "provider",
    "context_window",
    "max_output",
    "default_max_tokens",
    "efforts",
    "default_effort",
    "price",
    "input",
    "temperature",
    "stop",
];
/// Input kinds of a model row (`models.<id>.input`; docs/model-calls.md, "Images").
const INPUTS: &[&str] = &["text", "image"];
const PRICE_KEYS: &[&str] = &["input", "cache_read", "cache_write", "output"];

struct Checker<'a> {
    source: &'a Source,
    errors: Vec<ConfigError>,
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// The closest known key, when the unknown one is probably a typo.
fn suggestion(key: &str, known: &[&'static str]) -> Option<&'static str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut previous = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let current = row[j + 1];
                row[j + 1] = (previous + usize::from(ca != *cb))
                    .min(row[j] + 1)
                    .min(current + 1);
                previous = current;
            }
        }
        row[b.len()]
    }
    known
        .iter()
        .map(|k| (distance(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

impl Checker<'_> {
    fn error(&mut self, key: &str, problem: impl Into<String>, fix: impl Into<String>) {
        self.errors
            .push(ConfigError::new(self.source, key, problem, fix));
    }

    fn unknown(&mut self, path: &str, key: &str, known: &[&'static str]) {
        let full = join(path, key);
        if key == "api_key" && path.starts_with("providers.") {
            self.error(
                &full,
                "a literal API key is not allowed in a configuration file",
                "delete this line, put the key into the environment or a .env file, and name \
                 the variable with `api_key_env = \"MY_KEY_VAR\"`",
            );
            return;
        }
        let fix = match suggestion(key, known) {
            Some(near) => format!(
                "did you mean `{near}`? Known keys here: {}",
                known.join(", ")
            ),
            None => format!("remove it; known keys here: {}", known.join(", ")),
        };
        self.error(&full, format!("unknown key `{key}`"), fix);
    }

    fn expect_table<'v>(&mut self, key: &str, value: &'v Value) -> Option<&'v Table> {
        match value {
            Value::Table(table) => Some(table),
            other => {
                self.error(
                    key,
                    format!("must be a table, found {}", type_name(other)),
                    format!("write it as a `[{key}]` section"),
                );
                None
            }
        }
    }

    fn expect_str(&mut self, key: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(text) => Some(text.clone()),
            other => {
                self.error(
                    key,
                    format!("must be a string, found {}", type_name(other)),
                    format!(
                        "quote the value: `{} = \"...\"`",
                        key.rsplit('.').next().unwrap_or(key)
                    ),
                );
                None
            }
        }
    }

    fn expect_one_of(&mut self, key: &str, value: &Value, allowed: &[&str], what: &str) {
        if let Some(text) = self.expect_str(key, value) {
            if !allowed.contains(&text.as_str()) {
                self.error(
                    key,
                    format!("unknown {what} `{text}`"),
                    format!("use one of: {}", allowed.join(", ")),
                );
            }
        }
    }

    fn expect_bool(&mut self, key: &str, value: &Value) {
        if !matches!(value, Value::Boolean(_)) {
            self.error(
                key,
                format!("must be a boolean, found {}", type_name(value)),
                "write `true` or `false` without quotes",
            );
        }
    }

    fn expect_positive_int(&mut self, key: &str, value: &Value) {
        match value {
            Value::Integer(n) if *n > 0 => {}
            other => self.error(
                key,
                format!("must be a positive integer, found {}", describe(other)),
                "write a whole number without quotes, e.g. `128000`",
            ),
        }
    }

    fn expect_number(&mut self, key: &str, value: &Value, range: (f64, f64), fix: &str) {
        let number = match value {
            Value::Float(x) => Some(*x),
            Value::Integer(n) => Some(*n as f64),
            _ => None,
        };
        match number {
            Some(x) if x.is_finite() && x >= range.0 && x <= range.1 => {}
            _ => self.error(
                key,
                format!(
                    "must be a number from {} to {}, found {}",
                    range.0,
                    range.1,
                    describe(value)
                ),
                fix,
            ),
        }
    }

    fn root(&mut self, table: &Table) {
        for (key, value) in table {
            match key.as_str() {
                // The user file's `[profiles]` is taken out before its layer is checked
                // (`load::collect_layers`); anywhere else it is refused.
                "profiles" => self.error(
                    key,
                    "profiles are read from the user's config.toml only",
                    "move the `[profiles.NAME]` tables to $DSH_HOME/config.toml (a project \
                     file, a profile or `-c` cannot define profiles)",
                ),
                "provider" | "model" => {
                    self.expect_str(key, value);
                }
                "effort" => self.expect_one_of(key, value, EFFORTS, "effort"),
                "permission" => {
                    self.expect_one_of(key, value, PERMISSION_PRESETS, "permission preset")
                }
                "compaction" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.compaction(t);
                    }
                }
                "budget" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.budget(t);
                    }
                }
                "goals" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.goals(t);
                    }
                }
                "rewind" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.rewind(t);
                    }
                }
                "agents" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.agents(t);
                    }
                }
                "tui" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.tui(t);
                    }
                }
                "notify" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.notify(t);
                    }
                }
                "sandbox" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.sandbox(t);
                    }
                }
                "providers" => {
                    if let Some(t) = self.expect_table(key, value) {
                        for (name, provider) in t {
                            let path = join("providers", name);
                            if let Some(p) = self.expect_table(&path, provider) {
                                self.provider(&path, p);
                            }
                        }
                    }
                }
                "models" => {
                    if let Some(t) = self.expect_table(key, value) {
                        for (id, model) in t {
                            let path = join("models", id);
                            if let Some(m) = self.expect_table(&path, model) {
                                self.model(&path, m);
                            }
                        }
                    }
                }
                "mcp" | "hooks" => {
                    self.expect_table(key, value);
                }
                "tools" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.tools(t);
                    }
                }
                "trust" => {
                    if let Some(t) = self.expect_table(key, value) {
                        self.trust(t);
                    }
                }
                other => self.unknown("", other, ROOT_KEYS),
            }
        }
    }

    /// `[trust]`: workspaces whose project settings apply without `dsh trust`. Only the
    /// user's own file may say so: a project cannot trust itself.
    fn trust(&mut self, table: &Table) {
        if !matches!(self.source, Source::UserFile(_)) {
            self.error(
                "trust",
                "only $DSH_HOME/config.toml can trust workspaces",
                "remove `[trust]` from this file; run `dsh trust` in the workspace instead",
            );
            return;
        }
        for (key, value) in table {
            let path = join("trust", key);
            match key.as_str() {
                "workspaces" => match value {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let at = format!("{path}[{i}]");
                            if let Some(dir) = self.expect_str(&at, item) {
                                if !dir.starts_with('/') {
                                    self.error(
                                        &at,
                                        format!("`{dir}` is not an absolute path"),
                                        "write the workspace's full path, e.g. `\"/home/me/src\"`",
                                    );
                                }
                            }
                        }
                    }
                    other => self.error(
                        &path,
                        format!("must be an array of paths, found {}", type_name(other)),
                        "write e.g. `workspaces = [\"/home/me/src\"]`",
                    ),
                },
                other => self.unknown("trust", other, TRUST_KEYS),
            }
        }
    }

    fn compaction(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("compaction", key);
            match key.as_str() {
                "threshold" => self.expect_number(
                    &path,
                    value,
                    (0.05, 1.0),
                    "write a share of the context window, e.g. `threshold = 0.8`",
                ),
                "keep_tail" => self.expect_number(
                    &path,
                    value,
                    (0.0, 0.9),
                    "write a share of the context window, e.g. `keep_tail = 0.16`",
                ),
                other => self.unknown("compaction", other, COMPACTION_KEYS),
            }
        }
    }

    /// `[budget]`: the turn budgets of unattended runs (docs/harbor.md, "Budgets").
    fn budget(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("budget", key);
            match key.as_str() {
                "max_steps" => self.expect_number(
                    &path,
                    value,
                    (1.0, 1e9),
                    "write a whole number of steps, e.g. `max_steps = 50`",
                ),
                "max_wall_time_secs" => self.expect_number(
                    &path,
                    value,
                    (0.001, 1e9),
                    "write seconds, e.g. `max_wall_time_secs = 1800`",
                ),
                "max_cost_usd" => self.expect_number(
                    &path,
                    value,
                    (0.0, 1e9),
                    "write US dollars, e.g. `max_cost_usd = 2.5`",
                ),
                other => self.unknown("budget", other, BUDGET_KEYS),
            }
        }
    }

    /// `[goals]`: session goals and their continuation rounds (docs/goals.md).
    fn goals(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("goals", key);
            match key.as_str() {
                "enabled" => self.expect_bool(&path, value),
                "max_rounds" => self.expect_number(
                    &path,
                    value,
                    (1.0, 1e9),
                    "write a whole number of rounds, e.g. `max_rounds = 20`",
                ),
                other => self.unknown("goals", other, GOALS_KEYS),
            }
        }
    }

    /// `[rewind]`: workspace checkpoints for rewind (docs/rewind.md).
    fn rewind(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("rewind", key);
            match key.as_str() {
                "enabled" => self.expect_bool(&path, value),
                "max_file_bytes" => self.expect_number(
                    &path,
                    value,
                    (0.0, 1e12),
                    "write a size in bytes, e.g. `max_file_bytes = 4194304`",
                ),
                "max_files" => self.expect_number(
                    &path,
                    value,
                    (1.0, 1e9),
                    "write a whole number of files, e.g. `max_files = 50000`",
                ),
                other => self.unknown("rewind", other, REWIND_KEYS),
            }
        }
    }

    /// `[agents]`: delegation (docs/configuration.md, "Subagents").
    fn agents(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("agents", key);
            match key.as_str() {
                "max_concurrent" => self.expect_number(
                    &path,
                    value,
                    (1.0, 64.0),
                    "write a whole number of children from 1 to 64, e.g. `max_concurrent = 4`",
                ),
                other => self.unknown("agents", other, AGENTS_KEYS),
            }
        }
    }

    /// `[tui]` (docs/tui.md, "Modes").
    fn tui(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("tui", key);
            match key.as_str() {
                "alt_screen" => self.expect_bool(&path, value),
                "notifications" => {
                    self.expect_one_of(&path, value, TUI_NOTIFICATIONS, "notification kind")
                }
                "status_command" => self.expect_command(&path, value),
                other => self.unknown("tui", other, TUI_KEYS),
            }
        }
    }

    /// `[notify]` (docs/tui.md, "Notifications"): `command`, a program and its arguments.
    fn notify(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("notify", key);
            match key.as_str() {
                "command" => self.expect_command(&path, value),
                other => self.unknown("notify", other, NOTIFY_KEYS),
            }
        }
    }

    /// A program and its arguments: a non-empty array of non-empty strings.
    fn expect_command(&mut self, key: &str, value: &Value) {
        let words = value.as_array().filter(|words| {
            !words.is_empty()
                && words
                    .iter()
                    .all(|w| w.as_str().is_some_and(|w| !w.is_empty()))
        });
        if words.is_none() {
            let name = key.rsplit('.').next().unwrap_or(key);
            self.error(
                key,
                "must be a non-empty array of non-empty strings",
                format!(
                    "write the program and its arguments: `{name} = [\"my-program\", \"--flag\"]`"
                ),
            );
        }
    }

    /// `[sandbox]` (docs/SECURITY.md, "Network"). A project's own file may turn the network
    /// off but not on: opening network access is the user's decision, not the repository's.
    fn sandbox(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("sandbox", key);
            match key.as_str() {
                "network" => {
                    self.expect_one_of(&path, value, SANDBOX_NETWORK, "network setting");
                    if matches!(self.source, Source::ProjectFile(_)) && value.as_str() == Some("on")
                    {
                        self.error(
                            &path,
                            "a project's configuration cannot turn the sandbox's network on",
                            "set `[sandbox] network = \"on\"` in $DSH_HOME/config.toml instead",
                        );
                    }
                }
                other => self.unknown("sandbox", other, SANDBOX_KEYS),
            }
        }
    }

    fn tools(&mut self, table: &Table) {
        for (key, value) in table {
            let path = join("tools", key);
            match key.as_str() {
                "web_fetch" => {
                    if let Some(t) = self.expect_table(&path, value) {
                        self.web_fetch(&path, t);
                    }
                }
                "web_search" => {
                    if let Some(t) = self.expect_table(&path, value) {
                        self.web_search(&path, t);
                    }
                }
                "glob" | "grep" => {
                    if let Some(t) = self.expect_table(&path, value) {
                        self.search_tool(&path, key == "glob", t);
                    }
                }
                other => self.unknown("tools", other, TOOLS_KEYS),
            }
        }
    }

    /// `[tools.glob]` (`max_results`, `sample_over_cap`) and `[tools.grep]` (`max_results`).
    fn search_tool(&mut self, path: &str, glob: bool, table: &Table) {
        for (key, value) in table {
            let full = join(path, key);
            match key.as_str() {
                "max_results" => self.expect_positive_int(&full, value),
                "sample_over_cap" if glob => self.expect_bool(&full, value),
                other if glob => self.unknown(path, other, GLOB_KEYS),
                other => self.unknown(path, other, GREP_KEYS),
            }
        }
    }

    /// `enabled` of a tool that reaches the network: a boolean, and a project's own file may
    /// only turn it off (opening network access is the user's decision, not the repository's).
    fn network_tool_enabled(&mut self, full: &str, value: &Value, tool: &str) {
        self.expect_bool(full, value);
        if matches!(self.source, Source::ProjectFile(_)) && value.as_bool() == Some(true) {
            self.error(
                full,
                format!("a project's configuration cannot turn {tool} on"),
                format!("set it in $DSH_HOME/config.toml if you want {tool} for this project"),
            );
        }
    }

    /// `[tools.web_search]` (docs/tools.md, "web_search"). A project's own file may turn it off
    /// and tune it, but not turn it on nor point it at another endpoint: the search request
    /// carries the user's DeepSeek key.
    fn web_search(&mut self, path: &str, table: &Table) {
        let from_project = matches!(self.source, Source::ProjectFile(_));
        for (key, value) in table {
            let full = join(path, key);
            match key.as_str() {
                "enabled" => self.network_tool_enabled(&full, value, "web_search"),
                "base_url" => {
                    if from_project {
                        self.error(
                            &full,
                            "a project's configuration cannot set the web_search endpoint (it would receive your DeepSeek key)",
                            "set base_url in $DSH_HOME/config.toml or DEEPSEEK_SEARCH_BASE_URL in the environment",
                        );
                        continue;
                    }
                    if let Some(url) = self.expect_str(&full, value) {
                        if !(url.starts_with("http://") || url.starts_with("https://")) {
                            self.error(
                                &full,
                                "must start with http:// or https://",
                                "write the Messages endpoint base, e.g. `base_url = \"https://api.deepseek.com/anthropic/v1\"`",
                            );
                        }
                    }
                }
                "model" => {
                    self.expect_str(&full, value);
                }
                "max_uses" | "max_results" | "max_queries" | "max_tokens" | "timeout_secs" => {
                    self.expect_positive_int(&full, value)
                }
                other => self.unknown(path, other, WEB_SEARCH_KEYS),
            }
        }
    }

    /// `[tools.web_fetch]`. A project's own file may only narrow it (turn it off, lower the
    /// limits): opening network access is the user's decision, not the repository's.
    fn web_fetch(&mut self, path: &str, table: &Table) {
        let from_project = matches!(self.source, Source::ProjectFile(_));
        for (key, value) in table {
            let full = join(path, key);
            match key.as_str() {
                "enabled" => self.network_tool_enabled(&full, value, "web_fetch"),
                "allowed_hosts" => {
                    if from_project {
                        self.error(
                            &full,
                            "a project's configuration cannot allow hosts for web_fetch",
                            "set allowed_hosts in $DSH_HOME/config.toml",
                        );
                        continue;
                    }
                    match value {
                        Value::Array(items) => {
                            for (i, item) in items.iter().enumerate() {
                                let at = format!("{full}[{i}]");
                                if let Some(host) = self.expect_str(&at, item) {
                                    let valid = !host.trim().is_empty()
                                        && !host.contains(['/', ' ', '@'])
                                        && !host.contains("://");
                                    if !valid {
                                        self.error(
                                            &at,
                                            format!("`{host}` is not a host name or IP address"),
                                            "write the host only, e.g. `\"intranet.example\"`, `\"127.0.0.1\"` or `\"*.corp.example\"`",
                                        );
                                    }
                                }
                            }
                        }
                        other => self.error(
                            &full,
                            format!("must be an array of host names, found {}", type_name(other)),
                            "write e.g. `allowed_hosts = [\"127.0.0.1\"]`",
                        ),
                    }
                }
                "max_bytes" | "timeout_secs" => self.expect_positive_int(&full, value),
                other => self.unknown(path, other, WEB_FETCH_KEYS),
            }
        }
    }

    fn provider(&mut self, path: &str, table: &Table) {
        for (key, value) in table {
            let full = join(path, key);
            match key.as_str() {
                "kind" => self.expect_one_of(&full, value, PROVIDER_KINDS, "provider kind"),
                "base_url" => {
                    if let Some(url) = self.expect_str(&full, value) {
                        if !(url.starts_with("http://") || url.starts_with("https://")) {
                            self.error(
                                &full,
                                "must start with http:// or https://",
                                "write the endpoint prefix, e.g. `base_url = \"http://localhost:8000/v1\"`",
                            );
                        }
                    }
                }
                "api_key_env" => {
                    if let Some(name) = self.expect_str(&full, value) {
                        self.key_variable_name(&full, &name);
                    }
                }
                "default_model" => {
                    self.expect_str(&full, value);
                }
                "headers" => {
                    if let Some(headers) = self.expect_table(&full, value) {
                        for (name, v) in headers {
                            self.expect_str(&join(&full, name), v);
                        }
                    }
                }
                "idle_timeout_secs" | "reply_timeout_secs" => {
                    self.expect_positive_int(&full, value)
                }
                "preconnect" => self.expect_bool(&full, value),
                "quirks" => {
                    if let Some(quirks) = self.expect_table(&full, value) {
                        for (q, v) in quirks {
                            let qpath = join(&full, q);
                            match q.as_str() {
                                "max_tokens_field" => {
                                    self.expect_one_of(&qpath, v, MAX_TOKENS_FIELDS, "field")
                                }
                                name if QUIRK_KEYS.contains(&name) => self.expect_bool(&qpath, v),
                                other => self.unknown(&full, other, QUIRK_KEYS),
                            }
                        }
                    }
                }
                other => self.unknown(path, other, PROVIDER_KEYS),
            }
        }
    }

    /// `api_key_env` names a variable; a value that looks like a key itself is refused
    /// without being quoted back.
    fn key_variable_name(&mut self, key: &str, name: &str) {
        let valid_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let looks_secret = name.starts_with("sk-")
            || name.starts_with("sk_")
            || (name.len() >= 24
                && name.chars().any(|c| c.is_ascii_lowercase())
                && name.chars().any(|c| c.is_ascii_digit()));
        if looks_secret || !valid_name {
            let problem = if looks_secret {
                "holds what looks like an API key itself; it must name an environment variable"
            } else {
                "is not a valid environment variable name"
            };
            self.error(
                key,
                problem,
                "write the variable's name, e.g. `api_key_env = \"DEEPSEEK_API_KEY\"`, and put \
                 the key into the environment or a .env file (if you pasted a real key here, \
                 revoke it)",
            );
        }
    }

    fn model(&mut self, path: &str, table: &Table) {
        for (key, value) in table {
            let full = join(path, key);
            match key.as_str() {
                "provider" => {
                    self.expect_str(&full, value);
                }
                "context_window" | "max_output" | "default_max_tokens" => {
                    self.expect_positive_int(&full, value)
                }
                "efforts" => match value {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            self.expect_one_of(&format!("{full}[{i}]"), item, EFFORTS, "effort");
                        }
                    }
                    other => self.error(
                        &full,
                        format!("must be an array of efforts, found {}", type_name(other)),
                        "write e.g. `efforts = [\"off\", \"high\"]`",
                    ),
                },
                "default_effort" => self.expect_one_of(&full, value, EFFORTS, "effort"),
                "input" => match value {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            self.expect_one_of(&format!("{full}[{i}]"), item, INPUTS, "input kind");
                        }
                    }
                    other => self.error(
                        &full,
                        format!(
                            "must be an array of input kinds, found {}",
                            type_name(other)
                        ),
                        "write e.g. `input = [\"text\", \"image\"]`",
                    ),
                },
                "temperature" => self.expect_number(
                    &full,
                    value,
                    (0.0, 2.0),
                    "write the sampling temperature, e.g. `temperature = 0.2`",
                ),
                "stop" => match value {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let key = format!("{full}[{i}]");
                            if self.expect_str(&key, item).is_some_and(|s| s.is_empty()) {
                                self.error(
                                    &key,
                                    "an empty stop sequence would stop every reply at once",
                                    "remove it, or write the text the reply should stop at",
                                );
                            }
                        }
                    }
                    other => self.error(
                        &full,
                        format!("must be an array of strings, found {}", type_name(other)),
                        "write e.g. `stop = [\"</answer>\"]`",
                    ),
                },
                "price" => {
                    if let Some(price) = self.expect_table(&full, value) {
                        for (p, v) in price {
                            let ppath = join(&full, p);
                            if PRICE_KEYS.contains(&p.as_str()) {
                                self.expect_number(
                                    &ppath,
                                    v,
                                    (0.0, 1.0e6),
                                    "write USD per million tokens, e.g. `input = 0.14`",
                                );
                            } else {
                                self.unknown(&full, p, PRICE_KEYS);
                            }
                        }
                    }
                }
                other => self.unknown(path, other, MODEL_KEYS),
            }
        }
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Integer(n) => n.to_string(),
        Value::Float(x) => x.to_string(),
        other => type_name(other).to_string(),
    }
}

/// Checks one layer (a file, or the environment and flag values written as a table).
pub(crate) fn check_layer(table: &Table, source: &Source) -> Vec<ConfigError> {
    let mut checker = Checker {
        source,
        errors: Vec::new(),
    };
    checker.root(table);
    checker.errors
}
