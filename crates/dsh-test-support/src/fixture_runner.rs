//! The loop of data-driven runners: for every case (a fixture folder or a data file), run it,
//! print one line with its outcome, and fail once at the end with every failure listed by case
//! name. The scenario runner of dsh-agent and the ACP fixture runner of dsh-cli share it, so a
//! broken case never hides the others and a bad settings file is a failure, not a silent default.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// How one case ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The case ran and every check held.
    Passed,
    /// The case ran and held; the note (e.g. why an intentional difference is expected) is
    /// printed with it.
    PassedWithNote(String),
    /// The case was not run, for the reason given (its settings said so).
    Skipped(String),
}

/// What a run of all cases found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// What the cases are called in messages (`scenario`, `acp fixture`).
    pub label: String,
    /// Names of the cases that passed.
    pub passed: Vec<String>,
    /// Names of the skipped cases with their reasons.
    pub skipped: Vec<(String, String)>,
    /// Names of the failed cases with what went wrong.
    pub failed: Vec<(String, String)>,
    /// The name filter the run used, if any.
    pub filter: Option<String>,
}

impl Report {
    /// `Ok` when no case failed and at least one ran or was skipped; otherwise one message that
    /// names every failed case (or says that the filter selected nothing).
    pub fn finish(&self) -> Result<(), String> {
        let label = &self.label;
        if !self.failed.is_empty() {
            let list: Vec<String> = self
                .failed
                .iter()
                .map(|(name, error)| format!("{label} {name}: {error}"))
                .collect();
            return Err(format!(
                "{} of {} {label}s failed:\n{}",
                self.failed.len(),
                self.failed.len() + self.passed.len() + self.skipped.len(),
                list.join("\n")
            ));
        }
        if self.passed.is_empty() && self.skipped.is_empty() {
            return Err(match &self.filter {
                Some(filter) => format!("no {label} matches the filter {filter:?}"),
                None => format!("no {label} to run"),
            });
        }
        Ok(())
    }

    /// The one-line summary printed at the end of a run.
    pub fn summary(&self) -> String {
        format!(
            "{}s: {} passed, {} failed, {} skipped",
            self.label,
            self.passed.len(),
            self.failed.len(),
            self.skipped.len()
        )
    }
}

/// Runs `run` on every case whose name (the last path component) contains `filter` (all cases
/// without one), in the given order. Each case gets a line on stdout (`<label> <name> ... ok`,
/// `... skipped: <reason>` or `... FAILED: <error>`); a case that panics counts as failed with
/// the panic's message, and the loop goes on. Call [`Report::finish`] on the result.
pub fn run_all<F>(
    label: &str,
    cases: impl IntoIterator<Item = PathBuf>,
    filter: Option<&str>,
    mut run: F,
) -> Report
where
    F: FnMut(&str, &Path) -> Result<Outcome, String>,
{
    let mut report = Report {
        label: label.to_string(),
        filter: filter.map(str::to_string),
        ..Report::default()
    };
    for case in cases {
        let name = case
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| case.display().to_string());
        if filter.is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| run(&name, &case)))
            .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&*panic))));
        match outcome {
            Ok(Outcome::Passed) => {
                println!("{label} {name} ... ok");
                report.passed.push(name);
            }
            Ok(Outcome::PassedWithNote(note)) => {
                println!("{label} {name} ... ok ({note})");
                report.passed.push(name);
            }
            Ok(Outcome::Skipped(reason)) => {
                println!("{label} {name} ... skipped: {reason}");
                report.skipped.push((name, reason));
            }
            Err(error) => {
                println!("{label} {name} ... FAILED: {error}");
                report.failed.push((name, error));
            }
        }
    }
    println!("{}", report.summary());
    report
}

/// The settings of case `name`: `<dir>/<name>.json` read as `S`, or `S::default()` when there is
/// no such file. A file that cannot be read or parsed is an error naming it.
pub fn load_settings<S: DeserializeOwned + Default>(dir: &Path, name: &str) -> Result<S, String> {
    let path = dir.join(format!("{name}.json"));
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|error| format!("bad {}: {error}", path.display()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(S::default()),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// The case filter of a runner built with `harness = false`: its first argument that is not a
/// flag (`cargo test --test scenarios -- <name part>`).
pub fn filter_from_args() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with('-'))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    struct Settings {
        skip: Option<String>,
    }

    fn cases(names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| PathBuf::from("/cases").join(n))
            .collect()
    }

    #[test]
    fn every_case_runs_and_every_failure_is_named_once_at_the_end() {
        let mut ran = Vec::new();
        let report = run_all("case", cases(&["a", "b", "c", "d"]), None, |name, _| {
            ran.push(name.to_string());
            match name {
                "a" => Err("first broke".into()),
                "b" => panic!("second panicked"),
                "c" => Ok(Outcome::Skipped("not yet".into())),
                _ => Ok(Outcome::PassedWithNote("differs by design".into())),
            }
        });
        assert_eq!(ran, ["a", "b", "c", "d"]);
        assert_eq!(report.passed, ["d"]);
        assert_eq!(report.skipped, [("c".to_string(), "not yet".to_string())]);
        let error = report.finish().unwrap_err();
        assert!(error.starts_with("2 of 4 cases failed"), "{error}");
        assert!(error.contains("case a: first broke"), "{error}");
        assert!(
            error.contains("case b: panicked: second panicked"),
            "{error}"
        );
        assert_eq!(report.summary(), "cases: 1 passed, 2 failed, 1 skipped");
    }

    #[test]
    fn a_filter_that_selects_nothing_fails() {
        let report = run_all("case", cases(&["alpha", "beta"]), Some("gamma"), |_, _| {
            Ok(Outcome::Passed)
        });
        assert_eq!(
            report.finish().unwrap_err(),
            "no case matches the filter \"gamma\""
        );
        let report = run_all("case", cases(&["alpha", "beta"]), Some("et"), |_, _| {
            Ok(Outcome::Passed)
        });
        assert_eq!(report.passed, ["beta"]);
        assert_eq!(report.finish(), Ok(()));
        assert!(
            run_all("case", Vec::new(), None, |_, _| Ok(Outcome::Passed))
                .finish()
                .is_err()
        );
    }

    #[test]
    fn settings_default_when_missing_and_fail_when_broken() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load_settings::<Settings>(dir.path(), "none"),
            Ok(Settings::default())
        );
        std::fs::write(dir.path().join("skip.json"), r#"{"skip": "why"}"#).unwrap();
        assert_eq!(
            load_settings::<Settings>(dir.path(), "skip").unwrap().skip,
            Some("why".to_string())
        );
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        let error = load_settings::<Settings>(dir.path(), "bad").unwrap_err();
        assert!(
            error.starts_with("bad ") && error.contains("bad.json"),
            "{error}"
        );
        std::fs::create_dir(dir.path().join("dir.json")).unwrap();
        let error = load_settings::<Settings>(dir.path(), "dir").unwrap_err();
        assert!(error.starts_with("cannot read "), "{error}");
    }
}
