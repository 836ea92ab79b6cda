//! Built-in extension: the dynamic facts a model needs, kept out of the system prompt so that the
//! prompt prefix stays byte-stable (docs/agent.md, "Context discipline").
//!
//! Two user-role messages, each appended before a step only when its text differs from the
//! last one this session logged:
//! - the runtime context (working directory, platform, date, permission preset);
//! - the project instructions: `$DSH_HOME/AGENTS.md`, then for each directory from the project
//!   root (nearest ancestor with `.git`, else the cwd) down to the cwd: `AGENTS.md`,
//!   `CLAUDE.md`, `AGENTS.local.md`, `CLAUDE.local.md`; de-duplicated by real path and by
//!   content; each file capped, and the whole capped.

use dsh_llm::LockExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dsh_llm::{Message, MessageSource};
use dsh_session::{Envelope, Event};

use crate::extension::{Extension, PreStepContext};

/// Plugin name of the runtime-context message.
pub const RUNTIME_CONTEXT_PLUGIN: &str = "runtime-context";
/// Plugin name of the project-instructions message.
pub const PROJECT_INSTRUCTIONS_PLUGIN: &str = "project-instructions";

/// Largest part of one instruction file that is sent.
const MAX_FILE_BYTES: usize = 32 * 1024;
/// Largest total of all instruction files that is sent.
const MAX_TOTAL_BYTES: usize = 64 * 1024;
/// Instruction file names, in the order they are read within one directory.
const INSTRUCTION_FILES: [&str; 4] = [
    "AGENTS.md",
    "CLAUDE.md",
    "AGENTS.local.md",
    "CLAUDE.local.md",
];

/// Supplies the facts; separate from the extension so tests can fix the date.
pub trait ContextSource: Send + Sync {
    /// Today's date as `YYYY-MM-DD`.
    fn today(&self) -> String;
    /// The permission preset in force, with a sentence on what it allows.
    fn permission(&self) -> String;
}

/// The system clock and a fixed permission description.
pub struct SystemContext {
    /// The permission description given to the model.
    pub permission: String,
}

impl ContextSource for SystemContext {
    fn today(&self) -> String {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        civil_date(secs / 86_400)
    }

    fn permission(&self) -> String {
        self.permission.clone()
    }
}

/// `YYYY-MM-DD` for a count of days since 1970-01-01 (proleptic Gregorian).
pub fn civil_date(days: u64) -> String {
    // Howard Hinnant's days-to-civil algorithm, for non-negative day counts.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The runtime-context and project-instructions extension.
pub struct ContextMessages {
    cwd: PathBuf,
    home: Option<PathBuf>,
    source: Box<dyn ContextSource>,
    /// The permission sentence after a `/permission` switch (replaces the source's).
    permission: Mutex<Option<String>>,
    last: Mutex<LastSent>,
}

#[derive(Default)]
struct LastSent {
    runtime: Option<String>,
    instructions: Option<String>,
}

impl ContextMessages {
    /// Context for a session in `cwd`; `home` is `$DSH_HOME` (for its `AGENTS.md`).
    pub fn new(
        cwd: impl Into<PathBuf>,
        home: Option<PathBuf>,
        source: Box<dyn ContextSource>,
    ) -> Self {
        ContextMessages {
            cwd: cwd.into(),
            home,
            source,
            permission: Mutex::new(None),
            last: Mutex::new(LastSent::default()),
        }
    }

    fn runtime_text(&self) -> String {
        let permission = self
            .permission
            .lock_or_recover()
            .clone()
            .unwrap_or_else(|| self.source.permission());
        format!(
            "Runtime context (this replaces any earlier runtime context):\n\
             - working directory: {}\n\
             - platform: {} {}\n\
             - date: {}\n\
             - permissions: {}",
            self.cwd.display(),
            std::env::consts::OS,
            std::env::consts::ARCH,
            self.source.today(),
            permission
        )
    }

    /// The instruction files in the order they apply, after de-duplication.
    pub fn instruction_files(&self) -> Vec<PathBuf> {
        let mut candidates = Vec::new();
        if let Some(home) = &self.home {
            candidates.push(home.join("AGENTS.md"));
        }
        let root = self
            .cwd
            .ancestors()
            .find(|dir| dir.join(".git").exists())
            .unwrap_or(&self.cwd)
            .to_path_buf();
        let mut chain: Vec<&Path> = self
            .cwd
            .ancestors()
            .take_while(|dir| dir.starts_with(&root))
            .collect();
        chain.reverse();
        for dir in chain {
            for name in INSTRUCTION_FILES {
                candidates.push(dir.join(name));
            }
        }
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for path in candidates {
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            if real.is_file() && !seen.contains(&real) {
                seen.push(real);
                out.push(path);
            }
        }
        out
    }

    fn instructions_text(&self) -> Option<String> {
        let mut parts: Vec<(PathBuf, String)> = Vec::new();
        let mut total = 0usize;
        for path in self.instruction_files() {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if text.trim().is_empty() || parts.iter().any(|(_, t)| *t == text) {
                continue;
            }
            let budget = MAX_FILE_BYTES.min(MAX_TOTAL_BYTES.saturating_sub(total));
            if budget == 0 {
                break;
            }
            if text.len() > budget {
                let mut cut = budget;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n[... truncated: the file is longer than dsh sends ...]");
            }
            total += text.len();
            parts.push((path, text));
        }
        if parts.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Project instructions (from AGENTS.md / CLAUDE.md files; they replace any earlier \
             project instructions). Follow them unless the user says otherwise.",
        );
        for (path, text) in parts {
            out.push_str(&format!("\n\n## {}\n\n{}", path.display(), text.trim_end()));
        }
        Some(out)
    }
}

fn context_message(plugin: &str, text: String) -> Message {
    crate::agent::plugin_message(plugin, "snapshot", text)
}

impl Extension for ContextMessages {
    fn name(&self) -> &str {
        "context-messages"
    }

    fn restore(&self, events: &[Envelope]) {
        let mut last = self.last.lock_or_recover();
        for envelope in events {
            if let Event::UserMessage(message) = &envelope.event {
                if let MessageSource::Plugin { plugin, .. } = &message.source {
                    if plugin == RUNTIME_CONTEXT_PLUGIN {
                        last.runtime = Some(message.text());
                    } else if plugin == PROJECT_INSTRUCTIONS_PLUGIN {
                        last.instructions = Some(message.text());
                    }
                }
            }
        }
    }

    fn pre_step(&self, ctx: &mut PreStepContext) -> Result<(), crate::ExtensionError> {
        if let Some(change) = &ctx.permission_change {
            *self.permission.lock_or_recover() = Some(change.summary.clone());
        }
        let runtime = self.runtime_text();
        let instructions = self.instructions_text();
        let mut last = self.last.lock_or_recover();
        if last.runtime.as_deref() != Some(runtime.as_str()) {
            ctx.inject
                .push(context_message(RUNTIME_CONTEXT_PLUGIN, runtime.clone()));
            last.runtime = Some(runtime);
        }
        if let Some(instructions) = instructions {
            if last.instructions.as_deref() != Some(instructions.as_str()) {
                ctx.inject.push(context_message(
                    PROJECT_INSTRUCTIONS_PLUGIN,
                    instructions.clone(),
                ));
                last.instructions = Some(instructions);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(19_723), "2024-01-01");
        assert_eq!(civil_date(20_787), "2026-11-30");
        assert_eq!(civil_date(11_016), "2000-02-29");
    }
}
